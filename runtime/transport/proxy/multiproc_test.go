package proxy

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// Multi-process tests: the test binary re-runs itself as the ranks
// (rankMain, chosen in TestMain by rankEnv), joined by the bootstrap over
// loopback, with UCX_TLS=tcp unless the caller's environment sets UCX_TLS.
// Each rank prints "MP <event> rank=<r> ..." lines that the parent reads.

const (
	rankEnv  = "THESEUS_PROXY_TEST_RANK"  // "<rank>/<nranks>/<mode>/<hex id>"
	childEnv = "THESEUS_PROXY_TEST_CHILD" // "missing": print New's error and exit
)

func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv("UCX_TLS"); !ok {
		os.Setenv("UCX_TLS", "tcp")
	}
	if v := os.Getenv(rankEnv); v != "" {
		os.Exit(rankMain(v))
	}
	if os.Getenv(childEnv) == "missing" {
		_, err := New(Options{})
		fmt.Println("New:", err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func needUCX(t testing.TB) {
	t.Helper()
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
}

type rankProc struct {
	rank  int
	cmd   *exec.Cmd
	lines chan string
	mu    sync.Mutex
	out   strings.Builder
	done  chan error
}

func (p *rankProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// next returns the next "MP ..." line of the rank, or fails the test after
// the timeout.
func (p *rankProc) next(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			t.Fatalf("rank %d exited early:\n%s", p.rank, p.output())
		}
		return l
	case <-time.After(timeout):
		t.Fatalf("rank %d: no line in %v:\n%s", p.rank, timeout, p.output())
	}
	return ""
}

// startRanks starts n rank processes in mode with the extra environment.
func startRanks(t *testing.T, n int, mode string, extra ...string) []*rankProc {
	t.Helper()
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	procs := make([]*rankProc, n)
	for r := range n {
		env := append([]string{fmt.Sprintf("%s=%d/%d/%s/%s", rankEnv, r, n, mode, hex.EncodeToString(id[:])), "MSCCLPP_SOCKET_IFNAME=lo"}, extra...)
		procs[r] = startRank(t, r, nil, env)
	}
	return procs
}

// startRank starts the test binary as a rank, under the command prefix
// wrap (for example ip netns exec), with the extra environment.
func startRank(t *testing.T, r int, wrap []string, env []string) *rankProc {
	t.Helper()
	argv := append(append([]string(nil), wrap...), os.Args[0], "-test.run=^$", "-test.timeout=5m")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	p := &rankProc{rank: r, cmd: cmd, lines: make(chan string, 1024), done: make(chan error, 1)}
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
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// expectOK waits for every rank's final "MP ok" line and a clean exit.
func expectOK(t *testing.T, procs []*rankProc, timeout time.Duration) []string {
	t.Helper()
	var lines []string
	for _, p := range procs {
		l := p.next(t, timeout)
		if !strings.HasPrefix(l, "MP ok ") {
			t.Fatalf("rank %d: %s\n%s", p.rank, l, p.output())
		}
		lines = append(lines, l)
		if err := <-p.done; err != nil {
			t.Fatalf("rank %d: %v\n%s", p.rank, err, p.output())
		}
	}
	return lines
}

// quoted returns the Go-quoted value of key in an "MP ..." line.
func quoted(line, key string) string {
	_, rest, ok := strings.Cut(line, " "+key+"=")
	if !ok {
		return ""
	}
	q, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return ""
	}
	s, _ := strconv.Unquote(q)
	return s
}

func field(line, key string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestRing runs the put matrix in a ring of 2 and of 4 processes: every
// rank puts each size (1 B to 64 MiB, unaligned offsets) to the next rank
// and signals; the next rank checks every byte and acknowledges.
func TestRing(t *testing.T) {
	needUCX(t)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			lines := expectOK(t, startRanks(t, n, "ring"), 3*time.Minute)
			for _, l := range lines {
				if os.Getenv("UCX_TLS") == "tcp" && !strings.Contains(quoted(l, "net"), "tcp") {
					t.Errorf("transport %q, want tcp (UCX_TLS=tcp): %s", quoted(l, "net"), l)
				}
			}
			t.Log(lines)
		})
	}
}

// TestAllPairs: 4 processes, every rank connected to every other; each
// puts a block to every peer and signals, then flushes; every rank checks
// what each peer wrote.
func TestAllPairs(t *testing.T) {
	needUCX(t)
	expectOK(t, startRanks(t, 4, "allpairs"), 2*time.Minute)
}

// TestSignalOrder: a receiver that sees the semaphore reach k sees the
// data of the k-th put complete (64 puts and signals in flight at once).
func TestSignalOrder(t *testing.T) {
	needUCX(t)
	expectOK(t, startRanks(t, 2, "order"), 2*time.Minute)
}

// TestFIFOWrap: 20000 descriptors through a FIFO of 8 slots (2500 laps)
// from two goroutines, then a flush; the receiver checks every word.
func TestFIFOWrap(t *testing.T) {
	needUCX(t)
	expectOK(t, startRanks(t, 2, "fifo"), 2*time.Minute)
}

// TestPeerKilled: rank 1 is killed (SIGKILL) once connected; rank 0's
// wait for a signal from rank 1, then its puts and flush, fail within
// THESEUS_TIMEOUT with errors that name both ranks and UCX's status (the
// endpoint's error handler reports the loss).
func TestPeerKilled(t *testing.T) {
	testPeerLost(t, "kill", 20000, []string{"rank 0", "rank 1", "UCX status"})
}

// TestPeerFrozen: rank 1 is stopped (SIGSTOP: a node that stops
// answering, its connections open); rank 0's wait and flush end with a
// timeout error after THESEUS_TIMEOUT, naming both ranks.
func TestPeerFrozen(t *testing.T) {
	testPeerLost(t, "stop", 2000, []string{"rank 0", "rank 1", "THESEUS_TIMEOUT"})
}

func testPeerLost(t *testing.T, how string, timeoutMS int, want []string) {
	needUCX(t)
	procs := startRanks(t, 2, "lost", fmt.Sprintf("THESEUS_TIMEOUT=%d", timeoutMS))
	for _, p := range procs {
		if l := p.next(t, time.Minute); !strings.HasPrefix(l, "MP ready ") {
			t.Fatalf("rank %d: %s\n%s", p.rank, l, p.output())
		}
	}
	if how == "kill" {
		if err := procs[1].cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-procs[1].done
	} else if err := procs[1].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	procs[0].cmd.Process.Signal(os.Interrupt) // "go on": the rank waits for it
	l := procs[0].next(t, 4*time.Duration(timeoutMS)*time.Millisecond+time.Minute)
	took := time.Since(start)
	if !strings.HasPrefix(l, "MP failed ") {
		t.Fatalf("rank 0: %s\n%s", l, procs[0].output())
	}
	// Two bounded waits in a row (the wait, then the flush).
	if limit := 2*time.Duration(timeoutMS)*time.Millisecond + 5*time.Second; took > limit {
		t.Errorf("the failures took %v, beyond twice THESEUS_TIMEOUT=%d ms", took, timeoutMS)
	}
	for _, key := range []string{"wait", "put"} {
		e := quoted(l, key)
		for _, w := range want {
			if !strings.Contains(e, w) {
				t.Errorf("%s error %q lacks %q", key, e, w)
			}
		}
	}
	t.Logf("after %v: %s", took, l)
	<-procs[0].done
}

// The rank processes.

type rankEnvT struct {
	rank, n int
	mode    string
	boot    *bootstrap.Bootstrap
	p       *Proxy
}

func rankMain(v string) int {
	parts := strings.SplitN(v, "/", 4)
	rank, _ := strconv.Atoi(parts[0])
	n, _ := strconv.Atoi(parts[1])
	var id bootstrap.UniqueID
	if parts[3] == "new" {
		// This rank makes the id (on MSCCLPP_SOCKET_IFNAME's address) and
		// prints it for the parent to pass on.
		var err error
		if id, err = bootstrap.NewUniqueID(bootstrap.Options{}); err != nil {
			fmt.Printf("MP failed rank=%d err=%q\n", rank, err.Error())
			return 1
		}
		fmt.Printf("MP id rank=%d id=%s\n", rank, hex.EncodeToString(id[:]))
	} else {
		idb, _ := hex.DecodeString(parts[3])
		copy(id[:], idb)
	}
	r := &rankEnvT{rank: rank, n: n, mode: parts[2]}
	fail := func(err error) int {
		fmt.Printf("MP failed rank=%d err=%q\n", rank, err.Error())
		return 1
	}
	ctx := context.Background()
	var err error
	if r.boot, err = bootstrap.Init(ctx, id, rank, n, bootstrap.Options{}); err != nil {
		return fail(err)
	}
	if r.p, err = New(Options{LocalRank: 0, LocalRanks: 1}); err != nil {
		return fail(err)
	}
	var res string
	switch r.mode {
	case "ring":
		res, err = r.ring(ctx)
	case "allpairs":
		res, err = r.allPairs(ctx)
	case "order":
		res, err = r.order(ctx)
	case "fifo":
		res, err = r.fifo(ctx)
	case "lost":
		res, err = r.lost(ctx)
	case "bench":
		err = r.benchPeer(ctx)
	default:
		err = fmt.Errorf("unknown mode %q", r.mode)
	}
	if err != nil {
		return fail(err)
	}
	// Nobody closes before everybody is done (a closed peer is a lost one).
	if err := r.boot.Barrier(ctx); err != nil {
		return fail(err)
	}
	r.p.Close()
	r.boot.Close()
	fmt.Printf("MP ok rank=%d %s\n", rank, res)
	return 0
}

// shared is a rank's connection with its two regions shared: region 0 =
// data (dataBytes), region 1 = 4096 bytes of semaphore words.
type shared struct {
	c          *Conn
	data, sem  HostBlock
	dreg, sreg *Region
}

func connectShared(ctx context.Context, p *Proxy, net Net, rank int, peers []int, o ConnOptions, dataBytes int) (*shared, error) {
	c, err := p.Connect(ctx, net, rank, peers, o)
	if err != nil {
		return nil, err
	}
	s := &shared{c: c}
	if s.data, err = AllocHost(dataBytes); err != nil {
		return nil, err
	}
	if s.sem, err = AllocHost(4096); err != nil {
		return nil, err
	}
	if s.dreg, err = c.Register(Mem{Addr: uintptr(s.data.Ptr), Size: s.data.Size}); err != nil {
		return nil, err
	}
	if s.sreg, err = c.Register(Mem{Addr: uintptr(s.sem.Ptr), Size: s.sem.Size}); err != nil {
		return nil, err
	}
	return s, c.Share(ctx)
}

// pattern is the byte a sender writes at offset i of case k.
func pattern(sender, k, i int) byte { return byte(sender*31 + k*7 + i + i>>8 + i>>16) }

var ringSizes = []int{1, 3, 8, 63, 4096 + 5, 65537, 1<<20 + 3, 8<<20 - 1, 64 << 20}

// ring: region 0 = [src | dst], region 1 = semaphores (word 0: data
// signals from the previous rank, word 1: acknowledgements from the next).
func (r *rankEnvT) ring(ctx context.Context) (string, error) {
	next, prev := (r.rank+1)%r.n, (r.rank+r.n-1)%r.n
	peers := []int{next}
	if prev != next {
		peers = append(peers, prev)
	}
	const half = 64<<20 + 128
	sh, err := connectShared(ctx, r.p, r.boot, r.rank, peers, ConnOptions{}, 2*half)
	if err != nil {
		return "", err
	}
	c, data, sem, dreg, sreg := sh.c, sh.data, sh.sem, sh.dreg, sh.sreg
	toNext, err := c.AddChannel(next, sreg.ID, 0) // next's word 0
	if err != nil {
		return "", err
	}
	toPrev, err := c.AddChannel(prev, sreg.ID, 8) // prev's word 1
	if err != nil {
		return "", err
	}
	buf := unsafe.Slice((*byte)(data.Ptr), data.Size)
	sigs := (*uint64)(sem.Ptr)
	acks := (*uint64)(unsafe.Add(sem.Ptr, 8))
	errc := make(chan error, 1)
	go func() { // the receiving side: check each case, acknowledge it
		for k, size := range ringSizes {
			if err := c.WaitSignal(sigs, uint64(k+1), prev); err != nil {
				errc <- err
				return
			}
			dstOff := half + (k*13)%61 + 3
			for i := range size {
				if got, want := buf[dstOff+i], pattern(prev, k, i); got != want {
					errc <- fmt.Errorf("case %d (%d bytes from rank %d): byte %d = %d, want %d", k, size, prev, i, got, want)
					return
				}
			}
			if err := c.Signal(toPrev); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for k, size := range ringSizes {
		srcOff := (k*7)%53 + 1
		dstOff := half + (k*13)%61 + 3
		for i := range size {
			buf[srcOff+i] = pattern(r.rank, k, i)
		}
		if err := c.Put(toNext, dreg.ID, uint64(srcOff), dreg.ID, uint64(dstOff), uint32(size)); err != nil {
			return "", err
		}
		if err := c.Signal(toNext); err != nil {
			return "", err
		}
		// The next rank acknowledges once it has checked: then src and its
		// dst may be reused.
		if err := c.WaitSignal(acks, uint64(k+1), next); err != nil {
			return "", err
		}
	}
	if err := c.Flush(toNext); err != nil {
		return "", err
	}
	if err := <-errc; err != nil {
		return "", err
	}
	st := c.Stats()
	if st.StagedPuts != 0 || st.DirectPuts != uint64(len(ringSizes)) {
		return "", fmt.Errorf("stats %+v: want %d direct puts", st, len(ringSizes))
	}
	return fmt.Sprintf("net=%q puts=%d bytes=%d path=direct", c.Transports(next), st.DirectPuts, st.PutBytes), nil
}

// allPairs: every rank puts 1 MiB + rank bytes to each peer's slot for it
// and signals; each rank waits for every peer's signal and checks.
func (r *rankEnvT) allPairs(ctx context.Context) (string, error) {
	var peers []int
	for q := range r.n {
		if q != r.rank {
			peers = append(peers, q)
		}
	}
	const slot = 2 << 20
	sh, err := connectShared(ctx, r.p, r.boot, r.rank, peers, ConnOptions{}, slot*(r.n+1))
	if err != nil {
		return "", err
	}
	c, data, sem, dreg, sreg := sh.c, sh.data, sh.sem, sh.dreg, sh.sreg
	buf := unsafe.Slice((*byte)(data.Ptr), data.Size)
	size := 1<<20 + r.rank
	for i := range size {
		buf[i] = pattern(r.rank, 0, i)
	}
	chs := map[int]uint16{}
	for _, q := range peers {
		ch, err := c.AddChannel(q, sreg.ID, uint64(8*r.rank)) // q's word for r
		if err != nil {
			return "", err
		}
		chs[q] = ch
		if _, err := c.Post(Desc{Op: OpPut | OpSignal, Channel: ch, SrcRegion: dreg.ID, DstRegion: dreg.ID, DstOff: uint64(slot * (r.rank + 1)), Size: uint32(size)}); err != nil {
			return "", err
		}
	}
	for _, q := range peers {
		if err := c.WaitSignal((*uint64)(unsafe.Add(sem.Ptr, 8*q)), 1, q); err != nil {
			return "", err
		}
		qs := 1<<20 + q
		for i := range qs {
			if got, want := buf[slot*(q+1)+i], pattern(q, 0, i); got != want {
				return "", fmt.Errorf("from rank %d: byte %d = %d, want %d", q, i, got, want)
			}
		}
	}
	for _, q := range peers {
		if err := c.Flush(chs[q]); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("peers=%d", len(peers)), nil
}

// order: rank 0 posts 64 puts of 256 KiB into distinct slots, each with a
// signal, without waiting; rank 1, on seeing the semaphore reach k, checks
// slot k at once.
func (r *rankEnvT) order(ctx context.Context) (string, error) {
	const slot, n = 256 << 10, 64
	sh, err := connectShared(ctx, r.p, r.boot, r.rank, []int{1 - r.rank}, ConnOptions{Capacity: 16}, slot*(n+1))
	if err != nil {
		return "", err
	}
	c, data, sem, dreg, sreg := sh.c, sh.data, sh.sem, sh.dreg, sh.sreg
	ch, err := c.AddChannel(1-r.rank, sreg.ID, 0)
	if err != nil {
		return "", err
	}
	buf := unsafe.Slice((*byte)(data.Ptr), data.Size)
	if r.rank == 0 {
		for k := range n {
			for i := range slot {
				buf[slot*k+i] = pattern(0, k, i)
			}
		}
		for k := range n {
			if _, err := c.Post(Desc{Op: OpPut | OpSignal, Channel: ch, SrcRegion: dreg.ID, SrcOff: uint64(slot * k), DstRegion: dreg.ID, DstOff: uint64(slot * (k + 1)), Size: slot}); err != nil {
				return "", err
			}
		}
		if err := c.Flush(ch); err != nil {
			return "", err
		}
		st := c.Stats()
		return fmt.Sprintf("signals=%d fences=%d", st.Signals, st.Fences), nil
	}
	sigs := (*uint64)(sem.Ptr)
	for k := range n {
		if err := c.WaitSignal(sigs, uint64(k+1), 0); err != nil {
			return "", err
		}
		for i := range slot {
			if got, want := buf[slot*(k+1)+i], pattern(0, k, i); got != want {
				return "", fmt.Errorf("semaphore %d seen, but byte %d of put %d is %d, want %d: the signal overtook the data", k+1, i, k, got, want)
			}
		}
	}
	return "checked=64", nil
}

// fifo: rank 0 posts 20000 8-byte puts (distinct offsets) from two
// goroutines through an 8-slot FIFO, then one signal after a flush; rank 1
// checks every word.
func (r *rankEnvT) fifo(ctx context.Context) (string, error) {
	const n = 20000
	sh, err := connectShared(ctx, r.p, r.boot, r.rank, []int{1 - r.rank}, ConnOptions{Capacity: 8}, 16*n)
	if err != nil {
		return "", err
	}
	c, data, sem, dreg, sreg := sh.c, sh.data, sh.sem, sh.dreg, sh.sreg
	ch, err := c.AddChannel(1-r.rank, sreg.ID, 0)
	if err != nil {
		return "", err
	}
	words := unsafe.Slice((*uint64)(data.Ptr), 2*n)
	if r.rank == 0 {
		for i := range n {
			words[i] = uint64(i)*0x9E3779B97F4A7C15 + 1
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for g := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := g; i < n; i += 2 {
					if err := c.Put(ch, dreg.ID, uint64(8*i), dreg.ID, uint64(8*(n+i)), 8); err != nil {
						errs[g] = err
						return
					}
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return "", err
		}
		if err := c.Flush(ch); err != nil {
			return "", err
		}
		if err := c.Signal(ch); err != nil {
			return "", err
		}
		if err := c.Flush(ch); err != nil {
			return "", err
		}
		if got := c.FIFO().Tail(); got != n+3 {
			return "", fmt.Errorf("tail %d, want %d", got, n+3)
		}
		return fmt.Sprintf("descriptors=%d laps=%d", c.Stats().Descriptors, (n+3)/8), nil
	}
	if err := c.WaitSignal((*uint64)(sem.Ptr), 1, 0); err != nil {
		return "", err
	}
	for i := range n {
		if got, want := words[n+i], uint64(i)*0x9E3779B97F4A7C15+1; got != want {
			return "", fmt.Errorf("word %d = %#x, want %#x", i, got, want)
		}
	}
	return "checked=20000", nil
}

// lost: both ranks connect and share; rank 1 says ready and waits to be
// killed or stopped; rank 0 says ready, waits for SIGINT (sent after
// that), then waits for a signal from rank 1, puts and flushes.
func (r *rankEnvT) lost(ctx context.Context) (string, error) {
	sh, err := connectShared(ctx, r.p, r.boot, r.rank, []int{1 - r.rank}, ConnOptions{}, 1<<20)
	if err != nil {
		return "", err
	}
	c, data, dreg := sh.c, sh.data, sh.dreg
	ch, err := c.AddChannel(1-r.rank, dreg.ID, 0)
	if err != nil {
		return "", err
	}
	if err := r.boot.Barrier(ctx); err != nil {
		return "", err
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt)
	fmt.Printf("MP ready rank=%d\n", r.rank)
	<-sigc
	if r.rank == 1 {
		return "", errors.New("rank 1 was to be killed or stopped")
	}
	// First a wait with nothing in flight to the peer: the endpoint's
	// error handler reports the loss. Then puts and a flush.
	werr := c.WaitSignal((*uint64)(data.Ptr), 1<<40, 1)
	var ferr error
	for range 4 {
		if ferr = c.Put(ch, dreg.ID, 0, dreg.ID, 8, 4096); ferr != nil {
			break
		}
		if ferr = c.Flush(ch); ferr != nil {
			break
		}
	}
	if werr == nil || ferr == nil {
		return "", fmt.Errorf("a killed peer: wait %v, put/flush %v", werr, ferr)
	}
	fmt.Printf("MP failed rank=0 wait=%q put=%q\n", werr.Error(), ferr.Error())
	os.Exit(0)
	return "", nil
}
