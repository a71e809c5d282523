//go:build linux

package comm

import (
	"fmt"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/replay"
	"github.com/theseus-ccl/theseus/runtime/replay/replaytest"
)

// reviewStep is one AllReduce call on stream 1 of each rank: count
// float32 elements at offset off (in 512-byte blocks) of the rank's
// buffers.
type reviewStep struct {
	count int64
	off   int64
	sync  bool // Stats after the call (it counts and disarms the record)
}

// runReviewSteps makes the calls of steps on 2 ranks (selector epoch every
// period requests), each from the rank's replay record when it takes the
// call (withReplay) and through Collective otherwise, arming the record
// after each call made through Collective. It returns each rank's Stats
// after the last step, the number of calls made from the records, and the
// first error (a launch failure or a wrong sum).
func runReviewSteps(t *testing.T, dir string, steps []reviewStep, withReplay bool, period int) ([]Stats, []int64, error) {
	t.Helper()
	const n = 2
	const bytes = 8 << 20
	comms, streams, bufs := reviewWorld(t, dir, n, bytes, period)
	recs := []*replay.Record{replay.New(), replay.New()}
	fromC := make([]int64, n)
	for i, s := range steps {
		for r, err := range onEach(n, func(r int) error {
			c := comms[r]
			send, recv := bufs[r]+device.Ptr(s.off*512), bufs[r]+bytes+device.Ptr(s.off*512)
			if err := fillRank(send, s.count, r); err != nil {
				return err
			}
			ws := streams[r][1]
			call := &Call{Coll: ir.AllReduce, Send: send, Recv: recv, Count: s.count, DataType: ir.Float32, RedOp: ir.Sum, Stream: ws}
			k := replay.Key{uint64(s.count), 1, uint64(send), uint64(recv)}
			if err := callOrReplay(c, withReplay, recs[r], ws, call, k, &fromC[r]); err != nil {
				return err
			}
			if err := ws.Synchronize(); err != nil {
				return err
			}
			if s.sync {
				c.Stats()
			}
			return checkSum(recv, s.count, n)
		}) {
			if err != nil {
				return nil, fromC, fmt.Errorf("step %d (count %d) rank %d: %w", i, s.count, r, err)
			}
		}
	}
	out := make([]Stats, n)
	for r := range n {
		out[r] = comms[r].Stats()
	}
	return out, fromC, nil
}

// reviewWorld is replayWorld reading the selection context dir ("": a
// Standard one).
func reviewWorld(t *testing.T, dir string, n int, bytes int64, period int) ([]*Comm, [][3]*replayStream, []device.Ptr) {
	t.Helper()
	comms := localCommsWith(t, n, 2*time.Second, dir, period)
	streams := make([][3]*replayStream, n)
	bufs := make([]device.Ptr, n)
	for r, c := range comms {
		for i := 1; i < 3; i++ {
			st, err := c.Backend().NewStream()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			streams[r][i] = &replayStream{Stream: st}
		}
		p, err := c.Backend().Alloc(2 * bytes)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = p
	}
	return comms, streams, bufs
}

// ringContext writes a context whose AllReduce runs a ring, LL up to
// 4 KiB and Simple above: the two schedules' channel ends have the same
// identities and other inits, so the one materialised second takes over
// the other's semaphore slots (delta migration) and a switch between them
// rebases them (L1Switch).
func ringContext(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := commtest.Write(dir, 2, commtest.DefaultAttrs, []commtest.Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Preference: "10", Replaces: -1},
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.LL, MaxBytes: 4096, Preference: "20", Replaces: -1},
	}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Calls alternating between two schedules that share semaphore slots (a
// small AllReduce on the LL ring, a large one on the Simple ring: the
// second's L1 entry is migrated from the first's). Through Collective,
// each switch between them walks L1Switch, which rebases the shared slots
// whose init differs (after waiting for the launches in flight); a call
// made from C would launch the other schedule's kernel on the slots as the
// last call through Go left them. So a record keeps only the entries of
// the last call's schedule (executor.ReplayUsable), and the switches go
// through Go (found by a review of the first version, which kept both:
// its "slots" case timed out waiting for a semaphore).
//
//   - counters: the switches, rebases and waits are Collective's;
//   - slots: the record armed right after a call of the LL ring; the
//     Simple ring's next call completes, with the right sum;
//   - runs: three calls of each in turn: the repeats within a run are made
//     from C, the switches through Go, with Collective's counters.
func TestReplayAcrossScheduleSwitch(t *testing.T) {
	const small, large = 64, 128 << 10 // 256 B (LL ring), 512 KiB (Simple ring)
	// small, small, large, large: both calls are entries of the record
	// (each armed after its second call); then they alternate.
	cycle := []reviewStep{{small, 0, false}, {small, 0, false}, {large, 0, false}, {large, 0, false}}
	for range 6 {
		cycle = append(cycle, reviewStep{small, 0, false}, reviewStep{large, 0, false})
	}
	both := func(t *testing.T, steps []reviewStep) (ref, got []Stats, err error) {
		replaytest.Reset(replay.Launched)
		replaytest.SetErr(0)
		dir := ringContext(t)
		ref, _, err = runReviewSteps(t, dir, steps, false, 1000)
		if err != nil {
			t.Fatalf("through Collective: %v", err)
		}
		for r := range ref {
			if ref[r].Executor.Rebases == 0 {
				t.Fatalf("rank %d: the schedules share no slot whose init differs (Rebases 0): the test shows nothing", r)
			}
		}
		got, fromC, err := runReviewSteps(t, dir, steps, true, 1000)
		t.Logf("calls made from the records: %v of %d", fromC, len(steps))
		return ref, got, err
	}
	sameSwitches := func(t *testing.T, ref, got []Stats) {
		t.Helper()
		for r := range ref {
			re, ge := ref[r].Executor, got[r].Executor
			if re.Switches != ge.Switches || re.Rebases != ge.Rebases || re.Waits != ge.Waits || re.Launches != ge.Launches ||
				re.Fences != ge.Fences {
				t.Errorf("rank %d: Switches/Rebases/Waits/Launches/Fences through Collective %d/%d/%d/%d/%d, with replay %d/%d/%d/%d/%d", r,
					re.Switches, re.Rebases, re.Waits, re.Launches, re.Fences, ge.Switches, ge.Rebases, ge.Waits, ge.Launches, ge.Fences)
			}
		}
	}
	t.Run("counters", func(t *testing.T) {
		ref, got, err := both(t, cycle)
		if err != nil {
			t.Fatalf("with replay: %v", err)
		}
		sameSwitches(t, ref, got)
	})
	t.Run("runs", func(t *testing.T) {
		var steps []reviewStep
		for range 5 {
			for _, c := range []int64{small, large} {
				steps = append(steps, reviewStep{c, 0, false}, reviewStep{c, 0, false}, reviewStep{c, 0, false})
			}
		}
		replaytest.Reset(replay.Launched)
		replaytest.SetErr(0)
		dir := ringContext(t)
		ref, _, err := runReviewSteps(t, dir, steps, false, 1000)
		if err != nil {
			t.Fatalf("through Collective: %v", err)
		}
		got, fromC, err := runReviewSteps(t, dir, steps, true, 1000)
		if err != nil {
			t.Fatalf("with replay: %v", err)
		}
		t.Logf("calls made from the records: %v of %d", fromC, len(steps))
		if fromC[0] < 8 || fromC[0] != fromC[1] {
			t.Errorf("calls made from the records: %v, want the same on both ranks and at least 8", fromC)
		}
		sameSwitches(t, ref, got)
	})
	t.Run("slots", func(t *testing.T) {
		steps := append([]reviewStep(nil), cycle...)
		// Stats disarms the record; the next two calls (small) go through
		// Collective, the first switching back to the LL ring (rebasing the
		// slots to its inits), the second arming the record again with
		// both entries.
		steps[len(steps)-1].sync = true
		steps = append(steps, reviewStep{small, 0, false})
		for range 4 {
			steps = append(steps, reviewStep{small, 0, false}, reviewStep{large, 0, false})
		}
		if _, _, err := both(t, steps); err != nil {
			t.Fatalf("with replay: %v", err)
		}
	})
}
