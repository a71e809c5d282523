//go:build linux

package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
)

// TestLostPeerWatchdog is ncclabi/capitest's TestLostPeer in one process,
// for the race detector: rank 1 of 2 (on the host backend, through the
// NCCL layer) goes away without a goodbye (ncclCommAbort) while rank 0 has
// a large allreduce in flight; rank 0's watchdog goroutine polls
// GetAsyncError and aborts the communicator as PyTorch's does, while its
// main goroutine waits for the stream, keeps calling, or destroys the
// communicator at the same moment. Nothing may panic, race or hang, and
// rank 0's calls fail within the timeout.
func TestLostPeerWatchdog(t *testing.T) {
	if testing.Short() {
		t.Skip("20 two-rank communicators")
	}
	e := hostEngine(t)
	const count = 1 << 18 // float32: 1 MiB
	for i := range 20 {
		mode := []string{"sync", "call", "destroy", "abort"}[i%4]
		t.Run(fmt.Sprintf("%s/%d", mode, i), func(t *testing.T) {
			l := &abi.Library{Eng: e, Timeout: 20 * time.Second}
			id, r := l.GetUniqueID()
			if r != abi.Success {
				t.Fatal(r)
			}
			hs := []uintptr{0x1000, 0x2000}
			th := []abi.Thread{{Key: 1, Depth: new(int32)}, {Key: 2, Depth: new(int32)}}
			var wg sync.WaitGroup
			res := make([]abi.Result, 2)
			for rk := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, res[rk] = l.InitRank(th[rk], hs[rk], id, 2, rk, abi.DefaultConfig(), "ncclCommInitRank")
				}()
			}
			wg.Wait()
			if res[0] != abi.Success || res[1] != abi.Success {
				t.Fatalf("init: %v", res)
			}
			bufs := make([]uintptr, 2)
			for rk := range 2 {
				p, r := l.MemAlloc(2 * 4 * count)
				if r != abi.Success {
					t.Fatal(r)
				}
				bufs[rk] = p
				defer l.MemFree(p)
			}
			op := func(rk int, n uint64) *abi.Op {
				return &abi.Op{Coll: abi.CollAllReduce, Send: bufs[rk], Recv: bufs[rk] + 4*count, Count: n, DataType: 7, Root: -1}
			}
			// Warm: every level materialised.
			for rk, r := range each2(func(rk int) abi.Result {
				if r := l.Coll(th[rk], hs[rk], op(rk, count)); r != abi.Success {
					return r
				}
				return l.StreamSync(hs[rk], 0)
			}) {
				if r != abi.Success {
					t.Fatalf("rank %d warm-up: %v", rk, r)
				}
			}
			// Rank 0's watchdog.
			type seen struct {
				async, abort abi.Result
			}
			saw := make(chan seen, 1)
			release := make(chan struct{})
			go func() {
				for {
					st, r := l.GetAsyncError(hs[0])
					if r != abi.Success || (st != abi.Success && st != abi.InProgress) {
						if mode == "destroy" {
							<-release
						}
						ab := l.Abort(hs[0])
						for range 100 { // it keeps polling its work: a dead handle must say so
							l.GetAsyncError(hs[0])
						}
						saw <- seen{st, ab}
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}()
			start := time.Now()
			first := l.Coll(th[0], hs[0], op(0, count)) // in flight when rank 1 goes
			l.Abort(hs[1])                              // rank 1 leaves without a goodbye
			switch mode {
			case "call":
				for n := uint64(3); first == abi.Success; n = n*7%count + 1 {
					first = l.Coll(th[0], hs[0], op(0, n))
				}
			default:
				if first == abi.Success {
					first = l.StreamSync(hs[0], 0)
				}
			}
			took := time.Since(start)
			var second abi.Result
			switch mode {
			case "destroy":
				close(release)
				second = l.Destroy(hs[0]) // racing the watchdog's Abort
			case "abort":
				second = l.Abort(hs[0]) // racing the watchdog's
			}
			var s seen
			select {
			case s = <-saw:
			case <-time.After(30 * time.Second):
				t.Fatal("the watchdog saw no asynchronous error")
			}
			if first == abi.Success || took > 20*time.Second {
				t.Errorf("rank 0's first failure: %v after %v", first, took)
			}
			if s.abort != abi.Success && s.abort != abi.InvalidArgument || second != abi.Success && second != abi.InvalidArgument {
				t.Errorf("watchdog's Abort %v, main's second call %v", s.abort, second)
			}
			if r := l.Coll(th[0], hs[0], op(0, 8)); r != abi.InvalidArgument {
				t.Errorf("a call on the aborted communicator: %v, want InvalidArgument", r)
			}
		})
	}
}

// each2 runs f for ranks 0 and 1 concurrently.
func each2(f func(rk int) abi.Result) [2]abi.Result {
	var out [2]abi.Result
	var wg sync.WaitGroup
	for rk := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); out[rk] = f(rk) }()
	}
	wg.Wait()
	return out
}
