// Package replay holds the replay record: one collective call that C code
// may launch again, as many times as the record allows, without entering
// Go (docs/design/cuda.md, "Replay from C"). The NCCL library's C side
// (ncclabi/abi.c) uses it so that a repeated ncclAllReduce costs its
// caller one driver capture query and cuLaunchKernel, not a crossing into
// Go and the runtime's walk.
//
// A record is C memory laid out as replay.h declares, shared by three
// parties:
//
//   - the owner of the call path (the NCCL engine, through runtime/comm and
//     runtime/executor) arms a record after a call that took the runtime's
//     repeat path, with the call's key, how many calls may follow before
//     the selector's next epoch, and the launch counter;
//   - the device backend fills its launch part (device.Replayer: the
//     kernel, its by-value argument, the stream and the stream's failure
//     record) and provides the C launch function;
//   - C code calls th_replay_call, which launches only while the record is
//     armed, not poisoned, has calls left, matches the key and the stream
//     has no recorded failure; otherwise the caller takes its Go path.
//
// Go disarms a record before anything that the calls made from C would
// make wrong (any other call on the communicator, its destruction), waiting
// for a C call in progress; the count of calls made from C is then taken
// and added to the Go side's counters (Take). Poison declines every call
// from any goroutine at once (an asynchronous error, a closed stream).
//
// Records live outside Go's heap (anonymous mappings, 512 bytes each) and
// are never freed: a C caller may keep a record's address in thread-local
// storage after its communicator is gone (a disarmed record declines every
// call). The package has no cgo: record mirrors replay.h's struct, and
// replaytest (a cgo package) checks that the two layouts agree and calls
// th_replay_call for the tests.
package replay

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// KeyWords is the number of 64-bit words of a call's key
// (TH_REPLAY_KEY_WORDS).
const KeyWords = 8

// ArgBytes is the largest kernel argument a record holds, in bytes
// (TH_REPLAY_ARG_BYTES).
const ArgBytes = 256

// Results of a launch function (replay.h).
const (
	Launched = 0 // enqueued
	Declined = 1 // nothing enqueued: the Go path decides (a capture, another context current)
	Failed   = 2 // the launch failed, nothing enqueued: the Go path relaunches and reports
)

// States of a record (replay.h).
const (
	stOff   = 0
	stArmed = 1
	stBusy  = 2
)

// Key is a call's key as the C caller packs it: the record launches only
// for a call whose key is equal in every word.
type Key [KeyWords]uint64

// record is struct th_replay of replay.h, field for field
// (replaytest.TestLayout checks the offsets).
type record struct {
	state, poison               uint32
	key                         Key
	left, taken                 int64
	launchBase                  uint64
	launch, ctx, stream, fn     uintptr
	grid, threads, shmem, timed uint32
	err                         uintptr
	offLaunch, argBytes         uint32
	tLaunches, tNs              int64
	lastResult, _               int32
	_                           [8]byte // arg is 16-byte aligned in C
	arg                         [ArgBytes]byte
}

// recordBytes is the space each record takes in a slab.
const recordBytes = 512

// slab hands out records from anonymous mappings.
var slab struct {
	sync.Mutex
	free []byte
}

func alloc() *record {
	slab.Lock()
	defer slab.Unlock()
	if len(slab.free) < recordBytes {
		b, err := syscall.Mmap(-1, 0, 64<<10, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return nil
		}
		slab.free = b
	}
	p := (*record)(unsafe.Pointer(&slab.free[0]))
	slab.free = slab.free[recordBytes:]
	return p
}

// Record is one replay record.
type Record struct{ p *record }

// New allocates a disarmed record; nil when the system has no memory for
// one.
func New() *Record {
	p := alloc()
	if p == nil {
		return nil
	}
	return &Record{p: p}
}

// Addr is the record's address, for C code (a th_replay*).
func (r *Record) Addr() uintptr { return uintptr(unsafe.Pointer(r.p)) }

// Armed reports whether the record is armed or in use by a C call.
func (r *Record) Armed() bool { return atomic.LoadUint32(&r.p.state) != stOff }

// Disarm stops C calls from using the record: it returns once the record
// is off, after a C call in progress has finished (a launch, which waits
// only for room in the stream's launch queue). Safe from any goroutine.
func (r *Record) Disarm() {
	for spins := 0; ; spins++ {
		if atomic.CompareAndSwapUint32(&r.p.state, stArmed, stOff) || atomic.LoadUint32(&r.p.state) == stOff {
			return
		}
		if spins > 64 {
			runtime.Gosched()
		}
	}
}

// Poison makes every C call decline the record until it is armed again.
// Safe from any goroutine, at any time.
func (r *Record) Poison() { atomic.StoreUint32(&r.p.poison, 1) }

// Poisoned reports whether Poison was called since the record was last
// armed.
func (r *Record) Poisoned() bool { return atomic.LoadUint32(&r.p.poison) != 0 }

// Take returns how many calls C made from the record since the last Take,
// and resets the count. The record must be off (Disarm).
func (r *Record) Take() int64 {
	n := r.p.taken
	r.p.taken = 0
	return n
}

// LaunchTime returns how many launches C timed (Launch.Timed) and the
// nanoseconds spent inside cuLaunchKernel for them, cumulative over the
// record's life. The record must be off.
func (r *Record) LaunchTime() (launches, ns int64) { return r.p.tLaunches, r.p.tNs }

// LastResult is the driver's result of the last launch from C that
// failed (0 if none). The record must be off.
func (r *Record) LastResult() int { return int(r.p.lastResult) }

// Launch is the launch part of a record, as a backend fills it.
type Launch struct {
	// Fn is the C launch function (a th_replay_launch_fn).
	Fn uintptr
	// Ctx, Stream and Func are the CUcontext that must be current, the
	// CUstream and the CUfunction.
	Ctx, Stream, Func uintptr
	// Grid and Threads are the grid and block sizes; Shmem the dynamic
	// shared memory in bytes.
	Grid, Threads, Shmem uint32
	// Timed asks the launch function to time cuLaunchKernel (LaunchTime).
	Timed bool
	// Err is the address of the 32-bit code of the stream's failure
	// record (memory outside Go's heap that outlives the record's use:
	// the backend poisons and disarms the record before freeing it). A
	// nonzero code declines every call.
	Err uintptr
	// Arg is the kernel's by-value argument, at most ArgBytes bytes, and
	// OffLaunch the byte offset in it of the 64-bit launch counter, which
	// th_replay_call rewrites before each launch.
	Arg       []byte
	OffLaunch int
}

// SetLaunch fills the record's launch part. The record must be off. It
// reports false, changing nothing, when l does not fit (Arg longer than
// ArgBytes, the counter outside it, no function or failure record) or the
// record is not off.
func (r *Record) SetLaunch(l Launch) bool {
	if l.Fn == 0 || l.Err == 0 || len(l.Arg) > ArgBytes || l.OffLaunch < 0 || l.OffLaunch+8 > len(l.Arg) ||
		atomic.LoadUint32(&r.p.state) != stOff {
		return false
	}
	p := r.p
	p.launch, p.ctx, p.stream, p.fn = l.Fn, l.Ctx, l.Stream, l.Func
	p.grid, p.threads, p.shmem = l.Grid, l.Threads, l.Shmem
	p.timed = 0
	if l.Timed {
		p.timed = 1
	}
	p.err = l.Err
	p.offLaunch, p.argBytes = uint32(l.OffLaunch), uint32(len(l.Arg))
	copy(p.arg[:], l.Arg)
	return true
}

// Arm lets C calls whose key is k use the record, at most left of them,
// the n-th launching with launch counter launchBase+n. The record must be
// off, with its launch part set (SetLaunch) and its count taken (Take);
// the poison is cleared. It reports false, arming nothing, when left < 1,
// the launch part is not set, or the record is not off or its count not
// taken.
func (r *Record) Arm(k Key, left int64, launchBase uint64) bool {
	p := r.p
	if left < 1 || p.launch == 0 || p.taken != 0 || atomic.LoadUint32(&p.state) != stOff {
		return false
	}
	p.key = k
	p.left = left
	p.launchBase = launchBase
	atomic.StoreUint32(&p.poison, 0)
	atomic.StoreUint32(&p.state, stArmed)
	return true
}

// Layout returns the offsets of record's fields in replay.h's declaration
// order (without the padding), then its size: what replaytest.TestLayout
// compares with C's.
func Layout() []uintptr {
	var r record
	return []uintptr{unsafe.Offsetof(r.state), unsafe.Offsetof(r.poison), unsafe.Offsetof(r.key),
		unsafe.Offsetof(r.left), unsafe.Offsetof(r.taken), unsafe.Offsetof(r.launchBase),
		unsafe.Offsetof(r.launch), unsafe.Offsetof(r.ctx), unsafe.Offsetof(r.stream), unsafe.Offsetof(r.fn),
		unsafe.Offsetof(r.grid), unsafe.Offsetof(r.threads), unsafe.Offsetof(r.shmem), unsafe.Offsetof(r.timed),
		unsafe.Offsetof(r.err), unsafe.Offsetof(r.offLaunch), unsafe.Offsetof(r.argBytes),
		unsafe.Offsetof(r.tLaunches), unsafe.Offsetof(r.tNs), unsafe.Offsetof(r.lastResult),
		unsafe.Offsetof(r.arg), unsafe.Sizeof(r)}
}
