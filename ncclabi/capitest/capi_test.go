package capitest

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var full = flag.Bool("ncclabi.full", false, "also build libnccl.a and link a C program statically, run make install, and run the C suite's full sweep (NCCL_TEST_FULL=1)")

// GoLDFlags are the link flags of libtheseus_nccl.so (ncclabi/Makefile,
// docs/ncclabi.md): SONAME libnccl.so.2, never unloaded.
const GoLDFlags = `-extldflags "-Wl,-soname,libnccl.so.2 -Wl,-z,nodelete"`

type built struct {
	root, dir         string
	lib, audit, fake  string
	test, p2p         string
	err               error
	buildTime, ccTime time.Duration
}

var (
	once sync.Once
	bld  built
)

func cc() string {
	for _, c := range []string{os.Getenv("CC"), "gcc", "cc"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	return ""
}

func run(dir string, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// setup builds the library, the LD_AUDIT shim, the fake NCCL and the C
// test program once per test binary.
func setup(t testing.TB) *built {
	t.Helper()
	if cc() == "" {
		t.Skip("no C compiler (gcc or cc): the C-level tests need one")
	}
	once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			bld.err = err
			return
		}
		dir, err := os.MkdirTemp("", "ncclabi-capi-")
		if err != nil {
			bld.err = err
			return
		}
		bld = built{root: root, dir: dir, lib: filepath.Join(dir, "libtheseus_nccl.so"),
			audit: filepath.Join(dir, "libtheseus_audit_nccl.so"), fake: filepath.Join(dir, "libfakenccl.so"),
			test: filepath.Join(dir, "nccl_test"), p2p: filepath.Join(dir, "p2p_test")}
		start := time.Now()
		gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if bld.err = run(root, gotool, "build", "-buildmode=c-shared", "-ldflags="+GoLDFlags, "-o", bld.lib, "./ncclabi"); bld.err != nil {
			return
		}
		bld.buildTime = time.Since(start)
		// As make install does: programs linked with -ltheseus_nccl record
		// its SONAME, libnccl.so.2.
		if bld.err = os.Symlink("libtheseus_nccl.so", filepath.Join(dir, "libnccl.so.2")); bld.err != nil {
			return
		}
		start = time.Now()
		inc := "-I" + filepath.Join(root, "ncclabi", "include")
		steps := [][]string{
			{cc(), "-O1", "-Wall", "-Werror", "-Wno-unused-parameter", inc, "-o", bld.test,
				filepath.Join(root, "ncclabi/testdata/ctest/nccl_test.c"), "-L" + dir, "-ltheseus_nccl", "-Wl,-rpath," + dir},
			{cc(), "-O1", "-Wall", "-Werror", "-Wno-unused-parameter", inc, "-o", bld.p2p,
				filepath.Join(root, "ncclabi/testdata/ctest/p2p_test.c"), "-L" + dir, "-ltheseus_nccl", "-Wl,-rpath," + dir},
			{cc(), "-O1", "-fPIC", "-shared", "-o", bld.fake, filepath.Join(root, "ncclabi/testdata/fakenccl/fakenccl.c")},
			{cc(), "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror", "-o", bld.audit, filepath.Join(root, "ncclabi/audit/audit.c")},
		}
		for _, s := range steps {
			if bld.err = run(dir, s[0], s[1:]...); bld.err != nil {
				return
			}
		}
		bld.ccTime = time.Since(start)
	})
	if bld.err != nil {
		t.Fatalf("build: %v", bld.err)
	}
	if _, bench := t.(*testing.B); !bench {
		t.Logf("go build -buildmode=c-shared: %v; C builds: %v", bld.buildTime.Round(time.Millisecond), bld.ccTime.Round(time.Millisecond))
	}
	return &bld
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if bld.dir != "" {
		os.RemoveAll(bld.dir)
	}
	os.Exit(code)
}

// baseEnv is the environment without Theseus or MSCCL++ variables, plus
// those given.
func baseEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "THESEUS_") || strings.HasPrefix(kv, "MSCCLPP_") || strings.HasPrefix(kv, "LD_AUDIT=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

func (b *built) hostEnv(extra ...string) []string {
	return baseEnv(append([]string{"THESEUS_BACKEND=host", "THESEUS_DEBUG=WARN", "THESEUS_TIMEOUT=30000",
		"THESEUS_SELECTION_CONTEXT=" + filepath.Join(b.root, "examples/contexts/default")}, extra...)...)
}

type rankOut struct {
	rank int
	out  string
	err  error
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runRanks runs nranks processes of `nccl_test mode`: rank 0 first, whose
// "ID <hex>" line is handed to the others. Everything is bounded by limit.
func (b *built) runRanks(t *testing.T, mode string, nranks int, env []string, limit time.Duration) []rankOut {
	t.Helper()
	return runProgram(t, b.test, []string{mode}, b.dir, nranks, env, limit)
}

// runProgram runs nranks processes of `prog args... RANK NRANKS [IDHEX]`
// in dir: rank 0 first, whose "ID <hex>" line is handed to the others.
// Everything is bounded by limit.
func runProgram(t testing.TB, prog string, pre []string, dir string, nranks int, env []string, limit time.Duration) []rankOut {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	outs := make([]*lockedBuffer, nranks)
	done := make([]chan error, nranks)
	start := func(r int, id string, stdout io.Writer) error {
		args := append(append([]string(nil), pre...), strconv.Itoa(r), strconv.Itoa(nranks))
		if id != "" {
			args = append(args, id)
		}
		cmd := exec.CommandContext(ctx, prog, args...)
		cmd.Env = env
		cmd.Dir = dir
		outs[r] = &lockedBuffer{}
		cmd.Stdout, cmd.Stderr = outs[r], outs[r]
		if stdout != nil {
			cmd.Stdout = io.MultiWriter(outs[r], stdout)
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		done[r] = make(chan error, 1)
		go func() { done[r] <- cmd.Wait() }()
		return nil
	}
	// Rank 0 prints its id on stdout; a scanner hands it over.
	pr, pw := io.Pipe()
	idc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "ID" {
				idc <- f[1]
				break
			}
		}
		io.Copy(io.Discard, pr)
	}()
	if err := start(0, "", pw); err != nil {
		t.Fatal(err)
	}
	res := make([]rankOut, nranks)
	select {
	case id := <-idc:
		for q := 1; q < nranks; q++ {
			if err := start(q, id, nil); err != nil {
				t.Fatal(err)
			}
		}
	case err := <-done[0]:
		pw.Close()
		t.Fatalf("rank 0 exited (%v) without printing its id:\n%s", err, outs[0])
	case <-ctx.Done():
		t.Fatalf("rank 0 printed no id within %v:\n%s", limit, outs[0])
	}
	for r := range res {
		res[r] = rankOut{rank: r, err: <-done[r]}
		res[r].out = outs[r].String()
	}
	pw.Close()
	if ctx.Err() != nil {
		t.Errorf("%s %v with %d ranks did not finish within %v", filepath.Base(prog), pre, nranks, limit)
	}
	return res
}

var failLine = regexp.MustCompile(`(?m)^FAIL .*$`)

// checkRanks requires every rank to exit 0, print no FAIL line and print
// "PASS <part> rank r" for every part.
func checkRanks(t *testing.T, res []rankOut, parts []string) {
	t.Helper()
	for _, r := range res {
		for _, f := range failLine.FindAllString(r.out, -1) {
			t.Errorf("rank %d: %s", r.rank, f)
		}
		for _, p := range parts {
			if !strings.Contains(r.out, fmt.Sprintf("PASS %s rank %d\n", p, r.rank)) {
				t.Errorf("rank %d did not pass %q", r.rank, p)
			}
		}
		if r.err != nil {
			t.Errorf("rank %d: %v", r.rank, r.err)
		}
		if t.Failed() {
			t.Logf("rank %d output:\n%s", r.rank, tail(r.out, 60))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Every bad call returns its result (checked in C) and logs a WARN line
// with the same reason that ncclGetLastError returns.
func checkBadCallsLogged(t *testing.T, r rankOut) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(r.out, "\n") {
		if !strings.HasPrefix(line, "BAD ") {
			continue
		}
		n++
		_, msg, ok := strings.Cut(line, "): ")
		if !ok || msg == "" {
			t.Errorf("rank %d: malformed %q", r.rank, line)
			continue
		}
		if !strings.Contains(r.out, "THESEUS WARN NCCL "+msg) {
			t.Errorf("rank %d: no WARN line for %q", r.rank, line)
		}
	}
	return n
}

// TestFourRanksHostBackend is the acceptance run: 4 processes on the host
// backend through every natively served call, with every result checked
// element by element in C, then the bad calls.
func TestFourRanksHostBackend(t *testing.T) {
	b := setup(t)
	env := b.hostEnv()
	if *full {
		env = append(env, "NCCL_TEST_FULL=1")
	}
	start := time.Now()
	res := b.runRanks(t, "ranks", 4, env, 3*time.Minute)
	t.Logf("4 ranks: %v", time.Since(start).Round(time.Millisecond))
	parts := []string{"version", "init", "allreduce", "reducescatter", "reduce", "allgather", "broadcast", "alltoall",
		"gather_scatter", "malloc buffers", "groups", "p2p alltoall", "split", "nonblocking", "scalable_abort", "bad calls", "destroy"}
	if *full {
		parts = append(parts, "full sweep")
	}
	checkRanks(t, res, parts)
	for _, r := range res {
		if n := checkBadCallsLogged(t, r); n < 18 {
			t.Errorf("rank %d: %d bad calls checked, want at least 18", r.rank, n)
		}
	}
}

// TestP2PHostBackend is issue 22's acceptance run: 2, 4 and 8 processes on
// the host backend, without a fallback NCCL, through every point-to-point
// pattern (ring, chain, pairs, all-pairs, sends to oneself, zero counts,
// several sends to one peer, a hypercube, a collective in the group,
// ungrouped calls, a datatype sample, malloc'd buffers, in-place gather
// and scatter) and AlltoAllv of random, skewed, empty and single-hot-row
// matrices, twice each with every byte checked in C; theseusCommStats then
// counts every call native and none on a fallback; then the bad calls.
func TestP2PHostBackend(t *testing.T) {
	b := setup(t)
	parts := []string{"ring", "chain", "pairs", "all-pairs", "self", "zero counts", "same peer thrice", "hypercube",
		"collective in the group", "ungrouped", "datatypes", "malloc buffers", "gather scatter in place", "alltoallv",
		"every call native", "bad calls", "destroy"}
	for _, n := range []int{2, 4, 8} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			start := time.Now()
			res := runProgram(t, b.p2p, []string{"p2p"}, b.dir, n, b.hostEnv(), 2*time.Minute)
			t.Logf("%d ranks: %v", n, time.Since(start).Round(time.Millisecond))
			checkRanks(t, res, parts)
			for _, r := range res {
				if strings.Contains(r.out, "fallback NCCL") && strings.Contains(r.out, "loaded") {
					t.Errorf("rank %d loaded a fallback NCCL", r.rank)
				}
			}
		})
	}
}

// TestP2PMismatch: a receive of fewer elements than its send fails with
// ncclInvalidUsage naming the pair, well within THESEUS_TIMEOUT, and writes
// nothing past the receive buffer.
func TestP2PMismatch(t *testing.T) {
	b := setup(t)
	start := time.Now()
	res := runProgram(t, b.p2p, []string{"mismatch"}, b.dir, 2, b.hostEnv("THESEUS_TIMEOUT=20000"), time.Minute)
	checkRanks(t, res, []string{"mismatch"})
	if el := time.Since(start); el > 15*time.Second {
		t.Errorf("took %v: the mismatch was not found before THESEUS_TIMEOUT", el)
	}
	t.Logf("%s", strings.TrimSpace(res[1].out))
}

// TestGroupedInitOneThread: 4 communicators created in one group by one
// thread (nccl-tests' default), grouped collectives on them, and
// ncclCommInitAll.
func TestGroupedInitOneThread(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.test, "grouped", "4")
	cmd.Env = b.hostEnv()
	out, err := cmd.CombinedOutput()
	res := []rankOut{{rank: 0, out: string(out), err: err}}
	checkRanks(t, res, []string{"version", "grouped init", "initall"})
}

// TestNoContextVariable: a C client on the host backend with no
// THESEUS_SELECTION_CONTEXT and an empty home directory runs (three
// communicators of one process: grouped init, allreduce, ncclCommInitAll,
// allgather) on the default context built into the library, which the
// INIT log names and which is materialised read-only under the home's
// cache directory.
func TestNoContextVariable(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, b.test, "grouped", "3")
	var env []string
	for _, kv := range b.hostEnv("THESEUS_DEBUG=INFO") {
		if !strings.HasPrefix(kv, "THESEUS_SELECTION_CONTEXT=") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "XDG_CACHE_HOME=") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "HOME="+home)
	out, err := cmd.CombinedOutput()
	res := []rankOut{{rank: 0, out: string(out), err: err}}
	checkRanks(t, res, []string{"version", "grouped init", "initall"})
	dirs, _ := filepath.Glob(filepath.Join(home, ".cache", "theseus", "contexts", "default-*"))
	if len(dirs) != 1 {
		t.Fatalf("materialised contexts under %s: %v", home, dirs)
	}
	if want := "INIT selection context " + dirs[0] + " (embedded default)"; !strings.Contains(string(out), want) {
		t.Errorf("no %q in:\n%s", want, tail(string(out), 40))
	}
}

// TestHostProcessPitfalls: SA_ONSTACK is added to a handler installed
// without it, and a child after fork() is refused every call (except the
// pure-C ncclGetVersion) with a reason, while the parent goes on.
func TestHostProcessPitfalls(t *testing.T) {
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.test, "hostproc")
	cmd.Env = b.hostEnv("THESEUS_DEBUG=INFO")
	out, err := cmd.CombinedOutput()
	checkRanks(t, []rankOut{{0, string(out), err}}, []string{"sa_onstack", "fork"})
	for _, want := range []string{"added SA_ONSTACK to", "THESEUS WARN NCCL ncclCommGetAsyncError: called in a child process after fork()"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, tail(string(out), 20))
		}
	}
}

// TestMismatchedUniqueID: rank 1 joins with a corrupted nonce and fails at
// once with ncclInvalidArgument; ranks 0 and 2 report ncclRemoteError
// naming rank 1 after THESEUS_TIMEOUT.
func TestMismatchedUniqueID(t *testing.T) {
	b := setup(t)
	res := b.runRanks(t, "badid", 3, b.hostEnv("THESEUS_TIMEOUT=2000"), time.Minute)
	checkRanks(t, res, []string{"badid"})
	want := map[int]string{0: "-> 6 ", 1: "-> 4 ", 2: "-> 6 "}
	for _, r := range res {
		if !strings.Contains(r.out, fmt.Sprintf("BADID rank %d %s", r.rank, want[r.rank])) {
			t.Errorf("rank %d: want result %q in\n%s", r.rank, want[r.rank], tail(r.out, 10))
		}
	}
	if !strings.Contains(res[0].out, "rank 1") {
		t.Errorf("rank 0's error does not name rank 1:\n%s", tail(res[0].out, 10))
	}
}

// TestMismatchedCollectives: rank 0 calls ncclAllReduce, rank 1
// ncclBroadcast. It used to return ncclInternalError ("please report this
// issue": "the schedules' ends do not pair"); it is user misuse:
// ncclInvalidUsage where it is found, ncclRemoteError on the peer, both
// saying the ranks issued different collectives, well before
// THESEUS_TIMEOUT.
func TestMismatchedCollectives(t *testing.T) {
	b := setup(t)
	res := b.runRanks(t, "mismatch", 2, b.hostEnv(), time.Minute)
	checkRanks(t, res, []string{"mismatch"})
	usage := 0
	for _, r := range res {
		switch {
		case strings.Contains(r.out, fmt.Sprintf("MISMATCH rank %d -> 5 ", r.rank)):
			usage++
		case strings.Contains(r.out, fmt.Sprintf("MISMATCH rank %d -> 6 ", r.rank)) && strings.Contains(r.out, "rank 0 found") != strings.Contains(r.out, "rank 1 found"):
		default:
			t.Errorf("rank %d: want ncclInvalidUsage, or ncclRemoteError naming the rank that found it:\n%s", r.rank, tail(r.out, 10))
		}
	}
	if usage == 0 {
		t.Errorf("no rank returned ncclInvalidUsage")
	}
}

// TestFallback: THESEUS_NCCL_LIB_PATH names a stand-in NCCL (fakenccl.c)
// and the selection context is empty, so pre-multiplied sums,
// registration and every collective run on the shadow communicator, with
// correct values, logged and counted; send/recv groups and AlltoAllv run
// natively on the point-to-point engine all the same (the fallback is only
// for what Theseus does not implement).
func TestFallback(t *testing.T) {
	b := setup(t)
	fk := t.TempDir()
	empty := t.TempDir()
	env := b.hostEnv("THESEUS_NCCL_LIB_PATH="+b.fake, "FAKE_NCCL_DIR="+fk, "THESEUS_SELECTION_CONTEXT="+empty,
		"THESEUS_DEBUG=INFO", "THESEUS_DEBUG_SUBSYS=INIT,COLL")
	res := b.runRanks(t, "fallback", 3, env, 2*time.Minute)
	checkRanks(t, res, []string{"native sendrecv with a fallback", "native alltoallv with a fallback", "fallback premulsum register", "fallback no schedule"})
	for _, r := range res {
		for _, want := range []string{"fallback NCCL " + b.fake + " (version 22803) loaded",
			"ncclSend: opCount 1 buff", "served by point-to-point engine (built-in parameters)",
			"ncclAlltoAllv: opCount 3 sendbuff", "served by the fallback NCCL (1 fallback requests on this comm)",
			"ncclAllReduce: opCount 5 comm", "no Theseus schedule serves this request",
			// the reason names the context and says it is empty
			"no Theseus schedule serves this request: selection context " + empty + " is empty: it has no schedule entries",
			"served by the fallback NCCL (2 fallback requests on this comm)",
			"destroyed: 3 requests served natively (0 of them launched from C), 2 by the fallback NCCL, 0 rejected"} {
			if !strings.Contains(r.out, want) {
				t.Errorf("rank %d: log lacks %q", r.rank, want)
			}
		}
	}
	// The shadow communicator was created once per rank, from one id.
	calls, _ := filepath.Glob(filepath.Join(fk, "calls.*"))
	inits := 0
	for _, c := range calls {
		data, _ := os.ReadFile(c)
		inits += strings.Count(string(data), "ncclCommInitRank\n")
	}
	if len(calls) != 3 || inits != 3 {
		t.Errorf("fake NCCL: %d processes, %d shadow inits; want 3 and 3", len(calls), inits)
	}
}

// TestExports checks the dynamic symbol table: every NCCL 2.25.1 function,
// the 2.27/2.28 calls PyTorch 2.11 binds, the Theseus extensions, each
// ncclX a weak alias of a global pncclX (as NCCL exports them), SONAME
// libnccl.so.2 and DF_1_NODELETE.
func TestExports(t *testing.T) {
	b := setup(t)
	f, err := elf.Open(b.lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	type sym struct {
		bind  elf.SymBind
		value uint64
	}
	have := map[string]sym{}
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			have[s.Name] = sym{elf.ST_BIND(s.Info), s.Value}
		}
	}
	var missing []string
	for _, name := range append(append(append([]string{}, nccl225...), torchNewer...), append(newerRejected, "ncclAlltoAllv")...) {
		w, ok1 := have[name]
		p, ok2 := have["p"+name]
		switch {
		case !ok1 || !ok2:
			missing = append(missing, name)
		case w.bind != elf.STB_WEAK || p.bind != elf.STB_GLOBAL || w.value != p.value:
			t.Errorf("%s: bind %v at %#x, p%s: bind %v at %#x; want a weak alias of a global", name, w.bind, w.value, name, p.bind, p.value)
		}
	}
	for _, name := range []string{"theseusStreamSynchronize", "theseusCommStats"} {
		if _, ok := have[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("not exported: %v", missing)
	}
	if len(nccl225) != 34 {
		t.Errorf("the NCCL 2.25.1 list has %d functions, want 34", len(nccl225))
	}
	sonames, _ := f.ImportedLibraries()
	if so, err := f.DynString(elf.DT_SONAME); err != nil || len(so) != 1 || so[0] != "libnccl.so.2" {
		t.Errorf("SONAME %v (%v), want libnccl.so.2; NEEDED %v", so, err, sonames)
	}
	if v, err := f.DynValue(elf.DT_FLAGS_1); err != nil || len(v) != 1 || v[0]&uint64(elf.DF_1_NODELETE) == 0 {
		t.Errorf("DT_FLAGS_1 %v (%v): want DF_1_NODELETE", v, err)
	}
}

// nccl225 are the 34 functions of NCCL 2.25.1's nccl.h.
var nccl225 = []string{"ncclMemAlloc", "ncclMemFree", "ncclGetVersion", "ncclGetUniqueId",
	"ncclCommInitRankConfig", "ncclCommInitRank", "ncclCommInitAll", "ncclCommInitRankScalable", "ncclCommSplit",
	"ncclCommFinalize", "ncclCommDestroy", "ncclCommAbort", "ncclGetErrorString", "ncclGetLastError",
	"ncclResetDebugInit", "ncclCommGetAsyncError", "ncclCommCount", "ncclCommCuDevice", "ncclCommUserRank",
	"ncclCommRegister", "ncclCommDeregister", "ncclRedOpCreatePreMulSum", "ncclRedOpDestroy", "ncclReduce",
	"ncclBcast", "ncclBroadcast", "ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclSend", "ncclRecv",
	"ncclGroupStart", "ncclGroupEnd", "ncclGroupSimulateEnd"}

// torchNewer are the NCCL 2.27/2.28 functions PyTorch 2.11's
// libtorch_cuda.so leaves undefined (reference/nccl-abi-facts.md), and
// ncclGather/ncclScatter (2.28, with ncclAlltoAll).
var torchNewer = []string{"ncclAlltoAll", "ncclGather", "ncclScatter", "ncclCommShrink",
	"ncclCommWindowRegister", "ncclCommWindowDeregister", "ncclDevCommCreate", "ncclDevCommDestroy"}

// newerRejected are newer NCCL calls exported only so that clients bind.
var newerRejected = []string{"ncclCommRevoke", "ncclCommSuspend", "ncclCommResume", "ncclCommMemStats",
	"ncclCommGetUniqueId", "ncclCommGrow", "ncclWinGetUserPtr", "ncclCommQueryProperties",
	"ncclGetLsaMultimemDevicePointer", "ncclGetPeerDevicePointer", "ncclPutSignal", "ncclSignal", "ncclWaitSignal"}

var abiRow = regexp.MustCompile("^\\| `([^`]+)` \\| (-?[0-9]+) \\|")

// TestABINumbers compares what a C program compiled against our nccl.h
// sees (enum values, sizes, offsets, the version) with the table in
// docs/ncclabi.md, both ways.
func TestABINumbers(t *testing.T) {
	b := setup(t)
	out, err := exec.Command(b.test, "abi").Output()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		v, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if len(f) != 2 || err != nil {
			t.Fatalf("bad line %q", line)
		}
		got[f[0]] = v
	}
	doc, err := os.ReadFile(filepath.Join(b.root, "docs/ncclabi.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	in := false
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = strings.HasPrefix(line, "## ABI numbers")
		}
		if m := abiRow.FindStringSubmatch(line); in && m != nil {
			v, _ := strconv.ParseInt(m[2], 10, 64)
			want[m[1]] = v
		}
	}
	if len(want) < 50 {
		t.Fatalf("docs/ncclabi.md's ABI table has %d rows", len(want))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ABI numbers (-docs/ncclabi.md +nccl.h as compiled):\n%s", diff)
	}
}

// TestAuditShim: a program linked against "libnccl.so.2" (here the fake
// NCCL, in its own directory) loads libtheseus_nccl.so under LD_AUDIT,
// and the fallback named by THESEUS_NCCL_LIB_PATH is not redirected.
func TestAuditShim(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	fakeDir := filepath.Join(dir, "nccl")
	os.MkdirAll(fakeDir, 0o755)
	fake2 := filepath.Join(fakeDir, "libnccl.so.2")
	if err := run(dir, cc(), "-O1", "-fPIC", "-shared", "-Wl,-soname,libnccl.so.2", "-o", fake2, filepath.Join(b.root, "ncclabi/testdata/fakenccl/fakenccl.c")); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "v.c")
	os.WriteFile(src, []byte(`#include <stdio.h>
int ncclGetVersion(int*);
int ncclGetUniqueId(void*);
int main(void) { int v = 0; char id[128]; ncclGetVersion(&v); printf("version %d\n", v); ncclGetUniqueId(id); return 0; }
`), 0o644)
	prog := filepath.Join(dir, "v")
	if err := run(dir, cc(), "-o", prog, src, fake2, "-Wl,-rpath,"+fakeDir); err != nil {
		t.Fatal(err)
	}
	shim := filepath.Join(b.dir, "libtheseus_audit_nccl.so") // beside libtheseus_nccl.so
	for _, c := range []struct {
		name string
		env  []string
		want []string
	}{
		{"plain", nil, []string{"version 22803"}},
		{"audit", []string{"LD_AUDIT=" + shim, "THESEUS_DEBUG=INFO", "THESEUS_BACKEND=host"},
			[]string{"version 22501", "THESEUS INFO audit: libnccl.so.2 -> " + b.lib}},
		{"audit with fallback", []string{"LD_AUDIT=" + shim, "THESEUS_DEBUG=INFO", "THESEUS_BACKEND=host", "THESEUS_NCCL_LIB_PATH=" + fake2},
			[]string{"version 22501", "fallback NCCL " + fake2 + " (version 22803) loaded"}},
		{"target override", []string{"LD_AUDIT=" + shim, "THESEUS_NCCL_AUDIT_TARGET=" + b.lib, "THESEUS_BACKEND=host"},
			[]string{"version 22501"}},
	} {
		cmd := exec.Command(prog)
		// The fake NCCL counts its calls in FAKE_NCCL_DIR (without it, it
		// counts nothing: go test ./... used to leave /tmp/calls.<pid>).
		cmd.Env = baseEnv(append(c.env, "FAKE_NCCL_DIR="+dir)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, out)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: output lacks %q:\n%s", c.name, w, out)
			}
		}
	}
	if calls, _ := filepath.Glob(filepath.Join(dir, "calls.*")); len(calls) == 0 {
		t.Errorf("the fake NCCL's call counts are not in FAKE_NCCL_DIR %s", dir)
	}
}

// TestStaticArchive (with -ncclabi.full): libnccl.a from
// -buildmode=c-archive links into a C program that runs the grouped suite.
func TestStaticArchive(t *testing.T) {
	if !*full {
		t.Skip("builds a second Go runtime image (about a minute on 2 cores); run with -ncclabi.full")
	}
	b := setup(t)
	dir := t.TempDir()
	a := filepath.Join(dir, "libnccl.a")
	if err := run(b.root, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildmode=c-archive", "-o", a, "./ncclabi"); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "nccl_test_static")
	if err := run(dir, cc(), "-O1", "-I"+filepath.Join(b.root, "ncclabi/include"), "-o", prog,
		filepath.Join(b.root, "ncclabi/testdata/ctest/nccl_test.c"), a, "-lpthread", "-ldl"); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(prog, "grouped", "4")
	cmd.Env = b.hostEnv()
	out, err := cmd.CombinedOutput()
	checkRanks(t, []rankOut{{0, string(out), err}}, []string{"version", "grouped init", "initall"})
	// make install puts lib/ and include/ under the prefix.
	prefix := filepath.Join(dir, "prefix")
	if err := run(b.root, "make", "-C", "ncclabi", "install", "PREFIX="+prefix, "BUILD="+filepath.Join(dir, "build")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"lib/libtheseus_nccl.so", "lib/libnccl.so.2", "lib/libnccl.so", "lib/libtheseus_audit_nccl.so", "lib/libnccl.a", "include/nccl.h"} {
		if _, err := os.Stat(filepath.Join(prefix, p)); err != nil {
			t.Errorf("install: %v", err)
		}
	}
}

// TestMiniMPI: the MPI subset the GPU scripts give nccl-tests
// (ncclabi/gpu/minimpi, launched by minimpirun.sh) does what nccl-tests
// relies on: allgather in place, split by color and key, broadcast in the
// split, barrier, allreduce (int sum, int64 max, long min), gather.
func TestMiniMPI(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	prog := filepath.Join(dir, "mpi_check")
	if err := run(dir, cc(), "-O1", "-Wall", "-Werror", "-I"+filepath.Join(b.root, "ncclabi/gpu/minimpi"), "-o", prog,
		filepath.Join(b.root, "ncclabi/testdata/minimpi/mpi_check.c"), filepath.Join(b.root, "ncclabi/gpu/minimpi/minimpi.c")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.root, "ncclabi/gpu/minimpirun.sh"), "5", prog)
	cmd.Env = baseEnv("MINIMPI_ALL_OUTPUT=1", "MINIMPI_TIMEOUT=30")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for r := 0; r < 5; r++ {
		if !strings.Contains(string(out), fmt.Sprintf("rank %d done, 0 failures", r)) {
			t.Errorf("rank %d:\n%s", r, out)
		}
	}
}
