package launch

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
)

// InPlaceOffsets is NCCL's in-place arrangement (ir.md §3) for every
// collective, at the root and elsewhere.
func TestInPlaceOffsets(t *testing.T) {
	type out struct {
		In, Out int64
		OK      bool
	}
	const block = 100
	for _, c := range []struct {
		coll       ir.Collective
		rank, root int
		want       out
	}{
		{ir.AllReduce, 2, 0, out{0, 0, true}},
		{ir.AllToAll, 2, 0, out{0, 0, true}},
		{ir.SendRecv, 1, 0, out{0, 0, true}},
		{ir.Broadcast, 1, 1, out{0, 0, true}},
		{ir.Broadcast, 2, 1, out{0, 0, false}},
		{ir.Reduce, 0, 0, out{0, 0, true}},
		{ir.Reduce, 3, 0, out{0, 0, false}},
		{ir.AllGather, 3, 0, out{300, 0, true}},
		{ir.Gather, 2, 2, out{200, 0, true}},
		{ir.Gather, 1, 2, out{100, 0, false}},
		{ir.ReduceScatter, 3, 0, out{0, 300, true}},
		{ir.Scatter, 1, 1, out{0, 100, true}},
		{ir.Scatter, 2, 1, out{0, 200, false}},
		{ir.Custom, 0, 0, out{0, 0, false}},
	} {
		i, o, ok := InPlaceOffsets(c.coll, c.rank, c.root, block)
		if d := cmp.Diff(c.want, out{i, o, ok}); d != "" {
			t.Errorf("%v rank %d root %d (-want +got):\n%s", c.coll, c.rank, c.root, d)
		}
	}
}

// Slices: the request's when set, 1 for LL, else ir.SlicesFor with the
// table's slice size, or the caller's when the table sets none.
func TestSlices(t *testing.T) {
	simple := &optable.Table{Protocol: ir.Simple, ChunksPerBlock: 2}
	ll := &optable.Table{Protocol: ir.LL, ChunksPerBlock: 2}
	req := Request{Count: 1 << 20, DataType: ir.Float32}
	if got := Slices(ll, req, 4096); got != 1 {
		t.Errorf("LL: %d slices, want 1", got)
	}
	if got, want := Slices(simple, req, 64<<10), ir.SlicesFor(req.Count, 2, ir.Float32, 64<<10); got != want {
		t.Errorf("Simple with the caller's slice size: %d, want %d", got, want)
	}
	tabled := *simple
	tabled.SliceBytes = 1 << 20
	if got, want := Slices(&tabled, req, 64<<10), ir.SlicesFor(req.Count, 2, ir.Float32, 1<<20); got != want {
		t.Errorf("the table's slice size: %d, want %d", got, want)
	}
	req.Slices = 3
	if got := Slices(simple, req, 64<<10); got != 3 {
		t.Errorf("the request's slices: %d, want 3", got)
	}
}

// Resolve refuses what a launch cannot run, with an *Error naming the
// rank, and LLFlag is never 0 and differs between launches one and two
// apart.
func TestResolveAndFlag(t *testing.T) {
	var e *Error
	if _, err := Resolve(nil, 0, Request{Launch: 1}); !errors.As(err, &e) || e.Rank != 0 || e.TB != -1 {
		t.Errorf("nil table: %v", err)
	}
	for _, l := range []uint64{1, 2, 0xFFFFFFFE, 0xFFFFFFFF, 1 << 40} {
		if f := LLFlag(l); f == 0 || f == LLFlag(l+1) || f == LLFlag(l+2) {
			t.Errorf("LLFlag(%#x) = %#x; next %#x, after %#x", l, f, LLFlag(l+1), LLFlag(l+2))
		}
	}
}
