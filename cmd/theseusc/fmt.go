package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
)

type fmtCmd struct {
	cmd   *cobra.Command
	s     cli.Streams
	write bool
	list  bool
}

func newFmtCmd(s cli.Streams) *fmtCmd {
	c := &fmtCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "fmt [-w] [-l] FILE...",
		Short: "Print Theseus schedule JSON in canonical form",
		Long: `fmt rewrites Theseus schedule JSON in its canonical form (schedjson.Format,
docs/schedule-format.md §13): fixed key order, two-space indentation, one
channel and one op per line, defaults left out. Without flags it prints each
FILE's canonical form to standard output. With -l it lists the files whose
contents differ from their canonical form; with -w it rewrites them in place,
keeping their mode (a read-only file is refused, exit 2).

fmt reads Theseus JSON only; use "theseusc import" for MSCCL XML, MSCCL++
plans and textual IR. A file that does not parse is reported on standard
error and left alone (exit 1).`,
		Example: `  theseusc fmt examples/allreduce_ring_8rank_simple.json
  theseusc fmt -l examples/*.json
  theseusc fmt -w my_schedule.json`,
		Args: cli.MinArgs(1, "at least one FILE"),
	}
	c.cmd.Flags().BoolVarP(&c.write, "write", "w", false, "rewrite files that differ in place")
	c.cmd.Flags().BoolVarP(&c.list, "list", "l", false, "list files that differ from their canonical form")
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *fmtCmd) run(_ *cobra.Command, args []string) error {
	failed := false
	for _, path := range args {
		if c.write && path == "-" {
			return cli.Usagef("-w cannot rewrite standard input")
		}
		src, err := cli.Load(path, c.s.In)
		if err != nil {
			return err
		}
		if src.Kind != cli.KindTheseus {
			return cli.Usagef("%s is %s, not Theseus JSON: use theseusc import to convert it", path, src.Kind)
		}
		cli.PrintDiags(c.s.Err, src.Diags)
		if src.Program == nil {
			failed = true
			continue
		}
		out, err := schedjson.Format(src.Program)
		if err != nil {
			return cli.Internal(fmt.Errorf("%s: %w", path, err))
		}
		differs := !bytes.Equal(out, src.Data)
		if c.list && differs {
			fmt.Fprintln(c.s.Out, path)
		}
		if c.write && differs {
			mode := os.FileMode(0o644)
			if st, err := os.Stat(path); err == nil {
				mode = st.Mode().Perm()
			}
			// The rewrite replaces the file through its directory, which
			// would succeed on a read-only file: refuse, as gofmt -w does.
			if mode&0o200 == 0 {
				return cli.Usagef("%s is read-only (mode %#o): not rewritten; make it writable first", path, mode)
			}
			if err := writeFileAtomic(path, out, mode); err != nil {
				return err
			}
		}
		if !c.list && !c.write {
			if _, err := c.s.Out.Write(out); err != nil {
				return cli.Internal(err)
			}
		}
	}
	if failed {
		return cli.Findings()
	}
	return nil
}
