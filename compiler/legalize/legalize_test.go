package legalize

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

func mod(a, n int) int { return ((a % n) + n) % n }

// multiChannelRing is the ring allreduce of irtest.RingAllReduce run on
// nch transfer channels at once: C = n·nch chunks per block, and channel h
// (threadblock h of every rank) runs the single-channel ring on chunks
// h·n .. h·n+n-1.
func multiChannelRing(n, nch int, proto ir.Protocol) *ir.Program {
	C := int64(n * nch)
	b := irtest.New(ir.AllReduce, n, C).Name(fmt.Sprintf("ring_allreduce_%dx%d", n, nch)).
		Protocol(proto).Arrangements(true, true)
	for r := 0; r < n; r++ {
		b.Rank(r).Chunks(C, C, 0)
		for h := 0; h < nch; h++ {
			o := int64(h * n)
			tb := b.Rank(r).TB(mod(r+1, n), mod(r-1, n), h)
			tb.Send(1, irtest.I(o+int64(r)))
			for k := 1; k <= n-2; k++ {
				tb.RRS(1, irtest.I(o+int64(mod(r-k, n))))
			}
			c := o + int64(mod(r+1, n))
			tb.RRCS(1, irtest.I(c), irtest.O(c))
			for j := 0; j <= n-3; j++ {
				tb.RCS(1, irtest.O(o+int64(mod(r-j, n))))
			}
			tb.Recv(1, irtest.O(o+int64(mod(r+2, n))))
		}
	}
	return b.Build()
}

// splitRing is a ring allreduce whose reduce-scatter (threadblock 0,
// channel 0) and allgather (threadblock 1, channel 1) are separate
// threadblocks joined by a dependency: threadblock 1 starts after step n-1
// of threadblock 0 (the rrc that completes chunk r+1), which publishes.
// It exercises Deps/Publish moving and step renumbering. Rank 0 also
// declares 3 scratch chunks that the program itself uses as a staging
// buffer, so the slots must start after them.
func splitRing(n int, proto ir.Protocol) *ir.Program {
	C := int64(n)
	b := irtest.New(ir.AllReduce, n, C).Name(fmt.Sprintf("split_ring_%d", n)).
		Protocol(proto).Arrangements(true, true)
	for r := 0; r < n; r++ {
		rb := b.Rank(r).Chunks(C, C, 0)
		if r == 0 {
			rb.Chunks(C, C, 3)
		}
		rs := rb.TB(mod(r+1, n), mod(r-1, n), 0)
		if r == 0 {
			// Stage the first send through the declared scratch.
			rs.Copy(1, irtest.I(0), irtest.S(2))
			rs.Send(1, irtest.S(2))
		} else {
			rs.Send(1, irtest.I(int64(r)))
		}
		for k := 1; k <= n-2; k++ {
			rs.RRS(1, irtest.I(int64(mod(r-k, n))))
		}
		c := int64(mod(r+1, n))
		rs.RRC(1, irtest.I(c), irtest.O(c)).Publish()
		last := rs.Len() - 1
		ag := rb.TB(mod(r+1, n), mod(r-1, n), 1)
		ag.Nop().Dep(0, last)
		ag.Send(1, irtest.O(c))
		for j := 0; j <= n-3; j++ {
			ag.RCS(1, irtest.O(int64(mod(r-j, n))))
		}
		ag.Recv(1, irtest.O(int64(mod(r+2, n)))).Publish()
	}
	return b.Build()
}

type namedProg struct {
	name string
	p    *ir.Program
}

func testPrograms() []namedProg {
	var ps []namedProg
	add := func(p *ir.Program) { ps = append(ps, namedProg{fmt.Sprintf("%s/%v", p.Name, p.Protocol), p}) }
	for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
		for _, n := range []int{2, 3, 4, 5, 8} {
			add(irtest.RingAllReduce(n, proto))
		}
		for _, n := range []int{2, 3, 4} {
			add(multiChannelRing(n, 2, proto))
		}
		add(multiChannelRing(3, 4, proto))
		for _, n := range []int{2, 3, 4} {
			add(splitRing(n, proto))
		}
	}
	for _, n := range []int{2, 3, 5} {
		add(irtest.AllGatherRing(n))
		p := irtest.AllGatherRing(n)
		p.Protocol = ir.LL
		add(p)
	}
	return ps
}

// TestLegalizeSimulate checks that every legalised program computes its
// collective over two slices and two launches, in both arrangements, under
// several interleavings (irtest.Simulate running one op at a time).
func TestLegalizeSimulate(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for _, np := range testPrograms() {
		q, ds := Legalize(np.p)
		if len(ds) > 0 {
			t.Fatalf("%s: %v", np.name, ds)
		}
		if q.Level() != ir.LevelPrimitive {
			t.Fatalf("%s: legalised program still has transfer ops", np.name)
		}
		for _, inPlace := range irtest.Arrangements(np.p) {
			for seed := range seeds {
				t.Run(fmt.Sprintf("%s/inplace=%v/seed=%d", np.name, inPlace, seed), func(t *testing.T) {
					_, err := irtest.Simulate(q, irtest.SimOptions{InPlace: inPlace, Slices: 2, Launches: 2, Schedule: irtest.RandomSteps, Seed: uint64(seed)})
					if errors.Is(err, irtest.ErrPostcondition) {
						t.Error(err)
					} else if err != nil {
						t.Fatal(err)
					}
				})
			}
		}
	}
}

// The simulator must catch the bugs it exists for: with too few credits a
// slot is overwritten before its reader is done (seen as a wrong value
// under some interleaving), and with the signals removed it deadlocks.
func TestSimulatorCatchesBrokenLegalisation(t *testing.T) {
	p := irtest.RingAllReduce(4, ir.Simple)
	q, ds := Legalize(p)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	// Every slot shared: all transfers of a connection use slot 0 and the
	// credits allow them all in flight.
	broken := q.Clone()
	for r := range broken.Ranks {
		for t := range broken.Ranks[r].TBs {
			for i := range broken.Ranks[r].TBs[t].Ops {
				op := &broken.Ranks[r].TBs[t].Ops[i]
				for k := range op.Srcs {
					if op.Srcs[k].Buf == ir.Scratch {
						op.Srcs[k].Off = 0
					}
				}
				for k := range op.Dsts {
					if op.Dsts[k].Buf == ir.Scratch {
						op.Dsts[k].Off = 0
					}
				}
			}
		}
	}
	failed := false
	for seed := range 20 {
		if _, err := irtest.Simulate(broken, irtest.SimOptions{Slices: 2, Launches: 1, Schedule: irtest.RandomSteps, Seed: uint64(seed)}); err != nil {
			failed = true
			break
		}
	}
	if !failed {
		t.Error("a shared slot went unnoticed in 20 interleavings")
	}
	// No credits back: deadlock in the second slice.
	nocredit := q.Clone()
	for r := range nocredit.Ranks {
		for c := range nocredit.Ranks[r].Channels {
			if nocredit.Ranks[r].Channels[c].Init > 0 {
				nocredit.Ranks[r].Channels[c].Init = 1
			}
		}
	}
	if _, err := irtest.Simulate(nocredit, irtest.SimOptions{Slices: 2, Launches: 1, Schedule: irtest.RandomSteps, Seed: 0}); err == nil {
		t.Error("too few credits did not deadlock")
	}
}

// TestLegalizeExact pins the expansion of the 2-rank ring (ir.md §7) op by
// op, for Simple and LL.
func TestLegalizeExact(t *testing.T) {
	s := irtest.S
	rem := irtest.Remote
	pk := irtest.Packet
	for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
		t.Run(proto.String(), func(t *testing.T) {
			p := irtest.RingAllReduce(2, proto)
			want := irtest.New(ir.AllReduce, 2, 2).Name("ring_allreduce_2").Protocol(proto).Arrangements(true, true)
			for r := 0; r < 2; r++ {
				// Scratch: two slots of one chunk for the inbound connection.
				want.Rank(r).Chunks(2, 2, 2)
				init := int64(2)
				slot := func(x ir.Ref) ir.Ref { return x }
				if proto == ir.LL {
					init = 0
					slot = pk
				}
				// End 0: sending end of (r→r+1) with T = 2 credits; end 1:
				// receiving end of (r+1→r). Both ranks number alike.
				want.Rank(r).Channel(ir.Channel{Peer: 1 - r, PeerChannel: 1, Init: init})
				want.Rank(r).Channel(ir.Channel{Peer: 1 - r, PeerChannel: 0})
				o := int64(r)
				tb := want.Rank(r).PrimTB()
				if proto == ir.Simple {
					tb.Wait(0).Copy(1, irtest.I(o), rem(s(0), 0)).Signal(0)
					tb.Wait(1, 0).Reduce(1, []ir.Ref{irtest.I(1 - o), s(0)}, irtest.O(1-o), rem(s(1), 0)).Signal(0, 1)
					tb.Wait(1).Copy(1, s(1), irtest.O(o)).Signal(1)
				} else {
					tb.Copy(1, irtest.I(o), rem(pk(s(0)), 0))
					tb.Reduce(1, []ir.Ref{irtest.I(1 - o), slot(s(0))}, irtest.O(1-o), rem(pk(s(1)), 0))
					tb.Copy(1, slot(s(1)), irtest.O(o))
				}
			}
			got, ds := Legalize(p)
			if len(ds) > 0 {
				t.Fatal(ds)
			}
			if d := irtest.Diff(want.Build(), got); d != "" {
				t.Errorf("Legalize (-want +got):\n%s", d)
			}
		})
	}
}

// TestLegalizeDepsAndScratch checks Deps/Publish placement, renumbering and
// the slot layout after declared scratch on the split ring.
func TestLegalizeDepsAndScratch(t *testing.T) {
	p := splitRing(3, ir.Simple)
	q, ds := Legalize(p)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	r0 := q.Ranks[0]
	// Rank 0: declared 3 scratch chunks; inbound connections from rank 2 on
	// channels 0 and 1, each with T = 2 transfers of 1 chunk per slice
	// (channel 0: rank 2's send and rrs; channel 1: its send and rcs).
	if got, want := r0.Chunks[ir.Scratch], int64(3+2+2); got != want {
		t.Errorf("rank 0 scratch = %d chunks, want %d", got, want)
	}
	cost, ds := ScratchCost(p)
	if len(ds) > 0 || cost[0] != 4 || cost[1] != 4 {
		t.Errorf("ScratchCost = %v, %v; want 4 chunks on every rank", cost, ds)
	}
	// Rank 0 ends, by (peer, channel, send before receive): peer 1 ch 0
	// send, peer 1 ch 1 send, peer 2 ch 0 recv, peer 2 ch 1 recv. Every
	// rank numbers alike, so rank 1's receiving ends from rank 0 are 0 and
	// 1 (peer 0 sorts first), and so are rank 2's sending ends to rank 0.
	wantCh := []ir.Channel{
		{Peer: 1, PeerChannel: 0, Init: 2},
		{Peer: 1, PeerChannel: 1, Init: 2},
		{Peer: 2, PeerChannel: 0},
		{Peer: 2, PeerChannel: 1},
	}
	if d := cmp.Diff(wantCh, r0.Channels, irtest.CmpOpts...); d != "" {
		t.Errorf("rank 0 channels (-want +got):\n%s", d)
	}
	// Threadblock 0 of rank 0: copy (1 op), send (3), rrs (3), rrc (3, the
	// last publishes). Threadblock 1: nop with the dependency on the rrc,
	// now step 1+3+3+3-1 = 9.
	tb0, tb1 := r0.TBs[0], r0.TBs[1]
	if len(tb0.Ops) != 10 {
		t.Fatalf("tb 0 has %d ops, want 10", len(tb0.Ops))
	}
	for i, op := range tb0.Ops {
		if op.Publish != (i == 9) {
			t.Errorf("tb 0 step %d publish = %v", i, op.Publish)
		}
	}
	if d := cmp.Diff([]ir.Dep{{TB: 0, Step: 9}}, tb1.Ops[0].Deps); d != "" {
		t.Errorf("tb 1 step 0 deps (-want +got):\n%s", d)
	}
	if last := tb1.Ops[len(tb1.Ops)-1]; last.Code != ir.OpSignal || !last.Publish {
		t.Errorf("tb 1 last op = %v publish %v, want a publishing signal", last.Code, last.Publish)
	}
	// Slots: rank 0's inbound on channel 0 starts after the declared 3
	// chunks, on channel 1 after that connection's 2 slots. The rrc of
	// tb 0 (the second transfer received on channel 0) reads slot 1.
	rrc := tb0.Ops[8]
	if d := cmp.Diff([]ir.Ref{irtest.I(1), irtest.S(3 + 1)}, rrc.Srcs); d != "" {
		t.Errorf("rrc srcs (-want +got):\n%s", d)
	}
	// The recv of tb 1 reads the second slot of the channel-1 inbound.
	recvCopy := tb1.Ops[len(tb1.Ops)-2]
	if d := cmp.Diff([]ir.Ref{irtest.S(5 + 1)}, recvCopy.Srcs); d != "" {
		t.Errorf("recv srcs (-want +got):\n%s", d)
	}
	// Rank 1 sends its reduce-scatter to rank 2 through its end 2 (peer 2,
	// channel 0); the slot is on rank 2, whose inbound from rank 1 on
	// channel 0 starts at 0 (rank 2 declares no scratch).
	send := q.Ranks[1].TBs[0].Ops[1]
	if d := cmp.Diff([]ir.Ref{irtest.Remote(irtest.S(0), 2)}, send.Dsts); d != "" {
		t.Errorf("rank 1 send dsts (-want +got):\n%s", d)
	}
	// The input is untouched.
	if d := irtest.Diff(splitRing(3, ir.Simple), p); d != "" {
		t.Errorf("Legalize modified its input:\n%s", d)
	}
}

func TestLegalizePrimitiveUnchanged(t *testing.T) {
	p := irtest.PairsAllReducePrimitive(4)
	q, ds := Legalize(p)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	if d := irtest.Diff(p, q); d != "" {
		t.Errorf("primitive program changed (-in +out):\n%s", d)
	}
	q.Ranks[0].TBs[0].Ops[0].Chans[0] = 99
	if p.Ranks[0].TBs[0].Ops[0].Chans[0] == 99 {
		t.Error("result shares memory with the input")
	}
}

func TestLegalizeNoAliasing(t *testing.T) {
	p := splitRing(3, ir.Simple)
	q, _ := Legalize(p)
	for r := range q.Ranks {
		for t := range q.Ranks[r].TBs {
			for i := range q.Ranks[r].TBs[t].Ops {
				op := &q.Ranks[r].TBs[t].Ops[i]
				for k := range op.Srcs {
					op.Srcs[k].Off += 1000
				}
				for k := range op.Dsts {
					op.Dsts[k].Off += 1000
				}
				for k := range op.Deps {
					op.Deps[k].Step += 1000
				}
			}
		}
	}
	if d := irtest.Diff(splitRing(3, ir.Simple), p); d != "" {
		t.Errorf("changing the output changed the input:\n%s", d)
	}
	// And appending to one op's slice never spills into the next op's.
	q2, _ := Legalize(p)
	op := &q2.Ranks[0].TBs[0].Ops[0]
	before := q2.Ranks[0].TBs[0].Ops[1].Clone()
	op.Srcs = append(op.Srcs, irtest.I(77))
	op.Dsts = append(op.Dsts, irtest.I(77))
	if d := cmp.Diff(before, q2.Ranks[0].TBs[0].Ops[1]); d != "" {
		t.Errorf("append spilled into the next op:\n%s", d)
	}
}

func codes(ds []diag.Diagnostic) []diag.Code {
	var cs []diag.Code
	for _, d := range ds {
		cs = append(cs, d.Code)
	}
	return cs
}

func TestLegalizeErrors(t *testing.T) {
	cases := []struct {
		name string
		mut  func(p *ir.Program)
		want []diag.Code
	}{
		{"send peer out of range", func(p *ir.Program) { p.Ranks[1].TBs[0].SendPeer = 7 }, []diag.Code{diag.BadPeer, diag.BadPeer, diag.BadPeer, diag.BadPeer}},
		{"recv peer is self", func(p *ir.Program) { p.Ranks[0].TBs[0].RecvPeer = 0 }, []diag.Code{diag.BadPeer, diag.BadPeer, diag.BadPeer, diag.BadPeer}},
		{"send without srcs", func(p *ir.Program) { p.Ranks[0].TBs[0].Ops[0].Srcs = nil }, []diag.Code{diag.BadCount}},
		{"zero count", func(p *ir.Program) { p.Ranks[2].TBs[0].Ops[1].Count = 0 }, []diag.Code{diag.BadCount}},
		{"unmatched channel", func(p *ir.Program) { p.Ranks[1].TBs[0].Chan = 5 }, []diag.Code{diag.TransferMismatch, diag.TransferMismatch, diag.TransferMismatch, diag.TransferMismatch}},
		{"count mismatch", func(p *ir.Program) {
			p.Ranks[0].TBs[0].Ops[0].Count = 2
		}, []diag.Code{diag.TransferMismatch}},
		{"transfer number mismatch", func(p *ir.Program) {
			ops := p.Ranks[1].TBs[0].Ops
			p.Ranks[1].TBs[0].Ops = ops[:len(ops)-1]
		}, []diag.Code{diag.TransferMismatch}},
		{"two senders", func(p *ir.Program) {
			p.Ranks[0].TBs = append(p.Ranks[0].TBs, ir.Threadblock{SendPeer: 1, RecvPeer: -1, Chan: 0,
				Ops: []ir.Op{{Code: ir.OpSend, Srcs: []ir.Ref{irtest.I(0)}, Count: 1}}})
		}, []diag.Code{diag.TransferMismatch}},
		{"dep on missing step", func(p *ir.Program) {
			p.Ranks[0].TBs[0].Ops[1].Deps = []ir.Dep{{TB: 0, Step: 40}}
		}, []diag.Code{diag.BadDep}},
		{"dep on missing tb", func(p *ir.Program) {
			p.Ranks[0].TBs[0].Ops[1].Deps = []ir.Dep{{TB: -1, Step: 0}}
		}, []diag.Code{diag.BadDep}},
		{"negative scratch", func(p *ir.Program) { p.Ranks[2].Chunks[ir.Scratch] = -4 }, []diag.Code{diag.BadGeometry}},
		{"scratch overflow", func(p *ir.Program) {
			for r := range p.Ranks {
				for i := range p.Ranks[r].TBs[0].Ops {
					p.Ranks[r].TBs[0].Ops[i].Count = 1 << 62
				}
			}
		}, []diag.Code{diag.TooLarge}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := irtest.RingAllReduce(3, ir.Simple)
			p.File = "ring.json"
			c.mut(p)
			q, ds := Legalize(p)
			if q != nil {
				t.Errorf("got a program despite errors")
			}
			if d := cmp.Diff(c.want, codes(ds)); d != "" {
				t.Errorf("codes (-want +got):\n%s\n%v", d, ds)
			}
			for _, d := range ds {
				if d.Severity != diag.Error || d.File != "ring.json" || d.Hint == "" || d.Msg == "" {
					t.Errorf("incomplete diagnostic %+v", d)
				}
			}
			if _, ds2 := ScratchCost(p); len(ds2) == 0 && c.want[0] != diag.BadDep {
				t.Errorf("ScratchCost accepted the program")
			}
		})
	}
	if q, ds := Legalize(nil); q != nil || len(ds) != 1 || ds[0].Code != diag.BadValue {
		t.Errorf("Legalize(nil) = %v, %v", q, ds)
	}
}

// TestLegalizeDiagnosticPosition checks that errors point at the op.
func TestLegalizeDiagnosticPosition(t *testing.T) {
	p := irtest.RingAllReduce(3, ir.Simple)
	p.File = "ring.xml"
	p.Ranks[0].TBs[0].Ops[0].Pos = ir.Pos{Line: 12, Col: 5}
	p.Ranks[0].TBs[0].Ops[0].Srcs = nil
	_, ds := Legalize(p)
	if len(ds) != 1 {
		t.Fatalf("got %v", ds)
	}
	want := diag.Diagnostic{Code: diag.BadCount, Severity: diag.Error, File: "ring.xml", Line: 12, Col: 5, Rank: 0, TB: 0, Step: 0,
		Msg: "send takes 1 source and 0 destination refs, not 0 and 0", Hint: ds[0].Hint}
	if d := cmp.Diff(want, ds[0]); d != "" {
		t.Errorf("diagnostic (-want +got):\n%s", d)
	}
}
