//go:build linux

package executor

import (
	"fmt"
	"os"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// newNodeWorld is newWorld with rank r on simulated node r/per: its own
// host id, so that its proxy (keyed by node and local rank) is its own.
func newNodeWorld(t *testing.T, nodes, per int) *world {
	t.Helper()
	if err := ucx.Load(); err != nil {
		t.Skipf("libucp is not installed here (%v)", err)
	}
	if _, ok := os.LookupEnv("UCX_TLS"); !ok {
		t.Setenv("UCX_TLS", "tcp")
	}
	node := make([]int, nodes*per)
	for r := range node {
		node[r] = r / per
	}
	return newWorldOf(t, nodes*per, func(r int, c *Config) {
		*c = Config{InitialScratch: 1 << 20, Node: node, LocalRank: r % per, LocalRanks: per, HostID: fmt.Sprintf("node%d", r/per)}
	})
}

// TestMSCCLPPPortAcrossNodes: MSCCL++'s v0.7 sendrecv plan (proxy channels:
// pwsf, wait, copy) runs as written between 2 simulated nodes: its puts,
// signals and flushes go through the proxy, and no memory of the other
// node is mapped (the L0 imports are the rank's own only).
func TestMSCCLPPPortAcrossNodes(t *testing.T) {
	const path = "../../../shared/corpus/mscclpp-json/v0.7/mscclpp-v0.7.0_sendrecv.json"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Skipf("no corpus here: %v", err)
	}
	src := load.Parse(path, load.Detect(path, data), data)
	if src.Program == nil {
		t.Fatalf("%s: %v", path, src.Diags)
	}
	for _, ch := range src.Program.Ranks[0].Channels {
		if ch.Type != ir.PortChannel {
			t.Fatalf("the plan's channel is %v, want port", ch.Type)
		}
	}
	b, ds, err := passes.Compile(src.Program, passes.Options{})
	if err != nil || b == nil {
		t.Fatalf("compile: %v %v", err, ds)
	}
	s := &Schedule{ID: 1, Name: "mscclpp_sendrecv", Replaces: -1, Bundle: b}
	w := newNodeWorld(t, 2, 1)
	for i, count := range []int64{1, 1000, 1 << 16} {
		c := devicetest.Case{Coll: ir.SendRecv, DataType: ir.Float32, RedOp: ir.Sum, Count: count, NRanks: 2, Seed: uint64(i + 1)}
		for range 2 { // the second from the caches
			if wrong, errs := w.run(s, c, i == 1); wrong != 0 {
				t.Fatalf("%v: %d wrong: %v", c, wrong, errs)
			} else {
				w.must(errs)
			}
		}
	}
	for r, e := range w.ex {
		if st := e.Stats(); st.Created.Connections != 1 {
			t.Errorf("rank %d: %d connections (want the proxy's one, no memory imported)", r, st.Created.Connections)
		}
		if len(e.l0.allImports) != 0 {
			t.Errorf("rank %d maps %d allocations of the other node", r, len(e.l0.allImports))
		}
	}
}
