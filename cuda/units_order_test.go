package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
)

// unitOrder is an order in which the kernel's threadblocks may run a
// launch's units: forward, reverse, or every unit reading its srcs before
// any unit writes (threadblocks running all units at once).
type unitOrder int

const (
	unitsForward unitOrder = iota
	unitsReverse
	unitsAtOnce
)

func (o unitOrder) String() string { return [...]string{"forward", "reverse", "at once"}[o] }

// runUnits runs decoded units on one rank's buffers as the kernel's
// units_loop does (copy, or dst = src0 op src1), in order o.
func runUnits(us []unitRec, b interp.Buffers, dt ir.DataType, op ir.RedOp, o unitOrder) error {
	buf := func(k uint8, off uint64, n uint32) ([]byte, error) {
		var m []byte
		switch ir.BufKind(k) {
		case ir.Input:
			m = b.Input
		case ir.Output:
			m = b.Output
		default:
			return nil, fmt.Errorf("unit names buffer %d", k)
		}
		if off+uint64(n) > uint64(len(m)) {
			return nil, fmt.Errorf("unit [%d, %d) of buffer %d is past its %d bytes", off, off+uint64(n), k, len(m))
		}
		return m[off : off+uint64(n)], nil
	}
	type result struct {
		dst, val []byte
	}
	var pending []result
	for i := range us {
		u := us[i]
		if o == unitsReverse {
			u = us[len(us)-1-i]
		}
		var srcs [][]byte
		for k := 0; k < int(u.NSrc); k++ {
			s, err := buf(u.Buf[k], u.Off[k], u.N)
			if err != nil {
				return err
			}
			srcs = append(srcs, s)
		}
		dst, err := buf(u.Buf[2], u.Off[2], u.N)
		if err != nil {
			return err
		}
		val := make([]byte, u.N)
		if err := numeric.Reduce(dt, op, val, srcs); err != nil {
			return err
		}
		if o == unitsAtOnce {
			pending = append(pending, result{dst, val})
			continue
		}
		copy(dst, val)
	}
	for _, r := range pending {
		copy(r.dst, r.val)
	}
	return nil
}

// fillBuffers fills a rank's output, then its input (which may lie in the
// output, in place), with float32 bit patterns from seed: equal seeds and equal
// layouts give equal contents.
func fillBuffers(b interp.Buffers, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 1))
	for _, m := range [][]byte{b.Output, b.Input} {
		for i := 0; i+4 <= len(m); i += 4 {
			binary.LittleEndian.PutUint32(m[i:], math.Float32bits(float32(rng.IntN(1000))+0.25))
		}
	}
}

// checkUnitsAgainstInterp runs the tables on the host interpreter and,
// for every rank that gets shared work, that work in every unitOrder from
// the same initial buffers, and reports where the results differ. It
// returns how many ranks got shared work.
func checkUnitsAgainstInterp(t *testing.T, name string, tables []*optable.Table, req interp.Request) int {
	t.Helper()
	t0 := tables[0]
	req.Slices, req.Launch = max(req.Slices, 1), 1
	lay, err := ir.NewLayout(req.Count, req.DataType, t0.ChunksPerBlock, req.Slices)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	w, err := interp.NewWorld(tables)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := w.AllocBuffers(req); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for p := range w.Bufs {
		fillBuffers(w.Bufs[p], uint64(p))
	}
	if err := interp.Run(context.Background(), tables, req, w); err != nil {
		t.Fatalf("%s: interp: %v", name, err)
	}
	pl := ir.Placement{Collective: t0.Collective, NRanks: t0.NRanks, ChunksPerBlock: t0.ChunksPerBlock,
		ProgRoot: t0.Root, Root: req.Root, InPlace: req.InPlace}
	if !t0.Collective.Rooted() {
		pl.ProgRoot, pl.Root = 0, 0
	}
	shared := 0
	for p := range w.Bufs {
		tab := tables[pl.Logical(p)]
		units := sharedUnits(tab, lay, pl, p, req.Slices, req.RedOp)
		if units == nil {
			continue
		}
		shared++
		us := decodeUnits(t, units)
		for _, o := range []unitOrder{unitsForward, unitsReverse, unitsAtOnce} {
			b, err := interp.NewBuffers(tab, p, req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			fillBuffers(b, uint64(p))
			if err := runUnits(us, b, req.DataType, req.RedOp, o); err != nil {
				t.Errorf("%s rank %d, units %v: %v", name, p, o, err)
				continue
			}
			if !bytes.Equal(b.Input, w.Bufs[p].Input) || !bytes.Equal(b.Output, w.Bufs[p].Output) {
				t.Errorf("%s rank %d: %d units run %v differ from the ops in program order (interp)", name, p, len(us), o)
			}
		}
	}
	return shared
}

// oneTBProgram is a program of nranks ranks without channels, each rank
// one threadblock running ops[rank] in order.
func oneTBProgram(coll ir.Collective, nranks, progRoot int, cpb int64, ops [][]ir.Op) *ir.Program {
	p := &ir.Program{Name: "units-review", Collective: coll, NRanks: nranks, Root: -1, Protocol: ir.Simple,
		ChunksPerBlock: cpb, InPlace: true, OutOfPlace: true, NumThreads: 128}
	if coll.Rooted() {
		p.Root = progRoot
	}
	for r := range nranks {
		p.Ranks = append(p.Ranks, ir.Rank{TBs: []ir.Threadblock{{SendPeer: -1, RecvPeer: -1, Chan: -1, Ops: ops[r]}}})
	}
	return p
}

func reviewRef(k ir.BufKind, c int64) ir.Ref { return ir.Ref{Buf: k, Off: c, Chan: -1} }

func reviewCopy(src, dst ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpCopy, Count: 1, Srcs: []ir.Ref{src}, Dsts: []ir.Ref{dst}}
}

// TestSharedUnitsEmptyOpBetweenWriters: an op of no bytes (its src is a
// chunk past the count) that writes the same chunk as two other ops of
// the threadblock sorts between them, so the check of neighbouring dsts
// missed that those two write one chunk: in program order the second
// wins; as units either may.
func TestSharedUnitsEmptyOpBetweenWriters(t *testing.T) {
	// 8 floats in 4 chunks: Stride 4 elements, chunks 2 and 3 empty.
	in, out := func(c int64) ir.Ref { return reviewRef(ir.Input, c) }, func(c int64) ir.Ref { return reviewRef(ir.Output, c) }
	p := oneTBProgram(ir.AllReduce, 1, 0, 4, [][]ir.Op{{
		reviewCopy(in(0), out(0)),
		reviewCopy(in(2), out(0)), // no bytes
		reviewCopy(in(1), out(0)),
	}})
	if u := unitsOf(t, p, 8, false, 1, ir.Sum); u != nil {
		t.Errorf("two ops write output chunk 0: got %d runs, want none", len(u)/RunBytes)
	}
	tables, err := optable.LowerAll(p)
	if err != nil {
		t.Fatal(err)
	}
	checkUnitsAgainstInterp(t, "empty op between writers", tables, interp.Request{Count: 8, DataType: ir.Float32, RedOp: ir.Sum})
}

// TestSharedUnitsRandom: random threadblocks of copies, reduces and nops
// over the input and output of every collective, at 1 to 3 ranks (no
// channels), 1 to 3 pipeline slices, roots, in place and out of place,
// element sizes 1 to 8,
// counts that leave chunks short or empty, and 128-byte tiles: wherever
// sharedUnits gives a rank
// shared work, running it in any order gives the interpreter's result.
func TestSharedUnitsRandom(t *testing.T) {
	defer func(old int64) { unitTile = old }(unitTile)
	unitTile = 128
	colls := []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast, ir.Reduce,
		ir.Gather, ir.Scatter, ir.AllToAll}
	rng := rand.New(rand.NewPCG(17, 29))
	iters := 3000
	if testing.Short() {
		iters = 500
	}
	shared := 0
	for it := range iters {
		coll := colls[rng.IntN(len(colls))]
		n := 1 + rng.IntN(3)
		cpb := int64(1 + rng.IntN(4))
		progRoot := rng.IntN(n)
		var ops [][]ir.Op
		for l := range n {
			var refs []ir.Ref
			for _, k := range []ir.BufKind{ir.Input, ir.Output} {
				for c := int64(0); c < ir.Blocks(coll, k, n, l, progRoot)*cpb; c++ {
					refs = append(refs, reviewRef(k, c))
				}
			}
			pick := func() ir.Ref { return refs[rng.IntN(len(refs))] }
			var rops []ir.Op
			for range 1 + rng.IntN(4) {
				switch rng.IntN(5) {
				case 0:
					rops = append(rops, ir.Op{Code: ir.OpNop})
				case 1, 2:
					rops = append(rops, reviewCopy(pick(), pick()))
				default:
					rops = append(rops, ir.Op{Code: ir.OpReduce, Count: 1, Srcs: []ir.Ref{pick(), pick()}, Dsts: []ir.Ref{pick()}})
				}
			}
			ops = append(ops, rops)
		}
		p := oneTBProgram(coll, n, progRoot, cpb, ops)
		tables, err := optable.LowerAll(p)
		if err != nil {
			t.Fatalf("case %d: %v", it, err)
		}
		counts := []int64{0, 1, 5, 8, 13, 40, 100, 257}
		dts := []ir.DataType{ir.Float32, ir.Int8, ir.Float16, ir.Float64}
		req := interp.Request{Count: counts[rng.IntN(len(counts))], DataType: dts[rng.IntN(len(dts))], RedOp: ir.Sum,
			Root: rng.IntN(n), InPlace: rng.IntN(2) == 0, Slices: int64(1 + rng.IntN(3))}
		name := fmt.Sprintf("case %d (%v, %d ranks, C %d, count %d %v, root %d, in place %v, %d slices)", it, coll, n, cpb, req.Count, req.DataType, req.Root, req.InPlace, req.Slices)
		shared += checkUnitsAgainstInterp(t, name, tables, req)
		if t.Failed() {
			for l, r := range ops {
				t.Logf("rank %d ops: %v", l, r)
			}
			return
		}
	}
	if shared == 0 {
		t.Fatal("no case got shared work")
	}
	t.Logf("%d ranks got shared work", shared)
}

// TestIndependentPacketHandoff: in an LL table a threadblock that reads
// packets another threadblock of the rank writes spins until they arrive
// (a packet write happens before its read, ir.md §6: no dependency
// needed, and Verify proves such a program). So such a World is not
// independent: its threadblocks must all be resident, or a reader may
// spin in a place its writer needs (a timeout). independent (world.go)
// looks only at channels, dependencies and opcodes, and lets it run more
// threadblocks than fit at once.
func TestIndependentPacketHandoff(t *testing.T) {
	pkt := ir.Ref{Buf: ir.Scratch, Off: 0, Chan: -1, Packet: true}
	p := &ir.Program{Name: "ll-handoff", Collective: ir.AllReduce, NRanks: 1, Root: -1, Protocol: ir.LL,
		ChunksPerBlock: 1, InPlace: true, OutOfPlace: true, NumThreads: 128}
	p.Ranks = []ir.Rank{{Chunks: [ir.NumBufKinds]int64{0, 0, 1}, TBs: []ir.Threadblock{
		{SendPeer: -1, RecvPeer: -1, Chan: -1, Ops: []ir.Op{reviewCopy(pkt, reviewRef(ir.Output, 0))}}, // waits for tb 1's packets
		{SendPeer: -1, RecvPeer: -1, Chan: -1, Ops: []ir.Op{reviewCopy(reviewRef(ir.Input, 0), pkt)}},
	}}}
	tables, err := optable.LowerAll(p)
	if err != nil {
		t.Fatal(err)
	}
	// The interpreter runs it (tb 0 waits for tb 1's packets).
	checkUnitsAgainstInterp(t, "ll handoff", tables, interp.Request{Count: 64, DataType: ir.Float32, RedOp: ir.Sum})
	if independent(tables) {
		t.Error("independent: true for threadblocks that wait for each other's packets, want false")
	}
}
