package comm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/theseus-ccl/theseus/internal/ranks"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/transport/proxy"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// Code is a result code with NCCL's ncclResult_t values (NCCL 2.25.1), so
// the NCCL layer maps an error to its result with CodeOf alone.
type Code int

const (
	Success            Code = 0
	UnhandledCudaError Code = 1
	SystemError        Code = 2
	InternalError      Code = 3
	InvalidArgument    Code = 4
	InvalidUsage       Code = 5
	RemoteError        Code = 6
	InProgress         Code = 7
)

var codeNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"}

func (c Code) String() string {
	if c >= 0 && int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", int(c))
}

// Error is every error the communicator returns: a result code, the
// operation, this rank, the ranks concerned (lost, missing, or
// misconfigured peers) and the cause.
type Error struct {
	Code  Code
	Op    string // "AllReduce", "init", "split", ...
	Rank  int
	Peers []int
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "theseus: rank %d: %s: %s", e.Rank, e.Op, e.Msg)
	if len(e.Peers) > 0 {
		s := "rank"
		if len(e.Peers) > 1 {
			s = "ranks"
		}
		fmt.Fprintf(&b, " (%s %s)", s, ranks.Format(e.Peers))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	fmt.Fprintf(&b, " [%v]", e.Code)
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the result code of err: Success for nil, the Code of an
// *Error anywhere in its chain, InternalError otherwise.
func CodeOf(err error) Code {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return InternalError
}

// Sentinels wrapped by the communicator's errors (errors.Is).
var (
	// ErrNoSchedule: no schedule of the selection context serves the
	// request (code InvalidUsage). The NCCL layer falls back to the real
	// NCCL.
	ErrNoSchedule = errors.New("no schedule serves the request")
	// ErrLayout: the job breaks one of the seed's job-layout assumptions
	// (code InvalidUsage).
	ErrLayout = errors.New("job layout")
	// ErrState: the communicator is finalized (code InvalidUsage), or
	// destroyed or aborted (code InvalidArgument: NCCL 2.25 reports a NULL
	// or invalid comm so, and the C ABI returns the same).
	ErrState = errors.New("communicator state")
	// ErrLostRank: a peer's process went away (code RemoteError).
	ErrLostRank = errors.New("lost rank")
	// ErrMismatch: the ranks issued different collectives (or the same
	// collective with different arguments, or a rank skipped a call), so
	// their schedules do not pair. User misuse, as in NCCL, where every
	// rank must issue a communicator's collectives in the same order with
	// matching arguments: code InvalidUsage on the rank that finds it,
	// RemoteError (naming that rank) on the ranks it tells. The
	// communicator cannot continue; abort or destroy it.
	ErrMismatch = errors.New("the ranks issued different collectives")
)

// StreamError classifies err, the failure of one of this communicator's
// launches as a stream reported it (device.Stream.Synchronize or Err on a
// caller's stream), as Collective classifies the failures it sees:
// RemoteError naming the silent or lost peer, or the rank that found the
// ranks issued different collectives (ErrMismatch), and so on; an *Error
// is returned as it is. op names the call ("synchronize").
//
// A launch's failure is also recorded as the communicator's asynchronous
// error (sticky: ncclCommGetAsyncError reports it from then on).
func (c *Comm) StreamError(op string, err error) *Error {
	e := c.wrapErr(op, err, false)
	if !errors.Is(err, device.ErrClosed) {
		c.setAsync(e)
		c.nodeLost(err)
	}
	return e
}

// wrap converts a failure into an *Error, naming the ranks concerned.
func (c *Comm) wrap(op string, err error) *Error { return c.wrapErr(op, err, true) }

// wrapErr is wrap; inCall says the caller holds the call (so the last
// call's schedule may be read to name suspects); AsyncError, which may run
// concurrently with a call, passes false.
func (c *Comm) wrapErr(op string, err error, inCall bool) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	out := &Error{Code: InternalError, Op: op, Rank: c.rank, Msg: "failed", Err: err}
	var be *bootstrap.Error
	var ee *executor.Error
	var ie *launch.Error
	var pe *proxy.Error
	var le *ucx.LoadError
	var ue *ucx.Error
	switch {
	case errors.As(err, &be):
		out.Code, out.Peers = RemoteError, be.Missing
		out.Msg = "peer did not answer"
		if be.Lost {
			out.Msg = "lost a peer"
		}
	case errors.Is(err, executor.ErrMismatch):
		out.Code, out.Msg, out.Err = InvalidUsage, mismatchMsg, mismatchErr{err}
	case p2pIs(err):
		out.Code, out.Msg, _ = p2pCode(err)
		if p := peerRank(err); p >= 0 {
			out.Peers = []int{p}
		}
	case errors.Is(err, executor.ErrCapture):
		out.Code, out.Msg = InvalidUsage, "graph capture"
	case errors.Is(err, executor.ErrScratchMismatch):
		out.Code, out.Msg = InvalidUsage, "scratch"
	case errors.Is(err, executor.ErrCrossNode):
		out.Code, out.Msg = InvalidUsage, "schedule does not fit the job's nodes"
	case errors.As(err, &le):
		out.Code, out.Msg = SystemError, "cross-node transport"
	case errors.As(err, &ue) && ue.Op == "ucp_init":
		// UCX found no transport or device it was allowed to use.
		out.Code, out.Msg = SystemError, "cross-node transport: UCX cannot start with this configuration (UCX_TLS, UCX_NET_DEVICES, MSCCLPP_HCA_DEVICES, MSCCLPP_SOCKET_IFNAME; docs/transport.md)"
	case errors.As(err, &pe) && pe.Peer >= 0:
		// A port channel's failure: UCX's status text names the cause.
		out.Code, out.Peers, out.Msg = RemoteError, []int{pe.Peer}, "port channel across nodes"
	case errors.Is(err, launch.ErrTimeout) || errors.Is(err, launch.ErrAborted):
		out.Code, out.Msg = RemoteError, "launch stopped"
		if inCall {
			out.Peers = c.suspects(err)
		} else if p := peerRank(err); p >= 0 {
			out.Peers = []int{p}
		}
	case errors.As(err, &ee) && len(ee.Peers) > 0:
		out.Code, out.Peers = RemoteError, ee.Peers
	case errors.As(err, &ie):
		out.Code = InternalError
	}
	// A peer lost meanwhile does not hide what this rank found by itself,
	// which every rank finds alike: a point-to-point mismatch, a schedule
	// that does not fit the nodes (every rank checks every rank's channel
	// ends before any exchange; the first to fail may exit before the
	// others have), a graph capture the library refuses.
	local := p2pIs(err) || errors.Is(err, executor.ErrCrossNode) || errors.Is(err, executor.ErrCapture)
	if lost := c.Lost(); len(lost) > 0 && !local {
		out.Code, out.Peers, out.Msg = RemoteError, lost, "lost a peer"
	}
	// A launch stopped because a peer found that the ranks issued
	// different collectives: say that, not "launch stopped".
	if a := c.asyncErr.Load(); a != nil && out.Code == RemoteError && errors.Is(a, ErrMismatch) && a.Code == RemoteError {
		out.Peers, out.Msg, out.Err = a.Peers, a.Msg, mismatchErr{err}
	}
	return out
}

// suspects names the peers a failed launch waited for: a fence's peer, or
// the peers at the other end of the channels of the op that timed out.
func (c *Comm) suspects(err error) []int {
	if lost := c.Lost(); len(lost) > 0 {
		return lost
	}
	if p := peerRank(err); p >= 0 {
		return []int{p}
	}
	var ie *launch.Error
	if !errors.As(err, &ie) || c.last.Schedule < 0 || c.last.Schedule >= len(c.scheds) || c.scheds[c.last.Schedule] == nil {
		return nil
	}
	b := c.scheds[c.last.Schedule].Bundle
	t, terr := b.Table(ie.Logical)
	if terr != nil || ie.TB < 0 || ie.TB >= len(t.TBs) || ie.Step < 0 || ie.Step >= len(t.TBs[ie.TB].Ops) {
		return nil
	}
	shift := (ie.Rank - ie.Logical + c.n) % c.n
	op := t.TBs[ie.TB].Ops[ie.Step]
	chans := op.Chans
	if len(chans) == 0 {
		for ch := range t.Channels {
			chans = append(chans, ch)
		}
	}
	seen := map[int]bool{}
	var out []int
	for _, ch := range chans {
		if ch >= 0 && ch < len(t.Channels) {
			p := (t.Channels[ch].Peer + shift) % c.n
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// peerRank walks err's chain for the first PeerRank() >= 0 (a fence's peer,
// or the peer a semaphore wait waited for).
func peerRank(err error) int {
	for err != nil {
		if pe, ok := err.(interface{ PeerRank() int }); ok && pe.PeerRank() >= 0 {
			return pe.PeerRank()
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if p := peerRank(e); p >= 0 {
					return p
				}
			}
			return -1
		default:
			return -1
		}
	}
	return -1
}
