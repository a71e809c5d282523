package optable

import (
	"testing"

	"github.com/theseus-ccl/theseus/ir/irtest"
)

// BenchmarkLowerAll64 lowers every rank of a 64-rank all-pairs allreduce
// (per rank: 63 channel ends, 68 ops, 4096 refs; 262144 refs in all).
func BenchmarkLowerAll64(b *testing.B) {
	p := irtest.PairsAllReducePrimitive(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := LowerAll(p); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarshalDecode64 encodes and decodes one rank's table of the
// same program.
func BenchmarkMarshalDecode64(b *testing.B) {
	t, err := Lower(irtest.PairsAllReducePrimitive(64), 0)
	if err != nil {
		b.Fatal(err)
	}
	enc, _ := t.MarshalBinary()
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		buf, err := t.MarshalBinary()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}
