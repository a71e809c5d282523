//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/load"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/host"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/transport/proxy"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// newNodeWorld is newWorld with rank r on simulated node r/per: its own
// host id, so that its proxy (keyed by node and local rank) is its own.
func newNodeWorld(t *testing.T, nodes, per int) *world {
	t.Helper()
	return newNodeWorldDev(t, nodes, per, host.Backend(), 0)
}

// newNodeWorldDev is newNodeWorld on backend dev with lanes proxy lanes
// (Config.ProxyLanes; 0: THESEUS_PROXY_LANES).
func newNodeWorldDev(t *testing.T, nodes, per int, dev device.Backend, lanes int) *world {
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
	return newWorldDev(t, nodes*per, dev, func(r int, c *Config) {
		*c = Config{InitialScratch: 1 << 20, Node: node, LocalRank: r % per, LocalRanks: per, HostID: fmt.Sprintf("node%d", r/per), ProxyLanes: lanes}
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

// TestPortLanes: Config.ProxyLanes (what the communicator fills from
// THESEUS_PROXY_LANES) is the number of proxies of a rank and of
// connections to each peer on another node; the hierarchical allreduce's
// channel ends spread over them compute right.
func TestPortLanes(t *testing.T) {
	const lanes = 3
	w := newNodeWorldDev(t, 2, 2, host.Backend(), lanes)
	hier := compile(t, 1, "hier", gen.Options{Collective: ir.AllReduce, NRanks: 4, NLocalRanks: 2})
	c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 4099, NRanks: 4, Seed: 5}
	if wrong, errs := w.run(hier, c, false); wrong != 0 {
		t.Fatalf("%d wrong: %v", wrong, errs)
	} else {
		w.must(errs)
	}
	for r, e := range w.ex {
		if len(e.port.prx) != lanes || len(e.port.peers) == 0 {
			t.Errorf("rank %d: %d proxies, %d peers on the other node: want %d proxies and a peer", r, len(e.port.prx), len(e.port.peers), lanes)
		}
		for q, pp := range e.port.peers {
			if len(pp.lanes) != lanes {
				t.Errorf("rank %d: %d connections to rank %d, want %d", r, len(pp.lanes), q, lanes)
			}
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
	p2pAcrossNodes(t, newNodeWorld(t, 2, 2))
}

// p2pAcrossNodes is TestP2PAcrossNodes on w (2 nodes of 2 ranks).
func p2pAcrossNodes(t *testing.T, w *world) {
	const n, count = 4, 70001 // bytes: chunks of 4 KiB on 2 channels, a short last one
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
		// The channels spread over the lanes: channel ch on lane ch mod N,
		// so with 2 and 3 channels every lane below 3 carried descriptors
		// (2 lanes at 2 ranks a node by default; THESEUS_PROXY_LANES may
		// give more, which the channels do not all reach).
		for q, l := range w.ex[r].p2p.links {
			if len(l.lanes) != len(w.ex[r].port.prx) {
				t.Errorf("rank %d: %d lanes to rank %d, want one a proxy (%d)", r, len(l.lanes), q, len(w.ex[r].port.prx))
			}
			for i, ln := range l.lanes[:min(len(l.lanes), geo2.Geometry.Channels)] {
				if st := ln.conn.Stats(); st.Descriptors == 0 {
					t.Errorf("rank %d: lane %d to rank %d carried nothing: %v", r, i, q, st)
				}
			}
		}
	}
}

// mappedHost is the host backend with a device.HostMapper, as the CUDA
// backend has: its "mapped" memory is host memory at the same address
// (Host and Dev alike), ToHost a copy. It records the point-to-point
// launches prepared, so that a test sees what a kernel would be given.
type mappedHost struct {
	device.Backend
	mu       sync.Mutex
	mapped   map[device.Ptr]int64 // live
	ever     map[device.Ptr]bool  // every mapped allocation made
	prepared []*device.P2PArgs
	colls    []*device.Args // collective launches prepared
}

func (m *mappedHost) AllocMapped(size int64) (device.MappedMem, error) {
	p, err := m.Backend.Alloc(size)
	if err != nil {
		return device.MappedMem{}, err
	}
	b, err := host.Bytes(p, size)
	if err != nil {
		return device.MappedMem{}, err
	}
	clear(b)
	m.mu.Lock()
	m.mapped[p], m.ever[p] = size, true
	m.mu.Unlock()
	return device.MappedMem{Host: unsafe.Pointer(&b[0]), Dev: p, Size: size}, nil
}

func (m *mappedHost) FreeMapped(mm device.MappedMem) error {
	m.mu.Lock()
	delete(m.mapped, mm.Dev)
	m.mu.Unlock()
	return m.Backend.Free(mm.Dev)
}

func (m *mappedHost) ToHost(dst unsafe.Pointer, src device.Ptr, n int64) error {
	b, err := host.Bytes(src, n)
	if err != nil {
		return err
	}
	copy(unsafe.Slice((*byte)(dst), n), b)
	return nil
}

func (m *mappedHost) BindThread() error { return nil }

func (m *mappedHost) Prepare(a *device.Args) (device.Prepared, error) {
	m.mu.Lock()
	m.colls = append(m.colls, a)
	m.mu.Unlock()
	return m.Backend.Prepare(a)
}

func (m *mappedHost) PrepareP2P(a *device.P2PArgs) (device.Prepared, error) {
	m.mu.Lock()
	m.prepared = append(m.prepared, a)
	m.mu.Unlock()
	return m.Backend.(device.P2PPreparer).PrepareP2P(a)
}

// capturingStream is a stream that says it is being captured.
type capturingStream struct{ device.Stream }

func (capturingStream) Capturing() bool { return true }

// TestP2PAcrossNodesMapped: on a backend with a HostMapper (the CUDA
// backend's setup, run here by the host engine over the staged proxy path),
// the point-to-point connections across nodes put each rank's own block in
// mapped host memory (the peer's puts and signals land there), give the
// launch a device ticket counter for the kernel's posts to the FIFO, and
// wake the proxy before each launch; every byte is right (the ring of
// TestP2PAcrossNodes); a launch across nodes during a CUDA graph capture is
// refused as ErrCapture, naming the limit, and the next call works; Close
// frees the mapped blocks. With kernel staging (THESEUS_PROXY_STAGING=kernel,
// the default) the copy of the peer's block that the kernel writes and the
// proxy puts from is mapped host memory too (no staging copy); with
// =proxy it is device memory, staged by the proxy.
func TestP2PAcrossNodesMapped(t *testing.T) {
	eachStaging(t, p2pAcrossNodesMapped)
}

// eachStaging runs f as a subtest with THESEUS_PROXY_STAGING=kernel
// (kernel true) and =proxy.
func eachStaging(t *testing.T, f func(t *testing.T, kernel bool)) {
	for _, mode := range []string{"kernel", "proxy"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("THESEUS_PROXY_STAGING", mode)
			env.Reset()
			t.Cleanup(env.Reset)
			f(t, mode == "kernel")
		})
	}
}

// newMappedHost is the host backend with a HostMapper (mappedHost).
func newMappedHost() *mappedHost {
	return &mappedHost{Backend: host.Backend(), mapped: map[device.Ptr]int64{}, ever: map[device.Ptr]bool{}}
}

func p2pAcrossNodesMapped(t *testing.T, kernel bool) {
	dev := newMappedHost()
	w := newNodeWorldDev(t, 2, 2, dev, 0)
	p2pAcrossNodes(t, w)
	const n = 4
	for r := range n {
		e := w.ex[r]
		for q, c := range e.p2p.conns {
			if c == nil {
				continue
			}
			cross := q/2 != r/2
			if cross != (c.mapped.Host != nil) || cross != (c.port != nil) {
				t.Errorf("rank %d, peer %d (across nodes %v): mapped block %v, port %v", r, q, cross, c.mapped.Host != nil, c.port != nil)
				continue
			}
			if !cross {
				continue
			}
			if c.local != c.mapped.Dev || dev.mapped[c.local] < c.geo.ConnBytes() {
				t.Errorf("rank %d, peer %d: block at %#x is not the mapped allocation %#x of %d bytes", r, q, c.local, c.mapped.Dev, dev.mapped[c.local])
			}
			l := e.p2p.links[q]
			if l == nil || len(l.lanes) != len(e.port.prx) || len(c.port.Lanes) != len(l.lanes) || len(l.lanes) < 2 {
				t.Errorf("rank %d, peer %d: link %+v and port %+v for %d proxies (lanes), want a lane each (at least 2: 4 / 2 ranks per node)", r, q, l, c.port, len(e.port.prx))
				continue
			}
			for i, ln := range l.lanes {
				if ln.head == 0 || c.port.Lanes[i].Head != ln.head || c.port.Lanes[i].Conn != device.PortConn(ln.pc) {
					t.Errorf("rank %d, peer %d, lane %d: no device ticket counter for the lane's FIFO (port %+v)", r, q, i, c.port)
				}
			}
		}
		for _, ent := range e.p2p.l3 {
			if len(ent.kick) != len(e.port.prx) {
				t.Errorf("rank %d: a launch wakes %d proxy connections, want the %d lanes of its one peer across nodes", r, len(ent.kick), len(e.port.prx))
			}
		}
	}
	// Every launch prepared with a peer on another node names its mapped
	// block, its copy of the peer's block and the FIFO's counter.
	dev.mu.Lock()
	ports := 0
	for _, a := range dev.prepared {
		for _, pr := range append(append([]device.P2PPeer(nil), a.Sends...), a.Recvs...) {
			if pr.Peer/2 == a.Rank/2 {
				if pr.Port != nil {
					t.Errorf("rank %d: peer %d of its node has a port", a.Rank, pr.Peer)
				}
				continue
			}
			ports++
			if pr.Port == nil || slices.ContainsFunc(pr.Port.Lanes, func(l device.P2PLane) bool { return l.Head == 0 }) || !dev.ever[pr.Local.Ptr] || dev.ever[pr.Remote.Ptr] != kernel || len(pr.Port.Arrive) != a.Geometry.Channels {
				t.Errorf("rank %d, peer %d: %+v, want a port with a counter, the own block mapped and the copy mapped %v", a.Rank, pr.Peer, pr, kernel)
			}
		}
	}
	dev.mu.Unlock()
	if ports == 0 {
		t.Fatal("no launch with a peer on another node was prepared")
	}

	// Capture: refused (not sticky), named; the same call then runs.
	r := 0
	send, _ := w.mem(64)
	recv, _ := w.mem(64)
	params := testP2P
	req := func() *P2PRequest {
		return &P2PRequest{Params: params, Ops: []P2POp{{Peer: 2, Buf: send, Count: 64, DataType: ir.Int8}, {Recv: true, Peer: 2, Buf: recv, Count: 64, DataType: ir.Int8}}}
	}
	// pair: ranks 0 and 2 (on different nodes) exchange once, eagerly.
	pair := func() {
		w.must(w.each(func(rank int) error {
			if rank != 0 && rank != 2 {
				return nil
			}
			var kept *P2PPlan
			rq := req()
			rq.Ops[0].Peer, rq.Ops[1].Peer = 2-rank, 2-rank
			return w.p2pCall(rank, rq, &kept)
		}))
	}
	pair()
	_, err := w.ex[r].ExecuteP2P(context.Background(), req(), capturingStream{w.st[r]})
	if !errors.Is(err, ErrCapture) || !strings.Contains(err.Error(), "CUDA graph capture") || !strings.Contains(err.Error(), "other nodes") {
		t.Fatalf("captured launch across nodes: %v, want ErrCapture naming the limit", err)
	}
	if w.ex[r].Err() != nil {
		t.Fatalf("the refusal is sticky: %v", w.ex[r].Err())
	}
	pair()
	// After a capture (any: a launch of one node's peers, here marked), a
	// new geometry replaces the connection but keeps its blocks, which a
	// captured launch may use; Close frees their mapped memory too.
	for _, rank := range []int{0, 2} {
		w.ex[rank].p2p.captured.Store(true)
	}
	params.Geometry.ChunkBytes *= 2
	pair()
	for _, rank := range []int{0, 2} {
		if len(w.ex[rank].p2p.kept) != 1 {
			t.Errorf("rank %d keeps %d replaced connections, want 1", rank, len(w.ex[rank].p2p.kept))
		}
	}
	for _, e := range w.ex {
		e.Close()
	}
	dev.mu.Lock()
	defer dev.mu.Unlock()
	for p, n := range dev.mapped {
		if n >= testP2P.Geometry.ConnBytes() && n < 1<<20 { // (the proxy's FIFOs are freed with their connections)
			t.Errorf("a mapped block of %d bytes at %#x outlives Close", n, p)
		}
	}
}

// TestPortStageMapped: on a backend with a HostMapper whose UCX lacks CUDA
// support (the staged path, as on the GPU machine), each rank allocates one
// kernel staging buffer of 32 threadblocks x 512 KiB in mapped host memory
// at its first connection across nodes, registers it with every
// connection as a host source (direct: the proxy reads it itself), and
// every prepared launch with port ends carries it (device.PortStage) and
// each end its region (PortEnd.Stage), and Close frees the buffer.
// THESEUS_PROXY_STAGING=proxy leaves it out (the proxy's copies). The
// values are not checked here: on the staged path the peers' puts land in
// the scratch's mirror, which only the CUDA kernel reads (the host
// interpreter reads the scratch); nccl-tests across simulated nodes on the
// GPU check them (bench/gpu/run-nodes.sh).
func TestPortStageMapped(t *testing.T) {
	eachStaging(t, func(t *testing.T, kernel bool) {
		dev := newMappedHost()
		w := newNodeWorldDev(t, 2, 2, dev, 2)
		hier := compile(t, 1, "hier", gen.Options{Collective: ir.AllReduce, NRanks: 4, NLocalRanks: 2, Channels: 4})
		c := devicetest.Case{Coll: ir.AllReduce, DataType: ir.Float32, RedOp: ir.Sum, Count: 4099, NRanks: 4, Seed: 7}
		_, errs := w.run(hier, c, false)
		for _, err := range errs {
			if err != nil && !strings.Contains(err.Error(), "elements wrong") {
				t.Fatal(err) // (wrong values are expected here: above)
			}
		}
		// Every launch wakes the lanes its ends post to and lane 0 of each
		// peer across nodes (the launch fence's).
		for r, e := range w.ex {
			for _, ent := range e.l1 {
				reached := map[*portPeer]bool{}
				for c, er := range ent.ends {
					if er.port != nil && !slices.Contains(ent.kick, er.port.lanes[er.lane].pc) {
						t.Errorf("rank %d: end %d's launch does not wake its lane %d to rank %d", r, c, er.lane, er.peer)
					}
					reached[er.port] = er.port != nil
				}
				for pp, ok := range reached {
					if ok && !slices.Contains(ent.kick, pp.lanes[0].pc) {
						t.Errorf("rank %d: a launch does not wake lane 0 (the launch fence's) of rank %d", r, pp.q)
					}
				}
			}
		}
		stages := map[device.Ptr]bool{}
		for r, e := range w.ex {
			st := e.port.stage
			if !kernel {
				if st.Size != 0 {
					t.Errorf("rank %d: a kernel staging buffer of %d bytes with THESEUS_PROXY_STAGING=proxy", r, st.Size)
				}
				continue
			}
			if st.Size != stageTBs*stageTBBytes || dev.mapped[st.Dev] != st.Size {
				t.Fatalf("rank %d: staging buffer %+v, want %d bytes of live mapped memory", r, st, stageTBs*stageTBBytes)
			}
			stages[st.Dev] = true
			if len(e.port.peers) == 0 {
				t.Fatalf("rank %d: no connection across nodes", r)
			}
			for q, pp := range e.port.peers {
				for lane, l := range pp.lanes {
					reg, ok := l.conn.Region(pp.stage)
					if !pp.stageOK || !ok || reg.Path != proxy.Direct || reg.Mem.Addr != uintptr(st.Host) || int64(reg.Mem.Size) != st.Size {
						t.Errorf("rank %d, peer %d, lane %d: staging region %d (%v) = %+v, want the buffer as a direct host source", r, q, lane, pp.stage, ok, reg)
					}
				}
			}
		}
		if kernel && len(stages) != w.n {
			t.Errorf("%d staging buffers for %d ranks", len(stages), w.n)
		}
		dev.mu.Lock()
		launches := 0
		for _, a := range dev.colls {
			ports := 0
			for _, e := range a.Ends {
				if e.Port == nil {
					continue
				}
				ports++
				if kernel && (e.Port.Stage.Size != stageTBs*stageTBBytes) {
					t.Errorf("rank %d: a port end without the staging region: %+v", a.Rank, e.Port.Stage)
				}
			}
			if ports == 0 {
				continue
			}
			launches++
			switch {
			case !kernel && a.PortStage != nil:
				t.Errorf("rank %d: PortStage %+v with THESEUS_PROXY_STAGING=proxy", a.Rank, a.PortStage)
			case kernel && (a.PortStage == nil || a.PortStage.TBs != stageTBs || a.PortStage.TBBytes != stageTBBytes || !stages[a.PortStage.Mem.Dev]):
				t.Errorf("rank %d: PortStage %+v, want the rank's buffer of %d x %d bytes", a.Rank, a.PortStage, stageTBs, stageTBBytes)
			}
		}
		dev.mu.Unlock()
		if launches == 0 {
			t.Fatal("no launch with port ends was prepared")
		}
		for _, e := range w.ex {
			e.Close()
		}
		dev.mu.Lock()
		defer dev.mu.Unlock()
		for p := range stages {
			if _, live := dev.mapped[p]; live {
				t.Errorf("staging buffer %#x still mapped after Close", p)
			}
		}
	})
}

// TestAutoLanes: THESEUS_PROXY_LANES=0 (the default) gives 4 / the ranks
// per node, at least 1, and Config.ProxyLanes 0 resolves to it; an explicit
// value is kept.
func TestAutoLanes(t *testing.T) {
	for per, want := range map[int]int{0: 4, 1: 4, 2: 2, 3: 1, 4: 1, 8: 1, 72: 1} {
		if got := AutoLanes(per); got != want {
			t.Errorf("AutoLanes(%d) = %d, want %d", per, got, want)
		}
	}
	for _, tc := range []struct{ env, per, want int }{{0, 2, 2}, {0, 1, 4}, {3, 2, 3}} {
		t.Setenv("THESEUS_PROXY_LANES", fmt.Sprint(tc.env))
		env.Reset()
		c, err := ConfigFromEnv(Config{LocalRanks: tc.per})
		if err != nil || c.ProxyLanes != tc.want {
			t.Errorf("THESEUS_PROXY_LANES=%d, %d ranks per node: %d lanes (%v), want %d", tc.env, tc.per, c.ProxyLanes, err, tc.want)
		}
	}
	env.Reset()
}

// TestPortLaneSpread: laneAssign gives an end and its peer's end the same
// lane, a channel and its reverse (ends c <-> c' and c' <-> c) one lane,
// and spreads the distinct pairs of ends of the generators' schedules
// across nodes over every lane evenly, so that each direction's data uses
// every lane (the hierarchical allreduce pairs end 2k with the peer's
// 2k+1: min(c, pc) mod N put them on the even lanes only).
func TestPortLaneSpread(t *testing.T) {
	for _, tc := range []struct {
		algo           string
		nranks, nlocal int
		coll           ir.Collective
	}{
		{"hier", 2, 1, ir.AllReduce},
		{"hier", 4, 2, ir.AllReduce},
		{"hier", 4, 2, ir.AllGather},
		{"ring", 4, 2, ir.AllReduce},
		{"direct", 4, 1, ir.AllToAll},
	} {
		s := compile(t, 1, tc.algo, gen.Options{Collective: tc.coll, NRanks: tc.nranks, NLocalRanks: tc.nlocal, Channels: 8})
		node := func(r int) int { return r / tc.nlocal }
		for _, nl := range []int{1, 2, 3, 4} {
			name := fmt.Sprintf("%s-%v-%dx%d-lanes%d", tc.algo, tc.coll, tc.nranks/tc.nlocal, tc.nlocal, nl)
			lanes := make([][]int, tc.nranks)
			tabs := make([]*optable.Table, tc.nranks)
			for r := range tc.nranks {
				tab, err := s.Table(r)
				if err != nil {
					t.Fatal(err)
				}
				tabs[r] = tab
				lanes[r] = laneAssign(tab.Channels, func(l int) int { return l }, func(q int) bool { return node(q) != node(r) }, nl)
			}
			for r, tab := range tabs {
				type key struct{ q, lo, hi int }
				pairLane := map[key]int{}
				perLane := map[int][]int{} // peer -> distinct pairs per lane
				for c, ch := range tab.Channels {
					l := lanes[r][c]
					if node(ch.Peer) == node(r) {
						if l != -1 {
							t.Errorf("%s: rank %d end %d (same node) on lane %d", name, r, c, l)
						}
						continue
					}
					if pl := lanes[ch.Peer][ch.PeerChannel]; l != pl || l < 0 || l >= nl {
						t.Errorf("%s: rank %d end %d on lane %d, its peer's end %d.%d on lane %d", name, r, c, l, ch.Peer, ch.PeerChannel, pl)
					}
					k := key{ch.Peer, min(c, ch.PeerChannel), max(c, ch.PeerChannel)}
					if pl, ok := pairLane[k]; ok {
						if pl != l {
							t.Errorf("%s: rank %d: the pair %v on lanes %d and %d (a channel and its reverse apart)", name, r, k, pl, l)
						}
						continue
					}
					pairLane[k] = l
					if perLane[ch.Peer] == nil {
						perLane[ch.Peer] = make([]int, nl)
					}
					perLane[ch.Peer][l]++
				}
				for q, per := range perLane {
					if mn, mx := slices.Min(per), slices.Max(per); mx-mn > 1 {
						t.Errorf("%s: rank %d's pairs with rank %d per lane %v: not even", name, r, q, per)
					}
				}
			}
		}
	}
}
