package selector

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector/vm"
)

// agreedPrefix is the outcome of the last epoch's allreduce.
type agreedPrefix struct {
	attrs  int   // attribute-manifest lines
	scheds int   // schedule-manifest lines
	cut    int64 // Unix ns: entries with valid_after <= cut are visible
	logs   []int // value-log lines per attribute index (< attrs)
}

// snapshot is what selection reads between two epochs: the visible
// attributes and their values, and the selectable schedules by collective.
type snapshot struct {
	env     vm.Env // Attrs/Vecs by attribute index; Req filled per request
	visible []bool // attribute index -> visible
	src     []int  // attribute index -> value source (log line, -1 default)
	byColl  [ir.NumCollectives][]*sched
	active  []int // ids of the schedules in byColl, ascending
	// rankLocal[c] reports whether some schedule of collective c has a
	// rank-local policy (selection for c may need an agreement step).
	rankLocal [ir.NumCollectives]bool
}

// epoch refreshes the local view of the context, agrees on the snapshot
// with all ranks, and installs it if anything changed (clearing the cache).
//
// The agreement vector (docs/selection-context.md, "Agreement vector") is
//
//	v[0]   complete lines of attribute_manifest.jsonl read by this rank
//	v[1]   complete lines of schedule_manifest.jsonl read by this rank
//	v[2]   this rank's clock, Unix ns (never decreasing)
//	v[3+i] complete lines of the value log of attribute i, for i below the
//	       previously agreed attribute prefix + AttrWindow (0 when entry i
//	       is not a well-formed exo declaration read by this rank)
//
// and the agreed attribute prefix is min(MIN v[0], that bound), so every
// agreed attribute has an agreed log prefix.
//
// Pipelined epochs: the agreed result lies between the previous result
// and this rank's own vector, element by element (every rank's counts and
// clock only grow), and the snapshot only grows with the prefix (stable).
// So when the snapshots of those two ends both equal the installed one,
// the result cannot change the snapshot, whatever the other ranks
// contribute: with a Pipelined agreement the rank then goes on without
// waiting, and collects the result at the next epoch (settle). A rank
// that cannot prove it waits, and finds the same. Either way every rank
// installs the snapshot of the agreed result at the epoch's request.
func (s *Selector) epoch(ctx context.Context) error {
	if err := s.settle(ctx); err != nil {
		return err
	}
	s.rd.refresh()
	w := s.agreed.attrs + AttrWindow
	v := slices.Grow(s.agreeBuf[:0], 3+w)[:3+w]
	v[0] = int64(s.rd.attrTail.Lines())
	v[1] = int64(s.rd.schedTail.Lines())
	now := s.opt.Clock().UnixNano()
	s.clockLast = max(s.clockLast, now)
	v[2] = s.clockLast
	for i := 0; i < w; i++ {
		v[3+i] = 0
		if i < len(s.rd.attrs) {
			if a := s.rd.attrs[i]; a.log != nil {
				v[3+i] = int64(a.log.Lines())
			}
		}
	}
	s.agreeBuf = v
	// Schedules whose file was missing are retried in every new epoch.
	retried := false
	for _, c := range s.rd.scheds {
		if c.ls == lsMissing {
			c.ls, c.reason = lsUnloaded, ""
			retried = true
		}
	}
	if retried {
		s.proven.ok = false
	}
	pipelined, err := s.startRound(ctx, v)
	if err != nil {
		return err
	}
	s.stats.Epochs++
	if pipelined && s.snap != nil && !retried && s.stable(v, w) {
		s.pendW = w
		s.stats.Pipelined++
		return nil
	}
	res, err := s.finishRound(ctx, len(v))
	if err != nil {
		return err
	}
	s.setAgreed(res, w)
	if s.snap != nil && !retried && !s.changedAt(&s.agreed) {
		s.prove()
		return nil
	}
	s.build()
	s.prove()
	s.clearCache()
	s.stats.Snapshots++
	ag := &s.agreed
	s.opt.Logger.Infof("selection context %s: snapshot of %d attribute and %d schedule entries at %s: %d schedules selectable",
		s.opt.Dir, ag.attrs, ag.scheds, time.Unix(0, ag.cut).Format(time.RFC3339), len(s.snap.active))
	return nil
}

// setAgreed records res, the result of an epoch's agreement whose
// attribute window was w, as the agreed prefix.
func (s *Selector) setAgreed(res []int64, w int) {
	ag := &s.agreed
	ag.attrs = int(min(res[0], int64(w)))
	ag.scheds = int(res[1])
	ag.cut = res[2]
	ag.logs = ag.logs[:0]
	for i := 0; i < ag.attrs; i++ {
		ag.logs = append(ag.logs, int(res[3+i]))
	}
}

// settle collects the result of the epoch agreement this rank did not
// wait for (pipelined), if any: usually it arrived long ago. It was proven
// not to change the snapshot, so only the agreed prefix moves.
func (s *Selector) settle(ctx context.Context) error {
	if s.pendW == 0 {
		return nil
	}
	w := s.pendW
	s.pendW = 0
	res, err := s.finishRound(ctx, 3+w)
	if err != nil {
		return err
	}
	s.setAgreed(res, w)
	return nil
}

// startRound contributes v to the epoch's agreement; finishRound returns
// its result. With an Agreement that is not Pipelined, startRound runs the
// whole allreduce (pipelined is false) and finishRound returns what it
// kept.
func (s *Selector) startRound(ctx context.Context, v []int64) (pipelined bool, err error) {
	s.stats.Agreements++
	p, ok := s.opt.Agreement.(Pipelined)
	if !ok {
		s.early, err = s.allReduce(ctx, v)
		return false, err
	}
	if err := p.StartMin(v); err != nil {
		return true, fmt.Errorf("selector: agreement step: %w", err)
	}
	return true, nil
}

func (s *Selector) finishRound(ctx context.Context, n int) ([]int64, error) {
	p, ok := s.opt.Agreement.(Pipelined)
	if !ok {
		res := s.early
		s.early = nil
		return res, nil
	}
	res, err := p.FinishMin(ctx, s.opt.Timeout)
	if err != nil {
		return nil, fmt.Errorf("selector: agreement step: %w", err)
	}
	if len(res) != n {
		return nil, fmt.Errorf("selector: agreement returned %d values for %d", len(res), n)
	}
	return res, nil
}

// stable reports whether every possible result of the agreement on v (an
// epoch's vector, attribute window w) gives the installed snapshot. The
// result r lies between the agreed prefix lo (the previous result) and
// this rank's own hi, element by element: every rank's line counts and
// clock only grow, so MIN over the ranks is at least lo and at most v. And
// the snapshot grows with the prefix: an attribute's visibility, the log
// line its value comes from (srcAt) and a schedule's selectability each
// only move one way as the prefix and the cut grow. So if the snapshots at
// lo and at hi both equal the installed one, so does the snapshot at r.
//
// The usual epoch needs neither comparison: when nothing was read or
// loaded since the installed snapshot was last shown to be lo's (proven),
// lo still gives it; and when hi holds the same lines as lo and no line
// read has a valid_after past lo's cut, hi gives what lo gives.
func (s *Selector) stable(v []int64, w int) bool {
	lo := &s.agreed
	hi := &s.hiBuf
	hi.attrs = int(min(v[0], int64(w)))
	hi.scheds = int(v[1])
	hi.cut = v[2]
	hi.logs = hi.logs[:0]
	for i := 0; i < hi.attrs; i++ {
		hi.logs = append(hi.logs, int(v[3+i]))
	}
	p := &s.proven
	if p.ok && p.changes == s.rd.changes && p.loads == s.stats.Loads &&
		hi.attrs == lo.attrs && hi.scheds == lo.scheds && slices.Equal(hi.logs, lo.logs) && s.rd.maxVA <= lo.cut {
		return true
	}
	if s.changedAt(lo) || s.changedAt(hi) {
		return false
	}
	s.prove()
	return true
}

// prove records that the installed snapshot is the agreed prefix's under
// what has been read and loaded so far.
func (s *Selector) prove() {
	s.proven.changes, s.proven.loads, s.proven.ok = s.rd.changes, s.stats.Loads, true
}

// visibleAt reports whether attribute entry i is visible under prefix p.
func (s *Selector) visibleAt(p *agreedPrefix, i int) bool {
	if i >= p.attrs || i >= len(s.rd.attrs) {
		return false
	}
	a := s.rd.attrs[i]
	return a.ok && a.decl.ValidAfter <= p.cut
}

// attrVisible reports whether attribute entry i is in the agreed snapshot.
func (s *Selector) attrVisible(i int) bool { return s.visibleAt(&s.agreed, i) }

// activeAt reports whether schedule c is selectable under prefix p.
func (s *Selector) activeAt(p *agreedPrefix, c *sched) bool {
	if c.id >= p.scheds || !c.ok || c.entry.ValidAfter > p.cut || c.cs != csCompiled || c.ls == lsInvalid || c.ls == lsMissing {
		return false
	}
	for _, i := range c.attrs {
		if !s.visibleAt(p, i) {
			return false
		}
	}
	return true
}

// schedActive reports whether schedule c is selectable in the agreed
// snapshot, and if not, why.
func (s *Selector) schedActive(c *sched) (bool, string) {
	switch {
	case c.id >= s.agreed.scheds:
		return false, fmt.Sprintf("not yet agreed: the snapshot holds %d schedule entries", s.agreed.scheds)
	case !c.ok:
		return false, "malformed entry: " + c.reason
	case c.entry.ValidAfter > s.agreed.cut:
		return false, "valid after " + time.Unix(0, c.entry.ValidAfter).Format(time.RFC3339)
	case c.cs == csPending:
		return false, c.reason
	case c.cs == csFailed:
		return false, "policy error: " + c.reason
	case c.ls == lsInvalid || c.ls == lsMissing:
		return false, c.reason
	}
	for _, i := range c.attrs {
		if !s.attrVisible(i) {
			return false, fmt.Sprintf("attribute %q is not yet visible", s.rd.attrs[i].decl.Name)
		}
	}
	return true, ""
}

// sourceAt returns the value source of attribute i (a log line, or -1 for
// the default) under prefix p, and whether it is visible. It changes
// nothing.
func (s *Selector) sourceAt(p *agreedPrefix, i int) (int, bool) {
	if !s.visibleAt(p, i) {
		return 0, false
	}
	a := s.rd.attrs[i]
	if a.decl.Origin != bc.Exo {
		return -1, true
	}
	_, src := a.srcAt(p.logs[i], p.cut)
	return src, true
}

// changedAt reports whether prefix p gives a different snapshot from the
// installed one: another set of selectable schedules, or another visible
// attribute or value. It allocates nothing.
func (s *Selector) changedAt(p *agreedPrefix) bool {
	old := s.snap
	n := 0
	for _, c := range s.rd.scheds {
		if s.activeAt(p, c) {
			if n >= len(old.active) || old.active[n] != c.id {
				return true
			}
			n++
		}
	}
	if n != len(old.active) {
		return true
	}
	for i := range s.rd.attrs {
		src, vis := s.sourceAt(p, i)
		if i >= len(old.visible) {
			if vis {
				return true
			}
			continue
		}
		if vis != old.visible[i] || vis && src != old.src[i] {
			return true
		}
	}
	return false
}

// build installs a new snapshot from the agreed prefix.
func (s *Selector) build() {
	n := len(s.rd.attrs)
	sn := &snapshot{
		env:     vm.Env{Attrs: make([]int64, n), Vecs: make([][]float64, n)},
		visible: make([]bool, n),
		src:     make([]int, n),
	}
	for i, a := range s.rd.attrs {
		src, vis := s.sourceAt(&s.agreed, i)
		sn.visible[i], sn.src[i] = vis, src
		if !vis || a.decl.Origin != bc.Exo {
			continue
		}
		val, _ := a.valueAt(s.agreed.logs[i], s.agreed.cut)
		sn.env.Attrs[i], sn.env.Vecs[i] = val.Bits, val.Vec
	}
	for _, c := range s.rd.scheds {
		if s.activeAt(&s.agreed, c) {
			sn.byColl[c.entry.Collective] = append(sn.byColl[c.entry.Collective], c)
			sn.active = append(sn.active, c.id)
			sn.rankLocal[c.entry.Collective] = sn.rankLocal[c.entry.Collective] || c.rankLocal
		}
	}
	s.snap = sn
}

// cutTime is the agreed clock cut, for Explain.
func (s *Selector) cutTime() time.Time {
	if s.agreed.cut == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, s.agreed.cut)
}
