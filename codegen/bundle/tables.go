package bundle

import (
	"fmt"
	"slices"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/ir"
)

// Table decodes rank's op table (optable.Decode, which validates it) and
// checks that it agrees with the bundle: the same rank, nranks,
// collective, protocol, root, chunks per block, threads, ranks per node,
// slice bytes and arrangements as Meta, and the same scratch, channel ends,
// registrations, threadblock op counts and op hashes as Ranks[rank]. A
// runtime loading one rank calls Table for that rank only (of an opened
// bundle, it reads that rank's section only: TableBytes). Errors wrap
// ErrFormat (rank out of range, or a mismatch), are TableBytes' or
// optable's own decode and validation errors.
func (b *Bundle) Table(rank int) (*optable.Table, error) {
	if rank < 0 || rank >= len(b.Tables) || rank >= len(b.Ranks) {
		return nil, fmt.Errorf("%w: rank %d outside [0,%d)", ErrFormat, rank, len(b.Tables))
	}
	raw, err := b.TableBytes(rank)
	if err != nil {
		return nil, err
	}
	t, err := optable.Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("bundle: rank %d: %w", rank, err)
	}
	if err := b.agrees(rank, t); err != nil {
		return nil, fmt.Errorf("%w: rank %d: the op table %s", ErrFormat, rank, err)
	}
	return t, nil
}

// CheckTables decodes every rank's table (Table) and checks them together
// (optable.CheckPeers: channel ends pair across ranks, remote refs lie
// within the peer's buffers). Decode does not do this, since a rank needs
// only its own table; compilers and `theseusc` call it before publishing,
// and a runtime loading a bundle that is not Verified. It reads every
// section of an opened bundle.
func (b *Bundle) CheckTables() error {
	ts := make([]*optable.Table, len(b.Tables))
	for r := range b.Tables {
		t, err := b.Table(r)
		if err != nil {
			return err
		}
		ts[r] = t
	}
	if err := optable.CheckPeers(ts); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	return nil
}

func (b *Bundle) agrees(rank int, t *optable.Table) error {
	m := &b.Meta
	switch {
	case t.Rank != rank:
		return fmt.Errorf("is rank %d's", t.Rank)
	case t.NRanks != m.NRanks || t.Collective != m.Collective || t.Protocol != m.Protocol || t.Root != m.Root ||
		t.ChunksPerBlock != m.ChunksPerBlock:
		return fmt.Errorf("is for %s of %d ranks, %v, root %d, C=%d; the bundle says %s of %d ranks, %v, root %d, C=%d",
			t.Collective, t.NRanks, t.Protocol, t.Root, t.ChunksPerBlock, m.Collective, m.NRanks, m.Protocol, m.Root, m.ChunksPerBlock)
	case t.NumThreads != m.NumThreads || t.NLocalRanks != m.NLocalRanks || t.SliceBytes != m.SliceBytes ||
		t.InPlace != m.InPlace || t.OutOfPlace != m.OutOfPlace:
		return fmt.Errorf("disagrees with the metadata on threads, ranks per node, slice bytes or arrangements")
	}
	res := &b.Ranks[rank]
	if t.Chunks[ir.Scratch] != res.Chunks[ir.Scratch] {
		return fmt.Errorf("has %d scratch chunks, the summary %d", t.Chunks[ir.Scratch], res.Chunks[ir.Scratch])
	}
	if len(t.Channels) != len(res.Channels) {
		return fmt.Errorf("has %d channel ends, the summary %d", len(t.Channels), len(res.Channels))
	}
	for c, ch := range t.Channels {
		if (ChannelEnd{Peer: ch.Peer, PeerChannel: ch.PeerChannel, Type: ch.Type, Init: ch.Init}) != res.Channels[c] {
			return fmt.Errorf("channel %d is %+v, the summary %+v", c, ch, res.Channels[c])
		}
	}
	if len(t.TBs) != len(res.TBs) {
		return fmt.Errorf("has %d threadblocks, the summary %d", len(t.TBs), len(res.TBs))
	}
	var ops []ir.Op
	var regs []Registration
	chans := make([]ir.Channel, len(t.Channels))
	for c, ch := range t.Channels {
		chans[c] = ir.Channel{Peer: ch.Peer, PeerChannel: ch.PeerChannel, Type: ch.Type, Init: ch.Init}
	}
	for i, tb := range t.TBs {
		ops = ops[:0]
		for _, op := range tb.Ops {
			ops = append(ops, ir.Op{Code: op.Code, Srcs: op.Srcs, Dsts: op.Dsts, Count: op.Count, Chans: op.Chans,
				Barrier: op.Barrier, BarrierTBs: op.BarrierTBs, Deps: op.Deps, Publish: op.Publish})
			regs = appendRegs(regs, chans, op.Srcs)
			regs = appendRegs(regs, chans, op.Dsts)
		}
		if got := (TBSummary{Ops: len(ops), OpsHash: HashOps(ops)}); got != res.TBs[i] {
			return fmt.Errorf("threadblock %d has %d ops (hash %#x), the summary %d (hash %#x)", i, got.Ops, got.OpsHash, res.TBs[i].Ops, res.TBs[i].OpsHash)
		}
	}
	slices.SortFunc(regs, cmpReg)
	regs = slices.Compact(regs)
	if !slices.Equal(regs, res.Registrations) {
		return fmt.Errorf("imports registrations %v, the summary %v", regs, res.Registrations)
	}
	return nil
}
