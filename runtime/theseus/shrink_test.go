//go:build linux

package theseus

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// shrinkCases are every collective at a few counts (one of them reaches the
// peers' input buffers: the one-shot Simple allreduce of Standard).
func shrinkCases(n int) []devicetest.Case {
	var cs []devicetest.Case
	for i, coll := range allColls {
		for j, count := range []int64{1, 7, 4099} {
			cs = append(cs, devicetest.Case{Coll: coll, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: n,
				Root: (i + j) % n, InPlace: j == 1, Seed: uint64(10*i + j + 1)})
		}
	}
	return cs
}

// TestShrink: ncclCommShrink semantics on 4 ranks as goroutines, for the
// three ways a job loses a rank: rank 3 dead (aborted, so its peers see it
// lost) and shrunk away with ShrinkAbort; rank 3 alive but excluded
// (ShrinkDefault; it destroys its communicator afterwards); and rank 0 —
// the root of the parent's bootstrap — excluded. The survivors' new
// communicator has 3 ranks, numbered in parent order, reads the 3-rank
// schedules of the context, and runs every collective with exact results.
func TestShrink(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gone   int
		flags  ShrinkFlags
		killed bool
	}{
		{"rank3-dead-abort", 3, ShrinkAbort, true},
		{"rank3-alive-default", 3, ShrinkDefault, false},
		{"rank0-dead-abort", 0, ShrinkAbort, true},
		{"rank0-alive-default", 0, ShrinkDefault, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := commtest.WriteStandardSizes(dir, 4, 3); err != nil {
				t.Fatal(err)
			}
			cfg := Config{Backend: "host", ContextDir: dir}
			cfg.Options.Timeout = 20 * time.Second
			cfg.Options.InitialScratch = 1 << 20
			comms, err := NewLocalComms(context.Background(), 4, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Destroy()
				}
			}()
			// A first round on 4 ranks.
			for r, res := range onEach(comms, func(c *Comm) rankResult { return runCases(c, shrinkCases(4)[:6]) }) {
				if res.Err != nil || res.Wrong != 0 {
					t.Fatalf("4 ranks, rank %d: %v, %d wrong", r, res.Err, res.Wrong)
				}
			}
			if tc.killed {
				comms[tc.gone].Abort()
				// The survivors see it lost (their async error) before they
				// shrink, as a job's watchdog would.
				deadline := time.Now().Add(10 * time.Second)
				for r, c := range comms {
					for r != tc.gone && c.AsyncError() == nil && time.Now().Before(deadline) {
						time.Sleep(time.Millisecond)
					}
					if r != tc.gone && !errors.Is(c.AsyncError(), ErrLostRank) {
						t.Fatalf("rank %d: async error %v, want the lost rank", r, c.AsyncError())
					}
				}
			}
			var live []*Comm
			for r, c := range comms {
				if r != tc.gone {
					live = append(live, c)
				}
			}
			subs := onEach(live, func(c *Comm) *Comm {
				s, err := c.Shrink([]int{tc.gone}, tc.flags)
				if err != nil {
					t.Errorf("rank %d: shrink: %v", c.Rank(), err)
				}
				return s
			})
			if t.Failed() {
				return
			}
			defer func() {
				for _, s := range subs {
					s.Destroy()
				}
			}()
			for i, s := range subs {
				if s.Rank() != i || s.NRanks() != 3 {
					t.Errorf("parent rank %d: new rank %d of %d, want %d of 3", live[i].Rank(), s.Rank(), s.NRanks(), i)
				}
			}
			if !tc.killed {
				// The excluded rank is alive; it leaves the parent.
				if err := comms[tc.gone].Destroy(); err != nil {
					t.Errorf("excluded rank: destroy: %v", err)
				}
			}
			for r, res := range onEach(subs, func(c *Comm) rankResult { return runCases(c, shrinkCases(3)) }) {
				if res.Err != nil || res.Wrong != 0 || res.Cases != len(shrinkCases(3)) {
					t.Errorf("3 ranks, rank %d: %v, %d wrong, %d cases", r, res.Err, res.Wrong, res.Cases)
				}
			}
			// The parent after ShrinkAbort is revoked: collectives fail with
			// InvalidUsage; after ShrinkDefault it still works (for the
			// ranks that remain in it, which no collective can use now).
			if tc.flags == ShrinkAbort {
				p, _ := live[0].MemAlloc(4096)
				if err := live[0].AllReduce(p, p+1024, 8, Float32, Sum, nil); CodeOf(err) != InvalidUsage && CodeOf(err) != RemoteError {
					t.Errorf("collective on the shrunk-abort parent: %v", err)
				}
				live[0].MemFree(p)
			}
		})
	}
}

// TestShrinkBadLists: a survivor's list that differs from the first
// survivor's is InvalidUsage; out-of-range, repeated and self-excluding
// lists are InvalidArgument, as are unknown flags.
func TestShrinkBadLists(t *testing.T) {
	comms, _ := localComms(t, 3, func(c *Config) { c.Options.Timeout = 5 * time.Second })
	for _, bad := range [][]int{{3}, {-1}, {1, 1}} {
		if _, err := comms[0].Shrink(bad, ShrinkDefault); CodeOf(err) != InvalidArgument {
			t.Errorf("Shrink(%v): %v, want InvalidArgument", bad, err)
		}
	}
	if _, err := comms[0].Shrink([]int{0}, ShrinkDefault); CodeOf(err) != InvalidArgument {
		t.Errorf("a rank excluding itself: %v", err)
	}
	if _, err := comms[0].Shrink([]int{2}, 2); CodeOf(err) != InvalidArgument {
		t.Errorf("flags 2: %v", err)
	}
	// Rank 0 excludes 2, rank 1 excludes nobody: both see rank 0 as the
	// first survivor; rank 1 finds rank 0's list differs (InvalidUsage),
	// and rank 0's new communicator never gets rank 1 (RemoteError after
	// the timeout, not a hang).
	errs := onEach(comms[:2], func(c *Comm) error {
		ex := map[int][]int{0: {2}, 1: nil}[c.Rank()]
		s, err := c.Shrink(ex, ShrinkDefault)
		if s != nil {
			s.Destroy()
		}
		return err
	})
	if CodeOf(errs[1]) != InvalidUsage || !strings.Contains(errs[1].Error(), "same list") {
		t.Errorf("rank 1: %v, want InvalidUsage (the lists differ)", errs[1])
	}
	if CodeOf(errs[0]) != RemoteError {
		t.Errorf("rank 0: %v, want RemoteError (rank 1 never joined)", errs[0])
	}
}
