package driver

import (
	"bytes"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"
)

// requireGPU skips the test, saying why, when this machine has no NVIDIA
// driver or no GPU.
func requireGPU(t testing.TB) *Device {
	t.Helper()
	if err := Load(); err != nil {
		if errors.Is(err, ErrNoDriver) {
			t.Skip("no GPU: libcuda.so.1 not found (CUDA tests need an NVIDIA driver)")
		}
		t.Skipf("no GPU: %v", err)
	}
	n, err := DeviceCount()
	if err != nil || n == 0 {
		t.Skipf("no GPU: %d devices (%v)", n, err)
	}
	d, err := OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// currentGPU is requireGPU with the device's context current on the
// calling thread, which it holds until the test ends.
func currentGPU(t testing.TB) *Device {
	t.Helper()
	d := requireGPU(t)
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	if err := d.SetCurrent(); err != nil {
		t.Fatal(err)
	}
	return d
}

func TestLoadWithoutDriverIsClean(t *testing.T) {
	err := Load()
	if err != nil && !errors.Is(err, ErrNoDriver) {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("unexpected error type %T: %v", err, err)
		}
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	d := requireGPU(t)
	defer d.Close()
	if err := d.SetCurrent(); err != nil {
		t.Fatal(err)
	}
	p, err := MemAlloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer MemFree(p)
	in := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1<<17)
	if err := CopyHtoD(p, in); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(in))
	if err := CopyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("round trip mismatch")
	}
	base, size, err := AddressRange(p + 100)
	if err != nil || base != p || size < 1<<20 {
		t.Fatalf("address range %x %d %v", base, size, err)
	}
	id1, err := BufferID(p)
	if err != nil || id1 == 0 {
		t.Fatalf("buffer id %d %v", id1, err)
	}
}

func TestErrorsCarryNames(t *testing.T) {
	d := requireGPU(t)
	defer d.Close()
	d.SetCurrent()
	err := MemFree(Ptr(0xdead0000))
	var e *Error
	if !errors.As(err, &e) || e.Name == "" || e.Text == "" {
		t.Fatalf("error %v lacks name/text", err)
	}
}

// BenchmarkHostCalls: the host cost of the driver calls a collective makes
// besides cuLaunchKernel (for the ≤ 1 µs host-time goal, issue 6 (b)).
func BenchmarkHostCalls(b *testing.B) {
	d := currentGPU(b)
	s, err := NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	b.Run("cuCtxSetCurrent", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			d.SetCurrent()
		}
	})
	b.Run("cuStreamIsCapturing", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			s.CaptureStatus()
		}
	})
	b.Run("Prelaunch", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			d.Prelaunch(s, true)
		}
	})
}

// BenchmarkHostPaths: what a launch's host code pays besides the driver
// calls: a cgo call without and with a pointer argument to Go memory (cgo
// checks it), a clock read in C (no driver needed for these), and a read
// of page-locked, device-mapped host memory (the
// stream's failure record, read before every launch) beside a read of Go
// memory.
func BenchmarkHostPaths(b *testing.B) {
	arg := new([26]uint64) // the size of a launch argument, no Go pointers
	b.Run("cgo", func(b *testing.B) { b.ReportMetric(float64(CrossingCost(b.N).Nanoseconds()), "ns/call") })
	// One CLOCK_MONOTONIC read from C: what the launch accounting adds.
	b.Run("clock", func(b *testing.B) { b.ReportMetric(float64(ClockCost(b.N).Nanoseconds()), "ns/read") })
	b.Run("cgo-pointer", func(b *testing.B) {
		b.ReportMetric(float64(CrossingCostPointer(b.N, unsafe.Pointer(arg)).Nanoseconds()), "ns/call")
	})
	var sink uint32
	b.Run("read-go", func(b *testing.B) {
		p := (*uint32)(unsafe.Pointer(arg))
		for i := 0; i < b.N; i++ {
			sink += atomic.LoadUint32(p)
		}
	})
	b.Run("read-host-mapped", func(b *testing.B) {
		currentGPU(b)
		h, _, err := HostAlloc(64)
		if err != nil {
			b.Fatal(err)
		}
		defer FreeHost(h)
		p := (*uint32)(h)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sink += atomic.LoadUint32(p)
		}
	})
	_ = sink
}
