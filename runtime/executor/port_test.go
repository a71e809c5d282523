//go:build linux

package executor

import (
	"fmt"
	"os"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
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

// TestPortMigration: on 2 simulated nodes of 2 ranks, a ring and a
// hierarchical allreduce (both with port channels between the nodes: the
// ring's to the previous rank, hier's to the same local rank of the other
// node) take turns: hier is a delta migration of the ring that adds only
// the connection it lacks, switching back and forth makes none, and every
// result is right.
func TestPortMigration(t *testing.T) {
	w := newNodeWorld(t, 2, 2)
	o := gen.Options{Collective: ir.AllReduce, NRanks: 4, NLocalRanks: 2}
	ring, hier := compile(t, 1, "ring", o), compile(t, 2, "hier", o)
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 4099, NRanks: 4, Seed: 3}
	conns := make([]int, w.n)
	for i, s := range []*Schedule{ring, hier, ring, hier} {
		if wrong, errs := w.run(s, c, false); wrong != 0 {
			t.Fatalf("call %d (%s): %d wrong: %v", i, s.Name, wrong, errs)
		} else {
			w.must(errs)
		}
		for r, e := range w.ex {
			st := e.Stats()
			if i <= 1 {
				conns[r] = st.Created.Connections
			} else if st.Created.Connections != conns[r] {
				t.Errorf("call %d: rank %d has %d connections, %d after both schedules", i, r, st.Created.Connections, conns[r])
			}
			if i == 1 && (st.L1Migrations != 1 || st.LastMigration.From != ring.ID) {
				t.Errorf("rank %d: %d migrations, the last from %d: want hier materialised from ring", r, st.L1Migrations, st.LastMigration.From)
			}
		}
	}
	for r := range conns {
		if conns[r] != 1+2 { // the same node's peer imported, the ring's and hier's of the other node
			t.Errorf("rank %d: %d connections, want 3", r, conns[r])
		}
	}
}
