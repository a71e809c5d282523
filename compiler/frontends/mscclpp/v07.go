package mscclpp

import (
	"math"
	"strconv"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

var (
	gpuKeys07    = []string{"id", "inputChunks", "outputChunks", "scratchChunks", "chunkGroups", "threadblocks", "channels"}
	chanKeys07   = []string{"srcbuff", "dstbuff", "type", "connectedTo", "buff", "rankGroups"}
	tbKeys07     = []string{"id", "ops", "channels"}
	tbChanKeys07 = []string{"src", "dst", "ctype", "cids"}
	opKeys07     = []string{"name", "ctype", "i_buff", "i_cids", "o_buff", "o_cids", "srcs", "dsts", "srcbuff", "srcoff",
		"dstbuff", "dstoff", "cnt", "barrier_id", "nthread_blocks", "deps", "src", "dst"}
)

// gpuHeader07 reads a v0.7 gpu's chunk counts and channel declarations.
func (p *parser) gpuHeader07(g *jnode, r int) {
	s := subj{r, -1, -1}
	p.checkKeys(g, "a gpu", gpuKeys07, s)
	if !p.chunkCounts(g, r, "inputChunks", "outputChunks", "scratchChunks") {
		return
	}
	if cg, ok := p.reqInt(g, "chunkGroups", 1, MaxIndex, s); ok && cg > 1 && p.first("chunkGroups") {
		p.noteAt(diag.ImportNote, p.pos(g.get("chunkGroups")), s, "",
			"chunkGroups=%d only decides which MSCCL++ chunks take the leftover 16-byte units; Theseus cuts chunks exactly (ir.md §2)", cg)
	}
	p.gpuChannels(g, r, chanSpec{typeKey: "type", peersKey: "connectedTo", keys: chanKeys07,
		nvls: "rank declares an nvls (NVLink multicast) channel"},
		func(c *jnode, ct ctype) (chanKey, bool) {
			src, ok1 := p.reqBuf(c, "srcbuff", s)
			dst, ok2 := p.reqBuf(c, "dstbuff", s)
			return chanKey{src, dst, typeIndex(ct)}, ok1 && ok2
		})
}

// tbChannel07 resolves one entry of a v0.7 threadblock's channel list:
// cid k names the k-th channel of the rank with the entry's key.
func (p *parser) tbChannel07(c *jnode, r, t int, tc *tbChans) bool {
	s := subj{r, t, -1}
	if !p.isObject(c, "a threadblock channel", s) {
		return false
	}
	p.checkKeys(c, "a threadblock channel", tbChanKeys07, s)
	ct, _, ok := p.chanType(c, "ctype", "threadblock uses an nvls channel", s)
	if !ok {
		return false
	}
	if ct == ctNone {
		return true
	}
	src, ok1 := p.reqBuf(c, "src", s)
	dst, ok2 := p.reqBuf(c, "dst", s)
	cids, ok3 := p.arr(c, "cids", true, s)
	if !ok1 || !ok2 || !ok3 {
		return false
	}
	key := chanKey{src, dst, typeIndex(ct)}
	list := p.rc[r].byKey[key]
	if tc.byKey == nil {
		tc.byKey = map[chanKey][]int{}
	}
	for _, cn := range cids {
		id, ok := p.intVal(cn, "cid", 0, MaxIndex, s)
		if !ok {
			return false
		}
		if id >= int64(len(list)) {
			p.errorAt(diag.BadChannel, p.pos(cn), s, "declare the channel on the gpu, or use a smaller cid",
				"cid %d: rank %d declares %d %s channels from %s to %s", id, r, len(list), irType(key.t), src.LongName(), dst.LongName())
			return false
		}
		flat := list[id]
		tc.lists[key.t] = append(tc.lists[key.t], flat)
		tc.byKey[key] = append(tc.byKey[key], flat)
	}
	return true
}

// cref is a channel an op reaches through i_cids or o_cids: the IR
// channel, the channel's local (src) and remote (dst) buffers, and the
// chunk offset in the remote buffer.
type cref struct {
	ch     int
	local  ir.BufKind
	remote ir.BufKind
	off    int64
	pos    ir.Pos
}

// cids07 resolves an op's i_cids or o_cids ("i" or "o"): entry {id, off}
// names the id-th channel of the threadblock with key (X_buff.src,
// X_buff.dst, ctype). It returns nil when the list is absent.
func (p *parser) cids07(o *jnode, which string, ct ctype, r int, tc *tbChans, s subj) ([]cref, bool) {
	list := o.get(which + "_cids")
	if list == nil {
		return nil, true
	}
	if list.kind != jArray {
		p.errorAt(diag.BadValue, p.pos(list), s, "", "%s_cids is %s, want an array", which, list.kind)
		return nil, false
	}
	if ct != ctMemory && ct != ctPort {
		p.errorAt(diag.BadValue, p.pos(o), s, "set ctype to sm/memory or proxy/port",
			"%s_cids needs a memory or port ctype", which)
		return nil, false
	}
	bn := p.member(o, which+"_buff", true, s)
	if bn == nil || !p.isObject(bn, which+"_buff", s) {
		return nil, false
	}
	src, ok1 := p.reqBuf(bn, "src", s)
	dst, ok2 := p.reqBuf(bn, "dst", s)
	if !ok1 || !ok2 {
		return nil, false
	}
	key := chanKey{src, dst, typeIndex(ct)}
	flat := tc.byKey[key]
	out := make([]cref, 0, len(list.arr))
	for _, e := range list.arr {
		if !p.isObject(e, which+"_cids entry", s) {
			return nil, false
		}
		id, ok1 := p.reqInt(e, "id", 0, MaxIndex, s)
		off, ok2 := p.reqInt(e, "off", 0, math.MaxInt64, s)
		if !ok1 || !ok2 {
			return nil, false
		}
		if id >= int64(len(flat)) {
			p.errorAt(diag.BadChannel, p.pos(e.get("id")), s, "list the channel in the threadblock's channels",
				"%s_cids id %d: threadblock %d lists %d %s channels from %s to %s", which, id, s.tb, len(flat),
				irType(key.t), src.LongName(), dst.LongName())
			return nil, false
		}
		out = append(out, cref{ch: p.irChan(r, key.t, flat[id]), local: src, remote: dst, off: off, pos: p.pos(e)})
	}
	return out, true
}

// locals07 reads srcs or dsts: [{buff, off}]. MSCCL++ v0.7 takes the
// buffer of the first entry for all of them.
func (p *parser) locals07(o *jnode, key string, s subj) ([]ir.Ref, bool) {
	list, ok := p.arr(o, key, false, s)
	if !ok {
		return nil, false
	}
	out := make([]ir.Ref, 0, len(list))
	for i, e := range list {
		if !p.isObject(e, key+" entry", s) {
			return nil, false
		}
		b, ok1 := p.reqBuf(e, "buff", s)
		off, ok2 := p.reqInt(e, "off", 0, math.MaxInt64, s)
		if !ok1 || !ok2 {
			return nil, false
		}
		if i > 0 && b != out[0].Buf {
			p.warnAt(diag.ImportNote, p.pos(e), s, "give all entries one buffer",
				"%s entry %d names buffer %s but MSCCL++ v0.7 reads every entry from the first entry's buffer %s", key, i, b, out[0].Buf)
			b = out[0].Buf
		}
		out = append(out, ir.Ref{Buf: b, Off: off, Chan: -1})
	}
	return out, true
}

// local07 reads srcbuff/srcoff ("src") or dstbuff/dstoff ("dst").
func (p *parser) local07(o *jnode, which string, s subj) (ir.Ref, bool) {
	b, ok1 := p.reqBuf(o, which+"buff", s)
	off, ok2 := p.reqInt(o, which+"off", 0, math.MaxInt64, s)
	return ir.Ref{Buf: b, Off: off, Chan: -1}, ok1 && ok2
}

func chansOf(cs []cref) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = c.ch
	}
	return out
}

func remoteRef(c cref, packet bool) ir.Ref {
	return ir.Ref{Buf: c.remote, Off: c.off, Chan: c.ch, Packet: packet}
}

// copies builds copy ops for src k -> dst k; when every src is the same it
// is one copy with all the dsts.
func copies(srcs, dsts []ir.Ref, count int64, pos ir.Pos) []ir.Op {
	same := true
	for _, s := range srcs[1:] {
		if s != srcs[0] {
			same = false
		}
	}
	if same {
		return []ir.Op{{Code: ir.OpCopy, Srcs: []ir.Ref{srcs[0]}, Dsts: dsts, Count: count, Pos: pos}}
	}
	out := make([]ir.Op, len(srcs))
	for k := range srcs {
		out[k] = ir.Op{Code: ir.OpCopy, Srcs: []ir.Ref{srcs[k]}, Dsts: []ir.Ref{dsts[k]}, Count: count, Pos: pos}
	}
	return out
}

// op07Op is one v0.7 op being mapped: its name, position, channel type
// and where it lies (rank r, threadblock t and its channels tc).
type op07Op struct {
	p     *parser
	o, nn *jnode
	s     subj
	name  string
	pos   ir.Pos
	ct    ctype
	r, t  int
	tc    *tbChans
}

// op07 maps one v0.7 op to IR ops (v0.7 execution_kernel.hpp semantics).
func (p *parser) op07(o *jnode, r, t, j int, tc *tbChans) ([]ir.Op, bool) {
	x, ok := p.op07Head(o, r, t, j, tc)
	if !ok {
		return nil, false
	}
	return x.lower()
}

// op07Head reads and checks the fields every op shares: its keys, name and
// ctype (NVLink multicast refused).
func (p *parser) op07Head(o *jnode, r, t, j int, tc *tbChans) (*op07Op, bool) {
	s := subj{r, t, j}
	if !p.isObject(o, "an op", s) {
		return nil, false
	}
	p.checkKeys(o, "an op", opKeys07, s)
	name, nn, ok := p.reqStr(o, "name", s)
	if !ok {
		return nil, false
	}
	pos := p.pos(o)
	ct := ctNone
	if v := o.get("ctype"); v != nil {
		if ct, ok = p.ctypeVal(v, "ctype", s); !ok {
			return nil, false
		}
	}
	if name == "glres" || ct == ctNVLS {
		p.unsupportedNVLS(o, s, "op "+name+" uses NVLink multicast")
		return nil, false
	}
	return &op07Op{p: p, o: o, nn: nn, s: s, name: name, pos: pos, ct: ct, r: r, t: t, tc: tc}, true
}

// cnt reads the op's cnt.
func (x *op07Op) cnt() (int64, bool) {
	p, o, s := x.p, x.o, x.s
	return p.reqInt(o, "cnt", 0, math.MaxInt64, s)
}

// needOuts reads o_cids, which the op needs.
func (x *op07Op) needOuts() ([]cref, bool) {
	p, o, s, name, pos, ct, r, tc := x.p, x.o, x.s, x.name, x.pos, x.ct, x.r, x.tc
	outs, ok := p.cids07(o, "o", ct, r, tc, s)
	if ok && len(outs) == 0 {
		p.errorAt(diag.MissingField, pos, s, "", "op %s needs o_cids", name)
		return nil, false
	}
	return outs, ok
}

// needIns reads i_cids, which the op needs.
func (x *op07Op) needIns() ([]cref, bool) {
	p, o, s, name, pos, ct, r, tc := x.p, x.o, x.s, x.name, x.pos, x.ct, x.r, x.tc
	ins, ok := p.cids07(o, "i", ct, r, tc, s)
	if ok && len(ins) == 0 {
		p.errorAt(diag.MissingField, pos, s, "", "op %s needs i_cids", name)
		return nil, false
	}
	return ins, ok
}

// putOperands reads the o_cids, srcs (one per o_cids entry) and cnt of
// the ops that write to peers (put, pws, pwsf, ppkt, rppkt).
func (x *op07Op) putOperands() ([]cref, []ir.Ref, int64, bool) {
	p, o, s, name, pos := x.p, x.o, x.s, x.name, x.pos
	outs, ok1 := x.needOuts()
	srcs, ok2 := p.locals07(o, "srcs", s)
	n, ok3 := x.cnt()
	if !ok1 || !ok2 || !ok3 {
		return nil, nil, 0, false
	}
	if len(srcs) != len(outs) {
		p.errorAt(diag.BadCount, pos, s, "give one srcs entry per o_cids entry",
			"op %s has %d srcs for %d o_cids", name, len(srcs), len(outs))
		return nil, nil, 0, false
	}
	return outs, srcs, n, true
}

// memoryOnly reports whether the op's channels are memory channels, and
// says why it needs them when not.
func (x *op07Op) memoryOnly() bool {
	p, s, name, pos, ct := x.p, x.s, x.name, x.pos, x.ct
	if ct != ctMemory {
		p.errorAt(diag.BadValue, pos, s, "use sm/memory channels for this op",
			"op %s reads or writes peer memory directly and needs memory channels (ctype is %s)", name, ctName(ct))
		return false
	}
	return true
}

// lower maps the op by its name.
func (x *op07Op) lower() ([]ir.Op, bool) {
	p, o, nn, s, name, pos := x.p, x.o, x.nn, x.s, x.name, x.pos
	switch name {
	case "nop":
		return x.nop()

	case "barrier":
		return p.barrier(o, "nthread_blocks", pos, s)

	case "signal", "flush":
		outs, ok := x.needOuts()
		if !ok {
			return nil, false
		}
		code := ir.OpSignal
		if name == "flush" {
			code = ir.OpFlush
		}
		return []ir.Op{{Code: code, Chans: chansOf(outs), Pos: pos}}, true

	case "wait":
		ins, ok := x.needIns()
		if !ok {
			return nil, false
		}
		return []ir.Op{{Code: ir.OpWait, Chans: chansOf(ins), Pos: pos}}, true

	case "put", "pws", "pwsf", "ppkt":
		return x.put()

	case "get":
		ins, ok1 := x.needIns()
		dsts, ok2 := p.locals07(o, "dsts", s)
		n, ok3 := x.cnt()
		if !ok1 || !ok2 || !ok3 || !x.memoryOnly() {
			return nil, false
		}
		if len(dsts) != len(ins) {
			p.errorAt(diag.BadCount, pos, s, "give one dsts entry per i_cids entry",
				"op get has %d dsts for %d i_cids", len(dsts), len(ins))
			return nil, false
		}
		var ops []ir.Op
		for k, c := range ins {
			ops = append(ops, ir.Op{Code: ir.OpCopy, Srcs: []ir.Ref{remoteRef(c, false)},
				Dsts: []ir.Ref{{Buf: c.local, Off: dsts[k].Off, Chan: -1}}, Count: n, Pos: pos})
		}
		return ops, true

	case "copy", "cpkt", "tpkt":
		src, ok1 := p.local07(o, "src", s)
		dst, ok2 := p.local07(o, "dst", s)
		n, ok3 := x.cnt()
		if !ok1 || !ok2 || !ok3 {
			return nil, false
		}
		src.Packet = name == "cpkt"
		dst.Packet = name == "tpkt"
		return []ir.Op{{Code: ir.OpCopy, Srcs: []ir.Ref{src}, Dsts: []ir.Ref{dst}, Count: n, Pos: pos}}, true

	case "re", "rs":
		src, ok1 := p.local07(o, "src", s)
		dst, ok2 := p.local07(o, "dst", s)
		more, ok3 := p.locals07(o, "srcs", s)
		n, ok4 := x.cnt()
		if !ok1 || !ok2 || !ok3 || !ok4 {
			return nil, false
		}
		dsts := []ir.Ref{dst}
		if name == "rs" {
			outs, ok := x.needOuts()
			if !ok || !x.memoryOnly() {
				return nil, false
			}
			for _, c := range outs {
				dsts = append(dsts, remoteRef(c, false))
			}
		}
		return []ir.Op{reduceOp(append([]ir.Ref{src}, more...), dsts, n, pos)}, true

	case "rrc", "rrcs":
		src, ok1 := p.local07(o, "src", s)
		dst, ok2 := p.local07(o, "dst", s)
		ins, ok3 := x.needIns()
		n, ok4 := x.cnt()
		if !ok1 || !ok2 || !ok3 || !ok4 || !x.memoryOnly() {
			return nil, false
		}
		srcs := []ir.Ref{src}
		for _, c := range ins {
			srcs = append(srcs, remoteRef(c, false))
		}
		dsts := []ir.Ref{dst}
		if name == "rrcs" {
			outs, ok := x.needOuts()
			if !ok {
				return nil, false
			}
			for _, c := range outs {
				dsts = append(dsts, remoteRef(c, false))
			}
		}
		return []ir.Op{reduceOp(srcs, dsts, n, pos)}, true

	case "rppkt":
		outs, srcs, n, ok := x.putOperands()
		if !ok {
			return nil, false
		}
		from := make([]ir.Ref, len(outs))
		to := make([]ir.Ref, len(outs))
		for k, c := range outs {
			// Packets are read from this rank's scratch, whatever srcs says.
			from[k] = ir.Ref{Buf: ir.Scratch, Off: srcs[k].Off, Chan: -1, Packet: true}
			to[k] = remoteRef(c, true)
		}
		p.scratchOnly(srcs, "rppkt", pos, s)
		return copies(from, to, n, pos), true

	case "rspkt", "rpkt":
		return x.packetReduce()
	}
	p.errorAt(diag.UnknownOp, p.pos(nn), s,
		"use nop, barrier, put, pws, pwsf, get, copy, signal, wait, flush, re, rs, rrc, rrcs, ppkt, rppkt, rspkt, cpkt, tpkt or rpkt",
		"unknown v0.7 op %q", name)
	return nil, false
}

// packetReduce maps rspkt and rpkt: MSCCL++ sums the packets (read from
// this rank's scratch) first, then adds the local src; rspkt also writes
// the peers' buffers.
func (x *op07Op) packetReduce() ([]ir.Op, bool) {
	p, o, s, name, pos := x.p, x.o, x.s, x.name, x.pos
	src, ok1 := p.local07(o, "src", s)
	dst, ok2 := p.local07(o, "dst", s)
	pk, ok3 := p.locals07(o, "srcs", s)
	n, ok4 := x.cnt()
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, false
	}
	p.scratchOnly(pk, name, pos, s)
	// MSCCL++ sums the packets first, then adds the local src.
	var srcs []ir.Ref
	for _, r := range pk {
		srcs = append(srcs, ir.Ref{Buf: ir.Scratch, Off: r.Off, Chan: -1, Packet: true})
	}
	srcs = append(srcs, src)
	dsts := []ir.Ref{dst}
	if name == "rspkt" {
		outs, ok := x.needOuts()
		if !ok || !x.memoryOnly() {
			return nil, false
		}
		for _, c := range outs {
			dsts = append(dsts, remoteRef(c, true))
		}
	}
	return []ir.Op{reduceOp(srcs, dsts, n, pos)}, true
}

// nop maps a nop: __syncthreads() of its threadblock, whose deps MSCCL++
// v0.7 does not read (a dependency on another threadblock is said so).
func (x *op07Op) nop() ([]ir.Op, bool) {
	p, o, s, pos, t := x.p, x.o, x.s, x.pos, x.t
	// A nop is __syncthreads() of this threadblock; deps are not read.
	if deps := o.get("deps"); deps != nil && deps.kind == jArray {
		for _, d := range deps.arr {
			if d.kind != jObject {
				continue
			}
			if tbn := d.get("tb"); tbn != nil && tbn.kind == jNumber && tbn.str != strconv.Itoa(t) {
				p.warnAt(diag.ImportNote, p.pos(d), s, "synchronise threadblocks with a barrier op",
					"nop deps on threadblock %s are not enforced by MSCCL++ v0.7 (a nop is a __syncthreads of its own threadblock); no cross-threadblock order is imported", tbn.str)
				break
			}
		}
	}
	return []ir.Op{{Code: ir.OpNop, Pos: pos}}, true
}

// put maps put, pws, pwsf and ppkt: copies from each channel's own buffer
// to its peer, then for pws and pwsf on port channels the signal (and
// flush).
func (x *op07Op) put() ([]ir.Op, bool) {
	p, s, name, pos, ct := x.p, x.s, x.name, x.pos, x.ct
	outs, srcs, n, ok := x.putOperands()
	if !ok {
		return nil, false
	}
	packet := name == "ppkt"
	from := make([]ir.Ref, len(outs))
	to := make([]ir.Ref, len(outs))
	for k, c := range outs {
		// The data leaves from the channel's own registered (src)
		// buffer; srcs only give the offsets.
		if srcs[k].Buf != c.local && p.first("srcs-buf") {
			p.warnAt(diag.ImportNote, pos, s, "",
				"srcs names buffer %s but the channel's local buffer is %s: MSCCL++ reads from the channel's buffer", srcs[k].Buf, c.local)
		}
		from[k] = ir.Ref{Buf: c.local, Off: srcs[k].Off, Chan: -1, Packet: packet && ct == ctPort}
		to[k] = remoteRef(c, packet)
	}
	ops := copies(from, to, n, pos)
	switch {
	case name == "pws" || name == "pwsf":
		if ct == ctPort {
			ops = append(ops, ir.Op{Code: ir.OpSignal, Chans: chansOf(outs), Pos: pos})
			if name == "pwsf" {
				ops = append(ops, ir.Op{Code: ir.OpFlush, Chans: chansOf(outs), Pos: pos})
			}
		} else if p.first("pws-memory") {
			p.warnAt(diag.ImportNote, pos, s, "use put followed by signal",
				"%s on memory channels: MSCCL++ v0.7 puts without signalling (its kernel ignores the signal on memory channels); imported as a put", name)
		}
	case name == "ppkt" && ct == ctPort && p.first("ppkt-port"):
		p.noteAt(diag.ImportNote, pos, s, "",
			"ppkt on port channels copies packets already in LL layout in local scratch; imported as a packet-to-packet copy")
	}
	return ops, true
}
