package theseus

import (
	"fmt"
	"slices"

	"github.com/theseus-ccl/theseus/runtime/comm"
)

// Point-to-point calls (docs/p2p.md): ncclSend, ncclRecv and their groups,
// and ncclAlltoAllv, run natively by the point-to-point engine. NCCL 2.25
// semantics: a group's sends and receives are matched per pair of ranks in
// order, and a send and its receive must agree on count and datatype (a
// mismatch fails within THESEUS_TIMEOUT, naming the pair; it never corrupts
// memory). Point-to-point calls are issued by the ranks concerned only.
//
//	c.GroupStart()
//	c.Send(sendbuf, n, theseus.Float32, (rank+1)%nranks, s)
//	c.Recv(recvbuf, n, theseus.Float32, (rank+nranks-1)%nranks, s)
//	err := c.GroupEnd()

// p2pGroup is a Comm's open group (GroupStart … GroupEnd).
type p2pGroup struct {
	depth   int
	ops     []comm.P2POp
	streams []Stream // each op's stream (nil: the communicator's)
	err     error
}

// GroupStart opens a group (ncclGroupStart): Send and Recv calls up to the
// matching GroupEnd run as one launch there. Groups nest; the outermost
// GroupEnd runs them. Collectives and AlltoAllv called inside a group run
// at once (as the NCCL library runs a group's collectives before its
// point-to-point calls).
func (c *Comm) GroupStart() { c.group.depth++ }

// GroupEnd closes a group (ncclGroupEnd); the outermost one launches the
// group's sends and receives, matched per pair of ranks in order. A group
// whose ops use several streams launches on the first op's stream, which
// first waits for the others, and the others then wait for it (as NCCL
// joins a group's streams). If every op gave a nil stream, GroupEnd waits
// for the launch. A group in which a call failed is abandoned: nothing runs
// and the first error is returned (NCCL 2.25). Errors: InvalidUsage without
// an open group; comm.Comm.P2P's.
func (c *Comm) GroupEnd() error {
	g := &c.group
	if g.depth == 0 {
		return &Error{Code: InvalidUsage, Op: "GroupEnd", Rank: c.Rank(), Msg: "no group is open (GroupStart was not called)"}
	}
	g.depth--
	if g.depth > 0 {
		return nil
	}
	ops, streams, err := g.ops, g.streams, g.err
	// (the next group reuses the lists: nothing below keeps them)
	g.ops, g.streams, g.err = ops[:0], streams[:0], nil
	if err != nil {
		return err
	}
	return c.runP2P(ops, streams, true)
}

// runP2P launches ops (their streams: streams) as one group: on the first
// op's stream, joined with the others (comm.P2PCall.Join). checked: every
// op has passed ValidateP2POp (comm.P2PCall.Checked).
func (c *Comm) runP2P(ops []comm.P2POp, streams []Stream, checked bool) error {
	if len(ops) == 0 {
		return nil
	}
	call := comm.P2PCall{Ops: ops, Checked: checked}
	for _, s := range streams {
		switch {
		case s == nil:
		case call.Stream == nil:
			call.Stream = s
		case s != call.Stream && !slices.Contains(call.Join, s):
			call.Join = append(call.Join, s)
		}
	}
	return c.c.P2P(c.ctx, &call)
}

func (c *Comm) p2p(recv bool, buf Ptr, count int64, dt DataType, peer int, s Stream) error {
	api := "Send"
	if recv {
		api = "Recv"
	}
	t, ok := dt.IR()
	if !ok {
		err := &Error{Code: InvalidArgument, Op: api, Rank: c.Rank(), Msg: fmt.Sprintf("datatype %d out of range (0..%d)", int32(dt), NumTypes-1)}
		if c.group.depth > 0 && c.group.err == nil {
			c.group.err = err
		}
		return err
	}
	op := comm.P2POp{Recv: recv, Peer: peer, Buf: buf, Count: count, DataType: t}
	if c.group.depth == 0 {
		return c.runP2P([]comm.P2POp{op}, []Stream{s}, false)
	}
	// Checked now, as NCCL checks a call's arguments when it is made: a
	// bad call abandons its group.
	if err := c.c.ValidateP2POp(op); err != nil {
		if c.group.err == nil {
			c.group.err = err
		}
		return err
	}
	c.group.ops = append(c.group.ops, op)
	c.group.streams = append(c.group.streams, s)
	return nil
}

// Send is ncclSend: count elements of dt from buf to rank peer, matched
// with peer's next Recv from this rank (NCCL 2.25). Outside a group it is
// a group of one. peer may be this rank (paired with a Recv from itself in
// the same group). s nil: the communicator's stream, and (outside a group)
// the call waits. Errors: InvalidArgument (peer out of range, a bad
// datatype or count, a NULL buffer with count > 0, a buffer too small
// for count in its allocation); see GroupEnd.
func (c *Comm) Send(buf Ptr, count int64, dt DataType, peer int, s Stream) error {
	return c.p2p(false, buf, count, dt, peer, s)
}

// Recv is ncclRecv: count elements of dt into buf from rank peer, matched
// with peer's next Send to this rank. As Send otherwise.
func (c *Comm) Recv(buf Ptr, count int64, dt DataType, peer int, s Stream) error {
	return c.p2p(true, buf, count, dt, peer, s)
}

// AlltoAllv is ncclAlltoAllv (the seed's extension): rank i sends
// counts[i*nranks+j] elements of dt to rank j. Each rank's send holds its
// row's blocks in rank order, its recv its column's. counts is the CPU
// copy of the matrix, which plans the call; countsDev is the device copy
// (nranks x nranks uint64 in the backend's memory), which the launch reads:
// within the CPU copy's totals for this rank's row and column, the device
// copy governs (a CUDA graph's replay may follow a changed device matrix).
// Errors: InvalidArgument for a matrix of the wrong size, a negative or
// overflowing total, a NULL countsDev, NULL or too small buffers; the
// launch's (a device matrix past the CPU one's totals, or different from it
// with THESEUS_ALLTOALLV_CHECK, fails with InvalidArgument).
func (c *Comm) AlltoAllv(send, recv Ptr, counts []int64, countsDev Ptr, dt DataType, s Stream) error {
	t, ok := dt.IR()
	if !ok {
		return &Error{Code: InvalidArgument, Op: "AlltoAllv", Rank: c.Rank(), Msg: fmt.Sprintf("datatype %d out of range (0..%d)", int32(dt), NumTypes-1)}
	}
	return c.c.AlltoAllv(c.ctx, &comm.AlltoAllvCall{Send: send, Recv: recv, Counts: counts, GPU: countsDev, DataType: t, Stream: s})
}

// P2PInfo describes the point-to-point engine's parameters the
// communicator would use now: the geometry, and the selection context's
// entry they come from (-1: the built-in parameters).
func (c *Comm) P2PInfo() (chunkBytes int64, slots, channels, entry int) {
	p, id := c.c.P2PParams()
	return p.Geometry.ChunkBytes, p.Geometry.Slots, p.Geometry.Channels, id
}
