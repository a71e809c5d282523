package irtext_test

import (
	"bytes"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

// BenchmarkRing64 prints and parses the 64-rank ring allreduce (64 ranks ×
// 127 ops). Bytes are those of the text.
func BenchmarkRing64(b *testing.B) {
	p := irtest.RingAllReduce(64, ir.Simple)
	var buf bytes.Buffer
	if err := ir.Print(&buf, p); err != nil {
		b.Fatal(err)
	}
	text := append([]byte(nil), buf.Bytes()...)
	b.Run("Print", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := ir.Print(&buf, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Parse", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			if q, ds := irtext.Parse("ring64.tir", text); q == nil {
				b.Fatal(ds)
			}
		}
	})
	b.Run("PrintParse", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if err := ir.Print(&buf, p); err != nil {
				b.Fatal(err)
			}
			if q, ds := irtext.Parse("ring64.tir", buf.Bytes()); q == nil {
				b.Fatal(ds)
			}
		}
	})
}
