package verify

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// TestOwnerChecksCostNothingOnRings: programs with no remote user-buffer
// ref (rings, and everything the legaliser produces: it stages transfers
// through the receiver's scratch) never build the peer-access tables, so
// BenchmarkVerifyRing1024 and its primitive form pay nothing for them.
func TestOwnerChecksCostNothingOnRings(t *testing.T) {
	for _, p := range []*ir.Program{irtest.RingAllReduce(8, ir.Simple), irtest.RingAllReduce(8, ir.LL), irtest.AllGatherRing(5)} {
		q, ds := legalize.Legalize(p)
		if len(ds) > 0 {
			t.Fatal(ds)
		}
		for _, x := range []*ir.Program{p, q} {
			c := newChecker(x, Options{})
			c.run()
			if c.rep.nerr > 0 || c.remoteUser {
				t.Errorf("%s (%d ops): errors %d, remote user refs %v; want neither", x.Name, x.NumOps(), c.rep.nerr, c.remoteUser)
			}
		}
	}
	c := newChecker(irtest.PairsAllReducePrimitive(3), Options{})
	c.run()
	if !c.remoteUser {
		t.Error("the all-pairs program reads its peers' inputs, but remoteUser is false")
	}
}
