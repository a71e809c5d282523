//go:build linux

package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// BenchmarkP2PCallPath is the host cost of one point-to-point group as
// nccl-tests' sendrecv_perf issues it at 8 B (ncclGroupStart; ncclSend of
// 8 bytes to the peer; ncclRecv of 8 bytes from the peer; ncclGroupEnd),
// 2 ranks in this process, through two entry points:
//
//   - engine: this package's Comm.RunP2P of the two ops (what the NCCL
//     layer's group end calls);
//   - abi: ncclabi/internal/abi Library.GroupStart, Coll twice, GroupEnd
//     over this engine: everything of the four NCCL calls but the cgo
//     crossings, each rank with a Library of its own (as each process of
//     nccl-tests has).
//
// Backends: "host", the host backend (its launches run the host engine on
// the streams' goroutines, beside the callers); "null", the null backend
// (runtime/device/devicetest: launches that do nothing), which leaves the
// layers' own host cost alone. Variants: "same", the same buffers every call; "shift", the buffers move
// by one message per call within one allocation, as nccl-tests' startColl
// moves them (8 B apart over 8192 positions: a sweep to 64 KiB), so that
// no call finds its buffers' plan again.
//
// The selection context is the default one with a point-to-point entry of
// one channel, so that the host engine's launches (2 lanes each) take
// little of the machine's cores. Each rank's goroutine is locked to an OS thread and enqueues
// benchBatch groups, then waits for its stream outside the timed part.
// Metrics: host-ns/call, the slower rank's wall time per group in the
// enqueue loops; cpu-ns/call, the calling threads' CPU time per group (mean
// of the ranks); allocs/op (the whole process: 2 groups and their 2
// launches per op); walks/call, rebases/call and plan-launches/call
// (Stats().Executor.P2P, per group of a rank).
//
//	go test ./ncclabi/internal/engine -run '^$' -bench BenchmarkP2PCallPath -benchtime 20000x -count 5
func BenchmarkP2PCallPath(b *testing.B) {
	for _, be := range []string{"null", "host"} {
		for _, level := range []string{"engine", "abi"} {
			for _, v := range []struct {
				name  string
				steps int
			}{{"same", 1}, {"shift", 8192}} {
				b.Run(be+"/"+level+"/"+v.name, func(b *testing.B) { benchP2PPath(b, be, level, v.steps) })
			}
		}
	}
}

// p2pPath is BenchmarkP2PCallPath's 2 ranks at one entry level: group
// runs rank r's group at byte offset off of its buffers, wait waits for
// its stream, and stats (the engine level only) reads its communicator's
// point-to-point counters.
type p2pPath struct {
	group [2]func(off uintptr) error
	wait  [2]func() error
	stats [2]func() executor.P2PStats
}

// initRecorder is an Engine that keeps the communicators its Init makes, by
// rank (so that the abi level's counters can be read).
type initRecorder struct {
	*Engine
	mu    sync.Mutex
	comms map[int]*Comm
}

func (e *initRecorder) Init(ctx context.Context, p abi.InitParams) (abi.EngineComm, error) {
	c, err := e.Engine.Init(ctx, p)
	if err == nil {
		e.mu.Lock()
		e.comms[p.Rank] = c.(*Comm)
		e.mu.Unlock()
	}
	return c, err
}

// p2pPathBytes are the bytes of p2pPath's sends and receives.
const p2pPathBytes = 8

// newP2PPath makes the ranks of a p2pPath on backend ("host" or "null")
// at level ("engine" or "abi"), with buffers of steps messages each;
// stats reads the engine communicator's counters at both levels.
func newP2PPath(b testing.TB, backend, level string, steps int) *p2pPath {
	const n, bytes = 2, p2pPathBytes
	dir := b.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, manifest.ScheduleManifest), os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	_, err = f.WriteString(`{"gen":"p2p","collective":"sendrecv","channels":1,"preference":"1","name":"bench"}` + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.SetLookupForTest(func(k string) (string, bool) {
		switch k {
		case "THESEUS_SELECTION_CONTEXT":
			return dir, true
		case "THESEUS_TIMEOUT":
			return "20000", true
		}
		return "", false
	}))
	e, err := Open("host")
	if err != nil {
		b.Fatal(err)
	}
	if backend == "null" {
		e.be = devicetest.NewNull()
	}
	var send, recv [n]uintptr
	for r := range n {
		for _, p := range []*uintptr{&send[r], &recv[r]} {
			x, err := e.MemAlloc(uint64(steps) * bytes)
			if err != nil {
				b.Fatal(err)
			}
			*p = x
			b.Cleanup(func() { e.MemFree(x) })
		}
	}
	w := &p2pPath{}
	group, wait, stats := &w.group, &w.wait, &w.stats
	ops := func(r int, off uintptr) [2]abi.Op {
		return [2]abi.Op{
			{Coll: abi.CollSend, Send: send[r] + off, Count: bytes / 4, DataType: 7, Root: 1 - r},
			{Coll: abi.CollRecv, Recv: recv[r] + off, Count: bytes / 4, DataType: 7, Root: 1 - r},
		}
	}
	switch level {
	case "engine":
		id, err := e.NewUniqueID(false)
		if err != nil {
			b.Fatal(err)
		}
		cs := initRanks(b, e, id, n)
		for r, ec := range cs {
			c := ec.(*Comm)
			var list [2]abi.Op
			group[r] = func(off uintptr) error {
				list = ops(r, off)
				_, err := c.RunP2P(list[:])
				return err
			}
			wait[r] = func() error { return c.StreamSync(0) }
			stats[r] = func() executor.P2PStats { return c.c.Stats().Executor.P2P }
			b.Cleanup(func() { c.Destroy() })
		}
	case "abi":
		rec := &initRecorder{Engine: e, comms: map[int]*Comm{}}
		ls := [n]*abi.Library{{Eng: rec}, {Eng: rec}}
		id, err := e.NewUniqueID(false)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		var res [n]abi.Result
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, res[r] = ls[r].InitRank(abi.Thread{Key: uintptr(r + 1), Depth: new(int32)}, uintptr(0x1000+r), id, n, r, abi.DefaultConfig(), "ncclCommInitRank")
			}()
		}
		wg.Wait()
		for r := range n {
			if res[r] != abi.Success {
				b.Fatalf("rank %d: init: %v", r, res[r])
			}
			l, h, c := ls[r], uintptr(0x1000+r), rec.comms[r]
			stats[r] = func() executor.P2PStats { return c.c.Stats().Executor.P2P }
			th := abi.Thread{Key: uintptr(r + 1), Depth: new(int32)}
			group[r] = func(off uintptr) error {
				list := ops(r, off) // (the cgo layer builds a new Op per call)
				if rr := l.GroupStart(th); rr != abi.Success {
					return fmt.Errorf("ncclGroupStart: %v", rr)
				}
				for i := range list {
					if rr := l.Coll(th, h, &list[i]); rr != abi.Success {
						return fmt.Errorf("nccl%s: %v", list[i].Coll, rr)
					}
				}
				if rr := l.GroupEnd(th); rr != abi.Success {
					return fmt.Errorf("ncclGroupEnd: %v", rr)
				}
				return nil
			}
			wait[r] = func() error {
				if rr := l.StreamSync(h, 0); rr != abi.Success {
					return fmt.Errorf("stream sync: %v", rr)
				}
				return nil
			}
			b.Cleanup(func() { l.Destroy(h) })
		}
	}
	return w
}

func benchP2PPath(b *testing.B, backend, level string, steps int) {
	const n, bytes = 2, p2pPathBytes
	w := newP2PPath(b, backend, level, steps)
	group, wait := &w.group, &w.wait
	var pos [n]int
	var wall, cpu [n]time.Duration
	run := func(calls int, timed bool) {
		errs := ranks.Each(n, func(r int) error {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			for done := 0; done < calls; {
				k := min(benchBatch, calls-done)
				t0, c0 := time.Now(), threadCPU()
				for range k {
					off := uintptr(pos[r] * bytes)
					pos[r] = (pos[r] + 1) % steps
					if err := group[r](off); err != nil {
						return err
					}
				}
				if timed {
					wall[r] += time.Since(t0)
					cpu[r] += threadCPU() - c0
				}
				if err := wait[r](); err != nil {
					return err
				}
				done += k
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	run(64, false) // connections, offers and imports
	var s0 executor.P2PStats
	if w.stats[0] != nil {
		s0 = w.stats[0]()
	}
	b.ReportAllocs()
	b.ResetTimer()
	run(b.N, true)
	b.StopTimer()
	calls := float64(b.N)
	b.ReportMetric(float64(max(wall[0], wall[1]))/calls, "host-ns/call")
	b.ReportMetric(float64(cpu[0]+cpu[1])/2/calls, "cpu-ns/call")
	if w.stats[0] != nil {
		s := w.stats[0]()
		b.ReportMetric(float64(s.Walks-s0.Walks)/calls, "walks/call")
		b.ReportMetric(float64(s.Rebases-s0.Rebases)/calls, "rebases/call")
		b.ReportMetric(float64(s.PlanLaunches-s0.PlanLaunches)/calls, "plan-launches/call")
	}
}
