package executor

import (
	"context"
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

type l2Key struct{ send, recv device.Region }

// l2Entry holds the registrations of one pair of local allocations: our
// exported allocations (the user's, or staging for foreign memory) and the
// peers' allocations we imported. Where in them each request's buffers lie
// is exchanged per request shape (L3), since a peer may vary its offsets
// within the same allocations.
type l2Entry struct {
	region   [2]device.Region   // our exported input/output allocations
	staged   bool               // foreign memory staged: local holds the staging buffers
	local    [2]device.Mem      // staged: our input/output as launches use them
	stageIn  []device.Copy      // staged: copies before each launch
	stageOut []device.Copy      // staged: copies after each launch
	peerReg  [][2]device.Region // [peer][input/output] imported
	// peerPort are the allocations of peers on other nodes as regions of
	// the connection to them ([peer][input/output]; Off 0, Size the
	// allocation's), learnt instead of imported.
	peerPort [][2]device.PortBuf
	imports  []device.Ptr
	l3       map[l3Key]*l3Entry
}

// bufBytes is the size of buffer k of physical rank rank for r.
func (e *Executor) bufBytes(r *Request, k ir.BufKind) int64 {
	blocks := ir.Blocks(r.Coll, k, e.n, e.cfg.Rank, r.Root)
	return blocks * r.Count * int64(r.DataType.Size())
}

// identify returns the L2 identity of [p, p+n): its backend allocation, or
// for foreign memory the range itself (generation 0).
func (e *Executor) identify(p device.Ptr, n int64) device.Region {
	if p == 0 || n == 0 {
		return device.Region{}
	}
	if reg, ok := e.dev.Lookup(p, n); ok {
		return reg
	}
	return device.Region{Base: p, Size: n}
}

// l2KeyOf is the L2 key of r: the identity of its allocations.
func (e *Executor) l2KeyOf(r *Request) l2Key {
	return l2Key{send: e.identify(r.Send, e.bufBytes(r, ir.Input)), recv: e.identify(r.Recv, e.bufBytes(r, ir.Output))}
}

func (e *Executor) l2Lookup(w *walk) Event {
	if !w.l1.needL2 {
		w.l3map = w.l1.l3
		e.stats.L2Skips++
		return EvSkip
	}
	w.l2key = e.l2KeyOf(w.r)
	if l2 := w.l1.l2[w.l2key]; l2 != nil {
		w.l2, w.l3map = l2, l2.l3
		e.stats.L2Hits++
		return EvHit
	}
	if w.st.Capturing() {
		return EvCapture
	}
	return EvMiss
}

// both widens a registration mask in place: input and output alias
// (ir.md §3), so a peer that reaches either may land in the other.
func both(m uint8, inPlace bool) uint8 {
	if inPlace && m != 0 {
		return 3
	}
	return m
}

// l2Setup exports the allocations the peers reach (staging foreign memory),
// sends their handles to those peers, and imports the peers' allocations
// that we reach.
func (e *Executor) l2Setup(ctx context.Context, w *walk) Event {
	r, ent := w.r, w.l1
	sizes := [2]int64{e.bufBytes(r, ir.Input), e.bufBytes(r, ir.Output)}
	user := [2]device.Ptr{r.Send, r.Recv}
	l2 := &l2Entry{peerReg: make([][2]device.Region, e.n), peerPort: make([][2]device.PortBuf, e.n), l3: map[l3Key]*l3Entry{}}
	var exp uint8
	for _, m := range ent.exportTo {
		exp |= both(m, r.InPlace)
	}
	var handles [2]device.Handle
	if exp != 0 {
		if err := e.stage(l2, exp, sizes, user); err != nil {
			return e.fail(w, L2Setup, err, true)
		}
		for k := range 2 {
			p, n := user[k], sizes[k]
			if l2.staged {
				p, n = l2.local[k].Ptr, l2.local[k].Size
			}
			if exp&(1<<k) == 0 || n == 0 {
				continue
			}
			reg, ok := e.dev.Lookup(p, n)
			if !ok {
				return e.fail(w, L2Setup, fmt.Errorf("%s is not a backend allocation", ir.BufKind(k).LongName()), true)
			}
			h, err := e.dev.Export(reg)
			if err != nil {
				return e.fail(w, L2Setup, err, true)
			}
			l2.region[k], handles[k] = reg, h
			e.stats.Created.Exports++
		}
	}
	// Peers on other nodes: our allocations they reach become regions of
	// the connection, shared with every such peer that reaches ours or
	// whose we reach (both sides share: one exchange per pair, in rank
	// order on every rank, so that no two pairs wait on each other).
	portIDs := map[int][2]uint16{}
	for q := range e.n {
		if !e.crossNode(q) || ent.exportTo[q]|ent.importFrom[q] == 0 {
			continue
		}
		pp := e.port.peers[q]
		if pp == nil {
			return e.fail(w, L2Setup, fmt.Errorf("no connection to rank %d on another node, whose buffers the schedule reaches", q), true, q)
		}
		var ids [2]uint16
		m := both(ent.exportTo[q], r.InPlace)
		for k := range 2 {
			if m&(1<<k) == 0 || handles[k] == nil {
				continue
			}
			id, err := e.portDest(pp, l2.region[k])
			if err != nil {
				return e.fail(w, L2Setup, err, true, q)
			}
			ids[k] = id
		}
		portIDs[q] = ids
		if err := pp.share(ctx); err != nil {
			return e.fail(w, L2Setup, err, true, q)
		}
	}
	tag := e.tag(tagL2)
	for q, m := range ent.exportTo {
		m = both(m, r.InPlace)
		if m == 0 || q == e.cfg.Rank {
			continue
		}
		var msg regMsg
		for k := range 2 {
			if m&(1<<k) == 0 || handles[k] == nil {
				continue
			}
			h := handles[k]
			if e.crossNode(q) {
				// Across nodes the allocation is a region of the
				// connection (shared above): its id travels instead.
				h = portHandle(portIDs[q][k], l2.region[k].Size)
			}
			msg = append(msg, regRef{Kind: uint32(k), Handle: h})
		}
		if err := e.send(q, tag, msg.encode()); err != nil {
			return e.fail(w, L2Setup, err, true, q)
		}
	}
	for q, m := range ent.importFrom {
		if m == 0 {
			continue
		}
		if q == e.cfg.Rank {
			l2.peerReg[q] = l2.region
			continue
		}
		msg, err := e.recv(ctx, q, tag)
		if err != nil {
			return e.fail(w, L2Setup, fmt.Errorf("waiting for rank %d's buffer registrations (if rank %d kept its cached buffers while this rank changed them, this is the seed's Known Issue 3): %w", q, q, err), true, q)
		}
		regs, err := decodeRegs(msg)
		if err != nil {
			return e.fail(w, L2Setup, fmt.Errorf("rank %d's registration message: %w", q, err), true, q)
		}
		if e.crossNode(q) {
			for _, g := range regs {
				id, size, err := decodePortHandle(g.Handle)
				if err != nil {
					return e.fail(w, L2Setup, fmt.Errorf("rank %d's registration message: %w", q, err), true, q)
				}
				l2.peerPort[q][g.Kind] = device.PortBuf{Region: id, Size: size}
			}
			continue
		}
		for _, g := range regs {
			reg, err := e.dev.Import(g.Handle)
			if err != nil {
				return e.fail(w, L2Setup, fmt.Errorf("import rank %d's %s: %w", q, ir.BufKind(g.Kind).LongName(), err), true, q)
			}
			l2.imports = append(l2.imports, reg.Base)
			l2.peerReg[q][g.Kind] = reg
			e.stats.Created.Registrations++
		}
	}
	ent.l2[w.l2key] = l2
	w.l2, w.l3map = l2, l2.l3
	e.stats.L2Setups++
	return EvOK
}

// stage replaces the exported buffers that are foreign memory by backend
// allocations, with copies before (input) and after (output) each launch.
// In place, the union of the two buffers is staged as one, so that the
// aliasing of ir.md §3 is kept. Foreign memory's L2 identity is its exact
// range, so the staging serves every request of this entry.
func (e *Executor) stage(l2 *l2Entry, exp uint8, sizes [2]int64, user [2]device.Ptr) error {
	foreign := func(k int) bool {
		if sizes[k] == 0 {
			return false
		}
		_, ok := e.dev.Lookup(user[k], sizes[k])
		return !ok
	}
	in, out := foreign(0), foreign(1)
	if !(in && exp&1 != 0) && !(out && exp&2 != 0) {
		return nil
	}
	l2.staged = true
	for k := range 2 {
		l2.local[k] = device.Mem{Ptr: user[k], Size: sizes[k]}
	}
	overlap := sizes[0] > 0 && sizes[1] > 0 && user[0] < user[1]+device.Ptr(sizes[1]) && user[1] < user[0]+device.Ptr(sizes[0])
	if overlap {
		lo := min(user[0], user[1])
		hi := max(user[0]+device.Ptr(sizes[0]), user[1]+device.Ptr(sizes[1]))
		n := int64(hi - lo)
		p, err := e.alloc(n)
		if err != nil {
			return err
		}
		l2.stageIn = append(l2.stageIn, device.Copy{Dst: p, Src: lo, N: n})
		l2.stageOut = append(l2.stageOut, device.Copy{Dst: lo, Src: p, N: n})
		for k := range 2 {
			l2.local[k].Ptr = p + (user[k] - lo)
		}
		e.stats.Created.Staged++
		return nil
	}
	for k := range 2 {
		if !foreign(k) || exp&(1<<k) == 0 {
			continue
		}
		p, err := e.alloc(sizes[k])
		if err != nil {
			return err
		}
		if k == 0 {
			l2.stageIn = append(l2.stageIn, device.Copy{Dst: p, Src: user[k], N: sizes[k]})
		} else {
			l2.stageOut = append(l2.stageOut, device.Copy{Dst: user[k], Src: p, N: sizes[k]})
		}
		l2.local[k].Ptr = p
		e.stats.Created.Staged++
	}
	return nil
}

// exchangeOffsets tells the peers that reach our buffers where this
// request's buffers lie in the allocations they imported, and learns the
// same of the peers we reach (one message each way per peer concerned):
// peer are the mapped buffers of peers on this node, far the places of
// those of peers on other nodes in the connections' regions.
func (e *Executor) exchangeOffsets(ctx context.Context, w *walk, local [2]device.Mem) (peer [][2]device.Mem, far [][2]device.PortBuf, err error) {
	r, ent, l2 := w.r, w.l1, w.l2
	tag := e.tag(tagL3)
	for q, m := range ent.exportTo {
		m = both(m, r.InPlace)
		if m == 0 || q == e.cfg.Rank {
			continue
		}
		var msg offMsg
		for k := range 2 {
			if m&(1<<k) == 0 || local[k].Size == 0 {
				continue
			}
			msg = append(msg, offRef{Kind: uint32(k), Off: int64(local[k].Ptr - l2.region[k].Base), Size: local[k].Size})
		}
		if err := e.send(q, tag, msg.encode()); err != nil {
			return nil, nil, err
		}
	}
	peer = make([][2]device.Mem, e.n)
	far = make([][2]device.PortBuf, e.n)
	for q, m := range ent.importFrom {
		if m == 0 {
			continue
		}
		if q == e.cfg.Rank {
			peer[q] = local
			continue
		}
		msg, err := e.recv(ctx, q, tag)
		if err != nil {
			return nil, nil, fmt.Errorf("waiting for rank %d's buffer offsets (Known Issue 3 if the ranks' buffers are not paired stably): %w", q, err)
		}
		offs, err := decodeOffsets(msg)
		if err != nil {
			return nil, nil, fmt.Errorf("rank %d's offset message: %w", q, err)
		}
		for _, o := range offs {
			if e.crossNode(q) {
				pb := l2.peerPort[q][o.Kind]
				if pb.Size == 0 || o.Off > pb.Size-o.Size {
					return nil, nil, fmt.Errorf("rank %d's %s (offset %d, %d bytes) lies outside the allocation it registered", q, ir.BufKind(o.Kind).LongName(), o.Off, o.Size)
				}
				far[q][o.Kind] = device.PortBuf{Region: pb.Region, Off: o.Off, Size: o.Size}
				continue
			}
			reg := l2.peerReg[q][o.Kind]
			if reg.Size == 0 || o.Off > reg.Size-o.Size {
				return nil, nil, fmt.Errorf("rank %d's %s (offset %d, %d bytes) lies outside the allocation it registered", q, ir.BufKind(o.Kind).LongName(), o.Off, o.Size)
			}
			peer[q][o.Kind] = device.Mem{Ptr: reg.Base + device.Ptr(o.Off), Size: o.Size}
		}
	}
	return peer, far, nil
}
