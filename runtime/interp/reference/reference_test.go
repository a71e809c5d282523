package reference

import (
	"math/rand/v2"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
)

// TestFillIsOrderIndependent: reducing Fill's inputs in rank order and in
// reverse order gives identical bits, for every float type and op.
func TestFillIsOrderIndependent(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []ir.DataType{ir.Float16, ir.Bfloat16, ir.Fp8E4M3, ir.Fp8E5M2, ir.Float32, ir.Float64} {
		for _, op := range ir.AllRedOps() {
			for _, n := range []int{2, 3, 8, 64} {
				const count = 257
				in := make([][]byte, n)
				for r := range in {
					in[r] = make([]byte, count*dt.Size())
					Fill(in[r], dt, op, true, n, r, rng.Uint64)
				}
				fwd, rev := make([]byte, len(in[0])), make([]byte, len(in[0]))
				rin := make([][]byte, n)
				for r := range in {
					rin[r] = in[n-1-r]
				}
				if err := numeric.Reduce(dt, op, fwd, in); err != nil {
					t.Fatal(err)
				}
				if err := numeric.Reduce(dt, op, rev, rin); err != nil {
					t.Fatal(err)
				}
				if w := Wrong(fwd, rev, dt.Size()); w != 0 {
					t.Errorf("%v %v n=%d: %d elements depend on the order", dt, op, n, w)
				}
			}
		}
	}
}

func TestOutput(t *testing.T) {
	in := [][]byte{{1, 2, 3, 4}, {5, 6, 7, 8}}
	input := func(q int) []byte { return in[q] }
	for _, c := range []struct {
		coll       ir.Collective
		rank, root int
		count      int64
		want       []byte
	}{
		{ir.AllReduce, 1, 0, 4, []byte{6, 8, 10, 12}},
		{ir.ReduceScatter, 1, 0, 2, []byte{10, 12}},
		{ir.AllGather, 0, 0, 4, []byte{1, 2, 3, 4, 5, 6, 7, 8}},
		{ir.AllToAll, 0, 0, 2, []byte{1, 2, 5, 6}},
		{ir.Broadcast, 0, 1, 4, []byte{5, 6, 7, 8}},
		{ir.Scatter, 1, 1, 2, []byte{7, 8}},
		{ir.Reduce, 1, 0, 4, nil},
		{ir.SendRecv, 0, 0, 4, []byte{5, 6, 7, 8}},
	} {
		got := Output(c.coll, 2, c.rank, c.root, c.count, ir.Uint8, ir.Sum, input)
		if string(got) != string(c.want) {
			t.Errorf("%v rank %d: %v, want %v", c.coll, c.rank, got, c.want)
		}
	}
}
