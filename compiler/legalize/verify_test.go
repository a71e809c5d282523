package legalize

import (
	"fmt"
	"testing"

	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

func errorsOf(ds []diag.Diagnostic) []diag.Diagnostic {
	var out []diag.Diagnostic
	for _, d := range ds {
		if d.Severity == diag.Error {
			out = append(out, d)
		}
	}
	return out
}

// checkVerified legalises p, which must verify, and requires the result to
// verify at the primitive level with every check (deadlock, races over two
// iterations, postcondition in every arrangement).
func checkVerified(t *testing.T, p *ir.Program) {
	t.Helper()
	if errs := errorsOf(verify.Verify(p, verify.Options{})); len(errs) > 0 {
		t.Fatalf("the input does not verify: %v", errs)
	}
	q, ds := Legalize(p)
	if len(ds) > 0 {
		t.Fatalf("Legalize: %v", ds)
	}
	if errs := errorsOf(verify.Verify(q, verify.Options{Level: ir.LevelPrimitive})); len(errs) > 0 {
		t.Errorf("the legalised program does not verify (%d errors), first: %v", len(errs), errs[0])
	}
}

// TestLegalizeVerified: the output passes the verifier whenever the input
// does, on the hand-written test programs (rings Simple/LL in and out of
// place, several nranks, multi-channel, split threadblocks with
// dependencies and declared scratch, allgather).
func TestLegalizeVerified(t *testing.T) {
	for _, np := range testPrograms() {
		t.Run(np.name, func(t *testing.T) { checkVerified(t, np.p) })
	}
}

// TestLegalizeVerifiedGenerated does the same over the built-in algorithm
// generators (compiler/gen): every transfer-level algorithm and collective,
// Simple and LL, 2..5 ranks (4 with two ranks per node for hier), 1 and 2
// channels.
func TestLegalizeVerifiedGenerated(t *testing.T) {
	nranks := []int{2, 3, 4, 5}
	chans := []int{1, 2}
	if testing.Short() {
		nranks, chans = []int{3, 4}, []int{2}
	}
	n := 0
	for _, a := range gen.Algorithms() {
		if a.Level != ir.LevelTransfer {
			continue
		}
		for _, coll := range a.Collectives {
			for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
				for _, nr := range nranks {
					for _, ch := range chans {
						opts := gen.Options{Collective: coll, NRanks: nr, Protocol: proto, Channels: ch}
						if a.Name == "hier" {
							if nr != 4 {
								continue
							}
							opts.NLocalRanks = 2
						}
						p, err := gen.Generate(a.Name, opts)
						if err != nil {
							t.Errorf("%s %v: %v", a.Name, opts, err)
							continue
						}
						n++
						t.Run(fmt.Sprintf("%s/%v/%v/n=%d/ch=%d", a.Name, coll, proto, nr, ch), func(t *testing.T) {
							checkVerified(t, p)
						})
					}
				}
			}
		}
	}
	t.Logf("%d generated programs", n)
}

// The verifier must reject the broken legalisations the checks above guard
// against: a slot shared by two transfers in flight, a missing credit
// return, and a wait without its signal.
func TestVerifierCatchesBrokenLegalisation(t *testing.T) {
	q, ds := Legalize(splitRing(3, ir.Simple))
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	muts := map[string]func(p *ir.Program){
		"shared slot": func(p *ir.Program) {
			for r := range p.Ranks {
				for t := range p.Ranks[r].TBs {
					for i := range p.Ranks[r].TBs[t].Ops {
						op := &p.Ranks[r].TBs[t].Ops[i]
						for k := range op.Srcs {
							if op.Srcs[k].Buf == ir.Scratch && op.Srcs[k].Off >= 3 {
								op.Srcs[k].Off = 3
							}
						}
						for k := range op.Dsts {
							if op.Dsts[k].Buf == ir.Scratch && (r != 0 || op.Dsts[k].Chan >= 0) {
								op.Dsts[k].Off = 0
								if p.Ranks[r].Channels[op.Dsts[k].Chan].Peer == 0 {
									op.Dsts[k].Off = 3
								}
							}
						}
					}
				}
			}
		},
		"credit returned on the wrong end": func(p *ir.Program) {
			// Rank 1 tb 0 ends with the rrc's signal [in]; send it on the
			// threadblock's sending end instead (the end of its first wait).
			ops := p.Ranks[1].TBs[0].Ops
			ops[len(ops)-1].Chans = []int{ops[0].Chans[0]}
		},
		"wait without signal": func(p *ir.Program) {
			p.Ranks[2].TBs[1].Ops[len(p.Ranks[2].TBs[1].Ops)-1].Code = ir.OpNop
			p.Ranks[2].TBs[1].Ops[len(p.Ranks[2].TBs[1].Ops)-1].Chans = nil
		},
	}
	for name, mut := range muts {
		p := q.Clone()
		mut(p)
		if errs := errorsOf(verify.Verify(p, verify.Options{Level: ir.LevelPrimitive})); len(errs) == 0 {
			t.Errorf("%s: the verifier accepted it", name)
		} else {
			t.Logf("%s: %v", name, errs[0])
		}
	}
}
