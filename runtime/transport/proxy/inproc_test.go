package proxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// In-process tests: n ranks as goroutines of this process, each with its
// own Proxy (its own UCX context and worker), joined by a loopback
// bootstrap.

type world struct {
	boots []*bootstrap.Bootstrap
	ps    []*Proxy
	cs    []*Conn
}

func each(n int, f func(r int)) {
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() { defer wg.Done(); f(r) }()
	}
	wg.Wait()
}

// newWorld connects n ranks, each to every other.
func newWorld(t *testing.T, n int, o ConnOptions) *world {
	t.Helper()
	needUCX(t)
	// UCX over the loopback interface only (MSCCLPP_SOCKET_IFNAME=lo), as
	// the multi-process tests have it.
	t.Cleanup(env.SetLookupForTest(func(k string) (string, bool) {
		if k == "MSCCLPP_SOCKET_IFNAME" {
			return "lo", true
		}
		return "", false
	}))
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &world{boots: make([]*bootstrap.Bootstrap, n), ps: make([]*Proxy, n), cs: make([]*Conn, n)}
	errs := make([]error, n)
	each(n, func(r int) {
		if w.boots[r], errs[r] = bootstrap.Init(context.Background(), id, r, n, bootstrap.Options{Timeout: 20 * time.Second}); errs[r] != nil {
			return
		}
		if w.ps[r], errs[r] = New(Options{Timeout: 20 * time.Second}); errs[r] != nil {
			return
		}
		var peers []int
		for q := range n {
			if q != r {
				peers = append(peers, q)
			}
		}
		w.cs[r], errs[r] = w.ps[r].Connect(context.Background(), w.boots[r], r, peers, o)
	})
	t.Cleanup(func() {
		for r := range n {
			if w.ps[r] != nil {
				w.ps[r].Close()
			}
			if w.boots[r] != nil {
				w.boots[r].Close()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return w
}

func alloc(t testing.TB, n int) HostBlock {
	t.Helper()
	b, err := AllocHost(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Free() })
	return b
}

func bytesOf(b HostBlock) []byte { return unsafe.Slice((*byte)(b.Ptr), b.Size) }

// memmoveStager is a Stager over host memory standing in for device
// memory (the blocks in dev): the staged path's logic, tested without a
// GPU.
type memmoveStager struct {
	dev   []HostBlock
	calls int
}

func (s *memmoveStager) ToHost(dst unsafe.Pointer, src uintptr, n int) error {
	s.calls++
	for _, b := range s.dev {
		if off := src - uintptr(b.Ptr); src >= uintptr(b.Ptr) && int(off)+n <= b.Size {
			copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(unsafe.Add(b.Ptr, off)), n))
			return nil
		}
	}
	return errors.New("not device memory")
}

// batchStager is memmoveStager as a BatchStager whose copies happen only
// at Sync: a put issued before its copy's Sync would carry stale bytes.
type batchStager struct {
	memmoveStager
	queued []func() error
	syncs  int
}

func (s *batchStager) ToHostAsync(dst unsafe.Pointer, src uintptr, n int) error {
	s.queued = append(s.queued, func() error { return s.ToHost(dst, src, n) })
	return nil
}

func (s *batchStager) Sync() error {
	s.syncs++
	q := s.queued
	s.queued = nil
	for _, f := range q {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// TestStaged: with this UCX build (no CUDA), a device region is staged:
// puts from it go through the staging buffer (Stager), puts into it land
// in its Mirror; Stats and Path report it. Three puts, the last with the
// signal, each through several pieces of a 64 KiB buffer (two halves), so
// that the ring wraps within a put; with a BatchStager the copies of a
// round are waited for once, before their puts and the signal.
func TestStaged(t *testing.T) {
	for _, stage := range []int{64 << 10, 16 << 20} {
		for _, batch := range []bool{false, true} {
			t.Run(fmt.Sprintf("stage=%dKiB/batch=%v", stage>>10, batch), func(t *testing.T) { testStaged(t, stage, batch) })
		}
	}
}

// testStaged: with a 16 MiB buffer (16 pieces of 1 MiB) each put is one
// piece, and the batch of the one round (under half the ring) is waited
// for once.
func testStaged(t *testing.T, stage int, batch bool) {
	const size = 1<<20 + 17
	dev := []HostBlock{alloc(t, size), alloc(t, size)} // "device" memory
	mm := memmoveStager{dev: dev}
	var st Stager = &mm
	bs := &batchStager{memmoveStager: mm}
	if batch {
		st = bs
	}
	w := newWorld(t, 2, ConnOptions{Stager: st, StageBytes: stage})
	if w.ps[0].CUDA() {
		t.Skip("this UCX build handles CUDA memory: device regions go direct")
	}
	mirror := []HostBlock{alloc(t, size), alloc(t, size)} // pinned host mirrors
	sem := []HostBlock{alloc(t, 4096), alloc(t, 4096)}
	regs := make([]*Region, 2)
	each(2, func(r int) {
		var err error
		if regs[r], err = w.cs[r].Register(Mem{Addr: uintptr(dev[r].Ptr), Size: size, Kind: DeviceMem, Mirror: uintptr(mirror[r].Ptr)}); err != nil {
			t.Error(err)
			return
		}
		if _, err = w.cs[r].Register(Mem{Addr: uintptr(sem[r].Ptr), Size: 4096}); err != nil {
			t.Error(err)
			return
		}
		if err := w.cs[r].Share(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if t.Failed() {
		t.FailNow()
	}
	if regs[0].Path != Staged {
		t.Fatalf("path %v, want staged", regs[0].Path)
	}
	src := bytesOf(dev[0])
	for i := range src {
		src[i] = byte(i*5 + 1)
	}
	c := w.cs[0]
	ch, err := c.AddChannel(1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 300000 // several staging pieces (32 KiB each) per put
	puts := []struct{ src, dst uint64 }{{9, 1001}, {9 + n, 1001 + n}, {9 + 2*n, 1001 + 2*n}}
	// One round drains all three (no round runs while the posts go in),
	// so a batch spans descriptors.
	w.ps[0].loopMu.Lock()
	for i, p := range puts {
		op := OpPut
		if i == len(puts)-1 {
			op |= OpSignal
		}
		if _, err := c.Post(Desc{Op: op, Channel: ch, SrcRegion: 0, SrcOff: p.src, DstRegion: 0, DstOff: p.dst, Size: n}); err != nil {
			w.ps[0].loopMu.Unlock()
			t.Fatal(err)
		}
	}
	w.ps[0].loopMu.Unlock()
	if err := w.cs[1].WaitSignal((*uint64)(sem[1].Ptr), 1, 0); err != nil {
		t.Fatal(err)
	}
	// The signal came after the data: no flush needed to see it.
	got := bytesOf(mirror[1])[1001 : 1001+3*n]
	for i := range got {
		if got[i] != src[9+i] {
			t.Fatalf("byte %d in the peer's mirror = %d, want %d", i, got[i], src[9+i])
		}
	}
	if err := c.Flush(ch); err != nil {
		t.Fatal(err)
	}
	if b := bytesOf(dev[1]); b[1001] != 0 {
		t.Fatal("the put landed in the peer's device memory, not its mirror")
	}
	s := c.Stats()
	if s.StagedPuts != 3 || s.DirectPuts != 0 || s.StagedBytes != 3*n {
		t.Fatalf("stats %+v: want three staged puts of %d bytes", s, n)
	}
	calls := mm.calls
	if batch {
		calls = bs.calls
		if bs.syncs == 0 || bs.syncs > calls || stage >= 6<<20 && bs.syncs != 1 {
			t.Fatalf("%d syncs for %d batched copies through %d KiB: want no more syncs than copies (one when the puts fill under half the pieces)", bs.syncs, calls, stage>>10)
		}
	}
	piece, _ := stagePieces(stage)
	if calls < 3*n/piece {
		t.Fatalf("%d staging copies for %d bytes through %d KiB pieces", calls, 3*n, piece>>10)
	}
	// The counters of the proxy's time (logged when a connection closes)
	// count every staging copy, and time the copies and, batched, the syncs.
	s = c.Stats()
	if s.StageCopies != uint64(calls) || s.StageCopyNs == 0 || s.ExecNs < s.StageCopyNs || batch != (s.StageSyncNs > 0) || s.Signals != 1 || s.SignalNs == 0 {
		t.Fatalf("stats %+v: want %d staging copies timed, execution at least their time, syncs timed iff batched, one signal timed", s, calls)
	}
	if line := s.String(); !strings.Contains(line, fmt.Sprintf("3 staged (%d of %d bytes)", 3*n, 3*n)) || !strings.Contains(line, fmt.Sprintf("staging: %d copies", calls)) {
		t.Fatalf("the log line %q lacks the staged puts or the copies", line)
	}
}

func TestDeviceRegionNeedsMirrorOrStager(t *testing.T) {
	w := newWorld(t, 2, ConnOptions{})
	if w.ps[0].CUDA() {
		t.Skip("this UCX build handles CUDA memory")
	}
	dev := alloc(t, 4096)
	_, err := w.cs[0].Register(Mem{Addr: uintptr(dev.Ptr), Size: 4096, Kind: DeviceMem})
	if err == nil || !strings.Contains(err.Error(), "no CUDA support") || !strings.Contains(err.Error(), "Mirror") {
		t.Fatalf("register device memory without a mirror: %v", err)
	}
	// With a mirror but no Stager: registering works (it can be put
	// into), a put from it fails the connection with a clear error.
	mirror := alloc(t, 4096)
	sem := alloc(t, 4096)
	each(2, func(r int) {
		if r == 0 {
			if _, err := w.cs[0].Register(Mem{Addr: uintptr(dev.Ptr), Size: 4096, Kind: DeviceMem, Mirror: uintptr(mirror.Ptr)}); err != nil {
				t.Error(err)
			}
		} else if _, err := w.cs[1].Register(Mem{Addr: uintptr(sem.Ptr), Size: 4096}); err != nil {
			t.Error(err)
		}
		if err := w.cs[r].Share(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ch, err := w.cs[0].AddChannel(1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.cs[0].Put(ch, 0, 0, 0, 8, 64)
	err = w.cs[0].Flush(ch)
	if err == nil || !strings.Contains(err.Error(), "Stager") || !strings.Contains(err.Error(), "rank 0 -> rank 1") {
		t.Fatalf("put from device memory without a Stager: %v", err)
	}
}

// TestBadDescriptors: descriptors that name what does not exist fail the
// connection with an error naming the descriptor; nothing hangs after.
func TestBadDescriptors(t *testing.T) {
	cases := []struct {
		name string
		d    Desc
		want string
	}{
		{"channel", Desc{Op: OpSignal, Channel: 7}, "channel 7 of 1"},
		{"op", Desc{Op: 0x40}, "unknown operation bits 0x40"},
		{"src region", Desc{Op: OpPut, SrcRegion: 5, Size: 8}, "source region 5 of 1"},
		{"src range", Desc{Op: OpPut, SrcOff: 4090, Size: 8}, "source bytes [4090, 4098) beyond region 0 of 4096 bytes"},
		{"dst region", Desc{Op: OpPut, DstRegion: 3, Size: 8}, "destination region 3: the peer has shared 1"},
		{"dst range", Desc{Op: OpPut, DstOff: 1 << 40, Size: 8}, "beyond the peer's region 0 of 4096 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 2, ConnOptions{Capacity: 4})
			blks := []HostBlock{alloc(t, 4096), alloc(t, 4096)}
			each(2, func(r int) {
				if _, err := w.cs[r].Register(Mem{Addr: uintptr(blks[r].Ptr), Size: 4096}); err != nil {
					t.Error(err)
				}
				if err := w.cs[r].Share(context.Background()); err != nil {
					t.Error(err)
				}
			})
			c := w.cs[0]
			if _, err := c.AddChannel(1, 0, 0); err != nil {
				t.Fatal(err)
			}
			tk, err := c.Post(tc.d)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Wait(tk)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "descriptor 0") {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if !c.FIFO().Failed() {
				t.Fatal("the FIFO's error word is not set")
			}
			// Later posts fail at once; the FIFO keeps draining.
			if _, err := c.Post(Desc{Op: OpSignal}); err == nil {
				t.Fatal("post after the failure succeeded")
			}
		})
	}
}

// TestAddChannelChecks: the semaphore must be an aligned word inside a
// shared region of a peer.
func TestAddChannelChecks(t *testing.T) {
	w := newWorld(t, 2, ConnOptions{})
	blks := []HostBlock{alloc(t, 4096), alloc(t, 4096)}
	each(2, func(r int) {
		w.cs[r].Register(Mem{Addr: uintptr(blks[r].Ptr), Size: 4096})
		w.cs[r].Share(context.Background())
	})
	for _, tc := range []struct {
		peer   int
		region uint16
		off    uint64
		want   string
	}{
		{0, 0, 0, "not a peer"}, {1, 1, 0, "has shared 1 regions, not region 1"},
		{1, 0, 4, "8-byte aligned"}, {1, 0, 4096, "8-byte aligned, inside"},
	} {
		if _, err := w.cs[0].AddChannel(tc.peer, tc.region, tc.off); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("AddChannel(%d, %d, %d): %v, want %q", tc.peer, tc.region, tc.off, err, tc.want)
		}
	}
}

// fakeNet delivers a fixed hello: an address of a worker that is gone.
type fakeNet struct{ hello []byte }

func (f *fakeNet) Send(int, uint64, []byte) error { return nil }
func (f *fakeNet) Recv(context.Context, int, uint64) ([]byte, error) {
	return f.hello, nil
}

// TestUnreachablePeer: a peer address whose worker no longer exists fails
// Connect within the timeout, naming both ranks and UCX's status.
func TestUnreachablePeer(t *testing.T) {
	needUCX(t)
	gone, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	probe := alloc(t, 4096)
	m, err := gone.ctx.Map(uintptr(probe.Ptr), probe.Size, ucx.Host)
	if err != nil {
		t.Fatal(err)
	}
	key, err := m.PackRKey()
	if err != nil {
		t.Fatal(err)
	}
	m.Unmap()
	hello := encodeHello(helloMsg{rank: 1, addr: gone.w.Address(), probe: uint64(uintptr(probe.Ptr)), key: key})
	gone.Close()
	p, err := New(Options{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	_, err = p.Connect(context.Background(), &fakeNet{hello: hello}, 0, []int{1}, ConnOptions{})
	if time.Since(start) > 11*time.Second {
		t.Errorf("Connect took %v", time.Since(start))
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 || !strings.Contains(err.Error(), "UCX status") {
		t.Fatalf("Connect to a gone worker: %v", err)
	}
	t.Log(err)
}

// TestHCAListTooShort: MSCCLPP_HCA_DEVICES with fewer NICs than the ranks
// of the node is an error at New, before UCX starts.
func TestHCAListTooShort(t *testing.T) {
	needUCX(t)
	defer env.SetLookupForTest(func(k string) (string, bool) {
		if k == "MSCCLPP_HCA_DEVICES" {
			return "mlx5_0", true
		}
		return "", false
	})()
	_, err := New(Options{LocalRank: 1, LocalRanks: 2})
	if err == nil || !strings.Contains(err.Error(), "MSCCLPP_HCA_DEVICES lists 1 NIC(s) (mlx5_0) for 2 rank(s) on this node") {
		t.Fatalf("New: %v", err)
	}
}

// TestUCXMissing: THESEUS_UCX_LIB naming no file gives the error that
// names the package and the variable (in a process of its own: the
// library is loaded once per process; TestMain's childEnv).
func TestUCXMissing(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "THESEUS_UCX_LIB=/nonexistent/libucp.so.0", childEnv+"=missing")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"cannot load /nonexistent/libucp.so.0", "libucx0", "THESEUS_UCX_LIB"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestOrderedByFence(t *testing.T) {
	l := func(tl string, uses ...string) ucx.Lane { return ucx.Lane{Transport: tl, Device: "d", Uses: uses} }
	cases := []struct {
		name  string
		lanes []ucx.Lane
		want  bool
	}{
		{"tcp: both emulated on the am lane", []ucx.Lane{l("tcp", "am", "am_bw", "keepalive", "wireup")}, true},
		{"rc: one lane", []ucx.Lane{l("ud", "am", "wireup"), l("rc_mlx5", "rma_bw", "amo")}, true},
		{"multi-rail rma", []ucx.Lane{l("rc_mlx5", "am", "rma_bw", "amo"), l("rc_mlx5", "rma_bw")}, false},
		{"rma on hw, amo emulated", []ucx.Lane{l("tcp", "am"), l("cma", "rma_bw")}, false},
		{"amo on another lane", []ucx.Lane{l("sysv", "am", "amo"), l("posix", "amo")}, false},
		{"no lanes", nil, false},
	}
	for _, c := range cases {
		if got := orderedByFence(c.lanes); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestStrongOrder: with signals ordered by a flush of the puts (the path
// for endpoints whose lanes a fence does not order), a receiver that sees
// the semaphore reach k sees put k complete.
func TestStrongOrder(t *testing.T) {
	forceStrongOrder = true
	w := newWorld(t, 2, ConnOptions{Capacity: 8})
	forceStrongOrder = false
	const slot, n = 64 << 10, 32
	data := []HostBlock{alloc(t, slot*(n+1)), alloc(t, slot*(n+1))}
	sem := []HostBlock{alloc(t, 4096), alloc(t, 4096)}
	each(2, func(r int) {
		w.cs[r].Register(Mem{Addr: uintptr(data[r].Ptr), Size: data[r].Size})
		w.cs[r].Register(Mem{Addr: uintptr(sem[r].Ptr), Size: 4096})
		if err := w.cs[r].Share(context.Background()); err != nil {
			t.Error(err)
		}
	})
	ch, err := w.cs[0].AddChannel(1, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := bytesOf(data[0])
	for i := range src {
		src[i] = byte(i/slot + i)
	}
	errc := make(chan error, 1)
	go func() {
		dst := bytesOf(data[1])
		for k := range n {
			if err := w.cs[1].WaitSignal((*uint64)(sem[1].Ptr), uint64(k+1), 0); err != nil {
				errc <- err
				return
			}
			for i := range slot {
				if dst[slot*(k+1)+i] != src[slot*k+i] {
					errc <- fmt.Errorf("signal %d seen before byte %d of its put", k+1, i)
					return
				}
			}
		}
		errc <- nil
	}()
	for k := range n {
		if _, err := w.cs[0].Post(Desc{Op: OpPut | OpSignal, Channel: ch, SrcOff: uint64(slot * k), DstOff: uint64(slot * (k + 1)), Size: slot}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.cs[0].Flush(ch); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s := w.cs[0].Stats(); s.OrderFlushes != n || s.Fences != 0 || s.Signals != n {
		t.Fatalf("stats %+v: want %d ordering flushes, no fences", s, n)
	}
}

// TestForeignProducer: a producer that only writes the FIFO's memory, as a
// GPU threadblock does (no Post, no Kick, no help): the proxy's goroutine
// alone drains it, including after it has gone to sleep.
func TestForeignProducer(t *testing.T) {
	w := newWorld(t, 2, ConnOptions{Capacity: 4})
	blks := []HostBlock{alloc(t, 1<<16), alloc(t, 1<<16)}
	each(2, func(r int) {
		w.cs[r].Register(Mem{Addr: uintptr(blks[r].Ptr), Size: blks[r].Size})
		w.cs[r].Share(context.Background())
	})
	ch, err := w.cs[0].AddChannel(1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := bytesOf(blks[0])
	for i := range src {
		src[i] = byte(i * 3)
	}
	f := w.cs[0].FIFO()
	time.Sleep(10 * time.Millisecond) // the proxy's goroutine is asleep by now (idle > 2 ms)
	const n = 100
	deadline := time.Now().Add(20 * time.Second)
	for k := range n {
		tk := atomic.AddUint64(f.head, 1) - 1
		for tk-f.Tail() >= uint64(f.Capacity()) { // the device's loop: no help
			if time.Now().After(deadline) {
				t.Fatalf("no free slot for ticket %d after 20 s", tk)
			}
			osYield()
		}
		op := OpPut
		if k == n-1 {
			op |= OpSignal | OpFlush
		}
		f.post(tk, Desc{Op: op, Channel: ch, SrcOff: uint64(64 * k), DstOff: uint64(8 + 64*k), Size: 64})
	}
	for f.Tail() < n {
		if time.Now().After(deadline) {
			t.Fatalf("tail %d of %d after 20 s", f.Tail(), n)
		}
		osYield()
	}
	if f.Failed() {
		t.Fatal(w.cs[0].Err())
	}
	dst := bytesOf(blks[1])
	if got := *(*uint64)(blks[1].Ptr); got != 1 {
		t.Fatalf("semaphore %d, want 1", got)
	}
	for i := range 64 * n {
		if dst[8+i] != src[i] {
			t.Fatalf("byte %d = %d, want %d", i, dst[8+i], src[i])
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// captureLog sends the log at INFO for subsystems s into the buffer it
// returns, until the test ends.
func captureLog(t *testing.T, s log.Subsys) *syncBuffer {
	buf := &syncBuffer{}
	log.SetOutput(buf)
	log.SetLevel(log.Info, s)
	t.Cleanup(func() {
		log.SetLevel(log.Warn, log.Init)
		log.SetOutput(os.Stderr)
	})
	return buf
}

// TestInitLog: the INIT lines name UCX, its version and the transport of
// each connection (as NCCL's "NET/IB" lines do).
func TestInitLog(t *testing.T) {
	buf := captureLog(t, log.Init)
	newWorld(t, 2, ConnOptions{})
	out := buf.String()
	maj, min, _ := ucx.Version()
	for _, want := range []string{fmt.Sprintf("INFO INIT NET/UCX: UCX %d.%d.", maj, min),
		"INFO INIT rank 0 -> rank 1: NET/UCX tcp/lo (RMA and atomics as active messages); signals ordered by fence",
		"INFO INIT rank 1 -> rank 0: NET/UCX tcp/lo"} {
		if !strings.Contains(out, want) {
			t.Errorf("INIT log lacks %q:\n%s", want, out)
		}
	}
}

// TestCloseLog: with NET at INFO every connection logs its counters when
// it closes, an idle one too, naming its peer and tag (a fresh user found
// idle lanes missing: only connections that had executed a descriptor
// logged, and the line named no peer).
func TestCloseLog(t *testing.T) {
	buf := captureLog(t, log.Net)
	w := newWorld(t, 2, ConnOptions{Tag: 7})
	for _, c := range w.cs {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	out := buf.String()
	for _, want := range []string{"rank 0: NET/UCX connection closed (to rank(s) [1], tag 7: its lane;",
		"rank 1: NET/UCX connection closed (to rank(s) [0], tag 7: its lane;", "): 0 descriptors, 0 puts direct and 0 staged"} {
		if !strings.Contains(out, want) {
			t.Errorf("the close log lacks %q:\n%s", want, out)
		}
	}
}

// TestBadProxyEnv: a malformed, negative or too small THESEUS_PROXY_SPIN,
// THESEUS_PROXY_STAGE_BYTES or THESEUS_PROXY_STAGE_BATCH is an error at
// New naming the variable (before UCX starts), not the default silently;
// a spin too large for a time.Duration is env.MaxTimeout, not an
// overflowed, negative one.
func TestBadProxyEnv(t *testing.T) {
	for _, c := range []struct{ key, val, want string }{
		{"THESEUS_PROXY_SPIN", "abc", `THESEUS_PROXY_SPIN="abc": not an integer`},
		{"THESEUS_PROXY_SPIN", "-5", "THESEUS_PROXY_SPIN=-5: want microseconds, 0 or more"},
		{"THESEUS_PROXY_SPIN", "1ms", `THESEUS_PROXY_SPIN="1ms": not an integer`},
		{"THESEUS_PROXY_STAGE_BYTES", "lots", `THESEUS_PROXY_STAGE_BYTES: bad size "lots"`},
		{"THESEUS_PROXY_STAGE_BYTES", "-1MiB", `THESEUS_PROXY_STAGE_BYTES: bad size "-1MiB"`},
		{"THESEUS_PROXY_STAGE_BYTES", "NaN", `THESEUS_PROXY_STAGE_BYTES: bad size "NaN"`},
		{"THESEUS_PROXY_STAGE_BYTES", "1", "THESEUS_PROXY_STAGE_BYTES=1: want at least 2 bytes"},
		{"THESEUS_PROXY_STAGE_BYTES", "1e30GB", `THESEUS_PROXY_STAGE_BYTES: size "1e30GB" too large`},
		{"THESEUS_PROXY_STAGE_BATCH", "maybe", `THESEUS_PROXY_STAGE_BATCH="maybe": not a boolean`},
	} {
		restore := env.SetLookupForTest(func(k string) (string, bool) {
			if k == c.key {
				return c.val, true
			}
			return "", false
		})
		p, err := New(Options{})
		restore()
		if err == nil {
			p.Close()
			t.Errorf("%s=%s: New succeeded", c.key, c.val)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s=%s: New: %v; want %q", c.key, c.val, err, c.want)
		}
	}
	for val, want := range map[string]time.Duration{"": 2 * time.Millisecond, "0": 0, "150": 150 * time.Microsecond, "9223372036854775807": env.MaxTimeout} {
		restore := env.SetLookupForTest(func(k string) (string, bool) {
			if k == "THESEUS_PROXY_SPIN" && val != "" {
				return val, true
			}
			return "", false
		})
		got, err := spinFromEnv()
		restore()
		if err != nil || got != want {
			t.Errorf("THESEUS_PROXY_SPIN=%q: %v, %v; want %v", val, got, err, want)
		}
	}
}
