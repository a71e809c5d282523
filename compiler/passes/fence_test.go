package passes

import (
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// mailbox is a 2-rank Simple sendrecv through the peer's scratch; without
// the credit, the next launch (or slice) can overwrite the scratch chunk
// the peer still reads (TS0206).
func mailbox(credit bool) *ir.Program {
	b := irtest.New(ir.SendRecv, 2, 1).Name("mailbox")
	var init int64
	if credit {
		init = 1
	}
	data0, data1 := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	cred0, cred1 := b.Connect(0, 1, ir.MemoryChannel, init, init)
	for r, ch := range [][2]int{{data0, cred0}, {data1, cred1}} {
		tb := b.Rank(r).Chunks(1, 1, 1).PrimTB()
		if credit {
			tb.Wait(ch[1])
		}
		tb.Copy(1, irtest.I(0), irtest.Remote(irtest.S(0), ch[0])).Signal(ch[0]).Wait(ch[0]).Copy(1, irtest.S(0), irtest.O(0))
		if credit {
			tb.Signal(ch[1])
		}
	}
	return b.Build()
}

// TestFenceFlag: a Simple program with a TS0206 race between iterations
// compiles to op tables that ask the runtime to fence every launch; the
// same program with the credit does not.
func TestFenceFlag(t *testing.T) {
	for _, c := range []struct {
		credit bool
		want   bool
	}{{false, true}, {true, false}} {
		b, ds, err := Compile(mailbox(c.credit), Options{})
		if err != nil || b == nil {
			t.Fatalf("credit %v: %v %v", c.credit, err, ds)
		}
		for r, raw := range b.Tables {
			tb, err := optable.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			if tb.FenceLaunches != c.want {
				t.Errorf("credit %v: rank %d FenceLaunches %v, want %v (diags %v)", c.credit, r, tb.FenceLaunches, c.want, ds)
			}
		}
	}
}
