package gen

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

// verifyCheck runs the verifier on p and on its legalised form: both must be
// clean (no errors and no warnings).
func verifyCheck(t *testing.T, c genCase, p *ir.Program) {
	t.Helper()
	report := func(stage string, ds []diag.Diagnostic) {
		t.Helper()
		n := 0
		for _, d := range ds {
			if d.Severity == diag.Note {
				continue
			}
			if n < 3 {
				t.Errorf("%v (%s): %v", c, stage, d)
			}
			n++
		}
		if n > 0 {
			t.Fatalf("%v (%s): %d diagnostics", c, stage, n)
		}
	}
	report("transfer", verify.Verify(p, verify.Options{}))
	lp, ds := legalize.Legalize(p)
	if lp == nil {
		t.Fatalf("%v: legalize: %v", c, ds)
	}
	report("legalised", verify.Verify(lp, verify.Options{Level: ir.LevelPrimitive}))
}

// interpOptions is the case matrix of the acceptance runs: float32 with
// sum, counts 7 and one that leaves a short last chunk, 1 and 3 slices,
// both LL packet types; with wide, also int8 with max (a narrow type and a
// second redop) and count 0.
func interpOptions(p *ir.Program, wide bool) interp.SimOptions {
	unit := p.ChunksPerBlock * 3 * 16
	o := interp.SimOptions{
		DataTypes: []ir.DataType{ir.Float32},
		RedOps:    []ir.RedOp{ir.Sum},
		Counts:    []int64{7, 2*unit + 5},
		Timeout:   20e9,
	}
	if wide {
		o.DataTypes = append(o.DataTypes, ir.Int8)
		o.RedOps = append(o.RedOps, ir.Max)
		o.Counts = append(o.Counts, 0)
	}
	return o
}

// interpCheck legalises p and runs it in the host interpreter over the
// reduced case matrix; every case must run and match bit for bit.
func interpCheck(t *testing.T, c genCase, p *ir.Program, wide bool) {
	t.Helper()
	lp, ds := legalize.Legalize(p)
	if lp == nil {
		t.Fatalf("%v: legalize: %v", c, ds)
	}
	res, err := interp.Simulate(lp, interpOptions(lp, wide))
	if err != nil {
		t.Fatalf("%v: simulate: %v", c, err)
	}
	bad := 0
	for _, r := range res {
		if !r.OK() {
			if bad < 3 {
				t.Errorf("%v: %v", c, r)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%v: %d of %d cases wrong", c, bad, len(res))
	}
}

// TestVerifyQuick verifies every generator, before and after
// legalisation, on small communicators (always on; the full sweep is
// TestSweepFull).
func TestVerifyQuick(t *testing.T) {
	ns := []int{2, 3, 4, 5, 6, 7, 8, 9, 12, 16}
	if testing.Short() {
		ns = []int{2, 3, 5, 8}
	}
	for _, c := range cases(ns, []int{1, 2}) {
		p, err := Generate(c.algo, c.opts)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		verifyCheck(t, c, p)
	}
}

// TestInterpQuick runs every generator through the host interpreter on a
// few small communicators (always on; the full sweep is TestSweepFull).
func TestInterpQuick(t *testing.T) {
	cs := cases([]int{2, 5}, []int{1})
	cs = append(cs, cases([]int{3}, []int{2})...)
	for i, c := range cs {
		p, err := Generate(c.algo, c.opts)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		interpCheck(t, c, p, i%4 == 0)
	}
}

// BenchmarkRing1024Lint generates a 1024-rank ring allreduce (2 M transfer
// ops) and verifies it (theseusc gen | theseusc lint).
func BenchmarkRing1024Lint(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p, err := Generate("ring", Options{Collective: ir.AllReduce, NRanks: 1024})
		if err != nil {
			b.Fatal(err)
		}
		if ds := verify.Verify(p, verify.Options{}); verify.HasErrors(ds) {
			b.Fatal(ds[0])
		}
	}
}

// BenchmarkRing1024Compile generates, verifies, legalises and verifies
// again a 1024-rank ring allreduce (lint + compile).
func BenchmarkRing1024Compile(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		p, err := Generate("ring", Options{Collective: ir.AllReduce, NRanks: 1024})
		if err != nil {
			b.Fatal(err)
		}
		if ds := verify.Verify(p, verify.Options{}); verify.HasErrors(ds) {
			b.Fatal(ds[0])
		}
		lp, ds := legalize.Legalize(p)
		if lp == nil {
			b.Fatal(ds)
		}
		if ds := verify.Verify(lp, verify.Options{Level: ir.LevelPrimitive}); verify.HasErrors(ds) {
			b.Fatal(ds[0])
		}
	}
}
