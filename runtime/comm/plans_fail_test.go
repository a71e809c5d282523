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

// TestPlanFailedLaunchSameAsFullPath: a repeat whose launch from its plan
// fails without breaking the communicator (the caller closed its stream:
// not sticky) reports the same error, counters (sameCounters) and LastCall
// as on the full path, and so do the calls after it. (A review found
// LastCall().Launch 0 after the failure on the full path and the previous
// counter on the repeat path.)
func TestPlanFailedLaunchSameAsFullPath(t *testing.T) {
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
					forgetPlans(c)
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
	for r := range n {
		for i := range steps {
			full[r][i].Stats, fast[r][i].Stats = sameCounters(full[r][i].Stats), sameCounters(fast[r][i].Stats)
			if d := cmp.Diff(full[r][i], fast[r][i], cmpopts.IgnoreFields(executor.Migration{}, "Elapsed")); d != "" {
				t.Errorf("rank %d step %d: differs (-full path +from plans):\n%s", r, i, d)
			}
		}
	}
}
