package verify_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

// ownerFindings keeps the TS0214/TS0215 findings of ds.
func ownerFindings(ds []diag.Diagnostic) []finding {
	var fs []finding
	for _, f := range findings(ds) {
		if f.Code == diag.PeerAccessLate || f.Code == diag.PeerAccessEarly {
			fs = append(fs, f)
		}
	}
	return fs
}

// TestPeerAccessExample: the three mutants of
// examples/allreduce_pairs_2rank_simple.json that ran wrong while linting
// clean (no closing handshake, no opening handshake, Init 1 on both channel
// ends), in both iteration models (Simple slices, LL launches) and both
// arrangements the example supports. Each accessing op is reported once,
// whatever the arrangement.
func TestPeerAccessExample(t *testing.T) {
	f := filepath.Join(repoRoot, "examples", "allreduce_pairs_2rank_simple.json")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	base, ds := schedjson.Parse(f, data)
	if base == nil {
		t.Fatal(ds)
	}
	if !base.InPlace || !base.OutOfPlace {
		t.Fatal("the example should support both arrangements")
	}
	late := func(r, s int) finding { return at(diag.PeerAccessLate, r, 0, s, opPos(r, 0, s)) }
	early := func(r, s int) finding { return at(diag.PeerAccessEarly, r, 0, s, opPos(r, 0, s)) }
	cases := []struct {
		name string
		f    func(p *ir.Program)
		want []finding
	}{
		{"clean", func(p *ir.Program) {}, nil},
		{"no-trailing-handshake", func(p *ir.Program) {
			for r := range p.Ranks {
				p.Ranks[r].TBs[0].Ops = p.Ranks[r].TBs[0].Ops[:3]
			}
		}, []finding{late(0, 2), late(1, 2)}},
		{"no-leading-handshake", func(p *ir.Program) {
			for r := range p.Ranks {
				p.Ranks[r].TBs[0].Ops = p.Ranks[r].TBs[0].Ops[2:]
			}
		}, []finding{early(0, 0), early(1, 0)}},
		{"init-1", func(p *ir.Program) {
			for r := range p.Ranks {
				p.Ranks[r].Channels[0].Init = 1
			}
		}, []finding{late(0, 2), early(0, 2), late(1, 2), early(1, 2)}},
	}
	for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
		for _, tc := range cases {
			t.Run(proto.String()+"/"+tc.name, func(t *testing.T) {
				p := base.Clone()
				p.Protocol = proto
				tc.f(p)
				ds := verifyPlaced(t, p, verify.Options{})
				if d := cmp.Diff(tc.want, ownerFindings(ds)); d != "" {
					t.Errorf("TS0214/TS0215 (-want +got):\n%s\nall:\n%s", d, dump(ds))
				}
				if len(tc.want) > 0 && !verify.HasErrors(ds) {
					t.Error("no errors")
				}
				// Skipping the race checks skips these too.
				ds = verify.Verify(p, verify.Options{Skip: verify.CheckRaces})
				if fs := ownerFindings(ds); len(fs) > 0 {
					t.Errorf("with CheckRaces skipped: %v", fs)
				}
			})
		}
	}
}

// chain3 is a custom program on 3 ranks in which rank 0 reads rank 2's
// input, ordered only through rank 1: rank 2 signals rank 1 at its start,
// rank 1 waits for it and signals rank 0, rank 0 waits, reads, and signals
// rank 1, which signals rank 2, which waits before it ends. Rank 0's
// threadblock 1 does the handshakes and threadblock 0 the read, joined by
// dependencies, so neither check can be answered by a direct edge.
// earlyGap moves rank 1's first wait after its signal to rank 0 (the read
// may then run before rank 2 starts); lateGap moves rank 1's last signal
// before its wait (rank 2 may then end before the read).
func chain3(earlyGap, lateGap bool) *ir.Program {
	b := New(ir.Custom, 3, 1).Name("chain3")
	for r := 0; r < 3; r++ {
		b.Rank(r).Chunks(1, 1, 0)
	}
	a0, a1 := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	b1, b2 := b.Connect(1, 2, ir.MemoryChannel, 0, 0)
	c0, _ := b.Connect(0, 2, ir.MemoryChannel, 0, 0)
	r0 := b.Rank(0)
	r0.PrimTB().Nop().Dep(1, 0).Copy(1, Remote(I(0), c0), O(0)).Publish()
	r0.PrimTB().Wait(a0).Publish().Nop().Dep(0, 1).Signal(a0)
	if earlyGap {
		b.Rank(1).PrimTB().Signal(a1).Wait(b1).Wait(a1).Signal(b1)
	} else if lateGap {
		b.Rank(1).PrimTB().Wait(b1).Signal(a1).Signal(b1).Wait(a1)
	} else {
		b.Rank(1).PrimTB().Wait(b1).Signal(a1).Wait(a1).Signal(b1)
	}
	b.Rank(2).PrimTB().Copy(1, I(0), O(0)).Signal(b2).Wait(b2)
	return b.Build()
}

// TestPeerAccessTransitive: orderings through other threadblocks and other
// ranks count (no false positive), and their absence is found (the
// backward searches, not only the direct frontier).
func TestPeerAccessTransitive(t *testing.T) {
	for _, tc := range []struct {
		name              string
		earlyGap, lateGap bool
		want              []finding
	}{
		{"ordered", false, false, nil},
		{"early", true, false, []finding{at(diag.PeerAccessEarly, 0, 0, 1, opPos(0, 0, 1))}},
		{"late", false, true, []finding{at(diag.PeerAccessLate, 0, 0, 1, opPos(0, 0, 1))}},
	} {
		for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
			t.Run(tc.name+"/"+proto.String(), func(t *testing.T) {
				p := chain3(tc.earlyGap, tc.lateGap)
				p.Protocol = proto
				ds := verifyPlaced(t, p, verify.Options{})
				for _, d := range ds {
					if d.Severity == diag.Error && d.Code != diag.PeerAccessEarly && d.Code != diag.PeerAccessLate {
						t.Errorf("unexpected: %v", d)
					}
				}
				if d := cmp.Diff(tc.want, ownerFindings(ds)); d != "" {
					t.Errorf("TS0214/TS0215 (-want +got):\n%s\nall:\n%s", d, dump(ds))
				}
			})
		}
	}
	// The message names the accessing op and the owner.
	ds := verify.Verify(chain3(true, false), verify.Options{})
	wantMsg(t, ds, diag.PeerAccessEarly, "rank 0 tb 0 step 1 (copy) reads rank 2's input (i[0:1] through channel 1), but no op of rank 2 in the same slice happens before it")
}

// TestPeerAccessBarrier: a barrier joins the threadblock that handshakes
// with the owner and the one that accesses its buffers.
func TestPeerAccessBarrier(t *testing.T) {
	b := New(ir.Custom, 2, 1).Name("barrier2")
	for r := 0; r < 2; r++ {
		b.Rank(r).Chunks(1, 1, 0)
	}
	c0, c1 := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	r0 := b.Rank(0)
	r0.PrimTB().Barrier(0, 2).Copy(1, Remote(I(0), c0), O(0)).Barrier(1, 2)
	r0.PrimTB().Wait(c0).Barrier(0, 2).Barrier(1, 2).Signal(c0)
	b.Rank(1).PrimTB().Copy(1, I(0), O(0)).Signal(c1).Wait(c1)
	p := b.Build()
	ds := verify.Verify(p, verify.Options{})
	if fs := ownerFindings(ds); len(fs) > 0 || verify.HasErrors(ds) {
		t.Errorf("want clean, got:\n%s", dump(ds))
	}
	// Without the second barrier, nothing orders the read before rank 1's
	// end.
	tbs := p.Ranks[0].TBs
	tbs[0].Ops = tbs[0].Ops[:2]                                                     // barrier 0, copy
	tbs[1].Ops = append(tbs[1].Ops[:2], ir.Op{Code: ir.OpSignal, Chans: []int{c0}}) // wait, barrier 0, signal
	ds = verifyPlaced(t, p, verify.Options{})
	if d := cmp.Diff([]finding{at(diag.PeerAccessLate, 0, 0, 1, opPos(0, 0, 1))}, ownerFindings(ds)); d != "" {
		t.Errorf("(-want +got):\n%s\nall:\n%s", d, dump(ds))
	}
}

// TestPeerAccessWide: all-pairs programs, whose threadblocks receive
// direct edges from more peers than the frontier keeps inline, verify
// clean; with the closing handshake gone on one rank, exactly the accesses
// to that rank are reported, each once, however many there are.
func TestPeerAccessWide(t *testing.T) {
	n := 24
	p := PairsAllReducePrimitive(n)
	clean(t, p, verify.Options{})
	o, err := gen.Generate("oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 8, Protocol: ir.Simple, Channels: 1})
	if err != nil {
		t.Fatal(err)
	}
	clean(t, o, verify.Options{})

	// Rank 3 no longer waits for its peers at its end: every peer's last
	// read of rank 3's input is unordered with rank 3's end.
	ops := p.Ranks[3].TBs[0].Ops
	p.Ranks[3].TBs[0].Ops = ops[:len(ops)-1]
	// keep the balance: rank 3's peers no longer signal it at their end
	for r := range p.Ranks {
		if r == 3 {
			continue
		}
		sig := &p.Ranks[r].TBs[0].Ops[len(p.Ranks[r].TBs[0].Ops)-2]
		var chans []int
		for _, c := range sig.Chans {
			if c != PairsChannel(r, 3) {
				chans = append(chans, c)
			}
		}
		sig.Chans = chans
	}
	var want []finding
	for r := range n {
		if r != 3 {
			want = append(want, at(diag.PeerAccessLate, r, 0, 2+n-1, opPos(r, 0, 2+n-1)))
		}
	}
	ds := verifyPlaced(t, p, verify.Options{MaxErrors: 100})
	if d := cmp.Diff(want, ownerFindings(ds)); d != "" {
		t.Errorf("(-want +got):\n%s\nall:\n%s", d, dump(ds))
	}
	wantMsg(t, ds, diag.PeerAccessLate, fmt.Sprintf("rank 0 tb 0 step %d (reduce) reads rank 3's input (i[%d:%d] through channel 2)", n+1, n-1, n))
}

// TestPeerAccessCap: over Options.MaxErrors, the findings left out are
// counted in the note.
func TestPeerAccessCap(t *testing.T) {
	p := PairsAllReducePrimitive(8)
	for r := range p.Ranks {
		// no closing handshake anywhere: every (rank, peer) pair is late
		p.Ranks[r].TBs[0].Ops = p.Ranks[r].TBs[0].Ops[:len(p.Ranks[r].TBs[0].Ops)-2]
	}
	ds := verify.Verify(p, verify.Options{MaxErrors: 5})
	var late int
	for _, d := range ds[:len(ds)-1] {
		if d.Code != diag.PeerAccessLate {
			t.Errorf("unexpected: %v", d)
		}
		late++
	}
	if last := ds[len(ds)-1]; late != 5 || last.Severity != diag.Note || last.Msg != "51 more TS0214 diagnostics not shown" {
		t.Errorf("got:\n%s", dump(ds))
	}
}
