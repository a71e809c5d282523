package abi

import (
	"errors"
	"fmt"
)

// Result is ncclResult_t with its NCCL 2.25.1 values (nccl.h).
type Result int32

// The ncclResult_t values. NumResults is 8 in NCCL 2.25 (2.28's ncclTimeout
// is not part of this ABI).
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
	NumResults         Result = 8
)

var resultNames = [...]string{"ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
	"ncclInvalidArgument", "ncclInvalidUsage", "ncclRemoteError", "ncclInProgress"}

// resultTexts are what ncclGetErrorString returns (NCCL's wording, with
// Theseus's variable names in the hints).
var resultTexts = [...]string{
	"no error",
	"unhandled cuda error (run with THESEUS_DEBUG=INFO for details)",
	"unhandled system error (run with THESEUS_DEBUG=INFO for details)",
	"internal error - please report this issue to the Theseus developers",
	"invalid argument (run with THESEUS_DEBUG=WARN for details)",
	"invalid usage (run with THESEUS_DEBUG=WARN for details)",
	"remote process exited or there was a network error",
	"Theseus operation in progress",
}

func (r Result) String() string {
	if r >= 0 && int(r) < len(resultNames) {
		return resultNames[r]
	}
	return fmt.Sprintf("ncclResult(%d)", int32(r))
}

// Text is the ncclGetErrorString message of r ("unknown result code" for a
// value outside 0..7).
func (r Result) Text() string {
	if r >= 0 && int(r) < len(resultTexts) {
		return resultTexts[r]
	}
	return "unknown result code"
}

// ResultTexts lists every message of ResultText in value order (the C layer
// keeps them in static storage).
func ResultTexts() []string { return resultTexts[:] }

// Error is a failed NCCL call: the result returned to the caller and the
// reason that is logged and kept for ncclGetLastError.
type Error struct {
	Result Result
	Msg    string
	Err    error // the runtime error behind it, if any
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

func errorf(r Result, format string, args ...any) *Error {
	return &Error{Result: r, Msg: fmt.Sprintf(format, args...)}
}

// ResultOf maps err to a Result: nil is Success, an *Error its Result, an
// error with an NCCLResult() method that result, and anything else
// InternalError.
func ResultOf(err error) Result {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Result
	}
	var r interface{ NCCLResult() int }
	if errors.As(err, &r) {
		v := Result(r.NCCLResult())
		if v >= 0 && v < NumResults {
			return v
		}
	}
	return InternalError
}
