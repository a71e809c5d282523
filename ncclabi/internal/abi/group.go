package abi

import (
	"sync"

	"github.com/theseus-ccl/theseus/runtime/log"
)

// group is one thread's open ncclGroupStart…ncclGroupEnd: the communicator
// creations and data calls deferred to the outermost ncclGroupEnd.
type group struct {
	inits []*initJob
	calls []groupCall // the data calls, in call order
	mode  int         // 0 none yet, 1 blocking communicators, 2 non-blocking
	err   *Error
	// ops are calls as runOps takes them, and p2p the Ops of a group of
	// point-to-point calls on one communicator (runP2PGroup): made at the
	// outermost ncclGroupEnd.
	ops []groupOp
	p2p []Op
}

// groupCall is a data call of a group: its communicator and a copy of its
// arguments.
type groupCall struct {
	c  *Comm
	op Op
}

// reset empties g for reuse (Library.spare), keeping its lists' storage
// but nothing they pointed to.
func (g *group) reset() {
	clear(g.inits)
	clear(g.calls)
	clear(g.ops)
	clear(g.p2p)
	*g = group{inits: g.inits[:0], calls: g.calls[:0], ops: g.ops[:0], p2p: g.p2p[:0]}
}

// recycle keeps g, which a blocking ncclGroupEnd has finished with (nothing
// refers to it any more), for the next group.
func (l *Library) recycle(g *group) {
	g.reset()
	l.gmu.Lock()
	if l.spare == nil {
		l.spare = g
	}
	l.gmu.Unlock()
}

func (g *group) setMode(blocking bool, api string) *Error {
	m := 2
	if blocking {
		m = 1
	}
	if g.mode == 0 {
		g.mode = m
		return nil
	}
	if g.mode != m {
		return errorf(InvalidUsage, "%s: blocking and non-blocking communicators cannot be mixed in one group", api)
	}
	return nil
}

func (g *group) recordErr(e *Error) {
	if g.err == nil {
		g.err = e
	}
}

// failInGroup is fail for a call that may sit inside a group: a failed
// call abandons its group (NCCL 2.25 semantics: the outermost ncclGroupEnd
// returns the first error and runs nothing).
func (l *Library) failInGroup(t Thread, e *Error) Result {
	if *t.Depth > 0 {
		l.group(t).recordErr(e)
	}
	return l.fail(e)
}

func (l *Library) group(t Thread) *group {
	l.init()
	l.gmu.Lock()
	defer l.gmu.Unlock()
	g := l.groups[t.Key]
	if g == nil {
		if g, l.spare = l.spare, nil; g == nil {
			g = &group{}
		}
		l.groups[t.Key] = g
	}
	return g
}

// inOpenGroup reports whether a group that has not ended, on any thread,
// holds a data call or a creation for c.
func (l *Library) inOpenGroup(c *Comm) bool {
	l.gmu.Lock()
	defer l.gmu.Unlock()
	for _, g := range l.groups {
		for i := range g.calls {
			if g.calls[i].c == c {
				return true
			}
		}
		for _, j := range g.inits {
			if j.c == c {
				return true
			}
		}
	}
	return false
}

func (l *Library) takeGroup(t Thread) *group {
	l.init()
	l.gmu.Lock()
	defer l.gmu.Unlock()
	g := l.groups[t.Key]
	delete(l.groups, t.Key)
	return g
}

// GroupStart is ncclGroupStart: groups nest; only the outermost
// ncclGroupEnd runs what the group collected.
func (l *Library) GroupStart(t Thread) Result {
	*t.Depth++
	return Success
}

// GroupEnd is ncclGroupEnd. At the outermost level it runs the group's
// communicator creations (concurrently), then its data calls (native ones
// per communicator, fallback ones inside one real group). With blocking
// communicators it returns when all is enqueued; with non-blocking ones it
// returns InProgress and every communicator involved reports InProgress
// from ncclCommGetAsyncError until the work has ended. A group in which a
// call failed is abandoned: nothing runs and the first error is returned.
func (l *Library) GroupEnd(t Thread) Result {
	if *t.Depth <= 0 {
		return l.Fail(InvalidUsage, "ncclGroupEnd: no group is open on this thread (ncclGroupStart was not called)")
	}
	*t.Depth--
	if *t.Depth > 0 {
		return Success
	}
	g := l.takeGroup(t)
	if g == nil {
		return Success
	}
	// A failed call abandons its group even when it was the group's only
	// call, so nothing was queued (NCCL 2.25: ncclGroupEnd returns the
	// group's first error).
	if g.err != nil {
		for _, j := range g.inits {
			if j.c != nil {
				j.c.finishInit(nil, 0, g.err)
			}
		}
		return l.fail(&Error{Result: g.err.Result, Msg: "ncclGroupEnd: group abandoned after an earlier error: " + g.err.Msg})
	}
	if len(g.inits) == 0 && len(g.calls) == 0 {
		l.recycle(g)
		return Success
	}
	if log.On(log.Info, log.Coll) {
		log.Infof(log.Coll, "ncclGroupEnd: %d communicator creations, %d data calls", len(g.inits), len(g.calls))
	}
	for i := range g.calls {
		g.ops = append(g.ops, groupOp{g.calls[i].c, &g.calls[i].op}) // (calls no longer grows)
	}
	if g.mode != 2 || len(g.calls) == 0 && !hasComm(g.inits) { // (non-blocking with only NOCOLOR splits: nothing to wait for)
		e, _ := l.runGroup(g)
		l.recycle(g)
		return l.fail(e)
	}
	// Non-blocking: run in the background after each communicator's
	// earlier work; each communicator stays in progress until it ends.
	var comms []*Comm
	seen := map[*Comm]bool{}
	add := func(c *Comm) {
		if c != nil && !seen[c] {
			seen[c] = true
			comms = append(comms, c)
		}
	}
	for _, j := range g.inits {
		add(j.c)
	}
	for i := range g.calls {
		add(g.calls[i].c)
	}
	var prevs []chan struct{}
	for _, c := range comms {
		c.mu.Lock()
		if c.tail != nil {
			prevs = append(prevs, c.tail)
		}
		c.mu.Unlock()
	}
	done := make(chan struct{})
	var per map[*Comm]*Error
	for _, c := range comms {
		c.enqueue(func() *Error {
			<-done
			return per[c]
		})
	}
	dev := comms[0].Dev
	go func() {
		for _, p := range prevs {
			<-p
		}
		l.Eng.OnDevice(dev, func() { _, per = l.runGroup(g) })
		close(done)
	}()
	return InProgress
}

// GroupSimulateEnd is ncclGroupSimulateEnd. Theseus has no performance
// model: the group is closed, what it collected is discarded (as a
// simulation would not run it), and the call returns InvalidUsage.
func (l *Library) GroupSimulateEnd(t Thread) Result {
	const api = "ncclGroupSimulateEnd"
	if *t.Depth <= 0 {
		return l.Fail(InvalidUsage, "%s: no group is open on this thread", api)
	}
	*t.Depth--
	n := 0
	if *t.Depth == 0 {
		if g := l.takeGroup(t); g != nil {
			n = len(g.inits) + len(g.calls)
			e := errorf(InvalidUsage, "%s: creation discarded", api)
			for _, j := range g.inits {
				if j.c != nil {
					j.c.finishInit(nil, 0, e)
				}
			}
		}
	}
	return l.Reject(api, "Theseus has no performance model to simulate with; the group was closed and its "+itoa(n)+" calls discarded")
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

func hasComm(jobs []*initJob) bool {
	for _, j := range jobs {
		if j.c != nil {
			return true
		}
	}
	return false
}

type groupOp struct {
	c  *Comm
	op *Op
}

// runGroup runs g: its communicator creations (concurrently), then its
// data calls (runP2PGroup when they are one communicator's sends and
// receives, else runOps). It returns the first error and each
// communicator's first error.
func (l *Library) runGroup(g *group) (*Error, map[*Comm]*Error) {
	var first *Error
	if len(g.inits) > 0 {
		first = l.runInits(g.inits)
	}
	e, per, ok := l.runP2PGroup(g)
	if !ok {
		e, per = l.runOps(g.ops)
	}
	if first == nil {
		first = e
	}
	return first, per
}

// runP2PGroup is runOps for the usual group of point-to-point calls: only
// ncclSend and ncclRecv calls, all on one communicator, which run as one
// point-to-point group (as runOps runs them), without runOps' lists and
// goroutines. ok is false for any other group (nothing was run).
func (l *Library) runP2PGroup(g *group) (first *Error, per map[*Comm]*Error, ok bool) {
	if len(g.calls) == 0 {
		return nil, nil, false
	}
	c := g.calls[0].c
	for i := range g.calls {
		if g.calls[i].c != c || !g.calls[i].op.Coll.P2P() {
			return nil, nil, false
		}
	}
	for i := range g.calls {
		g.p2p = append(g.p2p, g.calls[i].op)
	}
	var r opResults
	switch e, done := l.runP2P(c, g.p2p); {
	case done && e != nil:
		r.record(c, e)
	case !done:
		fb := make([]groupOp, len(g.p2p))
		for i := range g.p2p {
			fb[i] = groupOp{c, &g.p2p[i]}
		}
		l.runFallback(fb, &r)
	}
	return r.first, r.per, true
}

// runOps runs data calls: native ones through the engine (one goroutine per
// communicator when there are several, so that ranks of one process do not
// wait on each other), then those that need the fallback inside one real
// ncclGroupStart/End on the calling thread. Per communicator, its
// collectives and AlltoAllv calls run in call order, then its ncclSend and
// ncclRecv calls as one point-to-point group (every rank applies the same
// rule, and a group's collectives are the same on every rank, so the
// launches pair up). It returns the first error and each communicator's
// first error.
func (l *Library) runOps(ops []groupOp) (*Error, map[*Comm]*Error) {
	r := opResults{}
	var native, fb []groupOp
	for _, g := range ops {
		if need, _ := needsFallback(g.op); need {
			fb = append(fb, g)
		} else {
			native = append(native, g)
		}
	}
	var mu sync.Mutex // guards fb and r
	runComm := func(list []groupOp) {
		var p2p []Op
		var c *Comm
		for _, g := range list {
			if g.op.Coll.P2P() {
				p2p, c = append(p2p, *g.op), g.c
				continue
			}
			e, done := l.runNative(g.c, g.op)
			mu.Lock()
			switch {
			case done && e != nil:
				r.record(g.c, e)
			case !done:
				fb = append(fb, g)
			}
			mu.Unlock()
		}
		if len(p2p) == 0 {
			return
		}
		e, done := l.runP2P(c, p2p)
		mu.Lock()
		switch {
		case done && e != nil:
			r.record(c, e)
		case !done:
			for i := range p2p {
				fb = append(fb, groupOp{c, &p2p[i]})
			}
		}
		mu.Unlock()
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

func multiComm(ops []groupOp) bool {
	for _, g := range ops {
		if g.c != ops[0].c {
			return true
		}
	}
	return false
}
