//go:build linux

package theseus

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// driverless is a device backend shaped like the CUDA backend (cuda.Backend)
// on the per-call path, minus the driver: memory is the null backend's, and
// every method the executor may call per collective does the host work
// cuda.Backend does around its driver calls (locking the OS thread, the
// stream's lock and launch count, the reaper's flag, the host-mapped
// failure record, filling the launch argument) and counts the driver calls
// cuda.Backend makes there:
//
//   - Lookup: none for the backend's own allocations (all of this one's);
//     cuCtxSetCurrent + cuMemGetAddressRange + cuPointerGetAttribute for
//     other memory;
//   - Stream.Capturing: cuCtxSetCurrent + cuStreamIsCapturing;
//   - Stream.Launch: cuCtxSetCurrent + cuLaunchKernel (+ staging copies);
//   - Stream.CaptureLaunch: cuCtxSetCurrent + cuStreamIsCapturing +
//     cuLaunchKernel;
//   - Stream.After: cuCtxSetCurrent + cuEventRecord + cuStreamWaitEvent.
type driverless struct {
	*devicetest.Null
	gate    sync.RWMutex
	reaping atomic.Bool
	regions device.RegionSet
}

func (b *driverless) Alloc(size int64) (device.Ptr, error) {
	p, err := b.Null.Alloc(size)
	if err != nil {
		return 0, err
	}
	r, _ := b.Null.Lookup(p, size)
	b.regions.Add(r)
	return p, nil
}

func (b *driverless) Free(p device.Ptr) error {
	b.regions.Remove(p)
	return b.Null.Free(p)
}

func (b *driverless) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	return b.regions.Find(p, n)
}

func (b *driverless) NewStream() (device.Stream, error) {
	ns, err := b.Null.NewStream()
	if err != nil {
		return nil, err
	}
	return &driverlessStream{b: b, ns: ns, errRec: new([64]byte)}, nil
}

// driverlessArg stands for cuda.Launch (the kernel's 176-byte argument).
type driverlessArg struct {
	words  [18]uint64
	ints   [4]int32
	bytes8 [8]uint8
}

type driverlessPrepared struct {
	device.Prepared
	base driverlessArg
	arg  *driverlessArg
}

func (b *driverless) Prepare(a *device.Args) (device.Prepared, error) {
	p, err := b.Null.Prepare(a)
	if err != nil {
		return nil, err
	}
	return &driverlessPrepared{Prepared: p, arg: new(driverlessArg)}, nil
}

func (b *driverless) ShareContext() {}

type driverlessStream struct {
	b         *driverless
	ns        device.Stream
	mu        sync.RWMutex
	errRec    *[64]byte // the host-mapped failure record
	closed    atomic.Bool
	launching atomic.Int32
	// Launches, the driver calls cuda.Stream would have made, and the
	// separate capture checks (Capturing).
	launches, driver, checks atomic.Int64
	// cuda.Stream is 128 bytes with its allocation class, so that two
	// ranks' streams allocated one after the other share no cache line.
	_ [32]byte
}

func (s *driverlessStream) Launch(pp device.Prepared, launch uint64, fence bool) error {
	_, err := s.launch(pp, launch, fence, false, false)
	return err
}

func (s *driverlessStream) CaptureLaunch(pp device.Prepared, launch uint64, fence, fenceCaptured bool) (bool, error) {
	return s.launch(pp, launch, fence, true, fenceCaptured)
}

func (s *driverlessStream) launch(pp device.Prepared, launch uint64, fence, check, fenceCaptured bool) (bool, error) {
	p, ok := pp.(*driverlessPrepared)
	if !ok {
		return false, fmt.Errorf("driverless: launch of a %T", pp)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false, device.ErrClosed
	}
	if s.errRec[0] != 0 {
		return false, errors.New("driverless: failed")
	}
	for {
		s.launching.Add(1)
		if !s.b.reaping.Load() {
			break
		}
		s.launching.Add(-1)
		s.b.gate.RLock()
		s.b.reaping.Store(false)
		s.b.gate.RUnlock()
	}
	defer s.launching.Add(-1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	calls := int64(2) // cuCtxSetCurrent, cuLaunchKernel
	capturing := false
	if check {
		calls++ // cuStreamIsCapturing
		capturing = s.ns.Capturing()
		fence = fence || (capturing && fenceCaptured)
	}
	a := p.arg
	*a = p.base
	a.words[0] = launch
	if !fence {
		a.ints[0] = 0
	}
	s.driver.Add(calls)
	s.launches.Add(1)
	return capturing, nil
}

func (s *driverlessStream) Capturing() bool {
	s.checks.Add(1)
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.driver.Add(2)
	return s.ns.Capturing()
}

func (s *driverlessStream) After(prev device.Stream) error {
	if p, ok := prev.(*driverlessStream); ok && p != s {
		s.driver.Add(3)
	}
	return nil
}

func (s *driverlessStream) Synchronize() error { return s.ns.Synchronize() }
func (s *driverlessStream) Err() error         { return s.ns.Err() }
func (s *driverlessStream) Close() error       { s.closed.Store(true); return s.ns.Close() }

// BenchmarkCallHostCPU is cuda.BenchmarkCallHost without a GPU: two ranks
// as goroutines of this process, each calling a float32 allreduce on its
// own stream, with the embedded default selection context and the default
// THESEUS_CONTEXT_CHECK_PERIOD (epochs included), on the driverless
// backend. It measures the host time of one collective call on a full
// cache hit, except the driver calls, for 256 floats. "default" is
// BenchmarkCallHost (the default context's LL all-pairs schedule, which
// like every default schedule reaches no peer's buffers); "registered"
// runs a Simple one-shot schedule that reads the peer's input, so every
// call also looks up both buffers (executor level L2). Metrics, per
// call: host-ns/call, the slower rank's wall time (as BenchmarkCallHost
// reports it); cpu-ns/call, the slower rank's thread CPU time (steadier on
// a busy machine); allocs/call (both ranks'); driver-calls/call, the driver
// calls the CUDA backend makes (cuLaunchKernel included);
// capture-checks/call, separate Stream.Capturing calls; l2-hits/call.
func BenchmarkCallHostCPU(b *testing.B) {
	b.Run("default", func(b *testing.B) {
		dir := b.TempDir()
		if err := contexts.Materialize(dir); err != nil {
			b.Fatal(err)
		}
		benchCallHost(b, dir)
	})
	b.Run("registered", func(b *testing.B) {
		dir := b.TempDir()
		scheds := []commtest.Sched{{Algo: "oneshot", Coll: ir.AllReduce, Protocol: ir.Simple, Replaces: -1}}
		if err := commtest.Write(dir, 2, commtest.DefaultAttrs, scheds); err != nil {
			b.Fatal(err)
		}
		benchCallHost(b, dir)
	})
}

func benchCallHost(b *testing.B, dir string) {
	const n, count = 2, 256
	be := &driverless{Null: devicetest.NewNull()}
	cfg := Config{Backend: "driverless", ContextDir: dir}
	cfg.Options.Backend = be
	comms, err := NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		b.Fatal(err)
	}
	streams := make([]*driverlessStream, n)
	send, recv := make([]Ptr, n), make([]Ptr, n)
	for r, c := range comms {
		s, err := c.NewStream()
		if err != nil {
			b.Fatal(err)
		}
		streams[r] = s.(*driverlessStream)
		send[r], _ = be.Alloc(count * 4)
		recv[r], _ = be.Alloc(count * 4)
	}
	b.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	call := func(r int) error {
		return comms[r].AllReduce(send[r], recv[r], count, Float32, Sum, streams[r])
	}
	each := func(f func(r int) error) error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = f(r) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	if err := each(func(r int) error {
		for range 100 {
			if err := call(r); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	var l2 uint64
	for _, c := range comms {
		l2 += c.Stats().Executor.L2Hits
	}
	var checks, calls0, launches int64
	for _, s := range streams {
		checks += s.checks.Load()
		calls0 += s.driver.Load()
		launches += s.launches.Load()
	}
	host := make([]time.Duration, n)
	cpu := make([]time.Duration, n)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	b.ResetTimer()
	err = each(func(r int) error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpu0 := threadCPU()
		start := time.Now()
		for range b.N {
			if err := call(r); err != nil {
				return err
			}
		}
		host[r] = time.Since(start)
		cpu[r] = threadCPU() - cpu0
		return nil
	})
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		b.Fatal(err)
	}
	calls := float64(n * b.N)
	for _, s := range streams {
		checks -= s.checks.Load()
		calls0 -= s.driver.Load()
		launches -= s.launches.Load()
	}
	for _, c := range comms {
		l2 -= c.Stats().Executor.L2Hits
	}
	if -launches != int64(n*b.N) {
		b.Fatalf("%d launches for %d calls", -launches, n*b.N)
	}
	b.ReportMetric(float64(slices.Max(host).Nanoseconds())/float64(b.N), "host-ns/call")
	b.ReportMetric(float64(slices.Max(cpu).Nanoseconds())/float64(b.N), "cpu-ns/call")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/calls, "allocs/call")
	b.ReportMetric(float64(-calls0)/calls, "driver-calls/call")
	b.ReportMetric(float64(-checks)/calls, "capture-checks/call")
	b.ReportMetric(float64(-l2)/calls, "l2-hits/call")
}

// threadCPU is the calling thread's CPU time (the caller holds its thread):
// unlike the wall time, it leaves out the time other processes of a busy
// machine take the core.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
