package gen

import (
	"testing"

	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// TestPushExact pins push's gather on 3 ranks, root 1, on nodes of one
// rank: the root signals that its slot for each peer is free and waits
// for the data; each non-root waits for the root's signal, puts its input
// into its slot of the root's scratch (through a port channel) and
// signals.
func TestPushExact(t *testing.T) {
	I, O, S := irtest.I, irtest.O, irtest.S
	b := meta(irtest.New(ir.Gather, 3, 1).Name("push_gather_n3_l1_k1_simple_root1").Root(1).NLocalRanks(1).Arrangements(true, true), "push", 1)
	for _, r := range []int{0, 2} {
		rk := b.Rank(r).Chunks(1, 0, 0)
		rk.Channel(ir.Channel{Peer: 1, PeerChannel: pidx(1, r), Type: ir.PortChannel})
		rk.PrimTB().Wait(0).Copy(1, I(0), irtest.Remote(S(int64(pidx(1, r))), 0)).Signal(0)
	}
	root := b.Rank(1).Chunks(1, 3, 2)
	root.Channel(ir.Channel{Peer: 0, PeerChannel: 0, Type: ir.PortChannel})
	root.Channel(ir.Channel{Peer: 2, PeerChannel: 0, Type: ir.PortChannel})
	// T = 2: peer 2 in threadblock (1+2) mod 2 = 1 (made first), peer 0 in 1 mod 2 = 1 too.
	root.PrimTB().Signal(0, 1).Wait(0, 1).Copy(1, S(0), O(0)).Copy(1, S(1), O(2)).Copy(1, I(0), O(1))
	want := b.Build()
	got, err := Generate("push", Options{Collective: ir.Gather, NRanks: 3, NLocalRanks: 1, Root: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d := irtest.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

// TestPushAcrossNodes runs push on several node shapes, with several peers
// per threadblock (beyond pullTBs+1 ranks) and two lanes: structure, the
// verifier before and after legalisation (TS0116/TS0117 included), the
// symbolic executor in both arrangements, and the host interpreter bit for
// bit; and at 200 ranks on nodes of 8 (where direct does not serve) the
// verifier. With -gen.full: every node shape up to 40 ranks.
func TestPushAcrossNodes(t *testing.T) {
	shapes := [][2]int{{2, 1}, {4, 2}, {6, 3}, {6, 1}, {9, 3}, {20, 4}, {34, 17}}
	if *full { // -gen.full: every nranks 2..40, every nlocalranks below it dividing it
		shapes = nil
		for n := 2; n <= 40; n++ {
			for l := 1; l < n; l++ {
				if n%l == 0 {
					shapes = append(shapes, [2]int{n, l})
				}
			}
		}
	}
	if testing.Short() {
		shapes = [][2]int{{4, 2}, {20, 4}}
	}
	for _, sh := range shapes {
		for _, coll := range []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter} {
			for _, k := range []int{1, 2} {
				roots := []int{0}
				if coll.Rooted() {
					roots = append(roots, sh[0]-1)
				}
				for _, root := range roots {
					c := genCase{"push", Options{Collective: coll, NRanks: sh[0], NLocalRanks: sh[1], Channels: k, Root: root}}
					if err := Check(c.algo, c.opts); err != nil {
						t.Fatalf("%v: Check: %v", c, err)
					}
					p, err := Generate(c.algo, c.opts)
					if err != nil {
						t.Fatalf("%v: %v", c, err)
					}
					if err := checkStructure(p); err != nil {
						t.Fatalf("%v: %v", c, err)
					}
					verifyCheck(t, c, p)
					if sh[0] <= 20 {
						simCheck(t, c, p, 1)
					}
					if k == 1 {
						interpCheck(t, c, p, sh[0] <= 6)
					}
				}
			}
		}
	}
	if testing.Short() {
		return
	}
	for _, coll := range []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter} {
		o := Options{Collective: coll, NRanks: 200, NLocalRanks: 8}
		if err := Check("push", o); err != nil {
			t.Fatal(err)
		}
		p, err := Generate("push", o)
		if err != nil {
			t.Fatal(err)
		}
		if ds := verify.Verify(p, verify.Options{}); verify.HasErrors(ds) {
			t.Errorf("push %s at 200 ranks, 8 per node: %v", coll, ds[0])
		}
	}
}

// TestPushLimits: Check and Generate agree on push's threadblock and
// channel-end limits: 8 lanes of 16 threadblocks fit, 9 do not; the
// root's channel ends (K(nranks-1)) bound gather and scatter.
func TestPushLimits(t *testing.T) {
	for _, c := range []struct {
		o  Options
		ok bool
	}{
		{Options{Collective: ir.AllToAll, NRanks: 40, NLocalRanks: 8, Channels: 8}, true},
		{Options{Collective: ir.AllToAll, NRanks: 40, NLocalRanks: 8, Channels: 9}, false},
		{Options{Collective: ir.AllToAll, NRanks: 5, Channels: 32}, true},
		{Options{Collective: ir.Gather, NRanks: 1024, NLocalRanks: 8, Channels: 4}, true},
		{Options{Collective: ir.Scatter, NRanks: 1024, NLocalRanks: 8, Channels: 5}, false},
		{Options{Collective: ir.AllToAll, NRanks: 8, Protocol: ir.LL}, false},
	} {
		err := Check("push", c.o)
		if (err == nil) != c.ok {
			t.Errorf("Check(push, %+v) = %v, want ok %v", c.o, err, c.ok)
		}
		if c.o.NRanks > 64 {
			continue // Generate at 1024 ranks: TestGeneratesLarge in examples/contexts
		}
		if _, gerr := Generate("push", c.o); (gerr == nil) != c.ok {
			t.Errorf("Generate(push, %+v) = %v, want ok %v", c.o, gerr, c.ok)
		}
	}
}
