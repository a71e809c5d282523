package irtext

import (
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2/lexer"
)

// textLexer is the lexer.Definition of the textual IR: a participle lexer
// written as a small scanner, because the regexp-driven lexer.MustSimple
// spent most of the parse time matching. It produces the same tokens the
// rules below would:
//
//	Comment    = "#" { not newline } .        (skipped)
//	Whitespace = { " " | "\t" | "\r" | "\n" } .  (skipped)
//	String     = `"` { `\` any | not `"`, `\` or newline } `"` .
//	Int        = [ "-" ] digit { digit } .
//	Chan       = "@" Int .
//	Ref        = [ Chan ":" ] Ident "[" Int [ "+" Int ] "]" [ "/pkt" ] .  (no spaces)
//	Ident      = letter { letter | digit } .   (letter includes "_")
//	Arrow      = "->" .
//	Punct      = one of { } ( ) , . = .
//
// Positions are 1-based lines and columns counted in runes, as participle's
// own lexers count them.
type textLexerDef struct{}

var textLexer lexer.Definition = textLexerDef{}

// Token types (lexer.EOF is -1).
const (
	tokString lexer.TokenType = -(iota + 2)
	tokInt
	tokIdent
	tokArrow
	tokPunct
	tokChan
	tokRef
)

func (textLexerDef) Symbols() map[string]lexer.TokenType {
	return map[string]lexer.TokenType{
		"EOF": lexer.EOF, "String": tokString, "Int": tokInt, "Ident": tokIdent, "Arrow": tokArrow, "Punct": tokPunct, "Chan": tokChan, "Ref": tokRef,
	}
}

func (d textLexerDef) Lex(filename string, r io.Reader) (lexer.Lexer, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return d.LexString(filename, string(b))
}

func (textLexerDef) LexBytes(filename string, src []byte) (lexer.Lexer, error) {
	return &scanner{src: string(src), pos: lexer.Position{Filename: filename, Line: 1, Column: 1}}, nil
}

func (textLexerDef) LexString(filename string, src string) (lexer.Lexer, error) {
	return &scanner{src: src, pos: lexer.Position{Filename: filename, Line: 1, Column: 1}}, nil
}

// scanner yields the tokens of src; token values are substrings of src.
type scanner struct {
	src string
	pos lexer.Position // of src[pos.Offset]
}

// advance moves the position over src[pos.Offset:end], which holds no
// newline unless it is a single "\n".
func (s *scanner) advance(end int) {
	for s.pos.Offset < end {
		c := s.src[s.pos.Offset]
		if c == '\n' {
			s.pos.Line++
			s.pos.Column = 1
			s.pos.Offset++
			continue
		}
		if c < utf8.RuneSelf {
			s.pos.Offset++
		} else {
			_, n := utf8.DecodeRuneInString(s.src[s.pos.Offset:])
			s.pos.Offset += n
		}
		s.pos.Column++
	}
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

func (s *scanner) Next() (lexer.Token, error) {
	src := s.src
	// Skip whitespace and comments.
	for s.pos.Offset < len(src) {
		c := src[s.pos.Offset]
		switch {
		case c == ' ' || c == '\t' || c == '\r' || c == '\n':
			s.advance(s.pos.Offset + 1)
			continue
		case c == '#':
			end := s.pos.Offset
			for end < len(src) && src[end] != '\n' {
				end++
			}
			s.advance(end)
			continue
		}
		break
	}
	start := s.pos
	i := start.Offset
	if i >= len(src) {
		return lexer.EOFToken(start), nil
	}
	c := src[i]
	typ := tokPunct
	end := i + 1
	switch {
	case isLetter(c):
		typ = tokIdent
		for end < len(src) && (isLetter(src[end]) || isDigit(src[end])) {
			end++
		}
		if end < len(src) && src[end] == '[' {
			typ = tokRef
			var err *lexer.Error
			if end, err = s.scanRefTail(end); err != nil {
				return lexer.Token{}, err
			}
		}
	case isDigit(c) || c == '-' && end < len(src) && isDigit(src[end]):
		typ = tokInt
		for end < len(src) && isDigit(src[end]) {
			end++
		}
	case c == '@':
		// "@" Int, one token; a bare "@" is invalid.
		if end < len(src) && src[end] == '-' {
			end++
		}
		if end >= len(src) || !isDigit(src[end]) {
			return lexer.Token{}, &lexer.Error{Msg: `"@" must be followed by a channel number`, Pos: start}
		}
		typ = tokChan
		for end < len(src) && isDigit(src[end]) {
			end++
		}
		if end < len(src) && src[end] == ':' {
			// "@c:" starts a remote ref.
			typ = tokRef
			b := end + 1
			if b >= len(src) || !isLetter(src[b]) {
				return lexer.Token{}, s.errAt(b, "expected a buffer (i, o or s) after "+strconv.Quote(src[i:b]))
			}
			for end = b; end < len(src) && (isLetter(src[end]) || isDigit(src[end])); end++ {
			}
			if end >= len(src) || src[end] != '[' {
				return lexer.Token{}, s.errAt(end, `expected "[" after the buffer name`)
			}
			var err *lexer.Error
			if end, err = s.scanRefTail(end); err != nil {
				return lexer.Token{}, err
			}
		}
	case c == '"':
		typ = tokString
		for {
			if end >= len(src) || src[end] == '\n' {
				return lexer.Token{}, &lexer.Error{Msg: "unterminated string", Pos: start}
			}
			if src[end] == '\\' {
				if end+1 < len(src) && src[end+1] == '\n' {
					end++ // an escaped newline ends the line, and the string with it
					continue
				}
				end = min(end+2, len(src))
				continue
			}
			end++
			if src[end-1] == '"' {
				break
			}
		}
	case c == '-' && i+1 < len(src) && src[i+1] == '>':
		typ = tokArrow
		end = i + 2
	case c == '{' || c == '}' || c == '(' || c == ')' || c == ',' || c == '.' || c == '=':
	case c == '[':
		return lexer.Token{}, s.errAt(i, `"[" outside a ref (write refs without spaces, e.g. i[0+2])`)
	default:
		r, _ := utf8.DecodeRuneInString(src[i:])
		return lexer.Token{}, &lexer.Error{Msg: "invalid character " + quoteRune(r), Pos: start}
	}
	s.advance(end)
	return lexer.Token{Type: typ, Value: src[i:end], Pos: start}, nil
}

// errAt is a lexer error at byte offset off, which lies on the line of
// s.pos at or after it and holds only ASCII between s.pos and off.
func (s *scanner) errAt(off int, msg string) *lexer.Error {
	pos := s.pos
	pos.Column += off - pos.Offset
	pos.Offset = off
	return &lexer.Error{Msg: msg, Pos: pos}
}

// scanRefTail scans the part of a ref from its "[" at src[i]:
//
//	"[" Int [ "+" Int ] "]" [ "/pkt" ]
//
// and returns the offset just past it.
func (s *scanner) scanRefTail(i int) (int, *lexer.Error) {
	src := s.src
	int_ := func(j int, what string) (int, *lexer.Error) {
		k := j
		if k < len(src) && src[k] == '-' {
			k++
		}
		if k >= len(src) || !isDigit(src[k]) {
			return 0, s.errAt(j, "expected the "+what+" (an integer) in the ref")
		}
		for k < len(src) && isDigit(src[k]) {
			k++
		}
		return k, nil
	}
	j, err := int_(i+1, "chunk offset")
	if err != nil {
		return 0, err
	}
	if j < len(src) && src[j] == '+' {
		if j, err = int_(j+1, "chunk count"); err != nil {
			return 0, err
		}
	}
	if j >= len(src) || src[j] != ']' {
		return 0, s.errAt(j, `expected "]" or "+count" in the ref`)
	}
	j++
	if j < len(src) && src[j] == '/' {
		if !strings.HasPrefix(src[j:], "/pkt") || j+4 < len(src) && (isLetter(src[j+4]) || isDigit(src[j+4])) {
			return 0, s.errAt(j, `expected "/pkt" after the ref`)
		}
		j += 4
	}
	return j, nil
}

// refParts is a Ref token split into its parts; col* are byte offsets of
// the parts in the token (a Ref token is ASCII).
type refParts struct {
	chanV, buf, off, count   string
	bufCol, offCol, countCol int
	packet                   bool
}

// splitRef splits a token the lexer accepted as a Ref.
func splitRef(v string) refParts {
	var p refParts
	i := 0
	if strings.HasPrefix(v, "@") {
		c := strings.IndexByte(v, ':')
		p.chanV, i = v[1:c], c+1
	}
	p.bufCol = i
	lb := strings.IndexByte(v, '[')
	rb := strings.IndexByte(v, ']')
	p.buf = v[i:lb]
	p.offCol = lb + 1
	inner := v[lb+1 : rb]
	if plus := strings.IndexByte(inner, '+'); plus >= 0 {
		p.off, p.count = inner[:plus], inner[plus+1:]
		p.countCol = lb + 1 + plus + 1
	} else {
		p.off = inner
	}
	p.packet = strings.HasSuffix(v, "/pkt")
	return p
}

func quoteRune(r rune) string {
	if r == utf8.RuneError {
		return "(invalid UTF-8)"
	}
	return strconv.QuoteRune(r)
}
