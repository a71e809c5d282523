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

func TestFormat(t *testing.T) {
	many := make([]int, 1999)
	for i := range many {
		many[i] = 1999 - i
	}
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, ""},
		{[]int{3}, "3"},
		{[]int{1, 2}, "1 2"},
		{[]int{2, 0, 1, 1, 5}, "0-2 5"},
		{many, "1-1999"},
		{[]int{0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}, "0 2 4 6 8 10 12 14 16 18 20 22 24 26 28 30 ... and 2 more"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
