package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// Execute walks the state machine for r with schedule s, enqueues the
// launch on st, and returns the plan of r's call shape (Plan): the walk is
// the one path that builds plans, and its Launch state launches the plan
// as Launch would. It returns when the launch is enqueued (not finished).
// Errors: *Error, wrapping ErrCapture, ErrClosed, ErrMismatch,
// ErrScratchMismatch, a bootstrap error naming peers, or a backend error.
func (e *Executor) Execute(ctx context.Context, r *Request, s *Schedule, st device.Stream) (*Plan, error) {
	w := walk{r: r, s: s, st: st}
	e.stats.Walks++
	state := Start
	var t0 int64
	if e.spans != nil {
		t0 = time.Now().UnixNano()
	}
	for state != Done {
		var ev Event
		switch state {
		case Start:
			ev = e.start(&w)
		case L0Lookup:
			ev = e.l0Lookup(&w)
		case L0Setup:
			ev = e.l0Setup(ctx, &w)
		case L1Lookup:
			ev = e.l1Lookup(&w)
		case L1Cold, L1Migrate:
			ev = e.l1Materialise(ctx, &w, state == L1Migrate)
		case L1Switch:
			ev = e.l1Switch(&w)
		case L2Lookup:
			ev = e.l2Lookup(&w)
		case L2Setup:
			ev = e.l2Setup(ctx, &w)
		case L3Lookup:
			ev = e.l3Lookup(&w)
		case L3Setup:
			ev = e.l3Setup(ctx, &w)
		case Grow:
			ev = e.grow(ctx, &w)
		case Launch:
			ev = EvOK
			if err := e.enqueue(w.plan, w.st); err != nil {
				w.err, ev = err, EvError
			}
		case Fail:
			e.stats.Failures++
			return nil, w.err
		}
		if e.spans != nil {
			t1 := time.Now().UnixNano()
			e.spans(state, t0, t1)
			t0 = t1
		}
		to := next(state, ev)
		if to == numStates {
			err := &Error{Rank: e.cfg.Rank, State: state, Err: fmt.Errorf("internal: no transition on %v", ev)}
			e.setFailed(err)
			return nil, err
		}
		if e.trace != nil {
			e.trace(Transition{From: state, Event: ev, To: to})
		}
		e.stats.StateVisits[to]++
		e.stats.TransitionsTaken++
		if ev == EvCapture {
			e.stats.Refused++
			w.err = &Error{Rank: e.cfg.Rank, State: state, Err: ErrCapture}
		}
		state = to
	}
	return w.plan, nil
}

// walk is one Execute's state.
type walk struct {
	r     *Request
	s     *Schedule
	st    device.Stream
	shift int
	l1    *l1Entry
	l2    *l2Entry
	l3map map[l3Key]*l3Entry
	l2key l2Key // the identity of the request's allocations (with l2)
	// push are the request's buffers the peers reach, as each must see
	// them (with l2).
	push  []pushRef
	l3key l3Key
	l3    *l3Entry
	plan  *Plan // l3's plan
	need  int64 // scratch bytes the request needs (Grow)
	err   error
}

func (e *Executor) fail(w *walk, state State, err error, sticky bool, peers ...int) Event {
	ee := &Error{Rank: e.cfg.Rank, State: state, Peers: peers, Err: err}
	w.err = ee
	if sticky {
		e.setFailed(ee)
	}
	return EvError
}

func (e *Executor) start(w *walk) Event {
	if err := e.Err(); err != nil {
		w.err = err
		return EvBroken
	}
	if w.s == nil || w.s.Bundle == nil || w.st == nil || w.r == nil {
		w.err = &Error{Rank: e.cfg.Rank, State: Start, Err: errors.New("nil request, schedule or stream")}
		return EvBroken
	}
	return EvOK
}
