//go:build linux

package comm

import (
	"sync"
	"testing"
	"time"
)

// Destroy and Abort called at the same moment (an application thread's
// ncclCommDestroy and a watchdog's ncclCommAbort) release the
// communicator exactly once: the process's device binding is dropped
// once, and nothing is released twice (an executor closed twice, or
// aborted after it freed its abort word, wrote freed memory).
func TestDestroyAbortRelease(t *testing.T) {
	refs := func() int {
		procDevice.Lock()
		defer procDevice.Unlock()
		return procDevice.refs
	}
	for i := range 20 {
		before := refs()
		comms := localCommsWith(t, 2, 5*time.Second, "", 1000)
		if got := refs(); got != before+2 {
			t.Fatalf("round %d: %d device bindings after creating 2 communicators, want %d", i, got, before+2)
		}
		var wg sync.WaitGroup
		for _, f := range []func() error{comms[0].Destroy, comms[0].Abort, comms[1].Abort, comms[1].Destroy} {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
		}
		wg.Wait()
		if got := refs(); got != before {
			t.Fatalf("round %d: %d device bindings after releasing both, want %d", i, got, before)
		}
	}
}
