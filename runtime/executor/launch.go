package executor

import (
	"errors"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// The launch: what the walk's Launch state and a plan's launch (Launch)
// both do, in one function (enqueue), so that a plan launches exactly as the
// walk that built it would.
//
// The launcher is the stream: the executor hands it a prepared launch
// (device.Prepared), the launch counter and whether to fence, and the
// stream enqueues it (cuLaunchKernel on CUDA, the interpreter on the host
// backend). A launcher outside Go (the NCCL layer's C launcher, fed from
// plans: Repeatable, PlansLaunched) makes the same launches and reports
// them afterwards.

// waitInflight waits for every launch this executor enqueued (YES + WAIT in
// the seed's capture table).
//
// It waits on every stream even after a failure and returns the first real
// error; a stream the caller has closed since (device.ErrClosed) was drained
// by its Close.
func (e *Executor) waitInflight() error {
	e.stats.Waits++
	var first error
	for _, st := range e.streams {
		if err := st.Synchronize(); err != nil && !errors.Is(err, device.ErrClosed) && first == nil {
			first = err
		}
	}
	e.streams = e.streams[:0]
	e.tracked = false
	if len(e.p2p.retired) > 0 {
		e.releaseRetired() // nothing of them runs any more
	}
	if e.ops != nil {
		e.drainOps()
	}
	return first
}

// plain reports whether a launch of p on st takes enqueue's plain path:
// on the stream of the last launch, already tracked, a device.CaptureLauncher.
// Such a launch changes nothing but the launch counter, the fence count
// and the last scratch layout unless the stream turns out to be
// capturing; after captures into CUDA graphs of another layout (or of
// several) it leaves no layout behind (capReset), so that the next launch
// is fenced, as the walk's bookkeeping does (launched).
func (e *Executor) plain(p *Plan, st device.Stream) bool {
	return st == e.lastSt && e.tracked && e.lastCL != nil
}

// capReset reports whether an eager launch of layout sig must leave no
// last layout (lastSig) behind: something was captured into a CUDA graph
// in another layout (or in several), and the application may replay it
// before the next launch, which must then be fenced.
func (e *Executor) capReset(sig scratchSig) bool {
	return e.capSig.l1 != nil && (e.capMixed || sig != e.capSig)
}

// enqueue launches p on st: the Launch state of a walk, and all of Launch.
// Errors: the stream's (sticky unless the stream was closed: the peers have
// launched this request, and this rank's launch counter would fall behind
// theirs), wrapped in an *Error of state Launch.
//
// Fence when this launch lays scratch out differently from the previous
// one, and always for LL schedules not marked self-fenced: an LL sender
// gets no back-pressure, so without the fence a rank that only sends (a
// rooted collective's root) could run two launches ahead and overwrite the
// scratch half a slow reader still polls (docs/design/ir.md §5.4). A
// self-fenced LL schedule (optable.Table.SelfFenced, verify.SelfFencedLL)
// reads a packet from every rank that reads its packets, which orders the
// reuse by itself. A schedule the verifier found racing between
// iterations (TS0206, optable.Table.FenceLaunches) is fenced at every
// launch.
//
// A launch captured into a CUDA graph is always fenced: its replays may
// follow any eager launch. And the launch after it is fenced too (lastSig
// reset): the device may have run replays in between. So is the launch
// after an eager launch whose layout differs from a captured one's: the
// application may replay a graph between any two launches.
func (e *Executor) enqueue(p *Plan, st device.Stream) error {
	if e.persistent {
		var err error
		if st, err = e.residentStream(st); err != nil {
			return &Error{Rank: e.cfg.Rank, State: Launch, Err: err}
		}
	}
	fence := e.launch > 0 && (p.sig != e.lastSig || p.fenceAll)
	for _, k := range p.l1.kick {
		k.Kick() // the kernel posts port-channel descriptors: the proxy spins
	}
	if e.plain(p, st) {
		// The usual repeat. The capture check and the launch are one
		// backend call, under one switch to the device's context.
		capturing, err := e.lastCL.CaptureLaunch(p.prep, e.launch+1, fence, true)
		if err == nil && !capturing {
			e.launch++
			if fence {
				e.fences++
				e.lastSig = p.sig
			}
			if e.capReset(p.sig) {
				e.lastSig = scratchSig{}
			}
			e.lastEager = e.launch
			if p.l2 != nil {
				p.l2.last = e.launch
			}
			return nil
		}
		return e.launched(p, st, fence || capturing, capturing, err) // (a captured launch is fenced by CaptureLaunch)
	}
	var capturing bool
	var err error
	if cl, ok := st.(device.CaptureLauncher); ok && (e.lastSt == nil || e.lastSt == st) {
		capturing, err = cl.CaptureLaunch(p.prep, e.launch+1, fence, e.launch > 0)
		fence = fence || (capturing && e.launch > 0)
	} else {
		capturing = st.Capturing()
		fence = fence || (capturing && e.launch > 0)
		// One rank's launches run in call order even when consecutive calls
		// use different streams (as NCCL orders one communicator's
		// operations): the new stream waits for the previous one on the
		// device. Not across a capture boundary: a capture may not wait on
		// work outside it.
		if prev := e.lastSt; prev != nil && prev != st && !capturing {
			if o, ok := st.(device.StreamOrderer); ok && !prev.Capturing() {
				if err := o.After(prev); err != nil {
					return &Error{Rank: e.cfg.Rank, State: Launch, Err: err}
				}
			}
		}
		err = st.Launch(p.prep, e.launch+1, fence)
	}
	return e.launched(p, st, fence, capturing, err)
}

// launched is enqueue's bookkeeping after the backend's launch call
// returned err: the counters, the last launch's stream and layout, what a
// capture changes, the stream to wait for.
func (e *Executor) launched(p *Plan, st device.Stream, fence, capturing bool, err error) error {
	if err != nil {
		ee := &Error{Rank: e.cfg.Rank, State: Launch, Err: err}
		if !errors.Is(err, device.ErrClosed) {
			e.setFailed(ee)
		}
		return ee
	}
	e.launch++
	if fence {
		e.fences++
	}
	if !capturing {
		e.lastEager = e.launch
	}
	if p.l2 != nil {
		if capturing {
			e.freeze(p)
		} else {
			p.l2.last = e.launch
		}
	}
	if e.lastSt != st {
		e.lastSt = st
		e.lastCL, _ = st.(device.CaptureLauncher)
		e.tracked = false
	}
	e.lastSig = p.sig
	if capturing {
		if !e.captured {
			e.capSig = p.sig
		} else if p.sig != e.capSig {
			e.capMixed = true
		}
		p.l3.captured, e.captured = true, true
		if b := p.l3.base; b != nil {
			b.captured = true // its replays use the base's backend state
		}
		e.lastSig = scratchSig{}
	} else if e.capReset(p.sig) {
		e.lastSig = scratchSig{}
	}
	e.trackStream(st)
	return nil
}

// residentStream is the stream through the persistent executor that
// launches on the caller's stream st (device.Resident.Stream), the last
// one remembered.
func (e *Executor) residentStream(st device.Stream) (device.Stream, error) {
	if st == e.resUser {
		return e.resSt, nil
	}
	rs, err := e.res.Stream(st)
	if err != nil {
		return nil, err
	}
	e.resUser, e.resSt = st, rs
	return rs, nil
}

// startResident starts the persistent executor (Config.Executor) once L0
// exists, when the backend has one; without one the executor launches.
func (e *Executor) startResident() error {
	if e.cfg.Executor != ModePersistent || e.res != nil {
		return nil
	}
	rb, ok := e.dev.(device.ResidentBackend)
	if !ok {
		if log.On(log.Info, log.Executor) {
			log.Infof(log.Executor, "rank %d: backend %s has no persistent executor: kernel launches", e.cfg.Rank, e.dev.Name())
		}
		return nil
	}
	cfg := e.cfg.Resident
	cfg.Rank, cfg.Abort, cfg.Timeout = e.cfg.Rank, e.l0.control, e.cfg.Timeout
	r, err := rb.NewResident(cfg)
	if err != nil {
		return err
	}
	e.res, e.persistent = r, true
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: persistent executor: %d threadblocks of %d threads, idle exit after %v", e.cfg.Rank, cfg.Blocks, cfg.Threads, cfg.Idle)
	}
	return nil
}

func (e *Executor) trackStream(st device.Stream) {
	e.tracked = st == e.lastSt
	for _, s := range e.streams {
		if s == st {
			return
		}
	}
	e.streams = append(e.streams, st)
}

// freeze takes the L3 entry of p, a plan reaching peers' buffers whose
// launch a CUDA graph captured, out of its map: the graph's replays read
// the peers' buffers it was bound to, so pushes of later launches no longer
// repoint it (peers.go), a later call prepares an entry of its own, and the
// prepared launch is released at Close.
func (e *Executor) freeze(p *Plan) {
	l3 := p.l3
	if l3.frozenAt != 0 {
		return
	}
	e.peers.mu.Lock()
	l3.frozenAt = e.launch
	e.peers.mu.Unlock()
	if p.l2.l3[l3.key] == l3 {
		delete(p.l2.l3, l3.key)
		e.retained = append(e.retained, l3.prep)
	}
	if e.lastL3.ent == l3 {
		e.lastL3.ent = nil
	}
}
