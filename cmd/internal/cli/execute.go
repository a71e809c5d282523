package cli

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Streams are a command's standard input, output and error.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// RunE adapts f to cobra's RunE so that every error it returns carries an
// exit code: an *ExitError keeps its own, any other error is an internal
// failure (ExitInternal). Errors that cobra itself produces before RunE
// (unknown commands, flags, argument counts) are usage errors (Execute).
func RunE(f func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := f(cmd, args)
		if err == nil {
			return nil
		}
		var e *ExitError
		if errors.As(err, &e) {
			return err
		}
		return Internal(err)
	}
}

// Execute runs the command tree root with args (os.Args[1:]) on the given
// streams and returns the exit code. Errors are printed once, to s.Err, as
// "COMMAND: message"; usage errors add a pointer to --help. Errors that
// do not carry an exit code (those cobra returns for unknown commands,
// unknown flags and wrong argument counts) are usage errors. Execute sets
// root's streams and silences cobra's own error and usage printing.
func Execute(root *cobra.Command, args []string, s Streams) ExitCode {
	root.SetArgs(args)
	if s.In != nil {
		root.SetIn(s.In)
	}
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	root.SilenceErrors = true
	root.SilenceUsage = true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return Usage(err) })
	cmd, err := root.ExecuteC()
	if err == nil {
		return ExitOK
	}
	if cmd == nil {
		cmd = root
	}
	var e *ExitError
	if !errors.As(err, &e) {
		e = &ExitError{Code: ExitUsage, Err: err}
	}
	if !e.Quiet {
		fmt.Fprintf(s.Err, "%s: %v\n", cmd.CommandPath(), e)
		if e.Code == ExitUsage {
			fmt.Fprintf(s.Err, "Run '%s --help' for usage.\n", cmd.CommandPath())
		}
	}
	return e.Code
}

// ExactArgs is cobra.ExactArgs with a message that names the operands.
func ExactArgs(n int, operands string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return Usagef("want %s, got %d argument(s)", operands, len(args))
		}
		return nil
	}
}

// MinArgs is cobra.MinimumNArgs with a message that names the operands.
func MinArgs(n int, operands string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return Usagef("want %s, got %d argument(s)", operands, len(args))
		}
		return nil
	}
}
