package main

import (
	"encoding/json"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

var simFull = flag.Bool("sim.full", false, "simulate every example and corpus file over sim's whole default matrix (minutes)")

// simMatrix is a reduced case matrix that keeps the default test run short
// (every type family, reducing and not, odd and aligned counts); -sim.full
// runs sim's defaults instead.
func simMatrix() []string {
	if *simFull {
		return nil
	}
	return []string{"--dtype", "float16,int32,fp8e4m3", "--redop", "sum,max", "--count", "1,7,1000", "--root", "0"}
}

func TestSimExamples(t *testing.T) {
	for _, f := range glob(t, filepath.Join(examplesDir, "*.json")) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			args := append([]string{"sim", f}, simMatrix()...)
			if !strings.Contains(f, "broadcast") && !*simFull {
				args = args[:len(args)-2] // --root only for rooted collectives
			}
			r := theseusc(t, args...).want(t, cli.ExitOK)
			lines := strings.Split(strings.TrimSuffix(r.out, "\n"), "\n")
			if len(lines) < 2 {
				t.Fatalf("sim printed %d lines", len(lines))
			}
			for _, l := range lines {
				if !strings.Contains(l, "#wrong=0 ") {
					t.Errorf("case failed: %s", l)
				}
			}
			if want := "0 failed\n"; !strings.HasSuffix(r.err, want) {
				t.Errorf("summary: %q", r.err)
			}
		})
	}
}

func TestSimGolden(t *testing.T) {
	args := []string{"sim", "testdata/ring2.xml", "--dtype", "bfloat16,uint8", "--redop", "sum,avg", "--count", "0,5", "--slices", "2"}
	r := theseusc(t, args...).want(t, cli.ExitOK)
	golden(t, "sim_ring2.txt", stripTimes(r.out))
	j := theseusc(t, append(args, "--json")...).want(t, cli.ExitOK)
	golden(t, "sim_ring2.json", stripTimes(j.out))
	var rep struct {
		Cases          []map[string]any `json:"cases"`
		Passed, Failed int
	}
	if err := json.Unmarshal([]byte(j.out), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 16 || rep.Passed != 16 || rep.Failed != 0 {
		t.Errorf("sim --json: %d cases, %d passed, %d failed", len(rep.Cases), rep.Passed, rep.Failed)
	}
}

func TestSimFailures(t *testing.T) {
	// The verifier stops a wrong schedule; --no-verify runs it and counts
	// the wrong elements.
	f := filepath.Join(badDir, "wrong_result.json")
	r := theseusc(t, "sim", f).want(t, cli.ExitFindings)
	if !strings.Contains(r.err, "error[TS0207]") || !strings.Contains(r.err, "not simulated") || r.out != "" {
		t.Errorf("sim of a wrong schedule:\nstdout %s\nstderr %s", r.out, r.err)
	}
	r = theseusc(t, "sim", f, "--no-verify", "--dtype", "int32", "--redop", "sum", "--count", "64").want(t, cli.ExitFindings)
	if !strings.Contains(r.out, "#wrong=") || strings.Contains(r.out, "#wrong=0 ") || !strings.Contains(r.err, "failed") {
		t.Errorf("sim --no-verify of a wrong schedule:\nstdout %s\nstderr %s", r.out, r.err)
	}
	// A deadlocked schedule run anyway times out per case, bounded.
	d := theseusc(t, "sim", filepath.Join(badDir, "deadlock.json"), "--no-verify", "--dtype", "int8", "--redop", "sum",
		"--count", "16", "--slices", "1", "--launches", "1", "--timeout", "50ms").want(t, cli.ExitFindings)
	if !strings.Contains(d.out, "#wrong=error") {
		t.Errorf("deadlock run: %s", d.out)
	}
	for _, tc := range [][]string{
		{"sim", f, "--dtype", "float128"},
		{"sim", f, "--redop", "xor"},
		{"sim", f, "--packet", "LL128"},
		{"sim", f, "--slices", "0"},
		{"sim", f, "--launches", "0"},
		{"sim", f, "--timeout", "0s"},
		{"sim", "testdata/ring2.xml", "--root", "2"},
	} {
		theseusc(t, tc...).want(t, cli.ExitUsage)
	}
}

// TestCorpus lints every corpus file (errors must name a code and a
// position, never crash) and simulates every one that lints clean.
func TestCorpus(t *testing.T) {
	for _, f := range corpusFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := theseusc(t, "lint", "--json", f)
			if r.code != cli.ExitOK && r.code != cli.ExitFindings {
				t.Fatalf("lint exit %d: %s", r.code, r.err)
			}
			var rep cli.Report
			if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
				t.Fatal(err)
			}
			for _, d := range rep.Diagnostics {
				if _, ok := diag.Lookup(d.Code); !ok || d.File != f || d.Msg == "" {
					t.Errorf("bad diagnostic %+v", d)
				}
				if d.Severity == diag.Error && d.Line == 0 {
					t.Errorf("error without a position: %s", d)
				}
			}
			if r.code != cli.ExitOK {
				for _, d := range rep.Diagnostics {
					if d.Severity == diag.Error {
						t.Logf("lint: %d error(s), the first: %s", rep.Errors, d)
						break
					}
				}
				return
			}
			args := append([]string{"sim", f}, simMatrix()...)
			if !*simFull {
				args = args[:len(args)-2] // no --root: the corpus has no rooted collective
			}
			s := theseusc(t, args...)
			if s.code != cli.ExitOK {
				t.Errorf("sim exit %d\n%s\n%s", s.code, clip(s.out), clip(s.err))
			}
			// MSCCL++ plans are never replayed over slices.
			if strings.Contains(f, "mscclpp-json") && strings.Contains(s.out, "slices=3") {
				t.Errorf("an MSCCL++ plan was simulated over 3 slices:\n%s", clip(s.out))
			}
		})
	}
}

// TestSimMemoryLimit: a count whose buffers cannot fit is a usage error
// naming the limit, found before anything is allocated (it used to die with
// "fatal error: out of memory" and a goroutine dump under ulimit -v).
func TestSimMemoryLimit(t *testing.T) {
	ex := filepath.Join(examplesDir, "allreduce_pairs_2rank_simple.json")
	// 2 ranks x (1e12 in + 1e12 out + 1e12 input copy) + 1e12 expected
	// output: over any machine's limit (interp.MaxAllocBytes at most).
	r := theseusc(t, "sim", ex, "--count", "1000000000000", "--dtype", "int8", "--redop", "sum").want(t, cli.ExitUsage)
	if !strings.Contains(r.err, "a case of --count 1000000000000 int8 out-of-place needs 7000000000000 bytes of buffers over 2 ranks, more than the limit of ") {
		t.Errorf("stderr: %q", r.err)
	}
	r = theseusc(t, "sim", ex, "--count", "100000", "--dtype", "int8", "--redop", "sum", "--max-memory", "699999").want(t, cli.ExitUsage)
	if !strings.Contains(r.err, "needs 700000 bytes of buffers over 2 ranks, more than the limit of 699999 bytes, set by --max-memory") {
		t.Errorf("stderr: %q", r.err)
	}
	theseusc(t, "sim", ex, "--count", "100000", "--dtype", "int8", "--redop", "sum", "--max-memory", "700000").want(t, cli.ExitOK)
	theseusc(t, "sim", ex, "--max-memory", "-1").want(t, cli.ExitUsage)
	// Suffixes, as theseus-bench's sizes take them (t1 finding L5).
	r = theseusc(t, "sim", ex, "--count", "100000", "--dtype", "int8", "--redop", "sum", "--max-memory", "683K").want(t, cli.ExitUsage)
	if !strings.Contains(r.err, "more than the limit of 699392 bytes, set by --max-memory") {
		t.Errorf("--max-memory 683K: %s", r.err)
	}
	theseusc(t, "sim", ex, "--count", "100000", "--dtype", "int8", "--redop", "sum", "--max-memory", "1M").want(t, cli.ExitOK)
	// A count whose sizes overflow 64 bits is refused up front too.
	r = theseusc(t, "sim", ex, "--count", "9223372036854775807", "--dtype", "float64", "--redop", "sum").want(t, cli.ExitUsage)
	if !strings.Contains(r.err, "cannot be laid out") {
		t.Errorf("overflowing count: %s", r.err)
	}
	if limit, why := memoryLimit(); limit <= 0 || limit > interp.MaxAllocBytes || why == "" {
		t.Errorf("memoryLimit() = %d, %q", limit, why)
	}
}

// writeCounter counts writes and keeps the bytes.
type writeCounter struct {
	writes int
	b      strings.Builder
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.b.Write(p)
}

// TestSimStreams: sim prints each case's line as the case finishes (one
// write per case, not the whole table at the end: a matrix took 30-85 s of
// silence), and with --progress always draws a progress bar on standard
// error.
func TestSimStreams(t *testing.T) {
	out, errw := &writeCounter{}, &writeCounter{}
	code := run([]string{"sim", filepath.Join(examplesDir, "allreduce_pairs_2rank_ll.json"), "--dtype", "float32,int8",
		"--redop", "sum", "--count", "1,7", "--progress", "always"}, cli.Streams{In: strings.NewReader(""), Out: out, Err: errw})
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, errw.b.String())
	}
	lines := strings.Count(out.b.String(), "\n")
	if lines != 16 || out.writes != lines {
		t.Errorf("%d lines in %d writes, want 16 lines, one write each", lines, out.writes)
	}
	if !strings.Contains(errw.b.String(), "sim") || !strings.Contains(errw.b.String(), "/16") {
		t.Errorf("no progress bar on standard error: %q", errw.b.String())
	}
	if r := theseusc(t, "sim", filepath.Join(examplesDir, "allreduce_pairs_2rank_ll.json"), "--progress", "sometimes"); r.code != cli.ExitUsage {
		t.Errorf("--progress sometimes: exit %d", r.code)
	}
}

// TestJSONWithFormatText: --json with --format text is the usage error
// docs/theseusc.md says it is (it was accepted); --json --format json is
// fine.
func TestJSONWithFormatText(t *testing.T) {
	f := filepath.Join(examplesDir, "allreduce_ring_8rank_simple.json")
	if r := theseusc(t, "lint", "--json", "--format", "text", f); r.code != cli.ExitUsage || !strings.Contains(r.err, "--json conflicts with --format=text") {
		t.Errorf("exit %d: %s", r.code, r.err)
	}
	theseusc(t, "lint", "--json", "--format", "json", f).want(t, cli.ExitOK)
	theseusc(t, "lint", "--json", f).want(t, cli.ExitOK)
}
