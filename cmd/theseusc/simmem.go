package main

import (
	"math"
	"slices"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// memoryLimit is the default bound, in bytes, on what one simulated case
// allocates: interp.MaxAllocBytes, lowered to half the process's
// address-space limit (ulimit -v; the garbage collector needs room beside
// the live buffers) and to three quarters of physical memory where they
// are known. why names the bound that applies, for the error message.
func memoryLimit() (limit int64, why string) {
	return cli.MemoryLimit(interp.MaxAllocBytes, "the interpreter's limit (runtime/interp.MaxAllocBytes)")
}

// addSat adds non-negative a and b, saturating at MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// caseBytes is what one simulated case allocates, in bytes
// (interp.Simulate's runCase): every rank's buffers (interp.NewBuffers:
// input, output and scratch, one allocation for both in place), a copy of
// every rank's input, and one rank's expected output. ok is false when the
// request cannot be sized (the case then reports its own error).
func caseBytes(tables []*optable.Table, req interp.Request) (n int64, ok bool) {
	var maxOut int64
	for p := range tables {
		// Under root rotation physical rank p runs its logical rank's table
		// (interp.World.AllocBuffers).
		t := tables[p]
		if t.Collective.Rooted() {
			pl := ir.Placement{Collective: t.Collective, NRanks: t.NRanks, ChunksPerBlock: t.ChunksPerBlock,
				ProgRoot: t.Root, Root: req.Root, InPlace: req.InPlace}
			l := pl.Logical(p)
			if l < 0 || l >= len(tables) {
				return 0, false
			}
			t = tables[l]
		}
		s, err := launch.BufferSizes(t, p, req)
		if err != nil {
			return 0, false
		}
		bufs := addSat(s.Input, s.Output)
		if req.InPlace {
			bufs = max(s.Input, s.Output)
		}
		n = addSat(n, addSat(addSat(bufs, s.Scratch), s.Input))
		maxOut = max(maxOut, s.Output)
	}
	return addSat(n, maxOut), true
}

// checkSimMemory rejects, before anything is allocated, a case matrix one
// of whose cases needs more than limit bytes: a Go program cannot recover
// from running out of memory, so sim would die with a fatal error and a
// goroutine dump instead of an error. The error is a usage error naming
// the case, its size and the limit.
func checkSimMemory(p *ir.Program, o interp.SimOptions, limit int64, why string) error {
	tables, err := optable.LowerAll(p)
	if err != nil {
		return nil // Simulate reports it
	}
	dts := o.DataTypes
	if dts == nil {
		dts = ir.AllDataTypes()
	}
	sl := o.Slices
	switch {
	case p.Protocol == ir.LL:
		sl = []int64{1}
	case sl == nil:
		sl = []int64{1, 3}
	}
	counts := o.Counts
	if counts == nil {
		counts = interp.DefaultCounts(p, slices.Max(sl))
	}
	roots := []int{0}
	if p.Collective.Rooted() {
		if roots = o.Roots; roots == nil {
			roots = []int{0}
		}
	}
	var arrs []bool
	if p.OutOfPlace {
		arrs = append(arrs, false)
	}
	if p.InPlace {
		arrs = append(arrs, true)
	}
	for _, dt := range dts {
		for _, count := range counts {
			for _, s := range sl {
				for _, root := range roots {
					for _, inPlace := range arrs {
						req := interp.Request{Count: count, DataType: dt, Root: root, InPlace: inPlace, Slices: s, Launch: 1}
						n, ok := caseBytes(tables, req)
						if !ok && count > 0 {
							// The sizes do not fit in 64 bits (or the layout is
							// otherwise impossible): refuse it up front too.
							return cli.Usagef("a case of --count %d %s cannot be laid out: its buffer sizes overflow; lower --count", count, dt)
						}
						if ok && n > limit {
							arr := "out-of-place"
							if inPlace {
								arr = "in-place"
							}
							return cli.Usagef("a case of --count %d %s %s needs %d bytes of buffers over %d ranks, more than the limit of %d bytes, %s; lower --count or set --max-memory",
								count, dt, arr, n, p.NRanks, limit, why)
						}
					}
				}
			}
		}
	}
	return nil
}
