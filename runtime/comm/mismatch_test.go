//go:build linux

package comm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// localComms makes n in-process ranks on the host backend reading a
// Standard context.
func localComms(t *testing.T, n int, timeout time.Duration, dir string) []*Comm {
	return localCommsWith(t, n, timeout, dir, 0)
}

// localCommsWith is localComms with a selector epoch every checkPeriod
// requests (0: the default).
func localCommsWith(t *testing.T, n int, timeout time.Duration, dir string, checkPeriod int) []*Comm {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
		if err := commtest.WriteStandard(dir, n); err != nil {
			t.Fatal(err)
		}
	}
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			comms[r], errs[r] = Init(context.Background(), id, r, n, Config{Backend: host.Backend(), ContextDir: dir,
				Timeout: timeout, InitialScratch: 1 << 20, CheckPeriod: checkPeriod})
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Abort()
		}
	})
	return comms
}

// onEach runs f(rank) on every rank concurrently.
func onEach(n int, f func(r int) error) []error { return ranks.Each(n, f) }

// checkMismatch asserts what ranks see when they issue different
// collectives: the rank (or ranks) whose schedule finds the peer's ends
// missing returns InvalidUsage wrapping ErrMismatch, and the others
// RemoteError wrapping ErrMismatch that names such a rank, both saying the
// ranks issued different collectives; never InternalError ("please
// report").
func checkMismatch(t *testing.T, errs []error) {
	t.Helper()
	finders := map[int]bool{}
	for r, err := range errs {
		if CodeOf(err) == InvalidUsage && errors.Is(err, ErrMismatch) {
			finders[r] = true
		}
	}
	if len(finders) == 0 {
		t.Fatalf("no rank returned InvalidUsage wrapping ErrMismatch: %v", errs)
	}
	for r, err := range errs {
		var e *Error
		if !errors.As(err, &e) || !errors.Is(err, ErrMismatch) || !strings.Contains(e.Msg, "issued different collectives") {
			t.Errorf("rank %d: %v, want an error wrapping ErrMismatch that says the ranks issued different collectives", r, err)
			continue
		}
		if finders[r] {
			continue
		}
		if e.Code != RemoteError || len(e.Peers) != 1 || !finders[e.Peers[0]] {
			t.Errorf("rank %d: %v, want RemoteError naming a rank that found the mismatch %v", r, err, finders)
		}
	}
}

// TestDifferentCollectives: rank 0 calls AllReduce while rank 1 calls
// Broadcast, whose schedules' channel ends do not pair. That is user
// misuse (NCCL requires the same collectives in the same order on every
// rank): InvalidUsage where it is found, RemoteError on the peer it tells
// (which stops waiting at once instead of timing out), and never
// InternalError. It used to be InternalError ("the schedules' ends do not
// pair"), which the C library reports as "please report this issue".
func TestDifferentCollectives(t *testing.T) {
	const n, count = 2, 1 << 20
	comms := localComms(t, n, 30*time.Second, "")
	errs := onEach(n, func(r int) error {
		c := comms[r]
		p, err := c.Backend().Alloc(16 << 20)
		if err != nil {
			return err
		}
		coll := ir.AllReduce
		if r == 1 {
			coll = ir.Broadcast
		}
		return c.Collective(context.Background(), &Call{Coll: coll, Send: p, Recv: p + 8<<20, Count: count, DataType: ir.Float32})
	})
	checkMismatch(t, errs)
	// The communicator is broken: its asynchronous error says why.
	for r, c := range comms {
		if err := c.AsyncError(); !errors.Is(err, ErrMismatch) {
			t.Errorf("rank %d: AsyncError = %v, want ErrMismatch", r, err)
		}
	}
}

// TestSkippedCall: rank 1 skips the AllReduce that rank 0 issues before
// their common Broadcast.
func TestSkippedCall(t *testing.T) {
	const n, count = 2, 1 << 20
	comms := localComms(t, n, 30*time.Second, "")
	errs := onEach(n, func(r int) error {
		c := comms[r]
		p, err := c.Backend().Alloc(16 << 20)
		if err != nil {
			return err
		}
		calls := []ir.Collective{ir.AllReduce, ir.Broadcast}
		if r == 1 {
			calls = calls[1:]
		}
		for _, coll := range calls {
			if err := c.Collective(context.Background(), &Call{Coll: coll, Send: p, Recv: p + 8<<20, Count: count, DataType: ir.Float32}); err != nil {
				return err
			}
		}
		return nil
	})
	checkMismatch(t, errs)
}
