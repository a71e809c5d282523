package gen

import "github.com/theseus-ccl/theseus/ir"

// ringPhase is one reduce-scatter and/or allgather around a ring of ranks,
// in one lane. Member q sends to member q+1 and receives from member q-1
// (indices mod M) on IR channel ch. parts[q] lists the items (logical ids)
// of the part that ends fully reduced at member q (reduce-scatter) or that
// member q contributes (allgather).
type ringPhase struct {
	members  []int
	lane, ch int
	parts    [][]int64
	// src is where rank r reads an item: its contribution in a
	// reduce-scatter, the owner's copy in an allgather.
	src func(r int, it int64) ir.Ref
	// dst is where rank r stores an item: the reduced part at its owner in a
	// reduce-scatter, every member's copy in an allgather.
	dst func(r int, it int64) ir.Ref

	cache [][][]int64
}

// partRuns splits each part into runs that are contiguous for src and dst
// on every member (so the counts of the whole chain agree).
func (ph *ringPhase) partRuns() [][][]int64 {
	if ph.cache != nil {
		return ph.cache
	}
	ph.cache = make([][][]int64, len(ph.parts))
	for q, items := range ph.parts {
		if len(items) <= 1 {
			ph.cache[q] = [][]int64{items}
			continue
		}
		fns := make([]func(int64) ir.Ref, 0, 2*len(ph.members))
		for _, r := range ph.members {
			r := r
			fns = append(fns, func(it int64) ir.Ref { return ph.src(r, it) }, func(it int64) ir.Ref { return ph.dst(r, it) })
		}
		ph.cache[q] = runs(items, fns...)
	}
	return ph.cache
}

func (g *gen) ringTB(ph *ringPhase, q int) int {
	M := len(ph.members)
	return g.tb(ph.members[q], ph.lane, ph.members[(q+1)%M], ph.members[(q-1+M)%M], ph.ch)
}

// ringRS emits a ring reduce-scatter (NCCL ring: M-1 steps): member q sends
// part q-1, then for s = 1..M-2 receives part q-1-s, adds its own
// contribution and passes it on (rrs), and finally receives part q, adds its
// contribution and stores it (rrc). With fuse the last step also sends the
// result on (rrcs), starting the allgather that ringAG(fused=true)
// continues. A one-member ring copies src to dst.
func (g *gen) ringRS(ph *ringPhase, fuse bool) {
	M := len(ph.members)
	if M == 1 {
		g.localCopy(ph, ph.members[0], -1, ph.parts[0])
		return
	}
	rr := ph.partRuns()
	for q, r := range ph.members {
		t := g.ringTB(ph, q)
		if fuse {
			g.reserve(r, t, 2*M*len(rr[0]))
		} else {
			g.reserve(r, t, M*len(rr[0]))
		}
		for s := 0; s < M; s++ {
			part := mod(q-1-s, M)
			for _, run := range rr[part] {
				c, a := int64(len(run)), run[0]
				var op ir.Op
				switch {
				case s == 0:
					op = g.opSend(c, ph.src(r, a))
				case s < M-1:
					op = g.opRRS(c, ph.src(r, a))
				case fuse:
					op = g.opRRCS(c, ph.src(r, a), ph.dst(r, a))
				default:
					op = g.opRRC(c, ph.src(r, a), ph.dst(r, a))
				}
				g.seq(r, ph.lane, t, op)
			}
		}
	}
}

// ringAG emits a ring allgather (M-1 steps): member q sends its part (from
// src) and stores it at dst if that differs, then for s = 1..M-2 receives
// part q-s, stores and forwards it (rcs), and finally receives part q+1
// (recv). With fused, the first send was the rrcs of ringRS.
func (g *gen) ringAG(ph *ringPhase, fused bool) {
	M := len(ph.members)
	if M == 1 {
		if !fused {
			g.localCopy(ph, ph.members[0], -1, ph.parts[0])
		}
		return
	}
	rr := ph.partRuns()
	for q, r := range ph.members {
		t := g.ringTB(ph, q)
		if !fused {
			g.reserve(r, t, M*len(rr[0])+1)
			for _, run := range rr[q] {
				g.seq(r, ph.lane, t, g.opSend(int64(len(run)), ph.src(r, run[0])))
			}
			g.localCopy(ph, r, t, ph.parts[q])
		}
		for s := 1; s < M; s++ {
			part := mod(q-s, M)
			for _, run := range rr[part] {
				c, a := int64(len(run)), run[0]
				if s < M-1 {
					g.seq(r, ph.lane, t, g.opRCS(c, ph.dst(r, a)))
				} else {
					g.seq(r, ph.lane, t, g.opRecv(c, ph.dst(r, a)))
				}
			}
		}
	}
}

// localCopy copies rank r's items from src to dst where they differ, in
// threadblock t, or (t < 0) in a threadblock without peers of the phase's
// lane.
func (g *gen) localCopy(ph *ringPhase, r, t int, items []int64) {
	src := func(it int64) ir.Ref { return ph.src(r, it) }
	dst := func(it int64) ir.Ref { return ph.dst(r, it) }
	for _, run := range runs(items, src, dst) {
		s, d := src(run[0]), dst(run[0])
		if s == d {
			continue
		}
		if t < 0 {
			t = g.tb(r, ph.lane, -1, -1, ph.ch)
		}
		g.seq(r, ph.lane, t, g.opCopy(int64(len(run)), s, d))
	}
}

// buildRing: ring allreduce (reduce-scatter + allgather, fused at the turn:
// 2(n-1) steps), allgather and reduce-scatter (n-1 steps), and broadcast /
// reduce as a chain along the ring from / to the root.
func buildRing(g *gen) error {
	n, K := g.n, g.K
	ring := g.order // Options.Order or the identity
	switch g.coll {
	case ir.Broadcast, ir.Reduce:
		// The chain follows the ring's direction: Order[i] -> Order[i+1].
		pos := 0
		for i, r := range ring {
			if r == g.root {
				pos = i
			}
		}
		path := make([]int, n)
		for i := range path {
			if g.coll == ir.Broadcast {
				path[i] = ring[(pos+i)%n]
			} else {
				path[i] = ring[mod(pos-i, n)]
			}
		}
		tr := pathTree(path)
		g.p.ChunksPerBlock = int64(K)
		for k := 0; k < K; k++ {
			g.treeRooted(tr, k, k, int64(k))
		}
		g.treeRelays(tr)
		return g.err
	}
	if n >= 3 {
		for r := range g.relay {
			g.relay[r] = true
		}
	}
	switch g.coll {
	case ir.AllReduce:
		C := int64(n * K)
		g.p.ChunksPerBlock = C
		for k := 0; k < K; k++ {
			parts := make([][]int64, n)
			for q := range parts {
				parts[q] = []int64{int64(k*n + q)}
			}
			ph := &ringPhase{members: ring, lane: k, ch: k, parts: parts,
				src: func(_ int, it int64) ir.Ref { return in(it) },
				dst: func(_ int, it int64) ir.Ref { return out(it) }}
			g.ringRS(ph, true)
			g.ringAG(ph, true)
		}
	case ir.AllGather:
		g.p.ChunksPerBlock = int64(K)
		for k := 0; k < K; k++ {
			k64 := int64(k)
			ph := &ringPhase{members: ring, lane: k, ch: k, parts: blockParts(ring),
				src: func(r int, b int64) ir.Ref {
					if b == int64(r) {
						return in(k64)
					}
					return out(b*int64(K) + k64)
				},
				dst: func(_ int, b int64) ir.Ref { return out(b*int64(K) + k64) }}
			g.ringAG(ph, false)
		}
	case ir.ReduceScatter:
		g.p.ChunksPerBlock = int64(K)
		for k := 0; k < K; k++ {
			k64 := int64(k)
			ph := &ringPhase{members: ring, lane: k, ch: k, parts: blockParts(ring),
				src: func(_ int, b int64) ir.Ref { return in(b*int64(K) + k64) },
				dst: func(_ int, _ int64) ir.Ref { return out(k64) }}
			g.ringRS(ph, false)
		}
	}
	return g.err
}

// blockParts gives member q the part made of block members[q] (the block
// index is the rank that owns it).
func blockParts(members []int) [][]int64 {
	parts := make([][]int64, len(members))
	for q, r := range members {
		parts[q] = []int64{int64(r)}
	}
	return parts
}
