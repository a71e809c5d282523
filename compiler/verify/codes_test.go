package verify_test

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

// codeCase is a minimal program with one defect and exactly the findings
// the verifier must report for it.
type codeCase struct {
	name  string
	prog  func() *ir.Program
	opts  verify.Options
	want  []finding
	parts []string // substrings of the first diagnostic's message
}

// mutate returns a program built by b and changed by f.
func mutate(b *Builder, f func(p *ir.Program)) func() *ir.Program {
	return func() *ir.Program {
		p := b.Build()
		f(p)
		return p
	}
}

// twoRanks is an allreduce on 2 ranks (C = 2) at the primitive level: each
// rank signals, waits, reduces its own chunk r from both inputs into both
// outputs, then signals and waits again (the closing handshake). It is the
// base of the synchronisation cases.
func twoRanks() *Builder {
	b := New(ir.AllReduce, 2, 2).Name("two_ranks")
	for r := 0; r < 2; r++ {
		b.Rank(r).Chunks(2, 2, 0)
	}
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	for r := 0; r < 2; r++ {
		j := int64(r)
		b.Rank(r).PrimTB().Signal(0).Wait(0).
			Reduce(1, []ir.Ref{I(j), Remote(I(j), 0)}, O(j), Remote(O(j), 0)).
			Signal(0).Wait(0)
	}
	return b
}

// transfer2 is a transfer-level allreduce on 2 ranks (C = 2): rank r sends
// its chunk 1-r and receives the peer's, reducing it into its chunk r, then
// sends that and receives the other reduced chunk.
func transfer2() *Builder {
	b := New(ir.AllReduce, 2, 2).Name("transfer2")
	for r := 0; r < 2; r++ {
		q := 1 - r
		b.Rank(r).Chunks(2, 2, 0).TB(q, q, 0).
			Send(1, I(int64(q))).RRC(1, I(int64(r)), O(int64(r))).
			Send(1, O(int64(r))).Recv(1, O(int64(q)))
	}
	return b
}

var codeCases = []codeCase{
	// structure
	{name: "BadRank", prog: mutate(copy1(), func(p *ir.Program) { p.NRanks = 2 }),
		want: []finding{at(diag.BadRank, -1, -1, -1, progPos)}, parts: []string{"for 2 ranks but declares 1"}},
	{name: "BadRank/nranks", prog: mutate(copy1(), func(p *ir.Program) { p.NRanks = 0 }),
		want: []finding{at(diag.BadRank, -1, -1, -1, progPos)}},
	{name: "UnknownCollective", prog: mutate(copy1(), func(p *ir.Program) { p.Collective = 77 }),
		want: []finding{at(diag.UnknownCollective, -1, -1, -1, progPos)}},
	{name: "BadValue/protocol", prog: mutate(copy1(), func(p *ir.Program) { p.Protocol = 9 }),
		want: []finding{at(diag.BadValue, -1, -1, -1, progPos)}},
	{name: "BadValue/slicebytes", prog: mutate(copy1(), func(p *ir.Program) { p.SliceBytes = -1 }),
		want: []finding{at(diag.BadValue, -1, -1, -1, progPos)}},
	{name: "BadValue/nlocalranks", prog: mutate(twoRanks(), func(p *ir.Program) { p.NLocalRanks = 3 }),
		want: []finding{at(diag.BadValue, -1, -1, -1, progPos)}},
	{name: "BadGeometry/chunksperblock", prog: mutate(copy1(), func(p *ir.Program) { p.ChunksPerBlock = 0 }),
		want: []finding{at(diag.BadGeometry, -1, -1, -1, progPos)}},
	{name: "BadGeometry/declared", prog: mutate(copy1(), func(p *ir.Program) { p.Ranks[0].Chunks[ir.Output] = 3 }),
		want:  []finding{at(diag.BadGeometry, 0, -1, -1, rankPos(0))},
		parts: []string{"declares 3 output chunks; allreduce gives 1"}},
	{name: "BadGeometry/nonexistent", prog: func() *ir.Program {
		b := New(ir.Reduce, 2, 1)
		b.Rank(0).Chunks(1, 1, 0).PrimTB().Copy(1, I(0), O(0))
		b.Rank(1).Chunks(1, 1, 0)
		return b.Build()
	}, want: []finding{at(diag.BadGeometry, 1, -1, -1, rankPos(1))}, parts: []string{"has no output buffer in reduce"}},
	{name: "NoArrangement", prog: mutate(copy1(), func(p *ir.Program) { p.OutOfPlace = false }),
		want: []finding{at(diag.NoArrangement, -1, -1, -1, progPos)}},
	{name: "BadWindow", prog: mutate(copy1(), func(p *ir.Program) { p.MinBytes, p.MaxBytes = 100, 10 }),
		want: []finding{at(diag.BadWindow, -1, -1, -1, progPos)}},
	{name: "BadRoot", prog: func() *ir.Program {
		b := New(ir.Broadcast, 1, 1).Root(1)
		b.Rank(0).Chunks(0, 1, 0)
		return b.Build()
	}, want: []finding{at(diag.BadRoot, -1, -1, -1, progPos)}},
	{name: "BadRoot/nonrooted", prog: mutate(copy1(), func(p *ir.Program) { p.Root = 0 }),
		want: []finding{warn(diag.BadRoot, -1, -1, -1, progPos)}},
	{name: "Limits/threads", prog: mutate(copy1(), func(p *ir.Program) { p.NumThreads = 2048 }),
		want: []finding{at(diag.Limits, -1, -1, -1, progPos)}},
	{name: "Limits/threadblocks", prog: mutate(copy1(), func(p *ir.Program) {
		p.Ranks[0].TBs = make([]ir.Threadblock, verify.MaxThreadblocks+1)
	}), want: []finding{at(diag.Limits, 0, -1, -1, rankPos(0))}},
	{name: "BadChannel/self", prog: mutate(copy1(), func(p *ir.Program) {
		p.Ranks[0].Channels = []ir.Channel{{Peer: 0, PeerChannel: 0}}
	}), want: []finding{at(diag.BadChannel, 0, -1, -1, chanPos(0, 0))}},
	{name: "BadChannel/index", prog: mutate(twoRanks(), func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[1].Chans = []int{3} }),
		want: []finding{at(diag.BadChannel, 1, 0, 1, opPos(1, 0, 1))}},
	{name: "BadChannel/remote", prog: mutate(twoRanks(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[2].Srcs[1].Chan = 5 }),
		want: []finding{at(diag.BadChannel, 0, 0, 2, opPos(0, 0, 2))}},
	{name: "ChannelPairing", prog: mutate(twoRanks(), func(p *ir.Program) {
		p.Ranks[1].Channels = append(p.Ranks[1].Channels, ir.Channel{Peer: 0, PeerChannel: 0})
	}), want: []finding{at(diag.ChannelPairing, 1, -1, -1, chanPos(1, 1))}, parts: []string{"names rank 0 channel 0, which names rank 1 channel 0 instead"}},
	{name: "ChannelPairing/type", prog: mutate(twoRanks(), func(p *ir.Program) { p.Ranks[1].Channels[0].Type = ir.PortChannel }),
		want: []finding{at(diag.ChannelPairing, 0, -1, -1, chanPos(0, 0))}},
	{name: "ChunkRange", prog: mutate(copy1(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[0].Dsts[0].Off = 1 }),
		want: []finding{at(diag.ChunkRange, 0, 0, 0, opPos(0, 0, 0))}, parts: []string{"dst 0 o[1:2] is outside rank 0's output buffer (1 chunks)"}},
	{name: "ChunkRange/remote", prog: mutate(twoRanks(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[2].Dsts[1].Off = 1; p.Ranks[0].TBs[0].Ops[2].Count = 2 }),
		want: []finding{at(diag.ChunkRange, 0, 0, 2, opPos(0, 0, 2))}, parts: []string{"o[1:3] is outside rank 1's (the peer of channel 0) output buffer (2 chunks)"}},
	{name: "BadCount/count", prog: mutate(copy1(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[0].Count = 0 }),
		want: []finding{at(diag.BadCount, 0, 0, 0, opPos(0, 0, 0))}},
	{name: "BadCount/operands", prog: mutate(copy1(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[0].Code = ir.OpReduce }),
		want: []finding{at(diag.BadCount, 0, 0, 0, opPos(0, 0, 0))}, parts: []string{"reduce takes 2 or more srcs and 1 or more dsts, got 1 and 1"}},
	{name: "MissingBuffer", prog: func() *ir.Program {
		b := New(ir.Reduce, 2, 1)
		b.Rank(0).Chunks(1, 1, 0).PrimTB().Copy(1, I(0), O(0))
		b.Rank(1).Chunks(1, 0, 0).PrimTB().Copy(1, I(0), O(0))
		return b.Build()
	}, want: []finding{at(diag.MissingBuffer, 1, 0, 0, opPos(1, 0, 0))}, parts: []string{"rank 1 has no output buffer in reduce with root 0"}},
	{name: "BadRef/packet-in-user", prog: mutate(copy1(), func(p *ir.Program) {
		p.Protocol = ir.LL
		p.Ranks[0].TBs[0].Ops[0].Dsts[0].Packet = true
	}), want: []finding{at(diag.BadRef, 0, 0, 0, opPos(0, 0, 0))}},
	{name: "BadRef/packet-in-simple", prog: mutate(copy1(), func(p *ir.Program) {
		p.Ranks[0].Chunks[ir.Scratch] = 1
		p.Ranks[0].TBs[0].Ops[0].Dsts[0] = Packet(S(0))
	}), want: []finding{at(diag.BadRef, 0, 0, 0, opPos(0, 0, 0))}, parts: []string{"packets need the LL protocol"}},
	{name: "BadRef/remote-transfer", prog: mutate(transfer2(), func(p *ir.Program) {
		p.Ranks[0].Channels = []ir.Channel{{Peer: 1, PeerChannel: 0}}
		p.Ranks[1].Channels = []ir.Channel{{Peer: 0, PeerChannel: 0}}
		p.Ranks[0].TBs[0].Ops[0].Srcs[0].Chan = 0
	}), want: []finding{at(diag.BadRef, 0, 0, 0, opPos(0, 0, 0))}},
	{name: "WrongLevel/primitive", prog: func() *ir.Program { return transfer2().Build() }, opts: verify.Options{Level: ir.LevelPrimitive},
		want: []finding{
			at(diag.WrongLevel, 0, 0, 0, opPos(0, 0, 0)), at(diag.WrongLevel, 0, 0, 1, opPos(0, 0, 1)),
			at(diag.WrongLevel, 0, 0, 2, opPos(0, 0, 2)), at(diag.WrongLevel, 0, 0, 3, opPos(0, 0, 3)),
			at(diag.WrongLevel, 1, 0, 0, opPos(1, 0, 0)), at(diag.WrongLevel, 1, 0, 1, opPos(1, 0, 1)),
			at(diag.WrongLevel, 1, 0, 2, opPos(1, 0, 2)), at(diag.WrongLevel, 1, 0, 3, opPos(1, 0, 3)),
		}},
	{name: "WrongLevel/transfer", prog: func() *ir.Program { return twoRanks().Build() }, opts: verify.Options{Level: ir.LevelTransfer},
		want: []finding{
			at(diag.WrongLevel, 0, 0, 0, opPos(0, 0, 0)), at(diag.WrongLevel, 0, 0, 1, opPos(0, 0, 1)),
			at(diag.WrongLevel, 0, 0, 2, opPos(0, 0, 2)), at(diag.WrongLevel, 0, 0, 2, opPos(0, 0, 2)),
			at(diag.WrongLevel, 0, 0, 3, opPos(0, 0, 3)), at(diag.WrongLevel, 0, 0, 4, opPos(0, 0, 4)),
			at(diag.WrongLevel, 1, 0, 0, opPos(1, 0, 0)), at(diag.WrongLevel, 1, 0, 1, opPos(1, 0, 1)),
			at(diag.WrongLevel, 1, 0, 2, opPos(1, 0, 2)), at(diag.WrongLevel, 1, 0, 2, opPos(1, 0, 2)),
			at(diag.WrongLevel, 1, 0, 3, opPos(1, 0, 3)), at(diag.WrongLevel, 1, 0, 4, opPos(1, 0, 4)),
		}},
	{name: "BadPeer", prog: mutate(transfer2(), func(p *ir.Program) { p.Ranks[1].TBs[0].SendPeer = -1 }),
		want: []finding{at(diag.BadPeer, 1, 0, 0, opPos(1, 0, 0)), at(diag.BadPeer, 1, 0, 2, opPos(1, 0, 2))}},
	{name: "BadPeer/self", prog: mutate(transfer2(), func(p *ir.Program) { p.Ranks[1].TBs[0].RecvPeer = 1 }),
		want: []finding{at(diag.BadPeer, 1, 0, -1, tbPos(1, 0)), at(diag.BadPeer, 1, 0, 1, opPos(1, 0, 1)), at(diag.BadPeer, 1, 0, 3, opPos(1, 0, 3))}},
	{name: "BadBarrier/participants", prog: func() *ir.Program {
		b := copy1()
		rb := b.Rank(0)
		rb.PrimTB().Barrier(0, 2)
		return b.Build()
	}, want: []finding{at(diag.BadBarrier, 0, 1, 0, opPos(0, 1, 0))}, parts: []string{"executed by 1 threadblocks [1] but declares 2"}},
	{name: "BadBarrier/count", prog: func() *ir.Program {
		b := copy1()
		b.Rank(0).PrimTB().Barrier(0, 2).Barrier(0, 2)
		b.Rank(0).PrimTB().Barrier(0, 2)
		return b.Build()
	}, want: []finding{at(diag.BadBarrier, 0, 2, 0, opPos(0, 2, 0))}},
	{name: "UnknownOp", prog: mutate(copy1(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[0].Code = 99 }),
		want: []finding{at(diag.UnknownOp, 0, 0, 0, opPos(0, 0, 0))}},
	// synchronisation
	{name: "TransferMismatch/count", prog: mutate(transfer2(), func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[2].Count = 2; p.Ranks[0].TBs[0].Ops[2].Srcs[0].Off = 0 }),
		want: []finding{at(diag.TransferMismatch, 1, 0, 3, opPos(1, 0, 3))}, parts: []string{"transfer 1 from rank 0 on channel 0: recv of 1 chunks, but the matching rank 0 tb 0 step 2 (send) sends 2"}},
	{name: "TransferMismatch/number", prog: mutate(transfer2(), func(p *ir.Program) {
		p.Ranks[1].TBs[0].Ops[3].Code = ir.OpCopy
		p.Ranks[1].TBs[0].Ops[3].Srcs = []ir.Ref{I(0)}
	}),
		want: []finding{at(diag.TransferMismatch, 0, 0, 2, opPos(0, 0, 2))}, parts: []string{"rank 0 sends 2 transfers to rank 1 on channel 0, but rank 1 tb 0 receives only 1"}},
	{name: "TransferMismatch/unpaired", prog: mutate(transfer2(), func(p *ir.Program) { p.Ranks[1].TBs[0].Chan = 1 }),
		want: []finding{at(diag.TransferMismatch, 0, 0, 0, opPos(0, 0, 0)), at(diag.TransferMismatch, 0, 0, 1, opPos(0, 0, 1)),
			at(diag.TransferMismatch, 1, 0, 0, opPos(1, 0, 0)), at(diag.TransferMismatch, 1, 0, 1, opPos(1, 0, 1))},
		parts: []string{"rank 0 tb 0 sends to rank 1 on channel 0, but no threadblock of rank 1 receives from rank 0 on channel 0"}},
	{name: "SignalWait/waits", prog: mutate(twoRanks(), func(p *ir.Program) {
		p.Ranks[0].TBs[0].Ops = append(p.Ranks[0].TBs[0].Ops, ir.Op{Code: ir.OpWait, Chans: []int{0}})
	}), want: []finding{at(diag.SignalWait, 0, 0, 5, opPos(0, 0, 5))}, parts: []string{"rank 0 channel 0 is waited on 3 times per slice but rank 1 channel 0 signals it 2 times"}},
	{name: "SignalWait/signals", prog: mutate(twoRanks(), func(p *ir.Program) {
		p.Ranks[1].TBs[0].Ops = append(p.Ranks[1].TBs[0].Ops, ir.Op{Code: ir.OpSignal, Chans: []int{0}})
	}), want: []finding{at(diag.SignalWait, 1, 0, 5, opPos(1, 0, 5))}, parts: []string{"signals rank 0 channel 0 3 times per slice, but that end is waited on 2 times"}},
	{name: "SharedChannel", prog: mutate(twoRanks(), func(p *ir.Program) {
		p.Ranks[0].TBs = append(p.Ranks[0].TBs, ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1, Ops: []ir.Op{{Code: ir.OpFlush, Chans: []int{0}}}})
	}), want: []finding{at(diag.SharedChannel, 0, 1, 0, opPos(0, 1, 0))}},
	{name: "SharedChannel/transfer", prog: mutate(transfer2(), func(p *ir.Program) {
		tb := p.Ranks[1].TBs[0]
		tb.Ops = []ir.Op{tb.Ops[3]}
		p.Ranks[1].TBs[0].Ops = p.Ranks[1].TBs[0].Ops[:3]
		p.Ranks[1].TBs = append(p.Ranks[1].TBs, tb)
	}), want: []finding{at(diag.SharedChannel, 1, 1, -1, tbPos(1, 1))}},
	{name: "DepNotPublished", prog: func() *ir.Program {
		b := New(ir.AllReduce, 1, 2)
		rb := b.Rank(0).Chunks(2, 2, 0)
		rb.PrimTB().Copy(1, I(0), O(0))
		rb.PrimTB().Copy(1, O(0), O(1)).Dep(0, 0)
		return b.Build()
	}, want: []finding{at(diag.DepNotPublished, 0, 1, 0, opPos(0, 1, 0))}},
	{name: "BadDep/missing", prog: func() *ir.Program {
		b := New(ir.AllReduce, 1, 2)
		rb := b.Rank(0).Chunks(2, 2, 0)
		rb.PrimTB().Copy(1, I(0), O(0)).Publish()
		rb.PrimTB().Copy(1, I(1), O(1)).Dep(0, 4)
		return b.Build()
	}, want: []finding{at(diag.BadDep, 0, 1, 0, opPos(0, 1, 0))}},
	{name: "BadDep/own", prog: mutate(copy1(), func(p *ir.Program) {
		p.Ranks[0].TBs[0].Ops = append(p.Ranks[0].TBs[0].Ops, ir.Op{Code: ir.OpNop, Deps: []ir.Dep{{TB: 0, Step: 0}}})
	}), want: []finding{at(diag.BadDep, 0, 0, 1, opPos(0, 0, 1))}},
	{name: "PacketReuse", prog: mutate(llPairs(2), func(p *ir.Program) {
		p.Ranks[1].TBs[0].Ops = append(p.Ranks[1].TBs[0].Ops, p.Ranks[1].TBs[0].Ops[0].Clone())
	}), want: []finding{at(diag.PacketReuse, 1, 0, 3, opPos(1, 0, 3))}, parts: []string{"writes LL packet slot s[2] of rank 0, which rank 1 tb 0 step 0 (copy) also writes"}},
	// deadlock
	{name: "Deadlock/cycle", prog: mutate(twoRanks(), func(p *ir.Program) {
		for r := range p.Ranks {
			ops := p.Ranks[r].TBs[0].Ops
			ops[0], ops[1] = ops[1], ops[0]
		}
	}), want: []finding{at(diag.Deadlock, 0, 0, 0, opPos(0, 0, 0))},
		parts: []string{"deadlock: rank 0 tb 0 step 0 (wait) → rank 1 tb 0 step 0 (wait) → rank 0 tb 0 step 0 (wait)",
			"rank 0 tb 0 step 0 (wait) needs rank 1 tb 0 step 1 (signal)"}},
	{name: "Deadlock/barrier", prog: func() *ir.Program {
		b := copy1()
		b.Rank(0).PrimTB().Barrier(0, 2).Barrier(1, 2)
		b.Rank(0).PrimTB().Barrier(1, 2).Barrier(0, 2)
		return b.Build()
	}, want: []finding{at(diag.Deadlock, 0, 1, 0, opPos(0, 1, 0))}, parts: []string{"needs rank 0 tb 2 to arrive at the barrier"}},
	{name: "Deadlock/unsatisfiable", prog: mutate(llPairs(2), func(p *ir.Program) {
		p.Ranks[0].TBs[0].Ops = p.Ranks[0].TBs[0].Ops[1:]
	}), want: []finding{at(diag.Deadlock, 1, 0, 1, opPos(1, 0, 1))}, parts: []string{"rank 1 tb 0 step 1 (reduce) can never run: it reads LL packet slot s[0] of rank 1, which no op writes as a packet"}},
	{name: "Deadlock/transfer", prog: mutate(transfer2(), func(p *ir.Program) {
		for r := range p.Ranks {
			ops := p.Ranks[r].TBs[0].Ops
			ops[0], ops[1] = ops[1], ops[0]
		}
	}), want: []finding{at(diag.Deadlock, 0, 0, 0, opPos(0, 0, 0))},
		parts: []string{"rank 0 tb 0 step 0 (rrc) → rank 1 tb 0 step 0 (rrc) → rank 0 tb 0 step 0 (rrc)"}},
	// races
	{name: "Race", prog: func() *ir.Program {
		b := New(ir.AllReduce, 1, 1)
		rb := b.Rank(0).Chunks(1, 1, 0)
		rb.PrimTB().Copy(1, I(0), O(0))
		rb.PrimTB().Copy(1, I(0), O(0))
		return b.Build()
	}, want: []finding{at(diag.Race, 0, 1, 0, opPos(0, 1, 0))},
		parts: []string{"data race on rank 0's output chunk 0 (out-of-place): rank 0 tb 0 step 0 (copy) writes it and rank 0 tb 1 step 0 (copy) writes it"}},
	{name: "Race/inplace", prog: func() *ir.Program { p := PairsAllReducePrimitive(2); p.InPlace = true; return p },
		// In place, rank r's reduce overwrites its input chunk r (= output
		// chunk r) while the peer may still read it, and a peer reading it
		// after the overwrite would count the reduced value twice.
		want: []finding{at(diag.Race, 0, 0, 2, opPos(0, 0, 2)), at(diag.DoubleReduce, 0, 0, 2, opPos(0, 0, 2)),
			at(diag.Race, 0, 0, 3, opPos(0, 0, 3)), at(diag.DoubleReduce, 0, 0, 3, opPos(0, 0, 3))},
		parts: []string{"data race on rank 1's output chunk 0 (in-place): rank 1 tb 0 step 2 (reduce) writes it and rank 0 tb 0 step 2 (reduce) reads it"}},
	{name: "RaceAcrossLaunch/slices", prog: func() *ir.Program { return mailbox(false).Build() },
		want: []finding{warn(diag.RaceAcrossLaunch, 0, 0, 0, opPos(0, 0, 0)), warn(diag.RaceAcrossLaunch, 0, 0, 3, opPos(0, 0, 3))},
		parts: []string{"race between one slice and the next on rank 1's scratch chunk 0 (out-of-place): rank 1 tb 0 step 3 (copy) reads it and rank 0 tb 0 step 0 (copy) of the next slice writes it",
			"add a credit"}},
	// peer accesses to user buffers
	{name: "PeerAccessLate", prog: mutate(twoRanks(), func(p *ir.Program) {
		// no closing handshake
		for r := range p.Ranks {
			p.Ranks[r].TBs[0].Ops = p.Ranks[r].TBs[0].Ops[:3]
		}
	}), want: []finding{at(diag.PeerAccessLate, 0, 0, 2, opPos(0, 0, 2)), at(diag.PeerAccessLate, 1, 0, 2, opPos(1, 0, 2))},
		parts: []string{"rank 0 tb 0 step 2 (reduce) reads and writes rank 1's input and output (i[0:1] through channel 0, o[0:1] through channel 0), but no op of rank 1 in the same slice comes after it in happens-before order: rank 1's launch can complete"}},
	{name: "PeerAccessEarly", prog: mutate(twoRanks(), func(p *ir.Program) {
		// no opening handshake
		for r := range p.Ranks {
			p.Ranks[r].TBs[0].Ops = p.Ranks[r].TBs[0].Ops[2:]
		}
	}), want: []finding{at(diag.PeerAccessEarly, 0, 0, 0, opPos(0, 0, 0)), at(diag.PeerAccessEarly, 1, 0, 0, opPos(1, 0, 0))},
		parts: []string{"rank 0 tb 0 step 0 (reduce) reads and writes rank 1's input and output (i[0:1] through channel 0, o[0:1] through channel 0), but no op of rank 1 in the same slice happens before it: it can run before rank 1's launch starts"}},
	{name: "PeerAccessEarly/launches", prog: func() *ir.Program {
		// Rank 0 writes rank 1's output before anything of rank 1 has
		// run; this launch's copy may overwrite what rank 1 still reads
		// in the previous one.
		b := New(ir.Custom, 2, 1)
		b.Rank(0).Chunks(1, 2, 0)
		b.Rank(1).Chunks(1, 2, 0)
		c0, c1 := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
		b.Rank(0).PrimTB().Copy(1, I(0), Remote(O(0), c0)).Signal(c0)
		b.Rank(1).PrimTB().Wait(c1).Copy(1, O(0), O(1))
		return b.Build()
	}, want: []finding{warn(diag.Unverifiable, -1, -1, -1, progPos), at(diag.PeerAccessEarly, 0, 0, 0, opPos(0, 0, 0))},
		parts: []string{"rank 0 tb 0 step 0 (copy) writes rank 1's output (o[0:1] through channel 0), but no op of rank 1 in the same slice happens before it"}},
	{name: "PeerAccessEarly/init", prog: mutate(twoRanks(), func(p *ir.Program) {
		// Init 1 on both ends: each wait is satisfied by the peer's
		// signal of the previous handshake, so neither handshake orders
		// anything within a launch.
		for r := range p.Ranks {
			p.Ranks[r].Channels[0].Init = 1
		}
	}), want: []finding{at(diag.PeerAccessLate, 0, 0, 2, opPos(0, 0, 2)), at(diag.PeerAccessEarly, 0, 0, 2, opPos(0, 0, 2)),
		at(diag.PeerAccessLate, 1, 0, 2, opPos(1, 0, 2)), at(diag.PeerAccessEarly, 1, 0, 2, opPos(1, 0, 2))}},
	{name: "PeerAccess/no-ops", prog: func() *ir.Program {
		// Rank 1 runs nothing: nothing can order rank 0's write into its
		// output with its launch.
		b := New(ir.Custom, 2, 1)
		b.Rank(0).Chunks(1, 1, 0)
		b.Rank(1).Chunks(1, 1, 0)
		c0, _ := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
		b.Rank(0).PrimTB().Copy(1, I(0), O(0), Remote(O(0), c0))
		return b.Build()
	}, want: []finding{warn(diag.Unverifiable, -1, -1, -1, progPos),
		at(diag.PeerAccessLate, 0, 0, 0, opPos(0, 0, 0)), at(diag.PeerAccessEarly, 0, 0, 0, opPos(0, 0, 0))},
		parts: []string{"rank 0 tb 0 step 0 (copy) writes rank 1's output (o[0:1] through channel 0), but no op of rank 1 in the same slice happens before it (rank 1 runs no ops)"}},
	// semantics
	{name: "Postcondition", prog: func() *ir.Program {
		b := New(ir.AllReduce, 1, 2)
		b.Rank(0).Chunks(2, 2, 0).PrimTB().Copy(1, I(0), O(0)).Copy(1, I(0), O(1))
		return b.Build()
	}, want: []finding{at(diag.Postcondition, 0, 0, 1, opPos(0, 0, 1))},
		parts: []string{"allreduce: rank 0 output chunk 1 holds {(0, 0)}, want {(0, 1)}; last written by rank 0 tb 0 step 1 (copy)"}},
	{name: "Postcondition/unwritten", prog: func() *ir.Program {
		b := New(ir.AllReduce, 1, 2)
		b.Rank(0).Chunks(2, 2, 0).PrimTB().Copy(1, I(0), O(0))
		return b.Build()
	},
		want: []finding{at(diag.Postcondition, 0, -1, -1, rankPos(0))}, parts: []string{"rank 0 output chunk 1 holds nothing (never written), want {(0, 1)}; no op writes it"}},
	{name: "DoubleReduce", prog: func() *ir.Program {
		b := New(ir.AllReduce, 2, 1)
		b.Connect(0, 1, ir.MemoryChannel, 0, 0)
		for r := 0; r < 2; r++ {
			b.Rank(r).Chunks(1, 1, 0).PrimTB().Signal(0).Wait(0).
				Reduce(1, []ir.Ref{I(0), Remote(I(0), 0), I(0)}, O(0)).Signal(0).Wait(0)
		}
		return b.Build()
	}, want: []finding{at(diag.DoubleReduce, 0, 0, 2, opPos(0, 0, 2)), at(diag.DoubleReduce, 1, 0, 2, opPos(1, 0, 2))},
		parts: []string{"combines {(0..1, 0)} with {(0, 0)} (from rank 0's input chunk 0), which share contributions"}},
	{name: "UninitRead", prog: mutate(copy1(), func(p *ir.Program) {
		p.Ranks[0].Chunks[ir.Scratch] = 1
		p.Ranks[0].TBs[0].Ops[0].Srcs[0] = S(0)
	}), want: []finding{at(diag.UninitRead, 0, 0, 0, opPos(0, 0, 0))}, parts: []string{"reads rank 0's scratch chunk 0, which holds no value"}},
	{name: "Unverifiable", prog: mutate(copy1(), func(p *ir.Program) {
		p.Collective = ir.Custom
		p.Ranks[0].Chunks = [3]int64{1, 1, 0}
	}), want: []finding{warn(diag.Unverifiable, -1, -1, -1, progPos)}},
}

// TestCodes runs one minimal bad program per diagnostic code and checks
// the exact findings: code, severity, rank, threadblock, step and position.
func TestCodes(t *testing.T) {
	for _, tc := range codeCases {
		t.Run(tc.name, func(t *testing.T) {
			ds := verifyPlaced(t, tc.prog(), tc.opts)
			wantFindings(t, ds, tc.want...)
			if len(tc.parts) > 0 && len(tc.want) > 0 {
				code := tc.want[0].Code
				if code == diag.Unverifiable {
					code = tc.want[len(tc.want)-1].Code
				}
				wantMsg(t, ds, code, tc.parts...)
			}
		})
	}
}

// TestEveryCodeTested checks that every code the verifier can report has a
// case in codeCases.
func TestEveryCodeTested(t *testing.T) {
	tested := map[diag.Code]bool{}
	for _, tc := range codeCases {
		for _, f := range tc.want {
			tested[f.Code] = true
		}
	}
	for _, code := range verify.Codes() {
		if !tested[code] {
			t.Errorf("no test case reports %s", code)
		}
	}
}
