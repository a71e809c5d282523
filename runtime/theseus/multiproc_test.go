//go:build linux

package theseus

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/runtime/comm/commtest"
)

// Multi-process tests: the test binary re-runs itself as the ranks
// (TestRankProcess), launched as torchrun would launch them: RANK,
// WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment, joined with
// LaunchInfoFromEnv and Join. Each rank process prints one line per event
// ("MP <event> rank=<r> key=value ...") that the parent reads.

const mpMode = "THESEUS_TEST_MP" // the rank process's job: matrix, fault

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

type rankProc struct {
	rank  int
	cmd   *exec.Cmd
	lines chan string // "MP ..." lines, closed at EOF
	out   strings.Builder
	mu    sync.Mutex
	done  chan error
}

func (p *rankProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startRanks starts n rank processes in mode with the extra environment.
func startRanks(t *testing.T, n int, mode string, extra ...string) []*rankProc {
	t.Helper()
	return startRanksEnv(t, n, mode, nil, extra...)
}

// startRanksEnv is startRanks with rank r's own environment perRank(r)
// (nil: none) after the extra environment.
func startRanksEnv(t *testing.T, n int, mode string, perRank func(r int) []string, extra ...string) []*rankProc {
	t.Helper()
	return startRanksWrapped(t, n, mode, func(r int) ([]string, []string) {
		if perRank == nil {
			return nil, nil
		}
		return nil, perRank(r)
	}, extra...)
}

// startRanksWrapped is startRanksEnv where spec(r) gives rank r's command
// prefix (for example ip netns exec NS) and its own environment.
func startRanksWrapped(t *testing.T, n int, mode string, spec func(r int) (wrap, env []string), extra ...string) []*rankProc {
	t.Helper()
	port := freePort(t)
	args := []string{"-test.run=^TestRankProcess$", "-test.v", "-test.timeout=10m"}
	if *fullMatrix {
		args = append(args, "-theseus.full")
	}
	procs := make([]*rankProc, n)
	for r := range n {
		wrap, own := spec(r)
		argv := append(append(append([]string(nil), wrap...), os.Args[0]), args...)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), mpMode+"="+mode, "RANK="+strconv.Itoa(r), "WORLD_SIZE="+strconv.Itoa(n),
			"MASTER_ADDR=127.0.0.1", "MASTER_PORT="+strconv.Itoa(port))
		cmd.Env = append(cmd.Env, extra...)
		cmd.Env = append(cmd.Env, own...)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		p := &rankProc{rank: r, cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
		cmd.Stderr = cmd.Stdout
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Buffer(make([]byte, 1<<20), 1<<20)
			for sc.Scan() {
				line := sc.Text()
				p.mu.Lock()
				p.out.WriteString(line + "\n")
				p.mu.Unlock()
				if strings.HasPrefix(line, "MP ") {
					p.lines <- line
				}
			}
			close(p.lines)
			p.done <- cmd.Wait()
		}()
		procs[r] = p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.cmd.Process.Kill()
		}
	})
	return procs
}

// result reads the rank's lines to their end and returns its last "MP
// result" line ("" if none) and how the process ended.
func (p *rankProc) result() (string, error) {
	var result string
	for line := range p.lines {
		if strings.HasPrefix(line, "MP result") {
			result = line
		}
	}
	return result, <-p.done
}

// fault returns the rank's last "MP fault" line ("" if none) once its
// output ends, failing the test when it has not ended within limit of
// since (the rank hangs).
func (p *rankProc) fault(t *testing.T, since time.Time, limit time.Duration) string {
	t.Helper()
	var fault string
	deadline := time.After(limit - time.Since(since))
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return fault
			}
			if strings.HasPrefix(line, "MP fault") {
				fault = line
			}
		case <-deadline:
			t.Fatalf("rank %d still running %v after the fault: it hangs\n%s", p.rank, time.Since(since), p.output())
		}
	}
}

// field returns key's value in an "MP ..." line.
func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestMatrixMultiProcess runs the collective matrix on 4 OS processes
// joined by the bootstrap (the representative subset; -theseus.full for
// every combination).
func TestMatrixMultiProcess(t *testing.T) {
	const n = 4
	dir := t.TempDir()
	if err := commtest.WriteStandard(dir, n); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	procs := startRanks(t, n, "matrix", "THESEUS_SELECTION_CONTEXT="+dir, "THESEUS_TIMEOUT=30000", "THESEUS_INITIAL_SCRATCH_SIZE=1MB")
	var checked, wrong int64
	for _, p := range procs {
		result, err := p.result()
		if err != nil || result == "" {
			t.Errorf("rank %d process: %v\n%s", p.rank, err, p.output())
			continue
		}
		c, _ := strconv.ParseInt(field(result, "checked"), 10, 64)
		w, _ := strconv.ParseInt(field(result, "wrong"), 10, 64)
		checked += c
		wrong += w
		if e := field(result, "err"); e != "" {
			t.Errorf("rank %d: %s", p.rank, strings.SplitN(result, "err=", 2)[1])
		}
	}
	t.Logf("%d cases on %d processes in %v: %d elements checked, #wrong = %d",
		len(matrixCases(n, *fullMatrix)), n, time.Since(start).Round(time.Millisecond), checked, wrong)
	if wrong != 0 {
		t.Fatalf("#wrong = %d", wrong)
	}
}

// TestP2PMultiProcess runs every point-to-point pattern and AlltoAllv
// matrix (runP2PSuite) on 2, 4 and 8 OS processes: connection blocks and
// offered buffers are shared-memory segments mapped across processes.
func TestP2PMultiProcess(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dir := t.TempDir()
			if err := commtest.WriteStandard(dir, n); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			procs := startRanks(t, n, "p2p", "THESEUS_SELECTION_CONTEXT="+dir, "THESEUS_TIMEOUT=30000", "THESEUS_INITIAL_SCRATCH_SIZE=1MB")
			for _, p := range procs {
				result, err := p.result()
				if err != nil || result == "" {
					t.Errorf("rank %d process: %v\n%s", p.rank, err, p.output())
					continue
				}
				if e := field(result, "err"); e != "" {
					t.Errorf("rank %d: %s", p.rank, strings.SplitN(result, "err=", 2)[1])
				}
				if field(result, "imports") == "0" && n > 1 {
					t.Errorf("rank %d imported no peer buffer (no zero-copy): %s", p.rank, result)
				}
			}
			t.Logf("%d processes: %v", n, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestFaultKilledRank kills one rank process while the ranks run
// collectives back to back. The others must return an error naming the
// lost rank within THESEUS_TIMEOUT, and never hang.
func TestFaultKilledRank(t *testing.T) {
	const n, victim = 4, 2
	const timeout = 5 * time.Second
	dir := t.TempDir()
	if err := commtest.WriteStandard(dir, n); err != nil {
		t.Fatal(err)
	}
	procs := startRanks(t, n, "fault", "THESEUS_SELECTION_CONTEXT="+dir,
		"THESEUS_TIMEOUT="+strconv.Itoa(int(timeout/time.Millisecond)))
	// Wait until every rank has completed a few collectives.
	for _, p := range procs {
		select {
		case line, ok := <-p.lines:
			if !ok || !strings.HasPrefix(line, "MP ready") {
				t.Fatalf("rank %d: %q\n%s", p.rank, line, p.output())
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("rank %d never got ready\n%s", p.rank, p.output())
		}
	}
	killed := time.Now()
	if err := procs[victim].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if p.rank == victim {
			continue
		}
		fault := p.fault(t, killed, timeout+10*time.Second)
		elapsed := time.Since(killed)
		if err := <-p.done; err != nil {
			t.Errorf("rank %d process: %v\n%s", p.rank, err, p.output())
		}
		t.Logf("rank %d: %s (%v after the kill)", p.rank, fault, elapsed.Round(time.Millisecond))
		if fault == "" {
			t.Errorf("rank %d reported no error\n%s", p.rank, p.output())
			continue
		}
		// Ranks that abort after the fault are lost too; the first named
		// is the rank that failed first.
		if field(fault, "code") != "ncclRemoteError" || strings.Split(field(fault, "peers"), ",")[0] != strconv.Itoa(victim) {
			t.Errorf("rank %d: error %q does not name rank %d first as lost with ncclRemoteError", p.rank, fault, victim)
		}
		if elapsed > timeout+5*time.Second {
			t.Errorf("rank %d took %v, more than THESEUS_TIMEOUT (%v)", p.rank, elapsed, timeout)
		}
	}
}

// TestRankProcess is one rank of a multi-process test (skipped unless run
// by one).
func TestRankProcess(t *testing.T) {
	mode := os.Getenv(mpMode)
	if mode == "" {
		t.Skip("run by the multi-process tests")
	}
	li, err := LaunchInfoFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Join(context.Background(), li, Config{Backend: "host"})
	if err != nil {
		fmt.Printf("MP result rank=%d err=%v\n", li.Rank, err)
		t.Fatal(err)
	}
	switch mode {
	case "matrix":
		res := runCases(c, matrixCases(li.WorldSize, *fullMatrix))
		line := fmt.Sprintf("MP result rank=%d cases=%d checked=%d wrong=%d", li.Rank, res.Cases, res.Checked, res.Wrong)
		if res.Err != nil {
			line += " err=" + strings.ReplaceAll(res.Err.Error(), "\n", " ")
		}
		fmt.Println(line)
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	case "fault":
		runFaultRank(t, c)
	case "nodes":
		runNodesRank(t, c, li.Rank, li.WorldSize)
	case "lanes":
		runLanesRank(c, li.Rank, li.WorldSize)
	case "p2p":
		line := fmt.Sprintf("MP result rank=%d", li.Rank)
		if err := runP2PSuite(c); err != nil {
			line += " err=" + strings.ReplaceAll(err.Error(), "\n", " ")
		}
		st := c.Stats().Executor.P2P
		fmt.Printf("%s launches=%d connects=%d imports=%d\n", line, st.Launches, st.Connects, st.Imports)
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	default:
		t.Fatalf("unknown mode %q", mode)
	}
}

// runFaultRank runs allreduces until one fails, then reports the error.
func runFaultRank(t *testing.T, c *Comm) {
	const count = 1 << 16 // ring allreduce: 256 KiB + 1 element per block
	send, err := c.MemAlloc(4 * (count + 1))
	if err != nil {
		t.Fatal(err)
	}
	recv, err := c.MemAlloc(4 * (count + 1))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 5 {
			fmt.Printf("MP ready rank=%d\n", c.Rank())
		}
		start := time.Now()
		var err error
		if os.Getenv("MP_FAULT_OP") == "sendrecv" {
			// Point-to-point with the rank of the same local rank on the
			// other node (2 nodes of MP_FAULT_PER ranks): port channels.
			per, _ := strconv.Atoi(os.Getenv("MP_FAULT_PER"))
			q := (c.Rank() + per) % c.NRanks()
			c.GroupStart()
			c.Send(send, count+1, Float32, q, nil)
			c.Recv(recv, count+1, Float32, q, nil)
			err = c.GroupEnd() // (nil streams: it waits)
		} else {
			err = c.AllReduce(send, recv, count+1, Float32, Sum, nil)
		}
		if err == nil {
			if i > 1_000_000 {
				t.Fatal("no fault")
			}
			continue
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v is not a *theseus.Error", err)
		}
		peers := strings.Trim(strings.ReplaceAll(fmt.Sprint(e.Peers), " ", ","), "[]")
		fmt.Printf("MP fault rank=%d code=%v peers=%s call=%v err=%s\n", c.Rank(), e.Code, peers, time.Since(start).Round(time.Millisecond),
			strings.ReplaceAll(err.Error(), "\n", " "))
		if a := c.AsyncError(); a == nil {
			t.Error("AsyncError is nil after the fault")
		}
		c.Abort()
		return
	}
}
