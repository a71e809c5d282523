package main

import (
	"bytes"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
)

// TestReferenceMatchesDevicetest: the shared-input reference computes every
// rank's expected output exactly as devicetest.Case.Expected does, for every
// collective, datatype and reduction.
func TestReferenceMatchesDevicetest(t *testing.T) {
	const n = 4
	for _, coll := range allColls {
		ops := []ir.RedOp{ir.Sum}
		if coll.Reduces() {
			ops = ir.AllRedOps()
		}
		for _, dt := range ir.AllDataTypes() {
			for _, op := range ops {
				k := refKey{Coll: coll, DataType: dt, RedOp: op, Count: 37, NRanks: n, Root: 1, Seed: 9}
				ref := newReference(k, 1)
				c := devicetest.Case{Coll: coll, DataType: dt, RedOp: op, Count: 37, NRanks: n, Root: 1, Seed: 9}
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
	rs := newReferences(2)
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
