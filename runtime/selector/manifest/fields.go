package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
)

// field is one member of a JSON object line, with byte offsets into the
// line (of the key's opening quote and of the value's first byte).
type field struct {
	Key    string
	KeyOff int
	ValOff int
	Raw    json.RawMessage
}

// lineCtx builds diagnostics for one line of one file.
type lineCtx struct {
	file string
	line int // 1-based
	text []byte
	ds   []diag.Diagnostic
}

// col turns a byte offset of the line into a 1-based column (bytes).
func (c *lineCtx) col(off int) int { return min(max(off, 0), len(c.text)) + 1 }

func (c *lineCtx) errorf(code diag.Code, off int, hint, format string, args ...any) {
	if hint == "" {
		if ci, ok := diag.Lookup(code); ok {
			hint = ci.Hint
		}
	}
	c.ds = append(c.ds, diag.Diagnostic{Code: code, Severity: diag.Error, File: c.file, Line: c.line,
		Col: c.col(off), Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

func skipSpace(b []byte, off int, extra byte) int {
	for off < len(b) {
		switch b[off] {
		case ' ', '\t', '\r', '\n', extra:
			off++
		default:
			return off
		}
	}
	return off
}

// object splits a one-line JSON object into its members, keeping offsets.
// It reports malformed JSON (TS0001) at the offending byte, and duplicate
// keys (TS0003).
func (c *lineCtx) object() ([]field, bool) {
	b := c.text
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	syntax := func(err error) ([]field, bool) {
		off := int(dec.InputOffset())
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = badByte(b, int(se.Offset), se.Error())
		}
		msg := err.Error()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			msg = "unexpected end of line"
		}
		c.errorf(diag.Syntax, off, "each line must be one complete JSON object", "malformed JSON: %s", msg)
		return nil, false
	}
	tok, err := dec.Token()
	if err != nil {
		return syntax(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		c.errorf(diag.Syntax, skipSpace(b, 0, 0), "each line must be one JSON object {...}", "line is not a JSON object")
		return nil, false
	}
	var fs []field
	seen := map[string]bool{}
	for dec.More() {
		keyOff := skipSpace(b, int(dec.InputOffset()), ',')
		tok, err := dec.Token()
		if err != nil {
			return syntax(err)
		}
		key, _ := tok.(string)
		valOff := skipSpace(b, int(dec.InputOffset()), ':')
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntax(err)
		}
		if seen[key] {
			c.errorf(diag.BadValue, keyOff, "give each field once", "field %q appears twice", key)
			return nil, false
		}
		seen[key] = true
		fs = append(fs, field{Key: key, KeyOff: keyOff, ValOff: valOff, Raw: raw})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return syntax(err)
	}
	if rest := skipSpace(b, int(dec.InputOffset()), 0); rest < len(b) {
		c.errorf(diag.Syntax, rest, "each line must be one JSON object", "text after the JSON object")
		return nil, false
	}
	return fs, true
}

// The typed readers report TS0003 at the value on a type mismatch.

func (c *lineCtx) str(f field) (string, bool) {
	var s string
	if err := json.Unmarshal(f.Raw, &s); err != nil {
		c.errorf(diag.BadValue, f.ValOff, "", "%s must be a string", f.Key)
		return "", false
	}
	return s, true
}

func (c *lineCtx) boolean(f field) (bool, bool) {
	switch string(f.Raw) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	c.errorf(diag.BadValue, f.ValOff, "", "%s must be true or false", f.Key)
	return false, false
}

// integer accepts a JSON integer literal within [lo, hi].
func (c *lineCtx) integer(f field, lo, hi int64) (int64, bool) {
	v, err := strconv.ParseInt(string(f.Raw), 10, 64)
	if err != nil || v < lo || v > hi {
		c.errorf(diag.BadValue, f.ValOff, "", "%s must be an integer in [%d, %d], got %s", f.Key, lo, hi, f.Raw)
		return 0, false
	}
	return v, true
}

// number accepts any JSON number as a float64 (finite by JSON's grammar;
// overflow is an error).
func (c *lineCtx) number(f field) (float64, bool) {
	v, err := jsonNumber(f.Raw)
	if err != nil {
		c.errorf(diag.BadValue, f.ValOff, "", "%s %v", f.Key, err)
		return 0, false
	}
	return v, true
}

// jsonNumber reads a JSON number literal (not a string holding one) as a
// float64; overflow is an error.
func jsonNumber(raw json.RawMessage) (float64, error) {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, fmt.Errorf("must be a number, got %s", raw)
	}
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return 0, fmt.Errorf("number %s out of range", raw)
	}
	return v, nil
}

// FieldCol returns the 1-based column (in bytes) of the value of field key
// in a manifest line, as the parsers report positions, or 1 when the line
// is not a well-formed object or lacks the field. Tools use it to point at
// a field that a later check (for example theseusc lint comparing an entry
// with its schedule file) finds wrong.
func FieldCol(text []byte, key string) int {
	c := &lineCtx{text: text}
	fs, _ := c.object()
	for _, f := range fs {
		if f.Key == key {
			return c.col(f.ValOff)
		}
	}
	return 1
}

// badByte returns the offset of the byte a json.SyntaxError is about.
// Its Offset counts the bytes read, which the decoder sometimes stops one
// past the offending byte and sometimes before it; an "invalid character
// 'c'" error names the byte, so the nearest c is taken. Otherwise off.
func badByte(b []byte, off int, msg string) int {
	const pre = "invalid character "
	i := strings.Index(msg, pre)
	if i < 0 {
		return off
	}
	rest, ok := strings.CutPrefix(msg[i+len(pre):], "'")
	if !ok {
		return off
	}
	j := strings.Index(rest, "'")
	if j < 0 {
		return off
	}
	if j == 0 { // the character is a quote: '\''
		j = strings.Index(rest[1:], "'") + 1
	}
	r, _, tail, err := strconv.UnquoteChar(rest[:j], '\'')
	if err != nil || tail != "" || r > 0xff {
		return off
	}
	for _, o := range []int{off, off - 1, off + 1, off - 2} {
		if o >= 0 && o < len(b) && rune(b[o]) == r {
			return o
		}
	}
	return off
}

// TooLong is the diagnostic for line (1-based) of file when the line is
// longer than MaxLineBytes: the runtime skips such a line (Tail), and
// theseusc lint reports it the same way.
func TooLong(file string, line int) diag.Diagnostic {
	return diag.Diagnostic{Code: diag.TooLarge, Severity: diag.Error, File: file, Line: line, Col: 1,
		Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("line longer than %d bytes", MaxLineBytes), Hint: "split the value"}
}
