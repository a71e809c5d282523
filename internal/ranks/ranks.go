// Package ranks holds two helpers over a communicator's ranks: Each runs
// one function per rank concurrently, as the tests that play every rank of
// a communicator in one process do (each rank's calls block until its
// peers make theirs, so the ranks must run at once), and Format writes a
// list of ranks compactly for error messages.
package ranks

import (
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Each runs f(r) for every rank r in [0, n) concurrently, waits for all of
// them, and returns their results indexed by rank.
func Each[T any](n int, f func(r int) T) []T {
	out := make([]T, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r] = f(r)
		}()
	}
	wg.Wait()
	return out
}

// Format writes the ranks rs (any order, duplicates allowed) for a
// message: ascending, runs of three or more consecutive ranks as first-last
// ("0 2 5-1999"), at most 16 items, then how many ranks the rest holds
// ("... and 40 more").
func Format(rs []int) string {
	s := slices.Compact(slices.Sorted(slices.Values(rs)))
	var b strings.Builder
	items := 0
	for i := 0; i < len(s); {
		if items >= 16 {
			b.WriteString(" ... and " + strconv.Itoa(len(s)-i) + " more")
			break
		}
		j := i
		for j+1 < len(s) && s[j+1] == s[j]+1 {
			j++
		}
		if j-i < 2 {
			j = i // a run of one or two: one item each
		}
		if items > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(s[i]))
		if j > i {
			b.WriteString("-" + strconv.Itoa(s[j]))
		}
		items++
		i = j + 1
	}
	return b.String()
}
