//go:build linux

package executor

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// A repeat of the last request that hit at every level goes straight to
// the launch (Repeat), and that changes nothing observable: the same
// counters, fences, launch counter and results as the full walk, which a
// trace function forces, over repeats, other shapes, another schedule (a
// switch and back), a stream that fails and a broken executor.
func TestHotPathSameAsWalk(t *testing.T) {
	const n = 2
	ll := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
	simple := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple})
	type step struct {
		s     *Schedule
		count int64
	}
	steps := []step{{ll, 64}, {ll, 64}, {ll, 64}, {ll, 128}, {ll, 128}, {ll, 64}, {ll, 64},
		{simple, 64}, {simple, 64}, {ll, 64}, {ll, 64}, {ll, 64}}
	run := func(traced bool) ([]Stats, []uint64) {
		w := newWorld(t, n, Config{})
		if traced {
			for _, e := range w.ex {
				e.SetTrace(func(Transition) {})
			}
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
				if err := w.ex[r].Execute(context.Background(), request(c, b), st.s, w.st[r]); err != nil {
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
		// executor fails at Start.
		c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 64, NRanks: n, Seed: 64}
		for r := range n {
			b := buffers[r][64]
			st, err := w.dev.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			st.Close()
			if err := w.ex[r].Execute(context.Background(), request(c, b), ll, st); err == nil {
				t.Fatal("launch on a closed stream: no error")
			}
			w.ex[r].Abort(errInjected)
			if err := w.ex[r].Execute(context.Background(), request(c, b), ll, w.st[r]); err == nil {
				t.Fatal("Execute after Abort: no error")
			}
		}
		stats := make([]Stats, n)
		hot := make([]uint64, n)
		for r, e := range w.ex {
			stats[r], hot[r] = e.Stats(), e.hotRuns
		}
		return stats, hot
	}
	walked, walkedHot := run(true)
	fast, fastHot := run(false)
	for r := range n {
		if walkedHot[r] != 0 {
			t.Fatalf("rank %d: %d hot launches with a trace function", r, walkedHot[r])
		}
		// A request is hot once the same one hit at every level the time
		// before: steps 2, 6 and 11 (1, 5 and 10 hit L3 in its map, 4 and 8
		// too but are followed by another shape, 9 switches back), then the
		// closed stream's request (it fails in the launch) and the broken
		// executor's.
		if fastHot[r] != 5 {
			t.Errorf("rank %d: %d hot launches, want 5", r, fastHot[r])
		}
		if d := cmp.Diff(walked[r], fast[r], cmpopts.IgnoreFields(Migration{}, "Elapsed")); d != "" {
			t.Errorf("rank %d: stats differ (-walk +hot):\n%s", r, d)
		}
	}
}
