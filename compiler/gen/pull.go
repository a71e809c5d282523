package gen

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
)

// pullTBs is the most threadblocks per lane buildPull spreads a rank's
// peers over.
const pullTBs = 16

// buildPull: one-step algorithms at the primitive level in which each rank
// reads what it needs from its peers' buffers (remote reads through memory
// channels), as the Simple one-shot allreduce does. Unlike direct, whose
// transfer-level threadblocks talk to one peer each (nranks-1 threadblocks
// per lane, so at most MaxThreadblocks+1 ranks), a threadblock here serves
// many peers: lane k spreads rank r's peers over T = min(nranks-1, pullTBs)
// threadblocks, peer p in threadblock (r+p) mod T (the same index on both
// ends). C = K: lane k moves chunk k of every block.
//
// Channels: lane k has one memory channel per peer; on rank r the channel
// to peer p is k(n-1) + pidx(r, p), Init 0. Each threadblock, over the
// channels of its peers:
//
//	signal; wait              every peer's buffers of this launch are ready
//	the reads
//	signal; wait              nobody reads my buffers any more
//	the copies out of scratch
//
//	alltoall: read peer p's i[block r] -> s[slot p]; then s[slot p] -> o[block p];
//	          own: i[block r] -> o[block r]
//	gather:   root: read peer p's i -> o[block p]; own i -> o[block root]
//	scatter:  rank p: read the root's i[block p] -> o; root: own i[block root] -> o
//
// Scratch slots are s[k(n-1) + pidx(r, p)] (alltoall only: in place, a
// rank's output is its input, which peers read until the second
// handshake). Non-roots of gather and scatter have one peer, the root.
// Nothing relays.
func buildPull(g *gen) error {
	if g.p.Protocol != ir.Simple {
		return fmt.Errorf("%w: pull reads peers' buffers directly: Simple only", ErrOptions)
	}
	n, K := g.n, g.K
	K64 := int64(K)
	np := n - 1
	g.p.ChunksPerBlock = K64
	R := g.root
	T := min(np, pullTBs)
	for r := 0; r < n; r++ {
		chans := make([]ir.Channel, K*np)
		for k := 0; k < K; k++ {
			for p := 0; p < n; p++ {
				if p != r {
					chans[k*np+pidx(r, p)] = ir.Channel{Peer: p, PeerChannel: k*np + pidx(p, r), Type: ir.MemoryChannel}
				}
			}
		}
		g.p.Ranks[r].Channels = chans
	}
	for r := 0; r < n; r++ {
		peers := g.oneStepPeers(r)
		for k := 0; k < K; k++ {
			k64 := int64(k)
			blk := func(b int) int64 { return int64(b)*K64 + k64 }
			ch := func(p int) int { return k*np + pidx(r, p) }
			slot := func(p int) int64 { return int64(k*np + pidx(r, p)) }
			last := -1
			for _, ps := range peerGroups(r, T, peers) {
				t := g.tb(r, k*T+(r+ps[0])%T, -1, -1, -1) // one threadblock per (lane, group)
				last = t
				cs := make([]int, len(ps))
				for i, p := range ps {
					cs[i] = ch(p)
				}
				g.emit(r, t, ir.Op{Code: ir.OpSignal, Chans: cs})
				g.emit(r, t, ir.Op{Code: ir.OpWait, Chans: append([]int(nil), cs...)})
				for _, p := range ps {
					switch {
					case g.coll == ir.AllToAll:
						g.emit(r, t, g.opCopy(1, ir.Ref{Buf: ir.Input, Off: blk(r), Chan: ch(p)}, scr(slot(p))))
					case g.coll == ir.Gather && r == R:
						g.emit(r, t, g.opCopy(1, ir.Ref{Buf: ir.Input, Off: k64, Chan: ch(p)}, out(blk(p))))
					case g.coll == ir.Scatter && r != R:
						g.emit(r, t, g.opCopy(1, ir.Ref{Buf: ir.Input, Off: blk(r), Chan: ch(p)}, out(k64)))
					}
				}
				g.emit(r, t, ir.Op{Code: ir.OpSignal, Chans: append([]int(nil), cs...)})
				g.emit(r, t, ir.Op{Code: ir.OpWait, Chans: append([]int(nil), cs...)})
				if g.coll == ir.AllToAll {
					for _, p := range ps {
						g.emit(r, t, g.opCopy(1, scr(slot(p)), out(blk(p))))
					}
				}
			}
			g.ownBlock(r, k, last)
		}
	}
	return g.err
}

// oneStepPeers are the peers of rank r in a pull or push program, in rank
// order: every other rank for alltoall and the root of gather and
// scatter, the root alone for the others.
func (g *gen) oneStepPeers(r int) []int {
	ps := make([]int, 0, g.n-1)
	for p := 0; p < g.n; p++ {
		switch {
		case p == r:
		case g.coll == ir.AllToAll, r == g.root, p == g.root:
			ps = append(ps, p)
		}
	}
	return ps
}

// peerGroups groups rank r's peers by threadblock, peer p in group
// (r+p) mod T, in order of first use (pull and push).
func peerGroups(r, T int, peers []int) [][]int {
	at := map[int]int{}
	var out [][]int
	for _, p := range peers {
		key := (r + p) % T
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], p)
	}
	return out
}

// ownBlock emits, in lane k of rank r of a pull or push program, the copy
// of the rank's own block (alltoall; the root of gather and scatter) in
// threadblock t, the lane's last (-1: none yet, one is made).
func (g *gen) ownBlock(r, k, t int) {
	K64, k64, R := int64(g.K), int64(k), g.root
	if t < 0 {
		t = g.tb(r, k*min(g.n-1, pullTBs), -1, -1, -1)
	}
	blk := func(b int) int64 { return int64(b)*K64 + k64 }
	switch {
	case g.coll == ir.AllToAll:
		g.emit(r, t, g.opCopy(1, in(blk(r)), out(blk(r))))
	case g.coll == ir.Gather && r == R:
		g.emit(r, t, g.opCopy(1, in(k64), out(blk(R))))
	case g.coll == ir.Scatter && r == R:
		g.emit(r, t, g.opCopy(1, in(blk(R)), out(k64)))
	}
}
