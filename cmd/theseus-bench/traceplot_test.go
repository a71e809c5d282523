package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/runtime/trace"
)

// --trace writes a trace of the run (the host backend, 2 ranks in process)
// that trace-plot draws; trace-plot's usage errors exit 2.
func TestTraceFlagAndPlot(t *testing.T) {
	dir := t.TempDir()
	tr := filepath.Join(dir, "t.json")
	code, out, errs := runBench(t, "--nranks", "2", "--coll", "allreduce", "-b", "1K", "-e", "1K", "-n", "3", "-w", "1",
		"--hotswap=false", "--trace", tr)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	f, err := trace.Read(tr)
	if err != nil {
		t.Fatal(err)
	}
	procs, _ := f.Names()
	calls := 0
	for _, e := range f.TraceEvents {
		if e.Cat == "call" && e.Name == "allreduce 1024 B" {
			calls++
		}
	}
	// Per rank: the check run, the warmup and 3 timed runs, out of place and in place.
	if len(procs) != 2 || calls < 2*2*5 {
		t.Errorf("%d processes, %d allreduce 1024 B calls; want 2, at least 20", len(procs), calls)
	}
	img := filepath.Join(dir, "t.png")
	code, out, errs = runBench(t, "trace-plot", tr, img, "--calls", "2", "--call", "allreduce 1024 B")
	if code != 0 {
		t.Fatalf("trace-plot: exit %d\n%s\n%s", code, out, errs)
	}
	fh, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	cfg, err := png.DecodeConfig(fh)
	if err != nil || cfg.Width < 500 || cfg.Height < 100 {
		t.Errorf("the PNG: %+v, %v", cfg, err)
	}
	// trace-merge: the file twice is two processes' worth.
	merged := filepath.Join(dir, "m.json")
	if code, out, errs := runBench(t, "trace-merge", merged, tr, tr); code != 0 {
		t.Fatalf("trace-merge: exit %d\n%s\n%s", code, out, errs)
	}
	m, err := trace.Read(merged)
	if err != nil {
		t.Fatal(err)
	}
	if mp, _ := m.Names(); len(mp) != 4 || len(m.TraceEvents) != 2*len(f.TraceEvents) {
		t.Errorf("merged: %d processes, %d events; want 4, %d", len(mp), len(m.TraceEvents), 2*len(f.TraceEvents))
	}
	if code, _, _ := runBench(t, "trace-merge", merged, img); code != 2 {
		t.Errorf("trace-merge of a PNG: exit %d, want 2", code)
	}
	for _, bad := range [][]string{
		{"trace-plot", tr, filepath.Join(dir, "t.jpg")},
		{"trace-plot", filepath.Join(dir, "missing.json"), img},
		{"trace-plot", tr, img, "--call", "gather"},
		{"trace-plot", tr, img, "--calls", "0"},
		{"trace-plot", tr},
	} {
		if code, _, errs := runBench(t, bad...); code != 2 || errs == "" {
			t.Errorf("%s: exit %d (%q), want 2 with a message", strings.Join(bad, " "), code, errs)
		}
	}
}
