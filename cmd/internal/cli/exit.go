// Package cli holds what Theseus's command-line tools share: named exit
// codes and the typed error that carries them (ExitError), the cobra
// plumbing that turns a command tree into an exit code (Execute), the
// output-format registry behind --format/--json (Formats, OutputFlags),
// reading and format detection of schedule files (Load, Detect), and the
// printers for diagnostics (docs/theseusc.md describes them all).
package cli

import (
	"errors"
	"fmt"
)

// ExitCode is a process exit status. The values are part of every tool's
// interface (docs/theseusc.md, "Exit codes") and never change.
type ExitCode int

const (
	// ExitOK: the command did its job and found nothing wrong (warnings
	// and notes allowed).
	ExitOK ExitCode = 0
	// ExitFindings: the command ran and found problems in its input:
	// error diagnostics, a simulated case with wrong elements, no schedule
	// selected.
	ExitFindings ExitCode = 1
	// ExitUsage: the command line is wrong: an unknown command or flag,
	// a bad flag value, a missing or unreadable input file, an input of an
	// unknown format.
	ExitUsage ExitCode = 2
	// ExitInternal: the tool itself failed (a compiler pass panicked, an
	// output could not be written, a self-check failed).
	ExitInternal ExitCode = 3
	// ExitRetry: a service the tool needs could not do the job now, and
	// the same command may be run again: theseus-context when the context
	// daemon's replicated log has no quorum, or when the daemon closed the
	// connection before answering (docs/contextd.md).
	ExitRetry ExitCode = 4
)

func (c ExitCode) String() string {
	switch c {
	case ExitOK:
		return "ok"
	case ExitFindings:
		return "findings"
	case ExitUsage:
		return "usage error"
	case ExitInternal:
		return "internal failure"
	case ExitRetry:
		return "retry"
	}
	return fmt.Sprintf("exit code %d", int(c))
}

// ExitError is an error that decides the exit code. Quiet errors have
// already been reported (for example diagnostics printed by lint), so
// Execute prints nothing more for them.
type ExitError struct {
	Code  ExitCode
	Err   error
	Quiet bool
}

func (e *ExitError) Error() string {
	if e.Err == nil {
		return e.Code.String()
	}
	return e.Err.Error()
}

func (e *ExitError) Unwrap() error { return e.Err }

// Usagef returns a usage error (ExitUsage).
func Usagef(format string, args ...any) error {
	return &ExitError{Code: ExitUsage, Err: fmt.Errorf(format, args...)}
}

// Usage wraps err as a usage error (ExitUsage); nil stays nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: ExitUsage, Err: err}
}

// Findings returns the quiet error of a command that has printed its
// findings (ExitFindings).
func Findings() error { return &ExitError{Code: ExitFindings, Quiet: true} }

// Findingsf returns a findings error (ExitFindings) with a message.
func Findingsf(format string, args ...any) error {
	return &ExitError{Code: ExitFindings, Err: fmt.Errorf(format, args...)}
}

// Retry wraps err as ExitRetry; nil stays nil.
func Retry(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: ExitRetry, Err: err}
}

// Internal wraps err as an internal failure (ExitInternal); nil stays nil.
func Internal(err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: ExitInternal, Err: err}
}

// CodeOf returns the exit code for err: ExitOK for nil, the code of an
// *ExitError in its chain, and ExitInternal for any other error.
func CodeOf(err error) ExitCode {
	if err == nil {
		return ExitOK
	}
	var e *ExitError
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitInternal
}
