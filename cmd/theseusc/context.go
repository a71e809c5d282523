package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/examples/contexts"
)

// newContextCmd is `theseusc context`: selection context directories (one
// subcommand, init).
func newContextCmd(s cli.Streams) *cobra.Command {
	parent := &cobra.Command{
		Use:   "context",
		Short: "Selection context directories: context init DIR",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprint(s.Err, cmd.UsageString())
			return cli.Usagef("a context subcommand is required (init)")
		},
	}
	c := &cobra.Command{
		Use:   "init DIR",
		Short: "Start a writable selection context from the built-in default",
		Long: `context init writes the default selection context that theseusc, theseus-bench
and libtheseus_nccl.so carry built in (examples/contexts/default: generated
schedule entries for every collective and communicator shape, their policies,
and the value logs of slow_rank and ll_max_bytes) into DIR, creating it.

The built-in context is read-only (the runtime materialises it under the
user's cache directory); to publish schedules or attribute values, start a
context of your own from it and point THESEUS_SELECTION_CONTEXT at it, or
write it to ~/.theseus/contexts/default, which the runtime reads when the
variable is unset (docs/selection-context.md, "Which context").

Files DIR already holds with the same contents are kept; a file with
different contents is an error (a context is append-only while in use, so
nothing is overwritten).`,
		Example: `  theseusc context init ~/.theseus/contexts/default
  theseusc context init /tmp/ctx && THESEUS_SELECTION_CONTEXT=/tmp/ctx theseus-bench`,
		Args: cli.ExactArgs(1, "a DIR"),
		RunE: cli.RunE(func(_ *cobra.Command, args []string) error {
			dir := args[0]
			if st, err := os.Stat(dir); err == nil && !st.IsDir() {
				return cli.Usagef("%s is not a directory", dir)
			}
			err := contexts.Materialize(dir)
			switch {
			case errors.Is(err, contexts.ErrExists):
				return cli.Usagef("%v: %s already holds another context's files", err, dir)
			case err != nil:
				return cli.Usagef("writing the default context to %s: %v", dir, err)
			}
			fmt.Fprintf(s.Err, "context: wrote the default selection context to %s (%d files)\n", dir, len(contexts.Files()))
			return nil
		}),
	}
	parent.AddCommand(c)
	return parent
}
