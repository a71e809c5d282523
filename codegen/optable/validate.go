package optable

import (
	"fmt"
	"math"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Limits of the binary format beyond the IR's own.
const (
	// MaxChannels and MaxTBs bound the channel ends and threadblocks of one
	// table (int32 indices in the records).
	MaxChannels = math.MaxInt32
	MaxTBs      = math.MaxInt32
	// MaxOperands bounds the srcs, dsts, channels and dependencies of one op
	// (uint32 counts in the op record).
	MaxOperands = math.MaxUint32
)

// ValidationError is a table that breaks a rule of docs/optable.md. TB and
// Step locate it (-1 when not about one op); Code is the diagnostic code of
// the rule (diag), so Lower can report it with the op's position.
type ValidationError struct {
	Code     diag.Code
	TB, Step int
	Msg      string
}

func (e *ValidationError) Error() string {
	if e.TB >= 0 && e.Step >= 0 {
		return fmt.Sprintf("optable: %s: tb %d step %d: %s", e.Code, e.TB, e.Step, e.Msg)
	}
	if e.TB >= 0 {
		return fmt.Sprintf("optable: %s: tb %d: %s", e.Code, e.TB, e.Msg)
	}
	return fmt.Sprintf("optable: %s: %s", e.Code, e.Msg)
}

func verr(code diag.Code, tb, step int, format string, args ...any) *ValidationError {
	return &ValidationError{Code: code, TB: tb, Step: step, Msg: fmt.Sprintf(format, args...)}
}

// BufferChunks returns the chunks of buffer k (input or output) that
// logical rank rank has under the collective (ir.Blocks times
// chunksPerBlock, with the program's root), or -1 for custom collectives
// (whose sizes are declared) and ok=false on overflow.
func BufferChunks(c ir.Collective, k ir.BufKind, nranks, rank, root int, chunksPerBlock int64) (n int64, ok bool) {
	b := ir.Blocks(c, k, nranks, rank, root)
	if b < 0 {
		return -1, true
	}
	if b != 0 && chunksPerBlock > math.MaxInt64/b {
		return 0, false
	}
	return b * chunksPerBlock, true
}

// Validate checks everything one table can show about itself (the peers'
// tables are CheckPeers' job):
//
//   - header: 1 <= NRanks <= ir.MaxRanks, 0 <= Rank < NRanks, known
//     collective and protocol, Root in range for rooted collectives and -1
//     otherwise, ChunksPerBlock >= 1, input and output chunks equal to what
//     the collective defines (BufferChunks; custom: >= 0), scratch >= 0, at
//     least one arrangement, NumThreads, NLocalRanks, SliceBytes >= 0,
//     MaxScratchChunks >= this rank's scratch;
//   - channel ends: peer in range, peer channel >= 0, known type, Init >= 0;
//   - ops: primitive-level opcodes only; operand counts per ir.OpInfo; data
//     ops have Count >= 1 and other ops Count 0; channel lists only on
//     signal/wait/flush and in range; barrier fields only on barrier, with
//     1 <= BarrierTBs <= len(TBs) and id >= 0; dependencies on another
//     threadblock's existing step, which publishes;
//   - refs: known buffer; channel -1 or in range; packet refs only on scratch
//     and only in LL programs; 0 <= Off and Off+Count within the buffer for
//     local refs (remote refs: >= 0 and no overflow).
//
// Errors are *ValidationError, the first one found.
func (t *Table) Validate() error {
	if err := t.validateHeader(len(t.TBs)); err != nil {
		return err
	}
	shape := tableShape{t}
	for ti := range t.TBs {
		for k := range t.TBs[ti].Ops {
			if err := t.checkOp(ti, k, &t.TBs[ti].Ops[k], shape); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateHeader is Validate's checks of the header and the channel ends,
// for a table of ntbs threadblocks (t.TBs need not be filled: lowering
// straight to the wire format checks a header-only table).
func (t *Table) validateHeader(ntbs int) error {
	if t == nil {
		return verr(diag.BadValue, -1, -1, "nil table")
	}
	switch {
	case t.NRanks < 1 || t.NRanks > ir.MaxRanks:
		return verr(diag.BadRank, -1, -1, "nranks %d outside 1..%d", t.NRanks, ir.MaxRanks)
	case t.Rank < 0 || t.Rank >= t.NRanks:
		return verr(diag.BadRank, -1, -1, "rank %d outside 0..%d", t.Rank, t.NRanks-1)
	case t.Collective >= ir.NumCollectives:
		return verr(diag.BadValue, -1, -1, "unknown collective %v", t.Collective)
	case t.Protocol >= ir.NumProtocols:
		return verr(diag.BadValue, -1, -1, "unknown protocol %v", t.Protocol)
	case t.Collective.Rooted() && (t.Root < 0 || t.Root >= t.NRanks):
		return verr(diag.BadRoot, -1, -1, "%v needs a root in 0..%d, have %d", t.Collective, t.NRanks-1, t.Root)
	case !t.Collective.Rooted() && t.Root != -1:
		return verr(diag.BadRoot, -1, -1, "%v has no root, but root is %d (want -1)", t.Collective, t.Root)
	case t.ChunksPerBlock < 1:
		return verr(diag.BadGeometry, -1, -1, "chunks per block %d < 1", t.ChunksPerBlock)
	case !t.InPlace && !t.OutOfPlace:
		return verr(diag.NoArrangement, -1, -1, "neither in-place nor out-of-place is supported")
	case t.NumThreads < 0 || t.NumThreads > math.MaxInt32:
		return verr(diag.BadValue, -1, -1, "threads per block %d out of range", t.NumThreads)
	case t.NLocalRanks < 0 || t.NLocalRanks > ir.MaxRanks:
		return verr(diag.BadValue, -1, -1, "nlocalranks %d out of range", t.NLocalRanks)
	case t.SliceBytes < 0:
		return verr(diag.BadValue, -1, -1, "slice bytes %d < 0", t.SliceBytes)
	case len(t.Channels) > MaxChannels:
		return verr(diag.Limits, -1, -1, "%d channel ends, over %d", len(t.Channels), MaxChannels)
	case ntbs > MaxTBs:
		return verr(diag.Limits, -1, -1, "%d threadblocks, over %d", ntbs, MaxTBs)
	}
	for k := ir.Input; k <= ir.Output; k++ {
		want, ok := BufferChunks(t.Collective, k, t.NRanks, t.Rank, t.Root, t.ChunksPerBlock)
		switch {
		case !ok:
			return verr(diag.BadGeometry, -1, -1, "%s chunks overflow", k.LongName())
		case want < 0 && t.Chunks[k] < 0:
			return verr(diag.BadGeometry, -1, -1, "%s has %d chunks", k.LongName(), t.Chunks[k])
		case want >= 0 && t.Chunks[k] != want:
			return verr(diag.BadGeometry, -1, -1, "%s has %d chunks; %v on %d ranks gives rank %d %d", k.LongName(), t.Chunks[k], t.Collective, t.NRanks, t.Rank, want)
		}
	}
	if t.Chunks[ir.Scratch] < 0 {
		return verr(diag.BadGeometry, -1, -1, "scratch has %d chunks", t.Chunks[ir.Scratch])
	}
	if t.MaxScratchChunks < t.Chunks[ir.Scratch] {
		return verr(diag.BadGeometry, -1, -1, "max scratch chunks %d below this rank's %d", t.MaxScratchChunks, t.Chunks[ir.Scratch])
	}
	for c, ch := range t.Channels {
		switch {
		case ch.Peer < 0 || ch.Peer >= t.NRanks:
			return verr(diag.BadChannel, -1, -1, "channel %d: peer %d outside 0..%d", c, ch.Peer, t.NRanks-1)
		case ch.PeerChannel < 0 || ch.PeerChannel > MaxChannels:
			return verr(diag.BadChannel, -1, -1, "channel %d: peer channel %d out of range", c, ch.PeerChannel)
		case ch.Type >= ir.NumChannelTypes:
			return verr(diag.BadValue, -1, -1, "channel %d: unknown type %v", c, ch.Type)
		case ch.Init < 0:
			return verr(diag.BadValue, -1, -1, "channel %d: initial semaphore value %d < 0", c, ch.Init)
		}
	}
	return nil
}

// rankShape is what the op rules ask of the rank's other threadblocks:
// how many there are, their op counts, and which ops publish.
type rankShape interface {
	numTBs() int
	numOps(tb int) int
	publishes(tb, step int) bool
}

type tableShape struct{ t *Table }

func (s tableShape) numTBs() int                 { return len(s.t.TBs) }
func (s tableShape) numOps(tb int) int           { return len(s.t.TBs[tb].Ops) }
func (s tableShape) publishes(tb, step int) bool { return s.t.TBs[tb].Ops[step].Publish }

// checkOp checks op, step k of threadblock ti, against the table's header
// and channel ends and the rank's threadblocks (Validate's op rules).
func (t *Table) checkOp(ti, k int, op *Op, s rankShape) error {
	info := op.Code.Info()
	if !op.Code.Valid() {
		return verr(diag.BadValue, ti, k, "unknown opcode %d", op.Code)
	}
	if info.Level == ir.LevelTransfer {
		return verr(diag.WrongLevel, ti, k, "transfer op %v in an op table (legalize first)", op.Code)
	}
	inRange := func(n, lo, hi int) bool { return n >= lo && (hi < 0 || n <= hi) }
	switch {
	case !inRange(len(op.Srcs), info.MinSrcs, info.MaxSrcs) || len(op.Srcs) > MaxOperands:
		return verr(diag.BadCount, ti, k, "%v has %d sources", op.Code, len(op.Srcs))
	case !inRange(len(op.Dsts), info.MinDsts, info.MaxDsts) || len(op.Dsts) > MaxOperands:
		return verr(diag.BadCount, ti, k, "%v has %d destinations", op.Code, len(op.Dsts))
	case info.Data && op.Count < 1:
		return verr(diag.BadCount, ti, k, "%v of %d chunks (want >= 1)", op.Code, op.Count)
	case !info.Data && op.Count != 0:
		return verr(diag.BadCount, ti, k, "%v carries count %d (want 0)", op.Code, op.Count)
	case !info.Chans && len(op.Chans) > 0:
		return verr(diag.BadChannel, ti, k, "%v carries channels", op.Code)
	case len(op.Chans) > MaxOperands || len(op.Deps) > MaxOperands:
		return verr(diag.Limits, ti, k, "too many channels or dependencies")
	}
	for _, c := range op.Chans {
		if c < 0 || c >= len(t.Channels) {
			return verr(diag.BadChannel, ti, k, "channel %d outside 0..%d", c, len(t.Channels)-1)
		}
	}
	if op.Code == ir.OpBarrier {
		if op.Barrier < 0 || op.Barrier > math.MaxInt32 || op.BarrierTBs < 1 || op.BarrierTBs > s.numTBs() {
			return verr(diag.BadBarrier, ti, k, "barrier %d of %d threadblocks (rank has %d)", op.Barrier, op.BarrierTBs, s.numTBs())
		}
	} else if op.Barrier != 0 || op.BarrierTBs != 0 {
		return verr(diag.BadBarrier, ti, k, "%v carries barrier fields", op.Code)
	}
	for _, d := range op.Deps {
		switch {
		case d.TB < 0 || d.TB >= s.numTBs() || d.TB == ti:
			return verr(diag.BadDep, ti, k, "dependency on threadblock %d (want another of 0..%d)", d.TB, s.numTBs()-1)
		case d.Step < 0 || d.Step >= s.numOps(d.TB):
			return verr(diag.BadDep, ti, k, "dependency on tb %d step %d (it has %d steps)", d.TB, d.Step, s.numOps(d.TB))
		case !s.publishes(d.TB, d.Step):
			return verr(diag.DepNotPublished, ti, k, "dependency on tb %d step %d, which does not publish", d.TB, d.Step)
		}
	}
	for i := range len(op.Srcs) + len(op.Dsts) {
		r := op.ref(i)
		switch {
		case r.Buf >= ir.NumBufKinds:
			return verr(diag.BadRef, ti, k, "ref %d: unknown buffer %v", i, r.Buf)
		case r.Chan < -1 || r.Chan >= len(t.Channels):
			return verr(diag.BadChannel, ti, k, "ref %d: channel %d outside -1..%d", i, r.Chan, len(t.Channels)-1)
		case r.Packet && r.Buf != ir.Scratch:
			return verr(diag.BadRef, ti, k, "ref %d: packet ref to %s (packets live in scratch)", i, r.Buf.LongName())
		case r.Packet && t.Protocol != ir.LL:
			return verr(diag.BadRef, ti, k, "ref %d: packet ref in a %v program", i, t.Protocol)
		case r.Off < 0 || r.Off > math.MaxInt64-op.Count:
			return verr(diag.ChunkRange, ti, k, "ref %d: offset %d out of range", i, r.Off)
		case r.Chan < 0 && r.Off+op.Count > t.Chunks[r.Buf]:
			return verr(diag.ChunkRange, ti, k, "ref %d: %s[%d:%d] outside its %d chunks", i, r.Buf, r.Off, r.Off+op.Count, t.Chunks[r.Buf])
		}
	}
	return nil
}

// CheckPeers checks what only the whole set of tables shows: tables[r] is
// logical rank r's (same collective, nranks, chunks per block, root and
// protocol everywhere, MaxScratchChunks the largest rank scratch), every
// channel end pairs with the end it names (that
// end exists and names it back), and every remote ref lies within the peer's
// buffer. Each table is Validated first. Errors are *ValidationError (TB/Step of the offending op, if any)
// wrapped with the rank.
func CheckPeers(tables []*Table) error {
	if len(tables) == 0 {
		return fmt.Errorf("optable: no tables")
	}
	t0 := tables[0]
	for r, t := range tables {
		switch {
		case t == nil:
			return fmt.Errorf("optable: rank %d: nil table", r)
		case t.Rank != r:
			return fmt.Errorf("optable: tables[%d] is rank %d's table", r, t.Rank)
		case t.NRanks != len(tables):
			return fmt.Errorf("optable: rank %d: nranks %d but %d tables", r, t.NRanks, len(tables))
		case t.Collective != t0.Collective || t.ChunksPerBlock != t0.ChunksPerBlock || t.Root != t0.Root ||
			t.Protocol != t0.Protocol || t.InPlace != t0.InPlace || t.OutOfPlace != t0.OutOfPlace ||
			t.MaxScratchChunks != t0.MaxScratchChunks:
			return fmt.Errorf("optable: rank %d: header differs from rank 0's (collective, chunks per block, root, protocol, arrangements or max scratch)", r)
		}
	}
	var maxScratch int64
	for _, t := range tables {
		maxScratch = max(maxScratch, t.Chunks[ir.Scratch])
	}
	if t0.MaxScratchChunks != maxScratch {
		return fmt.Errorf("optable: max scratch chunks %d, but the largest rank scratch is %d", t0.MaxScratchChunks, maxScratch)
	}
	for r, t := range tables {
		if err := t.Validate(); err != nil {
			return fmt.Errorf("optable: rank %d: %w", r, err)
		}
	}
	for r, t := range tables {
		for c, ch := range t.Channels {
			p := tables[ch.Peer]
			if ch.PeerChannel >= len(p.Channels) {
				return fmt.Errorf("optable: rank %d: %w", r, verr(diag.ChannelPairing, -1, -1, "channel %d names channel %d of rank %d, which has %d", c, ch.PeerChannel, ch.Peer, len(p.Channels)))
			}
			if back := p.Channels[ch.PeerChannel]; back.Peer != r || back.PeerChannel != c {
				return fmt.Errorf("optable: rank %d: %w", r, verr(diag.ChannelPairing, -1, -1, "channel %d names rank %d channel %d, which names rank %d channel %d back", c, ch.Peer, ch.PeerChannel, back.Peer, back.PeerChannel))
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
					peer := tables[t.Channels[ref.Chan].Peer]
					if ref.Off+op.Count > peer.Chunks[ref.Buf] {
						return fmt.Errorf("optable: rank %d: %w", r, verr(diag.ChunkRange, ti, k, "ref %d: rank %d's %s[%d:%d] outside its %d chunks", i, peer.Rank, ref.Buf, ref.Off, ref.Off+op.Count, peer.Chunks[ref.Buf]))
					}
				}
			}
		}
	}
	return nil
}
