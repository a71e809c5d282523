//go:build linux

package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// A repeated call is launched from its kept plan, and that changes nothing
// observable: over a sequence of repeats, other shapes, a count of 0,
// another stream, the communicator's own stream, in place, and epochs
// every third request, every call's result, LastCall and every counter
// (the communicator's, the selector's, the executor's but its walks:
// sameCounters) are the same as when every call takes the full path.
func TestPlansSameAsFullPath(t *testing.T) {
	const n = 2
	type step struct {
		count   int64
		stream  int // 0: the communicator's own (nil), 1 or 2: the rank's streams
		inPlace bool
	}
	steps := []step{{64, 1, false}, {64, 1, false}, {64, 1, false}, {64, 1, false}, {128, 1, false}, {128, 1, false},
		{64, 1, false}, {64, 1, false}, {0, 1, false}, {64, 1, false}, {64, 1, false}, {64, 2, false}, {64, 2, false},
		{64, 0, false}, {64, 0, false}, {64, 1, false}, {64, 1, true}, {64, 1, true}, {64, 1, true}, {64, 1, false},
		{64, 1, false}, {64, 1, false}, {64, 1, false}, {64, 1, false}}
	type seen struct {
		Stats Stats
		Last  CallInfo
	}
	run := func(full bool) ([][]seen, uint64) {
		const bytes = 128 * 4
		comms, streams, bufs := repeatWorld(t, n, bytes)
		out := make([][]seen, n)
		for i, s := range steps {
			for r, err := range onEach(n, func(r int) error {
				c := comms[r]
				send, recv := bufs[r], bufs[r]+bytes
				if s.inPlace {
					recv = send
				}
				if err := fillRank(send, s.count, r); err != nil {
					return err
				}
				if full {
					forgetPlans(c)
				}
				call := &Call{Coll: ir.AllReduce, Send: send, Recv: recv, Count: s.count, DataType: ir.Float32, RedOp: ir.Sum,
					Stream: streams[r][s.stream]}
				if err := c.Collective(context.Background(), call); err != nil {
					return err
				}
				if call.Stream != nil {
					if err := call.Stream.Synchronize(); err != nil {
						return err
					}
				}
				if err := checkSum(recv, s.count, n); err != nil {
					return err
				}
				out[r] = append(out[r], seen{c.Stats(), c.LastCall()})
				return nil
			}) {
				if err != nil {
					t.Fatalf("step %d rank %d: %v", i, r, err)
				}
			}
		}
		return out, comms[0].exec.Stats().PlanLaunches
	}
	full, fullPlanned := run(true)
	fast, planned := run(false)
	t.Logf("rank 0: %d of %d calls launched from their plans", planned, len(steps))
	if planned < 5 || fullPlanned != 0 {
		t.Errorf("rank 0 launched %d calls from their plans (%d when they were forgotten)", planned, fullPlanned)
	}
	for r := range n {
		for i := range steps {
			full[r][i].Stats, fast[r][i].Stats = sameCounters(full[r][i].Stats), sameCounters(fast[r][i].Stats)
			if d := cmp.Diff(full[r][i], fast[r][i], cmpopts.IgnoreFields(executor.Migration{}, "Elapsed")); d != "" {
				t.Errorf("rank %d step %d: differs (-full path +from plans):\n%s", r, i, d)
			}
		}
	}
}

// forgetPlans drops c's kept plans: its next call takes the full path.
func forgetPlans(c *Comm) {
	c.plans = [planSlots]planEntry{}
	c.setCur(-1, true)
}

// sameCounters is st with what differs between a call launched from its
// plan and the same call through the full path taken out: the executor's
// walk counters (a plan launch is a walk fewer, and that walk's hits; a
// failed one a walk that failed at Launch), with Walks + PlanLaunches +
// PlanFailures kept as Walks, and the selector's epoch time.
func sameCounters(st Stats) Stats {
	e := &st.Executor
	e.Walks += e.PlanLaunches + e.PlanFailures
	e.Failures += e.PlanFailures
	e.PlanLaunches, e.PlanFailures = 0, 0
	e.L1Same, e.L2Skips, e.L2Hits, e.L3Hits = 0, 0, 0, 0
	e.StateVisits, e.TransitionsTaken = [len(e.StateVisits)]uint64{}, 0
	st.Selector.EpochTime = 0
	return st
}

// repeatWorld is n in-process ranks on the host backend with a selector
// epoch every third request, two streams per rank (streams[r][1] and [2];
// [0] is nil: the communicator's own) and 2*bytes of memory per rank.
func repeatWorld(t *testing.T, n int, bytes int64) ([]*Comm, [][3]device.Stream, []device.Ptr) {
	t.Helper()
	return repeatWorldPeriod(t, n, bytes, 3)
}

// repeatWorldPeriod is repeatWorld with a selector epoch every period
// requests.
func repeatWorldPeriod(t *testing.T, n int, bytes int64, period int) ([]*Comm, [][3]device.Stream, []device.Ptr) {
	t.Helper()
	comms := localCommsWith(t, n, 10*time.Second, "", period)
	streams := make([][3]device.Stream, n)
	bufs := make([]device.Ptr, n)
	for r, c := range comms {
		for i := 1; i < 3; i++ {
			st, err := c.Backend().NewStream()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			streams[r][i] = st
		}
		p, err := c.Backend().Alloc(2 * bytes)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = p
	}
	return comms, streams, bufs
}

// fillRank writes rank+1+i (float32) to element i of p.
func fillRank(p device.Ptr, count int64, rank int) error {
	b, err := host.Bytes(p, count*4)
	if err != nil {
		return err
	}
	for i := range count {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rank+1)+float32(i)))
	}
	return nil
}

// checkSum checks that element i of p is the sum over n ranks of fillRank's.
func checkSum(p device.Ptr, count int64, n int) error {
	b, err := host.Bytes(p, count*4)
	if err != nil {
		return err
	}
	for i := range count {
		want := float32(n*(n+1)/2) + float32(n)*float32(i)
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != want {
			return fmt.Errorf("element %d: %v, want %v", i, got, want)
		}
	}
	return nil
}

// A kept plan serves its call only under the selection snapshot its
// schedule was chosen in: an epoch that installs a new snapshot (here an
// exogenous attribute's new value, which makes a schedule for large
// messages usable) sends every kept plan's next call back to Select,
// even a plan the executor still finds valid (its schedule running). The
// large call, whose plan is still of the running schedule, must not launch
// from it: Select now chooses the other schedule.
func TestPlanStaleAfterSnapshot(t *testing.T) {
	const n = 2
	const small, large = 256, 32 << 10 // float32 elements: 1 KiB, 128 KiB
	dir := t.TempDir()
	if err := commtest.Write(dir, n, commtest.DefaultAttrs, []commtest.Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Preference: "10", Replaces: -1},
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Order: []int{1, 0}, MinBytes: 64 << 10,
			Usable: "slow_rank >= 0", Preference: "15", Replaces: 0, File: "01_reverse.json"},
	}); err != nil {
		t.Fatal(err)
	}
	// An epoch at requests 1, 4, 7, ...
	comms := localCommsWith(t, n, 10*time.Second, dir, 3)
	bufs := make([]device.Ptr, n)
	for r, c := range comms {
		p, err := c.Backend().Alloc(2 * 4 * large)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = p
	}
	// call makes one allreduce of count elements on every rank and returns
	// rank 0's schedule and whether it walked.
	call := func(count int64) (sched int, walked bool) {
		t.Helper()
		walks := comms[0].exec.Stats().Walks
		for r, err := range onEach(n, func(r int) error {
			c := comms[r]
			if err := fillRank(bufs[r], count, r); err != nil {
				return err
			}
			recv := bufs[r] + 4*large
			if err := c.Collective(context.Background(), &Call{Coll: ir.AllReduce, Send: bufs[r], Recv: recv, Count: count,
				DataType: ir.Float32, RedOp: ir.Sum}); err != nil {
				return err
			}
			return checkSum(recv, count, n)
		}) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return comms[0].LastCall().Schedule, comms[0].exec.Stats().Walks != walks
	}
	for i, count := range []int64{small, large, small, large, small, large} {
		s, walked := call(count)
		if s != 0 {
			t.Fatalf("request %d: schedule %d before the new snapshot, want 0", i+1, s)
		}
		if want := i < 2 || i == 3; walked != want { // the first of each, and the epoch at request 4
			t.Errorf("request %d: walked %v, want %v", i+1, walked, want)
		}
	}
	if err := PublishValue(dir, "slow_rank", 0); err != nil {
		t.Fatal(err)
	}
	if s, _ := call(small); s != 0 { // request 7: the epoch installs the new snapshot
		t.Fatalf("small call after the new snapshot: schedule %d, want 0", s)
	}
	if s, walked := call(large); s != 1 || !walked {
		t.Errorf("large call after the new snapshot: schedule %d, walked %v; want schedule 1 through a walk", s, walked)
	}
}
