package verify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Peer accesses to a rank's user buffers (TS0214, TS0215).
//
// A rank r's input and output belong to its caller outside r's launch: the
// caller writes the input before it enqueues the launch and reads the
// output (and reuses the input) once the launch completes, and the avg
// epilogue divides r's result after all of r's ops (ir.md §8). An access by
// another rank q to those buffers, through a remote ref of a copy or
// reduce, must therefore lie inside r's launch:
//
//   - completion (TS0214): it happens before some op of r of the same
//     iteration (r's completion follows every op of r);
//   - start (TS0215): some op of r of the same iteration happens before it
//     (a peer's kernel can run before r's kernel is even enqueued).
//
// Only edges within one iteration count: an edge from the previous
// iteration (a signal of the previous launch satisfying a wait, through
// the channel's Init) says nothing about the current launch. The edges
// within an iteration are the same in every iteration (the k-th wait of an
// iteration is matched within it iff k ≥ Init, by the (k − Init)-th signal
// of that iteration; transfers, dependencies, barriers and packets are
// matched within their iteration), so iteration 0 of the simulation proves
// every iteration. The answer depends on which ops reach which rank, not on
// which chunks they touch, so one arrangement proves every arrangement.
//
// Program order makes one query per (threadblock, owner) enough: a
// threadblock's first access to r's buffers for the start, its last for
// the completion. Transfer ops touch only local buffers, so only copy and
// reduce with remote user-buffer refs are checked; programs without any
// (the rings, legalised programs) pay nothing.
//
// The two checks also subsume races between launches on user buffers: if
// every peer access lies inside its owner's launch, the per-rank launch
// fence orders any two accesses of consecutive launches.

// ownAcc is one (threadblock, owner) pair: the step of the threadblock's
// first or last access to the owner's user buffers.
type ownAcc struct{ s, r int32 }

// ownerTables lists, per threadblock (global order), its first and last
// accesses to each peer's user buffers, sorted by step.
type ownerTables struct {
	off         []int32 // per threadblock, its entries in first and last; len tbs+1
	first, last []ownAcc
}

// buildOwners collects the peer accesses to user buffers from the compact
// refs. It runs only when the program has a remote user-buffer ref.
func (c *checker) buildOwners() *ownerTables {
	t := &ownerTables{off: make([]int32, len(c.tbs)+1)}
	// per owner: the threadblock (plus one) whose entry idx holds, and that
	// entry's index
	mark, idx := make([]int32, c.n), make([]int32, c.n)
	for g := range c.tbs {
		tb := &c.tbs[g]
		base := len(t.first)
		for s := range tb.nops {
			o := tb.op0 + s
			if !opFlags[c.opk[o]&kCode].data || c.refAt == nil {
				continue
			}
			h := &c.crefs[c.refAt[o]]
			refs := c.crefs[c.refAt[o]+1 : int(c.refAt[o])+1+int(h.q)+int(h.aux)]
			for i := range refs {
				q := refs[i].q
				if q == tb.rank || ir.BufKind(refs[i].buf) == ir.Scratch {
					continue
				}
				if mark[q] == int32(g)+1 {
					t.last[idx[q]].s = s
					continue
				}
				mark[q], idx[q] = int32(g)+1, int32(len(t.first))
				t.first = append(t.first, ownAcc{s, q})
				t.last = append(t.last, ownAcc{s, q})
			}
		}
		// first is in step order already; last is not
		slices.SortFunc(t.last[base:], func(a, b ownAcc) int { return int(a.s - b.s) })
		t.off[g+1] = int32(len(t.first))
	}
	return t
}

// ownerState is the replay state of the peer-access checks (one replayer
// runs them).
type ownerState struct {
	t          *ownerTables
	curF, curL []int32   // per threadblock: its next entry in t.first / t.last
	firstNode  []int32   // per rank: its first node the replay has seen, -1
	pending    [][]int32 // per rank: nodes of last accesses to it not yet known to precede one of its ops
	moreLate   int       // TS0214 findings over the cap, counted but not built
}

func (c *checker) newOwnerState(t *ownerTables) *ownerState {
	o := &ownerState{t: t, curF: make([]int32, len(c.tbs)), curL: make([]int32, len(c.tbs)),
		firstNode: make([]int32, c.n), pending: make([][]int32, c.n)}
	copy(o.curF, t.off[:len(c.tbs)])
	copy(o.curL, t.off[:len(c.tbs)])
	for r := range o.firstNode {
		o.firstNode[r] = -1
	}
	return o
}

// ownerNode runs the peer-access checks of node (g, 0, s), which has just
// run and been recorded in rp.hs.
func (rp *replayer) ownerNode(g, s int32, tb *tbInfo) {
	o, c := rp.own, rp.c
	node := tb.base() + s
	r := tb.rank
	if o.firstNode[r] < 0 {
		o.firstNode[r] = node
	}
	end := o.t.off[g+1]
	for ; o.curF[g] < end && o.t.first[o.curF[g]].s == s; o.curF[g]++ {
		if rp.counts[diag.PeerAccessEarly] >= c.rep.max {
			continue // no more could be shown: stop searching (as the race checks do)
		}
		if q := o.t.first[o.curF[g]].r; !c.fromRank(rp.hs, q, o.firstNode[q], g, s) {
			rp.emit(nil, diag.PeerAccessEarly, diag.Error, int(r), int(tb.id), int(s), "%s", c.earlyMsg(g, s, q))
		}
	}
	for ; o.curL[g] < end && o.t.last[o.curL[g]].s == s; o.curL[g]++ {
		q := o.t.last[o.curL[g]].r
		o.pending[q] = append(o.pending[q], node)
	}
	// The last op of iteration 0 of one of r's threadblocks: the pending
	// accesses to r that happen before it are done.
	if s == tb.nops-1 {
		ps := o.pending[r][:0]
		for _, x := range o.pending[r] {
			if !c.ordered(rp.hs, x, g, s) {
				ps = append(ps, x)
			}
		}
		o.pending[r] = ps
	}
}

// ownerFinish reports the accesses that no op of their owner follows.
func (rp *replayer) ownerFinish() {
	o, c := rp.own, rp.c
	for q, ps := range o.pending {
		for _, x := range ps {
			if rp.counts[diag.PeerAccessLate] >= c.rep.max {
				o.moreLate++
				continue
			}
			g := c.tbOfNode(x)
			tb := &c.tbs[g]
			s := x - tb.base()
			rp.emit(nil, diag.PeerAccessLate, diag.Error, int(tb.rank), int(tb.id), int(s), "%s", c.lateMsg(g, s, int32(q)))
		}
	}
}

// fromRank reports whether some node of rank r happens before node (yg,
// yi), which has just run; first is r's first node in the run order (-1:
// none has run). The direct frontier of yg answers the common case, a wait
// on r's signal; otherwise a backward search from y like hb's, which stops
// at nodes that ran before any node of r (they cannot descend from one).
func (c *checker) fromRank(h *hbState, r, first, yg, yi int32) bool {
	if first < 0 {
		return false
	}
	f := &h.front[yg]
	if f.m == nil {
		for _, src := range f.src {
			if c.tbs[src].rank == r {
				return true
			}
		}
	} else {
		for src := c.rankTB[r]; src < c.rankTB[r+1]; src++ {
			if _, ok := f.m[src]; ok {
				return true
			}
		}
	}
	return c.searchBack(h, yg, yi, c.sc.pos[first], func(q nref) (yes, skip bool) {
		return c.tbs[q.tb].rank == r, false
	})
}

// peerAccess describes what step s of threadblock g does to rank q's user
// buffers, e.g. "rank 0 tb 0 step 2 (reduce) reads rank 1's input
// (i[0:1] through channel 0)".
func (c *checker) peerAccess(g, s, q int32) string {
	tb := &c.tbs[g]
	op := &tb.ops[s]
	chs := c.p.Ranks[tb.rank].Channels
	var reads, writes bool
	var bufs [ir.NumBufKinds]bool
	var refs []string
	for i, list := range [2][]ir.Ref{op.Srcs, op.Dsts} {
		for _, ref := range list {
			if ref.Chan < 0 || ref.Buf == ir.Scratch || int32(chs[ref.Chan].Peer) != q {
				continue
			}
			if i == 0 {
				reads = true
			} else {
				writes = true
			}
			bufs[ref.Buf] = true
			if s := fmt.Sprintf("%s[%d:%d] through channel %d", ref.Buf, ref.Off, ref.Off+op.Count, ref.Chan); !slices.Contains(refs, s) {
				refs = append(refs, s)
			}
		}
	}
	verb := "reads"
	switch {
	case reads && writes:
		verb = "reads and writes"
	case writes:
		verb = "writes"
	}
	what := "input"
	switch {
	case bufs[ir.Input] && bufs[ir.Output]:
		what = "input and output"
	case bufs[ir.Output]:
		what = "output"
	}
	return fmt.Sprintf("%s %s rank %d's %s (%s)", c.opName(int(tb.rank), int(tb.id), int(s)), verb, q, what, strings.Join(refs, ", "))
}

// noOps says, when rank q runs no ops at all, why nothing can order an
// access to its buffers ("" otherwise).
func (c *checker) noOps(q int32) string {
	for g := c.rankTB[q]; g < c.rankTB[q+1]; g++ {
		if c.tbs[g].nops > 0 {
			return ""
		}
	}
	return fmt.Sprintf(" (rank %d runs no ops)", q)
}

func (c *checker) earlyMsg(g, s, q int32) string {
	return fmt.Sprintf("%s, but no op of rank %d in the same %s happens before it%s: it can run before rank %d's launch starts, while rank %d's caller is still writing its input or reading the previous results",
		c.peerAccess(g, s, q), q, c.iterWord(), c.noOps(q), q, q)
}

func (c *checker) lateMsg(g, s, q int32) string {
	return fmt.Sprintf("%s, but no op of rank %d in the same %s comes after it in happens-before order%s: rank %d's launch can complete (its caller then reads the output or reuses the input, and avg divides the result) before this access is done",
		c.peerAccess(g, s, q), q, c.iterWord(), c.noOps(q), q)
}
