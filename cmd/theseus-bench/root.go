package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/contextd/client"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/theseus"
	"github.com/theseus-ccl/theseus/runtime/trace"
)

// benchCmd is the command with its options.
type benchCmd struct {
	cmd *cobra.Command
	s   cli.Streams
	out *cli.OutputFlags

	minBytes, maxBytes, stepBytes string
	factor                        int64
	iters, warmup, check, root    int
	dtype, op, coll, matrix       string
	backend                       string
	nranks                        int
	context                       string
	csv                           bool
	plot                          string
	hotswap                       bool
	hotswapAttr                   string
	contextd                      string
	rootAddr, idFile              string
	device                        int
	timeout                       time.Duration
	progress                      string
	trace                         string
	maxMem                        int64
}

func newRoot(s cli.Streams) *cobra.Command {
	b := &benchCmd{s: s}
	b.cmd = &cobra.Command{
		Use:   "theseus-bench [flags]",
		Short: "Benchmark and check every Theseus collective (nccl-tests columns, plus the schedule)",
		Long: `theseus-bench runs every collective (allreduce, allgather, reducescatter,
alltoall, broadcast, reduce, gather, scatter) over a range of sizes and prints
nccl-tests' columns — size, count, type, redop, root, then time, algbw, busbw
and #wrong out of place and in place — plus the schedule the selector chose.
busbw uses nccl-tests' formulas. Every output element of every rank is
checked (-c); #wrong counts the mismatches summed over the ranks. Then it
demonstrates a hot swap: it publishes an exogenous attribute mid-run
(slow_rank, or ll_max_bytes at 2 ranks: --hotswap-attr), shows every rank
switching schedule at the same request, and measures what the switch costs.

With no arguments: 4 ranks as goroutines of this process, the host backend
(the CPU reference), the embedded default selection context, sizes 8 B to
64 MiB. Launched by torchrun or mpirun (RANK/WORLD_SIZE,
OMPI_COMM_WORLD_RANK/SIZE, PMI_RANK/SIZE or SLURM_PROCID/NTASKS, with
MASTER_ADDR/MASTER_PORT, --root-addr or --id-file), each process is one rank
and rank 0 prints.

Exit codes: 0 every element right, 1 wrong elements or ranks that ran
different schedules, 2 usage error, 3 failure (a collective failed).`,
		Example: `  theseus-bench
  theseus-bench -b 8 -e 128M -f 2 -d float -o sum --coll allreduce
  theseus-bench -d all -o all -e 1M -n 5 --json
  theseus-bench --plot bw.png --csv > bw.csv
  torchrun --nproc-per-node 4 theseus-bench --backend cuda
  RANK=0 WORLD_SIZE=2 theseus-bench --id-file /tmp/id & RANK=1 WORLD_SIZE=2 theseus-bench --id-file /tmp/id`,
		Args:              cli.ExactArgs(0, "no arguments"),
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		RunE:              cli.RunE(b.runE),
	}
	f := b.cmd.Flags()
	f.SortFlags = false
	b.addRunFlags(f, "all")
	b.out = cli.AddOutputFlags(b.cmd, printers)
	f.BoolVar(&b.csv, "csv", false, "shorthand for --format=csv")
	f.StringVar(&b.plot, "plot", "", "also draw algbw and busbw against size into this .png file")
	f.BoolVar(&b.hotswap, "hotswap", true, "run the hot-swap demonstration after the table")
	f.StringVar(&b.contextd, "contextd", client.DefaultSocket(), `the hot swap publishes through the context daemon on this socket when it serves --context ("none": never)`)
	f.StringVar(&b.hotswapAttr, "hotswap-attr", hsAuto, "attribute the hot swap flips: auto (slow_rank at 3 ranks or more, else ll_max_bytes), slow_rank or ll_max_bytes")
	b.addJobFlags(f)
	f.StringVar(&b.progress, "progress", "auto", "progress bar on standard error: auto (when it is a terminal), always or never")
	f.StringVar(&b.trace, "trace", "", "write a Chrome/Perfetto trace of every call and launch to this file (THESEUS_TRACE; %p: the process id, one file per process in multi-process mode; docs/trace.md)")
	b.cmd.AddCommand(newCompareCmd(s), newTracePlotCmd(s), newTraceMergeCmd(s), newSweepCmd(s))
	return b.cmd
}

// addRunFlags registers what a run measures (sizes, runs, datatypes,
// reductions, collectives: coll is --coll's default) and on what (backend,
// ranks, context), shared by the main command and sweep.
func (b *benchCmd) addRunFlags(f *pflag.FlagSet, coll string) {
	f.StringVarP(&b.minBytes, "minbytes", "b", "8", "smallest size in bytes (K, M, G suffixes)")
	f.StringVarP(&b.maxBytes, "maxbytes", "e", "64M", "largest size in bytes (K, M, G suffixes)")
	f.Int64VarP(&b.factor, "stepfactor", "f", defFactor, "multiply the size by this factor (1: add --stepbytes instead)")
	f.StringVarP(&b.stepBytes, "stepbytes", "i", "1M", "bytes to add to the size when --stepfactor is 1")
	f.IntVarP(&b.iters, "iters", "n", defIters, "timed runs per size (default: scaled down with size)")
	f.IntVarP(&b.warmup, "warmup_iters", "w", defWarmup, "warmup runs per size (default: scaled down with size)")
	f.IntVarP(&b.check, "check", "c", 1, "checked runs per size: every output element is compared (0: no check)")
	f.StringVarP(&b.dtype, "datatype", "d", "float", "datatype: "+typeNames()+", a comma-separated list, or all")
	f.StringVarP(&b.op, "op", "o", "sum", "reduction: sum, prod, max, min, avg, a comma-separated list, or all")
	f.IntVarP(&b.root, "root", "r", 0, "root rank of broadcast, reduce, gather and scatter")
	f.StringVar(&b.coll, "coll", coll, "collectives: allreduce, allgather, reducescatter, alltoall, broadcast, reduce, gather, scatter, a list, or all; and the point-to-point rows sendrecv and alltoallv (not in all)")
	f.StringVar(&b.matrix, "matrix", "all", "alltoallv's counts matrices: random, skewed (4 hot experts), zero, a list, or all")
	f.StringVar(&b.backend, "backend", "host", "execution backend: host (the CPU reference) or cuda")
	f.IntVar(&b.nranks, "nranks", 4, "ranks, as goroutines of this process (in-process mode only)")
	f.StringVar(&b.context, "context", "", "selection context directory (default: THESEUS_SELECTION_CONTEXT if set, else the embedded default context)")
}

// addJobFlags registers how a process joins a multi-process run and its
// device and timeout, shared by the main command and sweep.
func (b *benchCmd) addJobFlags(f *pflag.FlagSet) {
	f.StringVar(&b.rootAddr, "root-addr", "", "multi-process mode: host:port where rank 0 serves the unique id (default MASTER_ADDR:MASTER_PORT)")
	f.StringVar(&b.idFile, "id-file", "", "multi-process mode: a fresh file on a shared file system where rank 0 writes the unique id")
	f.IntVar(&b.device, "device", -1, "device ordinal of this process; -1: LOCAL_RANK or OMPI_COMM_WORLD_LOCAL_RANK, else 0")
	f.DurationVar(&b.timeout, "timeout", 0, "bound on every wait on a peer (default THESEUS_TIMEOUT, 60s)")
	cli.BytesVar(f, &b.maxMem, "max-memory", 0, "bound in bytes (K, M, G suffixes) on the memory this process's ranks need (buffers, the check's inputs), checked before anything is allocated (default: three quarters of physical memory, half of ulimit -v)")
}

// config is the validated command line.
type config struct {
	plan    plan
	format  string
	backend string
	nranks  int
	multi   bool
	launch  theseus.LaunchInfo
	ctxDir  string
	ctxFrom string
	header  Header
	hsAttr  string // --hotswap-attr
	// minB, maxB and stepB are -b, -e and -i in bytes.
	minB, maxB, stepB int64
}

// parsePlan reads what a run measures and on which backend (the flags of
// addRunFlags but the job's and the context's).
func (b *benchCmd) parsePlan() (*config, error) {
	cfg := &config{backend: b.backend}
	fl := b.cmd.Flags()
	var err error
	var min, max, step int64
	if min, err = parseBytes(b.minBytes); err != nil {
		return nil, cli.Usage(fmt.Errorf("-b: %w", err))
	}
	if max, err = parseBytes(b.maxBytes); err != nil {
		return nil, cli.Usage(fmt.Errorf("-e: %w", err))
	}
	if step, err = parseBytes(b.stepBytes); err != nil {
		return nil, cli.Usage(fmt.Errorf("-i: %w", err))
	}
	sz, err := sizes(min, max, b.factor, step)
	if err != nil {
		return nil, cli.Usage(err)
	}
	p := plan{Sizes: sz, Root: b.root, Iters: b.iters, Warmup: b.warmup, Check: b.check, Seed: 1,
		ItersOK: fl.Changed("iters"), WarmOK: fl.Changed("warmup_iters")}
	switch {
	case b.iters < 1:
		return nil, cli.Usagef("-n %d: want at least 1 timed run", b.iters)
	case b.warmup < 0 || b.check < 0:
		return nil, cli.Usagef("-w and -c must be >= 0")
	}
	if p.Types, err = parseTypes(b.dtype); err != nil {
		return nil, cli.Usage(err)
	}
	if p.Ops, err = parseOps(b.op); err != nil {
		return nil, cli.Usage(err)
	}
	if p.Colls, err = parseColls(b.coll); err != nil {
		return nil, cli.Usage(err)
	}
	if p.Matrices, err = parseMatrices(b.matrix); err != nil {
		return nil, cli.Usage(err)
	}
	cfg.plan = p
	if b.backend != "host" && b.backend != "cuda" {
		return nil, cli.Usagef("--backend %q: want host or cuda", b.backend)
	}
	cfg.minB, cfg.maxB, cfg.stepB = min, max, step
	return cfg, nil
}

func (b *benchCmd) parse() (*config, error) {
	cfg, err := b.parsePlan()
	if err != nil {
		return nil, err
	}
	fl := b.cmd.Flags()
	if cfg.format, err = b.out.Name(); err != nil {
		return nil, err
	}
	if b.csv {
		if fl.Changed("format") && cfg.format != formatCSV || b.out.JSON {
			return nil, cli.Usagef("--csv conflicts with --format %s", cfg.format)
		}
		cfg.format = formatCSV
	}
	if _, err := printers.Lookup(cfg.format); err != nil {
		return nil, err
	}
	switch b.progress {
	case "auto", "always", "never":
	default:
		return nil, cli.Usagef("--progress %q: want auto, always or never", b.progress)
	}
	if cfg.hsAttr = b.hotswapAttr; cfg.hsAttr != hsAuto && !slices.Contains(hsAttrs, cfg.hsAttr) {
		return nil, cli.Usagef("--hotswap-attr %q: want auto, %s", cfg.hsAttr, strings.Join(hsAttrs, " or "))
	}
	if b.plot != "" && !strings.HasSuffix(strings.ToLower(b.plot), ".png") {
		return nil, cli.Usagef("--plot %s: want a .png file", b.plot)
	}
	// Fail before the run, not after it (or at init): the folders of the
	// plot and the trace must exist.
	for _, f := range []struct{ flag, path string }{{"--plot", b.plot}, {"--trace", trace.Expand(b.trace)}} {
		if f.path == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(f.path)); err != nil || !st.IsDir() {
			return nil, cli.Usagef("%s %s: no such folder %s", f.flag, f.path, filepath.Dir(f.path))
		}
	}
	if err := b.parseJob(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// parseJob fills cfg's job from the launcher's variables and the job and
// context flags (addRunFlags, addJobFlags), after the run's plan.
func (b *benchCmd) parseJob(cfg *config) error {
	fl := b.cmd.Flags()
	p := &cfg.plan
	// Launch mode: a launcher's rank and size make this process one rank.
	li, launched, err := launchInfo()
	if err != nil {
		return err
	}
	if launched {
		cfg.multi, cfg.launch = true, li
		if b.rootAddr != "" {
			cfg.launch.RootAddr = b.rootAddr
		}
		cfg.launch.IDFile = b.idFile
		if fl.Changed("nranks") && b.nranks != li.WorldSize {
			return cli.Usagef("--nranks %d contradicts the launcher's world size %d", b.nranks, li.WorldSize)
		}
		if li.WorldSize > 1 && cfg.launch.RootAddr == "" && cfg.launch.IDFile == "" {
			return cli.Usagef("multi-process mode (rank %d of %d) needs MASTER_ADDR/MASTER_PORT, --root-addr or --id-file", li.Rank, li.WorldSize)
		}
		cfg.nranks = li.WorldSize
	} else {
		if b.rootAddr != "" || b.idFile != "" {
			return cli.Usagef("--root-addr and --id-file need a launcher's RANK and WORLD_SIZE (or OMPI_COMM_WORLD_RANK/SIZE)")
		}
		if b.nranks < 1 || b.nranks > 1024 {
			return cli.Usagef("--nranks %d: want 1..1024", b.nranks)
		}
		cfg.nranks = b.nranks
	}
	if b.root < 0 || b.root >= cfg.nranks {
		return cli.Usagef("-r %d: want a rank in 0..%d", b.root, cfg.nranks-1)
	}
	if b.timeout < 0 {
		return cli.Usagef("--timeout %v: want a positive duration (0: THESEUS_TIMEOUT)", b.timeout)
	}
	if err := b.checkLimits(cfg); err != nil {
		return err
	}
	switch {
	case b.context != "":
		cfg.ctxDir, cfg.ctxFrom = b.context, "--context"
		if st, err := os.Stat(b.context); err != nil || !st.IsDir() {
			return cli.Usagef("--context %s: not a directory", b.context)
		}
	default:
		// The library's resolution (selector.DefaultContext): the
		// environment, the home context, the installed one, the embedded
		// default (materialised read-only once per build and user).
		dir, from, err := theseus.DefaultContext()
		if err != nil {
			return err
		}
		if v, set := env.SelContext.Raw(); set && v != "" {
			from = env.SelContext.Source()
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				// The same exit as --context DIR naming no directory.
				return cli.Usagef("%s=%s: not a directory", from, dir)
			}
		}
		cfg.ctxDir, cfg.ctxFrom = dir, from
	}
	// A directory that is not a context: the same exit as theseusc select
	// (it printed the table's header and failed with exit 3).
	if err := cli.CheckContextDir(cfg.ctxDir); err != nil {
		return cli.Usagef("%s: %v", cfg.ctxFrom, err)
	}
	cfg.header = Header{NRanks: cfg.nranks, Backend: b.backend, ContextFrom: cfg.ctxFrom, MinBytes: cfg.minB, MaxBytes: cfg.maxB,
		StepFactor: b.factor, StepBytes: cfg.stepB, Iters: b.iters, Warmup: b.warmup, Scaled: !p.ItersOK || !p.WarmOK, Check: b.check,
		Mode: "in-process"}
	if cfg.multi {
		cfg.header.Mode = "multi-process"
	}
	return nil
}

// checkLimits refuses, before anything is allocated or connected, a run
// that this process's memory or file descriptors cannot hold: a Go program
// that runs out of memory dies (or the kernel kills it, on a shared
// machine), and ranks out of file descriptors show as a bootstrap timeout.
// Usage errors name the need and the limit.
func (b *benchCmd) checkLimits(cfg *config) error {
	local := 1 // ranks of this process
	if !cfg.multi {
		local = cfg.nranks
	}
	// Per rank two buffers of the largest size (send, receive); for the
	// check, every rank's input stream and one expected output (shared by
	// the ranks of this process).
	var buf int64
	for _, r := range cfg.plan.rows() {
		buf = max(buf, shapeOf(r.Coll, r.Size, r.Type.T.Size(), cfg.nranks).Bytes)
	}
	need := satMul(buf, int64(2*local+cfg.nranks+1))
	limit, why := cli.MemoryLimit(math.MaxInt64, "")
	if b.maxMem > 0 {
		limit, why = b.maxMem, "set by --max-memory"
	}
	if need > limit {
		return cli.Usagef("-e %s at %d rank(s) (%d in this process) needs about %d bytes of memory (two %d-byte buffers per rank, and every rank's input for the check), more than the limit of %d bytes, %s; lower -e or --nranks, or set --max-memory",
			humanBytes(cfg.plan.Sizes[len(cfg.plan.Sizes)-1]), cfg.nranks, local, need, buf, limit, why)
	}
	// Bootstrap connections: in one process every pair of ranks (about 3n²
	// descriptors measured at 4 to 16 ranks); one rank per process, about
	// 3n. The hot swap opens a second communicator while the table's is
	// open: twice that (16 ranks at ulimit -n 832 passed the check and
	// timed out in the hot swap's bootstrap; 1600 is enough).
	fds, comms := int64(3*local*cfg.nranks), "connections between the ranks"
	if b.hotswap {
		fds, comms = 2*fds, "connections between the ranks, for the table's communicator and the hot swap's"
	}
	fds += 64
	if lim := cli.FileLimit(); lim > 0 && fds > lim {
		hint := ""
		if b.hotswap {
			hint = ", --hotswap=false (half as many)"
		}
		return cli.Usagef("%d rank(s) (%d in this process) need about %d file descriptors (%s), more than the limit of %d (ulimit -n); raise it (ulimit -n %d)%s, or run fewer ranks in one process",
			cfg.nranks, local, fds, comms, lim, fds*2, hint)
	}
	return nil
}

// satMul multiplies non-negative a and b, saturating at MaxInt64.
func satMul(a, b int64) int64 {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// launcherPairs are the launchers' rank and world-size variables, in the
// order theseus.LaunchInfoFromEnv reads them.
var launcherPairs = [][2]string{{"RANK", "WORLD_SIZE"}, {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
	{"PMI_RANK", "PMI_SIZE"}, {"SLURM_PROCID", "SLURM_NTASKS"}}

// launchInfo reads the launcher's rank and world size
// (theseus.LaunchInfoFromEnv); launched is false when no launcher set them
// (in-process mode). Usage errors: a variable that is not an integer
// (named), or a rank outside 0..size-1.
func launchInfo() (li theseus.LaunchInfo, launched bool, err error) {
	var pair [2]string
	var vals [2]string
	for _, p := range launcherPairs {
		r, ok1 := os.LookupEnv(p[0])
		w, ok2 := os.LookupEnv(p[1])
		if ok1 && ok2 {
			pair, vals, launched = p, [2]string{r, w}, true
			break
		}
	}
	if !launched {
		return li, false, nil
	}
	for i, v := range vals {
		if _, err := strconv.Atoi(strings.TrimSpace(v)); err != nil {
			return li, true, cli.Usagef("%s=%q is not an integer", pair[i], v)
		}
	}
	li, err = theseus.LaunchInfoFromEnv()
	if err != nil {
		return li, true, cli.Usage(err)
	}
	if li.WorldSize < 1 {
		return li, true, cli.Usagef("%s=%d: want at least 1 rank", pair[1], li.WorldSize)
	}
	if li.Rank < 0 || li.Rank >= li.WorldSize {
		return li, true, cli.Usagef("%s=%d is not a rank of %s=%d (want 0..%d)", pair[0], li.Rank, pair[1], li.WorldSize, li.WorldSize-1)
	}
	return li, true, nil
}

// fingerprint hashes what every rank must agree on, so that ranks started
// with different flags are told so instead of deadlocking.
func (c *config) fingerprint() int64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%v|%v|%v|%v|%d|%d|%d|%v|%v|%d|%s|%s|%v", c.plan.Colls, c.plan.Types, c.plan.Ops, c.plan.Sizes,
		c.plan.Iters, c.plan.Warmup, c.plan.Check, c.plan.ItersOK, c.plan.WarmOK, c.plan.Root, c.backend, c.hsAttr, c.plan.Matrices)
	return int64(h.Sum64() >> 1)
}

func (b *benchCmd) runE(cmd *cobra.Command, _ []string) error {
	cfg, err := b.parse()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	rep, err := b.execute(ctx, cfg)
	if err != nil {
		return err
	}
	if rep == nil { // a rank other than 0
		return nil
	}
	if b.plot != "" {
		if err := savePlot(b.plot, rep); err != nil {
			return err
		}
	}
	if rep.Wrong != 0 || rep.Errors != 0 {
		return cli.Findingsf("#wrong = %d, consistency failures = %d", rep.Wrong, rep.Errors)
	}
	return nil
}

// theseusConfig is the communicator configuration of the main run.
func (b *benchCmd) theseusConfig(cfg *config, dir string) theseus.Config {
	tc := theseus.Config{Backend: cfg.backend, ContextDir: dir, Device: b.deviceOrdinal(cfg)}
	tc.Options.Timeout = b.timeout
	tc.Options.Trace = b.trace
	return tc
}

// ctxLogger receives the main communicator's selector messages and prints
// each warning once on standard error (the ranks of this process share it;
// in multi-process mode only rank 0 prints): a bad manifest or policy line
// (file:line:col, as theseusc select and lint report it), a schedule that
// does not load. Without it they would go to the NCCL-style log, off by
// default, and a bad policy line would silently change the schedule.
type ctxLogger struct {
	mu    sync.Mutex
	w     io.Writer
	quiet bool
	seen  map[string]bool
}

func (l *ctxLogger) Warnf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.quiet || l.seen[msg] {
		return
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[msg] = true
	fmt.Fprintf(l.w, "theseus-bench: %s\n", msg)
}

func (l *ctxLogger) Infof(string, ...any) {}

// deviceOrdinal is --device, else the launcher's local rank, else 0.
func (b *benchCmd) deviceOrdinal(cfg *config) int {
	if b.device >= 0 || !cfg.multi || cfg.backend == "host" {
		return max(b.device, 0)
	}
	for _, v := range []string{"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"} {
		if s, ok := os.LookupEnv(v); ok { // launcher conventions, as LaunchInfoFromEnv reads them
			if d, err := strconv.Atoi(strings.TrimSpace(s)); err == nil && d >= 0 {
				return d
			}
		}
	}
	return 0
}

// setUp creates this process's ranks of the run's communicator on the
// run's context and their buffers for cfg's rows, and fills the header's
// context and layout. The caller closes the world (the communicators,
// then the buffers: seed Known Issue 1).
func (b *benchCmd) setUp(ctx context.Context, cfg *config) (w *world, err error) {
	dir := cfg.ctxDir
	cfg.header.Context = dir
	tc := b.theseusConfig(cfg, dir)
	tc.Options.SelectorLogger = &ctxLogger{w: b.s.Err, quiet: cfg.multi && cfg.launch.Rank != 0}
	var comms []*theseus.Comm
	if cfg.multi {
		c, err := theseus.Join(ctx, cfg.launch, tc)
		if err != nil {
			return nil, err
		}
		comms = []*theseus.Comm{c}
	} else if comms, err = theseus.NewLocalComms(ctx, cfg.nranks, tc); err != nil {
		return nil, err
	}
	var bufBytes int64
	for _, r := range cfg.plan.rows() {
		bufBytes = max(bufBytes, shapeOf(r.Coll, r.Size, r.Type.T.Size(), cfg.nranks).Bytes)
	}
	w = &world{comms: comms, refs: newReferences(len(comms), bufBytes)}
	cfg.header.NLocalRanks = comms[0].NLocalRanks()
	cfg.header.Nodes = comms[0].Nodes()
	for _, c := range comms {
		rb, err := newRankBench(c, w.refs, bufBytes)
		if err != nil {
			w.close()
			return nil, err
		}
		w.rbs = append(w.rbs, rb)
	}
	return w, nil
}

// execute sets up the ranks, runs the benchmark and the hot swap, and
// prints (rank 0). It returns the report on rank 0, nil on other ranks.
func (b *benchCmd) execute(ctx context.Context, cfg *config) (*Report, error) {
	// Rank 0 prints as the rows come. The signal handler is installed
	// before the ranks are set up: creating a communicator reads the
	// context (its first epoch), whose diagnostics may be the first output.
	rank0 := !cfg.multi || cfg.launch.Rank == 0
	cfg.header.Context = cfg.ctxDir
	rep := &Report{Header: cfg.header}
	var repMu sync.Mutex // rep and out: the rows, and a partial report on a signal
	var out *textPrinter
	if rank0 && cfg.format == formatText {
		out = &textPrinter{w: b.s.Out}
	}
	// partial prints, on rank 0, what was measured before err ended the
	// run (a failed collective, SIGINT): the text footer, or the JSON or
	// CSV report, with the error.
	partial := func(err error) {
		if !rank0 {
			return
		}
		repMu.Lock()
		defer repMu.Unlock()
		rep.Error = err.Error()
		summarize(rep)
		if out != nil {
			out.footer(rep)
			return
		}
		if p, perr := printers.Lookup(cfg.format); perr == nil {
			p(b.s.Out, rep)
		}
	}
	defer printOnSignal(func(sig os.Signal) {
		err := fmt.Errorf("interrupted (%s) after %d row(s)", signalName(sig), len(rep.Rows))
		partial(err)
		fmt.Fprintf(b.s.Err, "theseus-bench: %v\n", err)
	})()
	w, err := b.setUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer w.close()
	dir, rows := cfg.ctxDir, cfg.plan.rows()
	repMu.Lock()
	rep.Header = cfg.header // with what setUp found (context, node shape)
	repMu.Unlock()
	if out != nil {
		repMu.Lock()
		out.header(cfg.header)
		repMu.Unlock()
	}
	steps := len(rows)
	if b.hotswap {
		steps++
	}
	bar := b.progressBar(rank0, steps)
	tick := func(desc string) {
		if bar != nil {
			bar.Describe(desc)
			bar.Add(1)
		}
	}
	emit := func(r Row) {
		repMu.Lock()
		rep.Rows = append(rep.Rows, r)
		if out != nil {
			if bar != nil {
				bar.Clear()
			}
			out.row(r)
		}
		repMu.Unlock()
		tick(fmt.Sprintf("%s %s", r.Collective, humanBytes(r.Bytes)))
	}
	finish := func() {
		if bar != nil {
			bar.Finish()
			bar.Clear()
		}
	}

	// Phase 1: the table. Every local rank runs the same rows.
	err = w.each(func(i int, rb *rankBench) error {
		fp := cfg.fingerprint()
		got, err := rb.agg.Max([]int64{fp, -fp})
		if errors.Is(err, theseus.ErrNoSchedule) {
			return fmt.Errorf("selection context %s has no schedule for an int64 allreduce of %d ranks (%d per node), which theseus-bench needs to combine the ranks' results: %w",
				dir, cfg.nranks, rb.c.NLocalRanks(), err)
		}
		if err != nil {
			return fmt.Errorf("agreeing on the flags: %w", err)
		}
		if got[0] != fp || -got[1] != fp {
			return fmt.Errorf("the ranks were started with different flags")
		}
		for _, rs := range rows {
			row, err := rb.runRow(&cfg.plan, rs)
			if err != nil {
				return err
			}
			if rb.c.Rank() == 0 {
				emit(row)
			}
		}
		return nil
	})
	if err != nil {
		finish()
		partial(err)
		return nil, err
	}
	// Phase 2: the hot swap.
	if b.hotswap {
		hs, err := b.hotSwapPhase(ctx, cfg, dir, w)
		if err != nil {
			finish()
			partial(err)
			return nil, err
		}
		rep.HotSwap = hs
		tick("hot swap")
	}
	finish()
	if !rank0 {
		return nil, nil
	}
	summarize(rep)
	if out != nil {
		out.footer(rep)
		return rep, nil
	}
	p, _ := printers.Lookup(cfg.format)
	if err := p(b.s.Out, rep); err != nil {
		return nil, err
	}
	if cfg.format == formatCSV && rep.HotSwap != nil {
		if err := printHotSwapCSV(b.s.Err, rep.HotSwap); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// world is this process's ranks of the main communicator.
type world struct {
	comms []*theseus.Comm
	rbs   []*rankBench
	refs  *references
}

func (w *world) close() {
	for _, c := range w.comms {
		c.Destroy()
	}
	for _, rb := range w.rbs {
		rb.Free()
	}
}

// each runs f on every local rank concurrently. The first error aborts
// every local rank (so that none waits for the timeout) and is returned,
// preferring a root cause over the aborts it caused.
func (w *world) each(f func(i int, rb *rankBench) error) error {
	return eachComm(w.comms, func(i int, _ *theseus.Comm) error { return f(i, w.rbs[i]) })
}

func eachComm(comms []*theseus.Comm, f func(i int, c *theseus.Comm) error) error {
	errs := make([]error, len(comms))
	var once sync.Once
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(i, c); err != nil {
				errs[i] = fmt.Errorf("rank %d: %w", c.Rank(), err)
				once.Do(func() {
					for _, c := range comms {
						c.Abort()
					}
				})
			}
		}()
	}
	wg.Wait()
	return firstError(errs)
}

// hotSwapPhase runs the hot-swap demonstration on a communicator of its own
// (every rank), over a private copy of the context that reads the
// context every hsPeriod requests, and returns its outcome (on every rank).
func (b *benchCmd) hotSwapPhase(ctx context.Context, cfg *config, dir string, w *world) (*HotSwap, error) {
	// Every rank must agree whether to run it and what to publish.
	attr, skipped, err := agreeHotSwapAttr(w, cfg.hsAttr, cfg.nranks, dir)
	if err != nil {
		return nil, err
	}
	if skipped != "" {
		return &HotSwap{Skipped: skipped}, nil
	}
	copyDir := dir
	publishTo := func(v int) error { return theseus.PublishValue(copyDir, attr, v) }
	where := hsWhere(cfg.multi, copyDir, attr)
	away, back := hsValues(attr, cfg.nranks)
	if dc, name, ok := daemonFor(b.contextd, dir); ok {
		// The daemon serves dir: publish through it (hotswap_daemon.go),
		// and put back the value found there.
		found, err := daemonValue(dc, name, attr)
		if err != nil {
			return nil, err
		}
		// Every rank skips if one does (each process asks its own daemon).
		var skip int64
		if found == away {
			skip = 1
		}
		var skips []int64
		if err := w.each(func(i int, rb *rankBench) error {
			s, err := rb.agg.Sum([]int64{skip})
			if i == 0 {
				skips = s
			}
			return err
		}); err != nil {
			return nil, err
		}
		if skips[0] > 0 {
			return &HotSwap{Skipped: fmt.Sprintf("context %s (theseus-contextd) already has %s = %d, the value the demonstration publishes: it would switch nothing, so nothing was published "+
				"(set %s to another value first, or pass --contextd none to run it on a private copy)", name, attr, away, attr)}, nil
		}
		back = found
		publishTo, where = daemonPublish(dc, name, attr), "published with theseus-contextd ("+dc.Where()+") to context "+name+", read in "+dir
	} else {
		if copyDir, err = os.MkdirTemp("", "theseus-bench-hotswap-"); err != nil {
			return nil, err
		}
		unregister := removeOnSignal(copyDir)
		defer func() {
			os.RemoveAll(copyDir)
			unregister()
		}()
		if err := copyContext(dir, copyDir); err != nil {
			return nil, fmt.Errorf("copying the context for the hot swap: %w", err)
		}
		where = hsWhere(cfg.multi, copyDir, attr)
	}
	tc := b.theseusConfig(cfg, copyDir)
	tc.Options.CheckPeriod = hsPeriod
	var demo []*theseus.Comm
	if cfg.multi {
		id, err := shareUniqueID(w.rbs[0])
		if err != nil {
			return nil, err
		}
		c, err := theseus.NewComm(ctx, id, w.comms[0].Rank(), cfg.nranks, tc)
		if err != nil {
			return nil, err
		}
		demo = []*theseus.Comm{c}
	} else {
		if demo, err = theseus.NewLocalComms(ctx, cfg.nranks, tc); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, c := range demo {
			c.Destroy()
		}
	}()
	sums := make([]*HotSwap, len(demo))
	err = eachComm(demo, func(i int, c *theseus.Comm) error {
		publish := publishTo
		if !cfg.multi && c.Rank() != 0 || cfg.multi && copyDir == dir && c.Rank() != 0 {
			publish = func(int) error { return nil } // rank 0 publishes to the shared copy, or through the daemon
		}
		rec, err := runHotSwap(c, w.refs, attr, away, back, publish)
		if err != nil {
			return err
		}
		agg, err := newAggregator(c)
		if err != nil {
			return err
		}
		defer agg.Free()
		sums[i], err = summarizeHotSwap(agg, rec, attr, away, back, where)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sums[0], nil
}

// shareUniqueID makes a unique id on rank 0 and broadcasts it to every rank
// over the main communicator (multi-process mode), in place in the
// aggregator's buffer (aggBytes; the table's buffers may be smaller than an
// id: -e 8).
func shareUniqueID(rb *rankBench) (theseus.UniqueID, error) {
	var id theseus.UniqueID
	if rb.c.Rank() == 0 {
		var err error
		if id, err = theseus.GetUniqueID(); err != nil {
			return id, err
		}
	}
	buf := rb.agg.buf
	if err := rb.mem.Write(buf, id[:]); err != nil {
		return id, err
	}
	if err := rb.c.Broadcast(buf, buf, int64(len(id)), theseus.Uint8, 0, nil); err != nil {
		return id, fmt.Errorf("broadcasting the hot swap's unique id: %w", err)
	}
	got, err := rb.mem.Read(buf, int64(len(id)))
	if err != nil {
		return id, err
	}
	copy(id[:], got)
	return id, nil
}

// firstError returns the root cause among the ranks' errors: the first that
// is not a consequence of another rank's abort.
func firstError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		// Effects of the abort eachComm did: a lost peer, a call on an
		// aborted communicator (ErrState), a launch stopped by it, a wait
		// whose context the abort cancelled.
		if !errors.Is(err, theseus.ErrLostRank) && !errors.Is(err, theseus.ErrState) && !errors.Is(err, context.Canceled) &&
			!strings.Contains(err.Error(), "abort") && !strings.Contains(err.Error(), context.Canceled.Error()) {
			return err
		}
	}
	return first
}

// progressBar returns the progress bar (rank 0, standard error a terminal
// under --progress auto), or nil.
func (b *benchCmd) progressBar(rank0 bool, total int) *progressbar.ProgressBar {
	if !rank0 || b.progress == "never" {
		return nil
	}
	if b.progress == "auto" {
		f, ok := b.s.Err.(*os.File)
		if !ok || !term.IsTerminal(int(f.Fd())) {
			return nil
		}
	}
	return progressbar.NewOptions(total, progressbar.OptionSetWriter(b.s.Err), progressbar.OptionSetDescription("theseus-bench"),
		progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(), progressbar.OptionSetWidth(30))
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
