package schedjson

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// The hand-written example schedules (examples/*.json at the repository
// root) and the bad-input schedules (testdata/bad/ at the repository root)
// are built here, once, from irtest builders; the committed files must equal
// Format of these programs. Regenerate with
//
//	go test ./compiler/frontends/schedjson -run 'TestExamples|TestBadFiles' -update
var update = flag.Bool("update", false, "rewrite examples, bad-input files and golden files")

const repoRoot = "../../.."

func mod(a, n int) int { return ((a % n) + n) % n }

var (
	I, O, S        = irtest.I, irtest.O, irtest.S
	Remote, Packet = irtest.Remote, irtest.Packet
)

// pairs2Simple: each rank owns one of the two chunks, reduces it from both
// inputs (the peer's through channel 0) and writes the sum to both outputs,
// between an opening and a closing handshake.
func pairs2Simple() *ir.Program {
	b := irtest.New(ir.AllReduce, 2, 2).Name("allreduce_pairs_2rank_simple").Arrangements(true, true).
		Meta("description", "2-rank allreduce, primitive ops: rank r reduces chunk r from its own and the peer's input "+
			"(read through channel 0) and writes the sum to both outputs; signal/wait before (inputs ready) and after (outputs written)")
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	for r := int64(0); r < 2; r++ {
		b.Rank(int(r)).Chunks(2, 2, 0).PrimTB().
			Signal(0).Wait(0).
			Reduce(1, []ir.Ref{I(r), Remote(I(r), 0)}, O(r), Remote(O(r), 0)).
			Signal(0).Wait(0)
	}
	return b.Build()
}

// pairs2LL: each rank writes its input as LL packets into the peer's
// scratch chunk 0, then reduces the two (in rank order on both ranks, so
// both compute the same bits).
func pairs2LL() *ir.Program {
	b := irtest.New(ir.AllReduce, 2, 1).Name("allreduce_pairs_2rank_ll").Protocol(ir.LL).Arrangements(true, true).
		Meta("description", "2-rank allreduce, primitive ops, LL protocol: each rank writes its input as packets into the peer's "+
			"scratch chunk 0 (through channel 0), then reduces its input with the received packets, sources in rank order")
	b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	for r := 0; r < 2; r++ {
		srcs := []ir.Ref{I(0), Packet(S(0))}
		if r == 1 {
			srcs[0], srcs[1] = srcs[1], srcs[0]
		}
		b.Rank(r).Chunks(1, 1, 1).PrimTB().
			Copy(1, I(0), Packet(Remote(S(0), 0))).
			Reduce(1, srcs, O(0))
	}
	return b.Build()
}

// ring builds the MSCCL ring allreduce on n ranks over nch channels: channel
// ch carries chunks ch*n .. ch*n+n-1 on threadblock ch, as irtest.RingAllReduce
// does for one channel.
func ring(name string, n, nch int, proto ir.Protocol, desc string) *ir.Program {
	C := int64(n * nch)
	b := irtest.New(ir.AllReduce, n, C).Name(name).Protocol(proto).Arrangements(true, true).Meta("description", desc)
	for r := 0; r < n; r++ {
		rb := b.Rank(r).Chunks(C, C, 0)
		for ch := 0; ch < nch; ch++ {
			base := int64(ch * n)
			c := func(k int) int64 { return base + int64(mod(k, n)) }
			tb := rb.TB(mod(r+1, n), mod(r-1, n), ch)
			tb.Send(1, I(c(r)))
			for k := 1; k <= n-2; k++ {
				tb.RRS(1, I(c(r-k)))
			}
			tb.RRCS(1, I(c(r+1)), O(c(r+1)))
			for j := 0; j <= n-3; j++ {
				tb.RCS(1, O(c(r-j)))
			}
			tb.Recv(1, O(c(r+2)))
		}
	}
	return b.Build()
}

const ringDesc = "MSCCL ring allreduce on 8 ranks, transfer ops: rank r sends to r+1 and receives from r-1; " +
	"chunk c starts on rank c, collects every input chunk c (rrs), is completed on rank c-1 (rrcs) and then travels the ring (rcs, recv)"

func ring8Simple() *ir.Program {
	return ring("allreduce_ring_8rank_simple", 8, 1, ir.Simple, ringDesc)
}

func ring8LL() *ir.Program {
	return ring("allreduce_ring_8rank_ll", 8, 1, ir.LL, ringDesc+"; LL protocol")
}

func ring8x2Simple() *ir.Program {
	return ring("allreduce_ring_8rank_2ch_simple", 8, 2, ir.Simple,
		"MSCCL ring allreduce on 8 ranks over 2 channels: threadblock ch of every rank runs the ring of allreduce_ring_8rank_simple "+
			"on transfer channel ch, over chunks 8ch..8ch+7 (16 chunks per block)")
}

func allgather4() *ir.Program {
	n := 4
	b := irtest.New(ir.AllGather, n, 1).Name("allgather_ring_4rank_simple").Arrangements(true, true).
		Meta("description", "ring allgather on 4 ranks, transfer ops: rank r sends its block to r+1, copies it into o[r], "+
			"then stores and forwards the blocks of r-1 and r-2 (rcs) and stores the block of r+1 (recv)")
	for r := 0; r < n; r++ {
		tb := b.Rank(r).Chunks(1, int64(n), 0).TB(mod(r+1, n), mod(r-1, n), 0)
		tb.Send(1, I(0)).Copy(1, I(0), O(int64(r)))
		for k := 1; k <= n-2; k++ {
			tb.RCS(1, O(int64(mod(r-k, n))))
		}
		tb.Recv(1, O(int64(mod(r+1, n))))
	}
	return b.Build()
}

func broadcast4() *ir.Program {
	n := 4
	b := irtest.New(ir.Broadcast, n, 2).Name("broadcast_chain_4rank_simple").Root(0).Arrangements(true, true).
		Meta("description", "chain broadcast on 4 ranks written for root 0 (other roots rotate the ranks), transfer ops: "+
			"the root sends its 2 chunks to rank 1 one at a time and copies them to its output; ranks 1 and 2 store and forward (rcs); rank 3 stores")
	b.Rank(0).Chunks(2, 2, 0).TB(1, -1, 0).Send(1, I(0)).Send(1, I(1)).Copy(2, I(0), O(0))
	for r := 1; r < n-1; r++ {
		b.Rank(r).Chunks(0, 2, 0).TB(r+1, r-1, 0).RCS(1, O(0)).RCS(1, O(1))
	}
	b.Rank(n-1).Chunks(0, 2, 0).TB(-1, n-2, 0).Recv(1, O(0)).Recv(1, O(1))
	return b.Build()
}

type example struct {
	file string
	prog func() *ir.Program
}

var examples = []example{
	{"allreduce_pairs_2rank_simple.json", pairs2Simple},
	{"allreduce_pairs_2rank_ll.json", pairs2LL},
	{"allreduce_ring_8rank_simple.json", ring8Simple},
	{"allreduce_ring_8rank_ll.json", ring8LL},
	{"allreduce_ring_8rank_2ch_simple.json", ring8x2Simple},
	{"allgather_ring_4rank_simple.json", allgather4},
	{"broadcast_chain_4rank_simple.json", broadcast4},
}

// TestExamples checks that every committed example is the canonical form of
// its builder program, that it parses back to that program, and that the
// program computes its collective in every arrangement it declares (symbolic
// simulation with irtest.Simulate).
func TestExamples(t *testing.T) {
	for _, ex := range examples {
		t.Run(ex.file, func(t *testing.T) {
			want := ex.prog()
			path := filepath.Join(repoRoot, "examples", ex.file)
			out, err := Format(want)
			if err != nil {
				t.Fatal(err)
			}
			if *update {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			got, ds := Parse(path, data)
			if len(ds) != 0 {
				t.Fatalf("diagnostics: %v", ds)
			}
			if d := irtest.Diff(want, got); d != "" {
				t.Errorf("parsed example differs from its builder (-want +got):\n%s", d)
			}
			if string(data) != string(out) {
				t.Errorf("%s is not in canonical form (run with -update); Format gives:\n%s", path, out)
			}
			if name := strings.TrimSuffix(ex.file, ".json"); got.Name != name {
				t.Errorf("name %q, want %q (the file name)", got.Name, name)
			}
			for _, inPlace := range irtest.Arrangements(got) {
				if _, err := irtest.Simulate(got, irtest.SimOptions{InPlace: inPlace}); err != nil {
					t.Errorf("inplace=%v: %v", inPlace, err)
				}
			}
		})
	}
}

// TestExamplesMatchFixtures cross-checks the transfer-level examples with
// the shared fixtures of ir/irtest, which are built independently.
func TestExamplesMatchFixtures(t *testing.T) {
	for _, c := range []struct{ got, want *ir.Program }{
		{ring8Simple(), irtest.RingAllReduce(8, ir.Simple)},
		{ring8LL(), irtest.RingAllReduce(8, ir.LL)},
		{allgather4(), irtest.AllGatherRing(4)},
	} {
		c.got.Name, c.got.Meta = c.want.Name, c.want.Meta
		if d := irtest.Diff(c.want, c.got); d != "" {
			t.Errorf("%s differs from the irtest fixture (-fixture +example):\n%s", c.want.Name, d)
		}
	}
}

// ---- bad inputs ----

// badCase is one file of testdata/bad: the program (or raw text), the
// expected code, and how to find the expected position.
type badCase struct {
	file string
	code diag.Code
	// text builds the file's content.
	text func(t *testing.T) []byte
	// at locates the expected position in the parsed program (verifier
	// codes); nil for the parser's own codes, whose position Parse reports.
	at func(p *ir.Program) ir.Pos
	// sim is the failure the symbolic simulation must report ("" = none).
	sim string
}

func formatted(t *testing.T, p *ir.Program) []byte {
	t.Helper()
	out, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func oneRank(name string, C int64, inPlace bool, desc string) *irtest.Builder {
	return irtest.New(ir.AllReduce, 1, C).Name(name).Arrangements(inPlace, true).Meta("description", desc)
}

func opPos(r, t, s int) func(p *ir.Program) ir.Pos {
	return func(p *ir.Program) ir.Pos { return p.Ranks[r].TBs[t].Ops[s].Pos }
}

var badCases = []badCase{
	{file: "truncated.json", code: diag.Syntax, text: func(t *testing.T) []byte {
		// The pairs example, cut off in the middle of rank 1's reduce.
		b := formatted(t, pairs2Simple())
		i := strings.LastIndex(string(b), `{"op": "reduce"`)
		return b[:i+len(`{"op": "reduce", "srcs": [{"buf": "i", "off": 1}, {"bu`)]
	}},
	{file: "unknown_op.json", code: diag.UnknownOp, text: func(t *testing.T) []byte {
		// An MSCCL++ op name where Theseus has copy with a remote dst.
		p := pairs2Simple()
		p.Name = "bad_unknown_op"
		p.Meta = map[string]string{"description": `rank 0 uses the MSCCL++ op name "put" (Theseus: copy with a remote dst)`}
		return []byte(strings.Replace(string(formatted(t, p)), `{"op": "signal"`, `{"op": "put"`, 1))
	}},
	{file: "chunk_out_of_range.json", code: diag.ChunkRange, at: opPos(0, 0, 0), sim: "out of range",
		text: func(t *testing.T) []byte {
			b := oneRank("bad_chunk_out_of_range", 1, false,
				"the copy moves 2 chunks but input and output have 1 chunk each (chunks_per_block 1)")
			b.Rank(0).Chunks(1, 1, 0).PrimTB().Copy(2, I(0), O(0))
			return formatted(t, b.Build())
		}},
	{file: "signal_wait_mismatch.json", code: diag.SignalWait, at: opPos(0, 0, 5), sim: "stuck",
		text: func(t *testing.T) []byte {
			p := pairs2Simple()
			p.Name = "bad_signal_wait_mismatch"
			p.Meta = map[string]string{"description": "allreduce_pairs_2rank_simple with one extra wait at the end of rank 0: " +
				"3 waits on rank 0's channel 0 against 2 signals from rank 1"}
			tb := &p.Ranks[0].TBs[0]
			tb.Ops = append(tb.Ops, ir.Op{Code: ir.OpWait, Chans: []int{0}})
			return formatted(t, p)
		}},
	{file: "deadlock.json", code: diag.Deadlock, at: opPos(0, 0, 0), sim: "stuck",
		text: func(t *testing.T) []byte {
			p := pairs2Simple()
			p.Name = "bad_deadlock"
			p.Meta = map[string]string{"description": "allreduce_pairs_2rank_simple with the opening handshake reversed on both ranks: " +
				"each rank waits for the other's signal before sending its own"}
			for r := range p.Ranks {
				ops := p.Ranks[r].TBs[0].Ops
				ops[0], ops[1] = ops[1], ops[0]
			}
			return formatted(t, p)
		}},
	{file: "race.json", code: diag.Race, at: opPos(0, 1, 0),
		text: func(t *testing.T) []byte {
			b := oneRank("bad_race", 1, false,
				"two threadblocks of rank 0 both write o[0] with nothing ordering them")
			rb := b.Rank(0).Chunks(1, 1, 0)
			rb.PrimTB().Copy(1, I(0), O(0))
			rb.PrimTB().Copy(1, I(0), O(0))
			return formatted(t, b.Build())
		}},
	{file: "wrong_result.json", code: diag.Postcondition, at: opPos(0, 0, 1), sim: "postcondition",
		text: func(t *testing.T) []byte {
			b := oneRank("bad_wrong_result", 2, false,
				"the second copy reads input chunk 0 where it should read chunk 1, so output chunk 1 holds input chunk 0")
			b.Rank(0).Chunks(2, 2, 0).PrimTB().Copy(1, I(0), O(0)).Copy(1, I(0), O(1))
			return formatted(t, b.Build())
		}},
}

// TestBadFiles checks testdata/bad: each file is as built here, its .expect
// names the code and position; Parse reports exactly that for the parser's
// codes, and parses the verifier's cases cleanly (they are valid JSON
// schedules with one semantic defect, which the simulation confirms).
func TestBadFiles(t *testing.T) {
	dir := filepath.Join(repoRoot, "testdata", "bad")
	for _, c := range badCases {
		t.Run(c.file, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			text := c.text(t)
			if *update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, text, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(data) != string(text) {
				t.Errorf("%s differs from its builder (run with -update)", path)
			}
			p, ds := Parse(path, data)
			var want string
			if c.at == nil {
				if len(ds) != 1 {
					t.Fatalf("want one diagnostic, got %v", ds)
				}
				if ds[0].Code != c.code {
					t.Errorf("code %s, want %s: %v", ds[0].Code, c.code, ds[0])
				}
				want = fmt.Sprintf("%s %d:%d\n", ds[0].Code, ds[0].Line, ds[0].Col)
			} else {
				if len(ds) != 0 {
					t.Fatalf("a verifier case must parse cleanly: %v", ds)
				}
				pos := c.at(p)
				want = fmt.Sprintf("%s %d:%d\n", c.code, pos.Line, pos.Col)
				var errs []string
				for _, inPlace := range irtest.Arrangements(p) {
					if _, err := irtest.Simulate(p, irtest.SimOptions{InPlace: inPlace}); err != nil {
						errs = append(errs, err.Error())
					}
				}
				got := strings.Join(errs, "; ")
				if c.sim == "" && got != "" || !strings.Contains(got, c.sim) {
					t.Errorf("simulation: %q, want a failure containing %q", got, c.sim)
				}
			}
			expect := strings.TrimSuffix(path, ".json") + ".expect"
			if *update {
				if err := os.WriteFile(expect, []byte(want), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := os.ReadFile(expect)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != want {
				t.Errorf("%s holds %q, want %q", expect, got, want)
			}
		})
	}
}

// TestDocExample checks that the complete example of docs/schedule-format.md
// §1 parses to allreduce_pairs_2rank_simple (its description shortened).
func TestDocExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "docs", "schedule-format.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	start := strings.Index(text, "```json\n")
	end := strings.Index(text[start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no json block in docs/schedule-format.md")
	}
	got, ds := Parse("doc", []byte(text[start+8:start+8+end]))
	if len(ds) != 0 {
		t.Fatal(ds)
	}
	want := pairs2Simple()
	want.Meta["description"] = "2-rank allreduce, primitive ops: ..."
	if d := irtest.Diff(want, got); d != "" {
		t.Errorf("doc example differs (-want +got):\n%s", d)
	}
}
