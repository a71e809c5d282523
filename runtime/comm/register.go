package comm

import (
	"context"
	"errors"
	"fmt"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/executor"
)

// Register records the allocation holding [p, p+n) for the communicator
// (ncclCommRegister, NCCL 2.25 semantics: a local call) and returns the
// registration's id, never 0. Schedules that reach peers' buffers import a
// registered allocation as they do any other; what registration adds is
// Deregister. Errors (*Error): InvalidArgument for a null or empty range;
// ErrState on a communicator that is not live.
func (c *Comm) Register(p device.Ptr, n int64) (uint64, error) {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	if e, bad := c.stateErr("register"); bad {
		return 0, e
	}
	reg, err := c.exec.Register(p, n)
	if err != nil {
		return 0, &Error{Code: InvalidArgument, Op: "register", Rank: c.rank, Msg: "buffer", Err: err}
	}
	return reg.ID, nil
}

// Deregister removes registration id (ncclCommDeregister). When it was its
// allocation's last registration, every cache entry of the allocation is
// gone before it returns — this rank's, and every peer's import of it (the
// peers' service goroutines drop them; their calls take no part) — so the
// allocation may be freed afterwards, on the CUDA backend too (the seed's
// Known Issue 1). A peer that is lost is not waited for. Errors (*Error):
// InvalidArgument for an id that is not a registration of this
// communicator; ErrState on a destroyed or aborted communicator;
// RemoteError (naming the peer) when a peer does not answer within the
// timeout or refuses, for instance because a launch captured into a CUDA
// graph still reads the allocation (keep it until the communicator is
// destroyed).
func (c *Comm) Deregister(id uint64) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.replaySync()
	switch commState(c.state.Load()) {
	case destroyed, aborted:
		e, _ := c.stateErr("deregister")
		return e
	}
	err := c.exec.Deregister(context.Background(), id)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, executor.ErrNotRegistered):
		return &Error{Code: InvalidArgument, Op: "deregister", Rank: c.rank, Msg: fmt.Sprintf("handle %d", id), Err: err}
	}
	e := c.wrapErr("deregister", err, false)
	if e.Code == InternalError {
		e.Code = RemoteError
	}
	return e
}

// Registered reports whether the allocation holding [p, p+n) is registered
// with the communicator, and its identity (executor.Executor.Registered):
// the hook through which the point-to-point engine learns which buffers
// may take zero-copy paths. Not concurrent with calls.
func (c *Comm) Registered(p device.Ptr, n int64) (executor.Registration, bool) {
	return c.exec.Registered(p, n)
}
