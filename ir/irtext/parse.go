// Package irtext parses the textual IR (docs/ir-text.md) into an
// ir.Program; ir.Print writes it. The two round-trip: parsing a printed
// program gives the same program, positions and File aside.
//
// Parse checks what the text form itself defines: syntax, keywords, op and
// collective names, numbers that fit their fields, ids numbered 0, 1, 2, ...
// in order, no repeated attribute, and size limits. It does not check
// meaning (peers in range, channel pairing, operand counts, chunk ranges,
// dependencies): that is compiler/verify's job, so that a broken program can
// be written as text and handed to the verifier.
package irtext

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"github.com/theseus-ccl/theseus/compiler/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Limits on what Parse accepts; beyond them it reports diag.TooLarge
// (TS0011) instead of building the program.
const (
	// MaxSourceBytes bounds the size of the text (bytes).
	MaxSourceBytes = 64 << 20
	// MaxChunks bounds the magnitude of every chunk quantity: chunks per
	// block, declared buffer sizes, ref offsets and op counts (chunks). It
	// keeps offset+count and offset*stride arithmetic far from int64
	// overflow in later passes.
	MaxChunks = 1 << 40
)

// Limits on ranks: nranks and nlocalranks are at most ir.MaxRanks.

// Parse parses src, the text of file filename, into a program. It returns
// the program and no diagnostics, or nil and at least one error
// diagnostic, each with filename:line:col, a code (diag.Syntax, UnknownOp,
// UnknownCollective, BadValue, MissingField, DuplicateID, TooLarge) and a
// one-line hint. A syntax error stops the parse (one diagnostic); other
// errors are collected, up to diag.DefaultMax.
//
// The program's File is filename, and Pos is set on the program (the
// "program" keyword), every rank, channel and threadblock (their keyword)
// and every op (its mnemonic). Parse never panics; its memory use is
// bounded by a small multiple of len(src).
func Parse(filename string, src []byte) (*ir.Program, []diag.Diagnostic) {
	b := &builder{file: filename}
	if len(src) > MaxSourceBytes {
		b.errAt(diag.TooLarge, lexer.Position{Line: 1, Column: 1}, "", "the text is %d bytes, over the limit of %d", len(src), MaxSourceBytes)
		return nil, b.diags.Items
	}
	ast, err := textParser.ParseBytes(filename, src)
	if err != nil {
		pos := lexer.Position{}
		msg := err.Error()
		var perr participle.Error
		if errors.As(err, &perr) {
			pos, msg = perr.Position(), perr.Message()
		}
		b.errAt(diag.Syntax, pos, "fix the syntax at the position shown (grammar: docs/ir-text.md)", "%s", msg)
		return nil, b.diags.Items
	}
	b.declare(ast)
	b.bodies(ast)
	if b.diags.HasErrors() {
		return nil, b.diags.Items
	}
	return b.p, b.diags.Items
}

// builder turns the syntax tree into a program in two phases, like an
// assembler: declare (the header, ranks, channels and threadblocks with
// their attributes) and then bodies (the ops of every threadblock).
type builder struct {
	file  string
	diags diag.List
	p     *ir.Program
	// where the current op is, for diagnostics (-1: not in an op)
	rank, tb, step int
}

func irPos(p lexer.Position) ir.Pos {
	clamp := func(v int) int32 {
		if v < 0 || v > 1<<31-1 {
			return 0
		}
		return int32(v)
	}
	return ir.Pos{Line: clamp(p.Line), Col: clamp(p.Column)}
}

func (b *builder) errAt(code diag.Code, pos lexer.Position, hint, format string, args ...any) {
	if hint == "" {
		if ci, ok := diag.Lookup(code); ok {
			hint = ci.Hint
		}
	}
	d := diag.Diagnostic{Code: code, Severity: diag.Error, File: b.file, Line: pos.Line, Col: pos.Column,
		Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf(format, args...), Hint: hint}
	if b.p != nil {
		d.Rank, d.TB, d.Step = b.rank, b.tb, b.step
	}
	b.diags.Add(d)
}

// num converts an integer token to int64 (BadValue if it does not fit).
func (b *builder) num(n *astNum) (int64, bool) {
	s := n.Digits
	if n.Neg {
		s = "-" + s
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		b.errAt(diag.BadValue, n.Pos, "use an integer in the 64-bit range", "integer %s is out of range", s)
		return 0, false
	}
	return v, true
}

// intv converts an integer token to int.
func (b *builder) intv(n *astNum) (int, bool) {
	v, ok := b.num(n)
	if ok && int64(int(v)) != v {
		b.errAt(diag.BadValue, n.Pos, "", "integer %d is out of range", v)
		return 0, false
	}
	return int(v), ok
}

// chunks converts a chunk quantity (|v| <= MaxChunks).
func (b *builder) chunks(n *astNum, what string) (int64, bool) {
	v, ok := b.num(n)
	if ok && (v > MaxChunks || v < -MaxChunks) {
		b.errAt(diag.TooLarge, n.Pos, fmt.Sprintf("keep chunk counts and offsets within ±%d", int64(MaxChunks)),
			"%s %d is over the limit of %d chunks", what, v, int64(MaxChunks))
		return 0, false
	}
	return v, ok
}

// ranks converts nranks or nlocalranks (0..ir.MaxRanks).
func (b *builder) ranks(n *astNum, what string) (int, bool) {
	v, ok := b.num(n)
	switch {
	case !ok:
		return 0, false
	case v < 0:
		b.errAt(diag.BadValue, n.Pos, "", "%s %d is negative", what, v)
		return 0, false
	case v > ir.MaxRanks:
		b.errAt(diag.TooLarge, n.Pos, fmt.Sprintf("use at most %d ranks", ir.MaxRanks), "%s %d is over the limit of %d", what, v, ir.MaxRanks)
		return 0, false
	}
	return int(v), true
}

func (b *builder) unquote(s string, pos lexer.Position, what string) string {
	v, err := strconv.Unquote(s)
	if err != nil {
		b.errAt(diag.BadValue, pos, "write strings as Go double-quoted strings", "bad %s string %s", what, s)
	}
	return v
}

// once reports a repeated attribute and returns false for it.
func (b *builder) once(seen map[string]bool, key string, pos lexer.Position) bool {
	if seen[key] {
		b.errAt(diag.BadValue, pos, "give each attribute once", "attribute %s given twice", key)
		return false
	}
	seen[key] = true
	return true
}

func (b *builder) id(n *astNum, want int, what string) {
	v, ok := b.num(n)
	if ok && v != int64(want) {
		b.errAt(diag.DuplicateID, n.Pos, fmt.Sprintf("number %ss 0, 1, 2, ... in order", what),
			"%s %d declared where %s %d is expected", what, v, what, want)
	}
}

// declare is phase 1: the header, meta, and every rank, channel and
// threadblock with its attributes (op lists stay empty).
func (b *builder) declare(f *astFile) {
	b.rank, b.tb, b.step = -1, -1, -1
	h := f.Header
	p := &ir.Program{File: b.file, Pos: irPos(h.Pos)}
	b.p = p
	p.Name = b.unquote(h.Name, h.Pos, "program name")
	coll, err := ir.ParseCollective(h.Collective.Name)
	if err != nil {
		b.errAt(diag.UnknownCollective, h.Collective.Pos, "", "unknown collective %q", h.Collective.Name)
	}
	p.Collective = coll
	p.Root = ir.DefaultRoot(coll)
	seen := map[string]bool{}
	for _, a := range h.Attrs {
		switch {
		case a.Protocol != nil:
			if !b.once(seen, "protocol", a.Pos) {
				continue
			}
			pr, err := ir.ParseProtocol(a.Protocol.Name)
			if err != nil {
				b.errAt(diag.BadValue, a.Protocol.Pos, "use protocol=simple or protocol=ll", "unknown protocol %q", a.Protocol.Name)
			}
			p.Protocol = pr
		case a.Flag != "":
			if !b.once(seen, a.Flag, a.Pos) {
				continue
			}
			if a.Flag == "inplace" {
				p.InPlace = true
			} else {
				p.OutOfPlace = true
			}
		default:
			if !b.once(seen, a.Key, a.Pos) {
				continue
			}
			b.headerNum(p, a.Key, a.Num)
		}
	}
	for _, k := range []string{"nranks", "chunks"} {
		if !seen[k] {
			b.errAt(diag.MissingField, h.Pos, fmt.Sprintf("add %s=N to the program line", k), "program has no %s", k)
		}
	}
	for _, m := range f.Meta {
		k := b.unquote(m.Key, m.Pos, "meta key")
		v := b.unquote(m.Value, m.Pos, "meta value")
		if p.Meta == nil {
			p.Meta = map[string]string{}
		}
		if _, dup := p.Meta[k]; dup {
			b.errAt(diag.BadValue, m.Pos, "give each meta key once", "meta key %q given twice", k)
		}
		p.Meta[k] = v
	}
	p.Ranks = make([]ir.Rank, len(f.Ranks))
	for r, ar := range f.Ranks {
		b.declareRank(r, ar, &p.Ranks[r])
	}
}

func (b *builder) headerNum(p *ir.Program, key string, n *astNum) {
	var ok bool
	switch key {
	case "nranks":
		p.NRanks, _ = b.ranks(n, "nranks")
	case "nlocalranks":
		p.NLocalRanks, _ = b.ranks(n, "nlocalranks")
	case "chunks":
		p.ChunksPerBlock, _ = b.chunks(n, "chunks per block")
	case "root":
		var v int
		if v, ok = b.intv(n); ok {
			p.Root = v
		}
	case "minbytes":
		p.MinBytes, _ = b.num(n)
	case "maxbytes":
		p.MaxBytes, _ = b.num(n)
	case "slicebytes":
		p.SliceBytes, _ = b.num(n)
	case "threads":
		p.NumThreads, _ = b.intv(n)
	}
}

func (b *builder) declareRank(r int, ar *astRank, rk *ir.Rank) {
	b.id(ar.ID, r, "rank")
	rk.Pos = irPos(ar.Pos)
	seen := map[string]bool{}
	for _, a := range ar.Attrs {
		k, err := ir.ParseBufKind(a.Key)
		if err != nil {
			b.errAt(diag.BadValue, a.Pos, "a rank takes input=, output= and scratch=", "%s is not a rank attribute", a.Key)
			continue
		}
		if b.once(seen, a.Key, a.Pos) {
			rk.Chunks[k], _ = b.chunks(a.Num, k.LongName()+" chunks")
		}
	}
	nch, ntb := 0, 0
	for _, it := range ar.Items {
		if it.Channel != nil {
			nch++
		} else {
			ntb++
		}
	}
	if nch > 0 {
		rk.Channels = make([]ir.Channel, 0, nch)
	}
	if ntb > 0 {
		rk.TBs = make([]ir.Threadblock, 0, ntb)
	}
	for _, it := range ar.Items {
		if c := it.Channel; c != nil {
			b.id(c.ID, len(rk.Channels), "channel")
			rk.Channels = append(rk.Channels, b.channel(c))
			continue
		}
		t := it.TB
		b.id(t.ID, len(rk.TBs), "tb")
		tb := ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1, Pos: irPos(t.Pos)}
		seen := map[string]bool{}
		for _, a := range t.Attrs {
			var dst *int
			switch a.Key {
			case "send":
				dst = &tb.SendPeer
			case "recv":
				dst = &tb.RecvPeer
			case "chan":
				dst = &tb.Chan
			default:
				b.errAt(diag.BadValue, a.Pos, "a tb takes send=, recv= and chan=", "%s is not a tb attribute", a.Key)
				continue
			}
			if b.once(seen, a.Key, a.Pos) {
				if v, ok := b.intv(a.Num); ok {
					*dst = v
				}
			}
		}
		rk.TBs = append(rk.TBs, tb)
	}
}

func (b *builder) channel(c *astChannel) ir.Channel {
	ch := ir.Channel{Pos: irPos(c.Pos)}
	seen := map[string]bool{}
	for _, a := range c.Attrs {
		switch {
		case a.Peer != nil:
			if b.once(seen, "peer", a.Pos) {
				ch.Peer, _ = b.intv(a.Peer)
				ch.PeerChannel, _ = b.intv(a.PeerChan)
			}
		case a.Type != "":
			if b.once(seen, "type", a.Pos) {
				ch.Type, _ = ir.ParseChannelType(a.Type) // the grammar admits only known names
			}
		default:
			if b.once(seen, "init", a.Pos) {
				ch.Init, _ = b.num(a.Init)
			}
		}
	}
	if !seen["peer"] {
		b.errAt(diag.MissingField, c.Pos, "add peer=RANK.CHANNEL", "channel has no peer")
	}
	return ch
}

// bodies is phase 2: the ops of every threadblock.
func (b *builder) bodies(f *astFile) {
	for r, ar := range f.Ranks {
		t := 0
		for _, it := range ar.Items {
			if it.TB == nil {
				continue
			}
			tb := &b.p.Ranks[r].TBs[t]
			if len(it.TB.Ops) > 0 {
				tb.Ops = make([]ir.Op, len(it.TB.Ops))
			}
			for i, ao := range it.TB.Ops {
				b.rank, b.tb, b.step = r, t, i
				tb.Ops[i] = b.op(ao)
			}
			t++
		}
	}
	b.rank, b.tb, b.step = -1, -1, -1
}

var opNames = func() string {
	var names []string
	for o := ir.Opcode(0); o < ir.NumOpcodes; o++ {
		names = append(names, o.String())
	}
	return strings.Join(names, ", ")
}()

func (b *builder) op(ao *astOp) ir.Op {
	op := ir.Op{Pos: irPos(ao.Pos)}
	code, err := ir.ParseOpcode(ao.Name)
	if err != nil {
		b.errAt(diag.UnknownOp, ao.Pos, "use one of "+opNames, "unknown op %q", ao.Name)
	}
	op.Code = code
	// The count comes from the refs (all equal; "[off]" is 1) or, for an
	// op without refs, from count=.
	var count int64
	haveCount := false
	countAt := func(body *astRefBody) {
		c := int64(1)
		if body.Count != nil {
			v, ok := b.chunks(body.Count, "count")
			if !ok {
				return
			}
			c = v
		}
		switch {
		case !haveCount:
			count, haveCount = c, true
		case c != count:
			b.errAt(diag.BadValue, body.Pos, "give every ref of an op the same count", "ref covers %d chunks, an earlier ref of the op %d", c, count)
		}
	}
	ref := func(chanNum *astNum, body *astRefBody) ir.Ref {
		r := ir.Ref{Chan: -1, Packet: body.Packet}
		if chanNum != nil {
			r.Chan, _ = b.intv(chanNum)
		}
		k, err := ir.ParseBufKind(body.Buf)
		if err != nil {
			b.errAt(diag.BadValue, body.Pos, "use i, o or s", "unknown buffer %q", body.Buf)
		}
		r.Buf = k
		r.Off, _ = b.chunks(body.Off, "offset")
		countAt(body)
		return r
	}
	for _, o := range ao.Operands {
		switch {
		case o.Local != nil:
			op.Srcs = append(op.Srcs, ref(nil, o.Local))
		case o.Remote != nil:
			op.Srcs = append(op.Srcs, ref(o.At, o.Remote))
		default:
			c, _ := b.intv(o.At)
			op.Chans = append(op.Chans, c)
		}
	}
	for _, d := range ao.Dsts {
		op.Dsts = append(op.Dsts, ref(d.Chan, d.Body))
	}
	seen := map[string]bool{}
	for _, a := range ao.Attrs {
		switch {
		case a.Publish:
			if b.once(seen, "publish", a.Pos) {
				op.Publish = true
			}
		case a.Deps != nil:
			if !b.once(seen, "deps", a.Pos) {
				continue
			}
			op.Deps = make([]ir.Dep, len(a.Deps))
			for i, d := range a.Deps {
				op.Deps[i].TB, _ = b.intv(d.TB)
				op.Deps[i].Step, _ = b.intv(d.Step)
			}
		default:
			if !b.once(seen, a.Key, a.Pos) {
				continue
			}
			switch a.Key {
			case "id":
				op.Barrier, _ = b.intv(a.Num)
			case "tbs":
				op.BarrierTBs, _ = b.intv(a.Num)
			case "count":
				v, ok := b.chunks(a.Num, "count")
				if ok && haveCount && v != count {
					b.errAt(diag.BadValue, a.Pos, "drop count= where refs give the count", "count=%d disagrees with the refs' count %d", v, count)
				}
				if !haveCount {
					op.Count = v
				}
			}
		}
	}
	if haveCount {
		op.Count = count
	}
	return op
}
