package executor

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

type l0 struct {
	ready      bool
	scratch    device.Mem
	control    device.Ptr // abort word at +0, done word at +8, started at +16, finished at +24
	pools      []*pool
	peers      []peerL0 // by physical rank
	sentPool   [][]bool // [peer][pool] handle known to the peer
	peerPools  []map[uint32]device.Region
	allImports []device.Ptr
}

type peerL0 struct {
	scratch device.Mem
	done    device.Ptr
	started device.Ptr // the peer's started word (device.Args.Pair)
	imports []device.Ptr
}

// pool is a block of semaphore slots: inbound words [0, n), then the
// matching private expected words [n, 2n).
type pool struct {
	id     uint32
	base   device.Ptr
	n      int
	used   int
	handle device.Handle
	// port: a pool of the proxy's semaphores (port.go), host memory whose
	// host address is host (on CUDA pinned and device-mapped: mapped).
	port   bool
	host   unsafe.Pointer
	mapped device.MappedMem
}

const (
	poolSlots    = 2048
	controlBytes = 4096
	scratchAlign = 4096
)

type slot struct {
	pool    *pool
	idx     int
	curInit int64 // the init of the schedule that last ran with the slot
}

func (s *slot) inbound() device.Ptr { return s.pool.base + device.Ptr(8*s.idx) }

func (s *slot) expected() device.Ptr { return s.pool.base + device.Ptr(8*(s.pool.n+s.idx)) }

func (e *Executor) l0Lookup(w *walk) Event {
	if e.l0.ready {
		return EvHit
	}
	if w.st.Capturing() {
		return EvCapture
	}
	return EvMiss
}

func (e *Executor) alloc(size int64) (device.Ptr, error) {
	p, err := e.dev.Alloc(size)
	if err == nil {
		e.allocs = append(e.allocs, p)
		e.stats.Created.Allocations++
	}
	return p, err
}

// small sub-allocates n bytes (16-byte aligned) of this rank's private
// device memory — op tables, dependency counters — from arena blocks of
// arenaBytes, so that materialising a schedule costs no backend allocation
// in the common case. Larger requests get their own allocation.
func (e *Executor) small(n int64) (device.Ptr, error) {
	n = roundUp(n, 16)
	if n > arenaBytes/4 {
		return e.alloc(n)
	}
	if e.arena == 0 || e.arenaUsed+n > arenaBytes {
		p, err := e.alloc(arenaBytes)
		if err != nil {
			return 0, err
		}
		e.arena, e.arenaUsed = p, 0
	}
	p := e.arena + device.Ptr(e.arenaUsed)
	e.arenaUsed += n
	return p, nil
}

const arenaBytes = 256 << 10

func (e *Executor) newPool() (*pool, error) {
	base, err := e.alloc(16 * poolSlots)
	if err != nil {
		return nil, err
	}
	reg, ok := e.dev.Lookup(base, 16*poolSlots)
	if !ok {
		return nil, errors.New("semaphore pool is not a backend allocation")
	}
	h, err := e.dev.Export(reg)
	if err != nil {
		return nil, err
	}
	p := &pool{id: uint32(len(e.l0.pools)), base: base, n: poolSlots, handle: h}
	e.l0.pools = append(e.l0.pools, p)
	for q := range e.l0.sentPool {
		e.l0.sentPool[q] = append(e.l0.sentPool[q], q == e.cfg.Rank)
	}
	return p, nil
}

func (e *Executor) export(p device.Ptr, size int64) (device.Handle, error) {
	reg, ok := e.dev.Lookup(p, size)
	if !ok {
		return nil, device.ErrNotExportable
	}
	return e.dev.Export(reg)
}

func (e *Executor) allGather(ctx context.Context, data []byte) ([][]byte, error) {
	e.stats.Created.BootstrapRounds++
	if e.n == 1 {
		return [][]byte{data}, nil
	}
	return e.net.AllGather(ctx, data)
}

func (e *Executor) send(peer int, tag uint64, data []byte) error {
	e.stats.Created.BootstrapMessages++
	return e.net.Send(peer, tag, data)
}

func (e *Executor) recv(ctx context.Context, peer int, tag uint64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	return e.net.Recv(ctx, peer, tag)
}

// Message tags: the request's launch counter (identical on every rank) and
// the kind of exchange.
const (
	tagL1 = 1
	tagL2 = 2
	tagL3 = 3
)

func (e *Executor) tag(kind uint64) uint64 { return ((e.launch+1)<<8 | kind) & (1<<63 - 1) }

func (e *Executor) unimport(p device.Ptr) {
	for i, x := range e.l0.allImports {
		if x == p {
			e.l0.allImports = append(e.l0.allImports[:i], e.l0.allImports[i+1:]...)
			break
		}
	}
	e.dev.Unimport(p)
}

func (e *Executor) importHandle(h device.Handle) (device.Region, error) {
	reg, err := e.dev.Import(h)
	if err == nil {
		e.l0.allImports = append(e.l0.allImports, reg.Base)
	}
	return reg, err
}

// l0Setup allocates the scratch buffer, the control words and the first
// semaphore pool, and exchanges their handles in one allgather.
func (e *Executor) l0Setup(ctx context.Context, w *walk) Event {
	rank := e.cfg.Rank
	e.l0.sentPool = make([][]bool, e.n)
	e.l0.peerPools = make([]map[uint32]device.Region, e.n)
	for q := range e.l0.peerPools {
		e.l0.peerPools[q] = map[uint32]device.Region{}
	}
	capB := e.cfg.InitialScratch
	sc, err := e.alloc(capB)
	if err != nil {
		return e.fail(w, L0Setup, err, true)
	}
	e.l0.scratch = device.Mem{Ptr: sc, Size: capB}
	if err := e.control(); err != nil { // (a point-to-point call may have made them)
		return e.fail(w, L0Setup, err, true)
	}
	p0, err := e.newPool()
	if err != nil {
		return e.fail(w, L0Setup, err, true)
	}
	mine := l0Msg{Scratch: capB}
	for i, m := range []device.Mem{e.l0.scratch, {Ptr: e.l0.control, Size: controlBytes}} {
		h, err := e.export(m.Ptr, m.Size)
		if err != nil {
			return e.fail(w, L0Setup, err, true)
		}
		mine.Handles[i] = h
	}
	mine.Handles[2] = p0.handle
	all, err := e.allGather(ctx, mine.encode())
	if err != nil {
		return e.fail(w, L0Setup, err, true, bootstrapPeers(err)...)
	}
	e.l0.peers = make([]peerL0, e.n)
	var bad []int
	for q, m := range all {
		lm, err := decodeL0(m)
		if err != nil {
			return e.fail(w, L0Setup, fmt.Errorf("rank %d's L0 message: %w", q, err), true, q)
		}
		qcap, hs := lm.Scratch, lm.Handles
		if qcap != capB {
			bad = append(bad, q)
			continue
		}
		e.l0.sentPool[q] = []bool{true}
		if q == rank {
			e.l0.peers[q] = peerL0{scratch: e.l0.scratch, done: e.l0.control + ctlDone, started: e.l0.control + ctlStarted}
			e.l0.peerPools[q][0] = device.Region{Base: p0.base, Size: 16 * poolSlots}
			continue
		}
		if e.crossNode(q) {
			// Ranks of different nodes map nothing of each other: their
			// port channels go through the proxy (port.go).
			continue
		}
		var regs [3]device.Region
		for i, h := range hs {
			if regs[i], err = e.importHandle(h); err != nil {
				return e.fail(w, L0Setup, fmt.Errorf("import rank %d's L0 memory: %w", q, err), true, q)
			}
		}
		e.l0.peers[q] = peerL0{scratch: device.Mem{Ptr: regs[0].Base, Size: capB}, done: regs[1].Base + ctlDone, started: regs[1].Base + ctlStarted}
		e.l0.peerPools[q][0] = regs[2]
		e.stats.Created.Connections++
	}
	if len(bad) > 0 {
		return e.fail(w, L0Setup, fmt.Errorf("%w: this rank has %d bytes, ranks %v differ", ErrScratchMismatch, capB, bad), true, bad...)
	}
	e.l0.ready = true
	e.abortW.Store(uintptr(e.l0.control))
	e.startServices()
	if err := e.startResident(); err != nil {
		return e.fail(w, L0Setup, fmt.Errorf("persistent executor: %w", err), true)
	}
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: L0: scratch %d bytes, %d peers imported (%s)", rank, capB, e.stats.Created.Connections, e.layoutText())
	}
	e.stats.ScratchBytes = capB
	e.stats.L0Setups++
	return EvOK
}
