package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm"
	"github.com/theseus-ccl/theseus/runtime/ctxdir"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

type selectCmd struct {
	cmd         *cobra.Command
	s           cli.Streams
	out         *cli.OutputFlags
	context     string
	coll        string
	count       int64
	dtype       string
	redop       string
	packet      string
	nranks      int
	nlocalranks int
	root        int
	inplace     bool
	at          string
	timeout     time.Duration
	verbose     bool
}

func newSelectCmd(s cli.Streams) *selectCmd {
	c := &selectCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "select --context DIR --coll C --count N [flags]",
		Short: "Show which schedule a selection context picks for a request, and why",
		Long: `select reads a selection context (docs/selection-context.md) as one rank of a
communicator would and selects a schedule for one request, exactly as the
runtime's Select does (runtime/selector). It prints the chosen schedule's id
and file, then for every schedule entry whether it is selectable, whether it
matched the request (collective, nranks, nlocalranks, message-size window,
buffer arrangement), whether its usability expression held, and its
preference. --json prints the same as JSON.

Schedule files are loaded and verified as the runtime does (bundles; Theseus
JSON, MSCCL++ plans and MSCCL XML through the verifier); problems with the
context (bad manifest lines, schedules that fail to load) are reported on
standard error. Exit 0 when a schedule is chosen, 1 when none is.`,
		Example: `  theseusc select --context examples/contexts/default --coll allreduce --count 1048576 --dtype float32
  theseusc select --context ctx --coll broadcast --count 4096 --root 3 --nranks 16 --nlocalranks 8 --json
  theseusc select --context ctx --coll allreduce --count 1024 --at 2025-07-01T12:00:00`,
		Args: cli.ExactArgs(0, "no arguments (the request is given by flags)"),
	}
	f := c.cmd.Flags()
	c.out = cli.AddOutputFlags(c.cmd, cli.ExplainPrinters)
	f.StringVar(&c.context, "context", "", "selection context directory (default: the runtime's: THESEUS_SELECTION_CONTEXT, else ~/.theseus/contexts/default, else the one installed beside the library, else the embedded default; docs/selection-context.md §10)")
	f.StringVar(&c.coll, "coll", "", "collective (required): allreduce, allgather, reducescatter, broadcast, reduce, alltoall, gather, scatter, sendrecv")
	f.Int64Var(&c.count, "count", 0, "the NCCL count argument, in elements (required)")
	f.StringVar(&c.dtype, "dtype", "float32", "data type")
	f.StringVar(&c.redop, "redop", "sum", "reduction op: sum, prod, max, min, avg")
	f.StringVar(&c.packet, "packet", "LL16", "LL packet type: LL16 or LL8 (request.packettype)")
	f.IntVar(&c.nranks, "nranks", 8, "communicator size")
	f.IntVar(&c.nlocalranks, "nlocalranks", 0, "ranks per node, dividing nranks (default: nranks, one node)")
	f.IntVar(&c.root, "root", 0, "root rank of rooted collectives (ignored for the others)")
	f.BoolVar(&c.inplace, "inplace", false, "the request is in place (NCCL buffer overlap)")
	f.StringVar(&c.at, "at", "", `the time to select at, for valid_after (default now): "2025-06-01T12:00:00" (local standard time), RFC 3339 with a zone, or Unix seconds`)
	f.DurationVar(&c.timeout, "timeout", time.Minute, "bound on loading and verifying the schedule files")
	f.BoolVarP(&c.verbose, "verbose", "v", false, "also print the selector's informational messages on standard error")
	c.cmd.RunE = cli.RunE(c.run)
	return c
}

// stderrLogger prints the selector's messages on standard error.
type stderrLogger struct {
	mu      sync.Mutex
	s       cli.Streams
	verbose bool
}

func (l *stderrLogger) Warnf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.s.Err, "select: warning: "+format+"\n", args...)
}

func (l *stderrLogger) Infof(format string, args ...any) {
	if !l.verbose {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.s.Err, "select: "+format+"\n", args...)
}

func (c *selectCmd) request(cmd *cobra.Command) (*selector.Request, error) {
	if c.coll == "" {
		return nil, cli.Usagef("--coll is required")
	}
	coll, err := ir.ParseCollective(c.coll)
	if err != nil || coll == ir.Custom {
		return nil, cli.Usagef("--coll: unknown collective %q", c.coll)
	}
	if !cmd.Flags().Changed("count") {
		return nil, cli.Usagef("--count is required")
	}
	if c.count < 0 {
		return nil, cli.Usagef("--count must be >= 0, got %d", c.count)
	}
	dt, err := ir.ParseDataType(c.dtype)
	if err != nil {
		return nil, cli.Usagef("--dtype: %v", err)
	}
	op, err := ir.ParseRedOp(c.redop)
	if err != nil {
		return nil, cli.Usagef("--redop: %v", err)
	}
	pk, err := ir.ParsePacketType(c.packet)
	if err != nil {
		return nil, cli.Usagef("--packet: %v", err)
	}
	if c.nranks < 1 || c.nranks > ir.MaxRanks {
		return nil, cli.Usagef("--nranks must be in 1..%d, got %d", ir.MaxRanks, c.nranks)
	}
	nl := c.nlocalranks
	if nl == 0 {
		nl = c.nranks
	}
	if nl < 1 || nl > c.nranks {
		return nil, cli.Usagef("--nlocalranks must be in 1..nranks (%d), got %d", c.nranks, nl)
	}
	if c.nranks%nl != 0 {
		// Every node has the same number of ranks (the seed's job layout,
		// runtime/comm.CheckLayout): a communicator never makes this request.
		return nil, cli.Usagef("--nlocalranks %d does not divide --nranks %d (every node holds the same number of ranks)", nl, c.nranks)
	}
	root := -1
	if coll.Rooted() {
		root = c.root
		if root < 0 || root >= c.nranks {
			return nil, cli.Usagef("--root %d is not a rank of a %d-rank communicator", root, c.nranks)
		}
	}
	return &selector.Request{Coll: coll, Count: c.count, DataType: dt, RedOp: op, PacketType: pk,
		Root: root, NRanks: c.nranks, NLocalRanks: nl, InPlace: c.inplace}, nil
}

// parseAt reads --at as valid_after is read (manifest.ParseTime): Unix
// seconds, or a timestamp in local standard time without a zone. A time
// outside 1678–2261, which manifests cannot express either, is an error,
// never wrapped around.
func parseAt(s string) (time.Time, error) {
	ns, err := manifest.ParseTime(s, time.Local)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, ns), nil
}

func (c *selectCmd) run(cmd *cobra.Command, _ []string) error {
	pr, err := cli.Resolve(c.out, cli.ExplainPrinters)
	if err != nil {
		return err
	}
	req, err := c.request(cmd)
	if err != nil {
		return err
	}
	dir, from := c.context, "--context"
	if dir == "" {
		// The library's choice (ctxdir.Default). When the embedded default
		// cannot be written anywhere the reason is the tool's failure, as
		// theseus-bench reports it; a --context the user never gave is not
		// to blame.
		ch, err := ctxdir.Default()
		if err != nil {
			return cli.Internal(err)
		}
		dir, from = ch.Dir, "the "+ch.Source.String()+" context "+ch.Dir
		if ch.Source == ctxdir.FromEnv {
			from = env.SelContext.Source() + "=" + ch.Dir
		}
	}
	if st, err := os.Stat(dir); err != nil {
		return cli.Usagef("%s: %v", from, err)
	} else if !st.IsDir() {
		return cli.Usagef("%s: %s is not a directory", from, dir)
	}
	if err := cli.CheckContextDir(dir); err != nil {
		return cli.Usagef("%s: %v", from, err)
	}
	opts := selector.Options{Dir: dir, Loader: schedfile.Loader{}, Agreement: selector.Solo{},
		Timeout: c.timeout, Logger: &stderrLogger{s: c.s, verbose: c.verbose}, CheckPeriod: 1}
	if c.at != "" {
		at, err := parseAt(c.at)
		if err != nil {
			return cli.Usagef("--at: %v", err)
		}
		opts.Clock = func() time.Time { return at }
	}
	sel, err := selector.New(opts)
	if err != nil {
		return cli.Usage(err)
	}
	defer sel.Close()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if req.Coll == ir.SendRecv {
		return c.p2p(ctx, sel, req)
	}
	e, err := sel.Explain(ctx, req)
	switch {
	case errors.Is(err, selector.ErrBadRequest):
		return cli.Usage(err)
	case err != nil:
		return cli.Internal(err)
	}
	if err := pr(c.s.Out, e); err != nil {
		return cli.Internal(err)
	}
	if e.Chosen == selector.None {
		fmt.Fprintln(c.s.Err, "select: no schedule matches and is usable for this request")
		return cli.Findings()
	}
	return nil
}

// p2p reports what the runtime's point-to-point engine runs for the
// request's shape (ncclSend/ncclRecv groups and ncclAlltoAllv): the best
// usable "gen": "p2p" entry (selector.P2P), else the built-in parameters,
// and the parameters either gives (comm.P2PParamsOf). Point-to-point
// always runs, so this exits 0.
func (c *selectCmd) p2p(ctx context.Context, sel *selector.Selector, req *selector.Request) error {
	if err := sel.Prime(ctx); err != nil {
		return cli.Internal(err)
	}
	ch := sel.P2P(req.NRanks, req.NLocalRanks)
	p := comm.P2PParamsOf(req.NLocalRanks, ch.Entry)
	out := struct {
		Entry      int    `json:"entry"` // -1: none, the built-in parameters
		Name       string `json:"name,omitempty"`
		ChunkBytes int64  `json:"chunk_bytes"`
		Slots      int    `json:"slots"`
		Channels   int    `json:"channels"`
		Threads    int    `json:"threads"` // 0: the backend's default
		EagerBytes int64  `json:"eager_bytes"`
		Direct     bool   `json:"direct"`
	}{ch.ID, ch.Name, p.Geometry.ChunkBytes, p.Geometry.Slots, p.Geometry.Channels, p.Threads, p.EagerBytes, p.Direct}
	if format, _ := c.out.Name(); format == cli.FormatJSON {
		enc := json.NewEncoder(c.s.Out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return cli.Internal(err)
		}
		return nil
	}
	what := "the built-in parameters (no usable \"gen\": \"p2p\" entry)"
	if ch.ID != selector.None {
		what = fmt.Sprintf("entry %d %q", ch.ID, ch.Name)
	}
	fmt.Fprintf(c.s.Out, "point-to-point engine (ncclSend/ncclRecv, ncclAlltoAllv), %d ranks, %d per node: %s\n", req.NRanks, req.NLocalRanks, what)
	fmt.Fprintf(c.s.Out, "  chunk_bytes %d, slots %d, channels %d, threads %d (0: the backend's default), eager_bytes %d, direct %v\n",
		out.ChunkBytes, out.Slots, out.Channels, out.Threads, out.EagerBytes, out.Direct)
	return nil
}
