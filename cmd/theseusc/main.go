// Command theseusc is the Theseus schedule compiler: it checks, compiles,
// converts, compares, generates, simulates and selects collective schedules
// (Theseus schedule JSON, MSCCL XML, MSCCL++ execution plans, textual IR and
// .tsb bundles). docs/theseusc.md describes every subcommand, flag, output
// format and exit code.
package main

import (
	"os"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

func main() {
	os.Exit(int(run(os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})))
}
