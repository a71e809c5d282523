package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
)

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
// per rank) of a Simple table launched with SmallThreads.
const SmallBlockBytes = 2048

// LLMinThreads is the fewest threads per threadblock tableThreads gives
// an LL table: two warps.
const LLMinThreads = 64

// tableThreads is the threads per threadblock of a launch of table t on
// blocks of blockBytes bytes per rank (negative: unknown) when the table
// does not ask: THESEUS_NTHREADS when set (envThreads); for an LL table
// one thread per 8-byte packet payload of the chunk a threadblock moves
// (the block over the table's chunks per block), rounded up to a multiple
// of 32, from LLMinThreads to DefaultThreads; otherwise defaultThreads.
// On the H200, 2-rank LL allreduce, replayed: 8 B–512 B one channel, 64
// threads 11.2–11.5 µs against 12.4–12.5 with 256; 2 KiB, 256 threads
// 12.7 against 13.8 with 128; 8 KiB over 16 channels (512 B a
// threadblock), 64 threads 13.9 against 15.0 with 256; 32 KiB over 16
// (2 KiB), 256 threads 15.3 against 16.3 with 128 and 18.5 with 512
// (bench/results/2026-12-02-h200-fourteenth, calls A and B).
func tableThreads(t *optable.Table, blockBytes int64) int {
	if t.Protocol != ir.LL || blockBytes < 0 {
		return defaultThreads(blockBytes)
	}
	if n, ok := envThreads(); ok {
		return execThreads(n)
	}
	c := max(t.ChunksPerBlock, 1)
	chunk := blockBytes/c + min(blockBytes%c, 1) // ceil, without overflow
	n := (chunk/8 + min(chunk%8, 1) + 31) / 32 * 32
	return int(min(max(n, LLMinThreads), DefaultThreads))
}

// defaultThreads is THESEUS_NTHREADS (docs/env.md) when it is a multiple
// of 32 from 32 to 1024, clamped to ExecMaxThreads, and otherwise
// SmallThreads for a block of at most SmallBlockBytes bytes (blockBytes;
// a negative value means unknown) and DefaultThreads for a larger one.
// The kernel runs any block size; the number changes how many threads
// share each op's data, and what a launch costs.
func defaultThreads(blockBytes int64) int {
	if n, ok := envThreads(); ok {
		return execThreads(n)
	}
	if blockBytes >= 0 && blockBytes <= SmallBlockBytes {
		return SmallThreads
	}
	return DefaultThreads
}

// envThreads is THESEUS_NTHREADS when it is a multiple of 32 from 32 to
// 1024 (each kernel clamps it to its own launch bound: ExecMaxThreads,
// P2PMaxThreads).
func envThreads() (int, bool) {
	if raw, set := env.NThreads.Raw(); set && raw != "" {
		n, err := env.NThreads.Int()
		if err == nil && n >= 32 && n <= 1024 && n%32 == 0 {
			return int(n), true
		}
	}
	return 0, false
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
	staged bool
	// units: the launch is shared work (the theseus_units entry); spec:
	// it runs the table's specialised kernel (Args.Kernel).
	units, spec bool
	// p2pBases: a point-to-point launch whose kernel adds the argument's
	// buffer offsets (RebaseP2P may move it).
	p2pBases bool
	// dev is arg in device memory, for the persistent executor's kernel
	// (resident.go: uploaded once; 0 until then).
	dev     driver.Ptr
	grid    int
	threads int
	mem     []driver.Ptr // what Release frees
	in, out []device.Copy
	// chans are the channel records in device memory, nchans of them
	// (RebindPeer rewrites their peer buffers).
	chans  driver.Ptr
	nchans int
	_      [40]byte // to 192 bytes: a multiple of 64 (TestStreamLayout)
}

// RebindPeer implements device.Rebinder: one 8-byte copy into the channel
// record on the control stream, finished before it returns. The executor
// calls it only while no launch of p is past its pairing wait, and the
// kernel reads the records of such a launch only after it (kernel
// launch_pair).
func (p *prepared) RebindPeer(end, kind int, m device.Mem) error {
	if end < 0 || end >= p.nchans || kind < 0 || kind > 1 {
		return fmt.Errorf("cuda: rebind of channel end %d buffer %d of %d ends", end, kind, p.nchans)
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], uint64(m.Ptr))
	dst := p.chans + driver.Ptr(int64(end)*ChanRTBytes+chanPeerBufOffset(kind))
	return p.b.with(func() error {
		if err := driver.CopyHtoDAsync(dst, w[:], p.b.ctl); err != nil {
			return err
		}
		return p.b.ctl.Synchronize()
	})
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
		p.threads = tableThreads(t, a.Count*int64(a.DataType.Size())) // (at most ExecMaxThreads)
	} else {
		p.threads = execThreads(p.threads)
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
		if a.Kernel != nil {
			// The table's specialised kernel (the bundle's): the same
			// argument, its table compiled in. With several ranks in this
			// process, the other ranks' kernels are loaded with it (a load
			// waits for the context's kernels: specKernel).
			if p.fn, err = specKernel(b.dev.Context(), a.Kernel, b.shared.Load()); err != nil {
				return err
			}
			p.spec = true
		}
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
		p.chans, p.nchans = chans, len(a.Ends)
		var port driver.Ptr
		rts := make([]ChanRT, len(a.Ends))
		for i, e := range a.Ends {
			var pb [3]driver.Ptr
			for k := range 3 {
				pb[k] = driver.Ptr(e.PeerBuf[k].Ptr)
			}
			setChanRT(&rts[i], pb, driver.Ptr(e.PeerInbound), driver.Ptr(e.Inbound), driver.Ptr(e.Expected), e.Peer)
		}
		// Ends to peers on other nodes go through the proxy (port.go).
		if pb := portRecords(a, rts); pb != nil {
			if port, err = alloc(int64(len(pb))); err != nil {
				return err
			}
			fixPort(pb, port)
			if err := driver.CopyHtoDAsync(port, pb, b.ctl); err != nil {
				return err
			}
		}
		if len(a.Ends) > 0 {
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
		if a.Trace != nil {
			tr, ok := a.Trace.(*opTrace)
			if !ok {
				return fmt.Errorf("cuda: prepare with a %T op trace", a.Trace)
			}
			fillTrace(p.arg, tr.mem)
		}
		fillDone(p.arg, driver.Ptr(a.Done), finish, fence, len(a.Fence)+len(a.PortFence))
		setPort(p.arg, port)
		var pair driver.Ptr
		if len(a.Pair) > 0 {
			if pair, err = alloc(8 * int64(len(a.Pair))); err != nil {
				return err
			}
			words := make([]byte, 8*len(a.Pair))
			for i, f := range a.Pair {
				binary.LittleEndian.PutUint64(words[8*i:], uint64(f.Word))
			}
			if err := driver.CopyHtoDAsync(pair, words, b.ctl); err != nil {
				return err
			}
		}
		fillPair(p.arg, driver.Ptr(a.Started), driver.Ptr(a.HDone), pair, len(a.Pair))
		// Shared work (cuda/units.go) for a launch of independent copies
		// and reduces of this rank's own buffers.
		pl := t.Placement(a.Root, a.InPlace)
		if units := sharedUnits(t, a.Layout, pl, a.Rank, a.Layout.Slices, a.RedOp); units != nil && workSharing() {
			u, err := placeUnits(units, alloc, func(d driver.Ptr, data []byte) error { return driver.CopyHtoDAsync(d, data, b.ctl) })
			if err != nil {
				return err
			}
			fillUnits(p.arg, u)
			p.fn, p.units, p.spec = k.fn(true), true, false
			if p.fn == k.units {
				p.grid = unitsGrid(b.dev, k.units, p.grid, p.threads, u.nunits)
			}
		}
		p.nfence = int32(len(a.Fence) + len(a.PortFence))
		// With a persistent executor in the process its kernel reads the
		// argument from device memory (resident.go).
		if b.residents.Load() > 0 && !p.units {
			if err := p.uploadArg(); err != nil {
				return err
			}
		}
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

// Rebase implements device.Rebaser: p's launch with this rank's input and
// output bases at a's. The result shares p's device memory (channel
// records, barrier, finish, fence and shared-work words: the same request
// shape at other buffers needs the same, and one rank's launches run in
// order) and has an argument of its own, a copy of p's with the two buffer
// words set: no allocation, copy or synchronisation, so a call whose
// buffers moved within known allocations costs a repeat plus this. The
// shared-work runs are offsets from the buffers' bases (theseus_run), so
// they move with them. Errors: a p of another backend or with staging
// copies.
func (b *Backend) Rebase(pp device.Prepared, a *device.Args) (device.Prepared, error) {
	p, ok := pp.(*prepared)
	if !ok || p == nil || p.b != b {
		return nil, fmt.Errorf("cuda: rebase of a %T", pp)
	}
	if p.staged || len(a.StageIn)+len(a.StageOut) > 0 {
		return nil, errors.New("cuda: rebase of a launch with staging copies")
	}
	// A rebased launch through the persistent executor's queue shares p's
	// argument in device memory (dev): the queue item carries its buffers.
	q := &prepared{b: b, fn: p.fn, arg: newLaunch(), nfence: p.nfence, grid: p.grid, threads: p.threads,
		units: p.units, spec: p.spec, dev: p.dev}
	*q.arg = *p.arg
	setBufs(q.arg, driver.Ptr(a.Buf[device.Input].Ptr), driver.Ptr(a.Buf[device.Output].Ptr))
	q.st = p.st // the argument's stream fields are p's
	return q, nil
}

// Release implements device.Prepared (nothing for a rebased launch: its
// memory is its base's).
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
