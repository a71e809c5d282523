package resident

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// fake is a producer and consumers over one queue, with the doorbell and
// done words the stream memory operations would write and wait on (here
// the producer releases each item itself, at once or later).
type fake struct {
	q        *Queue
	mem      []uint64
	doorbell []uint32
	done     uint32
	abort    atomic.Bool
	ran      []Desc // what the consumers ran, in order
	mu       sync.Mutex
	starts   int
	wg       sync.WaitGroup
	// exitAfter: a consumer tries to exit after this many empty polls.
	exitAfter int
}

func newFake(t *testing.T, slots int) *fake {
	f := &fake{mem: make([]uint64, (Bytes(slots)+7)/8), doorbell: make([]uint32, slots)}
	q, err := New(unsafe.Pointer(&f.mem[0]), slots)
	if err != nil {
		t.Fatal(err)
	}
	f.q = q
	return f
}

func (f *fake) serve() {
	defer f.wg.Done()
	c := f.q.Consumer()
	empty := 0
	for {
		if f.abort.Load() {
			c.Abandon(&f.done)
			return
		}
		seq, d, ok := c.Next()
		if !ok || int32(atomic.LoadUint32(&f.doorbell[seq&uint32(f.q.Slots()-1)])-seq) < 0 {
			if empty++; (c.ExitRequested() || empty > f.exitAfter) && !ok && c.TryExit() {
				return
			}
			Backoff(empty, time.Time{}, 10*time.Microsecond)
			continue
		}
		empty = 0
		f.mu.Lock()
		f.ran = append(f.ran, d)
		f.mu.Unlock()
		atomic.StoreUint32(&f.done, seq)
		c.Done()
	}
}

// put issues one item, released at once, and starts a consumer when the
// queue says so.
func (f *fake) put(t *testing.T, d Desc) error {
	seq, slot, err := f.q.Reserve(func(polls int) error { return Backoff(polls, time.Now().Add(10*time.Second), time.Millisecond) })
	if err != nil {
		return err
	}
	Write(slot, seq, d)
	atomic.StoreUint32(&f.doorbell[seq&uint32(f.q.Slots()-1)], seq)
	start, err := f.q.Commit(seq)
	if start {
		f.starts++
		f.wg.Add(1)
		go f.serve()
	}
	return err
}

// TestQueueOrderAndWrap issues many more items than slots, with consumers
// that exit whenever they find the queue empty (so every other item may
// find the queue stopping or stopped): every item runs once, in order, and
// one consumer runs at a time.
func TestQueueOrderAndWrap(t *testing.T) {
	for _, slots := range []int{1, 2, 4, 64} {
		for _, exitAfter := range []int{0, 3, 1 << 30} {
			f := newFake(t, slots)
			f.exitAfter = exitAfter
			const n = 3000
			for i := range n {
				if err := f.put(t, Desc{Arg: uint64(i), Launch: uint64(i + 1), Grid: 1}); err != nil {
					t.Fatalf("slots %d: item %d: %v", slots, i, err)
				}
			}
			f.q.Exit(true)
			f.wg.Wait()
			if len(f.ran) != n {
				t.Fatalf("slots %d exitAfter %d: %d items ran, want %d", slots, exitAfter, len(f.ran), n)
			}
			for i, d := range f.ran {
				if d.Arg != uint64(i) || d.Launch != uint64(i+1) {
					t.Fatalf("slots %d: item %d ran %+v", slots, i, d)
				}
			}
			if s := f.q.Stats(); s.Issued != n || s.Completed != n || s.State != Stopped || int(s.Starts) != f.starts {
				t.Errorf("slots %d: %+v (%d starts)", slots, s, f.starts)
			}
			if exitAfter == 1<<30 && f.starts != 1 {
				t.Errorf("a consumer that never idles out: %d starts", f.starts)
			}
		}
	}
}

// TestQueueFullWaits: with no consumer taking items (none released), the
// producer's wait for a slot ends with the wait's error, not a hang.
func TestQueueFullWaits(t *testing.T) {
	f := newFake(t, 2)
	for i := range 2 {
		seq, slot, err := f.q.Reserve(func(int) error { return errors.New("unexpected wait") })
		if err != nil {
			t.Fatal(err)
		}
		Write(slot, seq, Desc{Arg: uint64(i)})
		// Issued, never released, never consumed: mark the queue Running
		// so that Commit starts nothing.
		atomic.StoreUint32(f.q.word(OffState), Running)
		if start, err := f.q.Commit(seq); start || err != nil {
			t.Fatal(start, err)
		}
	}
	stop := errors.New("bounded")
	if _, _, err := f.q.Reserve(func(polls int) error {
		if polls > 10 {
			return stop
		}
		return nil
	}); !errors.Is(err, stop) {
		t.Fatalf("full queue: %v", err)
	}
}

// TestQueueAbandon: a consumer that finds the abort word leaves done past
// every item the producer can have issued, and the producer issues no
// more.
func TestQueueAbandon(t *testing.T) {
	f := newFake(t, 4)
	f.exitAfter = 1 << 30
	if err := f.put(t, Desc{Arg: 1}); err != nil {
		t.Fatal(err)
	}
	for atomic.LoadUint32(&f.done) != 1 {
		Backoff(0, time.Time{}, 0)
	}
	f.abort.Store(true)
	f.wg.Wait()
	if got := atomic.LoadUint32(&f.done); got != 1+4 {
		t.Errorf("done %d after abandon, want 5 (completed + slots)", got)
	}
	if _, _, err := f.q.Reserve(func(int) error { return nil }); !errors.Is(err, ErrStopped) {
		t.Errorf("Reserve after abandon: %v", err)
	}
	if _, err := f.q.Commit(2); !errors.Is(err, ErrStopped) {
		t.Errorf("Commit after abandon: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	mem := make([]uint64, Bytes(8)/8)
	for _, n := range []int{0, 3, MaxSlots * 2} {
		if _, err := New(unsafe.Pointer(&mem[0]), n); err == nil {
			t.Errorf("New with %d slots: no error", n)
		}
	}
	if _, err := New(nil, 8); err == nil {
		t.Error("New without memory: no error")
	}
}
