package abi

import "github.com/theseus-ccl/theseus/runtime/log"

// GetAsyncError is ncclCommGetAsyncError. It returns (the communicator's
// state, the call's result). A non-blocking communicator with queued work
// is InProgress; otherwise the first failure of its init, its queued work,
// the engine (lost peer, wait timeout) or the shadow; else Success. A
// blocking communicator never reports InProgress (PyTorch's watchdog caches
// anything else as fatal).
func (l *Library) GetAsyncError(h uintptr) (Result, Result) {
	const api = "ncclCommGetAsyncError"
	c, e := l.find(h, api) // no disarm: a client polls it from another thread
	if e != nil {
		return Success, l.fail(e)
	}
	if !c.Blocking && c.pending.Load() > 0 {
		return InProgress, Success
	}
	c.mu.Lock()
	ie, ae := c.initErr, c.asyncErr
	c.mu.Unlock()
	eng, sh := c.engine()
	if ie != nil {
		return ie.Result, Success
	}
	if ae != nil {
		return ae.Result, Success
	}
	if eng != nil {
		if err := eng.AsyncError(); err != nil {
			ce := l.classify(api, err)
			c.setAsyncErr(ce)
			log.Warnf(log.NCCL, "comm %#x: asynchronous error: %s", h, ce.Msg)
			return ce.Result, Success
		}
	}
	if sh != 0 {
		if st, r := l.FB.CommGetAsyncError(sh); r == Success && st != Success && st != InProgress {
			ce := errorf(st, "fallback NCCL: %s", l.FB.LastError())
			c.setAsyncErr(ce)
			return st, Success
		}
	}
	return Success, Success
}

// Count, CuDevice and UserRank are ncclCommCount, ncclCommCuDevice and
// ncclCommUserRank. A split or shrink child whose creation has not ended
// yet has no rank: InvalidUsage (poll ncclCommGetAsyncError first).
func (l *Library) Count(h uintptr) (int, Result) {
	c, e := l.find(h, "ncclCommCount")
	if e != nil {
		return 0, l.fail(e)
	}
	if c.NRanks() < 0 {
		return 0, l.Fail(InvalidUsage, "ncclCommCount: comm %#x is still being created", h)
	}
	return c.NRanks(), Success
}

func (l *Library) CuDevice(h uintptr) (int, Result) {
	c, e := l.find(h, "ncclCommCuDevice")
	if e != nil {
		return 0, l.fail(e)
	}
	return c.Dev, Success
}

func (l *Library) UserRank(h uintptr) (int, Result) {
	c, e := l.find(h, "ncclCommUserRank")
	if e != nil {
		return 0, l.fail(e)
	}
	if c.Rank() < 0 {
		return 0, l.Fail(InvalidUsage, "ncclCommUserRank: comm %#x is still being created", h)
	}
	return c.Rank(), Success
}

// CommStats is theseusCommStats.
func (l *Library) CommStats(h uintptr) (Stats, Result) {
	c, e := l.lookup(h, "theseusCommStats")
	if e != nil {
		return Stats{}, l.fail(e)
	}
	return c.stats(), Success
}

// DisarmReplays stops every communicator's replay record (the next call
// through Go arms it again if it may): for a change that arming checks,
// such as the INFO COLL log being turned on (ncclResetDebugInit).
func (l *Library) DisarmReplays() {
	l.mu.RLock()
	cs := make([]*Comm, 0, len(l.comms))
	for _, c := range l.comms {
		cs = append(cs, c)
	}
	l.mu.RUnlock()
	for _, c := range cs {
		c.disarmReplay()
	}
}

// LaunchTime is theseusCommLaunchTime: the launches of the communicator's
// calls that were timed and the nanoseconds spent inside cuLaunchKernel
// for them (LaunchTimer; zeros when the engine does not time launches).
func (l *Library) LaunchTime(h uintptr) (launches, ns int64, r Result) {
	c, e := l.lookup(h, "theseusCommLaunchTime")
	if e != nil {
		return 0, 0, l.fail(e)
	}
	if eng, _ := c.engine(); eng != nil {
		if lt, ok := eng.(LaunchTimer); ok {
			launches, ns = lt.LaunchTime()
		}
	}
	return launches, ns, Success
}

// StreamSync is theseusStreamSynchronize.
func (l *Library) StreamSync(h, stream uintptr) Result {
	const api = "theseusStreamSynchronize"
	// No disarm: waiting for the stream neither changes nor reads what
	// calls made from C change (a loop that synchronises after every call
	// keeps them; a launch failure it finds poisons the record).
	c, e := l.usableFind(h, api)
	if e != nil {
		return l.fail(e)
	}
	c.drain()
	eng, _ := c.engine()
	if eng == nil {
		return l.Fail(InvalidUsage, "%s: comm %#x is not initialised", api, h)
	}
	if err := eng.StreamSync(stream); err != nil {
		return l.fail(l.classify(api, err))
	}
	return Success
}
