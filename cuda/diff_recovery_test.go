package cuda

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/interp/reference"
)

// TestDifferentialRecovery checks what TestDifferential does after the GPU
// World refuses a case (ErrNotResident: its launch counter stays, so the
// next case reuses the launch counter the host has already run): it runs
// the next case's host side on a fresh host World (newHostWorld), whose
// result must equal the collective's reference on every rank. A reused
// host World would not do (a second run of one launch counter finds every
// dependency met: interp.TestRepeatedLaunchFindsDependenciesMet). The
// program is the first generated one whose ops have dependencies. No GPU
// needed.
func TestDifferentialRecovery(t *testing.T) {
	var dp diffProgram
	var tables []*optable.Table
	for _, q := range diffPrograms(t) {
		if q.p.NRanks < 2 || q.p.Collective != ir.AllReduce {
			continue
		}
		tabs, err := optable.LowerAll(q.p)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		if hasDeps(tabs) {
			dp, tables = q, tabs
			break
		}
	}
	if tables == nil {
		t.Fatal("no generated allreduce program has dependencies: the test checks nothing")
	}
	gw := &World{} // a World whose launches were all refused: its launch counter stays 0
	rng := rand.New(rand.NewPCG(1, uint64(len(dp.name))))
	hw, err := newHostWorld(tables)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dt    ir.DataType
		op    ir.RedOp
		count int64
	}{{ir.Int32, ir.Sum, 1000}, {ir.Uint8, ir.Max, 65537}, {ir.Int8, ir.Prod, 7}} {
		req := interp.Request{Count: c.count, DataType: c.dt, RedOp: c.op, PacketType: ir.LL16, Timeout: 5 * time.Second}
		h, bad, msg := diffHost(rng, tables, hw, gw, req)
		if bad {
			t.Fatalf("%s %v %v: %s", dp.name, c.dt, c.op, msg)
		}
		if h.req.Launch != 1 {
			t.Fatalf("%s: host ran launch %d, want 1 (the refused GPU World's next)", dp.name, h.req.Launch)
		}
		for r := range h.want {
			want := reference.Output(dp.p.Collective, dp.p.NRanks, r, 0, c.count, c.dt, c.op, func(q int) []byte { return h.inputs[q] })
			if n := reference.Wrong(h.want[r], want, 1); n > 0 {
				t.Errorf("%s %v %v count %d, launch 1 on a fresh host World: rank %d has %d wrong bytes", dp.name, c.dt, c.op, c.count, r, n)
			}
		}
		// The GPU refused this case too: the next one starts on a fresh World.
		if hw, err = newHostWorld(tables); err != nil {
			t.Fatal(err)
		}
	}
}

// hasDeps reports whether any op of the tables waits on another
// threadblock.
func hasDeps(tables []*optable.Table) bool {
	for _, tab := range tables {
		for _, tb := range tab.TBs {
			for _, op := range tb.Ops {
				if len(op.Deps) > 0 {
					return true
				}
			}
		}
	}
	return false
}
