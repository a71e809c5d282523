package comm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/trace"
)

// Point-to-point calls and AlltoAllv (docs/p2p.md): traffic known only at
// call time, run by the executor's point-to-point engine. They follow NCCL
// 2.25's semantics: a group's ncclSend and ncclRecv calls are matched per
// pair of ranks, in order, and a send and its receive must agree on count
// and datatype (a mismatch fails within THESEUS_TIMEOUT, naming the pair,
// and never corrupts memory); an ungrouped call is a group of one.
//
// Point-to-point calls are issued by subsets of the ranks, so they never go
// through Select, whose epochs assume every rank issues the same requests:
// the engine's parameters come from the snapshot the last epoch installed
// (selector.P2P), which both ends of a pair share as long as they have
// issued the same collectives before (a send and its receive between the
// same two collective calls, as a correct NCCL program has them); the
// communicator agrees on its first snapshot when it is created
// (selector.Prime), so point-to-point calls before any collective read it
// too.

// P2POp is one ncclSend (Recv false; Buf is sendbuff) or ncclRecv (Buf is
// recvbuff) of a group: Count elements of DataType with rank Peer.
type P2POp = executor.P2POp

// P2PCall is one group of point-to-point calls (ncclGroupStart … ncclGroupEnd,
// or one ungrouped call) on one stream.
type P2PCall struct {
	Ops []P2POp
	// Stream runs the launch; nil: the communicator's own stream, and the
	// call waits for it (as Call.Stream).
	Stream device.Stream
	// Join are the group's other streams (NCCL lets a group's calls use
	// several): Stream first waits for each of them, and each then waits
	// for the launch, on the device (device.StreamOrderer), or on the host
	// for streams that cannot wait on the device.
	Join []device.Stream
	// Checked says that every op has passed ValidateP2POp on this
	// communicator (the Go API checks each grouped call when it is made):
	// P2P then checks only what ValidateP2P adds (the sends to this rank
	// and receives from it pairing up).
	Checked bool
}

// AlltoAllvCall is ncclAlltoAllv (the seed's extension): rank i sends
// Counts[i*n+j] elements of DataType to rank j, packed in peer order in
// Send (from each rank's row) and received packed in peer order in Recv
// (its column). Counts is the CPU copy of the matrix, which plans the call;
// GPU is the device copy the launch reads (docs/p2p.md, "AlltoAllv").
type AlltoAllvCall struct {
	Send, Recv device.Ptr
	Counts     []int64
	GPU        device.Ptr
	DataType   ir.DataType
	Stream     device.Stream
}

// MaxAlltoAllvRanks is the largest communicator whose ncclAlltoAllv runs
// natively (the CUDA kernel keeps a rank's row and column prefix sums in
// shared memory).
const MaxAlltoAllvRanks = 1024

// p2pKept is a kept point-to-point plan and the call it serves.
type p2pKept struct {
	ops    []P2POp
	matrix *executor.P2PMatrix
	plan   *executor.P2PPlan
}

// p2pSlots is how many point-to-point call shapes a communicator keeps
// plans for (a pipeline stage's sends and receives, a few buffers each).
const p2pSlots = 16

// p2pState is the communicator's point-to-point state.
type p2pState struct {
	gen    uint64 // the selector cache generation params were chosen in
	have   bool
	params executor.P2PParams
	choice selector.P2PChoice
	name   string // p2pName of choice
	kept   [p2pSlots]p2pKept
	next   int
}

// P2PParams returns the point-to-point engine's parameters of the
// installed snapshot: the built-in ones (executor.DefaultP2PParams for the
// node shape) overridden by the fields of the best usable "gen": "p2p"
// entry (selector.P2P), and the entry's id (selector.None for none).
func (c *Comm) P2PParams() (executor.P2PParams, int) {
	s := &c.p2p
	if s.have && s.gen == c.sel.CacheGen() {
		return s.params, s.choice.ID
	}
	ch := c.sel.P2P(c.n, c.perNode)
	p := P2PParamsOf(c.perNode, ch.Entry)
	s.params, s.choice, s.gen, s.have = p, ch, c.sel.CacheGen(), true
	s.name = p2pName(ch)
	return p, ch.ID
}

// P2PParamsOf is the point-to-point engine's parameters for nlocal ranks
// per node: the built-in ones (executor.DefaultP2PParams) overridden by the
// fields e sets (nil: none).
func P2PParamsOf(nlocal int, e *manifest.P2PEntry) executor.P2PParams {
	p := executor.DefaultP2PParams(nlocal)
	if e == nil {
		return p
	}
	if e.ChunkBytes != 0 {
		p.Geometry.ChunkBytes = e.ChunkBytes
	}
	if e.Slots != 0 {
		p.Geometry.Slots = e.Slots
	}
	if e.Channels != 0 {
		p.Geometry.Channels = e.Channels
	}
	if e.Threads != 0 {
		p.Threads = e.Threads
	}
	if e.EagerBytes != nil {
		p.EagerBytes = *e.EagerBytes
	}
	if e.Direct != nil {
		p.Direct = *e.Direct
	}
	return p
}

// p2pName is what LastCall names a call served with choice's parameters.
func p2pName(choice selector.P2PChoice) string {
	if choice.ID == selector.None {
		return "point-to-point engine (built-in parameters)"
	}
	if choice.Name != "" {
		return "point-to-point engine (" + choice.Name + ")"
	}
	return fmt.Sprintf("point-to-point engine (entry %d)", choice.ID)
}

// checkBuf checks one buffer of n bytes: not null when n > 0, not wrapping
// around, and inside its allocation when it lies in a backend allocation
// that is too small for it.
func (c *Comm) checkBuf(op, what string, p device.Ptr, n int64) *Error {
	bad := func(format string, args ...any) *Error {
		return &Error{Code: InvalidArgument, Op: op, Rank: c.rank, Msg: fmt.Sprintf(format, args...)}
	}
	if n == 0 {
		return nil
	}
	if p == 0 {
		return bad("%s is NULL with %d bytes", what, n)
	}
	if uint64(p) > math.MaxUint64-uint64(n) {
		return bad("%s %#x + %d bytes wraps around the address space", what, uintptr(p), n)
	}
	if reg, ok := c.cfg.Backend.Lookup(p, 1); ok && !reg.Contains(p, n) {
		return bad("%s %#x holds %d bytes of its allocation, too few for %d bytes", what, uintptr(p), int64(reg.Base)+reg.Size-int64(p), n)
	}
	return nil
}

// ValidateP2POp checks one ncclSend or ncclRecv as NCCL 2.25 checks a
// call's arguments when it is made: InvalidArgument for a peer out of
// range, an unknown datatype, a negative count or one whose bytes overflow
// 63 bits, a NULL buffer with count > 0, a buffer that wraps around or is
// too small for its count within its allocation.
func (c *Comm) ValidateP2POp(o P2POp) error {
	api := "ncclSend"
	if o.Recv {
		api = "ncclRecv"
	}
	bad := func(code Code, format string, args ...any) error {
		return &Error{Code: code, Op: api, Rank: c.rank, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.Peer < 0 || o.Peer >= c.n:
		return bad(InvalidArgument, "peer %d out of range for %d ranks", o.Peer, c.n)
	case o.DataType >= ir.NumDataTypes:
		return bad(InvalidArgument, "datatype %d out of range (0..%d)", o.DataType, ir.NumDataTypes-1)
	case o.Count < 0:
		return bad(InvalidArgument, "count %d < 0", o.Count)
	case o.Count > math.MaxInt64/int64(o.DataType.Size()):
		return bad(InvalidArgument, "count overflow: %d elements of %d bytes", o.Count, o.DataType.Size())
	}
	what := "sendbuff"
	if o.Recv {
		what = "recvbuff"
	}
	if e := c.checkBuf(api, what, o.Buf, o.Count*int64(o.DataType.Size())); e != nil {
		return e
	}
	return nil
}

// ValidateP2P checks a group before anything is set up: every op
// (ValidateP2POp), and InvalidUsage for sends to this rank and receives
// from it that do not pair up in order with equal counts and datatypes.
func (c *Comm) ValidateP2P(ops []P2POp) error { return c.validateP2P(ops, true) }

// validateP2P is ValidateP2P, checking each op (ValidateP2POp) only with
// each.
func (c *Comm) validateP2P(ops []P2POp, each bool) error {
	const op = "P2P"
	var selfS, selfR []int
	for i, o := range ops {
		if each {
			if err := c.ValidateP2POp(o); err != nil {
				return err
			}
		}
		if o.Peer == c.rank {
			if o.Recv {
				selfR = append(selfR, i)
			} else {
				selfS = append(selfS, i)
			}
		}
	}
	if len(selfS) != len(selfR) {
		return &Error{Code: InvalidUsage, Op: op, Rank: c.rank, Peers: []int{c.rank},
			Msg: fmt.Sprintf("%d sends to this rank and %d receives from it in one group: they must pair up (NCCL 2.25)", len(selfS), len(selfR))}
	}
	for k := range selfS {
		s, r := ops[selfS[k]], ops[selfR[k]]
		if s.Count != r.Count || s.DataType != r.DataType {
			return &Error{Code: InvalidUsage, Op: op, Rank: c.rank, Peers: []int{c.rank},
				Msg: fmt.Sprintf("send #%d to this rank (%d elements of %s) and receive #%d from it (%d elements of %s) disagree (NCCL 2.25: a send and its receive must agree on count and datatype)",
					k+1, s.Count, s.DataType, k+1, r.Count, r.DataType)}
		}
	}
	return nil
}

// ValidateAlltoAllv checks an AlltoAllv before anything is set up:
// InvalidArgument for a matrix that is not nranks x nranks, a negative
// count, a row or column whose total overflows 63 bits in bytes, a NULL GPU
// copy, an unknown datatype, a NULL buffer with elements to send or
// receive, or a buffer too small for its row or column within its
// allocation; InvalidUsage for a communicator over MaxAlltoAllvRanks.
func (c *Comm) ValidateAlltoAllv(a *AlltoAllvCall) error {
	const op = "ncclAlltoAllv"
	bad := func(code Code, format string, args ...any) error {
		return &Error{Code: code, Op: op, Rank: c.rank, Msg: fmt.Sprintf(format, args...)}
	}
	n := c.n
	switch {
	case a.DataType >= ir.NumDataTypes:
		return bad(InvalidArgument, "datatype %d out of range (0..%d)", a.DataType, ir.NumDataTypes-1)
	case len(a.Counts) != n*n:
		return bad(InvalidArgument, "the counts matrix holds %d counts; want %d x %d", len(a.Counts), n, n)
	case a.GPU == 0:
		return bad(InvalidArgument, "cntMatrixGpu is NULL: the launch reads the matrix's device copy")
	case n > MaxAlltoAllvRanks:
		return bad(InvalidUsage, "%d ranks: the point-to-point engine runs ncclAlltoAllv natively for up to %d", n, MaxAlltoAllvRanks)
	}
	es := int64(a.DataType.Size())
	for k := range 2 {
		var tot int64
		for j := range n {
			idx := c.rank*n + j // row: what this rank sends
			if k == 1 {
				idx = j*n + c.rank
			}
			v := a.Counts[idx]
			if v < 0 {
				return bad(InvalidArgument, "count [%d][%d] = %d is negative (over 2^63 as size_t)", idx/n, idx%n, v)
			}
			if v > (math.MaxInt64/es)-tot {
				return bad(InvalidArgument, "count overflow: the %s of rank %d adds up to more than 2^63 bytes", [2]string{"row", "column"}[k], c.rank)
			}
			tot += v
		}
		buf, what := a.Send, "sendbuff"
		if k == 1 {
			buf, what = a.Recv, "recvbuff"
		}
		if e := c.checkBuf(op, what, buf, tot*es); e != nil {
			return e
		}
	}
	return nil
}

// P2P runs one group of point-to-point calls (NCCL semantics above):
// validated (ValidateP2P), then launched by the point-to-point engine with
// the snapshot's parameters — from the group's kept plan while it is valid,
// else through the executor's walk. With a nil Stream it waits for the
// launch. A group of only empty transfers with peers it is already
// connected to still launches (its order counts), and an empty group does
// nothing.
//
// Errors (*Error): ValidateP2P's; ErrState; the asynchronous error; a peer
// that does not connect within the timeout (RemoteError naming it); during
// a CUDA graph capture, a call that needs a connection (InvalidUsage); the
// launch's failures (a mismatch: InvalidUsage naming the pair, from the
// stream or AsyncError).
func (c *Comm) P2P(ctx context.Context, call *P2PCall) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.armed {
		c.replaySync()
	}
	if len(call.Ops) == 0 {
		return nil
	}
	st := call.Stream
	if st == nil && len(call.Join) > 0 {
		st = c.stream
	}
	for _, s := range call.Join {
		if s != st {
			if err := c.after(st, s); err != nil {
				return err
			}
		}
	}
	err := c.p2pRun(ctx, call.Ops, nil, st, func() error { return c.validateP2P(call.Ops, !call.Checked) })
	for _, s := range call.Join {
		if s != st {
			if jerr := c.after(s, st); err == nil {
				err = jerr
			}
		}
	}
	if err == nil && call.Stream == nil && len(call.Join) > 0 {
		if serr := st.Synchronize(); serr != nil {
			err = c.StreamError("P2P", serr)
		}
	}
	return err
}

// after makes s wait for what prev has enqueued: on the device when s can
// (device.StreamOrderer), else on the host.
func (c *Comm) after(s, prev device.Stream) error {
	if o, ok := s.(device.StreamOrderer); ok {
		if err := o.After(prev); err != nil {
			return &Error{Code: UnhandledCudaError, Op: "P2P", Rank: c.rank, Msg: "joining the group's streams", Err: err}
		}
		return nil
	}
	if err := prev.Synchronize(); err != nil {
		return c.StreamError("P2P", err)
	}
	return nil
}

// AlltoAllv runs an ncclAlltoAllv (ValidateAlltoAllv, then the
// point-to-point engine). Errors: as P2P's; the launch fails with
// InvalidArgument when the GPU matrix's row or column of a rank adds up to
// more than the CPU matrix's, or, in checking mode
// (THESEUS_ALLTOALLV_CHECK), differs from it anywhere in them.
func (c *Comm) AlltoAllv(ctx context.Context, call *AlltoAllvCall) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.armed {
		c.replaySync()
	}
	m := &executor.P2PMatrix{Send: call.Send, Recv: call.Recv, Counts: call.Counts, GPU: call.GPU, DataType: call.DataType, Check: c.cfg.alltoallvCheck}
	return c.p2pRun(ctx, nil, m, call.Stream, func() error { return c.ValidateAlltoAllv(call) })
}

// p2pRun is P2P's and AlltoAllv's path: a kept plan, else validate and walk.
func (c *Comm) p2pRun(ctx context.Context, ops []P2POp, m *executor.P2PMatrix, us device.Stream, validate func() error) error {
	opName := "P2P"
	if m != nil {
		opName = "AlltoAllv"
	}
	if c.tr != nil {
		defer c.traceP2P(opName, ops, m, now())
	}
	c.setCur(-1, true)
	if e, ok := c.stateErr(opName); ok {
		return e
	}
	if e := c.asyncErr.Load(); e != nil {
		return e
	}
	st := us
	if st == nil {
		st = c.stream
	}
	params, id := c.P2PParams()
	k := c.p2pFind(ops, m, params)
	if k != nil {
		err := c.exec.LaunchP2P(k.plan, st)
		if err != executor.ErrStale {
			c.calls++
			c.last = CallInfo{Schedule: id, Name: c.p2p.name, Launch: c.exec.LaunchCounter()}
			return c.executedOn(opName, us, st, err)
		}
	}
	if err := validate(); err != nil {
		return err
	}
	req := &executor.P2PRequest{Ops: ops, Matrix: m, Params: params}
	c.calls++
	p, err := c.exec.ExecuteP2P(ctx, req, st)
	c.last = CallInfo{Schedule: id, Name: c.p2p.name, Launch: c.exec.LaunchCounter()}
	if err != nil {
		return c.executedOn(opName, us, st, err)
	}
	if k == nil {
		k = &c.p2p.kept[c.p2p.next]
		c.p2p.next = (c.p2p.next + 1) % p2pSlots
		k.ops = append(k.ops[:0], ops...) // (the slot's old ops are its own)
		if m != nil {
			mc := *m
			mc.Counts = slices.Clone(m.Counts)
			k.matrix = &mc
		} else {
			k.matrix = nil
		}
	}
	k.plan = p
	return c.executedOn(opName, us, st, nil)
}

// p2pFind returns the kept plan of the call (ops or m), if any; plans are
// kept for one set of parameters (a snapshot that changes them makes every
// plan of the old ones miss).
func (c *Comm) p2pFind(ops []P2POp, m *executor.P2PMatrix, params executor.P2PParams) *p2pKept {
	for i := range c.p2p.kept {
		k := &c.p2p.kept[i]
		if k.plan == nil {
			continue
		}
		if m == nil && k.matrix == nil && slices.Equal(k.ops, ops) && k.plan.Params() == params {
			return k
		}
		if m != nil && k.matrix != nil && k.matrix.Send == m.Send && k.matrix.Recv == m.Recv && k.matrix.GPU == m.GPU &&
			k.matrix.DataType == m.DataType && k.matrix.Check == m.Check && slices.Equal(k.matrix.Counts, m.Counts) && k.plan.Params() == params {
			return k
		}
	}
	return nil
}

// executedOn is executed for a call named op on st whose caller gave
// stream us (nil: wait for it).
func (c *Comm) executedOn(op string, us, st device.Stream, err error) error {
	if err != nil {
		e := c.wrap(op, err)
		if c.exec.Err() != nil {
			c.setAsync(e)
		}
		return e
	}
	if us != nil {
		if c.lastUserSt != st {
			c.lastUserSt = st
			sp := new(device.Stream)
			*sp = st
			c.userSt.Store(sp)
		}
		return nil
	}
	if err := st.Synchronize(); err != nil {
		e := c.wrap(op, err)
		c.setAsync(e)
		return e
	}
	return nil
}

// traceP2P records a traced communicator's point-to-point call that began
// at t0 (its bytes: what this rank sends) as one span; its phases are not
// split.
func (c *Comm) traceP2P(op string, ops []P2POp, m *executor.P2PMatrix, t0 int64) {
	tr := c.tr
	var bytes int64
	for _, o := range ops {
		if !o.Recv {
			bytes += o.Count * int64(o.DataType.Size())
		}
	}
	if m != nil && len(m.Counts) == c.n*c.n {
		for _, v := range m.Counts[c.rank*c.n : (c.rank+1)*c.n] {
			bytes += v * int64(m.DataType.Size())
		}
	}
	name := fmt.Sprintf("%s %d B", op, bytes)
	if m == nil {
		name = fmt.Sprintf("%s %d ops %d B", op, len(ops), bytes)
	}
	args := &trace.Args{Coll: op, Bytes: bytes, Schedule: c.last.Name, Launch: c.last.Launch}
	tr.t.Span(tr.pid, tidCalls, "call", name, t0, now(), args)
}

func p2pIs(err error) bool { _, _, ok := p2pCode(err); return ok }

// p2pCode classifies a point-to-point launch's failure (wrapErr): a
// mismatch is the user's (InvalidUsage), a GPU matrix past its plan
// InvalidArgument, both naming the peer.
func p2pCode(err error) (Code, string, bool) {
	switch {
	case errors.Is(err, launch.ErrP2PMismatch):
		return InvalidUsage, "a send and its receive disagree", true
	case errors.Is(err, launch.ErrP2PMatrix):
		return InvalidArgument, "the AlltoAllv counts matrices", true
	}
	return 0, "", false
}
