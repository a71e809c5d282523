package cuda

import (
	"testing"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/replay"
)

// TestStreamLayout checks what the launch path's cache-line layout relies
// on: the fields every launch touches lie in the first 64 bytes of Stream
// and prepared, whose sizes are multiples of 64 (so Go's allocator puts
// them on line boundaries), and the launch argument's box is one such
// size too.
func TestStreamLayout(t *testing.T) {
	var s Stream
	for name, off := range map[string]uintptr{
		"b": unsafe.Offsetof(s.b), "s": unsafe.Offsetof(s.s), "use": unsafe.Offsetof(s.use),
		"errHost": unsafe.Offsetof(s.errHost), "errDev": unsafe.Offsetof(s.errDev), "claim": unsafe.Offsetof(s.claim),
		"nlaunch": unsafe.Offsetof(s.nlaunch), "dlaunch": unsafe.Offsetof(s.dlaunch),
	} {
		if off >= 64 {
			t.Errorf("Stream.%s at byte %d, want < 64", name, off)
		}
	}
	var p prepared
	for name, off := range map[string]uintptr{
		"fn": unsafe.Offsetof(p.fn), "arg": unsafe.Offsetof(p.arg), "st": unsafe.Offsetof(p.st),
		"nfence": unsafe.Offsetof(p.nfence), "staged": unsafe.Offsetof(p.staged),
		"grid": unsafe.Offsetof(p.grid), "threads": unsafe.Offsetof(p.threads),
	} {
		if off >= 64 {
			t.Errorf("prepared.%s at byte %d, want < 64", name, off)
		}
	}
	for name, size := range map[string]uintptr{
		"Stream": unsafe.Sizeof(s), "prepared": unsafe.Sizeof(p), "launchBox": unsafe.Sizeof(launchBox{}),
	} {
		if size%64 != 0 {
			t.Errorf("%s is %d bytes, want a multiple of 64", name, size)
		}
	}
	if a := newLaunch(); uintptr(unsafe.Pointer(a))%64 != 0 {
		t.Errorf("newLaunch at %p, want a 64-byte boundary", a)
	}
}

// TestLaunchFitsReplayEntry: the launch argument fits a replay record's
// entry (runtime/replay: the C launcher of plans). When it did not (the
// port field made Launch 264 bytes against 256), every launch image was
// refused and no call was launched from C, silently, until the destroy
// line learnt to say why ("no launch image").
func TestLaunchFitsReplayEntry(t *testing.T) {
	if n := unsafe.Sizeof(Launch{}); n > replay.ArgBytes {
		t.Errorf("cuda.Launch is %d bytes, a replay entry holds %d (TH_REPLAY_ARG_BYTES)", n, replay.ArgBytes)
	}
}
