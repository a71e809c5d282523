package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/ir"
)

type importCmd struct {
	cmd *cobra.Command
	s   cli.Streams
	out string
}

func newImportCmd(s cli.Streams) *importCmd {
	c := &importCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "import FILE [-o OUT.json]",
		Short: "Convert MSCCL XML, an MSCCL++ plan or textual IR to Theseus schedule JSON",
		Long: `import reads FILE in any input format (MSCCL XML, an MSCCL++ v0.7 or v0.8+
execution plan, textual IR, Theseus JSON, or a bundle with embedded source) and
writes the program as canonical Theseus schedule JSON, to OUT or standard
output. The importers' warnings and notes (for example LL128 mapped to Simple)
go to standard error. import converts; it does not verify (run lint).

The conversion is checked: the JSON written parses back to the same program
(compared in the textual IR); a mismatch is an internal failure (exit 3).
docs/importers.md maps every attribute and op of the foreign formats.`,
		Example: `  theseusc import corpus/msccl-xml/allreduce_ring.xml -o ring.json
  theseusc import plan.json > plan_theseus.json`,
		Args: cli.ExactArgs(1, "one FILE"),
	}
	c.cmd.Flags().StringVarP(&c.out, "output", "o", "", `file to write ("-" or absent: standard output)`)
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *importCmd) run(_ *cobra.Command, args []string) error {
	src, err := loadProgram(args[0], c.s)
	if err != nil {
		return err
	}
	out, err := toJSON(src.Program)
	if err != nil {
		return err
	}
	return writeOutput(c.out, out, c.s.Out)
}

// toJSON formats p as Theseus JSON and checks that the text parses back to
// the same program (compared through ir.Print, which ignores positions).
func toJSON(p *ir.Program) ([]byte, error) {
	out, err := schedjson.Format(p)
	if err != nil {
		return nil, cli.Internal(fmt.Errorf("formatting %s: %w", p.Name, err))
	}
	if err := roundTrip(p, out); err != nil {
		return nil, err
	}
	return out, nil
}

// roundTrip checks that out, p's JSON, parses back to p (an internal
// error otherwise).
func roundTrip(p *ir.Program, out []byte) error {
	back, ds := schedjson.Parse(p.File, out)
	if back == nil {
		return cli.Internal(fmt.Errorf("round trip: the JSON written for %s does not parse: %v", p.Name, ds))
	}
	var a, b strings.Builder
	ea, eb := ir.Print(&a, p), ir.Print(&b, back)
	if ea != nil || eb != nil || a.String() != b.String() {
		return cli.Internal(fmt.Errorf("round trip: the JSON written for %s parses to a different program", p.Name))
	}
	return nil
}
