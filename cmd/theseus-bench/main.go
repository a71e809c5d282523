// Command theseus-bench is Theseus's main job: nccl-tests for Theseus. With
// no arguments it runs 4 ranks as goroutines of one process on the host
// backend (the CPU reference), with the embedded default selection context,
// over every collective at sizes 8 B to 64 MiB, and prints nccl-tests'
// columns plus the schedule each row ran; then it demonstrates a hot swap.
// Launched by mpirun or torchrun (RANK/WORLD_SIZE and MASTER_ADDR/PORT, or
// a unique-id file), each process is one rank. docs/theseus-bench.md
// describes every flag, column and formula.
package main

import (
	"os"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

func main() {
	os.Exit(int(run(os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})))
}

// run is the whole program, callable in-process (the tests do).
func run(args []string, s cli.Streams) cli.ExitCode {
	return cli.Execute(newRoot(s), args, s)
}
