package executor

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/theseus-ccl/theseus/compiler/diff"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// l1Materialise builds the L1 entry of w's schedule: cold, or as a delta of
// the source.
func (e *Executor) l1Materialise(ctx context.Context, w *walk, migrate bool) Event {
	t0 := time.Now()
	state := L1Cold
	var src *l1Entry
	if migrate {
		state, src = L1Migrate, e.source(w)
	}
	before := e.stats.Created
	s, n, rank := w.s, e.n, e.cfg.Rank
	b := s.Bundle
	if b.Meta.NRanks != n || len(b.Ranks) != n || len(b.Tables) != n {
		return e.fail(w, state, fmt.Errorf("schedule %q is for %d ranks, the communicator has %d", s.Name, b.Meta.NRanks, n), false)
	}
	shift := w.shift
	phys := func(l int) int { return (l + shift) % n }
	if err := e.checkCrossNode(s, shift); err != nil {
		return e.fail(w, state, err, false)
	}
	l := ((rank-shift)%n + n) % n
	t, err := s.Table(l)
	if err != nil {
		return e.fail(w, state, fmt.Errorf("schedule %q rank %d: %w", s.Name, l, err), false)
	}
	ent := &l1Entry{key: l1Key{s.ID, shift}, sched: s, logical: l, table: t, ends: make([]endRes, len(t.Channels)),
		exportTo: make([]uint8, n), importFrom: make([]uint8, n), fenceAll: t.Protocol == ir.LL && (!t.SelfFenced || e.cfg.LLFence) || t.FenceLaunches}
	enc, err := b.TableBytes(l) // read (and its hash checked) by s.Table
	if err != nil {
		return e.fail(w, state, fmt.Errorf("schedule %q rank %d: %w", s.Name, l, err), false)
	}
	tp, err := e.small(int64(max(len(enc), 1)))
	if err != nil {
		return e.fail(w, state, err, true)
	}
	if err := e.dev.Upload(tp, enc); err != nil {
		return e.fail(w, state, err, true)
	}
	ent.tabMem = device.Mem{Ptr: tp, Size: int64(len(enc))}
	pub := int64(8 * max(len(t.TBs), 1))
	pp, err := e.small(pub)
	if err != nil {
		return e.fail(w, state, err, true)
	}
	ent.publish = device.Mem{Ptr: pp, Size: pub}
	for _, rr := range b.Ranks {
		ent.maxScratch = max(ent.maxScratch, rr.Chunks[ir.Scratch])
	}
	// Registrations: what we reach of our peers, and what they reach of us.
	bit := func(k ir.BufKind) uint8 { return 1 << uint(k) }
	for _, reg := range b.Ranks[l].Registrations {
		ent.importFrom[phys(reg.Peer)] |= bit(reg.Buf)
	}
	for ql, rr := range b.Ranks {
		for _, reg := range rr.Registrations {
			if reg.Peer == l && ql != l {
				ent.exportTo[phys(ql)] |= bit(reg.Buf)
			}
		}
	}
	for q := range n {
		ent.needL2 = ent.needL2 || ent.exportTo[q] != 0 || ent.importFrom[q] != 0
	}
	if ent.needL2 {
		ent.l2 = map[l2Key]*l2Entry{}
	} else {
		ent.l3 = map[l3Key]*l3Entry{}
	}
	// Channel ends: reuse the source's semaphores where compiler/diff says
	// the identity is shared.
	var reuse []int
	kept, rebased := 0, 0
	if src != nil {
		reuse = diff.SemaphoreReuse(src.sched.Bundle.Ranks, b.Ranks)[l]
	}
	added := map[int][]int{} // peer -> our channel indices with new slots
	// Connections to the peers on other nodes, made before any slot
	// exchange (in rank order on every rank).
	var far []int
	for _, ch := range t.Channels {
		if q := phys(ch.Peer); e.crossNode(q) && e.port.peers[q] == nil && !slices.Contains(far, q) {
			far = append(far, q)
		}
	}
	if len(far) > 0 {
		if err := e.portPeers(ctx, far); err != nil {
			return e.fail(w, state, err, true, bootstrapPeers(err)...)
		}
	}
	lanes := laneAssign(t.Channels, phys, e.crossNode, len(e.port.prx))
	for c, ch := range t.Channels {
		er := endRes{peer: phys(ch.Peer), init: ch.Init}
		if e.crossNode(er.peer) {
			er.port = e.port.peers[er.peer]
			er.lane = lanes[c]
		}
		if reuse != nil && reuse[c] >= 0 && reuse[c] < len(src.ends) {
			old := src.ends[reuse[c]]
			er.slot, er.peerInbound, er.portChan, er.lane = old.slot, old.peerInbound, old.portChan, old.lane
			kept++
			if old.init != ch.Init {
				rebased++
				e.stats.Created.ChannelEnds++
			}
		} else {
			sl, err := e.newSlot(ch.Init, er.port != nil)
			if err != nil {
				return e.fail(w, state, err, true)
			}
			er.slot = sl
			added[er.peer] = append(added[er.peer], c)
			e.stats.Created.ChannelEnds++
			e.stats.Created.Semaphores++
		}
		ent.ends[c] = er
	}
	// Exchange the new slots, point to point, with the peers concerned.
	if err := e.exchangeSlots(ctx, ent, added); err != nil {
		return e.fail(w, state, err, true, bootstrapPeers(err)...)
	}
	if e.staged() {
		if ent.mirror, ent.mirrorChunks, err = e.mirrorMap(s, ent); err != nil {
			return e.fail(w, state, err, true)
		}
	}
	if e.mapper() != nil {
		// The proxies a launch's kernel posts to, woken before it: each
		// end's lane, and lane 0 of each peer, where the launch fence
		// across nodes posts (portFences), whether or not an end is there.
		for c := range ent.ends {
			er := &ent.ends[c]
			if er.port == nil {
				continue
			}
			for _, pc := range []*portConn{er.port.lanes[er.lane].pc, er.port.lanes[0].pc} {
				if !slices.Contains(ent.kick, pc) {
					ent.kick = append(ent.kick, pc)
				}
			}
		}
	}
	e.l1[ent.key] = ent
	w.l1 = ent
	if migrate {
		e.stats.L1Migrations++
	} else {
		e.stats.L1Cold++
	}
	from := -1
	if src != nil {
		from = src.sched.ID
	}
	e.stats.LastMigration = Migration{From: from, To: s.ID, Created: diffCreated(e.stats.Created, before),
		Kept: kept, Rebased: rebased, Elapsed: time.Since(t0)}
	if log.On(log.Info, log.Executor) {
		m := e.stats.LastMigration
		log.Infof(log.Executor, "rank %d: schedule %d (%s, rotation %d) materialised from %d: %d channel ends, %d semaphores, %d kept (%d rebased), %d messages in %v",
			rank, s.ID, s.Name, shift, from, m.Created.ChannelEnds, m.Created.Semaphores, kept, rebased, m.Created.BootstrapMessages, m.Elapsed)
	}
	return EvOK
}

func diffCreated(a, b Created) Created {
	return Created{ChannelEnds: a.ChannelEnds - b.ChannelEnds, Semaphores: a.Semaphores - b.Semaphores,
		Registrations: a.Registrations - b.Registrations, Exports: a.Exports - b.Exports, Staged: a.Staged - b.Staged,
		Connections: a.Connections - b.Connections, BootstrapMessages: a.BootstrapMessages - b.BootstrapMessages,
		BootstrapRounds: a.BootstrapRounds - b.BootstrapRounds, Allocations: a.Allocations - b.Allocations}
}

// newSlot takes the next semaphore slot of the pools, initialised for an
// end of init; port takes it from the port pools (the semaphores of ends
// toward other nodes, which the proxy writes).
func (e *Executor) newSlot(init int64, port bool) (*slot, error) {
	pools, grow := e.l0.pools, e.newPool
	if port {
		pools, grow = e.port.pools, e.newPortPool
	}
	var p *pool
	if len(pools) > 0 {
		p = pools[len(pools)-1]
	}
	if p == nil || p.used == p.n {
		var err error
		if p, err = grow(); err != nil {
			return nil, err
		}
	}
	s := &slot{pool: p, idx: p.used, curInit: init}
	p.used++
	if err := e.setWord(s, s.inbound(), semBias+uint64(init)); err != nil {
		return nil, err
	}
	if err := e.setWord(s, s.expected(), semBias); err != nil {
		return nil, err
	}
	return s, nil
}

// semBias starts every semaphore slot at inbound = bias + init and expected
// = bias: the waits compare the same difference (ir.md §5.3), and a rebase
// that lowers the expected counter (a slot taken over by an end with a
// larger init, say an LL end that never waited becoming a Simple credit
// end) can never take it below zero.
const semBias = 1 << 40

// exchangeSlots sends each peer the slots of our new ends toward it (with
// the pool handles it lacks) and receives the slots of its ends, which our
// ends signal into. Added ends pair up: a semaphore identity is kept on one
// side exactly when the mirror identity is kept on the other.
func (e *Executor) exchangeSlots(ctx context.Context, ent *l1Entry, added map[int][]int) error {
	if len(added) == 0 {
		return nil
	}
	tag := e.tag(tagL1)
	peers := sortedKeys(added)
	for _, q := range peers {
		if pp := e.port.peers[q]; pp != nil && e.crossNode(q) {
			// Across nodes the slots are regions of the connection: share
			// the pools they lie in first (the peer, whose ends pair with
			// ours, shares at the same request).
			var msg slotMsg
			for _, c := range added[q] {
				reg, off, err := e.portSlotRef(pp, ent.ends[c].slot)
				if err != nil {
					return err
				}
				msg.Slots = append(msg.Slots, slotRef{Channel: uint32(c), Pool: uint32(reg), Index: uint32(off / 8)})
			}
			if err := pp.lanes.share(ctx); err != nil {
				return err
			}
			if err := e.send(q, tag, msg.encode()); err != nil {
				return err
			}
			continue
		}
		if q == e.cfg.Rank {
			continue
		}
		var msg slotMsg
		for _, c := range added[q] {
			sl := ent.ends[c].slot
			msg.Slots = append(msg.Slots, slotRef{Channel: uint32(c), Pool: sl.pool.id, Index: uint32(sl.idx)})
			if !e.l0.sentPool[q][sl.pool.id] {
				e.l0.sentPool[q][sl.pool.id] = true
				msg.Pools = append(msg.Pools, poolRef{ID: sl.pool.id, Handle: sl.pool.handle})
			}
		}
		if err := e.send(q, tag, msg.encode()); err != nil {
			return err
		}
	}
	for _, q := range peers {
		type ref struct{ pool, idx uint32 }
		theirs := map[int]ref{}
		if q == e.cfg.Rank {
			// A channel to ourselves: both ends are ours.
			for _, c := range added[q] {
				theirs[c] = ref{ent.ends[c].slot.pool.id, uint32(ent.ends[c].slot.idx)}
			}
		} else {
			m, err := e.recv(ctx, q, tag)
			if err != nil {
				return err
			}
			sm, err := decodeSlots(m)
			if err != nil {
				return fmt.Errorf("rank %d's slot message: %w", q, err)
			}
			for _, x := range sm.Slots {
				theirs[int(x.Channel)] = ref{x.Pool, x.Index}
			}
			if pp := e.port.peers[q]; pp != nil && e.crossNode(q) {
				for _, c := range added[q] {
					pc := ent.table.Channels[c].PeerChannel
					r, ok := theirs[pc]
					if !ok || r.pool > 0xffff {
						return fmt.Errorf("%w: rank %d sent no semaphore for its channel %d (our channel %d): the schedules' ends do not pair", ErrMismatch, q, pc, c)
					}
					ch, err := pp.lanes[ent.ends[c].lane].conn.AddChannel(q, uint16(r.pool), 8*uint64(r.idx))
					if err != nil {
						return err
					}
					ent.ends[c].portChan = ch
				}
				continue
			}
			for _, p := range sm.Pools {
				if _, ok := e.l0.peerPools[q][p.ID]; !ok {
					reg, err := e.importHandle(p.Handle)
					if err != nil {
						return fmt.Errorf("import rank %d's semaphore pool %d: %w", q, p.ID, err)
					}
					e.l0.peerPools[q][p.ID] = reg
				}
			}
		}
		for _, c := range added[q] {
			pc := ent.table.Channels[c].PeerChannel
			r, ok := theirs[pc]
			if !ok {
				return fmt.Errorf("%w: rank %d sent no semaphore for its channel %d (our channel %d): the schedules' ends do not pair", ErrMismatch, q, pc, c)
			}
			reg, ok := e.l0.peerPools[q][r.pool]
			if !ok || int64(r.idx) >= poolSlots {
				return fmt.Errorf("rank %d named semaphore pool %d slot %d, which it never exported", q, r.pool, r.idx)
			}
			ent.ends[c].peerInbound = reg.Base + device.Ptr(8*r.idx)
		}
	}
	return nil
}

func sortedKeys(m map[int][]int) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
