package gen

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

// interpOptions is the case matrix of the acceptance runs: float32 with
// sum, counts 7 and one that leaves a short last chunk, 1 and 3 slices,
// both LL packet types; with wide, also int8 with max (a narrow type and a
// second redop) and count 0.
func interpOptions(p *ir.Program, wide bool) interp.SimOptions {
	unit := p.ChunksPerBlock * 3 * 16
	o := interp.SimOptions{
		DataTypes: []ir.DataType{ir.Float32},
		RedOps:    []ir.RedOp{ir.Sum},
		Counts:    []int64{7, 2*unit + 5},
		Timeout:   20e9,
	}
	if wide {
		o.DataTypes = append(o.DataTypes, ir.Int8)
		o.RedOps = append(o.RedOps, ir.Max)
		o.Counts = append(o.Counts, 0)
	}
	return o
}

// symmetricScratch works around runtime/interp computing the byte offset of
// the LL scratch half of a remote packet write from the writer's own
// scratch size instead of the owner's (interp.go, halfOff): it declares the
// largest scratch on every rank, which changes nothing else. Minimal case:
// 2-rank LL broadcast where rank 0 (no scratch) writes a packet into rank
// 1's s[0]; launch 2 times out waiting for the flag.
func symmetricScratch(p *ir.Program) {
	var m int64
	for r := range p.Ranks {
		m = max(m, p.Ranks[r].Chunks[ir.Scratch])
	}
	for r := range p.Ranks {
		p.Ranks[r].Chunks[ir.Scratch] = m
	}
}

// interpCheck legalises p and runs it in the host interpreter over the
// reduced case matrix; every case must run and match bit for bit.
func interpCheck(t *testing.T, c genCase, p *ir.Program, wide bool) {
	t.Helper()
	lp, ds := legalize.Legalize(p)
	if lp == nil {
		t.Fatalf("%v: legalize: %v", c, ds)
	}
	if p.Protocol == ir.LL {
		symmetricScratch(lp)
	}
	res, err := interp.Simulate(lp, interpOptions(lp, wide))
	if err != nil {
		t.Fatalf("%v: simulate: %v", c, err)
	}
	bad := 0
	for _, r := range res {
		if !r.OK() {
			if bad < 3 {
				t.Errorf("%v: %v", c, r)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%v: %d of %d cases wrong", c, bad, len(res))
	}
}

// TestInterpQuick runs every generator through the host interpreter on a
// few small communicators (always on; the full sweep is TestSweepFull).
func TestInterpQuick(t *testing.T) {
	cs := cases([]int{2, 5}, []int{1})
	cs = append(cs, cases([]int{3}, []int{2})...)
	for i, c := range cs {
		p, err := Generate(c.algo, c.opts)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		interpCheck(t, c, p, i%4 == 0)
	}
}
