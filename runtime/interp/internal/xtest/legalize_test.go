// Package xtest runs the interpreter on schedules produced by other parts
// of the compiler (compiler/legalize), end to end. It lives apart from
// runtime/interp so that a half-written compiler package cannot break the
// interpreter's own tests.
package xtest

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

func TestLegalizedTransferPrograms(t *testing.T) {
	quick := interp.SimOptions{
		DataTypes: []ir.DataType{ir.Int32, ir.Bfloat16, ir.Fp8E5M2},
		RedOps:    []ir.RedOp{ir.Sum, ir.Prod, ir.Min},
		Counts:    []int64{0, 1, 7, 999, 4096},
	}
	for _, p := range []*ir.Program{
		irtest.RingAllReduce(3, ir.Simple),
		irtest.RingAllReduce(4, ir.LL),
		irtest.RingAllReduce(1, ir.Simple),
		irtest.AllGatherRing(4),
	} {
		t.Run(p.Name+"_"+p.Protocol.String(), func(t *testing.T) {
			q, diags := legalize.Legalize(p)
			if q == nil {
				t.Fatalf("legalize: %v", diags)
			}
			res, err := interp.Simulate(q, quick)
			if err != nil {
				t.Fatal(err)
			}
			bad := 0
			for _, c := range res {
				if !c.OK() {
					if bad++; bad <= 5 {
						t.Errorf("%s", c)
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d cases failed", bad, len(res))
			}
		})
	}
}
