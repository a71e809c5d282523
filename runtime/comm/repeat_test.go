//go:build linux

package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// A repeat of the last call takes Collective's fast path (the selector's
// Repeat, the executor's Repeat), and that changes nothing observable:
// over a sequence of repeats, other shapes, a count of 0, another stream,
// the communicator's own stream, in place, and epochs every third request,
// every call's result, LastCall and every counter (the communicator's,
// the selector's, the executor's) are the same as when every call takes
// the full path.
func TestRepeatSameAsFullPath(t *testing.T) {
	const n = 2
	type step struct {
		count   int64
		stream  int // 0: the communicator's own (nil), 1 or 2: the rank's streams
		inPlace bool
	}
	steps := []step{{64, 1, false}, {64, 1, false}, {64, 1, false}, {64, 1, false}, {128, 1, false}, {128, 1, false},
		{64, 1, false}, {64, 1, false}, {0, 1, false}, {64, 1, false}, {64, 1, false}, {64, 2, false}, {64, 2, false},
		{64, 0, false}, {64, 0, false}, {64, 1, false}, {64, 1, true}, {64, 1, true}, {64, 1, true}, {64, 1, false},
		{64, 1, false}, {64, 1, false}, {64, 1, false}, {64, 1, false}}
	type seen struct {
		Stats Stats
		Last  CallInfo
	}
	run := func(full bool) ([][]seen, uint64) {
		const bytes = 128 * 4
		comms, streams, bufs := repeatWorld(t, n, bytes)
		out := make([][]seen, n)
		for i, s := range steps {
			for r, err := range onEach(n, func(r int) error {
				c := comms[r]
				send, recv := bufs[r], bufs[r]+bytes
				if s.inPlace {
					recv = send
				}
				if err := fillRank(send, s.count, r); err != nil {
					return err
				}
				if full {
					c.hot.ok = false
				}
				call := &Call{Coll: ir.AllReduce, Send: send, Recv: recv, Count: s.count, DataType: ir.Float32, RedOp: ir.Sum,
					Stream: streams[r][s.stream]}
				if err := c.Collective(context.Background(), call); err != nil {
					return err
				}
				if call.Stream != nil {
					if err := call.Stream.Synchronize(); err != nil {
						return err
					}
				}
				if err := checkSum(recv, s.count, n); err != nil {
					return err
				}
				out[r] = append(out[r], seen{c.Stats(), c.LastCall()})
				return nil
			}) {
				if err != nil {
					t.Fatalf("step %d rank %d: %v", i, r, err)
				}
			}
		}
		return out, comms[0].repeats
	}
	full, fullHot := run(true)
	fast, fastHot := run(false)
	t.Logf("rank 0: %d of %d calls took the fast path", fastHot, len(steps))
	if fastHot < 5 || fullHot != 0 {
		t.Errorf("rank 0 took the fast path %d times (%d when told not to)", fastHot, fullHot)
	}
	ignore := cmpopts.IgnoreFields(executor.Migration{}, "Elapsed")
	for r := range n {
		for i := range steps {
			full[r][i].Stats.Selector.EpochTime, fast[r][i].Stats.Selector.EpochTime = 0, 0
			if d := cmp.Diff(full[r][i], fast[r][i], ignore); d != "" {
				t.Errorf("rank %d step %d: differs (-full path +fast path):\n%s", r, i, d)
			}
		}
	}
}

// repeatWorld is n in-process ranks on the host backend with a selector
// epoch every third request, two streams per rank (streams[r][1] and [2];
// [0] is nil: the communicator's own) and 2*bytes of memory per rank.
func repeatWorld(t *testing.T, n int, bytes int64) ([]*Comm, [][3]device.Stream, []device.Ptr) {
	t.Helper()
	return repeatWorldPeriod(t, n, bytes, 3)
}

// repeatWorldPeriod is repeatWorld with a selector epoch every period
// requests.
func repeatWorldPeriod(t *testing.T, n int, bytes int64, period int) ([]*Comm, [][3]device.Stream, []device.Ptr) {
	t.Helper()
	comms := localCommsWith(t, n, 10*time.Second, "", period)
	streams := make([][3]device.Stream, n)
	bufs := make([]device.Ptr, n)
	for r, c := range comms {
		for i := 1; i < 3; i++ {
			st, err := c.Backend().NewStream()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			streams[r][i] = st
		}
		p, err := c.Backend().Alloc(2 * bytes)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = p
	}
	return comms, streams, bufs
}

// fillRank writes rank+1+i (float32) to element i of p.
func fillRank(p device.Ptr, count int64, rank int) error {
	b, err := host.Bytes(p, count*4)
	if err != nil {
		return err
	}
	for i := range count {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(rank+1)+float32(i)))
	}
	return nil
}

// checkSum checks that element i of p is the sum over n ranks of fillRank's.
func checkSum(p device.Ptr, count int64, n int) error {
	b, err := host.Bytes(p, count*4)
	if err != nil {
		return err
	}
	for i := range count {
		want := float32(n*(n+1)/2) + float32(n)*float32(i)
		if got := math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])); got != want {
			return fmt.Errorf("element %d: %v, want %v", i, got, want)
		}
	}
	return nil
}
