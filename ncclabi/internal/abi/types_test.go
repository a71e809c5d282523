package abi

import (
	"testing"

	"github.com/theseus-ccl/theseus/ir"
)

func TestTypeTables(t *testing.T) {
	sizes := []int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}
	for d := DataType(0); d < NumDataTypes; d++ {
		if d.Size() != sizes[d] {
			t.Errorf("%v size %d", d, d.Size())
		}
		if d.IR().String() == "" || d.IR() >= ir.NumDataTypes {
			t.Errorf("%v maps to %v", d, d.IR())
		}
	}
	if DataType(12).Valid() || DataType(-1).Valid() || DataType(12).Size() != 0 {
		t.Error("out-of-range types accepted")
	}
	for r := RedOp(0); r < NumRedOps; r++ {
		if r.IR() != ir.RedOp(r) {
			t.Errorf("%v maps to %v", r, r.IR())
		}
	}
	for c := CollAllReduce; c < numColls; c++ {
		_, ok := c.IR()
		if ok == (c == CollSend || c == CollRecv || c == CollAlltoAllv) {
			t.Errorf("%v IR ok=%v", c, ok)
		}
	}
}

func TestInPlace(t *testing.T) {
	cases := []struct {
		op   Op
		rank int
		want bool
	}{
		{Op{Coll: CollAllReduce, Send: 100, Recv: 100, DataType: 7}, 0, true},
		{Op{Coll: CollAllGather, Send: 100 + 2*4*10, Recv: 100, Count: 10, DataType: 7}, 2, true},
		{Op{Coll: CollAllGather, Send: 100, Recv: 100, Count: 10, DataType: 7}, 2, false},
		{Op{Coll: CollReduceScatter, Send: 100, Recv: 100 + 3*8*5, Count: 5, DataType: 8}, 3, true},
		{Op{Coll: CollGather, Send: 100 + 1*2*4, Recv: 100, Count: 4, DataType: 6, Root: 1}, 0, true},
		{Op{Coll: CollScatter, Send: 100, Recv: 100 + 1*2*4, Count: 4, DataType: 6, Root: 1}, 3, true},
		{Op{Coll: CollSend, Send: 100, Recv: 100}, 0, false},
	}
	for i, c := range cases {
		if got := c.op.InPlace(c.rank); got != c.want {
			t.Errorf("case %d (%v): in place %v", i, c.op.Coll, got)
		}
	}
}

func TestCheckAlltoAllv(t *testing.T) {
	m := []uint64{0, 1, 2, 3}
	op := Op{Coll: CollAlltoAllv, Send: 1, Recv: 2, DataType: 7, Counts: m, Root: -1}
	if e := op.Check(1, 2, nil); e != nil {
		t.Fatal(e)
	}
	op.Counts = m[:3]
	if e := op.Check(1, 2, nil); e == nil || e.Result != InvalidArgument {
		t.Fatalf("short matrix: %v", e)
	}
	op.Counts = []uint64{1 << 62, 1 << 62, 0, 0}
	if e := op.Check(0, 2, nil); e == nil || e.Result != InvalidArgument {
		t.Fatalf("overflow: %v", e)
	}
	op.Counts = []uint64{0, 1, 0, 0}
	op.Recv = 0
	if e := op.Check(0, 2, nil); e != nil {
		t.Fatalf("rank 0 receives nothing, NULL recvbuff is fine: %v", e)
	}
	op.Send = 0
	if e := op.Check(0, 2, nil); e == nil {
		t.Fatal("NULL sendbuff with data to send accepted")
	}
}
