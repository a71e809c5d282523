package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gonum.org/v1/gonum/stat"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/internal/nccltests"
)

// defaultModeRegexp finds the mode label in a file name: a field g<N>
// between '-', '_' or '.' separators ("nccl-g1-all_reduce.txt" is mode
// g1), as in the lead's runs with and without CUDA graphs (-G 1).
const defaultModeRegexp = `(?:^|[-_.])(g[0-9]+)(?:[-_.]|$)`

// smallBytes bounds the sizes whose time ratios the summary's median
// takes: 0 < size ≤ 64 KiB, where latency, not bandwidth, decides.
const smallBytes = 64 << 10

// compareCmd is `theseus-bench compare` with its options.
type compareCmd struct {
	cmd *cobra.Command
	s   cli.Streams

	baseline, candidate []string
	baseName, candName  string
	markdown, csv, plot string
	modeRegexp          string
	allowUnmatched      bool
	plotInPlace         bool
}

func newCompareCmd(s cli.Streams) *cobra.Command {
	c := &compareCmd{s: s}
	c.cmd = &cobra.Command{
		Use:   "compare --baseline DIR|FILE... --candidate DIR|FILE... [flags]",
		Short: "Compare two sets of nccl-tests (or theseus-bench) outputs side by side: busbw, time and their ratios",
		Long: `compare reads nccl-tests outputs (all_reduce_perf, all_gather_perf, …, the
text they print) or theseus-bench text outputs of two libraries — a baseline
(default name NCCL) and a candidate (default name Theseus) — pairs them, and
writes a markdown report: per collective and mode, a table of every size with
both libraries' time (µs) and busbw (GB/s), out of place then in place, the
candidate/baseline time and busbw ratios, and #wrong of both; a summary line
with the busbw ratio at the largest size and the median time ratio over the
sizes 0 < size ≤ 64 KiB. --csv writes the same rows as CSV; --plot-dir draws,
per collective, busbw and time against the size (log₂ axis) for both
libraries and every mode, as PNG files.

Each --baseline and --candidate value is a file or a directory (its *.txt
and *.log files); files without a table (build logs, a run that failed
before printing one) are skipped with a note. Outputs pair by collective
(from nccl-tests' "# Collective test starting:" line or theseus-bench's
headings), number of ranks (the "#  Rank" lines, theseus-bench's header) and
mode: the file name's first match of --mode-regexp (its first group when it
has one), by default a g<N> field such as g0 and g1 in nccl-g0-all_reduce.txt
and nccl-g1-all_reduce.txt; names without one have the empty mode. A
theseus-bench output holds every collective, so one file pairs with many.
Rows pair by datatype, reduction, root and size.

Ratios are candidate / baseline: a busbw ratio above 1, or a time ratio
below 1, means the candidate is faster. A ratio is "-" where the baseline's
value is 0 (nccl-tests prints busbw with two decimals) or a side lacks the
size.

Exit codes: 0 compared; 1 compared, but some row has #wrong > 0 on a side;
2 usage error (a missing or malformed file — the message gives file:line:col
—, a collective or mode on one side only, unless --allow-unmatched; a
--markdown or --csv folder that does not exist, a --plot-dir that cannot be
created, an output that is an input or --markdown and --csv naming the same
file); 3 an output could not be written. An input given twice (a file and
its directory) is read once.`,
		Example: `  theseus-bench compare --baseline results/nccl --candidate results/theseus
  theseus-bench compare --baseline nccl/ --candidate theseus/ --markdown report.md --plot-dir plots --csv report.csv
  theseus-bench compare --baseline nccl-g0-all_reduce.txt --candidate bench.txt --mode-regexp '' --allow-unmatched`,
		Args: cli.ExactArgs(0, "no arguments (inputs go to --baseline and --candidate)"),
		RunE: cli.RunE(c.runE),
	}
	f := c.cmd.Flags()
	f.SortFlags = false
	f.StringSliceVar(&c.baseline, "baseline", nil, "baseline outputs: files or directories (their *.txt and *.log), comma-separated or repeated (required)")
	f.StringSliceVar(&c.candidate, "candidate", nil, "candidate outputs, likewise (required)")
	f.StringVar(&c.baseName, "baseline-name", "NCCL", "the baseline's name in the report")
	f.StringVar(&c.candName, "candidate-name", "Theseus", "the candidate's name in the report")
	f.StringVar(&c.markdown, "markdown", "", "write the markdown report to this file (default: standard output)")
	f.StringVar(&c.csv, "csv", "", "also write one CSV record per compared row to this file")
	f.StringVar(&c.plot, "plot-dir", "", "also draw <collective>-n<ranks>-busbw.png and -time.png into this directory (created if missing)")
	f.BoolVar(&c.plotInPlace, "plot-in-place", false, "plot the in-place results (default: out of place)")
	f.StringVar(&c.modeRegexp, "mode-regexp", defaultModeRegexp, "regular expression (Go syntax) whose first match in a file's name is its mode; '' for no modes")
	f.BoolVar(&c.allowUnmatched, "allow-unmatched", false, "note collectives or modes found on one side only instead of failing")
	return c.cmd
}

// input is one parsed output file.
type input struct {
	path string
	mode string
	out  *nccltests.Output
}

// pairKey identifies what pairs: collective, ranks and mode.
type pairKey struct {
	coll   string
	nranks int
	mode   string
}

func (k pairKey) String() string {
	s := k.coll
	if k.nranks > 0 {
		s += fmt.Sprintf(", %d ranks", k.nranks)
	}
	if k.mode != "" {
		s += ", mode " + k.mode
	}
	return s
}

// series is one side's rows of one pairKey (from one file).
type series struct {
	in   *input
	rows []nccltests.Row
}

// dataKey identifies a table within a pair: datatype, reduction, root.
type dataKey struct {
	typ, redop string
	root       int
}

func (d dataKey) String() string {
	s := d.typ + " " + d.redop
	if d.root >= 0 {
		s += fmt.Sprintf(" root %d", d.root)
	}
	return s
}

// cmpRow is one size of a table; base or cand is nil when that side lacks
// the size.
type cmpRow struct {
	bytes, count int64
	base, cand   *nccltests.Row
}

// summary is a table's summary line.
type summary struct {
	// largest is the largest size both sides have; busRatio its busbw
	// ratios, out of place and in place (NaN when undefined).
	largest    int64
	hasLargest bool
	busRatio   [2]float64
	// smallN sizes 0 < size ≤ smallBytes have a time ratio in both
	// arrangements; timeMedian are the medians.
	smallN     [2]int
	timeMedian [2]float64
}

// table is one (pair, dataKey).
type table struct {
	key  pairKey
	data dataKey
	base *series
	cand *series
	rows []cmpRow
	sum  summary
}

// comparison is the whole report.
type comparison struct {
	baseName, candName string
	baseFiles          []*input
	candFiles          []*input
	tables             []*table
	unmatched          []string // notes, under --allow-unmatched
	plots              map[*table][2]string
}

func (c *compareCmd) runE(cmd *cobra.Command, _ []string) error {
	if len(c.baseline) == 0 || len(c.candidate) == 0 {
		return cli.Usagef("both --baseline and --candidate are required")
	}
	if strings.TrimSpace(c.baseName) == "" || strings.TrimSpace(c.candName) == "" {
		return cli.Usagef("--baseline-name and --candidate-name must not be empty")
	}
	var modeRe *regexp.Regexp
	if c.modeRegexp != "" {
		var err error
		if modeRe, err = regexp.Compile(c.modeRegexp); err != nil {
			return cli.Usagef("--mode-regexp: %v", err)
		}
	}
	for _, o := range []struct{ flag, path string }{{"--markdown", c.markdown}, {"--csv", c.csv}} {
		if o.path == "" {
			continue
		}
		if st, err := os.Stat(filepath.Dir(o.path)); err != nil || !st.IsDir() {
			return cli.Usagef("%s %s: no such folder %s", o.flag, o.path, filepath.Dir(o.path))
		}
	}
	if c.markdown != "" && c.csv != "" && samePath(c.markdown, c.csv) {
		return cli.Usagef("--markdown %s and --csv %s are the same file: the CSV would overwrite the report", c.markdown, c.csv)
	}
	base, err := c.collect("--baseline", c.baseline, modeRe)
	if err != nil {
		return err
	}
	cand, err := c.collect("--candidate", c.candidate, modeRe)
	if err != nil {
		return err
	}
	// Never overwrite an input with the report.
	for _, o := range []struct{ flag, path string }{{"--markdown", c.markdown}, {"--csv", c.csv}} {
		if o.path == "" {
			continue
		}
		for _, side := range []struct {
			flag string
			ins  []*input
		}{{"--baseline", base}, {"--candidate", cand}} {
			for _, in := range side.ins {
				if samePath(o.path, in.path) {
					return cli.Usagef("%s %s is an input (%s): writing it would destroy the output it was compared from", o.flag, o.path, side.flag)
				}
			}
		}
	}
	cr, err := compare(c.baseName, c.candName, base, cand, c.allowUnmatched)
	if err != nil {
		return err
	}
	for _, n := range cr.unmatched {
		fmt.Fprintf(c.s.Err, "theseus-bench compare: not compared: %s\n", n)
	}
	if c.plot != "" {
		if err := os.MkdirAll(c.plot, 0o755); err != nil {
			return cli.Usagef("--plot-dir: %v", err)
		}
		cr.plots, err = writePlots(c.plot, cr, c.plotInPlace)
		if err != nil {
			return cli.Internal(err)
		}
	}
	if err := c.writeOutputs(cr); err != nil {
		return cli.Internal(err)
	}
	if n := cr.wrongRows(); n > 0 {
		return cli.Findingsf("%d compared rows have #wrong > 0 on a side (the #wrong columns say which)", n)
	}
	return nil
}

func (c *compareCmd) writeOutputs(cr *comparison) error {
	mdPath := ""
	if c.markdown != "" {
		mdPath = c.markdown
	}
	write := func(path string, f func(io.Writer) error) error {
		if path == "" {
			return f(c.s.Out)
		}
		fh, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := f(fh); err != nil {
			fh.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return fh.Close()
	}
	if err := write(mdPath, func(w io.Writer) error { return writeMarkdown(w, cr, mdPath) }); err != nil {
		return err
	}
	if c.csv != "" {
		return write(c.csv, func(w io.Writer) error { return writeCompareCSV(w, cr) })
	}
	return nil
}

// collect reads one side's files: each value is a file or a directory
// (its *.txt and *.log files, sorted, not recursive).
func (c *compareCmd) collect(flag string, args []string, modeRe *regexp.Regexp) ([]*input, error) {
	var paths []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, cli.Usagef("%s %s: no such file or directory", flag, a)
			}
			return nil, cli.Usagef("%s %s: %v", flag, a, err)
		}
		if !st.IsDir() {
			paths = append(paths, a)
			continue
		}
		ents, err := os.ReadDir(a)
		if err != nil {
			return nil, cli.Usagef("%s %s: %v", flag, a, err)
		}
		n := len(paths)
		for _, e := range ents {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".txt" || ext == ".log") {
				paths = append(paths, filepath.Join(a, e.Name()))
			}
		}
		if len(paths) == n {
			return nil, cli.Usagef("%s %s: the directory has no .txt or .log files", flag, a)
		}
	}
	var ins []*input
	var read []os.FileInfo // the files read so far, to read each once
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil {
			if i := slices.IndexFunc(read, func(o os.FileInfo) bool { return os.SameFile(o, st) }); i >= 0 {
				fmt.Fprintf(c.s.Err, "theseus-bench compare: %s %s: given twice; read once\n", flag, p)
				continue
			}
			read = append(read, st)
		}
		out, err := nccltests.ParseFile(p)
		if err != nil {
			return nil, cli.Usage(fmt.Errorf("%s: %w", flag, err))
		}
		if len(out.Rows) == 0 {
			fmt.Fprintf(c.s.Err, "theseus-bench compare: skipped %s: no nccl-tests or theseus-bench rows\n", p)
			continue
		}
		ins = append(ins, &input{path: p, mode: modeOf(p, modeRe), out: out})
	}
	if len(ins) == 0 {
		return nil, cli.Usagef("%s %s: no nccl-tests or theseus-bench rows in any file", flag, strings.Join(args, ","))
	}
	return ins, nil
}

// samePath reports whether a and b name the same file: the same cleaned
// absolute path, or (both existing) os.SameFile.
func samePath(a, b string) bool {
	aa, err1 := filepath.Abs(a)
	ab, err2 := filepath.Abs(b)
	if err1 == nil && err2 == nil && aa == ab {
		return true
	}
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// modeOf is the mode label of a file: the first match of re in its base
// name without extension (the first group's text when re has groups).
func modeOf(path string, re *regexp.Regexp) string {
	if re == nil {
		return ""
	}
	base := filepath.Base(path)
	base = strings.TrimSuffix(base, filepath.Ext(base))
	m := re.FindStringSubmatch(base)
	switch {
	case m == nil:
		return ""
	case len(m) > 1 && m[1] != "":
		return m[1]
	}
	return m[0]
}

// byKey splits a side's files into series by pairKey; two files holding
// the same key are an error.
func byKey(flag string, ins []*input) (map[pairKey]*series, error) {
	m := map[pairKey]*series{}
	for _, in := range ins {
		for _, r := range in.out.Rows {
			k := pairKey{coll: r.Collective, nranks: in.out.NRanks, mode: in.mode}
			s := m[k]
			if s == nil {
				s = &series{in: in}
				m[k] = s
			} else if s.in != in {
				return nil, cli.Usagef("%s: %s and %s both hold %s: keep one, or tell them apart by mode (--mode-regexp)", flag, s.in.path, in.path, k)
			}
			s.rows = append(s.rows, r)
		}
	}
	return m, nil
}

func collOrder(c string) int {
	if i := slices.Index(nccltests.Collectives, c); i >= 0 {
		return i
	}
	return len(nccltests.Collectives)
}

func sortKeys(keys []pairKey) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if oa, ob := collOrder(a.coll), collOrder(b.coll); oa != ob {
			return oa < ob
		}
		if a.coll != b.coll {
			return a.coll < b.coll
		}
		if a.nranks != b.nranks {
			return a.nranks < b.nranks
		}
		return a.mode < b.mode
	})
}

// compare pairs the two sides and builds the tables. Errors (usage): a
// pairKey on one side only (unless allowUnmatched; then it is a note),
// nothing to compare at all, two files of a side with the same pairKey.
func compare(baseName, candName string, base, cand []*input, allowUnmatched bool) (*comparison, error) {
	bm, err := byKey("--baseline", base)
	if err != nil {
		return nil, err
	}
	cm, err := byKey("--candidate", cand)
	if err != nil {
		return nil, err
	}
	cr := &comparison{baseName: baseName, candName: candName, baseFiles: base, candFiles: cand}
	var keys []pairKey
	seen := map[pairKey]bool{}
	for _, m := range []map[pairKey]*series{bm, cm} {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	sortKeys(keys)
	var missing []string
	for _, k := range keys {
		b, c := bm[k], cm[k]
		switch {
		case b == nil:
			missing = append(missing, fmt.Sprintf("%s: only in the candidate (%s)", k, c.in.path))
			continue
		case c == nil:
			missing = append(missing, fmt.Sprintf("%s: only in the baseline (%s)", k, b.in.path))
			continue
		}
		cr.tables = append(cr.tables, pairTables(k, b, c)...)
	}
	const hint = "outputs pair by collective, number of ranks and mode (the file name's match of --mode-regexp)"
	switch {
	case len(cr.tables) == 0:
		return nil, cli.Usagef("nothing to compare: no collective, number of ranks and mode is on both sides (%s):\n  %s", hint, strings.Join(missing, "\n  "))
	case len(missing) > 0 && !allowUnmatched:
		return nil, cli.Usagef("found on one side only (%s; --allow-unmatched compares the rest):\n  %s", hint, strings.Join(missing, "\n  "))
	}
	cr.unmatched = missing
	return cr, nil
}

// pairTables splits a pair by datatype, reduction and root, and pairs the
// rows by size: the k-th row of a size on one side with the k-th row of
// that size on the other (repeated runs, -N, print a size again).
func pairTables(k pairKey, b, c *series) []*table {
	type slot struct {
		d     dataKey
		bytes int64
		nth   int
	}
	byData := map[dataKey]*table{}
	var order []dataKey
	at := map[slot]int{} // index into its table's rows
	for side, s := range []*series{b, c} {
		nth := map[dataKey]map[int64]int{}
		for i := range s.rows {
			r := &s.rows[i]
			d := dataKey{typ: r.Type, redop: r.RedOp, root: r.Root}
			t := byData[d]
			if t == nil {
				t = &table{key: k, data: d, base: b, cand: c}
				byData[d] = t
				order = append(order, d)
			}
			if nth[d] == nil {
				nth[d] = map[int64]int{}
			}
			sl := slot{d, r.Bytes, nth[d][r.Bytes]}
			nth[d][r.Bytes]++
			j, ok := at[sl]
			if !ok {
				j = len(t.rows)
				at[sl] = j
				t.rows = append(t.rows, cmpRow{bytes: r.Bytes, count: r.Count})
			}
			if side == 0 {
				t.rows[j].base = r
			} else {
				t.rows[j].cand = r
			}
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i].String() < order[j].String() })
	var ts []*table
	for _, d := range order {
		t := byData[d]
		sort.SliceStable(t.rows, func(i, j int) bool { return t.rows[i].bytes < t.rows[j].bytes })
		t.sum = summarizeTable(t.rows)
		ts = append(ts, t)
	}
	return ts
}

// result returns arrangement a (0 out of place, 1 in place) of r.
func result(r *nccltests.Row, a int) *nccltests.Result {
	if r == nil {
		return nil
	}
	if a == 0 {
		return &r.OutOfPlace
	}
	return &r.InPlace
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// ratio is cand/base; NaN when a side is missing, the baseline is not
// positive or a value is not finite.
func ratio(cand, base float64) float64 {
	if !finite(cand) || !finite(base) || base <= 0 || cand < 0 {
		return math.NaN()
	}
	return cand / base
}

func (r cmpRow) timeRatio(a int) float64 {
	b, c := result(r.base, a), result(r.cand, a)
	if b == nil || c == nil {
		return math.NaN()
	}
	return ratio(c.TimeUS, b.TimeUS)
}

// busRatio is the candidate's busbw over the baseline's. Rows pair the same
// size and number of ranks, so busbw's formula (nccl-tests: bytes / time ×
// the collective's factor) cancels and the ratio is baseline time over
// candidate time: exact, where the printed busbw (rounded to 0.01 GB/s)
// would make small sizes' ratios noise (0.00, 0.33 for 0.30).
func (r cmpRow) busRatio(a int) float64 {
	b, c := result(r.base, a), result(r.cand, a)
	if b == nil || c == nil {
		return math.NaN()
	}
	if r.bytes <= 0 || !finite(c.TimeUS) || c.TimeUS <= 0 {
		return math.NaN() // no bytes moved: no bandwidth
	}
	return ratio(b.TimeUS, c.TimeUS)
}

// summarizeTable computes the summary line: busbw ratios at the largest
// size both sides have, and the median (gonum stat.Quantile at 0.5,
// Empirical: the lower middle value for an even count) of the time
// ratios over 0 < size ≤ 64 KiB.
func summarizeTable(rows []cmpRow) summary {
	var s summary
	s.busRatio = [2]float64{math.NaN(), math.NaN()}
	s.timeMedian = [2]float64{math.NaN(), math.NaN()}
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].base != nil && rows[i].cand != nil {
			s.largest, s.hasLargest = rows[i].bytes, true
			s.busRatio = [2]float64{rows[i].busRatio(0), rows[i].busRatio(1)}
			break
		}
	}
	for a := range 2 {
		var xs []float64
		for _, r := range rows {
			if r.bytes > 0 && r.bytes <= smallBytes {
				if v := r.timeRatio(a); finite(v) {
					xs = append(xs, v)
				}
			}
		}
		s.smallN[a] = len(xs)
		if len(xs) > 0 {
			sort.Float64s(xs)
			s.timeMedian[a] = stat.Quantile(0.5, stat.Empirical, xs, nil)
		}
	}
	return s
}

// wrongRows counts the compared rows with #wrong > 0 on a side.
func (c *comparison) wrongRows() int {
	n := 0
	for _, t := range c.tables {
		for _, r := range t.rows {
			for _, x := range []*nccltests.Row{r.base, r.cand} {
				if x != nil && (wrong(x.OutOfPlace.Wrong) || wrong(x.InPlace.Wrong)) {
					n++
					break
				}
			}
		}
	}
	return n
}

func wrong(w *int64) bool { return w != nil && *w > 0 }

// sizeLabel writes a size in bytes with binary K, M, G suffixes when it
// is a whole multiple ("64K", "16M"), else in bytes.
func sizeLabel(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dK", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// maxFixedWidth bounds a number written without an exponent: a value
// whose fixed-point form is longer (an implausible 1e308 GB/s from a
// corrupt input) is written as %.4g instead of hundreds of digits.
const maxFixedWidth = 12

// floatStr writes v as nccl-tests' getFloatStr does (src/util.cu): two
// decimals if that fits in width characters, else one, else none; beyond
// maxFixedWidth characters with an exponent (%.4g).
func floatStr(v float64, width int) string {
	if !finite(v) {
		return strings.ToLower(strconv.FormatFloat(v, 'f', -1, 64))
	}
	for _, prec := range []int{2, 1} {
		if s := strconv.FormatFloat(v, 'f', prec, 64); len(s) <= width {
			return s
		}
	}
	if s := strconv.FormatFloat(v, 'f', 0, 64); len(s) <= maxFixedWidth {
		return s
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// fmtTime writes a time in µs as nccl-tests' 7-character column does.
func fmtTime(us float64) string { return floatStr(us, 7) }

// fmtBW writes a bandwidth in GB/s as nccl-tests' 6-character columns do.
func fmtBW(v float64) string { return floatStr(v, 6) }

func fmtRatio(v float64) string {
	if !finite(v) {
		return "-"
	}
	if s := strconv.FormatFloat(v, 'f', 2, 64); len(s) <= maxFixedWidth {
		return s
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

func fmtWrong(r *nccltests.Row) string {
	if r == nil {
		return "-"
	}
	f := func(w *int64) string {
		if w == nil {
			return "N/A"
		}
		return strconv.FormatInt(*w, 10)
	}
	return f(r.OutOfPlace.Wrong) + "/" + f(r.InPlace.Wrong)
}

// mdEscape makes s safe inside a markdown table cell.
func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "\r", " ").Replace(s)
}

// describe says where a side's file came from: tool, version, library.
func describe(in *input) string {
	o := in.out
	var parts []string
	switch o.Tool {
	case nccltests.NCCLTests:
		s := "nccl-tests"
		if o.Version != "" {
			s += " " + o.Version
		}
		parts = append(parts, s)
		if o.NCCLLibrary > 0 {
			parts = append(parts, "library "+ncclVersion(o.NCCLLibrary))
		}
		if o.Params.Line > 0 {
			parts = append(parts, fmt.Sprintf("-G %d", o.Params.Graph))
		}
	case nccltests.TheseusBench:
		s := "theseus-bench"
		if o.Backend != "" {
			s += ", backend " + o.Backend
		}
		parts = append(parts, s)
	default:
		parts = append(parts, "rows only")
	}
	return fmt.Sprintf("`%s` (%s)", mdEscape(in.path), strings.Join(parts, ", "))
}

// ncclVersion decodes NCCL_VERSION_CODE: X*10000+Y*100+Z since 2.9,
// X*1000+Y*100+Z before.
func ncclVersion(code int) string {
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
}

func (t *table) title() string {
	return fmt.Sprintf("%s: %s", t.key, t.data)
}

func (s summary) line() string {
	var b strings.Builder
	if s.hasLargest {
		fmt.Fprintf(&b, "busbw ratio at %s: %s out of place, %s in place", sizeLabel(s.largest), fmtRatio(s.busRatio[0]), fmtRatio(s.busRatio[1]))
	} else {
		b.WriteString("no size on both sides")
	}
	b.WriteString("; median time ratio over 0 < size ≤ 64K: ")
	for a, name := range []string{"out of place", "in place"} {
		if a > 0 {
			b.WriteString(", ")
		}
		if s.smallN[a] == 0 {
			fmt.Fprintf(&b, "- %s (no size)", name)
			continue
		}
		fmt.Fprintf(&b, "%s %s (%d sizes)", fmtRatio(s.timeMedian[a]), name, s.smallN[a])
	}
	return b.String()
}

// writeMarkdown writes the report. mdPath is where it goes ("" for
// standard output): plot links are relative to its folder.
func writeMarkdown(w io.Writer, cr *comparison, mdPath string) error {
	bn, cn := mdEscape(cr.baseName), mdEscape(cr.candName)
	var b strings.Builder
	fmt.Fprintf(&b, "# %s vs %s: nccl-tests side by side\n\n", cn, bn)
	fmt.Fprintf(&b, "Ratios are %s / %s: a busbw ratio above 1, or a time ratio below 1, means %s is faster. "+
		"Times are in µs and busbw in GB/s, as nccl-tests prints them; sizes in bytes (K, M, G: 2^10, 2^20, 2^30). "+
		"\"oop\" is out of place, \"ip\" in place; #wrong is out of place / in place. "+
		"A ratio is \"-\" where the baseline's value is 0 or a side lacks the size.\n\n", cn, bn, cn)
	fmt.Fprintf(&b, "- %s (baseline): %d file(s)\n", bn, len(cr.baseFiles))
	fmt.Fprintf(&b, "- %s (candidate): %d file(s)\n", cn, len(cr.candFiles))
	for _, n := range cr.unmatched {
		fmt.Fprintf(&b, "- not compared: %s\n", mdEscape(n))
	}
	b.WriteString("\n## Summary\n\n")
	fmt.Fprintf(&b, "| collective | ranks | mode | data | largest size | busbw ratio oop | busbw ratio ip | median time ratio ≤ 64K oop | median time ratio ≤ 64K ip | rows with #wrong > 0 (%s / %s) |\n", bn, cn)
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range cr.tables {
		s := t.sum
		largest := "-"
		if s.hasLargest {
			largest = sizeLabel(s.largest)
		}
		var wb, wc int
		for _, r := range t.rows {
			if r.base != nil && (wrong(r.base.OutOfPlace.Wrong) || wrong(r.base.InPlace.Wrong)) {
				wb++
			}
			if r.cand != nil && (wrong(r.cand.OutOfPlace.Wrong) || wrong(r.cand.InPlace.Wrong)) {
				wc++
			}
		}
		ranks, mode := "-", "-"
		if t.key.nranks > 0 {
			ranks = strconv.Itoa(t.key.nranks)
		}
		if t.key.mode != "" {
			mode = mdEscape(t.key.mode)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %d / %d |\n", t.key.coll, ranks, mode, mdEscape(t.data.String()),
			largest, fmtRatio(s.busRatio[0]), fmtRatio(s.busRatio[1]), fmtRatio(s.timeMedian[0]), fmtRatio(s.timeMedian[1]), wb, wc)
	}
	for _, t := range cr.tables {
		fmt.Fprintf(&b, "\n## %s\n\n", mdEscape(t.title()))
		fmt.Fprintf(&b, "%s: %s; %s: %s.\n\n", bn, describe(t.base.in), cn, describe(t.cand.in))
		b.WriteString("| size |")
		for _, a := range []string{"oop", "ip"} {
			fmt.Fprintf(&b, " %s time %s | %s time %s | %s time ratio | %s busbw %s | %s busbw %s | %s busbw ratio |", a, bn, a, cn, a, a, bn, a, cn, a)
		}
		fmt.Fprintf(&b, " #wrong %s | #wrong %s |\n", bn, cn)
		b.WriteString("|---:|" + strings.Repeat("---:|", 12) + "---:|---:|\n")
		for _, r := range t.rows {
			fmt.Fprintf(&b, "| %s |", sizeLabel(r.bytes))
			for a := range 2 {
				bt, bb, ct, cb := "-", "-", "-", "-"
				if x := result(r.base, a); x != nil {
					bt, bb = fmtTime(x.TimeUS), fmtBW(x.BusBW)
				}
				if x := result(r.cand, a); x != nil {
					ct, cb = fmtTime(x.TimeUS), fmtBW(x.BusBW)
				}
				fmt.Fprintf(&b, " %s | %s | %s | %s | %s | %s |", bt, ct, fmtRatio(r.timeRatio(a)), bb, cb, fmtRatio(r.busRatio(a)))
			}
			fmt.Fprintf(&b, " %s | %s |\n", fmtWrong(r.base), fmtWrong(r.cand))
		}
		fmt.Fprintf(&b, "\n**Summary:** %s.\n", t.sum.line())
		if p, ok := cr.plots[t]; ok {
			b.WriteString("\n")
			for i, what := range []string{"busbw", "time"} {
				link := p[i]
				if rel, err := filepath.Rel(filepath.Dir(mdPath), p[i]); mdPath != "" && err == nil {
					link = rel
				}
				fmt.Fprintf(&b, "![%s %s](%s)\n", mdEscape(t.title()), what, filepath.ToSlash(link))
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// compareCSVHeader lists the CSV columns; side columns are named
// baseline_* and candidate_* whatever the display names.
func compareCSVHeader() []string {
	h := []string{"collective", "nranks", "mode", "type", "redop", "root", "size", "count"}
	for _, a := range []string{"oop", "ip"} {
		for _, s := range []string{"baseline", "candidate"} {
			h = append(h, s+"_"+a+"_time_us", s+"_"+a+"_algbw_gbps", s+"_"+a+"_busbw_gbps", s+"_"+a+"_wrong")
		}
		h = append(h, a+"_time_ratio", a+"_busbw_ratio")
	}
	return h
}

// writeCompareCSV writes one record per compared size; a side's columns
// are empty where it lacks the size, #wrong is empty when unchecked and
// ratios are empty where undefined.
func writeCompareCSV(w io.Writer, cr *comparison) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(compareCSVHeader()); err != nil {
		return err
	}
	g := func(v float64) string {
		if !finite(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	for _, t := range cr.tables {
		for _, r := range t.rows {
			rec := []string{t.key.coll, strconv.Itoa(t.key.nranks), t.key.mode, t.data.typ, t.data.redop, strconv.Itoa(t.data.root),
				strconv.FormatInt(r.bytes, 10), strconv.FormatInt(r.count, 10)}
			for a := range 2 {
				for _, x := range []*nccltests.Result{result(r.base, a), result(r.cand, a)} {
					if x == nil {
						rec = append(rec, "", "", "", "")
						continue
					}
					wr := ""
					if x.Wrong != nil {
						wr = strconv.FormatInt(*x.Wrong, 10)
					}
					rec = append(rec, g(x.TimeUS), g(x.AlgBW), g(x.BusBW), wr)
				}
				rec = append(rec, g(r.timeRatio(a)), g(r.busRatio(a)))
			}
			if err := cw.Write(rec); err != nil {
				return err
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
