package capitest

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

var lostLine = regexp.MustCompile(`(?m)^LOSTPEER rank (\d+) mode (\w+): first error (\d+) .* after ([0-9.]+) ms; async (\d+); watchdog abort (\d+); main (\d+)$`)

// TestLostPeer: a rank is killed in the middle of a collective (SIGKILL,
// testdata/ctest/lostpeer.c); the survivors' watchdog thread sees the
// asynchronous error and calls ncclCommAbort while the main thread is
// blocked in a wait ("sync"), keeps making collectives ("call", then
// aborts too) or destroys the communicator at the same moment
// ("destroy"), as PyTorch's ProcessGroupNCCL watchdog does. Every survivor
// must exit cleanly, with its first error within THESEUS_TIMEOUT; the
// killed rank dies of SIGKILL. Each mode runs three times, twice with 2
// ranks (as in the PyTorch run that crashed) and once with 4: the abort
// races the call in flight differently each time.
func TestLostPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs C programs of 3 processes")
	}
	b := setup(t)
	prog := filepath.Join(b.dir, "lostpeer")
	if err := run(b.dir, cc(), "-O2", "-Wall", "-Werror", "-pthread", "-I"+filepath.Join(b.root, "ncclabi", "include"), "-o", prog,
		filepath.Join(b.root, "ncclabi/testdata/ctest/lostpeer.c"), "-L"+b.dir, "-ltheseus_nccl", "-Wl,-rpath,"+b.dir, "-ldl"); err != nil {
		t.Fatal(err)
	}
	const timeout = 20 * time.Second
	type run struct {
		mode string
		n    int
	}
	var runs []run
	for _, mode := range []string{"sync", "call", "destroy"} {
		runs = append(runs, run{mode, 2}, run{mode, 2}, run{mode, 4})
	}
	for i, rn := range runs {
		mode, n := rn.mode, rn.n
		{
			t.Run(fmt.Sprintf("%s/n%d/%d", mode, n, i%3), func(t *testing.T) {
				env := b.hostEnv(fmt.Sprintf("THESEUS_TIMEOUT=%d", timeout.Milliseconds()))
				res := runProgram(t, prog, []string{mode}, b.dir, n, env, 2*timeout)
				for _, r := range res {
					if r.rank == n-1 {
						var ee *exec.ExitError
						if !errors.As(r.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
							t.Errorf("rank %d (the victim): %v, want killed by SIGKILL\n%s", r.rank, r.err, tail(r.out, 20))
						}
						continue
					}
					m := lostLine.FindStringSubmatch(r.out)
					if r.err != nil || m == nil || !strings.Contains(r.out, fmt.Sprintf("DONE rank %d", r.rank)) {
						t.Errorf("rank %d: %v\n%s", r.rank, r.err, tail(r.out, 30))
						continue
					}
					t.Logf("rank %d: %s", r.rank, m[0])
				}
			})
		}
	}
}

// TestSignalStacks: a handler the host process installed before the first
// communicator runs, on every thread that called into the library, on an
// alternate stack of at least 256 KiB with a guard page below it
// (testdata/ctest/sigstack.c; abi.c, "signal stacks"), not on the Go
// runtime's 32 KiB signal stack, into whose neighbours a stack-hungry
// handler (a stack-trace printer on SIGABRT, as PyTorch's watchdog thread
// raises after a lost peer) would write.
func TestSignalStacks(t *testing.T) {
	b := setup(t)
	prog := filepath.Join(b.dir, "sigstack")
	if err := run(b.dir, cc(), "-O1", "-Wall", "-Werror", "-pthread", "-I"+filepath.Join(b.root, "ncclabi", "include"), "-o", prog,
		filepath.Join(b.root, "ncclabi/testdata/ctest/sigstack.c"), "-L"+b.dir, "-ltheseus_nccl", "-Wl,-rpath,"+b.dir); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prog)
	cmd.Env = b.hostEnv()
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "DONE") {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, who := range []string{"main", "thread"} {
		if !strings.Contains(string(out), "SIGSTACK "+who+" onstack 1 size 262144") {
			t.Errorf("%s: no handler run on the library's signal stack:\n%s", who, out)
		}
	}
}
