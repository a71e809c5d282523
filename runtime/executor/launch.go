package executor

import (
	"errors"

	"github.com/theseus-ccl/theseus/runtime/device"
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
	return first
}

// plain reports whether a launch of p on st takes enqueue's plain path:
// on the stream of the last launch, already tracked, a device.CaptureLauncher,
// and with the scratch layout of every launch captured into a CUDA graph so
// far, if any. Such a launch changes nothing but the launch counter, the
// fence count and the last scratch layout unless the stream turns out to be
// capturing.
func (e *Executor) plain(p *Plan, st device.Stream) bool {
	return st == e.lastSt && e.tracked && e.lastCL != nil && (e.capSig.l1 == nil || !e.capMixed && p.sig == e.capSig)
}

// enqueue launches p on st: the Launch state of a walk, and all of Launch.
// Errors: the stream's (sticky unless the stream was closed: the peers have
// launched this request, and this rank's launch counter would fall behind
// theirs), wrapped in an *Error of state Launch.
//
// Fence when this launch lays scratch out differently from the previous
// one, and always for LL schedules: an LL sender gets no back-pressure, so
// without the fence a rank that only sends (a rooted collective's root)
// could run two launches ahead and overwrite the scratch half a slow
// reader still polls (docs/design/ir.md §5.4; the verifier models LL
// launches with this fence). A schedule the verifier found racing between
// iterations (TS0206, optable.Table.FenceLaunches) is fenced at every
// launch.
//
// A launch captured into a CUDA graph is always fenced: its replays may
// follow any eager launch. And the launch after it is fenced too (lastSig
// reset): the device may have run replays in between. So is the launch
// after an eager launch whose layout differs from a captured one's: the
// application may replay a graph between any two launches.
func (e *Executor) enqueue(p *Plan, st device.Stream) error {
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
		e.lastSig = scratchSig{}
	} else if e.capSig.l1 != nil && (e.capMixed || p.sig != e.capSig) { // (capSig.l1: something was captured)
		e.lastSig = scratchSig{}
	}
	e.trackStream(st)
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
