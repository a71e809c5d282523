package cuda

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/runtime/device"
)

func init() {
	device.Register("cuda", Open)
	device.RegisterOnDevice("cuda", OpenOnDevice)
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
	// stage is the stream of the proxy's staging copies (ToHost), made on
	// first use (guarded by mu).
	stage *driver.Stream
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

	// clock maps the GPU's %globaltimer to the host's clock for op traces
	// (trace.go).
	clock clockMap

	// residents counts the persistent executors (resident.go) of the
	// process, rqueues their queues: every free stops their kernels first.
	residents atomic.Int64
	rmu       sync.Mutex
	rqueues   map[*rqueue]struct{}

	// stops are the holders of launch images (LaunchImage), by their
	// stream (image.go).
	stops struct {
		mu sync.Mutex
		by map[device.Stopper]*Stream
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
	opened = &Backend{dev: d, ctl: ctl, streams: map[*Stream]struct{}{}, rqueues: map[*rqueue]struct{}{},
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
	b.stopImages(nil)
}

// idle reports whether every stream of the backend has finished its work
// and no launch is being enqueued. The reaper calls it holding gate for
// writing. It raises reaping before it looks, so that a launch that starts
// after the look waits for gate (Stream.enter: each side writes its flag,
// then reads the other's, so at least one sees the other); it lowers it
// again when the backend is busy.
func (b *Backend) idle() bool {
	b.reaping.Store(true)
	// A resident kernel (resident.go) keeps the context busy until its
	// queue is idle and it exits, which it is asked to do here.
	if b.residentsBusy() {
		b.reaping.Store(false)
		return false
	}
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
	// Idle: the frees run under the gate, which holds back every launch
	// (and so every start of a resident kernel) until they are done.
	b.residentsRelease()
	return true
}

// release runs f (a free of driver memory or an IPC mapping) now, or, with
// several ranks in this process, on the reaper (see Backend.shared).
func (b *Backend) release(f func()) {
	if b.shared.Load() {
		b.reap.defer_(f)
		return
	}
	// The process's resident kernels would keep f waiting until they end.
	b.stopResidents()
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
