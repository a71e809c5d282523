package legalize

import (
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// BenchmarkLegalizeRing measures Legalize on the transfer-level ring
// allreduce (2n-1 ops per rank, so O(n²) ops in all: 64 ranks have 8128
// transfer ops, 1024 ranks 2,096,128). The whole lint+compile of a 64-rank
// ring has a 50 ms goal, a 1024-rank ring 2 s.
func BenchmarkLegalizeRing(b *testing.B) {
	for _, n := range []int{64, 1024} {
		for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
			p := irtest.RingAllReduce(n, proto)
			b.Run(fmt.Sprintf("n=%d/%v", n, proto), func(b *testing.B) {
				b.ReportAllocs()
				b.ReportMetric(float64(p.NumOps()), "ops")
				for b.Loop() {
					q, ds := Legalize(p)
					if len(ds) > 0 || q == nil {
						b.Fatal(ds)
					}
				}
			})
		}
	}
}
