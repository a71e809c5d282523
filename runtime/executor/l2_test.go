//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
)

// exec runs one request per rank with the given buffers and returns each
// rank's error (the call's, or the launch's) and the time it took.
func (w *world) exec(s *Schedule, c devicetest.Case, bs []bufs) ([]error, []time.Duration) {
	took := make([]time.Duration, w.n)
	errs := w.each(func(r int) error {
		start := time.Now()
		defer func() { took[r] = time.Since(start) }()
		if err := w.call(r, request(c, bs[r]), s, w.st[r]); err != nil {
			return err
		}
		return w.st[r].Synchronize()
	})
	return errs, took
}

// refill writes c's input for rank r into b's input (and a pattern into
// its output), as a caller that reuses its buffers does.
func refill(t *testing.T, c devicetest.Case, r int, b bufs) {
	t.Helper()
	in, out := c.Bytes(r)
	if in > 0 {
		m, err := host.Bytes(b.send, in)
		if err != nil {
			t.Fatal(err)
		}
		copy(m, c.Input(r))
	}
	if b.send == b.recv {
		return // in place: the output is the input
	}
	for i := range b.out[:out] {
		b.out[i] = 0xa5
	}
}

// TestKnownIssue3 turns the seed's Known Issue 3 around: for a schedule
// that reaches the peers' buffers (the one-shot Simple allreduce reads
// them), rank 0 keeps its buffers — its calls are repeats, launched from
// their plans, with no walk and no message — while rank 1 moves to new
// allocations, to other places in them, in place and back, and both
// complete with exact results (every call has new inputs, so a launch that
// read a stale buffer would show). Rank 1 pushes where its buffers went
// (l2.go) to rank 0's service goroutine, which repoints rank 0's prepared
// launch; rank 0 pushes nothing after its first call. Then the other way
// round, and both moving at once.
func TestKnownIssue3(t *testing.T) {
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	w.usePlans()
	one := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	base := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 256, NRanks: 2}
	big := base
	big.Count = 1024
	a := []bufs{w.alloc(big, 0, false), w.alloc(big, 1, false)}
	b := []bufs{w.alloc(big, 0, false), w.alloc(big, 1, false)}
	// shift is b moved into its allocation by k elements.
	shift := func(x bufs, k int64) bufs {
		return bufs{send: x.send + device.Ptr(4*k), recv: x.recv + device.Ptr(4*k), out: x.out[4*k:]}
	}
	inPlace := func(x bufs) bufs { return bufs{send: x.send, recv: x.send, out: mustBytes(t, x.send, 4*base.Count)} }
	step := 0
	run := func(what string, bs []bufs, inplace []bool) {
		t.Helper()
		step++
		errs := w.each(func(r int) error {
			c := base
			c.Seed = uint64(step)
			c.InPlace = inplace != nil && inplace[r]
			refill(t, c, r, bs[r])
			if err := w.call(r, request(c, bs[r]), one, w.st[r]); err != nil {
				return err
			}
			if err := w.st[r].Synchronize(); err != nil {
				return err
			}
			if got := devicetest.Wrong(bs[r].out[:4*c.Count], c.Expected(r), 4); got != 0 {
				return fmt.Errorf("%d of %d elements wrong", got, c.Count)
			}
			return nil
		})
		for r, err := range errs {
			if err != nil {
				t.Errorf("%s, rank %d: %v", what, r, err)
			}
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	run("first call", []bufs{a[0], a[1]}, nil)
	run("a paired switch", []bufs{b[0], b[1]}, nil)
	plans0 := w.ex[0].Stats().PlanLaunches
	pushes0 := w.ex[0].Stats().L2Pushes
	moves := []struct {
		what    string
		bs      bufs
		inplace bool
	}{
		{"rank 1 to its old allocation", a[1], false},
		{"rank 1 back", b[1], false},
		{"rank 1 to a new allocation", w.alloc(big, 1, false), false},
		{"rank 1 64 elements into it", shift(a[1], 64), false},
		{"rank 1 back to where it was", b[1], false},
	}
	for i := range 3 {
		for _, m := range moves {
			run(fmt.Sprintf("round %d: %s", i, m.what), []bufs{b[0], m.bs}, nil)
		}
	}
	// In place (a request property every rank shares: ir.md §3): rank 0
	// keeps one buffer, rank 1 moves.
	both := []bool{true, true}
	run("in place", []bufs{inPlace(a[0]), inPlace(a[1])}, both)
	inMoves := []bufs{inPlace(b[1]), inPlace(shift(a[1], 128)), inPlace(a[1]), inPlace(w.alloc(big, 1, false))}
	for _, m := range inMoves {
		run("in place, rank 1 moving", []bufs{inPlace(a[0]), m}, both)
	}
	st0 := w.ex[0].Stats()
	if got := st0.PlanLaunches - plans0; got != 3*uint64(len(moves))+uint64(len(inMoves)) {
		t.Errorf("rank 0 launched %d of its %d repeats from their plan", got, 3*len(moves)+len(inMoves))
	}
	// Rank 0 pushed once: when it went in place itself.
	if st0.L2Pushes != pushes0+1 {
		t.Errorf("rank 0, which kept its buffers but once, pushed %d times", st0.L2Pushes-pushes0)
	}
	if st0.Rebinds == 0 || st0.PeerRequests < 3*uint64(len(moves)) {
		t.Errorf("rank 0: %d rebinds, %d requests served; want rank 1's moves", st0.Rebinds, st0.PeerRequests)
	}
	// The other way round, then both moving at once.
	for i, bs := range [][]bufs{{a[0], b[1]}, {shift(a[0], 32), b[1]}, {b[0], b[1]}, {a[0], a[1]}, {shift(b[0], 8), shift(a[1], 16)}} {
		run(fmt.Sprintf("case %d", i), bs, nil)
	}
}

func mustBytes(t *testing.T, p device.Ptr, n int64) []byte {
	t.Helper()
	b, err := host.Bytes(p, n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// peerOf finds a PeerRank() >= 0 in err's chain.
func peerOf(err error) int {
	for err != nil {
		if pe, ok := err.(interface{ PeerRank() int }); ok && pe.PeerRank() >= 0 {
			return pe.PeerRank()
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					if p := peerOf(e); p >= 0 {
						return p
					}
				}
			}
			return -1
		}
		err = u.Unwrap()
	}
	return -1
}

// TestScratchOnlyNeedsNoPairing: a schedule whose channels are all
// scratch-to-scratch exchanges nothing at L2, so ranks may change buffers
// independently (the seed's workaround for Known Issue 3).
func TestScratchOnlyNeedsNoPairing(t *testing.T) {
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	ring := compile(t, 0, "ring", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 256, NRanks: 2, Seed: 1}
	a := []bufs{w.alloc(c, 0, false), w.alloc(c, 1, false)}
	for i, bs := range [][]bufs{a, {a[0], w.alloc(c, 1, false)}, {w.alloc(c, 0, false), a[1]}} {
		errs, _ := w.exec(ring, c, bs)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("request %d rank %d: %v", i, r, err)
			}
			if got := devicetest.Wrong(bs[r].out, c.Expected(r), 4); got != 0 {
				t.Errorf("request %d rank %d: %d wrong", i, r, got)
			}
		}
	}
	st := w.ex[0].Stats()
	if st.L2Setups != 0 || st.L2Skips != 3 || st.Created.Registrations != 0 {
		t.Errorf("L2 setups %d, skips %d, registrations %d; want 0, 3, 0", st.L2Setups, st.L2Skips, st.Created.Registrations)
	}
}

// genDev reports every allocation with its generation shifted by bump:
// raising bump makes the same addresses look like new allocations (freed
// and replaced in place), which is what mmap may do but need not.
type genDev struct {
	device.Backend
	bump atomic.Uint64
}

func (g *genDev) Lookup(p device.Ptr, n int64) (device.Region, bool) {
	r, ok := g.Backend.Lookup(p, n)
	r.Gen += g.bump.Load()
	return r, ok
}

func (g *genDev) Export(r device.Region) (device.Handle, error) {
	r.Gen -= g.bump.Load()
	return g.Backend.Export(r)
}

// TestL2KeysByAllocationIdentity: an allocation freed and replaced at the
// same address and size is a new identity (its generation), so its
// registrations are exchanged again rather than reused.
func TestL2KeysByAllocationIdentity(t *testing.T) {
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	devs := make([]*genDev, 2)
	for r := range 2 {
		devs[r] = &genDev{Backend: w.dev}
		ex, err := New(Config{Rank: r, NRanks: 2, Backend: devs[r], Net: w.boots[r], InitialScratch: 1 << 16, Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		w.ex[r].Close()
		w.ex[r] = ex
	}
	one := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 1024, NRanks: 2, Seed: 1}
	bs := []bufs{w.alloc(c, 0, false), w.alloc(c, 1, false)}
	run := func() {
		errs, _ := w.exec(one, c, bs)
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
			if got := devicetest.Wrong(bs[r].out, c.Expected(r), 4); got != 0 {
				t.Fatalf("rank %d: %d wrong", r, got)
			}
		}
	}
	run()
	run()
	if st := w.ex[0].Stats(); st.L2Setups != 1 || st.L2Hits != 1 {
		t.Fatalf("same allocations: L2 setups %d, hits %d; want 1, 1", st.L2Setups, st.L2Hits)
	}
	for _, d := range devs {
		d.bump.Add(1) // same addresses and sizes, new allocations
	}
	run()
	if st := w.ex[0].Stats(); st.L2Setups != 2 || st.Created.Registrations != 2 {
		t.Errorf("replaced allocations at the same addresses: L2 setups %d, registrations %d; want 2, 2", st.L2Setups, st.Created.Registrations)
	}
}

// TestDeregister: ncclCommDeregister's semantics at the executor. Rank 1
// registers its buffers, runs a schedule that reaches them (rank 0
// imports them), deregisters: before Deregister returns, rank 0's service
// goroutine has dropped its imports of them (Stats.Drops, and nothing of
// rank 1's allocation left among rank 0's imports). Rank 1 then frees the
// buffers, allocates again, and the next call — with new inputs — is exact
// (rank 1 pushes its new allocation, rank 0 imports it anew). Registered
// reports registrations; an unknown id is ErrNotRegistered.
func TestDeregister(t *testing.T) {
	w := newWorld(t, 2, Config{InitialScratch: 1 << 16, Timeout: 5 * time.Second})
	one := compile(t, 0, "oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 2, Protocol: ir.Simple})
	base := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 512, NRanks: 2}
	bs := []bufs{w.alloc(base, 0, false), w.alloc(base, 1, false)}
	step := 0
	run := func(what string) {
		t.Helper()
		step++
		c := base
		c.Seed = uint64(step)
		for r := range 2 {
			refill(t, c, r, bs[r])
		}
		errs, _ := w.exec(one, c, bs)
		for r, err := range errs {
			if err == nil {
				if got := devicetest.Wrong(bs[r].out, c.Expected(r), 4); got != 0 {
					err = fmt.Errorf("%d wrong", got)
				}
			}
			if err != nil {
				t.Fatalf("%s, rank %d: %v", what, r, err)
			}
		}
	}
	ex1 := w.ex[1]
	reg, err := ex1.Register(bs[1].send, 4*base.Count)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := ex1.Registered(bs[1].send+64, 64); !ok || got != reg {
		t.Errorf("Registered inside the allocation: %+v %v, want %+v", got, ok, reg)
	}
	if _, ok := w.ex[0].Registered(bs[0].send, 64); ok {
		t.Errorf("rank 0's buffer is registered")
	}
	run("registered")
	imported := func() int {
		n := 0
		w.ex[0].peers.mu.Lock()
		defer w.ex[0].peers.mu.Unlock()
		for k := range w.ex[0].peers.imports {
			if k.peer == 1 && k.id.Region == reg.Region {
				n++
			}
		}
		return n
	}
	if imported() == 0 {
		t.Fatal("rank 0 did not import rank 1's registered buffer")
	}
	if err := ex1.Deregister(context.Background(), reg.ID); err != nil {
		t.Fatal(err)
	}
	if n, st := imported(), w.ex[0].Stats(); n != 0 || st.Drops != 1 {
		t.Errorf("after Deregister: rank 0 holds %d imports of it, drops %d; want 0, 1", n, st.Drops)
	}
	if err := ex1.Deregister(context.Background(), reg.ID); !errors.Is(err, ErrNotRegistered) {
		t.Errorf("a second Deregister: %v", err)
	}
	// Freed and made again (the host backend's mmap usually returns the
	// same address; the new allocation has a new generation either way).
	old := bs[1].send
	if err := w.dev.Free(old); err != nil {
		t.Fatal(err)
	}
	p, err := w.dev.Alloc(4 * base.Count)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("freed %#x, allocated %#x", uintptr(old), uintptr(p))
	bs[1].send = p
	run("after free and allocation")
	if _, err := ex1.Register(bs[1].send, 4*base.Count); err != nil {
		t.Fatal(err)
	}
	run("registered again")
	w.dev.Free(p)
}
