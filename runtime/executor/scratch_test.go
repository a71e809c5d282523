//go:build linux

package executor

import (
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// mixed runs a sequence of schedules and shapes that share the scratch
// buffer back to back and checks every result.
func mixed(t *testing.T, w *world) {
	t.Helper()
	const n = 4
	scheds := []*Schedule{
		compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple}),
		compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL}),
		compile(t, 2, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL}),
		compile(t, 3, "ring", gen.Options{Collective: ir.AllGather, NRanks: n, Protocol: ir.Simple}),
		compile(t, 4, "ring", gen.Options{Collective: ir.ReduceScatter, NRanks: n, Protocol: ir.LL}),
	}
	counts := []int64{1, 1000, 7, 65536, 300, 40000}
	i := 0
	for round := range 3 {
		for si, s := range scheds {
			count := counts[(round+si)%len(counts)]
			c := devicetest.Case{Coll: s.Bundle.Meta.Collective, DataType: ir.DataType((si + round) % int(ir.NumDataTypes)),
				RedOp: ir.Sum, Count: count, NRanks: n, Seed: uint64(i), InPlace: i%2 == 1}
			i++
			wrong, errs := w.run(s, c, false)
			for r, err := range errs {
				if err != nil {
					t.Fatalf("%s %v rank %d: %v", s.Name, c, r, err)
				}
			}
			if wrong != 0 {
				t.Fatalf("%s %v: %d wrong", s.Name, c, wrong)
			}
		}
	}
}

// TestScratchSharedAndGrown: one scratch buffer serves every schedule; it
// grows when a request needs more (after waiting for this rank's in-flight
// launches), to the same size on every rank.
func TestScratchSharedAndGrown(t *testing.T) {
	for _, alt := range []bool{false, true} {
		t.Run(fmt.Sprintf("alternate=%v", alt), func(t *testing.T) {
			w := newWorld(t, 4, Config{InitialScratch: 4096, Alternate: alt})
			mixed(t, w)
			s0 := w.ex[0].Stats()
			if s0.Growths == 0 || s0.Waits < s0.Growths {
				t.Errorf("growths %d, waits %d: growth must wait first", s0.Growths, s0.Waits)
			}
			for r := range 4 {
				s := w.ex[r].Stats()
				if s.ScratchBytes != s0.ScratchBytes || s.Growths != s0.Growths {
					t.Errorf("rank %d: scratch %d bytes after %d growths; rank 0 %d after %d", r, s.ScratchBytes, s.Growths, s0.ScratchBytes, s0.Growths)
				}
				if uint64(s.Created.BootstrapRounds) != 1+s.Growths {
					t.Errorf("rank %d: %d allgathers, want 1 (L0) + %d (growths)", r, s.Created.BootstrapRounds, s.Growths)
				}
				if got := w.ex[r].LaunchCounter(); got != w.ex[0].LaunchCounter() {
					t.Errorf("rank %d: launch counter %d, rank 0 %d", r, got, w.ex[0].LaunchCounter())
				}
			}
			// A fence precedes every launch whose scratch layout differs from
			// the previous launch's: here every launch but the first.
			if want := s0.Launches - 1; s0.Fences != want {
				t.Errorf("fences %d, want %d", s0.Fences, want)
			}
		})
	}
}

// TestScratchHalves: LL launches, and every launch with the alternate
// scratch buffer, use the half at capacity/2 on odd launch counters; Simple
// launches without it use the whole buffer.
func TestScratchHalves(t *testing.T) {
	for _, alt := range []bool{false, true} {
		w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Alternate: alt})
		simple := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
		ll := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.LL})
		for _, s := range []*Schedule{simple, ll} {
			c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 100, NRanks: 2}
			w.run(s, c, false)
			l3 := w.ex[0].lastL1.l3
			for _, e := range l3 {
				want := int64(0)
				if alt || s == ll {
					want = w.ex[0].Stats().ScratchBytes / 2
				}
				if e.args.ScratchHalf != want {
					t.Errorf("alternate=%v %s: scratch half %d, want %d", alt, s.Name, e.args.ScratchHalf, want)
				}
			}
		}
	}
}
