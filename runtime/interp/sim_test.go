package interp

import (
	"flag"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
)

// -full runs Simulate's whole default matrix (every type, op, arrangement,
// count, slice count and root) for every test program: minutes, not
// seconds.
var full = flag.Bool("full", false, "run the full simulation matrix")

func simAll(t *testing.T, p *ir.Program, o SimOptions) []CaseResult {
	t.Helper()
	if *full {
		o = SimOptions{Seed: o.Seed}
	}
	res, err := Simulate(p, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 {
		t.Fatal("no cases")
	}
	bad := 0
	for _, c := range res {
		if !c.OK() {
			bad++
			if bad <= 10 {
				t.Errorf("%s", c)
			}
		}
		if c.Err == nil && c.Checked == 0 && c.Count > 0 {
			t.Errorf("nothing checked: %s", c)
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d cases failed", bad, len(res))
	}
	return res
}

// quick covers element sizes 1, 2 and 8, integer and narrow-float
// arithmetic, and counts that are empty, tiny, unaligned and aligned.
var quick = SimOptions{
	DataTypes: []ir.DataType{ir.Int8, ir.Float16, ir.Fp8E4M3, ir.Float64},
	RedOps:    []ir.RedOp{ir.Sum, ir.Avg, ir.Max},
	Counts:    []int64{0, 1, 7, 333, 1536},
}

func TestSimulateCollectives(t *testing.T) {
	for _, coll := range []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.Broadcast, ir.Reduce,
		ir.AllToAll, ir.Gather, ir.Scatter, ir.SendRecv} {
		t.Run(coll.String(), func(t *testing.T) {
			simAll(t, progs.AllPairs(coll, 3, 2, 1), quick)
		})
	}
}

// TestSimulateAllTypesAndOps runs every data type and reduction on an
// allreduce, a reducescatter and a rooted reduce.
func TestSimulateAllTypesAndOps(t *testing.T) {
	o := SimOptions{Counts: []int64{0, 5, 1000}, Slices: []int64{2}, Roots: []int{2}}
	for _, p := range []*ir.Program{progs.AllPairs(ir.AllReduce, 3, 1, 0), progs.AllPairs(ir.ReduceScatter, 2, 1, 0),
		progs.AllPairs(ir.Reduce, 3, 1, 1)} {
		t.Run(p.Name, func(t *testing.T) {
			res := simAll(t, p, o)
			if want := 12 * 5 * 2 * 3; !*full && len(res) != want {
				t.Errorf("%d cases, want %d", len(res), want)
			}
		})
	}
}

func TestSimulateLL(t *testing.T) {
	for _, coll := range []ir.Collective{ir.AllReduce, ir.AllGather, ir.ReduceScatter, ir.AllToAll} {
		t.Run(coll.String(), func(t *testing.T) {
			res := simAll(t, progs.AllPairsLL(coll, 3, 2), quick)
			if res[0].Slices != 1 || !strings.Contains(res[0].String(), "LL16") {
				t.Errorf("LL case %q: want slices=1 and a packet type", res[0])
			}
		})
	}
}

func TestSimulateDepsAndBarriers(t *testing.T) {
	simAll(t, progs.DepsAllReduce(3, 2), quick)
	simAll(t, progs.DepsAllReduce(2, 1), SimOptions{DataTypes: []ir.DataType{ir.Float32}, Slices: []int64{1, 4}, Launches: 3})
}

func TestSimulateFixtures(t *testing.T) {
	simAll(t, irtest.PairsAllReducePrimitive(4), quick)
	simAll(t, irtest.PairsAllReducePrimitive(1), quick)
	simAll(t, progs.AllPairs(ir.AllGather, 1, 3, 0), quick)
	simAll(t, progs.AllPairs(ir.Gather, 5, 1, 3), SimOptions{DataTypes: []ir.DataType{ir.Uint8}, Counts: []int64{0, 19}})
}

func TestSimulateErrors(t *testing.T) {
	if _, err := Simulate(irtest.RingAllReduce(2, ir.Simple), SimOptions{}); err == nil || !strings.Contains(err.Error(), "transfer op") {
		t.Errorf("transfer-level program: %v", err)
	}
	custom := irtest.New(ir.Custom, 1, 1).Build()
	if _, err := Simulate(custom, SimOptions{}); err == nil || !strings.Contains(err.Error(), "custom") {
		t.Errorf("custom: %v", err)
	}
	if _, err := Simulate(progs.AllPairs(ir.Broadcast, 2, 1, 0), SimOptions{Roots: []int{2}}); err == nil {
		t.Error("root out of range accepted")
	}
	if _, err := Simulate(nil, SimOptions{}); err == nil {
		t.Error("nil program accepted")
	}
}

// TestSimulateFindsBugs breaks a correct program and expects wrong elements.
func TestSimulateFindsBugs(t *testing.T) {
	p := progs.AllPairs(ir.AllReduce, 2, 1, 0)
	// Rank 1 reduces only its own input: its share is wrong everywhere.
	op := &p.Ranks[1].TBs[0].Ops[2]
	op.Srcs = []ir.Ref{op.Srcs[1], op.Srcs[1]}
	res, err := Simulate(p, SimOptions{DataTypes: []ir.DataType{ir.Int32}, RedOps: []ir.RedOp{ir.Sum}, Counts: []int64{64}, Slices: []int64{1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res {
		// 2 launches x 2 ranks x 32 elements of rank 1's share.
		if c.Err != nil || c.Wrong != 128 {
			t.Errorf("%s: want #wrong=128", c)
		}
	}
	want := "allreduce     int32    sum  out-of-place count=64       slices=1  #wrong=128  time="
	if got := res[0].String(); !strings.HasPrefix(got, want) {
		t.Errorf("line %q, want prefix %q", got, want)
	}
}
