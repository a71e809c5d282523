package cuda_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// TestShiftedBuffers: 2-rank float32 allreduces whose buffers move by one
// message per call within their allocations, as nccl-tests moves them:
// eager calls at 64 positions (every one after the first an executor L3
// rebase of the shape's first entry: no Prepare), then a CUDA graph that
// captures calls at 16 further positions (rebased during the capture) and
// is replayed. Every output of every call is checked. Prints "SHIFT ...
// wrong=0" per phase.
func TestShiftedBuffers(t *testing.T) {
	gputest.Require(t)
	const n, count, eagerPos, graphPos = 2, 64, 64, 16
	comms, streams, be := localComms(t, n)
	bytes := int64(count * 4)
	total := int64(eagerPos + graphPos)
	send, recv := make([]device.Ptr, n), make([]device.Ptr, n)
	for r := range n {
		var err error
		if send[r], err = be.Alloc(bytes * total); err != nil {
			t.Fatal(err)
		}
		if recv[r], err = be.Alloc(bytes * total); err != nil {
			t.Fatal(err)
		}
		in := make([]byte, bytes*total)
		for k := range total * count {
			binary.LittleEndian.PutUint32(in[4*k:], math.Float32bits(float32(r+1)*float32(k%1000)))
		}
		if err := be.Upload(send[r], in); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Free(send[r]); be.Free(recv[r]) })
	}
	at := func(r int, k int64) error {
		off := device.Ptr(k * bytes)
		return comms[r].AllReduce(send[r]+off, recv[r]+off, count, theseus.Float32, theseus.Sum, streams[r])
	}
	check := func(phase string, lo, hi int64) {
		t.Helper()
		wrong := 0
		for r := range n {
			out := make([]byte, bytes*total)
			if err := be.Download(out, recv[r]); err != nil {
				t.Fatal(err)
			}
			for k := lo * count; k < hi*count; k++ {
				want := 3 * float32(k%1000) // rank 0's x + rank 1's 2x
				if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*k:])); got != want {
					if wrong < 5 {
						t.Errorf("%s: rank %d element %d: got %g, want %g", phase, r, k, got, want)
					}
					wrong++
				}
			}
		}
		fmt.Printf("SHIFT %s positions=%d wrong=%d schedule=%s rebases=%d setups=%d\n", phase, hi-lo, wrong,
			comms[0].LastCall().Name, comms[0].Stats().Executor.L3Rebases, comms[0].Stats().Executor.L3Setups)
	}
	if err := onEach(n, func(r int) error {
		for k := range int64(eagerPos) {
			if err := at(r, k); err != nil {
				return err
			}
		}
		return streams[r].Synchronize()
	}); err != nil {
		t.Fatal(err)
	}
	check("eager", 0, eagerPos)
	if st := comms[0].Stats().Executor; st.L3Rebases < eagerPos-1 {
		t.Errorf("%d L3 rebases for %d positions of one shape, want at least %d", st.L3Rebases, eagerPos, eagerPos-1)
	}
	execs := capture(t, streams, driver.CaptureModeThreadLocal, func(r int) error {
		for k := int64(eagerPos); k < total; k++ {
			if err := at(r, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err := replay(streams, execs, 3); err != nil {
		t.Fatal(err)
	}
	check("graph", eagerPos, total)
}
