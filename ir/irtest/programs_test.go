package irtest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
)

func TestFixturesPostcondition(t *testing.T) {
	for n := 1; n <= 8; n++ {
		allreduceWant := make([][]Value, n)
		allgatherWant := make([][]Value, n)
		for r := range n {
			for j := range n {
				v := Value{}
				for q := range n {
					v[Contrib{Rank: q, Chunk: int64(j)}] = 1
				}
				allreduceWant[r] = append(allreduceWant[r], v)
				allgatherWant[r] = append(allgatherWant[r], Value{{Rank: j, Chunk: 0}: 1})
			}
		}
		cases := []struct {
			p    *ir.Program
			want [][]Value
		}{
			{RingAllReduce(n, ir.Simple), allreduceWant},
			{RingAllReduce(n, ir.LL), allreduceWant},
			{PairsAllReducePrimitive(n), allreduceWant},
			{AllGatherRing(n), allgatherWant},
		}
		for _, c := range cases {
			for _, inPlace := range Arrangements(c.p) {
				t.Run(fmt.Sprintf("%s/%v/inplace=%v", c.p.Name, c.p.Protocol, inPlace), func(t *testing.T) {
					res, err := Simulate(c.p, SimOptions{InPlace: inPlace})
					if err != nil && !errors.Is(err, ErrPostcondition) {
						t.Fatal(err)
					}
					got := make([][]Value, n)
					for r := range n {
						got[r] = res.Output(r, 0, 0, c.p.Ranks[r].Chunks[ir.Output])
					}
					if d := cmp.Diff(c.want, got); d != "" {
						t.Errorf("postcondition (-want +got):\n%s", d)
					}
				})
			}
		}
	}
}

func TestRingAllReduceExact(t *testing.T) {
	// The 3-rank ring, spelled out (rank r: send r+1, recv r-1, chan 0).
	want := &ir.Program{
		Name: "ring_allreduce_3", Collective: ir.AllReduce, NRanks: 3, Root: -1, Protocol: ir.Simple,
		ChunksPerBlock: 3, InPlace: true, OutOfPlace: true,
	}
	for r := int64(0); r < 3; r++ {
		m := func(x int64) int64 { return (x%3 + 3) % 3 }
		want.Ranks = append(want.Ranks, ir.Rank{
			Chunks: [3]int64{3, 3, 0},
			TBs: []ir.Threadblock{{SendPeer: int(m(r + 1)), RecvPeer: int(m(r - 1)), Chan: 0, Ops: []ir.Op{
				{Code: ir.OpSend, Srcs: []ir.Ref{I(r)}, Count: 1},
				{Code: ir.OpRecvReduceSend, Srcs: []ir.Ref{I(m(r - 1))}, Count: 1},
				{Code: ir.OpRecvReduceCopySend, Srcs: []ir.Ref{I(m(r + 1))}, Dsts: []ir.Ref{O(m(r + 1))}, Count: 1},
				{Code: ir.OpRecvCopySend, Dsts: []ir.Ref{O(r)}, Count: 1},
				{Code: ir.OpRecv, Dsts: []ir.Ref{O(m(r + 2))}, Count: 1},
			}}},
		})
	}
	if d := Diff(want, RingAllReduce(3, ir.Simple)); d != "" {
		t.Errorf("RingAllReduce(3) (-want +got):\n%s", d)
	}
}

func TestPairsChannelsPaired(t *testing.T) {
	for n := 2; n <= 6; n++ {
		p := PairsAllReducePrimitive(n)
		for r := range n {
			if got := len(p.Ranks[r].Channels); got != n-1 {
				t.Fatalf("n=%d rank %d: %d channels, want %d", n, r, got, n-1)
			}
			for c, ch := range p.Ranks[r].Channels {
				back := p.Ranks[ch.Peer].Channels[ch.PeerChannel]
				if back.Peer != r || back.PeerChannel != c || ch.Peer == r {
					t.Errorf("n=%d rank %d channel %d = %+v does not pair (other end %+v)", n, r, c, ch, back)
				}
				if c != PairsChannel(r, ch.Peer) {
					t.Errorf("n=%d rank %d channel %d goes to %d, PairsChannel says %d", n, r, c, ch.Peer, PairsChannel(r, ch.Peer))
				}
			}
		}
	}
}

func TestBuilder(t *testing.T) {
	b := New(ir.Broadcast, 2, 2).Name("b").Protocol(ir.LL).Root(1).NLocalRanks(2).
		Arrangements(true, false).Window(1024, 4096).Threads(512).SliceBytes(1<<20).Meta("src", "test")
	a0, a1 := b.Connect(0, 1, ir.PortChannel, 3, 0)
	b.Rank(0).Chunks(2, 2, 4).PrimTB().
		Copy(2, I(0), Packet(Remote(S(0), a0))).Publish().
		Signal(a0).Dep(0, 0).
		Barrier(1, 2).Flush(a0).Wait(a0).Nop()
	b.Rank(1).TB(0, 0, a1).Reduce(1, []ir.Ref{O(0), I(1)}, O(0), S(1))
	got := b.Build()
	want := &ir.Program{
		Name: "b", Collective: ir.Broadcast, NRanks: 2, NLocalRanks: 2, Root: 1, Protocol: ir.LL,
		ChunksPerBlock: 2, InPlace: true, MinBytes: 1024, MaxBytes: 4096, NumThreads: 512, SliceBytes: 1 << 20,
		Meta: map[string]string{"src": "test"},
		Ranks: []ir.Rank{
			{Chunks: [3]int64{2, 2, 4},
				Channels: []ir.Channel{{Peer: 1, PeerChannel: 0, Type: ir.PortChannel, Init: 3}},
				TBs: []ir.Threadblock{{SendPeer: -1, RecvPeer: -1, Chan: -1, Ops: []ir.Op{
					{Code: ir.OpCopy, Srcs: []ir.Ref{I(0)}, Dsts: []ir.Ref{{Buf: ir.Scratch, Chan: 0, Packet: true}}, Count: 2, Publish: true},
					{Code: ir.OpSignal, Chans: []int{0}, Deps: []ir.Dep{{TB: 0, Step: 0}}},
					{Code: ir.OpBarrier, Barrier: 1, BarrierTBs: 2},
					{Code: ir.OpFlush, Chans: []int{0}},
					{Code: ir.OpWait, Chans: []int{0}},
					{Code: ir.OpNop},
				}}}},
			{Channels: []ir.Channel{{Peer: 0, PeerChannel: 0, Type: ir.PortChannel}},
				TBs: []ir.Threadblock{{SendPeer: 0, RecvPeer: 0, Chan: 0, Ops: []ir.Op{
					{Code: ir.OpReduce, Srcs: []ir.Ref{O(0), I(1)}, Dsts: []ir.Ref{O(0), S(1)}, Count: 1},
				}}}},
		},
	}
	if d := Diff(want, got); d != "" {
		t.Errorf("builder (-want +got):\n%s", d)
	}
	// Build returns copies.
	got.Ranks[0].TBs[0].Ops[0].Srcs[0].Off = 9
	if b.Program().Ranks[0].TBs[0].Ops[0].Srcs[0].Off != 0 {
		t.Error("Build shares op slices with the builder")
	}
	// Self-connection pairs the two ends on one rank.
	s := New(ir.Custom, 1, 1)
	c0, c1 := s.Connect(0, 0, ir.MemoryChannel, 0, 0)
	chs := s.Program().Ranks[0].Channels
	if c0 != 0 || c1 != 1 || chs[0].PeerChannel != 1 || chs[1].PeerChannel != 0 {
		t.Errorf("self connection: %d %d %+v", c0, c1, chs)
	}
}
