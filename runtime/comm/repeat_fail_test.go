//go:build linux

package comm

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/executor"
)

// TestRepeatFailedLaunchSameAsFullPath: a repeat whose launch fails
// without breaking the communicator (the caller closed its stream: not
// sticky) reports the same error, counters and LastCall on the fast path as
// on the full path, and so do the calls after it. (A review found
// LastCall().Launch 0 after the failure on the full path and the previous
// counter on the fast path.)
func TestRepeatFailedLaunchSameAsFullPath(t *testing.T) {
	const n = 2
	type step struct {
		stream int  // 1 or 2: the rank's streams
		close  bool // close stream 1 before the call
	}
	steps := []step{{1, false}, {1, false}, {1, false}, {1, false}, {1, true}, {1, false}, {2, false}, {2, false}, {2, false}}
	type seen struct {
		Err   string
		Stats Stats
		Last  CallInfo
	}
	run := func(full bool) [][]seen {
		const bytes = 64 * 4
		comms, streams, bufs := repeatWorld(t, n, bytes)
		out := make([][]seen, n)
		for i, s := range steps {
			for r, err := range onEach(n, func(r int) error {
				c := comms[r]
				if s.close {
					streams[r][1].Close()
				}
				if full {
					c.hot.ok = false
				}
				call := &Call{Coll: ir.AllReduce, Send: bufs[r], Recv: bufs[r] + bytes, Count: 64, DataType: ir.Float32,
					RedOp: ir.Sum, Stream: streams[r][s.stream]}
				err := c.Collective(context.Background(), call)
				if err == nil {
					err = call.Stream.Synchronize()
				}
				msg := ""
				if err != nil {
					msg = fmt.Sprint(CodeOf(err))
				}
				out[r] = append(out[r], seen{msg, c.Stats(), c.LastCall()})
				return nil
			}) {
				if err != nil {
					t.Fatalf("step %d rank %d: %v", i, r, err)
				}
			}
		}
		return out
	}
	full := run(true)
	fast := run(false)
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
