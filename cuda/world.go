package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// World runs every rank of a communicator in this process, on one GPU, each
// rank's kernel on its own stream, with the peers' memory reached directly
// (one context: no IPC). It is the differential-test harness against the
// host interpreter (same tables, same requests, same inputs) and the
// in-process mode of `theseus-bench --backend cuda`. Semaphores, dependency
// counters and barrier words belong to logical ranks and persist across
// runs, as they do in a communicator.
//
// A World is not safe for concurrent use; its methods lock the calling
// goroutine to its OS thread while they run.
type World struct {
	dev    *driver.Device
	k      kernels // the kernel module of the current request's datatype
	tables []*optable.Table
	n      int

	tableDev []driver.Ptr // per logical rank: encoded table
	inbound  []driver.Ptr // per logical rank: one u64 per channel end
	expected []driver.Ptr
	publish  []driver.Ptr // per logical rank: one u64 per threadblock
	barriers []driver.Ptr
	claim    []driver.Ptr // per physical rank: one u32
	chanRT   []driver.Ptr // per logical rank: ChanRT per channel end
	streams  []driver.Stream
	errHost  unsafe.Pointer // per physical rank: ErrorRecord (host-mapped)
	errDev   driver.Ptr
	abortH   unsafe.Pointer // one u32 (host-mapped)
	abortD   driver.Ptr

	bufs      [][3]driver.Ptr // per physical rank: input, output, scratch (aliased in place)
	allocs    []driver.Ptr    // what to free at Close
	reqAllocs []driver.Ptr    // the current request's buffers
	req       launch.Request
	pl        ir.Placement
	lay       ir.Layout
	sizes     []launch.Sizes
	units     []unitWork // per physical rank: shared work, or none
	launch    uint64
	// Timeout bounds every wait of the kernel (default 10 s).
	Timeout time.Duration
	// Threads per threadblock when the table does not say (default 512).
	Threads int
	// Kernels, when set, gives logical rank l's specialised kernel for a
	// datatype (nil: the generic kernel), which a launch without shared
	// work runs instead, as the backend does for a bundle's
	// (device.Args.Kernel).
	Kernels func(l int, dt ir.DataType) *device.Kernel
}

// NewWorld uploads tables (tables[r] is logical rank r's) to GPU ordinal
// dev and creates their persistent state.
func NewWorld(ordinal int, tables []*optable.Table) (*World, error) {
	if err := optable.CheckPeers(tables); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d, err := driver.OpenDevice(ordinal)
	if err != nil {
		return nil, err
	}
	if err := d.SetCurrent(); err != nil {
		return nil, err
	}
	n := len(tables)
	w := &World{dev: d, tables: tables, n: n, Timeout: 10 * time.Second, Threads: 512, launch: 0,
		tableDev: make([]driver.Ptr, n), inbound: make([]driver.Ptr, n), expected: make([]driver.Ptr, n),
		publish: make([]driver.Ptr, n), barriers: make([]driver.Ptr, n), claim: make([]driver.Ptr, n),
		chanRT: make([]driver.Ptr, n), streams: make([]driver.Stream, n), bufs: make([][3]driver.Ptr, n),
		sizes: make([]launch.Sizes, n), units: make([]unitWork, n)}
	fail := func(err error) (*World, error) { w.closeLocked(); return nil, err }
	for r, t := range tables {
		b, err := t.MarshalBinary()
		if err != nil {
			return fail(err)
		}
		if w.tableDev[r], err = w.upload(b); err != nil {
			return fail(err)
		}
		init := make([]byte, 8*max(len(t.Channels), 1))
		for c, ch := range t.Channels {
			*(*uint64)(unsafe.Pointer(&init[8*c])) = uint64(ch.Init)
		}
		if w.inbound[r], err = w.upload(init); err != nil {
			return fail(err)
		}
		if w.expected[r], err = w.zeros(int64(len(init))); err != nil {
			return fail(err)
		}
		if w.publish[r], err = w.zeros(8 * int64(max(len(t.TBs), 1))); err != nil {
			return fail(err)
		}
		if w.barriers[r], err = w.zeros(8 * int64(BarrierWords(len(t.TBs)))); err != nil {
			return fail(err)
		}
		if w.claim[r], err = w.zeros(16); err != nil {
			return fail(err)
		}
		if w.chanRT[r], err = w.zeros(ChanRTBytes * int64(max(len(t.Channels), 1))); err != nil {
			return fail(err)
		}
		if w.streams[r], err = driver.NewStream(); err != nil {
			return fail(err)
		}
	}
	if w.errHost, w.errDev, err = driver.HostAlloc(ErrorRecordBytes * int64(n)); err != nil {
		return fail(err)
	}
	if w.abortH, w.abortD, err = driver.HostAlloc(64); err != nil {
		return fail(err)
	}
	return w, nil
}

func (w *World) upload(b []byte) (driver.Ptr, error) {
	p, err := driver.MemAlloc(int64(len(b)))
	if err != nil {
		return 0, err
	}
	w.allocs = append(w.allocs, p)
	return p, driver.CopyHtoD(p, b)
}

func (w *World) zeros(n int64) (driver.Ptr, error) {
	p, err := driver.MemAlloc(n)
	if err != nil {
		return 0, err
	}
	w.allocs = append(w.allocs, p)
	return p, driver.MemsetD8(p, 0, n)
}

// Close frees everything.
func (w *World) Close() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.dev.SetCurrent(); err != nil {
		return err
	}
	w.closeLocked()
	return nil
}

func (w *World) closeLocked() {
	for _, s := range w.streams {
		if s != 0 {
			s.Destroy()
		}
	}
	for _, p := range append(w.allocs, w.reqAllocs...) {
		driver.MemFree(p)
	}
	w.allocs, w.reqAllocs = nil, nil
	if w.errHost != nil {
		driver.FreeHost(w.errHost)
		w.errHost = nil
	}
	if w.abortH != nil {
		driver.FreeHost(w.abortH)
		w.abortH = nil
	}
	w.dev.Close()
}

func (w *World) placement(req launch.Request) ir.Placement {
	return w.tables[0].Placement(req.Root, req.InPlace)
}

// Run runs one request on every rank: inputs[p] is physical rank p's input
// (or, in place, the initial content of the buffer that holds it, as
// launch.InPlaceOffsets lays it out: see Buffers), and it returns every rank's
// output buffer (in place: the buffer holding the output). Slices and Launch
// of req are ignored: the world picks slices as interp does and keeps its
// own launch counter, which it returns with the outputs.
func (w *World) Run(req launch.Request, inputs [][]byte, initOut [][]byte) (outs [][]byte, launch uint64, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.dev.SetCurrent(); err != nil {
		return nil, 0, err
	}
	if err := w.prepare(req, inputs, initOut); err != nil {
		return nil, 0, err
	}
	if err := w.launchAll(); err != nil {
		return nil, w.launch, err
	}
	if err := w.sync(); err != nil {
		return nil, w.launch, err
	}
	outs = make([][]byte, w.n)
	for p := 0; p < w.n; p++ {
		b := make([]byte, w.sizes[p].Output)
		if err := driver.CopyDtoH(b, w.bufs[p][1]); err != nil {
			return nil, w.launch, err
		}
		outs[p] = b
	}
	return outs, w.launch, nil
}

// Time prepares req once and returns the mean wall time of iters
// back-to-back launches of every rank (after warm launches), synchronised at
// the end only: the steady-state time per collective.
func (w *World) Time(req launch.Request, warm, iters int) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := w.dev.SetCurrent(); err != nil {
		return 0, err
	}
	if err := w.prepare(req, nil, nil); err != nil {
		return 0, err
	}
	for i := 0; i < warm; i++ {
		if err := w.launchAll(); err != nil {
			return 0, err
		}
	}
	if err := w.sync(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := w.launchAll(); err != nil {
			return 0, err
		}
	}
	if err := w.sync(); err != nil {
		return 0, err
	}
	return time.Since(start) / time.Duration(max(iters, 1)), nil
}

// prepare allocates the request's buffers (freeing the previous request's),
// fills them and builds the channel records.
func (w *World) prepare(req launch.Request, inputs [][]byte, initOut [][]byte) (err error) {
	for _, p := range w.reqAllocs {
		driver.MemFree(p)
	}
	w.reqAllocs = nil
	pl := w.placement(req)
	w.req = req
	w.pl = pl
	t0 := w.tables[0]
	req.Slices = launch.Slices(t0, req, 0)
	lay, err := ir.NewLayout(req.Count, req.DataType, t0.ChunksPerBlock, req.Slices)
	if err != nil {
		return err
	}
	w.req, w.lay = req, lay
	if w.k, err = kernel(w.dev.Context(), req.DataType); err != nil {
		return err
	}
	if !independent(w.tables) || req.RedOp == ir.Avg {
		if err := w.checkResident(); err != nil {
			return err
		}
	}
	// Buffers, laid out as NCCL lays out a request (launch.InPlaceOffsets).
	alloc := func(n int64) (driver.Ptr, error) {
		p, err := driver.MemAlloc(max(n, 16))
		if err == nil {
			w.reqAllocs = append(w.reqAllocs, p)
			err = driver.MemsetD8(p, 0, max(n, 16))
		}
		return p, err
	}
	for p := 0; p < w.n; p++ {
		t := w.tables[pl.Logical(p)]
		sz, err := launch.BufferSizes(t, p, req)
		if err != nil {
			return err
		}
		w.sizes[p] = sz
		var in, out driver.Ptr
		if inOff, outOff, alias := launch.InPlaceOffsets(t.Collective, p, req.Root, lay.Count*lay.ElemSize); req.InPlace && alias {
			one, err := alloc(max(inOff+sz.Input, outOff+sz.Output))
			if err != nil {
				return err
			}
			in, out = one+driver.Ptr(inOff), one+driver.Ptr(outOff)
		} else {
			if in, err = alloc(sz.Input); err != nil {
				return err
			}
			if out, err = alloc(sz.Output); err != nil {
				return err
			}
		}
		sc, err := alloc(sz.Scratch)
		if err != nil {
			return err
		}
		w.bufs[p] = [3]driver.Ptr{in, out, sc}
		// Shared work (cuda/units.go), as the backend builds it.
		w.units[p] = unitWork{}
		if units := sharedUnits(t, lay, pl, p, req.Slices, req.RedOp); units != nil && workSharing() {
			if w.units[p], err = placeUnits(units, alloc, driver.CopyHtoD); err != nil {
				return err
			}
		}
		if initOut != nil && initOut[p] != nil {
			if err := driver.CopyHtoD(out, initOut[p]); err != nil {
				return err
			}
		}
		if inputs != nil && inputs[p] != nil {
			if err := driver.CopyHtoD(in, inputs[p]); err != nil {
				return err
			}
		}
	}
	// Memsets on the legacy stream may still be running: finish them before
	// kernels start on the non-blocking rank streams.
	defer func() {
		if err == nil {
			err = driver.Synchronize()
		}
	}()
	// A fresh failure state: the previous request's kernels are done.
	*(*uint32)(w.abortH) = 0
	clear(unsafe.Slice((*byte)(w.errHost), ErrorRecordBytes*w.n))
	for p := 0; p < w.n; p++ {
		if err := driver.MemsetD8(w.claim[p], 0, 16); err != nil {
			return err
		}
	}
	// Channel runtime records per logical rank, for this placement.
	for l, t := range w.tables {
		if len(t.Channels) == 0 {
			continue
		}
		rts := make([]ChanRT, len(t.Channels))
		for c, ch := range t.Channels {
			pp := pl.Physical(ch.Peer)
			setChanRT(&rts[c], w.bufs[pp],
				w.inbound[ch.Peer]+driver.Ptr(8*ch.PeerChannel), w.inbound[l]+driver.Ptr(8*c), w.expected[l]+driver.Ptr(8*c), pp)
		}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&rts[0])), len(rts)*ChanRTBytes)
		if err := driver.CopyHtoD(w.chanRT[l], b); err != nil {
			return err
		}
	}
	return nil
}

// ErrNotResident: the ranks of a World need more threadblocks at once than
// the GPU holds. Every rank's blocks spin on the others', so they must all
// be resident together; on one GPU per rank that holds for any schedule of
// at most a GPU's worth of threadblocks, but several ranks sharing one GPU
// can exceed it (and would hang until the timeout).
var ErrNotResident = errors.New("cuda: the ranks' threadblocks do not fit on the GPU at once")

// checkResident returns ErrNotResident (wrapped, with the numbers) when the
// World's threadblocks, all ranks together, may not all be resident on the
// GPU at once for the current kernel (residentFit, with
// cuOccupancyMaxActiveBlocksPerMultiprocessor per block size).
func (w *World) checkResident() error {
	sms, err := w.dev.Attribute(driver.AttrMultiprocessorCount)
	if err != nil {
		return err
	}
	blocks := map[int]int{} // threads per block -> blocks, all ranks
	for _, t := range w.tables {
		threads := w.threadsOf(t)
		blocks[threads] += max(len(t.TBs), 1)
	}
	return residentFit(blocks, sms, func(threads int) (int, error) { return w.k.exec.MaxActiveBlocksPerSM(threads, 0) })
}

// independent reports whether no threadblock of tables ever waits for
// another: no channels, no dependencies, no packets (an LL reader spins
// until another threadblock's packets land, with no dependency to say
// so), only copies, reduces and nops.
// Such a World may have more threadblocks than the GPU holds at once (the
// hardware runs them in waves), except for an avg request, whose epilogue
// is a barrier of every threadblock.
func independent(tables []*optable.Table) bool {
	for _, t := range tables {
		if len(t.Channels) > 0 || t.Protocol == ir.LL {
			return false
		}
		for _, tb := range t.TBs {
			for _, op := range tb.Ops {
				switch {
				case len(op.Deps) > 0:
					return false
				case op.Code != ir.OpCopy && op.Code != ir.OpReduce && op.Code != ir.OpNop:
					return false
				}
				for _, r := range slices.Concat(op.Srcs, op.Dsts) {
					if r.Packet {
						return false
					}
				}
			}
		}
	}
	return true
}

// residentFit returns ErrNotResident (wrapped) unless every block of
// blocks (threads per block -> count) is sure to be resident at once on sms
// multiprocessors, wherever the hardware places each block, where perSM
// says how many blocks of a size one multiprocessor holds. The test is
// total blocks <= sms * (the smallest perSM): while a block waits, some
// multiprocessor then holds fewer than that many blocks, and a block of any
// of the sizes fits beside them (each takes at most 1/perSM of every
// resource of a multiprocessor). With one block size this is exactly what
// the GPU holds. Summing each size's share of the GPU is not enough for
// mixed sizes: 132 blocks of 512 threads spread one per multiprocessor
// leave no room for a block of 1024 threads that needs a whole one.
func residentFit(blocks map[int]int, sms int, perSM func(threads int) (int, error)) error {
	sizes := make([]int, 0, len(blocks))
	total := 0
	for threads, n := range blocks {
		sizes = append(sizes, threads)
		total += n
	}
	slices.Sort(sizes)
	minPer, at := 0, 0
	for _, threads := range sizes {
		per, err := perSM(threads)
		if err != nil {
			return err
		}
		if per <= 0 {
			return fmt.Errorf("%w: a block of %d threads does not fit on a multiprocessor", ErrNotResident, threads)
		}
		if minPer == 0 || per < minPer {
			minPer, at = per, threads
		}
	}
	if total > sms*minPer {
		return fmt.Errorf("%w: the ranks need %d threadblocks (threads per block: %v), and the GPU holds %d at once (%d multiprocessors x %d blocks of %d threads)",
			ErrNotResident, total, sizes, sms*minPer, sms, minPer, at)
	}
	return nil
}

// launchAll launches every rank's kernel once with the next launch counter.
func (w *World) launchAll() error {
	w.launch++
	req, pl, lay := w.req, w.pl, w.lay
	timeout := w.Timeout
	if req.Timeout > 0 {
		timeout = req.Timeout
	}
	// Every rank's kernel is loaded before any is launched: a module load
	// waits for the context's running kernels, and the ranks' kernels wait
	// for each other (specKernel).
	fns, err := w.fns()
	if err != nil {
		return err
	}
	for p := 0; p < w.n; p++ {
		l := pl.Logical(p)
		t := w.tables[l]
		var a Launch
		fillLaunch(&a, launchFields{
			table: w.tableDev[l], chans: w.chanRT[l], bufs: w.bufs[p], publish: w.publish[l], barriers: w.barriers[l],
			errRec: w.errDev + driver.Ptr(ErrorRecordBytes*p), claim: w.claim[p], abort: w.abortD,
			count: req.Count, stride: lay.Stride, slices: req.Slices, launch: w.launch, timeout: timeout,
			rank: p, nranks: w.n, root: pl.Root, shift: pl.Shift(), dtype: req.DataType, redop: req.RedOp,
			inplace: req.InPlace, ll8: req.PacketType == ir.LL8, elemSize: int(lay.ElemSize),
		})
		if t.Protocol == ir.LL {
			fillHalf(&a, w.sizes[p].Scratch/2)
		}
		fillUnits(&a, w.units[p])
		threads := w.threadsOf(t)
		if err := worldLaunch(fns[p], len(t.TBs), threads, w.streams[p], &a); err != nil {
			return fmt.Errorf("rank %d: %w", p, err)
		}
	}
	return nil
}

// threadsOf is the threads per threadblock of t's launches: its own, else
// w.Threads, at most ExecMaxThreads.
func (w *World) threadsOf(t *optable.Table) int {
	n := t.NumThreads
	if n <= 0 {
		n = w.Threads
	}
	return execThreads(n)
}

// fns are the kernels of the next launch, per physical rank: the
// generic kernel's entry, or, where Kernels gives one and there is no
// shared work, the rank's specialised kernel, loaded by specLoad (for
// each rank before the launches: launchAll).
func (w *World) fns() ([]driver.Function, error) {
	fns := make([]driver.Function, w.n)
	for p := range fns {
		fns[p] = w.k.fn(w.units[p].runs != 0)
		if w.Kernels == nil || w.units[p].runs != 0 {
			continue
		}
		if k := w.Kernels(w.pl.Logical(p), w.req.DataType); k != nil {
			var err error
			if fns[p], err = specLoad(w.ctx(), k); err != nil {
				return nil, fmt.Errorf("rank %d: %w", p, err)
			}
		}
	}
	return fns, nil
}

// specLoad and worldLaunch load a specialised kernel and launch a kernel
// for a World (tests replace them).
var specLoad = func(ctx driver.Context, k *device.Kernel) (driver.Function, error) {
	return specKernel(ctx, k, false) // the World loads every rank's itself
}

var worldLaunch = launchKernel

func (w *World) ctx() driver.Context {
	if w.dev == nil {
		return 0
	}
	return w.dev.Context()
}

// sync waits for every rank's stream and returns the kernels' failures.
func (w *World) sync() error {
	var first error
	for p := 0; p < w.n; p++ {
		if err := w.streams[p].Synchronize(); err != nil && first == nil {
			first = fmt.Errorf("rank %d: %w", p, err)
		}
	}
	var kerrs []error
	for p := 0; p < w.n; p++ {
		if e := readError(unsafe.Add(w.errHost, ErrorRecordBytes*p)); e != nil {
			kerrs = append(kerrs, e)
		}
	}
	if first != nil {
		return errors.Join(append([]error{first}, kerrs...)...)
	}
	return errors.Join(kerrs...)
}
