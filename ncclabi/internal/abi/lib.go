// Package abi is the NCCL semantics of libtheseus_nccl.so, independent of
// cgo: communicator handles and their states, blocking and non-blocking
// communicators, groups (nesting, grouped init, collectives deferred to the
// group end), argument checks, ncclConfig_t decoding, error results and
// their logged reasons, and the fallback to a real NCCL on a shadow
// communicator. The runtime sits behind the small Engine interface and the
// real NCCL behind Fallback, so that the cgo layer (package main in
// ncclabi) only converts arguments.
//
// Semantics follow NCCL 2.25.1 (nccl.h and its documented behaviour) unless
// docs/ncclabi.md says otherwise.
//
// Files, by NCCL's concerns: lib.go (the Library, handle lookup, errors,
// memory, unique ids, the current-device check), init.go (init, grouped
// init, split, shrink), destroy.go (finalize, destroy, abort), query.go
// (async errors, the communicator queries, Theseus's extensions), coll.go
// (data calls), group.go (groups and running their calls), fallback.go
// (the real NCCL), register.go (buffer registration), redop.go
// (ncclRedOpCreatePreMulSum); comm.go, types.go, config.go, result.go and
// engine.go hold the communicator state, the ABI's types, ncclConfig_t,
// results and the Engine seam.
package abi

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/runtime/log"
)

// Library is the process-wide state behind the exported NCCL functions.
// Set the exported fields before the first call; they are not changed
// afterwards.
type Library struct {
	Eng Engine
	// FB is the fallback NCCL, nil when THESEUS_NCCL_LIB_PATH is unset or
	// could not be loaded (FBReason says why, for rejection messages).
	FB       Fallback
	FBReason string
	// SetLastError stores the text ncclGetLastError returns (C-owned
	// storage in the cgo layer). May be nil.
	SetLastError func(string)
	// Timeout bounds how long Destroy waits for a communicator's queued
	// asynchronous work (0: 2 minutes).
	Timeout time.Duration
	// Replay lets the C side of the library launch a repeated data call
	// without entering Go, when the engine supports it (Replayer;
	// THESEUS_REPLAY, on unless set to 0).
	Replay bool

	mu     sync.RWMutex
	comms  map[uintptr]*Comm
	serial atomic.Uint64

	gmu    sync.Mutex
	groups map[uintptr]*group
	// spare is a group a blocking ncclGroupEnd has finished with, for the
	// next group to reuse (its lists' storage: a repeated group allocates
	// nothing here); guarded by gmu.
	spare *group
}

// Thread identifies the calling OS thread for group state: Key is unique
// among live threads and Depth points at the thread's group depth (C
// thread-local storage in the cgo layer).
type Thread struct {
	Key   uintptr
	Depth *int32
}

func (l *Library) init() {
	l.mu.Lock()
	if l.comms == nil {
		l.comms = map[uintptr]*Comm{}
	}
	l.mu.Unlock()
	l.gmu.Lock()
	if l.groups == nil {
		l.groups = map[uintptr]*group{}
	}
	l.gmu.Unlock()
}

// fail logs e as a WARN line (subsystem NCCL), stores it for
// ncclGetLastError and returns its result.
func (l *Library) fail(e *Error) Result {
	if e == nil {
		return Success
	}
	log.Warnf(log.NCCL, "%s", e.Msg)
	if l.SetLastError != nil {
		l.SetLastError(e.Msg)
	}
	return e.Result
}

// Reject is the result of a call Theseus does not implement: InvalidUsage
// with the reason logged.
func (l *Library) Reject(api, reason string) Result {
	return l.fail(errorf(InvalidUsage, "%s: not supported by Theseus: %s", api, reason))
}

// Fail logs and records an error found by the cgo layer (a NULL output
// pointer, a bad config) and returns its result.
func (l *Library) Fail(r Result, format string, args ...any) Result {
	return l.fail(errorf(r, format, args...))
}

func (l *Library) classify(api string, err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return &Error{Result: e.Result, Msg: api + ": " + e.Msg, Err: err}
	}
	if errors.Is(err, ErrUnsupported) {
		return &Error{Result: InvalidUsage, Msg: api + ": " + err.Error(), Err: err}
	}
	r := InternalError
	if l.Eng != nil {
		r = l.Eng.Classify(err)
	}
	if r == Success || r == InProgress {
		r = InternalError
	}
	// The runtime's messages end in their own code ("… [ncclInternalError]"),
	// which need not be the result this call returns: drop it, so the WARN
	// line and ncclGetLastError never name a code the caller did not get.
	msg := err.Error()
	if i := strings.LastIndex(msg, " [nccl"); i >= 0 && strings.HasSuffix(msg, "]") {
		msg = msg[:i]
	}
	return &Error{Result: r, Msg: api + ": " + msg, Err: err}
}

// find finds a live communicator. NULL is InvalidArgument (NCCL's
// CommCheck); a destroyed or aborted handle is InvalidArgument with "use
// after ncclCommDestroy"; an unknown address is InvalidArgument.
func (l *Library) find(h uintptr, api string) (*Comm, *Error) {
	if h == 0 {
		return nil, errorf(InvalidArgument, "%s: comm is NULL", api)
	}
	l.mu.RLock()
	c := l.comms[h]
	l.mu.RUnlock()
	if c == nil {
		return nil, errorf(InvalidArgument, "%s: comm %#x is not a communicator of this library", api, h)
	}
	switch st := c.getState(); st {
	case stDestroyed:
		return nil, errorf(InvalidArgument, "%s: comm %#x used after ncclCommDestroy", api, h)
	case stAborted:
		return nil, errorf(InvalidArgument, "%s: comm %#x used after ncclCommAbort", api, h)
	}
	return c, nil
}

// lookup is find, and stops calls made from C with the communicator's
// replay record (disarmReplay) before the caller acts on it.
func (l *Library) lookup(h uintptr, api string) (*Comm, *Error) {
	c, e := l.find(h, api)
	if c != nil {
		c.disarmReplay()
	}
	return c, e
}

// usable is lookup plus the states in which data calls are allowed.
func (l *Library) usable(h uintptr, api string) (*Comm, *Error) {
	c, e := l.lookup(h, api)
	if e != nil {
		return nil, e
	}
	return l.usableState(c, h, api)
}

// usableFind is usable without stopping the replay record (find): for
// calls that neither change nor read what calls made from C change.
func (l *Library) usableFind(h uintptr, api string) (*Comm, *Error) {
	c, e := l.find(h, api)
	if e != nil {
		return nil, e
	}
	return l.usableState(c, h, api)
}

// usableState is usable's check of c's state.
func (l *Library) usableState(c *Comm, h uintptr, api string) (*Comm, *Error) {
	switch st := c.getState(); st {
	case stFailed:
		c.mu.Lock()
		ie := c.initErr
		c.mu.Unlock()
		return nil, errorf(InvalidUsage, "%s: comm %#x failed to initialise (%s)", api, h, ie.Msg)
	case stFinalized:
		return nil, errorf(InvalidUsage, "%s: comm %#x used after ncclCommFinalize", api, h)
	}
	return c, nil
}

func (l *Library) newComm(h uintptr, rank, nranks, dev int, cfg Config) *Comm {
	l.init()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Comm{lib: l, Handle: h, Serial: l.serial.Add(1), Blocking: cfg.Blocking != 0, Config: cfg,
		Dev: dev, ctx: ctx, cancel: cancel, ready: make(chan struct{}), userOps: map[RedOp]DataType{}}
	c.rank.Store(int32(rank))
	c.nranks.Store(int32(nranks))
	l.mu.Lock()
	l.comms[h] = c
	l.mu.Unlock()
	return c
}

// MemAlloc is ncclMemAlloc.
func (l *Library) MemAlloc(size uint64) (uintptr, Result) {
	if size == 0 {
		return 0, l.Fail(InvalidArgument, "ncclMemAlloc: size is 0")
	}
	p, err := l.Eng.MemAlloc(size)
	if err != nil {
		return 0, l.fail(l.classify("ncclMemAlloc", err))
	}
	if log.On(log.Info, log.Alloc) {
		log.Infof(log.Alloc, "ncclMemAlloc: %d bytes at %#x (%s backend)", size, p, l.Eng.Backend())
	}
	return p, Success
}

// MemFree is ncclMemFree (NULL is a no-op, as free).
func (l *Library) MemFree(p uintptr) Result {
	if p == 0 {
		return Success
	}
	if err := l.Eng.MemFree(p); err != nil {
		return l.fail(l.classify("ncclMemFree", err))
	}
	return Success
}

// GetUniqueID is ncclGetUniqueId.
func (l *Library) GetUniqueID() (UniqueID, Result) {
	id, err := l.Eng.NewUniqueID(l.FB != nil)
	if err != nil {
		return id, l.fail(l.classify("ncclGetUniqueId", err))
	}
	return id, Success
}

// currentDevice is the device an init call binds to. On cuda a thread with
// no current context binds to device 0, as cudaGetDevice reports.
func (l *Library) currentDevice(api string) (int, *Error) {
	d, err := l.Eng.CurrentDevice()
	if err != nil {
		return 0, l.classify(api, err)
	}
	if d < 0 {
		d = 0
	}
	return d, nil
}

// checkDevice rejects a data call made while another device than the
// communicator's is current (Job Layout Assumption 3 of the seed README).
// The host backend has no devices: every thread's current device is 0.
func (l *Library) checkDevice(c *Comm, api string) *Error {
	if l.Eng.Backend() == "host" {
		return nil
	}
	d, err := l.Eng.CurrentDevice()
	if err != nil {
		return l.classify(api, err)
	}
	if d != c.Dev {
		if d < 0 {
			return errorf(InvalidUsage, "%s: no CUDA context is current on this thread; comm %#x is bound to device %d (cudaSetDevice(%d) first)", api, c.Handle, c.Dev, c.Dev)
		}
		return errorf(InvalidUsage, "%s: the current CUDA device is %d but comm %#x is bound to device %d (one device per process, and it must stay current)", api, d, c.Handle, c.Dev)
	}
	return nil
}
