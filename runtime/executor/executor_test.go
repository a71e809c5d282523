//go:build linux

package executor

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

func TestRunsEveryCollective(t *testing.T) {
	const n = 4
	w := newWorld(t, n, Config{InitialScratch: 1 << 16})
	cases := []struct {
		algo string
		coll ir.Collective
		pr   ir.Protocol
	}{
		{"ring", ir.AllReduce, ir.Simple},
		{"ring", ir.AllReduce, ir.LL},
		{"oneshot", ir.AllReduce, ir.Simple},
		{"oneshot", ir.AllReduce, ir.LL},
		{"ring", ir.AllGather, ir.Simple},
		{"ring", ir.ReduceScatter, ir.Simple},
		{"ring", ir.Broadcast, ir.Simple},
		{"ring", ir.Reduce, ir.LL},
		{"direct", ir.AllToAll, ir.Simple},
		{"direct", ir.Gather, ir.Simple},
		{"direct", ir.Scatter, ir.LL},
	}
	for i, tc := range cases {
		s := compile(t, i, tc.algo, gen.Options{Collective: tc.coll, NRanks: n, Protocol: tc.pr})
		for _, count := range []int64{1, 7, 1000} {
			for _, inplace := range []bool{false, true} {
				for _, goMem := range []bool{false, true} {
					c := devicetest.Case{Coll: tc.coll, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: n, Root: 1, InPlace: inplace, Seed: uint64(i)}
					wrong, errs := w.run(s, c, goMem)
					for r, err := range errs {
						if err != nil {
							t.Errorf("%s %v goMem=%v rank %d: %v", tc.algo, c, goMem, r, err)
						}
					}
					if wrong != 0 {
						t.Errorf("%s %v: %d wrong", tc.algo, c, wrong)
					}
				}
			}
		}
	}
	st := w.ex[0].Stats()
	t.Logf("rank 0 stats: %+v", st)
}
