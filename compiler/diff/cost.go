package diff

import (
	"cmp"
	"slices"
)

// Cost summarises what migrating from A to B creates and what it costs in
// cross-rank exchanges (docs/passes.md, "Migration cost"). An exchange is
// one point-to-point handshake between two ranks (handles sent one way or
// both) through the communicator's bootstrap; everything else is local.
type Cost struct {
	// ChannelEnds is the channel ends to create. Creating an end is local
	// once its semaphore and connection exist.
	ChannelEnds int `json:"channel_ends"`
	// Semaphores is the semaphores to create: one exchange each (the owner
	// sends its handle to the peer that signals into it).
	Semaphores int `json:"semaphores"`
	// Rebased is the kept semaphores whose init changes: local (the owner
	// shifts its expected counter by the difference).
	Rebased int `json:"rebased"`
	// Connections is the rank-to-rank links to create, counting each
	// unordered (rank, peer, type) once: one exchange each.
	Connections int `json:"connections"`
	// Registrations is the remote input/output registrations to import: one
	// exchange each (the peer sends its buffer handle).
	Registrations int `json:"registrations"`
	// Exchanges = Connections + Semaphores + Registrations.
	Exchanges int `json:"exchanges"`
	// RankPairs is the unordered pairs of ranks that exchange at least once:
	// the migration's cross-rank fan-out.
	RankPairs int `json:"rank_pairs"`
	// ScratchGrows is the ranks whose program needs more scratch chunks in
	// B. Whether the communicator's scratch buffer actually grows depends on
	// the request's bytes (ir.Layout.ScratchBytes) and its current size.
	ScratchGrows int `json:"scratch_grows"`
	// Released is the channel ends, semaphores, unordered connections and
	// registrations that only A uses: B can release them (or keep them
	// cached for a migration back).
	Released int `json:"released"`
}

type pairKey struct {
	lo, hi int
	typ    string
}

func unorderedConns(cs []Connection) int {
	ks := make([]pairKey, 0, len(cs))
	for _, c := range cs {
		ks = append(ks, pairKey{min(c.Rank, c.Peer), max(c.Rank, c.Peer), c.Type})
	}
	slices.SortFunc(ks, cmpPair)
	return len(slices.Compact(ks))
}

func cmpPair(a, b pairKey) int {
	return cmp.Or(cmp.Compare(a.lo, b.lo), cmp.Compare(a.hi, b.hi), cmp.Compare(a.typ, b.typ))
}

// Cost returns the migration's cost summary, computed from the delta.
func (d *Delta) Cost() Cost {
	c := Cost{
		ChannelEnds:   len(d.ChannelEnds.Added),
		Semaphores:    len(d.Semaphores.Added),
		Rebased:       len(d.Semaphores.Rebased),
		Connections:   unorderedConns(d.Connections.Added),
		Registrations: len(d.Registrations.Added),
	}
	c.Exchanges = c.Connections + c.Semaphores + c.Registrations
	var pairs []pairKey
	add := func(a, b int) { pairs = append(pairs, pairKey{lo: min(a, b), hi: max(a, b)}) }
	for _, x := range d.Connections.Added {
		add(x.Rank, x.Peer)
	}
	for _, x := range d.Semaphores.Added {
		add(x.Rank, x.Peer)
	}
	for _, x := range d.Registrations.Added {
		add(x.Rank, x.Peer)
	}
	slices.SortFunc(pairs, cmpPair)
	c.RankPairs = len(slices.Compact(pairs))
	for _, s := range d.Scratch.Changed {
		if s.To > s.From && s.To > 0 {
			c.ScratchGrows++
		}
	}
	c.Released = len(d.ChannelEnds.Removed) + len(d.Semaphores.Removed) + unorderedConns(d.Connections.Removed) +
		len(d.Registrations.Removed)
	return c
}
