//go:build linux

package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/ncclabi/internal/abi"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// Host cost of one data call, 2 ranks in this process on the host backend,
// through three entry points of the same request:
//
//   - theseus: runtime/theseus Comm.AllReduce (Broadcast, AllGather) on a
//     stream of the backend, the Go API;
//   - engine: this package's Comm.Run (what the NCCL layer calls: stream
//     lookup by cudaStream_t value, runtime/comm Collective);
//   - abi: ncclabi/internal/abi Library.Coll over this engine (handle
//     lookup, NCCL argument checks, group and non-blocking bookkeeping, the
//     current-device check): everything of ncclAllReduce but the cgo
//     crossing, which capitest's BenchmarkCAPICall adds.
//
// Variants: "same", the same buffers every call (every call an executor
// L3 hit, on its hot path); "cycle" and "shift", the buffers move by one
// message per call within one allocation, as nccl-tests' startColl does
// (totalnbytes*(iter%steps), steps = maxbytes/totalnbytes): "cycle" over 8
// positions (4 KiB messages of a sweep to 32 KiB), each found again in the
// L3 map; "shift" over more positions than the executor's L3 keeps (maxL3,
// a sweep to 8 GiB), so that every call is an L3 setup
// (device.Backend.Prepare).
//
// Each rank's goroutine is locked to an OS thread and enqueues calls in
// batches of benchBatch (below the host stream's queue depth), then waits
// for its stream outside the timed part. Metrics: host-ns/call, the slower
// rank's wall time in the enqueue loops per call (nccl-tests -C 1 counts
// the same); cpu-ns/call, the calling threads' CPU time per call (mean of
// the ranks; the host streams' interpreter runs on other threads and is
// left out); allocs/op counts the whole process (2 calls and their 2
// launches per op).
//
//	go test ./ncclabi/internal/engine -run '^$' -bench BenchmarkCallPath -benchtime 5000x -count 5
func BenchmarkCallPath(b *testing.B) {
	for _, level := range []string{"theseus", "engine", "abi"} {
		b.Run(level, func(b *testing.B) {
			w := newBenchWorld(b, level)
			for _, coll := range benchColls {
				for _, v := range benchVariants {
					b.Run(coll.name+"/"+v.name, func(b *testing.B) { w.run(b, coll, v.steps) })
				}
			}
		})
	}
}

const (
	benchBytes = 1024 // bytes per rank's message (float32)
	benchBatch = 256
	// benchSteps: positions of the shifted buffers, more than the
	// executor's L3 keeps under one entry (4096), so no position is found
	// again.
	benchSteps = 8192
)

var benchVariants = []struct {
	name  string
	steps int
}{{"same", 1}, {"cycle", 8}, {"shift", benchSteps}}

type benchColl struct {
	name string
	coll abi.Coll
	// send and recv bytes per rank for benchBytes.
	sendB, recvB int64
}

var benchColls = []benchColl{
	{"allreduce", abi.CollAllReduce, benchBytes, benchBytes},
	{"broadcast", abi.CollBroadcast, benchBytes, benchBytes},
	{"allgather", abi.CollAllGather, benchBytes, 2 * benchBytes},
}

// benchWorld is 2 ranks of one communicator at one entry level.
type benchWorld struct {
	level string
	call  [2]func(op *abi.Op) error
	sync  [2]func() error
	send  [2]uintptr // benchSteps messages each (the largest, allgather's receive)
	recv  [2]uintptr
	pos   [2]int // next shift position, kept across b.N rounds
}

func newBenchWorld(b *testing.B, level string) *benchWorld {
	e := hostEngine(b)
	w := &benchWorld{level: level}
	for r := range 2 {
		for _, p := range []*uintptr{&w.send[r], &w.recv[r]} {
			x, err := e.MemAlloc(benchSteps * 2 * benchBytes)
			if err != nil {
				b.Fatal(err)
			}
			*p = x
			b.Cleanup(func() { e.MemFree(x) })
		}
	}
	switch level {
	case "theseus":
		dir, err := filepath.Abs("../../../examples/contexts/default")
		if err != nil {
			b.Fatal(err)
		}
		cs, err := theseus.NewLocalComms(context.Background(), 2, theseus.Config{Backend: host.Name, ContextDir: dir})
		if err != nil {
			b.Fatal(err)
		}
		for r, c := range cs {
			st, err := c.NewStream()
			if err != nil {
				b.Fatal(err)
			}
			w.call[r] = func(op *abi.Op) error {
				s, d, n := theseus.Ptr(op.Send), theseus.Ptr(op.Recv), int64(op.Count)
				switch op.Coll {
				case abi.CollAllReduce:
					return c.AllReduce(s, d, n, theseus.Float32, theseus.Sum, st)
				case abi.CollBroadcast:
					return c.Broadcast(s, d, n, theseus.Float32, op.Root, st)
				case abi.CollAllGather:
					return c.AllGather(s, d, n, theseus.Float32, st)
				}
				return fmt.Errorf("no %s in the benchmark", op.Coll)
			}
			w.sync[r] = st.Synchronize
			b.Cleanup(func() { c.Destroy() })
		}
	case "engine":
		id, err := e.NewUniqueID(false)
		if err != nil {
			b.Fatal(err)
		}
		cs := initRanks(b, e, id, 2)
		for r, c := range cs {
			w.call[r] = func(op *abi.Op) error {
				_, err := c.Run(*op)
				return err
			}
			w.sync[r] = func() error { return c.StreamSync(0) }
			b.Cleanup(func() { c.Destroy() })
		}
	case "abi":
		l := &abi.Library{Eng: e}
		id, err := e.NewUniqueID(false)
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		var res [2]abi.Result
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, res[r] = l.InitRank(abi.Thread{Key: uintptr(r + 1), Depth: new(int32)}, uintptr(0x1000+r), id, 2, r, abi.DefaultConfig(), "ncclCommInitRank")
			}()
		}
		wg.Wait()
		for r := range 2 {
			if res[r] != abi.Success {
				b.Fatalf("rank %d: init: %v", r, res[r])
			}
			h := uintptr(0x1000 + r)
			th := abi.Thread{Key: uintptr(r + 1), Depth: new(int32)}
			w.call[r] = func(op *abi.Op) error {
				o := *op // the cgo layer builds a new Op per call
				if rr := l.Coll(th, h, &o); rr != abi.Success {
					return fmt.Errorf("nccl%s: %v", op.Coll, rr)
				}
				return nil
			}
			w.sync[r] = func() error {
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

func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

func (w *benchWorld) run(b *testing.B, c benchColl, steps int) {
	total := max(c.sendB, c.recvB)
	op := func(r, i int) abi.Op {
		off := uintptr(int64((w.pos[r]+i)%steps) * total)
		return abi.Op{Coll: c.coll, Send: w.send[r] + off, Recv: w.recv[r] + off, Count: benchBytes / 4,
			DataType: 7, RedOp: 0, Root: 0}
	}
	// Warm up: the schedule's L1 (and L2) entries, the selector's epochs.
	var wall, cpu [2]time.Duration
	errs := make([]error, 2)
	each := func(f func(r int) error) {
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				errs[r] = f(r)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				b.Fatalf("rank %d: %v", r, err)
			}
		}
	}
	each(func(r int) error {
		for i := range 64 {
			o := op(r, i)
			if err := w.call[r](&o); err != nil {
				return err
			}
		}
		w.pos[r] += 64
		return w.sync[r]()
	})
	b.ReportAllocs()
	b.ResetTimer()
	each(func(r int) error {
		for done := 0; done < b.N; {
			k := min(benchBatch, b.N-done)
			t0, c0 := time.Now(), threadCPU()
			for i := range k {
				o := op(r, i)
				if err := w.call[r](&o); err != nil {
					return err
				}
			}
			wall[r] += time.Since(t0)
			cpu[r] += threadCPU() - c0
			w.pos[r] += k
			if err := w.sync[r](); err != nil {
				return err
			}
			done += k
		}
		return nil
	})
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(max(wall[0], wall[1]))/n, "host-ns/call")
	b.ReportMetric(float64(cpu[0]+cpu[1])/2/n, "cpu-ns/call")
}
