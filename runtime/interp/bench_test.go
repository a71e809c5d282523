package interp

import (
	"context"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
)

// benchAllReduce runs a 2-rank allreduce of 64 MiB (per rank) repeatedly;
// MB/s is the algorithm bandwidth (message bytes / time).
func benchAllReduce(b *testing.B, p *ir.Program, dt ir.DataType, slices int64) {
	const bytes = 64 << 20
	tabs, err := optable.LowerAll(p)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWorld(tabs)
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Count: bytes / int64(dt.Size()), DataType: dt, RedOp: ir.Sum, Slices: slices}
	if err := w.AllocBuffers(req); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(bytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req.Launch = uint64(i + 1)
		if err := Run(context.Background(), tabs, req, w); err != nil {
			b.Fatal(err)
		}
	}
}

// Rank r reduces its half from both inputs and pushes it to the peer.
func BenchmarkAllReduce2x64MiBFloat32(b *testing.B) {
	benchAllReduce(b, progs.AllPairs(ir.AllReduce, 2, 1, 0), ir.Float32, 1)
}

// The same, pipelined over 64 slices of 512 KiB per chunk.
func BenchmarkAllReduce2x64MiBFloat32Sliced(b *testing.B) {
	benchAllReduce(b, progs.AllPairs(ir.AllReduce, 2, 1, 0), ir.Float32, 64)
}

func BenchmarkAllReduce2x64MiBBfloat16(b *testing.B) {
	benchAllReduce(b, progs.AllPairs(ir.AllReduce, 2, 1, 0), ir.Bfloat16, 1)
}

// One-shot: each rank reduces the whole buffer (irtest fixture, C = 2).
func BenchmarkAllReduce2x64MiBFloat32OneShot(b *testing.B) {
	benchAllReduce(b, irtest.PairsAllReducePrimitive(2), ir.Float32, 1)
}

// A small LL allreduce: launch latency of the interpreter.
func BenchmarkAllReduceLL2x4KiB(b *testing.B) {
	p := progs.AllPairsLL(ir.AllReduce, 2, 1)
	tabs, err := optable.LowerAll(p)
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWorld(tabs)
	if err != nil {
		b.Fatal(err)
	}
	req := Request{Count: 1024, DataType: ir.Float32, RedOp: ir.Sum}
	if err := w.AllocBuffers(req); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req.Launch = uint64(i + 1)
		if err := Run(context.Background(), tabs, req, w); err != nil {
			b.Fatal(err)
		}
	}
}
