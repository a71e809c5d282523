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
//   - Lookup: cuCtxSetCurrent + cuMemGetAddressRange + cuPointerGetAttribute;
//   - Stream.Capturing: cuCtxSetCurrent + cuStreamIsCapturing;
//   - Stream.Launch: cuCtxSetCurrent + cuLaunchKernel (+ staging copies);
//   - Stream.CaptureLaunch: cuCtxSetCurrent + cuStreamIsCapturing +
//     cuLaunchKernel;
//   - Stream.After: cuCtxSetCurrent + cuEventRecord + cuStreamWaitEvent.
type driverless struct {
	*devicetest.Null
	gate    sync.RWMutex
	reaping atomic.Bool
	lookups atomic.Int64
}

func (b *driverless) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	b.lookups.Add(1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return b.Null.Lookup(p, n)
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
// as goroutines of this process, each calling a 256-float allreduce on its
// own stream, with the embedded default selection context and the default
// THESEUS_CONTEXT_CHECK_PERIOD (epochs included), on the driverless
// backend. It measures the host time of one collective call on a full
// cache hit, except the driver calls. Metrics, per call: host-ns/call, the
// slower rank's wall time (as BenchmarkCallHost reports it); cpu-ns/call,
// the slower rank's thread CPU time (steadier on a busy machine);
// allocs/call (both ranks'); driver-calls/call, the driver calls the CUDA
// backend makes (cuLaunchKernel included); capture-checks/call, separate
// Stream.Capturing calls.
func BenchmarkCallHostCPU(b *testing.B) {
	const n, count = 2, 256
	dir := b.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		b.Fatal(err)
	}
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
	lookups := be.lookups.Load()
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
	lookups = be.lookups.Load() - lookups
	if -launches != int64(n*b.N) {
		b.Fatalf("%d launches for %d calls", -launches, n*b.N)
	}
	b.ReportMetric(float64(slices.Max(host).Nanoseconds())/float64(b.N), "host-ns/call")
	b.ReportMetric(float64(slices.Max(cpu).Nanoseconds())/float64(b.N), "cpu-ns/call")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/calls, "allocs/call")
	b.ReportMetric(float64(-calls0+3*lookups)/calls, "driver-calls/call")
	b.ReportMetric(float64(-checks)/calls, "capture-checks/call")
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
