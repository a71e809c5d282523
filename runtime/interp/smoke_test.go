package interp

import (
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

func TestSmokePairs(t *testing.T) {
	tabs, err := optable.LowerAll(irtest.PairsAllReducePrimitive(3))
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorld(tabs)
	if err != nil {
		t.Fatal(err)
	}
	req := Request{Count: 37, DataType: ir.Float32, RedOp: ir.Sum, Launch: 1, Slices: 2}
	if err := w.AllocBuffers(req); err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		for e := range 37 {
			binary.LittleEndian.PutUint32(w.Bufs[p].Input[4*e:], math.Float32bits(float32(e*10+p)))
		}
	}
	if err := Run(context.Background(), tabs, req, w); err != nil {
		t.Fatal(err)
	}
	for p := range 3 {
		for e := range 37 {
			got := math.Float32frombits(binary.LittleEndian.Uint32(w.Bufs[p].Output[4*e:]))
			if want := float32(e*30 + 3); got != want {
				t.Fatalf("rank %d elem %d: %v want %v", p, e, got, want)
			}
		}
	}
}
