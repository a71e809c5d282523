package main

import (
	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/diff"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/compiler/verify"
)

type diffCmd struct {
	cmd *cobra.Command
	s   cli.Streams
	out *cli.OutputFlags
}

func newDiffCmd(s cli.Streams) *diffCmd {
	c := &diffCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "diff A B",
		Short: "Show the resources and ops that change from schedule A to schedule B",
		Long: `diff prints what a runtime running schedule A must create, keep, rebase or
release to run schedule B instead (compiler/diff, the same delta the executor's
migration uses): channel ends, semaphores, connections and buffer registrations
kept, added (+) and removed (-), rebased semaphores (~), scratch and op changes,
and the migration cost in cross-rank exchanges. --json prints the same content
as JSON.

A and B may be in any input format. Transfer-level programs are legalised
first, since their channels and scratch exist only after legalisation; a
bundle is compared by its resource summary. Exit 0 whether or not they differ;
1 when either does not parse or verify (its diagnostics instead of a delta).`,
		Example: `  theseusc diff examples/allreduce_ring_8rank_simple.json examples/allreduce_ring_8rank_2ch_simple.json
  theseusc diff --json a.tsb b.tsb`,
		Args: cli.ExactArgs(2, "two files, A and B"),
	}
	c.out = cli.AddOutputFlags(c.cmd, cli.DiffPrinters)
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *diffCmd) run(_ *cobra.Command, args []string) error {
	pr, err := cli.Resolve(c.out, cli.DiffPrinters)
	if err != nil {
		return err
	}
	var srcs [2]*cli.Source
	bad := false
	for i, path := range args {
		src, err := cli.Load(path, c.s.In)
		if err != nil {
			return err
		}
		cli.PrintDiags(c.s.Err, src.Diags)
		bad = bad || src.HasErrors() || (src.Program == nil && src.Bundle == nil)
		srcs[i] = src
	}
	if bad {
		return cli.Findings()
	}
	// A delta of a schedule that does not verify means nothing (a peer
	// outside the program, a race): verify both, as lint does, and report
	// errors (exit 1) instead of a delta.
	for _, src := range srcs {
		if src.Program == nil {
			continue // a bundle was verified when it was compiled
		}
		st, err := check(src.Program, passes.Options{Verify: verify.Options{}})
		if st != nil {
			if n := cli.CountErrors(st.Diags); n > 0 {
				cli.PrintDiags(c.s.Err, cli.Dedupe(st.Diags))
				bad = true
			}
		}
		if err != nil {
			return err
		}
	}
	if bad {
		return cli.Findings()
	}
	a, b := srcs[0], srcs[1]
	var d *diff.Delta
	switch {
	case a.Bundle != nil && b.Bundle != nil:
		if d, err = diff.Bundles(a.Bundle, b.Bundle); err != nil {
			return cli.Internal(err)
		}
	case a.Bundle == nil && b.Bundle == nil:
		d = diff.Diff(a.Program, b.Program)
	default:
		sa, ra, err := resources(a)
		if err != nil {
			return err
		}
		sb, rb, err := resources(b)
		if err != nil {
			return err
		}
		d = diff.Resources(sa, ra, sb, rb)
	}
	return cli.Internal(pr(c.s.Out, d))
}

// resources returns a schedule's side and resource summary: a bundle's
// own, or the summary of a program after legalisation (as diff.Diff does).
func resources(src *cli.Source) (diff.Side, []bundle.RankResources, error) {
	if b := src.Bundle; b != nil {
		m := b.Meta
		side := diff.Side{Name: m.Name, Collective: m.Collective.String(), NRanks: m.NRanks, Protocol: m.Protocol.String()}
		id, err := b.ID()
		if err != nil {
			return side, nil, cli.Internal(err)
		}
		side.ID = id.String()
		return side, b.Ranks, nil
	}
	p := src.Program
	side := diff.Side{Name: p.Name, Collective: p.Collective.String(), NRanks: p.NRanks, Protocol: p.Protocol.String()}
	st, err := runLegalize(p)
	if err != nil {
		return side, nil, err
	}
	q := st.Prog
	if q == nil || cli.CountErrors(st.Diags) > 0 {
		q = p // cannot be legalised: compared as given, as diff.Diff does
	}
	return side, bundle.Summarize(q), nil
}
