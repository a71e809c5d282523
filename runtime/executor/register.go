package executor

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/theseus-ccl/theseus/runtime/bootstrap"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/log"
)

// Buffer registration (ncclCommRegister, ncclCommDeregister; docs/executor.md,
// "Registration"). Registering records an allocation for the
// communicator, locally, as in NCCL. Deregistering the last registration
// of an allocation drops every cache entry of it before it returns: this
// rank's L2 entries that export it, and on every peer that imported it
// the import itself (a drop request to the peer's service goroutine, which
// waits for its own launches that may still read it, unimports it and
// answers; the peer's calls take no part). Freeing the allocation
// afterwards is then safe on the CUDA backend, where freeing memory that a
// peer has mapped is undefined behaviour (the seed's Known Issue 1). An
// allocation that is never registered keeps today's rule: its imports
// live until the communicator is destroyed, keyed by the allocation's
// identity (base, size, generation).

// Registration is one registered allocation.
type Registration struct {
	// ID is the registration's id: nonzero, never reused by the executor.
	ID uint64
	// Region is the allocation's identity: the backend allocation that
	// holds the registered range (device.Backend.Lookup), or for foreign
	// memory the range itself (generation 0), which is staged when a peer
	// reaches it.
	Region device.Region
}

// ErrNotRegistered: Deregister of an id that Register did not return, or
// that was deregistered already.
var ErrNotRegistered = errors.New("executor: not a registration of this communicator")

type registry struct {
	seq      uint64
	byID     map[uint64]device.Region
	byRegion map[device.Region][]uint64
}

// Register records [p, p+n) — rather the allocation that holds it — as
// registered with this executor's communicator. Local: no message, no
// peer. The same allocation may be registered more than once; it stays
// registered until every registration is deregistered. Errors: a null or
// empty range.
func (e *Executor) Register(p device.Ptr, n int64) (Registration, error) {
	if p == 0 || n <= 0 {
		return Registration{}, fmt.Errorf("executor: register %#x+%d: a buffer of at least one byte", uintptr(p), n)
	}
	g := &e.regs
	if g.byID == nil {
		g.byID, g.byRegion = map[uint64]device.Region{}, map[device.Region][]uint64{}
	}
	reg := e.identify(p, n)
	g.seq++
	g.byID[g.seq] = reg
	g.byRegion[reg] = append(g.byRegion[reg], g.seq)
	e.stats.Registered++
	return Registration{ID: g.seq, Region: reg}, nil
}

// Registered reports whether the allocation holding [p, p+n) is
// registered, and as what: the hook through which other engines (the
// point-to-point engine's zero-copy path) learn that a buffer is
// registered and its identity. A range of foreign memory is registered
// only as the exact range Register was given.
func (e *Executor) Registered(p device.Ptr, n int64) (Registration, bool) {
	if len(e.regs.byRegion) == 0 {
		return Registration{}, false
	}
	reg := e.identify(p, n)
	ids := e.regs.byRegion[reg]
	if len(ids) == 0 {
		return Registration{}, false
	}
	return Registration{ID: ids[0], Region: reg}, true
}

// regOf is the registration id of allocation r (0 when r is not
// registered): part of the identity peers import r under.
func (e *Executor) regOf(r device.Region) uint64 {
	if ids := e.regs.byRegion[r]; len(ids) > 0 {
		return ids[0]
	}
	return 0
}

// Deregister removes registration id. When it was the allocation's last,
// every cache entry of the allocation goes before Deregister returns: this
// rank's L2 entries that export it (their prepared launches are kept until
// Close, so that none is released under a launch in flight), and every
// peer's import of it (one drop request to each peer that imported it, and
// its answer; each peer first waits for its own launches up to this rank's
// last launch that used the allocation). A later call with the same
// allocation, or one made again at the same address, exports and pushes
// it anew. Errors: ErrNotRegistered; a peer that does not answer within
// the timeout or refuses (an allocation that a launch captured into a
// CUDA graph still uses stays mapped: free it only after destroying the
// communicator).
func (e *Executor) Deregister(ctx context.Context, id uint64) error {
	g := &e.regs
	reg, ok := g.byID[id]
	if !ok {
		return fmt.Errorf("%w (id %d)", ErrNotRegistered, id)
	}
	delete(g.byID, id)
	ids := g.byRegion[reg]
	for i, x := range ids {
		if x == id {
			ids = append(ids[:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) > 0 {
		g.byRegion[reg] = ids
		e.stats.Deregistered++
		return nil
	}
	delete(g.byRegion, reg)
	// This rank's L2 entries that hold the allocation, and what they export.
	exported := map[device.Region]bool{}
	var last uint64
	for _, ent := range e.l1 {
		for k, l2 := range ent.l2 {
			if k.send != reg && k.recv != reg {
				continue
			}
			for _, x := range l2.region {
				if x.Size > 0 {
					exported[x] = true
				}
			}
			last = max(last, l2.last)
			e.retireL3(l2.l3)
			delete(ent.l2, k)
		}
	}
	// The peers that imported any of it drop it: for collectives (L2) and
	// for the point-to-point engine (the peers it was offered to).
	p2pPeers := e.p2pWithdraw(reg)
	if len(p2pPeers) > 0 && !exported[reg] {
		exported[reg] = true
	}
	var err error
	for x := range exported {
		var also []int
		if x == reg {
			also = p2pPeers
		}
		if err = e.dropAt(ctx, x, last, also); err != nil {
			break
		}
	}
	if err != nil {
		return err
	}
	e.stats.Deregistered++
	if log.On(log.Info, log.Executor) {
		log.Infof(log.Executor, "rank %d: deregistered allocation %#x+%d: %d exported allocation(s) dropped by the peers that imported them", e.cfg.Rank, uintptr(reg.Base), reg.Size, len(exported))
	}
	return nil
}

// dropAt has every peer that imported our allocation x drop it after its
// launch last — those it was exported to for collectives, and the peers in
// also (the point-to-point engine's imports of it, p2pWithdraw) — and
// forgets what it saw of it. A communicator that has run no collective has
// no service goroutines: a point-to-point import of x then stays mapped
// at the peer until it is destroyed (docs/p2p.md, "Registration").
func (e *Executor) dropAt(ctx context.Context, x device.Region, last uint64, also []int) error {
	if e.sentHandle == nil {
		if len(also) > 0 {
			log.Infof(log.Executor, "rank %d: deregistered allocation %#x+%d stays imported by ranks %v for point-to-point calls until the communicator is destroyed (no collective has run: no service to drop it)", e.cfg.Rank, uintptr(x.Base), x.Size, also)
		}
		return nil
	}
	msg := dropMsg{Last: last, Region: x}.encode()
	var sent []int
	for q, ids := range e.sentHandle {
		sendTo := slices.Contains(also, q)
		for id := range ids {
			if id.Region == x {
				sendTo = true
				break
			}
		}
		if !sendTo {
			continue
		}
		if err := e.send(q, svcTag, msg); err != nil {
			if lost(err) {
				continue // its process is gone, and its mappings with it
			}
			return fmt.Errorf("drop request to rank %d: %w", q, err)
		}
		sent = append(sent, q)
	}
	for _, q := range sent {
		if err := e.awaitAck(ctx, q, "deregistration"); err != nil && !lost(err) {
			return err
		}
	}
	for q := range e.sentHandle {
		for id := range e.sentHandle[q] {
			if id.Region == x {
				delete(e.sentHandle[q], id)
			}
		}
		for k := range 2 {
			if e.pushed[q][k].id.Region == x {
				e.pushed[q][k] = pushedBuf{}
			}
		}
	}
	return nil
}

// retireL3 empties m without releasing its prepared launches (a launch of
// them may be in flight): they are released at Close. The generation
// moves on, so no plan launches them again.
func (e *Executor) retireL3(m map[l3Key]*l3Entry) {
	e.lastL3.ent = nil
	e.gen++
	for k, v := range m {
		e.unbind(v)
		e.retained = append(e.retained, v.prep)
		delete(m, k)
	}
}

// lost reports whether err says a peer's connection broke (its process
// died or it aborted).
func lost(err error) bool {
	var be *bootstrap.Error
	return errors.As(err, &be) && be.Lost
}
