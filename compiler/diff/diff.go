// Package diff computes the resource and op difference between two
// schedules: what a runtime that runs schedule A must create, keep, rebase
// or release to run schedule B instead (delta migration), and how many
// cross-rank exchanges that costs. `theseusc diff` prints it; the
// executor's migration uses the same Delta and SemaphoreReuse.
//
// Resources are matched by identity, never by index, so a schedule that
// numbers its channels differently can still reuse them. The identities
// (docs/passes.md, "Resource identity"):
//
//   - channel end: (rank, peer, type, ordinal, peer ordinal, init), where
//     ordinal is the end's position among the rank's ends to that peer of
//     that type (in channel index order) and peer ordinal the same number of
//     the other end. Two schedules' ends with equal identity are the same
//     object: same semaphore, same peer semaphore to signal, same credits.
//   - semaphore: a channel end's identity without init. Each end owns one
//     inbound semaphore that its peer has imported to signal into. A kept
//     semaphore whose init differs is rebased: at a quiescent point the
//     owner moves its expected counter by init_A − init_B, locally.
//   - connection: (rank, peer, type), present when the rank has at least one
//     channel end of that type to that peer: the transport link (peer memory
//     mapping, or proxy connection) that channels share.
//   - registration: (rank, peer, buffer): the rank's ops name the peer's
//     input or output through a channel, so it imports that registration.
//   - scratch: the chunks each rank's program uses (scratch is one buffer per
//     communicator, so it is compared as a size, not created per schedule).
//   - ops: per (rank, threadblock), the op count and op hash.
package diff

import (
	"cmp"
	"slices"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
)

// Side names one of the two schedules.
type Side struct {
	Name       string `json:"name"`
	Collective string `json:"collective"`
	NRanks     int    `json:"nranks"`
	Protocol   string `json:"protocol"`
	// ID is the bundle's schedule ID (hex) when the side came from a
	// bundle, else empty.
	ID string `json:"id,omitempty"`
}

// End is a channel end's identity (see the package comment).
type End struct {
	Rank        int    `json:"rank"`
	Peer        int    `json:"peer"`
	Type        string `json:"type"`
	Ordinal     int    `json:"ordinal"`
	PeerOrdinal int    `json:"peer_ordinal"` // -1 when the end is unpaired
	Init        int64  `json:"init"`
}

// Semaphore is a semaphore's identity: its channel end's without init.
type Semaphore struct {
	Rank        int    `json:"rank"`
	Peer        int    `json:"peer"`
	Type        string `json:"type"`
	Ordinal     int    `json:"ordinal"`
	PeerOrdinal int    `json:"peer_ordinal"`
}

// Rebase is a kept semaphore whose channel end's init changes.
type Rebase struct {
	Semaphore
	FromInit int64 `json:"from_init"`
	ToInit   int64 `json:"to_init"`
}

// Connection is a connection's identity: a rank's transport to a peer.
type Connection struct {
	Rank int    `json:"rank"`
	Peer int    `json:"peer"`
	Type string `json:"type"`
}

// Registration is an imported registration: Rank names Peer's Buf
// ("input" or "output") through a channel.
type Registration struct {
	Rank int    `json:"rank"`
	Peer int    `json:"peer"`
	Buf  string `json:"buffer"`
}

// Class is one resource class: how many resources both schedules have
// (kept) and which only B has (added) and only A has (removed), each in
// identity order.
type Class[K any] struct {
	Kept    int `json:"kept"`
	Added   []K `json:"added"`
	Removed []K `json:"removed"`
}

// SemaphoreClass is Class with the kept semaphores that need a rebase.
type SemaphoreClass struct {
	Class[Semaphore]
	Rebased []Rebase `json:"rebased"`
}

// ScratchChange is a rank whose scratch differs, in chunks; -1 means the
// rank does not exist on that side.
type ScratchChange struct {
	Rank int   `json:"rank"`
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// ScratchDelta compares each rank's scratch chunks.
type ScratchDelta struct {
	Kept    int             `json:"kept"`
	Changed []ScratchChange `json:"changed"`
}

// RankOps is a rank whose total op count differs (-1: the rank is absent).
type RankOps struct {
	Rank int `json:"rank"`
	From int `json:"from"`
	To   int `json:"to"`
}

// TBChange is a threadblock whose ops differ. Kind is "changed" (both have
// it, with different ops), "added" (only B; From is -1) or "removed" (only
// A; To is -1). From and To are op counts.
type TBChange struct {
	Rank int    `json:"rank"`
	TB   int    `json:"tb"`
	Kind string `json:"kind"`
	From int    `json:"from"`
	To   int    `json:"to"`
}

// OpDelta compares the threadblocks and ops.
type OpDelta struct {
	TBsFrom   int        `json:"tbs_from"`
	TBsTo     int        `json:"tbs_to"`
	OpsFrom   int        `json:"ops_from"`
	OpsTo     int        `json:"ops_to"`
	Unchanged int        `json:"unchanged_tbs"`
	Ranks     []RankOps  `json:"ranks"`
	TBs       []TBChange `json:"tbs"`
}

// Delta is the difference from schedule From (A, running) to To (B).
type Delta struct {
	From          Side                `json:"from"`
	To            Side                `json:"to"`
	ChannelEnds   Class[End]          `json:"channel_ends"`
	Semaphores    SemaphoreClass      `json:"semaphores"`
	Connections   Class[Connection]   `json:"connections"`
	Registrations Class[Registration] `json:"registrations"`
	Scratch       ScratchDelta        `json:"scratch"`
	Ops           OpDelta             `json:"ops"`
}

// Diff returns the difference from a to b. Programs at the transfer level
// are legalised first (compiler/legalize), since their channels and scratch
// only exist after legalisation; a program that cannot be legalised is
// compared as given (its declared channels only). a and b are not modified.
func Diff(a, b *ir.Program) *Delta {
	pa, pb := primitive(a), primitive(b)
	return Resources(sideOf(a), bundle.Summarize(pa), sideOf(b), bundle.Summarize(pb))
}

func primitive(p *ir.Program) *ir.Program {
	if p.Level() != ir.LevelTransfer {
		return p
	}
	if q, ds := legalize.Legalize(p); len(ds) == 0 && q != nil {
		return q
	}
	return p
}

func sideOf(p *ir.Program) Side {
	return Side{Name: p.Name, Collective: p.Collective.String(), NRanks: p.NRanks, Protocol: p.Protocol.String()}
}

// Bundles returns the difference between two bundles, from their resource
// summaries (no op table is decoded). The sides carry the bundles' IDs.
func Bundles(a, b *bundle.Bundle) (*Delta, error) {
	ida, err := a.ID()
	if err != nil {
		return nil, err
	}
	idb, err := b.ID()
	if err != nil {
		return nil, err
	}
	sa, sb := metaSide(a.Meta), metaSide(b.Meta)
	sa.ID, sb.ID = ida.String(), idb.String()
	return Resources(sa, a.Ranks, sb, b.Ranks), nil
}

func metaSide(m bundle.Meta) Side {
	return Side{Name: m.Name, Collective: m.Collective.String(), NRanks: m.NRanks, Protocol: m.Protocol.String()}
}

// Resources returns the difference between two resource summaries
// (bundle.Summarize, or a bundle's Ranks). Channel ends that name a peer or
// peer channel out of range get peer ordinal -1.
func Resources(sa Side, a []bundle.RankResources, sb Side, b []bundle.RankResources) *Delta {
	d := &Delta{From: sa, To: sb}
	ea, eb := ends(a), ends(b)
	d.ChannelEnds, _ = merge(ea, eb, cmpEnd)
	sema, semb := semaphores(ea), semaphores(eb)
	var kept [][2]int
	d.Semaphores.Class, kept = merge(sema, semb, cmpSem)
	// sema[i] is ea[i]'s semaphore, so the kept index pairs give the inits.
	for _, k := range kept {
		if from, to := ea[k[0]].Init, eb[k[1]].Init; from != to {
			d.Semaphores.Rebased = append(d.Semaphores.Rebased, Rebase{Semaphore: sema[k[0]], FromInit: from, ToInit: to})
		}
	}
	d.Connections, _ = merge(connections(ea), connections(eb), cmpConn)
	d.Registrations, _ = merge(registrations(a), registrations(b), cmpReg)
	d.Scratch = scratch(a, b)
	d.Ops = ops(a, b)
	d.normalize()
	return d
}

// normalize makes every list non-nil, so JSON shows [] rather than null.
func (d *Delta) normalize() {
	nonNil(&d.ChannelEnds.Added)
	nonNil(&d.ChannelEnds.Removed)
	nonNil(&d.Semaphores.Added)
	nonNil(&d.Semaphores.Removed)
	nonNil(&d.Semaphores.Rebased)
	nonNil(&d.Connections.Added)
	nonNil(&d.Connections.Removed)
	nonNil(&d.Registrations.Added)
	nonNil(&d.Registrations.Removed)
	nonNil(&d.Scratch.Changed)
	nonNil(&d.Ops.Ranks)
	nonNil(&d.Ops.TBs)
}

func nonNil[T any](s *[]T) {
	if *s == nil {
		*s = []T{}
	}
}

// ordinals returns, per rank and channel, the end's ordinal among the
// rank's ends to the same peer of the same type.
func ordinals(rs []bundle.RankResources) [][]int {
	out := make([][]int, len(rs))
	type pk struct {
		peer int
		typ  ir.ChannelType
	}
	for r := range rs {
		chs := rs[r].Channels
		ord := make([]int, len(chs))
		// Count earlier ends with the same (peer, type). Ranks have few
		// channels; sort indices by (peer, type, index) to stay n log n.
		idx := make([]int, len(chs))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(x, y int) int {
			if c := cmp.Compare(chs[x].Peer, chs[y].Peer); c != 0 {
				return c
			}
			return cmp.Compare(chs[x].Type, chs[y].Type)
		})
		n := 0
		for i, c := range idx {
			if i > 0 && (pk{chs[idx[i-1]].Peer, chs[idx[i-1]].Type} != pk{chs[c].Peer, chs[c].Type}) {
				n = 0
			}
			ord[c] = n
			n++
		}
		out[r] = ord
	}
	return out
}

func ends(rs []bundle.RankResources) []End {
	ord := ordinals(rs)
	var out []End
	for r := range rs {
		for c, ch := range rs[r].Channels {
			po := -1
			if ch.Peer >= 0 && ch.Peer < len(rs) && ch.PeerChannel >= 0 && ch.PeerChannel < len(ord[ch.Peer]) {
				po = ord[ch.Peer][ch.PeerChannel]
			}
			out = append(out, End{Rank: r, Peer: ch.Peer, Type: ch.Type.String(), Ordinal: ord[r][c], PeerOrdinal: po, Init: ch.Init})
		}
	}
	slices.SortFunc(out, cmpEnd)
	return out
}

func semaphores(es []End) []Semaphore {
	out := make([]Semaphore, len(es))
	for i, e := range es {
		out[i] = Semaphore{Rank: e.Rank, Peer: e.Peer, Type: e.Type, Ordinal: e.Ordinal, PeerOrdinal: e.PeerOrdinal}
	}
	return out
}

func connections(es []End) []Connection {
	var out []Connection
	for _, e := range es {
		c := Connection{Rank: e.Rank, Peer: e.Peer, Type: e.Type}
		if n := len(out); n > 0 && out[n-1] == c {
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, cmpConn)
	return slices.Compact(out)
}

func registrations(rs []bundle.RankResources) []Registration {
	var out []Registration
	for r := range rs {
		for _, g := range rs[r].Registrations {
			out = append(out, Registration{Rank: r, Peer: g.Peer, Buf: g.Buf.LongName()})
		}
	}
	slices.SortFunc(out, cmpReg)
	return slices.Compact(out)
}

func cmpEnd(a, b End) int {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Type, b.Type),
		cmp.Compare(a.Ordinal, b.Ordinal), cmp.Compare(a.PeerOrdinal, b.PeerOrdinal), cmp.Compare(a.Init, b.Init))
}

func cmpSem(a, b Semaphore) int {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Type, b.Type),
		cmp.Compare(a.Ordinal, b.Ordinal), cmp.Compare(a.PeerOrdinal, b.PeerOrdinal))
}

func cmpConn(a, b Connection) int {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Type, b.Type))
}

func cmpReg(a, b Registration) int {
	return cmp.Or(cmp.Compare(a.Rank, b.Rank), cmp.Compare(a.Peer, b.Peer), cmp.Compare(a.Buf, b.Buf))
}

// merge walks two sorted lists and returns the class plus the index pairs
// (in a, in b) of the kept elements.
func merge[K any](a, b []K, c func(K, K) int) (Class[K], [][2]int) {
	var cl Class[K]
	var kept [][2]int
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && c(a[i], b[j]) < 0):
			cl.Removed = append(cl.Removed, a[i])
			i++
		case i == len(a) || c(a[i], b[j]) > 0:
			cl.Added = append(cl.Added, b[j])
			j++
		default:
			kept = append(kept, [2]int{i, j})
			cl.Kept++
			i++
			j++
		}
	}
	return cl, kept
}

func scratch(a, b []bundle.RankResources) ScratchDelta {
	var d ScratchDelta
	for r := range max(len(a), len(b)) {
		from, to := int64(-1), int64(-1)
		if r < len(a) {
			from = a[r].Chunks[ir.Scratch]
		}
		if r < len(b) {
			to = b[r].Chunks[ir.Scratch]
		}
		if from == to {
			d.Kept++
		} else {
			d.Changed = append(d.Changed, ScratchChange{Rank: r, From: from, To: to})
		}
	}
	return d
}

func ops(a, b []bundle.RankResources) OpDelta {
	var d OpDelta
	total := func(rs []bundle.RankResources, r int) int {
		if r >= len(rs) {
			return -1
		}
		n := 0
		for _, tb := range rs[r].TBs {
			n += tb.Ops
		}
		return n
	}
	for r := range max(len(a), len(b)) {
		var ta, tb []bundle.TBSummary
		if r < len(a) {
			ta = a[r].TBs
		}
		if r < len(b) {
			tb = b[r].TBs
		}
		d.TBsFrom += len(ta)
		d.TBsTo += len(tb)
		fa, fb := total(a, r), total(b, r)
		d.OpsFrom += max(fa, 0)
		d.OpsTo += max(fb, 0)
		if fa != fb {
			d.Ranks = append(d.Ranks, RankOps{Rank: r, From: fa, To: fb})
		}
		for t := range max(len(ta), len(tb)) {
			switch {
			case t >= len(ta):
				d.TBs = append(d.TBs, TBChange{Rank: r, TB: t, Kind: "added", From: -1, To: tb[t].Ops})
			case t >= len(tb):
				d.TBs = append(d.TBs, TBChange{Rank: r, TB: t, Kind: "removed", From: ta[t].Ops, To: -1})
			case ta[t] != tb[t]:
				d.TBs = append(d.TBs, TBChange{Rank: r, TB: t, Kind: "changed", From: ta[t].Ops, To: tb[t].Ops})
			default:
				d.Unchanged++
			}
		}
	}
	return d
}

// SemaphoreReuse maps each channel end of b to the channel end of a whose
// semaphore it can take over: out[r][c] is the index on rank r in a of the
// end with the same semaphore identity as end c of rank r in b, or -1 when
// b's end needs a new semaphore. The caller rebases the semaphores whose
// inits differ (Delta.Semaphores.Rebased).
func SemaphoreReuse(a, b []bundle.RankResources) [][]int {
	oa, ob := ordinals(a), ordinals(b)
	out := make([][]int, len(b))
	type key struct {
		peer, ord, peerOrd int
		typ                ir.ChannelType
	}
	keyOf := func(rs []bundle.RankResources, ord [][]int, r, c int) key {
		ch := rs[r].Channels[c]
		po := -1
		if ch.Peer >= 0 && ch.Peer < len(rs) && ch.PeerChannel >= 0 && ch.PeerChannel < len(ord[ch.Peer]) {
			po = ord[ch.Peer][ch.PeerChannel]
		}
		return key{ch.Peer, ord[r][c], po, ch.Type}
	}
	for r := range b {
		out[r] = make([]int, len(b[r].Channels))
		var have map[key]int
		if r < len(a) {
			have = make(map[key]int, len(a[r].Channels))
			for c := range a[r].Channels {
				have[keyOf(a, oa, r, c)] = c
			}
		}
		for c := range b[r].Channels {
			if i, ok := have[keyOf(b, ob, r, c)]; ok {
				out[r][c] = i
			} else {
				out[r][c] = -1
			}
		}
	}
	return out
}
