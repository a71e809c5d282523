package verify_test

import (
	"runtime"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// The benchmarks verify MSCCL's ring allreduce (irtest.RingAllReduce:
// 2n-1 transfer ops per rank, C = n chunks) and its legalisation (3 ops
// per transfer: wait, copy/reduce through a channel, signal), as lint and
// compile see them. docs/verification.md records the figures.

func benchVerify(b *testing.B, p *ir.Program, opts verify.Options) {
	runtime.GC()
	b.ReportAllocs()
	for b.Loop() {
		if ds := verify.Verify(p, opts); verify.HasErrors(ds) {
			b.Fatal(ds[0])
		}
	}
	b.ReportMetric(float64(p.NumOps()), "ops")
}

func legalised(b *testing.B, n int) *ir.Program {
	q, ds := legalize.Legalize(irtest.RingAllReduce(n, ir.Simple))
	if len(ds) > 0 {
		b.Fatal(ds)
	}
	return q
}

// BenchmarkVerifyRing64 verifies the 64-rank transfer-level ring (8128
// ops), every check.
func BenchmarkVerifyRing64(b *testing.B) {
	benchVerify(b, irtest.RingAllReduce(64, ir.Simple), verify.Options{})
}

// BenchmarkVerifyRing1024 verifies the 1024-rank transfer-level ring
// (2,096,128 ops), every check.
func BenchmarkVerifyRing1024(b *testing.B) {
	benchVerify(b, irtest.RingAllReduce(1024, ir.Simple), verify.Options{})
}

// BenchmarkVerifyRing64Primitive verifies the legalised 64-rank ring
// (24,384 ops), every check.
func BenchmarkVerifyRing64Primitive(b *testing.B) {
	benchVerify(b, legalised(b, 64), verify.Options{Level: ir.LevelPrimitive})
}

// BenchmarkVerifyRing1024Primitive verifies the legalised 1024-rank ring
// (6,288,384 ops), every check.
func BenchmarkVerifyRing1024Primitive(b *testing.B) {
	benchVerify(b, legalised(b, 1024), verify.Options{Level: ir.LevelPrimitive})
}

// BenchmarkVerifyRing1024PrimitiveCheap runs only the structural and
// synchronisation checks on the legalised 1024-rank ring (what the pass
// pipeline can run between passes).
func BenchmarkVerifyRing1024PrimitiveCheap(b *testing.B) {
	benchVerify(b, legalised(b, 1024), verify.Options{Level: ir.LevelPrimitive, Skip: ^verify.Cheap})
}

// BenchmarkVerifyRing1024PrimitiveNoRaces proves structure, synchronisation
// and deadlock freedom of the legalised 1024-rank ring, without the race
// and semantic checkers.
func BenchmarkVerifyRing1024PrimitiveNoRaces(b *testing.B) {
	benchVerify(b, legalised(b, 1024), verify.Options{Level: ir.LevelPrimitive, Skip: verify.CheckRaces | verify.CheckSemantics})
}

// benchLintCompile is verify (lint) + legalise + verify of the result: the
// verifier's share of theseusc lint and compile, with the legaliser.
func benchLintCompile(b *testing.B, n int) {
	p := irtest.RingAllReduce(n, ir.Simple)
	runtime.GC()
	b.ReportAllocs()
	for b.Loop() {
		if ds := verify.Verify(p, verify.Options{}); verify.HasErrors(ds) {
			b.Fatal(ds[0])
		}
		q, ds := legalize.Legalize(p)
		if len(ds) > 0 {
			b.Fatal(ds[0])
		}
		if ds := verify.Verify(q, verify.Options{Level: ir.LevelPrimitive}); verify.HasErrors(ds) {
			b.Fatal(ds[0])
		}
	}
}

func BenchmarkLintCompileRing64(b *testing.B)   { benchLintCompile(b, 64) }
func BenchmarkLintCompileRing1024(b *testing.B) { benchLintCompile(b, 1024) }

// BenchmarkVerifyPairs64 verifies the 64-rank one-shot all-pairs allreduce
// (irtest.PairsAllReducePrimitive: every rank reads all 63 peers' inputs
// through channels, 4,352 ops), every check: the peer-access checks
// (TS0214, TS0215) have 4,032 (threadblock, owner) pairs to prove here.
func BenchmarkVerifyPairs64(b *testing.B) {
	benchVerify(b, irtest.PairsAllReducePrimitive(64), verify.Options{})
}
