//go:build linux

package theseus

import (
	"testing"
	"time"
)

// TestMatrixInProcess runs the collective matrix with 4 ranks as goroutines
// (the representative subset; -theseus.full for every combination).
func TestMatrixInProcess(t *testing.T) {
	const n = 4
	comms, _ := localComms(t, n, nil)
	cases := matrixCases(n, *fullMatrix)
	start := time.Now()
	res := onEach(comms, func(c *Comm) rankResult { return runCases(c, cases) })
	var checked, wrong int64
	for r, x := range res {
		if x.Err != nil {
			t.Errorf("rank %d: %v", r, x.Err)
		}
		checked += x.Checked
		wrong += x.Wrong
	}
	t.Logf("%d cases on %d ranks in %v: %d elements checked, #wrong = %d; schedules (rank 0): %v",
		len(cases), n, time.Since(start).Round(time.Millisecond), checked, wrong, res[0].Schedules)
	if wrong != 0 {
		t.Fatalf("#wrong = %d", wrong)
	}
}
