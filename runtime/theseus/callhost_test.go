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
// on the per-call path, minus the driver: memory and launches are the null
// backend's, and every method the executor may call per collective does the
// host work cuda.Backend does around its driver calls (locking the OS
// thread, the stream's and the backend's locks, the host-mapped failure
// record, filling a launch argument) and counts itself, so that a benchmark
// can say which driver calls the CUDA path makes per call:
//
//   - Lookup: cuCtxSetCurrent + cuMemGetAddressRange + cuPointerGetAttribute;
//   - Stream.Capturing: cuCtxSetCurrent + cuStreamIsCapturing;
//   - Stream.Launch: cuCtxSetCurrent + cuLaunchKernel (+ staging copies);
//   - Stream.After: cuCtxSetCurrent + cuEventRecord + cuStreamWaitEvent.
type driverless struct {
	*devicetest.Null
	gate    sync.RWMutex
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
	arg  driverlessArg
}

func (b *driverless) Prepare(a *device.Args) (device.Prepared, error) {
	p, err := b.Null.Prepare(a)
	if err != nil {
		return nil, err
	}
	return &driverlessPrepared{Prepared: p}, nil
}

func (b *driverless) ShareContext() {}

type driverlessStream struct {
	b        *driverless
	ns       device.Stream
	mu       sync.RWMutex
	errRec   *[64]byte // the host-mapped failure record
	launches atomic.Int64
	captures atomic.Int64
	afters   atomic.Int64
	closed   atomic.Bool
	// cuda.Stream is 120 bytes, so that two ranks' streams allocated one
	// after the other never share a cache line's hot words; nor do these.
	_ [40]byte
}

func (s *driverlessStream) Launch(pp device.Prepared, launch uint64, fence bool) error {
	p, ok := pp.(*driverlessPrepared)
	if !ok {
		return fmt.Errorf("driverless: launch of a %T", pp)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.errRec[0] != 0 {
		return errors.New("driverless: failed")
	}
	s.b.gate.RLock()
	defer s.b.gate.RUnlock()
	p.arg = p.base
	p.arg.words[0] = launch
	if !fence {
		p.arg.ints[0] = 0
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.launches.Add(1)
	if s.closed.Load() {
		return device.ErrClosed
	}
	return nil
}

func (s *driverlessStream) Capturing() bool {
	s.captures.Add(1)
	s.mu.RLock()
	defer s.mu.RUnlock()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return s.ns.Capturing()
}

func (s *driverlessStream) After(prev device.Stream) error {
	s.afters.Add(1)
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
// cache hit, except the driver calls. Metrics: host-ns/call, the slower
// rank's time per call (as BenchmarkCallHost reports it); allocs/call; and
// per call the backend methods that call the driver on CUDA: lookups/call
// (Backend.Lookup), capture-checks/call (Stream.Capturing), launches/call.
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
	var caps, launches int64
	for _, s := range streams {
		caps += s.captures.Load()
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
		caps -= s.captures.Load()
		launches -= s.launches.Load()
	}
	if int(-launches) != n*b.N {
		b.Fatalf("%d launches for %d calls", -launches, n*b.N)
	}
	b.ReportMetric(float64(slices.Max(host).Nanoseconds())/float64(b.N), "host-ns/call")
	b.ReportMetric(float64(slices.Max(cpu).Nanoseconds())/float64(b.N), "cpu-ns/call")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/calls, "allocs/call")
	b.ReportMetric(float64(be.lookups.Load()-lookups)/calls, "lookups/call")
	b.ReportMetric(float64(-caps)/calls, "capture-checks/call")
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
