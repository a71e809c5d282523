//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"testing"
	"unsafe"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

func (w *world) mem(n int64) (device.Ptr, []byte) {
	w.t.Helper()
	p, err := w.dev.Alloc(max(n, 1))
	if err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.allocs = append(w.allocs, p)
	w.mu.Unlock()
	b, _ := host.Bytes(p, n)
	return p, b
}

// p2pCall runs r on rank rank through its kept plan when it is valid, else
// through a walk (as the communicator does), and waits for it.
func (w *world) p2pCall(rank int, r *P2PRequest, kept **P2PPlan) error {
	e := w.ex[rank]
	err := ErrStale
	if *kept != nil {
		err = e.LaunchP2P(*kept, w.st[rank])
	}
	if errors.Is(err, ErrStale) {
		var p *P2PPlan
		p, err = e.ExecuteP2P(context.Background(), r, w.st[rank])
		if p != nil {
			*kept = p
		}
	}
	if err != nil {
		return err
	}
	return w.st[rank].Synchronize()
}

var testP2P = P2PParams{Geometry: launch.P2PGeometry{ChunkBytes: 4096, Slots: 2, Channels: 2}, EagerBytes: 1024, Direct: true}

// A ring repeated with the same buffers: the first call connects, each
// receiver offers its buffer's allocation once and its sender imports it
// (in that call if the offer is in by then, else at the next, which then
// prepares the launch again with the import: zero-copy), the other calls
// launch from plans, every receive right each time; none of it counts as
// the communicator's launches.
func TestP2PRingPlans(t *testing.T) {
	const n, count = 4, 3000
	w := newWorld(t, n, Config{})
	kept := make([]*P2PPlan, n)
	type rb struct {
		send, recv device.Ptr
		in, out    []byte
	}
	bs := make([]rb, n)
	for r := range n {
		var b rb
		b.send, b.in = w.mem(4 * count)
		b.recv, b.out = w.mem(4 * count)
		bs[r] = b
	}
	for it := range 4 {
		w.must(w.each(func(r int) error {
			for i := range bs[r].in {
				bs[r].in[i] = byte(r*31 + i + it)
			}
			req := &P2PRequest{Params: testP2P, Ops: []P2POp{
				{Peer: (r + 1) % n, Buf: bs[r].send, Count: count, DataType: ir.Float32},
				{Recv: true, Peer: (r + n - 1) % n, Buf: bs[r].recv, Count: count, DataType: ir.Float32},
			}}
			return w.p2pCall(r, req, &kept[r])
		}))
		if it == 0 {
			// Each receiver's offer went to its sender before this message
			// on the same connection: the next call finds it.
			w.must(w.each(func(r int) error {
				if err := w.boots[r].Send((r+n-1)%n, 77, nil); err != nil {
					return err
				}
				_, err := w.boots[r].Recv(context.Background(), (r+1)%n, 77)
				return err
			}))
		}
		w.must(w.each(func(r int) error {
			prev := (r + n - 1) % n
			for i, v := range bs[r].out {
				if v != byte(prev*31+i+it) {
					return fmt.Errorf("iteration %d: byte %d = %d, want %d", it, i, v, byte(prev*31+i+it))
				}
			}
			return nil
		}))
	}
	for r := range n {
		st := w.ex[r].Stats()
		p := st.P2P
		if p.Connects != 2 || p.Offers != 1 || p.Imports != 1 || p.L3Setups < 1 || p.L3Setups > 2 || p.Walks != p.L3Setups ||
			p.Launches != 4 || p.PlanLaunches != 4-p.Walks {
			t.Errorf("rank %d: %+v, want 2 connections, 1 offer and import, 1 or 2 setups (one per walk), 4 launches (the rest from plans)", r, p)
		}
		if st.Launches != 0 || w.ex[r].LaunchCounter() != 0 {
			t.Errorf("rank %d: %d counted launches, want none", r, st.Launches)
		}
	}
}

// An AlltoAllv of a random matrix with empty rows, columns and cells (and a
// single hot row): every rank receives its column; then the GPU matrix
// changed within the CPU matrix's totals is followed, past them refused,
// and in checking mode any difference is refused.
func TestP2PAlltoAllv(t *testing.T) {
	const n = 4
	w := newWorld(t, n, Config{})
	rng := rand.New(rand.NewSource(3))
	for _, shape := range []string{"random", "hot row", "empty"} {
		counts := make([]int64, n*n)
		for i := range counts {
			switch shape {
			case "random":
				if rng.Intn(4) != 0 {
					counts[i] = int64(rng.Intn(3000))
				}
			case "hot row":
				if i/n == 2 {
					counts[i] = 5000 + int64(i)
				}
			}
		}
		w.must(w.each(func(r int) error { return alltoallv(w, r, counts, counts, false, ir.Float16) }))
	}
	// The GPU copy sends less than planned: followed.
	cpu := make([]int64, n*n)
	for i := range cpu {
		cpu[i] = 100
	}
	gpu := append([]int64(nil), cpu...)
	gpu[1], gpu[1*n+2] = 40, 7
	w.must(w.each(func(r int) error { return alltoallv(w, r, cpu, gpu, false, ir.Int8) }))
	// Checking mode refuses the difference on the ranks whose row or
	// column differs.
	errs := w.each(func(r int) error { return alltoallv(w, r, cpu, gpu, true, ir.Int8) })
	for r, err := range errs {
		if (r <= 2) != errors.Is(err, launch.ErrP2PMatrix) {
			t.Errorf("rank %d in checking mode: %v", r, err)
		}
	}
}

// alltoallv runs one AlltoAllv on rank r with CPU matrix cpu and GPU matrix
// gpu and checks what it received (by gpu).
func alltoallv(w *world, r int, cpu, gpu []int64, check bool, dt ir.DataType) error {
	n := w.n
	es := int64(dt.Size())
	var sendN, recvN int64
	for j := range n {
		sendN += cpu[r*n+j]
		recvN += cpu[j*n+r]
	}
	send, in := w.mem(sendN * es)
	recv, out := w.mem(recvN * es)
	gp, gm := w.mem(int64(8 * n * n))
	for i, c := range gpu {
		*(*uint64)(unsafe.Pointer(&gm[8*i])) = uint64(c)
	}
	off := int64(0)
	for j := range n {
		for k := int64(0); k < gpu[r*n+j]*es && off+k < int64(len(in)); k++ {
			in[off+k] = byte(r*7 + j*13 + int(k))
		}
		off += gpu[r*n+j] * es
	}
	req := &P2PRequest{Params: testP2P, Matrix: &P2PMatrix{Send: send, Recv: recv, Counts: cpu, GPU: gp, DataType: dt, Check: check}}
	var kept *P2PPlan
	if err := w.p2pCall(r, req, &kept); err != nil {
		return err
	}
	off = 0
	for i := range n {
		for k := int64(0); k < gpu[i*n+r]*es; k++ {
			if want := byte(i*7 + r*13 + int(k)); out[off+k] != want {
				return fmt.Errorf("from rank %d: byte %d = %d, want %d", i, k, out[off+k], want)
			}
		}
		off += gpu[i*n+r] * es
	}
	return nil
}

// A GPU matrix past the CPU matrix's totals fails the launch with
// ErrP2PMatrix, writing nothing.
func TestP2PAlltoAllvCapacity(t *testing.T) {
	const n = 2
	w := newWorld(t, n, Config{Timeout: 2e9})
	cpu := []int64{10, 10, 10, 10}
	gpu := []int64{10, 11, 10, 10}
	errs := w.each(func(r int) error { return alltoallv(w, r, cpu, gpu, false, ir.Int32) })
	if !errors.Is(errs[0], launch.ErrP2PMatrix) {
		t.Errorf("rank 0 (sends 21 > 20): %v", errs[0])
	}
}

// Point-to-point calls between two ranks while the others are idle, then a
// collective on all: the launch counter, identical on every rank, counts
// only the collective, and the collective is right.
func TestP2PBetweenCollectives(t *testing.T) {
	const n = 4
	w := newWorld(t, n, Config{})
	s := compile(t, 1, "ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 1000, NRanks: n, Seed: 5}
	if wrong, errs := w.run(s, c, false); wrong != 0 {
		w.must(errs)
	}
	send, _ := w.mem(4096)
	recv, _ := w.mem(4096)
	var kept [2]*P2PPlan
	for range 3 {
		w.must(w.each(func(r int) error {
			if r > 1 {
				return nil
			}
			req := &P2PRequest{Params: testP2P, Ops: []P2POp{{Recv: r == 1, Peer: 1 - r, Buf: map[bool]device.Ptr{true: recv, false: send}[r == 1], Count: 1024, DataType: ir.Uint32}}}
			return w.p2pCall(r, req, &kept[r])
		}))
	}
	if wrong, errs := w.run(s, c, false); wrong != 0 {
		w.must(errs)
	}
	for r := range n {
		if lc := w.ex[r].LaunchCounter(); lc != 2 {
			t.Errorf("rank %d: launch counter %d, want 2 (the collectives)", r, lc)
		}
	}
}

// New parameters (another snapshot) reconnect the pairs at the call that
// brings them, on both ends.
func TestP2PReconnect(t *testing.T) {
	w := newWorld(t, 2, Config{})
	buf, _ := w.mem(1 << 16)
	for i, prm := range []P2PParams{testP2P, {Geometry: launch.P2PGeometry{ChunkBytes: 8192, Slots: 3, Channels: 4}}, testP2P} {
		w.must(w.each(func(r int) error {
			var kept *P2PPlan
			req := &P2PRequest{Params: prm, Ops: []P2POp{{Recv: r == 1, Peer: 1 - r, Buf: buf + device.Ptr(r*32768), Count: 32768, DataType: ir.Int8}}}
			return w.p2pCall(r, req, &kept)
		}))
		for r := range 2 {
			if p := w.ex[r].Stats().P2P; p.Connects != uint64(i+1) || p.Reconnects != uint64(i) {
				t.Errorf("call %d rank %d: %+v", i, r, p)
			}
		}
	}
}

// The CPU matrix's per-rank figures a launch is planned with (elements):
// the row and column totals (capacity) and the largest cell of the row and
// column (the CUDA backend's threads follow it).
func TestP2PMatrixFigures(t *testing.T) {
	m := &P2PMatrix{Counts: []int64{
		1, 7, 0,
		2, 3, 9,
		4, 5, 6}}
	for _, c := range []struct{ me, row, col, max int64 }{{0, 8, 7, 7}, {1, 14, 15, 9}, {2, 15, 15, 9}} {
		if got := [3]int64{matrixRow(m, 3, int(c.me)), matrixCol(m, 3, int(c.me)), matrixMax(m, 3, int(c.me))}; got != [3]int64{c.row, c.col, c.max} {
			t.Errorf("rank %d: row, column, largest %v, want %v", c.me, got, [3]int64{c.row, c.col, c.max})
		}
	}
}
