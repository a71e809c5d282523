package diff

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func mod(a, n int) int { return ((a % n) + n) % n }

// multiRing is the ring allreduce on nch transfer channels (threadblock h
// of every rank runs the ring on chunks h·n .. h·n+n-1).
func multiRing(n, nch int) *ir.Program {
	C := int64(n * nch)
	b := irtest.New(ir.AllReduce, n, C).Name(fmt.Sprintf("ring_allreduce_%dx%d", n, nch)).Arrangements(true, true)
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

func ll(p *ir.Program) *ir.Program {
	p.Protocol = ir.LL
	return p
}

type pair struct {
	name string
	a, b *ir.Program
}

func pairs() []pair {
	return []pair{
		{"same", irtest.RingAllReduce(4, ir.Simple), irtest.RingAllReduce(4, ir.Simple)},
		{"simple_to_ll", irtest.RingAllReduce(4, ir.Simple), irtest.RingAllReduce(4, ir.LL)},
		{"one_to_two_channels", irtest.RingAllReduce(3, ir.Simple), multiRing(3, 2)},
		{"two_to_one_channel", multiRing(3, 2), irtest.RingAllReduce(3, ir.Simple)},
		{"pairs_to_ring", irtest.PairsAllReducePrimitive(3), irtest.RingAllReduce(3, ir.Simple)},
		{"ring3_to_ring4", irtest.RingAllReduce(3, ir.Simple), irtest.RingAllReduce(4, ir.Simple)},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), string(got)); d != "" {
		t.Errorf("%s (-golden +got):\n%s", path, d)
	}
}

// TestGolden pins the text and JSON printers; -update rewrites them.
func TestGolden(t *testing.T) {
	for _, c := range pairs() {
		t.Run(c.name, func(t *testing.T) {
			d := Diff(c.a, c.b)
			var txt, js bytes.Buffer
			if err := d.WriteText(&txt); err != nil {
				t.Fatal(err)
			}
			if err := d.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			golden(t, c.name+".txt", txt.Bytes())
			golden(t, c.name+".json", js.Bytes())
			// The JSON decodes back to the same delta (same content).
			var back struct {
				Delta
				Cost Cost `json:"cost"`
			}
			if err := json.Unmarshal(js.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(*d, back.Delta); diff != "" {
				t.Errorf("JSON round trip (-want +got):\n%s", diff)
			}
			if back.Cost != d.Cost() {
				t.Errorf("JSON cost %+v, want %+v", back.Cost, d.Cost())
			}
		})
	}
}

func TestSame(t *testing.T) {
	d := Diff(irtest.RingAllReduce(4, ir.Simple), irtest.RingAllReduce(4, ir.Simple))
	if k := d.Cost(); k != (Cost{}) {
		t.Errorf("identical schedules cost %+v", k)
	}
	// Each rank: a sending end to r+1 and a receiving end from r-1.
	if d.ChannelEnds.Kept != 8 || d.Semaphores.Kept != 8 || d.Connections.Kept != 8 || d.Scratch.Kept != 4 || d.Ops.Unchanged != 4 {
		t.Errorf("kept %+v", d)
	}
}

func TestSimpleToLL(t *testing.T) {
	// Legalised Simple ring: sending ends have init T = 2n-2 = 6, receiving
	// ends 0; LL: all 0. So the 4 sending ends are replaced at the
	// channel-end level, but their semaphores are kept and rebased 6 -> 0.
	d := Diff(irtest.RingAllReduce(4, ir.Simple), irtest.RingAllReduce(4, ir.LL))
	want := Cost{ChannelEnds: 4, Rebased: 4, Released: 4}
	if k := d.Cost(); k != want {
		t.Errorf("cost (-want +got):\n%s", cmp.Diff(want, k))
	}
	wantRebase := Rebase{Semaphore: Semaphore{Rank: 0, Peer: 1, Type: "memory"}, FromInit: 6, ToInit: 0}
	if len(d.Semaphores.Rebased) != 4 || d.Semaphores.Rebased[0] != wantRebase {
		t.Errorf("rebased %+v", d.Semaphores.Rebased)
	}
	// Same scratch (T·M = 6 chunks per rank) and the same op counts per
	// rank? No: Simple has 3 primitives per transfer, LL 1.
	if d.Scratch.Kept != 4 || len(d.Ops.TBs) != 4 || d.Ops.OpsFrom != 4*3*7 || d.Ops.OpsTo != 4*7 {
		t.Errorf("scratch %+v ops %+v", d.Scratch, d.Ops)
	}
}

func TestChannelsAdded(t *testing.T) {
	// Going from one ring channel to two on 3 ranks: every rank gets a
	// second sending end to r+1 (ordinal 1) and a second receiving end from
	// r-1; the first ends keep their identity but the ring now has T = 4
	// transfers per connection as before (same init), so they are kept.
	d := Diff(irtest.RingAllReduce(3, ir.Simple), multiRing(3, 2))
	want := Cost{ChannelEnds: 6, Semaphores: 6, Exchanges: 6, RankPairs: 3, ScratchGrows: 3}
	if k := d.Cost(); k != want {
		t.Errorf("cost (-want +got):\n%s", cmp.Diff(want, k))
	}
	if d.ChannelEnds.Kept != 6 || d.Connections.Kept != 6 || len(d.Connections.Added) != 0 {
		t.Errorf("ends %+v connections %+v", d.ChannelEnds, d.Connections)
	}
	// Scratch per rank: 1 inbound connection of 4 slots of 1 chunk, then 2.
	if diff := cmp.Diff([]ScratchChange{{0, 4, 8}, {1, 4, 8}, {2, 4, 8}}, d.Scratch.Changed); diff != "" {
		t.Errorf("scratch (-want +got):\n%s", diff)
	}
	// And back: everything added is released, nothing created.
	back := Diff(multiRing(3, 2), irtest.RingAllReduce(3, ir.Simple))
	if k := back.Cost(); k != (Cost{Released: 12}) {
		t.Errorf("cost back %+v", k)
	}
}

func TestPairsToRing(t *testing.T) {
	// All-pairs (one end per peer, init 0, reading peers' inputs) to the
	// ring on 3 ranks (one sending end to r+1 with init 4, one receiving end
	// from r-1): every end keeps its semaphore, the 3 sending ones rebased
	// 0 -> 4; the input registrations are released.
	d := Diff(irtest.PairsAllReducePrimitive(3), irtest.RingAllReduce(3, ir.Simple))
	want := Cost{ChannelEnds: 3, Rebased: 3, ScratchGrows: 3, Released: 3 + 6}
	if k := d.Cost(); k != want {
		t.Errorf("cost (-want +got):\n%s", cmp.Diff(want, k))
	}
	if len(d.Registrations.Removed) != 6 || d.Registrations.Removed[0] != (Registration{Rank: 0, Peer: 1, Buf: "input"}) {
		t.Errorf("registrations %+v", d.Registrations)
	}
}

func TestRanksAdded(t *testing.T) {
	d := Diff(irtest.RingAllReduce(3, ir.Simple), irtest.RingAllReduce(4, ir.Simple))
	// Ring 3 → 4: rank 2's end to 0 becomes rank 2's end to 3, and so on;
	// rank 3 is new. Ends to (0,1) (1,2) are kept but with a new init
	// (T = 6 instead of 4) so at the end level they change.
	if d.Scratch.Changed[3] != (ScratchChange{Rank: 3, From: -1, To: 6}) {
		t.Errorf("scratch %+v", d.Scratch.Changed)
	}
	if d.Ops.Ranks[3] != (RankOps{Rank: 3, From: -1, To: 21}) {
		t.Errorf("ops %+v", d.Ops.Ranks)
	}
	k := d.Cost()
	// New connections: (2,3) and (3,0) memory; removed: (2,0).
	if k.Connections != 2 || k.RankPairs != 2 || k.Semaphores != 4 || k.Exchanges != 6 {
		t.Errorf("cost %+v", k)
	}
}

func TestSemaphoreReuse(t *testing.T) {
	a := bundle.Summarize(mustLegal(t, irtest.PairsAllReducePrimitive(3)))
	b := bundle.Summarize(mustLegal(t, irtest.RingAllReduce(3, ir.Simple)))
	got := SemaphoreReuse(a, b)
	// Ring rank r: end 0 to r+1 (sending), end 1 to r-1... rank 0's ends
	// sort by peer: peer 1 (send), peer 2 (recv); pairs rank 0: peer 1 is
	// channel 0, peer 2 channel 1. Ranks 1 and 2 likewise by peer.
	want := [][]int{{0, 1}, {0, 1}, {0, 1}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("reuse (-want +got):\n%s", d)
	}
	// Nothing carries over to a program with a port channel instead.
	p := irtest.PairsAllReducePrimitive(2)
	for r := range p.Ranks {
		p.Ranks[r].Channels[0].Type = ir.PortChannel
	}
	got = SemaphoreReuse(bundle.Summarize(irtest.PairsAllReducePrimitive(2)), bundle.Summarize(p))
	if d := cmp.Diff([][]int{{-1}, {-1}}, got); d != "" {
		t.Errorf("reuse across types (-want +got):\n%s", d)
	}
}

func mustLegal(t *testing.T, p *ir.Program) *ir.Program {
	t.Helper()
	q, ds := legalize.Legalize(p)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	return q
}

func TestBundles(t *testing.T) {
	mk := func(p *ir.Program) *bundle.Bundle {
		q := mustLegal(t, p)
		ts, err := optable.LowerAll(q)
		if err != nil {
			t.Fatal(err)
		}
		raw := make([][]byte, len(ts))
		for r, tb := range ts {
			raw[r], _ = tb.MarshalBinary()
		}
		b, err := bundle.New(q, raw, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := irtest.RingAllReduce(3, ir.Simple), multiRing(3, 2)
	got, err := Bundles(mk(a), mk(b))
	if err != nil {
		t.Fatal(err)
	}
	want := Diff(a, b)
	ida, _ := mk(a).ID()
	if got.From.ID != ida.String() || got.To.ID == "" {
		t.Errorf("sides %+v %+v", got.From, got.To)
	}
	got.From.ID, got.To.ID = "", ""
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("bundle diff differs from program diff (-want +got):\n%s", d)
	}
}

// A malformed program (channel naming a missing peer end) is compared
// without panicking; its end gets peer ordinal -1.
func TestMalformed(t *testing.T) {
	p := irtest.PairsAllReducePrimitive(2)
	p.Ranks[0].Channels[0].PeerChannel = 5
	p.Ranks[1].Channels[0].Peer = 9
	d := Diff(p, irtest.PairsAllReducePrimitive(2))
	if len(d.ChannelEnds.Removed) != 2 || d.ChannelEnds.Removed[0].PeerOrdinal != -1 {
		t.Errorf("ends %+v", d.ChannelEnds)
	}
	bad := irtest.RingAllReduce(3, ir.Simple)
	bad.Ranks[0].TBs[0].SendPeer = 7 // cannot be legalised: compared as given
	if d := Diff(bad, bad); d.ChannelEnds.Kept != 0 || d.Ops.Unchanged != 3 {
		t.Errorf("unlegalisable program: %+v", d)
	}
}

func BenchmarkDiff(b *testing.B) {
	for _, n := range []int{64, 1024} {
		a := bundle.Summarize(mustLegalB(b, irtest.RingAllReduce(n, ir.Simple)))
		c := bundle.Summarize(mustLegalB(b, irtest.RingAllReduce(n, ir.LL)))
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Resources(Side{}, a, Side{}, c)
			}
		})
	}
}

func mustLegalB(b *testing.B, p *ir.Program) *ir.Program {
	q, ds := legalize.Legalize(p)
	if len(ds) > 0 {
		b.Fatal(ds)
	}
	return q
}
