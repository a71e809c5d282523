package specialize

import (
	"context"
	"errors"
	"os/exec"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/cuda/kernel"
	"github.com/theseus-ccl/theseus/ir"
)

// tables compiles a generated schedule and returns its ranks' encoded op
// tables.
func tables(t *testing.T, algo string, o gen.Options) [][]byte {
	t.Helper()
	p, err := gen.Generate(algo, o)
	if err != nil {
		t.Fatal(err)
	}
	b, ds, err := passes.Compile(p, passes.Options{})
	if err != nil || b == nil {
		t.Fatalf("compile %s: %v %v", algo, err, ds)
	}
	out := make([][]byte, len(b.Tables))
	for r := range out {
		out[r] = b.Tables[r]
	}
	return out
}

func clang(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skip("clang-14 is not installed (.ci/run installs it): the specialised kernels cannot be built")
	}
	return p
}

// TestSpecialize builds the specialised kernels of the default context's
// small schedules (two ranks: LL all-pairs allreduce, the LL allgather,
// a one-channel Simple ring) for float32 and checks each module
// (Check: one theseus_spec entry, no op-table data left to read).
func TestSpecialize(t *testing.T) {
	cl := clang(t)
	for _, c := range []struct {
		algo string
		o    gen.Options
	}{
		{"oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.LL}},
		{"direct", gen.Options{Collective: ir.AllGather, NRanks: 2, Protocol: ir.LL}},
		{"ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple}},
	} {
		for r, tab := range tables(t, c.algo, c.o) {
			src, err := Source(tab, c.algo, r)
			if err != nil {
				t.Fatal(err)
			}
			mods, err := Compile(context.Background(), src, Options{Clang: cl, Kernel: kernel.Sources, Flags: kernel.ClangFlags(),
				DataTypes: []ir.DataType{ir.Float32}})
			if err != nil {
				t.Fatal(err)
			}
			for dt, ptx := range mods {
				if err := Check(ptx); err != nil {
					t.Errorf("%s %v rank %d %v: %v", c.algo, c.o.Collective, r, dt, err)
				}
				t.Logf("%s %v rank %d %v: %d bytes of PTX", c.algo, c.o.Collective, r, dt, len(ptx))
			}
		}
	}
}

func TestSourceRefusesLargeTables(t *testing.T) {
	tabs := tables(t, "ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple, Channels: MaxTBs + 1})
	if _, err := Source(tabs[0], "ring", 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a table of %d threadblocks: %v, want ErrTooLarge", MaxTBs+1, err)
	}
	if _, err := Source([]byte("junk"), "x", 0); err == nil {
		t.Error("Source of junk: no error")
	}
	var _ = optable.Decode
}
