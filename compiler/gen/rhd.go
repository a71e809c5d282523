package gen

import "github.com/theseus-ccl/theseus/ir"

// rhdLayout is the participant structure of recursive halving/doubling on
// any n (MPICH's handling of non-powers of two): p2 is the largest power of
// two <= n and rem = n - p2. Among ranks 0..2rem-1 each even rank is an
// "extra" that folds into the odd rank above it before the exchanges and
// receives the result from it after them; the p2 participants are the odd
// ranks below 2rem and every rank from 2rem on, numbered v = 0..p2-1 in rank
// order. Participant v owns blocks lo(v)..lo(v+1)-1 (its own and its
// extra's), so any aligned group of participants owns a contiguous block
// range.
type rhdLayout struct{ n, p2, rem int }

func newRHD(n int) rhdLayout {
	p2 := 1
	for p2*2 <= n {
		p2 *= 2
	}
	return rhdLayout{n: n, p2: p2, rem: n - p2}
}

// real is the rank of participant v.
func (l rhdLayout) real(v int) int {
	if v < l.rem {
		return 2*v + 1
	}
	return v + l.rem
}

// lo is the first block owned by participant v (lo(p2) = n).
func (l rhdLayout) lo(v int) int {
	switch {
	case v >= l.p2:
		return l.n
	case v < l.rem:
		return 2 * v
	}
	return v + l.rem
}

// blocks lists blocks lo(a)..lo(b)-1 (those of participants a..b-1).
func (l rhdLayout) blocks(a, b int) []int64 {
	return span(int64(l.lo(a)), int64(l.lo(b)))
}

func span(a, b int64) []int64 {
	s := make([]int64, 0, b-a)
	for x := a; x < b; x++ {
		s = append(s, x)
	}
	return s
}

// rhdState tracks where each item currently lives on each rank of one lane.
type rhdState struct {
	g     *gen
	lane  int
	loc   [][]ir.Ref // [rank][item]
	recvs []pending
}

// xfer moves items from rank a to rank b in lane st.lane on threadblocks
// (send b, recv b) of a and (send a, recv a) of b. mode is ir.OpRecv (store
// at dst) or ir.OpRecvReduceCopy (dst = b's current value ⊕ received). Runs
// are split where a's source, b's current value or dst is not contiguous, so
// both sides emit the same counts. a's sends are emitted now; b's receives
// are queued until flush.
func (st *rhdState) xfer(a, b int, items []int64, mode ir.Opcode, dst func(int64) ir.Ref) {
	g := st.g
	fa := func(it int64) ir.Ref { return st.loc[a][it] }
	fb := func(it int64) ir.Ref { return st.loc[b][it] }
	ta := g.tb(a, st.lane, b, b, st.lane)
	tb := g.tb(b, st.lane, a, a, st.lane)
	rr := runs(items, fa, fb, dst)
	for _, run := range rr {
		g.seq(a, st.lane, ta, g.opSend(int64(len(run)), fa(run[0])))
	}
	st.recvs = append(st.recvs, pending{b, tb, rr, mode, dst})
}

type pending struct {
	r, t int
	rr   [][]int64
	mode ir.Opcode
	dst  func(int64) ir.Ref
}

// flush emits the receive halves queued by xfer (after both sides' sends,
// so each rank sends before it receives within a step) and updates loc.
func (st *rhdState) flush() {
	g := st.g
	for _, p := range st.recvs {
		for _, run := range p.rr {
			c, a := int64(len(run)), run[0]
			if p.mode == ir.OpRecv {
				g.seq(p.r, st.lane, p.t, g.opRecv(c, p.dst(a)))
			} else {
				g.seq(p.r, st.lane, p.t, g.opRRC(c, st.loc[p.r][a], p.dst(a)))
			}
			for _, it := range run {
				st.loc[p.r][it] = p.dst(it)
			}
		}
	}
	st.recvs = st.recvs[:0]
}

// buildRHD: recursive halving reduce-scatter and recursive doubling
// allgather, for any n.
//
// allreduce (Rabenseifner; C = p2*K, lane k's part q is chunk k*p2+q):
// fold extras (extra sends everything, partner rrc into o); halving for
// d = p2/2..1: participants v and v^d split their current range, each sends
// the partner's half and reduces its own into o; doubling for d = 1..p2/2:
// exchange the owned ranges; partners send the whole result to extras.
//
// reducescatter (C = K, items are blocks): as the halving above over block
// ranges; partial sums go to scratch s[k*n + b]; the last step stores the
// rank's own block in o; partners pass the extra's block to it.
//
// allgather (C = K): every rank first copies its input to its output block;
// extras send theirs to the partner; doubling exchanges owned block ranges;
// partners send all blocks but the extra's own to it.
func buildRHD(g *gen) error {
	n, K := g.n, g.K
	l := newRHD(n)
	for v := 0; v < l.p2; v++ {
		if l.p2 >= 4 || v < l.rem {
			g.relay[l.real(v)] = true
		}
	}
	var items int
	switch g.coll {
	case ir.AllReduce:
		g.p.ChunksPerBlock = int64(l.p2 * K)
		items = l.p2
	default:
		g.p.ChunksPerBlock = int64(K)
		items = n
	}
	for k := 0; k < K; k++ {
		k64, K64 := int64(k), int64(K)
		st := &rhdState{g: g, lane: k, loc: make([][]ir.Ref, n)}
		var user func(it int64) int64 // item -> chunk of a user buffer
		if g.coll == ir.AllReduce {
			user = func(it int64) int64 { return k64*int64(l.p2) + it }
		} else {
			user = func(it int64) int64 { return it*K64 + k64 }
		}
		for r := 0; r < n; r++ {
			st.loc[r] = make([]ir.Ref, items)
			for it := range st.loc[r] {
				switch g.coll {
				case ir.AllGather:
					st.loc[r][it] = out(user(int64(it)))
				default:
					st.loc[r][it] = in(user(int64(it)))
				}
			}
		}
		outAt := func(it int64) ir.Ref { return out(user(it)) }
		all := span(0, int64(items))
		if g.coll == ir.AllGather {
			for r := 0; r < n; r++ {
				g.seq(r, k, g.tb(r, k, -1, -1, k), g.opCopy(1, in(k64), out(user(int64(r)))))
			}
		}
		// Fold the extras into their partners.
		for e := 0; e < 2*l.rem; e += 2 {
			switch g.coll {
			case ir.AllReduce:
				st.xfer(e, e+1, all, ir.OpRecvReduceCopy, outAt)
			case ir.ReduceScatter:
				st.xfer(e, e+1, all, ir.OpRecvReduceCopy, func(b int64) ir.Ref { return scr(k64*int64(n) + b) })
			case ir.AllGather:
				st.xfer(e, e+1, []int64{int64(e)}, ir.OpRecv, outAt)
			}
		}
		st.flush()
		// Recursive halving (allreduce, reducescatter).
		if g.coll != ir.AllGather {
			for d := l.p2 / 2; d >= 1; d /= 2 {
				for v := 0; v < l.p2; v++ {
					if v&d != 0 {
						continue
					}
					w := v | d
					a := v &^ (2*d - 1)
					rv, rw := l.real(v), l.real(w)
					var lower, upper []int64
					var dstV, dstW func(int64) ir.Ref
					if g.coll == ir.AllReduce {
						lower, upper = span(int64(a), int64(a+d)), span(int64(a+d), int64(a+2*d))
						dstV, dstW = outAt, outAt
					} else {
						lower, upper = l.blocks(a, a+d), l.blocks(a+d, a+2*d)
						last := d == 1
						mk := func(self int) func(int64) ir.Ref {
							return func(b int64) ir.Ref {
								if last && b == int64(self) {
									return out(k64)
								}
								return scr(k64*int64(n) + b)
							}
						}
						dstV, dstW = mk(rv), mk(rw)
					}
					st.xfer(rv, rw, upper, ir.OpRecvReduceCopy, dstW)
					st.xfer(rw, rv, lower, ir.OpRecvReduceCopy, dstV)
				}
				st.flush()
			}
		}
		// Recursive doubling (allreduce, allgather).
		if g.coll != ir.ReduceScatter {
			for d := 1; d < l.p2; d *= 2 {
				for v := 0; v < l.p2; v++ {
					if v&d != 0 {
						continue
					}
					w := v | d
					av, aw := v&^(d-1), w&^(d-1)
					var mine, theirs []int64
					if g.coll == ir.AllReduce {
						mine, theirs = span(int64(av), int64(av+d)), span(int64(aw), int64(aw+d))
					} else {
						mine, theirs = l.blocks(av, av+d), l.blocks(aw, aw+d)
					}
					rv, rw := l.real(v), l.real(w)
					st.xfer(rv, rw, mine, ir.OpRecv, outAt)
					st.xfer(rw, rv, theirs, ir.OpRecv, outAt)
				}
				st.flush()
			}
		}
		// Return results to the extras.
		for e := 0; e < 2*l.rem; e += 2 {
			switch g.coll {
			case ir.AllReduce:
				st.xfer(e+1, e, all, ir.OpRecv, outAt)
			case ir.ReduceScatter:
				st.xfer(e+1, e, []int64{int64(e)}, ir.OpRecv, func(int64) ir.Ref { return out(k64) })
			case ir.AllGather:
				var rest []int64
				for b := int64(0); b < int64(n); b++ {
					if b != int64(e) {
						rest = append(rest, b)
					}
				}
				st.xfer(e+1, e, rest, ir.OpRecv, outAt)
			}
		}
		st.flush()
	}
	return g.err
}
