package cuda

import (
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// LaunchImage implements device.ImageExporter: p's launch as
// CaptureLaunch would make it on s when s is not being captured (no
// staging copies; the argument as the last launch on s left it; p's fence
// count for a fenced launch), with driver.ReplayLaunchFn as the C launch
// function, this stream's context and its failure record. It reports
// false when p has staging copies or was last launched on another stream,
// when several ranks share this process's context (a launch must then
// respect the reaper: Stream.enter), or when s is closed.
//
// The stream keeps stop: Close (and ShareContext, for every stream) stops
// it before the failure record is freed, so that no call made from C uses
// it afterwards. The caller must not close s between this call and its
// use of the image (the communicator holds its call lock over both; the
// NCCL engine closes its streams after destroying the communicator).
func (s *Stream) LaunchImage(pp device.Prepared, stop device.Stopper) (device.LaunchImage, bool) {
	p, ok := pp.(*prepared)
	if !ok || stop == nil || p.staged || p.st != s {
		return device.LaunchImage{}, false
	}
	a := *p.arg
	setLaunch(&a, 0, false, 0)
	im := device.LaunchImage{Fn: driver.ReplayLaunchFn(), Ctx: uintptr(s.b.dev.Context()), Queue: uintptr(s.s),
		Err: uintptr(s.errHost) + unsafe.Offsetof(ErrorRecord{}.code), Timed: driver.LaunchTiming(launchTiming.Load()) == driver.TimeLaunch,
		Func: uintptr(p.fn), Grid: uint32(p.grid), Threads: uint32(p.threads), NFence: p.nfence,
		Arg:       unsafe.Slice((*byte)(unsafe.Pointer(&a)), unsafe.Sizeof(a)),
		OffLaunch: int(unsafe.Offsetof(a.launch)), OffNFence: int(unsafe.Offsetof(a.nfence))}
	im.Arg = append([]byte(nil), im.Arg...) // a's copy outlives this frame
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return device.LaunchImage{}, false
	}
	b := s.b
	b.stops.mu.Lock()
	defer b.stops.mu.Unlock()
	// shared under the lock that ShareContext's stopImages takes: either
	// this sees it, or stopImages stops stop after the caller cleared it.
	if b.shared.Load() {
		return device.LaunchImage{}, false
	}
	if b.stops.by == nil {
		b.stops.by = map[device.Stopper]*Stream{}
	}
	b.stops.by[stop] = s
	return im, true
}

// stopImages stops the holders of launch images of stream s (every
// stream's when s is nil), and forgets them: no call made from C launches
// from those images after this returns.
func (b *Backend) stopImages(s *Stream) {
	b.stops.mu.Lock()
	defer b.stops.mu.Unlock()
	for h, hs := range b.stops.by {
		if s == nil || hs == s {
			h.Stop()
			delete(b.stops.by, h)
		}
	}
}
