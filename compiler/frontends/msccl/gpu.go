package msccl

import (
	"math"
	"sort"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importer"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// gpus reads every <gpu> of the algo into ranks (index = id). It returns
// nil after an error that leaves no usable rank list.
func (p *parser) gpus(algo *xelem, h *algoHeader) []ir.Rank {
	elems := algo.children("gpu")
	byID := map[int64]*xelem{}
	ok := true
	for _, g := range elems {
		p.checkAttrs(g, gpuAttrs, noSubj)
		id, idOK := p.integer(g, "id", 0, MaxIndex, noSubj)
		if !idOK {
			ok = false
			continue
		}
		if id >= int64(h.ngpus) {
			a, _ := g.attr("id")
			p.errorAt(diag.DuplicateID, p.li.Pos(a.off), int(id), -1, -1, "number gpus 0 .. ngpus-1",
				"gpu id %d is not below ngpus=%d", id, h.ngpus)
			ok = false
			continue
		}
		if prev, dup := byID[id]; dup {
			p.errorAt(diag.DuplicateID, p.li.Pos(g.off), int(id), -1, -1, "give each gpu its own id",
				"gpu id %d repeated (first at line %d)", id, p.li.Pos(prev.off).Line)
			ok = false
			continue
		}
		byID[id] = g
	}
	if !ok {
		return nil
	}
	if len(byID) != h.ngpus {
		missing, first := 0, -1
		for r := 0; r < h.ngpus && missing < h.ngpus; r++ {
			if _, ok := byID[int64(r)]; !ok {
				if first < 0 {
					first = r
				}
				missing++
			}
		}
		p.errorAt(diag.DuplicateID, p.li.Pos(algo.off), first, -1, -1, "give one <gpu> per rank, ids 0 .. ngpus-1",
			"ngpus=%d but %d <gpu> elements: gpu %d is missing (%d missing in all)", h.ngpus, len(byID), first, missing)
		return nil
	}
	ranks := make([]ir.Rank, h.ngpus)
	for r := range ranks {
		p.gpu(byID[int64(r)], r, h, &ranks[r])
	}
	return ranks
}

// gpu reads one <gpu> into rank r.
func (p *parser) gpu(g *xelem, r int, h *algoHeader, rank *ir.Rank) {
	s := subj{r, -1, -1}
	rank.Pos = p.li.Pos(g.off)
	var ok bool
	if rank.Chunks[ir.Input], ok = p.integer(g, "i_chunks", 0, math.MaxInt64, s); !ok {
		return
	}
	if rank.Chunks[ir.Output], ok = p.integer(g, "o_chunks", 0, math.MaxInt64, s); !ok {
		return
	}
	if rank.Chunks[ir.Scratch], ok = p.integer(g, "s_chunks", 0, math.MaxInt64, s); !ok {
		return
	}

	elems := g.children("tb")
	byID := map[int64]*xelem{}
	for _, t := range elems {
		p.checkAttrs(t, tbAttrs, s)
		id, ok := p.integer(t, "id", 0, MaxIndex, s)
		if !ok {
			return
		}
		if prev, dup := byID[id]; dup {
			p.errorAt(diag.DuplicateID, p.li.Pos(t.off), r, int(id), -1, "give each threadblock of a gpu its own id",
				"tb id %d repeated on gpu %d (first at line %d)", id, r, p.li.Pos(prev.off).Line)
			return
		}
		byID[id] = t
	}
	if int64(len(byID)) != int64(len(elems)) {
		return
	}
	ids := make([]int64, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for i, id := range ids {
		if id != int64(i) {
			t := byID[id]
			p.errorAt(diag.DuplicateID, p.li.Pos(t.off), r, int(id), -1, "number threadblocks 0, 1, 2, ... (MSCCL rejects gaps)",
				"tb %d on gpu %d has no tb %d before it", id, r, i)
			return
		}
	}
	rank.TBs = make([]ir.Threadblock, len(ids))
	maps := make([][]int, len(ids)) // per tb: XML step position -> IR op index
	for t := range rank.TBs {
		maps[t] = p.tb(byID[int64(t)], r, t, h, &rank.TBs[t])
	}
	// Dependencies name XML step positions; renumber them through the
	// re fusion of the target threadblock. A dependency on a missing tb or
	// step is kept as written (its numbers are out of range in the IR as
	// well) for the verifier to report (TS0203).
	for t := range rank.TBs {
		ops := rank.TBs[t].Ops
		for i := range ops {
			for d, dep := range ops[i].Deps {
				if dep.TB >= 0 && dep.TB < len(maps) && dep.Step >= 0 && dep.Step < len(maps[dep.TB]) {
					ops[i].Deps[d].Step = maps[dep.TB][dep.Step]
				}
			}
		}
	}
}

// step is one parsed <step>.
type step struct {
	typ            string
	srcBuf, dstBuf ir.BufKind
	srcOff, dstOff int64
	cnt            int64
	depid, deps    int64
	hasdep         bool
	pos            ir.Pos
	elem           *xelem
}

// stepKind says which of a step's operands MSCCL uses.
type stepKind struct {
	code     ir.Opcode
	src, dst bool
}

var stepKinds = map[string]stepKind{
	"s":    {ir.OpSend, true, false},
	"r":    {ir.OpRecv, false, true},
	"rcs":  {ir.OpRecvCopySend, false, true},
	"rrs":  {ir.OpRecvReduceSend, true, false},
	"rrc":  {ir.OpRecvReduceCopy, true, true},
	"rrcs": {ir.OpRecvReduceCopySend, true, true},
	"cpy":  {ir.OpCopy, true, true},
	"re":   {ir.OpReduce, true, true},
	"nop":  {ir.OpNop, false, false},
}

// tb reads one <tb> into tbOut and returns, for each XML step position,
// the index of the IR op it became.
func (p *parser) tb(e *xelem, r, t int, h *algoHeader, tbOut *ir.Threadblock) []int {
	s := subj{r, t, -1}
	tbOut.Pos = p.li.Pos(e.off)
	tbOut.SendPeer, tbOut.RecvPeer, tbOut.Chan = -1, -1, -1
	send, ok1 := p.integer(e, "send", -1, MaxIndex, s)
	recv, ok2 := p.integer(e, "recv", -1, MaxIndex, s)
	ch, ok3 := p.integer(e, "chan", 0, MaxIndex, s)
	if !ok1 || !ok2 || !ok3 {
		return nil
	}
	tbOut.SendPeer, tbOut.RecvPeer, tbOut.Chan = int(send), int(recv), int(ch)
	if ch >= h.nchannels {
		a, _ := e.attr("chan")
		p.warnAt(diag.BadValue, p.li.Pos(a.off), r, t, -1, "raise nchannels on <algo>",
			"chan=%d is not below nchannels=%d: MSCCL connects only channels below nchannels", ch, h.nchannels)
	}

	elems := e.children("step")
	steps := make([]step, 0, len(elems))
	for i, se := range elems {
		st, ok := p.readStep(se, r, t, i)
		if !ok {
			return nil
		}
		steps = append(steps, st)
	}
	return p.convert(steps, r, t, tbOut)
}

// readStep validates one <step> at position i.
func (p *parser) readStep(e *xelem, r, t, i int) (step, bool) {
	s := subj{r, t, i}
	p.checkAttrs(e, stepAttrs, s)
	st := step{pos: p.li.Pos(e.off), elem: e}
	ok := true
	need := func(b bool) {
		if !b {
			ok = false
		}
	}
	idx, good := p.integer(e, "s", 0, MaxIndex, s)
	need(good)
	if good && idx != int64(i) {
		a, _ := e.attr("s")
		p.errorAt(diag.DuplicateID, p.li.Pos(a.off), r, t, i, "number steps 0, 1, 2, ... in order",
			"step s=%d is at position %d of tb %d: dependencies name steps by position", idx, i, t)
		ok = false
	}
	typ, ta, good := p.str(e, "type", s)
	need(good)
	kind, known := stepKinds[typ]
	if good && !known {
		if typ == "ra" {
			p.errorAt(diag.Unsupported, p.li.Pos(ta.off), r, t, i, "rewrite the step as r followed by re",
				"unsupported: step type ra belongs to the old MSCCL runtime and has no Theseus equivalent")
		} else {
			p.errorAt(diag.UnknownOp, p.li.Pos(ta.off), r, t, i, "use s, r, rcs, rrs, rrc, rrcs, cpy, re or nop",
				"unknown step type %q", typ)
		}
		ok = false
	}
	st.typ = typ
	// MSCCL checks both buffer names on every step, used or not.
	st.srcBuf, good = p.buffer(e, "srcbuf", s)
	need(good)
	st.dstBuf, good = p.buffer(e, "dstbuf", s)
	need(good)
	st.srcOff, good = p.integer(e, "srcoff", math.MinInt64, math.MaxInt64, s)
	need(good)
	st.dstOff, good = p.integer(e, "dstoff", math.MinInt64, math.MaxInt64, s)
	need(good)
	st.cnt, good = p.integer(e, "cnt", math.MinInt64, math.MaxInt64, s)
	need(good)
	st.depid, good = p.integer(e, "depid", -1, MaxIndex, s)
	need(good)
	st.deps, good = p.integer(e, "deps", math.MinInt64, math.MaxInt64, s)
	need(good)
	st.hasdep, good = p.flag(e, "hasdep", s)
	need(good)
	if !ok {
		return st, false
	}
	if kind.code != ir.OpNop {
		if kind.src && st.srcOff < 0 {
			a, _ := e.attr("srcoff")
			p.errorAt(diag.BadValue, p.li.Pos(a.off), r, t, i, "", "srcoff=%d of a %s step must be 0 or more", st.srcOff, typ)
			ok = false
		}
		if kind.dst && st.dstOff < 0 {
			a, _ := e.attr("dstoff")
			p.errorAt(diag.BadValue, p.li.Pos(a.off), r, t, i, "", "dstoff=%d of a %s step must be 0 or more", st.dstOff, typ)
			ok = false
		}
		if st.cnt < 0 {
			a, _ := e.attr("cnt")
			p.errorAt(diag.BadValue, p.li.Pos(a.off), r, t, i, "", "cnt=%d of a %s step must be 0 or more", st.cnt, typ)
			ok = false
		}
	}
	if st.depid >= 0 && (st.deps < 0 || st.deps > MaxIndex) {
		a, _ := e.attr("deps")
		p.errorAt(diag.BadValue, p.li.Pos(a.off), r, t, i, "name the step of tb depid this step waits for",
			"deps=%d with depid=%d: a dependency needs a step index in [0, %d]", st.deps, st.depid, MaxIndex)
		ok = false
	}
	return st, ok
}

func (p *parser) buffer(e *xelem, name string, s subj) (ir.BufKind, bool) {
	v, a, ok := p.str(e, name, s)
	if !ok {
		return 0, false
	}
	if b, ok := importer.Buf(v); ok {
		return b, true
	}
	p.errorAt(diag.BadValue, p.li.Pos(a.off), s.rank, s.tb, s.step, "use i, o or s",
		"%s=%q is not a buffer", name, v)
	return 0, false
}

func ref(b ir.BufKind, off int64) ir.Ref { return ir.Ref{Buf: b, Off: off, Chan: -1} }

// convert turns a threadblock's steps into IR ops, fusing re steps the way
// the MSCCL executor does (msccl_parser.cc): a re step continues the
// previous reduction when that one was a re into the same dst buffer and
// offset, from the same src buffer, did not publish, the threadblock's
// running count of reductions had not reached 16, and this step has no
// depid. It returns, per XML position, the IR op index.
func (p *parser) convert(steps []step, r, t int, tbOut *ir.Threadblock) []int {
	ops := make([]ir.Op, 0, len(steps))
	xmlToIR := make([]int, len(steps))
	nReductions := 0
	fusable := false
	var fDst ir.Ref
	var fSrcBuf ir.BufKind
	fStart := 0 // XML position of the reduction being fused
	pendingNopDeps := false
	for i, st := range steps {
		kind := stepKinds[st.typ]
		var deps []ir.Dep
		if st.depid >= 0 {
			deps = []ir.Dep{{TB: int(st.depid), Step: int(st.deps)}}
		}
		if kind.code == ir.OpReduce && fusable && st.dstBuf == fDst.Buf && st.dstOff == fDst.Off &&
			st.srcBuf == fSrcBuf && st.depid == -1 {
			op := &ops[len(ops)-1]
			op.Srcs = append(op.Srcs, ref(st.srcBuf, st.srcOff))
			if st.cnt != op.Count {
				p.warnAt(diag.BadCount, st.pos, r, t, i, "give the fused re steps one cnt",
					"re step fused into the reduction of step %d has cnt=%d, not %d: MSCCL runs the fused reduction with the last cnt",
					fStart, st.cnt, op.Count)
			}
			op.Count = st.cnt
			op.Publish = st.hasdep
			xmlToIR[i] = len(ops) - 1
			nReductions++
			fusable = !st.hasdep && nReductions != mscclMaxReduceFusion
			continue
		}
		op := ir.Op{Code: kind.code, Deps: deps, Publish: st.hasdep, Pos: st.pos}
		switch kind.code {
		case ir.OpNop:
			fusable = false
			if st.hasdep {
				op.Publish = false
				p.warnAt(diag.ImportNote, st.pos, r, t, i, "set hasdep on the step after the nop",
					"hasdep=1 on a nop does nothing: MSCCL drops nop steps, so this step never publishes")
			}
			if st.depid < 0 {
				p.warnAt(diag.ImportNote, st.pos, r, t, i, "remove the nop",
					"nop without depid: MSCCL does not count it, so later steps of tb %d publish indices one lower than their position", t)
			} else {
				pendingNopDeps = true
			}
			ops = append(ops, op)
			xmlToIR[i] = len(ops) - 1
			continue
		case ir.OpReduce:
			op.Srcs = []ir.Ref{ref(st.dstBuf, st.dstOff), ref(st.srcBuf, st.srcOff)}
			op.Dsts = []ir.Ref{ref(st.dstBuf, st.dstOff)}
			nReductions++
			fDst, fSrcBuf, fStart = ref(st.dstBuf, st.dstOff), st.srcBuf, i
			fusable = !st.hasdep && nReductions != mscclMaxReduceFusion
		default:
			fusable = false
			if kind.src {
				op.Srcs = []ir.Ref{ref(st.srcBuf, st.srcOff)}
			}
			if kind.dst {
				op.Dsts = []ir.Ref{ref(st.dstBuf, st.dstOff)}
			}
		}
		op.Count = st.cnt
		if pendingNopDeps && st.depid < 0 {
			p.warnAt(diag.ImportNote, st.pos, r, t, i, "give this step the last dependency instead of a nop",
				"the nop steps before this step carry dependencies but this step has no depid: the MSCCL executor rejects such a file")
		}
		pendingNopDeps = false
		ops = append(ops, op)
		xmlToIR[i] = len(ops) - 1
	}
	tbOut.Ops = ops
	return xmlToIR
}
