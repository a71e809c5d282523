package main

import (
	"bytes"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
	collref "github.com/theseus-ccl/theseus/runtime/interp/reference"
)

// TestReferenceMatchesDevicetest: a case's inputs are prefixes of the
// class streams, which are reference.Case's inputs of an allreduce (reducing
// collectives) or an allgather (the others); for those two collectives
// inputs and expected outputs equal reference.Case's own, for every datatype and
// reduction.
func TestReferenceMatchesDevicetest(t *testing.T) {
	const n = 4
	for _, coll := range []ir.Collective{ir.AllReduce, ir.AllGather} {
		ops := []ir.RedOp{ir.Sum}
		if coll.Reduces() {
			ops = ir.AllRedOps()
		}
		for _, dt := range ir.AllDataTypes() {
			for _, op := range ops {
				rs := newReferences(1, 4096) // streams longer than the case
				k := refKey{Coll: coll, DataType: dt, RedOp: op, Count: 37, NRanks: n, Seed: 9}
				ref := rs.Get(k)
				c := collref.Case{Coll: coll, DataType: dt, RedOp: op, Count: 37, NRanks: n, Seed: 9}
				for r := range n {
					if !bytes.Equal(ref.Input(r), c.Input(r)) {
						t.Fatalf("%s %s %s rank %d: input differs", coll, dt, op, r)
					}
					if !bytes.Equal(ref.Expected(r), c.Expected(r)) {
						t.Errorf("%s %s %s rank %d: expected output differs", coll, dt, op, r)
					}
				}
			}
		}
	}
}

// TestExpectedIsOrderFree: for every reducing collective, datatype and
// reduction, reducing the ranks' inputs in the opposite order gives the
// same bits as the expected output: the inputs (prefixes of streams made
// for allreduce) leave no room for a schedule's order of reduction to show.
func TestExpectedIsOrderFree(t *testing.T) {
	const n = 8
	for _, coll := range []ir.Collective{ir.AllReduce, ir.ReduceScatter, ir.Reduce} {
		for _, dt := range ir.AllDataTypes() {
			for _, op := range ir.AllRedOps() {
				rs := newReferences(1, 1<<12)
				k := refKey{Coll: coll, DataType: dt, RedOp: op, Count: 301, NRanks: n, Root: 5, Seed: 3}
				ref := rs.Get(k)
				bb := k.Count * int64(dt.Size())
				for q := range n {
					want := ref.Expected(q)
					if coll == ir.Reduce && q != 5 {
						if want != nil {
							t.Fatalf("reduce: rank %d has an output", q)
						}
						continue
					}
					srcs := make([][]byte, n)
					for p := range n {
						in := ref.Input(n - 1 - p)
						if coll == ir.ReduceScatter {
							in = in[int64(q)*bb : int64(q+1)*bb]
						}
						srcs[p] = in
					}
					got := make([]byte, bb)
					if err := numeric.Reduce(dt, op, got, srcs); err != nil {
						t.Fatal(err)
					}
					if op == ir.Avg {
						if err := numeric.Divide(dt, got, n); err != nil {
							t.Fatal(err)
						}
					}
					if w := countWrong(got, want, dt.Size()); w != 0 {
						t.Errorf("%s %s %s rank %d: %d elements depend on the order of reduction", coll, dt, op, q, w)
					}
				}
			}
		}
	}
}

// TestStreams: streams grow when a case needs more than the run's largest
// input, are shared by the cases of a class, and only the class used last
// is kept.
func TestStreams(t *testing.T) {
	rs := newReferences(1, 64)
	c := func(coll ir.Collective, op ir.RedOp) collref.Case {
		return collref.Case{Coll: coll, DataType: ir.Float32, RedOp: op, Count: 4, NRanks: 2, Seed: 1}
	}
	a := rs.stream(c(ir.AllReduce, ir.Sum), 0, 16)
	if len(a) != 64 {
		t.Fatalf("stream of %d bytes, want 64", len(a))
	}
	if b := rs.stream(c(ir.Reduce, ir.Sum), 0, 32); &b[0] != &a[0] {
		t.Error("reduce does not share allreduce's stream")
	}
	if b := rs.stream(c(ir.AllReduce, ir.Sum), 0, 100); len(b) != 100 || !bytes.Equal(b[:64], a) {
		t.Errorf("grown stream: %d bytes, prefix equal %v", len(b), bytes.Equal(b[:64], a))
	}
	rs.stream(c(ir.AllGather, ir.Sum), 0, 8)
	rs.stream(c(ir.AllReduce, ir.Max), 0, 8)
	rs.stream(c(ir.AllReduce, ir.Max), 1, 8)
	if len(rs.streams) != 2 || len(rs.recent) != 1 {
		t.Errorf("%d streams, %d classes kept; want 2 (one class, two ranks), 1", len(rs.streams), len(rs.recent))
	}
}

func TestCountWrong(t *testing.T) {
	want := make([]byte, 200<<10)
	for i := range want {
		want[i] = byte(i * 7)
	}
	got := bytes.Clone(want)
	if w := countWrong(got, want, 4); w != 0 {
		t.Errorf("equal: %d wrong", w)
	}
	got[0] ^= 1
	got[3] ^= 1 // same element
	got[100<<10] ^= 0x80
	got[len(got)-1] ^= 2
	if w := countWrong(got, want, 4); w != 3 {
		t.Errorf("3 bad elements: %d wrong", w)
	}
	if w := countWrong(got, want, 1); w != 4 {
		t.Errorf("4 bad bytes: %d wrong", w)
	}
	if w := countWrong(got[:8], want, 8); w != int64(len(want)/8) {
		t.Errorf("length mismatch: %d wrong, want every element", w)
	}
}

func TestReferencesShareAndRelease(t *testing.T) {
	rs := newReferences(2, 0)
	k := refKey{Coll: ir.AllReduce, DataType: ir.Float32, Count: 8, NRanks: 2}
	a, b := rs.Get(k), rs.Get(k)
	if a != b {
		t.Fatal("two local ranks got different references")
	}
	rs.Done(k)
	if rs.Get(k) != a {
		t.Fatal("released after one of two ranks")
	}
	rs.Done(k)
	rs.Done(k)
	if rs.Get(k) == a {
		t.Fatal("kept after every rank was done")
	}
}
