package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the printers' golden files")

func i64(v int64) *int64 { return &v }

// goldenReport is a fixed report exercising every printer feature: rooted
// and unrooted rows, a count-0 row, an unchecked result, differing
// schedules, a consistency failure and a hot swap.
func goldenReport() *Report {
	ok := func(t, alg, bus float64, w int64, s string, id int) Result {
		return Result{TimeUS: t, AlgBW: alg, BusBW: bus, Wrong: i64(w), Schedule: s, ScheduleID: id, Consistent: true, Iters: 20, Warmup: 5}
	}
	rep := &Report{
		Header: Header{NRanks: 4, NLocalRanks: 4, Nodes: 1, Mode: "in-process", Backend: "host", Context: "/ctx",
			ContextFrom: "embedded default", MinBytes: 8, MaxBytes: 1 << 20, StepFactor: 2, StepBytes: 1 << 20,
			Iters: 20, Warmup: 5, Scaled: true, Check: 1},
		Rows: []Row{
			{Collective: "allreduce", Bytes: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: ok(12.345, 0.00065, 0.00097, 0, "allreduce_n4_oneshot_ll", 20),
				InPlace:    ok(11.5, 0.0007, 0.00104, 0, "allreduce_n4_oneshot_ll", 20)},
			{Collective: "allreduce", Bytes: 1 << 20, Count: 1 << 18, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: ok(4456.1, 0.2353, 0.353, 0, "allreduce_n4_ring", 21),
				InPlace:    ok(12345.6, 0.0849, 0.1274, 3, "allreduce_n4_dbtree_avoid2", 24)},
			{Collective: "allgather", Bytes: 0, Count: 0, Type: "float", RedOp: "none", Root: -1,
				OutOfPlace: ok(0.02, 0, 0, 0, "-", -1), InPlace: ok(0.02, 0, 0, 0, "-", -1)},
			{Collective: "broadcast", Bytes: 1 << 20, Count: 1 << 18, Type: "half", RedOp: "none", Root: 2,
				OutOfPlace: Result{TimeUS: 150.25, AlgBW: 6.98, BusBW: 6.98, Schedule: "broadcast_n4_tree", ScheduleID: 44, Iters: 4},
				InPlace:    Result{TimeUS: 99.99, AlgBW: 10.49, BusBW: 10.49, Schedule: "broadcast_n4_tree", ScheduleID: 44, Consistent: true, Iters: 4}},
		},
		HotSwap: &HotSwap{Attribute: "slow_rank", Collective: "allreduce", Bytes: 262144, Count: 65536, Type: "float", RedOp: "sum", Requests: 64,
			CheckPeriod: 8, First: "allreduce_n4_ring", Consistent: true,
			Published: []Publish{{AfterRequest: 20, Value: 2, Where: "appended to /ctx/slow_rank.jsonl"},
				{AfterRequest: 44, Value: -1, Where: "appended to /ctx/slow_rank.jsonl"}},
			Switches: []Switch{
				{Request: 25, From: "allreduce_n4_ring", To: "allreduce_n4_dbtree_avoid2", Ranks: "all",
					Migration:   &MigrationInfo{FromID: 21, ToID: 24, ChannelEnds: 6, Semaphores: 6, Messages: 2},
					OldMedianUS: 483.9, OldRequests: 23, OldFirst: 2, SwitchUS: 3074.125, NewMedianUS: 2530, NewRequests: 23, NewLast: 48,
					CostUS: 544.125, EpochMedianUS: 2760.5, EpochRequests: []int{33, 41}},
				{Request: 49, From: "allreduce_n4_dbtree_avoid2", To: "allreduce_n4_ring", Ranks: "all", Reused: true,
					OldMedianUS: 2530, OldRequests: 23, OldFirst: 26, SwitchUS: 90.5, NewMedianUS: 576.75, NewRequests: 15, NewLast: 64,
					CostUS: -486.25, EpochMedianUS: 610, EpochRequests: []int{57}},
			}},
	}
	summarize(rep)
	return rep
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s differs (-want +got; go test -update rewrites it):\n%s", name, d)
	}
}

// TestPrinters compares every output format with its golden file.
func TestPrinters(t *testing.T) {
	rep := goldenReport()
	for _, f := range []struct{ format, file string }{
		{formatText, "report.txt.golden"}, {formatJSON, "report.json.golden"}, {formatCSV, "report.csv.golden"},
	} {
		p, err := printers.Lookup(f.format)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := p(&b, rep); err != nil {
			t.Fatal(err)
		}
		golden(t, f.file, b.Bytes())
	}
	var b bytes.Buffer
	if err := printHotSwapCSV(&b, rep.HotSwap); err != nil {
		t.Fatal(err)
	}
	golden(t, "hotswap.csv.golden", b.Bytes())
	// What it writes is CSV with '#' comments: a header and a record per
	// switch.
	r := csv.NewReader(&b)
	r.Comment = '#'
	recs, err := r.ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || !cmp.Equal(recs[0], hotSwapCSVHeader) || recs[2][11] != "-486.25" {
		t.Errorf("hot swap CSV records %q", recs)
	}
	b.Reset()
	if err := printHotSwapCSV(&b, &HotSwap{Skipped: "why"}); err != nil || b.String() != "# Hot swap: skipped (why)\n" {
		t.Errorf("skipped hot swap CSV %q, %v", b.String(), err)
	}
}

// TestTimeSwitches: each switch's old median covers the requests since the
// previous switch less its first, the new median the requests until the
// next switch, and the cost is the switch's time less the new median;
// medians are lower medians, and an empty set gives 0.
func TestTimeSwitches(t *testing.T) {
	hs := &HotSwap{
		//          1    2  3  4  5    6  7  8  9   10  11 12
		TimesUS:     []float64{900, 10, 12, 11, 80, 30, 31, 30, 5, 60, 9, 8},
		Switches:    []Switch{{Request: 5}, {Request: 9}, {Request: 10}, {Request: 12}},
		CheckPeriod: 3, // epochs at 1, 4, 7, 10
	}
	timeSwitches(hs)
	want := []Switch{
		{Request: 5, OldMedianUS: 11, OldRequests: 3, OldFirst: 2, SwitchUS: 80, NewMedianUS: 30, NewRequests: 3, NewLast: 8, CostUS: 50,
			EpochMedianUS: 31, EpochRequests: []int{7}},
		{Request: 9, OldMedianUS: 30, OldRequests: 3, OldFirst: 6, SwitchUS: 5},
		{Request: 10, SwitchUS: 60, NewMedianUS: 9, NewRequests: 1, NewLast: 11, CostUS: 51},
		{Request: 12, OldMedianUS: 9, OldRequests: 1, OldFirst: 11, SwitchUS: 8},
	}
	if d := cmp.Diff(want, hs.Switches); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2 {
		t.Errorf("median of 1..4 = %v, want the lower median 2", m)
	}
}

// TestChooseHotSwapAttr: auto picks slow_rank at 3 ranks or more and
// ll_max_bytes below, falls back on whichever the context declares, and an
// explicit choice the context lacks is skipped with the reason.
func TestChooseHotSwapAttr(t *testing.T) {
	for _, c := range []struct {
		flag          string
		n             int
		slow, ll      bool
		attr, skipped string
	}{
		{hsAuto, 2, true, true, hsLLMax, ""},
		{hsAuto, 1, true, true, hsLLMax, ""},
		{hsAuto, 3, true, true, hsSlowRank, ""},
		{hsAuto, 8, true, true, hsSlowRank, ""},
		{hsAuto, 4, false, true, hsLLMax, ""},
		{hsAuto, 2, true, false, hsSlowRank, ""},
		{hsAuto, 4, false, false, "", "the selection context declares neither slow_rank nor ll_max_bytes as an exogenous int attribute"},
		{hsSlowRank, 2, true, true, hsSlowRank, ""},
		{hsLLMax, 4, true, true, hsLLMax, ""},
		{hsSlowRank, 4, false, true, "", "the selection context declares no exogenous int attribute slow_rank"},
		{hsLLMax, 2, true, false, "", "the selection context declares no exogenous int attribute ll_max_bytes"},
	} {
		attr, skipped := chooseHotSwapAttr(c.flag, c.n, c.slow, c.ll)
		if attr != c.attr || skipped != c.skipped {
			t.Errorf("%s at %d ranks (slow_rank %v, ll_max_bytes %v): %q, %q; want %q, %q", c.flag, c.n, c.slow, c.ll, attr, skipped, c.attr, c.skipped)
		}
	}
}

// TestSummarize checks the totals: #wrong over every checked result,
// consistency failures, and the mean busbw over every result.
func TestSummarize(t *testing.T) {
	rep := goldenReport()
	if rep.Wrong != 3 || rep.Errors != 1 {
		t.Errorf("wrong %d, errors %d; want 3, 1", rep.Wrong, rep.Errors)
	}
	want := (0.00097 + 0.00104 + 0.353 + 0.1274 + 0 + 0 + 6.98 + 10.49) / 8
	if d := rep.AvgBusBW - want; d > 1e-12 || d < -1e-12 {
		t.Errorf("avg busbw %v, want %v", rep.AvgBusBW, want)
	}
}

// TestJSONRoundTrip: the JSON output decodes back into the same report.
func TestJSONRoundTrip(t *testing.T) {
	rep := goldenReport()
	var b bytes.Buffer
	if err := printJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(rep, &back); d != "" {
		t.Errorf("(-printed +decoded):\n%s", d)
	}
}

func TestTimeStr(t *testing.T) {
	for _, c := range []struct {
		us   float64
		want string
	}{{0.02, "   0.02"}, {99.994, "  99.99"}, {100, "  100.0"}, {9999.94, " 9999.9"}, {10000, "  10000"}, {1234567, "1234567"}} {
		if got := timeStr(c.us); got != c.want {
			t.Errorf("timeStr(%v) = %q, want %q", c.us, got, c.want)
		}
	}
}

func TestScheduleName(t *testing.T) {
	for in, want := range map[string]string{"": "-", "schedules/allreduce_n4_ring.tsb": "allreduce_n4_ring",
		"/abs/x.json": "x", "plain": "plain", `dir\y.xml`: "y"} {
		if got := scheduleName(in); got != want {
			t.Errorf("scheduleName(%q) = %q, want %q", in, got, want)
		}
	}
}
