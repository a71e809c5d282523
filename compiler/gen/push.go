package gen

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
)

// buildPush: the one-step algorithms of pull written with puts instead of
// reads, so that they serve several nodes (port channels only put, and
// only into the peers' scratch: the executor does not reach a peer's user
// buffers across nodes). Rank r writes each of its blocks into a scratch
// slot of the rank that needs it, and every rank copies its slots to its
// output. Threadblocks are grouped as in pull: lane k spreads rank r's
// peers over T = min(nranks-1, pullTBs) threadblocks, peer p in
// threadblock (r+p) mod T. C = K: lane k moves chunk k of every block.
//
// Peers: alltoall every other rank; gather and scatter the root's peers
// are every other rank, a non-root's the root alone. On rank r, m(r) is
// the number of its peers and i(r, p) p's place among them (rank order).
//
// Channels: lane k has one channel per peer, on rank r the channel to p
// is k m(r) + i(r, p), Init 0 (port channels between nodes, and for gather
// and scatter on several nodes between every pair, as chanType says). A
// rank's scratch slot for the data of peer p is the index of its channel
// to p, so the sender puts through its channel c into the slot numbered
// by c's PeerChannel. Each threadblock, over the channels of its peers:
//
//	signal     (receivers) my slots for these peers are free
//	wait       (senders)   the peers' slots for me are free
//	the puts   i[block] -> the peer's slot for me
//	signal     (senders)   the data is there (a signal follows the puts of its channel)
//	wait       (receivers) every peer's data is in my slots
//	the copies out of my slots
//
//	alltoall: put i[block p] to peer p; copy slot p -> o[block p]; own i[block r] -> o[block r]
//	gather:   non-root: put i -> the root's slot; root: copy slot p -> o[block p]; own i -> o[block root]
//	scatter:  root: put i[block p] to p; p: copy its slot -> o; root: own i[block root] -> o
//
// In place is correct: a rank overwrites o[block p] (alltoall: its
// i[block p]) only after the put that read it, in the same threadblock,
// and no peer reads its buffers. Nothing relays.
func buildPush(g *gen) error {
	if g.p.Protocol != ir.Simple {
		return fmt.Errorf("%w: push is written for Simple only", ErrOptions)
	}
	n, K := g.n, g.K
	K64 := int64(K)
	np := n - 1
	g.p.ChunksPerBlock = K64
	R := g.root
	// place is i(r, p) and m(r): p's place among r's peers and their number.
	place := func(r, p int) (int, int) {
		if g.coll == ir.AllToAll || r == R {
			return pidx(r, p), np
		}
		return 0, 1
	}
	chanOf := func(k, r, p int) int {
		i, m := place(r, p)
		return k*m + i
	}
	T := min(np, pullTBs)
	for r := 0; r < n; r++ {
		ps := g.oneStepPeers(r)
		chans := make([]ir.Channel, K*len(ps))
		for k := 0; k < K; k++ {
			for _, p := range ps {
				chans[chanOf(k, r, p)] = ir.Channel{Peer: p, PeerChannel: chanOf(k, p, r), Type: chanType(g, r, p)}
			}
		}
		g.p.Ranks[r].Channels = chans
	}
	for r := 0; r < n; r++ {
		peers := g.oneStepPeers(r)
		// Whether r puts to its peers and whether they put to it.
		sends := g.coll == ir.AllToAll || g.coll == ir.Gather && r != R || g.coll == ir.Scatter && r == R
		recvs := g.coll == ir.AllToAll || g.coll == ir.Gather && r == R || g.coll == ir.Scatter && r != R
		for k := 0; k < K; k++ {
			k64 := int64(k)
			blk := func(b int) int64 { return int64(b)*K64 + k64 }
			last := -1
			for _, ps := range peerGroups(r, T, peers) {
				t := g.tb(r, k*T+(r+ps[0])%T, -1, -1, -1) // one threadblock per (lane, group)
				last = t
				cs := make([]int, len(ps))
				for i, p := range ps {
					cs[i] = chanOf(k, r, p)
				}
				chs := func() []int { return append([]int(nil), cs...) }
				if recvs {
					g.emit(r, t, ir.Op{Code: ir.OpSignal, Chans: chs()})
				}
				if sends {
					g.emit(r, t, ir.Op{Code: ir.OpWait, Chans: chs()})
					for _, p := range ps {
						src := in(k64) // gather
						if g.coll != ir.Gather {
							src = in(blk(p))
						}
						dst := ir.Ref{Buf: ir.Scratch, Off: int64(chanOf(k, p, r)), Chan: chanOf(k, r, p)}
						g.emit(r, t, g.opCopy(1, src, dst))
					}
					g.emit(r, t, ir.Op{Code: ir.OpSignal, Chans: chs()})
				}
				if recvs {
					g.emit(r, t, ir.Op{Code: ir.OpWait, Chans: chs()})
					for _, p := range ps {
						dst := out(k64) // scatter
						if g.coll != ir.Scatter {
							dst = out(blk(p))
						}
						g.emit(r, t, g.opCopy(1, scr(int64(chanOf(k, r, p))), dst))
					}
				}
			}
			g.ownBlock(r, k, last)
		}
	}
	return g.err
}
