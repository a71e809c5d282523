package passes

import (
	"testing"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// TestFenceFlag: a Simple program with a TS0206 race between iterations
// compiles to op tables that ask the runtime to fence every launch; the
// same program with the credit does not.
func TestFenceFlag(t *testing.T) {
	for _, c := range []struct {
		credit bool
		want   bool
	}{{false, true}, {true, false}} {
		b, ds, err := Compile(irtest.Mailbox(c.credit).Build(), Options{})
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
