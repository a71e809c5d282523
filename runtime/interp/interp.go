// Package interp is the host interpreter of operation tables
// (codegen/optable): the CPU reference backend that runs a primitive-level
// schedule exactly as docs/design/ir.md specifies, element for element, so
// that the CUDA backend can be tested bit for bit against it.
//
// Every rank runs its table; every threadblock of a rank runs as its own
// goroutine, walking `for s in 0..S-1: for op in ops: run(op, s)`. What the
// interpreter implements, by section of ir.md:
//
//   - §2, §3 chunk geometry and placement: each user-buffer ref is mapped
//     through ir.Placement.Resolve (root rotation, in-place aliasing) and
//     ir.Layout.UserChunk; scratch chunk i is Stride elements at i*Stride
//     (Simple), or 2*Stride*size bytes at i*2*Stride*size within the launch's
//     scratch half (LL; half L mod 2, each half MaxScratchChunks chunks on
//     every rank).
//   - §5.1 the per-chunk element rule: L_t = min(len) over user-buffer refs
//     (Stride if none); dst[e] = src0[e] ⊕ src1[e] ⊕ … for e < L_t; packet
//     dsts are written for the whole Stride (zero data past L_t).
//   - §5.3 remote refs through channel ends into the peer's memory;
//     semaphores (signal adds 1 to the other end's inbound word, wait
//     increments this end's expected counter and waits for inbound >=
//     expected); dependencies on per-threadblock counters that hold
//     epoch<<40 | progress, epoch = launch mod 2^24 (docs/optable.md), so
//     they are never reset; barriers; flush (a no-op: host stores are
//     visible when done).
//   - §5.4 LL packets: LL16 (two 4-byte data, 4-byte flag halves) and LL8
//     (4 data bytes, 4 flag bytes); the flag is the low 32 bits of the launch
//     counter; LL scratch is two halves used by launch parity.
//   - §8 numerics through runtime/interp/numeric, and the avg epilogue after
//     all of a rank's ops.
//
// Every wait is bounded by Request.Timeout: a wait that does not complete
// in time returns an *Error naming the rank, threadblock, step, slice and
// what it waited for; nothing hangs and nothing panics. Waiting spins
// briefly, then yields, then sleeps with exponential backoff (2 µs doubling
// to 500 µs), so blocked threadblocks do not burn the cores.
//
// Memory is abstracted so that ranks may be goroutines of one process
// (World, Run) or OS processes sharing memory (RunRank with a RankMem whose
// slices and words are mmap'd): see RankMem.
package interp

import (
	"context"
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
	// ir.SlicesFor(Count, C, DataType, table.SliceBytes). LL programs are
	// never sliced: 0 or 1 only.
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

// ErrTimeout and ErrAborted are wrapped by the *Error of a wait that timed
// out, or that stopped because another threadblock or rank failed (the
// abort word was set) or the context was cancelled.
var (
	ErrTimeout = errors.New("timed out")
	ErrAborted = errors.New("aborted")
)

// Error is an execution error of one rank: a bad request or memory, a wait
// that timed out or was aborted, or a reference outside a buffer. Rank is
// the physical rank and Logical the table's rank; TB and Step are -1 when
// the error is not about one op.
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

// geometry is what one rank's launch resolves once.
type geometry struct {
	lay       ir.Layout
	pl        ir.Placement
	slices    int64
	es        int64
	ll        bool
	pt        ir.PacketType
	chunkB    int64 // bytes of one scratch chunk (2x payload for LL)
	halfOff   int64 // byte offset of this launch's LL scratch half (0 for Simple)
	flag      uint32
	epoch     uint64 // launch epoch in the dependency counters' high bits
	timeout   time.Duration
	reduceOp  ir.RedOp
	dataType  ir.DataType
	launchCnt uint64
}

// LLFlag is the LL packet flag of launch counter launch (>= 1): launch mod
// (2^32-1), plus 1. It is never 0 (zeroed scratch never looks written) and
// consecutive launches, and launches two apart (which share a scratch half),
// always have different flags (docs/design/ir.md §5.4).
func LLFlag(launch uint64) uint32 { return uint32(launch%0xFFFFFFFF) + 1 }

// Dependency counters hold epoch<<progressBits | progress.
const (
	progressBits = 40
	progressMask = 1<<progressBits - 1
	epochMask    = 1<<(64-progressBits) - 1
)

// resolve checks the request against the table and computes the geometry
// of the launch on physical rank rank.
func resolve(t *optable.Table, rank int, req Request) (*geometry, error) {
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
	g := &geometry{
		pl: t.Placement(req.Root, req.InPlace),
		ll: t.Protocol == ir.LL, pt: req.PacketType, timeout: req.Timeout, reduceOp: req.RedOp,
		dataType: req.DataType, launchCnt: req.Launch,
		flag: LLFlag(req.Launch), epoch: (req.Launch & epochMask) << progressBits,
	}
	if g.timeout <= 0 {
		g.timeout = DefaultTimeout
	}
	if !t.Collective.Rooted() {
		g.pl.ProgRoot, g.pl.Root = 0, 0
	}
	if g.pl.Logical(rank) != t.Rank {
		return nil, fail("physical rank %d runs logical rank %d under root %d, but the table is rank %d's", rank, g.pl.Logical(rank), req.Root, t.Rank)
	}
	g.slices = req.Slices
	if g.slices == 0 {
		g.slices = 1
		if !g.ll {
			g.slices = ir.SlicesFor(req.Count, t.ChunksPerBlock, req.DataType, t.SliceBytes)
		}
	}
	lay, err := ir.NewLayout(req.Count, req.DataType, t.ChunksPerBlock, g.slices)
	if err != nil {
		return nil, fail("%v", err)
	}
	g.lay, g.es = lay, lay.ElemSize
	maxOps := 0
	for _, tb := range t.TBs {
		maxOps = max(maxOps, len(tb.Ops))
	}
	if maxOps > 0 && g.slices > progressMask/int64(maxOps) {
		return nil, fail("%d slices x %d ops overflow the dependency counters", g.slices, maxOps)
	}
	g.chunkB = lay.Stride * g.es
	if g.ll {
		// Both halves span MaxScratchChunks chunks on every rank, so the
		// offset of the launch's half is the same in every rank's scratch
		// (a remote packet write needs the owner's half, not the writer's).
		g.chunkB *= 2
		half, ok := mulOK(g.chunkB, t.MaxScratchChunks)
		if !ok {
			return nil, fail("scratch size overflows")
		}
		g.halfOff = half * int64(req.Launch&1)
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
	// place, one lies inside the other (see NewBuffers).
	Input, Output int64
	// Scratch is the scratch the table needs: chunks*Stride*size for Simple;
	// for LL, two launch halves of MaxScratchChunks*2*Stride*size each (the
	// same on every rank).
	Scratch int64
}

// BufferSizes computes the buffer sizes of physical rank rank for req.
// Custom collectives size input and output as ceil(chunks/C) blocks.
// req.Launch and req.Timeout are ignored. Errors: as RunRank's request checks, or an overflow.
func BufferSizes(t *optable.Table, rank int, req Request) (Sizes, error) {
	req.Launch = max(req.Launch, 1) // sizes do not depend on it
	g, err := resolve(t, rank, req)
	if err != nil {
		return Sizes{}, err
	}
	return g.sizes(t, rank)
}

func (g *geometry) sizes(t *optable.Table, rank int) (Sizes, error) {
	var s Sizes
	blockB := g.lay.Count * g.es
	for _, k := range []ir.BufKind{ir.Input, ir.Output} {
		b := ir.Blocks(t.Collective, k, t.NRanks, rank, g.pl.Root)
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
	sc, ok := mulOK(g.chunkB, t.Chunks[ir.Scratch])
	if ok && g.ll {
		sc, ok = mulOK(g.chunkB, t.MaxScratchChunks)
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

// RunRank runs one launch of table t on physical rank rank with memory mem,
// and returns when all of the rank's threadblocks (and the avg epilogue)
// are done. It is the per-rank entry point of the host backend: the other
// ranks run their own RunRank concurrently, in this process or in others
// that share the memory mem describes. t must be the table of logical rank
// ir.Placement{...}.Logical(rank) for req.Root.
//
// Errors: *Error for a bad request, table or memory, a reference outside a
// buffer, and a wait that timed out (wrapping ErrTimeout) or was aborted
// (ErrAborted, or ctx's error). On an error RunRank sets *mem.Abort (if
// given) so that every other rank sharing it stops waiting, and stops its
// own threadblocks. Several threadblock errors are joined (errors.Join),
// the root causes first. A failed launch leaves semaphores and counters
// unbalanced: every rank must stop, and the communicator must re-initialise
// them (InitEnds) before it launches again.
func RunRank(ctx context.Context, t *optable.Table, rank int, req Request, mem *RankMem) error {
	g, err := resolve(t, rank, req)
	if err != nil {
		return err
	}
	rr, err := newRankRun(ctx, t, rank, g, mem)
	if err != nil {
		return err
	}
	return rr.run()
}

// ScratchHalfOffset is the byte offset RunRank adds to every scratch
// address (this rank's and its peers') for req.Launch: for LL tables,
// (Launch mod 2) * MaxScratchChunks * 2 * Stride * size, the start of the
// launch's half, the same on every rank; 0 for Simple tables. A backend that
// lays the halves out differently (for example a communicator-wide fixed
// half) can subtract it from the scratch views it passes. Errors: as
// RunRank's request checks (req.Launch must be >= 1).
func ScratchHalfOffset(t *optable.Table, rank int, req Request) (int64, error) {
	g, err := resolve(t, rank, req)
	if err != nil {
		return 0, err
	}
	return g.halfOff, nil
}
