package cuda

/*
#include "kernel/launch.h"
*/
import "C"

import (
	"fmt"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/ir"

	"github.com/theseus-ccl/theseus/cuda/driver"
)

// Launch is the kernel's by-value argument (kernel/launch.h).
type Launch = C.theseus_launch

// ChanRT is one channel end's runtime record (kernel/launch.h).
type ChanRT = C.theseus_chan_rt

// ErrorRecord is the kernel's failure record (kernel/launch.h).
type ErrorRecord = C.theseus_error

// Sizes of the C records, for allocation.
const (
	ChanRTBytes      = C.sizeof_theseus_chan_rt
	ErrorRecordBytes = C.sizeof_theseus_error
	// errorPageBytes is what a stream allocates for its failure record: a
	// page, whose second half a measurement build of the kernel
	// (kernel/bench.cu, THESEUS_PROBE_TIMES) writes timestamps into.
	errorPageBytes = 4096
	MaxBarriers    = C.THESEUS_MAX_BARRIERS
	MaxRefs        = C.THESEUS_MAX_REFS
	// RunBytes is the size of one encoded run of shared work (theseus_run;
	// units.go encodes them).
	RunBytes = C.sizeof_theseus_run
	// MaxRuns is the most runs one launch's shared work may have: the
	// kernel keeps them in shared memory.
	MaxRuns = C.THESEUS_MAX_RUNS
)

// ExecMaxThreads is the most threads per threadblock of an executor
// launch (kernel/launch.h, THESEUS_EXEC_MAX_THREADS: the launch bound of
// theseus_exec, theseus_units, theseus_spec and theseus_resident, which
// leaves them up to 128 registers a thread). A table's threads_per_block
// or THESEUS_NTHREADS above it is clamped to it (execThreads); results do
// not depend on the block size. At the former bound of 1024 the executor
// had 64 registers a thread and spilled 868 / 1,948 bytes of local stores /
// loads in its op loop (docs/design/cuda.md, "The launch bound").
const ExecMaxThreads = C.THESEUS_EXEC_MAX_THREADS

// execThreads clamps n threads per threadblock to ExecMaxThreads.
func execThreads(n int) int { return min(n, ExecMaxThreads) }

// Kernel error codes and wait kinds (kernel/launch.h).
const (
	ErrTimeout     = C.THESEUS_ERR_TIMEOUT
	ErrAborted     = C.THESEUS_ERR_ABORTED
	ErrBadRef      = C.THESEUS_ERR_BADREF
	ErrBadOp       = C.THESEUS_ERR_BADOP
	ErrTooManyRefs = C.THESEUS_ERR_TOOMANYREFS
)

// BarrierWords is how many 64-bit barrier words a table with ntbs
// threadblocks needs (arrival counters, then per-threadblock arrivals).
func BarrierWords(ntbs int) int { return MaxBarriers * (1 + ntbs) }

// launchKernel launches fn with args on stream s: grid threadblocks of
// block threads.
func launchKernel(fn driver.Function, grid, block int, s driver.Stream, args *Launch) error {
	return driver.Launch1(fn, grid, block, 0, s, unsafe.Pointer(args))
}

func setChanRT(rt *ChanRT, peerBuf [3]driver.Ptr, peerInbound, inbound, expected driver.Ptr, peerPhys int) {
	for i := range 3 {
		rt.peer_buf[i] = C.uint64_t(peerBuf[i])
	}
	rt.peer_inbound = C.uint64_t(peerInbound)
	rt.inbound = C.uint64_t(inbound)
	rt.expected = C.uint64_t(expected)
	rt.peer_phys = C.int32_t(peerPhys)
}

type launchFields struct {
	table, chans  driver.Ptr
	bufs          [3]driver.Ptr
	publish       driver.Ptr
	barriers      driver.Ptr
	errRec, claim driver.Ptr
	abort         driver.Ptr
	count, stride int64
	slices        int64
	launch        uint64
	timeout       time.Duration
	rank, nranks  int
	root, shift   int
	dtype         ir.DataType
	redop         ir.RedOp
	inplace, ll8  bool
	elemSize      int
}

func b2u8(b bool) C.uint8_t {
	if b {
		return 1
	}
	return 0
}

func fillLaunch(a *Launch, f launchFields) {
	a.table = C.uint64_t(f.table)
	a.chans = C.uint64_t(f.chans)
	for i := range 3 {
		a.buf[i] = C.uint64_t(f.bufs[i])
	}
	a.publish = C.uint64_t(f.publish)
	a.barriers = C.uint64_t(f.barriers)
	a.error = C.uint64_t(f.errRec)
	a.claim = C.uint64_t(f.claim)
	a.abort_word = C.uint64_t(f.abort)
	a.count = C.int64_t(f.count)
	a.stride = C.int64_t(f.stride)
	a.slices = C.int64_t(f.slices)
	a.scratch_half = 0
	a.launch = C.uint64_t(f.launch)
	a.timeout_ns = C.uint64_t(f.timeout.Nanoseconds())
	a.rank = C.int32_t(f.rank)
	a.nranks = C.int32_t(f.nranks)
	a.root = C.int32_t(f.root)
	a.shift = C.int32_t(f.shift)
	a.dtype = C.uint8_t(f.dtype)
	a.redop = C.uint8_t(f.redop)
	a.inplace = b2u8(f.inplace)
	a.ll8 = b2u8(f.ll8)
	a.elem_size = C.uint8_t(f.elemSize)
}

// setBufs sets a launch's input and output bases (Backend.Rebase).
func setBufs(a *Launch, in, out driver.Ptr) {
	a.buf[0] = C.uint64_t(in)
	a.buf[1] = C.uint64_t(out)
}

func fillHalf(a *Launch, half int64) { a.scratch_half = C.int64_t(half) }

func fillDone(a *Launch, done, finish, fence driver.Ptr, nfence int) {
	a.done = C.uint64_t(done)
	a.finish = C.uint64_t(finish)
	a.fence = C.uint64_t(fence)
	a.nfence = C.int32_t(nfence)
}

// fillPair sets a launch's started and finished words and the peers'
// started words its pairing wait reads (npair of them at pair).
func fillPair(a *Launch, started, hdone, pair driver.Ptr, npair int) {
	a.started = C.uint64_t(started)
	a.hdone = C.uint64_t(hdone)
	a.pair = C.uint64_t(pair)
	a.npair = C.int32_t(npair)
}

// chanPeerBufOffset is the byte offset of peer_buf[k] in a channel record.
func chanPeerBufOffset(k int) int64 {
	var rt ChanRT
	return int64(unsafe.Offsetof(rt.peer_buf)) + 8*int64(k)
}

// fillUnits sets a launch's shared work (the zero unitWork: none).
func fillUnits(a *Launch, u unitWork) {
	a.units = C.uint64_t(u.runs)
	a.unit_ctr = C.uint64_t(u.ctr)
	a.nruns = C.int32_t(u.nruns)
	a.nunits = C.int64_t(u.nunits)
}

// setStream sets the fields of a prepared launch that name the stream it
// is launched on: the stream's failure record and claim word.
func setStream(a *Launch, errRec, claim driver.Ptr) {
	a.error = C.uint64_t(errRec)
	a.claim = C.uint64_t(claim)
}

// setLaunch sets the per-launch fields of a prepared launch: the counter
// and the fence count: nfence when fence is set, else 0 (no fence).
func setLaunch(a *Launch, launch uint64, fence bool, nfence int32) {
	a.launch = C.uint64_t(launch)
	a.nfence = 0
	if fence {
		a.nfence = C.int32_t(nfence)
	}
}

// launchBox holds a Launch at the start of an object of a multiple of 64
// bytes, which Go's allocator places on a 64-byte boundary (its size class
// is that multiple): the fields a launch writes (setLaunch) then share as
// few cache lines as the argument's layout allows. The padding is never
// empty (a struct ending in a zero-size field is padded by 8 bytes): a
// Launch of 264 bytes (with the point-to-point engine's and the port
// channels' fields) is boxed in 320. No Go pointers, as cgo requires of
// memory C reads.
type launchBox struct {
	a Launch
	_ [64 - unsafe.Sizeof(Launch{})%64]byte
}

// newLaunch allocates a zeroed launch argument (launchBox).
func newLaunch() *Launch { return &new(launchBox).a }

// setFence sets a launch's fence count (a captured launch is fenced).
func setFence(a *Launch, nfence int32) { a.nfence = C.int32_t(nfence) }

// KernelError is a failure the kernel recorded.
type KernelError struct {
	Code, What  uint32
	Rank, TB    int
	Step, Slice int64
	Channel     int
	Launch      uint64
	Have, Want  uint64
}

func (e *KernelError) Error() string {
	code := map[uint32]string{ErrTimeout: "timed out", ErrAborted: "aborted", ErrBadRef: "bad reference",
		ErrBadOp: "bad opcode", ErrTooManyRefs: "too many refs in one op"}[e.Code]
	what := map[uint32]string{1: "a semaphore", 2: "a dependency", 3: "a barrier", 4: "an LL packet flag", 5: "the avg epilogue",
		6: "a peer's done word (launch fence)", 7: "a peer's started word (pairing)"}[e.What]
	s := fmt.Sprintf("cuda kernel: rank %d tb %d step %d slice %d: %s", e.Rank, e.TB, e.Step, e.Slice, code)
	if e.What == 6 || e.What == 7 {
		// The channel field is the index into Args.Fence (Args.Pair).
		return s + fmt.Sprintf(" waiting for %s (entry %d, have %d, want %d) in launch %d", what, e.Channel, e.Have, e.Want, e.Launch)
	}
	if what != "" {
		s += fmt.Sprintf(" waiting for %s (channel/tb/id %d, have %d, want %d)", what, e.Channel, e.Have, e.Want)
	}
	return s + fmt.Sprintf(" in launch %d", e.Launch)
}

// recordError is the error of a host-mapped failure record: nil when its
// code is 0, the launch contract's error for a point-to-point launch's
// failure (p2pError), else the *KernelError.
func recordError(p unsafe.Pointer) error {
	e := readError(p)
	if e == nil {
		return nil
	}
	if pe := p2pError(e); pe != nil {
		return pe
	}
	return e
}

// readError decodes a host-mapped error record; nil when its code is 0.
func readError(p unsafe.Pointer) *KernelError {
	r := (*ErrorRecord)(p)
	code := uint32(*(*C.uint32_t)(unsafe.Pointer(&r.code)))
	if code == 0 {
		return nil
	}
	return &KernelError{Code: code, What: uint32(r.what), Rank: int(r.rank), TB: int(r.tb), Step: int64(r.step),
		Slice: int64(r.slice), Channel: int(r.channel), Launch: uint64(r.launch), Have: uint64(r.have), Want: uint64(r.want)}
}
