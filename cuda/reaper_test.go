package cuda

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReaperRunsOnlyWhenIdle: deferred releases wait while the process is
// busy, run in order once it is idle, and a wake-up with nothing pending
// does not keep the reaper polling (it parks again).
func TestReaperRunsOnlyWhenIdle(t *testing.T) {
	var gate sync.RWMutex
	var mu sync.Mutex
	busy := true
	polled := make(chan struct{}, 1)
	idle := func() bool {
		mu.Lock()
		defer mu.Unlock()
		select {
		case polled <- struct{}{}:
		default:
		}
		return !busy
	}
	r := newReaper(&gate, idle)
	r.parked = make(chan struct{})
	done := make(chan struct{})
	go func() { r.run(); close(done) }()
	<-r.parked

	var ran []int
	r.defer_(func() { ran = append(ran, 1) })
	r.defer_(func() { ran = append(ran, 2) })
	<-polled // the reaper looked and found the process busy
	<-polled // and looked again: nothing ran meanwhile
	mu.Lock()
	if len(ran) != 0 {
		t.Fatalf("ran %v while busy", ran)
	}
	busy = false
	mu.Unlock()
	<-r.parked // ran the batch, then parked
	if diff := cmp.Diff([]int{1, 2}, ran); diff != "" {
		t.Fatalf("order (-want +got):\n%s", diff)
	}

	// A stale wake-up with nothing pending: the reaper finds the process
	// idle, runs nothing and parks again.
	r.wake <- struct{}{}
	<-r.parked
	if len(ran) != 2 {
		t.Fatalf("ran %v", ran)
	}
	close(r.wake)
	for {
		select {
		case <-r.parked: // a park from a wake-up still buffered
		case <-done:
			return
		}
	}
}

// TestReaperNeverBlocksLaunches: while a launch holds the gate for reading
// the reaper does not run, and it never takes the gate in a way that would
// hold back a second reader (a rank launching while another rank's launch
// waits for a full queue).
func TestReaperNeverBlocksLaunches(t *testing.T) {
	var gate sync.RWMutex
	r := newReaper(&gate, func() bool { return true })
	gate.RLock() // a launch in progress
	ran := false
	r.defer_(func() { ran = true })
	if r.tryRun() {
		t.Fatal("ran while a launch held the gate")
	}
	// A second launch can still take the gate (no writer is waiting).
	if !gate.TryRLock() {
		t.Fatal("a second launch was held back")
	}
	gate.RUnlock()
	gate.RUnlock()
	if !r.tryRun() || !ran {
		t.Fatal("did not run once the gate was free")
	}
}
