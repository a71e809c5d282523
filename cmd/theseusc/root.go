package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

// run builds a fresh command tree and runs it with args: the whole program,
// callable in-process (the tests do).
func run(args []string, s cli.Streams) cli.ExitCode {
	return cli.Execute(newRoot(s), args, s)
}

// newRoot returns the root command with every subcommand.
func newRoot(s cli.Streams) *cobra.Command {
	root := &cobra.Command{
		Use:   "theseusc",
		Short: "The Theseus schedule compiler",
		Long: `theseusc checks, compiles, converts, compares, generates, simulates and selects
collective-communication schedules.

Inputs may be Theseus schedule JSON (.json with "version"), MSCCL XML (.xml),
MSCCL++ execution plans (.json without "version"), textual IR (.tir) or
compiled bundles (.tsb); the format is detected from the name and contents.

Exit codes: 0 clean, 1 findings (errors in the input, wrong simulation
results, no schedule selected), 2 usage error, 3 internal failure.`,
		Version:           versionString(),
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetVersionTemplate("{{.Version}}\n")
	// No subcommand is a usage error (exit 2), as for go and git: the
	// usage goes to standard error. theseusc --help still prints the help
	// on standard output and exits 0 (cobra answers --help before RunE).
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		fmt.Fprint(s.Err, cmd.UsageString())
		return cli.Usagef("a subcommand is required")
	}
	root.AddCommand(
		newLintCmd(s).cmd,
		newCompileCmd(s).cmd,
		newDiffCmd(s).cmd,
		newFmtCmd(s).cmd,
		newPrintCmd(s).cmd,
		newImportCmd(s).cmd,
		newGenCmd(s).cmd,
		newSimCmd(s).cmd,
		newSelectCmd(s).cmd,
		newContextCmd(s),
		newVersionCmd(s).cmd,
	)
	return root
}
