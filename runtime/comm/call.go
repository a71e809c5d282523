package comm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/ctxdir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/transport/proxy"
)

// Call is one collective call on this rank, with NCCL's arguments.
type Call struct {
	Coll ir.Collective
	// Send and Recv are the NCCL send and receive buffers (sendbuff,
	// recvbuff): addresses in the backend's memory space. A rank that has
	// no such buffer in the collective (the non-root's receive buffer of
	// reduce and gather, its send buffer of broadcast and scatter) may pass
	// 0.
	Send, Recv device.Ptr
	// Count is NCCL's count in elements: per block (the per-rank piece of
	// allgather, reducescatter, alltoall, gather and scatter).
	Count    int64
	DataType ir.DataType
	// RedOp is the reduction of allreduce, reducescatter and reduce
	// (ignored by the others).
	RedOp ir.RedOp
	// Root is the root rank of broadcast, reduce, gather and scatter
	// (ignored by the others).
	Root int
	// Stream runs the launch. nil: the communicator's own stream, and the
	// call waits for the launch and returns its error (synchronous). A
	// stream of the backend: the call returns once the launch is enqueued;
	// its failure surfaces in Stream.Synchronize and AsyncError.
	Stream device.Stream
}

// validated is what Validate reads of a call: every field but the stream.
type validated struct {
	send, recv device.Ptr
	count      int64
	root       int
	coll       ir.Collective
	dtype      ir.DataType
	op         ir.RedOp
}

// validatedOf is what Validate reads of call.
func validatedOf(call *Call) validated {
	return validated{call.Send, call.Recv, call.Count, call.Root, call.Coll, call.DataType, call.RedOp}
}

// matches reports whether call has v's fields (every field but the
// stream): field by field, so that a repeated call compares without
// building its validated first.
func (v *validated) matches(call *Call) bool {
	return v.send == call.Send && v.recv == call.Recv && v.count == call.Count && v.root == call.Root &&
		v.coll == call.Coll && v.dtype == call.DataType && v.op == call.RedOp
}

// Validate checks c before anything is selected or materialised (the
// documented per-call errors, docs/runtime.md "Errors"):
//
//   - InvalidArgument: an unknown collective, datatype or reduction op; a
//     root outside 0..nranks-1 (rooted collectives); a negative count, or a
//     message (count × element size × blocks) that overflows 63 bits; a null
//     buffer the rank needs (count > 0); a buffer whose end wraps around the
//     address space, or that lies in a backend allocation too small for its
//     bytes (checkBuf, as for ncclSend); send and receive buffers that overlap without being
//     NCCL's in-place arrangement (ir.md §3);
//   - InvalidUsage: out-of-place send and receive buffers not congruent
//     modulo 16 (seed README, "Usage requirement": schedule-executed
//     collectives need it). In-place requests are exempt: their input lies
//     at a fixed offset in the output (ir.md §3), which any count must be
//     allowed to produce (in-place allgather of 7 bytes per rank).
//
// It returns whether the request is in place.
func (c *Comm) Validate(call *Call) (inPlace bool, err error) {
	op := call.Coll.String()
	bad := func(code Code, format string, args ...any) (bool, error) {
		return false, &Error{Code: code, Op: op, Rank: c.rank, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case call.Coll >= ir.NumCollectives || call.Coll == ir.Custom || call.Coll == ir.SendRecv:
		return bad(InvalidArgument, "unknown collective %d", call.Coll)
	case call.DataType >= ir.NumDataTypes:
		return bad(InvalidArgument, "datatype %d out of range (0..%d)", call.DataType, ir.NumDataTypes-1)
	case call.Coll.Reduces() && call.RedOp >= ir.NumRedOps:
		return bad(InvalidArgument, "reduction op %d out of range (0..%d)", call.RedOp, ir.NumRedOps-1)
	case call.Coll.Rooted() && (call.Root < 0 || call.Root >= c.n):
		return bad(InvalidArgument, "root %d outside 0..%d", call.Root, c.n-1)
	case call.Count < 0:
		return bad(InvalidArgument, "count %d < 0", call.Count)
	}
	if _, err := ir.MessageBytes(call.Coll, c.n, call.Count, call.DataType); err != nil {
		return bad(InvalidArgument, "count overflow: %v", err)
	}
	if call.Count == 0 {
		return false, nil
	}
	root := 0
	if call.Coll.Rooted() {
		root = call.Root
	}
	es := int64(call.DataType.Size())
	inB := ir.Blocks(call.Coll, ir.Input, c.n, c.rank, root) * call.Count * es
	outB := ir.Blocks(call.Coll, ir.Output, c.n, c.rank, root) * call.Count * es
	for _, b := range []struct {
		name string
		p    device.Ptr
		n    int64
	}{{"send buffer", call.Send, inB}, {"receive buffer", call.Recv, outB}} {
		if e := c.checkBuf(op, b.name, b.p, b.n); e != nil {
			return false, e
		}
	}
	if inB == 0 || outB == 0 {
		return false, nil
	}
	// In place as NCCL defines it (ir.md §3), or disjoint.
	blockB := call.Count * es
	off := int64(c.rank) * blockB
	isRoot := c.rank == root
	switch call.Coll {
	case ir.AllReduce, ir.AllToAll, ir.Broadcast, ir.Reduce:
		inPlace = call.Send == call.Recv && (call.Coll == ir.AllReduce || call.Coll == ir.AllToAll || isRoot)
	case ir.AllGather, ir.Gather:
		inPlace = call.Send == call.Recv+device.Ptr(off)
	case ir.ReduceScatter, ir.Scatter:
		inPlace = call.Recv == call.Send+device.Ptr(off)
	}
	if !inPlace && call.Send < call.Recv+device.Ptr(outB) && call.Recv < call.Send+device.Ptr(inB) {
		return bad(InvalidArgument, "send buffer %#x+%d and receive buffer %#x+%d overlap without being the in-place arrangement",
			uintptr(call.Send), inB, uintptr(call.Recv), outB)
	}
	if !inPlace && call.Send%16 != call.Recv%16 {
		return bad(InvalidUsage, "send buffer %#x and receive buffer %#x are not congruent modulo 16 (required for schedule-executed collectives)",
			uintptr(call.Send), uintptr(call.Recv))
	}
	return inPlace, nil
}

// Collective runs one collective call: validate (nothing is selected or
// materialised for an invalid call), select the schedule (a collective
// step: agreement at epochs), then walk the executor and launch. With a nil
// Stream it waits for the launch.
//
// A call whose plan the communicator keeps (plans.go) is launched from it
// while the plan is valid: the same validation, selection and launch as
// the full path's, without redoing them (docs/design/runtime.md, "The
// launch plan").
//
// Errors (*Error): the Validate errors; ErrState for a communicator that
// is finalized (InvalidUsage) or destroyed or aborted (InvalidArgument, as
// NCCL 2.25 reports an invalid comm); InvalidUsage when no schedule serves
// the request (ErrNoSchedule: the NCCL layer falls back); the
// communicator's asynchronous error once it has one (RemoteError naming a
// lost or silent peer, InternalError, ...).
func (c *Comm) Collective(ctx context.Context, call *Call) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.armed {
		c.replaySync()
	}
	if c.traced {
		return c.traceCall(ctx, call)
	}
	if i := c.planFor(call); i >= 0 {
		if served, err := c.launchPlan(i, call); served {
			return err
		}
	}
	return c.collective(ctx, call)
}

// collective is Collective for a call no valid plan serves: the full path.
func (c *Comm) collective(ctx context.Context, call *Call) error {
	c.setCur(-1, true)
	if commState(c.state.Load()) != live {
		e, _ := c.stateErr(call.Coll.String())
		return e
	}
	if e := c.asyncErr.Load(); e != nil {
		return e
	}
	// A repeat of the last valid call is valid in the same way.
	v := validatedOf(call)
	inPlace := c.valid.inPlace
	if !c.valid.ok || v != c.valid.call {
		var err error
		if inPlace, err = c.Validate(call); err != nil {
			return err
		}
		c.valid.call, c.valid.inPlace, c.valid.ok = v, inPlace, true
	}
	if c.tr != nil {
		c.tracePhase("validate")
	}
	c.calls++
	if call.Count == 0 {
		c.last = CallInfo{Schedule: -1, Launch: c.exec.LaunchCounter(), Skipped: true}
		return nil
	}
	root := -1
	if call.Coll.Rooted() {
		root = call.Root
	}
	sreq := selector.Request{Coll: call.Coll, SendBuf: uintptr(call.Send), RecvBuf: uintptr(call.Recv), Count: call.Count,
		DataType: call.DataType, RedOp: call.RedOp, PacketType: c.packet, Root: root, NRanks: c.n,
		NLocalRanks: c.perNode, InPlace: inPlace}
	if !call.Coll.Reduces() {
		sreq.RedOp = ir.Sum
	}
	id, err := c.sel.Select(ctx, &sreq)
	if c.tr != nil {
		c.tracePhase("select")
	}
	if err != nil {
		e := c.wrap(call.Coll.String(), err)
		if !errors.Is(err, selector.ErrBadRequest) {
			c.setAsync(e)
		}
		return e
	}
	// The request lives in the Comm: the executor's walk keeps a pointer
	// to it, which would put a local on the heap for every call.
	c.ereq = executor.Request{Coll: call.Coll, Send: call.Send, Recv: call.Recv, Count: call.Count, DataType: call.DataType,
		RedOp: sreq.RedOp, Root: max(root, 0), InPlace: inPlace, PacketType: sreq.PacketType}
	p, err := c.run(ctx, call, id)
	if err != nil || p == nil {
		return err
	}
	// The plan serves the call's repeats while Select would answer them
	// the same way: from its cache, under this cache generation.
	if k, ok := selector.KeyOf(&sreq); ok {
		if cid, ok := c.sel.Cached(k); ok && cid == id {
			c.keepPlan(&v, p)
		}
	}
	return nil
}

// run executes c.ereq, the request of call, with the schedule the selector
// chose (id), and returns the walk's plan.
func (c *Comm) run(ctx context.Context, call *Call, id int) (*executor.Plan, error) {
	if id == selector.None {
		return nil, &Error{Code: InvalidUsage, Op: call.Coll.String(), Rank: c.rank, Msg: c.contextState(), Err: ErrNoSchedule}
	}
	s, err := c.schedule(id)
	if err != nil {
		return nil, err
	}
	c.last, c.lastSched = CallInfo{Schedule: id, Name: s.Name}, s
	st := call.Stream
	if st == nil {
		st = c.stream
	}
	p, err := c.exec.Execute(ctx, &c.ereq, s, st)
	c.last.Launch = c.exec.LaunchCounter()
	return p, c.executed(call, st, err)
}

// executed is the end of a call's launch on st (the call's stream, or the
// communicator's own), whose error is err: the error classified, the
// caller's stream remembered for AsyncError, or the launch waited for when
// the call gave no stream.
func (c *Comm) executed(call *Call, st device.Stream, err error) error {
	if err != nil {
		e := c.wrap(call.Coll.String(), err)
		if c.exec.Err() != nil {
			c.setAsync(e)
		}
		if e.Code == InvalidUsage && errors.Is(e, ErrMismatch) {
			c.tellMismatch()
		}
		return e
	}
	if call.Stream != nil {
		// AsyncError reads the failure record of the caller's last stream
		// (stored only when it changes: a repeated call allocates nothing).
		if c.lastUserSt != st {
			c.lastUserSt = st
			sp := new(device.Stream)
			*sp = st
			c.userSt.Store(sp)
		}
	} else {
		if c.tr != nil {
			c.traceLaunched()
		}
		err := st.Synchronize()
		if c.tr != nil {
			c.tracePhase("sync")
		}
		if err != nil {
			e := c.wrap(call.Coll.String(), err)
			c.setAsync(e)
			c.nodeLost(err)
			return e
		}
	}
	return nil
}

// nodeLost declares lost the peer on another node that a port channel
// failed on (a *proxy.Error naming it: UCX reported the peer gone, or a
// wait on it passed THESEUS_TIMEOUT), so that every rank learns which rank
// failed first (peerLost's notice) instead of naming the ranks that
// aborted because of it.
func (c *Comm) nodeLost(err error) {
	var pe *proxy.Error
	if errors.As(err, &pe) && pe.Peer >= 0 && pe.Peer < c.n && pe.Peer != c.rank {
		c.peerLost(pe.Peer, err)
	}
}

// contextState describes the selection context for an ErrNoSchedule
// error: its directory, and whether it is missing or has no schedule
// entries (with how the default directory was chosen when
// THESEUS_SELECTION_CONTEXT is unset). It is worked out once per epoch.
func (c *Comm) contextState() string {
	epochs := c.sel.Stats().Epochs
	if c.ctxState != "" && c.ctxStateEpoch == epochs {
		return c.ctxState
	}
	dir := c.cfg.ContextDir
	unset := ""
	if v, ok := env.SelContext.Raw(); (!ok || v == "") && dir == ctxdir.Dir() {
		unset = " (THESEUS_SELECTION_CONTEXT is unset, so the default directory is read; set it to a selection context such as examples/contexts/default)"
	}
	_, scheds := c.sel.Agreed()
	st, err := os.Stat(dir)
	switch {
	case err != nil:
		c.ctxState = fmt.Sprintf("selection context %s is missing%s", dir, unset)
	case !st.IsDir():
		c.ctxState = fmt.Sprintf("selection context %s is not a directory%s", dir, unset)
	case scheds == 0:
		c.ctxState = fmt.Sprintf("selection context %s is empty: it has no schedule entries (%s)%s", dir, manifest.ScheduleManifest, unset)
	default:
		c.ctxState = fmt.Sprintf("selection context %s (%d schedule entries)", dir, scheds)
	}
	c.ctxStateEpoch = epochs
	return c.ctxState
}

// schedule returns the executor's view of schedule id (built once).
func (c *Comm) schedule(id int) (*executor.Schedule, error) {
	if id < len(c.scheds) && c.scheds[id] != nil {
		return c.scheds[id], nil
	}
	ref, ok := c.sel.Schedule(id)
	var b *bundle.Bundle
	if ok && ref.Info != nil {
		b, _ = ref.Info.Artifact.(*bundle.Bundle)
	}
	if b == nil {
		return nil, &Error{Code: InternalError, Op: "select", Rank: c.rank, Msg: fmt.Sprintf("schedule %d has no compiled bundle", id)}
	}
	for len(c.scheds) <= id {
		c.scheds = append(c.scheds, nil)
	}
	s := &executor.Schedule{ID: id, Name: filepath.Base(ref.File), Replaces: ref.Replaces, Bundle: b}
	c.scheds[id] = s
	return s, nil
}
