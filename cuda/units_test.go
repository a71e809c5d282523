package cuda

import (
	"encoding/binary"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
)

// unitRec is a decoded theseus_unit.
type unitRec struct {
	Off  [3]uint64
	N    uint32
	Buf  [3]uint8
	NSrc uint8
}

func decodeUnits(t *testing.T, b []byte) []unitRec {
	t.Helper()
	if len(b)%UnitBytes != 0 {
		t.Fatalf("%d bytes of units, not a multiple of %d", len(b), UnitBytes)
	}
	var out []unitRec
	for ; len(b) > 0; b = b[UnitBytes:] {
		var u unitRec
		for k := range 3 {
			u.Off[k] = binary.LittleEndian.Uint64(b[8*k:])
			u.Buf[k] = b[28+k]
		}
		u.N = binary.LittleEndian.Uint32(b[24:])
		u.NSrc = b[31]
		out = append(out, u)
	}
	return out
}

// unitsOf lowers p and builds rank 0's shared work for count float32
// elements (one slice, sum, out of place unless inPlace).
func unitsOf(t *testing.T, p *ir.Program, count int64, inPlace bool, nslices int64, redop ir.RedOp) []byte {
	t.Helper()
	tables, err := optable.LowerAll(p)
	if err != nil {
		t.Fatal(err)
	}
	tab := tables[0]
	lay, err := ir.NewLayout(count, ir.Float32, tab.ChunksPerBlock, nslices)
	if err != nil {
		t.Fatal(err)
	}
	pl := ir.Placement{Collective: tab.Collective, NRanks: tab.NRanks, ChunksPerBlock: tab.ChunksPerBlock, InPlace: inPlace}
	return sharedUnits(tab, lay, pl, 0, nslices, redop)
}

// TestSharedUnits: the bandwidth test's copies and reduces become tiles of
// at most UnitTile bytes that cover every op's chunk exactly, in op order.
func TestSharedUnits(t *testing.T) {
	// 2 threadblocks x 2 chunks each; 4 chunks of 40,000 floats (160,000
	// bytes: with 64 KiB tiles, two whole tiles and one of 28,928 bytes).
	defer func(old int64) { unitTile = old }(unitTile)
	unitTile = 64 << 10
	const count = 4 * 40000
	got := decodeUnits(t, unitsOf(t, bwProgram(2, 128, 2, false), count, false, 1, ir.Sum))
	var want []unitRec
	for _, c := range []uint64{0, 2, 1, 3} { // op order: tb 0 (chunks 0, 2), tb 1 (1, 3)
		base := c * 160000
		for off := uint64(0); off < 160000; off += uint64(unitTile) {
			n := min(uint64(unitTile), 160000-off)
			want = append(want, unitRec{Off: [3]uint64{base + off, 0, base + off}, N: uint32(n), Buf: [3]uint8{uint8(ir.Input), 0, uint8(ir.Output)}, NSrc: 1})
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("copy units (-want +got):\n%s", diff)
	}
	// A reduce reads its own dst (o[c] += i[c]): allowed.
	got = decodeUnits(t, unitsOf(t, bwProgram(1, 128, 1, true), 1000, false, 1, ir.Sum))
	want = []unitRec{{Off: [3]uint64{0, 0, 0}, N: 4000, Buf: [3]uint8{uint8(ir.Input), uint8(ir.Output), uint8(ir.Output)}, NSrc: 2}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reduce units (-want +got):\n%s", diff)
	}
}

// TestSharedUnitsRefused: launches whose result could depend on the order
// of their ops, or that the kernel must run op by op, get no shared work.
func TestSharedUnitsRefused(t *testing.T) {
	copyOp := func(src, dst ir.Ref) ir.Op {
		return ir.Op{Code: ir.OpCopy, Count: 1, Srcs: []ir.Ref{src}, Dsts: []ir.Ref{dst}}
	}
	in := func(c int64) ir.Ref { return ir.Ref{Buf: ir.Input, Off: c, Chan: -1} }
	out := func(c int64) ir.Ref { return ir.Ref{Buf: ir.Output, Off: c, Chan: -1} }
	oneTB := func(ops ...ir.Op) *ir.Program {
		p := bwProgram(1, 128, 1, false)
		p.ChunksPerBlock = 2
		p.Ranks[0].TBs[0].Ops = ops
		return p
	}
	ll := bwProgram(2, 128, 1, false)
	ll.Protocol = ir.LL
	dep := bwProgram(2, 128, 1, false)
	dep.Ranks[0].TBs[0].Ops[0].Publish = true
	dep.Ranks[0].TBs[1].Ops[0].Deps = []ir.Dep{{TB: 0, Step: 0}}
	ring, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	if err != nil {
		t.Fatal(err)
	}
	ringP, err := legalized(ring)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		p       *ir.Program
		slices  int64
		redop   ir.RedOp
		inPlace bool
	}{
		{"LL protocol", ll, 1, ir.Sum, false},
		{"two slices", bwProgram(2, 128, 1, false), 2, ir.Sum, false},
		{"avg (its epilogue is a barrier)", bwProgram(2, 128, 1, true), 1, ir.Avg, false},
		{"a dependency", dep, 1, ir.Sum, false},
		{"channels (two ranks)", ringP, 1, ir.Sum, false},
		{"two ops write one chunk", oneTB(copyOp(in(0), out(0)), copyOp(in(1), out(0))), 1, ir.Sum, false},
		{"an op reads another's dst", oneTB(copyOp(in(0), out(0)), copyOp(out(0), out(1))), 1, ir.Sum, false},
		// In place the input is the output: o[1] = i[0] reads what o[0] = i[1] writes.
		{"in place, crossed", oneTB(copyOp(in(0), out(1)), copyOp(in(1), out(0))), 1, ir.Sum, true},
	} {
		if u := unitsOf(t, c.p, 4096, c.inPlace, c.slices, c.redop); u != nil {
			t.Errorf("%s: %d units, want none", c.name, len(u)/UnitBytes)
		}
	}
	// The same crossed copies out of place are independent.
	if u := unitsOf(t, oneTB(copyOp(in(0), out(1)), copyOp(in(1), out(0))), 4096, false, 1, ir.Sum); len(u) != 2*UnitBytes {
		t.Errorf("crossed copies out of place: %d bytes of units, want 2 units", len(u))
	}
}
