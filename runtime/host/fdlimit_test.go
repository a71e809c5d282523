//go:build linux

package host

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// TestAllocOutOfDescriptors: running out of file descriptors (each
// allocation holds one) gives an error that says so and what to do.
func TestAllocOutOfDescriptors(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Skip("getrlimit:", err)
	}
	low := old
	low.Cur = 64
	if low.Cur > old.Max {
		t.Skip("hard limit too low")
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skip("setrlimit:", err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	b := Backend()
	var got []device.Ptr
	defer func() {
		for _, p := range got {
			b.Free(p)
		}
	}()
	for i := 0; i < 128; i++ {
		p, err := b.Alloc(4096)
		if err != nil {
			if !strings.Contains(err.Error(), "ulimit -n") {
				t.Fatalf("error %q does not say how to get more descriptors", err)
			}
			return
		}
		got = append(got, p)
	}
	t.Fatal("128 allocations under a limit of 64 descriptors all succeeded")
}
