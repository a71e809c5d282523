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
	"regexp"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Limits on what Parse accepts; beyond them it reports diag.TooLarge
// (TS0011) instead of building the program. With them, Parse's peak memory
// is the program itself (about 150 bytes per op) plus the syntax tree of
// one rank (about 1 KiB per token, so at most about 256 MiB). nranks and
// nlocalranks are at most ir.MaxRanks.
const (
	// MaxSourceBytes bounds the size of the text (bytes). The text of a
	// 512-rank ring allreduce (523,776 ops) is 8.5 MB.
	MaxSourceBytes = 16 << 20
	// MaxPieceTokens bounds the tokens of the header (program line and
	// meta) and of each rank.
	MaxPieceTokens = 1 << 18
	// MaxChunks bounds the magnitude of every chunk quantity: chunks per
	// block, declared buffer sizes, ref offsets and op counts (chunks). It
	// keeps offset+count and offset*stride arithmetic far from int64
	// overflow in later passes.
	MaxChunks = 1 << 40
)

// Parse parses src, the text of file filename, into a program. It returns
// the program and no diagnostics, or nil and at least one error
// diagnostic, each with filename:line:col, a code (diag.Syntax, UnknownOp,
// UnknownCollective, BadValue, MissingField, DuplicateID, TooLarge) and a
// one-line hint, in source order. Errors are collected, up to
// diag.DefaultMax, until the first syntax error, which stops the parse.
//
// The program's File is filename, and Pos is set on the program (the
// "program" keyword), every rank, channel and threadblock (their keyword)
// and every op (its mnemonic). Parse never panics, and its work is bounded
// by the limits above (MaxSourceBytes, MaxPieceTokens, MaxChunks,
// ir.MaxRanks): it never allocates by a number it reads.
func Parse(filename string, src []byte) (*ir.Program, []diag.Diagnostic) {
	b := &builder{file: filename, rank: -1, tb: -1, step: -1}
	if len(src) > MaxSourceBytes {
		b.errAt(diag.TooLarge, lexer.Position{Line: 1, Column: 1}, "", "the text is %d bytes, over the limit of %d", len(src), MaxSourceBytes)
		return nil, b.diags.Items
	}
	ts := &tokenStream{sc: scanner{src: string(src), pos: lexer.Position{Filename: filename, Line: 1, Column: 1}}}
	hdr, err := parsePiece(headerParser, &headerLexer{ts: ts})
	if err != nil {
		return nil, b.syntax(err)
	}
	b.declare(hdr)
	for r := 0; ; r++ {
		t, err := ts.peek()
		if err != nil {
			return nil, b.syntax(err)
		}
		if t.EOF() {
			break
		}
		ts.startPiece()
		ar, err := parsePiece(rankParser, &rankLexer{ts: ts})
		if err != nil {
			return nil, b.syntax(err)
		}
		b.p.Ranks = append(b.p.Ranks, ir.Rank{})
		b.declareRank(r, ar, &b.p.Ranks[r])
		b.rankBodies(r, ar)
	}
	diag.Sort(b.diags.Items)
	if b.diags.HasErrors() {
		return nil, b.diags.Items
	}
	return b.p, b.diags.Items
}

func parsePiece[G any](p *participle.Parser[G], l lexer.Lexer) (*G, error) {
	pl, err := lexer.Upgrade(l)
	if err != nil {
		return nil, err
	}
	return p.ParseFromLexer(pl)
}

// syntax adds a syntax (or lexical) error and returns every diagnostic so
// far, in source order.
func (b *builder) syntax(err error) []diag.Diagnostic {
	pos := lexer.Position{}
	msg := err.Error()
	var perr participle.Error
	if errors.As(err, &perr) {
		pos, msg = perr.Position(), userExpected(perr.Message())
	}
	b.rank, b.tb, b.step = -1, -1, -1
	var big *tooManyTokens
	if errors.As(err, &big) {
		b.errAt(diag.TooLarge, big.pos, "split the rank's work, or use the JSON schedule format", "%s", big.Error())
		diag.Sort(b.diags.Items)
		return b.diags.Items
	}
	b.errAt(diag.Syntax, pos, "fix the syntax at the position shown (grammar: docs/ir-text.md)", "%s", msg)
	diag.Sort(b.diags.Items)
	return b.diags.Items
}

// expectedRe finds participle's "(expected ...)": the rest of the rule the
// parser was in, written with the grammar's Go type names.
var expectedRe = regexp.MustCompile(`\(expected ([^ )]+)[^)]*\)`)

// grammarTerms names the grammar's pieces as docs/ir-text.md does.
var grammarTerms = map[string]string{
	"<int>": "a number", "<ident>": "a name", "<string>": "a string", "<float>": "a number",
	"AstKV": "key=value", "AstRankItem": "a channel or tb", "AstHeaderAttr": "a header attribute",
	"AstMeta": "meta", "AstRank": "rank", "AstChannel": "channel", "AstChannelAttr": "a channel attribute",
	"AstTB": "tb", "AstOp": "an op",
}

// userExpected rewrites participle's message for the user: what the parser
// expected next, in the grammar's terms (docs/ir-text.md), not the rest of
// an internal rule.
func userExpected(msg string) string {
	return expectedRe.ReplaceAllStringFunc(msg, func(m string) string {
		first := expectedRe.FindStringSubmatch(m)[1]
		w := strings.TrimRight(first, "*+?")
		if t, ok := grammarTerms[w]; ok {
			w = t
		} else if strings.HasPrefix(w, "Ast") {
			w = "more input"
		}
		return "(expected " + w + ")"
	})
}

// tokenStream is the file's tokens with one token of lookahead; the
// header and each rank read their pieces of it, at most MaxPieceTokens
// each.
type tokenStream struct {
	sc     scanner
	peeked bool
	tok    lexer.Token
	err    error
	piece  int // tokens taken by the current piece
}

// tooManyTokens is the error of a piece over MaxPieceTokens.
type tooManyTokens struct{ pos lexer.Position }

func (e *tooManyTokens) Error() string {
	return fmt.Sprintf("more than %d tokens in the header or in one rank", MaxPieceTokens)
}

// startPiece resets the token count for the next piece.
func (ts *tokenStream) startPiece() { ts.piece = 0 }

func (ts *tokenStream) peek() (lexer.Token, error) {
	if !ts.peeked {
		ts.tok, ts.err = ts.sc.Next()
		ts.peeked = true
	}
	return ts.tok, ts.err
}

func (ts *tokenStream) next() (lexer.Token, error) {
	t, err := ts.peek()
	if err == nil && !t.EOF() {
		ts.peeked = false
		if ts.piece++; ts.piece > MaxPieceTokens {
			return lexer.Token{}, &tooManyTokens{pos: t.Pos}
		}
	}
	return t, err
}

// headerLexer yields the tokens before the first "rank" keyword, then EOF.
// (A "rank" as the first token is yielded, for the parser to reject.)
type headerLexer struct {
	ts      *tokenStream
	started bool
}

func (l *headerLexer) Next() (lexer.Token, error) {
	t, err := l.ts.peek()
	if err == nil && l.started && t.Type == tokIdent && t.Value == "rank" {
		return lexer.EOFToken(t.Pos), nil
	}
	l.started = true
	return l.ts.next()
}

// rankLexer yields the tokens of one rank, up to the "}" that closes its
// first "{", then EOF.
type rankLexer struct {
	ts    *tokenStream
	depth int
	done  bool
	end   lexer.Position
}

func (l *rankLexer) Next() (lexer.Token, error) {
	if l.done {
		return lexer.EOFToken(l.end), nil
	}
	t, err := l.ts.next()
	if err != nil || t.Type != tokPunct {
		return t, err
	}
	switch t.Value {
	case "{":
		l.depth++
	case "}":
		l.depth--
		if l.depth <= 0 {
			l.done = true
			l.end = t.Pos
			l.end.Offset++
			l.end.Column++
		}
	}
	return t, nil
}

// builder turns the syntax trees into a program. Per rank it works in two
// phases, like an assembler: declareRank (the rank's channels and
// threadblocks with their attributes) and then rankBodies (the ops of every
// threadblock), so an op may name a channel or threadblock declared after
// it.
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

// subToken is the part v of token t that starts at byte col of t's value
// (tokens that hold parts are ASCII and on one line).
func subToken(t lexer.Token, v string, col int) lexer.Token {
	t.Value = v
	t.Pos.Offset += col
	t.Pos.Column += col
	return t
}

// num converts an Int (or Chan, "@" Int) token to int64 (BadValue if it
// does not fit).
func (b *builder) num(n lexer.Token) (int64, bool) {
	s := strings.TrimPrefix(n.Value, "@")
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		b.errAt(diag.BadValue, n.Pos, "use an integer in the 64-bit range", "integer %s is out of range", s)
		return 0, false
	}
	return v, true
}

// intv converts an integer token to int.
func (b *builder) intv(n lexer.Token) (int, bool) {
	v, ok := b.num(n)
	if ok && int64(int(v)) != v {
		b.errAt(diag.BadValue, n.Pos, "", "integer %d is out of range", v)
		return 0, false
	}
	return int(v), ok
}

// chunks converts a chunk quantity (|v| <= MaxChunks).
func (b *builder) chunks(n lexer.Token, what string) (int64, bool) {
	v, ok := b.num(n)
	if ok && (v > MaxChunks || v < -MaxChunks) {
		b.errAt(diag.TooLarge, n.Pos, fmt.Sprintf("keep chunk counts and offsets within ±%d", int64(MaxChunks)),
			"%s %d is over the limit of %d chunks", what, v, int64(MaxChunks))
		return 0, false
	}
	return v, ok
}

// ranks converts nranks or nlocalranks (0..ir.MaxRanks).
func (b *builder) ranks(n lexer.Token, what string) (int, bool) {
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

func (b *builder) id(n lexer.Token, want int, what string) {
	v, ok := b.num(n)
	if ok && v != int64(want) {
		b.errAt(diag.DuplicateID, n.Pos, fmt.Sprintf("number %ss 0, 1, 2, ... in order", what),
			"%s %d declared where %s %d is expected", what, v, what, want)
	}
}

// declare builds the program from the header and meta lines.
func (b *builder) declare(f *astFile) {
	h := f.Header
	p := &ir.Program{File: b.file, Pos: irPos(h.Pos)}
	b.p = p
	p.Name = b.unquote(h.Name, h.Pos, "program name")
	coll, err := ir.ParseCollective(h.Collective.Value)
	if err != nil {
		b.errAt(diag.UnknownCollective, h.Collective.Pos, "", "unknown collective %q", h.Collective.Value)
	}
	p.Collective = coll
	p.Root = ir.DefaultRoot(coll)
	seen := map[string]bool{}
	for _, a := range h.Attrs {
		key := a.Key
		if a.Flag != "" {
			key = a.Flag
		}
		if !headerKeys[key] {
			b.errAt(diag.UnknownField, a.Pos, "the program line takes "+headerKeyList, "unknown program attribute %s", key)
			continue
		}
		if !b.once(seen, key, a.Pos) {
			continue
		}
		switch {
		case key == "inplace":
			p.InPlace = true
		case key == "outofplace":
			p.OutOfPlace = true
		case key == "protocol":
			if a.Word.Value == "" {
				b.errAt(diag.BadValue, a.Num.Pos, "use protocol=simple or protocol=ll", "protocol=%s is not a protocol", a.Num.Value)
				continue
			}
			pr, err := ir.ParseProtocol(a.Word.Value)
			if err != nil {
				b.errAt(diag.BadValue, a.Word.Pos, "use protocol=simple or protocol=ll", "unknown protocol %q", a.Word.Value)
			}
			p.Protocol = pr
		case a.Num.Value == "":
			b.errAt(diag.BadValue, a.Word.Pos, "write "+key+"=N", "%s=%s is not an integer", key, a.Word.Value)
		default:
			b.headerNum(p, key, a.Num)
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
}

// headerKeys are the attributes of the program line, in printed order.
var headerKeys = map[string]bool{
	"nranks": true, "chunks": true, "protocol": true, "root": true, "nlocalranks": true, "minbytes": true,
	"maxbytes": true, "threads": true, "slicebytes": true, "inplace": true, "outofplace": true,
}

const headerKeyList = "nranks=, chunks=, protocol=, root=, nlocalranks=, minbytes=, maxbytes=, threads=, slicebytes=, inplace, outofplace"

func (b *builder) headerNum(p *ir.Program, key string, n lexer.Token) {
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
			b.errAt(diag.UnknownField, a.Pos, "a rank takes input=, output= and scratch=", "%s is not a rank attribute", a.Key)
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
				b.errAt(diag.UnknownField, a.Pos, "a tb takes send=, recv= and chan=", "%s is not a tb attribute", a.Key)
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
		case a.Peer.Value != "":
			if b.once(seen, "peer", a.Pos) {
				ch.Peer, _ = b.intv(a.Peer)
				ch.PeerChannel, _ = b.intv(a.PeerChan)
			}
		case a.Unknown != nil:
			b.errAt(diag.UnknownField, a.Pos, "a channel takes peer=R.C, memory or port, and init=", "%s is not a channel attribute", a.Unknown.Key)
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

// rankBodies is phase 2 for rank r: the ops of every threadblock.
func (b *builder) rankBodies(r int, ar *astRank) {
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
	countAt := func(c int64, pos lexer.Position) {
		switch {
		case !haveCount:
			count, haveCount = c, true
		case c != count:
			b.errAt(diag.BadValue, pos, "give every ref of an op the same count", "ref covers %d chunks but an earlier ref of the op covers %d", c, count)
		}
	}
	ref := func(t lexer.Token) ir.Ref {
		rp := splitRef(t.Value)
		r := ir.Ref{Chan: -1, Packet: rp.packet}
		if rp.chanV != "" {
			r.Chan, _ = b.intv(subToken(t, rp.chanV, 1))
		}
		k, err := ir.ParseBufKind(rp.buf)
		if err != nil {
			b.errAt(diag.BadValue, subToken(t, rp.buf, rp.bufCol).Pos, "use i, o or s", "unknown buffer %q", rp.buf)
		}
		r.Buf = k
		r.Off, _ = b.chunks(subToken(t, rp.off, rp.offCol), "offset")
		c := int64(1)
		if rp.count != "" {
			v, ok := b.chunks(subToken(t, rp.count, rp.countCol), "count")
			if !ok {
				return r
			}
			c = v
		}
		countAt(c, subToken(t, rp.buf, rp.bufCol).Pos)
		return r
	}
	for _, o := range ao.Operands {
		if o.Tok.Type == tokChan {
			c, _ := b.intv(o.Tok)
			op.Chans = append(op.Chans, c)
			continue
		}
		op.Srcs = append(op.Srcs, ref(o.Tok))
	}
	for _, d := range ao.Dsts {
		if d.Tok.Type == tokChan {
			b.errAt(diag.BadValue, d.Tok.Pos, "write a ref such as "+d.Tok.Value+":s[0]", "%s after -> is a channel, not a ref", d.Tok.Value)
			continue
		}
		op.Dsts = append(op.Dsts, ref(d.Tok))
	}
	seen := map[string]bool{}
	for _, a := range ao.Attrs {
		if !b.once(seen, a.Key, a.Pos) {
			continue
		}
		hasNum, hasDeps := a.Num.Value != "", a.Deps != nil
		if want := a.Key == "deps"; a.Key != "publish" && (hasDeps != want || hasNum == want) {
			form := "=N"
			if want {
				form = "=(tb,step),..."
			}
			b.errAt(diag.BadValue, a.Pos, "write "+a.Key+form, "attribute %s needs a value of the form %s", a.Key, form)
			continue
		}
		switch a.Key {
		case "publish":
			if hasNum || hasDeps {
				b.errAt(diag.BadValue, a.Pos, "write publish alone", "publish takes no value")
				continue
			}
			op.Publish = true
		case "deps":
			op.Deps = make([]ir.Dep, len(a.Deps))
			for i, d := range a.Deps {
				op.Deps[i].TB, _ = b.intv(d.TB)
				op.Deps[i].Step, _ = b.intv(d.Step)
			}
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
	if haveCount {
		op.Count = count
	}
	return op
}
