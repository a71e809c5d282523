//go:build linux

package executor

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// p2pWork is the engine's counters of a walk that matter to rebasing.
type p2pWork struct{ Walks, L3Setups, Rebases, L3Hits uint64 }

func workOf(s P2PStats) p2pWork { return p2pWork{s.Walks, s.L3Setups, s.Rebases, s.L3Hits} }

// settle makes every point-to-point offer sent so far arrive (a message
// from each rank to every other after it, on the same connections): the
// next call with a peer imports that peer's offers.
func (w *world) settle() {
	w.t.Helper()
	w.must(w.each(func(r int) error {
		for q := range w.n {
			if q != r {
				if err := w.boots[r].Send(q, 77, nil); err != nil {
					return err
				}
			}
		}
		for q := range w.n {
			if q != r {
				if _, err := w.boots[r].Recv(context.Background(), q, 77); err != nil {
					return err
				}
			}
		}
		return nil
	}))
}

func (a p2pWork) minus(b p2pWork) p2pWork {
	return p2pWork{a.Walks - b.Walks, a.L3Setups - b.L3Setups, a.Rebases - b.Rebases, a.L3Hits - b.L3Hits}
}

// A ring of 3 ranks whose buffers move by one message per call within one
// allocation each, as nccl-tests moves them: a call at new buffers of a
// shape prepared before is a rebase of that shape's launch (no backend
// preparation), and every byte arrives, eager (through the FIFO) and above
// the eager bytes once the offers are imported (written directly into the
// moved receive buffer), with the receive buffer moving with the send
// buffer, staying in place, or moving the other way, and with a send to
// this rank paired with a receive from it.
func TestP2PRebaseShifted(t *testing.T) {
	const n, steps = 3, 8
	for _, c := range []struct {
		name  string
		count int64 // float32 elements
		recv  func(i int) int
		self  bool
	}{
		{"eager", 7, func(i int) int { return i }, false},
		{"direct", 1000, func(i int) int { return i }, false},
		{"recv fixed", 300, func(int) int { return 0 }, false},
		{"recv backwards", 1000, func(i int) int { return steps - 1 - i }, false},
		{"with self", 300, func(i int) int { return i }, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, n, Config{})
			nb := 4 * c.count
			type bufs struct {
				send, recv, self device.Ptr
				in, out, sout    []byte
			}
			bs := make([]bufs, n)
			for r := range n {
				var b bufs
				b.send, b.in = w.mem(steps * nb)
				b.recv, b.out = w.mem(steps * nb)
				b.self, b.sout = w.mem(steps * nb)
				for j := range b.in {
					b.in[j] = byte(r*29 + j*7 + j>>8)
				}
				bs[r] = b
			}
			req := func(r, i int) *P2PRequest {
				b := bs[r]
				at := func(k int) device.Ptr { return device.Ptr(int64(k) * nb) }
				ops := []P2POp{
					{Peer: (r + 1) % n, Buf: b.send + at(i), Count: c.count, DataType: ir.Float32},
					{Recv: true, Peer: (r + n - 1) % n, Buf: b.recv + at(c.recv(i)), Count: c.count, DataType: ir.Float32},
				}
				if c.self {
					ops = append(ops, P2POp{Peer: r, Buf: b.send + at(i), Count: c.count, DataType: ir.Float32},
						P2POp{Recv: true, Peer: r, Buf: b.self + at(c.recv(i)), Count: c.count, DataType: ir.Float32})
				}
				return &P2PRequest{Params: testP2P, Ops: ops}
			}
			// Two calls at position 0: connections and offers, then (the
			// offers in) imports.
			for k := range 2 {
				w.must(w.each(func(r int) error {
					var kept *P2PPlan
					return w.p2pCall(r, req(r, 0), &kept)
				}))
				if k == 0 {
					w.settle()
				}
			}
			w0 := make([]p2pWork, n)
			for r := range n {
				w0[r] = workOf(w.ex[r].P2PStats())
			}
			for i := 1; i < steps; i++ {
				w.must(w.each(func(r int) error {
					var kept *P2PPlan
					if err := w.p2pCall(r, req(r, i), &kept); err != nil {
						return err
					}
					prev := (r + n - 1) % n
					at := int64(c.recv(i)) * nb
					for j := range nb {
						if got, want := bs[r].out[at+j], bs[prev].in[int64(i)*nb+j]; got != want {
							return fmt.Errorf("call %d: byte %d from rank %d = %d, want %d", i, j, prev, got, want)
						}
						if c.self {
							if got, want := bs[r].sout[at+j], bs[r].in[int64(i)*nb+j]; got != want {
								return fmt.Errorf("call %d: byte %d from this rank = %d, want %d", i, j, got, want)
							}
						}
					}
					return nil
				}))
			}
			for r := range n {
				st := w.ex[r].P2PStats()
				got := workOf(st).minus(w0[r])
				// A receive into a new place of its allocation posts the
				// allocation's offer id: every call a rebase, none prepared.
				if want := (p2pWork{Walks: steps - 1, Rebases: steps - 1}); got != want {
					t.Errorf("rank %d: calls at new buffers %+v, want %+v (%+v)", r, got, want, st)
				}
				if c.count*4 > testP2P.EagerBytes && st.Imports == 0 {
					t.Errorf("rank %d imported nothing: %+v", r, st)
				}
			}
		})
	}
}

// Rebasing keeps what a call posts: a receive into another allocation
// (another offer id) is prepared, and the shape's calls into either
// allocation are rebased from its own entry afterwards; a shape with other
// counts and other parameters are prepared; a transfer of no bytes moves
// with nothing (its buffer is never read); a call at the buffers of a
// prepared entry finds it (an L3 hit). The plan of a rebased call checks
// its own receive buffers.
func TestP2PRebaseRules(t *testing.T) {
	w := newWorld(t, 2, Config{})
	const count = 64
	a, _ := w.mem(64 * count)
	b, _ := w.mem(64 * count)
	other, _ := w.mem(64 * count)
	call := func(p P2PParams, ops func(r int) []P2POp) []*P2PPlan {
		plans := make([]*P2PPlan, 2)
		w.must(w.each(func(r int) error { return w.p2pCall(r, &P2PRequest{Params: p, Ops: ops(r)}, &plans[r]) }))
		return plans
	}
	pair := func(send, recv device.Ptr, n int64) func(r int) []P2POp {
		return func(r int) []P2POp {
			s, d := send, recv
			if r == 1 {
				s, d = recv, send // (rank 1 sends from the other buffer)
			}
			return []P2POp{{Peer: 1 - r, Buf: s, Count: n, DataType: ir.Int8}, {Recv: true, Peer: 1 - r, Buf: d, Count: n, DataType: ir.Int8}}
		}
	}
	step := func(name string, want p2pWork, f func()) {
		t.Helper()
		before := workOf(w.ex[0].P2PStats())
		f()
		if got := workOf(w.ex[0].P2PStats()).minus(before); got != want {
			t.Errorf("%s: %s", name, cmp.Diff(want, got))
		}
	}
	// Connections and offers, then (the offers in) imports: rank 0's
	// generation moves no more below (rank 1 offers only a).
	call(testP2P, pair(a, b, count))
	w.settle()
	call(testP2P, pair(a, b, count))
	if st := w.ex[0].P2PStats(); st.Imports != 1 {
		t.Fatalf("rank 0 after the first calls: %+v, want 1 import", st)
	}
	step("moved", p2pWork{Walks: 1, Rebases: 1}, func() { call(testP2P, pair(a+8, b+16, count)) })
	step("prepared buffers again", p2pWork{Walks: 1, L3Hits: 1}, func() { call(testP2P, pair(a, b, count)) })
	step("receive into another allocation", p2pWork{Walks: 1, L3Setups: 1}, func() { call(testP2P, pair(a, other, count)) })
	step("both allocations, moved", p2pWork{Walks: 2, Rebases: 2}, func() {
		call(testP2P, pair(a+1, other+2, count))
		call(testP2P, pair(a+3, b+4, count))
	})
	step("other count", p2pWork{Walks: 1, L3Setups: 1}, func() { call(testP2P, pair(a, b, count+1)) })
	wide := testP2P
	wide.EagerBytes *= 2
	step("other parameters", p2pWork{Walks: 1, L3Setups: 1}, func() { call(wide, pair(a, b, count)) })
	step("zero bytes moved anywhere", p2pWork{Walks: 2, L3Setups: 1, Rebases: 1}, func() {
		zero := func(p device.Ptr) func(r int) []P2POp {
			return func(r int) []P2POp {
				return append(pair(a, b, count)(r), P2POp{Peer: 1 - r, Buf: p}, P2POp{Recv: true, Peer: 1 - r, Buf: p})
			}
		}
		call(testP2P, zero(0))
		call(testP2P, zero(a+3))
	})
	// A rebased plan is stale once its receive buffer's allocation is
	// another one (freed and made again).
	plans := call(testP2P, pair(a+24, b+40, count))
	if plans[0].l3.base == nil {
		t.Fatal("the call at moved buffers is not a rebased entry")
	}
	if !w.ex[0].ValidP2P(plans[0], w.st[0]) {
		t.Error("a fresh rebased plan is not valid")
	}
	if diff := cmp.Diff([]p2pIdent{{p: b + 40, n: count, gen: plans[0].l3.base.plan.recvs[0].gen}}, plans[0].recvs, cmp.AllowUnexported(p2pIdent{})); diff != "" {
		t.Errorf("rebased plan's receives (-want +got):\n%s", diff)
	}
	plans[0].recvs[0].gen++ // (as if the allocation were made again)
	if w.ex[0].ValidP2P(plans[0], w.st[0]) {
		t.Error("a rebased plan whose receive buffer's allocation changed is valid")
	}
}

// An AlltoAllv whose send and receive buffers move (the same matrix) is
// rebased, and every rank receives its column right.
func TestP2PRebaseAlltoAllv(t *testing.T) {
	const n, steps, shift = 3, 3, 40 // shift: bytes the buffers move each call
	w := newWorld(t, n, Config{})
	counts := make([]int64, n*n)
	for i := range counts {
		counts[i] = 50 + int64(i)
	}
	var row, col [n]int64
	for i := range n {
		for j := range n {
			row[i] += counts[i*n+j]
			col[j] += counts[i*n+j]
		}
	}
	type bufs struct {
		send, recv, gpu device.Ptr
		in, out         []byte
	}
	bs := make([]bufs, n)
	for r := range n {
		var b bufs
		b.send, b.in = w.mem(row[r] + steps*shift)
		b.recv, b.out = w.mem(col[r] + steps*shift)
		var gm []byte
		b.gpu, gm = w.mem(int64(8 * n * n))
		for i, c := range counts {
			for k := range 8 {
				gm[8*i+k] = byte(uint64(c) >> (8 * k))
			}
		}
		bs[r] = b
	}
	last := make([]*P2PPlan, n) // each rank's last call's plan
	call := func(r, it int) error {
		b, off := bs[r], device.Ptr(it*shift)
		req := &P2PRequest{Params: testP2P, Matrix: &P2PMatrix{Send: b.send + off, Recv: b.recv + off, Counts: counts, GPU: b.gpu, DataType: ir.Uint8}}
		last[r] = nil
		return w.p2pCall(r, req, &last[r])
	}
	// Connections and offers, then (the offers in) imports.
	w.must(w.each(func(r int) error { return call(r, 0) }))
	w.settle()
	w.must(w.each(func(r int) error { return call(r, 0) }))
	w0 := make([]p2pWork, n)
	for r := range n {
		w0[r] = workOf(w.ex[r].P2PStats())
	}
	for it := range steps {
		off := int64(it * shift)
		w.must(w.each(func(r int) error {
			for j := range bs[r].in {
				bs[r].in[j] = byte(r*31 + j + it)
			}
			return call(r, it)
		}))
		w.must(w.each(func(r int) error {
			var at int64 // the block from rank i in r's column
			for i := range n {
				var from int64 // r's block in rank i's row
				for j := range r {
					from += counts[i*n+j]
				}
				for k := range counts[i*n+r] {
					if got, want := bs[r].out[off+at+k], bs[i].in[off+from+k]; got != want {
						return fmt.Errorf("call %d: byte %d from rank %d = %d, want %d", it, k, i, got, want)
					}
				}
				at += counts[i*n+r]
			}
			return nil
		}))
	}
	for r := range n {
		// (the first at the buffers of the calls before: a hit)
		if got, want := workOf(w.ex[r].P2PStats()).minus(w0[r]), (p2pWork{Walks: steps, L3Hits: 1, Rebases: steps - 1}); got != want {
			t.Errorf("rank %d: %s", r, cmp.Diff(want, got))
		}
		// The rebased plan checks the one receive buffer, where it is now.
		p := last[r]
		if p.l3.base == nil {
			t.Fatalf("rank %d: the last call's entry is not a rebased one", r)
		}
		want := []p2pIdent{{p: bs[r].recv + (steps-1)*shift, n: col[r], gen: p.l3.base.plan.recvs[0].gen}}
		if diff := cmp.Diff(want, p.recvs, cmp.AllowUnexported(p2pIdent{})); diff != "" {
			t.Errorf("rank %d: last plan's receives (-want +got):\n%s", r, diff)
		}
	}
}
