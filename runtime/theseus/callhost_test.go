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
// cuda.Backend does around its driver calls (the stream's lock and launch
// count, the reaper's flag, the host-mapped failure record, filling the
// launch argument, holding the OS thread where cuda does) and counts the
// calls into C (cgo crossings) and the driver calls cuda.Backend makes
// there:
//
//   - Lookup: none for the backend's own allocations (all of this one's);
//     cuCtxSetCurrent + cuMemGetAddressRange + cuPointerGetAttribute, three
//     crossings, for other memory;
//   - Stream.Capturing: one crossing (driver.Device.Prelaunch):
//     cuCtxGetCurrent + cuStreamIsCapturing;
//   - Stream.Launch, Stream.CaptureLaunch without staging copies: one
//     crossing (driver.Device.Launch): cuCtxGetCurrent (+ cuCtxSetCurrent
//     when another context is current, never here), cuStreamIsCapturing
//     (CaptureLaunch), cuLaunchKernel;
//   - Stream.After: three crossings, cuCtxSetCurrent + cuEventRecord +
//     cuStreamWaitEvent.
//
// What it cannot model is the cost of those crossings and driver calls on
// the GPU machine: see BenchmarkCallHostCPU.
type driverless struct {
	*devicetest.Null
	gate    sync.RWMutex
	reaping atomic.Bool
	regions device.RegionSet
	// wait, when set, is how long each launch blocks its thread, as
	// cuLaunchKernel does while the GPU drains a full launch queue (the
	// "gpubound" benchmark); the stream accounts it as launch time.
	wait time.Duration
	// thrash, when set, is how many bytes each launch writes (one word per
	// 64-byte line, over as many 4 KiB pages), as the driver's own work in
	// cuLaunchKernel displaces the caller's cache lines and TLB entries
	// (the "cold" benchmark); accounted as launch time.
	thrash int
	// p2p is the point-to-point engine's model (p2phost_test.go).
	p2p driverlessP2P
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
	if r, ok := b.regions.Find(p, n); ok {
		return r, true
	}
	if r, ok := b.p2p.foreign.Find(p, n); ok {
		// Foreign memory (cudaMalloc'd): cuda.Backend.Lookup asks the
		// driver, three calls into C (p2phost_test.go).
		b.p2p.cgo.Add(3)
		b.p2p.driver.Add(3)
		return r, true
	}
	return device.Region{}, false
}

func (b *driverless) NewStream() (device.Stream, error) {
	ns, err := b.Null.NewStream()
	if err != nil {
		return nil, err
	}
	return &driverlessStream{b: b, ns: ns, errRec: new([64]byte), junk: make([]uint64, b.thrash/8)}, nil
}

// driverlessArg stands for cuda.Launch (the kernel's 184-byte argument).
type driverlessArg struct {
	words  [20]uint64
	ints   [4]int32
	bytes8 [8]uint8
}

type driverlessPrepared struct {
	device.Prepared
	arg    *driverlessArg
	nfence int32
}

// RebindPeer implements device.Rebinder (the Null backend's).
func (p *driverlessPrepared) RebindPeer(end, kind int, m device.Mem) error {
	return p.Prepared.(device.Rebinder).RebindPeer(end, kind, m)
}

func (b *driverless) Prepare(a *device.Args) (device.Prepared, error) {
	p, err := b.Null.Prepare(a)
	if err != nil {
		return nil, err
	}
	return &driverlessPrepared{Prepared: p, arg: new(driverlessArg), nfence: int32(len(a.Fence))}, nil
}

// Rebase is cuda.Backend.Rebase's host work: a copy of the prepared
// launch and its argument, the two buffer words set.
func (b *driverless) Rebase(pp device.Prepared, a *device.Args) (device.Prepared, error) {
	p, ok := pp.(*driverlessPrepared)
	if !ok {
		return nil, fmt.Errorf("driverless: rebase of a %T", pp)
	}
	q := &driverlessPrepared{Prepared: p.Prepared, arg: new(driverlessArg), nfence: p.nfence}
	*q.arg = *p.arg
	q.arg.words[3], q.arg.words[4] = uint64(a.Buf[device.Input].Ptr), uint64(a.Buf[device.Output].Ptr)
	return q, nil
}

func (b *driverless) ShareContext() {}

type driverlessStream struct {
	b      *driverless
	ns     device.Stream
	mu     sync.RWMutex
	errRec *[64]byte // the host-mapped failure record
	closed atomic.Bool
	use    atomic.Int64 // cuda.Stream.use: launches in progress, closed
	// Launches, the calls into C and driver calls cuda.Stream would have
	// made, the separate capture checks (Capturing), and the time blocked
	// in launches (driverless.wait). Plain counters, not part of the
	// modelled work: only the stream's rank writes them, and the benchmark
	// reads them once the ranks are done.
	launches, cgo, driver, checks, waited int64
	junk                                  []uint64 // written by each launch with driverless.thrash
	// 128 bytes, an allocation class of whole cache lines, so that two
	// ranks' streams allocated one after the other share no line
	// (cuda.Stream: 192 bytes, TestStreamLayout).
	_ [24]byte
}

func (s *driverlessStream) Launch(pp device.Prepared, launch uint64, fence bool) error {
	_, err := s.launch(pp, launch, fence, false, false)
	return err
}

func (s *driverlessStream) CaptureLaunch(pp device.Prepared, launch uint64, fence, fenceCaptured bool) (bool, error) {
	return s.launch(pp, launch, fence, true, fenceCaptured)
}

// launch follows the launch without staging copies in
// cuda.Stream.CaptureLaunch: the checks and the argument in Go, then one
// call into C that queries the capture status and launches. The model
// keeps the older shape (a wrapper and this body, one Go frame more than
// cuda since 6f5d13f, kept so that its figures compare with those measured
// before), and its Launch makes no capture query, while cuda's does since
// then: a repeat on the same stream makes the same calls in both.
func (s *driverlessStream) launch(pp device.Prepared, launch uint64, fence, check, fenceCaptured bool) (bool, error) {
	p, ok := pp.(*driverlessPrepared)
	if !ok {
		return false, fmt.Errorf("driverless: launch of a %T", pp)
	}
	for {
		if s.use.Add(1)&(1<<32) != 0 {
			s.use.Add(-1)
			return false, device.ErrClosed
		}
		if !s.b.reaping.Load() {
			break
		}
		s.use.Add(-1)
		s.b.gate.RLock()
		s.b.reaping.Store(false)
		s.b.gate.RUnlock()
	}
	defer s.use.Add(-1)
	if s.errRec[0] != 0 {
		return false, errors.New("driverless: failed")
	}
	a := p.arg // filled at Prepare: only the per-launch fields change
	a.words[0] = launch
	a.words[1], a.words[2] = 1, 2 // the stream's failure record and claim word
	a.ints[0] = 0
	if fence {
		a.ints[0] = p.nfence
	}
	// The call into C (driver.Device.Launch).
	calls := int64(2) // cuCtxGetCurrent, cuLaunchKernel
	capturing := false
	if check {
		calls++ // cuStreamIsCapturing
		if capturing = s.ns.Capturing(); capturing && fenceCaptured && !fence {
			a.ints[0] = p.nfence
		}
	}
	s.cgo++
	s.driver += calls
	s.launches++
	if w := s.b.wait; w > 0 {
		// Blocked in the driver: the thread sleeps, its core is free.
		t0 := time.Now()
		ts := unix.NsecToTimespec(int64(w))
		unix.Nanosleep(&ts, nil)
		s.waited += int64(time.Since(t0))
	}
	if len(s.junk) > 0 {
		t0 := time.Now()
		thrashCaches(s.junk)
		s.waited += int64(time.Since(t0))
	}
	return capturing, nil
}

// thrashCaches writes one word of every 64-byte line of junk.
//
//go:noinline
func thrashCaches(junk []uint64) {
	for i := 0; i < len(junk); i += 8 {
		junk[i]++
	}
}

func (s *driverlessStream) Capturing() bool {
	s.checks++
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed.Load() {
		return false
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	s.cgo++
	s.driver += 2
	return s.ns.Capturing()
}

func (s *driverlessStream) After(prev device.Stream) error {
	if p, ok := prev.(*driverlessStream); ok && p != s {
		s.cgo += 3
		s.driver += 3
	}
	return nil
}

func (s *driverlessStream) Synchronize() error { return s.ns.Synchronize() }
func (s *driverlessStream) Err() error         { return s.ns.Err() }
func (s *driverlessStream) Close() error {
	s.closed.Store(true)
	s.use.Add(1 << 32)
	return s.ns.Close()
}

// BenchmarkCallHostCPU is cuda.BenchmarkCallHost without a GPU: two ranks
// as goroutines of this process, each calling a float32 allreduce on its
// own stream, with the embedded default selection context and the default
// THESEUS_CONTEXT_CHECK_PERIOD (epochs included), on the driverless
// backend. It measures the host time of one collective call on a full
// cache hit, except the calls into C, for 256 floats. "default" is
// BenchmarkCallHost (the default context's LL all-pairs schedule, which
// like every default schedule reaches no peer's buffers); "registered"
// runs a Simple one-shot schedule that reads the peer's input, so every
// call also looks up both buffers (executor level L2).
//
// Like BenchmarkCallHost the ranks' goroutines are not held on OS threads.
// Metrics, per call: host-ns/call, the slower rank's wall time (as
// BenchmarkCallHost reports it); epoch-ns/call, the part of it in the
// selector's epochs; cpu-ns/call, the whole process's CPU time per rank's
// call (every thread: the ranks, the bootstrap's readers and the epoch
// agreement's reducer, the Go runtime); allocs/call (both ranks');
// cgo-calls/call and driver-calls/call, the calls into C and the driver
// calls the CUDA backend makes (cuLaunchKernel included); capture-checks/call,
// separate Stream.Capturing calls; l2-hits/call.
//
// On the GPU machine a call costs about this model's host-ns/call plus, per
// crossing, the cgo call itself and the driver calls before
// cuLaunchKernel (package cuda/driver's BenchmarkHostCalls, Prelaunch).
//
// "default" keeps both cores of a 2-core machine busy with the two ranks,
// so the epoch agreement's reducer and the bootstrap's readers get a core
// only when a rank waits: a pipelined epoch's result is not in yet at the
// next epoch, and the rank waits for it there. On the GPU machine the
// ranks spend most of each call blocked in cuLaunchKernel (BenchmarkCallHost
// is GPU-bound: about 18 µs per call) and idle cores run those goroutines
// at once. "gpubound" models that: each launch blocks its thread for 20 µs
// (a sleep, which takes longer: timer slack), accounted as launch time and
// left out of host-ns/call as BenchmarkCallHost leaves out cuLaunchKernel,
// with GOMAXPROCS at least 4 so that the sleeping ranks' processors are
// not the only ones. Run it with fewer calls (-benchtime 20000x).
//
// "cold" writes 8 MiB (one word per 64-byte line) in every launch, as
// launch time, so that each call runs with its memory out of the core's
// L1 and L2 and its pages out of the TLB: on the GPU machine a call costs
// about 5 times this model's "default" (bench/results/2026-11-29-h200-sixth:
// go-in/go-out), and the cold model shows which parts of the path pay for
// cache lines. On this 2-core machine it reads 1.6-2.0 µs against 0.3 µs
// warm. Run it with -benchtime 10000x.
func BenchmarkCallHostCPU(b *testing.B) {
	b.Run("default", func(b *testing.B) {
		dir := b.TempDir()
		if err := contexts.Materialize(dir); err != nil {
			b.Fatal(err)
		}
		benchCallHost(b, dir, 0)
	})
	b.Run("gpubound", func(b *testing.B) {
		dir := b.TempDir()
		if err := contexts.Materialize(dir); err != nil {
			b.Fatal(err)
		}
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(4, runtime.GOMAXPROCS(0))))
		benchCallHost(b, dir, 20*time.Microsecond)
	})
	b.Run("cold", func(b *testing.B) {
		// Each launch displaces 8 MiB of cache lines (and 2048 pages of
		// TLB entries) before the next call, as the driver's work inside
		// cuLaunchKernel does on the GPU machine: which of the host path's
		// costs grow when its memory is no longer in the core's caches.
		dir := b.TempDir()
		if err := contexts.Materialize(dir); err != nil {
			b.Fatal(err)
		}
		benchCallHostWith(b, dir, 0, 8<<20)
	})
	b.Run("shift", func(b *testing.B) {
		// The default context's schedule with the buffers moved by one
		// message per call within one allocation per buffer, as
		// nccl-tests' startColl moves them, over more positions than the
		// communicator keeps plans for and the executor's L3 keeps
		// entries (maxL3): every call takes the full path to an L3 miss.
		dir := b.TempDir()
		if err := contexts.Materialize(dir); err != nil {
			b.Fatal(err)
		}
		benchCallHostShift(b, dir, shiftSteps)
	})
	b.Run("registered", func(b *testing.B) {
		dir := b.TempDir()
		scheds := []commtest.Sched{{Algo: "oneshot", Coll: ir.AllReduce, Protocol: ir.Simple, Replaces: -1}}
		if err := commtest.Write(dir, 2, commtest.DefaultAttrs, scheds); err != nil {
			b.Fatal(err)
		}
		benchCallHost(b, dir, 0)
	})
}

func benchCallHost(b *testing.B, dir string, wait time.Duration) { benchCallHostWith(b, dir, wait, 0) }

// shiftSteps is how many positions the "shift" benchmark moves the
// buffers over: more than the executor's L3 keeps under one entry (4096).
const shiftSteps = 8192

func benchCallHostWith(b *testing.B, dir string, wait time.Duration, thrash int) {
	benchCallHostRun(b, dir, wait, thrash, 1)
}

func benchCallHostShift(b *testing.B, dir string, steps int) { benchCallHostRun(b, dir, 0, 0, steps) }

// benchCallHostRun is BenchmarkCallHostCPU's run; the buffers move by one
// message per call over steps positions.
func benchCallHostRun(b *testing.B, dir string, wait time.Duration, thrash, steps int) {
	const n, count = 2, 256
	be := &driverless{Null: devicetest.NewNull(), wait: wait, thrash: thrash}
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
		send[r], _ = be.Alloc(int64(steps) * count * 4)
		recv[r], _ = be.Alloc(int64(steps) * count * 4)
	}
	pos := make([]int, n)
	b.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	call := func(r int) error {
		off := Ptr(pos[r] * count * 4)
		pos[r] = (pos[r] + 1) % steps
		return comms[r].AllReduce(send[r]+off, recv[r]+off, count, Float32, Sum, streams[r])
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
	var checks, calls0, cgo0, launches int64
	for _, s := range streams {
		checks += s.checks
		calls0 += s.driver
		cgo0 += s.cgo
		launches += s.launches
	}
	host := make([]time.Duration, n)
	epoch := make([]time.Duration, n)
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := processCPU()
	b.ResetTimer()
	err = each(func(r int) error {
		e0 := comms[r].Stats().Selector.EpochTime
		w0 := streams[r].waited
		start := time.Now()
		for range b.N {
			if err := call(r); err != nil {
				return err
			}
		}
		host[r] = time.Since(start) - time.Duration(streams[r].waited-w0)
		epoch[r] = comms[r].Stats().Selector.EpochTime - e0
		return nil
	})
	b.StopTimer()
	cpu := processCPU() - cpu0
	runtime.ReadMemStats(&ms1)
	if err != nil {
		b.Fatal(err)
	}
	calls := float64(n * b.N)
	for _, s := range streams {
		checks -= s.checks
		calls0 -= s.driver
		cgo0 -= s.cgo
		launches -= s.launches
	}
	for _, c := range comms {
		l2 -= c.Stats().Executor.L2Hits
	}
	if -launches != int64(n*b.N) {
		b.Fatalf("%d launches for %d calls", -launches, n*b.N)
	}
	b.ReportMetric(float64(slices.Max(host).Nanoseconds())/float64(b.N), "host-ns/call")
	b.ReportMetric(float64(slices.Max(epoch).Nanoseconds())/float64(b.N), "epoch-ns/call")
	b.ReportMetric(float64(cpu.Nanoseconds())/calls, "cpu-ns/call")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/calls, "allocs/call")
	b.ReportMetric(float64(-cgo0)/calls, "cgo-calls/call")
	b.ReportMetric(float64(-calls0)/calls, "driver-calls/call")
	b.ReportMetric(float64(-checks)/calls, "capture-checks/call")
	b.ReportMetric(float64(-l2)/calls, "l2-hits/call")
}

// processCPU is the CPU time of the whole process (every thread), user and
// system.
func processCPU() time.Duration {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
