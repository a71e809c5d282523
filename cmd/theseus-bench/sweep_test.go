package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
)

// sweepJSON runs a sweep in process and decodes its JSON report.
func sweepJSON(t *testing.T, args ...string) *SweepReport {
	t.Helper()
	code, out, errs := runBench(t, append([]string{"sweep", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("sweep %v: exit %d\n%s\n%s", args, code, out, errs)
	}
	var rep SweepReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("sweep %v: %v\n%s", args, err, out)
	}
	return &rep
}

// The sweep of the embedded default context on the host backend (the CI
// check of the GPU's crossover measurement): for 2-rank allreduce, every
// candidate of the context (an LL and a Simple one at least) timed at
// every size, beside the selected schedule, each checked (#wrong 0), with
// the fastest, the ratio, the crossovers and the findings worked out.
func TestSweepDefaultContext(t *testing.T) {
	rep := sweepJSON(t, "--nranks", "2", "-b", "8", "-e", "64K", "-f", "32", "-n", "2", "-w", "1")
	if rep.Wrong != 0 || len(rep.Tables) != 1 {
		t.Fatalf("wrong %d, %d tables", rep.Wrong, len(rep.Tables))
	}
	tab := rep.Tables[0]
	// The default context's fail-slow variants (no rank is slow) and its
	// multi-node entries (one node) serve no size here.
	t.Logf("unusable: %v", tab.Unusable)
	if tab.Collective != "allreduce" || tab.Type != "float" || tab.RedOp != "sum" {
		t.Errorf("table %s %s %s", tab.Collective, tab.Type, tab.RedOp)
	}
	protos := map[string]bool{}
	for _, c := range tab.Candidates {
		protos[c.Protocol] = true
	}
	if !protos["ll"] || !protos["simple"] {
		t.Errorf("candidates %+v: want an LL and a Simple one", tab.Candidates)
	}
	if len(tab.Rows) != 3 { // 8 B, 256 B, 8 KiB
		t.Errorf("%d rows, want 3", len(tab.Rows))
	}
	for _, r := range tab.Rows {
		if r.TimeUS <= 0 || r.Selected == "" || r.Selected == "-" {
			t.Errorf("%d B: selected %q at %g µs", r.Bytes, r.Selected, r.TimeUS)
		}
		if len(r.Times) != len(tab.Candidates) {
			t.Fatalf("%d B: %d candidate times for %d candidates", r.Bytes, len(r.Times), len(tab.Candidates))
		}
		for j, x := range r.Times {
			if x == nil || *x <= 0 {
				t.Errorf("%d B: candidate %s has no time", r.Bytes, tab.Candidates[j].Name)
			}
		}
		if r.Best < 0 || r.Ratio <= 0 {
			t.Errorf("%d B: fastest %d, ratio %g", r.Bytes, r.Best, r.Ratio)
		}
	}
	if len(tab.Ranges) == 0 || tab.Ranges[0].From != 8 || tab.Ranges[len(tab.Ranges)-1].To != tab.Rows[len(tab.Rows)-1].Bytes {
		t.Errorf("crossovers %+v do not span the sizes", tab.Ranges)
	}
	if tab.Findings == nil {
		t.Error("findings: nil, want a list")
	}
	// The text report has the table's header and a row per size.
	code, out, _ := runBench(t, "sweep", "--nranks", "2", "-b", "8", "-e", "64", "-n", "1", "-w", "0")
	if code != 0 || !strings.Contains(out, "| bytes | selected | µs |") || !strings.Contains(out, "| 8 | ") || !strings.Contains(out, "Fastest by size:") {
		t.Errorf("text report (exit %d):\n%s", code, out)
	}
	code, out, _ = runBench(t, "sweep", "--nranks", "2", "-b", "8", "-e", "64", "-n", "1", "-w", "0", "--format", "csv")
	if code != 0 || !strings.HasPrefix(out, "collective,type,redop,bytes,count,schedule,time_us,fastest\n") || !strings.Contains(out, "selected:") {
		t.Errorf("csv report (exit %d):\n%s", code, out)
	}
}

// A candidate whose usable expression is false at every size is listed
// as unusable, not tabled; --candidates keeps the entries it matches; a context where
// the selector picks the slower schedule at small sizes is found out.
func TestSweepForcedContexts(t *testing.T) {
	dir := t.TempDir()
	scheds := []commtest.Sched{
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.Simple, Preference: "20", Replaces: -1},
		{Algo: "oneshot", Coll: ir.AllReduce, Protocol: ir.LL, Preference: "10", Replaces: -1},
		{Algo: "ring", Coll: ir.AllReduce, Protocol: ir.LL, Usable: "false", Replaces: -1},
	}
	if err := commtest.Write(dir, 2, commtest.DefaultAttrs, scheds); err != nil {
		t.Fatal(err)
	}
	rep := sweepJSON(t, "--nranks", "2", "--context", dir, "-b", "8", "-e", "8", "-n", "1", "-w", "0")
	tab := rep.Tables[0]
	if len(tab.Candidates) != 2 || len(tab.Unusable) != 1 || !strings.HasPrefix(tab.Unusable[0], "ring_allreduce_n2_k1_ll") {
		t.Fatalf("candidates %+v, unusable %v; want 2 and the usable-false one", tab.Candidates, tab.Unusable)
	}
	r := tab.Rows[0]
	if len(r.Times) != 2 || r.Times[0] == nil || r.Times[1] == nil {
		t.Errorf("usable candidates without a time: %v", r.Times)
	}
	rep = sweepJSON(t, "--nranks", "2", "--context", dir, "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--candidates", "oneshot")
	if n := len(rep.Tables[0].Candidates); n != 1 {
		t.Errorf("--candidates oneshot: %d candidates", n)
	}
	// The analysis, on measured rows: the selected ring at 8 B slower than
	// the one-shot, and slower than at 64 KiB (another schedule).
	st := &SweepTable{Candidates: []SweepCandidate{{Name: "ring"}, {Name: "oneshot"}}}
	f := func(x float64) *float64 { return &x }
	st.Rows = []SweepRow{
		{Bytes: 8, Selected: "ring", TimeUS: 30, Times: []*float64{f(30), f(10)}, Best: 1, Ratio: 3},
		{Bytes: 65536, Selected: "oneshot", TimeUS: 20, Times: []*float64{f(25), f(20)}, Best: 1, Ratio: 1},
		{Bytes: 1 << 20, Selected: "ring", TimeUS: 40, Times: []*float64{f(40), f(50)}, Best: 0, Ratio: 1},
	}
	st.Candidates[1].Protocol = "ll"
	st.analyse(0.1)
	if len(st.Findings) != 2 {
		t.Errorf("findings %q, want 2", st.Findings)
	}
	if len(st.Ranges) != 2 || st.Ranges[0].To != 65536 || st.LLMaxBytes == nil || *st.LLMaxBytes != 65536 {
		t.Errorf("crossovers %+v, ll_max_bytes %v", st.Ranges, st.LLMaxBytes)
	}
	for _, bad := range [][]string{{"sweep", "--tolerance", "-1"}, {"sweep", "--candidates", "("}, {"sweep", "--format", "xml"}, {"sweep", "extra"}} {
		if code, _, _ := runBench(t, bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2", bad, code)
		}
	}
}

// The sweep as two processes (the GPU run's mode): each candidate's
// communicator is created from a unique id rank 0 shares over the main
// one.
func TestSweepMultiProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	flags := []string{"sweep", "-b", "8", "-e", "1K", "-f", "32", "-n", "2", "-w", "1", "--id-file", filepath.Join(t.TempDir(), "id"), "--json"}
	args, _ := json.Marshal(flags)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outs := make([]bytes.Buffer, 2)
	cmds := make([]*exec.Cmd, 2)
	for r := range 2 {
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1", childArgs+"="+string(args), fmt.Sprintf("RANK=%d", r), "WORLD_SIZE=2")
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	for r, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("rank %d: %v\n%s", r, err, outs[r].String())
		}
	}
	var rep SweepReport
	if err := json.Unmarshal(outs[0].Bytes(), &rep); err != nil {
		t.Fatalf("rank 0: %v\n%s", err, outs[0].String())
	}
	if rep.Header.Mode != "multi-process" || rep.Wrong != 0 || len(rep.Tables) != 1 || len(rep.Tables[0].Candidates) < 2 {
		t.Errorf("report %+v", rep)
	}
	for _, r := range rep.Tables[0].Rows {
		for j, x := range r.Times {
			if x == nil {
				t.Errorf("%d B: no time for %s", r.Bytes, rep.Tables[0].Candidates[j].Name)
			}
		}
	}
}
