package contexts

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtext"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

var full = flag.Bool("contexts.full", false, "simulate every schedule of the default context over a wide case matrix")

func mustBuild(t *testing.T) (map[string][]byte, []*entry, map[string]*compiled) {
	t.Helper()
	files, es, comp, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return files, es, comp
}

func errorDiags(ds []diag.Diagnostic) []diag.Diagnostic {
	var out []diag.Diagnostic
	for _, d := range ds {
		if d.Severity == diag.Error {
			out = append(out, d)
		}
	}
	return out
}

// TestVerify proves every schedule with compiler/verify: the generated
// program, its legalised form at the primitive level, and the source
// embedded in the committed bundle; and loads every committed bundle the way
// the runtime does (runtime/selector/schedfile), checking its metadata
// against the manifest line.
func TestVerify(t *testing.T) {
	_, es, comp := mustBuild(t)
	dir := t.TempDir()
	if err := Materialize(dir); err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if ds := errorDiags(verify.Verify(e.Prog, verify.Options{})); len(ds) > 0 {
			t.Errorf("%s: %v", e.Name, ds)
		}
		if ds := errorDiags(verify.Verify(comp[e.Name].Prog, verify.Options{Level: ir.LevelPrimitive})); len(ds) > 0 {
			t.Errorf("%s legalised: %v", e.Name, ds)
		}
		info, err := schedfile.Loader{}.Load(filepath.Join(dir, filepath.FromSlash(fileOf(e.Name))))
		if err != nil {
			t.Errorf("%s: %v", e.Name, err)
			continue
		}
		type meta struct {
			Coll                ir.Collective
			NRanks, NLocalRanks int
			InPlace, OutOfPlace bool
		}
		got := meta{info.Collective, info.NRanks, info.NLocalRanks, info.InPlace, info.OutOfPlace}
		want := meta{e.Opts.Collective, e.Opts.NRanks, e.Opts.NLocalRanks, true, true}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: bundle metadata (-want +got):\n%s", e.Name, d)
		}
		b, ok := info.Artifact.(*bundle.Bundle)
		if !ok || len(b.Source) == 0 {
			t.Errorf("%s: the bundle has no embedded source", e.Name)
			continue
		}
		p, ds := irtext.Parse(e.Name+".tir", b.Source)
		if p == nil || len(errorDiags(ds)) > 0 {
			t.Errorf("%s: embedded source: %v", e.Name, ds)
			continue
		}
		if ds := errorDiags(verify.Verify(p, verify.Options{})); len(ds) > 0 {
			t.Errorf("%s: embedded source: %v", e.Name, ds)
		}
	}
}

// simOptions is the case matrix: quick (float32 sum, int8 max for reducing
// collectives, a tiny count and one that leaves a short last chunk) or wide
// (-contexts.full: every data type, sum/prod/max/avg, counts 0, 1, 7, a
// short-tailed one and a large one).
func simOptions(p *ir.Program, wide bool) interp.SimOptions {
	unit := p.ChunksPerBlock * 3 * 16
	o := interp.SimOptions{
		DataTypes: []ir.DataType{ir.Float32, ir.Int8},
		RedOps:    []ir.RedOp{ir.Sum, ir.Max},
		Counts:    []int64{7, 2*unit + 5},
		Timeout:   30e9,
	}
	if wide {
		o.DataTypes = nil
		o.RedOps = []ir.RedOp{ir.Sum, ir.Prod, ir.Max, ir.Avg}
		o.Counts = []int64{0, 1, 7, 2*unit + 5, 64 * unit}
	}
	return o
}

// TestSimulate runs schedules in the host interpreter (runtime/interp,
// Simulate) and requires #wrong = 0 in every case. By default it runs the
// schedules for nranks <= 4 over the quick matrix (the 8-rank ones are
// covered by the same generators at 4 ranks and by -contexts.full); with
// -contexts.full, every schedule over the wide matrix.
func TestSimulate(t *testing.T) {
	_, es, comp := mustBuild(t)
	for _, e := range es {
		if !*full && (e.Opts.NRanks > 4 || testing.Short() && e.Opts.NRanks > 2) {
			continue
		}
		t.Run(e.Name, func(t *testing.T) {
			p := comp[e.Name].Prog
			res, err := interp.Simulate(p, simOptions(p, *full))
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for _, r := range res {
				if !r.OK() {
					if bad < 3 {
						t.Errorf("%v", r)
					}
					bad++
				}
			}
			if bad > 0 {
				t.Fatalf("%d of %d cases wrong", bad, len(res))
			}
		})
	}
}

// TestRelaysMatchGen checks the relay analysis the slow_rank policies are
// derived from against compiler/gen's own notion (Options.Avoid: a
// generator that does not place avoided ranks returns ErrAvoid exactly for
// the ranks that relay), and that every avoid variant keeps its rank off
// relaying paths.
func TestRelaysMatchGen(t *testing.T) {
	_, es, _ := mustBuild(t)
	for _, e := range es {
		if e.Opts.Avoid != nil {
			if slices.Contains(e.Relays, e.Opts.Avoid[0]) {
				t.Errorf("%s relays through its avoided rank %d", e.Name, e.Opts.Avoid[0])
			}
			continue
		}
		if usesAvoid(e.Algo) {
			continue // avoid changes the program; checked through the variants
		}
		var want []int
		for r := range e.Opts.NRanks {
			o := e.Opts
			o.Avoid = []int{r}
			_, err := gen.Generate(e.Algo, o)
			switch {
			case errors.Is(err, gen.ErrAvoid):
				want = append(want, r)
			case err != nil:
				t.Fatalf("%s avoid %d: %v", e.Name, r, err)
			}
		}
		if d := cmp.Diff(want, e.Relays); d != "" {
			t.Errorf("%s: relays (-gen +analysis):\n%s", e.Name, d)
		}
	}
}

func usesAvoid(algo string) bool {
	for _, a := range gen.Algorithms() {
		if a.Name == algo {
			return a.UsesAvoid
		}
	}
	return false
}

// TestRelaysOfKnownShapes pins the analysis on programs whose relays
// docs/generators.md states.
func TestRelaysOfKnownShapes(t *testing.T) {
	cases := []struct {
		algo string
		opts gen.Options
		want []int
	}{
		{"ring", gen.Options{Collective: ir.AllReduce, NRanks: 2}, nil},
		{"ring", gen.Options{Collective: ir.AllReduce, NRanks: 4}, []int{0, 1, 2, 3}},
		{"ring", gen.Options{Collective: ir.Broadcast, NRanks: 4}, []int{1, 2}},
		{"chain", gen.Options{Collective: ir.Reduce, NRanks: 4, Avoid: []int{1}}, []int{2, 3}},
		{"tree", gen.Options{Collective: ir.Broadcast, NRanks: 8}, []int{1, 2, 3}},
		{"direct", gen.Options{Collective: ir.AllGather, NRanks: 4}, nil},
		{"oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 4, Protocol: ir.LL}, nil},
	}
	for _, c := range cases {
		p, err := gen.Generate(c.algo, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(c.want, relays(p)); d != "" {
			t.Errorf("%s %v: (-want +got):\n%s", c.algo, c.opts, d)
		}
	}
}

func TestMaterialize(t *testing.T) {
	dir, remove, err := TempDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Files() {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := Default().(interface{ ReadFile(string) ([]byte, error) }).ReadFile(name)
		if string(got) != string(want) {
			t.Errorf("%s differs from the embedded file", name)
		}
	}
	if err := Materialize(dir); err != nil {
		t.Errorf("materialising over an identical copy: %v", err)
	}
	log := filepath.Join(dir, SlowRankLog)
	if err := os.WriteFile(log, []byte(`{"value":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(dir); !errors.Is(err, ErrExists) {
		t.Errorf("materialising over a changed log: err = %v, want ErrExists", err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("remove left %s: %v", dir, err)
	}
	if len(Hash()) != 64 {
		t.Errorf("Hash() = %q", Hash())
	}
}

func ExampleFiles() {
	n := 0
	for _, f := range Files() {
		if filepath.Ext(f) == ".tsb" {
			n++
		}
	}
	fmt.Println(Files()[0], n > 100)
	// Output: attribute_manifest.jsonl true
}
