package cuda

import (
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

// SetReplay implements device.Replayer: it fills r's shared launch part
// with this stream (its context, its failure record, driver.ReplayLaunchFn)
// and entry i's launch with p's as CaptureLaunch would make it on a stream
// not being captured (no staging copies; the argument as the last launch
// left it; p's fence count for a fenced launch). It reports false, filling
// nothing, when p has staging copies or was last launched on another
// stream, when several ranks share this process's context (a launch must
// then respect the reaper: Stream.enter), or when s is closed.
//
// The stream remembers r: Close (and ShareContext, for every stream)
// poisons and disarms it, so no call made from C uses the failure record
// once it is freed. The caller arms r after this returns and must not
// close s meanwhile (the communicator holds its call lock over both; the
// NCCL engine closes its streams after destroying the communicator).
func (s *Stream) SetReplay(r *replay.Record, i int, pp device.Prepared) bool {
	p, ok := pp.(*prepared)
	timing := driver.LaunchTiming(launchTiming.Load())
	if !ok || r == nil || p.staged || p.st != s {
		return false
	}
	a := *p.arg
	setLaunch(&a, 0, false, 0)
	l := replay.Launch{Fn: driver.ReplayLaunchFn(), Ctx: uintptr(s.b.dev.Context()), Stream: uintptr(s.s),
		Timed: timing == driver.TimeLaunch, Err: uintptr(s.errHost) + unsafe.Offsetof(ErrorRecord{}.code)}
	el := replay.EntryLaunch{Func: uintptr(p.fn), Grid: uint32(p.grid), Threads: uint32(p.threads), NFence: p.nfence,
		Arg:       unsafe.Slice((*byte)(unsafe.Pointer(&a)), unsafe.Sizeof(a)),
		OffLaunch: int(unsafe.Offsetof(a.launch)), OffNFence: int(unsafe.Offsetof(a.nfence))}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	b := s.b
	b.replays.mu.Lock()
	defer b.replays.mu.Unlock()
	// shared under the lock that ShareContext's stopReplays takes: either
	// this sees it, or stopReplays poisons r after SetLaunch cleared the
	// poison, and Arm refuses r.
	if b.shared.Load() || !r.SetLaunch(l) || !r.SetEntryLaunch(i, el) {
		return false
	}
	if b.replays.by == nil {
		b.replays.by = map[*replay.Record]*Stream{}
	}
	b.replays.by[r] = s
	return true
}

// stopReplays poisons and disarms the replay records filled for stream s
// (every record when s is nil), and forgets them: no call made from C
// launches from them after this returns, until their owner fills and
// arms them again.
func (b *Backend) stopReplays(s *Stream) {
	b.replays.mu.Lock()
	defer b.replays.mu.Unlock()
	for r, rs := range b.replays.by {
		if s == nil || rs == s {
			r.Poison()
			r.Disarm()
			delete(b.replays.by, r)
		}
	}
}
