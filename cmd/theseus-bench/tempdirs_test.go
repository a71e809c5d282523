package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
	"github.com/theseus-ccl/theseus/examples/contexts"
)

// TestSignalKeepsOutput runs the benchmark in a child process (this test
// binary, re-executed) and interrupts it mid-run: the child exits with 130
// (128 + SIGINT), leaves nothing in TMPDIR, and prints what it measured —
// in text, the footer with the reason; with --json, the report of the rows
// so far with an "error". (The JSON child's context has a bad manifest
// line, whose diagnostic on standard error shows that the run started.)
func TestSignalKeepsOutput(t *testing.T) {
	if os.Getenv("THESEUS_BENCH_SIGNAL_CHILD") == "1" {
		// Long enough to be interrupted mid-run: every collective to 64 MiB.
		args := []string{"--backend", "host", "--progress", "never", "-e", "64M", "-n", "50", "--hotswap=false"}
		if v := os.Getenv("THESEUS_BENCH_SIGNAL_ARGS"); v != "" {
			args = append(args, strings.Fields(v)...)
		}
		os.Exit(int(run(args, cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})))
	}
	if testing.Short() {
		t.Skip("starts child processes that run the benchmark")
	}
	bad := t.TempDir()
	if err := contexts.Materialize(bad); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(bad, "schedule_manifest.jsonl"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"gen":"ring","collective":"allreduce","preference":"1 +"}` + "\n")
	f.Close()
	data, _ := os.ReadFile(filepath.Join(bad, "schedule_manifest.jsonl"))
	badLine := fmt.Sprintf("schedule_manifest.jsonl:%d:", strings.Count(string(data), "\n"))
	for _, tc := range []struct {
		name, args string
		waitErr    bool // wait for a line on stderr instead of the context line on stdout
	}{
		{"text", "", false},
		{"json", "--json --context " + bad, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd := exec.Command(os.Args[0], "-test.run", "^TestSignalKeepsOutput$")
			cmd.Env = append(os.Environ(), "THESEUS_BENCH_SIGNAL_CHILD=1", "TMPDIR="+tmp, "XDG_CACHE_HOME="+filepath.Join(tmp, "cache"),
				"THESEUS_BENCH_SIGNAL_ARGS="+tc.args)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			wait := stdout
			// copied is closed when stdout has been read to its end: Wait
			// closes the pipe once the child exits, so reading must finish
			// first or the JSON is cut (it came back empty on CI).
			copied := make(chan struct{})
			if tc.waitErr {
				wait = stderr
				go func() { io.Copy(&out, stdout); close(copied) }()
			} else {
				go io.Copy(io.Discard, stderr)
			}
			sc := bufio.NewScanner(wait)
			started := false
			for sc.Scan() {
				line := sc.Text()
				if !tc.waitErr {
					out.WriteString(line + "\n")
				}
				if tc.waitErr && strings.Contains(line, badLine) ||
					!tc.waitErr && strings.HasPrefix(line, "# selection context: ") {
					started = true
					break
				}
			}
			if !started {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("the child did not start")
			}
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			if !tc.waitErr {
				rest, _ := io.ReadAll(stdout)
				out.Write(rest)
				close(copied)
			} else {
				io.Copy(io.Discard, wait)
			}
			<-copied
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
				t.Errorf("child ended with %v, want exit status %d", err, 128+int(syscall.SIGINT))
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "theseus-*"))
			if len(left) != 0 {
				t.Errorf("left in TMPDIR after SIGINT: %v", left)
			}
			if !tc.waitErr {
				if !strings.Contains(out.String(), "# Stopped              : interrupted (SIGINT) after ") {
					t.Errorf("no footer after SIGINT:\n%s", out.String())
				}
				// Nothing wrong in the rows that ran is no failure verdict
				// (it said "0 FAILED": t1 finding L9).
				if !strings.Contains(out.String(), "# Wrong elements       : 0 in the ") || strings.Contains(out.String(), "0 FAILED") {
					t.Errorf("footer after SIGINT:\n%s", out.String())
				}
				return
			}
			var rep Report
			if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
				t.Fatalf("the JSON output after SIGINT does not parse: %v\n%s", err, out.String())
			}
			if !strings.HasPrefix(rep.Error, "interrupted (SIGINT) after ") || rep.Header.Context != bad {
				t.Errorf("report error %q, context %q", rep.Error, rep.Header.Context)
			}
		})
	}
}
