package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/theseus-ccl/theseus/runtime/log"
	"github.com/theseus-ccl/theseus/runtime/transport/ucx"
)

// MemKind is where a region's memory lives.
type MemKind uint8

const (
	HostMem   MemKind = iota // host memory
	DeviceMem                // CUDA device memory
)

// Mem describes memory to register: [Addr, Addr+Size).
type Mem struct {
	Addr uintptr
	Size int
	Kind MemKind
	// Mirror is the host address of a pinned, device-mapped buffer of Size
	// bytes, for device memory with a UCX build lacking CUDA support: the
	// peers' puts into the region land there (the device reads them from
	// it; docs/transport.md, "Staging"). Ignored for host memory and when
	// UCX handles CUDA memory.
	Mirror uintptr
	// SourceOnly registers the memory only as a source of this rank's
	// puts: the peers never put into it, so device memory needs no Mirror
	// on the staged path (the staging copies read it) and no key is shared
	// for it.
	SourceOnly bool
}

// Path is how a region's bytes cross the wire.
type Path uint8

const (
	// Direct: UCX reads and writes the memory itself (host memory, or
	// device memory with a CUDA-enabled UCX: GPUDirect RDMA on RDMA
	// transports).
	Direct Path = iota
	// Staged: device memory through pinned host memory. Puts from the
	// region copy each piece to a host staging buffer first (Stager);
	// puts into it land in its host Mirror.
	Staged
)

func (p Path) String() string { return [...]string{"direct", "staged"}[p] }

// Region is a registered local region.
type Region struct {
	ID   uint16
	Mem  Mem
	Path Path
	mem  *ucx.Mem // the registration (of Mirror when staged; nil for a staged SourceOnly region)
	wire uintptr  // the address the wire uses: Addr, or Mirror when staged
	// released: Release dropped the registration.
	released bool
}

// Register registers m with UCX and gives it the next region id (ids count
// from 0 per Conn; peers register theirs in the same order when the
// schedule is symmetric). Peers learn of it at the next Share.
// Errors: a device region without a CUDA-enabled UCX and without Mirror,
// a zero size, more than 65536 regions, UCX's refusal.
func (c *Conn) Register(m Mem) (*Region, error) {
	if m.Size <= 0 {
		return nil, fmt.Errorf("proxy: rank %d: register: size %d", c.rank, m.Size)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	regs := *c.regions.Load()
	if len(regs) >= 1<<16 {
		return nil, fmt.Errorf("proxy: rank %d: register: more than %d regions", c.rank, 1<<16)
	}
	r := &Region{ID: uint16(len(regs)), Mem: m, wire: m.Addr}
	kind := ucx.Host
	if m.Kind == DeviceMem {
		if c.p.CUDA() {
			kind = ucx.CUDA
		} else {
			if m.Mirror == 0 && !m.SourceOnly {
				return nil, fmt.Errorf("proxy: rank %d: register: device memory of %d bytes, and this UCX build has no CUDA support: give a pinned host Mirror (staged path) or point THESEUS_UCX_LIB at a UCX built with CUDA", c.rank, m.Size)
			}
			r.Path, r.wire = Staged, m.Mirror
			if m.SourceOnly {
				r.wire = 0
			}
			if c.stage == nil {
				st, err := newStager(c.p, c.opts)
				if err != nil {
					return nil, &Error{Rank: c.rank, Peer: -1, Op: "register (staging buffer)", Err: err}
				}
				c.stage = st
			}
		}
	}
	if r.wire != 0 {
		mem, err := c.p.ctx.Map(r.wire, m.Size, kind)
		if err != nil {
			return nil, &Error{Rank: c.rank, Peer: -1, Op: "register", Err: err}
		}
		r.mem = mem
	}
	if log.On(log.Info, log.Net) {
		log.Infof(log.Net, "rank %d: region %d: %d bytes of %s memory, %s", c.rank, r.ID, m.Size, [...]string{"host", "device"}[m.Kind], r.Path)
	}
	nr := append(slices.Clone(regs), r)
	c.regions.Store(&nr)
	return r, nil
}

// Region returns region id of the Conn as registered (its memory and
// path), false when there is none.
func (c *Conn) Region(id uint16) (Region, bool) {
	regs := *c.regions.Load()
	if int(id) >= len(regs) {
		return Region{}, false
	}
	r := regs[id]
	return Region{ID: r.ID, Mem: r.Mem, Path: r.Path, released: r.released}, true
}

// Share sends the regions registered since the last Share to every peer
// and receives theirs (collective over the Conn's peers: each calls Share
// the same number of times). Errors name the peer.
func (c *Conn) Share(ctx context.Context) error {
	c.mu.Lock()
	regs := *c.regions.Load()
	fresh := regs[c.shared:]
	var msg []byte
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(fresh)))
	for _, r := range fresh {
		var key []byte
		if r.mem != nil && !r.Mem.SourceOnly {
			var err error
			if key, err = r.mem.PackRKey(); err != nil {
				c.mu.Unlock()
				return &Error{Rank: c.rank, Peer: -1, Op: "share", Err: err}
			}
		}
		msg = binary.LittleEndian.AppendUint16(msg, r.ID)
		msg = append(msg, byte(r.Path))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(r.wire))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(r.Mem.Size))
		msg = binary.LittleEndian.AppendUint32(msg, uint32(len(key)))
		msg = append(msg, key...)
	}
	c.shared = len(regs)
	c.mu.Unlock()
	got, err := c.exchange(ctx, "share", func(*peer) []byte { return msg })
	if err != nil {
		return err
	}
	for _, pe := range c.order {
		if err := c.addRemote(pe, got[pe.rank]); err != nil {
			return &Error{Rank: c.rank, Peer: pe.rank, Op: "share", Err: err}
		}
	}
	return nil
}

// wireRegion is one entry of a Share message.
type wireRegion struct {
	id         uint16
	path       Path
	base, size uint64
	key        []byte
}

// decodeRegions parses a Share message: u32 count, then per region u16 id,
// u8 path, u64 base, u64 size, u32 key length, the packed key (empty for a
// region that is no destination: SourceOnly, or released). Ids must
// continue from have (the peer's regions known so far).
func decodeRegions(m []byte, have int) ([]wireRegion, error) {
	bad := func(why string) error { return fmt.Errorf("malformed region table from the peer: %s", why) }
	if len(m) < 4 {
		return nil, bad("short header")
	}
	n := int(binary.LittleEndian.Uint32(m))
	m = m[4:]
	if n > len(m)/23 {
		return nil, bad(fmt.Sprintf("%d regions in %d bytes", n, len(m)))
	}
	out := make([]wireRegion, 0, n)
	for i := range n {
		if len(m) < 23 {
			return nil, bad("short entry")
		}
		r := wireRegion{id: binary.LittleEndian.Uint16(m), path: Path(m[2]), base: binary.LittleEndian.Uint64(m[3:]), size: binary.LittleEndian.Uint64(m[11:])}
		kl := int(binary.LittleEndian.Uint32(m[19:]))
		m = m[23:]
		if int(r.id) != have+i {
			return nil, bad(fmt.Sprintf("region id %d, want %d", r.id, have+i))
		}
		if r.path > Staged || kl > len(m) || r.size == 0 || r.base+r.size < r.base {
			return nil, bad(fmt.Sprintf("region %d: path %d, key of %d bytes (%d left), %d bytes at %#x", r.id, r.path, kl, len(m), r.size, r.base))
		}
		r.key, m = m[:kl], m[kl:]
		out = append(out, r)
	}
	if len(m) != 0 {
		return nil, bad(fmt.Sprintf("%d bytes after the last region", len(m)))
	}
	return out, nil
}

func (c *Conn) addRemote(pe *peer, m []byte) error {
	remote := slices.Clone(pe.remoteRegions())
	rs, err := decodeRegions(m, len(remote))
	if err != nil {
		return err
	}
	defer func() { pe.remote.Store(&remote) }()
	for _, r := range rs {
		var rk *ucx.RKey
		if len(r.key) > 0 {
			var err error
			if rk, err = pe.ep.UnpackRKey(r.key); err != nil {
				return err
			}
		}
		remote = append(remote, remoteRegion{base: r.base, size: r.size, path: r.path, rk: rk})
	}
	return nil
}

// AddChannel defines a port channel to peer whose signal increments the
// 64-bit word at byte semOff of the peer's region semRegion (host memory
// the peer polls, 8-byte aligned; shared by Share first). Channel ids count
// from 0 per Conn. The descriptors name it in Desc.Channel.
func (c *Conn) AddChannel(peer int, semRegion uint16, semOff uint64) (uint16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pe := c.peers[peer]
	if pe == nil {
		return 0, fmt.Errorf("proxy: rank %d: channel to rank %d, which is not a peer of this connection", c.rank, peer)
	}
	remote := pe.remoteRegions()
	if int(semRegion) >= len(remote) {
		return 0, fmt.Errorf("proxy: rank %d: channel to rank %d: the peer has shared %d regions, not region %d", c.rank, peer, len(remote), semRegion)
	}
	rr := remote[semRegion]
	if rr.rk == nil {
		return 0, fmt.Errorf("proxy: rank %d: channel to rank %d: the peer's region %d is not shared for writing", c.rank, peer, semRegion)
	}
	if semOff%8 != 0 || semOff+8 > rr.size {
		return 0, fmt.Errorf("proxy: rank %d: channel to rank %d: semaphore at byte %d of a %d-byte region (want 8-byte aligned, inside)", c.rank, peer, semOff, rr.size)
	}
	chs := *c.channels.Load()
	if len(chs) >= 1<<16 {
		return 0, fmt.Errorf("proxy: rank %d: more than %d channels", c.rank, 1<<16)
	}
	nc := append(slices.Clone(chs), channel{peer: pe, semOff: rr.base + semOff, semRK: rr.rk})
	c.channels.Store(&nc)
	return uint16(len(chs)), nil
}

// Stats counts what the proxy executed for a Conn.
type Stats struct {
	Descriptors uint64
	DirectPuts  uint64 // puts from memory UCX reads itself
	StagedPuts  uint64 // puts from device memory through the staging buffer
	PutBytes    uint64
	StagedBytes uint64
	Signals     uint64
	Fences      uint64 // ucp_worker_fence ahead of a signal
	// OrderFlushes: endpoint flushes ahead of a signal, where the
	// endpoint's lanes are not ordered by a fence (orderedByFence).
	OrderFlushes uint64
	Flushes      uint64
	// The staged path's time in the proxy's goroutine (nanoseconds):
	// starting or making staging copies (StageCopies of them), waiting for
	// batched copies (BatchStager.Sync), and waiting for a piece's earlier
	// put before copying into it again.
	StageCopies, StageCopyNs, StageSyncNs, StageWaitNs uint64
	// ExecNs: the time the proxy's goroutine spent executing descriptors
	// (nanoseconds; the staging times above are part of it), of which
	// issuing direct puts (PutNs), fences (FenceNs) and signals'
	// atomics (SignalNs).
	ExecNs, PutNs, FenceNs, SignalNs uint64
}

type statCounters struct {
	desc, direct, staged, bytes, stagedBytes, signals, fences, orderFlushes, flushes     atomic.Uint64
	stageCopies, stageCopyNs, stageSyncNs, stageWaitNs, execNs, putNs, fenceNs, signalNs atomic.Uint64
}

// String is Stats for a log line: counts, bytes, and the staged path's
// times in microseconds.
func (s Stats) String() string {
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	return fmt.Sprintf("%d descriptors, %d puts direct and %d staged (%d of %d bytes), %d signals, %d fences, %d order flushes, %d flushes; "+
		"executing %.0f us (direct puts %.0f, fences %.0f, signals %.0f); staging: %d copies %.0f us, sync %.0f us, piece waits %.0f us",
		s.Descriptors, s.DirectPuts, s.StagedPuts, s.StagedBytes, s.PutBytes, s.Signals, s.Fences, s.OrderFlushes, s.Flushes,
		us(s.ExecNs), us(s.PutNs), us(s.FenceNs), us(s.SignalNs), s.StageCopies, us(s.StageCopyNs), us(s.StageSyncNs), us(s.StageWaitNs))
}

// Stats returns the Conn's counters (which path its puts took).
func (c *Conn) Stats() Stats {
	s := &c.stats
	return Stats{Descriptors: s.desc.Load(), DirectPuts: s.direct.Load(), StagedPuts: s.staged.Load(), PutBytes: s.bytes.Load(),
		StagedBytes: s.stagedBytes.Load(), Signals: s.signals.Load(), Fences: s.fences.Load(), OrderFlushes: s.orderFlushes.Load(), Flushes: s.flushes.Load(),
		StageCopies: s.stageCopies.Load(), StageCopyNs: s.stageCopyNs.Load(), StageSyncNs: s.stageSyncNs.Load(), StageWaitNs: s.stageWaitNs.Load(), ExecNs: s.execNs.Load(),
		PutNs: s.putNs.Load(), FenceNs: s.fenceNs.Load(), SignalNs: s.signalNs.Load()}
}

// drain executes the FIFO's ready descriptors (at most a batch) in the
// proxy's goroutine. work: something happened; busy: a flush is in flight
// or the endpoints are full.
func (c *Conn) drain() (work, busy bool) {
	start := c.next
	if c.releaseHeld() {
		work = true
	}
	if c.pending != nil {
		done, err := c.pending.Test()
		if !done {
			if time.Since(c.pendFrom) > c.p.timeout {
				c.fail(&Error{Rank: c.rank, Peer: c.pendPeer.rank, Op: fmt.Sprintf("flush (descriptor %d) not complete", c.next), Err: c.peerErr(c.pendPeer, errTimeout(c.p.timeout))})
				c.pending, c.pendRest = nil, 0
				c.next++
				c.publishTail()
				return true, false
			}
			c.checkPeers()
			c.publishTail()
			return work, true
		}
		c.pending = nil
		if err != nil {
			c.fail(&Error{Rank: c.rank, Peer: c.pendPeer.rank, Op: fmt.Sprintf("flush (descriptor %d)", c.next), Err: c.peerErr(c.pendPeer, err)})
		} else if rest := c.pendRest; rest != 0 {
			// An ordering flush ahead of a signal completed: the signal (and
			// a flush after it) still to do.
			c.pendRest = 0
			c.exec(c.pendDesc, rest)
			if c.pending != nil {
				return true, true
			}
		}
		c.pendRest = 0
		c.next++
	}
	for range 64 {
		d, ok := c.fifo.peek(c.next)
		if !ok {
			break
		}
		// Hold back while the peer's endpoint has maxInFlight operations
		// queued in UCX (it queues without bound): the FIFO fills and its
		// producers wait.
		if chs := *c.channels.Load(); int(d.Channel) < len(chs) && d.Op&(OpPut|OpSignal) != 0 &&
			c.failed.Load() == nil && (len(c.held) >= maxInFlight || chs[d.Channel].peer.ep.InFlight() >= maxInFlight) {
			busy = true
			break
		}
		c.stats.desc.Add(1)
		if c.failed.Load() == nil {
			t0 := time.Now()
			c.exec(d, d.Op)
			c.stats.execNs.Add(uint64(time.Since(t0)))
		}
		if c.pending != nil {
			break
		}
		c.next++
	}
	c.publishTail()
	if c.next != start {
		return true, busy || c.pending != nil || len(c.held) > 0
	}
	c.checkPeers()
	return work, busy || c.pending != nil || len(c.held) > 0
}

// heldPut is a put whose source UCX still reads (a tracked request not
// complete yet): its descriptor, and every later one, is not complete
// until the request is, so that a producer that waits for the ticket may
// overwrite the source (docs/transport.md, "The FIFO").
type heldPut struct {
	ticket uint64
	peer   *peer
	req    *ucx.Request
	since  time.Time
}

// releaseHeld drops the held puts whose requests have completed, in
// ticket order; a failed one fails the Conn, one past the timeout too.
// It reports whether it released any.
func (c *Conn) releaseHeld() bool {
	n := 0
	for n < len(c.held) {
		h := c.held[n]
		done, err := h.req.Test()
		if !done {
			if time.Since(h.since) > c.p.timeout {
				c.fail(&Error{Rank: c.rank, Peer: h.peer.rank, Op: fmt.Sprintf("put (descriptor %d) not complete", h.ticket), Err: c.peerErr(h.peer, errTimeout(c.p.timeout))})
				for _, x := range c.held[n:] {
					x.req.Wait(time.Now())
				}
				n = len(c.held)
			}
			break
		}
		if err != nil {
			c.fail(&Error{Rank: c.rank, Peer: h.peer.rank, Op: fmt.Sprintf("put (descriptor %d)", h.ticket), Err: c.peerErr(h.peer, err)})
		}
		n++
	}
	if n == 0 {
		return false
	}
	c.held = append(c.held[:0], c.held[n:]...)
	return true
}

// publishTail stores the FIFO's tail: the first descriptor not complete
// (a held put's, or the next to execute).
func (c *Conn) publishTail() {
	c.flushStaged()
	t := c.next
	if len(c.held) > 0 {
		t = c.held[0].ticket
	}
	if t > c.published {
		c.published = t
		c.fifo.publish(t)
	}
}

// flushStaged issues the puts of the staged pieces whose copies the
// round started (BatchStager), once the copies are done.
func (c *Conn) flushStaged() {
	st := c.batched
	if st == nil {
		return
	}
	c.batched = nil
	if len(st.batch) == 0 {
		return
	}
	pe := st.batch[0].pe
	if c.failed.Load() != nil {
		st.bs.Sync() // no puts after a failure: the copies' pieces are dropped
		st.batch = st.batch[:0]
		return
	}
	if err := st.flush(&c.stats); err != nil {
		c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: fmt.Sprintf("staged put (before descriptor %d)", c.next), Err: c.peerErr(pe, err)})
	}
}

// maxInFlight bounds the operations a Conn leaves queued in UCX per
// endpoint before it stops draining its FIFO.
const maxInFlight = 64

// checkPeers looks at the endpoints' error records every 1024 idle rounds:
// a lost peer fails the Conn even when no operation is in flight to it.
func (c *Conn) checkPeers() {
	c.checked++
	if c.checked&1023 != 0 || c.failed.Load() != nil {
		return
	}
	for _, pe := range c.order {
		if err := pe.ep.Err(); err != nil {
			c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: "endpoint", Err: err})
			return
		}
	}
}

// peerErr prefers the endpoint's own failure (the peer lost) over the
// operation's.
func (c *Conn) peerErr(pe *peer, err error) error {
	if e := pe.ep.Err(); e != nil {
		return e
	}
	return err
}

// exec runs the operations ops of descriptor d (all of d.Op, or what is
// left after an ordering flush). A malformed descriptor or a UCX error
// fails the Conn. A flush leaves c.pending set: the descriptor completes
// when it does.
func (c *Conn) exec(d Desc, ops Op) {
	chs := *c.channels.Load()
	if int(d.Channel) >= len(chs) {
		c.fail(&Error{Rank: c.rank, Peer: -1, Op: fmt.Sprintf("descriptor %d", c.next), Err: fmt.Errorf("channel %d of %d", d.Channel, len(chs))})
		return
	}
	ch := chs[d.Channel]
	pe := ch.peer
	if d.Op&^(OpPut|OpSignal|OpFlush) != 0 || d.Op == 0 {
		c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: fmt.Sprintf("descriptor %d", c.next), Err: fmt.Errorf("unknown operation bits %#x", uint8(d.Op))})
		return
	}
	if ops&OpPut != 0 && d.Size > 0 {
		if err := c.put(pe, d); err != nil {
			c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: fmt.Sprintf("put (descriptor %d, %d bytes)", c.next, d.Size), Err: c.peerErr(pe, err)})
			return
		}
	}
	if ops&(OpSignal|OpFlush) != 0 {
		c.flushStaged() // the channel's staged puts go first
		if c.failed.Load() != nil {
			return
		}
	}
	if ops&OpSignal != 0 {
		if pe.dirty && pe.strong {
			// The endpoint's puts and atomics may take different lanes,
			// which a fence does not order (docs/transport.md, "Ordering"):
			// complete the puts first.
			pe.dirty = false
			c.stats.orderFlushes.Add(1)
			c.startFlush(pe, d, ops&^OpPut)
			return
		}
		if pe.dirty {
			t0 := time.Now()
			err := c.p.w.Fence()
			c.stats.fenceNs.Add(uint64(time.Since(t0)))
			if err != nil {
				c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: fmt.Sprintf("signal (descriptor %d): fence", c.next), Err: err})
				return
			}
			c.stats.fences.Add(1)
			// The fence orders every endpoint of the worker.
			c.p.mu.Lock()
			for _, cc := range c.p.conns {
				for _, q := range cc.order {
					q.dirty = false
				}
			}
			c.p.mu.Unlock()
		}
		t0 := time.Now()
		err := pe.ep.Inc(ch.semOff, ch.semRK)
		c.stats.signalNs.Add(uint64(time.Since(t0)))
		if err != nil {
			c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: fmt.Sprintf("signal (descriptor %d)", c.next), Err: c.peerErr(pe, err)})
			return
		}
		c.stats.signals.Add(1)
	}
	if ops&OpFlush != 0 {
		c.stats.flushes.Add(1)
		c.startFlush(pe, d, 0)
	}
}

// startFlush flushes pe's endpoint; rest are the descriptor's operations
// to run once it completes.
func (c *Conn) startFlush(pe *peer, d Desc, rest Op) {
	r, err := pe.ep.Flush()
	if err != nil {
		c.fail(&Error{Rank: c.rank, Peer: pe.rank, Op: fmt.Sprintf("flush (descriptor %d)", c.next), Err: c.peerErr(pe, err)})
		return
	}
	c.pending, c.pendPeer, c.pendFrom, c.pendDesc, c.pendRest = r, pe, time.Now(), d, rest
}

func (c *Conn) put(pe *peer, d Desc) error {
	regs := *c.regions.Load()
	if int(d.SrcRegion) >= len(regs) {
		return fmt.Errorf("source region %d of %d", d.SrcRegion, len(regs))
	}
	src := regs[d.SrcRegion]
	if src.released {
		return fmt.Errorf("source region %d was released", d.SrcRegion)
	}
	if d.SrcOff+uint64(d.Size) > uint64(src.Mem.Size) || d.SrcOff > uint64(src.Mem.Size) {
		return fmt.Errorf("source bytes [%d, %d) beyond region %d of %d bytes", d.SrcOff, d.SrcOff+uint64(d.Size), d.SrcRegion, src.Mem.Size)
	}
	remote := pe.remoteRegions()
	if int(d.DstRegion) >= len(remote) {
		return fmt.Errorf("destination region %d: the peer has shared %d", d.DstRegion, len(remote))
	}
	dst := remote[d.DstRegion]
	if dst.rk == nil {
		return fmt.Errorf("destination region %d of the peer is no destination of puts", d.DstRegion)
	}
	if d.DstOff+uint64(d.Size) > dst.size || d.DstOff > dst.size {
		return fmt.Errorf("destination bytes [%d, %d) beyond the peer's region %d of %d bytes", d.DstOff, d.DstOff+uint64(d.Size), d.DstRegion, dst.size)
	}
	pe.dirty = true
	c.stats.bytes.Add(uint64(d.Size))
	if src.Path == Staged {
		c.stats.staged.Add(1)
		c.stats.stagedBytes.Add(uint64(d.Size))
		err := c.stage.put(c, pe, src.Mem.Addr+uintptr(d.SrcOff), int(d.Size), dst.base+d.DstOff, dst.rk)
		if len(c.stage.batch) > 0 {
			c.batched = c.stage
		}
		return err
	}
	c.stats.direct.Add(1)
	t0 := time.Now()
	r, err := pe.ep.PutTracked(src.wire+uintptr(d.SrcOff), int(d.Size), dst.base+d.DstOff, dst.rk, src.mem)
	c.stats.putNs.Add(uint64(time.Since(t0)))
	if err != nil {
		return err
	}
	if done, err := r.Test(); !done {
		c.held = append(c.held, heldPut{ticket: c.next, peer: pe, req: r, since: time.Now()})
	} else if err != nil {
		return err
	}
	return nil
}

// Go producers (the host backend, tests): they share the FIFO's head word.

// Post queues d and returns its ticket, waiting (bounded) for a free slot.
// Errors: the Conn's failure, a timeout.
func (c *Conn) Post(d Desc) (uint64, error) {
	if err := c.Err(); err != nil {
		return 0, err
	}
	b := c.helpBound()
	t, err := c.fifo.reserve(b, c.Err)
	b.h.stop()
	if err != nil {
		return 0, c.waitErr("post", err)
	}
	c.fifo.post(t, d)
	c.p.help()
	c.p.Kick()
	return t, nil
}

// Wait waits until ticket t has completed (for a flush: at the peer).
func (c *Conn) Wait(t uint64) error {
	b := c.helpBound()
	defer b.h.stop()
	if err := c.fifo.waitDone(t, b, c.Err); err != nil {
		return c.waitErr("wait", err)
	}
	return nil
}

func (c *Conn) waitErr(op string, err error) error {
	var pe *Error
	if errors.As(err, &pe) || errors.Is(err, ErrClosed) {
		return err
	}
	return &Error{Rank: c.rank, Peer: -1, Op: op, Err: err}
}

func (c *Conn) bound() waitBound {
	now := time.Now()
	return waitBound{deadline: now.Add(c.p.timeout), timeout: c.p.timeout, start: now, spin: c.p.spin}
}

// helpBound is bound for a wait whose goroutine helps the proxy until it
// ends or sleeps (the caller stops b.h when the wait ends).
func (c *Conn) helpBound() waitBound {
	b := c.bound()
	b.h = c.p.startHelping()
	return b
}

// Put posts a put of size bytes from local region src at srcOff to the
// channel's peer's region dst at dstOff (queued; complete after a Flush).
func (c *Conn) Put(ch, src uint16, srcOff uint64, dst uint16, dstOff uint64, size uint32) error {
	_, err := c.Post(Desc{Op: OpPut, Channel: ch, SrcRegion: src, SrcOff: srcOff, DstRegion: dst, DstOff: dstOff, Size: size})
	return err
}

// Signal posts a signal on channel ch (after the channel's earlier puts).
func (c *Conn) Signal(ch uint16) error {
	_, err := c.Post(Desc{Op: OpSignal, Channel: ch})
	return err
}

// Flush posts a flush on channel ch and waits until it has completed: the
// channel's earlier puts and signals are complete at the peer.
func (c *Conn) Flush(ch uint16) error {
	t, err := c.Post(Desc{Op: OpFlush, Channel: ch})
	if err != nil {
		return err
	}
	b := c.helpBound()
	defer b.h.stop()
	if err := c.fifo.waitDone(t, b, c.Err); err != nil {
		peer := -1
		if chs := *c.channels.Load(); int(ch) < len(chs) {
			peer = chs[ch].peer.rank
		}
		if _, ok := errors.AsType[*Error](err); ok || errors.Is(err, ErrClosed) {
			return err
		}
		return &Error{Rank: c.rank, Peer: peer, Op: "flush", Err: err}
	}
	return nil
}

// WaitSignal waits until the 64-bit semaphore word at sem (host memory of
// a region of this Conn that peer signals) reaches at least want. The wait
// is bounded by the timeout, and ends early when the Conn fails or the
// endpoint to peer reports the peer lost; errors name both ranks.
func (c *Conn) WaitSignal(sem *uint64, want uint64, peer int) error {
	return c.WaitSignalStop(sem, want, peer, nil)
}

// WaitSignalStop is WaitSignal that also ends, with stop's error, as soon
// as stop (checked every few dozen polls; nil: never) returns one: the
// executor's abort word, a cancelled launch.
func (c *Conn) WaitSignalStop(sem *uint64, want uint64, peer int, stop func() error) error {
	return c.waitFor(func() bool { return atomic.LoadUint64(sem) >= want }, peer, stop, func() string {
		return fmt.Sprintf("waiting for signal %d from rank %d (have %d)", want, peer, atomic.LoadUint64(sem))
	})
}

// WaitUntil waits until cond holds: a condition on memory of this rank
// that rank peer's puts and signals write (a point-to-point FIFO's credit
// or arrival words). It waits as WaitSignalStop does: it helps this
// process's proxy progress while it spins, and ends with an error when the
// connection or the endpoint to peer fails, stop returns one, or
// THESEUS_TIMEOUT passes.
func (c *Conn) WaitUntil(cond func() bool, peer int, stop func() error) error {
	return c.waitFor(cond, peer, stop, func() string { return fmt.Sprintf("waiting for rank %d", peer) })
}

// waitFor is WaitSignalStop and WaitUntil: op names the wait in errors.
func (c *Conn) waitFor(cond func() bool, peer int, stop func() error, op func() string) error {
	pe := c.peers[peer]
	if pe == nil {
		return fmt.Errorf("proxy: rank %d: wait for rank %d, which is not a peer", c.rank, peer)
	}
	b := c.bound()
	failed := func() error {
		if err := c.Err(); err != nil {
			return err
		}
		if err := pe.ep.Err(); err != nil {
			return err
		}
		if stop != nil {
			return stop()
		}
		return nil
	}
	if cond() {
		return nil
	}
	b.h = c.p.startHelping()
	defer b.h.stop()
	for i := 0; !cond(); i++ {
		if i&7 == 7 && c.p.help() { // the signal may be waiting in this process's worker
			b.busy()
		}
		if err := spinCheck(i, b, failed); err != nil {
			return &Error{Rank: c.rank, Peer: peer, Op: op(), Err: err}
		}
	}
	return nil
}

// Release unregisters region id (its memory is about to be freed: a
// scratch buffer replaced by a larger one). Later puts from it fail the
// Conn; the peers' keys for it are left unused. Releasing twice is a
// no-op.
func (c *Conn) Release(id uint16) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	regs := *c.regions.Load()
	if int(id) >= len(regs) {
		return fmt.Errorf("proxy: rank %d: release of region %d of %d", c.rank, id, len(regs))
	}
	if regs[id].released {
		return nil
	}
	// Not while the loop may be putting from it.
	c.p.loopMu.Lock()
	defer c.p.loopMu.Unlock()
	nr := slices.Clone(regs)
	r := *nr[id]
	if r.mem != nil {
		r.mem.Unmap()
	}
	r.mem, r.released = nil, true
	nr[id] = &r
	c.regions.Store(&nr)
	return nil
}

// Help runs one round of the proxy from the caller's goroutine when no
// other goroutine is running one: a waiter for data that a peer's puts
// deliver (an LL packet flag) calls it, since over TCP the puts land in
// this process's progress.
func (c *Conn) Help() { c.p.help() }

// Kick wakes the proxy's goroutine (Proxy.Kick).
func (c *Conn) Kick() { c.p.Kick() }
