package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/replay"
)

func init() {
	device.Register("cuda", Open)
	device.RegisterOnDevice("cuda", OpenOnDevice)
}

// DefaultThreads is the threads per threadblock when a table does not ask
// and THESEUS_NTHREADS does not say, for blocks of more than
// SmallBlockBytes.
const DefaultThreads = 512

// SmallThreads is the threads per threadblock, under the same conditions,
// for blocks of at most SmallBlockBytes bytes per rank: fewer threads
// start and synchronise sooner, and a small message has little data to
// share out (on the H200, a 2-rank LL allreduce of 8 B–2 KiB takes
// 11.6 µs replayed with 256 threads against 13.9–14.0 µs with 512, and
// 19.0 against 17.8 µs at 8 KiB: bench/results/2026-11-29-h200-ninth,
// call 55), as NCCL picks its threads per protocol and size.
const SmallThreads = 256

// SmallBlockBytes is the largest block (count × datatype size, in bytes
// per rank) launched with SmallThreads.
const SmallBlockBytes = 2048

// defaultThreads is THESEUS_NTHREADS (docs/env.md) when it is a multiple
// of 32 from 32 to 1024 (the kernel's launch bound), and otherwise
// SmallThreads for a block of at most SmallBlockBytes bytes (blockBytes;
// a negative value means unknown) and DefaultThreads for a larger one.
// The kernel runs any block size; the number changes how many threads
// share each op's data, and what a launch costs.
func defaultThreads(blockBytes int64) int {
	if raw, set := env.NThreads.Raw(); set && raw != "" {
		n, err := env.NThreads.Int()
		if err == nil && n >= 32 && n <= 1024 && n%32 == 0 {
			return int(n)
		}
	}
	if blockBytes >= 0 && blockBytes <= SmallBlockBytes {
		return SmallThreads
	}
	return DefaultThreads
}

// Backend is the CUDA backend (runtime/device.Backend) of one GPU: the
// calling thread's current device when it was opened (device 0 if none).
// One process manages one GPU (the seed's job-layout rule 3), so there is
// one Backend per process.
type Backend struct {
	dev *driver.Device
	// ctl is the backend's own non-blocking stream for control work
	// (zeroing new allocations, uploads, downloads). Nothing here uses the
	// legacy default stream or cuCtxSynchronize: with several ranks in one
	// process (one context), a context-wide wait would wait for a peer's
	// kernel that is itself waiting for this rank (docs/design/cuda.md, "Streams and waits").
	ctl driver.Stream
	// With several ranks in this process (ShareContext), frees go to the
	// reaper goroutine, which runs them only while every stream of the
	// backend is idle, holding gate so that no launch starts meanwhile:
	// cuMemFree waits for the context's running kernels, which may be
	// waiting for the very rank that frees. A launch does not take gate
	// itself (a lock word every rank writes per launch would bounce
	// between their cores): it counts itself in its stream's use word
	// and checks reaping, which the reaper raises under gate before it
	// looks at the streams (idle); only then does the launch wait for
	// gate (Stream.enter).
	shared  atomic.Bool
	reap    *reaper
	gate    sync.RWMutex
	reaping atomic.Bool
	smu     sync.Mutex
	streams map[*Stream]struct{}

	mu      sync.Mutex
	allocs  map[device.Ptr]int64 // our allocations: base -> size
	imports map[[64]byte]*imported
	byBase  map[device.Ptr]*imported
	// regions are our allocations as Lookup reports them (read from the
	// driver once, at Alloc), so that Lookup answers for them with no lock
	// and no driver call (a collective call looks up its buffers every
	// time when its schedule reaches peers' buffers).
	regions device.RegionSet

	// replays are the replay records SetReplay filled, by their stream
	// (replay.go).
	replays struct {
		mu sync.Mutex
		by map[*replay.Record]*Stream
	}
}

type imported struct {
	key  [64]byte
	base device.Ptr
	size int64
	refs int
	self bool // our own allocation (same process): no IPC mapping
}

var (
	openMu  sync.Mutex
	opened  *Backend
	openErr error
)

// Open returns the process's CUDA backend, creating it on first use on the
// calling thread's current device (or device 0). Errors: driver.ErrNoDriver
// without a GPU.
func Open() (device.Backend, error) { return open(-1) }

// OpenOnDevice returns the process's CUDA backend on device ordinal dev,
// creating it there on first use. Errors: driver.ErrNoDriver without a GPU;
// a backend already open on another device (one device per process, the
// seed's job-layout rule 3).
func OpenOnDevice(dev int) (device.Backend, error) {
	if dev < 0 {
		return nil, fmt.Errorf("cuda: device %d", dev)
	}
	return open(dev)
}

// open opens the process's backend on ord, or on the calling thread's
// current device (device 0 if none) when ord < 0.
func open(ord int) (device.Backend, error) {
	openMu.Lock()
	defer openMu.Unlock()
	if opened != nil || openErr != nil {
		if opened != nil && ord >= 0 && opened.dev.Ordinal != ord {
			return nil, fmt.Errorf("cuda: this process's backend runs on device %d, not %d (one device per process)", opened.dev.Ordinal, ord)
		}
		return opened, openErr
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if ord < 0 {
		cur, err := driver.CurrentDevice()
		if err != nil {
			openErr = err
			return nil, err
		}
		ord = max(cur, 0)
	}
	d, err := driver.OpenDevice(ord)
	if err == nil {
		err = d.SetCurrent()
	}
	if err != nil {
		openErr = err
		return nil, err
	}
	var ctl driver.Stream
	if err == nil {
		ctl, err = driver.NewStream()
	}
	if err != nil {
		openErr = err
		return nil, err
	}
	opened = &Backend{dev: d, ctl: ctl, streams: map[*Stream]struct{}{},
		allocs: map[device.Ptr]int64{}, imports: map[[64]byte]*imported{}, byBase: map[device.Ptr]*imported{}}
	opened.reap = newReaper(&opened.gate, opened.idle)
	go func() {
		runtime.LockOSThread()
		if d.SetCurrent() == nil {
			// The reaper's frees may run while an application thread
			// captures a stream in global mode, which prohibits them on
			// every thread not in relaxed mode (and invalidates that
			// capture): this thread stays relaxed.
			driver.ExchangeCaptureMode(driver.CaptureModeRelaxed)
			opened.reap.run()
		}
	}()
	return opened, nil
}

// WithDevice runs f on a locked OS thread with the process backend's
// context current, for callers that drive the CUDA driver directly around
// Theseus calls (capturing a stream into a graph, replaying it). Errors:
// the backend's failure to open, or f's.
func WithDevice(f func() error) error {
	b, err := Open()
	if err != nil {
		return err
	}
	return b.(*Backend).with(f)
}

// launchTiming is the per-stream accounting of the time spent in
// cuLaunchKernel (a driver.LaunchTiming: TimeLaunches).
var launchTiming atomic.Int32

// TimeLaunches turns on (or off) the accounting that Stream.LaunchTime
// reports: the time inside cuLaunchKernel, measured in C around the driver
// call itself (the cgo crossing is host time). It costs two clock reads
// per launch while on, and no locked instruction: the
// counts are plain words, so while it is on a stream's launches must come
// from one goroutine at a time and LaunchTime must be read by that
// goroutine or after those launches (it is for benchmarks).
func TimeLaunches(on bool) {
	if on {
		launchTiming.Store(int32(driver.TimeLaunch))
	} else {
		launchTiming.Store(int32(driver.TimeNothing))
	}
}

// Device is the GPU ordinal the backend runs on.
func (b *Backend) Device() int { return b.dev.Ordinal }

// Name implements device.Backend.
func (b *Backend) Name() string { return "cuda" }

// with runs f on a locked OS thread with the device's context current.
func (b *Backend) with(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := b.dev.SetCurrent(); err != nil {
		return err
	}
	return f()
}

// ShareContext implements device.ContextSharer: from now on frees wait
// until the backend's streams are idle (see Backend.shared).
func (b *Backend) ShareContext() {
	b.shared.Store(true)
	b.stopReplays(nil)
}

// idle reports whether every stream of the backend has finished its work
// and no launch is being enqueued. The reaper calls it holding gate for
// writing. It raises reaping before it looks, so that a launch that starts
// after the look waits for gate (Stream.enter: each side writes its flag,
// then reads the other's, so at least one sees the other); it lowers it
// again when the backend is busy.
func (b *Backend) idle() bool {
	b.reaping.Store(true)
	b.smu.Lock()
	defer b.smu.Unlock()
	for st := range b.streams {
		if st.use.Load()&useCount != 0 {
			b.reaping.Store(false)
			return false
		}
		// A stream being captured into a CUDA graph must not be queried
		// (cuStreamQuery invalidates the capture: seen on the H200 when
		// TestLatency captured while scratch of an earlier size waited to
		// be freed), and its graph may name the memory: not idle.
		// A query that fails (a broken context) reads as idle: the frees
		// then fail too, instead of the reaper polling forever.
		if cs, err := st.s.CaptureStatus(); err == nil && cs != driver.CaptureNone {
			b.reaping.Store(false)
			return false
		}
		if done, err := st.s.Done(); err == nil && !done {
			b.reaping.Store(false)
			return false
		}
	}
	return true
}

// release runs f (a free of driver memory or an IPC mapping) now, or, with
// several ranks in this process, on the reaper (see Backend.shared).
func (b *Backend) release(f func()) {
	if b.shared.Load() {
		b.reap.defer_(f)
		return
	}
	b.with(func() error { f(); return nil })
}

// free releases device memory p (see release).
func (b *Backend) free(p driver.Ptr) {
	if p != 0 {
		b.release(func() { driver.MemFree(p) })
	}
}

// zeroed allocates size bytes and zeroes them on the control stream,
// without waiting (call syncCtl before a kernel may read them). Must run
// inside with.
func (b *Backend) zeroed(size int64) (driver.Ptr, error) {
	p, err := driver.MemAlloc(size)
	if err != nil {
		return 0, err
	}
	if err := driver.MemsetD8Async(p, 0, size, b.ctl); err != nil {
		b.free(p)
		return 0, err
	}
	return p, nil
}

// Alloc implements device.Backend: zeroed device memory (cuMemAlloc is
// 256-byte aligned), exportable with CUDA IPC.
func (b *Backend) Alloc(size int64) (device.Ptr, error) {
	if size < 1 {
		return 0, fmt.Errorf("cuda: alloc of %d bytes", size)
	}
	var p driver.Ptr
	var r device.Region
	err := b.with(func() error {
		var err error
		if p, err = b.zeroed(size); err != nil {
			return err
		}
		if err := b.ctl.Synchronize(); err != nil {
			return err
		}
		r, _ = driverRegion(device.Ptr(p)) // if this fails, Lookup asks the driver
		return nil
	})
	if err != nil {
		return 0, err
	}
	b.mu.Lock()
	b.allocs[device.Ptr(p)] = size
	if r.Base != 0 {
		b.regions.Add(r)
	}
	b.mu.Unlock()
	return device.Ptr(p), nil
}

// Free implements device.Backend.
func (b *Backend) Free(p device.Ptr) error {
	b.mu.Lock()
	_, ok := b.allocs[p]
	delete(b.allocs, p)
	if ok {
		b.regions.Remove(p)
	}
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("cuda: free of %#x, which Alloc did not return", p)
	}
	b.free(driver.Ptr(p))
	return nil
}

// Lookup implements device.Backend for any device allocation of this
// process (cudaMalloc'd user buffers included): its base, size and
// CU_POINTER_ATTRIBUTE_BUFFER_ID, which differs for an allocation freed and
// reallocated at the same address — so a stale import is never reused (the
// seed's Known Issue 1). For the backend's own allocations (Alloc) it
// answers from what it read at Alloc, with no driver call: until Free, the
// allocation and its buffer id cannot change.
func (b *Backend) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	if r, ok := b.regions.Find(p, n); ok {
		return r, true
	}
	var r device.Region
	ok := b.with(func() error {
		var err error
		r, err = driverRegion(p)
		return err
	}) == nil
	if !ok || !r.Contains(p, n) {
		return device.Region{}, false
	}
	return r, true
}

// driverRegion is the allocation that holds p as the driver reports it:
// cuMemGetAddressRange and CU_POINTER_ATTRIBUTE_BUFFER_ID. Must run inside
// with.
func driverRegion(p device.Ptr) (device.Region, error) {
	base, size, err := driver.AddressRange(driver.Ptr(p))
	if err != nil {
		return device.Region{}, err
	}
	id, err := driver.BufferID(driver.Ptr(p))
	if err != nil {
		return device.Region{}, err
	}
	return device.Region{Base: device.Ptr(base), Size: size, Gen: id}, nil
}

// handle layout: IPC handle (64) | size (8) | pid (8) | base (8).
const handleBytes = 88

// Export implements device.Backend with cuIpcGetMemHandle.
func (b *Backend) Export(r device.Region) (device.Handle, error) {
	var h driver.IpcHandle
	if err := b.with(func() error {
		var err error
		h, err = driver.IpcGetHandle(driver.Ptr(r.Base))
		return err
	}); err != nil {
		return nil, fmt.Errorf("%w: %v", device.ErrNotExportable, err)
	}
	out := make([]byte, handleBytes)
	copy(out, h[:])
	binary.LittleEndian.PutUint64(out[64:], uint64(r.Size))
	binary.LittleEndian.PutUint64(out[72:], uint64(os.Getpid()))
	binary.LittleEndian.PutUint64(out[80:], uint64(r.Base))
	return out, nil
}

// Import implements device.Backend with cuIpcOpenMemHandle. A handle of
// this very process maps to the allocation itself (CUDA IPC refuses
// same-process handles), so ranks may also be goroutines of one process.
func (b *Backend) Import(h device.Handle) (device.Region, error) {
	if len(h) != handleBytes {
		return device.Region{}, fmt.Errorf("%w: %d bytes", device.ErrBadHandle, len(h))
	}
	var key [64]byte
	copy(key[:], h[:64])
	size := int64(binary.LittleEndian.Uint64(h[64:]))
	pid := binary.LittleEndian.Uint64(h[72:])
	base := device.Ptr(binary.LittleEndian.Uint64(h[80:]))
	b.mu.Lock()
	defer b.mu.Unlock()
	if im, ok := b.imports[key]; ok {
		im.refs++
		return device.Region{Base: im.base, Size: im.size}, nil
	}
	im := &imported{key: key, size: size, refs: 1}
	if pid == uint64(os.Getpid()) {
		im.base, im.self = base, true
	} else {
		err := b.with(func() error {
			p, err := driver.IpcOpen(driver.IpcHandle(key))
			im.base = device.Ptr(p)
			return err
		})
		if err != nil {
			return device.Region{}, fmt.Errorf("%w: %v", device.ErrBadHandle, err)
		}
	}
	b.imports[key] = im
	b.byBase[im.base] = im
	return device.Region{Base: im.base, Size: size}, nil
}

// Unimport implements device.Backend.
func (b *Backend) Unimport(base device.Ptr) error {
	b.mu.Lock()
	im, ok := b.byBase[base]
	if !ok {
		b.mu.Unlock()
		return fmt.Errorf("cuda: unimport of %#x, which Import did not return", base)
	}
	im.refs--
	if im.refs > 0 {
		b.mu.Unlock()
		return nil
	}
	delete(b.imports, im.key)
	delete(b.byBase, base)
	b.mu.Unlock()
	if im.self {
		return nil
	}
	// cuIpcCloseMemHandle may wait for the context's kernels, like cuMemFree.
	b.release(func() { driver.IpcClose(driver.Ptr(base)) })
	return nil
}

// Upload implements device.Backend (synchronous, on the control stream).
func (b *Backend) Upload(dst device.Ptr, src []byte) error {
	return b.with(func() error {
		if err := driver.CopyHtoDAsync(driver.Ptr(dst), src, b.ctl); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
}

// Download implements device.Backend (synchronous, on the control stream).
func (b *Backend) Download(dst []byte, src device.Ptr) error {
	return b.with(func() error {
		if err := driver.CopyDtoHAsync(dst, driver.Ptr(src), b.ctl); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
}

// NewStream implements device.Backend: a new non-blocking stream.
func (b *Backend) NewStream() (device.Stream, error) {
	var s driver.Stream
	if err := b.with(func() error {
		var err error
		s, err = driver.NewStream()
		return err
	}); err != nil {
		return nil, err
	}
	st, err := b.newStream(s, true)
	if err != nil {
		b.with(func() error { return s.Destroy() })
		return nil, err
	}
	return st, nil
}

// WrapStream returns a device.Stream that launches on an existing CUDA
// stream (cudaStream_t / CUstream, 0 for the legacy default stream), such
// as the stream a NCCL caller passes. Closing it does not destroy s.
func (b *Backend) WrapStream(s uintptr) (device.Stream, error) {
	return b.newStream(driver.Stream(s), false)
}

func (b *Backend) newStream(s driver.Stream, owned bool) (*Stream, error) {
	st := &Stream{b: b, s: s, owned: owned, drained: make(chan struct{}, 1)}
	err := b.with(func() error {
		var err error
		if st.errHost, st.errDev, err = driver.HostAlloc(errorPageBytes); err != nil {
			return err
		}
		if st.claim, err = b.zeroed(16); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
	if err != nil {
		b.free(st.claim)
		if h := st.errHost; h != nil {
			b.release(func() { driver.FreeHost(h) })
		}
		return nil, err
	}
	b.smu.Lock()
	b.streams[st] = struct{}{}
	b.smu.Unlock()
	return st, nil
}

// prepared is the CUDA launch state of one request shape.
type prepared struct {
	b  *Backend
	fn driver.Function // the kernel module of the request's datatype
	// arg is the launch argument handed to cuLaunchKernel, filled at
	// Prepare; a launch sets only its per-launch fields (setLaunch). An
	// object of its own, without Go pointers, as cgo requires of what a
	// pointer passed to C points into; reused by every launch (the driver
	// copies it before cuLaunchKernel returns, and the executor launches
	// one prepared at a time: its communicator's calls are serialised), so
	// a launch allocates and copies nothing.
	arg *Launch
	// st is the stream whose failure record and claim word arg holds
	// (setStream): a launch on another stream sets them again.
	st *Stream
	// nfence is the fence count of a fenced launch (arg's is 0 when a
	// launch is not fenced).
	nfence int32
	// staged: in or out is not empty (the launch takes the staged path).
	staged  bool
	grid    int
	threads int
	mem     []driver.Ptr // what Release frees
	in, out []device.Copy
}

// Prepare implements device.Backend: it uploads the channel records and
// allocates the rank's barrier, finish and fence words, once per executor
// L3 entry.
func (b *Backend) Prepare(a *device.Args) (device.Prepared, error) {
	if a == nil || a.Table == nil || a.TableMem.Ptr == 0 {
		return nil, errors.New("cuda: prepare without a table")
	}
	t := a.Table
	p := &prepared{b: b, arg: newLaunch(), grid: len(t.TBs), threads: t.NumThreads, in: a.StageIn, out: a.StageOut,
		staged: len(a.StageIn)+len(a.StageOut) > 0}
	if p.threads <= 0 {
		p.threads = defaultThreads(a.Count * int64(a.DataType.Size()))
	}
	if p.grid == 0 {
		p.grid = 1 // a table without threadblocks still publishes done
	}
	err := b.with(func() (err error) {
		// Prepare may run while the caller's stream is being captured into a
		// CUDA graph (an executor L3 setup: docs/design/cuda.md, "CUDA
		// graphs"). Its allocations, memsets and copies use no captured
		// stream, only the backend's own non-blocking control stream; the
		// thread's relaxed capture mode lets cuMemAlloc run during the
		// capture, as NCCL does for its own allocations.
		prev, err := driver.ExchangeCaptureMode(driver.CaptureModeRelaxed)
		if err != nil {
			return err
		}
		defer driver.ExchangeCaptureMode(prev)
		// On an error, free what was allocated while still relaxed (this
		// deferred call runs before the mode is restored).
		defer func() {
			if err != nil {
				p.Release()
			}
		}()
		// The first request of a datatype in this process loads (JIT-compiles)
		// its kernel module.
		k, err := kernel(b.dev.Context(), a.DataType)
		if err != nil {
			return err
		}
		p.fn = k.fn(false)
		alloc := func(n int64) (driver.Ptr, error) {
			m, err := b.zeroed(max(n, 16))
			if err == nil {
				p.mem = append(p.mem, m)
			}
			return m, err
		}
		chans, err := alloc(ChanRTBytes * int64(max(len(a.Ends), 1)))
		if err != nil {
			return err
		}
		if len(a.Ends) > 0 {
			rts := make([]ChanRT, len(a.Ends))
			for i, e := range a.Ends {
				var pb [3]driver.Ptr
				for k := range 3 {
					pb[k] = driver.Ptr(e.PeerBuf[k].Ptr)
				}
				setChanRT(&rts[i], pb, driver.Ptr(e.PeerInbound), driver.Ptr(e.Inbound), driver.Ptr(e.Expected), e.Peer)
			}
			if err := driver.CopyHtoDAsync(chans, unsafe.Slice((*byte)(unsafe.Pointer(&rts[0])), len(rts)*ChanRTBytes), b.ctl); err != nil {
				return err
			}
		}
		barriers, err := alloc(8 * int64(BarrierWords(len(t.TBs))))
		if err != nil {
			return err
		}
		finish, err := alloc(16)
		if err != nil {
			return err
		}
		var fence driver.Ptr
		if len(a.Fence) > 0 {
			if fence, err = alloc(8 * int64(len(a.Fence))); err != nil {
				return err
			}
			words := make([]byte, 8*len(a.Fence))
			for i, f := range a.Fence {
				binary.LittleEndian.PutUint64(words[8*i:], uint64(f.Word))
			}
			if err := driver.CopyHtoDAsync(fence, words, b.ctl); err != nil {
				return err
			}
		}
		var bufs [3]driver.Ptr
		for k := range 3 {
			bufs[k] = driver.Ptr(a.Buf[k].Ptr)
		}
		root, shift := a.Root, a.Shift
		if !t.Collective.Rooted() {
			root, shift = 0, 0
		}
		fillLaunch(p.arg, launchFields{
			table: driver.Ptr(a.TableMem.Ptr), chans: chans, bufs: bufs, publish: driver.Ptr(a.Publish.Ptr),
			barriers: barriers, abort: driver.Ptr(a.Abort),
			count: a.Count, stride: a.Layout.Stride, slices: a.Layout.Slices, timeout: a.Timeout,
			rank: a.Rank, nranks: a.NRanks, root: root, shift: shift, dtype: a.DataType, redop: a.RedOp,
			inplace: a.InPlace, ll8: a.PacketType == ir.LL8, elemSize: int(a.Layout.ElemSize),
		})
		fillHalf(p.arg, a.ScratchHalf)
		fillDone(p.arg, driver.Ptr(a.Done), finish, fence, len(a.Fence))
		// Shared work (cuda/units.go) for a launch of independent copies
		// and reduces of this rank's own buffers.
		pl := t.Placement(a.Root, a.InPlace)
		if units := sharedUnits(t, a.Layout, pl, a.Rank, a.Layout.Slices, a.RedOp); units != nil && workSharing() {
			u, err := placeUnits(units, alloc, func(d driver.Ptr, data []byte) error { return driver.CopyHtoDAsync(d, data, b.ctl) })
			if err != nil {
				return err
			}
			fillUnits(p.arg, u)
			p.fn = k.fn(true)
			if p.fn == k.units {
				p.grid = unitsGrid(b.dev, k.units, p.grid, p.threads, u.nunits)
			}
		}
		p.nfence = int32(len(a.Fence))
		// The memsets and copies above run on the control stream: finish
		// them before any launch on another stream reads these words.
		return b.ctl.Synchronize()
	})
	if err != nil {
		p.Release()
		return nil, err
	}
	return p, nil
}

// Release implements device.Prepared.
func (p *prepared) Release() {
	for _, m := range p.mem {
		p.b.free(m)
	}
	p.mem = nil
}

// unitsGrid is the grid of a theseus_units launch of nunits units whose
// table has grid threadblocks of threads each: at least grid, and up to
// as many threadblocks as the device holds at once when there are units
// for them (the units do not depend on the grid, and the launch's done word
// counts the grid it runs: kernel/executor.cuh, launch_done). A one-rank
// schedule of one threadblock would otherwise copy on one multiprocessor.
// When the device cannot be asked, grid.
func unitsGrid(dev *driver.Device, fn driver.Function, grid, threads int, nunits int64) int {
	sms, err := dev.Attribute(driver.AttrMultiprocessorCount)
	if err != nil || sms <= 0 {
		return grid
	}
	per, err := fn.MaxActiveBlocksPerSM(threads, 0)
	if err != nil || per <= 0 {
		return grid
	}
	return max(grid, int(min(nunits, int64(sms*per))))
}

// Stream is a CUDA stream with the failure record of the launches on it.
type Stream struct {
	// What every launch reads or writes comes first, in one cache line:
	// the struct's size is a multiple of 64 bytes, so that Go's allocator
	// places it on a line boundary (TestStreamLayout). A call runs with
	// the caches its thread found after waiting in the driver, and every
	// line it touches costs.
	b *Backend
	s driver.Stream
	// use counts the launches being enqueued on the stream (useCount: see
	// Backend.gate), with useClosed added once Close has begun, which then
	// waits for the count to drain: the launch that leaves it at zero
	// signals drained. A launch takes neither mu nor another word: one
	// atomic add as it starts, one as it ends.
	use     atomic.Int64
	errHost unsafe.Pointer // ErrorRecord, host-mapped
	errDev  driver.Ptr
	claim   driver.Ptr
	// cuLaunchKernel accounting (TimeLaunches): plain
	// words, so that the accounting adds no locked instruction to the call
	// it measures. They are written by the stream's launches while the
	// accounting is on, which is for benchmarks that launch on a stream
	// from one goroutine at a time and read LaunchTime once those launches
	// are done.
	nlaunch int64
	dlaunch int64

	owned bool
	// mu is held for reading by every method that uses the handle or the
	// failure record, except a launch, and for writing by Close.
	mu      sync.RWMutex
	closed  bool
	drained chan struct{} // capacity 1
	evMu    sync.Mutex
	ev      driver.Event // recorded by After when a later launch moves to another stream
	_       [72]byte     // to 192 bytes (TestStreamLayout)
}

// LaunchTime returns how many kernels were launched on the stream while
// TimeLaunches was on, and the time spent inside cuLaunchKernel for them.
func (s *Stream) LaunchTime() (int64, time.Duration) {
	return s.nlaunch, time.Duration(s.dlaunch)
}

// CUStream is the underlying CUstream.
func (s *Stream) CUStream() uintptr { return uintptr(s.s) }

// Launch implements device.Stream: CaptureLaunch, without fencing a
// captured launch. It asks the driver whether the stream is being
// captured, as CaptureLaunch does: the executor calls Launch only when a
// launch moves to another stream, after its own Capturing, so such a
// launch makes two capture queries.
func (s *Stream) Launch(pp device.Prepared, launch uint64, fence bool) error {
	_, err := s.CaptureLaunch(pp, launch, fence, false)
	return err
}

// CaptureLaunch implements device.CaptureLauncher: staging copies, then
// one kernel launch of the rank's table, on the stream; it reports whether
// the stream is being captured into a CUDA graph (cuStreamIsCapturing),
// and a captured launch is fenced when fenceCaptured is set.
//
// Without staging copies (the usual case) the context switch, the capture
// query and cuLaunchKernel are one call into C (driver.Device.Launch): one
// cgo crossing, and no OS thread to hold. A launch that must be fenced
// only if it is captured hands the C side the argument's fence count to
// restore when it finds the stream capturing. That launch is written out
// here rather than in a function of its own: one Go frame fewer between a
// collective call and cuLaunchKernel (on the H200 the difference was
// within the run-to-run spread: docs/design/cuda.md, "Host cost of a
// call").
func (s *Stream) CaptureLaunch(pp device.Prepared, launch uint64, fence, fenceCaptured bool) (capturing bool, err error) {
	timing := driver.LaunchTiming(launchTiming.Load())
	p, ok := pp.(*prepared)
	if !ok {
		return false, fmt.Errorf("cuda: launch of a %T", pp)
	}
	if err := s.enter(); err != nil {
		return false, err
	}
	defer s.leave()
	if e := readError(s.errHost); e != nil {
		err = e
	} else {
		a := p.arg
		if p.st != s {
			setStream(a, s.errDev, s.claim)
			p.st = s
		}
		setLaunch(a, launch, fence, p.nfence)
		if !p.staged {
			var capField unsafe.Pointer
			if fenceCaptured && !fence {
				capField = unsafe.Pointer(&a.nfence)
			}
			var r driver.LaunchResult
			r, err = s.b.dev.Launch(s.s, true, p.fn, p.grid, p.threads, unsafe.Pointer(a), capField, p.nfence, timing)
			if timing != driver.TimeNothing && err == nil {
				s.account(r)
			}
			capturing = r.Capturing
		} else {
			capturing, err = s.launchStaged(p, fence, fenceCaptured, timing)
		}
	}
	return capturing, err
}

// launchStaged is CaptureLaunch's launch with staging copies around the
// kernel, on a held thread with the context current. The caller counted
// the launch in s.use and filled the argument.
func (s *Stream) launchStaged(p *prepared, fence, fenceCaptured bool, timing driver.LaunchTiming) (capturing bool, err error) {
	a := p.arg
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// One call into the driver's library for the context and the capture
	// status (a failed query reads as not capturing, as in Capturing).
	if capturing, err = s.b.dev.Prelaunch(s.s, true); err != nil {
		return false, err
	}
	if capturing && fenceCaptured && !fence {
		setFence(a, p.nfence)
	}
	for _, c := range p.in {
		if err := driver.CopyDtoDAsync(driver.Ptr(c.Dst), driver.Ptr(c.Src), c.N, s.s); err != nil {
			return capturing, err
		}
	}
	var t0 time.Time
	if timing != driver.TimeNothing {
		t0 = time.Now()
	}
	err = launchKernel(p.fn, p.grid, p.threads, s.s, a)
	if timing != driver.TimeNothing && err == nil {
		s.account(driver.LaunchResult{LaunchTime: time.Since(t0)})
	}
	if err != nil {
		return capturing, err
	}
	for _, c := range p.out {
		if err := driver.CopyDtoDAsync(driver.Ptr(c.Dst), driver.Ptr(c.Src), c.N, s.s); err != nil {
			return capturing, err
		}
	}
	return capturing, nil
}

// account adds a timed launch to the stream's accounting (TimeLaunches).
func (s *Stream) account(r driver.LaunchResult) {
	s.nlaunch++
	s.dlaunch += int64(r.LaunchTime)
}

// The fields of Stream.use.
const (
	useCount  = 1<<32 - 1 // launches being enqueued
	useClosed = 1 << 32   // added by Close
)

// enter counts a launch in progress on s (use), which keeps Close from
// releasing the stream and the reaper from running; while the reaper
// holds gate (reaping), it waits for the reaper to finish first. Errors:
// device.ErrClosed once Close has begun (nothing counted then).
func (s *Stream) enter() error {
	for {
		if s.use.Add(1)&useClosed != 0 {
			s.leave()
			return device.ErrClosed
		}
		if !s.b.reaping.Load() {
			return nil
		}
		s.leave()
		s.b.gate.RLock() // the reaper has let go of it once this returns
		s.b.reaping.Store(false)
		s.b.gate.RUnlock()
	}
}

// leave uncounts a launch (enter), and signals Close when it was the last
// one Close waits for.
func (s *Stream) leave() {
	if s.use.Add(-1) == useClosed {
		select {
		case s.drained <- struct{}{}:
		default: // Close has its signal already, or found nothing to wait for
		}
	}
}

// After implements device.StreamOrderer: s waits on the device for what
// prev (a stream of this backend) has enqueued so far. Errors: a driver
// error; a prev of another backend or a closed one is ignored.
func (s *Stream) After(prev device.Stream) error {
	p, ok := prev.(*Stream)
	if !ok || p == s {
		return nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return device.ErrClosed
	}
	p.evMu.Lock() // the event is prev's
	defer p.evMu.Unlock()
	return s.b.with(func() error {
		if p.ev == 0 {
			ev, err := driver.NewEvent(false)
			if err != nil {
				return err
			}
			p.ev = ev
		}
		if err := p.ev.Record(p.s); err != nil {
			return err
		}
		return s.s.WaitEvent(p.ev)
	})
}

// Synchronize implements device.Stream. Errors: device.ErrClosed after
// Close, a driver error, or the first failure a kernel recorded.
func (s *Stream) Synchronize() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return device.ErrClosed
	}
	if err := s.b.with(func() error { return s.s.Synchronize() }); err != nil {
		return err
	}
	return s.errLocked()
}

// Err implements device.Stream: the first failure the kernel recorded
// (device.ErrClosed after Close).
func (s *Stream) Err() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.errLocked()
}

func (s *Stream) errLocked() error {
	if s.closed {
		return device.ErrClosed
	}
	if e := readError(s.errHost); e != nil {
		return e
	}
	return nil
}

// Capturing implements device.Stream (cuStreamIsCapturing).
func (s *Stream) Capturing() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return false
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	capturing, _ := s.b.dev.Prelaunch(s.s, true) // a failed query reads as not capturing
	return capturing
}

// Close implements device.Stream.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	// No launch from a replay record on this stream from now on.
	s.b.stopReplays(s)
	// Launches that began before this point finish enqueueing (none waits
	// for anything but the driver: a full launch queue drains); later ones
	// see useClosed. The last to leave signals drained.
	if s.use.Add(useClosed)&useCount != 0 {
		<-s.drained
	}
	return s.b.with(func() error {
		// Wait while the reaper still sees the stream (busy), then take it
		// out of the reaper's sight before the handle can go away.
		err := s.s.Synchronize()
		s.b.smu.Lock()
		delete(s.b.streams, s)
		s.b.smu.Unlock()
		if s.ev != 0 {
			s.ev.Destroy()
		}
		if s.owned {
			s.s.Destroy()
		}
		s.b.free(s.claim)
		h := s.errHost
		s.b.release(func() { driver.FreeHost(h) })
		return err
	})
}
