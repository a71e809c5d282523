package abi

import (
	"context"
	"errors"
	"sync"

	"github.com/theseus-ccl/theseus/runtime/log"
)

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
		return pe.Shrink(ctx, exclude, flags&1 != 0, c2)
	}}
	if l.FB != nil && l.FB.Has("ncclCommShrink") {
		j.shadow = func(UniqueID) (uintptr, Result) {
			if _, sh := p.engine(); sh != 0 {
				return l.FB.CommShrink(sh, exclude, flags)
			}
			return 0, Success
		}
	}
	return l.initResult(t, c, l.startInit(t, c, j))
}
