//go:build linux

package engine

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/internal/ranks"
)

// p2pCounts are the point-to-point counters a repeated group moves.
type p2pCounts struct{ Walks, L3Setups, Rebases, PlanLaunches uint64 }

// TestP2PGroupFastPath: nccl-tests' sendrecv group (ncclGroupStart;
// ncclSend; ncclRecv; ncclGroupEnd) repeated through the NCCL layer, on the
// null backend (launches that do nothing, so that only the layers' work
// counts). On the same buffers every group launches its plan without a
// walk and allocates nothing (the Library reuses its group and lists, the
// engine its ops); at buffers moved every call, as nccl-tests moves them,
// every group is a walk that rebases the shape's launch, none prepares one.
func TestP2PGroupFastPath(t *testing.T) {
	const calls = 200
	for _, level := range []string{"abi", "engine"} {
		t.Run(level, func(t *testing.T) {
			w := newP2PPath(t, "null", level, 4*calls)
			var pos [2]int
			group := func(r int, moved bool) error {
				off := uintptr(0)
				if moved {
					off = uintptr(pos[r] * p2pPathBytes)
					pos[r]++
				}
				return w.group[r](off)
			}
			each := func(moved bool, k int) {
				t.Helper()
				errs := ranks.Each(2, func(r int) error {
					for range k {
						if err := group(r, moved); err != nil {
							return err
						}
					}
					return w.wait[r]()
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
			}
			each(false, 4) // connections and offers
			// Rank 0 imports rank 1's offer at its first call after the
			// offer's message is in (which changes its generation: the call
			// prepares its launch again); rank 1 sent it in its first call.
			for i := 0; w.stats[0]().Imports == 0; i++ {
				if i == 1e6 {
					t.Fatalf("rank 0 did not import rank 1's offer in %d calls: %+v", i, w.stats[0]())
				}
				if err := group(0, false); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.wait[0](); err != nil {
				t.Fatal(err)
			}
			each(true, 2) // rebases of the prepared launch
			counts := func() p2pCounts {
				s := w.stats[0]()
				return p2pCounts{s.Walks, s.L3Setups, s.Rebases, s.PlanLaunches}
			}
			for _, moved := range []bool{false, true} {
				c0 := counts()
				allocs := testing.AllocsPerRun(calls, func() {
					if err := group(0, moved); err != nil {
						t.Fatal(err)
					}
				})
				got := counts()
				got = p2pCounts{got.Walks - c0.Walks, got.L3Setups - c0.L3Setups, got.Rebases - c0.Rebases, got.PlanLaunches - c0.PlanLaunches}
				want := p2pCounts{PlanLaunches: calls + 1} // (AllocsPerRun runs once more first)
				maxAllocs := 0.0
				if moved {
					want = p2pCounts{Walks: calls + 1, Rebases: calls + 1}
					maxAllocs = 3 // the rebased entry and plan, the backend's launch
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("moved=%v: counters (-want +got):\n%s", moved, diff)
				}
				if allocs > maxAllocs {
					t.Errorf("moved=%v: %.1f allocations per group, want at most %.0f", moved, allocs, maxAllocs)
				}
			}
		})
	}
}
