package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// Executor level L2, the peers' side (docs/executor.md, "Peers' buffers").
// Each peer keeps this rank informed of where its buffers lie: before a
// launch whose buffers it moved, it pushes them (l2.go, pushTo) to this
// rank's service goroutine for that peer (serve), which imports the
// allocation if it is new and repoints every prepared launch of this
// rank that reaches the peer's buffers (device.Rebinder), after this
// rank's launches before the peer's have finished; then it answers. A
// launch that reaches a peer's buffers first waits on the device for the
// peer to have started the same launch (the peer's started word,
// device.Args.Pair), which it does only after its pushes were answered: so
// every launch sees the peer buffers of its own launch number, whoever
// moved, and no rank's call waits for another's (Known Issue 3 is gone).
// Imports are keyed by the peer's allocation identity and registration
// (exportID), so an allocation freed and made again at the same address is
// imported anew; a deregistration (Deregister) drops them on every peer
// before it returns.

// Tags of the service requests (to the peer's service goroutine) and of
// their answers (to the requesting call): bit 62 keeps them apart from the
// launch-numbered tags, "SV" from the communicator's.
const (
	svcTag = 1<<62 | 0x5356<<32
	ackTag = svcTag | 1
)

// Offsets in the control segment (l0.control).
const (
	ctlDone    = 8  // the done word (device.Args.Done)
	ctlStarted = 16 // the started word (device.Args.Started)
	ctlHDone   = 24 // the finished word (device.Args.HDone)
)

type peerImport struct {
	peer int
	id   exportID
}

// peerEnd is a channel end of an L3 entry whose peer's buffers its
// launches reach: the end, the peer, and the buffers it is bound to now.
type peerEnd struct {
	end, peer int
	bound     [2]device.Mem
}

// peers is the peers' side of L2, shared by the call goroutine and the
// service goroutines under mu.
type peers struct {
	mu      sync.Mutex
	imports map[peerImport]device.Region // a peer's allocation, as mapped here
	// cur[q][k] is peer q's buffer k of its latest launch that reaches it
	// from this rank, as mapped here (zero: none yet).
	cur [][2]device.Mem
	// bound are the L3 entries whose launches reach peers' buffers.
	bound  map[*l3Entry]struct{}
	closed bool

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// What the service goroutines did, for Stats.
	served, imported, rebinds, drops, acks atomic.Uint64
}

// startServices starts one service goroutine per peer (at L0 setup: every
// rank's exist before any rank's first push, since L0 is an allgather).
func (e *Executor) startServices() {
	p := &e.peers
	p.imports = map[peerImport]device.Region{}
	p.cur = make([][2]device.Mem, e.n)
	p.bound = map[*l3Entry]struct{}{}
	e.pushed = make([][2]pushedBuf, e.n)
	e.sentHandle = make([]map[exportID]bool, e.n)
	for q := range e.sentHandle {
		e.sentHandle[q] = map[exportID]bool{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	for q := range e.n {
		if q == e.cfg.Rank {
			continue
		}
		p.wg.Add(1)
		go e.serve(ctx, q)
	}
}

// stopServices stops the service goroutines and waits for them.
func (e *Executor) stopServices() {
	p := &e.peers
	if p.cancel == nil {
		return
	}
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
}

// serve answers peer q's requests until the executor closes or q is lost.
func (e *Executor) serve(ctx context.Context, q int) {
	defer e.peers.wg.Done()
	for {
		m, err := e.net.Recv(ctx, q, svcTag)
		if err != nil {
			var be *bootstrap.Error
			if ctx.Err() == nil && errors.As(err, &be) && !be.Lost {
				continue // a quiet peer: wait again
			}
			return
		}
		var rerr error
		typ, push, drop, err := decodeService(m)
		switch {
		case err != nil:
			rerr = fmt.Errorf("malformed request: %w", err)
		case typ == svcPush:
			rerr = e.applyPush(q, push)
		default:
			rerr = e.applyDrop(q, drop)
		}
		var a ackMsg
		if rerr != nil {
			a.Err = rerr.Error()
			log.Warnf(log.Executor, "rank %d: rank %d's request: %v", e.cfg.Rank, q, rerr)
		}
		e.peers.served.Add(1)
		if e.net.Send(q, ackTag, a.encode()) == nil {
			e.peers.acks.Add(1)
		}
	}
}

// waitFinished waits until this rank's launches up to launch l have
// finished (the finished word), bounded by the timeout. Errors: the
// timeout, or the executor's failure (its launches will not finish).
func (e *Executor) waitFinished(l uint64) error {
	if l == 0 {
		return nil
	}
	deadline := time.Now().Add(e.cfg.Timeout)
	backoff := time.Microsecond
	for {
		if err := e.Err(); err != nil {
			return err
		}
		v, err := e.controlWord(ctlHDone)
		if err != nil {
			return err
		}
		if v >= l {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("this rank's launch %d did not finish within %v (it has finished %d)", l, e.cfg.Timeout, v)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Millisecond)
	}
}

// controlWord reads the word at off in this rank's control segment, while
// it exists (under abortMu, which Close takes before freeing it).
func (e *Executor) controlWord(off int) (uint64, error) {
	e.abortMu.Lock()
	defer e.abortMu.Unlock()
	p := device.Ptr(e.abortW.Load())
	if p == 0 {
		return 0, ErrClosed
	}
	if wl, ok := e.dev.(device.WordLoader); ok {
		return wl.LoadWord(p + device.Ptr(off))
	}
	var b [8]byte
	if err := e.dev.Download(b[:], p+device.Ptr(off)); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// applyPush takes peer q's buffers of its launch m.Launch: imports what is
// new and, once this rank's launches up to m.After have finished (the last
// launch before it that no CUDA graph captured: none of them reads a
// binding afterwards; those captured run later, from frozen bindings),
// repoints every prepared launch that reaches q's buffers — but those
// frozen by a capture before m.Launch, whose bindings stay as the capture
// saw them.
func (e *Executor) applyPush(q int, m pushMsg) error {
	if err := e.waitFinished(m.After); err != nil {
		return err
	}
	p := &e.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	for _, b := range m.Bufs {
		k := peerImport{q, b.ID}
		reg, ok := p.imports[k]
		if !ok {
			if len(b.Handle) == 0 {
				return fmt.Errorf("allocation %#x+%d (generation %d) came without a handle, and this rank has not imported it", uintptr(b.ID.Region.Base), b.ID.Region.Size, b.ID.Region.Gen)
			}
			r, err := e.dev.Import(b.Handle)
			if err != nil {
				return fmt.Errorf("import rank %d's allocation: %w", q, err)
			}
			reg = r
			p.imports[k] = reg
			p.imported.Add(1)
		}
		if b.Off > reg.Size || b.Size > reg.Size-b.Off {
			return fmt.Errorf("buffer (offset %d, %d bytes) lies outside the allocation of %d bytes", b.Off, b.Size, reg.Size)
		}
		p.cur[q][b.Kind] = device.Mem{Ptr: reg.Base + device.Ptr(b.Off), Size: b.Size}
	}
	return e.rebindLocked(q, m.Launch)
}

// rebindLocked repoints the prepared launches that reach peer q's buffers
// at p.cur[q], but those frozen by a capture before launch (p.mu held).
func (e *Executor) rebindLocked(q int, launch uint64) error {
	p := &e.peers
	for ent := range p.bound {
		if ent.frozenAt != 0 && launch > ent.frozenAt {
			continue
		}
		rb, ok := ent.prep.(device.Rebinder)
		if !ok {
			return fmt.Errorf("the %s backend cannot repoint a prepared launch at a peer's new buffers", e.dev.Name())
		}
		for i := range ent.peerEnds {
			pe := &ent.peerEnds[i]
			if pe.peer != q {
				continue
			}
			for k := range 2 {
				if want := p.cur[q][k]; pe.bound[k] != want {
					if err := rb.RebindPeer(pe.end, k, want); err != nil {
						return err
					}
					pe.bound[k] = want
					p.rebinds.Add(1)
				}
			}
		}
	}
	return nil
}

// bindPeers gives a new L3 entry's channel ends the peers' current
// buffers (before Prepare; registered for rebinding by register).
func (e *Executor) bindPeers(ent *l1Entry, a *device.Args, l3 *l3Entry) {
	p := &e.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range a.Ends {
		q := a.Ends[c].Peer
		if q == e.cfg.Rank || ent.importFrom[q] == 0 {
			continue
		}
		pe := peerEnd{end: c, peer: q, bound: p.cur[q]}
		a.Ends[c].PeerBuf[0], a.Ends[c].PeerBuf[1] = pe.bound[0], pe.bound[1]
		l3.peerEnds = append(l3.peerEnds, pe)
	}
}

// register makes the prepared l3 follow the peers' pushes, first
// repointing what a push moved since bindPeers: its first launch is after
// the launches those pushes waited for.
func (e *Executor) register(l3 *l3Entry) error {
	if len(l3.peerEnds) == 0 {
		return nil
	}
	p := &e.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	rb, ok := l3.prep.(device.Rebinder)
	if !ok {
		return fmt.Errorf("the %s backend cannot repoint a prepared launch at a peer's new buffers (device.Rebinder)", e.dev.Name())
	}
	for i := range l3.peerEnds {
		pe := &l3.peerEnds[i]
		for k := range 2 {
			if want := p.cur[pe.peer][k]; pe.bound[k] != want {
				if err := rb.RebindPeer(pe.end, k, want); err != nil {
					return err
				}
				pe.bound[k] = want
			}
		}
	}
	p.bound[l3] = struct{}{}
	return nil
}

// unbind forgets l3 (its prepared launch is released or retained).
func (e *Executor) unbind(l3 *l3Entry) {
	if len(l3.peerEnds) == 0 {
		return
	}
	e.peers.mu.Lock()
	delete(e.peers.bound, l3)
	e.peers.mu.Unlock()
}

// applyDrop drops every import of peer q's allocation m.Region (q
// deregistered it), the point-to-point engine's too (p2pDrop), once this rank's launches up to q's last launch that
// used it have finished: afterwards q may free it (on CUDA, freeing memory
// a peer has mapped is undefined behaviour). The prepared launches bound
// to it are unbound; one captured into a CUDA graph keeps using it, so the
// drop is refused.
func (e *Executor) applyDrop(q int, m dropMsg) error {
	if err := e.waitFinished(m.Last); err != nil {
		return err
	}
	p := &e.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	var gone []device.Region
	for k, reg := range p.imports {
		if k.peer == q && k.id.Region == m.Region {
			gone = append(gone, reg)
		}
	}
	in := func(b device.Mem, reg device.Region) bool { return b.Size > 0 && reg.Contains(b.Ptr, b.Size) }
	for ent := range p.bound {
		for i := range ent.peerEnds {
			pe := &ent.peerEnds[i]
			for k := range 2 {
				for _, reg := range gone {
					if pe.peer == q && in(pe.bound[k], reg) && ent.frozenAt != 0 {
						return fmt.Errorf("a launch captured into a CUDA graph uses the allocation %#x+%d: it stays mapped until the communicator is destroyed", uintptr(m.Region.Base), m.Region.Size)
					}
				}
			}
		}
	}
	// The point-to-point engine's imports of it (refused, changing
	// nothing, when a capture may still write into it).
	if err := e.p2pDrop(q, m.Region); err != nil {
		return err
	}
	for k := range 2 {
		for _, reg := range gone {
			if in(p.cur[q][k], reg) {
				p.cur[q][k] = device.Mem{}
			}
		}
	}
	if err := e.rebindLocked(q, ^uint64(0)); err != nil { // (never a frozen entry)
		return err
	}
	for k := range p.imports {
		if k.peer == q && k.id.Region == m.Region {
			e.dev.Unimport(p.imports[k].Base)
			delete(p.imports, k)
		}
	}
	p.drops.Add(1)
	return nil
}

// unimportAll drops every peer import (Close, after the service goroutines
// stopped and every launch has finished).
func (e *Executor) unimportAll() {
	p := &e.peers
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, reg := range p.imports {
		e.dev.Unimport(reg.Base)
		delete(p.imports, k)
	}
	clear(p.bound)
}
