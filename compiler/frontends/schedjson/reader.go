package schedjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

func (p *parser) lineCol(off int) (int, int) {
	if p.lines == nil {
		p.lines = []int{0}
		for i := 0; ; {
			j := bytes.IndexByte(p.data[i:], '\n')
			if j < 0 {
				break
			}
			i += j + 1
			p.lines = append(p.lines, i)
		}
	}
	off = max(0, min(off, len(p.data)))
	l := sort.Search(len(p.lines), func(i int) bool { return p.lines[i] > off }) - 1
	return l + 1, off - p.lines[l] + 1
}

func (p *parser) irPos(off int) ir.Pos {
	l, c := p.lineCol(off)
	return ir.Pos{Line: int32(l), Col: int32(c)}
}

func (p *parser) mk(code diag.Code, off int, hint, format string, args ...any) diag.Diagnostic {
	l, c := p.lineCol(off)
	if hint == "" {
		if ci, ok := diag.Lookup(code); ok {
			hint = ci.Hint
		}
	}
	return diag.Diagnostic{Code: code, Severity: diag.Error, File: p.file, Line: l, Col: c,
		Rank: p.cur[0], TB: p.cur[1], Step: p.cur[2], Msg: fmt.Sprintf(format, args...), Hint: hint}
}

func (p *parser) errAt(code diag.Code, off int, hint, format string, args ...any) {
	p.diags.Add(p.mk(code, off, hint, format, args...))
}

// ---- token primitives ----

// peekOff is the byte offset where the next token starts.
func (p *parser) peekOff() int {
	off := int(p.dec.InputOffset())
	off = skipSpace(p.data, off)
	if off < len(p.data) && (p.data[off] == ',' || p.data[off] == ':') {
		off = skipSpace(p.data, off+1)
	}
	return off
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// next reads one token and the offset where it starts.
func (p *parser) next() (json.Token, int, bool) {
	if p.fatal {
		return nil, len(p.data), false
	}
	off := p.peekOff()
	t, err := p.dec.Token()
	if err != nil {
		// The pre-pass validated the document, so this is not expected;
		// report it rather than trust it.
		p.errAt(diag.Syntax, off, "", "malformed JSON: %v", err)
		p.fatal = true
		return nil, off, false
	}
	return t, off, true
}

// skipAfter consumes the rest of a value whose first token is t.
func (p *parser) skipAfter(t json.Token) {
	d, ok := t.(json.Delim)
	if !ok || d == '}' || d == ']' {
		return
	}
	for depth := 1; depth > 0; {
		t, _, ok := p.next()
		if !ok {
			return
		}
		if d, ok := t.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
}

func (p *parser) skip() {
	if t, _, ok := p.next(); ok {
		p.skipAfter(t)
	}
}

func kind(t json.Token) string {
	switch v := t.(type) {
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "an array"
	}
	return "a value"
}

// wrongType reports a value of the wrong JSON type and skips it.
func (p *parser) wrongType(what, want string, t json.Token, off int) {
	p.errAt(diag.BadValue, off, "", "%s must be %s, not %s", what, want, kind(t))
	p.skipAfter(t)
}

// open reads the first token of an object or array value.
func (p *parser) open(what string, want json.Delim) (int, bool) {
	t, off, ok := p.next()
	if !ok {
		return off, false
	}
	if d, isDelim := t.(json.Delim); !isDelim || d != want {
		w := "an object"
		if want == '[' {
			w = "an array"
		}
		p.wrongType(what, w, t, off)
		return off, false
	}
	return off, true
}

// object reads an object value with the given known fields. f is called for
// each known field with its index in fields; it must consume the value.
// Unknown fields (TS0002) and repeated fields (TS0003) are reported and
// skipped. It returns the offset of '{' and the set of fields present.
func (p *parser) object(what string, fields []string, f func(i int, off int)) (int, uint64, bool) {
	start, ok := p.open(what, '{')
	if !ok {
		return start, 0, false
	}
	seen := p.members(what, fields, f)
	return start, seen, !p.fatal
}

func (p *parser) members(what string, fields []string, f func(i int, off int)) uint64 {
	var seen uint64
	for !p.fatal && p.dec.More() {
		t, off, ok := p.next()
		if !ok {
			break
		}
		key, _ := t.(string)
		i := indexOf(fields, key)
		switch {
		case i < 0:
			p.errAt(diag.UnknownField, off, unknownHint(key, fields), "unknown field %q in %s", key, what)
			p.skip()
		case seen&(1<<i) != 0:
			p.errAt(diag.BadValue, off, "remove one of the two", "field %q appears twice in %s", key, what)
			p.skip()
		default:
			seen |= 1 << i
			f(i, p.peekOff())
		}
	}
	p.next() // '}'
	return seen
}

// array reads an array value, calling f for each element (which must
// consume it) with its index and offset. It returns the offset of '['.
func (p *parser) array(what string, f func(i int, off int)) (int, bool) {
	start, ok := p.open(what, '[')
	if !ok {
		return start, false
	}
	for i := 0; !p.fatal && p.dec.More(); i++ {
		f(i, p.peekOff())
	}
	p.next() // ']'
	return start, true
}

func (p *parser) str(what string) (string, int, bool) {
	t, off, ok := p.next()
	if !ok {
		return "", off, false
	}
	s, isStr := t.(string)
	if !isStr {
		p.wrongType(what, "a string", t, off)
		return "", off, false
	}
	return s, off, true
}

func (p *parser) boolean(what string) (bool, int, bool) {
	t, off, ok := p.next()
	if !ok {
		return false, off, false
	}
	b, isBool := t.(bool)
	if !isBool {
		p.wrongType(what, "true or false", t, off)
		return false, off, false
	}
	return b, off, true
}

// integer reads an integer in domain d.
func (p *parser) integer(what string, d domain) (int64, int, bool) {
	t, off, ok := p.next()
	if !ok {
		return 0, off, false
	}
	n, isNum := t.(json.Number)
	if !isNum {
		p.wrongType(what, "an integer", t, off)
		return 0, off, false
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			p.errAt(diag.BadValue, off, "", "%s = %s is out of range %v", what, n, d)
		} else {
			p.errAt(diag.BadValue, off, "write a whole number without fraction or exponent", "%s must be an integer, not %s", what, n)
		}
		return 0, off, false
	}
	if !d.has(v) {
		p.errAt(diag.BadValue, off, "", "%s = %d is out of range %v", what, v, d)
		return 0, off, false
	}
	return v, off, true
}

// limit counts one more element against a size limit; over it, it reports
// TS0011 and stops the walk.
func (p *parser) limit(n *int, max int, off int, what string) bool {
	*n++
	if *n > max {
		p.tooMany(off, max, what)
		return false
	}
	return true
}

// tooMany reports TS0011 and stops the walk.
func (p *parser) tooMany(off, max int, what string) {
	p.errAt(diag.TooLarge, off, "", "more than %d %s", max, what)
	p.fatal = true
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// unknownHint suggests the known field nearest to key (edit distance at
// most 2 and at most half the field's length, ties to the longest common
// prefix), or lists them.
func unknownHint(key string, fields []string) string {
	best, bestD, bestP := "", 3, -1
	k := strings.ToLower(key)
	for _, f := range fields {
		d := editDistance(k, f)
		pre := 0
		for pre < len(k) && pre < len(f) && k[pre] == f[pre] {
			pre++
		}
		if d > len(f)/2 {
			continue
		}
		if d < bestD || d == bestD && pre > bestP {
			best, bestD, bestP = f, d, pre
		}
	}
	if best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	return "known fields here: " + strings.Join(fields, ", ")
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// ---- the document ----
