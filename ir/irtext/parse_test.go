package irtext_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

func TestPositions(t *testing.T) {
	src := `# header comment
program "p" allreduce nranks=1 chunks=1
rank 0 {
  channel 0 peer=0.1 memory
  channel 1 peer=0.0 memory
  tb 0 {
    signal @0
      wait @1   nop
  }
}
`
	p := mustParse(t, "pos.tir", []byte(src))
	type pos = ir.Pos
	got := []pos{p.Pos, p.Ranks[0].Pos, p.Ranks[0].Channels[0].Pos, p.Ranks[0].Channels[1].Pos, p.Ranks[0].TBs[0].Pos}
	for _, op := range p.Ranks[0].TBs[0].Ops {
		got = append(got, op.Pos)
	}
	want := []pos{{Line: 2, Col: 1}, {Line: 3, Col: 1}, {Line: 4, Col: 3}, {Line: 5, Col: 3}, {Line: 6, Col: 3}, {Line: 7, Col: 5}, {Line: 8, Col: 7}, {Line: 8, Col: 17}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("positions (-want +got):\n%s", d)
	}
	if p.File != "pos.tir" {
		t.Errorf("File = %q", p.File)
	}
}

type wantDiag struct {
	Code           diag.Code
	Line, Col      int
	Rank, TB, Step int
	MsgPart        string
}

func TestErrors(t *testing.T) {
	const hdr = "program \"p\" allreduce nranks=2 chunks=1\n"
	cases := []struct {
		name string
		src  string
		want []wantDiag
	}{
		{"empty", "", []wantDiag{{diag.Syntax, 1, 1, -1, -1, -1, "unexpected"}}},
		{"missing brace", hdr + "rank 0 {\n  tb 0 {\n    send i[0]\n}\n", []wantDiag{{diag.Syntax, 6, 1, -1, -1, -1, "unexpected"}}},
		{"bad token", hdr + "rank 0 ! {}\n", []wantDiag{{diag.Syntax, 2, 8, -1, -1, -1, ""}}},
		{"unterminated string", "program \"p allreduce nranks=1 chunks=1\n", []wantDiag{{diag.Syntax, 1, 9, -1, -1, -1, ""}}},
		{"unknown collective", "program \"p\" allsum nranks=1 chunks=1\n", []wantDiag{{diag.UnknownCollective, 1, 13, -1, -1, -1, `"allsum"`}}},
		{"unknown protocol", "program \"p\" allreduce nranks=1 chunks=1 protocol=ll128\n", []wantDiag{{diag.BadValue, 1, 50, -1, -1, -1, `"ll128"`}}},
		{"missing nranks", "program \"p\" allreduce chunks=1\n", []wantDiag{{diag.MissingField, 1, 1, -1, -1, -1, "nranks"}}},
		{"missing chunks", "program \"p\" allreduce nranks=1\n", []wantDiag{{diag.MissingField, 1, 1, -1, -1, -1, "chunks"}}},
		{"duplicate attr", "program \"p\" allreduce nranks=1 nranks=2 chunks=1\n", []wantDiag{{diag.BadValue, 1, 32, -1, -1, -1, "twice"}}},
		{"duplicate meta", hdr + "meta \"a\" = \"1\"\nmeta \"a\" = \"2\"\n", []wantDiag{{diag.BadValue, 3, 1, -1, -1, -1, `"a"`}}},
		{"bad escape", "program \"\\q\" allreduce nranks=1 chunks=1\n", []wantDiag{{diag.BadValue, 1, 1, -1, -1, -1, "program name"}}},
		{"nranks too large", "program \"p\" allreduce nranks=65537 chunks=1\n", []wantDiag{{diag.TooLarge, 1, 30, -1, -1, -1, "65537"}}},
		{"nranks negative", "program \"p\" allreduce nranks=-1 chunks=1\n", []wantDiag{{diag.BadValue, 1, 30, -1, -1, -1, "negative"}}},
		{"nranks absurd", "program \"p\" allreduce nranks=99999999999999999999999 chunks=1\n", []wantDiag{{diag.BadValue, 1, 30, -1, -1, -1, "out of range"}}},
		{"chunks too large", "program \"p\" allreduce nranks=1 chunks=1099511627777\n", []wantDiag{{diag.TooLarge, 1, 39, -1, -1, -1, "1099511627777"}}},
		{"scratch too large", hdr + "rank 0 scratch=-2000000000000 {}\n", []wantDiag{{diag.TooLarge, 2, 16, -1, -1, -1, "scratch"}}},
		{"rank out of order", hdr + "rank 1 {}\nrank 0 {}\n", []wantDiag{
			{diag.DuplicateID, 2, 6, -1, -1, -1, "rank 1 declared where rank 0"},
			{diag.DuplicateID, 3, 6, -1, -1, -1, "rank 0 declared where rank 1"}}},
		{"tb repeated", hdr + "rank 0 {\n tb 0 {}\n tb 0 {}\n}\n", []wantDiag{{diag.DuplicateID, 4, 5, -1, -1, -1, "tb 0 declared where tb 1"}}},
		{"channel gap", hdr + "rank 0 {\n channel 1 peer=1.0 memory\n}\n", []wantDiag{{diag.DuplicateID, 3, 10, -1, -1, -1, "channel 1"}}},
		{"channel without peer", hdr + "rank 0 {\n channel 0 memory\n}\n", []wantDiag{{diag.MissingField, 3, 2, -1, -1, -1, "peer"}}},
		{"rank attr on tb", hdr + "rank 0 {\n tb 0 input=1 {}\n}\n", []wantDiag{{diag.UnknownField, 3, 7, -1, -1, -1, "not a tb attribute"}}},
		{"tb attr on rank", hdr + "rank 0 chan=1 {}\n", []wantDiag{{diag.UnknownField, 2, 8, -1, -1, -1, "not a rank attribute"}}},
		{"unknown header attr", "program \"p\" allreduce nrank=1 nranks=1 chunks=1\n", []wantDiag{{diag.UnknownField, 1, 23, -1, -1, -1, "nrank"}}},
		{"protocol number", "program \"p\" allreduce nranks=1 chunks=1 protocol=1\n", []wantDiag{{diag.BadValue, 1, 50, -1, -1, -1, "not a protocol"}}},
		{"nranks word", "program \"p\" allreduce nranks=four chunks=1\n", []wantDiag{{diag.BadValue, 1, 30, -1, -1, -1, "not an integer"}}},
		{"unknown channel attr", hdr + "rank 0 {\n channel 0 peer=1.0 credits=4\n}\n", []wantDiag{{diag.UnknownField, 3, 21, -1, -1, -1, "credits"}}},
		{"unknown op", hdr + "rank 0 {\n tb 0 {\n  nop\n  sendd i[0]\n }\n}\n", []wantDiag{{diag.UnknownOp, 5, 3, 0, 0, 1, `"sendd"`}}},
		{"unknown buffer", hdr + "rank 0 {\n}\nrank 1 {\n tb 0 {\n  send x[0]\n }\n}\n", []wantDiag{{diag.BadValue, 6, 8, 1, 0, 0, `"x"`}}},
		{"count mismatch", hdr + "rank 0 {\n tb 0 {\n  copy i[0+2] -> o[0]\n }\n}\n", []wantDiag{{diag.BadValue, 4, 18, 0, 0, 0, "earlier ref"}}},
		{"count attr mismatch", hdr + "rank 0 {\n tb 0 {\n  copy i[0+2] -> o[0+2] count=3\n }\n}\n", []wantDiag{{diag.BadValue, 4, 25, 0, 0, 0, "count=3"}}},
		{"offset too large", hdr + "rank 0 {\n tb 0 {\n  copy i[2000000000000] -> o[0]\n }\n}\n", []wantDiag{{diag.TooLarge, 4, 10, 0, 0, 0, "offset"}}},
		{"op count too large", hdr + "rank 0 {\n tb 0 {\n  nop count=2000000000000\n }\n}\n", []wantDiag{{diag.TooLarge, 4, 13, 0, 0, 0, "count"}}},
		{"duplicate publish", hdr + "rank 0 {\n tb 0 {\n  nop publish publish\n }\n}\n", []wantDiag{{diag.BadValue, 4, 15, 0, 0, 0, "publish"}}},
		{"dep out of int range", hdr + "rank 0 {\n tb 0 {\n  nop deps=(1,99999999999999999999)\n }\n}\n", []wantDiag{{diag.BadValue, 4, 15, 0, 0, 0, "out of range"}}},
		{"several errors", hdr + "rank 0 {\n tb 0 {\n  foo\n  bar\n  copy q[0] -> o[0]\n }\n}\n", []wantDiag{
			{diag.UnknownOp, 4, 3, 0, 0, 0, `"foo"`},
			{diag.UnknownOp, 5, 3, 0, 0, 1, `"bar"`},
			{diag.BadValue, 6, 8, 0, 0, 2, `"q"`}}},
		{"trailing comma", hdr + "rank 0 {\n tb 0 {\n  signal @0,\n }\n}\n", []wantDiag{{diag.Syntax, 4, 12, -1, -1, -1, "unexpected"}}},
		{"no header", "rank 0 {}\n", []wantDiag{{diag.Syntax, 1, 1, -1, -1, -1, `unexpected token "rank"`}}},
		{"stray brace", hdr + "rank 0 {}\n}\n", []wantDiag{{diag.Syntax, 3, 1, -1, -1, -1, `unexpected token "}"`}}},
		{"rank without its number", hdr + "rank {}\n", []wantDiag{{diag.Syntax, 2, 6, -1, -1, -1, `unexpected token "{" (expected a number)`}}},
		{"error after semantic errors", hdr + "rank 0 {\n tb 0 {\n  foo\n }\n}\nrank 1 { tb 0 { send i[0] -> } }\n", []wantDiag{
			{diag.UnknownOp, 4, 3, 0, 0, 0, `"foo"`},
			{diag.Syntax, 7, 27, -1, -1, -1, "unexpected"}}},
		{"text after program", hdr + "rank 0 {}\nprogram \"q\" allreduce nranks=1 chunks=1\n", []wantDiag{{diag.Syntax, 3, 1, -1, -1, -1, "unexpected"}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, ds := irtext.Parse("e.tir", []byte(c.src))
			if p != nil {
				t.Errorf("Parse returned a program with errors")
			}
			var got []wantDiag
			for _, d := range ds {
				if d.Severity != diag.Error || d.File != "e.tir" || d.Hint == "" || d.Msg == "" {
					t.Errorf("diagnostic %v: want an error with file, message and hint", d)
				}
				part := ""
				for _, w := range c.want {
					if w.MsgPart != "" && strings.Contains(d.Msg, w.MsgPart) {
						part = w.MsgPart
					}
				}
				got = append(got, wantDiag{d.Code, d.Line, d.Col, d.Rank, d.TB, d.Step, part})
			}
			if d := cmp.Diff(c.want, got); d != "" {
				for _, d := range ds {
					t.Log(d)
				}
				t.Errorf("diagnostics (-want +got):\n%s", d)
			}
		})
	}
}

func TestSourceTooLarge(t *testing.T) {
	src := make([]byte, irtext.MaxSourceBytes+1)
	p, ds := irtext.Parse("big.tir", src)
	if p != nil || len(ds) != 1 || ds[0].Code != diag.TooLarge {
		t.Fatalf("Parse(%d bytes) = %v, %v; want one TS0011", len(src), p, ds)
	}
}

// TestLenient: the parser leaves meaning to the verifier, so every field
// can hold what the IR can, including values a valid program never has.
func TestLenient(t *testing.T) {
	src := `program "" custom nranks=0 chunks=-3 protocol=ll root=5 nlocalranks=65536 minbytes=-1 maxbytes=-2 threads=-3 slicebytes=-4
rank 7 {}
`
	_, ds := irtext.Parse("l.tir", []byte(src))
	if len(ds) != 1 || ds[0].Code != diag.DuplicateID {
		t.Fatalf("want only the rank id error, got %v", ds)
	}
	p := mustParse(t, "l.tir", []byte(strings.Replace(src, "rank 7", "rank 0", 1)))
	want := &ir.Program{Collective: ir.Custom, ChunksPerBlock: -3, Protocol: ir.LL, Root: 5, NLocalRanks: ir.MaxRanks,
		MinBytes: -1, MaxBytes: -2, NumThreads: -3, SliceBytes: -4, Ranks: []ir.Rank{{}}}
	if d := cmp.Diff(want, p, cmpIgnorePos...); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestPieceTooLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("parses 2^18 tokens")
	}
	hdr := "program \"w\" custom nranks=1 chunks=1\n"
	src := hdr + "rank 0 {\n tb 0 {" + strings.Repeat("nop ", irtext.MaxPieceTokens) + "} }"
	p, ds := irtext.Parse("big.tir", []byte(src))
	want := []wantDiag{{diag.TooLarge, 3, 8 + 4*(irtext.MaxPieceTokens-6), -1, -1, -1, ""}} // the first token past the limit
	var got []wantDiag
	for _, d := range ds {
		got = append(got, wantDiag{d.Code, d.Line, d.Col, d.Rank, d.TB, d.Step, ""})
	}
	if p != nil || !cmp.Equal(want, got) {
		t.Errorf("Parse = %v, %v; want %v", p != nil, ds, want)
	}
}
