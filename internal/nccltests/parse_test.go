package nccltests

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func i64(v int64) *int64     { return &v }
func f64(v float64) *float64 { return &v }

func res(t, alg, bus float64, wrong int64) Result {
	return Result{TimeUS: t, AlgBW: alg, BusBW: bus, Wrong: i64(wrong)}
}

func parseTestdata(t *testing.T, name string) *Output {
	t.Helper()
	out, err := ParseFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAllReduceN2 reads a whole real nccl-tests output: 2 ranks through
// Theseus's libnccl (LD_AUDIT), with the audit library's log line first.
func TestAllReduceN2(t *testing.T) {
	got := parseTestdata(t, "audit-n2-all_reduce.txt")
	row := func(line int, size, count int64, oop, ip Result) Row {
		return Row{Line: line, Collective: "allreduce", Bytes: size, Count: count, Type: "float", RedOp: "sum", Root: -1,
			OutOfPlace: oop, InPlace: ip}
	}
	dev := func(line, rank, pid int) Device {
		return Device{Line: line, Rank: rank, Pid: pid, Host: "vm", PCI: "0000:00:06", Name: "NVIDIA H200"}
	}
	want := &Output{
		File:    filepath.Join("testdata", "audit-n2-all_reduce.txt"),
		Tool:    NCCLTests,
		Version: "2.19.6", NCCLHeaders: 22501, NCCLLibrary: 22501,
		NRanks:  2,
		Devices: []Device{dev(7, 0, 2651), dev(8, 1, 2652)},
		Params: Params{Line: 4, NThread: 1, NGpus: 1, MinBytes: 8, MaxBytes: 67108864, StepFactor: 8,
			WarmupIters: 3, Iters: 10, AggIters: 1, Validation: 1},
		Tests: []Test{{Line: 3, Name: "all_reduce_perf", Collective: "allreduce"}},
		Rows: []Row{
			row(13, 8, 2, res(53.55, 0, 0, 0), res(53.88, 0, 0, 0)),
			row(14, 64, 16, res(48.80, 0, 0, 0), res(58.15, 0, 0, 0)),
			row(15, 512, 128, res(39.19, 0.01, 0.01, 0), res(55.54, 0.01, 0.01, 0)),
			row(16, 4096, 1024, res(77.56, 0.05, 0.05, 0), res(76.26, 0.05, 0.05, 0)),
			row(17, 32768, 8192, res(59.45, 0.55, 0.55, 0), res(83.22, 0.39, 0.39, 0)),
			row(18, 262144, 65536, res(89.19, 2.94, 2.94, 0), res(84.96, 3.09, 3.09, 0)),
			row(19, 2097152, 524288, res(181.76, 11.54, 11.54, 0), res(174.33, 12.03, 12.03, 0)),
			row(20, 16777216, 4194304, res(1255.89, 13.36, 13.36, 0), res(1241.65, 13.51, 13.51, 0)),
		},
		Footer: Footer{Line: 22, Wrong: i64(0), AvgBusBW: f64(3.59628)},
		Noise:  []Line{{Line: 1, Text: "2651 THESEUS INFO audit: libnccl.so.2 -> /work/main/.device/prefix/lib/libtheseus_nccl.so"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
}

// TestAllToAllN4: 4 ranks, redop none, in-place #wrong N/A (nccl-tests
// does not check in-place alltoall), a size-0 row.
func TestAllToAllN4(t *testing.T) {
	got := parseTestdata(t, "audit-n4-alltoall.txt")
	if got.NRanks != 4 || len(got.Devices) != 4 || got.Devices[3].Pid != 3229 {
		t.Errorf("NRanks %d, devices %+v; want 4 ranks, the last pid 3229", got.NRanks, got.Devices)
	}
	want := []Row{
		{Line: 15, Collective: "alltoall", Bytes: 0, Count: 0, Type: "float", RedOp: "none", Root: -1,
			OutOfPlace: res(25.00, 0, 0, 0), InPlace: Result{TimeUS: 29.11}},
		{Line: 22, Collective: "alltoall", Bytes: 16777216, Count: 1048576, Type: "float", RedOp: "none", Root: -1,
			OutOfPlace: res(359.11, 46.72, 35.04, 0), InPlace: Result{TimeUS: 355.41, AlgBW: 47.21, BusBW: 35.40}},
	}
	if len(got.Rows) != 8 {
		t.Fatalf("%d rows, want 8", len(got.Rows))
	}
	if d := cmp.Diff(want, []Row{got.Rows[0], got.Rows[7]}); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
}

// TestBroadcastRoot: a rooted collective.
func TestBroadcastRoot(t *testing.T) {
	got := parseTestdata(t, "ldpath-n4-broadcast.txt")
	if len(got.Rows) != 8 {
		t.Fatalf("%d rows, want 8", len(got.Rows))
	}
	for _, r := range got.Rows {
		if r.Root != 0 || r.RedOp != "none" || r.Collective != "broadcast" {
			t.Errorf("line %d: root %d redop %s collective %s; want 0, none, broadcast", r.Line, r.Root, r.RedOp, r.Collective)
		}
	}
	if len(got.Noise) != 0 {
		t.Errorf("noise %v, want none", got.Noise)
	}
}

// TestTheseusBench reads a real theseus-bench output (2 processes under
// MPS, every collective, a hot-swap demonstration between the table and
// the footer).
func TestTheseusBench(t *testing.T) {
	got := parseTestdata(t, "theseus-bench-mps-n2.txt")
	head := *got
	head.Rows, head.Tests = nil, nil
	want := Output{
		File: filepath.Join("testdata", "theseus-bench-mps-n2.txt"), Tool: TheseusBench, Backend: "cuda", NRanks: 2,
		Params: Params{Line: 3, MinBytes: 8, MaxBytes: 67108864, StepFactor: 2, WarmupIters: 5, Iters: 20, Validation: 1},
		Footer: Footer{Line: 217, Wrong: i64(0), AvgBusBW: f64(2.441)},
	}
	if d := cmp.Diff(want, head); d != "" {
		t.Errorf("header: -want +got:\n%s", d)
	}
	var names []string
	for _, x := range got.Tests {
		names = append(names, x.Name)
	}
	wantNames := []string{"allreduce", "reducescatter", "reduce", "allgather", "alltoall", "broadcast", "gather", "scatter"}
	if d := cmp.Diff(wantNames, names); d != "" {
		t.Errorf("tests: -want +got:\n%s", d)
	}
	per := map[string]int{}
	for _, r := range got.Rows {
		per[r.Collective]++
	}
	// 8 B..64 MiB is 24 sizes; reducescatter, allgather, alltoall,
	// gather and scatter print their sizes below 2 elements per rank
	// as rows of a smaller or zero size.
	for _, c := range wantNames {
		if per[c] != 24 {
			t.Errorf("%s: %d rows, want 24", c, per[c])
		}
	}
	wantRow := Row{Line: 9, Collective: "allreduce", Bytes: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
		OutOfPlace: res(29.68, 0, 0, 0), InPlace: res(30.47, 0, 0, 0), Schedule: "allreduce_n2_oneshot_ll"}
	if d := cmp.Diff(wantRow, got.Rows[0]); d != "" {
		t.Errorf("first row: -want +got:\n%s", d)
	}
}

// TestFailedRun: an output with no table (the launcher failed) is all
// noise, and no error.
func TestFailedRun(t *testing.T) {
	got := parseTestdata(t, "failed-mpi.txt")
	if len(got.Rows) != 0 || len(got.Noise) != 15 || got.Tool != ToolUnknown {
		t.Errorf("rows %d, noise %d, tool %v; want 0, 15, unknown", len(got.Rows), len(got.Noise), got.Tool)
	}
}

const hdr = "# nccl-tests version 2.19.6 nccl-headers=22501 nccl-library=22501\n# Collective test starting: all_reduce_perf\n"
const cols = "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"

// TestVariants: the columns nccl-tests prints under other flags.
func TestVariants(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     Row
	}{
		{"unchecked -c 0",
			hdr + cols + "        1024           256     float     sum      -1    10.00    0.10    0.15     N/A    11.00    0.09    0.14     N/A\n",
			Row{Line: 4, Collective: "allreduce", Bytes: 1024, Count: 256, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: Result{TimeUS: 10, AlgBW: 0.1, BusBW: 0.15}, InPlace: Result{TimeUS: 11, AlgBW: 0.09, BusBW: 0.14}}},
		{"%g #wrong and exponent columns",
			hdr + cols + "  1073741824     268435456     float     sum      -1  1.2e+07    0.09    0.13   1e+06  1.1e+07    0.10    0.15       3\n",
			Row{Line: 4, Collective: "allreduce", Bytes: 1 << 30, Count: 1 << 28, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: res(1.2e7, 0.09, 0.13, 1000000), InPlace: res(1.1e7, 0.10, 0.15, 3)}},
		{"timestamps -T",
			hdr + "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong  timestamp\n" +
				"           8             2     float     sum      -1    10.00    0.00    0.00       0    11.00    0.00    0.00       0  2026-11-29 12:00:01\n",
			Row{Line: 4, Collective: "allreduce", Bytes: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: res(10, 0, 0, 0), InPlace: res(11, 0, 0, 0), Timestamp: "2026-11-29 12:00:01"}},
		{"per-iteration -I 1",
			hdr + "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%\n" +
				"           8             2     float     sum      -1    10.00    0.00    0.00       0     9.00    12.00    12.00     5.00    11.00    0.00    0.00       0    10.00    13.00    13.00     4.00\n",
			Row{Line: 4, Collective: "allreduce", Bytes: 8, Count: 2, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: Result{TimeUS: 10, Wrong: i64(0), Iter: &IterStats{MinUS: 9, MaxUS: 12, P99US: 12, CVPct: 5}},
				InPlace:    Result{TimeUS: 11, Wrong: i64(0), Iter: &IterStats{MinUS: 10, MaxUS: 13, P99US: 13, CVPct: 4}}}},
		{"no header: the file name names the collective",
			"\r\n        4096          1024     float     sum      -1    10.00    0.41    0.61       0    11.00    0.37    0.56       0\r\n",
			Row{Line: 2, Collective: "allreduce", Bytes: 4096, Count: 1024, Type: "float", RedOp: "sum", Root: -1,
				OutOfPlace: res(10, 0.41, 0.61, 0), InPlace: res(11, 0.37, 0.56, 0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Parse("x/nccl-g0-all_reduce.txt", []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Rows) != 1 {
				t.Fatalf("%d rows, want 1", len(out.Rows))
			}
			if d := cmp.Diff(tc.want, out.Rows[0]); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
		})
	}
}

// TestNaN: C's "nan", "-nan" and "inf" are numbers.
func TestNaN(t *testing.T) {
	out, err := Parse("f", []byte(hdr+"           0             0     float     sum      -1     0.00    -nan     inf       0     0.00     nan    -inf       0\n"))
	if err != nil {
		t.Fatal(err)
	}
	r := out.Rows[0]
	if !math.IsNaN(r.OutOfPlace.AlgBW) || !math.IsInf(r.OutOfPlace.BusBW, 1) || !math.IsNaN(r.InPlace.AlgBW) || !math.IsInf(r.InPlace.BusBW, -1) {
		t.Errorf("got %+v", r)
	}
}

// TestErrors: every error names file:line:col and says what is wrong.
func TestErrors(t *testing.T) {
	row := "           8             2     float     sum      -1    10.00    0.00    0.00       0    11.00    0.00    0.00       0\n"
	for _, tc := range []struct {
		name, in string
		want     []string // Error() of each error
	}{
		{"cut short", hdr + "           8             2     float     sum      -1\n",
			[]string{"f.txt:3:53: row ends after 5 of 13 columns (size count type redop root, then time algbw busbw #wrong out of place and in place) (hint: " + rowHint + ")"}},
		{"glued log output", hdr + "           8             2     float     sum      -1host:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC x\n",
			[]string{`f.txt:3:51: root "-1host:1:2" is not a rank or -1 (hint: ` + rowHint + ")"}},
		{"bad time", hdr + strings.Replace(row, "10.00", "1O.00", 1),
			[]string{`f.txt:3:57: time "1O.00" is not a number (hint: ` + rowHint + ")"}},
		{"bad #wrong", hdr + strings.Replace(row, "0.00       0    11", "0.00     1.5    11", 1),
			[]string{`f.txt:3:83: #wrong "1.5" is not a count or N/A (hint: ` + rowHint + ")"}},
		{"size overflow", hdr + "99999999999999999999             2     float     sum      -1    10.00    0.00    0.00       0    11.00    0.00    0.00       0\n",
			[]string{`f.txt:3:1: size "99999999999999999999" is not a count that fits 63 bits (hint: ` + rowHint + ")"}},
		{"unexpected trailer", hdr + strings.TrimSuffix(row, "\n") + "  what\n",
			[]string{`f.txt:3:121: unexpected text "what" after the in-place #wrong column (hint: ` + rowHint + ")"}},
		{"no collective", row,
			[]string{"f.txt:1:1: rows of no known collective: no '# Collective test starting:' line or '# <collective>' heading before them, and the file name names none (hint: nccl-tests prints it in its header; or name the file after the test (all_reduce.txt))"}},
		{"bad footer", hdr + row + "# Avg bus bandwidth    : fast\n",
			[]string{`f.txt:4:26: Avg bus bandwidth: "fast" is not a number`}},
		{"short column header", hdr + "#       size         count      type   redop    root     time\n",
			[]string{"f.txt:3:62: column header has 6 labels, want at least 13 (size count type redop root, then time algbw busbw #wrong out of place and in place)"}},
		{"two world sizes", hdr + "# Using devices\n#  Rank  0 Group  0 Pid 1 on vm device  0 [0000:00:06] GPU\n" + row +
			"# Using devices\n#  Rank  0 Group  0 Pid 1 on vm device  0 [0000:00:06] GPU\n#  Rank  1 Group  0 Pid 2 on vm device  1 [0000:00:07] GPU\n" + row,
			[]string{"f.txt:6:1: this run has 2 ranks, an earlier run in the file had 1 (hint: split the file: one world size per output)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.txt", []byte(tc.in))
			got := errorStrings(t, err)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
		})
	}
}

// TestTooManyErrors: the parse stops after MaxErrors errors.
func TestTooManyErrors(t *testing.T) {
	in := hdr + strings.Repeat("           8             2     float\n", 50)
	out, err := Parse("f", []byte(in))
	var l ErrorList
	if !errors.As(err, &l) || len(l) != MaxErrors+1 || l[MaxErrors].Msg != "too many errors; stopped here" || l[MaxErrors].Line != 3+MaxErrors {
		t.Fatalf("got %v", err)
	}
	if out == nil || len(out.Rows) != 0 {
		t.Errorf("output %+v", out)
	}
}

// TestParseFileErrors: unreadable inputs.
func TestParseFileErrors(t *testing.T) {
	if _, err := ParseFile(filepath.Join("testdata", "no-such-file.txt")); err == nil || !strings.Contains(err.Error(), "no-such-file.txt") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := ParseFile("testdata"); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
}

func TestCanonical(t *testing.T) {
	got := map[string]string{}
	for _, s := range []string{"all_reduce_perf", "AllReduce", "reduce_scatter_perf", "./build/alltoall_perf", "sendrecv_perf_mpi", "broadcast"} {
		got[s] = Canonical(s)
	}
	want := map[string]string{"all_reduce_perf": "allreduce", "AllReduce": "allreduce", "reduce_scatter_perf": "reducescatter",
		"./build/alltoall_perf": "alltoall", "sendrecv_perf_mpi": "sendrecv", "broadcast": "broadcast"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
	in := map[string]string{}
	for _, s := range []string{"nccl-g1-reduce_scatter.txt", "dir/ldpath-n2-all_gather.txt", "theseus-g0-bench.txt", "gather.txt"} {
		in[s] = CollectiveInName(s)
	}
	wantIn := map[string]string{"nccl-g1-reduce_scatter.txt": "reducescatter", "dir/ldpath-n2-all_gather.txt": "allgather",
		"theseus-g0-bench.txt": "", "gather.txt": "gather"}
	if d := cmp.Diff(wantIn, in, cmpopts.EquateEmpty()); d != "" {
		t.Errorf("-want +got:\n%s", d)
	}
}

// BenchmarkParse parses a whole theseus-bench output (192 rows, 28 KB).
func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("testdata", "theseus-bench-mps-n2.txt"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse("bench.txt", data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestIndentedComments: comment lines indented by a launcher's prefix
// stripping still count; positions stay those of the line.
func TestIndentedComments(t *testing.T) {
	out, err := Parse("f", []byte("  # Collective test starting: broadcast_perf\n"+
		"           8             2     float    none       0    10.00    0.00    0.00       0    11.00    0.00    0.00       0\n"+
		"  # Avg bus bandwidth    : x\n"))
	if len(out.Rows) != 1 || out.Rows[0].Collective != "broadcast" {
		t.Errorf("rows %+v", out.Rows)
	}
	var l ErrorList
	if !errors.As(err, &l) || len(l) != 1 || l[0].Line != 3 || l[0].Col != 28 {
		t.Errorf("error %v, want one at 3:28", err)
	}
}

// errorStrings returns the messages of err, which must be an ErrorList.
func errorStrings(t *testing.T, err error) []string {
	t.Helper()
	var l ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("error %v, want an ErrorList", err)
	}
	var got []string
	for _, e := range l {
		got = append(got, e.Error())
	}
	return got
}
