package verify

import "github.com/theseus-ccl/theseus/ir"

// Happens-before queries: does node x happen before node y? They answer the
// race checks, which ask about the few accesses of each chunk (replay.go),
// while the simulation runs; y is always the node that has just run. There
// is no reachability index; two methods answer instead:
//
//   - the direct frontier of y's threadblock Y: the highest node of every
//     other threadblock with an edge into Y at or before y, recorded from
//     the edges the simulation computes anyway. It answers the common case,
//     a data op ordered through one signal/wait, send/receive, dependency or
//     barrier, in constant time;
//   - otherwise a backward search from y (hb).

// nodeShift sets the granularity of the node → threadblock index.
const nodeShift = 6

// buildNodeIndex fills c.nodeTB: for every 64 nodes, the threadblock that
// holds the first of them.
func (c *checker) buildNodeIndex() {
	nb := int(c.numNodes>>nodeShift) + 1
	c.nodeTB = make([]int32, nb)
	g := 0
	for b := range nb {
		x := int32(b << nodeShift)
		for g < len(c.tbs)-1 && c.tbs[g].base()+2*c.tbs[g].nops <= x {
			g++
		}
		c.nodeTB[b] = int32(g)
	}
}

// tbOfNode returns the threadblock holding node x.
func (c *checker) tbOfNode(x int32) int32 {
	g := c.nodeTB[x>>nodeShift]
	for c.tbs[g].base()+2*c.tbs[g].nops <= x {
		g++
	}
	return g
}

// frontier is the direct frontier of one threadblock.
type frontier struct {
	top int32 // nodes 0..top have been scanned; -1: none
	it  int32 // iteration and step of node top+1
	s   int32
	src []int32         // source threadblocks (while few)
	idx []int32         // the highest node of each with an edge into 0..top
	m   map[int32]int32 // source → highest node, once there are many
}

const frontierSlice = 16

func (f *frontier) add(tb, idx int32) {
	if f.m != nil {
		if v, ok := f.m[tb]; !ok || v < idx {
			f.m[tb] = idx
		}
		return
	}
	for i, s := range f.src {
		if s == tb {
			f.idx[i] = max(f.idx[i], idx)
			return
		}
	}
	if len(f.src) < frontierSlice {
		f.src = append(f.src, tb)
		f.idx = append(f.idx, idx)
		return
	}
	f.m = make(map[int32]int32, 2*frontierSlice)
	for i, s := range f.src {
		f.m[s] = f.idx[i]
	}
	f.m[tb] = idx
	f.src, f.idx = nil, nil
}

func (f *frontier) get(tb int32) int32 {
	if f.m != nil {
		if v, ok := f.m[tb]; ok {
			return v
		}
		return -1
	}
	for i, s := range f.src {
		if s == tb {
			return f.idx[i]
		}
	}
	return -1
}

// hbState is the state of the happens-before queries of one replay.
type hbState struct {
	front []frontier // per threadblock
	gen   []uint32   // per threadblock: the search that last visited it
	top   []int32    // per threadblock: the highest idx that search scanned
	cur   uint32
	stack []nref
	buf   []nref
}

func (c *checker) newHBState() *hbState {
	h := &hbState{front: make([]frontier, len(c.tbs)), gen: make([]uint32, len(c.tbs)), top: make([]int32, len(c.tbs))}
	h.reset()
	return h
}

// reset forgets every frontier (a simulation starts).
func (h *hbState) reset() {
	for g := range h.front {
		f := &h.front[g]
		f.top, f.it, f.s, f.m = -1, 0, 0, nil
		f.src, f.idx = f.src[:0], f.idx[:0]
	}
}

// record adds the cross edges of node (g, idx = it*nops+s), which has just
// run, to g's frontier; preds are its edges as the simulation computed them
// (without a barrier's other participants, which are added here).
func (h *hbState) record(c *checker, g, it, s, idx int32, preds []nref) {
	f := &h.front[g]
	for _, p := range preds {
		f.add(p.tb, p.idx)
	}
	if ir.Opcode(c.opk[c.tbs[g].op0+s]&kCode) == ir.OpBarrier {
		h.buf, _ = c.crossPreds(g, it, s, c.sc.fence, false, h.buf[:0])
		for _, p := range h.buf {
			f.add(p.tb, p.idx)
		}
	}
	f.top = idx
	if f.s = s + 1; f.s == c.tbs[g].nops {
		f.s, f.it = 0, it+1
	} else {
		f.it = it
	}
}

// direct reports whether an edge from (xg, xi) or a later node of xg
// enters yg at or before yi. false means "not known", not "unordered".
// The checkers record every node before querying it, so the frontier is
// current; the scan below only covers nodes not yet recorded.
func (c *checker) direct(h *hbState, xg, xi, yg, yi int32) bool {
	f := &h.front[yg]
	if yi < f.top {
		return false
	}
	t := &c.tbs[yg]
	for f.top < yi {
		if mayWait[c.opk[t.op0+f.s]] || f.s == 0 && f.it == 1 && c.sc.fence {
			h.buf, _ = c.crossPreds(yg, f.it, f.s, c.sc.fence, false, h.buf[:0])
			for _, p := range h.buf {
				f.add(p.tb, p.idx)
			}
		}
		f.top++
		if f.s++; f.s == t.nops {
			f.s, f.it = 0, f.it+1
		}
	}
	return f.get(xg) >= xi
}

// ordered reports whether node x happens before node (yg, yi) in c.sc.
func (c *checker) ordered(h *hbState, x, yg, yi int32) bool {
	t := &c.tbs[yg]
	if b := t.base(); x >= b && x < b+2*t.nops {
		return x-b < yi
	}
	xg := c.tbOfNode(x)
	xi := x - c.tbs[xg].base()
	return c.direct(h, xg, xi, yg, yi) || c.hb(h, xg, xi, yg, yi)
}

// hb reports whether node (xg, xi) happens before node (yg, yi): whether a
// path of happens-before edges leads from x to y.
//
// It searches backwards from y. Reaching (h, j) makes every node of h up to
// j an ancestor (program order), so the search keeps one watermark per
// threadblock and scans each threadblock downwards from its highest reached
// node, following the cross edges of each scanned node. Nodes that ran
// before x in the simulation order cannot be descendants of x and stop the
// scan; reaching x's threadblock at or after x answers yes. A search thus
// visits only nodes that ran between x and y and reach y.
func (c *checker) hb(h *hbState, xg, xi, yg, yi int32) bool {
	if xg == yg {
		return xi < yi
	}
	sc := c.sc
	px := sc.pos[c.tbs[xg].base()+xi]
	if px >= sc.pos[c.tbs[yg].base()+yi] {
		return false
	}
	return c.searchBack(h, yg, yi, px, func(p nref) (yes, skip bool) {
		if p.tb == xg {
			return p.idx >= xi, true // before x in its own threadblock: not after x
		}
		return false, false
	})
}

// searchBack walks backwards from node (yg, yi) over the happens-before
// edges, visiting only nodes that ran after run position px, and reports
// whether a predecessor p satisfies hit (yes). hit may also ask to skip p
// without following it. The walk keeps one watermark per threadblock and
// scans each threadblock downwards from its highest reached node, following
// the cross edges of each scanned node (see hb).
func (c *checker) searchBack(h *hbState, yg, yi, px int32, hit func(p nref) (yes, skip bool)) bool {
	sc := c.sc
	if h.cur++; h.cur == 0 {
		clear(h.gen)
		h.cur = 1
	}
	h.stack = append(h.stack[:0], nref{yg, yi})
	for len(h.stack) > 0 {
		r := h.stack[len(h.stack)-1]
		h.stack = h.stack[:len(h.stack)-1]
		lo := int32(-1)
		if h.gen[r.tb] == h.cur {
			if lo = h.top[r.tb]; r.idx <= lo {
				continue
			}
		}
		h.gen[r.tb], h.top[r.tb] = h.cur, r.idx
		t := &c.tbs[r.tb]
		base := t.base()
		it, s := r.idx/t.nops, r.idx%t.nops
		for k := r.idx; k > lo; k-- {
			if sc.pos[base+k] <= px {
				break
			}
			h.buf, _ = c.crossPreds(r.tb, it, s, sc.fence, false, h.buf[:0])
			for _, p := range h.buf {
				if yes, skip := hit(p); yes {
					return true
				} else if skip {
					continue
				}
				if h.gen[p.tb] == h.cur && p.idx <= h.top[p.tb] {
					continue
				}
				if sc.pos[c.tbs[p.tb].base()+p.idx] <= px {
					continue
				}
				h.stack = append(h.stack, p)
			}
			if s--; s < 0 {
				s, it = t.nops-1, it-1
			}
		}
	}
	return false
}
