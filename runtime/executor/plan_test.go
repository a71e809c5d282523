//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// withoutPlans is st as walks alone would have counted it, for a run whose
// repeats were launched from plans of schedules that reach no peer's
// buffers (every plan launch stands for a walk that would have hit at
// every level: L1 same, L2 skip, L3 hit; a failed one for such a walk
// that failed at Launch): the plan launches become walks again.
// StateVisits and TransitionsTaken are not rebuilt.
func withoutPlans(st Stats) Stats {
	n := st.PlanLaunches + st.PlanFailures
	st.Walks += n
	st.L1Same += n
	st.L2Skips += n
	st.L3Hits += n
	st.Failures += st.PlanFailures
	st.PlanLaunches, st.PlanFailures = 0, 0
	return st
}

// Launching repeats from their plans changes nothing observable against
// walking every call: the results, the launch counter, the fences, every
// counter but the walks' (withoutPlans), over repeats, other shapes,
// another schedule (a switch, and back: the first schedule's plans wait
// for a walk in between), a stream that fails and a broken executor.
func TestPlanLaunchSameAsWalk(t *testing.T) {
	const n = 2
	ll := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
	simple := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple})
	type step struct {
		s     *Schedule
		count int64
	}
	steps := []step{{ll, 64}, {ll, 64}, {ll, 64}, {ll, 128}, {ll, 128}, {ll, 64}, {ll, 64},
		{simple, 64}, {simple, 64}, {ll, 64}, {ll, 64}, {ll, 64}}
	run := func(plans bool) ([]Stats, []*planner) {
		w := newWorld(t, n, Config{})
		if plans {
			w.usePlans()
		}
		// One pair of buffers per shape and rank, reused: a repeat is the
		// same request.
		buffers := make([]map[int64]bufs, n)
		for r := range n {
			buffers[r] = map[int64]bufs{}
		}
		for i, st := range steps {
			c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: st.count, NRanks: n, Seed: uint64(st.count)}
			w.must(w.each(func(r int) error {
				b, ok := buffers[r][st.count]
				if !ok {
					b = w.alloc(c, r, false)
					buffers[r][st.count] = b
				}
				clear(b.out)
				if err := w.call(r, request(c, b), st.s, w.st[r]); err != nil {
					return err
				}
				if err := w.st[r].Synchronize(); err != nil {
					return err
				}
				if wr := devicetest.Wrong(b.out, c.Expected(r), 4); wr != 0 {
					return fmt.Errorf("step %d: %d elements wrong", i, wr)
				}
				return nil
			}))
		}
		// A closed stream fails the launch (not sticky), then a broken
		// executor fails at Start (its plans are stale).
		c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 64, NRanks: n, Seed: 64}
		for r := range n {
			b := buffers[r][64]
			st, err := w.dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			if err := w.call(r, request(c, b), ll, st); err == nil {
				t.Fatal("launch on a closed stream: no error")
			}
			w.ex[r].Abort(errInjected)
			if err := w.call(r, request(c, b), ll, w.st[r]); err == nil {
				t.Fatal("a call after Abort: no error")
			}
		}
		stats := make([]Stats, n)
		for r, e := range w.ex {
			stats[r] = e.Stats()
		}
		return stats, w.plans
	}
	walked, _ := run(false)
	fromPlans, planners := run(true)
	for r := range n {
		p := planners[r]
		// A request launches from its plan once a walk built it: steps 1,
		// 2, 4, 5, 6, 8, 10 and 11 (the planner keeps one plan per request:
		// steps 7 and 9 are the other schedule's, and walk), then the
		// closed stream's request (its launch fails), and the broken
		// executor's (stale: it walks to its Fail).
		if p.launched != 8 || p.failed != 1 || p.stale != 1 {
			t.Errorf("rank %d: %d plans launched, %d failed, %d stale; want 8, 1, 1", r, p.launched, p.failed, p.stale)
		}
		if got := fromPlans[r]; got.PlanLaunches != uint64(p.launched) || got.PlanFailures != uint64(p.failed) {
			t.Errorf("rank %d: PlanLaunches %d, PlanFailures %d; want %d, %d", r, got.PlanLaunches, got.PlanFailures, p.launched, p.failed)
		}
		got := withoutPlans(fromPlans[r])
		if d := cmp.Diff(walked[r], got, cmpopts.IgnoreFields(Migration{}, "Elapsed"),
			cmpopts.IgnoreFields(Stats{}, "StateVisits", "TransitionsTaken")); d != "" {
			t.Errorf("rank %d: stats differ (-walked +from plans):\n%s", r, d)
		}
	}
}

// Every event that moves a plan's validity on makes Launch refuse it
// (ErrStale, launching and counting nothing) until a walk: a switch to
// another schedule (until a walk switches back, when the same plan is
// valid again), scratch growth (a new plan), a registration change (the
// call's allocation replaced at the same address: L2), and an abort.
func TestPlanInvalidation(t *testing.T) {
	const n = 2
	c := func(count int64) devicetest.Case {
		return devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: n, Seed: 1}
	}
	// plans walks req with s on every rank and returns the plans.
	plans := func(w *world, s *Schedule, bs []bufs, cs devicetest.Case) []*Plan {
		out := make([]*Plan, n)
		w.must(w.each(func(r int) error {
			p, err := w.ex[r].Execute(context.Background(), request(cs, bs[r]), s, w.st[r])
			out[r] = p
			if err == nil {
				err = w.st[r].Synchronize()
			}
			return err
		}))
		return out
	}
	// launch launches every rank's plan and returns the errors.
	launch := func(w *world, ps []*Plan) []error {
		return w.each(func(r int) error {
			if err := w.ex[r].Launch(ps[r], w.st[r]); err != nil {
				return err
			}
			return w.st[r].Synchronize()
		})
	}
	stale := func(t *testing.T, what string, errs []error) {
		t.Helper()
		for r, err := range errs {
			if !errors.Is(err, ErrStale) {
				t.Errorf("%s: rank %d: Launch = %v, want ErrStale", what, r, err)
			}
		}
	}
	t.Run("switch", func(t *testing.T) {
		w := newWorld(t, n, Config{})
		a := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
		b := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple})
		ca := c(64)
		bs := []bufs{w.alloc(ca, 0, false), w.alloc(ca, 1, false)}
		pa := plans(w, a, bs, ca)
		w.must(launch(w, pa))
		plans(w, b, bs, ca) // a switch: b is the running schedule
		launches := w.ex[0].LaunchCounter()
		stale(t, "after a switch", launch(w, pa))
		if w.ex[0].LaunchCounter() != launches {
			t.Errorf("a stale plan launched")
		}
		again := plans(w, a, bs, ca) // the walk switches back
		if again[0] != pa[0] {
			t.Errorf("the walk back built a new plan; want the same (its entries were kept)")
		}
		w.must(launch(w, pa))
	})
	t.Run("growth", func(t *testing.T) {
		w := newWorld(t, n, Config{InitialScratch: 1 << 16})
		s := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple})
		small, big := c(64), c(1<<16)
		bs := []bufs{w.alloc(small, 0, false), w.alloc(small, 1, false)}
		bb := []bufs{w.alloc(big, 0, false), w.alloc(big, 1, false)}
		ps := plans(w, s, bs, small)
		plans(w, s, bb, big) // grows the scratch buffer
		if w.ex[0].Stats().Growths != 1 {
			t.Fatalf("Growths %d, want 1", w.ex[0].Stats().Growths)
		}
		stale(t, "after scratch growth", launch(w, ps))
		if again := plans(w, s, bs, small); again[0] == ps[0] {
			t.Errorf("the walk after growth returned the old plan")
		}
	})
	t.Run("registration", func(t *testing.T) {
		w := newWorld(t, n, Config{InitialScratch: 1 << 16, Timeout: 5e9})
		devs := make([]*genDev, n)
		for r := range n {
			devs[r] = &genDev{Backend: w.dev}
			ex, err := New(Config{Rank: r, NRanks: n, Backend: devs[r], Net: w.boots[r], InitialScratch: 1 << 16, Timeout: 5e9})
			if err != nil {
				t.Fatal(err)
			}
			w.ex[r].Close()
			w.ex[r] = ex
		}
		one := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple})
		cs := c(1024)
		bs := []bufs{w.alloc(cs, 0, false), w.alloc(cs, 1, false)}
		ps := plans(w, one, bs, cs)
		if !ps[0].ReachesPeers() {
			t.Fatal("the one-shot schedule's plan reaches no peer's buffers: the test shows nothing")
		}
		w.must(launch(w, ps))
		for _, d := range devs {
			d.bump.Add(1) // same addresses and sizes, new allocations
		}
		stale(t, "after the allocations changed", launch(w, ps))
	})
	t.Run("abort", func(t *testing.T) {
		w := newWorld(t, n, Config{})
		s := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
		cs := c(64)
		bs := []bufs{w.alloc(cs, 0, false), w.alloc(cs, 1, false)}
		ps := plans(w, s, bs, cs)
		for r := range n {
			w.ex[r].Abort(errInjected)
		}
		stale(t, "after Abort", launch(w, ps))
	})
}
