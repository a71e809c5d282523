package gen

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// TestOracleCatchesBugs makes sure the symbolic executor used by the sweeps
// rejects broken variants of generated programs: a wrong source chunk, a
// missing scratch-reuse guard, and an unstaged in-place one-shot.
func TestOracleCatchesBugs(t *testing.T) {
	mutations := []struct {
		name   string
		algo   string
		opts   Options
		inPl   bool
		mutate func(p *ir.Program)
	}{
		{"wrong source", "ring", Options{Collective: ir.AllReduce, NRanks: 4}, false, func(p *ir.Program) {
			p.Ranks[1].TBs[0].Ops[1].Srcs[0].Off = 0
		}},
		{"no closing nop", "tree", Options{Collective: ir.Reduce, NRanks: 7}, false, func(p *ir.Program) {
			for r := range p.Ranks {
				for t := range p.Ranks[r].TBs {
					ops := p.Ranks[r].TBs[t].Ops
					if n := len(ops); n > 1 && ops[n-1].Code == ir.OpNop {
						p.Ranks[r].TBs[t].Ops = ops[:n-1]
					}
				}
			}
		}},
		{"unstaged one-shot", "oneshot", Options{Collective: ir.AllReduce, NRanks: 4}, true, func(p *ir.Program) {
			for r := range p.Ranks {
				ops := p.Ranks[r].TBs[0].Ops
				ops[2].Dsts[0] = out(0)
				p.Ranks[r].TBs[0].Ops = ops[:3]
			}
		}},
	}
	for _, m := range mutations {
		t.Run(m.name, func(t *testing.T) {
			p, err := Generate(m.algo, m.opts)
			if err != nil {
				t.Fatal(err)
			}
			m.mutate(p)
			lp, ds := legalize.Legalize(p)
			if lp == nil {
				t.Fatalf("legalize: %v", ds)
			}
			for seed := 0; seed < 50; seed++ {
				if _, err := irtest.Simulate(lp, irtest.SimOptions{InPlace: m.inPl, Slices: 3, Launches: 2, Schedule: irtest.RandomBursts, Seed: uint64(seed)}); err != nil {
					t.Logf("caught (seed %d): %.200v", seed, err)
					return
				}
			}
			t.Errorf("the oracle accepted a broken program in 50 interleavings")
		})
	}
}
