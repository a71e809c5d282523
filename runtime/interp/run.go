package interp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// Run runs one launch of every rank in this process: physical rank p runs
// the table of its logical rank (root rotation, ir.md §3) with the memory
// w.RankMem(req, p). tables[r] is logical rank r's table and must be the
// tables w was made for. Run clears the world's abort word first; an error
// on any rank aborts all of them.
//
// Errors: the ranks' errors (see RunRank), joined with the root causes
// first and at most 16 in all.
func Run(ctx context.Context, tables []*optable.Table, req Request, w *World) error {
	if w == nil {
		return errors.New("interp: nil world")
	}
	if len(tables) != len(w.tables) {
		return fmt.Errorf("interp: %d tables for a world of %d ranks", len(tables), len(w.tables))
	}
	for r, t := range tables {
		if t != w.tables[r] {
			return fmt.Errorf("interp: table %d is not the one the world was made for", r)
		}
	}
	n := len(tables)
	// The request is the same for every rank: check it once, so that a bad
	// one gives one error rather than n.
	if _, err := resolve(tables[w.logical(req, 0)], 0, req); err != nil {
		return err
	}
	mems := make([]*RankMem, n)
	for p := range n {
		m, err := w.RankMem(req, p)
		if err != nil {
			return err
		}
		mems[p] = m
	}
	atomic.StoreUint64(&w.abort, 0)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for p := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[p] = RunRank(ctx, tables[w.logical(req, p)], p, req, mems[p])
		}()
	}
	wg.Wait()
	var f launch.Failures
	for _, e := range errs {
		if e == nil {
			continue
		}
		for _, one := range unjoin(e) {
			f.Add(one)
		}
	}
	return f.Join()
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
