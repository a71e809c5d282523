package main

import (
	"fmt"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"golang.org/x/term"
)

type simCmd struct {
	cmd      *cobra.Command
	s        cli.Streams
	out      *cli.OutputFlags
	dtypes   []string
	redops   []string
	packets  []string
	counts   []int
	slices   []int
	roots    []int
	launches int
	seed     uint64
	timeout  time.Duration
	noVerify bool
	maxMem   int64
	progress string
}

func newSimCmd(s cli.Streams) *simCmd {
	c := &simCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "sim FILE [flags]",
		Short: "Run a schedule in the host interpreter and check every rank's result",
		Long: `sim runs FILE (any input format) in the host interpreter (runtime/interp), the
CPU reference of the GPU executor, over a matrix of cases: every data type ×
reduction op (reducing collectives) × supported buffer arrangement × count ×
slices (× LL packet type, × root for rooted collectives). Each case fills
every rank's input with random values, runs two launches and compares every
output element, bit for bit, with a direct computation of the collective
(NCCL 2.25 semantics). It prints one line per case:

  DATATYPE REDOP ARRANGEMENT count=N slices=S [PACKET] [root=R]  #wrong=W  time=T

The schedule is verified and legalised first (lint's checks); a schedule
with errors is not run unless --no-verify is given. Exit 0 when every case
matches, 1 when a case has wrong elements or fails (a timeout, an error),
or the schedule does not verify.

In text, each case's line is printed as soon as the case has run; on a
terminal a progress bar on standard error says how many remain.`,
		Example: `  theseusc sim examples/allreduce_ring_8rank_simple.json
  theseusc sim ring.xml --dtype float16,bfloat16 --redop sum --count 1,1000,65536
  theseusc sim plan.json --json`,
		Args: cli.ExactArgs(1, "one FILE"),
	}
	f := c.cmd.Flags()
	c.out = cli.AddOutputFlags(c.cmd, cli.SimPrinters)
	f.StringSliceVar(&c.dtypes, "dtype", nil, "data types (default: all twelve NCCL types: int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16, fp8e4m3, fp8e5m2)")
	f.StringSliceVar(&c.redops, "redop", nil, "reduction ops of reducing collectives (default: sum, prod, max, min, avg)")
	f.IntSliceVar(&c.counts, "count", nil, "counts in elements per block (default: 0, 1, 7, a medium count no alignment divides, and a large aligned one)")
	f.IntSliceVar(&c.slices, "slices", nil, "pipeline slices of Simple programs (default: 1,3; 1 for programs that ask never to be sliced, such as MSCCL++ plans; LL programs run unsliced)")
	f.StringSliceVar(&c.packets, "packet", nil, "LL packet types (default: LL16,LL8)")
	f.IntSliceVar(&c.roots, "root", nil, "physical roots of rooted collectives (default: every rank up to 4 ranks, else 0, 1, root+1, nranks-1)")
	f.IntVar(&c.launches, "launches", 2, "consecutive launches per case")
	f.Uint64Var(&c.seed, "seed", 0, "seed of the random inputs (0: a fixed default)")
	f.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound on every wait of the interpreter")
	f.BoolVar(&c.noVerify, "no-verify", false, "simulate even when the verifier reports errors")
	f.StringVar(&c.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	cli.BytesVar(f, &c.maxMem, "max-memory", 0, "bound on the bytes (K, M, G suffixes) one case allocates, checked before any case runs (default: the smallest of 64 GiB, half of ulimit -v and three quarters of physical memory)")
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

func (c *simCmd) options() (interp.SimOptions, error) {
	o := interp.SimOptions{Roots: c.roots, Launches: c.launches, Seed: c.seed, Timeout: c.timeout}
	for _, n := range c.counts {
		o.Counts = append(o.Counts, int64(n))
	}
	for _, n := range c.slices {
		o.Slices = append(o.Slices, int64(n))
	}
	for _, s := range c.dtypes {
		d, err := ir.ParseDataType(s)
		if err != nil {
			return o, cli.Usagef("--dtype: %v", err)
		}
		o.DataTypes = append(o.DataTypes, d)
	}
	for _, s := range c.redops {
		r, err := ir.ParseRedOp(s)
		if err != nil {
			return o, cli.Usagef("--redop: %v", err)
		}
		o.RedOps = append(o.RedOps, r)
	}
	for _, s := range c.packets {
		p, err := ir.ParsePacketType(s)
		if err != nil {
			return o, cli.Usagef("--packet: %v", err)
		}
		o.PacketTypes = append(o.PacketTypes, p)
	}
	for _, n := range c.counts {
		if n < 0 {
			return o, cli.Usagef("--count must be >= 0, got %d", n)
		}
	}
	for _, n := range c.slices {
		if n < 1 {
			return o, cli.Usagef("--slices must be >= 1, got %d", n)
		}
	}
	if c.launches < 1 {
		return o, cli.Usagef("--launches must be >= 1, got %d", c.launches)
	}
	if c.timeout <= 0 {
		return o, cli.Usagef("--timeout must be positive")
	}
	switch c.progress {
	case "auto", "always", "never":
	default:
		return o, cli.Usagef("--progress %q: want auto, always or never", c.progress)
	}
	return o, nil
}

// wantBar: a progress bar on standard error (--progress always, or auto
// and a terminal).
func (c *simCmd) wantBar() bool {
	switch c.progress {
	case "always":
		return true
	case "never":
		return false
	}
	f, ok := c.s.Err.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (c *simCmd) run(_ *cobra.Command, args []string) error {
	pr, err := cli.Resolve(c.out, cli.SimPrinters)
	if err != nil {
		return err
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	src, err := loadProgram(args[0], c.s)
	if err != nil {
		return err
	}
	p := src.Program
	for _, r := range opts.Roots {
		if r < 0 || r >= p.NRanks {
			return cli.Usagef("--root %d is not a rank of this %d-rank schedule", r, p.NRanks)
		}
	}
	po := passes.Options{Verify: verify.Options{}}
	if c.noVerify {
		po.Skip = []string{"verify-input", "verify"}
	}
	st, err := check(p, po)
	if st != nil {
		cli.PrintDiags(c.s.Err, cli.Dedupe(st.Diags))
	}
	if err != nil {
		return err
	}
	if cli.CountErrors(st.Diags) > 0 {
		if c.noVerify {
			// Not the verifier's findings: the program cannot be lowered
			// (legalisation), so there is nothing to run.
			return cli.Findingsf("%s: not simulated: %s (errors that stop lowering; --no-verify skips only the verifier)", args[0], summary(st.Diags))
		}
		return cli.Findingsf("%s: not simulated: %s (--no-verify runs it anyway)", args[0], summary(st.Diags))
	}
	limit, why := memoryLimit()
	if c.maxMem > 0 {
		limit, why = c.maxMem, "set by --max-memory"
	}
	if err := checkSimMemory(st.Prog, opts, limit, why); err != nil {
		return err
	}
	// Text streams: each case's line as it finishes (a matrix takes tens of
	// seconds), with a progress bar on a terminal.
	name, _ := c.out.Name() // resolved above
	text := name == cli.FormatText
	var bar *progressbar.ProgressBar
	var werr error
	opts.OnCase = func(cr interp.CaseResult, done, total int) {
		if bar == nil && c.wantBar() {
			bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(c.s.Err), progressbar.OptionSetDescription("sim"),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
				progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
		}
		if text && werr == nil {
			if bar != nil {
				bar.Clear()
			}
			_, werr = fmt.Fprintln(c.s.Out, cr.String())
		}
		if bar != nil {
			bar.Add(1)
		}
	}
	cases, err := interp.Simulate(st.Prog, opts)
	if bar != nil {
		bar.Finish()
		bar.Clear()
	}
	if err != nil {
		return cli.Findingsf("%s: not simulated: %v", args[0], err)
	}
	if werr != nil {
		return cli.Internal(werr)
	}
	rep := &cli.SimReport{File: args[0], Name: p.Name, Cases: cases}
	if !text {
		if err := pr(c.s.Out, rep); err != nil {
			return cli.Internal(err)
		}
	}
	failed := rep.Failed()
	fmt.Fprintf(c.s.Err, "sim: %s: %d case(s), %d passed, %d failed\n", args[0], len(cases), len(cases)-failed, failed)
	if failed > 0 {
		return cli.Findings()
	}
	return nil
}
