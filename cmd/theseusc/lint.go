package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
)

type lintCmd struct {
	cmd       *cobra.Command
	s         cli.Streams
	out       *cli.OutputFlags
	maxErrors *int
}

func newLintCmd(s cli.Streams) *lintCmd {
	c := &lintCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "lint FILE...",
		Short: "Check schedules: parse or import, verify, legalise, verify again",
		Long: `lint checks each FILE (any input format; "-" reads standard input) as the
compiler would before publishing it: the frontend checks the format, the
verifier proves the input (structure, synchronisation, deadlock freedom, data
races, the collective's postcondition), the program is legalised to primitive
ops and proven again. A bundle's tables are decoded and checked against each
other, and its embedded source, if any, is linted like a schedule.

A directory is linted as a selection context: every manifest and value-log
line, both policy expressions of every schedule entry (a policy reading a
rank-local attribute gets the TS0212 warning: it costs an agreement step),
and every schedule file the manifest names.

Each diagnostic is printed as
  file:line:col: severity[code]: rank r tb t step s: message (hint: ...)
or, with --json, as one JSON object. Exit 0 when no file has an error
(warnings allowed), 1 when any has, 2 on a usage error.`,
		Example: `  theseusc lint examples/*.json
  theseusc lint --json corpus/msccl-xml/ring.xml`,
		Args: cli.MinArgs(1, "at least one FILE"),
	}
	c.out = cli.AddOutputFlags(c.cmd, cli.DiagnosticPrinters)
	c.maxErrors = cli.AddMaxErrors(c.cmd)
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *lintCmd) run(_ *cobra.Command, args []string) error {
	pr, err := cli.Resolve(c.out, cli.DiagnosticPrinters)
	if err != nil {
		return err
	}
	if err := cli.CheckMaxErrors(*c.maxErrors); err != nil {
		return err
	}
	rep := &cli.Report{MaxErrors: *c.maxErrors}
	vo := verify.Options{MaxErrors: *c.maxErrors}
	for _, path := range args {
		if st, err := os.Stat(path); err == nil && st.IsDir() {
			ds, err := lintContext(path, vo)
			if err != nil {
				return err
			}
			rep.Add(path, cli.KindContext, ds)
			continue
		}
		src, err := cli.Load(path, c.s.In)
		if err != nil {
			return err
		}
		ds, err := lintSource(src, vo)
		if err != nil {
			return cli.Internal(fmt.Errorf("%s: %w", path, err))
		}
		rep.Add(path, src.Kind, ds)
	}
	if err := pr(c.s.Out, rep); err != nil {
		return cli.Internal(err)
	}
	if rep.Errors+rep.Dropped > 0 {
		fmt.Fprintf(c.s.Err, "lint: %d error(s), %d warning(s) in %d file(s)\n", rep.Errors+rep.Dropped, rep.Warnings, len(args))
		return cli.Findings()
	}
	return nil
}

// lintSource returns every diagnostic of one loaded file: the frontend's,
// a bundle's table checks, and those of verify-input, legalize and verify.
// The error is an internal failure of a pass.
func lintSource(src *cli.Source, vo verify.Options) ([]diag.Diagnostic, error) {
	ds := append([]diag.Diagnostic(nil), src.Diags...)
	if src.Bundle != nil {
		ds = append(ds, checkBundle(src)...)
	}
	if src.Program != nil {
		st, err := check(src.Program, passes.Options{Verify: vo})
		if st != nil {
			ds = append(ds, st.Diags...)
		}
		if err != nil {
			return cli.Dedupe(ds), err
		}
	}
	return cli.Dedupe(ds), nil
}

// checkBundle checks what a bundle's Decode does not: every rank's table
// decodes, validates and agrees with the bundle's metadata and resources
// (Bundle.Table), and the tables agree with each other (CheckTables).
func checkBundle(src *cli.Source) []diag.Diagnostic {
	b := src.Bundle
	var ds []diag.Diagnostic
	tableDiag := func(rank int, err error) diag.Diagnostic {
		d := cli.FileDiag(src.Path, diag.Syntax, diag.Error, err.Error(), "rebuild the bundle with theseusc compile")
		var ve *optable.ValidationError
		if errors.As(err, &ve) && ve.Code != "" {
			d.Code, d.Rank, d.TB, d.Step, d.Msg = ve.Code, rank, ve.TB, ve.Step, "op table: "+ve.Msg
		} else if rank >= 0 {
			d.Msg = fmt.Sprintf("rank %d: %v", rank, err)
		}
		return d
	}
	for r := range b.Tables {
		if _, err := b.Table(r); err != nil {
			ds = append(ds, tableDiag(r, err))
		}
	}
	if len(ds) == 0 {
		if err := b.CheckTables(); err != nil {
			ds = append(ds, tableDiag(-1, err))
		}
	}
	if b.Source == nil {
		ds = append(ds, cli.FileDiag(src.Path, diag.ImportNote, diag.Note,
			"the bundle carries no source: only its tables were checked", "compile with --embed-source to lint the schedule too"))
	}
	return ds
}
