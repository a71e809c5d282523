//go:build linux

package theseus

import (
	"context"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// hitComm is a 1-rank communicator on the null backend (launches do
// nothing) with a context of a few allreduce schedules, warmed so that the
// benchmark's request hits every cache. Epochs are pushed out of the way
// (check period 2^30): their cost is the selector's, amortised over
// THESEUS_CONTEXT_CHECK_PERIOD requests.
func hitComm(tb testing.TB) (*Comm, Ptr, Ptr, *devicetest.Null) {
	tb.Helper()
	dir := tb.TempDir()
	scheds := []commtest.Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Preference: "10", Replaces: -1},
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.LL, MaxBytes: 4096, Preference: "20", Replaces: -1},
		{Algo: "ring", Coll: ir.AllGather, Protocol: ir.Simple, Replaces: -1},
	}
	if err := commtest.Write(dir, 1, commtest.DefaultAttrs, scheds); err != nil {
		tb.Fatal(err)
	}
	null := devicetest.NewNull()
	cfg := Config{Backend: "null", ContextDir: dir}
	cfg.Options.Backend = null
	cfg.Options.CheckPeriod = 1 << 30
	comms, err := NewLocalComms(context.Background(), 1, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	c := comms[0]
	tb.Cleanup(func() { c.Destroy() })
	send, _ := c.MemAlloc(1 << 20)
	recv, _ := c.MemAlloc(1 << 20)
	for range 2 {
		if err := c.AllReduce(send, recv, 1<<16, Float32, Sum, nil); err != nil {
			tb.Fatal(err)
		}
	}
	return c, send, recv, null
}

// BenchmarkCallHit is the host time of one repeated collective call: its
// plan found and checked (the selector's budget and cache generation, the
// executor's generation and running schedule) and launched, excluding the
// backend's run (the null backend's launch does nothing).
func BenchmarkCallHit(b *testing.B) {
	c, send, recv, null := hitComm(b)
	s := c.c.Stream()
	launches := null.Launches.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := c.AllReduce(send, recv, 1<<16, Float32, Sum, s); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if null.Launches.Load()-launches != uint64(b.N) {
		b.Fatalf("%d launches for %d calls", null.Launches.Load()-launches, b.N)
	}
}

// TestCallHitAllocs: a cache-hit call (launched from its plan) allocates
// nothing.
func TestCallHitAllocs(t *testing.T) {
	c, send, recv, _ := hitComm(t)
	s := c.c.Stream()
	allocs := testing.AllocsPerRun(1000, func() {
		if err := c.AllReduce(send, recv, 1<<16, Float32, Sum, s); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per cache-hit call, want 0", allocs)
	}
	if st := c.Stats().Executor; st.PlanLaunches < 1000 {
		t.Errorf("not launched from their plans: %+v", st)
	}
}
