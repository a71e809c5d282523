package interp

import (
	"context"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/internal/progs"
)

// TestRepeatedLaunchFindsDependenciesMet shows why a World must never run
// the same Launch value twice (Request.Launch "incremented once per
// launch"): the dependency counters persist across launches and hold
// epoch<<40 | progress, so after launch L every dependency of launch L is
// already met. A second Run with Launch L lets consumers run before their
// producers (cuda's TestDifferential once retried a case that way and
// compared the GPU with a polluted host result: cuda/diff_retry_test.go).
// Launch L+1 starts a new epoch, in which no dependency is met yet.
func TestRepeatedLaunchFindsDependenciesMet(t *testing.T) {
	tabs := lower(t, progs.DepsAllReduce(2, 1))
	req := Request{Count: 64, DataType: ir.Int32, RedOp: ir.Sum, Slices: 3, Launch: 1}
	w := world(t, tabs, req)
	if err := Run(context.Background(), tabs, req, w); err != nil {
		t.Fatal(err)
	}
	// met reports whether dependency counter word v already satisfies a
	// wait for step `step` of tb in slice s under launch `launch`, as
	// tbRun.waitDep decides.
	met := func(v uint64, launch uint64, s int64, nops, step int) bool {
		epoch := (launch & epochMask) << progressBits
		return v&^progressMask == epoch && v&progressMask >= uint64(s*int64(nops)+int64(step)+1)
	}
	deps := 0
	for r, tab := range tabs {
		for ti, tb := range tab.TBs {
			for k, op := range tb.Ops {
				for _, d := range op.Deps {
					v := w.publish[r][d.TB]
					nops := len(tab.TBs[d.TB].Ops)
					for s := range req.Slices {
						deps++
						if !met(v, 1, s, nops, d.Step) {
							t.Errorf("rank %d tb %d op %d slice %d: dependency on tb %d step %d not met for a repeated launch 1 (counter %#x)", r, ti, k, s, d.TB, d.Step, v)
						}
						if met(v, 2, s, nops, d.Step) {
							t.Errorf("rank %d tb %d op %d slice %d: dependency on tb %d step %d already met for launch 2 (counter %#x)", r, ti, k, s, d.TB, d.Step, v)
						}
					}
				}
			}
		}
	}
	if deps == 0 {
		t.Fatal("DepsAllReduce has no dependencies: the test checks nothing")
	}
}
