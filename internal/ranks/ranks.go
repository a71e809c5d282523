// Package ranks runs one function per rank concurrently, as the tests that
// play every rank of a communicator in one process do (each rank's calls
// block until its peers make theirs, so the ranks must run at once).
package ranks

import "sync"

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
