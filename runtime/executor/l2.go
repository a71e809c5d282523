package executor

import (
	"context"
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
)

// Executor level L2, our side: the allocations of ours that peers reach
// (docs/executor.md, "Peers' buffers"). An entry is keyed by the identity
// of this rank's own allocations only, and nothing about it needs the
// peers to agree: a new entry exports (or stages) our allocations, and
// every walk makes sure that each peer that reaches our buffers knows
// where this request's buffers lie — when the peer's view (what we last
// pushed to it) differs, we push ours to the peer's service goroutine
// (peers.go), which imports the allocation if it is new, repoints the
// peer's prepared launches and answers. The peer's own calls take no part,
// so buffers need not stay paired between ranks (the seed's Known Issue 3).

type l2Key struct{ send, recv device.Region }

// l2Entry holds our side of one pair of local allocations: what we export
// to the peers (the user's allocations, or staging for foreign memory) and
// the L3 entries of requests in them.
type l2Entry struct {
	key      l2Key
	region   [2]device.Region // our exported input/output allocations
	handles  [2]device.Handle
	staged   bool          // foreign memory staged: local holds the staging buffers
	local    [2]device.Mem // staged: our input/output as launches use them
	stageIn  []device.Copy // staged: copies before each launch
	stageOut []device.Copy // staged: copies after each launch
	l3       map[l3Key]*l3Entry
	// last is the launch counter of the last launch that used the entry
	// and was not captured into a CUDA graph (a peer dropping our
	// allocation waits for its own launch of that number: Deregister).
	last uint64
}

// pushedBuf is a peer's view of one of our buffers: where in which of our
// allocations it lies (what we last pushed to it).
type pushedBuf struct {
	id        exportID
	off, size int64
}

// pushRef is one buffer of a request that a peer reaches: the peer, the
// buffer kind and where the buffer lies.
type pushRef struct {
	peer int
	kind int
	buf  pushedBuf
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
	l2 := w.l1.l2[w.l2key]
	if l2 == nil {
		if w.st.Capturing() {
			return EvCapture
		}
		return EvMiss
	}
	w.l2, w.l3map = l2, l2.l3
	w.push = e.pushRefs(w.r, w.l1, l2, w.push[:0])
	for _, x := range w.push {
		if x.buf.id.Region.Size == 0 {
			// A buffer the entry does not export (staged foreign memory
			// reached in another arrangement): a new entry.
			e.retireL3(l2.l3)
			delete(w.l1.l2, w.l2key)
			w.l2, w.l3map, w.push = nil, nil, w.push[:0]
			if w.st.Capturing() {
				return EvCapture
			}
			return EvMiss
		}
	}
	if e.peersCurrent(w.push) {
		e.stats.L2Hits++
		return EvHit
	}
	// Our buffers moved within known allocations: a push, which allocates
	// nothing and makes no stream call, so it is allowed while capturing.
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

// locals are r's input and output as launches use them in l2 (the staging
// buffers for staged foreign memory).
func (e *Executor) locals(r *Request, l2 *l2Entry) [2]device.Mem {
	if l2.staged {
		return l2.local
	}
	var m [2]device.Mem
	if n := e.bufBytes(r, ir.Input); n > 0 {
		m[0] = device.Mem{Ptr: r.Send, Size: n}
	}
	if n := e.bufBytes(r, ir.Output); n > 0 {
		m[1] = device.Mem{Ptr: r.Recv, Size: n}
	}
	return m
}

// pushRefs appends to out the buffers of r that the peers reach under ent,
// as each peer must see them.
func (e *Executor) pushRefs(r *Request, ent *l1Entry, l2 *l2Entry, out []pushRef) []pushRef {
	local := e.locals(r, l2)
	for q, m := range ent.exportTo {
		m = both(m, r.InPlace)
		if m == 0 || q == e.cfg.Rank {
			continue
		}
		for k := range 2 {
			if m&(1<<k) == 0 || local[k].Size == 0 {
				continue
			}
			reg := l2.region[k]
			out = append(out, pushRef{peer: q, kind: k, buf: pushedBuf{id: exportID{Region: reg, Reg: e.regOf(reg)},
				off: int64(local[k].Ptr - reg.Base), size: local[k].Size}})
		}
	}
	return out
}

// peersCurrent reports whether every peer already sees refs.
func (e *Executor) peersCurrent(refs []pushRef) bool {
	for i := range refs {
		if e.pushed[refs[i].peer][refs[i].kind] != refs[i].buf {
			return false
		}
	}
	return true
}

// l2Setup makes the L2 entry of the request's allocations when there is
// none (exporting them, staging foreign memory), then pushes where this
// request's buffers lie to the peers whose view differs.
func (e *Executor) l2Setup(ctx context.Context, w *walk) Event {
	if w.l2 == nil {
		l2, err := e.newL2(w)
		if err != nil {
			return e.fail(w, L2Setup, err, true)
		}
		w.l1.l2[w.l2key] = l2
		w.l2, w.l3map = l2, l2.l3
		w.push = e.pushRefs(w.r, w.l1, l2, w.push[:0])
		e.stats.L2Setups++
	}
	if err := e.pushTo(ctx, w.l2, w.push); err != nil {
		return e.fail(w, L2Setup, err, true, bootstrapPeers(err)...)
	}
	e.stats.L2Pushes++
	return EvOK
}

// newL2 exports the allocations of w's request that the peers reach
// (staging foreign memory).
func (e *Executor) newL2(w *walk) (*l2Entry, error) {
	r, ent := w.r, w.l1
	sizes := [2]int64{e.bufBytes(r, ir.Input), e.bufBytes(r, ir.Output)}
	user := [2]device.Ptr{r.Send, r.Recv}
	l2 := &l2Entry{key: w.l2key, l3: map[l3Key]*l3Entry{}}
	var exp uint8
	for _, m := range ent.exportTo {
		exp |= both(m, r.InPlace)
	}
	if exp == 0 {
		return l2, nil
	}
	if err := e.stage(l2, exp, sizes, user); err != nil {
		return nil, err
	}
	for k := range 2 {
		p, n := user[k], sizes[k]
		if l2.staged {
			p, n = l2.local[k].Ptr, l2.local[k].Size
		}
		if n == 0 {
			continue
		}
		reg, ok := e.dev.Lookup(p, n)
		if exp&(1<<k) == 0 {
			// Not reached by this request, but the same allocations in
			// place reach it (input and output alias): export it too when
			// it costs only a handle.
			if !ok || l2.staged {
				continue
			}
		} else if !ok {
			return nil, fmt.Errorf("%s is not a backend allocation", ir.BufKind(k).LongName())
		}
		h, err := e.dev.Export(reg)
		if err != nil {
			return nil, err
		}
		l2.region[k], l2.handles[k] = reg, h
		e.stats.Created.Exports++
	}
	return l2, nil
}

// pushTo sends each peer of refs whose view differs where its buffers of
// this request lie, with the handles of the allocations it has not
// imported, and waits for every such peer's answer: its service goroutine
// imports, repoints its prepared launches once its launches before ours
// have finished, and answers (peers.go). One message each way per peer
// concerned; the peers' calls take no part.
func (e *Executor) pushTo(ctx context.Context, l2 *l2Entry, refs []pushRef) error {
	launch := e.launch + 1
	after := e.lastEager
	var sent []int
	for i := 0; i < len(refs); {
		q := refs[i].peer
		j := i
		for j < len(refs) && refs[j].peer == q {
			j++
		}
		same := true
		for _, x := range refs[i:j] {
			same = same && e.pushed[q][x.kind] == x.buf
		}
		if !same {
			m := pushMsg{Launch: launch, After: after}
			for _, x := range refs[i:j] {
				pb := pushBuf{Kind: uint32(x.kind), ID: x.buf.id, Off: x.buf.off, Size: x.buf.size}
				if !e.sentHandle[q][x.buf.id] {
					pb.Handle = l2.handles[x.kind]
				}
				m.Bufs = append(m.Bufs, pb)
			}
			if err := e.send(q, svcTag, m.encode()); err != nil {
				return fmt.Errorf("push to rank %d: %w", q, err)
			}
			sent = append(sent, q)
		}
		i = j
	}
	for _, q := range sent {
		if err := e.awaitAck(ctx, q, "buffers"); err != nil {
			return err
		}
	}
	for _, x := range refs {
		e.pushed[x.peer][x.kind] = x.buf
		e.sentHandle[x.peer][x.buf.id] = true
	}
	return nil
}

// awaitAck waits for peer q's service goroutine to answer a request
// (bounded by the timeout).
func (e *Executor) awaitAck(ctx context.Context, q int, what string) error {
	b, err := e.recv(ctx, q, ackTag)
	if err != nil {
		return fmt.Errorf("waiting for rank %d to take this rank's %s: %w", q, what, err)
	}
	a, err := decodeAck(b)
	if err != nil {
		return fmt.Errorf("rank %d's answer: %w", q, err)
	}
	if a.Err != "" {
		return &peerRefusal{peer: q, msg: a.Err}
	}
	return nil
}

// peerRefusal is a peer's service goroutine refusing a request.
type peerRefusal struct {
	peer int
	msg  string
}

func (r *peerRefusal) Error() string { return fmt.Sprintf("rank %d: %s", r.peer, r.msg) }

// PeerRank names the peer (as launch errors do).
func (r *peerRefusal) PeerRank() int { return r.peer }

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
