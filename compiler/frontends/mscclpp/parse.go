package mscclpp

import (
	"fmt"
	"math"
	"strconv"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importer"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Dialect is the execution-plan dialect Parse detected.
type Dialect uint8

const (
	// V07 is the camelCase dialect of MSCCL++ v0.7.
	V07 Dialect = iota + 1
	// V08 is the snake_case dialect of MSCCL++ v0.8 and later.
	V08
)

func (d Dialect) String() string {
	switch d {
	case V07:
		return "v0.7"
	case V08:
		return "v0.8+"
	}
	return "unknown"
}

// Parse imports the MSCCL++ execution plan in data (read from filename,
// which is used only in diagnostics and Program.File) into a primitive-level
// ir.Program. The dialect (v0.7 or v0.8+) is detected from the keys of the
// first gpu (inputChunks or input_chunks) and recorded in
// Program.Meta["mscclpp.dialect"].
//
// It returns the program and the diagnostics found, sorted by position.
// When any diagnostic is an error the program is nil. Parse never panics;
// inputs over MaxInputBytes, MaxDepth, MaxOps or MaxChannels fail with
// TS0011.
func Parse(filename string, data []byte) (*ir.Program, []diag.Diagnostic) {
	p := &parser{file: filename, data: data, once: map[string]bool{}}
	if len(data) > inputLimit {
		p.errorAt(diag.TooLarge, ir.Pos{Line: 1, Col: 1}, noSubj, "",
			"input is %d bytes, over the limit of %d", len(data), inputLimit)
		return nil, p.result()
	}
	p.li = importer.NewLineIndex(data)
	root, jerr := buildTree(data, MaxDepth)
	if jerr != nil {
		code, hint := diag.Syntax, ""
		switch {
		case jerr.tooLarge:
			code = diag.TooLarge
		case jerr.dupKey:
			code, hint = diag.BadValue, "give each key once"
		}
		p.errorAt(code, p.li.Pos(jerr.off), noSubj, hint, "malformed JSON: %s", jerr.msg)
		return nil, p.result()
	}
	prog := p.plan(root)
	if p.diags.HasErrors() {
		return nil, p.result()
	}
	return prog, p.result()
}

// subj names the rank, threadblock and op a diagnostic is about.
type subj struct{ rank, tb, step int }

var noSubj = subj{-1, -1, -1}

// parser holds the state of one Parse call.
type parser struct {
	file  string
	data  []byte
	li    importer.LineIndex
	diags diag.List
	once  map[string]bool // one-time warnings already given

	dialect Dialect
	n       int
	coll    ir.Collective
	proto   ir.Protocol
	ranks   []ir.Rank
	rc      []rankChans
	nops    int
	nchans  int
	nvls    bool // an NVLS use was reported
	stop    bool // a size limit was crossed: stop reading

	// v0.8
	remote     [][]remoteBuf // per rank: remote_buffers
	nsems      []int         // per rank: semaphores declared
	sliceBytes int64         // from a whole-program pipeline
	pipeChunks int64         // iter_context.num_chunks of a whole-program pipeline (0: none)
	synth      map[[2]int]int
}

func (p *parser) result() []diag.Diagnostic { return importer.Result(&p.diags, p.file) }

func (p *parser) add(sev diag.Severity, code diag.Code, pos ir.Pos, s subj, hint, format string, args ...any) {
	importer.Add(&p.diags, p.file, sev, code, pos, s.rank, s.tb, s.step, hint, format, args...)
}

func (p *parser) errorAt(code diag.Code, pos ir.Pos, s subj, hint, format string, args ...any) {
	p.add(diag.Error, code, pos, s, hint, format, args...)
}

func (p *parser) warnAt(code diag.Code, pos ir.Pos, s subj, hint, format string, args ...any) {
	p.add(diag.Warning, code, pos, s, hint, format, args...)
}

func (p *parser) noteAt(code diag.Code, pos ir.Pos, s subj, hint, format string, args ...any) {
	p.add(diag.Note, code, pos, s, hint, format, args...)
}

// first reports whether key has not been seen yet (for one-time notes).
func (p *parser) first(key string) bool {
	if p.once[key] {
		return false
	}
	p.once[key] = true
	return true
}

func (p *parser) pos(n *jnode) ir.Pos { return p.li.Pos(n.off) }

// unsupportedNVLS reports the first NVLS use of the plan.
func (p *parser) unsupportedNVLS(n *jnode, s subj, what string) {
	if p.nvls {
		return
	}
	p.nvls = true
	p.errorAt(diag.Unsupported, p.pos(n), s,
		"use a plan without NVLS (switch/multicast) channels; Theseus does not run NVLink SHARP",
		"unsupported: nvls: %s", what)
}

// checkKeys warns once per kind and key about members the format does not
// define (MSCCL++ ignores them too).
func (p *parser) checkKeys(obj *jnode, kind string, known []string, s subj) {
	for _, m := range obj.mem {
		ok := false
		for _, k := range known {
			if k == m.key {
				ok = true
				break
			}
		}
		if !ok && p.first("key:"+kind+":"+m.key) {
			p.warnAt(diag.UnknownField, p.li.Pos(m.keyOff), s, "",
				"unknown key %q in %s is ignored", m.key, kind)
		}
	}
}

// isObject checks that n is an object.
func (p *parser) isObject(n *jnode, what string, s subj) bool {
	if n.kind != jObject {
		p.errorAt(diag.BadValue, p.pos(n), s, "", "%s is %s, want an object", what, n.kind)
		return false
	}
	return true
}

// member returns obj[key]; a missing required member is TS0004.
func (p *parser) member(obj *jnode, key string, required bool, s subj) *jnode {
	v := obj.get(key)
	if v == nil && required {
		p.errorAt(diag.MissingField, p.pos(obj), s, "", "missing key %q", key)
	}
	return v
}

// intVal reads an integer in [lo, hi].
func (p *parser) intVal(n *jnode, what string, lo, hi int64, s subj) (int64, bool) {
	if n.kind != jNumber {
		p.errorAt(diag.BadValue, p.pos(n), s, "", "%s is %s, want an integer", what, n.kind)
		return 0, false
	}
	v, err := strconv.ParseInt(n.str, 10, 64)
	if err != nil {
		p.errorAt(diag.BadValue, p.pos(n), s, "", "%s is %s, want an integer in [%d, %d]", what, n.str, lo, hi)
		return 0, false
	}
	if v < lo || v > hi {
		p.errorAt(diag.BadValue, p.pos(n), s, "", "%s is %d, outside [%d, %d]", what, v, lo, hi)
		return 0, false
	}
	return v, true
}

func (p *parser) reqInt(obj *jnode, key string, lo, hi int64, s subj) (int64, bool) {
	v := p.member(obj, key, true, s)
	if v == nil {
		return 0, false
	}
	return p.intVal(v, key, lo, hi, s)
}

// optInt returns def when key is absent.
func (p *parser) optInt(obj *jnode, key string, lo, hi, def int64, s subj) (int64, bool) {
	v := obj.get(key)
	if v == nil {
		return def, true
	}
	return p.intVal(v, key, lo, hi, s)
}

func (p *parser) strVal(n *jnode, what string, s subj) (string, bool) {
	if n.kind != jString {
		p.errorAt(diag.BadValue, p.pos(n), s, "", "%s is %s, want a string", what, n.kind)
		return "", false
	}
	return n.str, true
}

func (p *parser) reqStr(obj *jnode, key string, s subj) (string, *jnode, bool) {
	v := p.member(obj, key, true, s)
	if v == nil {
		return "", nil, false
	}
	str, ok := p.strVal(v, key, s)
	return str, v, ok
}

func (p *parser) boolVal(n *jnode, what string, s subj) (bool, bool) {
	if n.kind != jBool {
		p.errorAt(diag.BadValue, p.pos(n), s, "", "%s is %s, want true or false", what, n.kind)
		return false, false
	}
	return n.b, true
}

// arr returns obj[key] as a list; an absent optional key is an empty list.
func (p *parser) arr(obj *jnode, key string, required bool, s subj) ([]*jnode, bool) {
	v := p.member(obj, key, required, s)
	if v == nil {
		return nil, !required
	}
	if v.kind != jArray {
		p.errorAt(diag.BadValue, p.pos(v), s, "", "%s is %s, want an array", key, v.kind)
		return nil, false
	}
	return v.arr, true
}

// bufVal reads a buffer name: i, o or s.
func (p *parser) bufVal(n *jnode, what string, s subj) (ir.BufKind, bool) {
	str, ok := p.strVal(n, what, s)
	if !ok {
		return 0, false
	}
	if b, ok := importer.Buf(str); ok {
		return b, true
	}
	p.errorAt(diag.BadValue, p.pos(n), s, "use i, o or s", "%s is %q, not a buffer", what, str)
	return 0, false
}

func (p *parser) reqBuf(obj *jnode, key string, s subj) (ir.BufKind, bool) {
	v := p.member(obj, key, true, s)
	if v == nil {
		return 0, false
	}
	return p.bufVal(v, key, s)
}

// ctype is a channel type as a plan names it.
type ctype uint8

const (
	ctNone ctype = iota
	ctMemory
	ctPort
	ctNVLS
)

// ctypeVal reads a channel type: memory (v0.7 also sm), port (v0.7 also
// proxy), none, and nvls (v0.7) or switch (v0.8+).
func (p *parser) ctypeVal(n *jnode, what string, s subj) (ctype, bool) {
	str, ok := p.strVal(n, what, s)
	if !ok {
		return 0, false
	}
	switch str {
	case "memory":
		return ctMemory, true
	case "port":
		return ctPort, true
	case "none":
		return ctNone, true
	}
	if p.dialect == V07 {
		switch str {
		case "sm":
			return ctMemory, true
		case "proxy":
			return ctPort, true
		case "nvls":
			return ctNVLS, true
		}
	} else if str == "switch" {
		return ctNVLS, true
	}
	want := "memory, port, none or switch"
	if p.dialect == V07 {
		want = "sm, memory, proxy, port, none or nvls"
	}
	p.errorAt(diag.BadValue, p.pos(n), s, "use "+want, "%s is %q, not a channel type", what, str)
	return 0, false
}

// typeIndex is the index of a memory or port channel type in per-type
// tables.
func typeIndex(c ctype) int {
	if c == ctPort {
		return 1
	}
	return 0
}

func irType(t int) ir.ChannelType {
	if t == 1 {
		return ir.PortChannel
	}
	return ir.MemoryChannel
}

var (
	topKeys07 = []string{"name", "collective", "protocol", "inplace", "num_threads_per_block", "min_message_size",
		"max_message_size", "gpus"}
	topKeys08 = []string{"name", "collective", "protocol", "inplace", "reuse_resources", "num_threads_per_block",
		"use_double_scratch_buffer", "buffer_alignment", "min_message_size", "max_message_size", "gpus"}
)

// detect tells the dialect from the first gpu's chunk keys.
func (p *parser) detect(root *jnode, gpus []*jnode) bool {
	if len(gpus) == 0 || gpus[0].kind != jObject {
		return false
	}
	g := gpus[0]
	camel, snake := g.has("inputChunks"), g.has("input_chunks")
	switch {
	case camel && !snake:
		p.dialect = V07
	case snake && !camel:
		p.dialect = V08
	default:
		p.errorAt(diag.BadVersion, p.pos(g), subj{0, -1, -1},
			"MSCCL++ v0.7 plans say inputChunks, v0.8 and later input_chunks",
			"cannot tell the plan dialect: the first gpu has %s", map[bool]string{true: "both inputChunks and input_chunks", false: "neither inputChunks nor input_chunks"}[camel])
		return false
	}
	return true
}

// plan reads the whole plan.
func (p *parser) plan(root *jnode) *ir.Program {
	if !p.isObject(root, "the plan", noSubj) {
		return nil
	}
	gpus, ok := p.arr(root, "gpus", true, noSubj)
	if !ok {
		return nil
	}
	if len(gpus) == 0 {
		p.errorAt(diag.BadRank, p.pos(root.get("gpus")), noSubj, "list one gpu per rank", "gpus is empty")
		return nil
	}
	if len(gpus) > ir.MaxRanks {
		p.errorAt(diag.TooLarge, p.pos(root.get("gpus")), noSubj, "", "%d gpus, over the limit of %d", len(gpus), ir.MaxRanks)
		return nil
	}
	if !p.detect(root, gpus) {
		return nil
	}
	p.n = len(gpus)
	if p.dialect == V07 {
		p.checkKeys(root, "the plan", topKeys07, noSubj)
	} else {
		p.checkKeys(root, "the plan", topKeys08, noSubj)
	}
	prog := &ir.Program{Root: -1, NRanks: p.n, File: p.file, Pos: p.pos(root),
		Meta: map[string]string{"format": "mscclpp-json", "mscclpp.dialect": p.dialect.String()}}
	if !p.header(root, prog) {
		return nil
	}

	// Order the gpus by id.
	byID := make([]*jnode, p.n)
	for i, g := range gpus {
		if !p.isObject(g, "a gpu", subj{i, -1, -1}) {
			return nil
		}
		id, ok := p.reqInt(g, "id", 0, MaxIndex, subj{i, -1, -1})
		if !ok {
			return nil
		}
		if id >= int64(p.n) {
			p.errorAt(diag.DuplicateID, p.pos(g.get("id")), subj{int(id), -1, -1}, "number gpus 0 .. len(gpus)-1",
				"gpu id %d is not below the %d gpus of the plan", id, p.n)
			return nil
		}
		if byID[id] != nil {
			p.errorAt(diag.DuplicateID, p.pos(g.get("id")), subj{int(id), -1, -1}, "give each gpu its own id",
				"gpu id %d repeated (first at line %d)", id, p.pos(byID[id]).Line)
			return nil
		}
		if p.dialect == V08 && int(id) != i {
			p.errorAt(diag.DuplicateID, p.pos(g.get("id")), subj{int(id), -1, -1}, "list the gpus in id order",
				"gpu at position %d has id %d: MSCCL++ v0.8+ reads gpus[rank] and requires its id to be rank", i, id)
			return nil
		}
		byID[id] = g
	}

	p.ranks = make([]ir.Rank, p.n)
	p.rc = make([]rankChans, p.n)
	// Pass 1: buffers, channels, remote buffers.
	for r, g := range byID {
		if p.dialect == V07 {
			p.gpuHeader07(g, r)
		} else {
			p.gpuHeader08(g, r)
		}
	}
	if p.diags.HasErrors() || p.stop {
		return nil
	}
	p.buildChannels()
	if p.diags.HasErrors() || p.stop {
		return nil
	}
	// Pass 2: threadblocks and ops.
	if p.dialect == V08 {
		if !p.pipelineCheck(byID) {
			return nil
		}
	}
	for r, g := range byID {
		if p.stop {
			return nil
		}
		p.threadblocks(g, r)
	}
	if p.diags.HasErrors() || p.stop {
		return nil
	}
	for r := range p.ranks {
		p.ranks[r].Channels = p.rc[r].chans
	}
	prog.Ranks = p.ranks
	prog.SliceBytes = p.sliceBytes
	if prog.SliceBytes == 0 {
		prog.SliceBytes = Unsliced
	}
	if p.coll.Rooted() {
		prog.Root = importer.InferRoot(prog, &p.diags, p.file, prog.Pos)
	}
	prog.ChunksPerBlock = p.geometry(prog, byID)
	return prog
}

// header reads the top-level fields.
func (p *parser) header(root *jnode, prog *ir.Program) bool {
	ok := true
	need := func(b bool) {
		if !b {
			ok = false
		}
	}
	if name, _, good := p.reqStr(root, "name", noSubj); good {
		prog.Name = name
	} else {
		ok = false
	}
	if c, n, good := p.reqStr(root, "collective", noSubj); good {
		coll, err := ir.ParseCollective(c)
		if err != nil {
			p.errorAt(diag.UnknownCollective, p.pos(n), noSubj, "", "%v", err)
			ok = false
		}
		p.coll = coll
		prog.Collective = coll
	} else {
		ok = false
	}
	if proto, n, good := p.reqStr(root, "protocol", noSubj); good {
		pr, mapped, known := importer.Protocol(proto)
		switch {
		case !known:
			p.errorAt(diag.BadValue, p.pos(n), noSubj, "use Simple or LL", "unknown protocol %q", proto)
			ok = false
		case mapped:
			p.warnAt(diag.ProtocolMapped, p.pos(n), noSubj, "",
				"protocol LL128 is not supported; the plan runs with the Simple protocol")
		}
		p.proto = pr
		prog.Protocol = p.proto
	} else {
		ok = false
	}
	if v := p.member(root, "inplace", true, noSubj); v != nil {
		b, good := p.boolVal(v, "inplace", noSubj)
		need(good)
		prog.InPlace, prog.OutOfPlace = b, !b
	} else {
		ok = false
	}
	nt, good := p.optInt(root, "num_threads_per_block", 1, MaxIndex, 1024, noSubj)
	need(good)
	prog.NumThreads = int(nt)

	minB, good := p.u64(root, "min_message_size", 0)
	need(good)
	maxB, good := p.u64(root, "max_message_size", math.MaxUint64)
	need(good)
	if good {
		prog.MinBytes, prog.MaxBytes, good = p.window(root, minB, maxB)
		need(good)
	}

	if p.dialect == V08 {
		if v := root.get("reuse_resources"); v != nil {
			b, good := p.boolVal(v, "reuse_resources", noSubj)
			need(good)
			if b {
				prog.Meta["mscclpp.reuse_resources"] = "true"
				p.noteAt(diag.ImportNote, p.pos(v), noSubj, "",
					"reuse_resources: MSCCL++ caps scratch at 64 MiB and wraps scratch offsets; Theseus sizes scratch per request, so scratch chunks keep their indices")
			}
		}
		if v := root.get("use_double_scratch_buffer"); v != nil {
			b, good := p.boolVal(v, "use_double_scratch_buffer", noSubj)
			need(good)
			if b {
				prog.Meta["mscclpp.double_scratch"] = "true"
				if p.proto == ir.Simple {
					p.warnAt(diag.ImportNote, p.pos(v), noSubj, "",
						"use_double_scratch_buffer: MSCCL++ alternates scratch halves between launches; the IR alternates them only for LL, so a Simple plan that relies on it is checked without it (races across launches are TS0206)")
				}
			}
		}
		if v := root.get("buffer_alignment"); v != nil {
			a, good := p.intVal(v, "buffer_alignment", 1, MaxIndex, noSubj)
			need(good)
			if good && a != 16 {
				p.noteAt(diag.ImportNote, p.pos(v), noSubj, "",
					"buffer_alignment=%d only changes where MSCCL++ puts chunk boundaries; Theseus chunks align to 16 bytes (ir.md §2)", a)
			}
		}
	}
	return ok
}

// u64 reads an optional unsigned 64-bit byte count.
func (p *parser) u64(obj *jnode, key string, def uint64) (uint64, bool) {
	v := obj.get(key)
	if v == nil {
		return def, true
	}
	if v.kind == jNumber {
		if u, err := strconv.ParseUint(v.str, 10, 64); err == nil {
			return u, true
		}
	}
	p.errorAt(diag.BadValue, p.pos(v), noSubj, "write a byte count in [0, 2^64-1]", "%s is not an unsigned 64-bit integer", key)
	return 0, false
}

// window maps MSCCL++'s message-size bounds onto the IR's inclusive
// [MinBytes, MaxBytes] (MaxBytes 0 = unlimited). The v0.7 NCCL shim selects
// a plan for min <= size < max; v0.8+ executors accept min <= size <= max.
// MSCCL++'s default max (2^64-1) and any max over 2^63-1 mean unlimited.
func (p *parser) window(root *jnode, minB, maxB uint64) (int64, int64, bool) {
	if minB > math.MaxInt64 {
		p.errorAt(diag.BadValue, p.pos(root.get("min_message_size")), noSubj, "", "min_message_size %d is over 2^63-1", minB)
		return 0, 0, false
	}
	if maxB > math.MaxInt64 {
		if maxB != math.MaxUint64 {
			p.noteAt(diag.ImportNote, p.pos(root.get("max_message_size")), noSubj, "",
				"max_message_size %d is over 2^63-1: taken as unlimited", maxB)
		}
		return int64(minB), 0, true
	}
	hi := int64(maxB)
	if p.dialect == V07 {
		hi-- // exclusive bound
	}
	if hi < 1 {
		p.errorAt(diag.BadWindow, p.pos(root.get("max_message_size")), noSubj, "",
			"max_message_size %d admits no message size", maxB)
		return 0, 0, false
	}
	return int64(minB), hi, true
}

// geometry derives ChunksPerBlock from the declared chunk counts. An
// MSCCL++ chunk is inputSize/inputChunks bytes (outputSize/outputChunks
// when a rank has no input chunks), and every rank's chunks have one size;
// with B blocks in a buffer (ir.Blocks) that is C = chunks/B.
func (p *parser) geometry(prog *ir.Program, gpus []*jnode) int64 {
	if prog.Collective == ir.Custom {
		return 1
	}
	var C int64
	cRank := -1
	for r := range prog.Ranks {
		s := subj{r, -1, -1}
		pos := p.pos(gpus[r])
		in, out := prog.Ranks[r].Chunks[ir.Input], prog.Ranks[r].Chunks[ir.Output]
		bi := ir.Blocks(prog.Collective, ir.Input, p.n, r, prog.Root)
		bo := ir.Blocks(prog.Collective, ir.Output, p.n, r, prog.Root)
		// perBlock is the chunks per block of a buffer of n chunks and b
		// blocks; buf names it in diagnostics.
		perBlock := func(n, b int64, buf string) (int64, bool) {
			if b <= 0 {
				p.errorAt(diag.BadGeometry, pos, s, fmt.Sprintf("declare 0 %s chunks on this rank", buf),
					"rank %d declares %d %s chunks but a %s gives it no %s", r, n, buf, prog.Collective, buf)
				return 0, false
			}
			if n%b != 0 {
				p.errorAt(diag.BadGeometry, pos, s, fmt.Sprintf("declare a multiple of %d %s chunks", b, buf),
					"rank %d declares %d %s chunks, not a multiple of the %d blocks a %s %s holds", r, n, buf, b, prog.Collective, buf)
				return 0, false
			}
			return n / b, true
		}
		var c int64
		switch {
		case in > 0:
			var ok bool
			if c, ok = perBlock(in, bi, "input"); !ok {
				return 1
			}
		case out > 0:
			var ok bool
			if c, ok = perBlock(out, bo, "output"); !ok {
				return 1
			}
		default:
			p.errorAt(diag.BadGeometry, pos, s, "declare the input or output chunks",
				"rank %d declares neither input nor output chunks (MSCCL++ sizes chunks from one of them)", r)
			return 1
		}
		if in > 0 && out > 0 && out != bo*c {
			p.errorAt(diag.BadGeometry, pos, s, "declare input and output chunks of one size",
				"%d input chunks make chunks of count/%d elements, but %d output chunks over %d blocks make count/%d (MSCCL++ requires one chunk size)",
				in, c, out, bo, out/max(bo, 1))
			return 1
		}
		if C == 0 {
			C, cRank = c, r
		} else if c != C {
			p.errorAt(diag.BadGeometry, pos, s, "give every rank chunks of one size",
				"rank %d cuts a block into %d chunks but rank %d into %d", r, c, cRank, C)
			return 1
		}
	}
	return C
}
