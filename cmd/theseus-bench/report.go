package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

// Result is one arrangement (out of place or in place) of one row.
type Result struct {
	// TimeUS is the time of one call in microseconds: each rank's wall time
	// over the timed runs divided by their number, averaged over the ranks
	// (nccl-tests' default, -a 1).
	TimeUS float64 `json:"time_us"`
	// AlgBW and BusBW are in GB/s (10^9 bytes per second); see bandwidth.
	AlgBW float64 `json:"algbw_gbps"`
	BusBW float64 `json:"busbw_gbps"`
	// Wrong is the number of output elements that differ from the expected
	// ones, summed over the ranks; nil when not checked (-c 0).
	Wrong *int64 `json:"wrong"`
	// Schedule is the selected schedule (its manifest file name without
	// directory and extension), "-" when nothing ran (count 0).
	Schedule string `json:"schedule"`
	// ScheduleID is its entry in the schedule manifest, -1 when nothing ran.
	ScheduleID int `json:"schedule_id"`
	// Consistent is false when the ranks ran different schedules (a
	// consistency failure, counted as an error).
	Consistent bool `json:"consistent"`
	// Iters and Warmup are the timed and warmup runs.
	Iters  int `json:"iters"`
	Warmup int `json:"warmup"`
	// NA marks an arrangement the row's call does not have (in-place
	// sendrecv and alltoallv, as in nccl-tests): nothing ran.
	NA bool `json:"not_applicable,omitempty"`
}

// Row is one line of the table: one collective, size, datatype and
// reduction, out of place and in place.
type Row struct {
	Collective string `json:"collective"`
	// Bytes is the size column (nccl-tests "size"): the larger of the send
	// and receive buffers, count × type size × blocks.
	Bytes int64  `json:"size"`
	Count int64  `json:"count"`
	Type  string `json:"type"`
	// RedOp is "none" for collectives that do not reduce; Root is -1 for
	// collectives without a root.
	RedOp      string `json:"redop"`
	Root       int    `json:"root"`
	OutOfPlace Result `json:"out_of_place"`
	InPlace    Result `json:"in_place"`
}

// Header describes a run.
type Header struct {
	NRanks      int    `json:"nranks"`
	NLocalRanks int    `json:"nlocalranks"`
	Nodes       int    `json:"nodes"`
	Mode        string `json:"mode"` // "in-process" or "multi-process"
	Backend     string `json:"backend"`
	Context     string `json:"context"`        // the directory the ranks read
	ContextFrom string `json:"context_source"` // "embedded", "--context", "THESEUS_SELECTION_CONTEXT"
	MinBytes    int64  `json:"min_bytes"`
	MaxBytes    int64  `json:"max_bytes"`
	StepFactor  int64  `json:"step_factor"`
	StepBytes   int64  `json:"step_bytes"`
	Iters       int    `json:"iters"`
	Warmup      int    `json:"warmup_iters"`
	Scaled      bool   `json:"iters_scaled"` // iterations scale down with size
	Check       int    `json:"check"`
}

// Report is a whole run.
type Report struct {
	Header  Header   `json:"header"`
	Rows    []Row    `json:"rows"`
	HotSwap *HotSwap `json:"hotswap,omitempty"`
	// Wrong is #wrong summed over every row, arrangement and rank, plus the
	// hot-swap demonstration's; AvgBusBW the mean busbw over every result
	// (nccl-tests' "Avg bus bandwidth").
	Wrong    int64   `json:"wrong"`
	AvgBusBW float64 `json:"avg_busbw_gbps"`
	// Errors counts consistency failures (ranks that ran different
	// schedules).
	Errors int `json:"errors"`
	// Error is what ended the run early (a failed collective, a signal):
	// the report then holds the rows measured before it.
	Error string `json:"error,omitempty"`
}

// Switch is a request at which the ranks' schedule changed.
type Switch struct {
	Request int    `json:"request"`
	From    string `json:"from"`
	To      string `json:"to"`
	// Ranks says which ranks switched at this request: "all" when every
	// rank did (the consistency guarantee), else the list.
	Ranks string `json:"ranks"`
	// Migration is rank 0's L1 materialisation at the switch, when the
	// executor migrated (delta migration from the replaced schedule).
	Migration *MigrationInfo `json:"migration,omitempty"`
	// Reused is set when rank 0 switched to a schedule it had materialised
	// before (an L1 hit: nothing is created).
	Reused bool `json:"reused,omitempty"`
	// What the switch cost, in microseconds of host wall time per request,
	// each request's time the maximum over the ranks (HotSwap.TimesUS).
	// OldMedianUS is the median over the OldRequests requests OldFirst ..
	// Request-1 that ran the old schedule in its steady state (not the first
	// request that ran it: the cold start or the previous switch);
	// SwitchUS is the switching request's time; NewMedianUS the median over
	// the NewRequests requests Request+1 .. NewLast that ran the new
	// schedule before the next switch; CostUS = SwitchUS - NewMedianUS (it
	// may be negative: noise, or a new schedule slower than the switch).
	// A median over no request, and then CostUS, is 0.
	//
	// The switching request is always an epoch's first request, which
	// reads the context and agrees on it (one MIN-allreduce) whether or not
	// the selection changes; EpochMedianUS is the median over the new
	// schedule's later requests that start an epoch (EpochRequests), which
	// pay that check without switching: the part of CostUS that is the
	// periodic check rather than the switch.
	OldMedianUS   float64 `json:"old_median_us"`
	OldRequests   int     `json:"old_requests"`
	OldFirst      int     `json:"old_first,omitempty"`
	SwitchUS      float64 `json:"switch_us"`
	NewMedianUS   float64 `json:"new_median_us"`
	NewRequests   int     `json:"new_requests"`
	NewLast       int     `json:"new_last,omitempty"`
	CostUS        float64 `json:"switch_cost_us"`
	EpochMedianUS float64 `json:"epoch_median_us,omitempty"`
	EpochRequests []int   `json:"epoch_requests,omitempty"`
}

// MigrationInfo is what a delta migration created and kept on rank 0.
type MigrationInfo struct {
	FromID      int `json:"from_id"`
	ToID        int `json:"to_id"`
	KeptSems    int `json:"kept_semaphores"`
	Rebased     int `json:"rebased"`
	ChannelEnds int `json:"created_channel_ends"`
	Semaphores  int `json:"created_semaphores"`
	Messages    int `json:"bootstrap_messages"`
}

// Publish is one value published to the value log of HotSwap.Attribute.
type Publish struct {
	AfterRequest int    `json:"after_request"`
	Value        int    `json:"value"`
	Where        string `json:"where"`
}

// HotSwap is the hot-swap demonstration's outcome.
type HotSwap struct {
	// Attribute is the exogenous attribute published (--hotswap-attr):
	// slow_rank or ll_max_bytes.
	Attribute   string    `json:"attribute,omitempty"`
	Collective  string    `json:"collective"`
	Bytes       int64     `json:"size"`
	Count       int64     `json:"count"`
	Type        string    `json:"type"`
	RedOp       string    `json:"redop"`
	Requests    int       `json:"requests"`
	CheckPeriod int       `json:"check_period"`
	First       string    `json:"first"` // the schedule of request 1
	Published   []Publish `json:"published"`
	Switches    []Switch  `json:"switches"`
	// TimesUS is the host wall time of each request (request k at index
	// k-1) in microseconds, from the call to its completion, the maximum
	// over the ranks.
	TimesUS []float64 `json:"times_us,omitempty"`
	// Consistent is true when every rank ran the same schedule at every
	// request.
	Consistent bool  `json:"consistent"`
	Wrong      int64 `json:"wrong"`
	// Skipped says why the demonstration did not run (then nothing else
	// is set).
	Skipped string `json:"skipped,omitempty"`
}

// Output formats. The text table streams (header, a line per row, footer);
// JSON and CSV are written once the run is over.
const (
	formatText = cli.FormatText
	formatJSON = cli.FormatJSON
	formatCSV  = "csv"
)

// timeStr formats a time in microseconds as nccl-tests does: 7 columns,
// with fewer decimals as it grows.
func timeStr(us float64) string {
	switch {
	case us >= 10000:
		return fmt.Sprintf("%7.0f", us)
	case us >= 100:
		return fmt.Sprintf("%7.1f", us)
	}
	return fmt.Sprintf("%7.2f", us)
}

func wrongStr(w *int64) string {
	if w == nil {
		return "N/A"
	}
	return strconv.FormatInt(*w, 10)
}

// scheduleStr is the schedule column: one name, or "out-of-place / in-place"
// when they differ; a "!" marks ranks that disagreed.
func (r Row) scheduleStr() string {
	mark := func(x Result) string {
		if !x.Consistent {
			return x.Schedule + "!"
		}
		return x.Schedule
	}
	a, b := mark(r.OutOfPlace), mark(r.InPlace)
	if a == b {
		return a
	}
	return a + " / " + b
}

// textPrinter writes the nccl-tests table.
type textPrinter struct {
	w    io.Writer
	last string // collective of the last row written
}

func (p *textPrinter) header(h Header) {
	w := p.w
	fmt.Fprintf(w, "# theseus-bench: %d ranks (%s, %d node(s) of %d), backend %s\n", h.NRanks, h.Mode, h.Nodes, h.NLocalRanks, h.Backend)
	fmt.Fprintf(w, "# selection context: %s (%s)\n", h.Context, h.ContextFrom)
	step := fmt.Sprintf("%d(factor)", h.StepFactor)
	if h.StepFactor <= 1 {
		step = fmt.Sprintf("%d(bytes)", h.StepBytes)
	}
	scaled := ""
	if h.Scaled {
		scaled = " (scaled down with size)"
	}
	fmt.Fprintf(w, "# minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d%s validation: %d\n",
		h.MinBytes, h.MaxBytes, step, h.Warmup, h.Iters, scaled, h.Check)
	fmt.Fprintln(w, "#")
	fmt.Fprintf(w, "# %70s%33s\n", "out-of-place", "in-place")
	fmt.Fprintf(w, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s  %s\n",
		"size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "schedule")
	units := fmt.Sprintf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s",
		"(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)")
	fmt.Fprintln(w, units)
}

func (p *textPrinter) row(r Row) {
	if r.Collective != p.last {
		fmt.Fprintf(p.w, "# %s\n", r.Collective)
		p.last = r.Collective
	}
	fmt.Fprintf(p.w, "%12d  %12d  %8s  %6s  %6d", r.Bytes, r.Count, r.Type, r.RedOp, r.Root)
	for _, x := range []Result{r.OutOfPlace, r.InPlace} {
		if x.NA {
			fmt.Fprintf(p.w, "  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A")
			continue
		}
		fmt.Fprintf(p.w, "  %7s  %6.2f  %6.2f  %6s", timeStr(x.TimeUS), x.AlgBW, x.BusBW, wrongStr(x.Wrong))
	}
	fmt.Fprintf(p.w, "  %s\n", r.scheduleStr())
}

func (p *textPrinter) footer(rep *Report) {
	w := p.w
	if hs := rep.HotSwap; hs != nil {
		fmt.Fprintln(w, "#")
		writeHotSwap(w, hs)
	}
	fmt.Fprintln(w, "#")
	ok := "OK"
	if rep.Wrong != 0 || rep.Errors != 0 || rep.Error != "" {
		ok = "FAILED"
	}
	if rep.Header.Check == 0 {
		// Nothing was compared: no count to vouch for.
		fmt.Fprintf(w, "# Wrong elements       : N/A (not checked: -c 0)\n")
	} else if rep.Wrong == 0 && rep.Errors == 0 && rep.Error != "" {
		// Stopped with nothing wrong so far: not a verdict either way.
		fmt.Fprintf(w, "# Wrong elements       : 0 in the %d row(s) that ran (incomplete: stopped)\n", len(rep.Rows))
	} else {
		fmt.Fprintf(w, "# Wrong elements       : %d %s\n", rep.Wrong, ok)
	}
	if rep.Errors != 0 {
		fmt.Fprintf(w, "# Consistency failures : %d\n", rep.Errors)
	}
	if rep.Error != "" {
		fmt.Fprintf(w, "# Stopped              : %s\n", rep.Error)
	}
	fmt.Fprintf(w, "# Avg bus bandwidth    : %.4g\n", rep.AvgBusBW)
	fmt.Fprintln(w, "#")
}

// writeHotSwap writes the demonstration as comment lines.
func writeHotSwap(w io.Writer, hs *HotSwap) {
	if hs.Skipped != "" {
		fmt.Fprintf(w, "# Hot swap: skipped (%s)\n", hs.Skipped)
		return
	}
	fmt.Fprintf(w, "# Hot swap: %s of %d B (%d x %s, %s), %d requests, context checked every %d requests\n",
		hs.Collective, hs.Bytes, hs.Count, hs.Type, hs.RedOp, hs.Requests, hs.CheckPeriod)
	type event struct {
		at   int
		line string
	}
	var ev []event
	ev = append(ev, event{0, fmt.Sprintf("#   request %4d: %s", 1, hs.First)})
	attr := hs.attr()
	for _, p := range hs.Published {
		ev = append(ev, event{2*p.AfterRequest + 1, fmt.Sprintf("#   after request %d: published %s = %d (%s)", p.AfterRequest, attr, p.Value, p.Where)})
	}
	for _, s := range hs.Switches {
		who := "on every rank"
		if s.Ranks != "all" {
			who = "on ranks " + s.Ranks + " only!"
		}
		line := fmt.Sprintf("#   request %4d: %s -> %s %s", s.Request, s.From, s.To, who)
		if m := s.Migration; m != nil {
			line += fmt.Sprintf("\n#                  delta migration on rank 0: kept %d semaphores (%d rebased), created %d channel ends, %d semaphores, %d bootstrap messages",
				m.KeptSems, m.Rebased, m.ChannelEnds, m.Semaphores, m.Messages)
		} else if s.Reused {
			line += "\n#                  still materialised on rank 0 (L1 hit): nothing created"
		}
		if s.SwitchUS > 0 {
			for _, l := range s.timing() {
				line += "\n#                  " + l
			}
		}
		ev = append(ev, event{2 * s.Request, line})
	}
	for i := 1; i < len(ev); i++ { // insertion sort: few events, stable
		for j := i; j > 0 && ev[j].at < ev[j-1].at; j-- {
			ev[j], ev[j-1] = ev[j-1], ev[j]
		}
	}
	for _, e := range ev {
		fmt.Fprintln(w, e.line)
	}
	if len(hs.Switches) == 0 {
		fmt.Fprintf(w, "#   no switch: the policies chose the same schedule whatever %s said\n", attr)
	}
	same := "every rank ran the same schedule at every request"
	if !hs.Consistent {
		same = "RANKS DISAGREED on the schedule of some request"
	}
	fmt.Fprintf(w, "#   %s; #wrong = %d\n", same, hs.Wrong)
}

// attr is the attribute published (reports from before Attribute existed:
// slow_rank).
func (hs *HotSwap) attr() string {
	if hs.Attribute == "" {
		return "slow_rank"
	}
	return hs.Attribute
}

// usStr formats a time in microseconds for the hot swap's lines: timeStr's
// precision, without the padding.
func usStr(us float64) string {
	if us < 0 {
		return "-" + usStr(-us)
	}
	return strings.TrimSpace(timeStr(us)) + " us"
}

// timing is the switch's time lines (text output), without their "#"
// prefix: the times before, at and after the switch, then its cost.
func (s Switch) timing() []string {
	line := "time per request, max over ranks:"
	if s.OldRequests > 0 {
		line += fmt.Sprintf(" before %s (median of requests %d-%d),", usStr(s.OldMedianUS), s.OldFirst, s.Request-1)
	}
	line += fmt.Sprintf(" at the switch %s", usStr(s.SwitchUS))
	if s.NewRequests == 0 {
		return []string{line}
	}
	line += fmt.Sprintf(", after %s (median of requests %d-%d)", usStr(s.NewMedianUS), s.Request+1, s.NewLast)
	cost := usStr(s.CostUS)
	if s.CostUS >= 0 {
		cost = "+" + cost
	}
	line2 := "switch cost: " + cost + " (the switching request less the median after it)"
	if len(s.EpochRequests) > 0 {
		reqs := make([]string, len(s.EpochRequests))
		for i, r := range s.EpochRequests {
			reqs[i] = strconv.Itoa(r)
		}
		what := "requests"
		if len(reqs) == 1 {
			what = "request"
		}
		line2 += fmt.Sprintf("; for comparison, the later epoch %s %s (context check, no switch): %s (median)",
			what, strings.Join(reqs, ", "), usStr(s.EpochMedianUS))
	}
	return []string{line, line2}
}

// printText writes a whole report as the streaming printer would.
func printText(w io.Writer, rep *Report) error {
	p := &textPrinter{w: w}
	p.header(rep.Header)
	for _, r := range rep.Rows {
		p.row(r)
	}
	p.footer(rep)
	return nil
}

func printJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// csvHeader lists the CSV columns: the table's, out-of-place then in-place.
var csvHeader = []string{"collective", "size", "count", "type", "redop", "root",
	"oop_time_us", "oop_algbw_gbps", "oop_busbw_gbps", "oop_wrong", "oop_schedule",
	"ip_time_us", "ip_algbw_gbps", "ip_busbw_gbps", "ip_wrong", "ip_schedule"}

// printCSV writes one record per row (the hot-swap demonstration is not part
// of this table; the command writes it to standard error, printHotSwapCSV).
func printCSV(w io.Writer, rep *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, r := range rep.Rows {
		rec := []string{r.Collective, strconv.FormatInt(r.Bytes, 10), strconv.FormatInt(r.Count, 10), r.Type, r.RedOp, strconv.Itoa(r.Root)}
		for _, x := range []Result{r.OutOfPlace, r.InPlace} {
			wr := ""
			if x.Wrong != nil {
				wr = strconv.FormatInt(*x.Wrong, 10)
			}
			if x.NA {
				rec = append(rec, "", "", "", "", x.Schedule)
				continue
			}
			rec = append(rec, f(x.TimeUS), f(x.AlgBW), f(x.BusBW), wr, x.Schedule)
		}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// hotSwapCSVHeader lists the columns of the hot swap's CSV: one record per
// switch, times in microseconds (Switch).
var hotSwapCSVHeader = []string{"attribute", "request", "from", "to", "ranks", "reused",
	"old_requests", "old_median_us", "switch_us", "new_requests", "new_median_us", "switch_cost_us",
	"epoch_requests", "epoch_median_us"}

// printHotSwapCSV writes the demonstration as CSV (what --csv writes to
// standard error): writeHotSwap's lines, each starting with '#', then a
// header record and one record per switch. Read it with '#' as the comment
// character (encoding/csv Reader.Comment, pandas comment="#"). A skipped
// demonstration is its comment line alone.
func printHotSwapCSV(w io.Writer, hs *HotSwap) error {
	writeHotSwap(w, hs)
	if hs.Skipped != "" {
		return nil
	}
	cw := csv.NewWriter(w)
	if err := cw.Write(hotSwapCSVHeader); err != nil {
		return err
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	for _, s := range hs.Switches {
		rec := []string{hs.attr(), strconv.Itoa(s.Request), s.From, s.To, s.Ranks, strconv.FormatBool(s.Reused),
			strconv.Itoa(s.OldRequests), f(s.OldMedianUS), f(s.SwitchUS), strconv.Itoa(s.NewRequests), f(s.NewMedianUS), f(s.CostUS),
			strconv.Itoa(len(s.EpochRequests)), f(s.EpochMedianUS)}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// printers is the registry behind --format.
var printers = cli.NewPrinters[*Report]().
	Register(formatText, "nccl-tests' table plus the schedule column (streams as it runs)", printText).
	Register(formatJSON, "one JSON object: header, rows, hot swap, totals", printJSON).
	Register(formatCSV, "one CSV record per row, with a header record", printCSV)

// summarize fills the report's totals from its rows and hot swap.
func summarize(rep *Report) {
	rep.Wrong, rep.Errors = 0, 0
	var sum float64
	var n int
	for _, r := range rep.Rows {
		for _, x := range []Result{r.OutOfPlace, r.InPlace} {
			if x.Wrong != nil {
				rep.Wrong += *x.Wrong
			}
			if !x.Consistent {
				rep.Errors++
			}
			if x.NA {
				continue
			}
			sum += x.BusBW
			n++
		}
	}
	if hs := rep.HotSwap; hs != nil && hs.Skipped == "" {
		rep.Wrong += hs.Wrong
		if !hs.Consistent {
			rep.Errors++
		}
	}
	rep.AvgBusBW = 0
	if n > 0 {
		rep.AvgBusBW = sum / float64(n)
	}
}

// scheduleName is the schedule column's name for a manifest file: its base
// name without the extension.
func scheduleName(file string) string {
	if file == "" {
		return "-"
	}
	if i := strings.LastIndexAny(file, `/\`); i >= 0 {
		file = file[i+1:]
	}
	if i := strings.LastIndexByte(file, '.'); i > 0 {
		file = file[:i]
	}
	return file
}
