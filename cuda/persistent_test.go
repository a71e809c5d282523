package cuda_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/theseus-ccl/theseus/cuda"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// persistentComms is localComms in persistent mode (whatever
// THESEUS_EXECUTOR says), with a second stream per rank.
func persistentComms(t *testing.T, n int) ([]*theseus.Comm, [][]*cuda.Stream, *cuda.Backend) {
	t.Helper()
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	comms, err := theseus.NewLocalComms(context.Background(), n,
		theseus.Config{Backend: "cuda", ContextDir: dir, Options: comm.Config{Executor: executor.ModePersistent}})
	if err != nil {
		t.Fatal(err)
	}
	streams := make([][]*cuda.Stream, n)
	for r, c := range comms {
		for range 2 {
			s, err := c.NewStream()
			if err != nil {
				t.Fatal(err)
			}
			streams[r] = append(streams[r], s.(*cuda.Stream))
		}
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
		for _, ss := range streams {
			for _, s := range ss {
				s.Close()
			}
		}
	})
	be, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	return comms, streams, be.(*cuda.Backend)
}

// TestPersistent runs in-place float64 allreduces of two ranks as
// goroutines in persistent mode (THESEUS_EXECUTOR=persistent): 400 calls
// per size without a wait between them (the queue of 256 slots wraps),
// alternating between two streams, over the default context's LL
// all-pairs schedule (one threadblock: through the queue) and its ring
// (a kernel launch on the same streams), then 20 of them captured into a
// CUDA graph (kernel launches: a graph replays without the host) and
// replayed 10 times, then eager calls again. Each call doubles the buffer
// (exact in float64), so a lost, doubled or reordered launch shows. It
// prints the multiprocessors the resident kernels occupy.
func TestPersistent(t *testing.T) {
	gputest.Require(t)
	const n, eager, captured, replays = 2, 400, 20, 10
	comms, streams, be := persistentComms(t, n)
	for _, count := range []int64{128, 1 << 20} { // 1 KiB (LL: queued), 8 MiB (ring: launched)
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			bufs, x0 := float64Bufs(t, be, n, count, func(r, i int64) float64 { return float64((r*5+i*3)%17 - 8) })
			k := 0 // calls made
			calls := func(m int, graph bool) func(r int) error {
				return func(r int) error {
					for i := range m {
						st := streams[r][i%2]
						if graph {
							st = streams[r][0] // a capture is one stream's
						}
						if err := comms[r].AllReduce(bufs[r], bufs[r], count, theseus.Float64, theseus.Sum, st); err != nil {
							return err
						}
					}
					return nil
				}
			}
			sync := func() {
				if err := onEach(n, func(r int) error {
					for _, s := range streams[r] {
						if err := s.Synchronize(); err != nil {
							return err
						}
					}
					return nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			if err := onEach(n, calls(eager, false)); err != nil {
				t.Fatal(err)
			}
			sync()
			k += eager
			execs := capture(t, toStreams(streams, 0), driver.CaptureModeThreadLocal, calls(captured, true))
			if err := replay(toStreams(streams, 0), execs, replays); err != nil {
				t.Fatal(err)
			}
			k += captured * replays
			if err := onEach(n, calls(eager, false)); err != nil {
				t.Fatal(err)
			}
			sync()
			k += eager
			// Every value is S * 2^(k-1), k = 1000 calls: exact in float64.
			wrong := 0
			for r := range bufs {
				b := make([]byte, 8*count)
				if err := be.Download(b, bufs[r]); err != nil {
					t.Fatal(err)
				}
				for i := int64(0); i < count; i++ {
					s := x0[0][i] + x0[1][i]
					want := s * math.Ldexp(1, k-1)
					if got := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])); got != want {
						if wrong < 5 {
							t.Errorf("rank %d element %d: got %g, want %g", r, i, got, want)
						}
						wrong++
					}
				}
			}
			st := comms[0].Stats().Executor
			fmt.Printf("PERSISTENT count=%d schedule=%s calls=%d wrong=%d queued=%d fallback=%d starts=%d\n",
				count, comms[0].LastCall().Name, k, wrong, st.Resident.Queued, st.Resident.Fallback, st.Resident.Starts)
		})
	}
	// Buffers that move: calls alternate between the two halves of one
	// allocation (each a rebased launch of the other's prepared state,
	// device.Rebaser, which the queue item gives its own buffers).
	t.Run("moving", func(t *testing.T) {
		const count, calls = 256, 300
		bufs, x0 := float64Bufs(t, be, n, 2*count, func(r, i int64) float64 { return float64((r*7+i*5)%13 - 6) })
		if err := onEach(n, func(r int) error {
			for i := range calls {
				off := device.Ptr(8 * count * (i % 2))
				if err := comms[r].AllReduce(bufs[r]+off, bufs[r]+off, count, theseus.Float64, theseus.Sum, streams[r][0]); err != nil {
					return err
				}
			}
			return streams[r][0].Synchronize()
		}); err != nil {
			t.Fatal(err)
		}
		wrong := 0
		for r := range bufs {
			b := make([]byte, 16*count)
			if err := be.Download(b, bufs[r]); err != nil {
				t.Fatal(err)
			}
			for i := int64(0); i < 2*count; i++ {
				want := (x0[0][i] + x0[1][i]) * math.Ldexp(1, calls/2-1)
				if got := math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])); got != want {
					if wrong < 5 {
						t.Errorf("rank %d element %d: got %g, want %g", r, i, got, want)
					}
					wrong++
				}
			}
		}
		st := comms[0].Stats().Executor
		fmt.Printf("PERSISTENT moving buffers: calls=%d wrong=%d queued=%d rebases=%d\n", calls, wrong, st.Resident.Queued, st.L3Rebases)
	})
	for r, c := range comms {
		sms := cuda.ResidentSMs(c.Internal().Resident())
		for dt, list := range sms {
			fmt.Printf("PERSISTENT rank=%d dtype=%v blocks=%d sms=%v\n", r, dt, len(list), list)
		}
		if len(sms[ir.Float64]) == 0 {
			t.Errorf("rank %d: no resident kernel for float64 ran (%v)", r, sms)
		}
	}
}

func toStreams(ss [][]*cuda.Stream, i int) []*cuda.Stream {
	out := make([]*cuda.Stream, len(ss))
	for r := range ss {
		out[r] = ss[r][i]
	}
	return out
}
