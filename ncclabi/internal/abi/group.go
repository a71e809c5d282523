package abi

import (
	"sync"

	"github.com/theseus-ccl/theseus/runtime/log"
)

// group is one thread's open ncclGroupStart…ncclGroupEnd: the communicator
// creations and data calls deferred to the outermost ncclGroupEnd.
type group struct {
	inits []*initJob
	ops   []groupOp
	mode  int // 0 none yet, 1 blocking communicators, 2 non-blocking
	err   *Error
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
		g = &group{}
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
		for _, op := range g.ops {
			if op.c == c {
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
	if len(g.inits) == 0 && len(g.ops) == 0 {
		return Success
	}
	if log.On(log.Info, log.Coll) {
		log.Infof(log.Coll, "ncclGroupEnd: %d communicator creations, %d data calls", len(g.inits), len(g.ops))
	}
	run := func() (*Error, map[*Comm]*Error) {
		first := l.runInits(g.inits)
		e, per := l.runOps(g.ops)
		if first == nil {
			first = e
		}
		return first, per
	}
	if g.mode != 2 {
		e, _ := run()
		return l.fail(e)
	}
	if len(g.ops) == 0 && !hasComm(g.inits) { // only NOCOLOR splits: nothing to wait for
		e, _ := run()
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
	for _, o := range g.ops {
		add(o.c)
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
		l.Eng.OnDevice(dev, func() { _, per = run() })
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
			n = len(g.inits) + len(g.ops)
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
