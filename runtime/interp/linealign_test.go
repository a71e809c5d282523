package interp

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// Pieces of 8 KiB or more start on a 128-byte line (ir.LineAlign,
// ir.LineAlignFrom; docs/design/ir.md, geometry). These tests run the host
// interpreter, the reference of the CUDA kernel, on counts whose piece is
// just below, at and just above that threshold, for every element size.

// edgeCounts are counts (elements per block) around the line-alignment
// threshold for pieces = chunks per block x slices and element size es:
// the largest piece just under 8 KiB, the smallest at 8 KiB, one element
// over (stride one line longer, a short last piece), and a piece one
// 16-byte unit under 8 KiB plus one element (rounds up to 8 KiB by the
// 16-byte rule).
func edgeCounts(pieces, es int64) []int64 {
	t := int64(ir.LineAlignFrom) / es
	return []int64{pieces * (t - 1), pieces*(t-1) + 1, pieces*t + 1, pieces*(t-16/es) + 1}
}

// wantStride is the stride of docs/design/ir.md, computed independently of
// ir.NewLayout: ceil(count/P) rounded up to A/size elements, A = 128 bytes
// when ceil(count/P) elements are at least 8 KiB, else 16.
func wantStride(count, pieces, es int64) int64 {
	c := (count + pieces - 1) / pieces
	a := int64(16)
	if c*es >= 8192 {
		a = 128
	}
	u := a / es
	return (c + u - 1) / u * u
}

// TestLineAlignGeometry checks the strides around the threshold and that
// the pieces tile every block exactly (no gap, no overlap, at most Stride
// elements, line-aligned starts above the threshold).
func TestLineAlignGeometry(t *testing.T) {
	type row struct {
		Count, Pieces, ES, Stride, StrideBytes int64
	}
	var got, want []row
	for _, es := range []int64{1, 2, 4, 8} {
		dt := map[int64]ir.DataType{1: ir.Int8, 2: ir.Float16, 4: ir.Float32, 8: ir.Float64}[es]
		for _, c := range []int64{1, 2, 3, 7} {
			for _, s := range []int64{1, 3} {
				p := c * s
				for _, count := range edgeCounts(p, es) {
					l, err := ir.NewLayout(count, dt, c, s)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, row{count, p, es, l.Stride, l.Stride * es})
					ws := wantStride(count, p, es)
					want = append(want, row{count, p, es, ws, ws * es})
					// Tiling: pieces in order, contiguous, each <= Stride.
					next := int64(0)
					for sl := int64(0); sl < s; sl++ {
						for j := int64(0); j < c; j++ {
							st, en := l.UserChunk(j, sl)
							if st != next || en < st || en-st > l.Stride {
								t.Fatalf("%s count %d C %d S %d: piece (%d,%d) = [%d,%d), want start %d", dt, count, c, s, j, sl, st, en, next)
							}
							if st < count && (st*es)%16 != 0 {
								t.Errorf("%s count %d: piece start %d bytes not 16-byte aligned", dt, count, st*es)
							}
							if l.Stride*es >= 8192 && st < count && (st*es)%128 != 0 {
								t.Errorf("%s count %d: piece start %d bytes not on a line", dt, count, st*es)
							}
							next = en
						}
					}
					if next != count {
						t.Errorf("%s count %d C %d S %d: pieces end at %d", dt, count, c, s, next)
					}
				}
			}
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("strides (-want +got):\n%s", d)
	}
	// Spot values: one element over the threshold adds a whole line.
	l, _ := ir.NewLayout(2*4096+1, ir.Float16, 2, 1)
	if l.Stride != 4096+64 {
		t.Errorf("float16 count 8193 over 2 pieces: stride %d, want 4160", l.Stride)
	}
	l, _ = ir.NewLayout(2*4095, ir.Float16, 2, 1)
	if l.Stride != 4096 {
		t.Errorf("float16 count 8190 over 2 pieces: stride %d, want 4096 (16-byte rounding)", l.Stride)
	}
}

// TestLineAlignSimulate runs simulations (every data type, slices 1 and
// 3, both arrangements) at the threshold counts of each element size and
// compares every output element with a direct computation.
func TestLineAlignSimulate(t *testing.T) {
	ar := progs.AllPairs(ir.AllReduce, 2, 1, 0)     // C = 2
	rs := progs.AllPairs(ir.ReduceScatter, 2, 1, 0) // C = 1, 2 blocks
	for _, dt := range ir.AllDataTypes() {
		es := int64(dt.Size())
		var counts []int64
		for _, p := range []int64{2, 6} { // C = 2, slices 1 and 3
			counts = append(counts, edgeCounts(p, es)...)
		}
		t.Run(dt.String(), func(t *testing.T) {
			simAll(t, ar, SimOptions{DataTypes: []ir.DataType{dt}, RedOps: []ir.RedOp{ir.Sum}, Counts: counts, Slices: []int64{1, 3}})
			if !testing.Short() {
				var rc []int64
				for _, p := range []int64{1, 3} {
					rc = append(rc, edgeCounts(p, es)...)
				}
				simAll(t, rs, SimOptions{DataTypes: []ir.DataType{dt}, RedOps: []ir.RedOp{ir.Max}, Counts: rc, Slices: []int64{1, 3}})
			}
		})
	}
}

// TestLineAlignSimulateLL covers LL packets (scratch chunks of 2*Stride
// bytes per element byte, halves per launch) at the threshold.
func TestLineAlignSimulateLL(t *testing.T) {
	p := progs.AllPairsLL(ir.AllReduce, 2, 1) // C = 1
	for _, dt := range []ir.DataType{ir.Int8, ir.Bfloat16, ir.Float32, ir.Float64} {
		simAll(t, p, SimOptions{DataTypes: []ir.DataType{dt}, RedOps: []ir.RedOp{ir.Sum}, Counts: edgeCounts(1, int64(dt.Size())), Launches: 3})
	}
}

// TestLineAlignEmptyPieces: above the threshold, line rounding can leave
// trailing pieces empty (66 pieces of float64: the stride grows by 16
// elements, 66*16 > 1024 elements).
func TestLineAlignEmptyPieces(t *testing.T) {
	const c, s = 22, 3
	count := int64(c*s*1024 + 1)
	l, err := ir.NewLayout(count, ir.Float64, c, s)
	if err != nil {
		t.Fatal(err)
	}
	st, en := l.UserChunk(c-1, s-1)
	if l.Stride != 1040 || st != count || en != count {
		t.Fatalf("stride %d, last piece [%d,%d): want stride 1040 and an empty last piece at %d", l.Stride, st, en, count)
	}
	simAll(t, progs.AllPairs(ir.AllReduce, 2, c/2, 0),
		SimOptions{DataTypes: []ir.DataType{ir.Float64, ir.Int8}, RedOps: []ir.RedOp{ir.Sum}, Counts: []int64{count}, Slices: []int64{s}})
	// Scratch is sized from the same stride: LL halves of
	// MaxScratchChunks * 2 * Stride * size bytes each (float64, one chunk
	// per block: 1025 elements are over 8 KiB, stride 1040).
	tabs, err := optable.LowerAll(progs.AllPairsLL(ir.AllReduce, 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	sz, err := launch.BufferSizes(tabs[0], 0, Request{Count: 1025, DataType: ir.Float64, PacketType: ir.LL16})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * tabs[0].MaxScratchChunks * 2 * 1040 * 8; sz.Scratch != want {
		t.Errorf("LL scratch %d bytes, want %d", sz.Scratch, want)
	}
	off, err := launch.ScratchHalfOffset(tabs[0], 0, Request{Count: 1025, DataType: ir.Float64, PacketType: ir.LL16, Launch: 3})
	if err != nil || off != sz.Scratch/2 {
		t.Errorf("odd launch's half at %d, %v; want %d", off, err, sz.Scratch/2)
	}
}
