package mscclpp

import (
	"math"
	"strconv"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

var (
	gpuKeys08 = []string{"id", "input_chunks", "output_chunks", "scratch_chunks", "threadblocks", "channels",
		"remote_buffers", "semaphores"}
	chanKeys08   = []string{"channel_type", "connected_to", "buffer_type", "rank_groups"}
	rbufKeys08   = []string{"rank", "type", "access_channel_types"}
	tbKeys08     = []string{"id", "ops", "channels", "remote_buffer_refs"}
	tbChanKeys08 = []string{"channel_type", "channel_ids", "buff"}
	rbrefKeys08  = []string{"access_channel_type", "remote_buffer_ids"}
	opKeys08     = []string{"name", "channel_type", "channel_ids", "src_buff", "dst_buff", "barrier_id", "num_threadblocks",
		"semaphore_ids", "iter_context", "ops", "tbg_info", "reduce_op"}
	brefKeys08 = []string{"type", "buffer_id", "switch_channel_id", "index", "size"}
)

// remoteBuf is one entry of a v0.8+ gpu's remote_buffers: a buffer of
// another rank and the channel types it may be reached through.
type remoteBuf struct {
	rank   int
	buf    ir.BufKind
	access [2]bool
}

// gpuHeader08 reads a v0.8+ gpu's chunk counts, channels, remote buffers
// and semaphores.
func (p *parser) gpuHeader08(g *jnode, r int) {
	s := subj{r, -1, -1}
	p.checkKeys(g, "a gpu", gpuKeys08, s)
	if p.remote == nil {
		p.remote = make([][]remoteBuf, p.n)
		p.nsems = make([]int, p.n)
	}
	if !p.chunkCounts(g, r, "input_chunks", "output_chunks", "scratch_chunks") {
		return
	}
	if !p.gpuChannels(g, r, chanSpec{typeKey: "channel_type", peersKey: "connected_to", keys: chanKeys08,
		nvls: "rank declares a switch (NVLink multicast) channel"},
		func(c *jnode, ct ctype) (chanKey, bool) { return chanKey{t: typeIndex(ct)}, true }) {
		return
	}
	rbufs, ok := p.arr(g, "remote_buffers", false, s)
	if !ok {
		return
	}
	for _, b := range rbufs {
		if !p.isObject(b, "a remote buffer", s) {
			return
		}
		p.checkKeys(b, "a remote buffer", rbufKeys08, s)
		rn := p.member(b, "rank", true, s)
		if rn == nil {
			return
		}
		q, ok1 := p.peer(rn, r, "rank", s)
		buf, ok2 := p.reqBuf(b, "type", s)
		acc, ok3 := p.arr(b, "access_channel_types", true, s)
		if !ok1 || !ok2 || !ok3 {
			return
		}
		rb := remoteBuf{rank: q, buf: buf}
		for _, an := range acc {
			ct, ok := p.ctypeVal(an, "access_channel_types entry", s)
			if !ok {
				return
			}
			if ct != ctMemory && ct != ctPort {
				p.errorAt(diag.BadValue, p.pos(an), s, "use memory or port", "a remote buffer is reached through memory or port channels, not %s", ctName(ct))
				return
			}
			rb.access[typeIndex(ct)] = true
		}
		p.remote[r] = append(p.remote[r], rb)
	}
	sems, ok := p.arr(g, "semaphores", false, s)
	if !ok {
		return
	}
	for _, sm := range sems {
		if !p.isObject(sm, "a semaphore", s) {
			return
		}
		if _, ok := p.reqInt(sm, "init_value", 0, math.MaxInt64, s); !ok {
			return
		}
	}
	p.nsems[r] = len(sems)
}

// pipelineCheck decides how pipeline ops are imported. A pipeline runs its
// inner ops ceil(num_chunks · chunk bytes / unit_size) times, each time on
// the next unit_size bytes of every inner op's range; that count depends
// on the message size, so it has an exact IR counterpart only when the
// whole program is one pipeline: every threadblock with ops holds exactly
// one pipeline op, all with one iter_context, the protocol is Simple (LL
// packet ops ignore the iteration offset), and every inner data op moves
// num_chunks chunks. Then the inner ops become the threadblocks' ops and
// the iterations become the IR's slices with SliceBytes =
// unit_size / num_chunks: per slice each op handles the same number of
// bytes as one MSCCL++ iteration. Anything else is rejected (TS0007).
func (p *parser) pipelineCheck(gpus []*jnode) bool {
	var first *jnode
	firstRank, firstTB := -1, -1
	reason := ""
	var unit, nchunks int64
	for r, g := range gpus {
		tbs := g.get("threadblocks")
		if tbs == nil || tbs.kind != jArray {
			continue
		}
		for t, tn := range tbs.arr {
			ops := tn.get("ops")
			if ops == nil || ops.kind != jArray {
				continue
			}
			npipe := 0
			for _, o := range ops.arr {
				if nm := o.get("name"); nm != nil && nm.kind == jString && nm.str == "pipeline" {
					npipe++
					if first == nil {
						first, firstRank, firstTB = o, r, t
					}
					ic := o.get("iter_context")
					u, c := int64(-1), int64(-1)
					if ic != nil && ic.kind == jObject {
						if v, ok := p.quietInt(ic.get("unit_size")); ok {
							u = v
						}
						if v, ok := p.quietInt(ic.get("num_chunks")); ok {
							c = v
						}
					}
					if u < 1 || c < 1 {
						if reason == "" {
							reason = "a pipeline op lacks iter_context.unit_size or num_chunks (positive integers)"
						}
					} else if unit == 0 {
						unit, nchunks = u, c
					} else if u != unit || c != nchunks {
						if reason == "" {
							reason = "pipeline ops have different iter_context values"
						}
					}
				}
			}
			if reason == "" && (npipe > 0 || first != nil) && len(ops.arr) > 0 && (npipe != 1 || len(ops.arr) != 1) {
				reason = "a threadblock mixes a pipeline op with other ops"
			}
		}
	}
	if first == nil {
		return true
	}
	// A threadblock seen before the first pipeline op may have plain ops.
	if reason == "" {
		for _, g := range gpus {
			tbs := g.get("threadblocks")
			if tbs == nil || tbs.kind != jArray {
				continue
			}
			for _, tn := range tbs.arr {
				ops := tn.get("ops")
				if ops == nil || ops.kind != jArray || len(ops.arr) == 0 {
					continue
				}
				if len(ops.arr) != 1 {
					reason = "a threadblock mixes a pipeline op with other ops"
					break
				}
				if nm := ops.arr[0].get("name"); nm == nil || nm.kind != jString || nm.str != "pipeline" {
					reason = "some threadblocks run ops outside the pipeline"
					break
				}
			}
		}
	}
	if reason == "" && p.proto != ir.Simple {
		reason = "LL packet ops ignore the pipeline's iteration offset"
	}
	if reason != "" {
		p.errorAt(diag.Unsupported, p.pos(first), subj{firstRank, firstTB, -1},
			"write the plan without pipeline ops, or as one pipeline per threadblock with one iter_context",
			"unsupported: pipeline op whose iteration count depends on the message size: %s, so it has no exact IR form (only a program that is one pipeline maps onto the IR's slices)", reason)
		return false
	}
	p.pipeChunks = nchunks
	p.sliceBytes = unit / nchunks
	if p.sliceBytes < 1 {
		p.sliceBytes = 1
	}
	p.noteAt(diag.ImportNote, p.pos(first), subj{firstRank, firstTB, -1}, "",
		"the program is one pipeline (unit_size %d, num_chunks %d): its iterations become the IR's slices, SliceBytes %d", unit, nchunks, p.sliceBytes)
	if unit%nchunks != 0 {
		p.noteAt(diag.ImportNote, p.pos(first), subj{firstRank, firstTB, -1}, "",
			"unit_size %d is not a multiple of num_chunks %d: SliceBytes rounds down", unit, nchunks)
	}
	return true
}

// quietInt reads an integer without reporting anything.
func (p *parser) quietInt(n *jnode) (int64, bool) {
	if n == nil || n.kind != jNumber {
		return 0, false
	}
	var v int64
	for _, c := range n.str {
		if c < '0' || c > '9' || v > math.MaxInt64/10-1 {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	return v, n.str != ""
}

// tbChannel08 resolves one entry of a v0.8+ threadblock's channel list:
// channel_ids are indices into the rank's channels of that type.
func (p *parser) tbChannel08(c *jnode, r, t int, tc *tbChans) bool {
	s := subj{r, t, -1}
	if !p.isObject(c, "a threadblock channel", s) {
		return false
	}
	ct, _, ok := p.chanType(c, "channel_type", "threadblock uses a switch (NVLink multicast) channel", s)
	if !ok {
		return false
	}
	p.checkKeys(c, "a threadblock channel", tbChanKeys08, s)
	if ct == ctNone {
		return true
	}
	ids, ok := p.arr(c, "channel_ids", true, s)
	if !ok {
		return false
	}
	ti := typeIndex(ct)
	for _, in := range ids {
		id, ok := p.intVal(in, "channel_ids entry", 0, MaxIndex, s)
		if !ok {
			return false
		}
		if id >= int64(len(p.rc[r].own[ti])) {
			p.errorAt(diag.BadChannel, p.pos(in), s, "declare the channel on the gpu, or use a smaller id",
				"channel id %d: rank %d declares %d %s channels", id, r, len(p.rc[r].own[ti]), irType(ti))
			return false
		}
		tc.lists[ti] = append(tc.lists[ti], int(id))
	}
	return true
}

// remoteRefs08 resolves one entry of a threadblock's remote_buffer_refs.
func (p *parser) remoteRefs08(rb *jnode, r, t int, tc *tbChans) bool {
	s := subj{r, t, -1}
	if !p.isObject(rb, "a remote buffer ref", s) {
		return false
	}
	p.checkKeys(rb, "a remote buffer ref", rbrefKeys08, s)
	tv := p.member(rb, "access_channel_type", true, s)
	if tv == nil {
		return false
	}
	ct, ok := p.ctypeVal(tv, "access_channel_type", s)
	if !ok {
		return false
	}
	if ct != ctMemory && ct != ctPort {
		p.errorAt(diag.BadValue, p.pos(tv), s, "use memory or port", "remote buffers are reached through memory or port channels, not %s", ctName(ct))
		return false
	}
	ti := typeIndex(ct)
	ids, ok := p.arr(rb, "remote_buffer_ids", true, s)
	if !ok {
		return false
	}
	for _, in := range ids {
		id, ok := p.intVal(in, "remote_buffer_ids entry", 0, MaxIndex, s)
		if !ok {
			return false
		}
		if id >= int64(len(p.remote[r])) {
			p.errorAt(diag.BadRef, p.pos(in), s, "declare the buffer in the gpu's remote_buffers",
				"remote buffer %d: rank %d declares %d remote buffers", id, r, len(p.remote[r]))
			return false
		}
		if !p.remote[r][id].access[ti] {
			p.errorAt(diag.BadRef, p.pos(in), s, "add the channel type to the buffer's access_channel_types",
				"remote buffer %d of rank %d is not reachable through %s channels", id, r, ctName(ct))
			return false
		}
		tc.remote[ti] = append(tc.remote[ti], int(id))
	}
	return true
}

// bref is one resolved src_buff/dst_buff entry.
type bref struct {
	ref  ir.Ref
	size int64
	pos  ir.Pos
}

func (b bref) remote() bool { return b.ref.Chan >= 0 }

// brefs08 resolves an op's src_buff or dst_buff list. A {type} entry is a
// local buffer; a {buffer_id} entry is the buffer_id-th remote buffer the
// threadblock lists for the op's channel type, reached through: for port
// channels the op's channel_ids entry at the same position (MSCCL++ issues
// the put on that channel); for memory channels (a plain pointer in
// MSCCL++) a memory channel to the buffer's rank: one of the op's
// channel_ids, else one of the threadblock's, else one of the rank's, else
// a data-only channel the importer adds.
func (p *parser) brefs08(o *jnode, key string, ct ctype, opChans []int, r int, tc *tbChans, s subj) ([]bref, bool) {
	list, ok := p.arr(o, key, false, s)
	if !ok {
		return nil, false
	}
	out := make([]bref, 0, len(list))
	for i, e := range list {
		if !p.isObject(e, key+" entry", s) {
			return nil, false
		}
		if e.has("switch_channel_id") {
			p.unsupportedNVLS(e, s, "op addresses a switch (NVLink multicast) buffer")
			return nil, false
		}
		p.checkKeys(e, key+" entry", brefKeys08, s)
		idx, ok1 := p.reqInt(e, "index", 0, math.MaxInt64, s)
		size, ok2 := p.reqInt(e, "size", 0, math.MaxInt64, s)
		if !ok1 || !ok2 {
			return nil, false
		}
		b := bref{size: size, pos: p.pos(e)}
		tn, idn := e.get("type"), e.get("buffer_id")
		switch {
		case tn != nil && idn != nil:
			p.errorAt(diag.BadRef, p.pos(e), s, "give type for a local buffer or buffer_id for a remote one", "%s entry has both type and buffer_id", key)
			return nil, false
		case tn != nil:
			buf, ok := p.bufVal(tn, "type", s)
			if !ok {
				return nil, false
			}
			b.ref = ir.Ref{Buf: buf, Off: idx, Chan: -1}
		case idn != nil:
			if ct != ctMemory && ct != ctPort {
				p.errorAt(diag.BadRef, p.pos(idn), s, "set the op's channel_type to memory or port",
					"%s entry names remote buffer_id but the op has no memory or port channel_type", key)
				return nil, false
			}
			ti := typeIndex(ct)
			id, ok := p.intVal(idn, "buffer_id", 0, MaxIndex, s)
			if !ok {
				return nil, false
			}
			if id >= int64(len(tc.remote[ti])) {
				p.errorAt(diag.BadRef, p.pos(idn), s, "list the buffer in the threadblock's remote_buffer_refs",
					"buffer_id %d: threadblock %d lists %d remote buffers for %s channels", id, s.tb, len(tc.remote[ti]), ctName(ct))
				return nil, false
			}
			rb := p.remote[r][tc.remote[ti][id]]
			var ch int
			if ct == ctPort {
				if i >= len(opChans) {
					p.errorAt(diag.BadChannel, p.pos(e), s, "give one channel_ids entry per remote buffer",
						"%s entry %d is reached through a port channel but the op lists %d channel_ids", key, i, len(opChans))
					return nil, false
				}
				ch = opChans[i]
				if peer := p.rc[r].chans[ch].Peer; peer != rb.rank {
					p.errorAt(diag.BadChannel, p.pos(e), s, "pair each remote buffer with a channel to its rank",
						"%s entry %d is a buffer of rank %d but channel_ids[%d] connects to rank %d", key, i, rb.rank, i, peer)
					return nil, false
				}
			} else {
				if ch, ok = p.memChannel(r, rb.rank, opChans, tc, b.pos, s); !ok {
					return nil, false
				}
			}
			b.ref = ir.Ref{Buf: rb.buf, Off: idx, Chan: ch}
		default:
			p.errorAt(diag.MissingField, p.pos(e), s, "", "%s entry needs type (local) or buffer_id (remote)", key)
			return nil, false
		}
		out = append(out, b)
	}
	return out, true
}

// memChannel picks the IR channel through which rank r reaches rank q's
// memory (see brefs08). The threadblock's and the rank's first memory
// channel to each peer are indexed once, so the cost per ref is constant.
func (p *parser) memChannel(r, q int, opChans []int, tc *tbChans, pos ir.Pos, s subj) (int, bool) {
	chans := p.rc[r].chans
	for _, c := range opChans {
		if chans[c].Peer == q && chans[c].Type == ir.MemoryChannel {
			return c, true
		}
	}
	if tc.firstMem == nil {
		tc.firstMem = map[int]int{}
		for _, k := range tc.lists[0] {
			c := p.irChan(r, 0, k)
			if _, ok := tc.firstMem[chans[c].Peer]; !ok {
				tc.firstMem[chans[c].Peer] = c
			}
		}
	}
	if c, ok := tc.firstMem[q]; ok {
		return c, true
	}
	if p.rc[r].firstMem == nil {
		p.rc[r].firstMem = map[int]int{}
		for c := range chans {
			if _, ok := p.rc[r].firstMem[chans[c].Peer]; !ok && chans[c].Type == ir.MemoryChannel {
				p.rc[r].firstMem[chans[c].Peer] = c
			}
		}
	}
	if c, ok := p.rc[r].firstMem[q]; ok {
		return c, true
	}
	return p.addDataChannel(r, q, pos, s)
}

// op08 maps one v0.8+ op to IR ops (src/core/include/execution_kernel.hpp
// semantics): the fields every op shares (op08Head), then the op's own
// (op08Op.lower).
func (p *parser) op08(o *jnode, r, t, j int, tc *tbChans) ([]ir.Op, bool) {
	x, ok := p.op08Head(o, r, t, j, tc)
	if !ok {
		return nil, false
	}
	return x.lower()
}

// op08Op is one v0.8+ op being mapped: its name, position, channel type,
// channels (channel_ids, as IR channels) and buffer refs.
type op08Op struct {
	p          *parser
	o, nn      *jnode
	s          subj
	name       string
	pos        ir.Pos
	ct         ctype
	opChans    []int
	srcs, dsts []bref
}

// op08Head reads and checks the fields every op shares: name,
// channel_type (unsupported kinds refused), tbg_info, reduce_op,
// channel_ids, src_buff and dst_buff.
func (p *parser) op08Head(o *jnode, r, t, j int, tc *tbChans) (*op08Op, bool) {
	s := subj{r, t, j}
	if !p.isObject(o, "an op", s) {
		return nil, false
	}
	name, nn, ok := p.reqStr(o, "name", s)
	if !ok {
		return nil, false
	}
	pos := p.pos(o)
	ct := ctNone
	if v := o.get("channel_type"); v != nil {
		if ct, ok = p.ctypeVal(v, "channel_type", s); !ok {
			return nil, false
		}
	}
	switch {
	case name == "glres" || name == "gstore" || name == "gstorepkt" || ct == ctNVLS:
		p.unsupportedNVLS(o, s, "op "+name+" uses NVLink multicast (switch channels)")
		return nil, false
	case name == "sem_acquire" || name == "sem_release":
		p.errorAt(diag.Unsupported, pos, s, "order threadblocks of a rank with barrier ops",
			"unsupported: %s acquires or releases a rank-local counting semaphore, which has no IR equivalent", name)
		return nil, false
	case name == "pipeline":
		p.errorAt(diag.Unsupported, pos, s, "flatten the nested pipeline",
			"unsupported: a pipeline op inside a pipeline")
		return nil, false
	}
	p.checkKeys(o, "an op", opKeys08, s)
	if tg := o.get("tbg_info"); tg != nil {
		if !p.isObject(tg, "tbg_info", s) {
			return nil, false
		}
		n, ok := p.reqInt(tg, "tbg_size", 1, MaxIndex, s)
		if !ok {
			return nil, false
		}
		if n > 1 {
			p.errorAt(diag.Unsupported, p.pos(tg), s, "write the op for one threadblock per chunk",
				"unsupported: tbg_info splits one op over %d threadblocks in 16-byte slices of a chunk; the IR addresses whole chunks", n)
			return nil, false
		}
	}
	if ro := o.get("reduce_op"); ro != nil {
		v, ok := p.strVal(ro, "reduce_op", s)
		if !ok {
			return nil, false
		}
		if v != "sum" && p.first("reduce_op") {
			p.warnAt(diag.ImportNote, p.pos(ro), s, "",
				"reduce_op %q is ignored: a schedule reduces with the request's reduction", v)
		}
	}
	var opChans []int
	if ids := o.get("channel_ids"); ids != nil {
		if ids.kind != jArray {
			p.errorAt(diag.BadValue, p.pos(ids), s, "", "channel_ids is %s, want an array", ids.kind)
			return nil, false
		}
		if ct != ctMemory && ct != ctPort {
			p.errorAt(diag.BadValue, p.pos(o), s, "set channel_type to memory or port", "channel_ids needs a memory or port channel_type")
			return nil, false
		}
		ti := typeIndex(ct)
		for _, in := range ids.arr {
			k, ok := p.intVal(in, "channel_ids entry", 0, MaxIndex, s)
			if !ok {
				return nil, false
			}
			if k >= int64(len(tc.lists[ti])) {
				p.errorAt(diag.BadChannel, p.pos(in), s, "list the channel in the threadblock's channels",
					"channel id %d: threadblock %d lists %d %s channels", k, t, len(tc.lists[ti]), ctName(ct))
				return nil, false
			}
			opChans = append(opChans, p.irChan(r, ti, tc.lists[ti][k]))
		}
	}
	srcs, ok1 := p.brefs08(o, "src_buff", ct, opChans, r, tc, s)
	dsts, ok2 := p.brefs08(o, "dst_buff", ct, opChans, r, tc, s)
	if !ok1 || !ok2 {
		return nil, false
	}
	return &op08Op{p: p, o: o, nn: nn, s: s, name: name, pos: pos, ct: ct, opChans: opChans, srcs: srcs, dsts: dsts}, true
}

// shape checks the number and locality of refs: want is a pattern of 'L'
// (local), 'R' (remote) per position; a trailing '*' repeats the last
// letter for any further entries (zero or more).
func (x *op08Op) shape(list []bref, key, want string) bool {
	p, s, name, pos := x.p, x.s, x.name, x.pos
	min := len(want)
	rep := byte(0)
	if min > 0 && want[min-1] == '*' {
		rep = want[min-2]
		min -= 2
	}
	if len(list) < min || (rep == 0 && len(list) != min) {
		p.errorAt(diag.BadCount, pos, s, "", "op %s needs %s %s entries, has %d", name, countWords(min, rep != 0), key, len(list))
		return false
	}
	for i, b := range list {
		w := rep
		if i < min {
			w = want[i]
		}
		if w == 'L' && b.remote() {
			p.errorAt(diag.BadRef, b.pos, s, "use a local buffer (type) here", "%s entry %d of op %s must be a local buffer", key, i, name)
			return false
		}
		if w == 'R' && !b.remote() {
			p.errorAt(diag.BadRef, b.pos, s, "use a remote buffer (buffer_id) here", "%s entry %d of op %s must be a remote buffer", key, i, name)
			return false
		}
	}
	return true
}

// count returns the size MSCCL++ uses (the first source's) and warns once
// when other entries disagree.
func (x *op08Op) count(lists ...[]bref) int64 {
	p, s := x.p, x.s
	c := int64(0)
	if len(lists) > 0 && len(lists[0]) > 0 {
		c = lists[0][0].size
	}
	for _, l := range lists {
		for _, b := range l {
			if b.size != c && p.first("size-mismatch") {
				p.warnAt(diag.BadCount, b.pos, s, "give every buffer of an op one size",
					"size %d differs from the op's first source size %d, which MSCCL++ uses for the whole op", b.size, c)
			}
		}
	}
	return c
}

// brefRefs are the IR refs of list.
func brefRefs(list []bref) []ir.Ref {
	out := make([]ir.Ref, len(list))
	for i, b := range list {
		out[i] = b.ref
	}
	return out
}

// memoryOnly reports whether the op's channels are memory channels, and
// says why it needs them when not.
func (x *op08Op) memoryOnly() bool {
	p, s, name, pos, ct := x.p, x.s, x.name, x.pos, x.ct
	if ct != ctMemory {
		p.errorAt(diag.BadValue, pos, s, "set channel_type to memory",
			"op %s reads or writes peer memory through pointers and needs channel_type memory (is %s)", name, ctName(ct))
		return false
	}
	return true
}

// needChans reports whether the op has channel_ids, and says it needs
// them when not.
func (x *op08Op) needChans() bool {
	p, s, name, pos, opChans := x.p, x.s, x.name, x.pos, x.opChans
	if len(opChans) == 0 {
		p.errorAt(diag.MissingField, pos, s, "", "op %s needs channel_ids", name)
		return false
	}
	return true
}

// lower maps the op by its name.
func (x *op08Op) lower() ([]ir.Op, bool) {
	p, o, nn, s, name, pos, opChans, srcs, dsts := x.p, x.o, x.nn, x.s, x.name, x.pos, x.opChans, x.srcs, x.dsts
	switch name {
	case "nop":
		return []ir.Op{{Code: ir.OpNop, Pos: pos}}, true

	case "barrier":
		return p.barrier(o, "num_threadblocks", pos, s)

	case "signal", "wait", "flush", "rlxsignal", "rlxwait":
		if !x.needChans() {
			return nil, false
		}
		code := map[string]ir.Opcode{"signal": ir.OpSignal, "rlxsignal": ir.OpSignal, "wait": ir.OpWait,
			"rlxwait": ir.OpWait, "flush": ir.OpFlush}[name]
		if (name == "rlxsignal" || name == "rlxwait") && p.first("relaxed") {
			p.warnAt(diag.ImportNote, pos, s, "",
				"%s has relaxed memory order in MSCCL++; the IR's signal and wait are release/acquire, so the imported plan is ordered more strongly than the original", name)
		}
		return []ir.Op{{Code: code, Chans: opChans, Pos: pos}}, true

	case "put", "pws", "pwsf", "ppkt":
		return x.put()

	case "get":
		if !x.shape(srcs, "src_buff", "RR*") || !x.shape(dsts, "dst_buff", "LL*") || !x.memoryOnly() {
			return nil, false
		}
		if len(srcs) != len(dsts) {
			p.errorAt(diag.BadCount, pos, s, "give one dst_buff entry per src_buff entry",
				"op get has %d src_buff for %d dst_buff entries", len(srcs), len(dsts))
			return nil, false
		}
		var ops []ir.Op
		for k := range srcs {
			if srcs[k].ref.Off != dsts[k].ref.Off && p.first("get-swap") {
				p.warnAt(diag.ImportNote, pos, s, "give the remote and local chunk the same index",
					"get reads remote chunk %d into local chunk %d; the MSCCL++ kernel swaps the two offsets (reads remote chunk %d into local chunk %d). Imported as the plan says",
					srcs[k].ref.Off, dsts[k].ref.Off, dsts[k].ref.Off, srcs[k].ref.Off)
			}
			ops = append(ops, ir.Op{Code: ir.OpCopy, Srcs: []ir.Ref{srcs[k].ref}, Dsts: []ir.Ref{dsts[k].ref},
				Count: srcs[k].size, Pos: pos})
		}
		return ops, true

	case "copy", "cpkt", "upkt":
		if !x.shape(srcs, "src_buff", "L") || !x.shape(dsts, "dst_buff", "L") {
			return nil, false
		}
		src, dst := srcs[0].ref, dsts[0].ref
		switch name {
		case "cpkt": // data -> packets
			dst.Packet = true
		case "upkt": // packets in this rank's scratch -> data
			p.scratchOnly([]ir.Ref{src}, name, pos, s)
			src = ir.Ref{Buf: ir.Scratch, Off: src.Off, Chan: -1, Packet: true}
		}
		return []ir.Op{{Code: ir.OpCopy, Srcs: []ir.Ref{src}, Dsts: []ir.Ref{dst}, Count: x.count(srcs, dsts), Pos: pos}}, true

	case "re", "res", "rre", "rres":
		srcWant, dstWant := "LL*", "L"
		switch name {
		case "res":
			dstWant = "LR*"
		case "rre":
			srcWant = "LR*"
		case "rres":
			srcWant, dstWant = "LR*", "LR*"
		}
		if !x.shape(srcs, "src_buff", srcWant) || !x.shape(dsts, "dst_buff", dstWant) {
			return nil, false
		}
		remoteOut := (name == "res" || name == "rres") && len(dsts) > 1
		remoteIn := (name == "rre" || name == "rres") && len(srcs) > 1
		if (remoteOut || remoteIn) && !x.memoryOnly() {
			return nil, false
		}
		return []ir.Op{reduceOp(brefRefs(srcs), brefRefs(dsts), x.count(srcs, dsts[:1]), pos)}, true

	case "rppkt":
		if !x.shape(srcs, "src_buff", "L") || !x.shape(dsts, "dst_buff", "RR*") {
			return nil, false
		}
		p.scratchOnly([]ir.Ref{srcs[0].ref}, name, pos, s)
		src := ir.Ref{Buf: ir.Scratch, Off: srcs[0].ref.Off, Chan: -1, Packet: true}
		to := brefRefs(dsts)
		for i := range to {
			to[i].Packet = true
		}
		return []ir.Op{{Code: ir.OpCopy, Srcs: []ir.Ref{src}, Dsts: to, Count: srcs[0].size, Pos: pos}}, true

	case "respkt", "repkt", "recspkt", "recpkt":
		return x.packetReduce()
	}
	p.errorAt(diag.UnknownOp, p.pos(nn), s,
		"use nop, barrier, put, pws, pwsf, get, copy, signal, wait, flush, re, res, rre, rres, ppkt, rppkt, respkt, cpkt, upkt, repkt, recpkt, recspkt, rlxsignal, rlxwait or pipeline",
		"unknown op %q", name)
	return nil, false
}

// put maps put, pws, pwsf and ppkt: one copy per destination (merged
// while they share a source), then for pws and pwsf on port channels the
// signal (and flush).
func (x *op08Op) put() ([]ir.Op, bool) {
	p, s, name, pos, ct, opChans, srcs, dsts := x.p, x.s, x.name, x.pos, x.ct, x.opChans, x.srcs, x.dsts
	if !x.shape(srcs, "src_buff", "LL*") || !x.shape(dsts, "dst_buff", "RR*") {
		return nil, false
	}
	if len(srcs) != len(dsts) {
		p.errorAt(diag.BadCount, pos, s, "give one src_buff entry per dst_buff entry",
			"op %s has %d src_buff for %d dst_buff entries", name, len(srcs), len(dsts))
		return nil, false
	}
	packet := name == "ppkt"
	var ops []ir.Op
	for k := range dsts {
		src := srcs[k].ref
		size := dsts[k].size
		if packet {
			size = srcs[k].size
		}
		if ct == ctMemory {
			// Memory puts read every source from the first source's buffer.
			src.Buf = srcs[0].ref.Buf
		}
		src.Packet = packet && ct == ctPort
		dst := dsts[k].ref
		dst.Packet = packet
		if len(ops) > 0 && ops[len(ops)-1].Srcs[0] == src && ops[len(ops)-1].Count == size {
			ops[len(ops)-1].Dsts = append(ops[len(ops)-1].Dsts, dst)
			continue
		}
		ops = append(ops, ir.Op{Code: ir.OpCopy, Srcs: []ir.Ref{src}, Dsts: []ir.Ref{dst}, Count: size, Pos: pos})
	}
	if name == "pws" || name == "pwsf" {
		if ct == ctPort {
			if !x.needChans() {
				return nil, false
			}
			ch := opChans[:min(len(opChans), len(dsts))]
			ops = append(ops, ir.Op{Code: ir.OpSignal, Chans: ch, Pos: pos})
			if name == "pwsf" {
				ops = append(ops, ir.Op{Code: ir.OpFlush, Chans: ch, Pos: pos})
			}
		} else if p.first("pws-memory") {
			p.warnAt(diag.ImportNote, pos, s, "use put followed by signal",
				"%s on memory channels: MSCCL++ puts without signalling (its kernel ignores the signal on memory channels); imported as a put", name)
		}
	}
	return ops, true
}

// packetReduce maps respkt, repkt, recspkt and recpkt: MSCCL++ sums the
// packets (read from this rank's scratch) first, then adds the local
// source.
func (x *op08Op) packetReduce() ([]ir.Op, bool) {
	p, s, name, pos, srcs, dsts := x.p, x.s, x.name, x.pos, x.srcs, x.dsts
	dstWant := map[string]string{"respkt": "LR*", "repkt": "L", "recspkt": "LLR*", "recpkt": "LL"}[name]
	if !x.shape(srcs, "src_buff", "LL*") || !x.shape(dsts, "dst_buff", dstWant) {
		return nil, false
	}
	nLocal := map[string]int{"respkt": 1, "repkt": 1, "recspkt": 2, "recpkt": 2}[name]
	if len(dsts) > nLocal && !x.memoryOnly() {
		return nil, false
	}
	// MSCCL++ sums the packets (read from this rank's scratch) first,
	// then adds the local source.
	var in []ir.Ref
	for _, b := range srcs[1:] {
		in = append(in, ir.Ref{Buf: ir.Scratch, Off: b.ref.Off, Chan: -1, Packet: true})
	}
	p.scratchOnly(brefRefs(srcs[1:]), name, pos, s)
	in = append(in, srcs[0].ref)
	out := brefRefs(dsts)
	for i := 1; i < len(out); i++ {
		out[i].Packet = true
	}
	return []ir.Op{reduceOp(in, out, srcs[0].size, pos)}, true
}

func countWords(n int, more bool) string {
	if more {
		return "at least " + strconv.Itoa(n)
	}
	return strconv.Itoa(n)
}
