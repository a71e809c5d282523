package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/cuda"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/examples/contexts"
	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/comm"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/theseus"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// The kernel's copy of the point-to-point contract's numbers is
// runtime/launch's (no GPU needed).
func TestP2PContract(t *testing.T) {
	if cuda.P2PContract() != 0 {
		t.Fatal("kernel/launch.h's point-to-point numbers differ from runtime/launch's p2p.go")
	}
	if cuda.P2PMaxMatrix != comm.MaxAlltoAllvRanks {
		t.Fatalf("THESEUS_P2P_MAX_MATRIX %d, comm.MaxAlltoAllvRanks %d", cuda.P2PMaxMatrix, comm.MaxAlltoAllvRanks)
	}
}

// p2pComms makes n in-process ranks on the CUDA backend (the embedded
// default context); opts adjusts the configuration.
func p2pComms(t *testing.T, n int, opts func(*theseus.Config)) ([]*theseus.Comm, *cuda.Backend) {
	t.Helper()
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	cfg := theseus.Config{Backend: "cuda", ContextDir: dir}
	cfg.Options.Timeout = 20 * time.Second
	if opts != nil {
		opts(&cfg)
	}
	comms, err := theseus.NewLocalComms(context.Background(), n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	be, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	return comms, be.(*cuda.Backend)
}

// p2pOp is one send or receive of a test group (count in elements).
type p2pOp struct {
	recv  bool
	peer  int
	count int64
	dt    theseus.DataType
	off   int64 // the buffer's offset from a 256-aligned allocation: any alignment
}

// p2pByte is byte i of the k-th transfer from src to dst in repetition rep
// (the host tests' pattern).
func p2pByte(src, dst, k, rep int, i int64) byte {
	return byte(int64(src*37+dst*11+k*5+rep*3) + i*7 + i>>8)
}

// runP2P runs each rank's group ops(r) reps times on the CUDA backend and
// checks every received byte (the host backend's results, which the host
// tests check the same way).
func runP2P(t *testing.T, comms []*theseus.Comm, be *cuda.Backend, name string, ops func(r int) []p2pOp, reps int) {
	t.Helper()
	n := len(comms)
	type buf struct {
		p, base device.Ptr
		nb      int64
		k       int
	}
	bufs := make([][]buf, n)
	for r := range n {
		seen := map[[2]int]int{}
		for _, o := range ops(r) {
			nb := o.count * int64(o.dt.Size())
			base, err := be.Alloc(nb + 512)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { be.Free(base) })
			key := [2]int{o.peer, 0}
			if o.recv {
				key[1] = 1
			}
			bufs[r] = append(bufs[r], buf{p: base + device.Ptr(o.off), base: base, nb: nb, k: seen[key]})
			seen[key]++
		}
	}
	for rep := range reps {
		err := onEach(n, func(r int) error {
			os := ops(r)
			for i, o := range os {
				b := bufs[r][i]
				data := make([]byte, b.nb)
				if !o.recv {
					for j := range data {
						data[j] = p2pByte(r, o.peer, b.k, rep, int64(j))
					}
				}
				if b.nb > 0 {
					if err := be.Upload(b.p, data); err != nil {
						return err
					}
				}
			}
			c := comms[r]
			c.GroupStart()
			for i, o := range os {
				if o.recv {
					c.Recv(bufs[r][i].p, o.count, o.dt, o.peer, nil)
				} else {
					c.Send(bufs[r][i].p, o.count, o.dt, o.peer, nil)
				}
			}
			if err := c.GroupEnd(); err != nil {
				return err
			}
			for i, o := range os {
				b := bufs[r][i]
				if !o.recv || b.nb == 0 {
					continue
				}
				got := make([]byte, b.nb)
				if err := be.Download(got, b.p); err != nil {
					return err
				}
				for j, v := range got {
					if want := p2pByte(o.peer, r, b.k, rep, int64(j)); v != want {
						return fmt.Errorf("rep %d: receive %d from rank %d: byte %d of %d = %d, want %d", rep, b.k, o.peer, j, b.nb, v, want)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
}

func both(ps, pr int, count int64, dt theseus.DataType, offS, offR int64) []p2pOp {
	return []p2pOp{{peer: ps, count: count, dt: dt, off: offS}, {recv: true, peer: pr, count: count, dt: dt, off: offR}}
}

// TestP2PPatternsGPU: the point-to-point engine's kernel on one GPU, 2 and
// 4 ranks as goroutines: a ring (small, and 64 MiB, which goes zero-copy
// from the second repetition on), all-pairs of random sizes (zeros
// included), sends to oneself, several sends to one peer, buffers of
// unequal alignment, and AlltoAllv of a random and a skewed matrix; every
// byte checked, as the host tests check the host backend's.
func TestP2PPatternsGPU(t *testing.T) {
	gputest.Require(t)
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			comms, be := p2pComms(t, n, nil)
			next := func(r int) int { return (r + 1) % n }
			prev := func(r int) int { return (r + n - 1) % n }
			runP2P(t, comms, be, "ring", func(r int) []p2pOp { return both(next(r), prev(r), 70001, theseus.Float32, 0, 0) }, 3)
			runP2P(t, comms, be, "ring 64 MiB", func(r int) []p2pOp { return both(next(r), prev(r), 64<<20, theseus.Uint8, 0, 0) }, 3)
			runP2P(t, comms, be, "unaligned", func(r int) []p2pOp { return both(next(r), prev(r), 300001, theseus.Int8, 3, 5) }, 2)
			// Zero-copy shared with the idle lanes (kernel "Helping"): a ring
			// of an odd size at a 16-byte-misaligned address (a partial last
			// chunk and piece), and one rank sending to all others, whose
			// receive lanes have nothing to receive and only help. Repeated,
			// so that the help records' later jobs and launches are checked.
			runP2P(t, comms, be, "ring 40 MiB odd, helped", func(r int) []p2pOp { return both(next(r), prev(r), 40<<20+12345, theseus.Uint8, 3, 3) }, 3)
			runP2P(t, comms, be, "one to all 24 MiB, helped", func(r int) []p2pOp {
				var o []p2pOp
				for q := 1; q < n; q++ {
					switch r {
					case 0:
						o = append(o, p2pOp{peer: q, count: 6<<20 + int64(q), dt: theseus.Float32})
					case q:
						o = append(o, p2pOp{recv: true, peer: 0, count: 6<<20 + int64(q), dt: theseus.Float32})
					}
				}
				return o
			}, 3)
			runP2P(t, comms, be, "all-pairs", allPairsOps(n, 5), 2)
			runP2P(t, comms, be, "self and thrice", func(r int) []p2pOp {
				o := both(r, r, 5003, theseus.Int32, 0, 0)
				for _, c := range []int64{100, 2 << 20, 3} {
					o = append(o, p2pOp{peer: next(r), count: c, dt: theseus.Float16})
				}
				for _, c := range []int64{100, 2 << 20, 3} {
					o = append(o, p2pOp{recv: true, peer: prev(r), count: c, dt: theseus.Float16})
				}
				return o
			}, 2)
			for _, skew := range []bool{false, true} {
				if err := onEach(n, func(r int) error { return alltoallvGPU(comms[r], be, skew) }); err != nil {
					t.Fatalf("alltoallv skew=%v: %v", skew, err)
				}
			}
			for r, c := range comms {
				if st := c.Stats().Executor.P2P; st.Imports == 0 {
					t.Errorf("rank %d imported no peer buffer (no zero-copy): %+v", r, st)
				}
			}
		})
	}
}

// TestP2PNoHelpGPU: with THESEUS_P2P_HELP=0 (the A/B switch) the engine's
// zero-copy writes are each send lane's alone, and the bytes are the same.
func TestP2PNoHelpGPU(t *testing.T) {
	gputest.Require(t)
	restore := env.SetLookupForTest(func(k string) (string, bool) {
		if k == "THESEUS_P2P_HELP" {
			return "0", true
		}
		return os.LookupEnv(k)
	})
	defer restore()
	comms, be := p2pComms(t, 2, nil)
	runP2P(t, comms, be, "ring 40 MiB odd, not helped", func(r int) []p2pOp { return both(1-r, 1-r, 40<<20+12345, theseus.Uint8, 3, 3) }, 3)
	for r, c := range comms {
		if st := c.Stats().Executor.P2P; st.Imports == 0 {
			t.Errorf("rank %d imported no peer buffer (no zero-copy): %+v", r, st)
		}
	}
}

// alltoallvGPU runs an AlltoAllv (a random matrix, or 4 hot experts) twice
// on c, the matrix's GPU copy in device memory, and checks what it got.
func alltoallvGPU(c *theseus.Comm, be *cuda.Backend, skew bool) error {
	n, r := c.NRanks(), c.Rank()
	rng := rand.New(rand.NewSource(9))
	m := make([]int64, n*n)
	for i := range m {
		switch {
		case skew && i%n < min(4, n):
			m[i] = 100000 + int64(i)
		case skew:
			m[i] = 16
		case rng.Intn(4) != 0:
			m[i] = int64(rng.Intn(200000))
		}
	}
	var sn, rn int64
	for j := range n {
		sn += m[r*n+j]
		rn += m[j*n+r]
	}
	send, err := be.Alloc(2*sn + 64)
	if err != nil {
		return err
	}
	defer be.Free(send)
	recv, err := be.Alloc(2*rn + 64)
	if err != nil {
		return err
	}
	defer be.Free(recv)
	gpu, err := be.Alloc(int64(8 * n * n))
	if err != nil {
		return err
	}
	defer be.Free(gpu)
	if err := be.Upload(gpu, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(m))), 8*n*n)); err != nil {
		return err
	}
	for rep := range 2 {
		in := make([]byte, 2*sn)
		off := int64(0)
		for j := range n {
			for k := int64(0); k < 2*m[r*n+j]; k++ {
				in[off+k] = p2pByte(r, j, 9, rep, k)
			}
			off += 2 * m[r*n+j]
		}
		if sn > 0 {
			if err := be.Upload(send, in); err != nil {
				return err
			}
		}
		if err := c.AlltoAllv(send, recv, m, gpu, theseus.Float16, nil); err != nil {
			return err
		}
		out := make([]byte, 2*rn)
		if rn > 0 {
			if err := be.Download(out, recv); err != nil {
				return err
			}
		}
		off = 0
		for i := range n {
			for k := int64(0); k < 2*m[i*n+r]; k++ {
				if want := p2pByte(i, r, 9, rep, k); out[off+k] != want {
					return fmt.Errorf("rep %d: from rank %d: byte %d = %d, want %d", rep, i, k, out[off+k], want)
				}
			}
			off += 2 * m[i*n+r]
		}
	}
	return nil
}

// A send and a receive of different counts: ncclInvalidUsage on both,
// naming the pair, within the timeout; nothing written past the receive.
// The send (64 MiB) is larger than the FIFO's room (16 MiB with the
// built-in 32 channels for 2 ranks), so the sender is still sending when
// the receiver's error post arrives (a send that fits the FIFO completes
// before the receive looks at it, as in NCCL).
func TestP2PMismatchGPU(t *testing.T) {
	gputest.Require(t)
	comms, be := p2pComms(t, 2, func(c *theseus.Config) { c.Options.Timeout = 10 * time.Second })
	const sent, got = 16 << 20, 2 << 20
	buf := make([]device.Ptr, 2)
	for r := range buf {
		p, err := be.Alloc(4 * sent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Free(p) })
		buf[r] = p
	}
	start := time.Now()
	errs := make([]error, 2)
	onEach(2, func(r int) error {
		if r == 0 {
			errs[r] = comms[r].Send(buf[r], sent, theseus.Float32, 1, nil)
		} else {
			errs[r] = comms[r].Recv(buf[r], got, theseus.Float32, 0, nil)
		}
		return nil
	})
	if el := time.Since(start); el > 8*time.Second {
		t.Errorf("took %v", el)
	}
	for r, err := range errs {
		var e *theseus.Error
		if theseus.CodeOf(err) != theseus.InvalidUsage || !errors.As(err, &e) || len(e.Peers) != 1 || e.Peers[0] != 1-r || !strings.Contains(err.Error(), "disagree") {
			t.Errorf("rank %d: %v, want ncclInvalidUsage naming rank %d", r, err, 1-r)
		}
	}
	tail := make([]byte, 4*(sent-got))
	if err := be.Download(tail, buf[1]+4*got); err != nil {
		t.Fatal(err)
	}
	if strings.Trim(string(tail), "\x00") != "" {
		t.Error("bytes written past the receive")
	}
}

// A warmed-up group (a ring of two ranks) captured into a CUDA graph per
// rank (global capture mode, PyTorch's) replays correctly, each replay with
// new data: pipeline schedules capture send/recv. 32 MiB each way: zero-copy
// shared with the idle lanes (1 MiB per channel, eight pieces), whose help
// records persist across replays; the checks follow 1 to 4 replays in a
// row.
func TestP2PGraphCapture(t *testing.T) {
	gputest.Require(t)
	const n, count = 2, 8 << 20
	comms, streams, be := localComms(t, n)
	send, recv := make([]device.Ptr, n), make([]device.Ptr, n)
	for r := range n {
		var err error
		if send[r], err = be.Alloc(4 * count); err != nil {
			t.Fatal(err)
		}
		if recv[r], err = be.Alloc(4 * count); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Free(send[r]); be.Free(recv[r]) })
	}
	group := func(r int) error {
		c := comms[r]
		c.GroupStart()
		c.Send(send[r], count, theseus.Float32, (r+1)%n, streams[r])
		c.Recv(recv[r], count, theseus.Float32, (r+n-1)%n, streams[r])
		return c.GroupEnd()
	}
	eagerCalls(t, streams, 3, group) // connections, offers and imports: zero-copy from here
	execs := capture(t, streams, driver.CaptureModeGlobal, group)
	for rep := range 4 {
		for r := range n {
			data := make([]byte, 4*count)
			for j := range data {
				data[j] = p2pByte(r, (r+1)%n, 0, rep, int64(j))
			}
			if err := be.Upload(send[r], data); err != nil {
				t.Fatal(err)
			}
		}
		if err := replay(streams, execs, 1+rep); err != nil {
			t.Fatal(err)
		}
		for r := range n {
			got := make([]byte, 4*count)
			if err := be.Download(got, recv[r]); err != nil {
				t.Fatal(err)
			}
			p := (r + n - 1) % n
			for j, v := range got {
				if want := p2pByte(p, r, 0, rep, int64(j)); v != want {
					t.Fatalf("replay %d rank %d: byte %d = %d, want %d", rep, r, j, v, want)
				}
			}
		}
	}
}

// TestP2PAcrossNodesGPU: the kernel's engine between 2 simulated nodes of 2
// ranks on one GPU (goroutines of this process, each node its own host id
// and so its own proxy; UCX over TCP unless UCX_TLS says otherwise: device
// memory staged through pinned host memory when UCX lacks CUDA support):
// a ring both ways (one neighbour on this node, one on the other; small,
// and 24 MiB, which cycles every FIFO slot many times), all-pairs of random
// sizes and AlltoAllv (random and skewed), every byte checked; each rank's
// pairs across nodes are port-channel connections (Links); then a send and
// a receive across nodes that disagree fail both ends with
// ncclInvalidUsage naming the pair, within the timeout.
func TestP2PAcrossNodesGPU(t *testing.T) {
	gputest.Require(t)
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
	if _, ok := os.LookupEnv("UCX_TLS"); !ok {
		t.Setenv("UCX_TLS", "tcp")
	}
	const nodes, per, n = 2, 2, 4
	dir := t.TempDir()
	if err := contexts.Materialize(dir); err != nil {
		t.Fatal(err)
	}
	id, err := bootstrap.NewLoopbackUniqueID(bootstrap.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	comms := make([]*theseus.Comm, n)
	err = onEach(n, func(r int) error {
		cfg := theseus.Config{Backend: "cuda", ContextDir: dir}
		cfg.Options.Timeout = 20 * time.Second
		cfg.Options.HostID = fmt.Sprintf("node%d", r/per)
		var err error
		comms[r], err = theseus.NewComm(context.Background(), id, r, n, cfg)
		return err
	})
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Destroy()
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := cuda.Open()
	if err != nil {
		t.Fatal(err)
	}
	be := b.(*cuda.Backend)
	next := func(r int) int { return (r + 1) % n }
	prev := func(r int) int { return (r + n - 1) % n }
	runP2P(t, comms, be, "ring", func(r int) []p2pOp {
		return append(both(next(r), prev(r), 70001, theseus.Float32, 0, 0), both(prev(r), next(r), 4099, theseus.Int8, 3, 5)...)
	}, 3)
	runP2P(t, comms, be, "ring 24 MiB", func(r int) []p2pOp { return both(next(r), prev(r), 24<<20, theseus.Uint8, 0, 0) }, 2)
	runP2P(t, comms, be, "all-pairs", allPairsOps(n, 7), 2)
	for _, skew := range []bool{false, true} {
		if err := onEach(n, func(r int) error { return alltoallvGPU(comms[r], be, skew) }); err != nil {
			t.Fatalf("alltoallv skew=%v: %v", skew, err)
		}
	}
	for r, c := range comms {
		if st := c.Stats().Executor.P2P; st.Links != per {
			t.Errorf("rank %d: %d connections across nodes, want %d (%+v)", r, st.Links, per, st)
		}
	}
	// Rank 1 sends 64 MiB to rank 2 (another node), which receives 8 MiB:
	// larger than the FIFO's room, so the sender is still sending when the
	// receiver's error post arrives through the proxy.
	const sent, got = 16 << 20, 2 << 20
	buf := make([]device.Ptr, n)
	for _, r := range []int{1, 2} {
		p, err := be.Alloc(4 * sent)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { be.Free(p) })
		buf[r] = p
	}
	start := time.Now()
	errs := make([]error, n)
	onEach(n, func(r int) error {
		switch r {
		case 1:
			errs[r] = comms[r].Send(buf[r], sent, theseus.Float32, 2, nil)
		case 2:
			errs[r] = comms[r].Recv(buf[r], got, theseus.Float32, 1, nil)
		}
		return nil
	})
	if el := time.Since(start); el > 18*time.Second {
		t.Errorf("the mismatch took %v", el)
	}
	for _, r := range []int{1, 2} {
		var e *theseus.Error
		if theseus.CodeOf(errs[r]) != theseus.InvalidUsage || !errors.As(errs[r], &e) || len(e.Peers) != 1 || e.Peers[0] != 3-r || !strings.Contains(errs[r].Error(), "disagree") {
			t.Errorf("rank %d: %v, want ncclInvalidUsage naming rank %d", r, errs[r], 3-r)
		}
	}
}

// allPairsOps is every rank's sends to and receives from every rank (itself
// included) of random bfloat16 counts below 1 Mi, a third of them zero,
// from one matrix drawn with seed: what each pair sends, the other
// receives.
func allPairsOps(n int, seed int64) func(r int) []p2pOp {
	return func(r int) []p2pOp {
		rng := rand.New(rand.NewSource(seed))
		m := make([]int64, n*n)
		for i := range m {
			if rng.Intn(3) != 0 {
				m[i] = int64(rng.Intn(1 << 20))
			}
		}
		var o []p2pOp
		for k := range n {
			q := (r + k) % n
			o = append(o, p2pOp{peer: q, count: m[r*n+q], dt: theseus.Bfloat16}, p2pOp{recv: true, peer: q, count: m[q*n+r], dt: theseus.Bfloat16})
		}
		return o
	}
}

// TestP2PShiftedGPU: a ring of 2 ranks whose buffers move by one message
// per call within one allocation each, as nccl-tests moves them
// (startColl), at 8 B (eager: the FIFO), 4 KiB and 1 MiB (zero-copy and
// helped once the offers are in): after a shape's first call every call at
// new buffers is a rebased launch (Stats().Executor.P2P.Rebases: the
// kernel adds the launch argument's buffer offsets, kernel/p2p.cuh
// p2p_base), the receive buffer moving with the send buffer or staying
// (unequal send and receive offsets), eager and captured into a CUDA graph
// (one pass of positions, replayed twice); every byte checked.
func TestP2PShiftedGPU(t *testing.T) {
	gputest.Require(t)
	const n, steps = 2, 12
	comms, streams, be := localComms(t, n)
	for _, nb := range []int64{8, 4 << 10, 1 << 20} {
		for _, fixed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dB/fixed-recv=%v", nb, fixed), func(t *testing.T) {
				send, recv := make([]device.Ptr, n), make([]device.Ptr, n)
				for r := range n {
					var err error
					if send[r], err = be.Alloc(steps * nb); err != nil {
						t.Fatal(err)
					}
					if recv[r], err = be.Alloc(steps * nb); err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { be.Free(send[r]); be.Free(recv[r]) })
				}
				recvAt := func(i int) int64 {
					if fixed {
						return 0
					}
					return int64(i) * nb
				}
				group := func(r, i int) error {
					c := comms[r]
					c.GroupStart()
					c.Send(send[r]+device.Ptr(int64(i)*nb), nb, theseus.Uint8, 1-r, streams[r])
					c.Recv(recv[r]+device.Ptr(recvAt(i)), nb, theseus.Uint8, 1-r, streams[r])
					return c.GroupEnd()
				}
				fill := func(pass int) error {
					return onEach(n, func(r int) error {
						data := make([]byte, steps*nb)
						for j := range data {
							data[j] = p2pByte(r, 1-r, 0, pass, int64(j))
						}
						return be.Upload(send[r], data)
					})
				}
				// check: rank r's receive of call i holds its peer's bytes of
				// position i.
				check := func(pass, i int) error {
					return onEach(n, func(r int) error {
						got := make([]byte, nb)
						if err := be.Download(got, recv[r]+device.Ptr(recvAt(i))); err != nil {
							return err
						}
						for j, v := range got {
							if want := p2pByte(1-r, r, 0, pass, int64(i)*nb+int64(j)); v != want {
								return fmt.Errorf("pass %d call %d rank %d: byte %d = %d, want %d", pass, i, r, j, v, want)
							}
						}
						return nil
					})
				}
				eagerCalls(t, streams, 3, func(r int) error { return group(r, 0) }) // connections, offers, imports
				r0 := comms[0].Stats().Executor.P2P.Rebases
				for pass := range 2 {
					if err := fill(pass); err != nil {
						t.Fatal(err)
					}
					for i := range steps {
						eagerCalls(t, streams, 1, func(r int) error { return group(r, i) })
						if err := check(pass, i); err != nil {
							t.Fatal(err)
						}
					}
				}
				if got := comms[0].Stats().Executor.P2P.Rebases - r0; got < steps-1 {
					t.Errorf("%d rebased launches in %d calls at new buffers, want at least %d", got, steps-1, steps-1)
				}
				execs := capture(t, streams, driver.CaptureModeGlobal, func(r int) error {
					for i := range steps {
						if err := group(r, i); err != nil {
							return err
						}
					}
					return nil
				})
				for rep := range 2 {
					pass := 2 + rep
					if err := fill(pass); err != nil {
						t.Fatal(err)
					}
					if err := replay(streams, execs, 1); err != nil {
						t.Fatal(err)
					}
					for i := range steps {
						if fixed && i < steps-1 {
							continue // (overwritten by the later calls)
						}
						if err := check(pass, i); err != nil {
							t.Fatalf("replay %d: %v", rep, err)
						}
					}
				}
			})
		}
	}
}
