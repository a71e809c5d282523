package executor

import (
	"testing"
	"unsafe"
)

// heapHeader is the size of the header Go's allocator (Go 1.22 and later)
// puts before an object of over 512 bytes that holds pointers.
const heapHeader = 8

// TestExecutorLayout checks what a plan's launch relies on: every
// Executor field a repeated call touches (Launch, plain, enqueue,
// LaunchCounter) lies in the first two 64-byte lines of its allocation,
// which starts on a line boundary (the size class is a multiple of 64)
// after the allocator's header; and a Plan's own fields that a launch reads
// lie in one line.
func TestExecutorLayout(t *testing.T) {
	var e Executor
	for name, end := range map[string]uintptr{
		"gen":          unsafe.Offsetof(e.gen) + unsafe.Sizeof(e.gen),
		"lastL1":       unsafe.Offsetof(e.lastL1) + unsafe.Sizeof(e.lastL1),
		"failed":       unsafe.Offsetof(e.failed) + unsafe.Sizeof(e.failed),
		"lastCL":       unsafe.Offsetof(e.lastCL) + unsafe.Sizeof(e.lastCL),
		"lastSt":       unsafe.Offsetof(e.lastSt) + unsafe.Sizeof(e.lastSt),
		"launch":       unsafe.Offsetof(e.launch) + unsafe.Sizeof(e.launch),
		"fences":       unsafe.Offsetof(e.fences) + unsafe.Sizeof(e.fences),
		"planLaunches": unsafe.Offsetof(e.planLaunches) + unsafe.Sizeof(e.planLaunches),
		"tracked":      unsafe.Offsetof(e.tracked) + unsafe.Sizeof(e.tracked),
		"capMixed":     unsafe.Offsetof(e.capMixed) + unsafe.Sizeof(e.capMixed),
		"lastSig":      unsafe.Offsetof(e.lastSig) + unsafe.Sizeof(e.lastSig),
		"capSig.l1":    unsafe.Offsetof(e.capSig) + unsafe.Sizeof(e.capSig.l1),
	} {
		if end > 2*64-heapHeader {
			t.Errorf("Executor.%s ends at byte %d, want <= %d", name, end, 2*64-heapHeader)
		}
	}
	for i := 0; i < 8; i++ {
		if p := new(Executor); uintptr(unsafe.Pointer(p))%64 != heapHeader {
			t.Fatalf("an Executor at %p, want %d bytes past a 64-byte boundary (%d bytes: pad it to a size class that is a multiple of 64)", p, heapHeader, unsafe.Sizeof(e))
		}
	}
	var p Plan
	if end := unsafe.Offsetof(p.fenceAll) + unsafe.Sizeof(p.fenceAll); end > 64 {
		t.Errorf("Plan's launch fields end at byte %d, want <= 64", end)
	}
}
