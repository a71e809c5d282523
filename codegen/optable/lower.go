package optable

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/theseus-ccl/theseus/diag"
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

// LowerAllBinary lowers every rank of p straight to its binary encoding:
// raw[r] is exactly rank r's MarshalBinary(Lower(p, r)), and the checks and
// the error are exactly LowerAll's (the first failing rank's; see Lower),
// but no Table is built: each op is checked and written into the final
// buffer as it is read from p, with no allocation per op. Ranks are lowered
// in parallel on up to GOMAXPROCS goroutines when p is large; the result
// and the error do not depend on it. compiler/passes lowers with it.
func LowerAllBinary(p *ir.Program) ([][]byte, error) {
	if p == nil {
		return nil, mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to lower")
	}
	// LowerAll first looks for a transfer op anywhere. Here that scan runs
	// only on failure: a transfer op always fails its rank (checkOp), so a
	// program that lowers has none.
	if len(p.Ranks) != p.NRanks || p.NRanks < 1 || p.NRanks > ir.MaxRanks {
		if d, ok := firstTransfer(p); ok {
			return nil, d
		}
		return nil, mkDiag(p, diag.BadRank, -1, -1, -1, p.Pos, fmt.Sprintf("program has %d ranks for nranks %d", len(p.Ranks), p.NRanks))
	}
	ms := maxScratch(p)
	out := make([][]byte, len(p.Ranks))
	errs := make([]error, len(p.Ranks))
	forEachRank(p, func(r int) bool {
		out[r], errs[r] = lowerRankBinary(p, r, ms)
		return errs[r] == nil
	})
	for r := range errs {
		if errs[r] != nil {
			if d, ok := firstTransfer(p); ok {
				return nil, d
			}
			return nil, errs[r]
		}
	}
	return out, nil
}

// LowerRankBinary is rank's entry of LowerAllBinary(p): its table in the
// binary encoding, with the same checks and error (see Lower). Only rank's
// threadblocks are read; the other ranks need their buffers and channel
// ends only (a runtime that builds one rank's table passes the other ranks
// without threadblocks: compiler/legalize's Plan.Skeleton).
func LowerRankBinary(p *ir.Program, rank int) ([]byte, error) {
	if p == nil {
		return nil, mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to lower")
	}
	if len(p.Ranks) != p.NRanks || p.NRanks < 1 || p.NRanks > ir.MaxRanks {
		return nil, mkDiag(p, diag.BadRank, -1, -1, -1, p.Pos, fmt.Sprintf("program has %d ranks for nranks %d", len(p.Ranks), p.NRanks))
	}
	if rank < 0 || rank >= p.NRanks {
		return nil, mkDiag(p, diag.BadRank, -1, -1, -1, p.Pos, fmt.Sprintf("rank %d outside 0..%d", rank, p.NRanks-1))
	}
	raw, err := lowerRankBinary(p, rank, maxScratch(p))
	if err != nil {
		if d, ok := firstTransfer(p); ok {
			return nil, d
		}
		return nil, err
	}
	return raw, nil
}

// parallelOps is the program size (ops) from which forEachRank uses more
// than one goroutine.
var parallelOps = 1 << 16

// forEachRank calls f for every rank of p, on up to GOMAXPROCS goroutines
// for a large program (each rank once, in increasing order per goroutine).
// Once f returns false for rank r, ranks above r may be skipped; every rank
// below the lowest failing one is still done. A panic in f is re-raised on
// the caller's goroutine.
func forEachRank(p *ir.Program, f func(r int) bool) {
	n := len(p.Ranks)
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || p.NumOps() < parallelOps {
		for r := range n {
			if !f(r) {
				return
			}
		}
		return
	}
	var next, failed atomic.Int64
	failed.Store(math.MaxInt64)
	var wg sync.WaitGroup
	var panicked atomic.Value // the first worker panic, re-raised on the caller's goroutine
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if v := recover(); v != nil {
					panicked.CompareAndSwap(nil, workerPanic{v})
					failed.Store(-1) // stop the other workers
				}
			}()
			for {
				r := next.Add(1) - 1
				if r >= int64(n) || r > failed.Load() {
					return
				}
				if !f(int(r)) {
					for {
						cur := failed.Load()
						if r >= cur || failed.CompareAndSwap(cur, r) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if v := panicked.Load(); v != nil {
		panic(v.(workerPanic).v) // callers (compiler/passes) recover panics on their goroutine
	}
}

// workerPanic boxes a recovered panic value for atomic.Value (which needs
// one concrete type).
type workerPanic struct{ v any }

// irShape answers rankShape from the program's rank.
type irShape struct{ r *ir.Rank }

func (s irShape) numTBs() int                 { return len(s.r.TBs) }
func (s irShape) numOps(tb int) int           { return len(s.r.TBs[tb].Ops) }
func (s irShape) publishes(tb, step int) bool { return s.r.TBs[tb].Ops[step].Publish }

// lowerRankBinary is lowerRank then MarshalBinary, in one pass over the
// rank's ops: Validate's rules (header, channel ends, then each op in
// order) first, then checkRankPeers' (pairing, then remote refs in op
// order), so the first error is the one lowerRank reports.
func lowerRankBinary(p *ir.Program, rank int, maxScratchChunks int64) ([]byte, error) {
	pr := &p.Ranks[rank]
	t := header(p, rank, maxScratchChunks)
	if err := t.validateHeader(len(pr.TBs)); err != nil {
		return nil, toDiag(p, rank, err)
	}
	var nops, nrefs, ndeps, nchl uint64
	for ti := range pr.TBs {
		ops := pr.TBs[ti].Ops
		nops += uint64(len(ops))
		for k := range ops {
			nrefs += uint64(len(ops[k].Srcs) + len(ops[k].Dsts))
			ndeps += uint64(len(ops[k].Deps))
			nchl += uint64(len(ops[k].Chans))
		}
	}
	e, err := newEncoder(t, len(pr.TBs), nops, nrefs, ndeps, nchl)
	if err != nil {
		return nil, toDiag(p, rank, err)
	}
	shape := irShape{pr}
	var peerErr error // the first remote-ref error, reported after Validate's rules
	for ti := range pr.TBs {
		ops := pr.TBs[ti].Ops
		e.tb(ti, len(ops))
		for k := range ops {
			o := tableOp(&ops[k])
			if err := t.checkOp(ti, k, &o, shape); err != nil {
				return nil, toDiag(p, rank, err)
			}
			if peerErr == nil {
				peerErr = checkRemoteRefs(p, t, ti, k, &o)
			}
			e.op(&o)
		}
	}
	if err := checkPairing(p, t); err != nil {
		return nil, toDiag(p, rank, err)
	}
	if peerErr != nil {
		return nil, toDiag(p, rank, peerErr)
	}
	return e.finish(), nil
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

// header is rank's table without threadblocks: the header fields and the
// channel ends.
func header(p *ir.Program, rank int, maxScratchChunks int64) *Table {
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
	return t
}

// tableOp is the table's op for ir op op (the fields the table keeps; the
// count is dropped for non-data ops). Its slices share op's.
func tableOp(op *ir.Op) Op {
	o := Op{Code: op.Code, Publish: op.Publish, Srcs: op.Srcs, Dsts: op.Dsts, Count: op.Count,
		Chans: op.Chans, Deps: op.Deps, Barrier: op.Barrier, BarrierTBs: op.BarrierTBs}
	if !op.Code.Info().Data {
		o.Count = 0
	}
	return o
}

func build(p *ir.Program, rank int, maxScratchChunks int64) *Table {
	pr := &p.Ranks[rank]
	t := header(p, rank, maxScratchChunks)
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
	if err := checkPairing(p, t); err != nil {
		return err
	}
	for ti, tb := range t.TBs {
		for k := range tb.Ops {
			if err := checkRemoteRefs(p, t, ti, k, &tb.Ops[k]); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkPairing checks that each of t's channel ends names an end of p that
// names it back.
func checkPairing(p *ir.Program, t *Table) error {
	for c, ch := range t.Channels {
		pc := p.Ranks[ch.Peer].Channels
		if ch.PeerChannel >= len(pc) {
			return verr(diag.ChannelPairing, -1, -1, "channel %d names channel %d of rank %d, which has %d", c, ch.PeerChannel, ch.Peer, len(pc))
		}
		if back := pc[ch.PeerChannel]; back.Peer != t.Rank || back.PeerChannel != c {
			return verr(diag.ChannelPairing, -1, -1, "channel %d names rank %d channel %d, which names rank %d channel %d back", c, ch.Peer, ch.PeerChannel, back.Peer, back.PeerChannel)
		}
	}
	return nil
}

// checkRemoteRefs checks that op's remote refs (step k of threadblock ti
// of t) lie within the peer's buffers.
func checkRemoteRefs(p *ir.Program, t *Table, ti, k int, op *Op) error {
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
