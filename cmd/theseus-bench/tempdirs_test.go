package main

import (
	"bufio"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/theseus-ccl/theseus/cmd/internal/cli"
)

// TestSignalRemovesTempDirs runs the benchmark in a child process (this
// test binary, re-executed), interrupts it once it has printed the
// selection context it materialised, and checks that the child removed
// that directory and exited with 130 (128 + SIGINT).
func TestSignalRemovesTempDirs(t *testing.T) {
	if os.Getenv("THESEUS_BENCH_SIGNAL_CHILD") == "1" {
		// Long enough to be interrupted mid-run: every collective to 64 MiB.
		os.Exit(int(run([]string{"--backend", "host", "--progress", "never", "-e", "64M", "-n", "50", "--hotswap=false"},
			cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})))
	}
	if testing.Short() {
		t.Skip("starts a child process that runs the benchmark")
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestSignalRemovesTempDirs$")
	cmd.Env = append(os.Environ(), "THESEUS_BENCH_SIGNAL_CHILD=1", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	var dir string
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "# selection context: "); ok {
			dir, _, _ = strings.Cut(rest, " (")
			break
		}
	}
	if dir == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the child printed no selection context")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the selection context %s is not there while the benchmark runs: %v", dir, err)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGINT) {
		t.Errorf("child ended with %v, want exit status %d", err, 128+int(syscall.SIGINT))
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the selection context %s is still there after SIGINT (stat: %v)", dir, err)
	}
	left, _ := filepath.Glob(filepath.Join(tmp, "theseus-*"))
	if len(left) != 0 {
		t.Errorf("left in TMPDIR after SIGINT: %v", left)
	}
}
