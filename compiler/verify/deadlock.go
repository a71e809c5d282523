package verify

import (
	"fmt"
	"slices"
	"strings"

	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"

	"github.com/theseus-ccl/theseus/diag"
)

// reportDeadlocks explains a simulation that stopped before every node ran.
//
// When no threadblock can make progress, each blocked threadblock waits for
// one node of another threadblock that has not run yet (or for one that
// never exists). Contracting the happens-before graph to these wait-for
// edges between blocked threadblocks gives a small graph (at most the
// threadblocks of the program) whose cycles are exactly the cycles of the
// happens-before graph that block the run: a blocked op waits for an op
// that comes at or after the blocked op of the next threadblock. Its strong
// components come from gonum's TarjanSCC; each non-trivial one is one
// finding, reported as the chain of blocked ops. A threadblock waiting for a
// node that never exists is a wait that can never be satisfied.
func (c *checker) reportDeadlocks(sc *schedule, skipped bool) {
	total := int32(len(sc.pos))
	if skipped {
		c.errf(diag.Deadlock, -1, -1, -1, "the schedule does not run to completion: %d of %d op executions (2 %ss) can run (deadlock analysis skipped)",
			sc.n, total, c.iterWord())
		return
	}
	var blocked []int32
	for g := range c.tbs {
		if sc.pc[g] < 2*c.tbs[g].nops {
			blocked = append(blocked, int32(g))
		}
	}
	isBlocked := func(g int32) bool { return sc.pc[g] < 2*c.tbs[g].nops }
	found := 0
	wg := simple.NewDirectedGraph()
	for _, g := range blocked {
		on := sc.blockedOn[g]
		switch {
		case on.tb < 0:
			tb := &c.tbs[g]
			s := sc.pc[g] % tb.nops
			c.reportAt(diag.Deadlock, diag.Error, c.pos(int(tb.rank), int(tb.id), int(s)), int(tb.rank), int(tb.id), int(s),
				"add the signal or packet write it waits for, or remove the wait",
				"%s can never run: %s", c.nodeName(g, sc.pc[g]), sc.why[g])
			found++
		case on.tb == g:
			tb := &c.tbs[g]
			s := sc.pc[g] % tb.nops
			c.errf(diag.Deadlock, int(tb.rank), int(tb.id), int(s), "deadlock: %s waits for %s of its own threadblock, which comes later in program order",
				c.nodeName(g, sc.pc[g]), c.nodeName(on.tb, on.idx))
			found++
		case isBlocked(on.tb):
			if wg.Node(int64(g)) == nil {
				wg.AddNode(simple.Node(g))
			}
			if wg.Node(int64(on.tb)) == nil {
				wg.AddNode(simple.Node(on.tb))
			}
			wg.SetEdge(wg.NewEdge(simple.Node(g), simple.Node(on.tb)))
		}
	}
	sccs := topo.TarjanSCC(wg)
	var cycles [][]int32
	for _, comp := range sccs {
		if len(comp) < 2 {
			continue
		}
		start := int32(comp[0].ID())
		for _, nd := range comp[1:] {
			start = min(start, int32(nd.ID()))
		}
		// Each blocked threadblock waits for exactly one other, so the
		// component is one simple cycle: follow it from its first member.
		cyc := []int32{start}
		for g := sc.blockedOn[start].tb; g != start; g = sc.blockedOn[g].tb {
			cyc = append(cyc, g)
		}
		cycles = append(cycles, cyc)
	}
	slices.SortFunc(cycles, func(a, b []int32) int { return int(a[0] - b[0]) })
	for _, cyc := range cycles {
		c.reportCycle(sc, cyc)
		found++
	}
	if found == 0 {
		c.errf(diag.Deadlock, -1, -1, -1, "the schedule does not run to completion: %d of %d op executions (2 %ss) can run", sc.n, total, c.iterWord())
	}
}

// reportCycle reports one wait-for cycle as the chain of blocked ops.
func (c *checker) reportCycle(sc *schedule, cyc []int32) {
	var chain, needs []string
	for _, g := range cyc {
		chain = append(chain, c.nodeName(g, sc.pc[g]))
		on := sc.blockedOn[g]
		h := &c.tbs[on.tb]
		if sc.atBarrier[g] {
			needs = append(needs, fmt.Sprintf("%s needs rank %d tb %d to arrive at the barrier", c.nodeName(g, sc.pc[g]), h.rank, h.id))
		} else {
			needs = append(needs, fmt.Sprintf("%s needs %s", c.nodeName(g, sc.pc[g]), c.nodeName(on.tb, on.idx)))
		}
	}
	chain = append(chain, chain[0])
	tb := &c.tbs[cyc[0]]
	s := sc.pc[cyc[0]] % tb.nops
	c.errf(diag.Deadlock, int(tb.rank), int(tb.id), int(s), "deadlock: %s (%s)", strings.Join(chain, " → "), strings.Join(needs, "; "))
}
