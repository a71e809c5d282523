package abi

import (
	"time"

	"github.com/theseus-ccl/theseus/runtime/log"
)

// Finalize is ncclCommFinalize: blocking communicators wait for their
// in-flight work; non-blocking ones return InProgress and finish in the
// background. Errors: InvalidUsage when already finalized, or while an open
// group holds a call for the communicator.
func (l *Library) Finalize(h uintptr) Result {
	const api = "ncclCommFinalize"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	if l.inOpenGroup(c) {
		return l.Fail(InvalidUsage, "%s: comm %#x has calls in a group that has not ended; call ncclGroupEnd first", api, h)
	}
	if st := c.getState(); st == stFinalized {
		return l.Fail(InvalidUsage, "%s: comm %#x is already finalized", api, h)
	}
	job := func() *Error {
		<-c.ready
		eng, sh := c.engine()
		var first *Error
		if eng != nil {
			if err := eng.Finalize(c.ctx); err != nil {
				first = l.classify(api, err)
			}
		}
		if sh != 0 {
			if r := l.FB.CommFinalize(sh); r != Success && r != InProgress && first == nil {
				first = errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError())
			}
		}
		c.mu.Lock()
		if c.state() == stReady {
			c.setState(stFinalized)
		}
		c.mu.Unlock()
		return first
	}
	if !c.Blocking {
		c.enqueue(func() *Error {
			var e *Error
			l.Eng.OnDevice(c.Dev, func() { e = job() })
			return e
		})
		return InProgress
	}
	c.drain()
	return l.fail(job())
}

func (l *Library) timeout() time.Duration {
	if l.Timeout > 0 {
		return l.Timeout
	}
	return 2 * time.Minute
}

// Destroy is ncclCommDestroy: waits (bounded) for queued work, releases the
// engine communicator and the shadow, and leaves the handle a tombstone.
// Errors: InvalidUsage while an open group holds a call for the
// communicator (its ncclGroupEnd would run it on a destroyed one, and the
// peers would wait for it).
func (l *Library) Destroy(h uintptr) Result {
	const api = "ncclCommDestroy"
	if h == 0 {
		return Success // NCCL 2.25: destroying a NULL comm is a no-op
	}
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	if l.inOpenGroup(c) {
		return l.Fail(InvalidUsage, "%s: comm %#x has calls in a group that has not ended; call ncclGroupEnd first", api, h)
	}
	done := make(chan struct{})
	go func() { c.drain(); close(done) }()
	select {
	case <-done:
	case <-time.After(l.timeout()):
		log.Warnf(log.Init, "%s: comm %#x: queued work did not end within %v; aborting it", api, h, l.timeout())
		return l.abortComm(c)
	}
	c.mu.Lock()
	eng, sh := c.engine()
	st := c.state()
	if st == stAborted || st == stDestroyed {
		// Aborted (or destroyed) by another thread since the lookup above:
		// that call released everything.
		c.mu.Unlock()
		return Success
	}
	c.setState(stDestroyed)
	c.mu.Unlock()
	c.cancel()
	var first *Error
	if eng != nil {
		if err := eng.Destroy(); err != nil {
			first = l.classify(api, err)
		}
	}
	if sh != 0 {
		if r := l.FB.CommDestroy(sh); r != Success && first == nil {
			first = errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError())
		}
	}
	if log.On(log.Info, log.Init) {
		s := c.stats()
		miss := ""
		if rp, ok := eng.(Replayer); ok && eng != nil && l.Replay {
			if m := rp.ReplayMisses(); m != "" {
				miss = "; through Go instead of C: " + m
			}
		}
		log.Infof(log.Init, "comm %#x rank %d nranks %d (%s) destroyed: %d requests served natively (%d of them launched from C), %d by the fallback NCCL, %d rejected%s",
			h, c.Rank(), c.NRanks(), st, s.Native, s.FromC, s.Fallback, s.Rejected, miss)
	}
	return l.fail(first)
}

// Abort is ncclCommAbort: in-flight and waiting work stops (the engine's
// waits return ErrAborted, a pending init is cancelled), the shadow is
// aborted, and the handle becomes a tombstone. It does not wait for peers.
func (l *Library) Abort(h uintptr) Result {
	if h == 0 {
		return Success // NCCL 2.25: aborting a NULL comm is a no-op
	}
	c, e := l.find(h, "ncclCommAbort") // no disarm: the engine's Abort stops the record after it has stopped the kernels
	if e != nil {
		return l.fail(e)
	}
	return l.abortComm(c)
}

func (l *Library) abortComm(c *Comm) Result {
	c.mu.Lock()
	if st := c.state(); st == stAborted || st == stDestroyed {
		c.mu.Unlock()
		return Success
	}
	eng, sh := c.engine()
	c.setState(stAborted)
	c.mu.Unlock()
	c.cancel()
	if eng != nil {
		eng.Abort()
	}
	if sh != 0 {
		l.FB.CommAbort(sh)
	}
	c.finishInit(nil, 0, errorf(InvalidUsage, "aborted"))
	log.Infof(log.Init, "comm %#x rank %d nranks %d aborted", c.Handle, c.Rank(), c.NRanks())
	return Success
}

// Revoke is ncclCommRevoke (NCCL 2.29 semantics): the communicator's
// pending work stops, later data calls fail with InvalidUsage, and it stays
// a parent for ncclCommSplit and ncclCommShrink until ncclCommFinalize,
// ncclCommDestroy or ncclCommAbort releases it. Errors: InvalidArgument for
// revokeFlags other than NCCL_REVOKE_DEFAULT (0) and for a released
// communicator; InvalidUsage while an open group holds a call for it.
func (l *Library) Revoke(h uintptr, flags int) Result {
	const api = "ncclCommRevoke"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	if flags != 0 {
		return l.Fail(InvalidArgument, "%s: revokeFlags %#x: only NCCL_REVOKE_DEFAULT (0) exists", api, flags)
	}
	if l.inOpenGroup(c) {
		return l.Fail(InvalidUsage, "%s: comm %#x has calls in a group that has not ended; call ncclGroupEnd first", api, h)
	}
	<-c.ready
	if eng, _ := c.engine(); eng != nil {
		eng.Revoke()
	}
	log.Infof(log.Init, "comm %#x rank %d nranks %d revoked", c.Handle, c.Rank(), c.NRanks())
	return Success
}
