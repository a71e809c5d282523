package main

import (
	"image/color"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
)

// TestBusFactor pins nccl-tests' bus-bandwidth factors
// (doc/PERFORMANCE.md): allreduce 2(n−1)/n; allgather, reducescatter,
// alltoall, gather, scatter (n−1)/n; broadcast and reduce 1.
func TestBusFactor(t *testing.T) {
	for _, c := range []struct {
		coll ir.Collective
		n    int
		want float64
	}{
		{ir.AllReduce, 4, 1.5}, {ir.AllReduce, 8, 1.75}, {ir.AllReduce, 1, 0}, {ir.AllReduce, 2, 1},
		{ir.AllGather, 4, 0.75}, {ir.ReduceScatter, 8, 0.875}, {ir.AllToAll, 4, 0.75},
		{ir.Gather, 2, 0.5}, {ir.Scatter, 4, 0.75},
		{ir.Broadcast, 4, 1}, {ir.Reduce, 8, 1},
	} {
		if got := busFactor(c.coll, c.n); got != c.want {
			t.Errorf("busFactor(%s, %d) = %v, want %v", c.coll, c.n, got, c.want)
		}
	}
}

// TestBandwidth checks algbw and busbw against values worked out by hand:
// algbw is the bytes of one rank's larger buffer over the time.
func TestBandwidth(t *testing.T) {
	for _, c := range []struct {
		coll         ir.Collective
		count        int64
		es, n        int
		sec          float64
		algbw, busbw float64
	}{
		// 1 GB in 1 s: 1 GB/s; allreduce busbw ×1.5 at 4 ranks.
		{ir.AllReduce, 250_000_000, 4, 4, 1, 1, 1.5},
		// allgather: count is per rank, the buffer n·count.
		{ir.AllGather, 250_000_000, 4, 4, 2, 2, 1.5},
		{ir.ReduceScatter, 125_000_000, 8, 8, 1, 8, 7},
		{ir.AllToAll, 1000, 4, 4, 1e-6, 16, 12},
		{ir.Gather, 1000, 2, 2, 1e-6, 4, 2},
		{ir.Scatter, 1000, 2, 4, 1e-6, 8, 6},
		{ir.Broadcast, 1000, 1, 4, 1e-6, 1, 1},
		{ir.Reduce, 500, 8, 8, 1e-6, 4, 4},
		{ir.AllReduce, 1000, 4, 4, 0, 0, 0},
	} {
		a, b := bandwidth(c.coll, c.count, c.es, c.n, c.sec)
		if math.Abs(a-c.algbw) > 1e-9 || math.Abs(b-c.busbw) > 1e-9 {
			t.Errorf("bandwidth(%s, count %d, %d B, %d ranks, %v s) = %v, %v; want %v, %v", c.coll, c.count, c.es, c.n, c.sec, a, b, c.algbw, c.busbw)
		}
	}
}

// TestShape checks counts and sizes against nccl-tests' GetCollByteCount.
func TestShape(t *testing.T) {
	for _, c := range []struct {
		coll  ir.Collective
		bytes int64
		es, n int
		want  shape
	}{
		{ir.AllReduce, 8, 4, 4, shape{2, 8}},
		{ir.AllReduce, 7, 4, 4, shape{1, 4}},
		{ir.Broadcast, 1 << 20, 2, 8, shape{1 << 19, 1 << 20}},
		// allgather 8 B on 4 ranks: 2 elements cannot give each rank a
		// multiple of 4: count 0 (nccl-tests prints size 0).
		{ir.AllGather, 8, 4, 4, shape{0, 0}},
		{ir.AllGather, 64, 4, 4, shape{4, 64}},
		{ir.AllGather, 100, 4, 4, shape{4, 64}},
		{ir.ReduceScatter, 1 << 20, 4, 4, shape{1 << 16, 1 << 20}},
		{ir.Gather, 1 << 20, 4, 8, shape{1 << 15, 1 << 20}},
		// alltoall: per-rank blocks of whole 16-byte units.
		{ir.AllToAll, 1 << 20, 4, 4, shape{1 << 16, 1 << 20}},
		{ir.AllToAll, 100, 4, 4, shape{4, 64}},
		{ir.AllToAll, 100, 1, 3, shape{32, 96}},
		{ir.AllToAll, 100, 8, 3, shape{4, 96}},
	} {
		if d := cmp.Diff(c.want, shapeOf(c.coll, c.bytes, c.es, c.n), cmp.AllowUnexported(shape{})); d != "" {
			t.Errorf("shapeOf(%s, %d, %d, %d) (-want +got):\n%s", c.coll, c.bytes, c.es, c.n, d)
		}
	}
}

// TestPlotAxesAndColors: the plot gives each of the eight collectives its
// own color (allreduce and scatter shared plotutil's red) and labels the
// log2 size axis as compare does: 16, 256, 4K, 64K, 1M, 16M from 8 B to
// 64 MiB.
func TestPlotAxesAndColors(t *testing.T) {
	seen := map[color.Color]int{}
	for i := range 8 {
		if j, dup := seen[seriesColor(i)]; dup {
			t.Errorf("series %d and %d share a color", j, i)
		}
		seen[seriesColor(i)] = i
	}
	var labels []string
	for _, tk := range (log2Ticks{}).Ticks(8, 64<<20) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if got, want := strings.Join(labels, " "), "16 256 4K 64K 1M 16M"; got != want {
		t.Errorf("size axis labels %q, want %q", got, want)
	}
}
