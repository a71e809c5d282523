package verify_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/frontends/schedjson"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
)

const repoRoot = "../.."

// TestGoodPrograms: correct programs at every level verify without a
// single diagnostic, in every arrangement they declare.
func TestGoodPrograms(t *testing.T) {
	var progs []*ir.Program
	for _, n := range []int{1, 2, 3, 4, 8} {
		progs = append(progs, RingAllReduce(n, ir.Simple), RingAllReduce(n, ir.LL))
	}
	for _, n := range []int{1, 2, 3, 5} {
		progs = append(progs, PairsAllReducePrimitive(n), AllGatherRing(n))
	}
	for _, n := range []int{2, 3, 4} {
		progs = append(progs, llPairs(n).Build(), primRing(n).Build())
	}
	progs = append(progs, mailbox(true).Build(), copy1().Build(), twoRanks().Build(), transfer2().Build())
	for _, p := range progs {
		t.Run(p.Name+"/"+p.Protocol.String(), func(t *testing.T) { clean(t, p, verify.Options{}) })
	}
}

// TestLegalised: the legaliser's output of correct transfer-level programs
// verifies at the primitive level (credits, slots, LL packets).
func TestLegalised(t *testing.T) {
	for _, p := range []*ir.Program{
		RingAllReduce(2, ir.Simple), RingAllReduce(5, ir.Simple), RingAllReduce(4, ir.LL),
		AllGatherRing(4), transfer2().Build(),
	} {
		q, ds := legalize.Legalize(p)
		if len(ds) > 0 {
			t.Fatalf("%s: legalize: %v", p.Name, ds)
		}
		t.Run(p.Name+"/"+p.Protocol.String(), func(t *testing.T) { clean(t, q, verify.Options{Level: ir.LevelPrimitive}) })
	}
}

// TestGenerators: every built-in generator's programs, and their
// legalisations, verify clean (no false positives over a wide range of
// real schedules: rings, trees, double trees, all-pairs, hierarchical,
// rooted collectives, 1 to 5 ranks, 1 or 2 channels, Simple and LL).
func TestGenerators(t *testing.T) {
	count := 0
	for _, a := range gen.Algorithms() {
		for _, coll := range a.Collectives {
			for _, n := range []int{1, 2, 3, 4, 5} {
				for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
					for _, k := range []int{1, 2} {
						o := gen.Options{Collective: coll, NRanks: n, Protocol: proto, Channels: k, NLocalRanks: 1}
						if n%2 == 0 {
							o.NLocalRanks = 2
						}
						p, err := gen.Generate(a.Name, o)
						if err != nil {
							continue
						}
						count++
						clean(t, p, verify.Options{})
						q, ds := legalize.Legalize(p)
						if len(ds) > 0 {
							t.Errorf("%s: legalize: %v", p.Name, ds)
							continue
						}
						clean(t, q, verify.Options{Level: ir.LevelPrimitive})
					}
				}
			}
		}
	}
	if count < 100 {
		t.Errorf("only %d generated programs", count)
	}
}

// TestExamples: the example schedules verify clean.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "examples", "*.json"))
	if err != nil || len(files) == 0 {
		t.Skip("no examples/*.json")
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, ds := schedjson.Parse(f, data)
		if p == nil {
			t.Errorf("%s: %v", f, ds)
			continue
		}
		clean(t, p, verify.Options{})
	}
}

// TestBadFiles: each testdata/bad schedule gets, as its first diagnostic,
// the code and position its .expect file names ("TS0204 25:13"), from the
// parser or from the verifier.
func TestBadFiles(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot, "testdata", "bad", "*.json"))
	if err != nil || len(files) == 0 {
		t.Skip("no testdata/bad/*.json")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			expect, err := os.ReadFile(strings.TrimSuffix(f, ".json") + ".expect")
			if err != nil {
				t.Fatal(err)
			}
			p, ds := schedjson.Parse(f, data)
			if p != nil {
				ds = verify.Verify(p, verify.Options{})
			}
			if len(ds) == 0 {
				t.Fatalf("no diagnostics; want %s", expect)
			}
			got := fmt.Sprintf("%s %d:%d\n", ds[0].Code, ds[0].Line, ds[0].Col)
			if got != string(expect) {
				t.Errorf("first diagnostic %q, want %q; all:\n%s", got, expect, dump(ds))
			}
		})
	}
}

// TestOptions covers Skip, Level, MaxErrors and the nil program.
func TestOptions(t *testing.T) {
	race := func() *ir.Program {
		b := New(ir.AllReduce, 1, 1)
		rb := b.Rank(0).Chunks(1, 1, 0)
		rb.PrimTB().Copy(1, I(0), O(0))
		rb.PrimTB().Copy(1, I(0), O(0))
		return b.Build()
	}
	deadlocked := twoRanks().Build()
	for r := range deadlocked.Ranks {
		ops := deadlocked.Ranks[r].TBs[0].Ops
		ops[0], ops[1] = ops[1], ops[0]
	}
	wrong := func() *ir.Program {
		b := New(ir.AllReduce, 1, 2)
		b.Rank(0).Chunks(2, 2, 0).PrimTB().Copy(1, I(0), O(0)).Copy(1, I(0), O(1))
		return b.Build()
	}

	clean(t, race(), verify.Options{Skip: verify.CheckRaces})
	clean(t, race(), verify.Options{Skip: ^verify.Cheap})
	clean(t, wrong(), verify.Options{Skip: verify.CheckSemantics})
	clean(t, deadlocked, verify.Options{Skip: verify.CheckSync})
	clean(t, transfer2().Build(), verify.Options{Level: ir.LevelTransfer})

	// The race check still needs the order, so a deadlock surfaces as one
	// summary error without the cycle analysis.
	ds := verifyPlaced(t, deadlocked.Clone(), verify.Options{Skip: verify.CheckDeadlock})
	wantFindings(t, ds, at(diag.Deadlock, -1, -1, -1, progPos))
	wantMsg(t, ds, diag.Deadlock, "does not run to completion: 0 of 20 op executions (2 slices) can run (deadlock analysis skipped)")

	// MaxErrors caps the errors; a note counts the rest.
	p := copy1().Build()
	for range 9 {
		p.Ranks[0].TBs[0].Ops = append(p.Ranks[0].TBs[0].Ops, ir.Op{Code: ir.OpCopy, Srcs: []ir.Ref{I(0)}, Dsts: []ir.Ref{O(0)}})
	}
	ds = verify.Verify(p, verify.Options{MaxErrors: 3})
	if len(ds) != 4 || ds[3].Severity != diag.Note || ds[3].Msg != "6 more TS0105 diagnostics not shown" {
		t.Errorf("MaxErrors 3: got\n%s", dump(ds))
	}
	if !verify.HasErrors(ds) || verify.HasErrors(ds[3:]) {
		t.Error("HasErrors")
	}

	wantFindings(t, verify.Verify(nil, verify.Options{}), finding{Code: diag.BadRank, Severity: diag.Error, Rank: -1, TB: -1, Step: -1})
}

// TestDoesNotModify: Verify leaves the program as it was.
func TestDoesNotModify(t *testing.T) {
	for _, p := range []*ir.Program{RingAllReduce(4, ir.Simple), llPairs(3).Build(), mailbox(false).Build()} {
		before := p.Clone()
		verify.Verify(p, verify.Options{})
		if d := Diff(before, p); d != "" {
			t.Errorf("%s changed:\n%s", p.Name, d)
		}
	}
}

// TestDeterministic: the same program gives the same diagnostics.
func TestDeterministic(t *testing.T) {
	p := mailbox(false).Build()
	p.Ranks[1].TBs[0].Ops[0].Count = 2
	a, b := verify.Verify(p, verify.Options{}), verify.Verify(p, verify.Options{})
	if d := cmp.Diff(a, b); d != "" {
		t.Error(d)
	}
}

// TestBufferChunks checks the sizes reported to other passes.
func TestBufferChunks(t *testing.T) {
	b := New(ir.Gather, 3, 2)
	b.Rank(0).Chunks(0, 0, 5)
	p := b.Build()
	type got struct {
		N  int64
		OK bool
	}
	var g []got
	for _, r := range []int{0, 1, 3} {
		for k := range ir.NumBufKinds {
			n, ok := verify.BufferChunks(p, r, k)
			g = append(g, got{n, ok})
		}
	}
	want := []got{{2, true}, {6, true}, {5, true}, {2, true}, {0, false}, {0, true}, {0, false}, {0, false}, {0, false}}
	if d := cmp.Diff(want, g); d != "" {
		t.Error(d)
	}
}

var corpusDir = flag.String("corpus", filepath.Join(repoRoot, "..", "shared", "corpus"), "third-party schedule corpus")

// TestSizedPrograms: wider rings still verify clean (a quick check of the
// algorithms at a size where the two-iteration model and the frontier
// matter).
func TestSizedPrograms(t *testing.T) {
	n := 64
	if testing.Short() {
		n = 16
	}
	clean(t, RingAllReduce(n, ir.Simple), verify.Options{})
	clean(t, primRing(n).Build(), verify.Options{})
	clean(t, llPairs(8).Build(), verify.Options{})
}
