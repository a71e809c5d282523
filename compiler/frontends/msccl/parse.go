package msccl

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importer"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Parse imports the MSCCL XML algorithm in data (read from filename, which
// is used only in diagnostics and Program.File) into a transfer-level
// ir.Program.
//
// It returns the program and the diagnostics found, sorted by position.
// When any diagnostic is an error the program is nil. Warnings and notes
// (LL128 mapped to Simple, an ignored redop, an old file without
// outofplace, ...) come with a usable program. Parse never panics; inputs
// over MaxInputBytes, MaxSteps or MaxThreadblocks fail with TS0011.
func Parse(filename string, data []byte) (*ir.Program, []diag.Diagnostic) {
	p := &parser{file: filename, data: data}
	if len(data) > inputLimit {
		p.errorAt(diag.TooLarge, ir.Pos{Line: 1, Col: 1}, -1, -1, -1, "",
			"input is %d bytes, over the limit of %d", len(data), inputLimit)
		return nil, p.result()
	}
	p.li = importer.NewLineIndex(data)
	doc := p.readTree()
	if doc == nil || p.diags.HasErrors() {
		return nil, p.result()
	}
	algos := doc.children("algo")
	if len(algos) == 0 {
		p.errorAt(diag.MissingField, ir.Pos{Line: 1, Col: 1}, -1, -1, -1,
			"an MSCCL algorithm file holds one <algo> element", "no <algo> element")
		return nil, p.result()
	}
	for _, a := range algos[1:] {
		p.errorAt(diag.Syntax, p.li.Pos(a.off), -1, -1, -1, "split the algorithms into one file each",
			"a second <algo> element (MSCCL reads only the first)")
	}
	prog := p.algo(algos[0])
	if p.diags.HasErrors() {
		return nil, p.result()
	}
	return prog, p.result()
}

// parser holds the state of one Parse call.
type parser struct {
	file  string
	data  []byte
	li    importer.LineIndex
	diags diag.List
}

func (p *parser) result() []diag.Diagnostic { return importer.Result(&p.diags, p.file) }

func (p *parser) add(sev diag.Severity, code diag.Code, pos ir.Pos, rank, tb, step int, hint, format string, args ...any) {
	importer.Add(&p.diags, p.file, sev, code, pos, rank, tb, step, hint, format, args...)
}

func (p *parser) errorAt(code diag.Code, pos ir.Pos, rank, tb, step int, hint, format string, args ...any) {
	p.add(diag.Error, code, pos, rank, tb, step, hint, format, args...)
}

func (p *parser) warnAt(code diag.Code, pos ir.Pos, rank, tb, step int, hint, format string, args ...any) {
	p.add(diag.Warning, code, pos, rank, tb, step, hint, format, args...)
}

func (p *parser) noteAt(code diag.Code, pos ir.Pos, rank, tb, step int, hint, format string, args ...any) {
	p.add(diag.Note, code, pos, rank, tb, step, hint, format, args...)
}

// subj names the rank, threadblock and step a diagnostic is about (-1:
// none).
type subj struct{ rank, tb, step int }

var noSubj = subj{-1, -1, -1}

// The attributes each element may carry.
var (
	algoAttrs = []string{"name", "proto", "nchannels", "nchunksperloop", "ngpus", "coll", "inplace", "outofplace",
		"minBytes", "maxBytes", "redop", "nthreads"}
	gpuAttrs  = []string{"id", "i_chunks", "o_chunks", "s_chunks"}
	tbAttrs   = []string{"id", "send", "recv", "chan"}
	stepAttrs = []string{"s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep"}
)

// checkAttrs reports attributes the element does not define (a warning:
// MSCCL ignores them) and repeated attributes (an error).
func (p *parser) checkAttrs(e *xelem, known []string, s subj) {
	seen := map[string]bool{}
	for _, a := range e.attrs {
		pos := p.li.Pos(a.off)
		if seen[a.name] {
			p.errorAt(diag.BadValue, pos, s.rank, s.tb, s.step, "give each attribute once",
				"attribute %s repeated on <%s>", a.name, e.name)
			continue
		}
		seen[a.name] = true
		ok := false
		for _, k := range known {
			if k == a.name {
				ok = true
				break
			}
		}
		if !ok {
			p.warnAt(diag.UnknownField, pos, s.rank, s.tb, s.step, "",
				"unknown attribute %s on <%s> is ignored", a.name, e.name)
		}
	}
}

// str returns a required string attribute.
func (p *parser) str(e *xelem, name string, s subj) (string, xattr, bool) {
	a, ok := e.attr(name)
	if !ok {
		p.errorAt(diag.MissingField, p.li.Pos(e.off), s.rank, s.tb, s.step, "",
			"<%s> lacks the %s attribute", e.name, name)
		return "", a, false
	}
	return a.value, a, true
}

// integer returns a required integer attribute in [lo, hi].
func (p *parser) integer(e *xelem, name string, lo, hi int64, s subj) (int64, bool) {
	v, present, ok := p.optInteger(e, name, lo, hi, s)
	if !present {
		p.errorAt(diag.MissingField, p.li.Pos(e.off), s.rank, s.tb, s.step, "",
			"<%s> lacks the %s attribute", e.name, name)
	}
	return v, present && ok
}

// optInteger returns an optional integer attribute in [lo, hi]: present
// says whether it is there, ok whether it is valid.
func (p *parser) optInteger(e *xelem, name string, lo, hi int64, s subj) (v int64, present, ok bool) {
	a, present := e.attr(name)
	if !present {
		return 0, false, false
	}
	v, err := strconv.ParseInt(strings.TrimSpace(a.value), 10, 64)
	if err != nil {
		p.errorAt(diag.BadValue, p.li.Pos(a.off), s.rank, s.tb, s.step, "write a decimal integer",
			"%s=%q on <%s> is not an integer in [%d, %d]", name, a.value, e.name, lo, hi)
		return 0, true, false
	}
	if v < lo || v > hi {
		code := diag.BadValue
		if name == "ngpus" && v > hi {
			code = diag.TooLarge
		}
		p.errorAt(code, p.li.Pos(a.off), s.rank, s.tb, s.step, "",
			"%s=%d on <%s> is outside [%d, %d]", name, v, e.name, lo, hi)
		return v, true, false
	}
	return v, true, true
}

// sizeAttr reads an optional message-size attribute (bytes, >= 0); values
// over 2^63-1 are returned as math.MaxInt64 with big set.
func (p *parser) sizeAttr(e *xelem, name string) (v int64, present, big, ok bool) {
	a, present := e.attr(name)
	if !present {
		return 0, false, false, true
	}
	t := strings.TrimSpace(a.value)
	if u, err := strconv.ParseUint(t, 10, 64); err == nil {
		if u > math.MaxInt64 {
			return math.MaxInt64, true, true, true
		}
		return int64(u), true, false, true
	}
	p.errorAt(diag.BadValue, p.li.Pos(a.off), -1, -1, -1, "write a byte count, 0 or more",
		"%s=%q on <algo> is not a non-negative integer", name, a.value)
	return 0, true, false, false
}

// flag reads a required 0/1 attribute.
func (p *parser) flag(e *xelem, name string, s subj) (bool, bool) {
	v, ok := p.integer(e, name, 0, 1, s)
	return v == 1, ok
}

// algoHeader is what <algo> says.
type algoHeader struct {
	name           string
	proto          ir.Protocol
	nchannels      int64
	nchunksperloop int64
	ngpus          int
	coll           ir.Collective
	inplace        bool
	outofplace     bool
	minBytes       int64
	maxBytes       int64
	nthreads       int
}

func (p *parser) algo(e *xelem) *ir.Program {
	p.checkAttrs(e, algoAttrs, noSubj)
	pos := p.li.Pos(e.off)
	var h algoHeader
	okAll := true
	need := func(ok bool) {
		if !ok {
			okAll = false
		}
	}

	if a, ok := e.attr("name"); ok {
		h.name = a.value
	} else {
		base := filepath.Base(p.file)
		h.name = strings.TrimSuffix(base, filepath.Ext(base))
		p.noteAt(diag.ImportNote, pos, -1, -1, -1, "", "<algo> has no name; using %q", h.name)
	}

	if v, a, ok := p.str(e, "proto", noSubj); ok {
		proto, mapped, known := importer.Protocol(v)
		switch {
		case !known:
			p.errorAt(diag.BadValue, p.li.Pos(a.off), -1, -1, -1, "use Simple, LL or LL128",
				"unknown proto %q", v)
			okAll = false
		case mapped:
			p.warnAt(diag.ProtocolMapped, p.li.Pos(a.off), -1, -1, -1, "",
				"proto LL128 is not supported; the algorithm runs with the Simple protocol")
		}
		h.proto = proto
	} else {
		okAll = false
	}

	var ok bool
	h.nchannels, ok = p.integer(e, "nchannels", 0, MaxIndex, noSubj)
	need(ok)
	h.nchunksperloop, ok = p.integer(e, "nchunksperloop", 1, math.MaxInt64, noSubj)
	need(ok)
	ng, ok := p.integer(e, "ngpus", 1, ir.MaxRanks, noSubj)
	need(ok)
	h.ngpus = int(ng)

	if v, a, ok := p.str(e, "coll", noSubj); ok {
		c, ok := p.collective(v, a)
		need(ok)
		h.coll = c
	} else {
		okAll = false
	}

	h.inplace, ok = p.flag(e, "inplace", noSubj)
	need(ok)
	if v, present, ok := p.optInteger(e, "outofplace", 0, 1, noSubj); present {
		need(ok)
		h.outofplace = v == 1
	} else {
		h.outofplace = !h.inplace
		p.noteAt(diag.ImportNote, pos, -1, -1, -1, "add outofplace=\"0\" or \"1\" to silence this",
			"old-format <algo> without outofplace: taken to support only the %s arrangement", map[bool]string{true: "in-place", false: "out-of-place"}[h.inplace])
	}

	minB, _, minBig, ok := p.sizeAttr(e, "minBytes")
	need(ok)
	if minBig {
		a, _ := e.attr("minBytes")
		p.errorAt(diag.BadValue, p.li.Pos(a.off), -1, -1, -1, "", "minBytes=%s is over 2^63-1", a.value)
		okAll = false
	}
	maxB, _, maxBig, ok := p.sizeAttr(e, "maxBytes")
	need(ok)
	if maxBig {
		a, _ := e.attr("maxBytes")
		p.noteAt(diag.ImportNote, p.li.Pos(a.off), -1, -1, -1, "", "maxBytes=%s is over 2^63-1: taken as unlimited", a.value)
		maxB = 0
	}
	h.minBytes, h.maxBytes = minB, maxB

	if a, ok := e.attr("redop"); ok {
		p.noteAt(diag.ImportNote, p.li.Pos(a.off), -1, -1, -1, "remove the attribute to silence this",
			"redop=%q is ignored: a schedule runs with the request's reduction (MSCCL ignores it too)", a.value)
	}
	if v, present, ok := p.optInteger(e, "nthreads", 0, MaxIndex, noSubj); present && ok {
		h.nthreads = int(v)
		a, _ := e.attr("nthreads")
		p.noteAt(diag.ImportNote, p.li.Pos(a.off), -1, -1, -1, "",
			"old-format nthreads=%d is taken as the threads per threadblock", v)
	} else if present {
		okAll = false
	}
	if !okAll {
		return nil
	}

	ranks := p.gpus(e, &h)
	if ranks == nil {
		return nil
	}

	prog := &ir.Program{
		Name:       h.name,
		Collective: h.coll,
		NRanks:     h.ngpus,
		Root:       -1,
		Protocol:   h.proto,
		InPlace:    h.inplace,
		OutOfPlace: h.outofplace,
		NumThreads: h.nthreads,
		Ranks:      ranks,
		File:       p.file,
		Pos:        pos,
		Meta: map[string]string{
			"format":          "msccl-xml",
			"msccl.nchannels": strconv.FormatInt(h.nchannels, 10),
		},
	}
	p.geometry(e, &h, prog)
	p.iterations(prog)
	if h.coll.Rooted() {
		prog.Root = importer.InferRoot(prog, &p.diags, p.file, pos)
	}
	return prog
}

// collective maps a coll value. MSCCL's send, recv and alltoallv have no
// Theseus collective.
func (p *parser) collective(v string, a xattr) (ir.Collective, bool) {
	switch strings.ToLower(v) {
	case "send", "recv", "alltoallv":
		p.errorAt(diag.Unsupported, p.li.Pos(a.off), -1, -1, -1,
			"Theseus runs allreduce, allgather, reducescatter, alltoall, broadcast, reduce, gather, scatter, sendrecv and custom",
			"unsupported: coll %q has no Theseus collective", v)
		return 0, false
	}
	c, err := ir.ParseCollective(v)
	if err != nil {
		p.errorAt(diag.UnknownCollective, p.li.Pos(a.off), -1, -1, -1, "", "%v", err)
		return 0, false
	}
	return c, true
}

// sizeMultiplier is MSCCL's factor between the request count and the
// elements nchunksperloop cuts (msccl_parser.cc): ngpus for allgather,
// reducescatter and alltoall, 1 for every other collective.
func sizeMultiplier(c ir.Collective, n int) int64 {
	switch c {
	case ir.AllGather, ir.ReduceScatter, ir.AllToAll:
		return int64(n)
	}
	return 1
}

// iterations models MSCCL's loop iterations. MSCCL runs the program once
// per iteration of nchunksperloop chunks and gives each iteration its own
// scratch region: the scratch offset of chunk off+c of an iteration is
// gridOffset + (off+c)·sizePerMscclChunk, in a scratch buffer of
// nBytes·nScratchChunks/nChunksPerLoop bytes (RCCL's MSCCL). Theseus's
// slices reuse one scratch (ir.md §4), so a program that uses scratch is
// imported unsliced (SliceBytes = ir.Unsliced): one iteration over the
// whole message, whose chunks — and so its s_chunks of scratch — are sized
// to the message, which is MSCCL's scratch size; nothing is reused between
// iterations, as in MSCCL, and a race-free file has no TS0206. A program
// without scratch keeps its slices (pipelining; they share nothing).
func (p *parser) iterations(prog *ir.Program) {
	var s int64
	for r := range prog.Ranks {
		s = max(s, prog.Ranks[r].Chunks[ir.Scratch])
	}
	if s == 0 || prog.Protocol == ir.LL {
		return // LL programs are never sliced anyway
	}
	prog.SliceBytes = ir.Unsliced // docs/importers.md says so; no note per file
}

// geometry sets ChunksPerBlock and the message-size window.
func (p *parser) geometry(e *xelem, h *algoHeader, prog *ir.Program) {
	mult := sizeMultiplier(h.coll, h.ngpus)
	a, _ := e.attr("nchunksperloop")
	if h.nchunksperloop%mult != 0 {
		p.errorAt(diag.BadGeometry, p.li.Pos(a.off), -1, -1, -1,
			fmt.Sprintf("use a multiple of %d chunks per loop", mult),
			"nchunksperloop=%d is not a multiple of ngpus=%d: MSCCL cuts count·%d elements of a %s into %d chunks, so chunks would straddle rank blocks",
			h.nchunksperloop, h.ngpus, h.ngpus, h.coll, h.nchunksperloop)
		prog.ChunksPerBlock = 1
	} else {
		prog.ChunksPerBlock = h.nchunksperloop / mult
	}
	// MSCCL compares count·sizeof·mult with the window; Theseus compares the
	// message size count·sizeof·MaxBlocks. They differ for gather and scatter.
	f := ir.MaxBlocks(h.coll, h.ngpus) / mult
	prog.MinBytes, prog.MaxBytes = h.minBytes, h.maxBytes
	if f > 1 {
		if prog.MinBytes > math.MaxInt64/f {
			p.errorAt(diag.BadValue, p.li.Pos(e.off), -1, -1, -1, "", "minBytes=%d times %d ranks overflows", h.minBytes, f)
		} else {
			prog.MinBytes *= f
		}
		if prog.MaxBytes > math.MaxInt64/f {
			prog.MaxBytes = 0
		} else {
			prog.MaxBytes *= f
		}
		p.noteAt(diag.ImportNote, p.li.Pos(e.off), -1, -1, -1, "",
			"MSCCL's %s window counts one rank's block; the message-size window is scaled by %d to [%d, %d]",
			h.coll, f, prog.MinBytes, prog.MaxBytes)
	}
}
