package selector

import (
	"context"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/manifest"
)

// P2PChoice is the point-to-point engine's parameter entry that P2P
// selected: its id in the schedule manifest (None: no entry is usable, the
// built-in parameters apply) and its fields.
type P2PChoice struct {
	ID    int
	Entry *manifest.P2PEntry
	Name  string
}

// P2P selects the point-to-point engine's parameters for a communicator of
// nranks ranks, nlocal per node, among the "gen": "p2p" entries of the
// installed snapshot (docs/p2p.md, "Parameters"): an entry matches when its
// nranks and nlocalranks (if given) do, it is usable when its usability
// expression is true, the highest preference wins and a tie goes to the
// latest entry, as for schedules. The expressions see a request of
// collective sendrecv with this shape (request.count and the message size
// are 0: a group's transfers differ per rank); an entry whose expressions
// read rank-local attributes is never chosen.
//
// Unlike Select it is not a collective call: it takes no agreement step
// and counts no request, so that point-to-point calls, which subsets of the
// ranks issue, never move the epochs. It reads the snapshot the last epoch
// installed, which every rank that has issued the same collectives has
// installed too (so both ends of a pair choose the same); before the first
// epoch (Prime) there is none and it returns None. Its answer changes only
// when the snapshot does (CacheGen moves on).
func (s *Selector) P2P(nranks, nlocal int) P2PChoice {
	out := P2PChoice{ID: None}
	if s.snap == nil {
		return out
	}
	r := Request{Coll: ir.SendRecv, NRanks: nranks, NLocalRanks: nlocal, Root: -1}
	env := &s.snap.env
	fillReq(&env.Req, &r, 0)
	env.Req[bc.ReqSendBuf], env.Req[bc.ReqRecvBuf] = 0, 0
	var best *sched
	var bestKey int64
	for _, c := range s.snap.byColl[ir.SendRecv] {
		e := &c.entry
		if e.P2P == nil || c.rankLocal || e.NRanks != 0 && e.NRanks != nranks || e.NLocalRanks != 0 && e.NLocalRanks != nlocal {
			continue
		}
		v := s.evaluate(c)
		if v.usable && (best == nil || v.key >= bestKey) {
			best, bestKey = c, v.key
		}
	}
	if best != nil {
		out.ID, out.Entry, out.Name = best.id, best.entry.P2P, best.entry.Name
	}
	return out
}

// Prime runs the first epoch now instead of at the first request: the
// ranks agree on the context's first snapshot at once (a collective call,
// which the communicator makes when it is created), so that point-to-point
// calls issued before any collective read an agreed snapshot (P2P). The
// next epoch is then due CheckPeriod requests later. A Selector that has
// run an epoch is left as it is. Errors: the epoch's.
func (s *Selector) Prime(ctx context.Context) error {
	if s.snap != nil || s.untilEpoch != 0 {
		return nil
	}
	t0 := time.Now()
	err := s.epoch(ctx)
	s.stats.EpochTime += time.Since(t0)
	if err != nil {
		return err
	}
	s.untilEpoch = s.opt.CheckPeriod
	return nil
}
