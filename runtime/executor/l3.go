package executor

import (
	"context"
	"crypto/sha256"
	"errors"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

type l3Key struct {
	send, recv device.Ptr
	count      int64
	dt         ir.DataType
	op         ir.RedOp
	root       int
	inplace    bool
	pt         ir.PacketType
	// shape marks the key of a request shape without its buffers (send
	// and recv 0): it indexes the entry whose backend state the shape's
	// other entries share (l3Rebase). Such a key is an index, not an entry
	// of its own: dropL3 releases entries through their full keys only.
	shape bool
}

// shapeKey is k without its buffers: the key of k's request shape.
func shapeKey(k l3Key) l3Key {
	k.send, k.recv, k.shape = 0, 0, true
	return k
}

// scratchSig is what decides where a launch puts data in the shared
// scratch: two launches with equal signatures lay scratch out identically,
// and the schedule's own synchronisation protects it between them (ir.md
// §6); a launch whose signature differs from the previous launch's is
// fenced.
type scratchSig struct {
	l1                 *l1Entry
	chunkBytes, slices int64
}

type l3Entry struct {
	key  l3Key
	prep device.Prepared
	args *device.Args
	sig  scratchSig
	// captured: launched into a CUDA graph, whose replays keep using prep's
	// memory; released only at Close.
	captured bool
	// plan is the entry's plan, of the generation it was last hit or set
	// up in (hit builds a new one when the generation moved on).
	plan *Plan
	// base is the entry whose backend state prep shares (a rebased entry:
	// the same request shape at other buffers, l3Rebase), nil for an entry
	// that Prepare made. A base captured into a CUDA graph is kept until
	// Close, and so is the base of a captured rebased entry.
	base *l3Entry
	// peerEnds are the channel ends whose peers' buffers the launches
	// reach, with what they are bound to (peers.go; under peers.mu).
	peerEnds []peerEnd
	// frozenAt: the launch counter of the launch that a CUDA graph
	// captured, for an entry that reaches peers' buffers (0: none). Such an
	// entry leaves its L3 map (a later call prepares a new one) and keeps
	// the peers' buffers of the launches up to it: a graph replays what it
	// captured (peers.go).
	frozenAt uint64
}

// hit makes l3 the walk's L3 entry, with its plan of the current
// generation.
func (e *Executor) hit(w *walk, l3 *l3Entry) {
	w.l3, w.plan = l3, l3.plan
	if w.plan == nil || w.plan.gen != e.gen {
		w.plan = e.newPlan(w, l3)
	}
}

func (e *Executor) l3Lookup(w *walk) Event {
	r := w.r
	w.l3key = l3Key{send: r.Send, recv: r.Recv, count: r.Count, dt: r.DataType, op: r.RedOp, inplace: r.InPlace, pt: r.PacketType}
	if w.s.Bundle.Meta.Collective.Rooted() {
		w.l3key.root = r.Root
	}
	if m := &e.lastL3; m.ent != nil && m.l1 == w.l1 && m.l2 == w.l2 && m.key == w.l3key {
		e.hit(w, m.ent)
		e.stats.L3Hits++
		return EvHit
	}
	if l3 := w.l3map[w.l3key]; l3 != nil {
		e.hit(w, l3)
		e.lastL3.l1, e.lastL3.l2, e.lastL3.key, e.lastL3.ent = w.l1, w.l2, w.l3key, l3
		e.stats.L3Hits++
		return EvHit
	}
	// A miss is set up even while the stream is being captured into a CUDA
	// graph: L3 setup allocates nothing the peers see and makes no call that
	// capture forbids (device.Backend.Prepare), so a captured request whose
	// schedule and buffers are materialised (L1, L2 hits) may use a new
	// count or new offsets in the same allocations, as nccl-tests -G does.
	// Scratch growth (Grow) still refuses during capture.
	return EvMiss
}

// maxL3 bounds the L3 entries under one L1 or L2 entry; the map is cleared
// when full (request shapes that keep changing, such as benchmark sweeps).
const maxL3 = 4096

func (e *Executor) l3Setup(ctx context.Context, w *walk) Event {
	if w.l2 == nil {
		if base := w.l3map[shapeKey(w.l3key)]; base != nil {
			if ev, ok := e.l3Rebase(w, base); ok {
				return ev
			}
		}
	}
	r, ent, t := w.r, w.l1, w.l1.table
	ll := t.Protocol == ir.LL
	slices := launch.Slices(t, launch.Request{Count: r.Count, DataType: r.DataType}, e.cfg.SliceBytes)
	lay, err := ir.NewLayout(r.Count, r.DataType, t.ChunksPerBlock, slices)
	if err != nil {
		return e.fail(w, L3Setup, err, false)
	}
	// Scratch: per launch maxScratch chunks of Stride elements (twice for LL
	// packets), in half the buffer when launches alternate.
	per, ok := mulOK(ent.maxScratch, lay.Stride*lay.ElemSize)
	if ok && ll {
		per, ok = mulOK(per, 2)
	}
	if !ok {
		return e.fail(w, L3Setup, errors.New("scratch size overflows"), false)
	}
	halves := ll || e.cfg.Alternate
	capB := e.l0.scratch.Size
	avail := capB
	if halves {
		avail = capB / 2
	}
	if per > avail {
		need := per
		if halves {
			need = 2 * per
		}
		w.need = need
		return EvTooSmall
	}
	a := &device.Args{Table: t, TableMem: ent.tabMem, Rank: e.cfg.Rank, NRanks: e.n, Shift: w.shift,
		Count: r.Count, DataType: r.DataType, RedOp: r.RedOp, InPlace: r.InPlace, PacketType: r.PacketType,
		Layout: lay, Publish: ent.publish, Abort: e.l0.control, Done: e.l0.control + ctlDone, Timeout: e.cfg.Timeout}
	if t.Collective.Rooted() {
		a.Root = r.Root
	}
	a.Trace = e.ops
	if a.Kernel, err = e.kernel(ent, r.DataType); err != nil {
		return e.fail(w, L3Setup, err, false)
	}
	a.Buf[device.Scratch] = e.l0.scratch
	if halves {
		a.ScratchHalf = capB / 2
	}
	if n := e.bufBytes(r, ir.Input); n > 0 {
		a.Buf[device.Input] = device.Mem{Ptr: r.Send, Size: n}
	}
	if n := e.bufBytes(r, ir.Output); n > 0 {
		a.Buf[device.Output] = device.Mem{Ptr: r.Recv, Size: n}
	}
	if w.l2 != nil && w.l2.staged {
		a.Buf[device.Input], a.Buf[device.Output] = w.l2.local[0], w.l2.local[1]
		a.StageIn, a.StageOut = w.l2.stageIn, w.l2.stageOut
	}
	a.Ends = make([]device.End, len(ent.ends))
	for c := range ent.ends {
		er := &ent.ends[c]
		pe := device.End{Peer: er.peer, Inbound: er.slot.inbound(), PeerInbound: er.peerInbound, Expected: er.slot.expected()}
		if er.port != nil {
			p, err := e.portEnd(er, a.Buf)
			if err != nil {
				return e.fail(w, L3Setup, err, false, er.peer)
			}
			pe.Port = p
			a.Ends[c] = pe
			continue
		}
		pe.PeerBuf[device.Scratch] = e.l0.peers[er.peer].scratch
		a.Ends[c] = pe
	}
	for q := range e.n {
		if q != e.cfg.Rank && !e.crossNode(q) {
			a.Fence = append(a.Fence, device.PeerWord{Peer: q, Word: e.l0.peers[q].done})
		}
	}
	a.PortFence = e.portFences()
	if ent.mirror != nil {
		a.PortMirror = &device.PortMirror{Mem: e.port.mirror, Map: ent.mirror, Chunks: ent.mirrorChunks}
	}
	a.PortStage = e.portStageArgs()
	a.HDone = e.l0.control + ctlHDone
	l3 := &l3Entry{key: w.l3key, args: a, sig: scratchSig{l1: ent, chunkBytes: lay.Stride * lay.ElemSize, slices: lay.Slices}}
	if w.l2 != nil {
		// The peers' buffers: as they are now, repointed by the peers'
		// pushes (peers.go); every launch first waits for the peers it
		// reaches to have started the same launch, and raises its own
		// started word.
		a.Started = e.l0.control + ctlStarted
		for q, m := range ent.importFrom {
			if m != 0 && q != e.cfg.Rank {
				a.Pair = append(a.Pair, device.PeerWord{Peer: q, Word: e.l0.peers[q].started})
			}
		}
		e.bindPeers(ent, a, l3)
	}
	prep, err := e.dev.Prepare(a)
	if err != nil {
		return e.fail(w, L3Setup, err, false)
	}
	l3.prep = prep
	if err := e.register(l3); err != nil {
		prep.Release()
		return e.fail(w, L3Setup, err, false)
	}
	// A full map is dropped, which waits for the stream: not during a
	// capture, which may neither wait for its stream nor free memory (a
	// free on the caller's thread invalidates a global or thread-local
	// capture). The map then grows past maxL3 until the next miss outside
	// capture; what a capture adds is kept until Close anyway.
	if len(w.l3map) >= maxL3 && !w.st.Capturing() {
		if err := e.waitInflight(); err != nil {
			return e.fail(w, L3Setup, err, true)
		}
		e.dropL3(w.l3map)
	}
	w.l3 = l3
	w.l3map[w.l3key] = w.l3
	// (Not with port channels across nodes: their puts name this rank's
	// buffers as regions of the connections, portEnd, which a rebase
	// would not move.)
	if _, ok := e.dev.(device.Rebaser); ok && w.l2 == nil && len(a.StageIn)+len(a.StageOut) == 0 && !hasPort(a) {
		if sk := shapeKey(w.l3key); w.l3map[sk] == nil {
			w.l3map[sk] = w.l3
		}
	}
	w.plan = e.newPlan(w, w.l3)
	e.stats.L3Setups++
	return EvOK
}

// l3Rebase sets up w's L3 entry as the entry base of the same request
// shape (every l3Key field but the buffers) moved to w's buffers: the
// launch arguments are base's with this rank's input and output replaced,
// and the backend moves base's prepared launch there without allocating,
// copying or waiting (device.Rebaser), so a call whose buffers moved
// within known allocations (nccl-tests' shifting, a caching allocator's
// new offsets) costs a repeat plus this. Only for schedules that reach no
// peer's buffers (w.l2 nil): the peers' buffers, which lie in the
// channel records a backend prepares, do not move with ours. ok is false
// when the backend declines, and the caller prepares the entry in full.
func (e *Executor) l3Rebase(w *walk, base *l3Entry) (ev Event, ok bool) {
	rb, _ := e.dev.(device.Rebaser)
	if rb == nil {
		return 0, false
	}
	if len(w.l3map) >= maxL3 && !w.st.Capturing() {
		// Dropping the full map releases base: the caller prepares the
		// entry in full, and drops the map first.
		return 0, false
	}
	// One allocation for the entry, its arguments and its first plan.
	re := new(rebasedEntry)
	a := &re.args
	*a = *base.args
	r := w.r
	a.Buf[device.Input], a.Buf[device.Output] = device.Mem{}, device.Mem{}
	if n := e.bufBytes(r, ir.Input); n > 0 {
		a.Buf[device.Input] = device.Mem{Ptr: r.Send, Size: n}
	}
	if n := e.bufBytes(r, ir.Output); n > 0 {
		a.Buf[device.Output] = device.Mem{Ptr: r.Recv, Size: n}
	}
	prep, err := rb.Rebase(base.prep, a)
	if err != nil {
		return 0, false
	}
	re.l3 = l3Entry{prep: prep, args: a, sig: base.sig, base: base}
	w.l3 = &re.l3
	w.l3map[w.l3key] = w.l3
	w.plan = e.setPlan(&re.plan, w, w.l3)
	e.stats.L3Rebases++
	return EvOK, true
}

// rebasedEntry is a rebased L3 entry with its arguments and first plan.
type rebasedEntry struct {
	l3   l3Entry
	args device.Args
	plan Plan
}

func mulOK(a, b int64) (int64, bool) {
	if a == 0 || b == 0 {
		return 0, true
	}
	c := a * b
	if c/b != a || c < 0 {
		return 0, false
	}
	return c, true
}

// kernel is the specialised kernel of ent's table for datatype dt, when
// its bundle has one and they are in use (Config.GenericOnly).
func (e *Executor) kernel(ent *l1Entry, dt ir.DataType) (*device.Kernel, error) {
	if e.cfg.GenericOnly || ent.sched.Bundle == nil || !ent.sched.Bundle.HasKernels() {
		return nil, nil
	}
	if k, ok := ent.kernels[dt]; ok {
		return k, nil
	}
	ptx, err := ent.sched.Bundle.Kernel(ent.logical, dt)
	if err != nil {
		return nil, err
	}
	var k *device.Kernel
	if ptx != nil {
		k = &device.Kernel{Key: sha256.Sum256(ptx), PTX: ptx}
		// The other ranks' kernels: a backend shared by several ranks of
		// this process loads them all before the first launch of any
		// (device.Kernel.Peers).
		for r := range e.n {
			if r == ent.logical {
				continue
			}
			p, err := ent.sched.Bundle.Kernel(r, dt)
			if err != nil {
				return nil, err
			}
			if p != nil {
				k.Peers = append(k.Peers, &device.Kernel{Key: sha256.Sum256(p), PTX: p})
			}
		}
	}
	if ent.kernels == nil {
		ent.kernels = map[ir.DataType]*device.Kernel{}
	}
	ent.kernels[dt] = k
	return k, nil
}

// dropL3 empties m, releasing each prepared launch (or, if a CUDA graph
// captured it, keeping it until Close). The generation moves on: no plan
// built before launches a prepared launch that may be released.
func (e *Executor) dropL3(m map[l3Key]*l3Entry) {
	e.lastL3.ent = nil
	e.gen++
	for k, v := range m {
		if k.shape {
			delete(m, k) // an index: its entry is released under its own key
			continue
		}
		e.unbind(v)
		if v.captured {
			e.retained = append(e.retained, v.prep)
		} else {
			v.prep.Release()
		}
		delete(m, k)
	}
}

// hasPort reports whether a has an end through the proxy.
func hasPort(a *device.Args) bool {
	for i := range a.Ends {
		if a.Ends[i].Port != nil {
			return true
		}
	}
	return false
}
