package cuda

import (
	"encoding/binary"
	"slices"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// UnitTile is the most bytes one unit of shared work moves per ref: 64 KiB
// (smaller units are less than one round of a 1024-thread block, larger
// ones leave threadblocks idle at the end: docs/design/cuda.md, "Shared
// work"), a multiple of 128 so that a tile keeps every ref's place within
// its 128-byte line (the kernel's vector path needs the refs to agree
// there).
const UnitTile = 64 << 10

// unitTile is UnitTile, or what tests and BenchmarkBandwidthSharing set
// (-bw.tile: a multiple of 128).
var unitTile int64 = UnitTile

// workSharing reports THESEUS_WORK_SHARING (docs/env.md): on unless set to 0.
func workSharing() bool {
	on, err := env.WorkSharing.Bool()
	return on || err != nil
}

// sharedUnits returns rank phys's shared work for a launch of table t at
// layout lay and placement pl, encoded as theseus_run records
// (kernel/launch.h), or nil when the launch must run the threadblocks' own
// op lists. Shared work replaces the schedule's assignment of ops to
// threadblocks by tiles that any threadblock takes (docs/design/cuda.md,
// "Shared work"), which is the same computation only when the order the
// ops run in cannot matter. So it is built only when:
//   - the table is Simple, has no channels, and the request is not avg
//     (avg's epilogue is a barrier of the threadblocks);
//   - every op is a nop, or a copy of one src or a reduce of two srcs into
//     one dst, of one chunk (Count 1), with no dependencies, whose refs are
//     this rank's input or output (no scratch, no packets);
//   - after placement (in place, the input lies in the output), no two ops'
//     dsts overlap, and no op reads bytes another op writes (an op may read
//     exactly its own dst: a reduce in place);
//   - the ops make at most MaxRuns runs.
//
// With nslices pipeline slices each op covers one piece of its chunk per
// slice (ir.Layout.UserChunk): the pieces are listed slice by slice, each
// slice in op order. Pieces of different chunks never overlap and every
// op is elementwise, so the checks above, made on each chunk's first
// piece, hold for every slice, and the slices may run in any order.
//
// A run is one piece's bytes, or consecutive pieces' (in that order) of
// one shape whose every ref continues where the previous piece's ended, in
// the same buffer: a table whose ops take the chunks in order makes one
// run per buffer range however many slices. Runs are in piece order; run
// k's units are its bytes in tiles of
// unitTile bytes from its start (the last one shorter), numbered on from
// run k-1's; every src and the dst of a unit share its offset within the
// run. Ops of no bytes (a chunk past the count) have no units.
func sharedUnits(t *optable.Table, lay ir.Layout, pl ir.Placement, phys int, nslices int64, redop ir.RedOp) []byte {
	if t.Protocol != ir.Simple || len(t.Channels) > 0 || nslices < 1 || redop == ir.Avg {
		return nil
	}
	type span struct {
		buf    ir.BufKind
		lo, hi int64 // bytes
	}
	type data struct {
		refs []span // srcs, then the dst
		n    int64
	}
	type chunkRef struct {
		buf   ir.BufKind
		chunk int64
	}
	var ops []data
	var opRefs [][]chunkRef // each op's refs, placed: for its pieces in every slice
	var dsts []span
	es := lay.ElemSize
	for _, tb := range t.TBs {
		for _, op := range tb.Ops {
			if op.Code == ir.OpNop {
				continue
			}
			okShape := (op.Code == ir.OpCopy && len(op.Srcs) == 1) || (op.Code == ir.OpReduce && len(op.Srcs) == 2)
			if !okShape || len(op.Dsts) != 1 || op.Count != 1 || len(op.Deps) > 0 {
				return nil
			}
			d := data{n: -1}
			var crs []chunkRef
			for _, r := range append(append([]ir.Ref(nil), op.Srcs...), op.Dsts...) {
				if !r.Local() || r.Packet || r.Buf == ir.Scratch {
					return nil
				}
				kb, chunk := pl.Resolve(phys, r.Buf, r.Off)
				crs = append(crs, chunkRef{kb, chunk})
				st, en := lay.UserChunk(chunk, 0)
				d.refs = append(d.refs, span{kb, st * es, en * es})
				if n := (en - st) * es; d.n < 0 || n < d.n {
					d.n = n
				}
			}
			if d.n == 0 {
				// No bytes: it reads and writes nothing. Its empty dst
				// must not join the overlap check either: sorted
				// between two dsts of one start, it would hide their
				// overlap from the check of neighbours.
				continue
			}
			dst := d.refs[len(d.refs)-1]
			dsts = append(dsts, span{dst.buf, dst.lo, dst.lo + d.n})
			ops = append(ops, d)
			opRefs = append(opRefs, crs)
		}
	}
	// No dst overlaps another; no src overlaps another op's dst.
	overlap := func(a, b span) bool {
		return a.buf == b.buf && a.lo < b.hi && b.lo < a.hi && a.lo < a.hi && b.lo < b.hi
	}
	sorted := slices.Clone(dsts)
	slices.SortFunc(sorted, func(a, b span) int {
		if a.buf != b.buf {
			return int(a.buf) - int(b.buf)
		}
		return int(a.lo - b.lo)
	})
	for i := 1; i < len(sorted); i++ {
		if overlap(sorted[i-1], sorted[i]) {
			return nil
		}
	}
	for i, d := range ops {
		for _, s := range d.refs[:len(d.refs)-1] {
			src := span{s.buf, s.lo, s.lo + d.n}
			for j, w := range dsts {
				if overlap(src, w) && (i != j || src != w) {
					return nil
				}
			}
		}
	}
	// The pieces, slice by slice (slice 0's are the ops' first pieces).
	pieces := append([]data(nil), ops...)
	for sl := int64(1); sl < nslices; sl++ {
		for _, crs := range opRefs {
			d := data{n: -1}
			for _, cr := range crs {
				st, en := lay.UserChunk(cr.chunk, sl)
				d.refs = append(d.refs, span{cr.buf, st * es, en * es})
				if n := (en - st) * es; d.n < 0 || n < d.n {
					d.n = n
				}
			}
			if d.n > 0 {
				pieces = append(pieces, d)
			}
		}
	}
	// Runs: consecutive pieces that continue each other.
	var runs []data
	for _, d := range pieces {
		if k := len(runs) - 1; k >= 0 && len(runs[k].refs) == len(d.refs) {
			prev := &runs[k]
			cont := true
			for i, r := range d.refs {
				if r.buf != prev.refs[i].buf || r.lo != prev.refs[i].lo+prev.n {
					cont = false
					break
				}
			}
			if cont {
				prev.n += d.n
				continue
			}
		}
		runs = append(runs, data{refs: slices.Clone(d.refs), n: d.n})
	}
	if len(runs) == 0 || len(runs) > MaxRuns {
		return nil
	}
	out := make([]byte, 0, len(runs)*RunBytes)
	first := int64(0)
	for _, d := range runs {
		var u [RunBytes]byte
		nsrc := len(d.refs) - 1
		for i, r := range d.refs {
			k := i
			if i == nsrc {
				k = 2
			}
			binary.LittleEndian.PutUint64(u[8*k:], uint64(r.lo))
			u[44+k] = byte(r.buf)
		}
		binary.LittleEndian.PutUint64(u[24:], uint64(d.n))
		binary.LittleEndian.PutUint64(u[32:], uint64(first))
		binary.LittleEndian.PutUint32(u[40:], uint32(unitTile))
		u[47] = byte(nsrc)
		out = append(out, u[:]...)
		first += (d.n + unitTile - 1) / unitTile
	}
	return out
}

// unitWork is a launch's shared work in device memory: the encoded runs,
// the counter word pair (zeroed), and how many runs and units they hold
// (the zero value: none).
type unitWork struct {
	runs, ctr     driver.Ptr
	nruns, nunits int64
}

// placeUnits puts encoded shared work (sharedUnits) in device memory
// through alloc (zeroed memory) and upload. Errors: theirs.
func placeUnits(units []byte, alloc func(int64) (driver.Ptr, error), upload func(driver.Ptr, []byte) error) (unitWork, error) {
	runs, err := alloc(int64(len(units)))
	if err != nil {
		return unitWork{}, err
	}
	if err := upload(runs, units); err != nil {
		return unitWork{}, err
	}
	ctr, err := alloc(16)
	if err != nil {
		return unitWork{}, err
	}
	nruns, nunits := runCounts(units)
	return unitWork{runs: runs, ctr: ctr, nruns: nruns, nunits: nunits}, nil
}

// runCounts returns how many runs encoded shared work holds and how many
// units they make (the launch's nruns and nunits).
func runCounts(b []byte) (nruns, nunits int64) {
	nruns = int64(len(b) / RunBytes)
	if nruns == 0 {
		return 0, 0
	}
	last := b[(nruns-1)*RunBytes:]
	n := int64(binary.LittleEndian.Uint64(last[24:]))
	first := int64(binary.LittleEndian.Uint64(last[32:]))
	tile := int64(binary.LittleEndian.Uint32(last[40:]))
	return nruns, first + (n+tile-1)/tile
}
