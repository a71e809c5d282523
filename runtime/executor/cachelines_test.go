package executor

import (
	"testing"
	"unsafe"
)

// heapHeader is the size of the header Go's allocator (Go 1.22 and later)
// puts before an object of over 512 bytes that holds pointers.
const heapHeader = 8

// TestExecutorLayout checks what the all-hit path's cache-line layout
// relies on: every Executor field a repeated call touches (Repeat,
// repeatable, launchRepeat, LaunchCounter) lies in the first
// three 64-byte lines of its allocation, which starts on a line boundary
// (the size class is a multiple of 64) with the allocator's header.
func TestExecutorLayout(t *testing.T) {
	var e Executor
	for name, end := range map[string]uintptr{
		"hot":        unsafe.Offsetof(e.hot) + unsafe.Sizeof(e.hot),
		"lastL1":     unsafe.Offsetof(e.lastL1) + unsafe.Sizeof(e.lastL1),
		"trace":      unsafe.Offsetof(e.trace) + unsafe.Sizeof(e.trace),
		"failed":     unsafe.Offsetof(e.failed) + unsafe.Sizeof(e.failed),
		"hotRuns":    unsafe.Offsetof(e.hotRuns) + unsafe.Sizeof(e.hotRuns),
		"fences":     unsafe.Offsetof(e.fences) + unsafe.Sizeof(e.fences),
		"hotWalks":   unsafe.Offsetof(e.hotWalks) + unsafe.Sizeof(e.hotWalks),
		"lastCL":     unsafe.Offsetof(e.lastCL) + unsafe.Sizeof(e.lastCL),
		"lastSt":     unsafe.Offsetof(e.lastSt) + unsafe.Sizeof(e.lastSt),
		"launch":     unsafe.Offsetof(e.launch) + unsafe.Sizeof(e.launch),
		"tracked":    unsafe.Offsetof(e.tracked) + unsafe.Sizeof(e.tracked),
		"capMixed":   unsafe.Offsetof(e.capMixed) + unsafe.Sizeof(e.capMixed),
		"lastSig":    unsafe.Offsetof(e.lastSig) + unsafe.Sizeof(e.lastSig),
		"capSig":     unsafe.Offsetof(e.capSig) + unsafe.Sizeof(e.capSig),
		"lastL3.ent": unsafe.Offsetof(e.lastL3) + unsafe.Offsetof(e.lastL3.ent) + unsafe.Sizeof(e.lastL3.ent),
	} {
		if end > 3*64-heapHeader {
			t.Errorf("Executor.%s ends at byte %d, want <= %d", name, end, 3*64-heapHeader)
		}
	}
	for i := 0; i < 8; i++ {
		if p := new(Executor); uintptr(unsafe.Pointer(p))%64 != heapHeader {
			t.Fatalf("an Executor at %p, want %d bytes past a 64-byte boundary (%d bytes: pad it to a size class that is a multiple of 64)", p, heapHeader, unsafe.Sizeof(e))
		}
	}
}
