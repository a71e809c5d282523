//go:build linux

package comm

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/replay"
	"github.com/theseus-ccl/theseus/runtime/replay/replaytest"
)

// replayStream is a host stream that can repeat launches "from C": its
// records launch with replaytest's fake function, and the test then runs
// the launch that stands for (replayed), as the CUDA backend's C launch
// function would enqueue it. It is a device.CaptureLauncher (never
// capturing), so that the executor's repeat path (launchRepeat) serves it.
type replayStream struct {
	device.Stream
	p     device.Prepared
	fence bool
	sets  int
}

func (s *replayStream) CaptureLaunch(p device.Prepared, launch uint64, fence, fenceCaptured bool) (bool, error) {
	return false, s.Stream.Launch(p, launch, fence)
}

func (s *replayStream) SetReplay(r *replay.Record, p device.Prepared, fence bool) bool {
	if !r.SetLaunch(replay.Launch{Fn: replaytest.Fn(), Err: replaytest.ErrWord(), Arg: make([]byte, 16)}) {
		return false
	}
	s.p, s.fence = p, fence
	s.sets++
	return true
}

// replayed enqueues the launch r's last call made from C stands for.
func (s *replayStream) replayed(r *replay.Record) error {
	return s.Stream.Launch(s.p, replaytest.LastLaunch(r), s.fence)
}

// replayWorld is repeatWorld with replayStreams.
func replayWorld(t *testing.T, n int, bytes int64) ([]*Comm, [][3]*replayStream, []device.Ptr) {
	t.Helper()
	comms, hs, bufs := repeatWorld(t, n, bytes)
	streams := make([][3]*replayStream, n)
	for r := range n {
		for i := 1; i < 3; i++ {
			streams[r][i] = &replayStream{Stream: hs[r][i]}
		}
	}
	return comms, streams, bufs
}

// A call repeated from a replay record (ArmReplay, then th_replay_call's
// launches) changes nothing observable against the same calls made
// through Collective: over repeats, epochs every third request (the
// record's budget), other shapes, another stream, the communicator's own
// stream, in place, a count of 0, every call's result and, at each
// checkpoint, every counter (Stats syncs the record) are the same.
func TestReplaySameAsCollective(t *testing.T) {
	const n = 2
	type step struct {
		count   int64
		stream  int // 0: the communicator's own (nil), 1 or 2: the rank's streams
		inPlace bool
		check   bool // compare Stats after this step
	}
	steps := []step{{64, 1, false, false}, {64, 1, false, false}, {64, 1, false, false}, {64, 1, false, false},
		{64, 1, false, false}, {64, 1, false, true}, {64, 1, false, false}, {128, 1, false, false},
		{128, 1, false, false}, {64, 1, false, false}, {64, 1, false, false}, {0, 1, false, false},
		{64, 1, false, false}, {64, 1, false, true}, {64, 2, false, false}, {64, 2, false, false},
		{64, 2, false, false}, {64, 0, false, false}, {64, 0, false, false}, {64, 1, true, false},
		{64, 1, true, false}, {64, 1, true, false}, {64, 1, true, true}}
	for range 3 {
		steps = append(steps, step{64, 1, false, false}, step{64, 1, false, false}, step{64, 1, false, false},
			step{64, 1, false, false})
	}
	steps[len(steps)-1].check = true
	replaytest.Reset(replay.Launched)
	replaytest.SetErr(0)
	type seen struct {
		Stats Stats
		Step  int
	}
	run := func(withReplay bool) ([][]seen, []uint64) {
		const bytes = 128 * 4
		comms, streams, bufs := replayWorld(t, n, bytes)
		recs := make([]*replay.Record, n)
		fromC := make([]uint64, n)
		out := make([][]seen, n)
		for r := range n {
			recs[r] = replay.New()
		}
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
				var st device.Stream
				var ws *replayStream
				if s.stream != 0 {
					ws = streams[r][s.stream]
					st = ws
				}
				call := &Call{Coll: ir.AllReduce, Send: send, Recv: recv, Count: s.count, DataType: ir.Float32, RedOp: ir.Sum, Stream: st}
				k := replay.Key{uint64(s.count), uint64(s.stream), uint64(send), uint64(recv)}
				if withReplay && ws != nil && replaytest.Call(recs[r], k) {
					fromC[r]++
					if err := ws.replayed(recs[r]); err != nil {
						return err
					}
				} else {
					if err := c.Collective(context.Background(), call); err != nil {
						return err
					}
					if withReplay {
						c.ArmReplay(recs[r], call, k)
					}
				}
				if st != nil {
					if err := st.Synchronize(); err != nil {
						return err
					}
				}
				if err := checkSum(recv, s.count, n); err != nil {
					return err
				}
				if s.check {
					out[r] = append(out[r], seen{c.Stats(), i})
				}
				return nil
			}) {
				if err != nil {
					t.Fatalf("step %d rank %d (replay %v): %v", i, r, withReplay, err)
				}
			}
		}
		return out, fromC
	}
	ref, _ := run(false)
	got, fromC := run(true)
	t.Logf("calls made from the records: %v of %d", fromC, len(steps))
	if fromC[0] < 12 || fromC[0] != fromC[1] {
		t.Errorf("calls made from the records: %v, want the same on both ranks and at least 12", fromC)
	}
	ignore := cmpopts.IgnoreFields(executor.Migration{}, "Elapsed")
	for r := range n {
		for i := range ref[r] {
			ref[r][i].Stats.Selector.EpochTime, got[r][i].Stats.Selector.EpochTime = 0, 0
		}
		if d := cmp.Diff(ref[r], got[r], ignore); d != "" {
			t.Errorf("rank %d: counters differ (-through Collective +from the record):\n%s", r, d)
		}
	}
}

// armedWorld is a 2-rank world whose ranks have each made two calls on
// stream 1 and armed a record for their repeats; it returns the records and
// keys.
func armedWorld(t *testing.T) ([]*Comm, [][3]*replayStream, []*replay.Record, []replay.Key) {
	t.Helper()
	const n, bytes = 2, 64 * 4
	comms, streams, bufs := replayWorld(t, n, bytes)
	recs := []*replay.Record{replay.New(), replay.New()}
	keys := make([]replay.Key, n)
	replaytest.Reset(replay.Launched)
	replaytest.SetErr(0)
	for r, err := range onEach(n, func(r int) error {
		call := &Call{Coll: ir.AllReduce, Send: bufs[r], Recv: bufs[r] + bytes, Count: 64, DataType: ir.Float32, RedOp: ir.Sum,
			Stream: streams[r][1]}
		for range 2 { // the first sets the entries up; the second hits them all
			if err := comms[r].Collective(context.Background(), call); err != nil {
				return err
			}
		}
		keys[r] = replay.Key{1, uint64(r)}
		if !comms[r].ArmReplay(recs[r], call, keys[r]) {
			return errors.New("ArmReplay refused a repeatable call")
		}
		return streams[r][1].Synchronize()
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return comms, streams, recs, keys
}

// An asynchronous error, Abort and Destroy stop every call made from the
// record at once; Finalize and Split count the calls made from it first.
func TestReplayStops(t *testing.T) {
	t.Run("async error", func(t *testing.T) {
		comms, _, recs, keys := armedWorld(t)
		comms[0].setAsync(&Error{Code: RemoteError, Op: "test", Msg: "injected"})
		if replaytest.Call(recs[0], keys[0]) {
			t.Error("a call was made from the record after an asynchronous error")
		}
		if comms[0].ArmReplay(recs[0], &Call{}, keys[0]) {
			t.Error("ArmReplay armed after an asynchronous error")
		}
	})
	t.Run("abort", func(t *testing.T) {
		comms, _, recs, keys := armedWorld(t)
		comms[0].Abort()
		if recs[0].Armed() {
			t.Error("the record is still armed after Abort")
		}
		if replaytest.Call(recs[0], keys[0]) {
			t.Error("a call was made from the record after Abort")
		}
	})
	t.Run("destroy", func(t *testing.T) {
		comms, streams, recs, keys := armedWorld(t)
		for r := range 2 {
			if !replaytest.Call(recs[r], keys[r]) {
				t.Fatalf("rank %d: the armed record declined its key", r)
			}
			if err := streams[r][1].replayed(recs[r]); err != nil {
				t.Fatal(err)
			}
		}
		for r, err := range onEach(2, func(r int) error { return comms[r].Destroy() }) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if replaytest.Call(recs[0], keys[0]) || recs[0].Armed() {
			t.Error("the record launches or is armed after Destroy")
		}
		if got := comms[0].Replayed(); got != 1 {
			t.Errorf("Replayed after Destroy = %d, want 1", got)
		}
	})
	t.Run("finalize counts", func(t *testing.T) {
		comms, streams, recs, keys := armedWorld(t)
		made := make([]uint64, 2)
		for r := range 2 {
			for replaytest.Call(recs[r], keys[r]) { // up to the epoch's budget
				made[r]++
				if err := streams[r][1].replayed(recs[r]); err != nil {
					t.Fatal(err)
				}
			}
		}
		if made[0] < 1 || made[0] != made[1] {
			t.Fatalf("calls made from the records: %v", made)
		}
		before := comms[0].calls
		for r, err := range onEach(2, func(r int) error { return comms[r].Finalize() }) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		if comms[0].calls != before+made[0] || comms[0].Replayed() != made[0] {
			t.Errorf("after Finalize: calls %d (before %d), Replayed %d; want %d more", comms[0].calls, before, comms[0].Replayed(), made[0])
		}
		if replaytest.Call(recs[0], keys[0]) {
			t.Error("a call was made from the record after Finalize")
		}
	})
	t.Run("other key", func(t *testing.T) {
		_, _, recs, keys := armedWorld(t)
		k := keys[0]
		k[7]++
		if replaytest.Call(recs[0], k) {
			t.Error("the record launched a call with another key")
		}
	})
}
