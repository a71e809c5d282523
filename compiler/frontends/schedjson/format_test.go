package schedjson

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// roundTrip checks Parse(Format(p)) == p and that Format is a fixed point.
func roundTrip(t *testing.T, p *ir.Program) []byte {
	t.Helper()
	out, err := Format(p)
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	q, ds := Parse("rt.json", out)
	if len(ds) != 0 {
		t.Fatalf("Parse(Format(p)): %v\n%s", ds, out)
	}
	// cmp.Equal first: building the diff costs milliseconds (FuzzParse
	// calls this for every program it parses), and is only needed when
	// the programs differ.
	if !cmp.Equal(p, q, irtest.CmpOpts...) {
		t.Fatalf("Parse(Format(p)) != p (-p +parsed):\n%s\n%s", irtest.Diff(p, q), out)
	}
	again, err := Format(q)
	if err != nil {
		t.Fatalf("Format(Parse(Format(p))): %v", err)
	}
	if string(again) != string(out) {
		t.Fatalf("Format is not a fixed point:\n%s\n---\n%s", out, again)
	}
	return out
}

// full sets every field of the IR to a non-default value somewhere.
func full() *ir.Program {
	b := irtest.New(ir.Custom, 3, 4).Name("every \"field\" <&>").Protocol(ir.LL).Root(2).NLocalRanks(3).
		Arrangements(true, false).Window(1024, 1<<40).Threads(512).SliceBytes(1<<20).
		Meta("source", "test").Meta("z", "ünïcode\n\ttab").Meta("", "empty key")
	b.Connect(0, 1, ir.PortChannel, 3, 0)
	b.Connect(0, 1, ir.MemoryChannel, 0, 7)
	b.Rank(0).Channel(ir.Channel{Peer: 2, PeerChannel: 5, Type: ir.MemoryChannel}) // explicit, off the default
	b.Rank(2).Channel(ir.Channel{Peer: 9, PeerChannel: -1, Init: math.MaxInt64})   // peer out of range: default -1
	b.Rank(0).Chunks(4, 8, 16).PrimTB().
		Copy(2, I(0), Packet(Remote(S(3), 0)), O(1)).Publish().
		Signal(0, 1).Dep(1, 0).Dep(0, 0).
		Barrier(1, 2).Flush(0).Wait(1).Nop().
		Reduce(1<<40, []ir.Ref{I(1), Remote(O(2), 1), Packet(S(0))}, O(3)).
		Op(ir.Op{Code: ir.OpSignal, Chans: []int{0}, Count: 5, Barrier: 3}). // junk a verifier rejects, kept
		Op(ir.Op{Code: ir.OpCopy, Count: 0})                                 // no refs, count 0
	b.Rank(1).TB(0, 2, 1).Send(1, I(0)).Recv(2, O(0)).RCS(1, O(1)).RRS(1, I(2)).RRC(1, I(3), O(3)).RRCS(1, I(1), O(1))
	b.Rank(1).TB(-1, 0, 0)
	b.Rank(2).TB(1, -1, -1).Op(ir.Op{Code: ir.OpReduce, Srcs: []ir.Ref{I(0)}, Dsts: []ir.Ref{O(0), O(1)}, Count: 1, Deps: []ir.Dep{{TB: -1, Step: 2147483647}}})
	return b.Build()
}

func TestRoundTripFull(t *testing.T) {
	out := string(roundTrip(t, full()))
	for _, s := range []string{
		`"name": "every \"field\" <&>"`, // no HTML escaping
		`"root": 2`, `"nlocalranks": 3`, `"min_bytes": 1024`, `"max_bytes": 1099511627776`,
		`"threads_per_block": 512`, `"slice_bytes": 1048576`,
		`{"id": 0, "peer": 1, "type": "port", "init": 3}`,
		`{"id": 2, "peer": 2, "peer_channel": 5}`,
		`{"id": 1, "peer": 0, "init": 7}`,
		`{"op": "copy", "src": {"buf": "i", "off": 0}, "dsts": [{"buf": "s", "off": 3, "chan": 0, "packet": true}, {"buf": "o", "off": 1}], "count": 2, "publish": true}`,
		`{"op": "signal", "chans": [0, 1], "deps": [[1, 0], [0, 0]]}`,
		`{"op": "barrier", "barrier": {"id": 1, "threadblocks": 2}}`,
		`{"op": "signal", "count": 5, "chans": [0], "barrier": {"id": 3, "threadblocks": 0}}`,
		`{"op": "copy", "count": 0}`,
		`"send_peer": 0,`, `"recv_peer": 2,`,
		`{"op": "nop"}`,
	} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %s", s)
		}
	}
}

func TestRoundTripFixtures(t *testing.T) {
	for n := 1; n <= 5; n++ {
		roundTrip(t, irtest.RingAllReduce(n, ir.Simple))
		roundTrip(t, irtest.RingAllReduce(n, ir.LL))
		roundTrip(t, irtest.PairsAllReducePrimitive(n))
		roundTrip(t, irtest.AllGatherRing(n))
	}
	// Non-rooted program with a root, rooted with root -1.
	p := irtest.RingAllReduce(2, ir.Simple)
	p.Root = 1
	roundTrip(t, p)
	p = broadcast4()
	p.Root = -1
	roundTrip(t, p)
}

// TestRoundTripRandom round-trips random programs whose values lie in the
// format's domains.
func TestRoundTripRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	n := 100
	if testing.Short() {
		n = 50
	}
	for i := 0; i < n; i++ {
		roundTrip(t, randomProgram(rng))
	}
}

func randomProgram(rng *rand.Rand) *ir.Program {
	idx := func() int {
		switch rng.IntN(4) {
		case 0:
			return -1
		case 1:
			return MaxIndex
		}
		return rng.IntN(5)
	}
	size := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return 0
		case 1:
			return math.MaxInt64 - rng.Int64N(3)
		}
		return rng.Int64N(100)
	}
	names := []string{"", "x", "a\"b", "\u2028", "<tag>", "\x00\x1f"}
	nr := 1 + rng.IntN(4)
	p := &ir.Program{
		Name: names[rng.IntN(len(names))], Collective: ir.Collective(rng.IntN(int(ir.NumCollectives))),
		NRanks: nr, NLocalRanks: rng.IntN(3), Root: idx(), Protocol: ir.Protocol(rng.IntN(2)),
		ChunksPerBlock: 1 + rng.Int64N(8), InPlace: rng.IntN(2) == 0, OutOfPlace: rng.IntN(2) == 0,
		MinBytes: size(), MaxBytes: size(), NumThreads: rng.IntN(1025), SliceBytes: size(),
	}
	if rng.IntN(2) == 0 {
		p.Meta = map[string]string{names[rng.IntN(len(names))]: names[rng.IntN(len(names))], "k": "v"}
	}
	ref := func() ir.Ref {
		return ir.Ref{Buf: ir.BufKind(rng.IntN(3)), Off: size(), Chan: idx(), Packet: rng.IntN(3) == 0}
	}
	refs := func() []ir.Ref {
		var rs []ir.Ref
		for range rng.IntN(4) {
			rs = append(rs, ref())
		}
		return rs
	}
	for r := 0; r < nr+rng.IntN(2)-1; r++ {
		rk := ir.Rank{Chunks: [3]int64{size(), size(), size()}}
		for range rng.IntN(4) {
			ch := ir.Channel{Peer: rng.IntN(nr + 1), Type: ir.ChannelType(rng.IntN(2)), Init: size()}
			ch.PeerChannel = idx()
			rk.Channels = append(rk.Channels, ch)
		}
		for range rng.IntN(3) {
			tb := ir.Threadblock{SendPeer: idx(), RecvPeer: idx(), Chan: idx()}
			for range rng.IntN(6) {
				op := ir.Op{Code: ir.Opcode(rng.IntN(int(ir.NumOpcodes))), Srcs: refs(), Dsts: refs(), Count: size(), Publish: rng.IntN(2) == 0}
				for range rng.IntN(3) {
					op.Chans = append(op.Chans, idx())
					op.Deps = append(op.Deps, ir.Dep{TB: idx(), Step: idx()})
				}
				if op.Code == ir.OpBarrier || rng.IntN(5) == 0 {
					op.Barrier, op.BarrierTBs = idx(), idx()
				}
				tb.Ops = append(tb.Ops, op)
			}
			rk.TBs = append(rk.TBs, tb)
		}
		p.Ranks = append(p.Ranks, rk)
	}
	// Half the time, make explicit peer channels equal to the default
	// pairing, which Format leaves out.
	if rng.IntN(2) == 0 {
		def := DefaultPeerChannels(p)
		for r := range p.Ranks {
			for c := range p.Ranks[r].Channels {
				p.Ranks[r].Channels[c].PeerChannel = def[r][c]
			}
		}
	}
	return p
}

func TestFormatErrors(t *testing.T) {
	base := func() *ir.Program { return irtest.RingAllReduce(2, ir.Simple) }
	cases := []struct {
		name string
		edit func(p *ir.Program)
		msg  string
	}{
		{"collective", func(p *ir.Program) { p.Collective = ir.NumCollectives }, "undefined collective"},
		{"protocol", func(p *ir.Program) { p.Protocol = 9 }, "undefined protocol"},
		{"nranks", func(p *ir.Program) { p.NRanks = 0 }, "nranks = 0"},
		{"chunks", func(p *ir.Program) { p.ChunksPerBlock = 0 }, "chunks_per_block = 0"},
		{"root", func(p *ir.Program) { p.Root = -2 }, "root = -2"},
		{"scratch", func(p *ir.Program) { p.Ranks[1].Chunks[ir.Scratch] = -1 }, "rank 1: scratch_chunks = -1"},
		{"channel type", func(p *ir.Program) { p.Ranks[0].Channels = []ir.Channel{{Type: 5}} }, "rank 0 channel 0: undefined channel type"},
		{"init", func(p *ir.Program) { p.Ranks[0].Channels = []ir.Channel{{Init: -1}} }, "init = -1"},
		{"peer", func(p *ir.Program) { p.Ranks[0].TBs[0].SendPeer = MaxIndex + 1 }, "rank 0 tb 0: send_peer = 2147483648"},
		{"opcode", func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[2].Code = ir.NumOpcodes }, "rank 1 tb 0 step 2: undefined opcode"},
		{"buffer", func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[0].Srcs[0].Buf = 3 }, "undefined buffer"},
		{"offset", func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[0].Srcs[0].Off = -1 }, "off = -1"},
		{"ref chan", func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[0].Srcs[0].Chan = -2 }, "chan = -2"},
		{"count", func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[0].Count = -1 }, "count = -1"},
		{"dep", func(p *ir.Program) { p.Ranks[1].TBs[0].Ops[0].Deps = []ir.Dep{{TB: 0, Step: -5}} }, "dependency step = -5"},
	}
	for _, c := range cases {
		p := base()
		c.edit(p)
		if _, err := Format(p); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one mentioning %q", c.name, err, c.msg)
		}
	}
	if _, err := Format(nil); err == nil {
		t.Error("Format(nil) did not fail")
	}
}

func BenchmarkParse(b *testing.B) {
	data, err := Format(bigRing(64))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ds := Parse("bench", data); len(ds) != 0 {
			b.Fatal(ds)
		}
	}
}

func BenchmarkFormat(b *testing.B) {
	p := bigRing(64)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Format(p); err != nil {
			b.Fatal(err)
		}
	}
}

// bigRing is a 64-rank, 8-channel ring (1016 ops per rank, 65024 in all).
func bigRing(n int) *ir.Program { return ring("big", n, 8, ir.Simple, "") }

// TestFormatMax: FormatMax writes what Format writes up to its limit and
// gives up, wrapping ErrTooLarge, past it (theseusc gen refuses a program
// too large to read back without building all of its JSON).
func TestFormatMax(t *testing.T) {
	p := irtest.RingAllReduce(8, ir.Simple)
	want, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, max := range []int{0, len(want), len(want) + 1} {
		got, err := FormatMax(p, max)
		if err != nil || string(got) != string(want) {
			t.Errorf("FormatMax(p, %d) = %d bytes, %v; want Format's %d bytes", max, len(got), err, len(want))
		}
	}
	for _, max := range []int{len(want) - 1, 100} {
		if _, err := FormatMax(p, max); !errors.Is(err, ErrTooLarge) {
			t.Errorf("FormatMax(p, %d) = %v, want ErrTooLarge", max, err)
		}
	}
	if _, err := FormatMax(p, 100); err == nil || !strings.Contains(err.Error(), "the first 1 of 8 ranks alone are ") {
		t.Errorf("FormatMax(p, 100) = %v", err)
	}
}
