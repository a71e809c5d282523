package ranks

import (
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEach(t *testing.T) {
	// Every rank waits for all the others: Each must run them at once.
	const n = 8
	var arrived sync.WaitGroup
	arrived.Add(n)
	got := Each(n, func(r int) int {
		arrived.Done()
		arrived.Wait()
		return r * r
	})
	if diff := cmp.Diff([]int{0, 1, 4, 9, 16, 25, 36, 49}, got); diff != "" {
		t.Errorf("Each (-want +got):\n%s", diff)
	}
	if got := Each(0, func(int) int { return 1 }); len(got) != 0 {
		t.Errorf("Each(0) = %v", got)
	}
}
