package abi

import (
	"context"
	"sync"
	"sync/atomic"
)

type commState int32

const (
	stPending   commState = iota // created; init deferred to a group end or running asynchronously
	stReady                      // usable
	stFailed                     // init failed: only GetAsyncError, Destroy and Abort are useful
	stFinalized                  // ncclCommFinalize done: only Destroy and queries
	stDestroyed                  // ncclCommDestroy: handle is a tombstone
	stAborted                    // ncclCommAbort: handle is a tombstone
)

var stateNames = [...]string{"pending", "ready", "failed", "finalized", "destroyed", "aborted"}

func (s commState) String() string { return stateNames[s] }

// Comm is the library's side of one ncclComm_t. The C handle (Handle) is a
// small C allocation that is never freed, so that a destroyed handle stays
// a detectable tombstone (use after destroy is an error, never a crash).
type Comm struct {
	lib      *Library
	Handle   uintptr
	Serial   uint64
	Blocking bool
	Config   Config
	Dev      int

	// rank and nranks are -1 until a split or shrink child exists.
	rank, nranks atomic.Int32

	ctx    context.Context
	cancel context.CancelFunc

	mu sync.Mutex
	// st is the commState: written under mu, read without it (the data
	// path reads it on every call).
	st atomic.Int32
	// es is set once init succeeds: the engine communicator and the shadow.
	es       atomic.Pointer[engState]
	initErr  *Error
	asyncErr *Error
	tail     chan struct{} // closed when the last queued asynchronous job ends
	userOps  map[RedOp]DataType
	regs     map[uintptr]*registration // ncclCommRegister handles (mu)
	ready    chan struct{}             // closed when init ends (either way)

	pending atomic.Int32 // queued asynchronous jobs (non-blocking communicators)
	opCount atomic.Uint64
	nNative atomic.Uint64
	nFallbk atomic.Uint64
	nReject atomic.Uint64
}

// Rank is the communicator's rank (-1 while a split child is pending).
func (c *Comm) Rank() int { return int(c.rank.Load()) }

// NRanks is the communicator's size (-1 while a split child is pending).
func (c *Comm) NRanks() int { return int(c.nranks.Load()) }

// engState is what init made; immutable once published.
type engState struct {
	eng    EngineComm
	shadow uintptr // the fallback NCCL's communicator, 0 if none
}

func (c *Comm) state() commState { return commState(c.st.Load()) }

// setState changes the state; the caller holds c.mu.
func (c *Comm) setState(s commState) { c.st.Store(int32(s)) }

// Stats are a communicator's request counters.
type Stats struct {
	Native, Fallback, Rejected uint64
	// FromC is how many of the Native requests were launched from C
	// (Replayer; docs/ncclabi.md, "Launches from C").
	FromC uint64
}

func (c *Comm) stats() Stats {
	s := Stats{Native: c.nNative.Load(), Fallback: c.nFallbk.Load(), Rejected: c.nReject.Load()}
	if eng, _ := c.engine(); eng != nil {
		if rp, ok := eng.(Replayer); ok {
			s.FromC = rp.SyncReplay()
			s.Native += s.FromC
		}
	}
	return s
}

// disarmReplay stops the engine's replay record, if any, from launching
// calls from C: before anything that such calls would make wrong (every
// call on the communicator but the queries that read no counters).
func (c *Comm) disarmReplay() {
	if eng, _ := c.engine(); eng != nil {
		if rp, ok := eng.(Replayer); ok {
			rp.DisarmReplay()
		}
	}
}

func (c *Comm) getState() commState { return c.state() }

// engine returns the engine communicator and the shadow, or nil before
// init has completed.
func (c *Comm) engine() (EngineComm, uintptr) {
	if p := c.es.Load(); p != nil {
		return p.eng, p.shadow
	}
	return nil, 0
}

func (c *Comm) setAsyncErr(e *Error) {
	c.mu.Lock()
	if c.asyncErr == nil {
		c.asyncErr = e
	}
	c.mu.Unlock()
}

// finishInit records the outcome of init (engine communicator and shadow,
// or the error) and wakes waiters.
func (c *Comm) finishInit(eng EngineComm, shadow uintptr, e *Error) {
	c.mu.Lock()
	if c.state() == stPending {
		if e != nil {
			c.initErr = e
			c.setState(stFailed)
		} else {
			c.es.Store(&engState{eng, shadow})
			c.setState(stReady)
			if eng != nil {
				c.rank.Store(int32(eng.Rank()))
				c.nranks.Store(int32(eng.NRanks()))
			}
		}
	} else if eng != nil { // aborted or destroyed meanwhile: release what init made
		c.mu.Unlock()
		eng.Abort()
		if shadow != 0 && c.lib.FB != nil {
			c.lib.FB.CommAbort(shadow)
		}
		c.mu.Lock()
	}
	select {
	case <-c.ready:
	default:
		close(c.ready)
	}
	c.mu.Unlock()
}

// enqueue runs job after every job queued before it, asynchronously, and
// keeps the communicator "in progress" (ncclCommGetAsyncError returns
// ncclInProgress) until it ends. A job's error becomes the async error.
func (c *Comm) enqueue(job func() *Error) {
	c.mu.Lock()
	prev := c.tail
	done := make(chan struct{})
	c.tail = done
	c.pending.Add(1)
	c.mu.Unlock()
	go func() {
		if prev != nil {
			<-prev
		}
		if e := job(); e != nil {
			c.setAsyncErr(e)
		}
		c.pending.Add(-1)
		close(done)
	}()
}

// drain waits for every queued job.
func (c *Comm) drain() {
	c.mu.Lock()
	t := c.tail
	c.mu.Unlock()
	if t != nil {
		<-t
	}
}

func (c *Comm) isUserOp(op RedOp) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.userOps[op]
	return ok
}
