//go:build linux

package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/resident"
)

// The persistent executor (Config.Executor, THESEUS_EXECUTOR=persistent)
// on the host backend, whose resident goroutine runs the queue protocol of
// the CUDA backend's resident kernel: these tests are what CI runs of it.

func persistentConfig(slots int) Config {
	return Config{InitialScratch: 1 << 16, Executor: ModePersistent,
		Resident: device.ResidentConfig{Blocks: 1, Slots: slots, Idle: time.Hour}}
}

// doubling is an in-place int32 allreduce buffer per rank and its
// expected contents: each call makes every element the sum over the
// ranks, so a lost, doubled or reordered launch shows.
type doubling struct {
	count int64
	ptr   []device.Ptr
	want  [][]int32
}

func (w *world) doubling(count int64) *doubling {
	d := &doubling{count: count}
	for r := range w.n {
		p, err := w.dev.Alloc(4 * count)
		if err != nil {
			w.t.Fatal(err)
		}
		w.mu.Lock()
		w.allocs = append(w.allocs, p)
		w.mu.Unlock()
		mem, _ := host.Bytes(p, 4*count)
		v := make([]int32, count)
		for i := range v {
			v[i] = int32(3*i + r + 1)
			binary.LittleEndian.PutUint32(mem[4*i:], uint32(v[i]))
		}
		d.ptr, d.want = append(d.ptr, p), append(d.want, v)
	}
	return d
}

// step is what one call does to the expected contents.
func (d *doubling) step() {
	for i := range d.want[0] {
		var s int32
		for r := range d.want {
			s += d.want[r][i]
		}
		for r := range d.want {
			d.want[r][i] = s
		}
	}
}

func (d *doubling) request(r int) *Request {
	return &Request{Coll: ir.AllReduce, Send: d.ptr[r], Recv: d.ptr[r], Count: d.count, DataType: ir.Int32, RedOp: ir.Sum,
		InPlace: true, PacketType: ir.LL16}
}

func (d *doubling) check(t *testing.T, what string) {
	t.Helper()
	for r := range d.ptr {
		mem, _ := host.Bytes(d.ptr[r], 4*d.count)
		for i, want := range d.want[r] {
			if got := int32(binary.LittleEndian.Uint32(mem[4*i:])); got != want {
				t.Fatalf("%s: rank %d element %d = %d, want %d", what, r, i, got, want)
			}
		}
	}
}

// call is one step of a sequence: a buffer, a schedule and a stream index.
type call struct {
	d  *doubling
	s  *Schedule
	st int
}

// runCalls makes every call on every rank without waiting between them
// (the queue fills and wraps), then waits for each rank's streams.
func (w *world) runCalls(calls []call, streams [][]device.Stream) {
	w.t.Helper()
	w.must(w.each(func(r int) error {
		for i, c := range calls {
			if err := w.call(r, c.d.request(r), c.s, streams[r][c.st]); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		for _, st := range streams[r] {
			if err := st.Synchronize(); err != nil {
				return err
			}
		}
		return nil
	}))
	for _, c := range calls {
		c.d.step()
	}
}

// TestPersistentQueue runs sequences through a queue of 4 slots (every
// sequence wraps it many times): launches through the queue (the LL
// schedule's one threadblock) and kernel launches on the same streams
// (a ring of 2 channels, more threadblocks than the resident's one),
// alternating between two streams and between two schedules (a hot swap
// at every change), with a scratch growth in the middle (the queue is
// drained first), and checks every element and the counters against a run
// with kernel launches only.
func TestPersistentQueue(t *testing.T) {
	const n = 2
	for _, mode := range []string{ModePersistent, ModeLaunch} {
		t.Run(mode, func(t *testing.T) {
			cfg := persistentConfig(4)
			cfg.Executor = mode
			w := newWorld(t, n, cfg)
			w.usePlans()
			ll := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
			ring := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.Simple, Channels: 2})
			streams := make([][]device.Stream, n)
			for r := range n {
				st2, err := w.dev.NewStream()
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st2.Close() })
				streams[r] = []device.Stream{w.st[r], st2}
			}
			small, big := w.doubling(100), w.doubling(20000)
			var calls []call
			for i := range 40 {
				c := call{d: small, s: ll, st: i % 2}
				if i/5%2 == 1 {
					c.s = ring
				}
				if i == 20 {
					c.d = big // LL at 80 KB: more scratch than the initial 64 KiB
				}
				calls = append(calls, c)
			}
			w.runCalls(calls, streams)
			small.check(t, "small")
			big.check(t, "big")
			st := w.ex[0].Stats()
			if st.Launches != 40 || st.Growths != 1 {
				t.Errorf("launches %d, growths %d: want 40 and 1", st.Launches, st.Growths)
			}
			if mode == ModePersistent {
				// 20 LL calls through the queue, 20 ring calls launched.
				if st.Resident.Queued != 20 || st.Resident.Fallback != 20 || st.Resident.Starts < 1 {
					t.Errorf("resident stats %+v: want 20 queued, 20 fallback, a start", st.Resident)
				}
			} else if st.Resident != (device.ResidentStats{}) {
				t.Errorf("launch mode: resident stats %+v", st.Resident)
			}
			t.Logf("rank 0: %d launches, %d fences, resident %+v", st.Launches, st.Fences, st.Resident)
		})
	}
}

// resQueue is rank r's resident queue (the host backend's).
func (w *world) resQueue(r int) *resident.Queue {
	return w.ex[r].res.(interface{ Queue() *resident.Queue }).Queue()
}

// TestPersistentStopRestart: Stop waits for the queue to drain and ends the
// consumer; the next launch starts another, which takes the items from
// where the last one stopped. An idle consumer exits by itself after the
// idle time, and the next launch starts one too.
func TestPersistentStopRestart(t *testing.T) {
	const n = 2
	cfg := persistentConfig(8)
	cfg.Resident.Idle = time.Millisecond
	w := newWorld(t, n, cfg)
	ll := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
	d := w.doubling(64)
	streams := [][]device.Stream{{w.st[0]}, {w.st[1]}}
	calls := make([]call, 10)
	for i := range calls {
		calls[i] = call{d: d, s: ll}
	}
	w.runCalls(calls, streams)
	w.must(w.each(func(r int) error { return w.ex[r].res.Stop() }))
	for r := range n {
		if s := w.resQueue(r).Stats(); s.State != resident.Stopped || s.Issued != 10 || s.Completed != 10 {
			t.Fatalf("rank %d after Stop: %+v", r, s)
		}
	}
	w.runCalls(calls, streams)
	// Idle exit: the consumer leaves the queue Stopped on its own.
	for r := range n {
		q := w.resQueue(r)
		deadline := time.Now().Add(10 * time.Second)
		for polls := 0; q.Stats().State != resident.Stopped; polls++ {
			if err := resident.Backoff(polls, deadline, time.Millisecond); err != nil {
				t.Fatalf("rank %d: the consumer did not exit when idle: %+v", r, q.Stats())
			}
		}
	}
	w.runCalls(calls, streams)
	d.check(t, "after restarts")
	for r := range n {
		st := w.ex[r].Stats()
		if st.Resident.Queued != 30 || st.Resident.Starts < 3 {
			t.Errorf("rank %d: resident %+v, want 30 queued and at least 3 starts", r, st.Resident)
		}
	}
}

// TestPersistentAbortWhileQueued: rank 0 queues launches whose peer never
// comes; Abort stops the consumer in the middle of the first (its wait
// returns), and the stream's waits for the queued ones return too, so the
// stream synchronizes with an error instead of hanging, and later
// launches are refused.
func TestPersistentAbortWhileQueued(t *testing.T) {
	const n = 2
	cfg := persistentConfig(4)
	cfg.Timeout = time.Minute // the abort, not a timeout, must end the wait
	w := newWorld(t, n, cfg)
	ll := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
	d := w.doubling(16)
	// L0 and L1 need every rank: one call each, completed.
	w.runCalls([]call{{d: d, s: ll}}, [][]device.Stream{{w.st[0]}, {w.st[1]}})
	for i := range 3 {
		if _, err := w.ex[0].Execute(context.Background(), d.request(0), ll, w.st[0]); err != nil {
			t.Fatalf("queued call %d: %v", i, err)
		}
	}
	q := w.resQueue(0)
	if s := q.Stats(); s.Issued != 4 {
		t.Fatalf("issued %d, want 4", s.Issued)
	}
	w.ex[0].Abort(errors.New("test abort"))
	done := make(chan error, 1)
	go func() { done <- w.st[0].Synchronize() }()
	select {
	case err := <-done:
		// The stream itself did not fail: the launch failed in the
		// consumer, which the executor's streams report.
		rs, _ := w.ex[0].res.Stream(w.st[0])
		if err == nil {
			err = rs.Err()
		}
		if err == nil {
			t.Error("the aborted launch reported no error")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not synchronize after Abort")
	}
	if s := q.Stats(); !s.Aborted || s.State != resident.Stopped {
		t.Errorf("queue after abort: %+v", s)
	}
	if _, err := w.ex[0].Execute(context.Background(), d.request(0), ll, w.st[0]); err == nil {
		t.Error("a call after Abort succeeded")
	}
}
