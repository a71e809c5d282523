package comm

import (
	"github.com/theseus-ccl/theseus/runtime/executor"
)

// The communicator's launch plans (docs/design/runtime.md, "The launch
// plan"). The full path of a call (Collective: validate, select, the
// executor's walk) returns the executor's plan of its call shape; the
// communicator keeps the plans of its last planSlots distinct calls, and
// a call equal to one of them in every argument but the stream is
// launched from its plan (executor.Launch) while
//
//   - the communicator is live and has no asynchronous error;
//   - the selector would answer it from its cache, as it did: no epoch is
//     due (selector.Budget) and the cache generation is the plan's
//     (an epoch that installs a new snapshot, or a full cache, moves it
//     on);
//   - the executor finds the plan valid (executor.Plan's rules: its
//     generation, the running schedule, the executor not failed, for
//     plans reaching peers' buffers the identity of the allocations).
//
// Such a call is counted as the full path counts it (the communicator's
// calls, the selector's requests and hits); the executor counts a plan
// launch instead of a walk. Any other call takes the full path, which
// builds or finds the plan again. The NCCL layer's C launcher
// (runtime/replay) repeats the same plans from C (replay.go).

// planSlots is how many calls' plans a communicator keeps: the gradient
// buckets of a data-parallel step, nccl-tests' shifted buffers (the C
// launcher's records hold as many).
const planSlots = 16

// planEntry is one kept plan: the call it serves (every argument but the
// stream), the plan, what LastCall reports for it, and the selector's
// cache generation when its schedule was chosen.
type planEntry struct {
	call   validated
	plan   *executor.Plan
	info   CallInfo // Schedule and Name
	selGen uint64
}

// planFor returns the index of the kept plan for call, or -1. The last
// call's plan is looked at first.
func (c *Comm) planFor(call *Call) int {
	if c.cur >= 0 && c.curCall.matches(call) {
		return c.cur
	}
	for i := range c.plans {
		if c.plans[i].plan != nil && c.plans[i].call.matches(call) {
			return i
		}
	}
	return -1
}

// setCur makes kept plan i (-1: none) the last call's: its copy in the
// Comm's first lines (cur, curCall, curPlan, curGen) and, unless keep,
// LastCall's schedule fields.
func (c *Comm) setCur(i int, keep bool) {
	c.cur = i
	if i < 0 {
		c.curPlan = nil
		return
	}
	e := &c.plans[i]
	c.curCall, c.curPlan, c.curGen = e.call, e.plan, e.selGen
	if !keep {
		c.last, c.lastSched = e.info, e.plan.Schedule()
	}
}

// launchPlan launches call from kept plan i when the plan still serves it
// (the rules above) and returns the call's result; served is false, with
// nothing done, when the call must take the full path.
func (c *Comm) launchPlan(i int, call *Call) (served bool, err error) {
	p, gen := c.curPlan, c.curGen
	if i != c.cur {
		p, gen = c.plans[i].plan, c.plans[i].selGen
	}
	if commState(c.state.Load()) != live || c.asyncErr.Load() != nil || c.sel.Budget() < 1 || gen != c.sel.CacheGen() {
		return false, nil
	}
	st := call.Stream
	if st == nil {
		st = c.stream
	}
	err = c.exec.Launch(p, st)
	if err == executor.ErrStale { // (never wrapped)
		return false, nil
	}
	c.calls++
	c.sel.Served(1)
	if i != c.cur { // (else the last call was this one: c.last describes it)
		c.setCur(i, false)
	}
	c.last.Launch = c.exec.LaunchCounter()
	if err == nil && call.Stream != nil && call.Stream == c.lastUserSt {
		return true, nil // the usual repeat: nothing else to do
	}
	return true, c.executed(call, st, err)
}

// keepPlan keeps p, the plan of call v that the full path has just
// launched (c.last describes it), replacing the plan kept for v if any,
// else a free slot, else the slots in turn.
func (c *Comm) keepPlan(v *validated, p *executor.Plan) {
	i := -1
	for j := range c.plans {
		if c.plans[j].plan == nil {
			if i < 0 {
				i = j
			}
			continue
		}
		if c.plans[j].call == *v {
			i = j
			break
		}
	}
	if i < 0 {
		i = c.nextPlan
		c.nextPlan = (c.nextPlan + 1) % planSlots
	}
	c.plans[i] = planEntry{call: *v, plan: p, info: CallInfo{Schedule: c.last.Schedule, Name: c.last.Name}, selGen: c.sel.CacheGen()}
	c.setCur(i, true)
}
