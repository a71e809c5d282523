package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/compiler/verify"
)

type compileCmd struct {
	cmd         *cobra.Command
	s           cli.Streams
	out         string
	timePasses  bool
	verifyEach  bool
	embedSource bool
	verbose     bool
	stopAfter   string
	printAfter  []string
	skip        []string
	maxErrors   *int
	context     string
	check       bool
	specialize  bool
	specDTypes  []string
	clang       string
}

func newCompileCmd(s cli.Streams) *compileCmd {
	c := &compileCmd{s: s}
	var list strings.Builder
	for _, p := range passes.Pipeline() {
		fmt.Fprintf(&list, "  %-13s %s\n", p.Name, p.Summary)
	}
	c.cmd = &cobra.Command{
		Use:   "compile FILE [-o OUT.tsb]",
		Short: "Compile a schedule into a .tsb bundle",
		Long: `compile runs the compiler pipeline (compiler/passes) on FILE (any input
format) and writes the bundle the runtime loads. The passes, in order:

` + list.String() + `
Diagnostics go to standard error. The bundle is written only when no pass
reports an error and the pipeline is not stopped early (--stop-after before
bundle). --print-after and --time-passes write to standard error.`,
		Example: `  theseusc compile examples/allreduce_ring_8rank_simple.json -o ring8.tsb
  theseusc compile ring.xml --stop-after=legalize --print-after=legalize
  theseusc compile ring.json --time-passes --verify-each
  theseusc compile --context ./my-context
  theseusc compile allreduce_ll2.json --specialize --specialize-dtypes float32,bfloat16`,
		Args: func(cmd *cobra.Command, args []string) error {
			if c.context != "" {
				return cli.ExactArgs(0, "no FILE with --context")(cmd, args)
			}
			return cli.ExactArgs(1, "one FILE")(cmd, args)
		},
	}
	f := c.cmd.Flags()
	f.StringVarP(&c.out, "output", "o", "", `bundle to write ("-": standard output; default: FILE with the extension .tsb)`)
	f.BoolVar(&c.timePasses, "time-passes", false, "print each pass's wall time and op count")
	f.BoolVar(&c.verifyEach, "verify-each", false, "check invariants after every pass (cheap verifier checks, op tables, bundle round trip)")
	f.BoolVar(&c.embedSource, "embed-source", true, "embed the textual IR of the input in the bundle (for print, diff and lint of the bundle)")
	f.StringVar(&c.stopAfter, "stop-after", "", "stop after the named pass: "+strings.Join(passes.Names(), ", "))
	f.StringSliceVar(&c.printAfter, "print-after", nil, `print the program after the named passes (comma-separated, or "all")`)
	f.StringSliceVar(&c.skip, "skip", nil, "skip passes that are not required (verify-input, verify)")
	f.BoolVarP(&c.verbose, "verbose", "v", false, "say what was written")
	f.StringVar(&c.context, "context", "", "precompile the policies of this selection context directory instead: write each schedule entry's usable_program and preference_program (docs/selection-context.md §5.1)")
	f.BoolVar(&c.check, "check", false, "with --context: write nothing; exit 1 when a program is missing or stale")
	f.BoolVar(&c.specialize, "specialize", false, "also build each rank's specialised kernel (its op table compiled into the CUDA executor as constants, docs/specialize.md) with clang-14, one PTX module per datatype of --specialize-dtypes, into the bundle; for schedules of at most 8 threadblocks per rank")
	f.StringSliceVar(&c.specDTypes, "specialize-dtypes", []string{"float32", "bfloat16", "float16"}, "with --specialize: the datatypes to build kernels for (comma-separated; a call of another datatype runs the generic kernel)")
	f.StringVar(&c.clang, "clang", "clang-14", "with --specialize: the compiler")
	c.maxErrors = cli.AddMaxErrors(c.cmd)
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *compileCmd) run(_ *cobra.Command, args []string) error {
	if err := cli.CheckMaxErrors(*c.maxErrors); err != nil {
		return err
	}
	if c.context != "" {
		return compileContext(c.context, c.check, c.s)
	}
	if c.check {
		return cli.Usagef("--check goes with --context")
	}
	in := args[0]
	out := c.out
	if out == "" {
		if in == "-" {
			return cli.Usagef("reading standard input: name the bundle with -o")
		}
		out = strings.TrimSuffix(in, filepath.Ext(in)) + ".tsb"
		if out == in {
			return cli.Usagef("%s is already a bundle: name the output with -o", in)
		}
	}
	src, err := loadProgram(in, c.s)
	if err != nil {
		return err
	}
	opts := passes.Options{
		VerifyEach: c.verifyEach, StopAfter: c.stopAfter, PrintAfter: c.printAfter, TimePasses: c.timePasses,
		Skip: c.skip, Verify: verify.Options{MaxErrors: *c.maxErrors}, EmbedSource: c.embedSource, Out: c.s.Err,
	}
	st, err := passes.Run(src.Program, pipelineOptions(src.Program, opts))
	if st == nil {
		return cli.Usage(err)
	}
	ds := cli.Dedupe(st.Diags)
	cli.PrintDiags(c.s.Err, ds)
	if err != nil {
		return cli.Internal(err)
	}
	if cli.CountErrors(ds) > 0 {
		fmt.Fprintf(c.s.Err, "compile: %s: %s; no bundle written\n", in, summary(ds))
		return cli.Findings()
	}
	if st.Bundle == nil {
		return nil // stopped early
	}
	if c.specialize {
		if err := specializeBundle(st.Bundle, c.specDTypes, c.clang, c.s); err != nil {
			return err
		}
	} else if c.cmd.Flags().Changed("specialize-dtypes") || c.cmd.Flags().Changed("clang") {
		return cli.Usagef("--specialize-dtypes and --clang go with --specialize")
	}
	// The bundle is streamed (Bundle.WriteTo): a 1024-rank ring's 571 MB are
	// never built in memory.
	var size int64
	if err := streamOutput(out, c.s.Out, func(w io.Writer) error {
		n, err := st.Bundle.WriteTo(w)
		size = n
		return err
	}); err != nil {
		return err
	}
	if c.verbose {
		id, _ := st.Bundle.ID()
		fmt.Fprintf(c.s.Err, "compile: wrote %s: schedule %s, %d ranks, %d bytes\n", out, id.Short(), st.Bundle.Meta.NRanks, size)
	}
	return nil
}
