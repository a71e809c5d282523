// Package replay is the C launcher of launch plans: a record holds the
// launches of up to Entries of one communicator's plans on one stream
// (runtime/executor.Plan, as the communicator's plan cache keeps them),
// which C code may make again, as many times as the record allows, without
// entering Go (docs/design/runtime.md, "Launchers"; docs/ncclabi.md,
// "Launches from C"). The NCCL library's C side (ncclabi/abi.c) uses it so
// that a repeated ncclAllReduce costs its caller a driver capture query and
// cuLaunchKernel, not a crossing into Go; with several entries, calls that
// cycle over a few buffers (a data-parallel job's gradient buckets,
// nccl-tests' shifted buffers) are served too.
//
// A record is memory outside Go's heap laid out as replay.h declares,
// shared by three parties:
//
//   - the communicator (runtime/comm) fills an entry from a plan it has
//     just served, when the executor says a launcher outside Go may
//     repeat it (executor.Repeatable), and arms the record with how many
//     calls may follow before the selector's next epoch, the launch
//     counter and the scratch layout of the last launch;
//   - the device backend describes the plan's prepared launch as plain
//     data (device.ImageExporter: the kernel, its by-value argument, the
//     stream and the stream's failure record) and provides the C launch
//     function, and stops the record (Stop) before what it names goes
//     away;
//   - C code calls th_replay_call, which launches only while the record is
//     armed, not poisoned, has calls left, one entry matches the call's key
//     and the stream has no recorded failure, writing the launch counter
//     and the fence count (a launch whose scratch layout differs from the
//     last launch's is fenced); otherwise the caller takes its Go path.
//
// Go disarms a record before anything that the calls made from C would
// make wrong (any other call on the communicator, its destruction), waiting
// for a C call in progress; what C did is then taken (Take) and counted as
// launches of the entries' plans (executor.PlansLaunched). Poison declines
// every call from any goroutine at once (an asynchronous error, an abort, a
// closed stream).
//
// Records live outside Go's heap (anonymous mappings, about 5 KiB each) and
// are never freed: a C caller may keep a record's address in thread-local
// storage after its communicator is gone (a disarmed record declines every
// call). The package has no cgo: record mirrors replay.h's structs, and
// replaytest (a cgo package) checks that the layouts agree and calls
// th_replay_call for the tests.
package replay

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// KeyWords is the number of 64-bit words of a call's key
// (TH_REPLAY_KEY_WORDS).
const KeyWords = 8

// ArgBytes is the largest kernel argument an entry holds, in bytes
// (TH_REPLAY_ARG_BYTES): at least the CUDA backend's launch argument
// (cuda.Launch, 264 bytes; cuda's TestLaunchFitsReplayEntry), or no
// launch of it is ever made from C.
const ArgBytes = 320

// Entries is the number of calls a record holds (TH_REPLAY_ENTRIES).
const Entries = 16

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

// Key is a call's key as the C caller packs it: an entry launches only
// for a call whose key is equal in every word.
type Key [KeyWords]uint64

// entry is th_replay_entry of replay.h, field for field.
type entry struct {
	key                            Key
	fn                             uintptr
	grid, threads, shmem           uint32
	nfence, sig                    int32
	fenceAll                       uint32
	offLaunch, offNFence, argBytes uint32
	_                              uint32
	arg                            [ArgBytes]byte
}

// record is struct th_replay of replay.h, field for field
// (replaytest.TestLayout checks the offsets).
type record struct {
	state, poison       uint32
	left, taken, fenced int64
	lastEntry, lastSig  int32
	launchBase          uint64
	nentries, timed     uint32
	launch, ctx, stream uintptr
	err                 uintptr
	tLaunches, tNs      int64
	misses, declines    int64
	_                   uint64 // th_replay's pad_
	entries             [Entries]entry
}

// slab hands out records from anonymous mappings (never freed).
var slab struct {
	sync.Mutex
	free []byte
}

func alloc() *record {
	size := int(unsafe.Sizeof(record{}))
	size = (size + 63) &^ 63
	slab.Lock()
	defer slab.Unlock()
	if len(slab.free) < size {
		b, err := syscall.Mmap(-1, 0, max(16*size, 64<<10), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			return nil
		}
		slab.free = b
	}
	p := (*record)(unsafe.Pointer(&slab.free[0]))
	slab.free = slab.free[size:]
	return p
}

// Record is one replay record.
type Record struct{ p *record }

// New allocates a disarmed record with no entries; nil when the system
// has no memory for one (about 5 KiB).
func New() *Record {
	p := alloc()
	if p == nil {
		return nil
	}
	p.lastEntry, p.lastSig = -1, -1
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

// Poison makes every C call decline the record, and Arm refuse it, until
// it is cleared (Clear). Safe from any goroutine, at any time.
func (r *Record) Poison() { atomic.StoreUint32(&r.p.poison, 1) }

// Poisoned reports whether Poison (or Stop) was called since the record
// was last cleared (Clear).
func (r *Record) Poisoned() bool { return atomic.LoadUint32(&r.p.poison) != 0 }

// Taken is what C did with a record since the last Take.
type Taken struct {
	// Calls is the number of calls launched from C, Fenced how many of
	// them were fenced.
	Calls, Fenced int64
	// Last is the entry of the last of them (-1 when Calls is 0).
	Last int
}

// Take returns what C did since the last Take and resets it. The record
// must be off (Disarm).
func (r *Record) Take() Taken {
	p := r.p
	t := Taken{Calls: p.taken, Fenced: p.fenced, Last: -1}
	if t.Calls > 0 {
		t.Last = int(p.lastEntry)
	}
	p.taken, p.fenced, p.lastEntry = 0, 0, -1
	return t
}

// LaunchTime returns how many launches C timed (Launch.Timed) and the
// nanoseconds spent inside cuLaunchKernel for them, cumulative over the
// record's life. The record must be off.
func (r *Record) LaunchTime() (launches, ns int64) { return r.p.tLaunches, r.p.tNs }

// Misses returns, cumulative over the record's life, the calls C did not
// launch although the record was armed with calls left and not poisoned:
// misses matched no entry's key (the call is not one of the record's
// repeats), declines were declined by the launch function (another
// context current on the caller's thread, or the stream being captured).
// Both then took the Go path. The record must be off.
func (r *Record) Misses() (misses, declines int64) { return r.p.misses, r.p.declines }

// Stop makes every C call decline the record, and Arm refuse it, until
// it is cleared again (Clear), and waits for a C call in progress
// (Disarm): device.Stopper, which a stream calls before anything the
// record's launches name goes away. Safe from any goroutine, at any time.
func (r *Record) Stop() {
	r.Poison()
	r.Disarm()
}

// Clear clears the record's poison, so that it can be filled and armed
// again. The caller clears it before it asks a stream for launch images
// (device.ImageExporter), so that a Stop from then on sticks: Arm refuses
// a record stopped after Clear. The record must be off.
func (r *Record) Clear() {
	if atomic.LoadUint32(&r.p.state) == stOff {
		atomic.StoreUint32(&r.p.poison, 0)
	}
}

// SetEntry fills entry i's launch from im, and the part every entry's
// launch shares (the launch function, the context, the stream and its
// failure word, whether launches are timed): all entries of a record are
// launches on one stream. The record must be off. It reports false,
// changing nothing, when i is out of 0..Entries-1, im lacks the function
// or the failure word, does not fit (Arg longer than ArgBytes, a field
// outside it), names another stream than the record's other entries (0..
// n-1 of nentries in use: the caller resets them first), or the record is
// not off.
func (r *Record) SetEntry(i int, im device.LaunchImage) bool {
	p := r.p
	if i < 0 || i >= Entries || im.Fn == 0 || im.Err == 0 || len(im.Arg) > ArgBytes || im.OffLaunch < 0 ||
		im.OffLaunch+8 > len(im.Arg) || im.OffNFence < 0 || im.OffNFence+4 > len(im.Arg) || atomic.LoadUint32(&p.state) != stOff {
		return false
	}
	p.launch, p.ctx, p.stream, p.err = im.Fn, im.Ctx, im.Queue, im.Err
	p.timed = 0
	if im.Timed {
		p.timed = 1
	}
	e := &p.entries[i]
	e.fn, e.grid, e.threads, e.shmem, e.nfence = im.Func, im.Grid, im.Threads, im.Shmem, im.NFence
	e.offLaunch, e.offNFence, e.argBytes = uint32(im.OffLaunch), uint32(im.OffNFence), uint32(len(im.Arg))
	copy(e.arg[:], im.Arg)
	return true
}

// SetEntryKey sets entry i's key, scratch layout id (sig: launches of
// entries whose ids differ from the last launch's are fenced) and whether
// every launch of it is fenced. The record must be off; i in
// 0..Entries-1.
func (r *Record) SetEntryKey(i int, k Key, sig int32, fenceAll bool) {
	if i < 0 || i >= Entries || atomic.LoadUint32(&r.p.state) != stOff {
		return
	}
	e := &r.p.entries[i]
	e.key, e.sig = k, sig
	e.fenceAll = 0
	if fenceAll {
		e.fenceAll = 1
	}
}

// CopyEntry copies entry src over entry dst (compacting the entries). The
// record must be off.
func (r *Record) CopyEntry(dst, src int) {
	if dst < 0 || dst >= Entries || src < 0 || src >= Entries || atomic.LoadUint32(&r.p.state) != stOff {
		return
	}
	r.p.entries[dst] = r.p.entries[src]
}

// Arm lets C calls use the record's first n entries, at most left calls
// in all, the k-th launching with launch counter launchBase+k; lastSig is
// the scratch layout id of the last launch (-1: none of the entries'). The
// record must be off, not poisoned since it was last cleared (Clear), and
// its count taken (Take). It reports false, arming nothing, when n is out
// of 1..Entries, left < 1, the shared launch part
// is not set, or the record is poisoned, not off or its count not taken.
func (r *Record) Arm(n int, left int64, launchBase uint64, lastSig int32) bool {
	p := r.p
	if n < 1 || n > Entries || left < 1 || p.launch == 0 || p.taken != 0 || atomic.LoadUint32(&p.state) != stOff ||
		atomic.LoadUint32(&p.poison) != 0 {
		return false
	}
	p.nentries = uint32(n)
	p.left = left
	p.launchBase = launchBase
	p.lastSig = lastSig
	p.lastEntry = -1
	atomic.StoreUint32(&p.state, stArmed)
	return true
}

// Layout returns the offsets of record's and entry's fields in replay.h's
// declaration order (without the padding), then their sizes: what
// replaytest.TestLayout compares with C's.
func Layout() []uintptr {
	var r record
	var e entry
	return []uintptr{unsafe.Offsetof(r.state), unsafe.Offsetof(r.poison), unsafe.Offsetof(r.left),
		unsafe.Offsetof(r.taken), unsafe.Offsetof(r.fenced), unsafe.Offsetof(r.lastEntry), unsafe.Offsetof(r.lastSig),
		unsafe.Offsetof(r.launchBase), unsafe.Offsetof(r.nentries), unsafe.Offsetof(r.timed),
		unsafe.Offsetof(r.launch), unsafe.Offsetof(r.ctx), unsafe.Offsetof(r.stream), unsafe.Offsetof(r.err),
		unsafe.Offsetof(r.tLaunches), unsafe.Offsetof(r.tNs), unsafe.Offsetof(r.misses), unsafe.Offsetof(r.declines),
		unsafe.Offsetof(r.entries), unsafe.Sizeof(r),
		unsafe.Offsetof(e.key), unsafe.Offsetof(e.fn), unsafe.Offsetof(e.grid), unsafe.Offsetof(e.threads),
		unsafe.Offsetof(e.shmem), unsafe.Offsetof(e.nfence), unsafe.Offsetof(e.sig), unsafe.Offsetof(e.fenceAll),
		unsafe.Offsetof(e.offLaunch), unsafe.Offsetof(e.offNFence), unsafe.Offsetof(e.argBytes),
		unsafe.Offsetof(e.arg), unsafe.Sizeof(e)}
}
