package irtext_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

var update = flag.Bool("update", false, "rewrite ir/testdata fixture files and .golden files")

const testdata = "../testdata"

func mustPrint(t testing.TB, p *ir.Program) string {
	t.Helper()
	var b bytes.Buffer
	if err := ir.Print(&b, p); err != nil {
		t.Fatalf("Print: %v", err)
	}
	return b.String()
}

func mustParse(t testing.TB, name string, src []byte) *ir.Program {
	t.Helper()
	p, ds := irtext.Parse(name, src)
	if p == nil || len(ds) > 0 {
		var msgs []string
		for _, d := range ds {
			msgs = append(msgs, d.String())
		}
		t.Fatalf("Parse(%s) failed:\n%s", name, strings.Join(msgs, "\n"))
	}
	return p
}

// fixtures are the irtest programs kept as text in ir/testdata, so that
// tests of other packages can load them from files as well.
var fixtures = map[string]func() *ir.Program{
	"ring_allreduce_4.tir":    func() *ir.Program { return irtest.RingAllReduce(4, ir.Simple) },
	"ring_allreduce_ll_3.tir": func() *ir.Program { return irtest.RingAllReduce(3, ir.LL) },
	"pairs_allreduce_3.tir":   func() *ir.Program { return irtest.PairsAllReducePrimitive(3) },
	"allgather_ring_4.tir":    func() *ir.Program { return irtest.AllGatherRing(4) },
}

func TestFixtureFiles(t *testing.T) {
	for name, mk := range fixtures {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(testdata, name)
			want := mustPrint(t, mk())
			if *update {
				if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./ir/irtext -update)", err)
			}
			if d := cmp.Diff(want, string(got)); d != "" {
				t.Errorf("%s is stale (-printed +file); run go test ./ir/irtext -update:\n%s", path, d)
			}
			if d := irtest.Diff(mk(), mustParse(t, path, got)); d != "" {
				t.Errorf("parsed %s differs from the builder (-want +got):\n%s", path, d)
			}
		})
	}
}

// TestRoundTripFiles: for every ir/testdata/*.tir, parse → print gives the
// file itself, or its .golden where the printer normalises; and parsing
// the printed text gives the same program and prints the same text again.
func TestRoundTripFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testdata, "*.tir"))
	if err != nil || len(files) < 6 {
		t.Fatalf("found %d testdata files (%v)", len(files), err)
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			src, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			p := mustParse(t, path, src)
			if p.File != path {
				t.Errorf("File = %q, want %q", p.File, path)
			}
			printed := mustPrint(t, p)
			golden := path + ".golden"
			want := string(src)
			if *update {
				if printed != want {
					if err := os.WriteFile(golden, []byte(printed), 0o644); err != nil {
						t.Fatal(err)
					}
				} else if err := os.Remove(golden); err != nil && !os.IsNotExist(err) {
					t.Fatal(err)
				}
			}
			if g, err := os.ReadFile(golden); err == nil {
				want = string(g)
				if want == string(src) {
					t.Errorf("%s equals its source; remove it (go test -update does)", golden)
				}
			}
			if d := cmp.Diff(want, printed); d != "" {
				t.Errorf("print(parse(%s)) (-want +got):\n%s", path, d)
			}
			q := mustParse(t, "printed", []byte(printed))
			if d := irtest.Diff(p, q); d != "" {
				t.Errorf("parse(print(p)) != p (-want +got):\n%s", d)
			}
			if again := mustPrint(t, q); again != printed {
				t.Errorf("printing is not idempotent:\n%s\nthen\n%s", printed, again)
			}
		})
	}
}

func TestBuilderProgramsRoundTrip(t *testing.T) {
	for n := 1; n <= 8; n++ {
		for _, p := range []*ir.Program{
			irtest.RingAllReduce(n, ir.Simple), irtest.RingAllReduce(n, ir.LL),
			irtest.PairsAllReducePrimitive(n), irtest.AllGatherRing(n),
		} {
			q := mustParse(t, p.Name, []byte(mustPrint(t, p)))
			if d := irtest.Diff(p, q); d != "" {
				t.Errorf("%s: parse(print(p)) (-want +got):\n%s", p.Name, d)
			}
		}
	}
}

var cmpIgnorePos = irtest.CmpOpts
