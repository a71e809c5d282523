package legalize

import (
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

// TestLegalizeInterp runs every legalised test program in the host
// interpreter (runtime/interp, the reference executor) and checks every
// rank's result bit for bit against the collective: float32 sum and int32
// max, counts 1, 7 and 100 (odd tails), 1 and 3 slices (Simple), LL16 and
// LL8 (LL), both arrangements, two launches. (A test-only dependency on the
// runtime: the interpreter is the executor legalisation feeds.)
func TestLegalizeInterp(t *testing.T) {
	opts := interp.SimOptions{
		DataTypes: []ir.DataType{ir.Float32, ir.Int32},
		RedOps:    []ir.RedOp{ir.Sum, ir.Max},
		Counts:    []int64{1, 7, 100},
	}
	if testing.Short() {
		opts.DataTypes, opts.RedOps, opts.Counts = []ir.DataType{ir.Float32}, []ir.RedOp{ir.Sum}, []int64{7}
	}
	for _, np := range testPrograms() {
		t.Run(np.name, func(t *testing.T) {
			q, ds := Legalize(np.p)
			if len(ds) > 0 {
				t.Fatal(ds)
			}
			res, err := interp.Simulate(q, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) == 0 {
				t.Fatal("no cases ran")
			}
			for _, c := range res {
				if !c.OK() {
					t.Errorf("%v", c)
				}
			}
		})
	}
}
