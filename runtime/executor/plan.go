package executor

import (
	"errors"

	"github.com/theseus-ccl/theseus/runtime/device"
)

// Plan is the launch of one call shape, as the walk that served it
// prepared it (docs/design/runtime.md, "The launch plan"): the request,
// the schedule, the cache entries the walk used (L1; L2 when the schedule
// reaches peers' buffers; L3), the backend's prepared launch, its scratch
// layout and whether every launch of it is fenced.
//
// Only the walk (Execute) builds plans, at L3 setup, and a plan never
// changes. It is valid while
//
//   - the executor's generation is the one it was built in: the
//     generation moves on whenever prepared launches are dropped (scratch
//     growth, a full L3 map, Close);
//   - its schedule is the running one (the last one a walk switched to: a
//     migration or switch to another schedule rebases the semaphores they
//     share, so the plans of every other schedule wait for a walk, which
//     switches back);
//   - the executor has not failed and was not aborted;
//   - for a plan that reaches peers' buffers (L2), the call's buffers
//     still lie in the allocations it was built for (their identity, the
//     walk's L2 key: an allocation freed and made again at the same
//     address is another one), every peer that reaches them sees them
//     where they are (what this rank last pushed to it), and no CUDA
//     graph captured its launch (which froze its peers' buffers).
//
// The communicator adds its own: the selection snapshot the plan's
// schedule was chosen under (an epoch that changes it), the selector's
// budget before its next epoch, and its own state (runtime/comm).
//
// A plan is consumed by a launcher: Launch (the Go path; the stream's
// launch, cuLaunchKernel on CUDA), or a launcher outside Go, such as the
// NCCL layer's C launcher, which repeats Prepared's launch as Launch would
// (Repeatable) and reports what it launched (PlansLaunched). A launcher
// needs only Prepared, the launch counter and the fence decision (a
// launch is fenced when its layout differs from the last launch's, or
// FenceAll).
type Plan struct {
	// What a launch reads, first.
	gen      uint64
	l1       *l1Entry
	prep     device.Prepared
	sig      scratchSig
	fenceAll bool

	l3    *l3Entry
	l2    *l2Entry // nil unless the schedule reaches peers' buffers
	l2key l2Key    // with l2: the identity of the call's allocations
	// pushes (with l2) are the call's buffers the peers reach, as they
	// must see them: the plan is valid while they do (l2.go).
	pushes []pushRef
	sched  *Schedule
	req    Request
}

// ErrStale is Launch's answer for a plan that is no longer valid (Plan):
// nothing was launched or counted; the caller walks (Execute), which
// builds the plan anew when the call still needs one.
var ErrStale = errors.New("executor: stale plan")

// Request is the request the plan serves.
func (p *Plan) Request() Request { return p.req }

// Schedule is the plan's schedule.
func (p *Plan) Schedule() *Schedule { return p.sched }

// Prepared is the backend's prepared launch: what a launcher launches.
func (p *Plan) Prepared() device.Prepared { return p.prep }

// FenceAll reports whether every launch of the plan is fenced (LL
// schedules, and those the verifier found racing between iterations).
func (p *Plan) FenceAll() bool { return p.fenceAll }

// ReachesPeers reports whether the plan's schedule reaches peers' buffers
// (executor level L2): each launch then checks the identity of the call's
// allocations, which a launcher outside Go cannot.
func (p *Plan) ReachesPeers() bool { return p.l2 != nil }

// SameLayout reports whether launches of p and q lay scratch out the same
// way: a launch after one of another layout is fenced.
func (p *Plan) SameLayout(q *Plan) bool { return p != nil && q != nil && p.sig == q.sig }

// newPlan is the plan of the walk's request at its L3 entry l3 (L3 setup,
// or an L3 hit whose plan is of an older generation).
func (e *Executor) newPlan(w *walk, l3 *l3Entry) *Plan { return e.setPlan(new(Plan), w, l3) }

// setPlan makes *p the plan of the walk's request at l3 (newPlan).
func (e *Executor) setPlan(p *Plan, w *walk, l3 *l3Entry) *Plan {
	*p = Plan{gen: e.gen, l1: w.l1, prep: l3.prep, sig: l3.sig, fenceAll: w.l1.fenceAll, l3: l3, sched: w.s, req: *w.r}
	if w.l2 != nil {
		p.l2, p.l2key = w.l2, w.l2key
		p.pushes = append([]pushRef(nil), w.push...)
	}
	l3.plan = p
	return p
}

// Valid reports whether p may be launched without a walk (Plan's rules;
// for a plan that reaches peers' buffers this looks up the identity of
// its request's allocations).
func (e *Executor) Valid(p *Plan) bool {
	if p == nil || p.gen != e.gen || p.l1 != e.lastL1 || e.failed.Load() != nil {
		return false
	}
	return p.l2 == nil || e.l2Valid(p)
}

// l2Valid is Valid's part for a plan that reaches peers' buffers.
func (e *Executor) l2Valid(p *Plan) bool {
	return p.l3.frozenAt == 0 && e.l2KeyOf(&p.req) == p.l2key && e.peersCurrent(p.pushes)
}

// Launch enqueues plan p on st exactly as the Launch state of a walk of
// p's request would (the fence rule, the stream order, a CUDA graph
// capture's bookkeeping), without the walk: the launch of a repeated call.
// It returns ErrStale, launching and counting nothing, when p is not valid
// (Valid); the caller then walks (Execute). Errors: ErrStale; the stream's
// launch failure (*Error of state Launch; sticky unless the stream was
// closed). Counted: Stats.Launches, Fences, PlanLaunches, PlanFailures.
func (e *Executor) Launch(p *Plan, st device.Stream) error {
	if p == nil || st == nil || p.gen != e.gen || p.l1 != e.lastL1 || e.failed.Load() != nil ||
		p.l2 != nil && !e.l2Valid(p) {
		return ErrStale
	}
	if err := e.enqueue(p, st); err != nil {
		e.planFailures++
		return err
	}
	e.planLaunches++
	return nil
}

// Repeatable reports whether a launcher outside Go may repeat p's launch
// on st as Launch would make it, without Go's bookkeeping: p valid and
// reaching no peer's buffers (a launcher outside Go cannot check their
// identity), st the stream of the last launch (no ordering between
// streams), and nothing a capture would change. The launcher then writes
// the launch counter (LaunchCounter + 1 for the first) and the fence
// decision (fenced when p's layout differs from the last launch's, or
// FenceAll) into each launch, and reports them with PlansLaunched before
// anything else uses the executor.
func (e *Executor) Repeatable(p *Plan, st device.Stream) bool {
	return p != nil && p.l2 == nil && e.Valid(p) && e.launch > 0 && e.plain(p, st)
}

// FenceEvery reports whether a launcher outside Go must fence every launch
// of p it makes (Repeatable): p fences every launch (FenceAll), or
// something was captured into a CUDA graph in another scratch layout (or
// in several), whose replays may come between any two launches. It holds
// until the executor's next capture, which only a walk or Launch makes.
func (e *Executor) FenceEvery(p *Plan) bool { return p != nil && (p.fenceAll || e.capReset(p.sig)) }

// LastLayout reports whether the last launch used p's scratch layout: the
// next launch of p is not fenced unless p fences every launch.
func (e *Executor) LastLayout(p *Plan) bool { return p != nil && e.lastSig == p.sig }

// PlansLaunched counts n launches that a launcher outside Go made from
// plans (Repeatable), fenced of them fenced, last the plan of the last of
// them, as Launch counts its own: the launch counter, the fences, the plan
// launches and the scratch layout of the last launch.
func (e *Executor) PlansLaunched(n, fenced uint64, last *Plan) {
	e.launch += n
	e.lastEager = e.launch
	e.fences += fenced
	e.planLaunches += n
	if n > 0 && last != nil {
		e.lastSig = last.sig
		if e.capReset(last.sig) {
			e.lastSig = scratchSig{}
		}
	}
}
