package optable

import (
	"errors"
	"fmt"

	"github.com/theseus-ccl/theseus/compiler/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Lower builds logical rank rank's operation table from a primitive-level
// program (after compiler/legalize). It copies the rank's channel ends and
// threadblocks op for op (ids stay positions, so diagnostics and the
// interpreter's errors name the same tb/step as the program), fills in the
// input and output chunks the collective defines when the program declares
// 0, drops what executors do not use (transfer-level peers, positions), and
// then checks the table (Validate) and this rank's side of every channel
// and remote ref against the other ranks of p.
//
// Errors are diag.Diagnostic values (file:line:col of the op, a stable code
// and a hint): WrongLevel (TS0108) naming the first transfer op of the
// program (rank, tb, step, op) when p is not primitive-level, BadRank for a
// rank outside 0..NRanks-1 or a program whose Ranks do not match NRanks,
// and the code of the first failed rule otherwise.
func Lower(p *ir.Program, rank int) (*Table, error) {
	if p == nil {
		return nil, mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to lower")
	}
	if len(p.Ranks) != p.NRanks || p.NRanks < 1 || p.NRanks > ir.MaxRanks {
		return nil, mkDiag(p, diag.BadRank, -1, -1, -1, p.Pos, fmt.Sprintf("program has %d ranks for nranks %d", len(p.Ranks), p.NRanks))
	}
	if rank < 0 || rank >= p.NRanks {
		return nil, mkDiag(p, diag.BadRank, -1, -1, -1, p.Pos, fmt.Sprintf("rank %d outside 0..%d", rank, p.NRanks-1))
	}
	if d, ok := firstTransfer(p); ok {
		return nil, d
	}
	return lowerRank(p, rank, maxScratch(p))
}

// lowerRank is Lower after the program-wide checks (which LowerAll does
// once, not once per rank).
func lowerRank(p *ir.Program, rank int, maxScratchChunks int64) (*Table, error) {
	t := build(p, rank, maxScratchChunks)
	if err := t.Validate(); err != nil {
		return nil, toDiag(p, rank, err)
	}
	if err := checkRankPeers(p, t); err != nil {
		return nil, toDiag(p, rank, err)
	}
	return t, nil
}

// LowerAll lowers every rank of p; tables[r] is rank r's. It fails with the
// first rank's error (see Lower).
func LowerAll(p *ir.Program) ([]*Table, error) {
	if p == nil {
		return nil, mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to lower")
	}
	if d, ok := firstTransfer(p); ok {
		return nil, d
	}
	if len(p.Ranks) != p.NRanks || p.NRanks < 1 || p.NRanks > ir.MaxRanks {
		return nil, mkDiag(p, diag.BadRank, -1, -1, -1, p.Pos, fmt.Sprintf("program has %d ranks for nranks %d", len(p.Ranks), p.NRanks))
	}
	ms := maxScratch(p)
	out := make([]*Table, len(p.Ranks))
	for r := range p.Ranks {
		t, err := lowerRank(p, r, ms)
		if err != nil {
			return nil, err
		}
		out[r] = t
	}
	return out, nil
}

// maxScratch is the largest scratch of any rank (Table.MaxScratchChunks).
func maxScratch(p *ir.Program) int64 {
	var m int64
	for q := range p.Ranks {
		m = max(m, p.Ranks[q].Chunks[ir.Scratch])
	}
	return m
}

// firstTransfer finds the first transfer op in rank, tb, step order.
func firstTransfer(p *ir.Program) (diag.Diagnostic, bool) {
	for r := range p.Ranks {
		for ti := range p.Ranks[r].TBs {
			for k, op := range p.Ranks[r].TBs[ti].Ops {
				if op.Code.IsTransfer() {
					return mkDiag(p, diag.WrongLevel, r, ti, k, op.Pos,
						fmt.Sprintf("transfer op %v: op tables hold primitive ops only", op.Code)), true
				}
			}
		}
	}
	return diag.Diagnostic{}, false
}

// rankChunks is the input, output and scratch chunks of rank r as a table
// records them: declared, or as the collective defines when declared 0.
func rankChunks(p *ir.Program, r int) [ir.NumBufKinds]int64 {
	c := p.Ranks[r].Chunks
	root := p.Root
	if !p.Collective.Rooted() {
		root = -1
	}
	for k := ir.Input; k <= ir.Output; k++ {
		if c[k] == 0 {
			if n, ok := BufferChunks(p.Collective, k, p.NRanks, r, root, p.ChunksPerBlock); ok && n > 0 {
				c[k] = n
			}
		}
	}
	return c
}

func build(p *ir.Program, rank int, maxScratchChunks int64) *Table {
	pr := &p.Ranks[rank]
	root := p.Root
	if !p.Collective.Rooted() {
		root = -1 // the canonical "no root" (ir.Program.Root); the verifier flags other values
	}
	t := &Table{
		Rank: rank, NRanks: p.NRanks, Collective: p.Collective, Protocol: p.Protocol, Root: root,
		ChunksPerBlock: p.ChunksPerBlock, Chunks: rankChunks(p, rank), NumThreads: p.NumThreads,
		NLocalRanks: p.NLocalRanks, SliceBytes: p.SliceBytes, InPlace: p.InPlace, OutOfPlace: p.OutOfPlace,
	}
	t.MaxScratchChunks = maxScratchChunks
	if len(pr.Channels) > 0 {
		t.Channels = make([]Channel, len(pr.Channels))
		for c, ch := range pr.Channels {
			t.Channels[c] = Channel{Peer: ch.Peer, PeerChannel: ch.PeerChannel, Type: ch.Type, Init: ch.Init}
		}
	}
	if len(pr.TBs) > 0 {
		t.TBs = make([]TB, len(pr.TBs))
	}
	// One backing array per kind keeps allocations few for large programs.
	var nops, nrefs, ndeps, nchans int
	for _, tb := range pr.TBs {
		nops += len(tb.Ops)
		for _, op := range tb.Ops {
			nrefs += len(op.Srcs) + len(op.Dsts)
			ndeps += len(op.Deps)
			nchans += len(op.Chans)
		}
	}
	ops := make([]Op, 0, nops)
	refs := make([]ir.Ref, 0, nrefs)
	deps := make([]ir.Dep, 0, ndeps)
	chans := make([]int, 0, nchans)
	take := func(dst *[]ir.Ref, src []ir.Ref) {
		if len(src) > 0 {
			n := len(refs)
			refs = append(refs, src...)
			*dst = refs[n:len(refs):len(refs)]
		}
	}
	for ti, tb := range pr.TBs {
		start := len(ops)
		for _, op := range tb.Ops {
			o := Op{Code: op.Code, Publish: op.Publish, Count: op.Count, Barrier: op.Barrier, BarrierTBs: op.BarrierTBs}
			if !op.Code.Info().Data {
				o.Count = 0
			}
			take(&o.Srcs, op.Srcs)
			take(&o.Dsts, op.Dsts)
			if len(op.Deps) > 0 {
				n := len(deps)
				deps = append(deps, op.Deps...)
				o.Deps = deps[n:len(deps):len(deps)]
			}
			if len(op.Chans) > 0 {
				n := len(chans)
				chans = append(chans, op.Chans...)
				o.Chans = chans[n:len(chans):len(chans)]
			}
			ops = append(ops, o)
		}
		if len(ops) > start {
			t.TBs[ti].Ops = ops[start:len(ops):len(ops)]
		}
	}
	return t
}

// checkRankPeers checks rank t.Rank's channel ends and remote refs against
// the other ranks of p (CheckPeers for one rank).
func checkRankPeers(p *ir.Program, t *Table) error {
	for c, ch := range t.Channels {
		pc := p.Ranks[ch.Peer].Channels
		if ch.PeerChannel >= len(pc) {
			return verr(diag.ChannelPairing, -1, -1, "channel %d names channel %d of rank %d, which has %d", c, ch.PeerChannel, ch.Peer, len(pc))
		}
		if back := pc[ch.PeerChannel]; back.Peer != t.Rank || back.PeerChannel != c {
			return verr(diag.ChannelPairing, -1, -1, "channel %d names rank %d channel %d, which names rank %d channel %d back", c, ch.Peer, ch.PeerChannel, back.Peer, back.PeerChannel)
		}
	}
	for ti, tb := range t.TBs {
		for k := range tb.Ops {
			op := &tb.Ops[k]
			for i := range len(op.Srcs) + len(op.Dsts) {
				ref := op.ref(i)
				if ref.Chan < 0 {
					continue
				}
				q := t.Channels[ref.Chan].Peer
				if have := rankChunks(p, q)[ref.Buf]; ref.Off+op.Count > have {
					return verr(diag.ChunkRange, ti, k, "ref %d: rank %d's %s[%d:%d] outside its %d chunks", i, q, ref.Buf, ref.Off, ref.Off+op.Count, have)
				}
			}
		}
	}
	return nil
}

func toDiag(p *ir.Program, rank int, err error) diag.Diagnostic {
	var ve *ValidationError
	if !errors.As(err, &ve) {
		return mkDiag(p, diag.BadValue, rank, -1, -1, p.Ranks[rank].Pos, err.Error())
	}
	pos := p.Ranks[rank].Pos
	if ve.TB >= 0 && ve.TB < len(p.Ranks[rank].TBs) {
		tb := &p.Ranks[rank].TBs[ve.TB]
		pos = tb.Pos
		if ve.Step >= 0 && ve.Step < len(tb.Ops) {
			pos = tb.Ops[ve.Step].Pos
		}
	}
	if !pos.IsValid() {
		pos = p.Pos
	}
	return mkDiag(p, ve.Code, rank, ve.TB, ve.Step, pos, ve.Msg)
}

func mkDiag(p *ir.Program, code diag.Code, rank, tb, step int, pos ir.Pos, msg string) diag.Diagnostic {
	d := diag.Diagnostic{Code: code, Severity: diag.Error, Rank: rank, TB: tb, Step: step, Msg: msg,
		Line: int(pos.Line), Col: int(pos.Col)}
	if p != nil {
		d.File = p.File
	}
	if ci, ok := diag.Lookup(code); ok {
		d.Hint = ci.Hint
	}
	return d
}
