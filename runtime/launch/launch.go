// Package launch is the launch contract: one launch of one rank's op
// table (codegen/optable) as every backend runs it, so that the host
// interpreter (runtime/interp), the host backend (runtime/host) and the
// CUDA backend (cuda) agree on it bit for bit (docs/design/ir.md):
//
//   - the request every rank passes (Request): count, datatype, reduction,
//     root, arrangement, LL packet format, slices, launch counter, timeout;
//   - the geometry it resolves to (Resolve): the chunk layout and the
//     placement (ir.md §2, §3), the pipeline slices (the rule of Slices),
//     the LL flag and scratch half of the launch (§5.4), the epoch of the
//     dependency counters (docs/optable.md);
//   - a rank's buffer sizes (BufferSizes) and the in-place arrangement of
//     its buffers (InPlaceOffsets, NCCL's);
//   - the errors a launch reports (Error, ErrTimeout, ErrAborted).
//
// It sits below the interpreter and the backends and above ir and
// codegen/optable; it runs nothing.
package launch

import (
	"errors"
	"fmt"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
)

// DefaultTimeout bounds every wait when Request.Timeout is 0 (the default
// of THESEUS_TIMEOUT, which the runtime passes in).
const DefaultTimeout = 60 * time.Second

// Request is one launch of a collective on the communicator, as every rank
// sees it (all ranks pass equal requests, except for their buffers).
type Request struct {
	// Count is the NCCL count: elements per block (>= 0).
	Count    int64
	DataType ir.DataType
	// RedOp is the reduction of reduce ops (ignored by schedules without
	// them). Avg runs as sum, then the avg epilogue (ir.md §8).
	RedOp ir.RedOp
	// Root is the physical root rank of a rooted collective (broadcast,
	// reduce, gather, scatter); ignored otherwise.
	Root int
	// InPlace selects the in-place arrangement (NCCL: the buffers overlap as
	// ir.md §3 says); the table must support the chosen arrangement.
	InPlace bool
	// PacketType is the LL packet format (LL programs; THESEUS_LL_PROTOCOL).
	PacketType ir.PacketType
	// Slices is the number of pipeline slices S (Simple programs). 0 picks
	// ir.SlicesFor(Count, C, DataType, table.SliceBytes) (Slices). LL
	// programs are never sliced: 0 or 1 only.
	Slices int64
	// Launch is the communicator's launch counter, >= 1, identical on every
	// rank and incremented once per launch. It is the LL flag (low 32 bits),
	// selects the LL scratch half (parity), and is the epoch of the
	// dependency counters (low 24 bits).
	Launch uint64
	// Timeout bounds each wait (semaphore, dependency, barrier, packet
	// flag); 0 means DefaultTimeout.
	Timeout time.Duration
}

// ErrTimeout and ErrAborted are wrapped by the error of a wait that timed
// out, or that stopped because another threadblock or rank failed (the
// abort word was set) or the context was cancelled.
var (
	ErrTimeout = errors.New("timed out")
	ErrAborted = errors.New("aborted")
)

// Error is an execution error of one rank's launch: a bad request or
// memory, a wait that timed out or was aborted, or a reference outside a
// buffer. Rank is the physical rank and Logical the table's rank; TB and
// Step are -1 when the error is not about one op.
type Error struct {
	Rank, Logical int
	TB, Step      int
	Slice         int64
	Op            ir.Opcode
	// Peer is the physical rank whose signal a timed-out or aborted
	// semaphore wait was waiting for; -1 otherwise.
	Peer int
	Msg  string
	Err  error // ErrTimeout, ErrAborted, a context error, or nil
}

// PeerRank returns Peer: the physical rank a failed semaphore wait waited
// for, or -1.
func (e *Error) PeerRank() int { return e.Peer }

func (e *Error) Error() string {
	where := fmt.Sprintf("rank %d", e.Rank)
	if e.Logical != e.Rank {
		where += fmt.Sprintf(" (logical %d)", e.Logical)
	}
	if e.TB >= 0 {
		where += fmt.Sprintf(" tb %d", e.TB)
		if e.Step >= 0 {
			where += fmt.Sprintf(" step %d (%v, slice %d)", e.Step, e.Op, e.Slice)
		}
	}
	return "interp: " + where + ": " + e.Msg
}

func (e *Error) Unwrap() error { return e.Err }

// Dependency counters hold epoch<<ProgressBits | progress (docs/optable.md):
// the epoch is the launch counter's low 64-ProgressBits bits, so counters
// are never reset between launches.
const (
	ProgressBits = 40
	ProgressMask = 1<<ProgressBits - 1
	EpochMask    = 1<<(64-ProgressBits) - 1
)

// LLFlag is the LL packet flag of launch counter launch (>= 1): launch mod
// (2^32-1), plus 1. It is never 0 (zeroed scratch never looks written) and
// consecutive launches, and launches two apart (which share a scratch half),
// always have different flags (docs/design/ir.md §5.4).
func LLFlag(launch uint64) uint32 { return uint32(launch%0xFFFFFFFF) + 1 }

// Slices is the number of pipeline slices of a launch of t for req:
// req.Slices when set, 1 for LL tables, else ir.SlicesFor with the
// table's slice size (sliceBytes when the table sets none; 0 leaves it to
// ir.SlicesFor's default).
func Slices(t *optable.Table, req Request, sliceBytes int64) int64 {
	if req.Slices != 0 {
		return req.Slices
	}
	if t.Protocol == ir.LL {
		return 1
	}
	sb := t.SliceBytes
	if sb == 0 {
		sb = sliceBytes
	}
	return ir.SlicesFor(req.Count, t.ChunksPerBlock, req.DataType, sb)
}

// Geometry is what one rank's launch resolves once (Resolve).
type Geometry struct {
	Layout    ir.Layout
	Placement ir.Placement
	Slices    int64
	ElemSize  int64
	LL        bool
	// PacketType is the LL packet format.
	PacketType ir.PacketType
	// ChunkBytes is the bytes of one scratch chunk (twice the payload for
	// LL).
	ChunkBytes int64
	// HalfOff is the byte offset of this launch's LL scratch half (0 for
	// Simple): (Launch mod 2) × MaxScratchChunks × ChunkBytes, the same on
	// every rank.
	HalfOff int64
	// Flag is the launch's LL flag (LLFlag); Epoch its dependency-counter
	// epoch, shifted into place.
	Flag     uint32
	Epoch    uint64
	Timeout  time.Duration
	RedOp    ir.RedOp
	DataType ir.DataType
	Launch   uint64
}

// Resolve checks req against t and computes the geometry of the launch on
// physical rank rank. Errors (*Error): a nil or invalid table, a rank, root,
// count, datatype, op, arrangement, packet type, launch counter or slice
// count out of range, or sizes that overflow.
func Resolve(t *optable.Table, rank int, req Request) (*Geometry, error) {
	fail := func(format string, args ...any) error {
		lg := -1
		if t != nil {
			lg = t.Rank
		}
		return &Error{Peer: -1, Rank: rank, Logical: lg, TB: -1, Step: -1, Msg: fmt.Sprintf(format, args...)}
	}
	if t == nil {
		return nil, fail("nil table")
	}
	if err := t.Validate(); err != nil {
		return nil, fail("invalid table: %v", err)
	}
	switch {
	case rank < 0 || rank >= t.NRanks:
		return nil, fail("rank outside 0..%d", t.NRanks-1)
	case req.Count < 0:
		return nil, fail("count %d < 0", req.Count)
	case req.DataType >= ir.NumDataTypes:
		return nil, fail("unknown data type %v", req.DataType)
	case req.RedOp >= ir.NumRedOps:
		return nil, fail("unknown reduction op %v", req.RedOp)
	case t.Collective.Rooted() && (req.Root < 0 || req.Root >= t.NRanks):
		return nil, fail("root %d outside 0..%d", req.Root, t.NRanks-1)
	case req.InPlace && !t.InPlace:
		return nil, fail("the schedule does not support in-place requests")
	case !req.InPlace && !t.OutOfPlace:
		return nil, fail("the schedule does not support out-of-place requests")
	case req.Launch == 0:
		return nil, fail("launch counter 0 (it starts at 1)")
	case req.PacketType != ir.LL16 && req.PacketType != ir.LL8:
		return nil, fail("unknown packet type %v", req.PacketType)
	case req.Slices < 0:
		return nil, fail("slices %d < 0", req.Slices)
	case t.Protocol == ir.LL && req.Slices > 1:
		return nil, fail("LL schedules are never sliced (slices %d)", req.Slices)
	}
	g := &Geometry{
		Placement: t.Placement(req.Root, req.InPlace),
		LL:        t.Protocol == ir.LL, PacketType: req.PacketType, Timeout: req.Timeout, RedOp: req.RedOp,
		DataType: req.DataType, Launch: req.Launch,
		Flag: LLFlag(req.Launch), Epoch: (req.Launch & EpochMask) << ProgressBits,
	}
	if g.Timeout <= 0 {
		g.Timeout = DefaultTimeout
	}
	if !t.Collective.Rooted() {
		g.Placement.ProgRoot, g.Placement.Root = 0, 0
	}
	if g.Placement.Logical(rank) != t.Rank {
		return nil, fail("physical rank %d runs logical rank %d under root %d, but the table is rank %d's", rank, g.Placement.Logical(rank), req.Root, t.Rank)
	}
	g.Slices = Slices(t, req, 0)
	lay, err := ir.NewLayout(req.Count, req.DataType, t.ChunksPerBlock, g.Slices)
	if err != nil {
		return nil, fail("%v", err)
	}
	g.Layout, g.ElemSize = lay, lay.ElemSize
	maxOps := 0
	for _, tb := range t.TBs {
		maxOps = max(maxOps, len(tb.Ops))
	}
	if maxOps > 0 && g.Slices > ProgressMask/int64(maxOps) {
		return nil, fail("%d slices x %d ops overflow the dependency counters", g.Slices, maxOps)
	}
	g.ChunkBytes = lay.Stride * g.ElemSize
	if g.LL {
		// Both halves span MaxScratchChunks chunks on every rank, so the
		// offset of the launch's half is the same in every rank's scratch
		// (a remote packet write needs the owner's half, not the writer's).
		g.ChunkBytes *= 2
		half, ok := mulOK(g.ChunkBytes, t.MaxScratchChunks)
		if !ok {
			return nil, fail("scratch size overflows")
		}
		g.HalfOff = half * int64(req.Launch&1)
	}
	return g, nil
}

func mulOK(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || c < 0 {
		return 0, false
	}
	return c, true
}

// Sizes are the bytes one physical rank's buffers need for a request.
type Sizes struct {
	// Input and Output are the NCCL buffer sizes (count * size * blocks of
	// that rank; 0 when the collective gives the rank no such buffer). In
	// place, one lies inside the other (InPlaceOffsets).
	Input, Output int64
	// Scratch is the scratch the table needs: chunks*Stride*size for Simple;
	// for LL, two launch halves of MaxScratchChunks*2*Stride*size each (the
	// same on every rank).
	Scratch int64
}

// BufferSizes computes the buffer sizes of physical rank rank for req.
// Custom collectives size input and output as ceil(chunks/C) blocks.
// req.Launch and req.Timeout are ignored. Errors: Resolve's, or an
// overflow.
func BufferSizes(t *optable.Table, rank int, req Request) (Sizes, error) {
	req.Launch = max(req.Launch, 1) // sizes do not depend on it
	g, err := Resolve(t, rank, req)
	if err != nil {
		return Sizes{}, err
	}
	return g.Sizes(t, rank)
}

// Sizes is BufferSizes for the geometry of t's launch on physical rank
// rank.
func (g *Geometry) Sizes(t *optable.Table, rank int) (Sizes, error) {
	var s Sizes
	blockB := g.Layout.Count * g.ElemSize
	for _, k := range []ir.BufKind{ir.Input, ir.Output} {
		b := ir.Blocks(t.Collective, k, t.NRanks, rank, g.Placement.Root)
		if b < 0 { // custom: declared chunks
			b = (t.Chunks[k] + t.ChunksPerBlock - 1) / t.ChunksPerBlock
		}
		n, ok := mulOK(b, blockB)
		if !ok {
			return Sizes{}, &Error{Peer: -1, Rank: rank, Logical: t.Rank, TB: -1, Step: -1, Msg: "buffer size overflows"}
		}
		if k == ir.Input {
			s.Input = n
		} else {
			s.Output = n
		}
	}
	sc, ok := mulOK(g.ChunkBytes, t.Chunks[ir.Scratch])
	if ok && g.LL {
		sc, ok = mulOK(g.ChunkBytes, t.MaxScratchChunks)
		if ok {
			sc, ok = mulOK(sc, 2)
		}
	}
	if !ok {
		return Sizes{}, &Error{Peer: -1, Rank: rank, Logical: t.Rank, TB: -1, Step: -1, Msg: "scratch size overflows"}
	}
	s.Scratch = sc
	return s, nil
}

// InPlaceOffsets is NCCL's in-place arrangement of physical rank rank's
// buffers for collective coll (ir.md §3), with blockBytes bytes per block:
// one allocation holds both, the input at inOff and the output at outOff
// in it — the two identical (allreduce, alltoall, sendrecv, broadcast and
// reduce at the root), the input inside the output (allgather, gather at
// the root: input = output + rank*block), or the output inside the input
// (reducescatter, scatter at the root: output = input + rank*block). ok is
// false when the rank's buffers do not alias (non-roots of rooted
// collectives, custom collectives).
func InPlaceOffsets(coll ir.Collective, rank, root int, blockBytes int64) (inOff, outOff int64, ok bool) {
	off := int64(rank) * blockBytes
	isRoot := rank == root
	switch coll {
	case ir.AllReduce, ir.AllToAll, ir.SendRecv:
		return 0, 0, true
	case ir.Broadcast, ir.Reduce:
		return 0, 0, isRoot
	case ir.AllGather:
		return off, 0, true
	case ir.Gather:
		return off, 0, isRoot
	case ir.ReduceScatter:
		return 0, off, true
	case ir.Scatter:
		return 0, off, isRoot
	}
	return 0, 0, false
}

// ScratchHalfOffset is the byte offset a launch adds to every scratch
// address (this rank's and its peers') for req.Launch: for LL tables,
// (Launch mod 2) * MaxScratchChunks * 2 * Stride * size, the start of the
// launch's half, the same on every rank; 0 for Simple tables. A backend
// that lays the halves out differently (for example a communicator-wide
// fixed half) can subtract it from the scratch views it passes. Errors:
// Resolve's (req.Launch must be >= 1).
func ScratchHalfOffset(t *optable.Table, rank int, req Request) (int64, error) {
	g, err := Resolve(t, rank, req)
	if err != nil {
		return 0, err
	}
	return g.HalfOff, nil
}
