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

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// Request is one launch of a collective as every rank sees it: the launch
// contract's (runtime/launch), which the interpreter runs.
type Request = launch.Request

// Error is an execution error of one rank: the launch contract's
// (runtime/launch.Error).
type Error = launch.Error

// Sizes are the bytes one physical rank's buffers need for a request
// (runtime/launch.Sizes).
type Sizes = launch.Sizes

// DefaultTimeout bounds every wait when Request.Timeout is 0.
const DefaultTimeout = launch.DefaultTimeout

// ErrTimeout and ErrAborted are the launch contract's (runtime/launch):
// wrapped by the *Error of a wait that timed out, or that stopped because
// another threadblock or rank failed or the context was cancelled.
var (
	ErrTimeout = launch.ErrTimeout
	ErrAborted = launch.ErrAborted
)

// geometry is what one rank's launch resolves once (the launch
// contract's).
type geometry = launch.Geometry

// Dependency counters hold epoch<<progressBits | progress
// (runtime/launch).
const (
	progressBits = launch.ProgressBits
	progressMask = launch.ProgressMask
	epochMask    = launch.EpochMask
)

func resolve(t *optable.Table, rank int, req Request) (*geometry, error) {
	return launch.Resolve(t, rank, req)
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
