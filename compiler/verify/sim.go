package verify

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/theseus-ccl/theseus/ir"
)

// The happens-before graph (ir.md §6) is never stored. Its nodes are the
// ops of two consecutive iterations — node (g, idx) is step idx mod nops of
// threadblock g in iteration idx / nops — and its edges are computed on
// demand from the flat tables of sync.go:
//
//   - program order: (g, idx-1) → (g, idx), across the iteration boundary
//     too (a threadblock replays its ops slice after slice);
//   - the k-th wait on an end ← the (k − Init)-th signal of the other end,
//     counting over both iterations;
//   - transfer i of a connection: its send → its receive (same iteration),
//     and, for credits, receive i of iteration 0 → send i of iteration 1
//     (the T slots of a Simple connection, ir.md §7; LL connections have
//     no credits, their launches use alternate scratch halves);
//   - a dependency (t, k) ← step k of threadblock t, same iteration;
//   - barrier occurrences: every arrival → every departure;
//   - an LL packet read of a slot ← the op that writes it as a packet, same
//     launch;
//   - between launches (LL): the last op of
//     every threadblock of a rank in iteration 0 → the first op of each of
//     its threadblocks in iteration 1 (stream order of the rank's kernels).
//
// simulate runs the ops in an order that respects every edge (Kahn's
// algorithm with a work list of threadblocks, each running until it
// blocks): the topological order in which the race and semantic checkers
// replay the accesses.

// The checkers of races and semantics run beside the simulation, one
// goroutine each: the simulation streams the nodes it runs, in batches,
// with the cross edges it computed for them; every checker sees every
// node, in the simulation's order, and keeps its own happens-before state.
// A node's ancestors have all run (and their positions are written) before
// its batch is sent.

const batchNodes = 4096

type bnode struct{ g, it, s int32 }

type batch struct {
	nodes []bnode
	off   []int32 // per node, the start of its edges in preds; len(nodes)+1
	preds []nref
	left  atomic.Int32 // checkers still reading it
}

type pipeline struct {
	cur  *batch
	outs []chan *batch
	free chan *batch
	wg   sync.WaitGroup
	n    int32
}

func (c *checker) startPipeline(cks []*replayer) *pipeline {
	p := &pipeline{free: make(chan *batch, 8), n: int32(len(cks))}
	for _, rp := range cks {
		ch := make(chan *batch, 4)
		p.outs = append(p.outs, ch)
		p.wg.Go(func() { rp.consume(ch, p.free) })
	}
	p.cur = p.newBatch()
	return p
}

func (p *pipeline) newBatch() *batch {
	select {
	case b := <-p.free:
		b.nodes, b.off, b.preds = b.nodes[:0], b.off[:1], b.preds[:0]
		return b
	default:
		return &batch{nodes: make([]bnode, 0, batchNodes), off: make([]int32, 1, batchNodes+1), preds: make([]nref, 0, batchNodes)}
	}
}

// emit queues node (g, it, s), which has just run, with its cross edges.
func (p *pipeline) emit(g, it, s int32, preds []nref) {
	b := p.cur
	b.nodes = append(b.nodes, bnode{g, it, s})
	b.preds = append(b.preds, preds...)
	b.off = append(b.off, int32(len(b.preds)))
	if len(b.nodes) == batchNodes {
		p.flush()
	}
}

func (p *pipeline) flush() {
	b := p.cur
	if len(b.nodes) == 0 {
		return
	}
	b.left.Store(p.n)
	for _, ch := range p.outs {
		ch <- b
	}
	p.cur = p.newBatch()
}

// close sends the last batch and waits for the checkers.
func (p *pipeline) close() {
	p.flush()
	for _, ch := range p.outs {
		close(ch)
	}
	p.wg.Wait()
}

// consume checks the nodes of every batch in order.
func (rp *replayer) consume(in <-chan *batch, free chan<- *batch) {
	c := rp.c
	for b := range in {
		for i, nd := range b.nodes {
			tb := &c.tbs[nd.g]
			if rp.hs != nil {
				rp.hs.record(c, nd.g, nd.it, nd.s, nd.it*tb.nops+nd.s, b.preds[b.off[i]:b.off[i+1]])
			}
			rp.node(nd.g, nd.it, nd.s, tb)
		}
		if b.left.Add(-1) == 0 {
			select {
			case free <- b:
			default:
			}
		}
	}
}

// nref names node (tb, idx).
type nref struct{ tb, idx int32 }

var noRef = nref{-1, -1}

// crossPreds appends to buf the nodes other than its program-order
// predecessor that must run before node (g, it*nops+s). With sim, the other participants of a barrier are
// left out (simulate handles arrivals itself). It returns false when a
// needed node does not exist in the two modelled iterations (a wait that no
// signal can ever satisfy), with c.why saying what is missing.
func (c *checker) crossPreds(g, it, s int32, fence, sim bool, buf []nref) ([]nref, bool) {
	tb := &c.tbs[g]
	o0 := tb.op0 + s
	k := c.opk[o0]
	if fence && it == 1 && s == 0 {
		for h := c.rankTB[tb.rank]; h < c.rankTB[tb.rank+1]; h++ {
			if h != g && c.tbs[h].nops > 0 {
				buf = append(buf, nref{h, c.tbs[h].nops - 1})
			}
		}
	}
	if k&kDeps != 0 {
		for _, d := range tb.ops[s].Deps {
			h := c.rankTB[tb.rank] + int32(d.TB)
			buf = append(buf, nref{h, it*c.tbs[h].nops + int32(d.Step)})
		}
	}
	switch ir.Opcode(k & kCode) {
	case ir.OpWait:
		o := c.ord[c.ordOff[o0]:c.ordOff[o0+1]]
		for i := 0; i < len(o); i += 2 {
			e := &c.ends[o[i]]
			need := int64(it)*int64(len(e.waits)) + int64(o[i+1]) + 1 - e.init
			if need < 1 {
				continue
			}
			pe := &c.ends[e.pair]
			ns := int64(len(pe.sigs))
			j, sit := need-1, int32(0) // the signal, and its iteration
			if j >= ns {
				j, sit = j-ns, 1
			}
			if j >= ns {
				if sim {
					c.why = fmt.Sprintf("its wait on channel %d needs signal %d of rank %d channel %d, which signals %d times per %s",
						e.ch, need, pe.rank, pe.ch, ns, c.iterWord())
				}
				return buf, false
			}
			buf = append(buf, nref{pe.user, sit*c.tbs[pe.user].nops + pe.sigs[j]})
		}
	case ir.OpBarrier:
		if !sim {
			o := c.ord[c.ordOff[o0]:]
			b := &c.bars[o[0]]
			for i, h := range b.tbs {
				if h != g {
					buf = append(buf, nref{h, it*c.tbs[h].nops + b.steps[i][o[1]]})
				}
			}
		}
	case ir.OpCopy, ir.OpReduce:
		if k&kPacket != 0 {
			return c.packetPreds(tb, it, &tb.ops[s], sim, buf)
		}
	case ir.OpSignal, ir.OpFlush, ir.OpNop:
	default:
		info := &opFlags[k&kCode]
		o := c.ord[c.ordOff[o0]:]
		k := 0
		if info.recvs {
			cn := &c.conns[tb.inConn]
			buf = append(buf, nref{cn.sender, it*c.tbs[cn.sender].nops + cn.sends[o[k]]})
			k++
		}
		if info.sends && it > 0 && !c.ll {
			cn := &c.conns[tb.outConn]
			buf = append(buf, nref{cn.receiver, (it-1)*c.tbs[cn.receiver].nops + cn.recvs[o[k]]})
		}
	}
	return buf, true
}

// mayWait[k] says whether an op of kind k (see opKind) can have cross
// edges into it, other than the launch fence.
var mayWait = func() (m [256]bool) {
	for k := range m {
		switch ir.Opcode(k & kCode) {
		case ir.OpSignal, ir.OpFlush, ir.OpNop:
			m[k] = k&kDeps != 0
		case ir.OpCopy, ir.OpReduce:
			m[k] = k&(kDeps|kPacket) != 0
		default:
			m[k] = true
		}
	}
	return
}()

// packetPreds appends the writers of the LL packet slots op reads.
func (c *checker) packetPreds(tb *tbInfo, it int32, op *ir.Op, sim bool, buf []nref) ([]nref, bool) {
	for _, ref := range op.Srcs {
		if !ref.Packet {
			continue
		}
		q := c.refRank(tb.rank, ref)
		last := noRef
		for t := int64(0); t < op.Count; t++ {
			slot := c.scrBase[q] + ref.Off + t
			w := c.pktW[slot]
			if w < 0 {
				if !sim {
					return buf, false
				}
				c.why = fmt.Sprintf("it reads LL packet slot s[%d] of rank %d, which no op writes as a packet", ref.Off+t, q)
				return buf, false
			}
			p := nref{w, it*c.tbs[w].nops + c.pktS[slot]}
			if p != last {
				buf = append(buf, p)
				last = p
			}
		}
	}
	return buf, true
}

// schedule is the result of one simulation.
type schedule struct {
	fence bool
	n     int32   // nodes run
	pos   []int32 // per node that ran, its position in the run order
	pc    []int32 // per threadblock, the nodes it ran
	// For threadblocks that did not finish: the node they wait for (noRef:
	// one that never exists, explained in why), and whether that is a
	// barrier arrival rather than a completion.
	blockedOn []nref
	atBarrier []bool
	why       []string
}

func (s *schedule) complete() bool { return int(s.n) == len(s.pos) }

// simulate runs the nodes of the happens-before graph over two iterations
// (with the per-rank launch fence when fence is set) in a topological
// order, handing each node to the checkers cks as it runs. It takes time
// linear in nodes plus edges: each threadblock is queued once per wake-up,
// and a wake-up happens only when the node it waits for runs.
func (c *checker) simulate(fence bool, cks []*replayer) *schedule {
	G := int32(len(c.tbs))
	sc := &schedule{fence: fence, pos: make([]int32, c.numNodes),
		pc: make([]int32, G), blockedOn: make([]nref, G), atBarrier: make([]bool, G), why: make([]string, G)}
	c.sc = sc
	var pipe *pipeline
	if len(cks) > 0 {
		pipe = c.startPipeline(cks)
	}
	const (
		queued = iota
		blocked
		finished
	)
	state := make([]uint8, G)
	waiters := make([][]int32, G)
	minWait := make([]int32, G)
	arrived := make([]bool, G)
	queue := make([]int32, G+1) // ring: each threadblock is queued at most once
	head, tail := int32(0), G
	for g := range G {
		queue[g] = g
		minWait[g] = math.MaxInt32
	}
	wake := func(h int32) {
		if state[h] == blocked {
			state[h] = queued
			queue[tail] = h
			if tail++; tail == G+1 {
				tail = 0
			}
		}
	}
	var buf []nref
	for head != tail {
		g := queue[head]
		if head++; head == G+1 {
			head = 0
		}
		tb := &c.tbs[g]
		end := 2 * tb.nops
		pc := sc.pc[g]
		base := tb.base()
		state[g] = blocked
		var it, s int32
		if tb.nops > 0 {
			it, s = pc/tb.nops, pc%tb.nops
		}
	run:
		for pc < end {
			var ok bool
			buf, ok = c.crossPreds(g, it, s, fence, true, buf[:0])
			if !ok {
				sc.blockedOn[g], sc.atBarrier[g], sc.why[g] = noRef, false, c.why
				break
			}
			for _, p := range buf {
				if sc.pc[p.tb] <= p.idx {
					sc.blockedOn[g], sc.atBarrier[g] = p, false
					waiters[p.tb] = append(waiters[p.tb], g)
					minWait[p.tb] = min(minWait[p.tb], p.idx)
					break run
				}
			}
			if ir.Opcode(c.opk[tb.op0+s]&kCode) == ir.OpBarrier {
				o0 := tb.op0 + s
				bi, occ := c.ord[c.ordOff[o0]], c.ord[c.ordOff[o0]+1]
				b := &c.bars[bi]
				if !arrived[g] {
					arrived[g] = true
					for _, h := range b.tbs {
						if h != g && sc.atBarrier[h] {
							wake(h)
						}
					}
				}
				for i, h := range b.tbs {
					if h == g {
						continue
					}
					z := it*c.tbs[h].nops + b.steps[i][occ]
					if sc.pc[h] < z || (sc.pc[h] == z && !arrived[h]) {
						sc.blockedOn[g], sc.atBarrier[g] = nref{h, z}, true
						break run
					}
				}
				arrived[g] = false
			}
			sc.pos[base+pc] = sc.n
			sc.n++
			if pipe != nil {
				pipe.emit(g, it, s, buf)
			}
			pc++
			sc.pc[g] = pc
			if s++; s == tb.nops {
				s, it = 0, it+1
			}
			if pc-1 >= minWait[g] {
				ws := waiters[g][:0]
				next := int32(math.MaxInt32)
				for _, h := range waiters[g] {
					if sc.blockedOn[h].idx <= pc-1 {
						wake(h)
					} else {
						ws = append(ws, h)
						next = min(next, sc.blockedOn[h].idx)
					}
				}
				waiters[g], minWait[g] = ws, next
			}
		}
		sc.pc[g] = pc
		if pc == end {
			state[g] = finished
		}
	}
	if pipe != nil {
		pipe.close()
	}
	return sc
}
