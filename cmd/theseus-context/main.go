// Command theseus-context publishes to Theseus selection contexts
// (docs/contextd.md): schedules with their policies (new sched),
// attributes (new attr) and exogenous values (set), through the context
// daemon theseus-contextd, which replicates them to every node, or with
// --local DIR straight into one directory. Every publication is validated
// first: schedules verified, expressions type-checked and compiled (and
// published precompiled), values checked against their attribute's type.
package main

import (
	"os"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

func main() {
	s := cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}
	os.Exit(int(run(os.Args[1:], s)))
}

// run is the whole program, callable in-process (the tests do).
func run(args []string, s cli.Streams) cli.ExitCode {
	return cli.Execute(newRoot(s), args, s)
}
