package cuda

/*
#include "kernel/launch.h"
#include <stdlib.h>
#include "kernel/queue.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/resident"
)

// The persistent executor (THESEUS_EXECUTOR=persistent,
// device.ResidentBackend; docs/design/cuda.md, "The persistent
// executor"). Per communicator rank and datatype a queue (runtime/resident:
// its status line and descriptor slots in page-locked host memory mapped
// into the device; its doorbell, done and dispatch words in device memory)
// and a resident kernel (theseus_resident of the datatype's resident
// module) that takes the queue's items on its own stream. A launch writes
// the item's descriptor and enqueues on the caller's stream the item's
// release and the wait for its end (driver.Device.QueueLaunch: one call
// into C, two stream memory operations, no kernel launch); the first
// launch, and the first after the kernel exited (idle, Stop), starts the
// kernel.
//
// The kernel holds its Blocks threadblocks while it runs, and the driver's
// cuMemFree (and cuIpcCloseMemHandle, cuMemFreeHost) wait for a running
// kernel: every free of the backend first stops the process's resident
// kernels (stopResidents), which exit once their queues are idle; with
// several ranks in the process the reaper waits for them to be stopped.
// The application's own cudaFree waits for the idle exit.

// Resident limits.
const (
	residentMaxBlocks = resident.MaxBlocks
)

// NewResident implements device.ResidentBackend.
func (b *Backend) NewResident(cfg device.ResidentConfig) (device.Resident, error) {
	if cfg.Slots == 0 {
		cfg.Slots = resident.DefaultSlots
	}
	if cfg.Blocks < 1 || cfg.Blocks > residentMaxBlocks {
		return nil, fmt.Errorf("cuda: resident executor of %d threadblocks (want 1 to %d)", cfg.Blocks, residentMaxBlocks)
	}
	if cfg.Threads < 32 || cfg.Threads > ExecMaxThreads || cfg.Threads%32 != 0 {
		return nil, fmt.Errorf("cuda: resident executor of %d threads per block (want a multiple of 32 up to %d, the executor's launch bound)", cfg.Threads, ExecMaxThreads)
	}
	if cfg.Slots < 1 || cfg.Slots > resident.MaxSlots || cfg.Slots&(cfg.Slots-1) != 0 {
		return nil, fmt.Errorf("cuda: resident executor of %d queue slots (a power of two up to %d)", cfg.Slots, resident.MaxSlots)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = launch.DefaultTimeout
	}
	if !driver.HasMemOps() {
		return nil, driver.ErrNoMemOps
	}
	b.residents.Add(1)
	return &residentExec{b: b, cfg: cfg, queues: map[ir.DataType]*rqueue{}, streams: map[device.Stream]*residentStream{}}, nil
}

// residentExec is one communicator rank's persistent executor.
type residentExec struct {
	b   *Backend
	cfg device.ResidentConfig

	mu      sync.Mutex
	queues  map[ir.DataType]*rqueue
	streams map[device.Stream]*residentStream
	closed  bool

	queued, fallback atomic.Uint64
}

// rqueue is one datatype's queue and kernel.
type rqueue struct {
	r  *residentExec
	dt ir.DataType
	fn driver.Function
	q  *resident.Queue
	// host is the queue's memory (page-locked, mapped: hostDev on the
	// device); errHost/errDev the queue's failure record page.
	host    unsafe.Pointer
	hostDev driver.Ptr
	errHost unsafe.Pointer
	errDev  driver.Ptr
	// words: the doorbells (4 bytes per slot), then the done word, the
	// dispatch area and the claim word, each on a line of its own.
	words             driver.Ptr
	done, disp, claim driver.Ptr
	st                driver.Stream // the kernel's own stream
	instance          uint32
	arg               *C.theseus_resident_args
	startMu           sync.Mutex
	closed            bool
}

func (q *rqueue) bell(seq uint32) driver.Ptr {
	return q.words + driver.Ptr(4*(seq&uint32(q.q.Slots()-1)))
}

// queue is dt's queue, made at the first launch of dt (not while st is
// being captured: such a launch is a kernel launch anyway).
func (r *residentExec) queue(dt ir.DataType, st *Stream) (*rqueue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, device.ErrClosed
	}
	if q := r.queues[dt]; q != nil {
		return q, nil
	}
	if st.Capturing() {
		return nil, nil
	}
	q := &rqueue{r: r, dt: dt}
	b := r.b
	err := b.with(func() error {
		prev, err := driver.ExchangeCaptureMode(driver.CaptureModeRelaxed)
		if err != nil {
			return err
		}
		defer driver.ExchangeCaptureMode(prev)
		if q.fn, err = residentKernel(b.dev.Context(), dt); err != nil {
			return err
		}
		n := r.cfg.Slots
		if q.host, q.hostDev, err = driver.HostAlloc(int64(resident.Bytes(n))); err != nil {
			return err
		}
		if q.q, err = resident.New(q.host, n); err != nil {
			return err
		}
		if q.errHost, q.errDev, err = driver.HostAlloc(errorPageBytes); err != nil {
			return err
		}
		off := (4*int64(n) + 63) / 64 * 64
		if q.words, err = b.zeroed(off + 3*64); err != nil {
			return err
		}
		q.done, q.disp, q.claim = q.words+driver.Ptr(off), q.words+driver.Ptr(off+64), q.words+driver.Ptr(off+128)
		if q.st, err = driver.NewStream(); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
	if err != nil {
		q.free()
		return nil, err
	}
	q.arg = (*C.theseus_resident_args)(C.calloc(1, C.sizeof_theseus_resident_args))
	r.queues[dt] = q
	b.rmu.Lock()
	b.rqueues[q] = struct{}{}
	b.rmu.Unlock()
	return q, nil
}

// start launches the queue's kernel (Commit found the queue stopped): it
// takes the items from completed + 1 on. The previous kernel, which left
// the queue stopped, runs on the same stream, so this one starts after it
// has exited.
func (q *rqueue) start() error {
	q.startMu.Lock()
	defer q.startMu.Unlock()
	b, cfg := q.r.b, q.r.cfg
	q.instance++
	for i := range resident.MaxBlocks {
		atomic.StoreUint32((*uint32)(unsafe.Add(q.host, resident.OffSMs+4*i)), 0)
	}
	a := q.arg
	*a = C.theseus_resident_args{status: C.uint64_t(q.hostDev), doorbell: C.uint64_t(q.words), done: C.uint64_t(q.done),
		dispatch: C.uint64_t(q.disp), abort_word: C.uint64_t(cfg.Abort), error: C.uint64_t(q.errDev), claim: C.uint64_t(q.claim),
		idle_ns: C.uint64_t(cfg.Idle.Nanoseconds()), nslots: C.uint32_t(q.q.Slots()),
		first: C.uint32_t(q.q.Load(resident.OffCompleted) + 1), instance: C.uint32_t(q.instance)}
	return b.with(func() error {
		return driver.Launch1(q.fn, cfg.Blocks, cfg.Threads, 0, q.st, unsafe.Pointer(a))
	})
}

// stop makes the kernel exit once the queue is idle and waits for it
// (bounded by the timeout), then lets the next launch start another.
func (q *rqueue) stop() error {
	if q.q.Load(resident.OffState) == resident.Stopped {
		return nil
	}
	q.q.Exit(true)
	defer q.q.Exit(false)
	deadline := time.Now().Add(q.r.cfg.Timeout)
	for polls := 0; q.q.Load(resident.OffState) != resident.Stopped; polls++ {
		if resident.Backoff(polls, deadline, time.Millisecond) != nil {
			return fmt.Errorf("cuda: rank %d: the resident executor (%v) did not stop within %v: %w", q.r.cfg.Rank, q.dt, q.r.cfg.Timeout, launch.ErrTimeout)
		}
	}
	// The kernel has left the queue stopped, its last access to it; wait
	// for it to end.
	return q.r.b.with(func() error { return q.st.Synchronize() })
}

// free releases what queue allocated (b.release: with several ranks in
// the process, once the backend is idle). The kernel must have ended.
func (q *rqueue) free() {
	st, words, host, errHost := q.st, q.words, q.host, q.errHost
	q.st, q.words, q.host, q.errHost = 0, 0, nil, nil
	q.r.b.release(func() {
		if st != 0 {
			st.Synchronize()
			st.Destroy()
		}
		if words != 0 {
			driver.MemFree(words)
		}
		if host != nil {
			driver.FreeHost(host)
		}
		if errHost != nil {
			driver.FreeHost(errHost)
		}
	})
	if q.arg != nil {
		C.free(unsafe.Pointer(q.arg))
		q.arg = nil
	}
}

// abandon is a failed start's end of item seq: the queue's failure record
// says so and the done word passes it, so that nothing waits for it.
func (q *rqueue) abandon(seq uint32) {
	rec := (*ErrorRecord)(q.errHost)
	if atomic.CompareAndSwapUint32((*uint32)(unsafe.Pointer(&rec.code)), 0, ErrAborted) {
		rec.rank = C.int32_t(q.r.cfg.Rank)
	}
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], seq)
	q.r.b.Upload(device.Ptr(q.done), w[:])
	atomic.StoreUint32((*uint32)(unsafe.Add(q.host, resident.OffCompleted)), seq)
	atomic.StoreUint32((*uint32)(unsafe.Add(q.host, resident.OffState)), resident.Stopped)
}

// err is the first failure of a launch through the queue.
func (q *rqueue) err() error {
	if e := readError(q.errHost); e != nil {
		return e
	}
	return nil
}

// takes reports whether the kernel runs p: no staging copies, not shared
// work (its own entry), no more threadblocks than the kernel's, and a
// datatype with a resident module (ResidentDataTypes).
func (r *residentExec) takes(p *prepared) bool {
	return !p.staged && !p.units && p.grid <= r.cfg.Blocks && hasResident(ir.DataType(p.arg.dtype))
}

// Stream implements device.Resident.
func (r *residentExec) Stream(st device.Stream) (device.Stream, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, device.ErrClosed
	}
	if rs, ok := r.streams[st]; ok {
		return rs, nil
	}
	cs, ok := st.(*Stream)
	if !ok {
		return nil, fmt.Errorf("cuda: resident executor on a %T", st)
	}
	rs := &residentStream{r: r, st: cs}
	r.streams[st] = rs
	return rs, nil
}

// Stop implements device.Resident.
func (r *residentExec) Stop() error {
	var first error
	for _, q := range r.list() {
		if err := q.stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (r *residentExec) list() []*rqueue {
	r.mu.Lock()
	defer r.mu.Unlock()
	qs := make([]*rqueue, 0, len(r.queues))
	for _, q := range r.queues {
		qs = append(qs, q)
	}
	return qs
}

// Close implements device.Resident: the kernels stop, then the queues'
// memory goes (the kernels have ended, so the frees wait for none of
// them; other residents of the process are stopped first, as for every
// free).
func (r *residentExec) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.Stop()
	b := r.b
	for _, q := range r.list() {
		b.rmu.Lock()
		delete(b.rqueues, q)
		b.rmu.Unlock()
		q.closed = true
		q.free()
	}
	b.residents.Add(-1)
	return err
}

// Stats implements device.Resident.
func (r *residentExec) Stats() device.ResidentStats {
	var starts uint64
	for _, q := range r.list() {
		starts += uint64(q.q.Load(resident.OffStarts))
	}
	return device.ResidentStats{Queued: r.queued.Load(), Fallback: r.fallback.Load(), Starts: starts}
}

// ResidentSMs reports, for a persistent executor (Config.Executor), the
// multiprocessors its running kernels' blocks were placed on (%smid), by
// datatype: what it occupies (docs/design/cuda.md, "The persistent
// executor").
func ResidentSMs(res device.Resident) map[ir.DataType][]int {
	r, ok := res.(*residentExec)
	if !ok {
		return nil
	}
	out := map[ir.DataType][]int{}
	for _, q := range r.list() {
		if q.host == nil {
			continue
		}
		for i := range resident.MaxBlocks {
			if v := atomic.LoadUint32((*uint32)(unsafe.Add(q.host, resident.OffSMs+4*i))); v != 0 {
				out[q.dt] = append(out[q.dt], int(v-1))
			}
		}
	}
	return out
}

// stopResidents stops every resident kernel of the backend that runs
// (before a free: cuMemFree waits for running kernels). The next launch
// through a queue starts its kernel again.
func (b *Backend) stopResidents() {
	if b.residents.Load() == 0 {
		return
	}
	b.rmu.Lock()
	qs := make([]*rqueue, 0, len(b.rqueues))
	for q := range b.rqueues {
		qs = append(qs, q)
	}
	b.rmu.Unlock()
	for _, q := range qs {
		q.stop()
	}
}

// residentsBusy reports whether a resident kernel runs, asking each one
// that does to exit once idle (the reaper's idle check: exit stays
// requested until residentsRelease).
func (b *Backend) residentsBusy() bool {
	if b.residents.Load() == 0 {
		return false
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	busy := false
	for q := range b.rqueues {
		if q.q.Load(resident.OffState) != resident.Stopped {
			q.q.Exit(true)
			busy = true
		}
	}
	return busy
}

// residentsRelease lets the resident kernels run until their idle time
// again (after the reaper's frees).
func (b *Backend) residentsRelease() {
	if b.residents.Load() == 0 {
		return
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	for q := range b.rqueues {
		q.q.Exit(false)
	}
}

// residentStream is a stream whose launches go through the queue.
type residentStream struct {
	r  *residentExec
	st *Stream
}

// Launch implements device.Stream (CaptureLaunch without fencing a
// captured launch).
func (s *residentStream) Launch(p device.Prepared, counter uint64, fence bool) error {
	_, err := s.CaptureLaunch(p, counter, fence, false)
	return err
}

// CaptureLaunch implements device.CaptureLauncher: the launch through the
// queue, or the stream's own kernel launch when the kernel does not take
// it or the stream is being captured (a graph replays without the host:
// a captured call is a kernel launch, which the graph owns).
func (s *residentStream) CaptureLaunch(pp device.Prepared, counter uint64, fence, fenceCaptured bool) (bool, error) {
	p, ok := pp.(*prepared)
	if !ok {
		return false, fmt.Errorf("cuda: launch of a %T", pp)
	}
	r := s.r
	if !r.takes(p) {
		r.fallback.Add(1)
		return s.st.CaptureLaunch(pp, counter, fence, fenceCaptured)
	}
	q, err := r.queue(ir.DataType(p.arg.dtype), s.st)
	if err != nil {
		return false, err
	}
	if q == nil { // the stream is being captured
		r.fallback.Add(1)
		return s.st.CaptureLaunch(pp, counter, fence, fenceCaptured)
	}
	if err := s.st.enter(); err != nil {
		return false, err
	}
	defer s.st.leave()
	if e := readError(s.st.errHost); e != nil {
		return false, e
	}
	if e := q.err(); e != nil {
		return false, e
	}
	// The capture query first, before anything is uploaded or reserved: a
	// captured call is a kernel launch, and an item, once issued, must be
	// written and released.
	if capturing, err := r.b.dev.Prelaunch(s.st.s, true); err != nil {
		return false, err
	} else if capturing {
		r.fallback.Add(1)
		return s.st.CaptureLaunch(pp, counter, fence, fenceCaptured)
	}
	dev, err := p.deviceArg()
	if err != nil {
		return false, err
	}
	deadline := time.Now().Add(r.cfg.Timeout)
	abort := r.cfg.Abort
	seq, slot, err := q.q.Reserve(func(polls int) error {
		if polls%64 == 63 && abortSet(r.b, abort) {
			return fmt.Errorf("cuda: rank %d: waiting for a queue slot: %w", r.cfg.Rank, launch.ErrAborted)
		}
		return resident.Backoff(polls, deadline, time.Millisecond)
	})
	if err != nil {
		return false, err
	}
	// Issue the item, starting the kernel if it is not running, before its
	// release and wait go on the caller's stream: a kernel launch queued
	// behind a stream wait on the same hardware queue would wait for it.
	start, err := q.q.Commit(seq)
	if err != nil {
		return false, err
	}
	if start {
		if err := q.start(); err != nil {
			// No kernel takes the item: fail it and release its wait.
			q.abandon(seq)
			return false, err
		}
	}
	nfence := int32(0)
	if fence {
		nfence = p.nfence
	}
	d := resident.Desc{Arg: uint64(dev), Launch: counter, NFence: nfence, Grid: uint32(p.grid),
		In: uint64(p.arg.buf[device.Input]), Out: uint64(p.arg.buf[device.Output])}
	res, err := r.b.dev.QueueLaunch(s.st.s, false, slot, seq, d.Arg, d.Launch, d.NFence, d.Grid, driver.Ptr(d.In), driver.Ptr(d.Out), q.bell(seq), q.done)
	if err != nil && !res.Enqueued {
		// The item is issued but its release is not on the stream: write
		// and release it from here, so that the kernel does not wait for
		// it forever (the executor fails for good on this error).
		resident.Write(slot, seq, d)
		var w [4]byte
		binary.LittleEndian.PutUint32(w[:], seq)
		r.b.Upload(device.Ptr(q.bell(seq)), w[:])
	}
	r.queued.Add(1)
	return false, err
}

// abortSet reads the communicator's abort word.
func abortSet(b *Backend, abort device.Ptr) bool {
	if abort == 0 {
		return false
	}
	var w [8]byte
	return b.Download(w[:], abort) == nil && binary.LittleEndian.Uint64(w[:]) != 0
}

// Synchronize implements device.Stream: the stream's work (which waits
// for its launches through the queue), then the first failure.
func (s *residentStream) Synchronize() error {
	if err := s.st.Synchronize(); err != nil {
		return err
	}
	return s.queueErr()
}

func (s *residentStream) queueErr() error {
	for _, q := range s.r.list() {
		if err := q.err(); err != nil {
			return err
		}
	}
	return nil
}

// Err implements device.Stream.
func (s *residentStream) Err() error {
	if err := s.st.Err(); err != nil {
		return err
	}
	return s.queueErr()
}

// Capturing implements device.Stream.
func (s *residentStream) Capturing() bool { return s.st.Capturing() }

// After implements device.StreamOrderer: the caller's streams' order.
func (s *residentStream) After(prev device.Stream) error {
	if p, ok := prev.(*residentStream); ok {
		prev = p.st
	}
	return s.st.After(prev)
}

// Close implements device.Stream: the wrapper only.
func (s *residentStream) Close() error { return nil }

// deviceArg is p's launch argument in device memory, which the resident
// kernel reads (made at Prepare when the process has a persistent
// executor, else here, once).
func (p *prepared) deviceArg() (driver.Ptr, error) {
	if p.dev != 0 {
		return p.dev, nil
	}
	b := p.b
	err := b.with(func() error {
		prev, err := driver.ExchangeCaptureMode(driver.CaptureModeRelaxed)
		if err != nil {
			return err
		}
		defer driver.ExchangeCaptureMode(prev)
		if err := p.uploadArg(); err != nil {
			return err
		}
		return b.ctl.Synchronize()
	})
	return p.dev, err
}

// uploadArg allocates p.dev and copies p's launch argument there on the
// control stream (inside with; the caller synchronises it).
func (p *prepared) uploadArg() error {
	m, err := p.b.zeroed(int64(unsafe.Sizeof(Launch{})))
	if err != nil {
		return err
	}
	p.mem = append(p.mem, m)
	if err := driver.CopyHtoDAsync(m, unsafe.Slice((*byte)(unsafe.Pointer(p.arg)), unsafe.Sizeof(Launch{})), p.b.ctl); err != nil {
		return err
	}
	p.dev = m
	return nil
}

// queueCLayout is the queue's C layout (kernel/queue.h) as offsets and
// sizes, for TestQueueLayout's comparison with runtime/resident's.
func queueCLayout() map[string]uintptr {
	var st C.theseus_qstatus
	var sl C.theseus_qslot
	return map[string]uintptr{
		"state": unsafe.Offsetof(st.state), "completed": unsafe.Offsetof(st.completed), "issued": unsafe.Offsetof(st.issued),
		"exit": unsafe.Offsetof(st.exit), "aborted": unsafe.Offsetof(st.aborted), "starts": unsafe.Offsetof(st.starts),
		"blocks": unsafe.Offsetof(st.blocks), "smid": unsafe.Offsetof(st.smid), "status": unsafe.Sizeof(st), "maxblocks": uintptr(C.THESEUS_Q_MAX_BLOCKS),
		"arg": unsafe.Offsetof(sl.arg), "launch": unsafe.Offsetof(sl.launch), "nfence": unsafe.Offsetof(sl.nfence),
		"seq": unsafe.Offsetof(sl.seq), "grid": unsafe.Offsetof(sl.grid), "flags": unsafe.Offsetof(sl.flags), "slot": unsafe.Sizeof(sl),
		"in": unsafe.Offsetof(sl.in), "out": unsafe.Offsetof(sl.out),
		"stopped": uintptr(C.THESEUS_Q_STOPPED), "running": uintptr(C.THESEUS_Q_RUNNING), "exiting": uintptr(C.THESEUS_Q_EXITING),
	}
}
