package cuda_test

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"gonum.org/v1/gonum/stat"

	"github.com/theseus-ccl/theseus/cuda"
	"github.com/theseus-ccl/theseus/cuda/cudabench"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// latProbe makes BenchmarkLatency report the timestamps a measurement
// build with THESEUS_PROBE_TIMES=1 (loaded through THESEUS_PTX_DIR) left
// at rank 0's last launch, as ns after its entry.
var latProbe = flag.Bool("lat.probe", false, "BenchmarkLatency: report the THESEUS_PROBE_TIMES measurement build's timestamps of rank 0's last launch")

// commsContext replaces the embedded default context of localComms (the
// graph tests, BenchmarkLatency, BenchmarkCallHost): for example a context
// whose bundles carry specialised kernels (bench/gpu/make-spec-context.sh).
var commsContext = flag.String("comms.context", "", "selection context directory of the tests' local communicators (default: the embedded default context)")

// latShift is how many positions BenchmarkLatency's <size>/shift moves the
// buffers over: more than a communicator keeps plans for (16), fewer than
// the executor's L3 keeps entries (4096), as nccl-tests' startColl
// (steps = maxbytes/size) at the sizes of a sweep to 64 KiB and beyond.
const latShift = 1024

var callhostProf = flag.String("callhost.prof", "", "write a 4 kHz CPU profile of BenchmarkCallHost's timed calls to this file")

var (
	callhostRanks = flag.Int("callhost.ranks", 2, "ranks (goroutines) of BenchmarkCallHostDist")
	callhostPace  = flag.Duration("callhost.pace", 0, "BenchmarkCallHostDist: start a call only this long after the last one started, spinning between (0: back to back)")
)

// localComms makes n ranks of one communicator as goroutines of this
// process on the CUDA backend, with the embedded default context (or
// -comms.context's), and one stream of their own each.
func localComms(t testing.TB, n int) ([]*theseus.Comm, []*cuda.Stream, *cuda.Backend) {
	t.Helper()
	dir := *commsContext
	if dir == "" {
		dir = t.TempDir()
		if err := contexts.Materialize(dir); err != nil {
			t.Fatal(err)
		}
	}
	comms, err := theseus.NewLocalComms(context.Background(), n, theseus.Config{Backend: "cuda", ContextDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	streams := make([]*cuda.Stream, n)
	for r, c := range comms {
		s, err := c.NewStream()
		if err != nil {
			t.Fatal(err)
		}
		streams[r] = s.(*cuda.Stream)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy() // before the streams it may have used
		}
		for _, s := range streams {
			s.Close()
		}
	})
	be, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	return comms, streams, be.(*cuda.Backend)
}

// onEach runs f for every rank concurrently and returns the first error.
func onEach(n int, f func(r int) error) error { return errors.Join(ranks.Each(n, f)...) }

// eagerCalls makes k calls call(r) on every rank's stream, concurrently,
// and waits for each rank's stream; a failure ends the test.
func eagerCalls(t testing.TB, streams []*cuda.Stream, k int, call func(r int) error) {
	t.Helper()
	if err := onEach(len(streams), func(r int) error {
		for range k {
			if err := call(r); err != nil {
				return err
			}
		}
		return streams[r].Synchronize()
	}); err != nil {
		t.Fatal(err)
	}
}

// capture captures, on every rank's stream in capture mode mode (one of
// driver.CaptureMode*), what call(r) enqueues, and returns the
// instantiated graphs. Every rank ends its capture before any instantiates
// its graph: while another thread captures in global mode, instantiation
// is one of the calls CUDA prohibits (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
// which also invalidates that capture).
func capture(t testing.TB, streams []*cuda.Stream, mode int, call func(r int) error) []driver.GraphExec {
	t.Helper()
	n := len(streams)
	graphs := make([]driver.Graph, n)
	ended := make([]bool, n)
	err := onEach(n, func(r int) error {
		return cuda.WithDevice(func() error {
			s := driver.Stream(streams[r].CUStream())
			if err := s.BeginCapture(mode); err != nil {
				return err
			}
			cerr := call(r)
			g, err := s.EndCapture()
			if err == nil {
				graphs[r], ended[r] = g, true
			}
			return errors.Join(cerr, err)
		})
	})
	execs := make([]driver.GraphExec, n)
	if err == nil {
		err = onEach(n, func(r int) error {
			return cuda.WithDevice(func() error {
				var err error
				execs[r], err = graphs[r].Instantiate()
				return err
			})
		})
	}
	cuda.WithDevice(func() error {
		for r, g := range graphs {
			if ended[r] {
				g.Destroy()
			}
		}
		return nil
	})
	t.Cleanup(func() {
		cuda.WithDevice(func() error {
			for _, e := range execs {
				if e != 0 {
					e.Destroy()
				}
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return execs
}

// replay launches every rank's graph k times (each rank from its own
// goroutine: a rank whose stream queue is full must not keep its peers'
// replays from being enqueued) and waits for them.
func replay(streams []*cuda.Stream, execs []driver.GraphExec, k int) error {
	return onEach(len(streams), func(r int) error {
		return cuda.WithDevice(func() error {
			s := driver.Stream(streams[r].CUStream())
			for i := 0; i < k; i++ {
				if err := execs[r].Launch(s); err != nil {
					return err
				}
			}
			return streams[r].Synchronize()
		})
	})
}

// float64Bufs allocates one buffer of count float64 per rank, freed when
// the test ends, and uploads x0[r][i] = val(r, i) into rank r's.
func float64Bufs(t *testing.T, be *cuda.Backend, n int, count int64, val func(r, i int64) float64) ([]device.Ptr, [][]float64) {
	t.Helper()
	bufs, x0 := make([]device.Ptr, n), make([][]float64, n)
	for r := range bufs {
		p, err := be.Alloc(count * 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Free(p) })
		bufs[r] = p
		x0[r] = make([]float64, count)
		b := make([]byte, 8*count)
		for i := range x0[r] {
			x0[r][i] = val(int64(r), int64(i))
			binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x0[r][i]))
		}
		if err := be.Upload(p, b); err != nil {
			t.Fatal(err)
		}
	}
	return bufs, x0
}

// TestGraphReplay captures a warmed-up in-place float64 allreduce of two
// ranks into a CUDA graph per rank and replays it 1000 times. In place, each
// replay doubles the buffer, so every replay must read the previous one's
// result exactly (powers of two stay exact in float64 up to 2^1023): a
// replay that reused a stale LL flag, scratch half or dependency epoch shows
// as a wrong value. It also checks the capture table (docs/design/cuda.md):
// a miss beyond L3 during capture is refused (InvalidUsage) without
// invalidating the capture, an L3 miss (a new count in registered buffers,
// as nccl-tests -G makes) is set up during the capture and replays right,
// and an eager call after the replays continues the sequence.
func TestGraphReplay(t *testing.T) {
	gputest.Require(t)
	const n, replays = 2, 1000
	comms, streams, be := localComms(t, n)
	// Every capture mode: in global mode (PyTorch's default) a rank's
	// capture prohibits unsafe calls on every other thread that is not in
	// relaxed mode (the other rank's, the reaper's); nccl-tests captures in
	// thread-local mode.
	modes := []struct {
		name string
		mode int
	}{{"global", driver.CaptureModeGlobal}, {"threadlocal", driver.CaptureModeThreadLocal}, {"relaxed", driver.CaptureModeRelaxed}}
	for _, m := range modes {
		// The default context's wide LL all-pairs (16 KiB, and the captured
		// half 8 KiB: the same schedule) and ring.
		for _, count := range []int64{2048, 1 << 20} {
			t.Run(fmt.Sprintf("%s/%d", m.name, count), func(t *testing.T) {
				bufs, x0 := float64Bufs(t, be, n, count, func(r, i int64) float64 { return float64((r*5+i*3)%17 - 8) })
				outs := make([]device.Ptr, n)
				for r := range outs {
					var err error
					if outs[r], err = be.Alloc(count * 8); err != nil {
						t.Fatal(err)
					}
					defer be.Free(outs[r])
				}
				call := func(r int) error {
					return comms[r].AllReduce(bufs[r], bufs[r], count, theseus.Float64, theseus.Sum, streams[r])
				}
				// The out-of-place allreduce of the first half into outs: first
				// eager with the whole count (outs registered), then captured
				// with half of it (an L3 miss only: set up during the capture).
				half := count / 2
				side := func(r int, k int64) error {
					return comms[r].AllReduce(bufs[r], outs[r], k, theseus.Float64, theseus.Sum, streams[r])
				}
				// One eager call f on every rank, waited for.
				eager := func(f func(r int) error) { t.Helper(); eagerCalls(t, streams, 1, f) }
				eager(call) // warm-up: every cache level filled; bufs = S (the sum of the inputs)
				calls := 1
				eager(func(r int) error { return side(r, count) }) // outs = 2S
				// During capture: a miss beyond L3 (a schedule never
				// materialised: broadcast) is refused and leaves the capture
				// intact; an L3 miss (a new count in registered buffers) is set up
				// and captured; then the warmed call.
				execs := capture(t, streams, m.mode, func(r int) error {
					err := comms[r].Broadcast(bufs[r], bufs[r], count, theseus.Float64, 0, streams[r])
					var te *theseus.Error
					if !errors.As(err, &te) || te.Code != theseus.InvalidUsage {
						return fmt.Errorf("rank %d: a broadcast never run before (a schedule to materialise) during capture returned %v, want InvalidUsage", r, err)
					}
					if err := side(r, half); err != nil {
						return fmt.Errorf("rank %d: an L3 miss during capture: %w", r, err)
					}
					return call(r)
				})
				if err := replay(streams, execs, replays); err != nil {
					t.Fatal(err)
				}
				calls += replays
				eager(call) // an eager call after the replays
				calls++
				// Replay j: outs[:half] = 2 * S*2^(j-1), then bufs = S*2^j.
				scale := math.Ldexp(1, calls-1)
				wrong := 0
				check := func(r int, what string, p device.Ptr, want func(i int64) float64) {
					b := make([]byte, 8*count)
					if err := be.Download(b, p); err != nil {
						t.Fatal(err)
					}
					for i := int64(0); i < count; i++ {
						if got := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])); got != want(i) {
							if wrong < 5 {
								t.Errorf("rank %d %s element %d: got %g, want %g", r, what, i, got, want(i))
							}
							wrong++
						}
					}
				}
				for r := range bufs {
					sum := func(i int64) float64 { return x0[0][i] + x0[1][i] }
					check(r, "buffer", bufs[r], func(i int64) float64 { return sum(i) * scale })
					check(r, "side output", outs[r], func(i int64) float64 {
						if i < half {
							return sum(i) * math.Ldexp(1, replays)
						}
						return 2 * sum(i)
					})
				}
				t.Logf("count %d (%s): %d graph replays + 2 eager calls, #wrong %d", count, comms[0].LastCall().Name, replays, wrong)
				fmt.Printf("GRAPH mode=%s count=%d schedule=%s replays=%d wrong=%d\n", m.name, count, comms[0].LastCall().Name, replays, wrong)
			})
		}
	}
}

// TestGraphReplayOneRank captures a one-rank out-of-place float64
// allreduce (a copy, which the backend runs as shared work with the
// theseus_units entry) after a memset of its output to 0xff bytes (NaN),
// replays it 1000 times, then makes an eager call over new input: the last
// replay and the eager call must each leave the output equal to their
// input, so neither ran with a stale unit counter or launch counter.
func TestGraphReplayOneRank(t *testing.T) {
	gputest.Require(t)
	const n, count, replays = 1, 1 << 20, 1000
	comms, streams, be := localComms(t, n)
	ins, x0 := float64Bufs(t, be, n, count, func(r, i int64) float64 { return float64(i%1000 - 500) })
	outs, _ := float64Bufs(t, be, n, count, func(r, i int64) float64 { return 0 })
	call := func(r int) error {
		return comms[r].AllReduce(ins[r], outs[r], count, theseus.Float64, theseus.Sum, streams[r])
	}
	check := func(want []float64) {
		t.Helper()
		b := make([]byte, 8*count)
		if err := be.Download(b, outs[0]); err != nil {
			t.Fatal(err)
		}
		wrong := 0
		for i := range want {
			if got := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])); got != want[i] {
				if wrong < 5 {
					t.Errorf("element %d: got %g, want %g", i, got, want[i])
				}
				wrong++
			}
		}
		fmt.Printf("GRAPH one rank schedule=%s wrong=%d\n", comms[0].LastCall().Name, wrong)
	}
	eagerCalls(t, streams, 1, call)
	execs := capture(t, streams, driver.CaptureModeThreadLocal, func(r int) error {
		if err := driver.MemsetD8Async(driver.Ptr(outs[r]), 0xff, 8*count, driver.Stream(streams[r].CUStream())); err != nil {
			return err
		}
		return call(r)
	})
	if err := replay(streams, execs, replays); err != nil {
		t.Fatal(err)
	}
	check(x0[0])
	x1 := make([]float64, count)
	b := make([]byte, 8*count)
	for i := range x1 {
		x1[i] = float64(3*i%777) + 0.5
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(x1[i]))
	}
	if err := be.Upload(ins[0], b); err != nil {
		t.Fatal(err)
	}
	eagerCalls(t, streams, 1, call)
	check(x1)
}

// TestGraphDiscarded captures calls into CUDA graphs that are then
// destroyed without ever being launched (an application whose capture
// failed half-way): the host counted those launches, the device never ran
// them, and the next eager calls must neither wait for them (the launch
// fence) nor compute anything but the eager calls' results
// (docs/known-issues.md, 17, fixed). In-place float64 allreduce of two
// ranks: after k eager calls the buffer holds S * 2^(k-1), S the sum of the
// inputs.
func TestGraphDiscarded(t *testing.T) {
	gputest.Require(t)
	const n = 2
	comms, streams, be := localComms(t, n)
	for _, count := range []int64{1024, 1 << 20} { // LL all-pairs and ring in the default context
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			bufs, x0 := float64Bufs(t, be, n, count, func(r, i int64) float64 { return float64((r*7+i*5)%19 - 9) })
			call := func(r int) error {
				return comms[r].AllReduce(bufs[r], bufs[r], count, theseus.Float64, theseus.Sum, streams[r])
			}
			eager := func(k int) { t.Helper(); eagerCalls(t, streams, k, call) }
			eager(1) // warm-up: S
			if err := onEach(n, func(r int) error {
				return cuda.WithDevice(func() error {
					s := driver.Stream(streams[r].CUStream())
					if err := s.BeginCapture(driver.CaptureModeThreadLocal); err != nil {
						return err
					}
					cerr := errors.Join(call(r), call(r), call(r))
					g, err := s.EndCapture()
					if err == nil {
						g.Destroy() // never instantiated, never launched
					}
					return errors.Join(cerr, err)
				})
			}); err != nil {
				t.Fatal(err)
			}
			eager(3) // S * 8
			wrong := 0
			for r := range bufs {
				b := make([]byte, 8*count)
				if err := be.Download(b, bufs[r]); err != nil {
					t.Fatal(err)
				}
				for i := int64(0); i < count; i++ {
					want := (x0[0][i] + x0[1][i]) * 8
					if got := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])); got != want {
						if wrong < 5 {
							t.Errorf("rank %d element %d: got %g, want %g", r, i, got, want)
						}
						wrong++
					}
				}
			}
			fmt.Printf("GRAPH discarded count=%d schedule=%s wrong=%d\n", count, comms[0].LastCall().Name, wrong)
		})
	}
}

// BenchmarkLatency is the time per 2-rank allreduce (float32, 8 B - 32
// KiB, two ranks as goroutines on one GPU), eager (back-to-back calls, one
// sync at the end: sub-benchmark <size>/eager), eager with the buffers
// moved by one message per call within their allocations over latShift
// positions, as nccl-tests moves them (<size>/shift: every call a new pair
// of buffers, an executor L3 rebase) and replayed from a CUDA
// graph of 100 captured calls (<size>/graph, the GPU's time per call),
// reported as us/call. With -lat.probe and a measurement build with
// THESEUS_PROBE_TIMES=1 loaded through THESEUS_PTX_DIR, the eager
// sub-benchmarks also report the timestamps rank 0's last launch left
// (probe<i>-ns: ns after its entry; docs/design/cuda.md, "Small
// launches").
func BenchmarkLatency(b *testing.B) {
	gputest.Require(b)
	const n = 2
	comms, streams, be := localComms(b, n)
	for bytes := int64(8); bytes <= 32<<10; bytes *= 4 {
		count := bytes / 4
		send, recv := make([]device.Ptr, n), make([]device.Ptr, n)
		for r := 0; r < n; r++ {
			var err error
			if send[r], err = be.Alloc(bytes * latShift); err != nil {
				b.Fatal(err)
			}
			if recv[r], err = be.Alloc(bytes * latShift); err != nil {
				b.Fatal(err)
			}
		}
		pos := make([]int64, n) // <size>/shift: the next position
		shift := false
		call := func(r int) error {
			var off device.Ptr
			if shift {
				off = device.Ptr(pos[r] * bytes)
				pos[r] = (pos[r] + 1) % latShift
			}
			return comms[r].AllReduce(send[r]+off, recv[r]+off, count, theseus.Float32, theseus.Sum, streams[r])
		}
		loop := func(k int) error {
			return onEach(n, func(r int) error {
				for i := 0; i < k; i++ {
					if err := call(r); err != nil {
						return err
					}
				}
				return streams[r].Synchronize()
			})
		}
		size := fmt.Sprintf("%dB", bytes)
		b.Run(size+"/eager", func(b *testing.B) {
			if err := loop(50); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			if err := loop(b.N); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/1e3/float64(b.N), "us/call")
			b.Logf("%s: schedule %s, resident executor %+v", size, comms[0].LastCall().Name, comms[0].Stats().Executor.Resident)
			if *latProbe {
				pt := cuda.ProbeTimes(streams[0])
				for i, v := range pt {
					if v != 0 && pt[0] != 0 {
						b.ReportMetric(float64(int64(v-pt[0])), fmt.Sprintf("probe%d-ns", i))
					}
				}
			}
		})
		b.Run(size+"/shift", func(b *testing.B) {
			shift = true
			defer func() { shift = false }()
			if err := loop(50); err != nil {
				b.Fatal(err)
			}
			st0 := comms[0].Stats().Executor
			b.ResetTimer()
			start := time.Now()
			if err := loop(b.N); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/1e3/float64(b.N), "us/call")
			st := comms[0].Stats().Executor
			b.ReportMetric(float64(st.L3Rebases-st0.L3Rebases)/float64(b.N), "rebases/call")
			b.ReportMetric(float64(st.L3Setups-st0.L3Setups)/float64(b.N), "setups/call")
		})
		b.Run(size+"/graph", func(b *testing.B) {
			if err := loop(50); err != nil {
				b.Fatal(err)
			}
			const per = 100
			execs := capture(b, streams, driver.CaptureModeThreadLocal, func(r int) error {
				for i := 0; i < per; i++ {
					if err := call(r); err != nil {
						return err
					}
				}
				return nil
			})
			// capture's cleanup destroys the graphs (destroying them here too
			// freed them twice: a SIGSEGV in the cleanup on the H200).
			if err := replay(streams, execs, 2); err != nil {
				b.Fatal(err)
			}
			reps := (b.N + per - 1) / per
			b.ResetTimer()
			start := time.Now()
			if err := replay(streams, execs, reps); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/1e3/float64(reps*per), "us/call")
		})
		for r := 0; r < n; r++ {
			be.Free(send[r])
			be.Free(recv[r])
		}
	}
}

// BenchmarkCallHost is the host time of one collective call on a full
// cache hit with the CUDA backend, excluding cuLaunchKernel (issue goal:
// ≤ 1 µs): two ranks as goroutines, each timing its own calls, minus the
// time its stream spent inside cuLaunchKernel (which includes any wait for
// a full launch queue). The launch time is measured in C around the driver
// call itself (driver.Device.Launch), so the cgo crossing, the context
// check and the capture query count as host time. Metrics:
// host-ns/call, the slower rank's; epoch-ns/call, the part of it spent in
// the selector's epochs (reading the context, the agreement, installing);
// clock-ns, one clock read in C (the accounting adds about one to each
// call's host time); cgo-ns, one empty cgo call; allocs/call (both
// ranks').
func BenchmarkCallHost(b *testing.B) { benchCallHost(b, false, 2, 0) }

// BenchmarkCallHostDist is BenchmarkCallHost with each call timed on its
// own (two clock reads in Go per call, about one of which lands inside the
// call's time) less that call's time inside cuLaunchKernel, to show how
// the mean is made: min-ns, p50-ns, p90-ns, p99-ns and max-ns of the
// slower rank's calls (the rank with the higher mean), host-ns/call their
// mean.
// A mean above the median by much more than a clock read is calls that
// took far longer than the rest: the thread was interrupted or
// descheduled, an epoch ran, the collector ran. -callhost.ranks and
// -callhost.pace change the number of ranks and pace the calls (as
// BenchmarkCallHostPaced does).
func BenchmarkCallHostDist(b *testing.B) { benchCallHost(b, true, *callhostRanks, *callhostPace) }

// BenchmarkCallHostPaced is BenchmarkCallHostDist with each of two ranks
// starting a call only every 40 µs, spinning in between: slower than the
// GPU runs the kernels, so that cuLaunchKernel never waits for a full
// queue and the rank's thread never leaves its core. BenchmarkCallHost is
// GPU-bound (nearly all of a call's time is inside cuLaunchKernel); the
// difference between the two host-ns/call is what the time inside the
// driver costs the host code around it (caches, a thread that slept).
func BenchmarkCallHostPaced(b *testing.B) { benchCallHost(b, true, 2, 40*time.Microsecond) }

// benchCallHost times b.N calls on each of n ranks: all together, or
// (each) every call on its own for the distribution, started pace apart.
func benchCallHost(b *testing.B, each bool, n int, pace time.Duration) {
	gputest.Require(b)
	const count = 256
	comms, streams, be := localComms(b, n)
	send, recv := make([]device.Ptr, n), make([]device.Ptr, n)
	for r := 0; r < n; r++ {
		send[r], _ = be.Alloc(count * 4)
		recv[r], _ = be.Alloc(count * 4)
	}
	call := func(r int) error {
		return comms[r].AllReduce(send[r], recv[r], count, theseus.Float32, theseus.Sum, streams[r])
	}
	eagerCalls(b, streams, 100, call)
	cuda.TimeLaunches(true)
	defer cuda.TimeLaunches(false)
	host := make([]time.Duration, n)
	epoch := make([]time.Duration, n)
	dist := make([][]float64, n)
	if each {
		for r := range dist {
			dist[r] = make([]float64, 0, b.N)
		}
	}
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	if *callhostProf != "" {
		// A CPU profile of the timed calls at 4 kHz (the test binary's own
		// -test.cpuprofile samples at 100 Hz: too few samples outside C).
		f, err := os.Create(*callhostProf)
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		runtime.SetCPUProfileRate(4000)
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b.ResetTimer()
	err := onEach(n, func(r int) error {
		// The timed loops make the call itself, with its arguments in
		// locals: a user's loop, without the harness's closure and slice
		// reads (lines of their own to fetch on every call).
		c, sd, rv := comms[r], send[r], recv[r]
		var st theseus.Stream = streams[r]
		k0, d0 := streams[r].LaunchTime()
		e0 := comms[r].Stats().Selector.EpochTime
		var total time.Duration
		if each {
			d := dist[r][:0]
			_, prev := streams[r].LaunchTime()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				if err := c.AllReduce(sd, rv, count, theseus.Float32, theseus.Sum, st); err != nil {
					return err
				}
				el := time.Since(t0)
				_, l := streams[r].LaunchTime()
				d = append(d, float64(el-(l-prev)))
				prev = l
				total += el
				for pace > 0 && time.Since(t0) < pace {
				}
			}
			dist[r] = d
		} else {
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if err := c.AllReduce(sd, rv, count, theseus.Float32, theseus.Sum, st); err != nil {
					return err
				}
			}
			total = time.Since(start)
		}
		k1, d1 := streams[r].LaunchTime()
		if k1-k0 != int64(b.N) {
			return fmt.Errorf("rank %d: %d launches for %d calls", r, k1-k0, b.N)
		}
		host[r] = total - (d1 - d0)
		epoch[r] = comms[r].Stats().Selector.EpochTime - e0
		return streams[r].Synchronize()
	})
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	if err != nil {
		b.Fatal(err)
	}
	perCall := func(d []time.Duration) float64 { return float64(slices.Max(d).Nanoseconds()) / float64(b.N) }
	b.ReportMetric(perCall(host), "host-ns/call")
	b.ReportMetric(perCall(epoch), "epoch-ns/call")
	b.ReportMetric(float64(cudabench.ClockCost(1000).Nanoseconds()), "clock-ns")
	b.ReportMetric(float64(cudabench.CrossingCost(10000).Nanoseconds()), "cgo-ns")
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/float64(n*b.N), "allocs/call")
	if each {
		slow := dist[slices.Index(host, slices.Max(host))]
		slices.Sort(slow)
		b.ReportMetric(slow[0], "min-ns")
		for _, q := range []struct {
			p    float64
			name string
		}{{0.5, "p50-ns"}, {0.9, "p90-ns"}, {0.99, "p99-ns"}, {1, "max-ns"}} {
			b.ReportMetric(stat.Quantile(q.p, stat.Empirical, slow, nil), q.name)
		}
	}
}

// TestGraphCaptureFreshStream captures, in global mode (PyTorch's
// default), each rank's first call on a stream the communicator has never
// seen: PyTorch's torch.cuda.graph captures on a stream of its own, so the
// backend's per-stream state (a host-mapped failure record, a claim word)
// is allocated during the capture. The graphs must instantiate, replay, and
// compute the allreduce.
func TestGraphCaptureFreshStream(t *testing.T) {
	gputest.Require(t)
	const n, count, replays = 2, 256, 10
	fresh := make([]*cuda.Stream, n)
	raw := make([]driver.Stream, n)
	t.Cleanup(func() {
		// After the communicators are destroyed (cleanups run last in,
		// first out): their Destroy waits on the last stream they used.
		for _, s := range fresh {
			if s != nil {
				s.Close()
			}
		}
		cuda.WithDevice(func() error {
			for _, s := range raw {
				if s != 0 {
					s.Destroy()
				}
			}
			return nil
		})
	})
	comms, streams, be := localComms(t, n)
	in, x0 := float64Bufs(t, be, n, count, func(r, i int64) float64 { return float64(r*7 + i) })
	outs := make([]device.Ptr, n)
	for r := range outs {
		var err error
		if outs[r], err = be.Alloc(count * 8); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Free(outs[r]) })
	}
	// Warmed up on the communicator's own streams, as PyTorch warms up
	// before it captures.
	eagerCalls(t, streams, 3, func(r int) error {
		return comms[r].AllReduce(in[r], outs[r], count, theseus.Float64, theseus.Sum, streams[r])
	})
	for r := range raw {
		if err := cuda.WithDevice(func() (err error) { raw[r], err = driver.NewStream(); return err }); err != nil {
			t.Fatal(err)
		}
	}
	graphs := make([]driver.Graph, n)
	if err := onEach(n, func(r int) error {
		return cuda.WithDevice(func() error {
			if err := raw[r].BeginCapture(driver.CaptureModeGlobal); err != nil {
				return err
			}
			ws, cerr := comms[r].WrapStream(uintptr(raw[r]))
			if cerr == nil {
				fresh[r] = ws.(*cuda.Stream)
				cerr = comms[r].AllReduce(in[r], outs[r], count, theseus.Float64, theseus.Sum, ws)
			}
			g, err := raw[r].EndCapture()
			graphs[r] = g
			return errors.Join(cerr, err)
		})
	}); err != nil {
		t.Fatal(err)
	}
	execs := make([]driver.GraphExec, n)
	if err := onEach(n, func(r int) error {
		return cuda.WithDevice(func() (err error) { execs[r], err = graphs[r].Instantiate(); return err })
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cuda.WithDevice(func() error {
			for r := range execs {
				execs[r].Destroy()
				graphs[r].Destroy()
			}
			return nil
		})
	})
	for r := range outs { // the replays must write every element again
		if err := be.Upload(outs[r], make([]byte, 8*count)); err != nil {
			t.Fatal(err)
		}
	}
	if err := replay(fresh, execs, replays); err != nil {
		t.Fatal(err)
	}
	wrong := 0
	for r := range outs {
		b := make([]byte, 8*count)
		if err := be.Download(b, outs[r]); err != nil {
			t.Fatal(err)
		}
		for i := range count {
			want := 0.0
			for q := range n {
				want += x0[q][i]
			}
			if got := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])); got != want {
				if wrong < 4 {
					t.Errorf("rank %d element %d: %v, want %v", r, i, got, want)
				}
				wrong++
			}
		}
	}
	fmt.Printf("GRAPH fresh stream count=%d schedule=%s replays=%d wrong=%d\n", count, comms[0].LastCall().Name, replays, wrong)
}
