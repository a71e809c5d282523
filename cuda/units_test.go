package cuda

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// unitRec is one unit of shared work, as the kernel finds it from the runs
// (units_loop).
type unitRec struct {
	Off  [3]uint64
	N    uint32
	Buf  [3]uint8
	NSrc uint8
}

// runRec is a decoded theseus_run.
type runRec struct {
	Off      [3]uint64
	N, First uint64
	Tile     uint32
	Buf      [3]uint8
	NSrc     uint8
}

func decodeRuns(t *testing.T, b []byte) []runRec {
	t.Helper()
	if len(b)%RunBytes != 0 {
		t.Fatalf("%d bytes of runs, not a multiple of %d", len(b), RunBytes)
	}
	var out []runRec
	for ; len(b) > 0; b = b[RunBytes:] {
		var r runRec
		for k := range 3 {
			r.Off[k] = binary.LittleEndian.Uint64(b[8*k:])
			r.Buf[k] = b[44+k]
		}
		r.N = binary.LittleEndian.Uint64(b[24:])
		r.First = binary.LittleEndian.Uint64(b[32:])
		r.Tile = binary.LittleEndian.Uint32(b[40:])
		r.NSrc = b[47]
		out = append(out, r)
	}
	return out
}

// decodeUnits expands encoded runs into their units in unit order, as the
// kernel finds unit u (units_loop): the run whose first unit is the last at
// or below u, at (u - first) * tile bytes into it. It checks that the runs
// number their units consecutively from 0.
func decodeUnits(t *testing.T, b []byte) []unitRec {
	t.Helper()
	var out []unitRec
	for _, r := range decodeRuns(t, b) {
		if r.First != uint64(len(out)) {
			t.Fatalf("run %+v: first unit %d, want %d", r, r.First, len(out))
		}
		if r.Tile == 0 || r.Tile%128 != 0 {
			t.Fatalf("run %+v: tile %d bytes, not a positive multiple of 128", r, r.Tile)
		}
		for at := uint64(0); at < r.N; at += uint64(r.Tile) {
			u := unitRec{N: uint32(min(uint64(r.Tile), r.N-at)), Buf: r.Buf, NSrc: r.NSrc}
			for k := range 3 {
				u.Off[k] = r.Off[k] + at
			}
			if r.NSrc == 1 {
				u.Off[1] = 0
			}
			out = append(out, u)
		}
	}
	if nr, nu := runCounts(b); nr != int64(len(b)/RunBytes) || nu != int64(len(out)) {
		t.Fatalf("runCounts: %d runs, %d units; want %d, %d", nr, nu, len(b)/RunBytes, len(out))
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

// TestSharedUnits: the bandwidth test's copies and reduces become runs of
// consecutive ops cut into tiles of UnitTile bytes that cover every op's
// chunk exactly, in op order.
func TestSharedUnits(t *testing.T) {
	// 2 threadblocks x 2 chunks each; 4 chunks of 40,000 floats (160,000
	// bytes). Op order: tb 0 (chunks 0, 2), tb 1 (1, 3): no op continues
	// the one before it, so four runs, each of two whole 64 KiB tiles and
	// one of 28,928 bytes.
	defer func(old int64) { unitTile = old }(unitTile)
	unitTile = 64 << 10
	const count = 4 * 40000
	got := decodeUnits(t, unitsOf(t, bwProgram(2, 128, 2, false), count, false, 1, ir.Sum))
	var want []unitRec
	for _, c := range []uint64{0, 2, 1, 3} {
		base := c * 160000
		for off := uint64(0); off < 160000; off += uint64(unitTile) {
			n := min(uint64(unitTile), 160000-off)
			want = append(want, unitRec{Off: [3]uint64{base + off, 0, base + off}, N: uint32(n), Buf: [3]uint8{uint8(ir.Input), 0, uint8(ir.Output)}, NSrc: 1})
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("copy units (-want +got):\n%s", diff)
	}
	// One chunk per threadblock in order: every op continues the one
	// before it, so one run of 640,000 bytes, tiled from its start.
	runs := decodeRuns(t, unitsOf(t, bwProgram(4, 128, 1, false), count, false, 1, ir.Sum))
	wantRuns := []runRec{{Off: [3]uint64{0, 0, 0}, N: 640000, First: 0, Tile: uint32(unitTile), Buf: [3]uint8{uint8(ir.Input), 0, uint8(ir.Output)}, NSrc: 1}}
	if diff := cmp.Diff(wantRuns, runs); diff != "" {
		t.Errorf("contiguous copies (-want +got):\n%s", diff)
	}
	// Pipeline slices: each op covers one piece of its chunk per slice
	// (pieces interleaved by slice, ir.Layout.UserChunk); with the chunks in
	// op order the pieces continue each other across slices: still one run.
	runs = decodeRuns(t, unitsOf(t, bwProgram(4, 128, 1, false), count, false, 3, ir.Sum))
	if diff := cmp.Diff(wantRuns, runs); diff != "" {
		t.Errorf("contiguous copies in 3 slices (-want +got):\n%s", diff)
	}
	// Chunks taken in reverse: no piece continues the one before, 4 ops x
	// 3 slices.
	rev := bwProgram(4, 128, 1, false)
	slices.Reverse(rev.Ranks[0].TBs)
	if got := len(unitsOf(t, rev, count, false, 3, ir.Sum)) / RunBytes; got != 12 {
		t.Errorf("reversed copies in 3 slices: %d runs, want 12", got)
	}
	// More runs than the kernel holds: no shared work.
	if u := unitsOf(t, bwProgram(2*MaxRuns, 128, 2, false), 64*MaxRuns*32, false, 1, ir.Sum); u != nil {
		t.Errorf("%d runs: got shared work, want none (at most %d)", len(u)/RunBytes, MaxRuns)
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
		{"avg (its epilogue is a barrier)", bwProgram(2, 128, 1, true), 1, ir.Avg, false},
		{"a dependency", dep, 1, ir.Sum, false},
		{"channels (two ranks)", ringP, 1, ir.Sum, false},
		{"two ops write one chunk", oneTB(copyOp(in(0), out(0)), copyOp(in(1), out(0))), 1, ir.Sum, false},
		{"an op reads another's dst", oneTB(copyOp(in(0), out(0)), copyOp(out(0), out(1))), 1, ir.Sum, false},
		// In place the input is the output: o[1] = i[0] reads what o[0] = i[1] writes.
		{"in place, crossed", oneTB(copyOp(in(0), out(1)), copyOp(in(1), out(0))), 1, ir.Sum, true},
	} {
		if u := unitsOf(t, c.p, 4096, c.inPlace, c.slices, c.redop); u != nil {
			t.Errorf("%s: %d runs, want none", c.name, len(u)/RunBytes)
		}
	}
	// The same crossed copies out of place are independent.
	if u := unitsOf(t, oneTB(copyOp(in(0), out(1)), copyOp(in(1), out(0))), 4096, false, 1, ir.Sum); len(u) != 2*RunBytes {
		t.Errorf("crossed copies out of place: %d bytes of runs, want 2 runs", len(u))
	}
}

// TestDefaultThreads checks THESEUS_NTHREADS: a multiple of 32 from 32
// to 1024 is taken at every block size (clamped to the executor's launch
// bound, ExecMaxThreads); otherwise SmallThreads up to
// SmallBlockBytes per rank and DefaultThreads above (or when the size is
// unknown).
func TestDefaultThreads(t *testing.T) {
	for _, c := range []struct {
		env   string
		bytes int64
		want  int
	}{{"", 1 << 20, DefaultThreads}, {"", SmallBlockBytes + 1, DefaultThreads}, {"", SmallBlockBytes, SmallThreads},
		{"", 8, SmallThreads}, {"", 0, SmallThreads}, {"", -1, DefaultThreads},
		{"64", 1 << 20, 64}, {"64", 8, 64}, {"32", 8, 32}, {"1024", 8, ExecMaxThreads}, {"128", 1 << 20, 128}, {"512", 8, 512},
		{"0", 1 << 20, DefaultThreads}, {"16", 8, SmallThreads}, {"100", 1 << 20, DefaultThreads},
		{"2048", 1 << 20, DefaultThreads}, {"-64", 8, SmallThreads}, {"x", 1 << 20, DefaultThreads}} {
		restore := env.SetLookupForTest(func(k string) (string, bool) { return c.env, k == "THESEUS_NTHREADS" && c.env != "" })
		got := defaultThreads(c.bytes)
		restore()
		if got != c.want {
			t.Errorf("THESEUS_NTHREADS=%q, %d bytes per rank: %d threads, want %d", c.env, c.bytes, got, c.want)
		}
	}
}

// TestTableThreads checks the threads of a table that does not ask: an
// LL table gets one thread per 8-byte payload of a threadblock's chunk
// (64 to 512, a multiple of 32), a Simple table defaultThreads' answer,
// and THESEUS_NTHREADS overrides both.
func TestTableThreads(t *testing.T) {
	for _, c := range []struct {
		env    string
		proto  ir.Protocol
		chunks int64
		block  int64
		want   int
	}{{"", ir.LL, 1, 8, LLMinThreads}, {"", ir.LL, 1, 512, 64}, {"", ir.LL, 1, 513, 96}, {"", ir.LL, 1, 2 << 10, 256},
		{"", ir.LL, 1, 32 << 10, DefaultThreads}, {"", ir.LL, 16, 32 << 10, 256}, {"", ir.LL, 16, 8 << 10, 64},
		{"", ir.LL, 16, 32<<10 + 8, 288}, {"", ir.LL, 0, 1024, 128}, {"", ir.LL, 16, 0, LLMinThreads},
		{"", ir.LL, 16, -1, DefaultThreads}, {"", ir.LL, 3, 1 << 62, DefaultThreads},
		{"", ir.Simple, 64, 64 << 10, DefaultThreads}, {"", ir.Simple, 64, 2 << 10, SmallThreads},
		{"1024", ir.LL, 16, 8 << 10, ExecMaxThreads}, {"96", ir.Simple, 1, 1 << 20, 96}, {"x", ir.LL, 1, 8, LLMinThreads}} {
		restore := env.SetLookupForTest(func(k string) (string, bool) { return c.env, k == "THESEUS_NTHREADS" && c.env != "" })
		got := tableThreads(&optable.Table{Protocol: c.proto, ChunksPerBlock: c.chunks}, c.block)
		restore()
		if got != c.want {
			t.Errorf("THESEUS_NTHREADS=%q, %v, %d chunks per block, %d bytes: %d threads, want %d", c.env, c.proto, c.chunks, c.block, got, c.want)
		}
	}
}
