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
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/launch"
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

// TestP2PAcrossNodes: the point-to-point engine between 2 simulated nodes
// of 2 ranks, a ring in both directions (each rank's neighbours are one of
// its node, one of the other): every byte right, from plans too; the pairs
// across nodes connect over port channels (Links), with no offer, import
// or mapping of the other node's memory; new parameters reconnect them
// (the old blocks' regions released), and the engine keeps working.
func TestP2PAcrossNodes(t *testing.T) {
	const n, count = 4, 70001 // bytes: chunks of 4 KiB on 2 channels, a short last one
	w := newNodeWorld(t, 2, 2)
	kept := make([]*P2PPlan, n)
	type rb struct {
		send, recv [2]device.Ptr
		in, out    [2][]byte
	}
	bs := make([]rb, n)
	for r := range n {
		for d := range 2 {
			bs[r].send[d], bs[r].in[d] = w.mem(count)
			bs[r].recv[d], bs[r].out[d] = w.mem(count)
		}
	}
	geo2 := P2PParams{Geometry: launch.P2PGeometry{ChunkBytes: 8192, Slots: 3, Channels: 3}, EagerBytes: 1024, Direct: true}
	for it, prm := range []P2PParams{testP2P, testP2P, testP2P, geo2, geo2} {
		if it == 3 {
			kept = make([]*P2PPlan, n)
		}
		w.must(w.each(func(r int) error {
			var ops []P2POp
			for d, step := range []int{1, n - 1} {
				for i := range bs[r].in[d] {
					bs[r].in[d][i] = byte(r*31 + i*7 + it + d)
				}
				ops = append(ops, P2POp{Peer: (r + step) % n, Buf: bs[r].send[d], Count: count, DataType: ir.Int8},
					P2POp{Recv: true, Peer: (r + n - step) % n, Buf: bs[r].recv[d], Count: count, DataType: ir.Int8})
			}
			return w.p2pCall(r, &P2PRequest{Params: prm, Ops: ops}, &kept[r])
		}))
		w.must(w.each(func(r int) error {
			for d, step := range []int{1, n - 1} {
				from := (r + n - step) % n
				for i, v := range bs[r].out[d] {
					if want := byte(from*31 + i*7 + it + d); v != want {
						return fmt.Errorf("call %d, from rank %d: byte %d = %d, want %d", it, from, i, v, want)
					}
				}
			}
			return nil
		}))
	}
	for r := range n {
		p := w.ex[r].Stats().P2P
		// Peers r±1: one on this node, one on the other; connected twice.
		if p.Connects != 4 || p.Links != 2 || p.Reconnects != 2 || p.Launches != 5 || p.PlanLaunches == 0 {
			t.Errorf("rank %d: %+v, want 4 connections (2 links across nodes), 2 reconnections, 5 launches, some from plans", r, p)
		}
		for _, q := range []int{(r + 1) % n, (r + n - 1) % n} {
			if q/2 != r/2 && len(w.ex[r].p2p.imports[q]) != 0 {
				t.Errorf("rank %d imported %d allocations of rank %d on another node", r, len(w.ex[r].p2p.imports[q]), q)
			}
		}
	}
}
