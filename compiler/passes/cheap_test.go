package passes

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/frontends/msccl"
	"github.com/theseus-ccl/theseus/compiler/frontends/mscclpp"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

var corpusDir = flag.String("corpus", filepath.Join("..", "..", "..", "shared", "corpus"), "the shared schedule corpus")

type namedProgram struct {
	name string
	p    *ir.Program
}

// transferPrograms are the transfer-level programs the default verify
// decision rests on: every transfer-level generator for every collective
// it serves, Simple and LL, 1 and 2 channels, over nranks (hier: two ranks
// per node), and every transfer-level file of the shared corpus.
func transferPrograms(t *testing.T, nranks []int) []namedProgram {
	t.Helper()
	var out []namedProgram
	for _, a := range gen.Algorithms() {
		if a.Level != ir.LevelTransfer {
			continue
		}
		for _, coll := range a.Collectives {
			for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
				for _, n := range nranks {
					for _, ch := range []int{1, 2} {
						opts := gen.Options{Collective: coll, NRanks: n, Protocol: proto, Channels: ch}
						if a.Name == "hier" {
							if n%2 != 0 {
								continue
							}
							opts.NLocalRanks = 2
						}
						p, err := gen.Generate(a.Name, opts)
						if err != nil {
							t.Fatalf("%s %+v: %v", a.Name, opts, err)
						}
						out = append(out, namedProgram{fmt.Sprintf("gen/%s/%v/%v/n=%d/ch=%d", a.Name, coll, proto, n, ch), p})
					}
				}
			}
		}
	}
	xml, _ := filepath.Glob(filepath.Join(*corpusDir, "msccl-xml", "*.xml"))
	plans, _ := filepath.Glob(filepath.Join(*corpusDir, "mscclpp-json", "*", "*.json"))
	for _, f := range append(xml, plans...) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var p *ir.Program
		if filepath.Ext(f) == ".xml" {
			p, _ = msccl.Parse(f, data)
		} else {
			p, _ = mscclpp.Parse(f, data)
		}
		if p != nil && p.Level() == ir.LevelTransfer {
			out = append(out, namedProgram{"corpus/" + filepath.Base(f), p})
		}
	}
	return out
}

// TestCheapVerifyAfterLegalize is the evidence for the verify pass's
// default (docs/passes.md, "Verification after legalisation"): on every
// program whose input verification reports no error and which legalises,
// the full verifier and its cheap checks report exactly the same
// diagnostics on the legalised program — the deadlock, race and
// postcondition checks never add one. A legalisation bug that breaks
// those properties is caught by VerifyEach (on in every test) and by the
// legaliser's own tests (compiler/legalize: TestLegalizeVerified*,
// TestVerifierCatchesBrokenLegalisation).
func TestCheapVerifyAfterLegalize(t *testing.T) {
	nranks := []int{2, 3, 4, 5, 6, 7, 8}
	if testing.Short() {
		nranks = []int{3, 4}
	}
	progs := transferPrograms(t, nranks)
	checked, withWarnings := 0, 0
	for _, np := range progs {
		in := verify.Verify(np.p, verify.Options{})
		if verify.HasErrors(in) {
			t.Logf("%s: the input has errors: the pipeline stops before legalize", np.name)
			continue
		}
		q, ds := legalize.Legalize(np.p)
		if q == nil || verify.HasErrors(ds) {
			t.Logf("%s: does not legalise: %v", np.name, ds)
			continue
		}
		full := verify.Verify(q, verify.Options{Level: ir.LevelPrimitive})
		cheap := verify.Verify(q, verify.Options{Level: ir.LevelPrimitive, Skip: ^verify.Cheap})
		if !reflect.DeepEqual(full, cheap) {
			t.Errorf("%s: the full verifier reports more than the cheap checks on the legalised program (-full +cheap):\n%s",
				np.name, cmp.Diff(full, cheap))
		}
		if len(in) > 0 {
			withWarnings++
		}
		checked++
	}
	t.Logf("%d of %d programs legalised and compared (%d with input warnings)", checked, len(progs), withWarnings)
	if checked < 100 && !testing.Short() {
		t.Errorf("only %d programs compared", checked)
	}
}

// TestVerifyPassChecks pins which checks the verify pass runs: a
// legaliser that computes the wrong result (simulated by corrupting one
// output offset of its program, which the cheap checks cannot see) passes
// by default after a verified input, and is caught by the postcondition
// with VerifyEach or when verify-input is skipped.
func TestVerifyPassChecks(t *testing.T) {
	i := 1
	if pipeline[i].Name != "legalize" {
		t.Fatal("pipeline changed")
	}
	saved := pipeline[i].Run
	defer func() { pipeline[i].Run = saved }()
	pipeline[i].Run = func(s *State) error {
		if err := saved(s); err != nil {
			return err
		}
		q := s.Prog.Clone()
		for k := range q.Ranks[0].TBs[0].Ops {
			op := &q.Ranks[0].TBs[0].Ops[k]
			for d := range op.Dsts {
				if op.Dsts[d].Buf == ir.Output && op.Dsts[d].Chan < 0 && op.Dsts[d].Off == 1 {
					op.Dsts[d].Off = 0 // chunk 1's value lands on chunk 0
					s.Prog = q
					return nil
				}
			}
		}
		return fmt.Errorf("no output ref to corrupt")
	}
	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllGather, NRanks: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		opts  Options
		catch bool
	}{
		{"default", Options{}, false},
		{"verify-each", Options{VerifyEach: true}, true},
		{"skip verify-input", Options{Skip: []string{"verify-input"}}, true},
	} {
		s, err := Run(p, c.opts)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var codes []diag.Code
		for _, d := range s.Diags {
			codes = append(codes, d.Code)
		}
		if c.catch != verify.HasErrors(s.Diags) || c.catch == (s.Bundle != nil) {
			t.Errorf("%s: diagnostics %v, bundle %v; want caught %v", c.name, codes, s.Bundle != nil, c.catch)
		}
		if c.catch && (len(codes) == 0 || codes[0] != diag.Postcondition) {
			t.Errorf("%s: codes %v, want %v", c.name, codes, diag.Postcondition)
		}
	}
}

// BenchmarkFileToBundle is `theseusc compile FILE -o OUT.tsb` without the
// CLI: read the Theseus JSON of compiler/gen's ring allreduce from disk,
// schedjson.Parse, the whole pipeline with the source embedded (the CLI's
// default), bundle.Encode, write the bundle. cmd/theseusc's
// BenchmarkCompile measures the same through cobra. It reports each
// stage's wall time per op (read-ms, parse-ms, passes-ms, encode-ms,
// write-ms) and each pass's (verify-input-ms, legalize-ms, ...).
func BenchmarkFileToBundle(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprintf("ring%d", n), func(b *testing.B) {
			if n > 64 && testing.Short() {
				b.Skip("seconds per iteration")
			}
			p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
			if err != nil {
				b.Fatal(err)
			}
			data, err := schedjson.Format(p)
			if err != nil {
				b.Fatal(err)
			}
			dir := b.TempDir()
			in, out := filepath.Join(dir, "ring.json"), filepath.Join(dir, "ring.tsb")
			if err := os.WriteFile(in, data, 0o644); err != nil {
				b.Fatal(err)
			}
			data, p = nil, nil
			stages := map[string]time.Duration{}
			var names []string
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				lap := func(name string) {
					if _, ok := stages[name]; !ok {
						names = append(names, name)
					}
					stages[name] += time.Since(t0)
					t0 = time.Now()
				}
				src, err := os.ReadFile(in)
				if err != nil {
					b.Fatal(err)
				}
				lap("read")
				prog, ds := schedjson.Parse(in, src)
				if prog == nil {
					b.Fatal(ds)
				}
				lap("parse")
				s, err := Run(prog, Options{EmbedSource: true, TimePasses: true, Out: io.Discard})
				if err != nil || s.Bundle == nil {
					b.Fatal(err, s.Diags)
				}
				lap("passes")
				for _, tm := range s.Timings {
					if _, ok := stages[tm.Pass]; !ok {
						names = append(names, tm.Pass)
					}
					stages[tm.Pass] += tm.Elapsed
				}
				enc, err := bundle.Encode(s.Bundle)
				if err != nil {
					b.Fatal(err)
				}
				lap("encode")
				if err := os.WriteFile(out, enc, 0o644); err != nil {
					b.Fatal(err)
				}
				lap("write")
			}
			for _, name := range names {
				b.ReportMetric(float64(stages[name].Microseconds())/1e3/float64(b.N), name+"-ms")
			}
		})
	}
}
