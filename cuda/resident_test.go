package cuda

import (
	"errors"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
)

// perSM512 models one H200 multiprocessor for the kernel at 64 registers
// per thread: a 1024-thread block takes the whole register file.
func perSM512(threads int) (int, error) {
	return map[int]int{128: 8, 256: 4, 512: 2, 1024: 1}[threads], nil
}

func TestResidentFit(t *testing.T) {
	for _, c := range []struct {
		name   string
		blocks map[int]int
		sms    int
		ok     bool
	}{
		{"one size, full GPU", map[int]int{512: 264}, 132, true},
		{"one size, one block over", map[int]int{512: 265}, 132, false},
		{"empty", map[int]int{}, 132, true},
		// Half the GPU each by the sum of shares, but 132 blocks of 512
		// threads may land one per multiprocessor, leaving none whole for
		// a 1024-thread block: must be refused.
		{"mixed sizes that may not all be placed", map[int]int{512: 132, 1024: 66}, 132, false},
		{"mixed sizes within the smallest share", map[int]int{512: 100, 1024: 32}, 132, true},
		{"a size that fits nowhere", map[int]int{2048: 1}, 132, false},
	} {
		err := residentFit(c.blocks, c.sms, perSM512)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrNotResident)) {
			t.Errorf("%s: %v, want ok=%v (or ErrNotResident)", c.name, err, c.ok)
		}
	}
	boom := errors.New("occupancy query failed")
	if err := residentFit(map[int]int{512: 1}, 132, func(int) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("query error: %v", err)
	}
}

// TestIndependent: only tables whose threadblocks never wait for each
// other (the bandwidth test's copies and reduces) may exceed the GPU's
// resident threadblocks; every generated schedule of two ranks or more
// waits (channels, dependencies).
func TestIndependent(t *testing.T) {
	for _, tiles := range []int{1, 4} {
		tables, err := optable.LowerAll(bwProgram(3, 128, tiles, tiles > 1))
		if err != nil {
			t.Fatal(err)
		}
		if !independent(tables) {
			t.Errorf("bandwidth program (tiles %d): not independent", tiles)
		}
	}
	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	if err != nil {
		t.Fatal(err)
	}
	q, err := legalized(p)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := optable.LowerAll(q)
	if err != nil {
		t.Fatal(err)
	}
	if independent(tables) {
		t.Error("2-rank ring allreduce: independent, want not")
	}
}
