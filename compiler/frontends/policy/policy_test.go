package policy

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/diag"
)

var update = flag.Bool("update", false, "rewrite golden files")

// testAttrs is a small attribute manifest: endo request fields and exo
// attributes of every type.
var testAttrs = AttrMap{
	"coll":      {Name: "coll", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqColl},
	"msgsize":   {Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqMessageSize},
	"nranks":    {Name: "nranks", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqNRanks},
	"sendbuf":   {Name: "sendbuf", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqSendBuf},
	"slow_rank": {Name: "slow_rank", Type: bc.Int, Origin: bc.Exo},
	"load":      {Name: "load", Type: bc.Float, Origin: bc.Exo},
	"degraded":  {Name: "degraded", Type: bc.Bool, Origin: bc.Exo},
	"bw":        {Name: "bw", Type: bc.Vector, Origin: bc.Exo},
	"badendo":   {Name: "badendo", Type: bc.Float, Origin: bc.Endo, Path: bc.ReqCount},
}

func TestParseCheckTrees(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"1 + 2 * 3", "(1 + (2 * 3):int):int"},
		{"1 - 2 - 3", "((1 - 2):int - 3):int"},
		{"-x_y", ""},
		{"msgsize < 1024 || degraded && !degraded", "((msgsize:int < 1024):bool || (degraded:bool && (!degraded:bool):bool):bool):bool"},
		{"degraded ? 1 : 2.5", "(degraded:bool ? float(1) : 2.5):float"},
		{"a ? b ? 1 : 2 : 3", ""},
		{"load * msgsize", "(load:float * float(msgsize:int)):float"},
		{"bw[slow_rank] + len(bw)", "(bw:vector[slow_rank:int]:float + float(len(bw:vector):int)):float"},
		{"contains([1, -2.5, 3], slow_rank)", "contains([1.0, -2.5, 3.0], float(slow_rank:int)):bool"},
		{"min(1, 2, load)", "min(float(1), float(2), load:float):float"},
		{"clamp(msgsize, 0, 10)", "clamp(msgsize:int, 0, 10):int"},
		{"floor(load) % 3", "(floor(load:float):int % 3):int"},
		{"pow(2, 10) == msgsize", "(pow(float(2), float(10)):float == float(msgsize:int)):bool"},
		{"-9223372036854775808", "-9223372036854775808"},
		{"0x10 + 1_000", "(16 + 1000):int"},
		{"1e3 + .5", "(1000.0 + 0.5):float"},
		{"true != false", "(true != false):bool"},
	} {
		t.Run(tc.src, func(t *testing.T) {
			n, ds := Parse(tc.src, Options{})
			if tc.want == "" {
				if n != nil {
					t.Skip("only checks that it parses") // parse-only cases
				}
				return
			}
			if len(ds) > 0 {
				t.Fatalf("Parse: %v", ds)
			}
			n, ds = Check(n, tc.src, testAttrs, Options{})
			if len(ds) > 0 || n == nil {
				t.Fatalf("Check: %v", ds)
			}
			if got := n.String(); got != tc.want {
				t.Fatalf("tree\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

// TestDiagnostics checks the code, the position (in the file the expression
// came from: line 7, expression starting at column 20) and a message
// fragment of each error.
func TestDiagnostics(t *testing.T) {
	type want struct {
		code diag.Code
		sev  diag.Severity
		col  int
		msg  string
	}
	for _, tc := range []struct {
		src  string
		opt  Want
		want want
	}{
		{"msgsize +", WantAny, want{diag.PolicySyntax, diag.Error, 29, "unexpected end of expression, expected an operand"}},
		{"min(1", WantAny, want{diag.PolicySyntax, diag.Error, 25, `expected ")"`}},
		{"1 < 2 < 3", WantAny, want{diag.PolicySyntax, diag.Error, 26, `unexpected "<"`}},
		{"request.count > 0", WantAny, want{diag.PolicySyntax, diag.Error, 27, "unexpected character '.'"}},
		{`coll == "allreduce"`, WantAny, want{diag.PolicySyntax, diag.Error, 28, "unexpected character"}},
		{"", WantAny, want{diag.PolicySyntax, diag.Error, 20, "empty expression"}},
		{"99999999999999999999", WantAny, want{diag.PolicySyntax, diag.Error, 20, "out of range"}},
		{"1_ + 1", WantAny, want{diag.PolicySyntax, diag.Error, 20, "malformed integer literal 1_"}},
		{"0x_", WantAny, want{diag.PolicySyntax, diag.Error, 20, "malformed integer literal 0x_"}},
		{"nosuch > 1", WantAny, want{diag.PolicyUnknown, diag.Error, 20, `unknown attribute "nosuch"`}},
		{"frob(1)", WantAny, want{diag.PolicyUnknown, diag.Error, 20, "unknown function frob"}},
		{"len + 1", WantAny, want{diag.PolicyUnknown, diag.Error, 20, "len is a function"}},
		{"degraded + 1", WantAny, want{diag.PolicyType, diag.Error, 20, "+ needs numbers, got bool"}},
		{"msgsize && true", WantAny, want{diag.PolicyType, diag.Error, 20, "&& needs bools, got int"}},
		{"load ? 1 : 2", WantAny, want{diag.PolicyType, diag.Error, 20, "condition of ?: must be bool"}},
		{"degraded ? 1 : true", WantAny, want{diag.PolicyType, diag.Error, 20, "branches of ?: are int and bool"}},
		{"bw[load]", WantAny, want{diag.PolicyType, diag.Error, 23, "index must be int"}},
		{"msgsize", WantBool, want{diag.PolicyType, diag.Error, 20, "usability expression must be bool"}},
		{"degraded", WantNumber, want{diag.PolicyType, diag.Error, 20, "preference expression must be int or float"}},
		{"badendo > 0", WantAny, want{diag.PolicyType, diag.Error, 20, "request fields are ints"}},
		{"max(1)", WantAny, want{diag.PolicyArity, diag.Error, 20, "at least 2 arguments, got 1"}},
		{"pow(1, 2, 3)", WantAny, want{diag.PolicyArity, diag.Error, 20, "pow takes 2 arguments, got 3"}},
		{"bw + 1", WantAny, want{diag.PolicyVector, diag.Error, 20, "got a vector"}},
		{"bw == bw", WantAny, want{diag.PolicyVector, diag.Error, 20, "vectors cannot be compared"}},
		{"msgsize[0] > 1", WantAny, want{diag.PolicyVector, diag.Error, 20, "only vectors can be indexed"}},
		{"sum(3) > 1", WantAny, want{diag.PolicyVector, diag.Error, 24, "sum needs a vector"}},
		{"contains([1, msgsize], 1)", WantAny, want{diag.PolicyVector, diag.Error, 33, "number literals"}},
		{"bw", WantAny, want{diag.PolicyVector, diag.Error, 20, "must be int, float or bool"}},
		{strings.Repeat("(", 65) + "1" + strings.Repeat(")", 65), WantAny, want{diag.PolicyTooDeep, diag.Error, 84, "nested deeper than 64"}},
		{strings.Repeat("-", 70) + "1.5", WantAny, want{diag.PolicyTooDeep, diag.Error, 20, "nested deeper than 64"}},
		{strings.Repeat("1+", 600) + "1", WantAny, want{diag.PolicyTooDeep, diag.Error, 20, "more than 1024 nodes"}},
		{strings.Repeat(" ", MaxSourceLen+1), WantAny, want{diag.PolicyTooDeep, diag.Error, 20, "over the limit of 4096"}},
		{"1 / (3 - 3) > 0", WantAny, want{diag.PolicyConstFold, diag.Error, 20, `integer division by zero in the constant expression "1 / (3 - 3)"`}},
		{"[1, 2][2] > 0", WantAny, want{diag.PolicyConstFold, diag.Error, 20, "vector index out of range"}},
		{"floor(1e300) > 0", WantAny, want{diag.PolicyConstFold, diag.Error, 20, "float-to-int conversion"}},
		{"sendbuf % 64 == 0", WantBool, want{diag.RankLocalPolicy, diag.Warning, 20, "request.sendbuf"}},
	} {
		t.Run(tc.src, func(t *testing.T) {
			p, ds := Compile(tc.src, testAttrs, Options{Want: tc.opt, File: "schedule_manifest.jsonl", Line: 7, Col: 20})
			if len(ds) == 0 {
				t.Fatalf("no diagnostic")
			}
			d := ds[0]
			got := want{d.Code, d.Severity, d.Col, d.Msg}
			if d.File != "schedule_manifest.jsonl" || d.Line != 7 || !strings.Contains(d.Msg, tc.want.msg) {
				t.Fatalf("diagnostic %v\nwant code %s col %d containing %q", d, tc.want.code, tc.want.col, tc.want.msg)
			}
			got.msg = tc.want.msg
			if got != tc.want {
				t.Fatalf("diagnostic %v\nwant code %s severity %s col %d", d, tc.want.code, tc.want.sev, tc.want.col)
			}
			if d.Hint == "" {
				t.Errorf("diagnostic has no hint: %v", d)
			}
			if (p == nil) != (tc.want.sev == diag.Error) {
				t.Errorf("program %v with a %s", p != nil, tc.want.sev)
			}
		})
	}
}

func TestMultiLinePositions(t *testing.T) {
	_, ds := Compile("msgsize > 0 &&\n  nosuch", testAttrs, Options{File: "f", Line: 3, Col: 10})
	if len(ds) != 1 || ds[0].Line != 4 || ds[0].Col != 3 {
		t.Fatalf("got %v, want f:4:3", ds)
	}
}

func TestValidName(t *testing.T) {
	for name, ok := range map[string]bool{"slow_rank": true, "_x9": true, "9x": false, "a.b": false, "": false,
		"min": false, "true": false, strings.Repeat("a", 65): false, "é": false} {
		if ValidName(name) != ok {
			t.Errorf("ValidName(%q) = %v", name, !ok)
		}
	}
}

// TestFoldingMatchesUnfolded compiles constant expressions with and without
// folding: the folded program is a single push whose value the VM tests
// compare against running the unfolded one.
func TestFolding(t *testing.T) {
	for src, want := range map[string]string{
		"1 + 2 * 3":                          "PUSHI",
		"false && msgsize > 0":               "PUSHB",
		"true || msgsize > 0":                "PUSHB",
		"msgsize > 0 && true":                "REQ,GTIK",
		"true ? msgsize : 3":                 "REQ",
		"len([1, 2, 3]) + floor(2.5)":        "PUSHI",
		"min(3, 1, 2) == 1 ? 1.5 : pow(2,3)": "PUSHF",
	} {
		p, ds := Compile(src, testAttrs, Options{})
		if p == nil {
			t.Fatalf("%s: %v", src, ds)
		}
		var ops []string
		for _, op := range p.Code {
			ops = append(ops, op.String())
		}
		if got := strings.Join(ops, ","); got != want {
			t.Errorf("%s folds to %s, want %s", src, got, want)
		}
	}
}

// TestDisassemblyGolden pins the compiled form of typical policies.
func TestDisassemblyGolden(t *testing.T) {
	cases := []struct {
		name string
		want Want
		src  string
	}{
		{"usable_window", WantBool, "msgsize <= 65536 && slow_rank != 2 && nranks % 2 == 0"},
		{"pref_bandwidth", WantNumber, "100 - log2(msgsize) + (slow_rank >= 0 ? bw[slow_rank] : 0) * load"},
		{"pref_minmax", WantNumber, "clamp(maxof(bw) - minof(bw), 0, 10) + abs(-3) + min(1, msgsize, 7)"},
		{"usable_contains", WantBool, "!contains([0, 3, 5], slow_rank) || degraded == false"},
		{"rank_local", WantBool, "sendbuf % 16 == 0"},
	}
	var out strings.Builder
	for _, c := range cases {
		p, ds := Compile(c.src, testAttrs, Options{Want: c.want})
		if p == nil {
			t.Fatalf("%s: %v", c.name, ds)
		}
		fmt.Fprintf(&out, "== %s\n%s\n", c.name, p.Disassemble())
		// The binary form round-trips.
		q, err := bc.Unmarshal(bc.Marshal(p))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if d := cmp.Diff(p, q); d != "" {
			t.Fatalf("%s: binary round trip (-want +got):\n%s", c.name, d)
		}
	}
	golden := filepath.Join("testdata", "disasm.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if d := cmp.Diff(string(want), out.String()); d != "" {
		t.Fatalf("disassembly differs from %s (-want +got):\n%s", golden, d)
	}
}
