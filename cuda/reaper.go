package cuda

import (
	"sync"
	"time"
)

// reaper runs deferred releases (cuMemFree, cuIpcCloseMemHandle,
// cuMemFreeHost) only at moments when idle reports that no kernel of the
// process is running and no launch can start: it holds gate for writing
// while it runs them, and launches hold gate for reading. See
// docs/design/cuda.md, "Several ranks in one process".
type reaper struct {
	gate *sync.RWMutex
	idle func() bool // called with gate held for writing

	mu      sync.Mutex
	pending []func() // in the order they were deferred
	wake    chan struct{}
	// parked, when set (tests), receives a value each time the reaper goes
	// back to waiting for work.
	parked chan struct{}
}

func newReaper(gate *sync.RWMutex, idle func() bool) *reaper {
	return &reaper{gate: gate, idle: idle, wake: make(chan struct{}, 1)}
}

// defer_ queues f; it never blocks.
func (r *reaper) defer_(f func()) {
	r.mu.Lock()
	r.pending = append(r.pending, f)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default: // already signalled
	}
}

// run is the reaper's loop (its own goroutine, on a thread with the
// context current). It returns when wake is closed.
func (r *reaper) run() {
	for {
		if r.parked != nil {
			r.parked <- struct{}{}
		}
		if _, ok := <-r.wake; !ok {
			return
		}
		for !r.tryRun() {
			time.Sleep(100 * time.Microsecond) // poll: running kernels keep the streams busy
		}
	}
}

// tryRun runs everything pending if the process is idle, and reports
// whether it was. It only ever TryLocks the gate: a waiting writer would
// hold back new launches while a launch that holds the read lock may be
// waiting (a full launch queue) for kernels that need those launches.
func (r *reaper) tryRun() bool {
	if !r.gate.TryLock() {
		return false
	}
	defer r.gate.Unlock()
	if !r.idle() {
		return false
	}
	r.mu.Lock()
	batch := r.pending
	r.pending = nil
	r.mu.Unlock()
	for _, f := range batch {
		f()
	}
	return true
}
