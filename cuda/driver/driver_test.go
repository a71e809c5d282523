package driver_test

import (
	"bytes"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/cudabench"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
)

// requireGPU skips the test, saying why, when this machine has no NVIDIA
// driver or no GPU, fails it on any other driver error (gputest.Require),
// and opens device 0.
func requireGPU(t testing.TB) *driver.Device {
	t.Helper()
	gputest.Require(t)
	d, err := driver.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// currentGPU is requireGPU with the device's context current on the
// calling thread, which it holds until the test ends.
func currentGPU(t testing.TB) *driver.Device {
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
	err := driver.Load()
	if err != nil && !errors.Is(err, driver.ErrNoDriver) {
		var e *driver.Error
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
	p, err := driver.MemAlloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.MemFree(p)
	in := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 1<<17)
	if err := driver.CopyHtoD(p, in); err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(in))
	if err := driver.CopyDtoH(out, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, out) {
		t.Fatal("round trip mismatch")
	}
	base, size, err := driver.AddressRange(p + 100)
	if err != nil || base != p || size < 1<<20 {
		t.Fatalf("address range %x %d %v", base, size, err)
	}
	id1, err := driver.BufferID(p)
	if err != nil || id1 == 0 {
		t.Fatalf("buffer id %d %v", id1, err)
	}
}

func TestErrorsCarryNames(t *testing.T) {
	d := requireGPU(t)
	defer d.Close()
	d.SetCurrent()
	err := driver.MemFree(driver.Ptr(0xdead0000))
	var e *driver.Error
	if !errors.As(err, &e) || e.Name == "" || e.Text == "" {
		t.Fatalf("error %v lacks name/text", err)
	}
}

// BenchmarkHostCalls: the host cost of the driver calls a collective makes
// besides cuLaunchKernel (for the ≤ 1 µs host-time goal, issue 6 (b)).
func BenchmarkHostCalls(b *testing.B) {
	d := currentGPU(b)
	s, err := driver.NewStream()
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
	b.Run("cgo", func(b *testing.B) { b.ReportMetric(float64(cudabench.CrossingCost(b.N).Nanoseconds()), "ns/call") })
	// One CLOCK_MONOTONIC read from C: what the launch accounting adds.
	b.Run("clock", func(b *testing.B) { b.ReportMetric(float64(cudabench.ClockCost(b.N).Nanoseconds()), "ns/read") })
	b.Run("cgo-pointer", func(b *testing.B) {
		b.ReportMetric(float64(cudabench.CrossingCostPointer(b.N, unsafe.Pointer(arg)).Nanoseconds()), "ns/call")
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
		h, _, err := driver.HostAlloc(64)
		if err != nil {
			b.Fatal(err)
		}
		defer driver.FreeHost(h)
		p := (*uint32)(h)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			sink += atomic.LoadUint32(p)
		}
	})
	_ = sink
}

// emptyPTX is a kernel that does nothing, with one 8-byte parameter.
const emptyPTX = `.version 7.0
.target sm_80
.address_size 64
.visible .entry th_empty(.param .u64 p)
{
	ret;
}
.visible .entry th_spin(.param .u64 p)
{
	.reg .u64 %t<3>;
	.reg .pred %p;
	mov.u64 %t0, %globaltimer;
WAIT:
	mov.u64 %t1, %globaltimer;
	sub.u64 %t2, %t1, %t0;
	setp.lt.u64 %p, %t2, 20000;
	@%p bra WAIT;
	ret;
}
`

// BenchmarkAfterLaunch is the experiment behind docs/design/cuda.md's "Host
// cost of a call": what the first steps of the calling thread's own code
// cost right after cuLaunchKernel returns, against the same steps after
// other work. Each iteration does the "before" work, then times one after
// the other (each figure includes one clock read): an empty call into C
// (nop1-ns), another (nop2-ns), an atomic add to Go memory (atomic-ns),
// reading one word of each of 64 lines (4 KiB) of Go memory (read1-ns),
// and the same lines again (read2-ns); or, in the atomic-first runs, the
// atomic add first. Iterations start 30 µs apart, so
// the launch queue never fills. The befores: launch (Device.Launch of an
// empty kernel, as a collective's launch: context check, capture query,
// cuLaunchKernel), launch-blocked (the same for a kernel that spins 20 µs,
// back to back: the launch waits for room in a full launch queue, as in
// BenchmarkCallHost in package cuda), spin (3 µs spinning on the clock),
// touch-64K and touch-4M (C code reading 64 KiB or 4 MiB of other memory).
func BenchmarkAfterLaunch(b *testing.B) {
	d := currentGPU(b)
	m, err := driver.LoadModule([]byte(emptyPTX))
	if err != nil {
		b.Fatal(err)
	}
	defer m.Unload()
	f, err := m.Function("th_empty")
	if err != nil {
		b.Fatal(err)
	}
	spin, err := m.Function("th_spin")
	if err != nil {
		b.Fatal(err)
	}
	s, err := driver.NewStream()
	if err != nil {
		b.Fatal(err)
	}
	defer s.Destroy()
	junk := make([]byte, 4<<20)
	buf := make([]uint64, 4096/8)
	arg := new(uint64)
	base := time.Now()
	now := func() int64 { return int64(time.Since(base)) }
	var launchErr error
	for _, before := range []struct {
		name    string
		f       func()
		blocked bool // back to back, not paced
	}{
		{"launch", func() {
			if _, err := d.Launch(s, true, f, 1, 32, unsafe.Pointer(arg), nil, 0, driver.TimeNothing); err != nil {
				launchErr = err
			}
		}, false},
		{"launch-blocked", func() {
			if _, err := d.Launch(s, true, spin, 1, 32, unsafe.Pointer(arg), nil, 0, driver.TimeNothing); err != nil {
				launchErr = err
			}
		}, true},
		{"spin", func() {
			for t := now(); now()-t < 3000; {
			}
		}, false},
		{"touch-64K", func() { cudabench.Touch(unsafe.Pointer(&junk[0]), 64<<10) }, false},
		{"touch-4M", func() { cudabench.Touch(unsafe.Pointer(&junk[0]), 4<<20) }, false},
	} {
		for _, atomicFirst := range []bool{false, true} {
			name := before.name
			if atomicFirst {
				name += "/atomic-first"
			}
			b.Run(name, func(b *testing.B) {
				var sum [5]int64
				var x atomic.Int64
				var sink uint64
				for i := 0; i < b.N; i++ {
					start := now()
					before.f()
					var ta int64
					if atomicFirst {
						t := now()
						x.Add(1)
						ta = now() - t
					}
					t0 := now()
					cudabench.Nop()
					t1 := now()
					cudabench.Nop()
					t2 := now()
					if !atomicFirst {
						x.Add(1)
					}
					t3 := now()
					for j := 0; j < len(buf); j += 8 {
						sink += buf[j]
					}
					t4 := now()
					for j := 0; j < len(buf); j += 8 {
						sink += buf[j]
					}
					t5 := now()
					sum[0] += t1 - t0
					sum[1] += t2 - t1
					sum[2] += t3 - t2 + ta
					sum[3] += t4 - t3
					sum[4] += t5 - t4
					for !before.blocked && now()-start < 30000 {
					}
				}
				if launchErr != nil {
					b.Fatal(launchErr)
				}
				if err := s.Synchronize(); err != nil {
					b.Fatal(err)
				}
				for k, name := range []string{"nop1-ns", "nop2-ns", "atomic-ns", "read1-ns", "read2-ns"} {
					b.ReportMetric(float64(sum[k])/float64(b.N), name)
				}
				runtime.KeepAlive(sink)
			})
		}
	}
	runtime.KeepAlive(junk)
}
