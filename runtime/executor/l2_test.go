//go:build linux

package executor

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// exec runs one request per rank with the given buffers and returns each
// rank's error (Execute's, or the launch's) and the time it took.
func (w *world) exec(s *Schedule, c devicetest.Case, bs []bufs) ([]error, []time.Duration) {
	took := make([]time.Duration, w.n)
	errs := w.each(func(r int) error {
		start := time.Now()
		defer func() { took[r] = time.Since(start) }()
		if _, err := w.ex[r].Execute(context.Background(), request(c, bs[r]), s, w.st[r]); err != nil {
			return err
		}
		return w.st[r].Synchronize()
	})
	return errs, took
}

// TestKnownIssue3 shows the seed's Known Issue 3 as it behaves here. L2 is
// keyed by this rank's allocations only. When, for the same schedule, rank
// 0 reuses its buffers (an L2 and L3 hit: it launches at once, with rank
// 1's old registration) while rank 1 switches to new buffers (an L2 miss:
// it sends its new handles and waits for rank 0's), the ranks disagree on
// hit and miss. In the seed this deadlocks; here every wait is bounded, so
// both ranks return an error within the timeout — rank 1 naming rank 0,
// which never sent its registrations, and rank 0's launch naming rank 1,
// whose signals never came — and nobody hangs. Buffers paired stably
// (both ranks switch together) work, as do scratch-only schedules (next
// test).
func TestKnownIssue3(t *testing.T) {
	const timeout = time.Second
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: timeout})
	one := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 256, NRanks: 2, Seed: 1}
	first := []bufs{w.alloc(c, 0, false), w.alloc(c, 1, false)}
	errs, _ := w.exec(one, c, first)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Paired switch: both ranks move to new buffers together. Fine.
	paired := []bufs{w.alloc(c, 0, false), w.alloc(c, 1, false)}
	errs, _ = w.exec(one, c, paired)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("paired switch, rank %d: %v", r, err)
		}
	}
	// Unpaired: rank 0 keeps its buffers, rank 1 takes new ones.
	unpaired := []bufs{paired[0], w.alloc(c, 1, false)}
	errs, took := w.exec(one, c, unpaired)
	for r := range 2 {
		if errs[r] == nil {
			t.Fatalf("rank %d: no error: the unpaired request cannot work", r)
		}
		if took[r] > timeout+2*time.Second {
			t.Errorf("rank %d took %v: more than the timeout %v", r, took[r], timeout)
		}
		t.Logf("rank %d after %v: %v", r, took[r].Round(time.Millisecond), errs[r])
	}
	var e1 *Error
	if !errors.As(errs[1], &e1) || e1.State != L2Setup || len(e1.Peers) != 1 || e1.Peers[0] != 0 {
		t.Errorf("rank 1: %v, want an L2Setup error naming rank 0", errs[1])
	}
	var le *host.LaunchError
	if !errors.As(errs[0], &le) || le.PeerRank() != -1 {
		t.Errorf("rank 0: %v, want its launch to time out", errs[0])
	}
	if p := peerOf(errs[0]); p != 1 {
		t.Errorf("rank 0's launch waited for rank %d, want 1", p)
	}
}

// peerOf finds a PeerRank() >= 0 in err's chain.
func peerOf(err error) int {
	for err != nil {
		if pe, ok := err.(interface{ PeerRank() int }); ok && pe.PeerRank() >= 0 {
			return pe.PeerRank()
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					if p := peerOf(e); p >= 0 {
						return p
					}
				}
			}
			return -1
		}
		err = u.Unwrap()
	}
	return -1
}

// TestScratchOnlyNeedsNoPairing: a schedule whose channels are all
// scratch-to-scratch exchanges nothing at L2, so ranks may change buffers
// independently (the seed's workaround for Known Issue 3).
func TestScratchOnlyNeedsNoPairing(t *testing.T) {
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	ring := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 256, NRanks: 2, Seed: 1}
	a := []bufs{w.alloc(c, 0, false), w.alloc(c, 1, false)}
	for i, bs := range [][]bufs{a, {a[0], w.alloc(c, 1, false)}, {w.alloc(c, 0, false), a[1]}} {
		errs, _ := w.exec(ring, c, bs)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("request %d rank %d: %v", i, r, err)
			}
			if got := devicetest.Wrong(bs[r].out, c.Expected(r), 4); got != 0 {
				t.Errorf("request %d rank %d: %d wrong", i, r, got)
			}
		}
	}
	st := w.ex[0].Stats()
	if st.L2Setups != 0 || st.L2Skips != 3 || st.Created.Registrations != 0 {
		t.Errorf("L2 setups %d, skips %d, registrations %d; want 0, 3, 0", st.L2Setups, st.L2Skips, st.Created.Registrations)
	}
}

// genDev reports every allocation with its generation shifted by bump:
// raising bump makes the same addresses look like new allocations (freed
// and replaced in place), which is what mmap may do but need not.
type genDev struct {
	device.Backend
	bump atomic.Uint64
}

func (g *genDev) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	r, ok := g.Backend.Lookup(p, n)
	r.Gen += g.bump.Load()
	return r, ok
}

func (g *genDev) Export(r device.Region) (device.Handle, error) {
	r.Gen -= g.bump.Load()
	return g.Backend.Export(r)
}

// TestL2KeysByAllocationIdentity: an allocation freed and replaced at the
// same address and size is a new identity (its generation), so its
// registrations are exchanged again rather than reused.
func TestL2KeysByAllocationIdentity(t *testing.T) {
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	devs := make([]*genDev, 2)
	for r := range 2 {
		devs[r] = &genDev{Backend: w.dev}
		ex, err := New(Config{Rank: r, NRanks: 2, Backend: devs[r], Net: w.boots[r], InitialScratch: 1 << 16, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		w.ex[r].Close()
		w.ex[r] = ex
	}
	one := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 1024, NRanks: 2, Seed: 1}
	bs := []bufs{w.alloc(c, 0, false), w.alloc(c, 1, false)}
	run := func() {
		errs, _ := w.exec(one, c, bs)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			if got := devicetest.Wrong(bs[r].out, c.Expected(r), 4); got != 0 {
				t.Fatalf("rank %d: %d wrong", r, got)
			}
		}
	}
	run()
	run()
	if st := w.ex[0].Stats(); st.L2Setups != 1 || st.L2Hits != 1 {
		t.Fatalf("same allocations: L2 setups %d, hits %d; want 1, 1", st.L2Setups, st.L2Hits)
	}
	for _, d := range devs {
		d.bump.Add(1) // same addresses and sizes, new allocations
	}
	run()
	if st := w.ex[0].Stats(); st.L2Setups != 2 || st.Created.Registrations != 2 {
		t.Errorf("replaced allocations at the same addresses: L2 setups %d, registrations %d; want 2, 2", st.L2Setups, st.Created.Registrations)
	}
}
