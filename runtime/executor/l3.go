package executor

import (
	"context"
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
	prep device.Prepared
	args *device.Args
	sig  scratchSig
	// captured: launched into a CUDA graph, whose replays keep using prep's
	// memory; released only at Close.
	captured bool
	// plan is the entry's plan, of the generation it was last hit or set
	// up in (hit builds a new one when the generation moved on).
	plan *Plan
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
		Layout: lay, Publish: ent.publish, Abort: e.l0.control, Done: e.l0.control + 8, Timeout: e.cfg.Timeout}
	if t.Collective.Rooted() {
		a.Root = r.Root
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
	var peerBuf [][2]device.Mem
	var farBuf [][2]device.PortBuf
	if w.l2 != nil {
		if w.l2.staged {
			a.Buf[device.Input], a.Buf[device.Output] = w.l2.local[0], w.l2.local[1]
			a.StageIn, a.StageOut = w.l2.stageIn, w.l2.stageOut
		}
		var err error
		if peerBuf, farBuf, err = e.exchangeOffsets(ctx, w, [2]device.Mem{a.Buf[device.Input], a.Buf[device.Output]}); err != nil {
			return e.fail(w, L3Setup, err, true, bootstrapPeers(err)...)
		}
	}
	a.Ends = make([]device.End, len(ent.ends))
	for c := range ent.ends {
		er := &ent.ends[c]
		pe := device.End{Peer: er.peer, Inbound: er.slot.inbound(), PeerInbound: er.peerInbound, Expected: er.slot.expected()}
		if er.port != nil {
			var far [2]device.PortBuf
			if farBuf != nil {
				far = farBuf[er.peer]
			}
			p, err := e.portEnd(er, a.Buf, far)
			if err != nil {
				return e.fail(w, L3Setup, err, false, er.peer)
			}
			pe.Port = p
			a.Ends[c] = pe
			continue
		}
		pe.PeerBuf[device.Scratch] = e.l0.peers[er.peer].scratch
		if peerBuf != nil {
			pe.PeerBuf[device.Input], pe.PeerBuf[device.Output] = peerBuf[er.peer][0], peerBuf[er.peer][1]
		}
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
	prep, err := e.dev.Prepare(a)
	if err != nil {
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
	w.l3 = &l3Entry{prep: prep, args: a, sig: scratchSig{l1: ent, chunkBytes: lay.Stride * lay.ElemSize, slices: lay.Slices}}
	w.l3map[w.l3key] = w.l3
	w.plan = e.newPlan(w, w.l3)
	e.stats.L3Setups++
	return EvOK
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

// dropL3 empties m, releasing each prepared launch (or, if a CUDA graph
// captured it, keeping it until Close). The generation moves on: no plan
// built before launches a prepared launch that may be released.
func (e *Executor) dropL3(m map[l3Key]*l3Entry) {
	e.lastL3.ent = nil
	e.gen++
	for k, v := range m {
		if v.captured {
			e.retained = append(e.retained, v.prep)
		} else {
			v.prep.Release()
		}
		delete(m, k)
	}
}
