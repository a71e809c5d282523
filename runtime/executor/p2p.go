package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// The point-to-point engine's side of the executor (docs/p2p.md): traffic
// known only at call time — a group of sends and receives, or an
// AlltoAllv — run by one runtime-sized launch of the backend's engine
// (device.P2PPreparer), on the executor's levels where they fit:
//
//   - L0: the control words (the abort word every launch watches); a
//     point-to-point call may be a communicator's first, and it is issued by
//     a subset of the ranks, so it allocates only this rank's control words
//     (no allgather: the scratch and semaphore pool stay the collectives');
//   - connections (the engine's L1): per peer, one block of FIFO memory on
//     each side (launch.P2PGeometry), exchanged point to point with that
//     peer when a call first involves it, made again when the agreed
//     geometry changes;
//   - L2: the peers' allocations offered for zero-copy writes: a rank that
//     receives into a backend allocation offers it to the sender (a message
//     the sender takes up at its next call with that peer, without waiting:
//     Net's TryRecv), which imports it; Offer is the hook through which a
//     registration may offer an allocation ahead of use, and a
//     deregistration (Deregister) withdraws the offers of its allocation:
//     every peer that imported it drops the import before Deregister
//     returns (its service goroutine, peers.go), and the offer's id, which
//     receives post, is not posted again;
//   - L3: the call shape, prepared by the backend (its transfer descriptor)
//     and kept as a P2PPlan, valid until a connection or an import changes
//     (the p2p generation) or a receive buffer's allocation is another one.
//
// Point-to-point launches are not the communicator's counted launches: the
// launch counter (identical on every rank) and the fence are the
// collectives'; a point-to-point launch takes neither, and touches no
// scratch. It is ordered with the rank's other launches as they are (one
// rank's launches run in call order, across streams).

// P2PParams are the engine's parameters for one call: the connections'
// FIFO geometry, which both ends of every pair must share (so they come from
// the communicator's agreed selection snapshot), and the sender's choices.
type P2PParams struct {
	Geometry launch.P2PGeometry
	// EagerBytes: transfers of at most this many bytes go through the FIFO
	// without waiting for the receiver's post.
	EagerBytes int64
	// Direct allows zero-copy writes into receive buffers whose allocation
	// the receiver has offered.
	Direct bool
	// Threads per threadblock (CUDA; 0: the backend's default).
	Threads int
}

// DefaultP2PParams are the built-in parameters for nlocal ranks per node
// (docs/p2p.md, "Parameters"): 128 KiB chunks, 4 slots, clamp(64 /
// nlocal, 2, 32) channels, eager up to 64 KiB, direct writes on. 32
// channels for a pair on one H200 copy 1 GiB at about 1.5 times the rate of
// 16 (bench/results/2026-12-01-h200-eleventh, call E), and the FIFO's room
// (channels x slots x 128 KiB: 16 MiB for 2 ranks, 8 MiB for 4) is what an
// ungrouped send may put ahead of its receive.
func DefaultP2PParams(nlocal int) P2PParams {
	ch := 32
	if nlocal > 0 {
		ch = min(max(64/nlocal, 2), 32)
	}
	return P2PParams{Geometry: launch.P2PGeometry{ChunkBytes: 128 << 10, Slots: 4, Channels: ch}, EagerBytes: 64 << 10, Direct: true}
}

// Check reports parameters outside their ranges.
func (p P2PParams) Check() error {
	if err := p.Geometry.Check(); err != nil {
		return err
	}
	if p.EagerBytes < 0 {
		return fmt.Errorf("eager_bytes %d < 0", p.EagerBytes)
	}
	if p.Threads != 0 && (p.Threads < 32 || p.Threads > 1024 || p.Threads%32 != 0) {
		return fmt.Errorf("threads %d: want a multiple of 32 in [32, 1024], or 0", p.Threads)
	}
	return nil
}

// P2POp is one ncclSend (Recv false: Buf is the source) or ncclRecv (Buf
// the destination) of a group: Count elements of DataType with Peer.
type P2POp struct {
	Recv     bool
	Peer     int
	Buf      device.Ptr
	Count    int64
	DataType ir.DataType
}

// P2PMatrix is an ncclAlltoAllv (NCCL's seed extension): Counts is the CPU
// matrix (NRanks x NRanks elements, row = sender), which plans the launch
// (its capacity: this rank's row and column totals); GPU is the device
// copy the launch reads; with Check the launch compares the two.
type P2PMatrix struct {
	Send, Recv device.Ptr
	Counts     []int64
	GPU        device.Ptr
	DataType   ir.DataType
	Check      bool
}

// P2PRequest is one validated point-to-point call: the ops of a group in
// call order, or an AlltoAllv (Matrix, no Ops). Self sends and receives
// must pair up in order with equal bytes (runtime/comm checks it).
type P2PRequest struct {
	Ops    []P2POp
	Matrix *P2PMatrix
	Params P2PParams
}

// P2PStats count the engine's work on this rank.
type P2PStats struct {
	// Walks are ExecuteP2P calls; Launches all point-to-point launches,
	// PlanLaunches those made from plans (LaunchP2P).
	Walks, Launches, PlanLaunches uint64
	// Connects are connections made (Reconnects of them replaced one of
	// another geometry); Offers are allocations this rank offered its
	// peers, Imports peers' allocations it imported.
	Connects, Reconnects, Offers, Imports uint64
	// Links are the connections of Connects with peers on other nodes
	// (over port channels: no memory mapped).
	Links uint64
	// Withdrawn are offers of ours withdrawn by a deregistration, Drops
	// the peers' imports dropped here at their deregistrations.
	Withdrawn, Drops uint64
	// L3Hits are walks that found their call's prepared launch, L3Setups
	// walks that prepared it (device.P2PPreparer), Rebases walks that made
	// it from the prepared launch of the same call shape at other buffers
	// (device.P2PRebaser: no backend preparation; nccl-tests moves its
	// buffers every iteration).
	L3Hits, L3Setups, Rebases uint64
}

// ErrP2PUnsupported is returned by ExecuteP2P on a backend without the
// point-to-point engine (device.P2PPreparer).
var ErrP2PUnsupported = errors.New("executor: the backend has no point-to-point engine")

type p2pConn struct {
	geo    launch.P2PGeometry
	local  device.Ptr
	remote device.Ptr // the peer's block, imported (across nodes: this rank's copy of it)
	seq    uint64     // connections made with this peer (the exchange's tag)
	// port (a peer on another node): the proxy connection's regions and
	// channels (device.P2PPort); regs are this connection's regions of it
	// (the local block and the copy), released when it is replaced.
	port *device.P2PPort
	regs []uint16
	// mapped (a peer on another node, on a backend with a HostMapper:
	// CUDA) is the local block as pinned host memory mapped into the
	// device (local is its device address): the peer's puts and signals
	// land in host memory on every path (on the staged one UCX reaches no
	// device memory), and the kernel polls it as it polls port semaphores.
	mapped device.MappedMem
	// remoteMapped (across nodes, on the staged path with kernel staging:
	// THESEUS_PROXY_STAGING=kernel) is the copy of the peer's block as
	// pinned host memory mapped into the device (remote is its device
	// address): the kernel writes its chunks and headers there and the
	// proxy puts them from host memory, with no staging copy.
	remoteMapped device.MappedMem
}

// p2pLink is the engine's proxy connections with a peer on another node:
// one per lane (the rank's proxies, as the collectives' portPeer), made at
// the first connection with it; a connection of another geometry
// registers new blocks with them. Channel ch of a connection goes through
// lane ch mod the lanes (device.P2PPort.Lane). Each lane has the FIFO's
// ticket counter for the kernel's posts (8 bytes of device memory; 0
// without a HostMapper: the host engine posts through the connection).
type p2pLink struct {
	lanes laneSet
}

// p2pProxyTag separates the engine's proxy connections' setup exchanges
// from the collectives' (proxy.ConnOptions.Tag: their lanes use 0 to
// MaxLanes-1): lane i of the engine's uses p2pProxyTag - i.
const p2pProxyTag = 255

type p2pL3 struct {
	prep     device.Prepared
	gen      uint64
	check    device.Ptr // the CPU matrix's device copy (AlltoAllv, checking mode)
	captured bool
	plan     *P2PPlan
	// kick are the connections across nodes whose FIFO the launch's
	// kernel posts to (CUDA): the proxy is woken before each launch.
	kick []device.PortConn
	// base is, for an entry made by rebasing (p2pRebase), the prepared
	// entry whose launch state and matrix copy it shares (nil: its own).
	base *p2pL3
	// bufs are the buffers of the call a prepared entry was made for (its
	// ops' buffers in call order; an AlltoAllv's send and receive buffers)
	// and posts the offer ids its receives from peers post (in call order;
	// an AlltoAllv's per peer, ascending): what a rebase compares.
	bufs  []device.Ptr
	posts []uint64
}

// p2pState is the executor's point-to-point state (see the file comment).
type p2pState struct {
	conns []*p2pConn // by peer
	// gen moves on whenever a connection or an import changes (also from
	// a service goroutine: a peer's deregistration): plans of older
	// generations are stale.
	gen atomic.Uint64
	// offered[q] maps the generation of each of our allocations we tried
	// to offer peer q to the offer's id (nonzero; 0: it could not be
	// exported), which receives into it post; offerIDs counts the ids.
	offered  []map[uint64]uint64
	offerIDs uint64
	offerSeq []uint64   // [peer]: offers sent to it
	takeSeq  []uint64   // [peer]: offers taken from it
	stash    [][][]byte // [peer]: offers received, not imported yet (a capture was on)
	// mu guards imports and mapped, which a service goroutine changes
	// when a peer deregisters an allocation it offered (p2pDrop).
	mu       sync.Mutex
	imports  [][]device.P2PImport // [peer]: its offers imported, by offer id
	mapped   []device.Ptr         // every import's local mapping (superseded ones too), unimported at Close
	drops    atomic.Uint64        // imports dropped at the peers' deregistrations
	l3       map[string]*p2pL3
	retired  []*p2pL3         // entries replaced while their launches may run: released at the next wait
	captured atomic.Bool      // a point-to-point launch went into a CUDA graph: its memory stays until Close
	kept     []*p2pConn       // connections replaced after a capture (a captured launch may use their blocks): their mapped blocks freed at Close
	links    map[int]*p2pLink // [peer on another node]
	stats    P2PStats
	// shapes maps a call shape and its receive allocations (p2pShapeKey)
	// to the last entry prepared for it, which calls of that shape at other
	// buffers are rebased from (p2pRebase). Its entries are l3's.
	shapes map[string]*p2pL3
	// key and shape (the walk's keys: appendP2PKey with and without the
	// buffers) and regs (the walk's receive buffers' allocations,
	// p2pRecvRegions) are reused by every walk.
	key, shape []byte
	regs       []p2pReg
	// peers are the walk's peer lists (peersOf's sends and receives, their
	// union).
	peers [3][]int
}

// P2PPlan is the launch of one point-to-point call shape, as ExecuteP2P
// prepared it (docs/p2p.md, "Plans"): valid while the executor's p2p
// generation is its own, the executor has not failed, and every receive
// buffer it posts still lies in the allocation it posted (its identity).
type P2PPlan struct {
	gen    uint64
	params P2PParams
	l3     *p2pL3
	recvs  []p2pIdent
	sends  []int // the peers sent to (whose offers a launch takes up)
}

// Params are the parameters the plan was prepared with.
func (p *P2PPlan) Params() P2PParams { return p.params }

// p2pIdent is a receive buffer and the allocation identity a plan posts
// for it.
type p2pIdent struct {
	p   device.Ptr
	n   int64
	gen uint64
}

// p2p tags: bit 62 | kind << 48 | sequence. The executor's other tags are
// (launch counter + 1) << 8 | kind, far below; the communicator's watcher
// uses 1<<62 | 0x5741 (kind 0).
const (
	p2pTagBase    = 1 << 62
	p2pTagConnect = 1 << 48
	p2pTagOffer   = 2 << 48
)

func p2pTag(kind, seq uint64) uint64 { return p2pTagBase | kind | seq&(1<<48-1) }

// tryNet is a Net that can take a message without waiting
// (runtime/bootstrap.Bootstrap.TryRecv).
type tryNet interface {
	TryRecv(peer int, tag uint64) ([]byte, bool)
}

func (e *Executor) p2pInit() {
	s := &e.p2p
	if s.conns != nil {
		return
	}
	s.conns = make([]*p2pConn, e.n)
	s.offered = make([]map[uint64]uint64, e.n)
	s.offerSeq = make([]uint64, e.n)
	s.takeSeq = make([]uint64, e.n)
	s.stash = make([][][]byte, e.n)
	s.imports = make([][]device.P2PImport, e.n)
	s.l3 = map[string]*p2pL3{}
	s.shapes = map[string]*p2pL3{}
}

// p2pReg is the allocation holding a receive buffer (ok: it lies in one).
type p2pReg struct {
	reg device.Region
	ok  bool
}

// p2pRecvRegions fills e.p2p.regs with the allocations holding r's receive
// buffers (one backend Lookup each, shared by the walk's offers, its
// setup or rebase): per op of r, in call order, for a receive from a peer
// with bytes (else none); for an AlltoAllv one, its receive buffer's with
// the bytes of its column.
func (e *Executor) p2pRecvRegions(r *P2PRequest) {
	regs := e.p2p.regs[:0]
	if m := r.Matrix; m != nil {
		var g p2pReg
		if nb := matrixCol(m, e.n, e.cfg.Rank) * int64(m.DataType.Size()); nb > 0 {
			g.reg, g.ok = e.dev.Lookup(m.Recv, nb)
		}
		regs = append(regs, g)
	} else {
		for _, o := range r.Ops {
			var g p2pReg
			if nb := o.Count * int64(o.DataType.Size()); o.Recv && o.Peer != e.cfg.Rank && nb > 0 {
				g.reg, g.ok = e.dev.Lookup(o.Buf, nb)
			}
			regs = append(regs, g)
		}
	}
	e.p2p.regs = regs
}

// P2PStats returns the engine's counters.
func (e *Executor) P2PStats() P2PStats {
	st := e.p2p.stats
	st.Drops = e.p2p.drops.Load()
	return st
}

// control allocates this rank's control words (abort, done) if L0 has not
// (l0Setup reuses them).
func (e *Executor) control() error {
	if e.l0.control != 0 {
		return nil
	}
	p, err := e.alloc(controlBytes)
	if err != nil {
		return err
	}
	e.l0.control = p
	e.abortW.Store(uintptr(p))
	return nil
}

func (e *Executor) p2pFail(err error, sticky bool, peers ...int) error {
	ee := &Error{Rank: e.cfg.Rank, State: P2P, Peers: peers, Err: err}
	if sticky {
		e.setFailed(ee)
	}
	return ee
}

// peersOf returns the peers r sends to and receives from (not this rank),
// each once, ascending, in the walk's lists (e.p2p.peers: valid until the
// next walk).
func (e *Executor) peersOf(r *P2PRequest) (sends, recvs []int) {
	me := e.cfg.Rank
	sends, recvs = e.p2p.peers[0][:0], e.p2p.peers[1][:0]
	if r.Matrix != nil {
		for q := range e.n {
			if q != me {
				sends, recvs = append(sends, q), append(recvs, q)
			}
		}
	} else {
		for _, o := range r.Ops {
			switch {
			case o.Peer == me:
			case o.Recv:
				recvs = append(recvs, o.Peer)
			default:
				sends = append(sends, o.Peer)
			}
		}
		slices.Sort(sends)
		slices.Sort(recvs)
		sends, recvs = slices.Compact(sends), slices.Compact(recvs)
	}
	e.p2p.peers[0], e.p2p.peers[1] = sends, recvs
	return sends, recvs
}

// ExecuteP2P runs one point-to-point call on st (the walk: control words,
// connections, offers taken up and made, the prepared launch, the launch)
// and returns its plan, which LaunchP2P launches again while it is valid.
// It returns when the launch is enqueued. Errors (*Error): the sticky
// error; ErrCapture when a connection, an offer or an import is needed
// during a CUDA graph capture; ErrP2PUnsupported; a peer that does not
// connect within the timeout (naming it; sticky), or that connects with
// another geometry (ranks whose selection snapshots differ); backend
// errors.
func (e *Executor) ExecuteP2P(ctx context.Context, r *P2PRequest, st device.Stream) (*P2PPlan, error) {
	if err := e.Err(); err != nil {
		return nil, err
	}
	pp, ok := e.dev.(device.P2PPreparer)
	if !ok {
		return nil, e.p2pFail(ErrP2PUnsupported, false)
	}
	if r == nil || st == nil {
		return nil, e.p2pFail(errors.New("nil request or stream"), false)
	}
	if err := r.Params.Check(); err != nil {
		return nil, e.p2pFail(fmt.Errorf("point-to-point parameters: %w", err), false)
	}
	e.p2pInit()
	e.p2p.stats.Walks++
	capturing := st.Capturing()
	if e.l0.control == 0 && capturing {
		return nil, e.p2pFail(ErrCapture, false)
	}
	if err := e.control(); err != nil {
		return nil, e.p2pFail(err, true)
	}
	sends, recvs := e.peersOf(r)
	e.p2p.peers[2] = union(e.p2p.peers[2][:0], sends, recvs)
	if err := e.connect(ctx, r.Params.Geometry, e.p2p.peers[2], capturing); err != nil {
		return nil, err
	}
	e.p2pRecvRegions(r)
	if !capturing {
		if err := e.offer(r, recvs); err != nil {
			return nil, err
		}
	}
	e.takeOffers(sends, capturing)
	e.p2p.key = appendP2PKey(e.p2p.key[:0], r, true)
	ent := e.p2p.l3[string(e.p2p.key)]
	if ent != nil && ent.gen == e.p2p.gen.Load() {
		e.p2p.stats.L3Hits++
	} else {
		key := e.p2p.key // (a string made only for an entry kept)
		if ent != nil {
			delete(e.p2p.l3, string(key))
			e.p2p.retired = append(e.p2p.retired, ent)
			ent = nil
		}
		if len(e.p2p.l3) >= maxL3 && !capturing {
			if err := e.waitInflight(); err != nil {
				return nil, e.p2pFail(err, true)
			}
			for _, v := range e.p2p.l3 {
				e.p2p.retired = append(e.p2p.retired, v)
			}
			clear(e.p2p.l3)
			clear(e.p2p.shapes)
			e.releaseRetired()
		}
		// The same call shape at other buffers is rebased from the shape's
		// prepared entry. A rebased entry is not kept in the map: it costs
		// less to make again than the map's upkeep (nccl-tests moves its
		// buffers to a new place every iteration), and the communicator
		// keeps its plan.
		e.p2p.shape = e.p2pShapeKey(e.p2p.shape[:0], r)
		if base := e.p2p.shapes[string(e.p2p.shape)]; base != nil && base.gen == e.p2p.gen.Load() {
			if rb, ok := e.dev.(device.P2PRebaser); ok {
				ent = e.p2pRebase(rb, base, r)
			}
		}
		if ent != nil {
			e.p2p.stats.Rebases++
		} else {
			var err error
			if ent, err = e.p2pSetup(pp, r, sends, recvs); err != nil {
				return nil, err
			}
			e.p2p.shapes[string(e.p2p.shape)] = ent
			e.p2p.l3[string(key)] = ent
			e.p2p.stats.L3Setups++
		}
	}
	p := ent.plan
	if err := e.enqueueP2P(ent, st); err != nil {
		return nil, err
	}
	return p, nil
}

// union appends the ascending union of a and b, each ascending without
// repeats (peersOf's lists), to out.
func union(out, a, b []int) []int {
	for len(a) > 0 || len(b) > 0 {
		switch {
		case len(b) == 0 || len(a) > 0 && a[0] < b[0]:
			out, a = append(out, a[0]), a[1:]
		case len(a) == 0 || b[0] < a[0]:
			out, b = append(out, b[0]), b[1:]
		default:
			out, a, b = append(out, a[0]), a[1:], b[1:]
		}
	}
	return out
}

// connect makes the connections with peers that lack one of geometry g:
// this rank's blocks allocated and exported, one message to each peer,
// then each peer's message received and its block imported. Both ends of a
// pair connect in the same call (each issues an op with the other), so the
// exchange is point to point; a peer that never does fails it after the
// timeout, naming the peer.
func (e *Executor) connect(ctx context.Context, g launch.P2PGeometry, peers []int, capturing bool) error {
	s := &e.p2p
	var need []int
	for _, q := range peers {
		if c := s.conns[q]; c == nil || c.geo != g {
			need = append(need, q)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if capturing {
		return e.p2pFail(ErrCapture, false)
	}
	t0 := time.Now()
	for _, q := range need {
		if s.conns[q] != nil {
			// The old blocks may be in use by launches in flight (here and
			// at the peer, which reconnects at the same call).
			if err := e.waitInflight(); err != nil {
				return e.p2pFail(err, true)
			}
			e.releaseRetired()
			break
		}
	}
	size := g.ConnBytes()
	type pending struct {
		q    int
		conn *p2pConn
	}
	var mine []pending
	for _, q := range need {
		old := s.conns[q]
		c := &p2pConn{geo: g}
		if old != nil {
			c.seq = old.seq + 1
			s.stats.Reconnects++
			if !s.captured.Load() {
				if old.port != nil {
					if err := e.p2pDrained(q, old, e.cfg.Timeout); err != nil {
						return e.p2pFail(err, true, q)
					}
					e.p2pUnlink(q, old)
				} else {
					e.unimport(old.remote)
				}
				e.p2pFreeBlock(old)
			} else if old.mapped.Host != nil || old.remoteMapped.Size > 0 {
				s.kept = append(s.kept, old) // (device blocks go with the executor's allocations)
			}
		}
		p, err := e.p2pBlock(q, c, size)
		if err != nil {
			return e.p2pFail(fmt.Errorf("connection block of %d bytes for rank %d: %w", size, q, err), true, q)
		}
		msg := p2pConnMsg{ChunkBytes: g.ChunkBytes, Slots: uint32(g.Slots), Channels: uint32(g.Channels)}
		if e.crossNode(q) {
			// Across nodes no memory is mapped (docs/transport.md, "L0"):
			// the block is a destination of the peer's puts.
			id, err := e.p2pLinkBlock(ctx, q, c)
			if err != nil {
				return e.p2pFail(fmt.Errorf("point-to-point connection across nodes with rank %d: %w", q, err), true, q)
			}
			msg.Region = uint32(id) + 1
		} else if msg.Handle, err = e.export(p, size); err != nil {
			return e.p2pFail(err, true, q)
		}
		if err := e.send(q, p2pTag(p2pTagConnect, c.seq), msg.encode()); err != nil {
			return e.p2pFail(err, true, q)
		}
		s.conns[q] = nil // until the peer's half is in
		mine = append(mine, pending{q, c})
	}
	for _, m := range mine {
		q, c := m.q, m.conn
		b, err := e.recv(ctx, q, p2pTag(p2pTagConnect, c.seq))
		if err != nil {
			return e.p2pFail(fmt.Errorf("rank %d did not connect for point-to-point within %v (it has no ncclSend or ncclRecv with this rank in its call, or issued it after a different number of collectives): %w", q, e.cfg.Timeout, err), true, q)
		}
		pm, err := decodeP2PConn(b)
		if err != nil {
			return e.p2pFail(fmt.Errorf("rank %d's connection message: %w", q, err), true, q)
		}
		pg := launch.P2PGeometry{ChunkBytes: pm.ChunkBytes, Slots: int(pm.Slots), Channels: int(pm.Channels)}
		if pg != g {
			return e.p2pFail(fmt.Errorf("rank %d connects with point-to-point parameters (%v) other than this rank's (%v): their selection snapshots differ (a send and its receive must be issued after the same collectives)", q, pg, g), true, q)
		}
		if e.crossNode(q) != (pm.Region != 0) {
			return e.p2pFail(fmt.Errorf("rank %d connects for point-to-point as if on the same node, or this rank as if on another (their layouts differ: %s)", q, e.layoutText()), true, q)
		}
		if pm.Region != 0 {
			if err := e.p2pLinkChannels(q, c, uint16(pm.Region-1)); err != nil {
				return e.p2pFail(fmt.Errorf("point-to-point connection across nodes with rank %d: %w", q, err), true, q)
			}
			s.conns[q] = c
			s.stats.Connects++
			s.stats.Links++
			e.stats.Created.Connections++
			continue
		}
		reg, err := e.importHandle(pm.Handle)
		if err != nil {
			return e.p2pFail(fmt.Errorf("import rank %d's connection block: %w", q, err), true, q)
		}
		if reg.Size < size {
			return e.p2pFail(fmt.Errorf("rank %d's connection block has %d bytes, want %d", q, reg.Size, size), true, q)
		}
		c.remote = reg.Base
		s.conns[q] = c
		s.stats.Connects++
		e.stats.Created.Connections++
	}
	s.gen.Add(1)
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: point-to-point connections with ranks %v (%v) in %v", e.cfg.Rank, need, g, time.Since(t0).Round(time.Microsecond))
	}
	return nil
}

// matrixRow and matrixCol are rank me's send and receive totals in
// elements by the CPU matrix.
func matrixRow(m *P2PMatrix, n, me int) int64 {
	var t int64
	for j := range n {
		t += m.Counts[me*n+j]
	}
	return t
}

// matrixMax is the largest cell of rank me's row and column by the CPU
// matrix, in elements.
func matrixMax(m *P2PMatrix, n, me int) int64 {
	var v int64
	for j := range n {
		v = max(v, m.Counts[me*n+j], m.Counts[j*n+me])
	}
	return v
}

func matrixCol(m *P2PMatrix, n, me int) int64 {
	var t int64
	for i := range n {
		t += m.Counts[i*n+me]
	}
	return t
}

// appendP2PKey appends r's L3 key to b: every field the prepared launch
// depends on (an AlltoAllv's CPU matrix only through its capacity, unless
// it is checked); without bufs, r's call shape: the key without the
// buffers (its ops' and an AlltoAllv's send and receive buffers), which
// calls that a rebase serves share (p2pRebase).
func appendP2PKey(b []byte, r *P2PRequest, bufs bool) []byte {
	u := func(v uint64) { b = binary.LittleEndian.AppendUint64(b, v) }
	g := r.Params.Geometry
	u(uint64(g.ChunkBytes))
	u(uint64(g.Slots)<<32 | uint64(g.Channels))
	u(uint64(r.Params.EagerBytes))
	u(uint64(r.Params.Threads)<<1 | b2u(r.Params.Direct))
	for _, o := range r.Ops {
		u(b2u(o.Recv) | uint64(o.DataType)<<8 | uint64(o.Peer)<<16)
		if bufs {
			u(uint64(o.Buf))
		}
		u(uint64(o.Count))
	}
	if m := r.Matrix; m != nil {
		u(1<<63 | uint64(m.DataType)<<8 | b2u(m.Check))
		if bufs {
			u(uint64(m.Send))
			u(uint64(m.Recv))
		}
		u(uint64(m.GPU))
		n := 0
		for n*n < len(m.Counts) {
			n++
		}
		// (the capacity is the rank's row and column totals; the executor's
		// rank is fixed, so every total enters the key)
		for r := range n {
			u(uint64(matrixRow(m, n, r)))
			u(uint64(matrixCol(m, n, r)))
		}
		if m.Check {
			for _, c := range m.Counts {
				u(uint64(c))
			}
		}
	}
	return b
}

// p2pShapeKey appends the key of r's entry in e.p2p.shapes to b: r's call
// shape (appendP2PKey without the buffers) and the allocations its
// receives from peers lie in (the walk's p2pRecvRegions), whose offer ids
// a rebase must post as the entry does: calls into several allocations of
// one shape (double buffering) each find an entry of their own.
func (e *Executor) p2pShapeKey(b []byte, r *P2PRequest) []byte {
	b = appendP2PKey(b, r, false)
	for _, g := range e.p2p.regs {
		var gen uint64
		if g.ok {
			gen = g.reg.Gen
		}
		b = binary.LittleEndian.AppendUint64(b, gen)
	}
	return b
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// p2pSetup builds and prepares the launch of r (its plan included).
func (e *Executor) p2pSetup(pp device.P2PPreparer, r *P2PRequest, sendPeers, recvPeers []int) (*p2pL3, error) {
	me, n := e.cfg.Rank, e.n
	g := r.Params.Geometry
	a := &device.P2PArgs{Rank: me, NRanks: n, Geometry: g, EagerBytes: r.Params.EagerBytes, Direct: r.Params.Direct,
		Threads: r.Params.Threads, LocalRanks: e.cfg.LocalRanks, DeviceRanks: e.cfg.DeviceRanks, Abort: e.l0.control, Timeout: e.cfg.Timeout}
	gen0 := e.p2p.gen.Load() // (before the imports are read: a drop after it makes the plan stale)
	ent := &p2pL3{gen: gen0}
	plan := &P2PPlan{gen: gen0, params: r.Params, l3: ent, sends: slices.Clone(sendPeers)}
	size := g.ConnBytes()
	kicked := map[int]bool{}
	peer := func(q int, recv bool) device.P2PPeer {
		c := e.p2p.conns[q]
		pr := device.P2PPeer{Peer: q, Local: device.Mem{Ptr: c.local, Size: size}, Remote: device.Mem{Ptr: c.remote, Size: size}, Port: c.port}
		if c.port != nil && c.port.Lanes[0].Head != 0 && !kicked[q] {
			kicked[q] = true
			for _, l := range c.port.Lanes {
				ent.kick = append(ent.kick, l.Conn)
			}
		}
		if !recv {
			e.p2p.mu.Lock()
			pr.Imports = append([]device.P2PImport(nil), e.p2p.imports[q]...)
			e.p2p.mu.Unlock()
		}
		return pr
	}
	// gen is p2pRecvIdent into the plan; post the id under which the
	// allocation was offered to peer q (0: not offered, the FIFO serves
	// it), recorded for rebases.
	gen := func(i int, p device.Ptr, nb int64) uint64 { return e.p2pRecvIdent(plan, i, p, nb) }
	post := func(q int, g uint64) uint64 {
		id := e.p2pPost(q, g)
		ent.posts = append(ent.posts, id)
		return id
	}
	sends := map[int]*device.P2PPeer{}
	recvs := map[int]*device.P2PPeer{}
	for _, q := range sendPeers {
		p := peer(q, false)
		sends[q] = &p
	}
	for _, q := range recvPeers {
		p := peer(q, true)
		recvs[q] = &p
	}
	if m := r.Matrix; m != nil {
		es := int64(m.DataType.Size())
		rg := gen(0, m.Recv, matrixCol(m, n, me)*es)
		ent.bufs = []device.Ptr{m.Send, m.Recv}
		for q := range n {
			if q == me {
				continue
			}
			sends[q].Xfers = []device.P2PXfer{{Buf: m.Send, DataType: m.DataType, Matrix: true}}
			recvs[q].Xfers = []device.P2PXfer{{Buf: m.Recv, DataType: m.DataType, Offer: post(q, rg), Matrix: true}}
		}
		a.Self = []device.P2PCopy{{Src: m.Send, Dst: m.Recv, Matrix: true}}
		a.Matrix = &device.P2PMatrix{Counts: m.GPU, SendCap: matrixRow(m, n, me) * es, RecvCap: matrixCol(m, n, me) * es, ElemSize: es,
			MaxBytes: matrixMax(m, n, me) * es}
		if m.Check {
			nb := int64(8 * len(m.Counts))
			p, err := e.dev.Alloc(nb)
			if err != nil {
				return nil, e.p2pFail(fmt.Errorf("the CPU matrix's device copy: %w", err), false)
			}
			ent.check = p
			words := make([]byte, nb)
			for i, c := range m.Counts {
				binary.LittleEndian.PutUint64(words[8*i:], uint64(c))
			}
			if err := e.dev.Upload(p, words); err != nil {
				e.dev.Free(p)
				return nil, e.p2pFail(err, false)
			}
			a.Matrix.Check = p
		}
	} else {
		var selfS, selfR []P2POp
		ent.bufs = make([]device.Ptr, len(r.Ops))
		for i, o := range r.Ops {
			nb := o.Count * int64(o.DataType.Size())
			ent.bufs[i] = o.Buf
			switch {
			case o.Peer == me && o.Recv:
				selfR = append(selfR, o)
			case o.Peer == me:
				selfS = append(selfS, o)
			case o.Recv:
				recvs[o.Peer].Xfers = append(recvs[o.Peer].Xfers, device.P2PXfer{Buf: o.Buf, Bytes: nb, DataType: o.DataType, Offer: post(o.Peer, gen(i, o.Buf, nb))})
			default:
				sends[o.Peer].Xfers = append(sends[o.Peer].Xfers, device.P2PXfer{Buf: o.Buf, Bytes: nb, DataType: o.DataType})
			}
		}
		if len(selfS) != len(selfR) {
			return nil, e.p2pFail(fmt.Errorf("%d sends to this rank and %d receives from it", len(selfS), len(selfR)), false)
		}
		for i := range selfS {
			a.Self = append(a.Self, device.P2PCopy{Src: selfS[i].Buf, Dst: selfR[i].Buf, Bytes: selfS[i].Count * int64(selfS[i].DataType.Size())})
		}
	}
	byRound := func(m map[int]*device.P2PPeer, recv bool) []device.P2PPeer {
		out := make([]device.P2PPeer, 0, len(m))
		for _, p := range m {
			out = append(out, *p)
		}
		sort.Slice(out, func(i, j int) bool {
			return launch.P2PRound(me, out[i].Peer, n, recv) < launch.P2PRound(me, out[j].Peer, n, recv)
		})
		return out
	}
	a.Sends, a.Recvs = byRound(sends, false), byRound(recvs, true)
	prep, err := pp.PrepareP2P(a)
	if err != nil {
		if ent.check != 0 {
			e.dev.Free(ent.check)
		}
		return nil, e.p2pFail(err, false)
	}
	ent.prep, ent.plan = prep, plan
	return ent, nil
}

// p2pRecvIdent returns the generation of the allocation holding receive
// buffer i of the walk (p2pRecvRegions: p, nb bytes; 0 when it lies in
// none or moves nothing) and records it in plan for the plan's check.
func (e *Executor) p2pRecvIdent(plan *P2PPlan, i int, p device.Ptr, nb int64) uint64 {
	g := e.p2p.regs[i]
	if nb == 0 || !g.ok {
		return 0
	}
	plan.recvs = append(plan.recvs, p2pIdent{p, nb, g.reg.Gen})
	return g.reg.Gen
}

// p2pPost is the offer id a receive into an allocation of generation g
// (0: none) from peer q posts: the id under which it was offered to q, 0
// when it was not (the FIFO serves it).
func (e *Executor) p2pPost(q int, g uint64) uint64 {
	if g == 0 {
		return 0
	}
	return e.p2p.offered[q][g]
}

// p2pRebase makes r's entry from base, the prepared entry of r's call shape
// (the same ops but for their buffers, the same parameters), of the current
// generation: when r's send-side buffers (sends to peers, sends to this
// rank) all lie at one distance from base's and its receive-side buffers at
// one distance (each, zero-byte transfers aside, whose buffers are never
// read), and each receive from a peer posts the offer id base's posts, its
// launch is base's rebased by those distances (device.P2PRebaser), sharing
// base's launch state, and its plan checks r's receive buffers. It returns
// nil when r is not such a call or the backend cannot rebase base's launch
// (the caller prepares r then). The walk's receive allocations
// (p2pRecvRegions) are r's.
func (e *Executor) p2pRebase(rb device.P2PRebaser, base *p2pL3, r *P2PRequest) *p2pL3 {
	me, n := e.cfg.Rank, e.n
	var d [2]int64 // send side, receive side
	var set [2]bool
	at := func(side int, from, to device.Ptr) bool {
		v := int64(to - from)
		if !set[side] {
			d[side], set[side] = v, true
			return true
		}
		return d[side] == v
	}
	// The entry, its plan and (usually) its receives' identities in one
	// allocation.
	x := &struct {
		ent    p2pL3
		plan   P2PPlan
		idents [2]p2pIdent
	}{}
	plan := &x.plan
	*plan = P2PPlan{gen: base.gen, params: r.Params, sends: base.plan.sends, recvs: x.idents[:0], l3: &x.ent}
	// ident is p2pRecvIdent into the plan; posts reports whether a
	// receive into it from peer q posts what base's next receive posts.
	ident := func(i int, p device.Ptr, nb int64) uint64 { return e.p2pRecvIdent(plan, i, p, nb) }
	k := 0 // base.posts
	posts := func(q int, g uint64) bool {
		ok := k < len(base.posts) && e.p2pPost(q, g) == base.posts[k]
		k++
		return ok
	}
	if m := r.Matrix; m != nil {
		es := int64(m.DataType.Size())
		nS, nR := matrixRow(m, n, me)*es, matrixCol(m, n, me)*es
		if len(base.bufs) != 2 || nS > 0 && !at(0, base.bufs[0], m.Send) || nR > 0 && !at(1, base.bufs[1], m.Recv) {
			return nil
		}
		g := ident(0, m.Recv, nR)
		for q := range n {
			if q != me && !posts(q, g) {
				return nil
			}
		}
	} else {
		if len(base.bufs) != len(r.Ops) {
			return nil
		}
		for i, o := range r.Ops {
			nb := o.Count * int64(o.DataType.Size())
			side := 0
			if o.Recv {
				side = 1
			}
			if nb > 0 && !at(side, base.bufs[i], o.Buf) {
				return nil
			}
			if o.Recv && o.Peer != me && !posts(o.Peer, ident(i, o.Buf, nb)) {
				return nil
			}
		}
	}
	if k != len(base.posts) {
		return nil
	}
	prep, err := rb.RebaseP2P(base.prep, d[0], d[1])
	if err != nil {
		if !errors.Is(err, device.ErrNotRebasable) {
			log.Warnf(log.Executor, "rank %d: rebasing a point-to-point launch: %v; preparing it instead", e.cfg.Rank, err)
		}
		return nil
	}
	x.ent = p2pL3{prep: prep, gen: base.gen, plan: plan, kick: base.kick, base: base}
	return &x.ent
}

// enqueueP2P launches ent's prepared launch on st: in call order with the
// rank's other launches (a stream change waits for the previous stream on
// the device), uncounted and unfenced; a launch captured into a CUDA graph
// keeps the engine's memory until Close.
func (e *Executor) enqueueP2P(ent *p2pL3, st device.Stream) error {
	if len(ent.kick) > 0 && st.Capturing() {
		return e.p2pFail(fmt.Errorf("%w: point-to-point with ranks on other nodes is not supported in CUDA graph capture on the CUDA backend yet (its kernel posts to the proxy's FIFO, and a replay has no host-side launch to wake the proxy; docs/p2p.md, \"Across nodes\"): issue these calls outside the capture", ErrCapture), false)
	}
	for _, k := range ent.kick {
		k.Kick() // the kernel posts port-channel descriptors: the proxy spins
	}
	var capturing bool
	var err error
	ctr := max(e.launch, 1) // ignored by the engine
	// The point-to-point launch is st's own kernel launch, also with the
	// persistent executor (its queue serves the collectives' op tables);
	// the order with the rank's other launches is kept on the stream the
	// collectives use for st (the persistent executor's wrapper of st,
	// whose queued launches are st's stream memory operations).
	ord := st
	if e.persistent {
		if w, werr := e.residentStream(st); werr == nil {
			ord = w
		}
	}
	if cl, ok := st.(device.CaptureLauncher); ok && (e.lastSt == nil || e.lastSt == ord) {
		capturing, err = cl.CaptureLaunch(ent.prep, ctr, false, false)
	} else {
		capturing = st.Capturing()
		if prev := e.lastSt; prev != nil && prev != ord && !capturing {
			if o, ok := ord.(device.StreamOrderer); ok && !prev.Capturing() {
				if err := o.After(prev); err != nil {
					return &Error{Rank: e.cfg.Rank, State: P2P, Err: err}
				}
			}
		}
		err = st.Launch(ent.prep, ctr, false)
	}
	if err != nil {
		ee := &Error{Rank: e.cfg.Rank, State: P2P, Err: err}
		if !errors.Is(err, device.ErrClosed) {
			e.setFailed(ee)
		}
		return ee
	}
	e.p2p.stats.Launches++
	if capturing {
		ent.captured = true
		e.p2p.captured.Store(true)
	}
	if e.lastSt != ord {
		e.lastSt = ord
		e.lastCL, _ = ord.(device.CaptureLauncher)
		e.tracked = false
	}
	e.trackStream(ord)
	return nil
}

// ValidP2P reports whether p may be launched on st without a walk
// (P2PPlan's rules), after taking up the offers of the peers it sends to
// (which makes it stale: a walk then builds it with the new imports),
// unless st is being captured into a CUDA graph (asked only when an offer
// is there to import).
func (e *Executor) ValidP2P(p *P2PPlan, st device.Stream) bool {
	if p == nil || e.failed.Load() != nil {
		return false
	}
	if e.pendingOffers(p.sends) {
		e.takeOffers(p.sends, st.Capturing())
	}
	if p.gen != e.p2p.gen.Load() {
		return false
	}
	for _, id := range p.recvs {
		if reg, ok := e.dev.Lookup(id.p, id.n); !ok || reg.Gen != id.gen {
			return false
		}
	}
	return true
}

// LaunchP2P launches plan p on st as ExecuteP2P would have, without the
// walk, or returns ErrStale (nothing launched) when p is not valid
// (ValidP2P): the caller then walks. Errors: ErrStale; the stream's
// launch failure (*Error, sticky unless the stream was closed).
func (e *Executor) LaunchP2P(p *P2PPlan, st device.Stream) error {
	if st == nil || !e.ValidP2P(p, st) {
		return ErrStale
	}
	if err := e.enqueueP2P(p.l3, st); err != nil {
		return err
	}
	e.p2p.stats.PlanLaunches++
	return nil
}

// releaseRetired releases the prepared launches replaced since the last
// wait (the caller has just waited), unless a CUDA graph captured them.
func (e *Executor) releaseRetired() {
	for _, ent := range e.p2p.retired {
		e.releaseP2P(ent)
	}
	e.p2p.retired = e.p2p.retired[:0]
}

func (e *Executor) releaseP2P(ent *p2pL3) {
	if ent.captured || e.p2p.captured.Load() {
		e.retained = append(e.retained, ent.prep)
		return
	}
	ent.prep.Release()
	if ent.check != 0 {
		e.dev.Free(ent.check) // (a rebased entry has none of its own)
	}
}

// closeP2P releases the engine's prepared launches and matrix copies
// (Close; the connection blocks and imports go with the executor's
// allocations and imports).
func (e *Executor) closeP2P() {
	for _, l := range e.p2p.links {
		l.lanes.close()
	}
	e.p2p.links = nil
	for _, c := range append(e.p2p.conns, e.p2p.kept...) {
		if c != nil {
			e.p2pFreeMapped(c)
		}
	}
	e.p2p.kept = nil
	for _, ent := range e.p2p.l3 {
		ent.prep.Release()
		if ent.check != 0 {
			e.dev.Free(ent.check)
		}
	}
	for _, ent := range e.p2p.retired {
		ent.prep.Release()
		if ent.check != 0 {
			e.dev.Free(ent.check)
		}
	}
	e.p2p.l3, e.p2p.retired = nil, nil
	e.p2p.mu.Lock()
	for _, p := range e.p2p.mapped {
		e.dev.Unimport(p)
	}
	e.p2p.mapped, e.p2p.imports = nil, nil
	e.p2p.mu.Unlock()
}
