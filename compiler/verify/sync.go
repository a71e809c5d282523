package verify

import (
	"fmt"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// tbInfo is one threadblock in the verifier's flat numbering (global index
// g, in rank order). Its node for step s of iteration it is
// 2*op0 + it*nops + s, so the nodes of one threadblock are contiguous and
// program order is node order.
type tbInfo struct {
	ops     []ir.Op
	rank    int32
	id      int32
	nops    int32
	op0     int32 // global index of its step 0 (into ordOff)
	inConn  int32 // connection it receives on, -1
	outConn int32 // connection it sends on, -1
}

func (t *tbInfo) base() int32 { return 2 * t.op0 }

// endInfo is one channel end: Ranks[rank].Channels[ch].
type endInfo struct {
	rank, ch int32
	pair     int32 // global index of the other end
	user     int32 // the global threadblock that signals, waits or flushes on it; -1
	init     int64
	waits    []int32 // steps of user that wait on this end, in program order
	sigs     []int32 // steps of user that signal on this end
}

// connInfo is a transfer-level connection (from→to, ch) (ir.md §5.2).
type connInfo struct {
	from, to, ch     int32
	sender, receiver int32   // global threadblocks
	sends, recvs     []int32 // steps of sender / receiver that send / receive on it
	sendN, recvN     []int32 // the count of each send / receive
	chunks           int64   // chunks sent per iteration
}

// barInfo is barrier id on one rank: the threadblocks that execute it and
// the steps at which each does.
type barInfo struct {
	rank, id int32
	n        int32     // declared participants
	tbs      []int32   // global threadblocks, in order
	steps    [][]int32 // per participant, its steps that execute the barrier
}

// Per-op ordinals (c.ord[c.ordOff[o]:c.ordOff[o+1]] for global op o):
//
//	wait:         for each channel of Op.Chans, the global index of its
//	              end and the op's index among the end's waits
//	transfer op:  its index among the threadblock's receives, if it
//	              receives; then among its sends, if it sends
//	barrier:      the barInfo index, then the occurrence (the op's index
//	              among the threadblock's executions of that barrier)
//
// They turn "the k-th wait on this end" into arithmetic, for the
// happens-before edges of sim.go.

// sync builds the flat tables and runs the synchronisation checks: one
// threadblock per channel end and per connection end (TS0213), transfer
// pairing (TS0200), signal/wait balance (TS0201), barrier consistency
// (TS0112) and LL packet slots written once per launch (TS0209).
func (c *checker) sync() {
	p := c.p
	n := c.n
	c.rankTB = make([]int32, n+1)
	var G, ops int32
	for r := range p.Ranks {
		c.rankTB[r] = G
		G += int32(len(p.Ranks[r].TBs))
	}
	c.rankTB[n] = G
	c.tbs = make([]tbInfo, G)
	c.ends = make([]endInfo, c.endBase[n])
	c.endPeer = make([]int32, c.endBase[n])
	// The step lists are carved out of two shared arrays at their final
	// sizes, counted by structure.
	waits := make([]int32, sum(c.endWaitN))
	sigs := make([]int32, sum(c.endSigN))
	for r := range p.Ranks {
		for ch, e := range p.Ranks[r].Channels {
			ei := c.endBase[r] + int32(ch)
			nw, ns := c.endWaitN[ei], c.endSigN[ei]
			c.ends[ei] = endInfo{rank: int32(r), ch: int32(ch),
				pair: c.endBase[e.Peer] + int32(e.PeerChannel), user: -1, init: e.Init,
				waits: waits[:0:nw], sigs: sigs[:0:ns]}
			waits, sigs = waits[nw:], sigs[ns:]
			c.endPeer[ei] = int32(e.Peer)
		}
		for t := range p.Ranks[r].TBs {
			tb := &p.Ranks[r].TBs[t]
			c.tbs[c.rankTB[r]+int32(t)] = tbInfo{ops: tb.Ops, rank: int32(r), id: int32(t),
				nops: int32(len(tb.Ops)), op0: ops, inConn: -1, outConn: -1}
			ops += int32(len(tb.Ops))
		}
	}
	c.numNodes = 2 * ops
	if !c.pairConnections() {
		return
	}
	c.ordinals(ops)
	if c.rep.nerr > 0 {
		return
	}
	c.checkTransfers()
	c.checkBalance()
	c.checkBarriers()
	if c.hasPacket {
		c.packetWriters()
	}
}

// pairConnections finds, for every threadblock that sends or receives, the
// threadblock at the other end of its connection.
func (c *checker) pairConnections() bool {
	type key struct{ rank, peer, ch int32 }
	senders := map[key]int32{}
	receivers := map[key]int32{}
	for g := range c.tbs {
		tb := &c.tbs[g]
		src := &c.p.Ranks[tb.rank].TBs[tb.id]
		d := c.tbDirs[g] // bit 0: sends, bit 1: receives
		if d&1 != 0 {
			k := key{tb.rank, int32(src.SendPeer), int32(src.Chan)}
			if prev, dup := senders[k]; dup {
				c.reportAt(diag.SharedChannel, diag.Error, c.pos(int(tb.rank), int(tb.id), -1), int(tb.rank), int(tb.id), -1,
					"give each threadblock its own (peer, channel) to send on",
					"rank %d tbs %d and %d both send to rank %d on channel %d; a connection has one sending threadblock",
					tb.rank, c.tbs[prev].id, tb.id, src.SendPeer, src.Chan)
			} else {
				senders[k] = int32(g)
			}
		}
		if d&2 != 0 {
			k := key{tb.rank, int32(src.RecvPeer), int32(src.Chan)}
			if prev, dup := receivers[k]; dup {
				c.reportAt(diag.SharedChannel, diag.Error, c.pos(int(tb.rank), int(tb.id), -1), int(tb.rank), int(tb.id), -1,
					"give each threadblock its own (peer, channel) to receive on",
					"rank %d tbs %d and %d both receive from rank %d on channel %d; a connection has one receiving threadblock",
					tb.rank, c.tbs[prev].id, tb.id, src.RecvPeer, src.Chan)
			} else {
				receivers[k] = int32(g)
			}
		}
	}
	if c.rep.nerr > 0 {
		return false
	}
	firstOp := func(g int32, recv bool) int {
		for s := range c.tbs[g].ops {
			f := &opFlags[c.opk[c.tbs[g].op0+int32(s)]&kCode]
			if (recv && f.recvs) || (!recv && f.sends) {
				return s
			}
		}
		return -1
	}
	for g := range c.tbs {
		if c.tbDirs[g]&1 == 0 {
			continue
		}
		tb := &c.tbs[g]
		src := &c.p.Ranks[tb.rank].TBs[tb.id]
		to := int32(src.SendPeer)
		rg, ok := receivers[key{to, tb.rank, int32(src.Chan)}]
		if !ok {
			s := firstOp(int32(g), false)
			c.errf(diag.TransferMismatch, int(tb.rank), int(tb.id), s,
				"rank %d tb %d sends to rank %d on channel %d, but no threadblock of rank %d receives from rank %d on channel %d",
				tb.rank, tb.id, to, src.Chan, to, tb.rank, src.Chan)
			continue
		}
		ci := int32(len(c.conns))
		c.conns = append(c.conns, connInfo{from: tb.rank, to: to, ch: int32(src.Chan), sender: int32(g), receiver: rg,
			sends: make([]int32, 0, c.tbSendN[g]), recvs: make([]int32, 0, c.tbRecvN[rg]),
			sendN: make([]int32, 0, c.tbSendN[g]), recvN: make([]int32, 0, c.tbRecvN[rg])})
		tb.outConn = ci
		c.tbs[rg].inConn = ci
	}
	for g := range c.tbs {
		tb := &c.tbs[g]
		if c.tbDirs[g]&2 == 0 || tb.inConn >= 0 {
			continue
		}
		src := &c.p.Ranks[tb.rank].TBs[tb.id]
		s := firstOp(int32(g), true)
		c.errf(diag.TransferMismatch, int(tb.rank), int(tb.id), s,
			"rank %d tb %d receives from rank %d on channel %d, but no threadblock of rank %d sends to rank %d on channel %d",
			tb.rank, tb.id, src.RecvPeer, src.Chan, src.RecvPeer, tb.rank, src.Chan)
	}
	return c.rep.nerr == 0
}

// ordinals fills c.ordOff/c.ord, the per-end wait and signal lists, the
// connections' send and receive lists and the barriers, and checks that
// each channel end has one user (TS0213).
func (c *checker) ordinals(ops int32) {
	c.ordOff = make([]int32, ops+1)
	ord := make([]int32, 0, c.nord)
	type bkey struct{ rank, id int32 }
	barIdx := map[bkey]int32{}
	shared := map[int32]bool{}
	if c.wantCrefs {
		c.refAt = make([]int32, ops)
		c.crefs = make([]cref, 0, c.ncrefs)
	}
	for g := range c.tbs {
		tb := &c.tbs[g]
		var nrecv, nsend int32
		for s := range tb.ops {
			op := &tb.ops[s]
			c.ordOff[tb.op0+int32(s)] = int32(len(ord))
			if c.wantCrefs {
				c.refAt[tb.op0+int32(s)] = int32(len(c.crefs))
				if opFlags[op.Code].data {
					c.compactRefs(tb.rank, op)
				}
			}
			switch op.Code {
			case ir.OpWait, ir.OpSignal, ir.OpFlush:
				for _, ch := range op.Chans {
					ei := c.endBase[tb.rank] + int32(ch)
					e := &c.ends[ei]
					if e.user < 0 {
						e.user = int32(g)
					} else if e.user != int32(g) && !shared[ei] {
						shared[ei] = true
						c.reportAt(diag.SharedChannel, diag.Error, c.pos(int(tb.rank), int(tb.id), s), int(tb.rank), int(tb.id), s, "",
							"%s on rank %d channel %d, which tb %d already uses; each channel end (its semaphore) belongs to one threadblock",
							op.Code, tb.rank, ch, c.tbs[e.user].id)
					}
					switch op.Code {
					case ir.OpWait:
						ord = append(ord, ei, int32(len(e.waits)))
						e.waits = append(e.waits, int32(s))
					case ir.OpSignal:
						e.sigs = append(e.sigs, int32(s))
					}
				}
			case ir.OpBarrier:
				k := bkey{tb.rank, int32(op.Barrier)}
				bi, ok := barIdx[k]
				if !ok {
					bi = int32(len(c.bars))
					barIdx[k] = bi
					c.bars = append(c.bars, barInfo{rank: tb.rank, id: int32(op.Barrier), n: int32(op.BarrierTBs)})
				}
				b := &c.bars[bi]
				if len(b.tbs) == 0 || b.tbs[len(b.tbs)-1] != int32(g) {
					b.tbs = append(b.tbs, int32(g))
					b.steps = append(b.steps, nil)
				}
				last := len(b.tbs) - 1
				ord = append(ord, bi, int32(len(b.steps[last])))
				b.steps[last] = append(b.steps[last], int32(s))
				if int32(op.BarrierTBs) != b.n {
					c.errf(diag.BadBarrier, int(tb.rank), int(tb.id), s,
						"barrier %d among %d threadblocks, but an earlier use of barrier %d on rank %d says %d", op.Barrier, op.BarrierTBs, op.Barrier, tb.rank, b.n)
				}
			}
			info := &opFlags[op.Code]
			if info.recvs {
				ord = append(ord, nrecv)
				nrecv++
				cn := &c.conns[tb.inConn]
				cn.recvs = append(cn.recvs, int32(s))
				cn.recvN = append(cn.recvN, int32(op.Count))
			}
			if info.sends {
				ord = append(ord, nsend)
				nsend++
				cn := &c.conns[tb.outConn]
				cn.sends = append(cn.sends, int32(s))
				cn.sendN = append(cn.sendN, int32(op.Count))
			}
		}
	}
	c.ordOff[ops] = int32(len(ord))
	c.ord = ord
}

// iterWord names the modelled iteration: slices for Simple, launches for
// LL and for Simple programs that are never sliced (ir.Unsliced).
func (c *checker) iterWord() string {
	if c.p.Protocol == ir.LL || c.launchIters() {
		return "launch"
	}
	return "slice"
}

// launchIters reports whether the modelled iterations of a Simple program
// are launches: it is never sliced (SliceBytes ir.Unsliced, as an imported
// MSCCL++ plan, or an MSCCL program with scratch, whose iterations MSCCL
// gives scratch regions of their own). A rank runs its launches one after
// the other (each is a kernel on the rank's stream), so what two of its own
// threadblocks do in consecutive launches is ordered; only what ranks do to
// each other's buffers across launches can race (TS0206).
func (c *checker) launchIters() bool {
	return c.p.Protocol != ir.LL && c.p.SliceBytes >= ir.Unsliced
}

// checkTransfers pairs the sends and receives of every connection FIFO and
// checks their number and counts (TS0200).
func (c *checker) checkTransfers() {
	for ci := range c.conns {
		cn := &c.conns[ci]
		st, rt := &c.tbs[cn.sender], &c.tbs[cn.receiver]
		m := min(len(cn.sends), len(cn.recvs))
		for i := 0; i < m; i++ {
			cn.chunks += int64(cn.sendN[i])
			if cn.sendN[i] != cn.recvN[i] {
				ro := &rt.ops[cn.recvs[i]]
				c.errf(diag.TransferMismatch, int(rt.rank), int(rt.id), int(cn.recvs[i]),
					"transfer %d from rank %d on channel %d: %s of %d chunks, but the matching %s sends %d",
					i, cn.from, cn.ch, ro.Code, ro.Count, c.opName(int(st.rank), int(st.id), int(cn.sends[i])), cn.sendN[i])
			}
		}
		switch {
		case len(cn.sends) > m:
			s := int(cn.sends[m])
			c.errf(diag.TransferMismatch, int(st.rank), int(st.id), s,
				"rank %d sends %d transfers to rank %d on channel %d, but rank %d tb %d receives only %d; this is the first unmatched send",
				cn.from, len(cn.sends), cn.to, cn.ch, cn.to, rt.id, len(cn.recvs))
		case len(cn.recvs) > m:
			s := int(cn.recvs[m])
			c.errf(diag.TransferMismatch, int(rt.rank), int(rt.id), s,
				"rank %d receives %d transfers from rank %d on channel %d, but rank %d tb %d sends only %d; this is the first unmatched receive",
				cn.to, len(cn.recvs), cn.from, cn.ch, cn.from, st.id, len(cn.sends))
		}
	}
}

// checkBalance checks that per iteration every end is waited on exactly as
// many times as its other end signals it (TS0201). Init is the surplus the
// semaphore starts with; waits beyond signals would block for ever a few
// iterations later, signals beyond waits would leave the semaphore higher
// after every launch and satisfy later waits early.
func (c *checker) checkBalance() {
	for ei := range c.ends {
		e := &c.ends[ei]
		pe := &c.ends[e.pair]
		w, s := len(e.waits), len(pe.sigs)
		switch {
		case w > s:
			u := &c.tbs[e.user]
			step := int(e.waits[s])
			c.errf(diag.SignalWait, int(u.rank), int(u.id), step,
				"rank %d channel %d is waited on %d times per %s but rank %d channel %d signals it %d times; this wait has no signal (init %d is a head start, not extra signals)",
				e.rank, e.ch, w, c.iterWord(), pe.rank, pe.ch, s, e.init)
		case s > w:
			u := &c.tbs[pe.user]
			step := int(pe.sigs[w])
			c.errf(diag.SignalWait, int(u.rank), int(u.id), step,
				"rank %d channel %d signals rank %d channel %d %d times per %s, but that end is waited on %d times; the semaphore would grow every %s and satisfy later waits early",
				pe.rank, pe.ch, e.rank, e.ch, s, c.iterWord(), w, c.iterWord())
		}
	}
}

// checkBarriers checks that each barrier is executed by exactly its
// declared number of threadblocks, each the same number of times (TS0112).
func (c *checker) checkBarriers() {
	for bi := range c.bars {
		b := &c.bars[bi]
		t0 := &c.tbs[b.tbs[0]]
		if int32(len(b.tbs)) != b.n {
			ids := make([]int32, len(b.tbs))
			for i, g := range b.tbs {
				ids[i] = c.tbs[g].id
			}
			c.errf(diag.BadBarrier, int(t0.rank), int(t0.id), int(b.steps[0][0]),
				"barrier %d on rank %d is executed by %d threadblocks %v but declares %d participants", b.id, b.rank, len(b.tbs), ids, b.n)
			continue
		}
		for i := 1; i < len(b.tbs); i++ {
			if len(b.steps[i]) != len(b.steps[0]) {
				ti := &c.tbs[b.tbs[i]]
				c.errf(diag.BadBarrier, int(ti.rank), int(ti.id), int(b.steps[i][0]),
					"tb %d executes barrier %d %d times per %s but tb %d executes it %d times; every participant must meet every occurrence",
					ti.id, b.id, len(b.steps[i]), c.iterWord(), t0.id, len(b.steps[0]))
			}
		}
	}
}

// packetWriters records, for every scratch chunk, the op that writes it as
// an LL packet. An LL program runs each op once per launch (no slices), so
// a chunk with two packet writes is written twice per launch (TS0209).
func (c *checker) packetWriters() {
	c.scrBase = make([]int64, c.n+1)
	for r := 0; r < c.n; r++ {
		c.scrBase[r+1] = c.scrBase[r] + c.size[r][ir.Scratch]
	}
	total := c.scrBase[c.n]
	c.pktW = make([]int32, total)
	c.pktS = make([]int32, total)
	for i := range c.pktW {
		c.pktW[i] = -1
	}
	for g := range c.tbs {
		tb := &c.tbs[g]
		for s := range tb.ops {
			op := &tb.ops[s]
			reported := false
			for _, d := range op.Dsts {
				if !d.Packet {
					continue
				}
				q := c.refRank(tb.rank, d)
				for t := int64(0); t < op.Count; t++ {
					slot := c.scrBase[q] + d.Off + t
					if c.pktW[slot] < 0 {
						c.pktW[slot], c.pktS[slot] = int32(g), int32(s)
						continue
					}
					if !reported {
						reported = true
						w := &c.tbs[c.pktW[slot]]
						c.errf(diag.PacketReuse, int(tb.rank), int(tb.id), s,
							"writes LL packet slot s[%d] of rank %d, which %s also writes in the same launch; a reader could see either",
							d.Off+t, q, c.opName(int(w.rank), int(w.id), int(c.pktS[slot])))
					}
				}
			}
		}
	}
}

func sum(xs []int32) int {
	n := 0
	for _, x := range xs {
		n += int(x)
	}
	return n
}

// refRank is the rank whose buffer ref addresses, for an op of rank r.
func (c *checker) refRank(r int32, ref ir.Ref) int32 {
	if ref.Chan < 0 {
		return r
	}
	return int32(c.p.Ranks[r].Channels[ref.Chan].Peer)
}

// nodeName describes the node of (g, idx), with its iteration when not the
// first.
func (c *checker) nodeName(g, idx int32) string {
	tb := &c.tbs[g]
	it, s := idx/tb.nops, idx%tb.nops
	name := c.opName(int(tb.rank), int(tb.id), int(s))
	if it > 0 {
		name += fmt.Sprintf(" of the next %s", c.iterWord())
	}
	return name
}
