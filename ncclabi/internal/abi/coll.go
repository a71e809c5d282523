package abi

import (
	"errors"
	"fmt"

	"github.com/theseus-ccl/theseus/runtime/log"
)

// needsFallback reports whether Theseus cannot serve op by its kind: ops
// made by ncclRedOpCreatePreMulSum. (ncclSend, ncclRecv and ncclAlltoAllv
// run on the point-to-point engine: runP2P.)
func needsFallback(op *Op) (bool, string) {
	switch {
	case op.Coll.Reduces() && !op.RedOp.Builtin():
		return true, fmt.Sprintf("reduction op %d (ncclRedOpCreatePreMulSum) runs on the fallback NCCL", int32(op.RedOp))
	}
	return false, ""
}

// Coll is every data call (collectives, Send, Recv, AlltoAllv): argument
// checks, the current-device check, then run now, defer to the group end,
// or queue behind a non-blocking communicator's pending work.
func (l *Library) Coll(t Thread, h uintptr, op *Op) Result {
	api := op.Coll.api()
	c, e := l.usable(h, api)
	if e != nil {
		return l.failInGroup(t, e) // a NULL, unknown or destroyed comm abandons the group too (NCCL)
	}
	pending := c.getState() == stPending
	if pending && c.Rank() < 0 { // a split or shrink child that does not exist yet
		if *t.Depth > 0 || c.Blocking {
			return l.failInGroup(t, errorf(InvalidUsage, "%s: comm %#x is still being created (a collective cannot share a group with the split that makes its communicator)", api, h))
		}
		o := *op
		c.enqueue(func() *Error {
			if e := l.checkOp(c, &o, api); e != nil {
				return e
			}
			var e *Error
			l.Eng.OnDevice(c.Dev, func() { e, _ = l.runOps([]groupOp{{c, &o}}) })
			return e
		})
		return InProgress
	}
	if e := l.checkOp(c, op, api); e != nil {
		return l.failInGroup(t, e)
	}
	if *t.Depth > 0 {
		g := l.group(t)
		if e := g.setMode(c.Blocking, api); e != nil {
			g.recordErr(e)
			return l.fail(e)
		}
		g.calls = append(g.calls, groupCall{c: c, op: *op})
		return Success
	}
	if !c.Blocking && (pending || c.pending.Load() > 0) {
		o := *op
		c.enqueue(func() *Error {
			var e *Error
			l.Eng.OnDevice(c.Dev, func() { e, _ = l.runOps([]groupOp{{c, &o}}) })
			return e
		})
		return InProgress
	}
	if pending {
		return l.Fail(InvalidUsage, "%s: comm %#x is not initialised yet (the ncclGroupEnd of its init has not run)", api, h)
	}
	if need, _ := needsFallback(op); !need { // the common case: one call a schedule serves
		if e, done := l.runNative(c, op); done {
			if e == nil && !op.Coll.P2P() && op.Counts == nil && !log.On(log.Info, log.Coll) {
				l.armReplay(c, op)
			}
			return l.fail(e)
		}
	}
	// The fallback. A copy: op itself must not escape (runOps keeps its
	// arguments in closures), or the caller's Op of every call would be
	// heap-allocated.
	o := *op
	e, _ = l.runOps([]groupOp{{c, &o}})
	return l.fail(e)
}

// armReplay lets the library's C side launch the repeats of op, which
// the engine has just served outside a group, without entering Go
// (Replayer): op.Replay is the record's address when the engine armed it.
// Not for calls whose lines the INFO COLL log shows (a repeat made from C
// logs nothing) or with a counts matrix (not in the key).
func (l *Library) armReplay(c *Comm, op *Op) {
	if eng, _ := c.engine(); eng != nil && l.Replay {
		if rp, ok := eng.(Replayer); ok {
			o := *op // (a copy: op itself would escape through the interface, and every data call's Op with it)
			op.Replay = rp.ArmReplay(&o, op.ReplayKey())
		}
	}
}

// runNative runs one data call through the engine (an ungrouped ncclSend,
// ncclRecv or ncclAlltoAllv as a point-to-point group of one: runP2P).
// done is false when no schedule serves it (the caller tries the
// fallback).
func (l *Library) runNative(c *Comm, op *Op) (e *Error, done bool) {
	if op.Coll.P2P() || op.Coll == CollAlltoAllv {
		return l.runP2P(c, []Op{*op})
	}
	eng, _ := c.engine()
	if eng == nil {
		return errorf(InvalidUsage, "%s: comm %#x is not initialised", op.Coll.api(), c.Handle), true
	}
	n := c.opCount.Add(1)
	served, err := eng.Run(*op)
	switch {
	case err == nil:
		op.Served = served
		c.nNative.Add(1)
		if log.On(log.Info, log.Coll) {
			l.logColl(c, op, n)
		}
		return nil, true
	case errors.Is(err, ErrNoSchedule):
		op.NoNative = err.Error()
		if log.On(log.Info, log.Coll) {
			log.Infof(log.Coll, "nccl%s: opCount %d comm %#x: %v; trying the fallback NCCL", op.Coll, n, c.Handle, err)
		}
		return nil, false
	}
	c.nReject.Add(1)
	e = l.classify(op.Coll.api(), err)
	c.setAsyncErrIfFatal(e)
	return e, true
}

// checkOp is the argument and current-device check of a data call.
func (l *Library) checkOp(c *Comm, op *Op, api string) *Error {
	if e := op.Check(c.Rank(), c.NRanks(), c.isUserOp); e != nil {
		c.nReject.Add(1)
		return e
	}
	if e := l.checkDevice(c, api); e != nil {
		c.nReject.Add(1)
		return e
	}
	return nil
}

// setAsyncErrIfFatal keeps errors that break the communicator (a lost peer,
// a timeout, an internal error) for GetAsyncError; argument and usage
// errors only fail their own call.
func (c *Comm) setAsyncErrIfFatal(e *Error) {
	switch e.Result {
	case SystemError, InternalError, RemoteError, UnhandledCudaError:
		c.setAsyncErr(e)
	}
}

// runP2P runs one communicator's group of ncclSend/ncclRecv calls, or one
// ncclAlltoAllv (ops of one element), on the engine's point-to-point engine
// (P2PEngine). done is false when the engine has none (the caller tries the
// fallback). Every call counts as one native call.
func (l *Library) runP2P(c *Comm, ops []Op) (e *Error, done bool) {
	eng, _ := c.engine()
	if eng == nil {
		return errorf(InvalidUsage, "%s: comm %#x is not initialised", ops[0].Coll.api(), c.Handle), true
	}
	pe, ok := eng.(P2PEngine)
	if !ok {
		for i := range ops {
			ops[i].NoNative = "this engine has no point-to-point engine"
		}
		return nil, false
	}
	n := c.opCount.Add(uint64(len(ops))) - uint64(len(ops))
	served, err := pe.RunP2P(ops)
	switch {
	case err == nil:
		c.nNative.Add(uint64(len(ops)))
		if log.On(log.Info, log.Coll) {
			for i := range ops {
				ops[i].Served = served
				l.logColl(c, &ops[i], n+uint64(i)+1)
			}
		}
		return nil, true
	case errors.Is(err, ErrNoSchedule):
		for i := range ops {
			ops[i].NoNative = err.Error()
		}
		return nil, false
	}
	c.nReject.Add(uint64(len(ops)))
	e = l.classify(ops[0].Coll.api(), err)
	c.setAsyncErrIfFatal(e)
	return e, true
}

func (l *Library) logColl(c *Comm, op *Op, n uint64) {
	served := op.Served.String()
	if served == "" {
		served = "a Theseus schedule"
	}
	if op.Coll.P2P() {
		log.Infof(log.Coll, "nccl%s: opCount %d buff %#x count %d datatype %s peer %d comm %#x [nranks=%d] rank %d stream %#x served by %s",
			op.Coll, n, op.Send|op.Recv, op.Count, op.DataType, op.Root, c.Handle, c.NRanks(), c.Rank(), op.Stream, served)
		return
	}
	log.Infof(log.Coll, "nccl%s: opCount %d sendbuff %#x recvbuff %#x count %d datatype %s op %s root %d comm %#x [nranks=%d] rank %d stream %#x served by %s", op.Coll, n, op.Send, op.Recv, op.Count, op.DataType, op.RedOp, op.Root, c.Handle, c.NRanks(), c.Rank(), op.Stream, served)
}
