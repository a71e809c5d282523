package ir_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
)

func TestNewLayoutExact(t *testing.T) {
	cases := []struct {
		count  int64
		dt     ir.DataType
		c, s   int64
		stride int64
	}{
		{0, ir.Float32, 4, 1, 0},
		{0, ir.Int8, 1, 1, 0},
		{1, ir.Float32, 4, 1, 4},       // ceil(1/4)=1 -> 4 floats (16 B)
		{1, ir.Int8, 1, 1, 16},         // one byte still takes a 16-byte piece
		{1, ir.Float64, 1, 1, 2},       //
		{7, ir.Int8, 2, 1, 16},         // ceil(7/2)=4 -> 16
		{7, ir.Float64, 2, 1, 4},       // ceil(7/2)=4, unit 2
		{7, ir.Float16, 1, 1, 8},       // unit 8
		{7, ir.Float32, 7, 1, 4},       // ceil(7/7)=1 -> 4
		{100, ir.Float32, 3, 2, 20},    // P=6, ceil(100/6)=17 -> 20
		{1000, ir.Bfloat16, 4, 1, 256}, // 250 -> 256
		{1024, ir.Float32, 4, 1, 256},  // divisible: exactly count/C
		{1024, ir.Float32, 4, 4, 64},
		{1 << 40, ir.Float64, 8, 1, 1 << 37},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d_%v_C%d_S%d", c.count, c.dt, c.c, c.s), func(t *testing.T) {
			l, err := ir.NewLayout(c.count, c.dt, c.c, c.s)
			if err != nil {
				t.Fatal(err)
			}
			want := ir.Layout{Count: c.count, ElemSize: int64(c.dt.Size()), ChunksPerBlock: c.c, Slices: c.s, Stride: c.stride}
			if d := cmp.Diff(want, l); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			if l.Unit() != 16/int64(c.dt.Size()) {
				t.Errorf("Unit = %d", l.Unit())
			}
		})
	}
}

// Every element size: 17 elements in one piece round up to the 16-byte unit.
func TestNewLayoutEveryType(t *testing.T) {
	want := map[ir.DataType]int64{
		ir.Int8: 32, ir.Uint8: 32, ir.Fp8E4M3: 32, ir.Fp8E5M2: 32,
		ir.Float16: 24, ir.Bfloat16: 24,
		ir.Int32: 20, ir.Uint32: 20, ir.Float32: 20,
		ir.Int64: 18, ir.Uint64: 18, ir.Float64: 18,
	}
	if len(want) != int(ir.NumDataTypes) {
		t.Fatalf("table covers %d of %d types", len(want), ir.NumDataTypes)
	}
	for _, dt := range ir.AllDataTypes() {
		l, err := ir.NewLayout(17, dt, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		if l.Stride != want[dt] || l.ElemSize != int64(dt.Size()) {
			t.Errorf("%v: stride %d elemsize %d, want %d %d", dt, l.Stride, l.ElemSize, want[dt], dt.Size())
		}
		if l.Stride*l.ElemSize%ir.Align != 0 {
			t.Errorf("%v: stride %d is not a multiple of 16 bytes", dt, l.Stride)
		}
	}
}

func TestNewLayoutErrors(t *testing.T) {
	cases := []struct {
		name  string
		count int64
		dt    ir.DataType
		c, s  int64
	}{
		{"negative count", -1, ir.Float32, 1, 1},
		{"zero chunks", 8, ir.Float32, 0, 1},
		{"negative chunks", 8, ir.Float32, -2, 1},
		{"zero slices", 8, ir.Float32, 1, 0},
		{"bad datatype", 8, ir.DataType(200), 1, 1},
		{"pieces overflow", 8, ir.Float32, 1 << 62, 4},
		{"bytes overflow", math.MaxInt64/8 + 1, ir.Float64, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l, err := ir.NewLayout(c.count, c.dt, c.c, c.s)
			if !errors.Is(err, ir.ErrLayout) {
				t.Errorf("NewLayout = %+v, %v; want ErrLayout", l, err)
			}
		})
	}
}

func TestNewLayoutHugeCount(t *testing.T) {
	for _, c := range []struct {
		count int64
		c     int64
	}{{math.MaxInt64, 1}, {math.MaxInt64, 2}, {math.MaxInt64 - 3, 1}} {
		l, err := ir.NewLayout(c.count, ir.Int8, c.c, 1)
		if err == nil && (l.Stride <= 0 || l.Stride%16 != 0) {
			t.Errorf("NewLayout(%d, int8, %d, 1) = stride %d, no error; want an ErrLayout or a valid stride", c.count, c.c, l.Stride)
		}
	}
}

func TestUserChunkHugePieces(t *testing.T) {
	l, err := ir.NewLayout(1, ir.Int8, 1<<61, 2)
	if err != nil {
		return // rejecting the geometry is also a fix
	}
	if st, en := l.UserChunk(0, 1); st != 1 || en != 1 {
		t.Errorf("UserChunk(0, 1) = [%d,%d), want [1,1)", st, en)
	}
}

type rng struct{ start, end int64 }

func TestUserChunkExact(t *testing.T) {
	cases := []struct {
		count int64
		dt    ir.DataType
		c, s  int64
		// want[s][k] for k over two blocks (2*C chunks)
		want [][]rng
	}{
		{100, ir.Float32, 3, 2, [][]rng{
			{{0, 20}, {20, 40}, {40, 60}, {100, 120}, {120, 140}, {140, 160}},
			{{60, 80}, {80, 100}, {100, 100}, {160, 180}, {180, 200}, {200, 200}},
		}},
		{7, ir.Int8, 2, 1, [][]rng{
			{{0, 7}, {7, 7}, {7, 14}, {14, 14}},
		}},
		{1, ir.Float32, 4, 1, [][]rng{
			{{0, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 2}, {2, 2}, {2, 2}, {2, 2}},
		}},
		{0, ir.Float16, 2, 1, [][]rng{
			{{0, 0}, {0, 0}, {0, 0}, {0, 0}},
		}},
		{33, ir.Float64, 2, 2, [][]rng{ // P=4, ceil(33/4)=9 -> 10
			{{0, 10}, {10, 20}, {33, 43}, {43, 53}},
			{{20, 30}, {30, 33}, {53, 63}, {63, 66}},
		}},
		{1024, ir.Float32, 4, 1, [][]rng{
			{{0, 256}, {256, 512}, {512, 768}, {768, 1024}, {1024, 1280}, {1280, 1536}, {1536, 1792}, {1792, 2048}},
		}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d_%v_C%d_S%d", c.count, c.dt, c.c, c.s), func(t *testing.T) {
			l, err := ir.NewLayout(c.count, c.dt, c.c, c.s)
			if err != nil {
				t.Fatal(err)
			}
			var got [][]rng
			for s := int64(0); s < c.s; s++ {
				var row []rng
				for k := int64(0); k < 2*c.c; k++ {
					a, b := l.UserChunk(k, s)
					row = append(row, rng{a, b})
				}
				got = append(got, row)
			}
			if d := cmp.Diff(c.want, got, cmp.AllowUnexported(rng{})); d != "" {
				t.Errorf("UserChunk (-want +got):\n%s", d)
			}
		})
	}
}

// TestUserChunkTiles checks the geometry's invariants over many shapes:
// the pieces of each block, in slice-major order, tile [b*count, (b+1)*count)
// exactly, each starts on a 16-byte boundary relative to its block, and none
// is longer than Stride.
func TestUserChunkTiles(t *testing.T) {
	counts := []int64{0, 1, 2, 7, 15, 16, 17, 31, 63, 64, 100, 255, 1000, 4097}
	for _, dt := range ir.AllDataTypes() {
		for _, count := range counts {
			for c := int64(1); c <= 5; c++ {
				for s := int64(1); s <= 3; s++ {
					l, err := ir.NewLayout(count, dt, c, s)
					if err != nil {
						t.Fatal(err)
					}
					for b := int64(0); b < 3; b++ {
						next := b * count
						for sl := int64(0); sl < s; sl++ {
							for j := int64(0); j < c; j++ {
								st, en := l.UserChunk(b*c+j, sl)
								if st != next || en < st || en-st > l.Stride || (st-b*count)*l.ElemSize%ir.Align != 0 && st != (b+1)*count {
									t.Fatalf("%v count %d C %d S %d: block %d slice %d chunk %d = [%d,%d), want start %d, len <= %d, aligned",
										dt, count, c, s, b, sl, j, st, en, next, l.Stride)
								}
								next = en
							}
						}
						if next != (b+1)*count {
							t.Fatalf("%v count %d C %d S %d: block %d ends at %d, want %d", dt, count, c, s, b, next, (b+1)*count)
						}
					}
				}
			}
		}
	}
}

func TestScratch(t *testing.T) {
	l, err := ir.NewLayout(100, ir.Float32, 3, 2) // stride 20
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{0, 20, 40, 60} {
		if got := l.ScratchChunk(int64(i)); got != want {
			t.Errorf("ScratchChunk(%d) = %d, want %d", i, got, want)
		}
	}
	if got := l.ScratchBytes(3, false); got != 3*20*4 {
		t.Errorf("ScratchBytes(3, data) = %d, want 240", got)
	}
	if got := l.ScratchBytes(3, true); got != 480 {
		t.Errorf("ScratchBytes(3, packet) = %d, want 480", got)
	}
	z, _ := ir.NewLayout(0, ir.Int8, 2, 1)
	if z.ScratchChunk(5) != 0 || z.ScratchBytes(5, true) != 0 {
		t.Errorf("count 0 scratch: chunk %d bytes %d", z.ScratchChunk(5), z.ScratchBytes(5, true))
	}
}

func TestSlicesFor(t *testing.T) {
	cases := []struct {
		count, c   int64
		dt         ir.DataType
		sliceBytes int64
		want       int64
	}{
		{1000, 4, ir.Float32, 0, 1},    // unsliced
		{1000, 4, ir.Float32, -5, 1},   // unsliced
		{0, 4, ir.Float32, 256, 1},     // empty
		{-3, 4, ir.Float32, 256, 1},    // nonsense count
		{1000, 0, ir.Float32, 256, 1},  // nonsense C
		{1000, 4, ir.Float32, 256, 4},  // 250 el = 1000 B -> 4
		{1024, 4, ir.Float32, 1024, 1}, // exactly one slice
		{1025, 4, ir.Float32, 1024, 2}, // ceil(1025/4)=257 -> 1028 B
		{7, 2, ir.Int8, 1, 4},          // 4 B per chunk, 1 B slices
		{7, 2, ir.Float64, 16, 2},      // 32 B per chunk
		{1 << 30, 1, ir.Float16, 1 << 20, 2048},
		{1, 1, ir.Fp8E4M3, 1 << 20, 1},
	}
	for _, c := range cases {
		if got := ir.SlicesFor(c.count, c.c, c.dt, c.sliceBytes); got != c.want {
			t.Errorf("SlicesFor(%d, %d, %v, %d) = %d, want %d", c.count, c.c, c.dt, c.sliceBytes, got, c.want)
		}
	}
}

func TestBlocks(t *testing.T) {
	const n = 4
	// {input at root, input elsewhere, output at root, output elsewhere}
	want := map[ir.Collective][4]int64{
		ir.AllReduce:     {1, 1, 1, 1},
		ir.AllGather:     {1, 1, n, n},
		ir.ReduceScatter: {n, n, 1, 1},
		ir.Broadcast:     {1, 0, 1, 1},
		ir.Reduce:        {1, 1, 1, 0},
		ir.AllToAll:      {n, n, n, n},
		ir.Gather:        {1, 1, n, 0},
		ir.Scatter:       {n, 0, 1, 1},
		ir.SendRecv:      {1, 1, 1, 1},
		ir.Custom:        {-1, -1, -1, -1},
	}
	if len(want) != int(ir.NumCollectives) {
		t.Fatalf("table covers %d of %d collectives", len(want), ir.NumCollectives)
	}
	const root = 2
	for c, w := range want {
		got := [4]int64{
			ir.Blocks(c, ir.Input, n, root, root), ir.Blocks(c, ir.Input, n, 1, root),
			ir.Blocks(c, ir.Output, n, root, root), ir.Blocks(c, ir.Output, n, 3, root),
		}
		if got != w {
			t.Errorf("%v: blocks %v, want %v", c, got, w)
		}
		if s := ir.Blocks(c, ir.Scratch, n, root, root); s != 0 {
			t.Errorf("%v: scratch blocks %d, want 0", c, s)
		}
		wantMax := int64(1)
		for _, b := range w {
			wantMax = max(wantMax, b)
		}
		if got := ir.MaxBlocks(c, n); got != wantMax {
			t.Errorf("%v: MaxBlocks %d, want %d", c, got, wantMax)
		}
	}
}

func TestMessageBytes(t *testing.T) {
	cases := []struct {
		c      ir.Collective
		nranks int
		count  int64
		dt     ir.DataType
		want   int64
	}{
		{ir.AllReduce, 8, 0, ir.Float32, 0},
		{ir.AllReduce, 8, 1, ir.Float32, 4},
		{ir.AllReduce, 8, 7, ir.Float16, 14},
		{ir.AllGather, 8, 7, ir.Float16, 112},
		{ir.ReduceScatter, 3, 7, ir.Int8, 21},
		{ir.AllToAll, 2, 5, ir.Float64, 80},
		{ir.Gather, 4, 1, ir.Bfloat16, 8},
		{ir.Scatter, 4, 3, ir.Uint32, 48},
		{ir.Broadcast, 4, 3, ir.Uint64, 24},
		{ir.Reduce, 4, 3, ir.Fp8E5M2, 3},
		{ir.SendRecv, 4, 3, ir.Int32, 12},
		{ir.Custom, 4, 3, ir.Int64, 24},
		{ir.AllReduce, 1, math.MaxInt64, ir.Int8, math.MaxInt64},
	}
	for _, c := range cases {
		got, err := ir.MessageBytes(c.c, c.nranks, c.count, c.dt)
		if err != nil || got != c.want {
			t.Errorf("MessageBytes(%v, %d, %d, %v) = %d, %v; want %d", c.c, c.nranks, c.count, c.dt, got, err, c.want)
		}
	}
	for _, c := range []struct {
		c      ir.Collective
		nranks int
		count  int64
		dt     ir.DataType
	}{
		{ir.AllReduce, 1, -1, ir.Float32},
		{ir.AllReduce, 1, math.MaxInt64/4 + 1, ir.Float32},
		{ir.AllGather, 1 << 16, math.MaxInt64>>16 + 1, ir.Int8},
	} {
		if got, err := ir.MessageBytes(c.c, c.nranks, c.count, c.dt); err == nil {
			t.Errorf("MessageBytes(%v, %d, %d, %v) = %d, want an error", c.c, c.nranks, c.count, c.dt, got)
		}
	}
}

type loc struct {
	Buf   ir.BufKind
	Chunk int64
}

func resolveAll(pl ir.Placement, p int, k ir.BufKind, chunks int64) []loc {
	var out []loc
	for c := int64(0); c < chunks; c++ {
		b, cc := pl.Resolve(p, k, c)
		out = append(out, loc{b, cc})
	}
	return out
}

func locs(b ir.BufKind, first int64, n int64) []loc {
	var out []loc
	for i := int64(0); i < n; i++ {
		out = append(out, loc{b, first + i})
	}
	return out
}

// TestResolveInPlace pins the NCCL in-place aliasing of every collective
// (n = 4, C = 2, physical rank 2, root 2 for rooted collectives unless said).
func TestResolveInPlace(t *testing.T) {
	const n, C = 4, 2
	I, O, S := ir.Input, ir.Output, ir.Scratch
	cases := []struct {
		c        ir.Collective
		rank     int
		k        ir.BufKind
		chunks   int64
		inPlace  []loc
		outPlace []loc
	}{
		{ir.AllReduce, 2, I, C, locs(O, 0, C), locs(I, 0, C)},
		{ir.AllReduce, 2, O, C, locs(O, 0, C), locs(O, 0, C)},
		{ir.AllToAll, 2, I, n * C, locs(O, 0, n*C), locs(I, 0, n*C)},
		{ir.AllToAll, 2, O, n * C, locs(O, 0, n*C), locs(O, 0, n*C)},
		{ir.SendRecv, 2, I, C, locs(O, 0, C), locs(I, 0, C)},
		{ir.AllGather, 2, I, C, locs(O, 2*C, C), locs(I, 0, C)},
		{ir.AllGather, 2, O, n * C, locs(O, 0, n*C), locs(O, 0, n*C)},
		{ir.AllGather, 0, I, C, locs(O, 0, C), locs(I, 0, C)},
		{ir.ReduceScatter, 2, O, C, locs(I, 2*C, C), locs(O, 0, C)},
		{ir.ReduceScatter, 3, O, C, locs(I, 3*C, C), locs(O, 0, C)},
		{ir.ReduceScatter, 2, I, n * C, locs(I, 0, n*C), locs(I, 0, n*C)},
		{ir.Broadcast, 2, I, C, locs(O, 0, C), locs(I, 0, C)}, // root
		{ir.Broadcast, 1, O, C, locs(O, 0, C), locs(O, 0, C)}, // non-root: no input
		{ir.Reduce, 2, I, C, locs(O, 0, C), locs(I, 0, C)},    // root
		{ir.Reduce, 1, I, C, locs(I, 0, C), locs(I, 0, C)},    // non-root: no output
		{ir.Gather, 2, I, C, locs(O, 2*C, C), locs(I, 0, C)},  // root
		{ir.Gather, 1, I, C, locs(I, 0, C), locs(I, 0, C)},    // non-root
		{ir.Scatter, 2, O, C, locs(I, 2*C, C), locs(O, 0, C)}, // root
		{ir.Scatter, 1, O, C, locs(O, 0, C), locs(O, 0, C)},   // non-root
		{ir.Custom, 2, I, C, locs(I, 0, C), locs(I, 0, C)},
		{ir.AllReduce, 2, S, 3, locs(S, 0, 3), locs(S, 0, 3)},
		{ir.AllGather, 2, S, 3, locs(S, 0, 3), locs(S, 0, 3)},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%v/rank%d/%v", c.c, c.rank, c.k), func(t *testing.T) {
			root := -1
			if c.c.Rooted() {
				root = 2
			}
			for _, inPlace := range []bool{true, false} {
				pl := ir.Placement{Collective: c.c, NRanks: n, ChunksPerBlock: C, ProgRoot: root, Root: root, InPlace: inPlace}
				want := c.outPlace
				if inPlace {
					want = c.inPlace
				}
				if d := cmp.Diff(want, resolveAll(pl, c.rank, c.k, c.chunks)); d != "" {
					t.Errorf("inplace=%v (-want +got):\n%s", inPlace, d)
				}
			}
		})
	}
}

// TestResolveRootRotation: a program written for root 0 run with root 1 on
// 4 ranks (C = 2) shifts ranks by 1 and rotates the per-rank blocks of
// gather's and scatter's root buffers the same way.
func TestResolveRootRotation(t *testing.T) {
	const n, C = 4, 2
	for _, coll := range []ir.Collective{ir.Broadcast, ir.Reduce, ir.Gather, ir.Scatter} {
		pl := ir.Placement{Collective: coll, NRanks: n, ChunksPerBlock: C, ProgRoot: 0, Root: 1}
		if pl.Shift() != 1 {
			t.Errorf("%v: Shift = %d, want 1", coll, pl.Shift())
		}
		for l, p := range []int{1, 2, 3, 0} {
			if pl.Physical(l) != p || pl.Logical(p) != l {
				t.Errorf("%v: Physical(%d) = %d, Logical(%d) = %d; want %d, %d", coll, l, pl.Physical(l), p, pl.Logical(p), p, l)
			}
		}
	}
	rotated := []loc{{ir.Output, 2}, {ir.Output, 3}, {ir.Output, 4}, {ir.Output, 5}, {ir.Output, 6}, {ir.Output, 7}, {ir.Output, 0}, {ir.Output, 1}}
	pl := ir.Placement{Collective: ir.Gather, NRanks: n, ChunksPerBlock: C, ProgRoot: 0, Root: 1}
	if d := cmp.Diff(rotated, resolveAll(pl, 1, ir.Output, n*C)); d != "" {
		t.Errorf("gather root output (-want +got):\n%s", d)
	}
	// Non-root buffers of one block do not rotate.
	if d := cmp.Diff(locs(ir.Input, 0, C), resolveAll(pl, 3, ir.Input, C)); d != "" {
		t.Errorf("gather non-root input (-want +got):\n%s", d)
	}
	// In place at the root: input is the root's own (physical) block of
	// output, which is the rotated image of logical block 0 = ProgRoot's.
	pl.InPlace = true
	if d := cmp.Diff(locs(ir.Output, 1*C, C), resolveAll(pl, 1, ir.Input, C)); d != "" {
		t.Errorf("gather in-place root input (-want +got):\n%s", d)
	}
	if b, c := pl.Resolve(1, ir.Output, 0); b != ir.Output || c != 1*C {
		t.Errorf("gather in-place: logical output block 0 at %v %d, want o %d (aliases the root's input)", b, c, C)
	}

	sc := ir.Placement{Collective: ir.Scatter, NRanks: n, ChunksPerBlock: C, ProgRoot: 2, Root: 0} // shift 2
	if sc.Shift() != 2 {
		t.Fatalf("Shift = %d", sc.Shift())
	}
	want := []loc{{ir.Input, 4}, {ir.Input, 5}, {ir.Input, 6}, {ir.Input, 7}, {ir.Input, 0}, {ir.Input, 1}, {ir.Input, 2}, {ir.Input, 3}}
	if d := cmp.Diff(want, resolveAll(sc, 0, ir.Input, n*C)); d != "" {
		t.Errorf("scatter root input (-want +got):\n%s", d)
	}
	sc.InPlace = true
	if d := cmp.Diff(locs(ir.Input, 0, C), resolveAll(sc, 0, ir.Output, C)); d != "" {
		t.Errorf("scatter in-place root output (-want +got):\n%s", d)
	}

	// Negative and wrapped roots, and non-rooted collectives, do not shift.
	if s := (ir.Placement{Collective: ir.Gather, NRanks: 4, ProgRoot: 3, Root: 0}).Shift(); s != 1 {
		t.Errorf("Shift(prog 3, root 0) = %d, want 1", s)
	}
	ar := ir.Placement{Collective: ir.AllGather, NRanks: n, ChunksPerBlock: C, ProgRoot: 0, Root: 3}
	if ar.Shift() != 0 || ar.Physical(2) != 2 {
		t.Errorf("allgather: Shift %d Physical(2) %d, want 0, 2", ar.Shift(), ar.Physical(2))
	}
	if d := cmp.Diff(locs(ir.Output, 0, n*C), resolveAll(ar, 1, ir.Output, n*C)); d != "" {
		t.Errorf("allgather output (-want +got):\n%s", d)
	}
	var zero ir.Placement
	if zero.Physical(5) != 5 || zero.Logical(5) != 5 || zero.Shift() != 0 {
		t.Error("zero Placement is not the identity")
	}
}
