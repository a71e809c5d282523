package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

// sweepCmd is `theseus-bench sweep`: every candidate schedule of the
// selection context at every size, each forced in turn, beside what the
// selector picks (docs/theseus-bench.md, "sweep"; docs/crossovers.md).
type sweepCmd struct {
	b         *benchCmd
	out       *cli.OutputFlags
	tolerance float64
	match     string
	sync      bool
	strict    bool
	save      string
}

var sweepPrinters = cli.NewPrinters[*SweepReport]().
	Register(formatText, "a markdown table per collective, datatype and reduction, with the findings and the crossovers", printSweepText).
	Register(formatJSON, "the whole report as one JSON document", func(w io.Writer, r *SweepReport) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(r)
	}).
	Register(formatCSV, "one record per size and schedule (the selector's choice as schedule \"selected\")", printSweepCSV)

func newSweepCmd(s cli.Streams) *cobra.Command {
	sc := &sweepCmd{b: &benchCmd{s: s}}
	b := sc.b
	b.cmd = &cobra.Command{
		Use:   "sweep [flags]",
		Short: "Time every candidate schedule of the selection context at every size, each forced in turn, beside the selector's choice",
		Long: `sweep measures the size crossovers of a selection context. For each collective
(--coll, default allreduce), datatype and reduction, it runs the sizes of -b/-e/-f
three ways: as the selector chooses (the context as it is), and with each
candidate schedule forced in turn. The candidates are the context's schedule
manifest entries of that collective whose nranks is the run's (or absent:
generated entries); an entry is forced by a private copy of the context whose
manifest holds only it, without min_bytes, max_bytes and replaces, at
preference 1, so that it serves every size its usable expression allows (a
size where it is not usable is "-"; a candidate usable at no size, such as a
fail-slow variant while no rank is slow, is listed under the table).

Times are out of place, in microseconds per call: the timed runs enqueued back
to back on a stream of each rank and one wait at the end (as nccl-tests times
them), or each call waited for with --sync. Every run is checked (-c) and
#wrong counts the mismatches over every schedule.

For each size the report gives the fastest candidate and the selected
schedule's time against it; it lists as findings every size where the selected
schedule is slower than another, the fastest, by more than --tolerance, and every size
whose selected time is above a larger size's by more than --tolerance when
the larger size runs another schedule (time falling as size grows: the
selector picked a slower schedule at the smaller size), then the crossovers the measurements suggest (the ranges of sizes with
the same fastest candidate, and ll_max_bytes: the largest size up to which an
LL candidate is the fastest).

In-process (--nranks, goroutines) or one process per rank under a launcher, as
the main command. Exit codes: 0 every element right (and, with --strict, no
finding); 1 wrong elements, or findings under --strict; 2 usage error; 3
failure.`,
		Example: `  theseus-bench sweep --nranks 2 -b 8 -e 64K
  theseus-bench sweep --backend cuda --nranks 2 -b 8 -e 64M --coll allreduce,allgather --json > sweep.json
  RANK=0 WORLD_SIZE=2 theseus-bench sweep --backend cuda --id-file /tmp/id & RANK=1 WORLD_SIZE=2 theseus-bench sweep --backend cuda --id-file /tmp/id`,
		Args: cli.ExactArgs(0, "no arguments"),
		RunE: cli.RunE(sc.runE),
	}
	f := b.cmd.Flags()
	f.SortFlags = false
	b.addRunFlags(f, "allreduce")
	sc.out = cli.AddOutputFlags(b.cmd, sweepPrinters)
	f.Float64Var(&sc.tolerance, "tolerance", 0.1, "a selected time above the fastest candidate's (or a larger size's) by more than this fraction is a finding")
	f.StringVar(&sc.match, "candidates", "", "only the candidates whose name matches this regular expression (Go syntax)")
	f.BoolVar(&sc.sync, "sync", false, "wait for each call (the main command's timing) instead of one wait per timed loop")
	f.BoolVar(&sc.strict, "strict", false, "exit 1 when there are findings")
	f.StringVar(&sc.save, "save", "", "also write the report as JSON to this file (rank 0)")
	b.addJobFlags(f)
	return b.cmd
}

// SweepReport is a whole sweep.
type SweepReport struct {
	Header    Header        `json:"header"`
	Tolerance float64       `json:"tolerance"`
	Timing    string        `json:"timing"` // "stream" or "sync"
	Tables    []*SweepTable `json:"tables"`
	// Wrong is #wrong over every row, schedule and rank.
	Wrong int64 `json:"wrong"`
}

// SweepTable is one collective, datatype and reduction.
type SweepTable struct {
	Collective string           `json:"collective"`
	Type       string           `json:"type"`
	RedOp      string           `json:"redop"`
	Candidates []SweepCandidate `json:"candidates"`
	// Unusable are the candidates usable at no size (not tabled).
	Unusable []string     `json:"unusable"`
	Rows     []SweepRow   `json:"rows"`
	Findings []string     `json:"findings"`
	Ranges   []SweepRange `json:"crossovers"`
	// LLMaxBytes is the largest size up to which an LL candidate is the
	// fastest at every size (nil: no LL candidate, or none is the fastest
	// at the smallest size).
	LLMaxBytes *int64 `json:"ll_max_bytes,omitempty"`
}

// SweepCandidate is one forced schedule manifest entry.
type SweepCandidate struct {
	Entry    int    `json:"entry"` // its id (line number - 1)
	Name     string `json:"name"`
	Protocol string `json:"protocol"` // "ll", "simple" or "" (not known from the entry)
}

// SweepRow is one size.
type SweepRow struct {
	Bytes    int64   `json:"bytes"`
	Count    int64   `json:"count"`
	Selected string  `json:"selected"` // the schedule the selector chose
	TimeUS   float64 `json:"time_us"`  // its time
	// Times are the candidates' times (in Candidates' order), nil where
	// the candidate is not usable.
	Times []*float64 `json:"candidate_time_us"`
	// Best is the fastest candidate (an index into Candidates, -1: none),
	// Ratio the selected time over its time.
	Best  int     `json:"best"`
	Ratio float64 `json:"ratio"`
}

// SweepRange is a range of sizes with the same fastest candidate.
type SweepRange struct {
	From int64  `json:"from_bytes"`
	To   int64  `json:"to_bytes"`
	Best string `json:"best"`
}

func (sc *sweepCmd) runE(cmd *cobra.Command, _ []string) error {
	b := sc.b
	cfg, err := b.parsePlan()
	if err != nil {
		return err
	}
	if cfg.format, err = sc.out.Name(); err != nil {
		return err
	}
	if _, err := sweepPrinters.Lookup(cfg.format); err != nil {
		return err
	}
	if sc.tolerance < 0 || math.IsNaN(sc.tolerance) {
		return cli.Usagef("--tolerance %g: want a fraction >= 0", sc.tolerance)
	}
	var re *regexp.Regexp
	if sc.match != "" {
		if re, err = regexp.Compile(sc.match); err != nil {
			return cli.Usagef("--candidates: %v", err)
		}
	}
	if err := b.parseJob(cfg); err != nil {
		return err
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	rep, err := sc.execute(ctx, cfg, re)
	if err != nil {
		return err
	}
	if rep == nil {
		return nil
	}
	p, _ := sweepPrinters.Lookup(cfg.format)
	if err := p(b.s.Out, rep); err != nil {
		return err
	}
	if sc.save != "" {
		js, _ := sweepPrinters.Lookup(formatJSON)
		var buf bytes.Buffer
		if err := js(&buf, rep); err != nil {
			return err
		}
		if err := os.WriteFile(sc.save, buf.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if rep.Wrong != 0 {
		return cli.Findingsf("#wrong = %d", rep.Wrong)
	}
	if sc.strict {
		n := 0
		for _, t := range rep.Tables {
			n += len(t.Findings)
		}
		if n > 0 {
			return cli.Findingsf("%d findings", n)
		}
	}
	return nil
}

// candidate is one entry of the schedule manifest a sweep forces.
type candidate struct {
	SweepCandidate
	coll ir.Collective
	line []byte // the manifest line, forced (forcedLine)
}

// readCandidates returns the entries of dir's schedule manifest of the
// collectives colls for nranks ranks (entries without nranks serve any),
// and nlocal ranks per node when the entry says, whose name matches re.
func readCandidates(dir string, colls []ir.Collective, nranks, nlocal int, re *regexp.Regexp) ([]candidate, error) {
	f, err := os.Open(filepath.Join(dir, manifest.ScheduleManifest))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []candidate
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for id := 0; sc.Scan(); id++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var e map[string]json.RawMessage
		if json.Unmarshal(line, &e) != nil {
			continue // the selector reports a malformed line; it is no candidate
		}
		str := func(k string) string {
			var s string
			json.Unmarshal(e[k], &s)
			return s
		}
		num := func(k string) (int, bool) {
			var n int
			if raw, ok := e[k]; ok && json.Unmarshal(raw, &n) == nil {
				return n, true
			}
			return 0, false
		}
		coll, err := ir.ParseCollective(str("collective"))
		if err != nil || !containsColl(colls, coll) {
			continue
		}
		if n, ok := num("nranks"); ok && n != nranks {
			continue
		}
		if n, ok := num("nlocalranks"); ok && n != nlocal {
			continue
		}
		name := str("name")
		if name == "" {
			name = strings.TrimSuffix(filepath.Base(str("file")), filepath.Ext(str("file")))
		}
		if name == "" || name == "." {
			name = fmt.Sprintf("entry %d", id)
		}
		if re != nil && !re.MatchString(name) {
			continue
		}
		proto := strings.ToLower(str("protocol"))
		if proto == "" && strings.HasSuffix(name, "_ll") {
			proto = "ll"
		}
		forced, err := forcedLine(e, dir)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", manifest.ScheduleManifest, id+1, err)
		}
		out = append(out, candidate{SweepCandidate: SweepCandidate{Entry: id, Name: name, Protocol: proto}, coll: coll, line: forced})
	}
	return out, sc.Err()
}

func containsColl(cs []ir.Collective, c ir.Collective) bool {
	for _, x := range cs {
		if x == c {
			return true
		}
	}
	return false
}

// forcedLine is manifest entry e made to serve every size alone: without
// min_bytes, max_bytes, replaces (there is no other entry) and the
// precompiled preference, at preference 1, its file (if any) made
// absolute (the forced context lies elsewhere).
func forcedLine(e map[string]json.RawMessage, dir string) ([]byte, error) {
	for _, k := range []string{"min_bytes", "max_bytes", "replaces", "preference_program"} {
		delete(e, k)
	}
	e["preference"] = json.RawMessage(`"1"`)
	if raw, ok := e["file"]; ok {
		var f string
		if err := json.Unmarshal(raw, &f); err != nil {
			return nil, err
		}
		if !filepath.IsAbs(f) {
			abs, err := filepath.Abs(filepath.Join(dir, f))
			if err != nil {
				return nil, err
			}
			b, _ := json.Marshal(abs)
			e["file"] = b
		}
	}
	return json.Marshal(e)
}

// forcedContext writes a context that forces c into a new folder under
// tmp: dir's attribute manifest and value logs, and a schedule manifest of
// c's line alone.
func forcedContext(dir, tmp string, c candidate) (string, error) {
	out, err := os.MkdirTemp(tmp, "forced-")
	if err != nil {
		return "", err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	for _, de := range ents {
		if de.IsDir() || !de.Type().IsRegular() || !strings.HasSuffix(de.Name(), manifest.LogSuffix) || de.Name() == manifest.ScheduleManifest {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, de.Name()))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(out, de.Name()), data, 0o644); err != nil {
			return "", err
		}
	}
	return out, os.WriteFile(filepath.Join(out, manifest.ScheduleManifest), append(append([]byte(nil), c.line...), '\n'), 0o644)
}

// sweepResult is one schedule's (the selector's or a candidate's) times of
// one table, every rank's the same.
type sweepResult struct {
	times  []*float64 // per size, nil: not usable
	scheds []string   // the schedule that ran, per size
	wrong  int64
	proto  string // the protocol of the last schedule that ran ("ll", "simple"), if known
}

// execute runs the sweep on this process's ranks; rank 0 returns the
// report, the others nil.
func (sc *sweepCmd) execute(ctx context.Context, cfg *config, re *regexp.Regexp) (*SweepReport, error) {
	w, err := sc.b.setUp(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer w.close()
	dir, comms := cfg.ctxDir, w.comms
	tmp, err := os.MkdirTemp("", "theseus-sweep-")
	if err != nil {
		return nil, err
	}
	unregister := removeOnSignal(tmp)
	defer func() {
		os.RemoveAll(tmp)
		unregister()
	}()
	if !sc.sync {
		for _, rb := range w.rbs {
			if rb.st, err = rb.c.NewStream(); err != nil {
				return nil, err
			}
			defer rb.st.Close()
		}
	}
	cands, err := readCandidates(dir, cfg.plan.Colls, cfg.nranks, cfg.header.NLocalRanks, re)
	if err != nil {
		return nil, fmt.Errorf("reading the candidates: %w", err)
	}
	// Every rank must run the same plan over the same candidates.
	fp := cfg.fingerprint() ^ int64(len(cands))<<40
	if err := w.each(func(_ int, rb *rankBench) error {
		got, err := rb.agg.Max([]int64{fp, -fp})
		if err != nil {
			return fmt.Errorf("agreeing on the flags: %w", err)
		}
		if got[0] != fp || -got[1] != fp {
			return errors.New("the ranks were started with different flags or contexts")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	rep := &SweepReport{Header: cfg.header, Tolerance: sc.tolerance, Timing: "stream"}
	if sc.sync {
		rep.Timing = "sync"
	}
	for _, tab := range tables(&cfg.plan) {
		st := &SweepTable{Collective: tab.coll.String(), Type: tab.typ.Name, RedOp: tab.op.Name}
		var mine []candidate
		for _, c := range cands {
			if c.coll == tab.coll {
				mine = append(mine, c)
				st.Candidates = append(st.Candidates, c.SweepCandidate)
			}
		}
		specs := tab.rows(&cfg.plan, cfg.nranks)
		sel, err := sc.runSchedule(w.rbs, &cfg.plan, specs)
		if err != nil {
			return nil, fmt.Errorf("%s as selected: %w", tab.coll, err)
		}
		rep.Wrong += sel.wrong
		// A candidate usable at no size (a fail-slow variant while no rank
		// is slow, a multi-node one on one node) is listed, not tabled.
		var per []*sweepResult
		all := st.Candidates
		st.Candidates = nil
		st.Unusable = []string{}
		for j, c := range mine {
			r, err := sc.runCandidate(ctx, cfg, w, tmp, dir, c, specs)
			if err != nil {
				return nil, fmt.Errorf("%s forced to %s: %w", tab.coll, c.Name, err)
			}
			rep.Wrong += r.wrong
			if !slices.ContainsFunc(r.times, func(t *float64) bool { return t != nil }) {
				st.Unusable = append(st.Unusable, c.Name)
				continue
			}
			per = append(per, r)
			if all[j].Protocol == "" {
				all[j].Protocol = r.proto
			}
			st.Candidates = append(st.Candidates, all[j])
		}
		for i, rs := range specs {
			sh := shapeOf(rs.Coll, rs.Size, rs.Type.T.Size(), cfg.nranks)
			row := SweepRow{Bytes: sh.Bytes, Count: sh.Count, Selected: sel.scheds[i], Best: -1}
			if sel.times[i] != nil {
				row.TimeUS = *sel.times[i]
			}
			for j, r := range per {
				row.Times = append(row.Times, r.times[i])
				if t := r.times[i]; t != nil && (row.Best < 0 || *t < *row.Times[row.Best]) {
					row.Best = j
				}
			}
			if row.Best >= 0 && *row.Times[row.Best] > 0 {
				row.Ratio = row.TimeUS / *row.Times[row.Best]
			}
			st.Rows = append(st.Rows, row)
		}
		st.analyse(sc.tolerance)
		rep.Tables = append(rep.Tables, st)
	}
	if comms[0].Rank() != 0 {
		return nil, nil
	}
	return rep, nil
}

// sweepTab is one table's collective, datatype and reduction.
type sweepTab struct {
	coll ir.Collective
	typ  dtype
	op   redop
}

// rows are the table's rows of p (its sizes) for n ranks, but those of
// count 0 (a size under one block per rank: nothing runs).
func (t sweepTab) rows(p *plan, n int) []rowSpec {
	var out []rowSpec
	for _, s := range p.Sizes {
		if shapeOf(t.coll, s, t.typ.T.Size(), n).Count > 0 {
			out = append(out, rowSpec{t.coll, t.typ, t.op, s})
		}
	}
	return out
}

// tables lists p's tables in the order of its rows.
func tables(p *plan) []sweepTab {
	var out []sweepTab
	seen := map[sweepTab]bool{}
	for _, r := range p.rows() {
		t := sweepTab{r.Coll, r.Type, r.Op}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}

// runSchedule runs specs on every local rank's bench rbs (a collective
// step) and returns the out-of-place times, the schedules and #wrong; a
// size no schedule serves (ErrNoSchedule, the same on every rank) has no
// time.
func (sc *sweepCmd) runSchedule(rbs []*rankBench, p *plan, specs []rowSpec) (*sweepResult, error) {
	res := make([]*sweepResult, len(rbs))
	err := eachComm(commsOf(rbs), func(i int, _ *theseus.Comm) error {
		r := &sweepResult{}
		for _, rs := range specs {
			row, err := rbs[i].runRow(p, rs)
			if errors.Is(err, theseus.ErrNoSchedule) {
				r.times, r.scheds = append(r.times, nil), append(r.scheds, "-")
				continue
			}
			if err != nil {
				return err
			}
			t := row.OutOfPlace.TimeUS
			r.times, r.scheds = append(r.times, &t), append(r.scheds, row.OutOfPlace.Schedule)
			for _, x := range []Result{row.OutOfPlace, row.InPlace} {
				if x.Wrong != nil {
					r.wrong += *x.Wrong
				}
			}
		}
		res[i] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res[0], nil
}

func commsOf(rbs []*rankBench) []*theseus.Comm {
	out := make([]*theseus.Comm, len(rbs))
	for i, rb := range rbs {
		out[i] = rb.c
	}
	return out
}

// runCandidate runs specs with candidate c forced: a communicator of its
// own over a context that holds c alone (forcedContext), on the main
// communicator's buffers, its results combined over the main one (the
// forced context may have no int64 allreduce).
func (sc *sweepCmd) runCandidate(ctx context.Context, cfg *config, w *world, tmp, dir string, c candidate, specs []rowSpec) (*sweepResult, error) {
	fdir, err := forcedContext(dir, tmp, c)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(fdir)
	tc := sc.b.theseusConfig(cfg, fdir)
	var forced []*theseus.Comm
	if cfg.multi {
		id, err := shareUniqueID(w.rbs[0])
		if err != nil {
			return nil, err
		}
		fc, err := theseus.NewComm(ctx, id, w.comms[0].Rank(), cfg.nranks, tc)
		if err != nil {
			return nil, err
		}
		forced = []*theseus.Comm{fc}
	} else if forced, err = theseus.NewLocalComms(ctx, cfg.nranks, tc); err != nil {
		return nil, err
	}
	defer func() {
		for _, fc := range forced {
			fc.Destroy()
		}
	}()
	rbs := make([]*rankBench, len(forced))
	for i, fc := range forced {
		m := w.rbs[i]
		rbs[i] = &rankBench{c: fc, mem: memIO{fc}, agg: m.agg, refs: m.refs, send: m.send, recv: m.recv, bufBytes: m.bufBytes}
		if m.st != nil {
			if rbs[i].st, err = fc.NewStream(); err != nil {
				return nil, err
			}
			defer rbs[i].st.Close()
		}
	}
	r, err := sc.runSchedule(rbs, &cfg.plan, specs)
	if err != nil {
		return nil, err
	}
	if ref, ok := forced[0].Internal().Schedule(forced[0].LastCall().Schedule); ok && ref.Info != nil {
		if bu, ok := ref.Info.Artifact.(*bundle.Bundle); ok {
			r.proto = strings.ToLower(bu.Meta.Protocol.String())
		}
	}
	return r, nil
}

// analyse fills the table's findings, crossovers and ll_max_bytes.
func (t *SweepTable) analyse(tol float64) {
	t.Findings = []string{}
	for i, r := range t.Rows {
		// Only another schedule's advantage is the selector's: the same
		// schedule's two runs differ by the run-to-run spread.
		if r.Best >= 0 && r.Ratio > 1+tol && t.Candidates[r.Best].Name != r.Selected {
			t.Findings = append(t.Findings, fmt.Sprintf("%s: %s takes %.2f µs, %.2f× %s's %.2f µs",
				humanBytes(r.Bytes), r.Selected, r.TimeUS, r.Ratio, t.Candidates[r.Best].Name, *r.Times[r.Best]))
		}
		for _, q := range t.Rows[i+1:] {
			if r.TimeUS > 0 && q.TimeUS > 0 && q.Selected != r.Selected && r.TimeUS > q.TimeUS*(1+tol) {
				t.Findings = append(t.Findings, fmt.Sprintf("%s: %s takes %.2f µs, more than %s takes at %s (%.2f µs)",
					humanBytes(r.Bytes), r.Selected, r.TimeUS, q.Selected, humanBytes(q.Bytes), q.TimeUS))
				break
			}
		}
	}
	t.Ranges = []SweepRange{}
	for _, r := range t.Rows {
		if r.Best < 0 {
			continue
		}
		name := t.Candidates[r.Best].Name
		if k := len(t.Ranges) - 1; k >= 0 && t.Ranges[k].Best == name {
			t.Ranges[k].To = r.Bytes
			continue
		}
		t.Ranges = append(t.Ranges, SweepRange{From: r.Bytes, To: r.Bytes, Best: name})
	}
	for _, r := range t.Rows {
		if r.Best < 0 || t.Candidates[r.Best].Protocol != "ll" {
			break
		}
		v := r.Bytes
		t.LLMaxBytes = &v
	}
}

func printSweepText(w io.Writer, rep *SweepReport) error {
	h := rep.Header
	fmt.Fprintf(w, "# theseus-bench sweep: %d ranks (%s, %d per node), backend %s, context %s (%s)\n", h.NRanks, h.Mode, h.NLocalRanks, h.Backend, h.Context, h.ContextFrom)
	fmt.Fprintf(w, "# times in µs per call, out of place, timing %q; a finding is more than %.0f%% over\n", rep.Timing, 100*rep.Tolerance)
	for _, t := range rep.Tables {
		fmt.Fprintf(w, "\n## %s %s %s\n\n", t.Collective, t.Type, t.RedOp)
		head := []string{"bytes", "selected", "µs"}
		for _, c := range t.Candidates {
			head = append(head, fmt.Sprintf("%s µs", c.Name))
		}
		head = append(head, "fastest", "selected / fastest")
		fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
		for _, r := range t.Rows {
			cells := []string{strconv.FormatInt(r.Bytes, 10), r.Selected, fmtUS(&r.TimeUS)}
			for _, x := range r.Times {
				cells = append(cells, fmtUS(x))
			}
			best, ratio := "-", "-"
			if r.Best >= 0 {
				best = t.Candidates[r.Best].Name
				ratio = fmt.Sprintf("%.2f", r.Ratio)
			}
			cells = append(cells, best, ratio)
			fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
		}
		if len(t.Unusable) > 0 {
			fmt.Fprintf(w, "\nUsable at no size (not tabled): %s\n", strings.Join(t.Unusable, ", "))
		}
		fmt.Fprintf(w, "\nFindings: %d\n", len(t.Findings))
		for _, f := range t.Findings {
			fmt.Fprintf(w, "- %s\n", f)
		}
		fmt.Fprintf(w, "\nFastest by size:")
		for _, r := range t.Ranges {
			fmt.Fprintf(w, " %s–%s %s;", humanBytes(r.From), humanBytes(r.To), r.Best)
		}
		fmt.Fprintln(w)
		if t.LLMaxBytes != nil {
			fmt.Fprintf(w, "ll_max_bytes from these measurements: %d\n", *t.LLMaxBytes)
		}
	}
	fmt.Fprintf(w, "\n# Wrong elements: %d\n", rep.Wrong)
	return nil
}

func fmtUS(x *float64) string {
	if x == nil {
		return "-"
	}
	return fmt.Sprintf("%.2f", *x)
}

func printSweepCSV(w io.Writer, rep *SweepReport) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"collective", "type", "redop", "bytes", "count", "schedule", "time_us", "fastest"})
	for _, t := range rep.Tables {
		for _, r := range t.Rows {
			best := ""
			if r.Best >= 0 {
				best = t.Candidates[r.Best].Name
			}
			base := []string{t.Collective, t.Type, t.RedOp, strconv.FormatInt(r.Bytes, 10), strconv.FormatInt(r.Count, 10)}
			cw.Write(append(append([]string(nil), base...), "selected:"+r.Selected, fmtUS(&r.TimeUS), best))
			for j, c := range t.Candidates {
				cw.Write(append(append([]string(nil), base...), c.Name, fmtUS(r.Times[j]), best))
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
