package irtext

import (
	"testing"

	"github.com/alecthomas/participle/v2/lexer"
	"github.com/google/go-cmp/cmp"
)

type tok struct {
	Type      string
	Value     string
	Line, Col int
}

func lexAll(src string) ([]tok, error) {
	names := lexer.SymbolsByRune(textLexer)
	l, _ := textLexer.(textLexerDef).LexString("l", src)
	var out []tok
	for {
		t, err := l.Next()
		if err != nil {
			return out, err
		}
		out = append(out, tok{names[t.Type], t.Value, t.Pos.Line, t.Pos.Column})
		if t.EOF() {
			return out, nil
		}
	}
}

func TestLexer(t *testing.T) {
	src := "rank -12 @-1:s[3+-2]/pkt -> x_1 # comment é\n  \"a\\\"é\" @7,(0,1)\t=.{}#eof\nO_2[7] in[0+1]/pkt,"
	want := []tok{
		{"Ident", "rank", 1, 1}, {"Int", "-12", 1, 6}, {"Ref", "@-1:s[3+-2]/pkt", 1, 10},
		{"Arrow", "->", 1, 26}, {"Ident", "x_1", 1, 29},
		{"String", `"a\"é"`, 2, 3}, {"Chan", "@7", 2, 10}, {"Punct", ",", 2, 12}, {"Punct", "(", 2, 13},
		{"Int", "0", 2, 14}, {"Punct", ",", 2, 15}, {"Int", "1", 2, 16}, {"Punct", ")", 2, 17},
		{"Punct", "=", 2, 19}, {"Punct", ".", 2, 20}, {"Punct", "{", 2, 21}, {"Punct", "}", 2, 22},
		{"Ref", "O_2[7]", 3, 1}, {"Ref", "in[0+1]/pkt", 3, 8}, {"Punct", ",", 3, 19},
		{"EOF", "", 3, 20},
	}
	got, err := lexAll(src)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("tokens (-want +got):\n%s", d)
	}
}

func TestLexerErrors(t *testing.T) {
	cases := []struct {
		src       string
		line, col int
		msg       string
	}{
		{`"abc`, 1, 1, "unterminated string"},
		{"\"ab\ncd\"", 1, 1, "unterminated string"},
		{"\"ab\\\ncd\"", 1, 1, "unterminated string"},
		{`"ab\`, 1, 1, "unterminated string"},
		{"x @ 1", 1, 3, `"@" must be followed by a channel number`},
		{"x @-", 1, 3, `"@" must be followed by a channel number`},
		{"é - 1", 1, 1, "invalid character 'é'"},
		{"a\n - 1", 2, 2, "invalid character '-'"},
		{"a ;", 1, 3, "invalid character ';'"},
		{"a \xff", 1, 3, "invalid character (invalid UTF-8)"},
		{"x i [0]", 1, 5, `"[" outside a ref (write refs without spaces, e.g. i[0+2])`},
		{"x i[", 1, 5, "expected the chunk offset (an integer) in the ref"},
		{"x i[-]", 1, 5, "expected the chunk offset (an integer) in the ref"},
		{"x i[0+]", 1, 7, "expected the chunk count (an integer) in the ref"},
		{"x i[0 ]", 1, 6, `expected "]" or "+count" in the ref`},
		{"x i[0]/pk", 1, 7, `expected "/pkt" after the ref`},
		{"x i[0]/pkts", 1, 7, `expected "/pkt" after the ref`},
		{"x @0:", 1, 6, `expected a buffer (i, o or s) after "@0:"`},
		{"x @0:[0]", 1, 6, `expected a buffer (i, o or s) after "@0:"`},
		{"x @-3:i 0", 1, 8, `expected "[" after the buffer name`},
		{"x ]", 1, 3, "invalid character ']'"},
	}
	for _, c := range cases {
		_, err := lexAll(c.src)
		le, ok := err.(*lexer.Error)
		if !ok || le.Pos.Line != c.line || le.Pos.Column != c.col || le.Msg != c.msg {
			t.Errorf("lex %q: %v, want %d:%d %s", c.src, err, c.line, c.col, c.msg)
		}
	}
}
