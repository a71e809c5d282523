//go:build linux

package theseus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/diff"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/executor"
)

// TestHotSwap: 10^4 back-to-back allreduces on 4 ranks while the exogenous
// attribute slow_rank flips 100 times. A ring serves while slow_rank < 0;
// a ring in another order (which replaces it) while slow_rank >= 0. All
// ranks must switch at the same request, every result must be right, and
// the only migration (the first switch) must create exactly the delta
// compiler/diff computes: no other L1 setup, no registration, no allgather.
func TestHotSwap(t *testing.T) {
	const (
		n        = 4
		requests = 10_000
		flips    = 100
		period   = 10 // THESEUS_CONTEXT_CHECK_PERIOD
		count    = 1024
	)
	if testing.Short() {
		t.Skip("10^4 requests")
	}
	dir := t.TempDir()
	scheds := []commtest.Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Preference: "10", Replaces: -1, File: "ring.json"},
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Order: []int{0, 2, 1, 3}, Usable: "slow_rank >= 0",
			Preference: "15", Replaces: 0, File: "ring_0213.json"},
	}
	if err := commtest.Write(dir, n, commtest.DefaultAttrs, scheds); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: "host", ContextDir: dir}
	cfg.Options.CheckPeriod = period
	cfg.Options.Timeout = 20 * time.Second
	comms, err := NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Destroy()
		}
	}()

	type rankRun struct {
		sched       []int
		wrong       int64
		err         error
		afterFirst  executor.Stats
		end         executor.Stats
		migrations  []executor.Migration
		publishedAt []int
	}
	start := time.Now()
	runs := onEach(comms, func(c *Comm) rankRun {
		var rr rankRun
		var ar arena
		defer ar.free(c)
		value := -1 // the default: no slow rank
		for i := range requests {
			if c.Rank() == 0 && i%(requests/flips) == requests/flips/2 {
				value = -value // -1, 1, -1, ...: slow_rank >= 0 every other flip
				if err := PublishValue(dir, "slow_rank", value); err != nil {
					rr.err = err
					return rr
				}
				rr.publishedAt = append(rr.publishedAt, i)
			}
			k := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: n, Seed: uint64(i)}
			b, err := ar.buffers(c, k, false)
			if err == nil {
				err = c.AllReduce(b.send, b.recv, count, Float32, Sum, nil)
			}
			if err != nil {
				rr.err = fmt.Errorf("request %d: %w", i, err)
				return rr
			}
			rr.wrong += devicetest.Wrong(b.out, k.Expected(c.Rank()), 4)
			rr.sched = append(rr.sched, c.LastCall().Schedule)
			st := c.Stats().Executor
			if i == 0 {
				rr.afterFirst = st
			}
			if len(rr.migrations) == 0 || st.LastMigration != rr.migrations[len(rr.migrations)-1] {
				rr.migrations = append(rr.migrations, st.LastMigration)
			}
		}
		rr.end = c.Stats().Executor
		return rr
	})
	t.Logf("%d requests x %d ranks in %v", requests, n, time.Since(start).Round(time.Millisecond))
	for r, rr := range runs {
		if rr.err != nil {
			t.Fatalf("rank %d: %v", r, rr.err)
		}
		if rr.wrong != 0 {
			t.Errorf("rank %d: #wrong = %d", r, rr.wrong)
		}
	}
	// Every rank ran the same schedule for every request.
	for r := 1; r < n; r++ {
		if d := cmp.Diff(runs[0].sched, runs[r].sched); d != "" {
			t.Fatalf("rank %d selected differently from rank 0 (-rank 0 +rank %d):\n%s", r, r, d)
		}
	}
	// 100 switches, each within two check periods of its publication.
	var switches []int
	for i := 1; i < requests; i++ {
		if runs[0].sched[i] != runs[0].sched[i-1] {
			switches = append(switches, i)
		}
	}
	pub := runs[0].publishedAt
	if len(switches) != flips || len(pub) != flips {
		t.Fatalf("%d switches for %d flips published at %v; switches at %v", len(switches), len(pub), pub, switches)
	}
	for k, i := range switches {
		if i < pub[k] || i > pub[k]+2*period {
			t.Errorf("flip %d published before request %d switched at request %d", k, pub[k], i)
		}
	}
	// Migration created only the delta, once.
	ring, alt := bundleOf(t, comms[0], 0), bundleOf(t, comms[0], 1)
	d, err := diff.Bundles(ring, alt)
	if err != nil {
		t.Fatal(err)
	}
	for r, rr := range runs {
		st := rr.end
		if st.L0Setups != 1 || st.L1Cold != 1 || st.L1Migrations != 1 || st.L1Hits != flips-1 || st.Growths != 0 {
			t.Errorf("rank %d: L0 setups %d, L1 cold %d, migrations %d, L1 hits %d, growths %d; want 1, 1, 1, %d, 0",
				r, st.L0Setups, st.L1Cold, st.L1Migrations, st.L1Hits, st.Growths, flips-1)
		}
		if len(rr.migrations) != 2 || rr.migrations[0].To != 0 || rr.migrations[1].From != 0 || rr.migrations[1].To != 1 {
			t.Fatalf("rank %d: migrations %+v, want a cold setup of 0 then 0 -> 1", r, rr.migrations)
		}
		want := deltaOn(d, r)
		got := rr.migrations[1].Created
		got.Allocations = 0 // the table and counters of the new schedule
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("rank %d: migration created (-compiler/diff +executor):\n%s", r, diff)
		}
		total := st.Created
		first := rr.afterFirst.Created
		since := executor.Created{ChannelEnds: total.ChannelEnds - first.ChannelEnds, Semaphores: total.Semaphores - first.Semaphores,
			Registrations: total.Registrations - first.Registrations, BootstrapMessages: total.BootstrapMessages - first.BootstrapMessages,
			BootstrapRounds: total.BootstrapRounds - first.BootstrapRounds, Connections: total.Connections - first.Connections}
		if diff := cmp.Diff(want, since); diff != "" {
			t.Errorf("rank %d: created after the first request, 100 flips in all (-delta +created):\n%s", r, diff)
		}
		t.Logf("rank %d: migration 0->1 created %+v, kept %d semaphores (%d rebased) in %v; %d switches, %d rebases, %d fences",
			r, got, rr.migrations[1].Kept, rr.migrations[1].Rebased, rr.migrations[1].Elapsed, st.Switches, st.Rebases, st.Fences)
	}
}

func bundleOf(t *testing.T, c *Comm, id int) *bundle.Bundle {
	t.Helper()
	ref, ok := c.Internal().Schedule(id)
	if !ok || ref.Info == nil {
		t.Fatalf("schedule %d not loaded", id)
	}
	b, ok := ref.Info.Artifact.(*bundle.Bundle)
	if !ok {
		t.Fatalf("schedule %d has no bundle", id)
	}
	return b
}

// deltaOn is what a migration must create on rank r according to the
// delta: its added channel ends and semaphores, and one bootstrap message
// to each peer of an added semaphore.
func deltaOn(d *diff.Delta, r int) executor.Created {
	var c executor.Created
	for _, e := range d.ChannelEnds.Added {
		if e.Rank == r {
			c.ChannelEnds++
		}
	}
	peers := map[int]bool{}
	for _, s := range d.Semaphores.Added {
		if s.Rank == r {
			c.Semaphores++
			peers[s.Peer] = true
		}
	}
	for _, g := range d.Registrations.Added {
		if g.Rank == r {
			c.Registrations++
		}
	}
	c.BootstrapMessages = len(peers)
	return c
}
