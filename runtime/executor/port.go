package executor

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync/atomic"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/transport/proxy"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// Ranks on different nodes (Config.Node) never map each other's memory:
// their channels are port channels, executed by the process's proxy over
// UCX (runtime/transport/proxy, docs/transport.md "Integration"). The
// executor keeps one proxy connection per peer on another node, made at
// the first materialisation with a channel end toward it (the peer makes
// its own at the same request: channel ends pair), and reuses it for every
// later schedule, as it reuses imported memory for memory channels:
//
//   - L1: the connection (Connect), this rank's scratch registered and
//     shared, a fence channel (fenced launches meet across nodes through
//     it: the proxy has no done words of the peer's); per channel end, a
//     semaphore slot of a port pool (host memory; on CUDA pinned and
//     mapped into the device) registered with the connection, its region
//     and offset sent to the peer, which adds the channel (AddChannel);
//   - L3: this rank's own buffers, the sources of its puts, are
//     registered locally. The peers' user buffers are not reachable across
//     nodes yet (checkCrossNode): puts go into the peers' scratch.
//
// ErrCrossNode is wrapped by the error of a schedule with a memory channel
// between ranks of different nodes.
var ErrCrossNode = errors.New("executor: a memory channel between nodes")

// node is physical rank q's node.
func (e *Executor) node(q int) int {
	if q < len(e.cfg.Node) {
		return e.cfg.Node[q]
	}
	return 0
}

// crossNode reports whether physical rank q is on another node than this
// rank.
func (e *Executor) crossNode(q int) bool { return e.node(q) != e.node(e.cfg.Rank) }

// layoutText describes the job layout for messages.
func (e *Executor) layoutText() string {
	nodes := 0
	for q := range e.n {
		nodes = max(nodes, e.node(q)+1)
	}
	per := 0
	for q := range e.n {
		if e.node(q) == 0 {
			per++
		}
	}
	return fmt.Sprintf("%d nodes of %d ranks (MSCCLPP_HOSTID)", nodes, per)
}

// checkCrossNode refuses a schedule whose memory channels join ranks of
// different nodes under the root rotation shift. Every rank checks every
// rank's channels (the bundle's resource summaries), so every rank fails
// the same request before any exchange, and none waits for a peer that
// gave up.
func (e *Executor) checkCrossNode(s *Schedule, shift int) error {
	if len(e.cfg.Node) == 0 {
		return nil
	}
	n := e.n
	phys := func(l int) int { return (l + shift) % n }
	for l, rr := range s.Bundle.Ranks {
		for c, ch := range rr.Channels {
			a, b := phys(l), phys(ch.Peer)
			if ch.Type == ir.MemoryChannel && e.node(a) != e.node(b) {
				return fmt.Errorf("%w: schedule %q: channel %d of rank %d (logical %d) is a memory channel to rank %d (logical %d), and rank %d is on node %d, rank %d on node %d (%s): ranks of different nodes share no memory, so across nodes a schedule needs port channels (the generators emit them for the job's nlocalranks)",
					ErrCrossNode, s.Name, c, a, l, b, ch.Peer, a, e.node(a), b, e.node(b), e.layoutText())
			}
		}
		for _, reg := range rr.Registrations {
			if a, b := phys(l), phys(reg.Peer); e.node(a) != e.node(b) {
				return fmt.Errorf("%w: schedule %q: rank %d (logical %d) puts into the %s of rank %d (logical %d) on another node (node %d, rank %d on node %d; %s): across nodes only puts into the scratch are supported yet (the peers' user buffers are kept current by mapping them: docs/known-issues.md 25)",
					ErrCrossNode, s.Name, a, l, reg.Buf.LongName(), b, reg.Peer, e.node(a), b, e.node(b), e.layoutText())
			}
		}
	}
	return nil
}

// portState is the executor's side of the proxy: the process's Proxy,
// a connection per peer on another node, and the port semaphore pools.
type portState struct {
	// prx are the process's proxies of this rank, one per lane
	// (THESEUS_PROXY_LANES): each its own UCX context, worker, progress
	// goroutine and so TCP connection; release gives them back.
	prx     []*proxy.Proxy
	release []func()
	peers   map[int]*portPeer
	pools   []*pool
	// mirror is the staged path's copy of the scratch in pinned,
	// device-mapped host memory, which the peers' puts into the scratch
	// land in (one per rank, registered with every connection); old are
	// mirrors of scratch buffers replaced by growth while CUDA graphs may
	// still use them (freed at Close).
	mirror device.MappedMem
	old    []device.MappedMem
	// stage is the kernel staging buffer (THESEUS_PROXY_STAGING=kernel on
	// the staged path: device.PortStage), registered with every
	// connection; Size 0: none.
	stage device.MappedMem
	// logged: the INIT line naming the path of device memory was written.
	logged bool
}

// Kernel staging (device.PortStage): 32 threadblocks of 512 KiB each (two
// halves of 256 KiB, a put of one UCX TCP segment each: ucx.Settings),
// 16 MiB of pinned host memory per rank.
const (
	stageTBs     = 32
	stageTBBytes = 512 << 10
)

// kernelStaging reports THESEUS_PROXY_STAGING=kernel (the default; the
// proxy checks the value at New).
func kernelStaging() bool {
	v, err := env.ProxyStaging.Enum()
	return err != nil || v != "proxy"
}

// portPeer is the connection to one peer on another node: one proxy
// connection per lane. Every region is registered on every lane in the
// same order, so that its id is the same on all of them; an end's
// channel lives on the lane of its pair of ends (laneAssign).
type portPeer struct {
	q     int
	lanes laneSet
	// scratch is this rank's scratch as a region of conn (re-registered at
	// growth), peerScratch the peer's.
	scratch    uint16
	scratchMem device.Mem
	// mirror is the mirror as a host source region of conn (staged
	// path: relays put from it), mirrorOK whether there is one.
	mirror   uint16
	mirrorOK bool
	// stage is the kernel staging buffer as a host source region of conn,
	// stageOK whether there is one.
	stage       uint16
	stageOK     bool
	peerScratch device.PortBuf
	// pools: this rank's port pools registered with conn (pool id ->
	// region id).
	pools map[uint32]uint16
	// regs: this rank's allocations registered with conn (sources and
	// destinations of puts), by identity.
	regs map[device.Region]uint16
	// fence is the channel of fenced launches (fenceSlot its semaphore).
	fence     uint16
	fenceSlot *slot
}

// portLane is one lane's connection to the peer.
type portLane struct {
	conn *proxy.Conn
	pc   *portConn
	// head is the FIFO's ticket counter for device producers (8 bytes of
	// device memory; 0 without a HostMapper).
	head device.Ptr
}

// laneAssign gives each channel end of chans (one rank's ends,
// optable.Channel: Peer and PeerChannel) that reaches a peer on another
// node its lane, an index below nlanes (-1 for the other ends): for each
// peer, the distinct pairs {end, peer's end} (unordered) between the two
// ranks in increasing order, the k-th on lane k mod nlanes. Both ranks of a
// pair list the same pairs in the same order, so an end and its peer's get
// the same lane; a channel and its reverse (end c paired with the peer's
// c', and c' with c, as the generators emit them) share one lane, and the
// distinct pairs fill every lane in turn, so that each direction's data
// spreads over every lane (docs/transport.md, "Lanes", for the rules this
// replaced). phys maps a logical peer to its rank, cross says which ranks
// are on other nodes.
func laneAssign(chans []optable.Channel, phys func(int) int, cross func(int) bool, nlanes int) []int {
	lanes := make([]int, len(chans))
	type pair struct{ c, lo, hi int }
	byPeer := map[int][]pair{}
	for c, ch := range chans {
		lanes[c] = -1
		if q := phys(ch.Peer); nlanes > 0 && cross(q) {
			byPeer[q] = append(byPeer[q], pair{c, min(c, ch.PeerChannel), max(c, ch.PeerChannel)})
		}
	}
	for _, ps := range byPeer {
		slices.SortFunc(ps, func(a, b pair) int { return cmp.Or(cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi)) })
		k := -1
		for i, p := range ps {
			if i == 0 || p.lo != ps[i-1].lo || p.hi != ps[i-1].hi {
				k++
			}
			lanes[p.c] = k % nlanes
		}
	}
	return lanes
}

// laneSet is a rank's connections to one peer on another node, one per
// lane (proxy): the collectives' (portPeer) or the point-to-point
// engine's (p2pLink). Every region is registered on every lane in the
// same order, so that its id is the same on all of them.
type laneSet []portLane

// connectLanes connects to physical rank q on every proxy of this rank,
// the connection of lane i with setup tag tag(i) (proxy.ConnOptions.Tag),
// each with a device ticket counter on a backend with a HostMapper. On an
// error the lanes made are closed.
func (e *Executor) connectLanes(ctx context.Context, q int, tag func(lane int) uint8) (laneSet, error) {
	prxs, err := e.theProxies()
	if err != nil {
		return nil, err
	}
	var ls laneSet
	for lane, prx := range prxs {
		o := e.connOptions()
		o.Tag = tag(lane)
		conn, err := prx.Connect(ctx, e.net, e.cfg.Rank, []int{q}, o)
		if err != nil {
			ls.close()
			return nil, err
		}
		l := portLane{conn: conn, pc: &portConn{c: conn, fifo: device.Ptr(conn.FIFO().Block().Device)}}
		if e.mapper() != nil {
			if l.head, err = e.small(8); err != nil {
				conn.Close()
				ls.close()
				return nil, err
			}
		}
		ls = append(ls, l)
	}
	return ls, nil
}

// register registers m on every lane (Conn.Register) and returns its id,
// the same on all of them.
func (ls laneSet) register(m proxy.Mem) (uint16, error) {
	var id uint16
	for i, l := range ls {
		r, err := l.conn.Register(m)
		if err != nil {
			return 0, err
		}
		if i == 0 {
			id = r.ID
		} else if r.ID != id {
			return 0, fmt.Errorf("internal: region %d on lane %d is region %d on lane 0", r.ID, i, id)
		}
	}
	return id, nil
}

// share shares the regions registered since the last share on every lane.
func (ls laneSet) share(ctx context.Context) error {
	for _, l := range ls {
		if err := l.conn.Share(ctx); err != nil {
			return err
		}
	}
	return nil
}

// release releases region id on every lane.
func (ls laneSet) release(id uint16) error {
	for _, l := range ls {
		if err := l.conn.Release(id); err != nil {
			return err
		}
	}
	return nil
}

// close closes every lane's connection.
func (ls laneSet) close() {
	for _, l := range ls {
		l.conn.Close()
	}
}

// portConn adapts a proxy connection to device.PortConn.
type portConn struct {
	c    *proxy.Conn
	fifo device.Ptr
}

func (p *portConn) Put(ch, src uint16, srcOff uint64, dst uint16, dstOff uint64, size uint32, signal bool) (uint64, error) {
	op := proxy.OpPut
	if signal {
		op |= proxy.OpSignal
	}
	return p.c.Post(proxy.Desc{Op: op, Channel: ch, SrcRegion: src, SrcOff: srcOff, DstRegion: dst, DstOff: dstOff, Size: size})
}
func (p *portConn) Wait(t uint64) error    { return p.c.Wait(t) }
func (p *portConn) Signal(ch uint16) error { return p.c.Signal(ch) }
func (p *portConn) Flush(ch uint16) error  { return p.c.Flush(ch) }
func (p *portConn) Help()                  { p.c.Help() }
func (p *portConn) Kick()                  { p.c.Kick() }
func (p *portConn) Err() error             { return p.c.Err() }
func (p *portConn) FIFO() device.Ptr       { return p.fifo }
func (p *portConn) String() string         { return "port connection of rank " + strconv.Itoa(p.c.Rank()) }
func (p *portConn) WaitSignal(sem *uint64, want uint64, peer int, stop func() error) error {
	return p.c.WaitSignalStop(sem, want, peer, stop)
}
func (p *portConn) WaitUntil(cond func() bool, peer int, stop func() error) error {
	return p.c.WaitUntil(cond, peer, stop)
}

// mapper is the backend's HostMapper, or nil (host backend: its memory is
// host memory).
func (e *Executor) mapper() device.HostMapper {
	m, _ := e.dev.(device.HostMapper)
	return m
}

// theProxies starts (or joins) the process's proxies for this rank, one
// per lane (Config.ProxyLanes): keyed by node, local rank and lane, so
// that a process's communicators share them.
func (e *Executor) theProxies() ([]*proxy.Proxy, error) {
	if e.port.prx != nil {
		return e.port.prx, nil
	}
	var ps []*proxy.Proxy
	var rels []func()
	for lane := range e.cfg.ProxyLanes {
		key := fmt.Sprintf("%s/%d/%d", e.cfg.HostID, e.cfg.LocalRank, lane)
		o := proxy.Options{LocalRank: e.cfg.LocalRank, LocalRanks: e.cfg.LocalRanks, Timeout: e.cfg.Timeout}
		if m := e.mapper(); m != nil {
			o.OnThread = m.BindThread
		}
		p, rel, err := proxy.Shared(key, o)
		if err != nil {
			for _, r := range rels {
				r()
			}
			var le *ucx.LoadError
			if errors.As(err, &le) {
				return nil, fmt.Errorf("ranks on other nodes need the cross-node transport: %w", err)
			}
			return nil, err
		}
		ps, rels = append(ps, p), append(rels, rel)
	}
	e.port.prx, e.port.release = ps, rels
	e.port.peers = map[int]*portPeer{}
	return ps, nil
}

// MaxLanes bounds THESEUS_PROXY_LANES (Config.ProxyLanes).
const MaxLanes = 16

// ProxyLanes is n, or THESEUS_PROXY_LANES when n is 0: 1 to MaxLanes, or
// 0 for the default (AutoLanes of the ranks per node); anything else is
// an error naming the variable (or the value given).
func ProxyLanes(n int) (int, error) {
	if n != 0 {
		if n < 1 || n > MaxLanes {
			return 0, fmt.Errorf("%d proxy lanes: want 1 to %d", n, MaxLanes)
		}
		return n, nil
	}
	v, err := env.ProxyLanes.Int()
	if err != nil || v < 0 || v > MaxLanes {
		return 0, fmt.Errorf("THESEUS_PROXY_LANES=%s: want 1 to %d, or 0 for 4 / the ranks per node", env.ProxyLanes.String(), MaxLanes)
	}
	return int(v), nil
}

// AutoLanes is the default number of lanes (THESEUS_PROXY_LANES=0) for
// perNode ranks on each node: 4 / perNode, at least 1. Over TCP a proxy's
// progress copies every byte it sends and receives, so lanes scale a
// rank's bandwidth until the node's cores run out; 4 proxies a node
// measured best (docs/transport.md, "Figures").
func AutoLanes(perNode int) int {
	return max(1, 4/max(1, perNode))
}

// EffectiveLanes is the lanes a rank configured with n (a ProxyLanes
// result: 0 for the default) opens with perNode ranks on each node: what
// the ranks of a job across nodes must agree on (comm.CheckLayout).
func EffectiveLanes(n, perNode int) int {
	if n == 0 {
		return AutoLanes(perNode)
	}
	return n
}

// CheckTransportEnv reports a malformed variable of the transport across
// nodes (THESEUS_PROXY_LANES, and the proxy's: proxy.CheckEnv) without
// starting anything; comm.Init refuses it as an invalid argument on every
// rank (docs/env.md).
func CheckTransportEnv() error {
	if _, err := ProxyLanes(0); err != nil {
		return err
	}
	return proxy.CheckEnv()
}

// deviceStager is the CUDA backend's device-to-host copy as the proxy's
// Stager.
type deviceStager struct{ m device.HostMapper }

func (s deviceStager) ToHost(dst unsafe.Pointer, src uintptr, n int) error {
	return s.m.ToHost(dst, device.Ptr(src), int64(n))
}

// batchStager is deviceStager with the backend's asynchronous copies
// (device.AsyncToHost) as a proxy.BatchStager.
type batchStager struct {
	deviceStager
	a device.AsyncToHost
}

func (s batchStager) ToHostAsync(dst unsafe.Pointer, src uintptr, n int) error {
	return s.a.ToHostAsync(dst, device.Ptr(src), int64(n))
}

func (s batchStager) Sync() error { return s.a.SyncToHost() }

// stagerOf is the proxy's Stager for mapper m: batching when the backend
// copies asynchronously.
func stagerOf(m device.HostMapper) proxy.Stager {
	if a, ok := m.(device.AsyncToHost); ok {
		return batchStager{deviceStager{m}, a}
	}
	return deviceStager{m}
}

// connOptions are the proxy's options for this backend: on CUDA the FIFO
// and the staging buffers in pinned, device-mapped memory and the
// device-to-host copy as the stager.
func (e *Executor) connOptions() proxy.ConnOptions {
	m := e.mapper()
	if m == nil {
		return proxy.ConnOptions{}
	}
	return proxy.ConnOptions{
		Alloc: func(size int) (proxy.HostBlock, error) {
			mm, err := m.AllocMapped(int64(size))
			if err != nil {
				return proxy.HostBlock{}, err
			}
			return proxy.HostBlock{Ptr: mm.Host, Device: uintptr(mm.Dev), Size: size, Free: func() error { return m.FreeMapped(mm) }}, nil
		},
		Stager:     stagerOf(m),
		StageBytes: proxyStageBytes(),
	}
}

// proxyStageBytes is the proxy's staging buffer per connection: with
// kernel staging it serves only the threadblocks past stageTBs, so 2 MiB
// (two pieces of 1 MiB) unless THESEUS_PROXY_STAGE_BYTES says otherwise;
// 0 (the proxy's default) without.
func proxyStageBytes() int {
	if _, set := env.ProxyStage.Raw(); set || !kernelStaging() {
		return 0
	}
	return 2 << 20
}

// staged reports whether device memory crosses nodes through pinned host
// memory (a UCX build without CUDA support on a backend with device
// memory).
func (e *Executor) staged() bool {
	return e.mapper() != nil && len(e.port.prx) > 0 && !e.port.prx[0].CUDA()
}

// wireMem describes [p, p+n) of this rank's memory for registration as a
// source of its puts: host memory on the host backend; device memory on
// CUDA (on the staged path read by the proxy's staging copies).
func (e *Executor) wireMem(p device.Ptr, n int64) proxy.Mem {
	if e.mapper() == nil {
		return proxy.Mem{Addr: uintptr(p), Size: int(n)}
	}
	return proxy.Mem{Addr: uintptr(p), Size: int(n), Kind: proxy.DeviceMem, SourceOnly: e.staged()}
}

// logPath writes, once, which path device memory takes across nodes.
func (e *Executor) logPath() {
	if e.port.logged || !log.On(log.Info, log.Init) {
		return
	}
	e.port.logged = true
	path := "host memory, direct"
	if e.mapper() != nil {
		if e.port.prx[0].CUDA() {
			path = "device memory direct (UCX has CUDA support)"
		} else {
			o := e.connOptions()
			if kernelStaging() {
				path = fmt.Sprintf("device memory staged through pinned host memory by the kernel (this UCX build has no CUDA support; %d threadblocks x %d KiB, THESEUS_PROXY_STAGING=kernel; past them the proxy's copies, %s)",
					stageTBs, stageTBBytes>>10, proxy.DescribeStagingBytes(o.Stager, o.StageBytes))
			} else {
				path = fmt.Sprintf("device memory staged through pinned host memory by the proxy (this UCX build has no CUDA support; %s)", proxy.DescribeStaging(o.Stager))
			}
		}
	}
	log.Infof(log.Init, "rank %d: NET/UCX: port channels across nodes: %s; %d lane(s) (THESEUS_PROXY_LANES)", e.cfg.Rank, path, len(e.port.prx))
}

// portPeers makes sure a connection exists to every peer in qs (physical
// ranks on other nodes), in increasing rank order on every rank, so that
// the pairwise setups never wait on each other in a cycle.
func (e *Executor) portPeers(ctx context.Context, qs []int) error {
	sort.Ints(qs)
	for _, q := range qs {
		if _, err := e.portPeer(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// portMsg is the setup message of a connection: the sender's scratch
// region and size, and its fence semaphore (region, byte offset).
type portMsg struct {
	Scratch        uint16
	ScratchBytes   int64
	FenceRegion    uint16
	FenceOff       uint64
	ScratchChanged bool
}

func (m portMsg) encode() []byte {
	var w writer
	w.u32(uint32(m.Scratch))
	w.u64(uint64(m.ScratchBytes))
	w.u32(uint32(m.FenceRegion))
	w.u64(m.FenceOff)
	return w
}

func decodePort(b []byte) (portMsg, error) {
	r := reader{b: b}
	var m portMsg
	s := r.u32()
	m.ScratchBytes = int64(r.u64())
	f := r.u32()
	m.FenceOff = r.u64()
	if r.err == nil && (s > 0xffff || f > 0xffff || m.ScratchBytes <= 0 || m.FenceOff%8 != 0) {
		r.fail("region out of range")
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("trailing bytes")
	}
	m.Scratch, m.FenceRegion = uint16(s), uint16(f)
	return m, r.err
}

const tagPort = 4

// portPeer returns the connection to physical rank q (on another node),
// making it on first use: Connect over the bootstrap, this rank's scratch
// and a fence semaphore registered and shared, the peer's learnt, the
// fence channel added. The peer does the same at the same request.
func (e *Executor) portPeer(ctx context.Context, q int) (*portPeer, error) {
	if pp := e.port.peers[q]; pp != nil {
		return pp, nil
	}
	ls, err := e.connectLanes(ctx, q, func(lane int) uint8 { return uint8(lane) })
	if err != nil {
		return nil, err
	}
	pp := &portPeer{q: q, lanes: ls, pools: map[uint32]uint16{}, regs: map[device.Region]uint16{}}
	e.port.peers[q] = pp
	e.stats.Created.Connections++
	e.logPath()
	if err := e.portScratch(pp); err != nil {
		return nil, err
	}
	if err := e.portStage(pp); err != nil {
		return nil, err
	}
	if pp.fenceSlot, err = e.newSlot(0, true); err != nil {
		return nil, err
	}
	freg, foff, err := e.portSlotRef(pp, pp.fenceSlot)
	if err != nil {
		return nil, err
	}
	if err := pp.lanes.share(ctx); err != nil {
		return nil, err
	}
	m, err := e.portExchange(ctx, q, portMsg{Scratch: pp.scratch, ScratchBytes: pp.scratchMem.Size, FenceRegion: freg, FenceOff: foff})
	if err != nil {
		return nil, err
	}
	pp.peerScratch = device.PortBuf{Region: m.Scratch, Size: m.ScratchBytes}
	// Fenced launches meet on lane 0.
	if pp.fence, err = pp.lanes[0].conn.AddChannel(q, m.FenceRegion, m.FenceOff); err != nil {
		return nil, err
	}
	return pp, nil
}

// portExchange sends m to q and receives q's (tagPort of this request).
func (e *Executor) portExchange(ctx context.Context, q int, m portMsg) (portMsg, error) {
	tag := e.tag(tagPort)
	if err := e.send(q, tag, m.encode()); err != nil {
		return portMsg{}, err
	}
	b, err := e.recv(ctx, q, tag)
	if err != nil {
		return portMsg{}, err
	}
	got, err := decodePort(b)
	if err != nil {
		return portMsg{}, fmt.Errorf("rank %d's port setup message: %w", q, err)
	}
	return got, nil
}

// portScratch registers this rank's current scratch with pp's connection:
// a destination of the peer's puts (on the staged path, the peers' puts
// land in the mirror, which is also registered as a host source for
// relays).
func (e *Executor) portScratch(pp *portPeer) error {
	sc := e.l0.scratch
	pm := e.wireMem(sc.Ptr, sc.Size)
	pm.SourceOnly = false
	if e.staged() {
		if e.port.mirror.Size != sc.Size {
			mm, err := e.mapper().AllocMapped(sc.Size)
			if err != nil {
				return fmt.Errorf("the scratch's mirror (%d bytes of pinned host memory): %w", sc.Size, err)
			}
			if e.port.mirror.Size > 0 {
				e.port.old = append(e.port.old, e.port.mirror)
			}
			e.port.mirror = mm
		}
		pm.Mirror = uintptr(e.port.mirror.Host)
	}
	id, err := pp.lanes.register(pm)
	if err != nil {
		return err
	}
	pp.scratch, pp.scratchMem, pp.mirrorOK = id, sc, false
	if e.staged() {
		mid, err := pp.lanes.register(proxy.Mem{Addr: uintptr(e.port.mirror.Host), Size: int(sc.Size), SourceOnly: true})
		if err != nil {
			return err
		}
		pp.mirror, pp.mirrorOK = mid, true
	}
	return nil
}

// portStage registers the kernel staging buffer with pp's connection (a
// host source of puts), allocating it at the first connection, on the
// staged path with kernel staging.
func (e *Executor) portStage(pp *portPeer) error {
	if !e.staged() || !kernelStaging() {
		return nil
	}
	if e.port.stage.Size == 0 {
		mm, err := e.mapper().AllocMapped(stageTBs * stageTBBytes)
		if err != nil {
			return fmt.Errorf("the kernel staging buffer (%d bytes of pinned host memory): %w", stageTBs*stageTBBytes, err)
		}
		e.port.stage = mm
	}
	id, err := pp.lanes.register(proxy.Mem{Addr: uintptr(e.port.stage.Host), Size: int(e.port.stage.Size), SourceOnly: true})
	if err != nil {
		return err
	}
	pp.stage, pp.stageOK = id, true
	return nil
}

// portStageArgs is a launch's device.PortStage: nil without kernel
// staging.
func (e *Executor) portStageArgs() *device.PortStage {
	if e.port.stage.Size == 0 {
		return nil
	}
	return &device.PortStage{Mem: e.port.stage, TBs: stageTBs, TBBytes: stageTBBytes}
}

// portGrow re-registers the grown scratch with every connection, shares
// it and learns the peers' (growth is collective: every rank grows at the
// same request), then releases the old scratch's registrations.
func (e *Executor) portGrow(ctx context.Context) error {
	qs := make([]int, 0, len(e.port.peers))
	for q := range e.port.peers {
		qs = append(qs, q)
	}
	sort.Ints(qs)
	for _, q := range qs {
		pp := e.port.peers[q]
		old, oldMirror, hadMirror := pp.scratch, pp.mirror, pp.mirrorOK
		if err := e.portScratch(pp); err != nil {
			return err
		}
		if err := pp.lanes.share(ctx); err != nil {
			return err
		}
		m, err := e.portExchange(ctx, q, portMsg{Scratch: pp.scratch, ScratchBytes: pp.scratchMem.Size, FenceRegion: 0, FenceOff: 0})
		if err != nil {
			return err
		}
		pp.peerScratch = device.PortBuf{Region: m.Scratch, Size: m.ScratchBytes}
		if err := pp.lanes.release(old); err != nil {
			return err
		}
		if hadMirror {
			if err := pp.lanes.release(oldMirror); err != nil {
				return err
			}
		}
	}
	if !e.captured {
		for _, mm := range e.port.old {
			e.mapper().FreeMapped(mm)
		}
		e.port.old = nil
	}
	return nil
}

// newPortPool allocates a pool of semaphore slots that the proxy writes:
// host memory (on CUDA pinned, device-mapped).
func (e *Executor) newPortPool() (*pool, error) {
	n := int64(16 * poolSlots)
	p := &pool{id: uint32(len(e.port.pools)), n: poolSlots, port: true}
	if m := e.mapper(); m != nil {
		mm, err := m.AllocMapped(n)
		if err != nil {
			return nil, err
		}
		p.base, p.host, p.mapped = mm.Dev, mm.Host, mm
	} else {
		base, err := e.alloc(n)
		if err != nil {
			return nil, err
		}
		p.base = base
		p.host = *(*unsafe.Pointer)(unsafe.Pointer(&base)) // host backend: the address is host memory
	}
	e.port.pools = append(e.port.pools, p)
	return p, nil
}

// portSlotRef registers the pool of sl with pp's connection (once) and
// returns its region and the slot's inbound word's byte offset in it.
func (e *Executor) portSlotRef(pp *portPeer, sl *slot) (uint16, uint64, error) {
	id, ok := pp.pools[sl.pool.id]
	if !ok {
		var err error
		if id, err = pp.lanes.register(proxy.Mem{Addr: uintptr(sl.pool.host), Size: 16 * sl.pool.n}); err != nil {
			return 0, 0, err
		}
		pp.pools[sl.pool.id] = id
	}
	return id, uint64(8 * sl.idx), nil
}

// word is the host view of a port pool's word at byte off.
func (p *pool) word(off int) *uint64 { return (*uint64)(unsafe.Add(p.host, off)) }

// setWord stores v in the 8-byte word of slot sl at byte off of its pool:
// through the host view for port pools, else by upload.
func (e *Executor) setWord(sl *slot, at device.Ptr, v uint64) error {
	if sl.pool.port {
		atomic.StoreUint64(sl.pool.word(int(at-sl.pool.base)), v)
		return nil
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], v)
	return e.dev.Upload(at, w[:])
}

// portSource returns the place of this rank's buffer m (a put source)
// among pp's regions, registering its allocation (or, for memory that is
// not a backend allocation, the range itself) on first use.
func (e *Executor) portSource(pp *portPeer, m device.Mem) (device.PortBuf, error) {
	if m.Size == 0 {
		return device.PortBuf{}, nil
	}
	reg := e.identify(m.Ptr, m.Size)
	id, ok := pp.regs[reg]
	if !ok {
		var err error
		if id, err = pp.lanes.register(e.wireMem(reg.Base, reg.Size)); err != nil {
			return device.PortBuf{}, err
		}
		pp.regs[reg] = id
		e.stats.Created.Registrations++
	}
	return device.PortBuf{Region: id, Off: int64(m.Ptr - reg.Base), Size: m.Size}, nil
}

// portEnd is the device.PortEnd of channel end er for a launch with this
// rank's buffers local (L3). The peer's user buffers are not reachable
// across nodes (checkCrossNode): its scratch only.
func (e *Executor) portEnd(er *endRes, local [3]device.Mem) (*device.PortEnd, error) {
	pp := er.port
	l := pp.lanes[er.lane]
	pe := &device.PortEnd{Conn: l.pc, Channel: er.portChan, Head: l.head}
	for k := range 2 {
		b, err := e.portSource(pp, local[k])
		if err != nil {
			return nil, err
		}
		pe.Local[k] = b
	}
	pe.Local[device.Scratch] = device.PortBuf{Region: pp.scratch, Size: pp.scratchMem.Size}
	pe.Peer[device.Scratch] = pp.peerScratch
	if pp.mirrorOK {
		pe.Mirror = device.PortBuf{Region: pp.mirror, Size: pp.scratchMem.Size}
	}
	if pp.stageOK {
		pe.Stage = device.PortBuf{Region: pp.stage, Size: e.port.stage.Size}
	}
	return pe, nil
}

// portFences are the fences of a launch with the peers of other nodes
// this rank has connections to.
func (e *Executor) portFences() []device.PortFence {
	if len(e.port.peers) == 0 {
		return nil
	}
	qs := make([]int, 0, len(e.port.peers))
	for q := range e.port.peers {
		qs = append(qs, q)
	}
	sort.Ints(qs)
	out := make([]device.PortFence, 0, len(qs))
	for _, q := range qs {
		pp := e.port.peers[q]
		out = append(out, device.PortFence{Peer: q, Conn: pp.lanes[0].pc, Channel: pp.fence, Inbound: pp.fenceSlot.inbound(),
			Expected: pp.fenceSlot.expected(), Head: pp.lanes[0].head})
	}
	return out
}

// closePorts closes the connections and releases the proxy.
func (e *Executor) closePorts() {
	for _, pp := range e.port.peers {
		pp.lanes.close()
	}
	e.port.peers = nil
	if m := e.mapper(); m != nil {
		for _, p := range e.port.pools {
			m.FreeMapped(p.mapped)
		}
		for _, mm := range append(e.port.old, e.port.mirror, e.port.stage) {
			if mm.Size > 0 {
				m.FreeMapped(mm)
			}
		}
		e.port.old, e.port.mirror, e.port.stage = nil, device.MappedMem{}, device.MappedMem{}
	}
	e.port.pools = nil
	for _, r := range e.port.release {
		r()
	}
	e.port.prx, e.port.release = nil, nil
}

// mirrorMap marks, on the staged path, the chunks of this rank's scratch
// that its peers on other nodes put into (from their tables: every remote
// scratch destination through the end paired with one of ours), which the
// launches find in the mirror. nil when there is none.
func (e *Executor) mirrorMap(s *Schedule, ent *l1Entry) ([]uint32, int64, error) {
	chunks := ent.table.Chunks[ir.Scratch]
	var bits []uint32
	for c, ch := range ent.table.Channels {
		if ent.ends[c].port == nil {
			continue
		}
		pt, err := s.Table(ch.Peer)
		if err != nil {
			return nil, 0, err
		}
		for _, tb := range pt.TBs {
			for _, op := range tb.Ops {
				for _, d := range op.Dsts {
					if d.Chan != ch.PeerChannel || d.Buf != ir.Scratch {
						continue
					}
					if bits == nil {
						bits = make([]uint32, (chunks+31)/32)
					}
					for k := d.Off; k < d.Off+op.Count && k < chunks; k++ {
						bits[k/32] |= 1 << (k % 32)
					}
				}
			}
		}
	}
	return bits, chunks, nil
}
