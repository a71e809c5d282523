package main

import (
	"bufio"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/ir"
)

type printCmd struct {
	cmd      *cobra.Command
	s        cli.Streams
	legalize bool
}

func newPrintCmd(s cli.Streams) *printCmd {
	c := &printCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "print FILE",
		Short: "Print a schedule in the textual IR",
		Long: `print writes FILE (any input format) in the textual IR (docs/ir-text.md), which
irtext parses back to the same program. For a bundle it prints the embedded
source. With --legalize it prints the program after the legalize pass (the
primitive ops the executor runs).`,
		Example: `  theseusc print examples/allreduce_ring_8rank_simple.json
  theseusc print --legalize corpus/msccl-xml/ring.xml`,
		Args: cli.ExactArgs(1, "one FILE"),
	}
	c.cmd.Flags().BoolVar(&c.legalize, "legalize", false, "print the legalised (primitive-level) program")
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *printCmd) run(_ *cobra.Command, args []string) error {
	src, err := loadProgram(args[0], c.s)
	if err != nil {
		return err
	}
	p := src.Program
	if c.legalize && p.Level() == ir.LevelTransfer {
		st, err := runLegalize(p)
		if err != nil {
			return err
		}
		cli.PrintDiags(c.s.Err, st.Diags)
		if cli.CountErrors(st.Diags) > 0 {
			return cli.Findings()
		}
		p = st.Prog
	}
	w := bufio.NewWriterSize(c.s.Out, 1<<16)
	if err := ir.Print(w, p); err != nil {
		w.Flush()
		return cli.Internal(err)
	}
	return cli.Internal(w.Flush())
}
