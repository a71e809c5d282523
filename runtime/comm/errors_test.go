package comm

import (
	"errors"
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/runtime/executor"
)

// TestLocalFindingsOutlivePeerLoss: what a rank found by itself and every
// rank finds alike (a schedule that does not fit the job's nodes, a
// refused graph capture) keeps its code when a peer has been lost
// meanwhile (the first rank to fail may exit before the others check:
// fresh user f25); anything else is the lost peer.
func TestLocalFindingsOutlivePeerLoss(t *testing.T) {
	c := &Comm{rank: 1, n: 2, lost: []int{0}}
	for _, tc := range []struct {
		err  error
		want Code
	}{
		{fmt.Errorf("l1: %w: schedule x channel 0 between nodes", executor.ErrCrossNode), InvalidUsage},
		{fmt.Errorf("launch: %w", executor.ErrCapture), InvalidUsage},
		{errors.New("a launch failed"), RemoteError},
	} {
		e := c.wrapErr("allreduce", tc.err, false)
		if e.Code != tc.want {
			t.Errorf("%v with rank 0 lost: %v, want %v", tc.err, e, tc.want)
		}
	}
}
