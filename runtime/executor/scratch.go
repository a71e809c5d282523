package executor

import (
	"context"
	"fmt"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// grow replaces the scratch buffer by one of at least w.need bytes (the
// next power of two), on every rank at the same request: the need is a pure
// function of the agreed request and schedule.
func (e *Executor) grow(ctx context.Context, w *walk) Event {
	if w.st.Capturing() { // an L3 setup during capture that needs more scratch (seed README: NO)
		return EvCapture
	}
	if err := e.waitInflight(); err != nil {
		return e.fail(w, Grow, err, true)
	}
	capB := e.l0.scratch.Size
	for capB < w.need {
		capB *= 2
	}
	capB = roundUp(capB, scratchAlign)
	sc, err := e.alloc(capB)
	if err != nil {
		return e.fail(w, Grow, fmt.Errorf("scratch of %d bytes: %w", capB, err), true)
	}
	h, err := e.export(sc, capB)
	if err != nil {
		return e.fail(w, Grow, err, true)
	}
	all, err := e.allGather(ctx, growMsg{Scratch: capB, Handle: h}.encode())
	if err != nil {
		return e.fail(w, Grow, err, true, bootstrapPeers(err)...)
	}
	old := e.l0.scratch
	var bad []int
	for q, m := range all {
		gm, err := decodeGrow(m)
		qcap, qh := gm.Scratch, gm.Handle
		if err != nil || qcap != capB {
			bad = append(bad, q)
			continue
		}
		if q == e.cfg.Rank {
			e.l0.peers[q].scratch = device.Mem{Ptr: sc, Size: capB}
			continue
		}
		if e.crossNode(q) {
			continue // its scratch is a region of the connection (portGrow)
		}
		reg, err := e.importHandle(qh)
		if err != nil {
			return e.fail(w, Grow, fmt.Errorf("import rank %d's scratch: %w", q, err), true, q)
		}
		if p := e.l0.peers[q].scratch.Ptr; p != 0 && !e.captured {
			e.unimport(p) // (captured graphs keep it: unimported at Close)
		}
		e.l0.peers[q].scratch = device.Mem{Ptr: reg.Base, Size: capB}
	}
	if len(bad) > 0 {
		return e.fail(w, Grow, fmt.Errorf("%w: growing to %d bytes, ranks %v differ", ErrScratchMismatch, capB, bad), true, bad...)
	}
	e.l0.scratch = device.Mem{Ptr: sc, Size: capB}
	if err := e.portGrow(ctx); err != nil {
		return e.fail(w, Grow, err, true, bootstrapPeers(err)...)
	}
	if !e.captured { // (captured graphs keep it: freed at Close)
		e.freeAlloc(old.Ptr)
	}
	// Every prepared launch names the old scratch.
	for _, ent := range e.l1 {
		e.dropL3(ent.l3)
		for _, l2 := range ent.l2 {
			e.dropL3(l2.l3)
		}
	}
	e.lastSig = scratchSig{}
	e.stats.Growths++
	e.stats.ScratchBytes = capB
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: scratch grown from %d to %d bytes", e.cfg.Rank, old.Size, capB)
	}
	return EvOK
}

func (e *Executor) freeAlloc(p device.Ptr) {
	for i, a := range e.allocs {
		if a == p {
			e.allocs = append(e.allocs[:i], e.allocs[i+1:]...)
			break
		}
	}
	e.dev.Free(p)
}
