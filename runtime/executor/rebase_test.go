//go:build linux

package executor

import (
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// shifted runs c with s on every rank for each shift k in shifts: the
// buffers at k messages into one allocation per buffer and rank (as
// nccl-tests moves them every iteration), out of place, and checks every
// rank's output.
func (w *world) shifted(s *Schedule, c devicetest.Case, shifts []int) {
	w.t.Helper()
	msg := c.Count * int64(c.DataType.Size())
	top := 0
	for _, k := range shifts {
		top = max(top, k+1)
	}
	in, out := make([]device.Ptr, w.n), make([]device.Ptr, w.n)
	for r := range w.n {
		for _, p := range []*device.Ptr{&in[r], &out[r]} {
			var err error
			if *p, err = w.dev.Alloc(int64(top) * msg * int64(w.n)); err != nil {
				w.t.Fatal(err)
			}
			w.allocs = append(w.allocs, *p)
		}
	}
	for i, k := range shifts {
		w.must(w.each(func(r int) error {
			inB, outB := c.Bytes(r)
			send, recv := in[r]+device.Ptr(int64(k)*inB), out[r]+device.Ptr(int64(k)*outB)
			src, _ := host.Bytes(send, inB)
			copy(src, c.Input(r))
			dst, _ := host.Bytes(recv, outB)
			clear(dst)
			req := &Request{Coll: c.Coll, Send: send, Recv: recv, Count: c.Count, DataType: c.DataType, RedOp: c.RedOp, PacketType: ir.LL16}
			if err := w.call(r, req, s, w.st[r]); err != nil {
				return err
			}
			if err := w.st[r].Synchronize(); err != nil {
				return err
			}
			if wr := devicetest.Wrong(dst, c.Expected(r), c.DataType.Size()); wr != 0 {
				return fmt.Errorf("call %d (shift %d): %d elements wrong", i, k, wr)
			}
			return nil
		}))
	}
}

// A request shape met again at other buffers in known allocations (the
// buffers shifted by one message per call) is set up from the shape's
// first entry (device.Rebaser): one Prepare per shape, a rebase per new
// pair of buffers, hits after that, every result right; with plans as the
// communicator uses them, the same. A schedule that reaches peers'
// buffers prepares every new pair in full (the peers' buffers move too).
func TestRebaseShiftedBuffers(t *testing.T) {
	const n = 2
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 96, NRanks: n, Seed: 7}
	shifts := []int{0, 1, 2, 3, 1, 0, 3}
	for _, tc := range []struct {
		algo     string
		proto    ir.Protocol
		plans    bool
		setups   uint64
		rebases  uint64
		l2Setups uint64
	}{
		{"ring", ir.LL, false, 1, 3, 0},
		{"ring", ir.Simple, true, 1, 3, 0},
		{"oneshot", ir.LL, true, 1, 3, 0},
		{"oneshot", ir.Simple, false, 4, 0, 1}, // reaches the peer's input: no rebase
	} {
		t.Run(fmt.Sprintf("%s/%v/plans=%v", tc.algo, tc.proto, tc.plans), func(t *testing.T) {
			s := compile(t, 0, tc.algo, gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: tc.proto})
			w := newWorld(t, n, Config{})
			if tc.plans {
				w.usePlans()
			}
			w.shifted(s, c, shifts)
			for r := range n {
				st := w.ex[r].Stats()
				if st.L3Setups != tc.setups || st.L3Rebases != tc.rebases || st.L2Setups != tc.l2Setups {
					t.Errorf("rank %d: L3 setups %d, rebases %d, L2 setups %d; want %d, %d, %d",
						r, st.L3Setups, st.L3Rebases, st.L2Setups, tc.setups, tc.rebases, tc.l2Setups)
				}
				if want := uint64(len(shifts)); st.Launches != want {
					t.Errorf("rank %d: %d launches, want %d", r, st.Launches, want)
				}
				// A rebased entry lays scratch out as its base: a repeat of
				// the shape at new buffers is not fenced unless every launch
				// is (LL).
				if tc.proto == ir.Simple && st.Fences != 0 {
					t.Errorf("rank %d: %d fences, want 0", r, st.Fences)
				}
			}
		})
	}
}

// Scratch growth drops a shape's entries, rebased ones with their base;
// the shape at new buffers afterwards is prepared in full again, then
// rebased from that.
func TestRebaseAfterGrowth(t *testing.T) {
	const n = 2
	s := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n, Protocol: ir.LL})
	w := newWorld(t, n, Config{InitialScratch: 4096})
	small := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 16, NRanks: n, Seed: 1}
	w.shifted(s, small, []int{0, 1})
	big := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 4096, NRanks: n, Seed: 2}
	w.shifted(s, big, []int{0}) // grows the scratch: every entry dropped
	w.shifted(s, small, []int{1, 2})
	for r := range n {
		st := w.ex[r].Stats()
		if st.Growths == 0 {
			t.Fatalf("rank %d: the scratch did not grow", r)
		}
		// small: setup, rebase; big: setup; small again: setup, rebase.
		if st.L3Setups != 3 || st.L3Rebases != 2 {
			t.Errorf("rank %d: L3 setups %d, rebases %d; want 3, 2", r, st.L3Setups, st.L3Rebases)
		}
	}
}
