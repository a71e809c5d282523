package comm

import (
	"errors"
	"fmt"
	"strings"
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
		fmt.Fprintf(&b, " (%s %s)", s, strings.Trim(fmt.Sprint(e.Peers), "[]"))
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
