package executor

import (
	"fmt"
	"slices"

	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// The point-to-point engine's offers (docs/p2p.md, "Offers"): a
// receiver offers the allocations it receives into, a sender imports them
// and writes directly; a deregistration withdraws them.

// offer sends each peer this call receives from the allocations it
// receives into that it has not offered that peer yet (a message the peer
// takes up at its next call with this rank). Memory that is not a backend
// allocation, or that cannot be exported, is not offered (its transfers go
// through the FIFO). The allocations are the walk's (p2pRecvRegions).
func (e *Executor) offer(r *P2PRequest, recvs []int) error {
	if len(recvs) == 0 {
		return nil
	}
	// (e.p2p.regs: the walk's Lookups of the receive buffers)
	for i, g := range e.p2p.regs {
		if !g.ok {
			continue
		}
		if r.Matrix != nil {
			for _, q := range recvs {
				if err := e.offerTo(q, g.reg); err != nil {
					return err
				}
			}
			continue
		}
		if err := e.offerTo(r.Ops[i].Peer, g.reg); err != nil {
			return err
		}
	}
	return nil
}

// offerTo is Offer for a walk's receive from peer q (none across nodes:
// no direct writes there).
func (e *Executor) offerTo(q int, reg device.Region) error {
	if e.crossNode(q) {
		return nil
	}
	return e.Offer(q, reg)
}

// Offer offers allocation reg (a Region from Backend.Lookup) to peer q
// for zero-copy point-to-point writes, once (until a deregistration
// withdraws it): q imports it at its next call with this rank and from
// then on writes transfers this rank receives into it directly. It is the
// engine's registration hook: receive buffers are offered when first used;
// a registration may offer an allocation to its peers ahead of use
// (Register itself stays local, as in NCCL). An allocation that cannot be
// exported is not offered (nil). Errors: the message's (sticky).
func (e *Executor) Offer(q int, reg device.Region) error {
	if q == e.cfg.Rank || q < 0 || q >= e.n || e.crossNode(q) {
		return nil
	}
	e.p2pInit()
	if e.p2p.offered[q] == nil {
		e.p2p.offered[q] = map[uint64]uint64{}
	}
	if _, done := e.p2p.offered[q][reg.Gen]; done {
		return nil
	}
	h, err := e.dev.Export(reg)
	if err != nil {
		e.p2p.offered[q][reg.Gen] = 0
		return nil // (CUDA VMM memory, for example): the FIFO serves it
	}
	e.p2p.offerIDs++
	id := e.p2p.offerIDs
	e.p2p.offered[q][reg.Gen] = id
	msg := p2pOfferMsg{ID: id, Base: uint64(reg.Base), Size: reg.Size, Handle: h}
	if err := e.send(q, p2pTag(p2pTagOffer, e.p2p.offerSeq[q]), msg.encode()); err != nil {
		return e.p2pFail(err, true, q)
	}
	e.p2p.offerSeq[q]++
	e.p2p.stats.Offers++
	e.stats.Created.Exports++
	return nil
}

// takeOffers imports the allocations the peers this call sends to have
// offered since (without waiting: offers not yet here are taken up by a
// later call). During a CUDA graph capture the offers that arrived are
// kept for later: an import is no call to make then. A newer offer of a
// range supersedes the imports it overlaps (their mappings stay until
// Close).
func (e *Executor) takeOffers(sends []int, capturing bool) {
	if !e.pendingOffers(sends) || capturing {
		return
	}
	for _, q := range sends {
		msgs := e.p2p.stash[q]
		e.p2p.stash[q] = nil
		for _, b := range msgs {
			m, err := decodeP2POffer(b)
			if err != nil {
				log.Warnf(log.Executor, "rank %d: rank %d's point-to-point offer: %v; ignored", e.cfg.Rank, q, err)
				continue
			}
			reg, err := e.dev.Import(m.Handle)
			if err == nil && reg.Size < m.Size {
				e.dev.Unimport(reg.Base)
				err = fmt.Errorf("it maps %d bytes", reg.Size)
			}
			if err != nil {
				log.Warnf(log.Executor, "rank %d: rank %d's point-to-point offer of %d bytes could not be imported (%v): its receives go through the FIFO", e.cfg.Rank, q, m.Size, err)
				continue
			}
			im := device.P2PImport{ID: m.ID, PeerBase: device.Ptr(m.Base), Size: m.Size, Local: reg.Base}
			e.p2p.mu.Lock()
			list := e.p2p.imports[q][:0]
			for _, o := range e.p2p.imports[q] {
				if o.PeerBase < im.PeerBase+device.Ptr(im.Size) && im.PeerBase < o.PeerBase+device.Ptr(o.Size) {
					continue // superseded
				}
				list = append(list, o)
			}
			e.p2p.imports[q] = append(list, im)
			e.p2p.mapped = append(e.p2p.mapped, reg.Base)
			e.p2p.mu.Unlock()
			e.p2p.gen.Add(1)
			e.p2p.stats.Imports++
			e.stats.Created.Registrations++
		}
	}
}

// pendingOffers moves the offers that have arrived from the peers sends
// into the stash (without waiting) and reports whether any is stashed.
func (e *Executor) pendingOffers(sends []int) bool {
	tn, ok := e.net.(tryNet)
	if !ok {
		return false
	}
	any := false
	for _, q := range sends {
		for {
			b, ok := tn.TryRecv(q, p2pTag(p2pTagOffer, e.p2p.takeSeq[q]))
			if !ok {
				break
			}
			e.p2p.takeSeq[q]++
			e.p2p.stash[q] = append(e.p2p.stash[q], b)
		}
		any = any || len(e.p2p.stash[q]) > 0
	}
	return any
}

// p2pWithdraw withdraws the offers of our allocation reg (its last
// registration is being deregistered) and returns the peers it was
// offered to: they must drop their imports of it (Deregister asks their
// service goroutines, p2pDrop). Receives into it no longer post the
// withdrawn ids (the plans that do are stale); a later receive into it
// offers it anew, under a new id.
func (e *Executor) p2pWithdraw(reg device.Region) []int {
	var peers []int
	for q, m := range e.p2p.offered {
		if id := m[reg.Gen]; id != 0 {
			peers = append(peers, q)
			e.p2p.stats.Withdrawn++
		}
		if _, ok := m[reg.Gen]; ok {
			delete(m, reg.Gen)
		}
	}
	if len(peers) > 0 {
		e.p2p.gen.Add(1)
	}
	return peers
}

// p2pDrop drops this rank's imports of peer q's allocation reg (q
// deregistered it; p2pWithdraw there) and unmaps them: afterwards q may
// free it. Safe while this rank's launches run: a launch writes into an
// import only for a receive of q posting its offer's id, and q, which
// withdrew the id, posts it no more; the transfers it did post finished
// before its receives did. Run by the service goroutine for q. Errors: a
// point-to-point launch captured into a CUDA graph (it may post the old
// id when replayed on q's side): the import stays until Close.
func (e *Executor) p2pDrop(q int, reg device.Region) error {
	s := &e.p2p
	s.mu.Lock()
	defer s.mu.Unlock()
	if q < 0 || q >= len(s.imports) {
		return nil
	}
	var keep, gone []device.P2PImport
	for _, im := range s.imports[q] {
		if reg.Contains(im.PeerBase, im.Size) {
			gone = append(gone, im)
		} else {
			keep = append(keep, im)
		}
	}
	if len(gone) == 0 {
		return nil
	}
	if s.captured.Load() {
		return fmt.Errorf("a point-to-point launch captured into a CUDA graph may write into the allocation %#x+%d: it stays mapped until the communicator is destroyed", uintptr(reg.Base), reg.Size)
	}
	s.imports[q] = keep
	s.gen.Add(1)
	for _, im := range gone {
		e.dev.Unimport(im.Local)
		if i := slices.Index(s.mapped, im.Local); i >= 0 {
			s.mapped = slices.Delete(s.mapped, i, i+1)
		}
		s.drops.Add(1)
	}
	return nil
}
