package verify_test

import (
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

// TestSelfFencedLLGenerated: which generated LL programs need no launch
// fence. Every rank of the all-pairs, halving-doubling and tree programs
// receives from each peer it sends to; rooted programs (the root only
// sends, or only receives) and rings of more than 2 ranks (a rank hears
// only from its predecessor) are not proved and stay fenced.
func TestSelfFencedLLGenerated(t *testing.T) {
	cases := []struct {
		algo string
		coll ir.Collective
		n    int
		want bool
	}{
		{"oneshot", ir.AllReduce, 8, true},
		{"twoshot", ir.AllReduce, 4, true},
		{"direct", ir.AllGather, 4, true},
		{"direct", ir.ReduceScatter, 4, true},
		{"direct", ir.AllToAll, 4, true},
		{"rhd", ir.AllReduce, 8, true},
		{"tree", ir.AllReduce, 8, true},
		{"dbtree", ir.AllReduce, 8, true},
		{"ring", ir.AllReduce, 2, true},
		{"ring", ir.AllReduce, 4, false},
		{"ring", ir.AllGather, 8, false},
		{"direct", ir.Broadcast, 4, false},
		{"direct", ir.Reduce, 4, false},
		{"direct", ir.Gather, 4, false},
		{"chain", ir.Broadcast, 4, false},
		{"tree", ir.Broadcast, 8, false},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s_%v_n%d", tc.algo, tc.coll, tc.n), func(t *testing.T) {
			p, err := gen.Generate(tc.algo, gen.Options{Collective: tc.coll, NRanks: tc.n, Protocol: ir.LL, Channels: 1})
			if err != nil {
				t.Fatal(err)
			}
			ds := verify.Verify(p, verify.Options{})
			if got := verify.SelfFencedLL(p, ds); got != tc.want {
				t.Errorf("SelfFencedLL = %v, want %v", got, tc.want)
			}
			if verify.NeedsLaunchFence(p, ds) {
				t.Error("NeedsLaunchFence on an LL program")
			}
			// The same program in Simple is never self-fenced.
			p.Protocol = ir.Simple
			if verify.SelfFencedLL(p, nil) {
				t.Error("SelfFencedLL on a Simple program")
			}
		})
	}
}

// TestSelfFencedLLPrimitive: hand-written primitive programs of 2 ranks,
// packets pushed into the peer's scratch or written locally and pulled.
func TestSelfFencedLLPrimitive(t *testing.T) {
	build := func(push, both bool) *ir.Program {
		b := New(ir.AllGather, 2, 1).Protocol(ir.LL)
		b.Connect(0, 1, ir.MemoryChannel, 0, 0)
		for r := range 2 {
			tb := b.Rank(r).Chunks(0, 0, 2).PrimTB()
			tb.Copy(1, I(0), O(int64(r)))
			writes := r == 0 || both // rank 0 always sends its block
			reads := r == 1 || both  // rank 1 always receives it
			if push {
				if writes {
					tb.Copy(1, I(0), Packet(Remote(S(0), 0)))
				}
				if reads {
					tb.Copy(1, Packet(S(0)), O(int64(1-r)))
				}
			} else {
				if writes {
					tb.Copy(1, I(0), Packet(S(0)))
				}
				if reads {
					tb.Copy(1, Packet(Remote(S(0), 0)), O(int64(1-r)))
				}
			}
		}
		return b.Build()
	}
	for _, tc := range []struct {
		name       string
		push, both bool
		want       bool
	}{
		{"push both ways", true, true, true},
		{"push one way", true, false, false},
		{"pull both ways", false, true, true},
		{"pull one way", false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := build(tc.push, tc.both)
			if got := verify.SelfFencedLL(p, nil); got != tc.want {
				t.Errorf("SelfFencedLL = %v, want %v", got, tc.want)
			}
			race := []diag.Diagnostic{{Code: diag.RaceAcrossLaunch, Severity: diag.Warning}}
			if verify.SelfFencedLL(p, race) {
				t.Error("SelfFencedLL with a race across launches (TS0206)")
			}
		})
	}
	if verify.SelfFencedLL(nil, nil) {
		t.Error("SelfFencedLL(nil)")
	}
}
