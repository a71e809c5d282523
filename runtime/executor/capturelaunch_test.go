//go:build linux

package executor

import (
	"context"
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

// TestRepeatableAfterCaptures: after CUDA graph captures of two scratch
// layouts, plans stay repeatable from outside Go (the NCCL layer's C
// launcher) on their stream, which must then fence every launch
// (FenceEvery), and a plan's launch takes the plain launch path, fenced,
// leaving no layout behind: the launch after it is fenced too.
func TestRepeatableAfterCaptures(t *testing.T) {
	// One-shot schedules reach no peer's buffers (a ring's captured plans
	// are frozen: ReachesPeers).
	simple := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.Simple})
	ll := compile(t, 1, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n2, Protocol: ir.LL})
	w := newFWorld(t, n2, nil)
	logs := make([]*fenceLog, n2)
	cls := make([]*capLauncher, n2)
	for r := range n2 {
		logs[r] = &fenceLog{Stream: w.caps[r].Stream}
		w.caps[r].Stream = logs[r]
		cls[r] = &capLauncher{capCounter: &capCounter{captureStream: w.caps[r]}}
		w.st[r] = cls[r]
	}
	c := arCase(8, 1)
	bs := make([]bufs, n2)
	for r := range n2 {
		bs[r] = w.alloc(c, r, false)
	}
	plans := make([]map[*Schedule]*Plan, n2)
	step := func(s *Schedule, capture bool) {
		t.Helper()
		for _, cs := range w.caps {
			cs.capturing.Store(capture)
		}
		errs := w.each(func(r int) error {
			pl, err := w.ex[r].Execute(context.Background(), request(c, bs[r]), s, w.st[r])
			if pl != nil {
				plans[r][s] = pl
			}
			if err != nil {
				return err
			}
			return w.st[r].Synchronize()
		})
		for _, cs := range w.caps {
			cs.capturing.Store(false)
		}
		noErr(t, errs)
	}
	for r := range n2 {
		plans[r] = map[*Schedule]*Plan{}
	}
	step(ll, false)
	if w.ex[0].FenceEvery(plans[0][ll]) != plans[0][ll].FenceAll() {
		t.Error("FenceEvery differs from FenceAll before any capture")
	}
	step(simple, false)
	step(simple, true) // captured in the layout of the Simple schedule
	step(ll, false)    // (a switch of schedules is refused during a capture)
	step(ll, true)     // and in the LL one's: several layouts captured
	step(ll, false)
	ex := w.ex[0]
	if !ex.Repeatable(plans[0][ll], w.st[0]) || !ex.FenceEvery(plans[0][ll]) {
		t.Errorf("after captures of several layouts: Repeatable %v, FenceEvery %v; want both",
			ex.Repeatable(plans[0][ll], w.st[0]), ex.FenceEvery(plans[0][ll]))
	}
	before := cls[0].captureLaunches
	noErr(t, w.each(func(r int) error {
		if err := w.ex[r].Launch(plans[r][ll], w.st[r]); err != nil {
			return err
		}
		return w.st[r].Synchronize()
	}))
	if cls[0].captureLaunches != before+1 {
		t.Errorf("the plan's launch did not take the plain path (%d CaptureLaunch calls, want %d)", cls[0].captureLaunches, before+1)
	}
	noErr(t, w.each(func(r int) error {
		if err := w.ex[r].Launch(plans[r][ll], w.st[r]); err != nil {
			return err
		}
		return w.st[r].Synchronize()
	}))
	f := logs[0].fences
	if len(f) < 3 || !f[len(f)-3] || !f[len(f)-2] || !f[len(f)-1] {
		t.Errorf("fences of the last three launches of one layout after captures = %v, want all fenced", f[max(len(f)-3, 0):])
	}
}
