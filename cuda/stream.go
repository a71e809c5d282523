package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// launchTiming is the per-stream accounting of the time spent in
// cuLaunchKernel (a driver.LaunchTiming: TimeLaunches).
var launchTiming atomic.Int32

// TimeLaunches turns on (or off) the accounting that Stream.LaunchTime
// reports: the time inside cuLaunchKernel, measured in C around the driver
// call itself (the cgo crossing is host time). It costs two clock reads
// per launch while on, and no locked instruction: the
// counts are plain words, so while it is on a stream's launches must come
// from one goroutine at a time and LaunchTime must be read by that
// goroutine or after those launches (it is for benchmarks).
func TimeLaunches(on bool) {
	if on {
		launchTiming.Store(int32(driver.TimeLaunch))
	} else {
		launchTiming.Store(int32(driver.TimeNothing))
	}
}

// NewStream implements device.Backend: a new non-blocking stream.
func (b *Backend) NewStream() (device.Stream, error) {
	var s driver.Stream
	if err := b.with(func() error {
		var err error
		s, err = driver.NewStream()
		return err
	}); err != nil {
		return nil, err
	}
	st, err := b.newStream(s, true)
	if err != nil {
		b.with(func() error { return s.Destroy() })
		return nil, err
	}
	return st, nil
}

// WrapStream returns a device.Stream that launches on an existing CUDA
// stream (cudaStream_t / CUstream, 0 for the legacy default stream), such
// as the stream a NCCL caller passes. Closing it does not destroy s.
func (b *Backend) WrapStream(s uintptr) (device.Stream, error) {
	return b.newStream(driver.Stream(s), false)
}

func (b *Backend) newStream(s driver.Stream, owned bool) (*Stream, error) {
	st := &Stream{b: b, s: s, owned: owned, drained: make(chan struct{}, 1)}
	err := b.with(func() error {
		// A stream may be first seen during a CUDA graph capture (PyTorch's
		// torch.cuda.graph captures on a stream of its own): its allocations
		// use no captured stream, as Prepare's do, so the thread's relaxed
		// capture mode lets them run.
		prev, err := driver.ExchangeCaptureMode(driver.CaptureModeRelaxed)
		if err != nil {
			return err
		}
		defer driver.ExchangeCaptureMode(prev)
		if st.errHost, st.errDev, err = driver.HostAlloc(errorPageBytes); err != nil {
			return err
		}
		if st.claim, err = b.zeroed(16); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
	if err != nil {
		b.free(st.claim)
		if h := st.errHost; h != nil {
			b.release(func() { driver.FreeHost(h) })
		}
		return nil, err
	}
	b.smu.Lock()
	b.streams[st] = struct{}{}
	b.smu.Unlock()
	return st, nil
}

// Stream is a CUDA stream with the failure record of the launches on it.
type Stream struct {
	// What every launch reads or writes comes first, in one cache line:
	// the struct's size is a multiple of 64 bytes, so that Go's allocator
	// places it on a line boundary (TestStreamLayout). A call runs with
	// the caches its thread found after waiting in the driver, and every
	// line it touches costs.
	b *Backend
	s driver.Stream
	// use counts the launches being enqueued on the stream (useCount: see
	// Backend.gate), with useClosed added once Close has begun, which then
	// waits for the count to drain: the launch that leaves it at zero
	// signals drained. A launch takes neither mu nor another word: one
	// atomic add as it starts, one as it ends.
	use     atomic.Int64
	errHost unsafe.Pointer // ErrorRecord, host-mapped
	errDev  driver.Ptr
	claim   driver.Ptr
	// cuLaunchKernel accounting (TimeLaunches): plain
	// words, so that the accounting adds no locked instruction to the call
	// it measures. They are written by the stream's launches while the
	// accounting is on, which is for benchmarks that launch on a stream
	// from one goroutine at a time and read LaunchTime once those launches
	// are done.
	nlaunch int64
	dlaunch int64

	owned bool
	// mu is held for reading by every method that uses the handle or the
	// failure record, except a launch, and for writing by Close.
	mu      sync.RWMutex
	closed  bool
	drained chan struct{} // capacity 1
	evMu    sync.Mutex
	ev      driver.Event // recorded by After when a later launch moves to another stream
	_       [72]byte     // to 192 bytes (TestStreamLayout)
}

// LaunchTime returns how many kernels were launched on the stream while
// TimeLaunches was on, and the time spent inside cuLaunchKernel for them.
func (s *Stream) LaunchTime() (int64, time.Duration) {
	return s.nlaunch, time.Duration(s.dlaunch)
}

// CUStream is the underlying CUstream.
func (s *Stream) CUStream() uintptr { return uintptr(s.s) }

// Launch implements device.Stream: CaptureLaunch, without fencing a
// captured launch. It asks the driver whether the stream is being
// captured, as CaptureLaunch does: the executor calls Launch only when a
// launch moves to another stream, after its own Capturing, so such a
// launch makes two capture queries.
func (s *Stream) Launch(pp device.Prepared, launch uint64, fence bool) error {
	_, err := s.CaptureLaunch(pp, launch, fence, false)
	return err
}

// CaptureLaunch implements device.CaptureLauncher: staging copies, then
// one kernel launch of the rank's table, on the stream; it reports whether
// the stream is being captured into a CUDA graph (cuStreamIsCapturing),
// and a captured launch is fenced when fenceCaptured is set.
//
// Without staging copies (the usual case) the context switch, the capture
// query and cuLaunchKernel are one call into C (driver.Device.Launch): one
// cgo crossing, and no OS thread to hold. A launch that must be fenced
// only if it is captured hands the C side the argument's fence count to
// restore when it finds the stream capturing. That launch is written out
// here rather than in a function of its own: one Go frame fewer between a
// collective call and cuLaunchKernel (on the H200 the difference was
// within the run-to-run spread: docs/design/cuda.md, "Host cost of a
// call").
func (s *Stream) CaptureLaunch(pp device.Prepared, launch uint64, fence, fenceCaptured bool) (capturing bool, err error) {
	timing := driver.LaunchTiming(launchTiming.Load())
	p, ok := pp.(*prepared)
	if !ok {
		return false, fmt.Errorf("cuda: launch of a %T", pp)
	}
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	if e := recordError(s.errHost); e != nil {
		err = e
	} else {
		a := p.arg
		if p.st != s {
			setStream(a, s.errDev, s.claim)
			p.st = s
		}
		setLaunch(a, launch, fence, p.nfence)
		if !p.staged {
			var capField unsafe.Pointer
			if fenceCaptured && !fence {
				capField = unsafe.Pointer(&a.nfence)
			}
			var r driver.LaunchResult
			r, err = s.b.dev.Launch(s.s, true, p.fn, p.grid, p.threads, unsafe.Pointer(a), capField, p.nfence, timing)
			if timing != driver.TimeNothing && err == nil {
				s.account(r)
			}
			capturing = r.Capturing
		} else {
			capturing, err = s.launchStaged(p, fence, fenceCaptured, timing)
		}
	}
	return capturing, err
}

// launchStaged is CaptureLaunch's launch with staging copies around the
// kernel, on a held thread with the context current. The caller counted
// the launch in s.use and filled the argument.
func (s *Stream) launchStaged(p *prepared, fence, fenceCaptured bool, timing driver.LaunchTiming) (capturing bool, err error) {
	a := p.arg
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// One call into the driver's library for the context and the capture
	// status (a failed query reads as not capturing, as in Capturing).
	if capturing, err = s.b.dev.Prelaunch(s.s, true); err != nil {
		return false, err
	}
	if capturing && fenceCaptured && !fence {
		setFence(a, p.nfence)
	}
	for _, c := range p.in {
		if err := driver.CopyDtoDAsync(driver.Ptr(c.Dst), driver.Ptr(c.Src), c.N, s.s); err != nil {
			return capturing, err
		}
	}
	var t0 time.Time
	if timing != driver.TimeNothing {
		t0 = time.Now()
	}
	err = launchKernel(p.fn, p.grid, p.threads, s.s, a)
	if timing != driver.TimeNothing && err == nil {
		s.account(driver.LaunchResult{LaunchTime: time.Since(t0)})
	}
	if err != nil {
		return capturing, err
	}
	for _, c := range p.out {
		if err := driver.CopyDtoDAsync(driver.Ptr(c.Dst), driver.Ptr(c.Src), c.N, s.s); err != nil {
			return capturing, err
		}
	}
	return capturing, nil
}

// account adds a timed launch to the stream's accounting (TimeLaunches).
func (s *Stream) account(r driver.LaunchResult) {
	s.nlaunch++
	s.dlaunch += int64(r.LaunchTime)
}

// The fields of Stream.use.
const (
	useCount  = 1<<32 - 1 // launches being enqueued
	useClosed = 1 << 32   // added by Close
)

// enter counts a launch in progress on s (use), which keeps Close from
// releasing the stream and the reaper from running; while the reaper
// holds gate (reaping), it waits for the reaper to finish first. Errors:
// device.ErrClosed once Close has begun (nothing counted then).
func (s *Stream) enter() error {
	for {
		if s.use.Add(1)&useClosed != 0 {
			s.leave()
			return device.ErrClosed
		}
		if !s.b.reaping.Load() {
			return nil
		}
		s.leave()
		s.b.gate.RLock() // the reaper has let go of it once this returns
		s.b.reaping.Store(false)
		s.b.gate.RUnlock()
	}
}

// leave uncounts a launch (enter), and signals Close when it was the last
// one Close waits for.
func (s *Stream) leave() {
	if s.use.Add(-1) == useClosed {
		select {
		case s.drained <- struct{}{}:
		default: // Close has its signal already, or found nothing to wait for
		}
	}
}

// After implements device.StreamOrderer: s waits on the device for what
// prev (a stream of this backend) has enqueued so far. Errors: a driver
// error; a prev of another backend or a closed one is ignored.
func (s *Stream) After(prev device.Stream) error {
	p, ok := prev.(*Stream)
	if !ok || p == s {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return device.ErrClosed
	}
	p.evMu.Lock() // the event is prev's
	defer p.evMu.Unlock()
	return s.b.with(func() error {
		if p.ev == 0 {
			ev, err := driver.NewEvent(false)
			if err != nil {
				return err
			}
			p.ev = ev
		}
		if err := p.ev.Record(p.s); err != nil {
			return err
		}
		return s.s.WaitEvent(p.ev)
	})
}

// Synchronize implements device.Stream. Errors: device.ErrClosed after
// Close, a driver error, or the first failure a kernel recorded.
func (s *Stream) Synchronize() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return device.ErrClosed
	}
	if err := s.b.with(func() error { return s.s.Synchronize() }); err != nil {
		return err
	}
	return s.errLocked()
}

// Err implements device.Stream: the first failure the kernel recorded
// (device.ErrClosed after Close).
func (s *Stream) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.errLocked()
}

func (s *Stream) errLocked() error {
	if s.closed {
		return device.ErrClosed
	}
	if e := recordError(s.errHost); e != nil {
		return e
	}
	return nil
}

// Capturing implements device.Stream (cuStreamIsCapturing).
func (s *Stream) Capturing() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	capturing, _ := s.b.dev.Prelaunch(s.s, true) // a failed query reads as not capturing
	return capturing
}

// Close implements device.Stream.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// No launch made from C from this stream's images from now on.
	s.b.stopImages(s)
	// Launches that began before this point finish enqueueing (none waits
	// for anything but the driver: a full launch queue drains); later ones
	// see useClosed. The last to leave signals drained.
	if s.use.Add(useClosed)&useCount != 0 {
		<-s.drained
	}
	return s.b.with(func() error {
		// Wait while the reaper still sees the stream (busy), then take it
		// out of the reaper's sight before the handle can go away.
		err := s.s.Synchronize()
		s.b.smu.Lock()
		delete(s.b.streams, s)
		s.b.smu.Unlock()
		if s.ev != 0 {
			s.ev.Destroy()
		}
		if s.owned {
			s.s.Destroy()
		}
		s.b.free(s.claim)
		h := s.errHost
		s.b.release(func() { driver.FreeHost(h) })
		return err
	})
}
