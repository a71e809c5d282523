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
package abi

import (
	"context"
	"errors"
	"fmt"
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

// InitRank is ncclCommInitRank / ncclCommInitRankConfig /
// ncclCommInitRankScalable for handle h (allocated by the caller). Outside
// a group a blocking init runs now; a non-blocking one runs in the
// background and returns InProgress; inside a group it is deferred to the
// group end (grouped init of several communicators from one thread).
// keep reports whether the handle was taken (false: the caller frees it
// and returns NULL).
func (l *Library) InitRank(t Thread, h uintptr, id UniqueID, nranks, rank int, cfg Config, api string) (keep bool, r Result) {
	if nranks < 1 {
		return false, l.Fail(InvalidArgument, "%s: nranks %d must be >= 1", api, nranks)
	}
	if rank < 0 || rank >= nranks {
		return false, l.Fail(InvalidArgument, "%s: rank %d out of range for %d ranks", api, rank, nranks)
	}
	dev, e := l.currentDevice(api)
	if e != nil {
		return false, l.fail(e)
	}
	c := l.newComm(h, rank, nranks, dev, cfg)
	p := InitParams{ID: id, Rank: rank, NRanks: nranks, Device: dev, Config: cfg}
	j := &initJob{c: c, api: api, engine: func(ctx context.Context) (EngineComm, error) { return l.Eng.Init(ctx, p) }, exch: true}
	j.shadow = func(id UniqueID) (uintptr, Result) { return l.FB.CommInitRank(id, nranks, rank, true) }
	return l.initResult(t, c, l.startInit(t, c, j))
}

// initResult decides whether the caller keeps a new handle: a blocking
// creation that failed outside a group gives no communicator (*comm is
// NULL, as NCCL does for a failed blocking init); a deferred or
// non-blocking one keeps its handle, whose error ncclCommGetAsyncError
// reports and which ncclCommDestroy or ncclCommAbort release.
func (l *Library) initResult(t Thread, c *Comm, r Result) (bool, Result) {
	if r == Success || r == InProgress || *t.Depth > 0 || !c.Blocking {
		return true, r
	}
	c.mu.Lock()
	c.setState(stDestroyed)
	c.mu.Unlock()
	c.cancel()
	l.mu.Lock()
	delete(l.comms, c.Handle)
	l.mu.Unlock()
	return false, r
}

// startInit runs, queues or defers an init job.
func (l *Library) startInit(t Thread, c *Comm, j *initJob) Result {
	if log.On(log.Info, log.Init) {
		log.Infof(log.Init, "%s: comm %#x rank %d nranks %d cudaDev %d blocking %d backend %s", j.api, c.Handle, c.Rank(), c.NRanks(), c.Dev, c.Config.Blocking, l.Eng.Backend())
	}
	if *t.Depth > 0 {
		g := l.group(t)
		if e := g.setMode(c.Blocking, j.api); e != nil {
			g.recordErr(e)
			c.finishInit(nil, 0, e)
			return l.fail(e)
		}
		g.inits = append(g.inits, j)
		return Success
	}
	if !c.Blocking {
		c.enqueue(func() *Error {
			var e *Error
			l.Eng.OnDevice(c.Dev, func() { e = l.runInits([]*initJob{j}) })
			return e
		})
		return InProgress
	}
	return l.fail(l.runInits([]*initJob{j}))
}

// initJob is one communicator creation: an engine part (init, split or
// shrink; concurrent with the other jobs of a group) and a fallback part
// (the shadow communicator; run on the group-end thread, inside one real
// ncclGroupStart/End when there are several).
type initJob struct {
	c      *Comm // nil for a split with NCCL_SPLIT_NOCOLOR (participates, makes nothing)
	api    string
	engine func(ctx context.Context) (EngineComm, error)
	// exch: after the engine part, agree on a shadow id over the new
	// communicator's bootstrap (InitRank); otherwise shadow needs no id.
	exch   bool
	shadow func(id UniqueID) (uintptr, Result) // nil: no shadow

	eng    EngineComm
	id     UniqueID
	haveID bool
	sh     uintptr
	err    *Error
}

func (j *initJob) ctx() context.Context {
	if j.c != nil {
		return j.c.ctx
	}
	return context.Background()
}

// runInits runs the engine parts concurrently, then the shadow parts on the
// calling thread, and records each outcome. It returns the first error.
func (l *Library) runInits(jobs []*initJob) *Error {
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		run := func() {
			defer wg.Done()
			eng, err := j.engine(j.ctx())
			if err != nil {
				j.err = l.classify(j.api, err)
				return
			}
			j.eng = eng
			if j.exch && eng != nil {
				j.id, j.haveID, j.err = l.shadowExchange(j.ctx(), eng, j.api)
			}
		}
		if len(jobs) == 1 {
			run()
		} else {
			go run()
		}
	}
	wg.Wait()
	if l.FB != nil {
		var want []*initJob
		for _, j := range jobs {
			if j.err == nil && j.shadow != nil && (!j.exch || j.haveID) {
				want = append(want, j)
			}
		}
		grouped := len(want) > 1
		if grouped {
			l.FB.GroupStart()
		}
		for _, j := range want {
			sh, r := j.shadow(j.id)
			if r != Success {
				log.Warnf(log.Init, "%s: the fallback NCCL could not create the shadow communicator (%s: %s); calls that need the fallback will be rejected", j.api, r, l.FB.LastError())
				continue
			}
			j.sh = sh
		}
		if grouped {
			if r := l.FB.GroupEnd(); r != Success {
				log.Warnf(log.Init, "the fallback NCCL's grouped shadow init failed (%s: %s)", r, l.FB.LastError())
				for _, j := range want {
					j.sh = 0
				}
			}
		}
	}
	var first *Error
	for _, j := range jobs {
		if j.err != nil && first == nil {
			first = j.err
		}
		if j.c == nil {
			continue
		}
		j.c.finishInit(j.eng, j.sh, j.err)
		if j.err == nil && log.On(log.Info, log.Init) {
			log.Infof(log.Init, "comm %#x rank %d nranks %d cudaDev %d backend %s shadow %#x - Init COMPLETE", j.c.Handle, j.c.Rank(), j.c.NRanks(), j.c.Dev, l.Eng.Backend(), j.sh)
		}
	}
	return first
}

// shadowExchange agrees on the shadow communicator's id: every rank says
// whether it has the fallback, and rank 0 adds the real NCCL's unique id.
// The shadow is made only when every rank has the fallback.
func (l *Library) shadowExchange(ctx context.Context, eng EngineComm, api string) (UniqueID, bool, *Error) {
	var id UniqueID
	payload := []byte{0}
	if l.FB != nil {
		payload[0] = 1
		if eng.Rank() == 0 {
			fid, r := l.FB.GetUniqueID()
			if r != Success {
				log.Warnf(log.Init, "%s: the fallback NCCL's ncclGetUniqueId failed (%s: %s); no shadow communicator", api, r, l.FB.LastError())
				payload[0] = 0
			} else {
				payload = append(payload, fid[:]...)
			}
		}
	}
	all, err := eng.AllGather(ctx, payload)
	if errors.Is(err, ErrUnsupported) {
		if l.FB != nil {
			log.Infof(log.Init, "%s: the unique id was made in a process without a fallback NCCL; no shadow communicator", api)
		}
		return id, false, nil
	}
	if err != nil {
		return id, false, l.classify(api+" (shadow id exchange)", err)
	}
	for r, m := range all {
		if len(m) < 1 || m[0] != 1 {
			if l.FB != nil {
				log.Warnf(log.Init, "%s: rank %d has no fallback NCCL; no shadow communicator (calls that need the fallback will be rejected)", api, r)
			}
			return id, false, nil
		}
	}
	if len(all[0]) != 1+len(id) {
		return id, false, errorf(InternalError, "%s: rank 0 sent a %d-byte shadow id", api, len(all[0])-1)
	}
	copy(id[:], all[0][1:])
	return id, true, nil
}

// InitAll is ncclCommInitAll: ndev communicators of one clique in this
// process, created concurrently (devs nil: devices 0..ndev-1; on the host
// backend the device numbers are only recorded). The cuda backend rejects
// several devices in one process (InvalidUsage).
func (l *Library) InitAll(hs []uintptr, devs []int) Result {
	const api = "ncclCommInitAll"
	n := len(hs)
	if n < 1 {
		return l.Fail(InvalidArgument, "%s: ndev %d must be >= 1", api, n)
	}
	id, err := l.Eng.NewUniqueID(false)
	if err != nil {
		return l.fail(l.classify(api, err))
	}
	jobs := make([]*initJob, n)
	for i := range hs {
		dev := i
		if devs != nil {
			dev = devs[i]
		}
		if l.Eng.Backend() == "host" && devs == nil {
			dev = 0
		}
		c := l.newComm(hs[i], i, n, dev, DefaultConfig())
		p := InitParams{ID: id, Rank: i, NRanks: n, Device: dev, Config: c.Config}
		jobs[i] = &initJob{c: c, api: api, engine: func(ctx context.Context) (EngineComm, error) { return l.Eng.Init(ctx, p) }}
	}
	e := l.runInits(jobs)
	if e == nil && l.FB != nil {
		shs, r := l.FB.CommInitAll(n, devs)
		if r != Success {
			log.Warnf(log.Init, "%s: the fallback NCCL's ncclCommInitAll failed (%s: %s); no shadow communicators", api, r, l.FB.LastError())
		} else {
			for i, j := range jobs {
				if eng, _ := j.c.engine(); eng != nil {
					j.c.es.Store(&engState{eng, shs[i]})
				}
			}
		}
	}
	if e != nil { // ncclCommInitAll is all or nothing
		for _, j := range jobs {
			l.abortComm(j.c)
		}
	}
	return l.fail(e)
}

// Split is ncclCommSplit. h is the new handle (unused, and keep false, for
// color NCCL_SPLIT_NOCOLOR, when *newcomm is NULL). cfg nil inherits the
// parent's configuration.
func (l *Library) Split(t Thread, parent uintptr, color, key int, h uintptr, cfg *Config) (keep bool, r Result) {
	const api = "ncclCommSplit"
	p, e := l.usable(parent, api)
	if e != nil {
		return false, l.failInGroup(t, e)
	}
	if color < 0 && color != -1 {
		return false, l.Fail(InvalidArgument, "%s: color %d must be >= 0 or NCCL_SPLIT_NOCOLOR (-1)", api, color)
	}
	c2 := p.Config
	if cfg != nil {
		c2 = *cfg
	}
	var c *Comm
	if color >= 0 {
		c = l.newComm(h, -1, -1, p.Dev, c2)
	}
	j := &initJob{c: c, api: api, engine: func(ctx context.Context) (EngineComm, error) {
		<-p.ready
		pe, _ := p.engine()
		if pe == nil {
			return nil, errorf(InvalidUsage, "parent comm %#x failed to initialise", parent)
		}
		return pe.Split(ctx, color, key, c2)
	}}
	if l.FB != nil {
		j.shadow = func(UniqueID) (uintptr, Result) {
			if _, sh := p.engine(); sh != 0 {
				return l.FB.CommSplit(sh, color, key)
			}
			return 0, Success
		}
	}
	if c == nil { // participate, make nothing
		if *t.Depth > 0 {
			g := l.group(t)
			g.inits = append(g.inits, j)
			return false, Success
		}
		return false, l.fail(l.runInits([]*initJob{j}))
	}
	return l.initResult(t, c, l.startInit(t, c, j))
}

// Shrink is ncclCommShrink (NCCL 2.27): the ranks not in exclude make a new
// communicator, ranks renumbered in order. NCCL_SHRINK_ABORT (flags bit 0)
// aborts the parent's in-flight work first.
func (l *Library) Shrink(t Thread, parent uintptr, exclude []int, h uintptr, cfg *Config, flags int) (keep bool, r Result) {
	const api = "ncclCommShrink"
	p, e := l.usable(parent, api)
	if e != nil {
		return false, l.failInGroup(t, e)
	}
	if flags&^1 != 0 {
		return false, l.Fail(InvalidArgument, "%s: unknown shrinkFlags %#x", api, flags)
	}
	seen := map[int]bool{}
	for _, x := range exclude {
		if x < 0 || x >= p.NRanks() || seen[x] {
			return false, l.Fail(InvalidArgument, "%s: excluded rank %d is out of range for %d ranks or repeated", api, x, p.NRanks())
		}
		seen[x] = true
	}
	if seen[p.Rank()] {
		return false, l.Fail(InvalidArgument, "%s: rank %d lists itself as excluded (excluded ranks must not call ncclCommShrink)", api, p.Rank())
	}
	c2 := p.Config
	if cfg != nil {
		c2 = *cfg
	}
	c := l.newComm(h, -1, -1, p.Dev, c2)
	j := &initJob{c: c, api: api, engine: func(ctx context.Context) (EngineComm, error) {
		<-p.ready
		pe, _ := p.engine()
		if pe == nil {
			return nil, errorf(InvalidUsage, "parent comm %#x failed to initialise", parent)
		}
		return pe.Shrink(ctx, exclude, c2)
	}}
	if l.FB != nil && l.FB.Has("ncclCommShrink") {
		j.shadow = func(UniqueID) (uintptr, Result) {
			if _, sh := p.engine(); sh != 0 {
				return l.FB.CommShrink(sh, exclude)
			}
			return 0, Success
		}
	}
	return l.initResult(t, c, l.startInit(t, c, j))
}

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
		log.Infof(log.Init, "comm %#x rank %d nranks %d (%s) destroyed: %d requests served natively (%d of them launched from C), %d by the fallback NCCL, %d rejected",
			h, c.Rank(), c.NRanks(), st, s.Native, s.FromC, s.Fallback, s.Rejected)
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

// needsFallback reports whether no Theseus schedule can serve op by its
// kind: point-to-point calls, AlltoAllv (until its own executor exists) and
// ops made by ncclRedOpCreatePreMulSum.
func needsFallback(op *Op) (bool, string) {
	switch {
	case op.Coll.P2P():
		return true, "point-to-point calls run on the fallback NCCL"
	case op.Coll == CollAlltoAllv:
		return true, "ncclAlltoAllv runs as grouped ncclSend/ncclRecv on the fallback NCCL"
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
		o := *op
		g.ops = append(g.ops, groupOp{c: c, op: &o})
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
			if e == nil && op.Counts == nil && !log.On(log.Info, log.Coll) {
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
			op.Replay = rp.ArmReplay(op, op.ReplayKey())
		}
	}
}

// runNative runs one data call through the engine. done is false when no
// schedule serves it (the caller tries the fallback).
func (l *Library) runNative(c *Comm, op *Op) (e *Error, done bool) {
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

type groupOp struct {
	c  *Comm
	op *Op
}

// runOps runs data calls: native ones through the engine (one goroutine per
// communicator when there are several, so that ranks of one process do not
// wait on each other), then those that need the fallback inside one real
// ncclGroupStart/End on the calling thread. It returns the first error and
// each communicator's first error.
func (l *Library) runOps(ops []groupOp) (*Error, map[*Comm]*Error) {
	r := opResults{}
	var native, fb []groupOp
	if simpleGroup(ops) { // one communicator, only calls a schedule may serve
		native = ops
	} else {
		for _, g := range fuseAlltoAll(ops) {
			if need, _ := needsFallback(g.op); need {
				fb = append(fb, g)
			} else {
				native = append(native, g)
			}
		}
	}
	var mu sync.Mutex // guards fb and r
	runComm := func(list []groupOp) {
		for _, g := range list {
			e, done := l.runNative(g.c, g.op)
			mu.Lock()
			switch {
			case done && e != nil:
				r.record(g.c, e)
			case !done && len(g.op.Fused) > 0: // the calls the AlltoAll was recognised from
				for i := range g.op.Fused {
					fb = append(fb, groupOp{g.c, &g.op.Fused[i]})
				}
			case !done:
				fb = append(fb, g)
			}
			mu.Unlock()
		}
	}
	if multiComm(native) {
		byComm := map[*Comm][]groupOp{}
		var order []*Comm
		for _, g := range native {
			if _, ok := byComm[g.c]; !ok {
				order = append(order, g.c)
			}
			byComm[g.c] = append(byComm[g.c], g)
		}
		var wg sync.WaitGroup
		for _, c := range order {
			wg.Add(1)
			go func(c *Comm) {
				defer wg.Done()
				l.Eng.OnDevice(c.Dev, func() { runComm(byComm[c]) })
			}(c)
		}
		wg.Wait()
	} else {
		runComm(native)
	}
	if len(fb) > 0 {
		l.runFallback(fb, &r)
	}
	return r.first, r.per
}

// opResults collects the errors of a batch of calls.
type opResults struct {
	first *Error
	per   map[*Comm]*Error
}

func (r *opResults) record(c *Comm, e *Error) {
	if r.first == nil {
		r.first = e
	}
	if r.per == nil {
		r.per = map[*Comm]*Error{}
	}
	if r.per[c] == nil {
		r.per[c] = e
	}
}

// simpleGroup: every call on one communicator, none of them p2p or for the
// fallback by kind.
func simpleGroup(ops []groupOp) bool {
	for _, g := range ops {
		if g.c != ops[0].c || g.op.Coll.P2P() {
			return false
		}
		if need, _ := needsFallback(g.op); need {
			return false
		}
	}
	return true
}

func multiComm(ops []groupOp) bool {
	for _, g := range ops {
		if g.c != ops[0].c {
			return true
		}
	}
	return false
}

// runFallback runs calls on the shadow communicators, inside one real
// ncclGroupStart/End when there are several, on the calling thread.
func (l *Library) runFallback(fb []groupOp, r *opResults) {
	var can []groupOp
	for _, g := range fb {
		_, sh := g.c.engine()
		if l.FB == nil || sh == 0 {
			g.c.nReject.Add(1)
			_, why := needsFallback(g.op)
			if why == "" {
				why = g.op.NoNative
			}
			if why == "" {
				why = "no Theseus schedule serves this request"
			}
			r.record(g.c, errorf(InvalidUsage, "nccl%s: %s, but there is no fallback NCCL (%s)", g.op.Coll, why, l.whyNoShadow()))
			continue
		}
		can = append(can, g)
	}
	if len(can) == 0 {
		return
	}
	grouped := len(can) > 1
	if grouped {
		l.FB.GroupStart()
	}
	for _, g := range can {
		_, sh := g.c.engine()
		n := g.c.opCount.Add(1)
		if res := l.FB.Run(sh, g.op); res != Success && res != InProgress {
			g.c.nReject.Add(1)
			r.record(g.c, errorf(res, "nccl%s: fallback NCCL: %s", g.op.Coll, l.FB.LastError()))
			continue
		}
		cnt := g.c.nFallbk.Add(1)
		if log.On(log.Info, log.Coll) {
			log.Infof(log.Coll, "nccl%s: opCount %d comm %#x rank %d count %d datatype %s peer/root %d stream %#x served by the fallback NCCL (%d fallback requests on this comm)", g.op.Coll, n, g.c.Handle, g.c.Rank(), g.op.Count, g.op.DataType, g.op.Root, g.op.Stream, cnt)
		}
	}
	if grouped {
		if res := l.FB.GroupEnd(); res != Success && res != InProgress {
			e := errorf(res, "ncclGroupEnd: fallback NCCL: %s", l.FB.LastError())
			for _, g := range can {
				r.record(g.c, e)
			}
		}
	}
}

// fuseAlltoAll recognises, per communicator of a group, grouped ncclSend
// and ncclRecv calls that together are exactly an all-to-all — one send to
// and one receive from every rank (itself included), all with the same
// count, datatype and stream, the block for peer p at base + p*count*size
// in both buffers — and replaces them with one AlltoAll op that a Theseus
// schedule can serve. It is how clients built against NCCL < 2.28, which
// has no ncclAlltoAll (PyTorch's all_to_all_single with equal splits,
// nccl-tests' alltoall_perf), issue an all-to-all. Anything else is left
// as it is (and goes to the fallback).
//
// The recognition is local to each rank, so it is done only for
// communicators without a shadow: there, point-to-point calls have no other
// way to run, and a peer whose group is not the same all-to-all (possible
// only when it skips some third rank) fails either way. Communicators with
// a shadow send every point-to-point group to the real NCCL, which matches
// the calls pairwise.
func fuseAlltoAll(ops []groupOp) []groupOp {
	byComm := map[*Comm][]int{}
	var order []*Comm
	for i, g := range ops {
		if _, sh := g.c.engine(); g.op.Coll.P2P() && sh == 0 {
			if _, ok := byComm[g.c]; !ok {
				order = append(order, g.c)
			}
			byComm[g.c] = append(byComm[g.c], i)
		}
	}
	if len(order) == 0 {
		return ops
	}
	replaced := map[int]*Op{} // first index of a fused set -> the AlltoAll
	drop := map[int]bool{}
	for _, c := range order {
		idx := byComm[c]
		n := c.NRanks()
		if n < 1 || len(idx) != 2*n {
			continue
		}
		sends, recvs := make([]*Op, n), make([]*Op, n)
		ok := true
		for _, i := range idx {
			op := ops[i].op
			side := sends
			if op.Coll == CollRecv {
				side = recvs
			}
			if op.Root < 0 || op.Root >= n || side[op.Root] != nil {
				ok = false
				break
			}
			side[op.Root] = op
		}
		if !ok || sends[0] == nil || recvs[0] == nil {
			continue
		}
		s0, r0 := sends[0], recvs[0]
		sz := uint64(s0.DataType.Size())
		if _, fits := mulOK(s0.Count, sz, uint64(n)); !fits {
			continue
		}
		block := uintptr(s0.Count * sz)
		for p := 0; p < n && ok; p++ {
			s, r := sends[p], recvs[p]
			ok = s != nil && r != nil && s.Count == s0.Count && r.Count == s0.Count &&
				s.DataType == s0.DataType && r.DataType == s0.DataType &&
				s.Stream == s0.Stream && r.Stream == s0.Stream &&
				s.Send == s0.Send+uintptr(p)*block && r.Recv == r0.Recv+uintptr(p)*block
		}
		if !ok {
			continue
		}
		fused := &Op{Coll: CollAlltoAll, Send: s0.Send, Recv: r0.Recv, Count: s0.Count, DataType: s0.DataType,
			Root: -1, Stream: s0.Stream}
		for _, i := range idx {
			fused.Fused = append(fused.Fused, *ops[i].op)
			drop[i] = true
		}
		replaced[idx[0]] = fused
	}
	if len(replaced) == 0 {
		return ops
	}
	out := make([]groupOp, 0, len(ops))
	for i, g := range ops {
		if f, ok := replaced[i]; ok {
			out = append(out, groupOp{g.c, f})
		}
		if !drop[i] {
			out = append(out, g)
		}
	}
	return out
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

func (l *Library) logColl(c *Comm, op *Op, n uint64) {
	served := op.Served.String()
	if served == "" {
		served = "a Theseus schedule"
	}
	if len(op.Fused) > 0 {
		served += fmt.Sprintf(" (recognised from %d grouped ncclSend/ncclRecv calls)", len(op.Fused))
	}
	log.Infof(log.Coll, "nccl%s: opCount %d sendbuff %#x recvbuff %#x count %d datatype %s op %s root %d comm %#x [nranks=%d] rank %d stream %#x served by %s", op.Coll, n, op.Send, op.Recv, op.Count, op.DataType, op.RedOp, op.Root, c.Handle, c.NRanks(), c.Rank(), op.Stream, served)
}

// Register is ncclCommRegister: forwarded to the shadow communicator.
func (l *Library) Register(h, buf uintptr, size uint64) (uintptr, Result) {
	const api = "ncclCommRegister"
	c, e := l.usable(h, api)
	if e != nil {
		return 0, l.fail(e)
	}
	<-c.ready
	_, sh := c.engine()
	if l.FB == nil || sh == 0 {
		return 0, l.Reject(api, "buffer registration is served by the fallback NCCL, and there is none ("+l.whyNoShadow()+")")
	}
	hd, r := l.FB.Register(sh, buf, size)
	if r != Success {
		return 0, l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	return hd, Success
}

// Deregister is ncclCommDeregister: forwarded to the shadow communicator.
func (l *Library) Deregister(h, handle uintptr) Result {
	const api = "ncclCommDeregister"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	_, sh := c.engine()
	if l.FB == nil || sh == 0 {
		return l.Reject(api, "buffer registration is served by the fallback NCCL, and there is none ("+l.whyNoShadow()+")")
	}
	if r := l.FB.Deregister(sh, handle); r != Success {
		return l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	return Success
}

func (l *Library) whyNoShadow() string {
	if l.FB == nil {
		return l.FBReason
	}
	return "this communicator has no shadow NCCL communicator"
}

// RedOpCreatePreMulSum is ncclRedOpCreatePreMulSum: the op is created on
// the shadow communicator, and collectives using it run on the fallback.
func (l *Library) RedOpCreatePreMulSum(h, scalar uintptr, dt DataType, residence int32) (RedOp, Result) {
	const api = "ncclRedOpCreatePreMulSum"
	c, e := l.usable(h, api)
	if e != nil {
		return 0, l.fail(e)
	}
	if !dt.Valid() {
		return 0, l.Fail(InvalidArgument, "%s: invalid datatype %d", api, int32(dt))
	}
	if residence != 0 && residence != 1 {
		return 0, l.Fail(InvalidArgument, "%s: invalid residence %d (ncclScalarDevice 0 or ncclScalarHostImmediate 1)", api, residence)
	}
	if scalar == 0 {
		return 0, l.Fail(InvalidArgument, "%s: scalar is NULL", api)
	}
	<-c.ready
	_, sh := c.engine()
	if l.FB == nil || sh == 0 {
		return 0, l.Reject(api, "pre-multiplied sums run on the fallback NCCL, and there is none ("+l.whyNoShadow()+")")
	}
	op, r := l.FB.RedOpCreatePreMulSum(sh, scalar, dt, residence)
	if r != Success {
		return 0, l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	c.mu.Lock()
	c.userOps[op] = dt
	c.mu.Unlock()
	return op, Success
}

// RedOpDestroy is ncclRedOpDestroy.
func (l *Library) RedOpDestroy(h uintptr, op RedOp) Result {
	const api = "ncclRedOpDestroy"
	c, e := l.lookup(h, api)
	if e != nil {
		return l.fail(e)
	}
	if op.Builtin() {
		return l.Fail(InvalidArgument, "%s: op %d is built in", api, int32(op))
	}
	if !c.isUserOp(op) {
		return l.Fail(InvalidArgument, "%s: op %d was not made by ncclRedOpCreatePreMulSum on comm %#x", api, int32(op), h)
	}
	_, sh := c.engine()
	c.mu.Lock()
	delete(c.userOps, op)
	c.mu.Unlock()
	if r := l.FB.RedOpDestroy(sh, op); r != Success {
		return l.fail(errorf(r, "%s: fallback NCCL: %s", api, l.FB.LastError()))
	}
	return Success
}
