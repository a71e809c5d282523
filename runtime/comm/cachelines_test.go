package comm

import (
	"testing"
	"unsafe"
)

// TestCommLayout checks what a repeated call's cache-line layout relies
// on: every field it touches (Collective, planFor, launchPlan) lies in the
// first three 64-byte lines of a Comm's allocation. A Comm is over 512
// bytes and holds pointers, so Go's allocator (Go 1.22 and later) puts an
// 8-byte header before it, at a 64-byte boundary (its size class is a
// multiple of 64): the fields must end by byte 184.
// heapHeader is the size of the header Go's allocator puts before an
// object of over 512 bytes that holds pointers.
const heapHeader = 8

func TestCommLayout(t *testing.T) {
	var c Comm
	for name, end := range map[string]uintptr{
		"callMu":      unsafe.Offsetof(c.callMu) + unsafe.Sizeof(c.callMu),
		"state":       unsafe.Offsetof(c.state) + unsafe.Sizeof(c.state),
		"asyncErr":    unsafe.Offsetof(c.asyncErr) + unsafe.Sizeof(c.asyncErr),
		"armed":       unsafe.Offsetof(c.armed) + unsafe.Sizeof(c.armed),
		"cur":         unsafe.Offsetof(c.cur) + unsafe.Sizeof(c.cur),
		"curCall":     unsafe.Offsetof(c.curCall) + unsafe.Sizeof(c.curCall),
		"curPlan":     unsafe.Offsetof(c.curPlan) + unsafe.Sizeof(c.curPlan),
		"curGen":      unsafe.Offsetof(c.curGen) + unsafe.Sizeof(c.curGen),
		"calls":       unsafe.Offsetof(c.calls) + unsafe.Sizeof(c.calls),
		"lastUserSt":  unsafe.Offsetof(c.lastUserSt) + unsafe.Sizeof(c.lastUserSt),
		"sel":         unsafe.Offsetof(c.sel) + unsafe.Sizeof(c.sel),
		"exec":        unsafe.Offsetof(c.exec) + unsafe.Sizeof(c.exec),
		"last.Launch": unsafe.Offsetof(c.last) + unsafe.Offsetof(c.last.Launch) + unsafe.Sizeof(c.last.Launch),
	} {
		if end > 3*64-heapHeader {
			t.Errorf("Comm.%s ends at byte %d, want <= %d", name, end, 3*64-heapHeader)
		}
	}
	for i := 0; i < 8; i++ {
		if p := new(Comm); uintptr(unsafe.Pointer(p))%64 != heapHeader {
			t.Fatalf("a Comm at %p, want %d bytes past a 64-byte boundary (%d bytes: pad it to a size class that is a multiple of 64)", p, heapHeader, unsafe.Sizeof(c))
		}
	}
}
