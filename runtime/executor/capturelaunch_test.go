//go:build linux

package executor

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// fenceLog records the fence flag of every launch on a stream.
type fenceLog struct {
	device.Stream
	fences []bool
}

func (f *fenceLog) Launch(p device.Prepared, launch uint64, fence bool) error {
	f.fences = append(f.fences, fence)
	return f.Stream.Launch(p, launch, fence)
}

// capCounter is a captureStream that counts its capture checks.
type capCounter struct {
	*captureStream
	checks int
}

func (c *capCounter) Capturing() bool {
	c.checks++
	return c.captureStream.Capturing()
}

// capLauncher is a capCounter that also checks capture and launches in one
// call (device.CaptureLauncher, as the CUDA stream does).
type capLauncher struct {
	*capCounter
	captureLaunches int
}

func (c *capLauncher) CaptureLaunch(p device.Prepared, launch uint64, fence, fenceCaptured bool) (bool, error) {
	c.captureLaunches++
	capturing := c.captureStream.Capturing()
	return capturing, c.captureStream.Launch(p, launch, fence || (capturing && fenceCaptured))
}

// TestCaptureLaunch: on streams that implement device.CaptureLauncher, the
// executor launches every cache hit through CaptureLaunch, with no separate
// capture check, and the launches are fenced exactly as through Capturing
// and Launch: the captured launch, the launch after it, LL launches, and a
// launch whose scratch layout differs from the previous one.
func TestCaptureLaunch(t *testing.T) {
	simple := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
	ll := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.LL})
	// steps: schedule, count, capturing.
	type step struct {
		s       *Schedule
		count   int64
		capture bool
	}
	steps := []step{
		{simple, 8, false}, {simple, 8, false}, {simple, 8, false}, // cold, then unfenced hits
		{simple, 8, true}, {simple, 8, false}, {simple, 8, false}, // captured, the launch after it, then unfenced
		{simple, 16, false}, {simple, 8, false}, // another scratch layout, and back
		{ll, 8, false}, {ll, 8, false}, {ll, 8, true}, {ll, 8, false}, // LL: always fenced
		{ll, 8, false}, {ll, 8, false}, {simple, 8, false}, {simple, 8, false}, {simple, 8, false}, // repeats after captures
	}
	var planned int // rank 0's plan launches in the last run
	run := func(t *testing.T, launcher, plans bool) ([][]bool, Stats, []*capCounter, []*capLauncher) {
		w := newFWorld(t, n2, nil)
		tc := w.trace()
		if plans {
			w.usePlans()
		}
		logs := make([]*fenceLog, n2)
		var ccs []*capCounter
		var cls []*capLauncher
		for r := range n2 {
			logs[r] = &fenceLog{Stream: w.caps[r].Stream}
			w.caps[r].Stream = logs[r]
			cc := &capCounter{captureStream: w.caps[r]}
			ccs = append(ccs, cc)
			w.st[r] = cc
			if launcher {
				cl := &capLauncher{capCounter: cc}
				w.st[r] = cl
				cls = append(cls, cl)
			}
		}
		for i, st := range steps {
			if st.capture {
				// Warm outside capture first: a capture refuses misses.
				for _, c := range w.caps {
					c.capturing.Store(true)
				}
			}
			_, errs := w.same(t, tc, st.s, arCase(st.count, 1))
			for _, c := range w.caps {
				c.capturing.Store(false)
			}
			for r, err := range errs {
				if err != nil {
					t.Fatalf("step %d rank %d: %v", i, r, err)
				}
			}
		}
		fences := make([][]bool, n2)
		for r := range n2 {
			fences[r] = logs[r].fences
		}
		if plans {
			planned = w.plans[0].launched
		}
		return fences, w.ex[0].Stats(), ccs, cls
	}
	want, wantStats, plain, _ := run(t, false, false)
	got, gotStats, _, cls := run(t, true, false)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fence flags (-Capturing+Launch +CaptureLaunch):\n%s", diff)
	}
	if gotStats.Fences != wantStats.Fences || gotStats.Launches != wantStats.Launches {
		t.Errorf("CaptureLaunch: %d fences in %d launches; Capturing+Launch: %d in %d",
			gotStats.Fences, gotStats.Launches, wantStats.Fences, wantStats.Launches)
	}
	// Every launch checks capture in CaptureLaunch instead of separately;
	// the misses still check it at each level they set up.
	for r, cl := range cls {
		if cl.captureLaunches != len(steps) {
			t.Errorf("rank %d: %d CaptureLaunch calls for %d launches", r, cl.captureLaunches, len(steps))
		}
		if want := plain[r].checks - len(steps); cl.checks != want {
			t.Errorf("rank %d: %d separate capture checks, want %d (the misses' only)", r, cl.checks, want)
		}
	}
	// Repeats launched from their plans: the same fences, and the same
	// counters but the walks' (each plan launch is a walk fewer, and one
	// L3 hit, L1 same and L2 skip fewer).
	fromPlans, planStats, _, _ := run(t, true, true)
	if planned < 5 {
		t.Errorf("%d repeats launched from their plans, want at least 5", planned)
	}
	if diff := cmp.Diff(got, fromPlans); diff != "" {
		t.Errorf("fence flags (-walked +from plans):\n%s", diff)
	}
	if diff := cmp.Diff(gotStats, withoutPlans(planStats), cmpopts.IgnoreFields(Migration{}, "Elapsed"),
		cmpopts.IgnoreFields(Stats{}, "StateVisits", "TransitionsTaken")); diff != "" {
		t.Errorf("stats (-walked +from plans):\n%s", diff)
	}
}
