package comm

import (
	"context"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/trace"
)

// The communicator's side of a trace (Config.Trace, THESEUS_TRACE;
// docs/trace.md): each call is a span on the rank's "calls" track, with
// its phases beneath it (validate, select, the executor's states —
// materialise, migrate, prepare, launch — and sync), and the ops its
// launches ran on a track per threadblock, from the backend's op trace
// (device.OpTracer), drained whenever the executor knows that no launch
// writing it runs.

// Tracks of a rank's process in the trace.
const (
	tidCalls = 1
	tidTB0   = 100 // + threadblock
)

// launchNames is how many launches' schedule names a trace remembers, to
// name the launch spans of the ops drained later.
const launchNames = 4096

type callTrace struct {
	t    *trace.Trace
	pid  int
	dev  string // "GPU" or "host interpreter": the op tracks' names
	call int64  // the call in progress began (Unix ns)
	mark int64  // its last phase ended
	tbs  map[int]bool
	// names[l % launchNames] is launch l's schedule, when its launch
	// counter is l.
	names    [launchNames]string
	namesOf  [launchNames]uint64
	dropped  uint64
	opsTrace bool
	// launched: the launch of the call in progress is recorded (its walk's
	// Launch state, or traceLaunched).
	launched bool
}

func now() int64 { return time.Now().UnixNano() }

// startTrace opens the communicator's trace when Config.Trace names one:
// a process per rank, named by the communicator's id, rank and size.
// Errors: the trace file's.
func (c *Comm) startTrace() error {
	if c.cfg.Trace == "" {
		return nil
	}
	t, err := trace.Open(c.cfg.Trace)
	if err != nil {
		return err
	}
	tr := &callTrace{t: t, tbs: map[int]bool{}, dev: "host interpreter"}
	if c.cfg.Backend.Name() == "cuda" {
		tr.dev = "GPU"
	}
	id := hex.EncodeToString(c.id[:4])
	tr.pid = t.Process(fmt.Sprintf("comm %s rank %d/%d", id, c.rank, c.n), c.rank)
	t.Thread(tr.pid, tidCalls, "calls (host)", 0)
	c.exec.SetSpans(c.traceState)
	ok, err := c.exec.TraceOps(c.cfg.TraceOps, c.traceOp, func(n uint64) { tr.dropped += n })
	if err != nil {
		log.Warnf(log.Init, "rank %d: no op trace: %v", c.rank, err)
	}
	tr.opsTrace = ok
	c.tr, c.traced = tr, true
	if log.On(log.Info, log.Init) {
		log.Infof(log.Init, "comm rank %d/%d: tracing to %s (ops: %v)", c.rank, c.n, t.Path(), ok)
	}
	return nil
}

// closeTrace closes the trace after the executor (which drained the op
// trace) is closed.
func (c *Comm) closeTrace() {
	if c.tr == nil {
		return
	}
	tr := c.tr
	c.tr, c.traced = nil, false
	if tr.dropped > 0 {
		tr.t.Span(tr.pid, tidCalls, "trace", fmt.Sprintf("%d op records dropped (THESEUS_TRACE_OPS)", tr.dropped), now(), now(), nil)
	}
	if err := tr.t.Close(); err != nil {
		log.Warnf(log.Init, "rank %d: trace: %v", c.rank, err)
	}
}

// traceCall is Collective for a traced communicator: the same path, its
// phases recorded.
func (c *Comm) traceCall(ctx context.Context, call *Call) error {
	tr := c.tr
	tr.call = now()
	tr.mark, tr.launched = tr.call, false
	served, planned := false, false
	var err error
	if i := c.planFor(call); i >= 0 {
		planned = true
		served, err = c.launchPlan(i, call)
	}
	if !served {
		err = c.collective(ctx, call)
	} else {
		c.traceLaunched()
	}
	end := now()
	bytes, _ := ir.MessageBytes(call.Coll, c.n, call.Count, call.DataType)
	args := &trace.Args{Coll: call.Coll.String(), Bytes: bytes, Schedule: c.last.Name, Launch: c.last.Launch}
	switch {
	case err != nil:
		args.Note = err.Error()
	case served:
		args.Note = "plan"
	case planned:
		args.Note = "plan stale: full path"
	}
	tr.t.Span(tr.pid, tidCalls, "call", fmt.Sprintf("%s %d B", call.Coll, bytes), tr.call, end, args)
	if call.Stream == nil && err == nil {
		// The call waited for its launch: drain the op trace, after the
		// call's span (the drain's copies are the trace's, not the call's).
		c.exec.Synced(c.stream)
	}
	return err
}

// nameLaunch remembers that the launch just made (the executor's launch
// counter) ran the last call's schedule, for its op spans.
func (c *Comm) nameLaunch() {
	l := c.exec.LaunchCounter()
	i := l % launchNames
	c.tr.names[i], c.tr.namesOf[i] = c.last.Name, l
}

// tracePhase records the phase of the call in progress that ends now.
func (c *Comm) tracePhase(name string) {
	if tr := c.tr; tr != nil {
		t := now()
		tr.t.Span(tr.pid, tidCalls, "host", name, tr.mark, t, nil)
		tr.mark = t
	}
}

// traceLaunched records the launch of the call in progress, ending now,
// unless its walk recorded it (the plan path has no walk).
func (c *Comm) traceLaunched() {
	if tr := c.tr; tr != nil && !tr.launched {
		t := now()
		tr.t.Span(tr.pid, tidCalls, "host", "launch", tr.mark, t, &trace.Args{Note: "from its plan"})
		tr.mark, tr.launched = t, true
		c.nameLaunch()
	}
}

// phaseOf names the phase of a call that executor state s belongs to;
// lookup states are "walk".
func phaseOf(s executor.State) string {
	switch s {
	case executor.L0Setup, executor.L1Cold, executor.L1Switch, executor.L2Setup:
		return "materialise"
	case executor.L1Migrate:
		return "migrate"
	case executor.L3Setup:
		return "prepare"
	case executor.Grow:
		return "grow scratch"
	case executor.Launch:
		return "launch"
	}
	return "walk"
}

// traceState is the executor's span hook (executor.SetSpans). Lookups
// shorter than a microsecond are not recorded (a walk that hits makes
// several of tens of nanoseconds).
func (c *Comm) traceState(s executor.State, begin, end int64) {
	tr := c.tr
	if tr == nil {
		return
	}
	name := phaseOf(s)
	if s == executor.Launch {
		tr.launched = true
		c.nameLaunch()
	}
	if name != "walk" || end-begin >= 1000 {
		tr.t.Span(tr.pid, tidCalls, "host", name, begin, end, &trace.Args{State: s.String()})
	}
	tr.mark = end
}

// traceOp is the executor's op-trace sink (executor.TraceOps).
func (c *Comm) traceOp(s device.OpSpan) {
	tr := c.tr
	if tr == nil {
		return
	}
	tid := tidTB0 + s.TB
	if !tr.tbs[s.TB] {
		tr.tbs[s.TB] = true
		tr.t.Thread(tr.pid, tid, fmt.Sprintf("tb %d (%s)", s.TB, tr.dev), 1+s.TB)
	}
	if s.Step < 0 {
		name := "launch"
		if i := s.Launch % launchNames; tr.namesOf[i] == s.Launch && tr.names[i] != "" {
			name = tr.names[i]
		}
		tr.t.Span(tr.pid, tid, "launch", name, s.Begin, s.End, &trace.Args{Launch: s.Launch, TB: trace.Int(s.TB)})
		return
	}
	tr.t.Span(tr.pid, tid, "op", s.Op.String(), s.Begin, s.End,
		&trace.Args{Launch: s.Launch, TB: trace.Int(s.TB), Step: trace.Int(s.Step), Slice: trace.Int64(s.Slice)})
}
