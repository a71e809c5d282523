//go:build linux

package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/replay"
	"github.com/theseus-ccl/theseus/runtime/replay/replaytest"
)

// replayStream is a host stream whose launches can be made "from C": its
// launch images launch with replaytest's fake function, and the test then
// runs the launch that stands for (replayed), as the CUDA backend's C launch
// function would enqueue it. It is a device.CaptureLauncher (never
// capturing), so that the executor's plain launch path serves it. Each
// image's argument carries a tag naming its prepared launch.
type replayStream struct {
	device.Stream
	preps map[uint64]device.Prepared
	stops []device.Stopper
}

func (s *replayStream) CaptureLaunch(p device.Prepared, launch uint64, fence, fenceCaptured bool) (bool, error) {
	return false, s.Stream.Launch(p, launch, fence)
}

func (s *replayStream) LaunchImage(p device.Prepared, stop device.Stopper) (device.LaunchImage, bool) {
	if s.preps == nil {
		s.preps = map[uint64]device.Prepared{}
	}
	tag := uint64(len(s.preps) + 1)
	for t, q := range s.preps {
		if q == p {
			tag = t
		}
	}
	arg := make([]byte, 24)
	binary.LittleEndian.PutUint64(arg, tag)
	s.preps[tag] = p
	s.stops = append(s.stops, stop)
	return device.LaunchImage{Fn: replaytest.Fn(), Err: replaytest.ErrWord(), NFence: 1, Arg: arg, OffLaunch: 8, OffNFence: 16}, true
}

// replayed enqueues the launch r's last call made from C stands for.
func (s *replayStream) replayed(r *replay.Record) error {
	l, ok := replaytest.LastLaunch(r)
	if !ok {
		return errors.New("no launch recorded")
	}
	p := s.preps[l.Tag]
	if p == nil {
		return fmt.Errorf("launch of an unknown tag %d", l.Tag)
	}
	return s.Stream.Launch(p, l.Launch, l.NFence != 0)
}

// callOrReplay makes call as the NCCL library would with record rec
// (when withReplay): from rec when it takes key k (the test then enqueues
// that launch on ws, as the C launch function would), counting it in
// *fromC, else through Collective, arming rec afterwards.
func callOrReplay(c *Comm, withReplay bool, rec *replay.Record, ws *replayStream, call *Call, k replay.Key, fromC *int64) error {
	if withReplay && ws != nil && replaytest.Call(rec, k) {
		*fromC++
		return ws.replayed(rec)
	}
	if err := c.Collective(context.Background(), call); err != nil {
		return err
	}
	if withReplay {
		c.ArmReplay(rec, call, k)
	}
	return nil
}

// replayWorld is repeatWorld with replayStreams and a selector epoch
// every period requests.
func replayWorld(t *testing.T, n int, bytes int64, period int) ([]*Comm, [][3]*replayStream, []device.Ptr) {
	t.Helper()
	comms, hs, bufs := repeatWorldPeriod(t, n, bytes, period)
	streams := make([][3]*replayStream, n)
	for r := range n {
		for i := 1; i < 3; i++ {
			streams[r][i] = &replayStream{Stream: hs[r][i]}
		}
	}
	return comms, streams, bufs
}

// seen is a rank's counters after a step.
type seen struct {
	Stats Stats
	Step  int
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
		check   bool  // compare Stats after this step
		off     int64 // buffer offset, in 128-element blocks
	}
	// Calls cycle over buffers (offsets) and counts, as nccl-tests and a
	// data-parallel job's buckets do: each is an entry of the record.
	steps := []step{{64, 1, false, false, 0}, {64, 1, false, false, 0}, {64, 1, false, false, 0}, {64, 1, false, false, 0},
		{64, 1, false, false, 0}, {64, 1, false, true, 0}, {64, 1, false, false, 0}, {128, 1, false, false, 0},
		{128, 1, false, false, 0}, {64, 1, false, false, 0}, {64, 1, false, false, 0}, {0, 1, false, false, 0},
		{64, 1, false, false, 0}, {64, 1, false, true, 0}, {64, 2, false, false, 0}, {64, 2, false, false, 0},
		{64, 2, false, false, 0}, {64, 0, false, false, 0}, {64, 0, false, false, 0}, {64, 1, true, false, 0},
		{64, 1, true, false, 0}, {64, 1, true, false, 0}, {64, 1, true, true, 0}}
	for round := range 12 {
		for off := range int64(3) {
			steps = append(steps, step{64, 1, false, false, off}, step{32, 1, false, false, off})
		}
		steps = append(steps, step{128, 1, false, false, 1})
		if round == 5 {
			// A call that grows the scratch buffer: every entry's launch
			// is dropped (the next calls set theirs up again).
			steps = append(steps, step{1 << 20, 1, false, false, 0})
		}
	}
	for i := range steps {
		if i%9 == 8 {
			steps[i].check = true
		}
	}
	steps[len(steps)-1].check = true
	replaytest.Reset(replay.Launched)
	replaytest.SetErr(0)
	run := func(withReplay bool, period int) ([][]seen, []int64) {
		const bytes = 4<<20 + 1024
		comms, streams, bufs := replayWorld(t, n, bytes, period)
		recs := make([]*replay.Record, n)
		fromC := make([]int64, n)
		out := make([][]seen, n)
		for r := range n {
			recs[r] = replay.New()
		}
		for i, s := range steps {
			for r, err := range onEach(n, func(r int) error {
				c := comms[r]
				send, recv := bufs[r]+device.Ptr(s.off*512), bufs[r]+bytes+device.Ptr(s.off*512)
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
				if err := callOrReplay(c, withReplay, recs[r], ws, call, k, &fromC[r]); err != nil {
					return err
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
	for _, period := range []int{3, 1000} {
		t.Run(fmt.Sprintf("period%d", period), func(t *testing.T) {
			ref, _ := run(false, period)
			got, fromC := run(true, period)
			t.Logf("calls made from the records: %v of %d", fromC, len(steps))
			// With an epoch every third request, about one call in three
			// can be made from the record; with one every 1000, all but
			// the first two of each call (the setup, and the call that
			// arms it, again after the scratch growth), those on the
			// communicator's own stream and those after a checkpoint
			// (Stats disarms the record): about half.
			want := int64(len(steps)) / 3
			if period == 1000 {
				want = int64(len(steps)) / 2
			}
			if fromC[0] < want || fromC[0] != fromC[1] {
				t.Errorf("calls made from the records: %v, want the same on both ranks and at least %d", fromC, want)
			}
			compare(t, ref, got)
		})
	}
}

// compare compares the counters of each rank at each checkpoint
// (sameCounters: the executor counts a call made from C as a plan launch,
// which a call through Collective may have made as a walk).
func compare(t *testing.T, ref, got [][]seen) {
	t.Helper()
	elapsed := cmpopts.IgnoreFields(executor.Migration{}, "Elapsed")
	for r := range ref {
		for i := range ref[r] {
			ref[r][i].Stats, got[r][i].Stats = sameCounters(ref[r][i].Stats), sameCounters(got[r][i].Stats)
		}
		if d := cmp.Diff(ref[r], got[r], elapsed); d != "" {
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
	comms, streams, bufs := replayWorld(t, n, bytes, 3)
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
		comms, streams, recs, keys := armedWorld(t)
		comms[0].setAsync(&Error{Code: RemoteError, Op: "test", Msg: "injected"})
		if replaytest.Call(recs[0], keys[0]) {
			t.Error("a call was made from the record after an asynchronous error")
		}
		if comms[0].ArmReplay(recs[0], &Call{}, keys[0]) {
			t.Error("ArmReplay armed after an asynchronous error")
		}
		// A call of the stream that is not the last call: refused for want
		// of its plan; the last call: refused for the error.
		if comms[0].ArmReplay(recs[0], &Call{Coll: ir.AllGather, Stream: streams[0][1]}, keys[0]) {
			t.Error("ArmReplay armed another call")
		}
		if got, want := comms[0].ReplayRefusals(), "no plan 1"; got != want {
			t.Errorf("ReplayRefusals = %q, want %q", got, want)
		}
		if got := comms[1].ReplayRefusals(); got != "" {
			t.Errorf("rank 1: ReplayRefusals = %q, want none", got)
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
