package main

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"gonum.org/v1/plot"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/internal/nccltests"
)

const compareData = "testdata/compare"

// runCompare runs the command in-process; it returns the exit code,
// standard output and standard error.
func runCompare(t *testing.T, args ...string) (cli.ExitCode, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, cli.Streams{Out: &out, Err: &errb})
	return code, out.String(), errb.String()
}

// compareGolden compares got with testdata/compare/name (-update rewrites
// it, the package's convention).
func compareGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join(compareData, name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run TestCompareGolden -update creates it)", err)
	}
	if d := cmp.Diff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, d)
	}
}

// TestCompareGolden: the real nccl-tests outputs of testdata/compare (two
// ways of loading Theseus's libnccl), parsed and compared: the markdown
// report and the CSV against their golden files. The candidate directory
// also holds a failed run, which is skipped with a note.
func TestCompareGolden(t *testing.T) {
	csvPath := filepath.Join(t.TempDir(), "out.csv")
	code, out, errs := runCompare(t, "compare", "--baseline", compareData+"/ldpath", "--candidate", compareData+"/audit",
		"--baseline-name", "ldpath", "--candidate-name", "audit", "--csv", csvPath)
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	wantErr := "theseus-bench compare: skipped testdata/compare/audit/failed-mpi.log: no nccl-tests or theseus-bench rows\n"
	if errs != wantErr {
		t.Errorf("stderr %q, want %q", errs, wantErr)
	}
	compareGolden(t, "ldpath-audit.md.golden", out)
	csv, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, "ldpath-audit.csv.golden", string(csv))
}

// TestCompareValues checks the report's figures against the input files
// by hand: allreduce on 2 ranks, ldpath-n2-all_reduce.txt against
// audit-n2-all_reduce.txt.
func TestCompareValues(t *testing.T) {
	parse := func(name string) *input {
		out, err := nccltests.ParseFile(filepath.Join(compareData, name))
		if err != nil {
			t.Fatal(err)
		}
		return &input{path: name, out: out}
	}
	cr, err := compare("ldpath", "audit", []*input{parse("ldpath/ldpath-n2-all_reduce.txt")},
		[]*input{parse("audit/audit-n2-all_reduce.txt")}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.tables) != 1 || len(cr.tables[0].rows) != 8 {
		t.Fatalf("want one table of 8 sizes, got %d tables", len(cr.tables))
	}
	tb := cr.tables[0]
	// busbw ratios come from the times (the printed busbw is rounded): 16 MiB
	// takes 1256.63 / 1255.89 µs out of place, 1255.11 / 1241.65 in place;
	// 8 B (busbw printed 0.00 on both sides) 53.48 / 53.55.
	last := tb.rows[7]
	got := []float64{last.busRatio(0), last.busRatio(1), tb.rows[0].timeRatio(0), tb.rows[0].busRatio(0)}
	want := []float64{1256.63 / 1255.89, 1255.11 / 1241.65, 53.55 / 53.48, 53.48 / 53.55}
	if d := cmp.Diff(want, got, cmpopts.EquateNaNs(), cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("ratios: -want +got:\n%s", d)
	}
	// Time ratios at 8, 64, 512, 4K and 32K bytes; the median of 5 is
	// the third smallest. Out of place: 53.55/53.48, 48.80/65.58,
	// 39.19/66.67, 77.56/63.22, 59.45/69.07 = 1.001, 0.744, 0.588, 1.227,
	// 0.861. In place: 53.88/71.34, 58.15/67.73, 55.54/75.36,
	// 76.26/73.24, 83.22/72.57 = 0.755, 0.859, 0.737, 1.041, 1.147.
	wantSum := summary{largest: 16 << 20, hasLargest: true, busRatio: [2]float64{want[0], want[1]},
		smallN: [2]int{5, 5}, timeMedian: [2]float64{59.45 / 69.07, 58.15 / 67.73}}
	if d := cmp.Diff(wantSum, tb.sum, cmp.AllowUnexported(summary{}), cmpopts.EquateApprox(0, 1e-12)); d != "" {
		t.Errorf("summary: -want +got:\n%s", d)
	}
}

// TestCompareTheseusBench pairs a theseus-bench output (every collective
// in one file) with nccl-tests outputs of the same 2 ranks; the
// collectives nccl-tests did not run are noted under --allow-unmatched.
func TestCompareTheseusBench(t *testing.T) {
	code, out, errs := runCompare(t, "compare",
		"--baseline", compareData+"/ldpath/ldpath-n2-all_reduce.txt,"+compareData+"/ldpath/ldpath-n2-reduce_scatter.txt",
		"--candidate", compareData+"/theseus-bench-mps-n2.txt", "--allow-unmatched")
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	for _, c := range []string{"reduce", "allgather", "alltoall", "broadcast", "gather", "scatter"} {
		want := "theseus-bench compare: not compared: " + c + ", 2 ranks: only in the candidate (testdata/compare/theseus-bench-mps-n2.txt)\n"
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q:\n%s", want, errs)
		}
	}
	// allreduce at 16 MiB: ldpath's row "16777216 4194304 float sum -1
	// 1256.63 13.35 13.35 0 1255.11 13.37 13.37 0", theseus-bench's
	// "16777216 4194304 float sum -1 6005.6 2.79 2.79 0 1298.7 12.92 12.92
	// 0 allreduce_n2_ring".
	for _, want := range []string{
		"## allreduce, 2 ranks: float sum\n",
		"## reducescatter, 2 ranks: float sum\n",
		"(theseus-bench, backend cuda)",
		"| 16M | 1256.63 | 6005.60 | 4.78 | 13.35 | 2.79 | 0.21 | 1255.11 | 1298.70 | 1.03 | 13.37 | 12.92 | 0.97 | 0/0 | 0/0 |\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// modeDirs writes a baseline and a candidate directory with modes g0 and
// g1 (relabelled real runs, see testdata/compare/README.md).
func modeDirs(t *testing.T) (base, cand string) {
	t.Helper()
	dir := t.TempDir()
	base, cand = filepath.Join(dir, "nccl"), filepath.Join(dir, "theseus")
	for _, f := range []struct{ src, dst string }{
		{"ldpath/ldpath-n2-all_reduce.txt", "nccl/nccl-g0-all_reduce.txt"},
		{"audit/audit-n2-all_reduce.txt", "nccl/nccl-g1-all_reduce.txt"},
		{"audit/audit-n2-all_reduce.txt", "theseus/theseus-g0-all_reduce.txt"},
		{"ldpath/ldpath-n2-all_reduce.txt", "theseus/theseus-g1-all_reduce.txt"},
		{"ldpath/ldpath-n4-broadcast.txt", "nccl/nccl-g0-broadcast.txt"},
		{"audit/audit-n4-broadcast.txt", "theseus/theseus-g0-broadcast.txt"},
	} {
		data, err := os.ReadFile(filepath.Join(compareData, f.src))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(f.dst, "-g1-") {
			data = bytes.Replace(data, []byte("graph: 0"), []byte("graph: 1"), 1)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f.dst)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f.dst), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return base, cand
}

// TestCompareModes: files pair by mode (g0, g1 in their names); the
// plots are written, decode as PNG images, and the report links them.
func TestCompareModes(t *testing.T) {
	base, cand := modeDirs(t)
	dir := filepath.Dir(base)
	md := filepath.Join(dir, "report.md")
	code, _, errs := runCompare(t, "compare", "--baseline", base, "--candidate", cand, "--markdown", md, "--plot-dir", filepath.Join(dir, "plots"))
	if code != cli.ExitOK {
		t.Fatalf("exit %d\n%s", code, errs)
	}
	report, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	var titles []string
	for _, m := range regexp.MustCompile(`(?m)^## (.*)$`).FindAllStringSubmatch(string(report), -1) {
		titles = append(titles, m[1])
	}
	wantTitles := []string{"Summary", "allreduce, 2 ranks, mode g0: float sum", "allreduce, 2 ranks, mode g1: float sum",
		"broadcast, 4 ranks, mode g0: float none root 0"}
	if d := cmp.Diff(wantTitles, titles); d != "" {
		t.Errorf("sections: -want +got:\n%s", d)
	}
	for _, want := range []string{
		"NCCL: `" + filepath.Join(base, "nccl-g1-all_reduce.txt") + "` (nccl-tests 2.19.6, library 2.25.1, -G 1)",
		"![allreduce, 2 ranks, mode g1: float sum busbw](plots/allreduce-n2-busbw.png)",
		"![broadcast, 4 ranks, mode g0: float none root 0 time](plots/broadcast-n4-time.png)",
	} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "plots", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, filepath.Base(f))
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 200 {
			t.Errorf("%s: %v, want a full-size plot", f, b)
		}
	}
	want := []string{"allreduce-n2-busbw.png", "allreduce-n2-time.png", "broadcast-n4-busbw.png", "broadcast-n4-time.png"}
	if d := cmp.Diff(want, names); d != "" {
		t.Errorf("plot files: -want +got:\n%s", d)
	}
}

// TestCompareErrors: what is wrong is named, with exit code 2.
func TestCompareErrors(t *testing.T) {
	base, cand := modeDirs(t)
	tmp := t.TempDir()
	bad := filepath.Join(tmp, "bad-all_reduce.txt")
	data, err := os.ReadFile(filepath.Join(compareData, "ldpath/ldpath-n2-all_reduce.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, bytes.Replace(data, []byte("   176.95"), []byte("   176,95"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(tmp, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	ld := compareData + "/ldpath"
	for _, tc := range []struct {
		name string
		args []string
		want string // standard error
	}{
		{"missing flags", []string{}, "theseus-bench compare: both --baseline and --candidate are required\n"},
		{"missing file", []string{"--baseline", "no/such.txt", "--candidate", ld},
			"theseus-bench compare: --baseline no/such.txt: no such file or directory\n"},
		{"empty directory", []string{"--baseline", ld, "--candidate", empty},
			"theseus-bench compare: --candidate " + empty + ": the directory has no .txt or .log files\n"},
		{"no rows", []string{"--baseline", ld, "--candidate", compareData + "/audit/failed-mpi.log"},
			"theseus-bench compare: skipped testdata/compare/audit/failed-mpi.log: no nccl-tests or theseus-bench rows\n" +
				"theseus-bench compare: --candidate testdata/compare/audit/failed-mpi.log: no nccl-tests or theseus-bench rows in any file\n"},
		{"malformed row", []string{"--baseline", bad, "--candidate", ld},
			"theseus-bench compare: --baseline: " + bad + `:18:56: time "176,95" is not a number (hint: another program's output may have cut the row; send library logs elsewhere (NCCL_DEBUG_FILE, THESEUS_DEBUG_FILE) or to stderr)` + "\n"},
		{"unmatched", []string{"--baseline", ld, "--candidate", compareData + "/audit/audit-n2-all_reduce.txt"},
			"theseus-bench compare: found on one side only (outputs pair by collective, number of ranks and mode (the file name's match of --mode-regexp); --allow-unmatched compares the rest):\n" +
				"  allreduce, 4 ranks: only in the baseline (testdata/compare/ldpath/ldpath-n4-all_reduce.txt)\n" +
				"  reducescatter, 2 ranks: only in the baseline (testdata/compare/ldpath/ldpath-n2-reduce_scatter.txt)\n" +
				"  alltoall, 4 ranks: only in the baseline (testdata/compare/ldpath/ldpath-n4-alltoall.txt)\n" +
				"  broadcast, 4 ranks: only in the baseline (testdata/compare/ldpath/ldpath-n4-broadcast.txt)\n"},
		{"modes on one side only", []string{"--baseline", base, "--candidate", ld, "--allow-unmatched"},
			"theseus-bench compare: nothing to compare: no collective, number of ranks and mode is on both sides (outputs pair by collective, number of ranks and mode (the file name's match of --mode-regexp)):\n" +
				"  allreduce, 2 ranks: only in the candidate (testdata/compare/ldpath/ldpath-n2-all_reduce.txt)\n" +
				"  allreduce, 2 ranks, mode g0: only in the baseline (" + filepath.Join(base, "nccl-g0-all_reduce.txt") + ")\n" +
				"  allreduce, 2 ranks, mode g1: only in the baseline (" + filepath.Join(base, "nccl-g1-all_reduce.txt") + ")\n" +
				"  allreduce, 4 ranks: only in the candidate (testdata/compare/ldpath/ldpath-n4-all_reduce.txt)\n" +
				"  reducescatter, 2 ranks: only in the candidate (testdata/compare/ldpath/ldpath-n2-reduce_scatter.txt)\n" +
				"  alltoall, 4 ranks: only in the candidate (testdata/compare/ldpath/ldpath-n4-alltoall.txt)\n" +
				"  broadcast, 4 ranks: only in the candidate (testdata/compare/ldpath/ldpath-n4-broadcast.txt)\n" +
				"  broadcast, 4 ranks, mode g0: only in the baseline (" + filepath.Join(base, "nccl-g0-broadcast.txt") + ")\n"},
		{"two files, one key", []string{"--baseline", base, "--candidate", cand, "--mode-regexp", ""},
			"theseus-bench compare: --baseline: " + filepath.Join(base, "nccl-g0-all_reduce.txt") + " and " + filepath.Join(base, "nccl-g1-all_reduce.txt") +
				" both hold allreduce, 2 ranks: keep one, or tell them apart by mode (--mode-regexp)\n"},
		{"bad regexp", []string{"--baseline", ld, "--candidate", ld, "--mode-regexp", "g("},
			"theseus-bench compare: --mode-regexp: error parsing regexp: missing closing ): `g(`\n"},
		{"markdown folder", []string{"--baseline", ld, "--candidate", ld, "--markdown", "no/such/dir/r.md"},
			"theseus-bench compare: --markdown no/such/dir/r.md: no such folder no/such/dir\n"},
		{"argument", []string{"--baseline", ld, "--candidate", ld, "extra"},
			"theseus-bench compare: want no arguments (inputs go to --baseline and --candidate), got 1 argument(s)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCompare(t, append([]string{"compare"}, tc.args...)...)
			if code != cli.ExitUsage {
				t.Errorf("exit %d, want %d", code, cli.ExitUsage)
			}
			want := tc.want + "Run 'theseus-bench compare --help' for usage.\n"
			if d := cmp.Diff(want, errs); d != "" {
				t.Errorf("stderr: -want +got:\n%s", d)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
		})
	}
}

// TestCompareWrong: a row with #wrong > 0 still gets its report, and
// the exit code is 1.
func TestCompareWrong(t *testing.T) {
	tmp := t.TempDir()
	data, err := os.ReadFile(filepath.Join(compareData, "audit/audit-n2-all_reduce.txt"))
	if err != nil {
		t.Fatal(err)
	}
	row := "     2097152        524288     float     sum      -1   181.76   11.54   11.54       0   174.33   12.03   12.03       0"
	data = bytes.Replace(data, []byte(row), []byte(strings.TrimSuffix(row, "       0")+"      17"), 1)
	cand := filepath.Join(tmp, "wrong-all_reduce.txt")
	if err := os.WriteFile(cand, data, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCompare(t, "compare", "--baseline", compareData+"/ldpath/ldpath-n2-all_reduce.txt", "--candidate", cand)
	if code != cli.ExitFindings {
		t.Fatalf("exit %d, want 1\n%s", code, errs)
	}
	if want := "theseus-bench compare: 1 compared rows have #wrong > 0 on a side (the #wrong columns say which)\n"; errs != want {
		t.Errorf("stderr %q, want %q", errs, want)
	}
	for _, want := range []string{"| 0/0 | 0/17 |\n", "| allreduce | 2 | - | float sum | 16M | 1.00 | 1.01 | 0.86 | 0.86 | 0 / 1 |\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// TestCompareOwnOutput runs theseus-bench itself (no subcommand: the root
// still benchmarks), then compares its text output with itself: the
// parser reads what report.go prints, and every ratio is 1.
func TestCompareOwnOutput(t *testing.T) {
	code, out, errs := runCompare(t, "--nranks", "2", "-b", "8", "-e", "256K", "-f", "64", "-n", "1", "-w", "0",
		"--hotswap=false", "--coll", "allreduce,broadcast,alltoall", "--progress", "never")
	if code != cli.ExitOK {
		t.Fatalf("theseus-bench: exit %d\n%s", code, errs)
	}
	path := filepath.Join(t.TempDir(), "theseus-g0-bench.txt")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	parsed, err := nccltests.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if parsed.Tool != nccltests.TheseusBench || parsed.NRanks != 2 || len(parsed.Rows) != 9 {
		t.Fatalf("parsed %v, %d ranks, %d rows; want theseus-bench, 2 ranks, 9 rows (3 collectives × 8 B, 512 B, 32 KiB)\n%s",
			parsed.Tool, parsed.NRanks, len(parsed.Rows), out)
	}
	for _, r := range parsed.Rows {
		if r.Schedule == "" || r.OutOfPlace.Wrong == nil || *r.OutOfPlace.Wrong != 0 {
			t.Errorf("row %+v: want a schedule and #wrong 0", r)
		}
	}
	code, md, errs := runCompare(t, "compare", "--baseline", path, "--candidate", path)
	if code != cli.ExitOK {
		t.Fatalf("compare: exit %d\n%s", code, errs)
	}
	for _, want := range []string{"| allreduce | 2 | g0 | float sum | 32K |", "| broadcast | 2 | g0 | float none root 0 | 32K |",
		"| alltoall | 2 | g0 | float none | 32K |", "median time ratio over 0 < size ≤ 64K: 1.00 out of place (3 sizes), 1.00 in place (3 sizes)"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}

// TestCompareHelp: the root's --help lists compare, and compare has its
// own.
func TestCompareHelp(t *testing.T) {
	code, out, _ := runCompare(t, "--help")
	if code != cli.ExitOK || !strings.Contains(out, "compare") || !strings.Contains(out, "--minbytes") {
		t.Errorf("theseus-bench --help: exit %d\n%s", code, out)
	}
	code, out, _ = runCompare(t, "compare", "--help")
	if code != cli.ExitOK || !strings.Contains(out, "--baseline") || !strings.Contains(out, "--mode-regexp") {
		t.Errorf("theseus-bench compare --help: exit %d\n%s", code, out)
	}
}

func TestModeOf(t *testing.T) {
	re := regexp.MustCompile(defaultModeRegexp)
	got := map[string]string{}
	for _, p := range []string{"nccl-g0-all_reduce.txt", "dir/theseus_g12_bench.log", "all_gather.txt", "g1.txt", "ldpath-n2-all_reduce.txt", "gx-g3"} {
		got[p] = modeOf(p, re)
	}
	want := map[string]string{"nccl-g0-all_reduce.txt": "g0", "dir/theseus_g12_bench.log": "g12", "all_gather.txt": "",
		"g1.txt": "g1", "ldpath-n2-all_reduce.txt": "", "gx-g3": "g3"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
	if m := modeOf("x-n4-y.txt", regexp.MustCompile(`n[0-9]+`)); m != "n4" {
		t.Errorf("whole match: %q, want n4", m)
	}
	if m := modeOf("nccl-g0-x.txt", nil); m != "" {
		t.Errorf("no regexp: %q", m)
	}
}

func TestLog2Ticks(t *testing.T) {
	var labels []string
	ticks := log2Ticks{}.Ticks(8, 16<<20)
	for _, tk := range ticks {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if len(ticks) != 22 {
		t.Errorf("%d ticks, want 22 (2^3..2^24)", len(ticks))
	}
	want := []string{"16", "64", "256", "1K", "4K", "16K", "64K", "256K", "1M", "4M", "16M"}
	if d := cmp.Diff(want, labels); d != "" {
		t.Errorf("labels: -want +got:\n%s", d)
	}
	for _, r := range [][2]float64{{0, 8}, {-1, 8}, {8, math.Inf(1)}, {math.NaN(), 1}, {16, 8}} {
		if got := (log2Ticks{}).Ticks(r[0], r[1]); got != nil {
			t.Errorf("Ticks(%v, %v) = %v, want nil", r[0], r[1], got)
		}
	}
	var _ plot.Ticker = log2Ticks{}
}

func TestSizeLabelAndMedian(t *testing.T) {
	got := []string{sizeLabel(0), sizeLabel(8), sizeLabel(1000), sizeLabel(1024), sizeLabel(3 << 20), sizeLabel(1 << 30), sizeLabel(1536)}
	if d := cmp.Diff([]string{"0", "8", "1000", "1K", "3M", "1G", "1536"}, got); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
	// Even count: the lower middle value (stat.Empirical).
	row := func(size int64, bt, ct float64) cmpRow {
		return cmpRow{bytes: size, base: &nccltests.Row{Bytes: size, OutOfPlace: nccltests.Result{TimeUS: bt}, InPlace: nccltests.Result{TimeUS: bt}},
			cand: &nccltests.Row{Bytes: size, OutOfPlace: nccltests.Result{TimeUS: ct}, InPlace: nccltests.Result{TimeUS: ct}}}
	}
	s := summarizeTable([]cmpRow{row(0, 1, 9), row(8, 10, 20), row(64, 10, 5), row(1024, 10, 30), row(65536, 10, 10), row(1<<20, 10, 10)})
	if s.smallN[0] != 4 || s.timeMedian[0] != 1 || s.largest != 1<<20 {
		t.Errorf("summary %+v: want 4 small sizes (size 0 excluded), median 1 (of 0.5, 1, 2, 3), largest 1M", s)
	}
}
