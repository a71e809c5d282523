package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/env"
	"golang.org/x/sys/unix"
)

// childEnv marks a test binary re-executed as one rank of a multi-process
// run; childArgs carries its command line (JSON).
const (
	childEnv  = "THESEUS_BENCH_TEST_CHILD"
	childArgs = "THESEUS_BENCH_TEST_ARGS"
)

// launcherVars are the variables that put theseus-bench in multi-process
// mode; the in-process tests run without them.
var launcherVars = []string{"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
	"SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT"}

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		var args []string
		if err := json.Unmarshal([]byte(os.Getenv(childArgs)), &args); err != nil {
			os.Exit(3)
		}
		os.Exit(int(run(args, cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})))
	}
	for _, v := range launcherVars {
		os.Unsetenv(v)
	}
	os.Unsetenv("THESEUS_SELECTION_CONTEXT")
	os.Unsetenv("MSCCLPP_SELECTION_CONTEXT")
	// A home of its own (no ~/.theseus/contexts/default of the user's), in
	// which the built-in default context is materialised; the child
	// processes inherit it.
	home := ""
	if os.Getenv("THESEUS_BENCH_TEST_HOME") == "" { // not a child of this test binary
		var err error
		if home, err = os.MkdirTemp("", "theseus-bench-home-"); err != nil {
			os.Exit(3)
		}
		os.Setenv("THESEUS_BENCH_TEST_HOME", home)
		os.Setenv("HOME", home)
		os.Setenv("XDG_CACHE_HOME", filepath.Join(home, ".cache"))
	}
	env.Reset()
	code := m.Run()
	if home != "" {
		os.RemoveAll(home)
	}
	os.Exit(code)
}

// runBench runs the command in-process and returns its exit code, standard
// output and standard error.
func runBench(t *testing.T, args ...string) (cli.ExitCode, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, cli.Streams{Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// rowRE matches a table row: size, count, type, redop, root, then two
// arrangements of time, algbw, busbw, #wrong, then the schedule.
var rowRE = regexp.MustCompile(`^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.+)$`)

// checkTable checks a text report: every collective has its section and
// rows, every #wrong is 0, every row names a schedule (or "-" for count 0),
// the footer says OK, and the hot swap switched on every rank at request 25
// and back at 49, with its time measured: at 4 ranks (slow_rank = 2) from
// base (the 256 KiB allreduce schedule) to the tree that avoids rank 2, at
// 2 ranks (ll_max_bytes = 1 MiB) from the ring to the LL one-shot.
func checkTable(t *testing.T, out string, nranks int, base string) {
	t.Helper()
	sections := map[string]int{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "# ") && len(strings.Fields(line)) == 2 {
			cur = strings.Fields(line)[1]
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		m := rowRE.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("not a row: %q", line)
			continue
		}
		sections[cur]++
		if m[9] != "0" || m[13] != "0" {
			t.Errorf("#wrong is not 0: %q", line)
		}
		sched := strings.TrimSpace(m[14])
		if m[2] != "0" && (sched == "-" || strings.Contains(sched, "!")) {
			t.Errorf("no schedule, or ranks disagreed: %q", line)
		}
	}
	for _, c := range allColls {
		if sections[c.String()] == 0 {
			t.Errorf("no rows for %s:\n%s", c, out)
		}
	}
	if !strings.Contains(out, "# Wrong elements       : 0 OK") {
		t.Errorf("footer is not OK:\n%s", out)
	}
	wants := []string{"every rank ran the same schedule at every request; #wrong = 0"}
	switch nranks {
	case 4:
		wants = append(wants, "published slow_rank = 2", "request   25: "+base+" -> allreduce_dbtree_avoid2 on every rank",
			"request   49: allreduce_dbtree_avoid2 -> "+base+" on every rank")
	case 2:
		wants = append(wants, "published ll_max_bytes = 1048576", "request   25: "+base+" -> allreduce_oneshot_ll_wide on every rank",
			"published ll_max_bytes = 65536", "request   49: allreduce_oneshot_ll_wide -> "+base+" on every rank")
	}
	if nranks == 2 || nranks == 4 {
		wants = append(wants, "time per request, max over ranks: before ", "(median of requests 2-24), at the switch ",
			"(median of requests 50-64)", "switch cost: ")
	}
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("hot swap: no %q in\n%s", want, out)
		}
	}
}

// TestNoArgs is the main job as README runs it: no arguments, 4 in-process
// ranks, the embedded context, every collective from 8 B to 64 MiB, then
// the hot swap. It ends with #wrong = 0. (Some tens of seconds on 2 cores:
// skipped under -short.)
func TestNoArgs(t *testing.T) {
	if testing.Short() {
		t.Skip("the full default run takes tens of seconds")
	}
	code, out, errs := runBench(t)
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	checkTable(t, out, 4, "allreduce_ring")
	if !strings.Contains(out, "    67108864 ") {
		t.Errorf("no 64 MiB row:\n%s", out)
	}
}

// TestSmallRun is the default run up to 512 KiB (one size past the
// default context's LL window, ll_max_bytes 262144), every collective,
// with the hot swap (seconds).
func TestSmallRun(t *testing.T) {
	code, out, errs := runBench(t, "-e", "512K", "-f", "4", "-n", "2", "-w", "1")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	checkTable(t, out, 4, "allreduce_ring")
	for _, want := range []string{"allreduce_oneshot_ll", "allreduce_oneshot_ll_wide", "allreduce_ring", "broadcast_direct", "broadcast_tree",
		"alltoall_direct_ll", "alltoall_direct_ll_wide", "alltoall_direct"} {
		if !rowRan(out, want) {
			t.Errorf("no row ran %s:\n%s", want, out)
		}
	}
}

// rowRan reports whether a table row of out (rowRE) names schedule.
func rowRan(out, schedule string) bool {
	for _, line := range strings.Split(out, "\n") {
		if m := rowRE.FindStringSubmatch(line); m != nil && strings.TrimSpace(m[14]) == schedule {
			return true
		}
	}
	return false
}

// TestAllTypesAndOps runs every datatype and reduction on 2 ranks at three
// sizes: the one-channel LL one-shot (16 B), the wide one (2400 B) and
// the ring (360000 B, above ll_max_bytes).
func TestAllTypesAndOps(t *testing.T) {
	code, out, errs := runBench(t, "--nranks", "2", "-d", "all", "-o", "all", "-b", "16", "-e", "360000", "-f", "150",
		"-n", "1", "-w", "0", "--hotswap=false", "--coll", "allreduce,reducescatter,reduce,allgather")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if n := strings.Count(out, "allreduce_"); n != 12*5*3 {
		t.Errorf("%d allreduce rows, want 12 types x 5 ops x 3 sizes", n)
	}
	for _, want := range []string{"allreduce_oneshot_ll", "allreduce_oneshot_ll_wide", "allreduce_ring",
		"reducescatter_direct_ll", "reducescatter_direct_ll_wide", "reducescatter_ring"} {
		if !rowRan(out, want) {
			t.Errorf("no row ran %s:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "# Wrong elements       : 0 OK") {
		t.Errorf("not OK:\n%s", out)
	}
}

// TestJSON checks the JSON report of a small run.
func TestJSON(t *testing.T) {
	code, out, errs := runBench(t, "--json", "-e", "1K", "-f", "8", "--coll", "allreduce,broadcast", "-r", "3", "--hotswap=false")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Rows) != 2*3 || rep.Wrong != 0 || rep.Errors != 0 || rep.HotSwap != nil || rep.Header.NRanks != 4 {
		t.Errorf("report: %d rows, wrong %d, errors %d, hot swap %v, nranks %d", len(rep.Rows), rep.Wrong, rep.Errors, rep.HotSwap, rep.Header.NRanks)
	}
	for _, r := range rep.Rows {
		if r.OutOfPlace.Wrong == nil || *r.OutOfPlace.Wrong != 0 || !r.OutOfPlace.Consistent || r.OutOfPlace.Schedule == "" {
			t.Errorf("row %+v", r)
		}
		if r.Collective == "broadcast" && r.Root != 3 || r.Collective == "allreduce" && r.Root != -1 {
			t.Errorf("row %s root %d", r.Collective, r.Root)
		}
	}
	if rep.Header.ContextFrom != "embedded default" {
		t.Errorf("context from %q", rep.Header.ContextFrom)
	}
}

// TestCSV checks the CSV output; the hot swap goes to standard error, as
// CSV with '#' comments (a record per switch).
func TestCSV(t *testing.T) {
	code, out, errs := runBench(t, "--csv", "-e", "4K", "-f", "16", "--coll", "gather", "-c", "0")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1+3 || len(recs[0]) != len(csvHeader) {
		t.Fatalf("records %v", recs)
	}
	if recs[1][9] != "" {
		t.Errorf("unchecked run has #wrong %q, want empty", recs[1][9])
	}
	if !strings.Contains(errs, "# Hot swap: allreduce") {
		t.Errorf("no hot swap on standard error:\n%s", errs)
	}
	r := csv.NewReader(strings.NewReader(errs))
	r.Comment = '#'
	hs, err := r.ReadAll()
	if err != nil {
		t.Fatalf("%v:\n%s", err, errs)
	}
	if len(hs) != 3 || len(hs[0]) != len(hotSwapCSVHeader) || len(hs[1]) != len(hotSwapCSVHeader) || hs[1][1] != "25" || hs[2][1] != "49" || hs[1][0] != "slow_rank" {
		t.Errorf("hot swap records %q", hs)
	}
}

// TestHotSwap runs the hot-swap demonstration alone (one 8-byte allreduce
// row) and reads its JSON: at 2 ranks auto flips ll_max_bytes, at 4
// slow_rank, and --hotswap-attr ll_max_bytes works at 4 ranks too. Every
// time the switch away happens at request 25 and back at 49 on every rank,
// #wrong is 0, and every timing field is positive (no assertion on a
// speed).
func TestHotSwap(t *testing.T) {
	for _, c := range []struct {
		n          int
		flag, attr string
		base, away string
		values     [2]int
	}{
		{2, "auto", "ll_max_bytes", "allreduce_ring", "allreduce_oneshot_ll_wide", [2]int{1 << 20, 65536}},
		{4, "auto", "slow_rank", "allreduce_ring", "allreduce_dbtree_avoid2", [2]int{2, -1}},
		{4, "ll_max_bytes", "ll_max_bytes", "allreduce_ring", "allreduce_oneshot_ll_wide", [2]int{1 << 20, 65536}},
	} {
		t.Run(fmt.Sprintf("%d_%s", c.n, c.flag), func(t *testing.T) {
			code, out, errs := runBench(t, "--json", "--nranks", fmt.Sprint(c.n), "-b", "8", "-e", "8", "--coll", "allreduce",
				"--hotswap-attr", c.flag)
			if code != cli.ExitOK {
				t.Fatalf("exit %d\n%s\n%s", code, out, errs)
			}
			var rep Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			hs := rep.HotSwap
			if hs == nil || hs.Skipped != "" {
				t.Fatalf("hot swap %+v", hs)
			}
			if hs.Attribute != c.attr || hs.First != c.base || !hs.Consistent || hs.Wrong != 0 || rep.Wrong != 0 ||
				len(hs.Published) != 2 || hs.Published[0].Value != c.values[0] || hs.Published[1].Value != c.values[1] {
				t.Errorf("attribute %s, first %s, consistent %v, wrong %d, published %+v", hs.Attribute, hs.First, hs.Consistent, hs.Wrong, hs.Published)
			}
			type sw struct {
				Request  int
				From, To string
				Ranks    string
				Reused   bool
				Old, New int
				Epochs   []int
			}
			var got []sw
			for _, s := range hs.Switches {
				got = append(got, sw{s.Request, s.From, s.To, s.Ranks, s.Reused, s.OldRequests, s.NewRequests, s.EpochRequests})
				if !(s.OldMedianUS > 0 && s.SwitchUS > 0 && s.NewMedianUS > 0 && s.EpochMedianUS > 0) {
					t.Errorf("switch at %d: times %v / %v / %v / %v us, want positive", s.Request, s.OldMedianUS, s.SwitchUS, s.NewMedianUS, s.EpochMedianUS)
				}
				if d := s.CostUS - (s.SwitchUS - s.NewMedianUS); d > 1e-3 || d < -1e-3 {
					t.Errorf("switch at %d: cost %v, want %v - %v", s.Request, s.CostUS, s.SwitchUS, s.NewMedianUS)
				}
			}
			want := []sw{{25, c.base, c.away, "all", false, 23, 23, []int{33, 41}}, {49, c.away, c.base, "all", true, 23, 15, []int{57}}}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("switches (-want +got):\n%s", d)
			}
			if len(hs.TimesUS) != hsRequests {
				t.Fatalf("%d request times, want %d", len(hs.TimesUS), hsRequests)
			}
			for i, us := range hs.TimesUS {
				if !(us > 0) {
					t.Errorf("request %d: time %v us, want positive", i+1, us)
				}
			}
		})
	}
}

func TestPlot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bw.png")
	code, out, errs := runBench(t, "--plot", file, "-b", "1K", "-e", "64K", "-f", "8", "--coll", "allreduce,alltoall", "--hotswap=false", "-n", "1")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() < 600 || b.Dy() < 600 {
		t.Errorf("plot is %v", b)
	}
}

// TestContextWithoutSlowRank: a context without slow_rank runs the table,
// and the hot swap flips ll_max_bytes instead (auto) — the policies that
// read slow_rank wait for its declaration, so the LL one-shot serves the
// 256 KiB allreduce either way and nothing switches — or is skipped, saying
// why, when asked for slow_rank, or when neither attribute is an exogenous
// int (here both are declared float, which the policies accept).
func TestContextWithoutSlowRank(t *testing.T) {
	edit := func(f func(line string) string) string {
		dir, remove, err := contexts.TempDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { remove() })
		attrs := filepath.Join(dir, "attribute_manifest.jsonl")
		data, _ := os.ReadFile(attrs)
		var keep []string
		for _, l := range strings.SplitAfter(string(data), "\n") {
			keep = append(keep, f(l))
		}
		if err := os.WriteFile(attrs, []byte(strings.Join(keep, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	noSlow := func(l string) string {
		if strings.Contains(l, `"slow_rank"`) {
			return ""
		}
		return l
	}
	floats := func(l string) string {
		return strings.Replace(l, `"type":"int","origin":"exo"`, `"type":"float","origin":"exo"`, 1)
	}
	for _, c := range []struct {
		what string
		f    func(string) string
		flag string
		want string
	}{
		{"no slow_rank", noSlow, "auto", "#   no switch: the policies chose the same schedule whatever ll_max_bytes said"},
		{"no slow_rank", noSlow, "slow_rank", "# Hot swap: skipped (the selection context declares no exogenous int attribute slow_rank)"},
		{"float attributes", floats, "auto", "# Hot swap: skipped (the selection context declares neither slow_rank nor ll_max_bytes as an exogenous int attribute)"},
	} {
		code, out, errs := runBench(t, "--context", edit(c.f), "-e", "1K", "-f", "32", "--coll", "allreduce", "--hotswap-attr", c.flag)
		if code != cli.ExitOK {
			t.Fatalf("%s: exit %d\n%s\n%s", c.what, code, out, errs)
		}
		if !strings.Contains(out, c.want) || !strings.Contains(out, "allreduce_oneshot_ll") || !strings.Contains(out, "(--context)") {
			t.Errorf("%s, --hotswap-attr %s: no %q in\n%s", c.what, c.flag, c.want, out)
		}
	}
}

// TestNoSchedule: a context with no schedule for a request fails the run
// (exit 3) naming what is missing, without hanging: an empty context (empty
// manifests: the ranks cannot even combine results), and one without
// broadcast schedules. (A directory without manifests is not a context:
// TestRoughEdges.)
func TestNoSchedule(t *testing.T) {
	empty := t.TempDir()
	for _, f := range []string{"attribute_manifest.jsonl", "schedule_manifest.jsonl"} {
		if err := os.WriteFile(filepath.Join(empty, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs := runBench(t, "--context", empty, "-e", "8", "--coll", "broadcast", "--timeout", "5s")
	if code != cli.ExitInternal || !strings.Contains(errs, "has no schedule for an int64 allreduce of 4 ranks") {
		t.Errorf("empty context: exit %d\n%s\n%s", code, out, errs)
	}
	dir := contextWithout(t, "broadcast")
	code, out, errs = runBench(t, "--context", dir, "-e", "8", "--coll", "allreduce,broadcast", "--timeout", "5s")
	if code != cli.ExitInternal || !strings.Contains(errs, "broadcast 8 B float none out of place") || !strings.Contains(errs, "no schedule serves the request") {
		t.Errorf("no broadcast: exit %d\n%s\n%s", code, out, errs)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-d", "float128"}, {"-o", "mulsum"}, {"-b", "1M", "-e", "1K"}, {"-b", "x"}, {"-n", "0"}, {"-w", "-1"},
		{"--backend", "tpu"}, {"--nranks", "0"}, {"-r", "4"}, {"--plot", "a.svg"}, {"--plot", "/nonexistent-dir/p.png"}, {"--trace", "/nonexistent-dir/t-%p.json"}, {"--csv", "--json"},
		{"--format", "xml"}, {"--coll", "alltoallv", "--matrix", "diagonal"}, {"--id-file", "/tmp/x"}, {"--context", "/nonexistent"},
		{"--progress", "sometimes"}, {"extra"}, {"--bogus"}, {"--hotswap-attr", "root"},
	} {
		code, _, errs := runBench(t, args...)
		if code != cli.ExitUsage {
			t.Errorf("%v: exit %d, want %d (%s)", args, code, cli.ExitUsage, errs)
		}
	}
}

// TestUsageMessages: step factors below 1, unknown collectives and bad
// launcher variables are usage errors that say what is wrong (-f 0 and -f
// -2 used to act like -f 1, --coll foo listed sendrecv and custom as valid,
// RANK=abc fell back to in-process mode, and RANK=5 WORLD_SIZE=2 was exit 3).
func TestUsageMessages(t *testing.T) {
	for _, tc := range []struct {
		env  [2]string // RANK, WORLD_SIZE ("" unset)
		args []string
		want string
	}{
		{args: []string{"-f", "0"}, want: "theseus-bench: -f 0: the step factor must be >= 1 (1: add the step in bytes, -i)\n"},
		{args: []string{"-f", "-2"}, want: "theseus-bench: -f -2: the step factor must be >= 1"},
		{args: []string{"--coll", "foo"}, want: `theseus-bench: unknown collective "foo" (want allreduce, reducescatter, reduce, allgather, alltoall, broadcast, gather, scatter (and, outside all, sendrecv and alltoallv), a comma-separated list, or all)`},
		{args: []string{"--coll", "custom"}, want: "theseus-bench: collective custom is not benchmarked (want allreduce, reducescatter, reduce, allgather, alltoall, broadcast, gather, scatter (and, outside all, sendrecv and alltoallv),"},
		{env: [2]string{"abc", "2"}, want: `theseus-bench: RANK="abc" is not an integer`},
		{env: [2]string{"0", "two"}, want: `theseus-bench: WORLD_SIZE="two" is not an integer`},
		{env: [2]string{"5", "2"}, args: []string{"--id-file", filepath.Join(t.TempDir(), "id")}, want: "theseus-bench: RANK=5 is not a rank of WORLD_SIZE=2 (want 0..1)"},
		{env: [2]string{"0", "0"}, want: "theseus-bench: WORLD_SIZE=0: want at least 1 rank"},
	} {
		if tc.env[0] != "" {
			t.Setenv("RANK", tc.env[0])
			t.Setenv("WORLD_SIZE", tc.env[1])
		}
		code, _, errs := runBench(t, append([]string{"-e", "8", "--hotswap=false"}, tc.args...)...)
		os.Unsetenv("RANK")
		os.Unsetenv("WORLD_SIZE")
		if code != cli.ExitUsage || !strings.HasPrefix(errs, tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q; want %d and %q", tc.env, tc.args, code, errs, cli.ExitUsage, tc.want)
		}
	}
}

// TestMultiProcess runs OS processes, each one rank: 2 ranks joined through
// MASTER_ADDR/MASTER_PORT (every collective, the CI run), where the hot
// swap flips ll_max_bytes, and 4, 3, 6, 16 and 8 (2 nodes of 4) ranks joined
// through a unique-id file, where it flips slow_rank; either way it switches schedule (each process
// publishes to its own copy of the context, and all switch at the same
// request). Even ranks
// take their rank from RANK/WORLD_SIZE (torchrun), odd ones from
// OMPI_COMM_WORLD_RANK/SIZE (mpirun). Every row and the hot swap must end
// with #wrong = 0 and agreeing ranks; only rank 0 prints.
func TestMultiProcess(t *testing.T) {
	t.Run("2", func(t *testing.T) { multiProcess(t, 2, 0) })
	t.Run("4", func(t *testing.T) { multiProcess(t, 4, 0) })
	t.Run("2x2", func(t *testing.T) { multiProcess(t, 4, 2) })
	// Shapes the default context had no schedule for (issue 20): 3 and 6
	// ranks, and 2 nodes of 4, which run the hierarchical schedules.
	t.Run("3", func(t *testing.T) { multiProcess(t, 3, 0) })
	t.Run("6", func(t *testing.T) { multiProcess(t, 6, 0) })
	t.Run("16", func(t *testing.T) { multiProcess(t, 16, 0) })
	t.Run("2x4", func(t *testing.T) { multiProcess(t, 8, 4) })
}

// multiProcess runs n processes; with perNode > 0 they form nodes of
// perNode ranks (MSCCLPP_HOSTID), so the hierarchical schedules serve the
// large allreduce, allgather and reducescatter rows.
func multiProcess(t *testing.T, n, perNode int) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"-b", "6", "-e", "384K", "-f", "4", "-n", "2", "-w", "1", "--timeout", "60s"}
	var rendezvous []string
	if n == 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		rendezvous = []string{"MASTER_ADDR=127.0.0.1", fmt.Sprintf("MASTER_PORT=%d", port)}
	} else {
		flags = append(flags, "--id-file", filepath.Join(t.TempDir(), "id"))
	}
	args, _ := json.Marshal(flags)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, n)
	cmds := make([]*exec.Cmd, n)
	for r := range n {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(append(os.Environ(), childEnv+"=1", childArgs+"="+string(args)), rendezvous...)
		if r%2 == 0 {
			cmd.Env = append(cmd.Env, fmt.Sprintf("RANK=%d", r), fmt.Sprintf("WORLD_SIZE=%d", n))
		} else {
			cmd.Env = append(cmd.Env, fmt.Sprintf("OMPI_COMM_WORLD_RANK=%d", r), fmt.Sprintf("OMPI_COMM_WORLD_SIZE=%d", n))
		}
		if perNode > 0 {
			cmd.Env = append(cmd.Env, fmt.Sprintf("MSCCLPP_HOSTID=node%d", r/perNode))
		}
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	out := outs[0].String()
	base := "allreduce_ring"
	if perNode > 0 {
		base = "allreduce_hier"
		for _, c := range []string{"allreduce", "allgather", "reducescatter"} {
			if !strings.Contains(out, c+"_hier") {
				t.Errorf("no row ran %s's hierarchical schedule:\n%s", c, out)
			}
		}
	}
	checkTable(t, out, n, base)
	if !strings.Contains(out, fmt.Sprintf("%d ranks (multi-process", n)) || !strings.Contains(out, "each rank's copy of the context") ||
		!strings.Contains(out, "every rank ran the same schedule at every request; #wrong = 0") {
		t.Errorf("rank 0:\n%s", out)
	}
	for r := 1; r < n; r++ {
		if s := outs[r].String(); strings.TrimSpace(s) != "" {
			t.Errorf("rank %d printed:\n%s", r, s)
		}
	}
}

// TestProgress: --progress always draws the bar on standard error (never on
// standard output), and the table is unchanged.
func TestProgress(t *testing.T) {
	code, out, errs := runBench(t, "--progress", "always", "-e", "1K", "-f", "32", "--coll", "allreduce")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(errs, "allreduce 1KiB") && !strings.Contains(errs, "hot swap") {
		t.Errorf("no progress on standard error: %q", errs)
	}
	if strings.Contains(out, "\r") {
		t.Errorf("progress on standard output: %q", out)
	}
	_, quiet, _ := runBench(t, "--progress", "never", "-e", "1K", "-f", "32", "--coll", "allreduce")
	if len(strings.Split(quiet, "\n")) != len(strings.Split(out, "\n")) {
		t.Errorf("the table changed with the progress bar:\n%s\n---\n%s", out, quiet)
	}
}

// contextWithout writes the default context without the schedule entries
// of collective coll into a new directory and returns it.
func contextWithout(t *testing.T, coll string) string {
	t.Helper()
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	man := filepath.Join(dir, "schedule_manifest.jsonl")
	data, _ := os.ReadFile(man)
	var keep []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.Contains(l, `"collective":"`+coll+`"`) {
			keep = append(keep, l)
		}
	}
	if err := os.WriteFile(man, []byte(strings.Join(keep, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestRoughEdges pins what a new user hit (issue 20): each case is the
// command line, its exit code and what standard error (or output) says.
func TestRoughEdges(t *testing.T) {
	noAllreduce := contextWithout(t, "allreduce")
	notContext := t.TempDir()
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		code   cli.ExitCode
		stderr string
	}{
		// Memory checked up front (it was OOM-killed at 24 GB; by default
		// the limit is three quarters of physical memory).
		{"memory", nil, []string{"-b", "16G", "-e", "16G", "--max-memory", "25769803776"}, cli.ExitUsage,
			"theseus-bench: -e 16GiB at 4 rank(s) (4 in this process) needs about 223338299392 bytes of memory (two 17179869184-byte buffers per rank, and every rank's input for the check), more than the limit of 25769803776 bytes"},
		{"max-memory", nil, []string{"-b", "1M", "-e", "1M", "--max-memory", "1000000"}, cli.ExitUsage,
			"more than the limit of 1000000 bytes, set by --max-memory"},
		// With a suffix, as -b and -e take them (it was a strconv error:
		// t1 finding L5).
		{"max-memory suffix", nil, []string{"-b", "1M", "-e", "1M", "--max-memory", "1M"}, cli.ExitUsage,
			"more than the limit of 1048576 bytes, set by --max-memory"},
		{"max-memory negative", nil, []string{"--max-memory", "-1"}, cli.ExitUsage, "bad size \"-1\""},
		// A negative timeout is a usage error naming the flag (it was an
		// internal executor error).
		{"timeout", nil, []string{"--timeout", "-5s"}, cli.ExitUsage, "theseus-bench: --timeout -5s: want a positive duration"},
		// A context that does not exist: the same exit code either way.
		{"context flag", nil, []string{"--context", "/nonexistent"}, cli.ExitUsage, "--context /nonexistent: not a directory"},
		{"context variable", map[string]string{"THESEUS_SELECTION_CONTEXT": "/nonexistent"}, []string{"-e", "8"}, cli.ExitUsage,
			"theseus-bench: THESEUS_SELECTION_CONTEXT=/nonexistent: not a directory"},
		// A directory that is not a context: exit 2 before the table, as
		// theseusc select (it was exit 3 after the header: t1 finding L4).
		{"not a context", nil, []string{"--context", notContext, "-e", "8"}, cli.ExitUsage,
			"theseus-bench: --context: " + notContext + " is a directory without attribute_manifest.jsonl or schedule_manifest.jsonl: not a selection context"},
		{"not a context variable", map[string]string{"THESEUS_SELECTION_CONTEXT": notContext}, []string{"-e", "8"}, cli.ExitUsage,
			"theseus-bench: THESEUS_SELECTION_CONTEXT: " + notContext + " is a directory without"},
		// What the context lacks (it said the ranks "combine their results
		// with small int64 allreduces...").
		{"lacks allreduce", nil, []string{"--context", noAllreduce, "--nranks", "3", "-e", "8", "--coll", "broadcast", "--hotswap=false"},
			cli.ExitInternal, "selection context " + noAllreduce + " has no schedule for an int64 allreduce of 3 ranks (3 per node), which theseus-bench needs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			env.Reset()
			defer env.Reset()
			code, _, errs := runBench(t, tc.args...)
			if code != tc.code || !strings.Contains(errs, tc.stderr) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, errs, tc.code, tc.stderr)
			}
		})
	}
}

// TestFDLimit: ranks out of file descriptors are refused up front, naming
// the limit (32 ranks at ulimit -n 1024 showed as a bootstrap timeout).
func TestFDLimit(t *testing.T) {
	var old unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
		t.Skip(err)
	}
	low := unix.Rlimit{Cur: 1024, Max: old.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
		t.Skip(err)
	}
	defer unix.Setrlimit(unix.RLIMIT_NOFILE, &old)
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "theseus-*"))
	code, _, errs := runBench(t, "--nranks", "32", "-e", "8", "--hotswap=false")
	if code != cli.ExitUsage || !strings.Contains(errs, "32 rank(s) (32 in this process) need about 3136 file descriptors (connections between the ranks), more than the limit of 1024 (ulimit -n)") {
		t.Errorf("exit %d:\n%s", code, errs)
	}
	// The hot swap's second communicator counts too: 16 ranks need 832
	// descriptors for the table and as many again for the hot swap (at
	// ulimit -n 832 the check passed and the hot swap's bootstrap timed
	// out: t1 finding M1).
	code, _, errs = runBench(t, "--nranks", "16", "-e", "8", "--coll", "allreduce", "--timeout", "5s")
	if code != cli.ExitUsage || !strings.Contains(errs, "16 rank(s) (16 in this process) need about 1600 file descriptors (connections between the ranks, for the table's communicator and the hot swap's), more than the limit of 1024 (ulimit -n); raise it (ulimit -n 3200), --hotswap=false (half as many)") {
		t.Errorf("exit %d:\n%s", code, errs)
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "theseus-*"))
	if len(after) > len(before) {
		t.Errorf("temporary directories left: %v", after)
	}
}

// TestSelectionContextDiagnostics: a bad policy line and a line cut short
// in the context are printed once each on standard error with
// file:line:col, as theseusc select prints them; the run goes on with the
// good lines.
func TestSelectionContextDiagnostics(t *testing.T) {
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "schedule_manifest.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"gen":"ring","collective":"allreduce","preference":"msgsize >> 3"}` + "\n" + `{"gen":"ring","collective":"allr` + "\n")
	f.Close()
	code, out, errs := runBench(t, "--context", dir, "-e", "64", "--coll", "allreduce", "--hotswap=false")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	man := filepath.Join(dir, "schedule_manifest.jsonl")
	lines := strings.Count(string(mustReadFile(t, man)), "\n") // the two appended lines are the last
	for _, want := range []string{fmt.Sprintf("%s:%d:63: error[TS0300]", man, lines-1), fmt.Sprintf("%s:%d:", man, lines)} {
		if n := strings.Count(errs, want); n != 1 {
			t.Errorf("%q printed %d times on standard error (4 ranks), want once:\n%s", want, n, errs)
		}
	}
	if !strings.Contains(out, "allreduce_oneshot_ll") {
		t.Errorf("the good lines were not used:\n%s", out)
	}
}

// TestPartialJSONOnFailure: a run that fails (the context has no
// broadcast) still writes, with --json, the rows it measured and the
// error; with --csv, the rows.
func TestPartialJSONOnFailure(t *testing.T) {
	dir := contextWithout(t, "broadcast")
	code, out, errs := runBench(t, "--context", dir, "-e", "8", "--coll", "allreduce,broadcast", "--hotswap=false", "--json")
	if code != cli.ExitInternal {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(rep.Rows) != 1 || rep.Rows[0].Collective != "allreduce" || !strings.Contains(rep.Error, "no schedule serves the request") {
		t.Errorf("rows %+v, error %q", rep.Rows, rep.Error)
	}
	code, out, _ = runBench(t, "--context", dir, "-e", "8", "--coll", "allreduce,broadcast", "--hotswap=false", "--csv")
	if code != cli.ExitInternal || strings.Count(out, "\n") != 2 || !strings.HasPrefix(strings.Split(out, "\n")[1], "allreduce,") {
		t.Errorf("csv: exit %d\n%s", code, out)
	}
}

// TestNoCheck: with -c 0 the footer does not claim "0 OK".
func TestNoCheck(t *testing.T) {
	code, out, errs := runBench(t, "-e", "64", "-c", "0", "--coll", "allreduce", "--hotswap=false")
	if code != cli.ExitOK || !strings.Contains(out, "# Wrong elements       : N/A (not checked: -c 0)\n") || strings.Contains(out, "0 OK") {
		t.Errorf("exit %d:\n%s\n%s", code, out, errs)
	}
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestPointToPoint: the sendrecv and alltoallv rows (each matrix shape;
// the zero matrix once), every received element checked, in-place N/A,
// the point-to-point engine in the schedule column; a bad --matrix is a
// usage error.
func TestPointToPoint(t *testing.T) {
	code, out, errs := runBench(t, "--json", "-b", "1K", "-e", "256K", "-f", "16", "--coll", "sendrecv,alltoallv", "-d", "half", "--hotswap=false")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var rep Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// 3 sizes of sendrecv, 3 each of random and skewed, 1 zero.
	if len(rep.Rows) != 3+3+3+1 || rep.Wrong != 0 || rep.Errors != 0 {
		t.Fatalf("%d rows, wrong %d, errors %d", len(rep.Rows), rep.Wrong, rep.Errors)
	}
	kinds := map[string]int{}
	for _, r := range rep.Rows {
		kinds[r.Collective+" "+r.RedOp]++
		x := r.OutOfPlace
		if x.Wrong == nil || *x.Wrong != 0 || !x.Consistent || x.Schedule != "p2p" || !r.InPlace.NA || r.Root != -1 {
			t.Errorf("row %+v", r)
		}
		if r.RedOp == "zero" && r.Bytes != 0 || r.RedOp != "zero" && (r.Bytes == 0 || x.AlgBW <= 0) {
			t.Errorf("row %s %s: %d bytes, algbw %v", r.Collective, r.RedOp, r.Bytes, x.AlgBW)
		}
	}
	if want := map[string]int{"sendrecv none": 3, "alltoallv random": 3, "alltoallv skewed": 3, "alltoallv zero": 1}; !cmp.Equal(kinds, want) {
		t.Errorf("rows %v, want %v", kinds, want)
	}
	if code, _, errs := runBench(t, "--coll", "alltoallv", "--matrix", "diagonal"); code != cli.ExitUsage || !strings.Contains(errs, "unknown matrix") {
		t.Errorf("--matrix diagonal: exit %d, %s", code, errs)
	}
}

// alltoallvMatrix's rows each send the row's count in all, in the shape
// asked for: skewed sends 90% to the 4 hot experts.
func TestAlltoAllvMatrix(t *testing.T) {
	const n, count = 8, 1000
	for _, kind := range matrixKinds {
		m := alltoallvMatrix(kind, n, count, 1)
		for i := range n {
			var sum, hot int64
			for j := range n {
				sum += m[i*n+j]
				if j < 4 {
					hot += m[i*n+j]
				}
			}
			want := int64(count)
			if kind == "zero" {
				want = 0
			}
			if sum != want || kind == "skewed" && (hot < 890 || hot > 910) {
				t.Errorf("%s row %d: %d in all, %d to the hot experts", kind, i, sum, hot)
			}
		}
	}
}
