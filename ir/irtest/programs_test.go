package irtest

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
)

// val is a symbolic chunk value: how many times each (rank, input chunk)
// contribution was combined into it.
type val map[[2]int64]int

func combine(vs ...val) val {
	out := val{}
	for _, v := range vs {
		for k, n := range v {
			out[k] += n
		}
	}
	return out
}

type connKey struct{ from, to, ch int }

// simulate runs p symbolically (one slice, one launch) under the given
// arrangement, executing any runnable op round-robin, and returns each
// rank's output chunks. It fails the test on a stuck program, a read of an
// undefined chunk or a transfer count mismatch. It is a test oracle for the
// fixtures only (no races, no packets, no barriers or deps).
func simulate(t *testing.T, p *ir.Program, inPlace bool) [][]val {
	t.Helper()
	n := p.NRanks
	pl := ir.Placement{Collective: p.Collective, NRanks: n, ChunksPerBlock: p.ChunksPerBlock, InPlace: inPlace}
	store := make([][ir.NumBufKinds]map[int64]val, n)
	for r := range store {
		for k := range store[r] {
			store[r][k] = map[int64]val{}
		}
		for c := int64(0); c < p.Ranks[r].Chunks[ir.Input]; c++ {
			k, cc := pl.Resolve(r, ir.Input, c)
			store[r][k][cc] = val{{int64(r), c}: 1}
		}
	}
	at := func(r int, ref ir.Ref, t int64) (int, ir.BufKind, int64) {
		if ref.Chan >= 0 {
			r = p.Ranks[r].Channels[ref.Chan].Peer
		}
		k, c := pl.Resolve(r, ref.Buf, ref.Off+t)
		return r, k, c
	}
	read := func(r int, ref ir.Ref, i int64) val {
		rr, k, c := at(r, ref, i)
		v, ok := store[rr][k][c]
		if !ok {
			t.Fatalf("rank %d reads undefined %v chunk %d of rank %d", r, k, c, rr)
		}
		return v
	}
	write := func(r int, ref ir.Ref, i int64, v val) {
		rr, k, c := at(r, ref, i)
		store[rr][k][c] = v
	}
	queues := map[connKey][][]val{}
	inbound := make([][]int64, n)
	expected := make([][]int64, n)
	for r := range n {
		for _, c := range p.Ranks[r].Channels {
			inbound[r] = append(inbound[r], c.Init)
		}
		expected[r] = make([]int64, len(p.Ranks[r].Channels))
	}
	pc := make([][]int, n)
	for r := range n {
		pc[r] = make([]int, len(p.Ranks[r].TBs))
	}
	for progress := true; progress; {
		progress = false
		for r := range n {
			for ti := range p.Ranks[r].TBs {
				tb := &p.Ranks[r].TBs[ti]
				if pc[r][ti] >= len(tb.Ops) {
					continue
				}
				op := tb.Ops[pc[r][ti]]
				info := op.Code.Info()
				var got []val
				if info.Recvs {
					k := connKey{tb.RecvPeer, r, tb.Chan}
					if len(queues[k]) == 0 {
						continue
					}
					got = queues[k][0]
					queues[k] = queues[k][1:]
					if int64(len(got)) != op.Count {
						t.Fatalf("rank %d tb %d step %d: received %d chunks, want %d", r, ti, pc[r][ti], len(got), op.Count)
					}
				}
				if op.Code == ir.OpWait {
					ok := true
					for _, c := range op.Chans {
						ok = ok && inbound[r][c] >= expected[r][c]+1
					}
					if !ok {
						continue
					}
					for _, c := range op.Chans {
						expected[r][c]++
					}
				}
				var sent []val
				for i := int64(0); i < op.Count && info.Data; i++ {
					var srcs []val
					for _, s := range op.Srcs {
						srcs = append(srcs, read(r, s, i))
					}
					if got != nil {
						srcs = append(srcs, got[i])
					}
					v := combine(srcs...)
					for _, d := range op.Dsts {
						write(r, d, i, v)
					}
					sent = append(sent, v)
				}
				if info.Sends {
					k := connKey{r, tb.SendPeer, tb.Chan}
					queues[k] = append(queues[k], sent)
				}
				if op.Code == ir.OpSignal {
					for _, c := range op.Chans {
						ch := p.Ranks[r].Channels[c]
						inbound[ch.Peer][ch.PeerChannel]++
					}
				}
				pc[r][ti]++
				progress = true
			}
		}
	}
	for r := range n {
		for ti, tb := range p.Ranks[r].TBs {
			if pc[r][ti] < len(tb.Ops) {
				t.Fatalf("rank %d tb %d stuck at step %d (%v)", r, ti, pc[r][ti], tb.Ops[pc[r][ti]].Code)
			}
		}
	}
	for k, q := range queues {
		if len(q) != 0 {
			t.Fatalf("connection %+v has %d unreceived transfers", k, len(q))
		}
	}
	for r := range n {
		for c := range p.Ranks[r].Channels {
			if inbound[r][c] != expected[r][c] {
				t.Fatalf("rank %d channel %d: inbound %d != expected %d after the launch", r, c, inbound[r][c], expected[r][c])
			}
		}
	}
	out := make([][]val, n)
	for r := range n {
		for c := int64(0); c < p.Ranks[r].Chunks[ir.Output]; c++ {
			out[r] = append(out[r], store[r][ir.Output][c])
		}
	}
	return out
}

func arrangements(p *ir.Program) []bool {
	var a []bool
	if p.OutOfPlace {
		a = append(a, false)
	}
	if p.InPlace {
		a = append(a, true)
	}
	return a
}

func TestFixturesPostcondition(t *testing.T) {
	for n := 1; n <= 8; n++ {
		allreduceWant := make([][]val, n)
		allgatherWant := make([][]val, n)
		for r := range n {
			for j := range n {
				v := val{}
				for q := range n {
					v[[2]int64{int64(q), int64(j)}] = 1
				}
				allreduceWant[r] = append(allreduceWant[r], v)
				allgatherWant[r] = append(allgatherWant[r], val{{int64(j), 0}: 1})
			}
		}
		cases := []struct {
			p    *ir.Program
			want [][]val
		}{
			{RingAllReduce(n, ir.Simple), allreduceWant},
			{RingAllReduce(n, ir.LL), allreduceWant},
			{PairsAllReducePrimitive(n), allreduceWant},
			{AllGatherRing(n), allgatherWant},
		}
		for _, c := range cases {
			for _, inPlace := range arrangements(c.p) {
				t.Run(fmt.Sprintf("%s/%v/inplace=%v", c.p.Name, c.p.Protocol, inPlace), func(t *testing.T) {
					got := simulate(t, c.p, inPlace)
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
