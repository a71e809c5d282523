//go:build linux

package theseus

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
)

// TestAsyncErrorAfterTimedOutLaunch: a launch on the caller's stream that
// times out (rank 1 skips the call rank 0 makes) is reported by
// Synchronize, and from then on by AsyncError — what PyTorch's watchdog
// polls (ncclCommGetAsyncError) — sticky.
func TestAsyncErrorAfterTimedOutLaunch(t *testing.T) {
	const n = 2
	dir := t.TempDir()
	if err := commtest.Write(dir, n, commtest.DefaultAttrs, []commtest.Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Replaces: -1},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: "host", ContextDir: dir}
	cfg.Options.Timeout = 300 * time.Millisecond
	comms, err := NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Abort()
		}
	}()
	const count = 64
	streams := make([]Stream, n)
	sends, recvs := make([]Ptr, n), make([]Ptr, n)
	for r, c := range comms {
		if streams[r], err = c.NewStream(); err != nil {
			t.Fatal(err)
		}
		defer streams[r].Close()
		if sends[r], err = c.MemAlloc(4 * count); err != nil {
			t.Fatal(err)
		}
		if recvs[r], err = c.MemAlloc(4 * count); err != nil {
			t.Fatal(err)
		}
	}
	// Both ranks once (selection agreement, every cache level filled).
	for r, err := range onEach(comms, func(c *Comm) error {
		r := c.Rank()
		if err := c.AllReduce(sends[r], recvs[r], count, Float32, Sum, streams[r]); err != nil {
			return err
		}
		return streams[r].Synchronize()
	}) {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	// Then rank 0 alone: a cache hit whose launch waits for rank 1.
	c, s := comms[0], streams[0]
	if err := c.AllReduce(sends[0], recvs[0], count, Float32, Sum, s); err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if err := c.AsyncError(); err != nil {
		t.Fatalf("async error before anything failed: %v", err)
	}
	serr := s.Synchronize()
	if serr == nil {
		t.Fatal("the launch rank 1 never joined did not fail")
	}
	aerr := c.AsyncError()
	var te *Error
	if !errors.As(aerr, &te) || te.Code != RemoteError {
		t.Fatalf("AsyncError after the timeout = %v, want a RemoteError", aerr)
	}
	if again := c.AsyncError(); again != aerr {
		t.Fatalf("AsyncError is not sticky: %v then %v", aerr, again)
	}
}
