package passes

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/ir/irtext"
)

// testOpts are the options every test starts from: invariants checked after
// every pass, output captured.
func testOpts(out *bytes.Buffer) Options {
	return Options{VerifyEach: true, Out: out}
}

func TestPassOrder(t *testing.T) {
	want := []string{"verify-input", "legalize", "verify", "lower", "bundle"}
	if d := cmp.Diff(want, Names()); d != "" {
		t.Errorf("pass order (-want +got):\n%s", d)
	}
	var req []string
	for _, p := range Pipeline() {
		if p.Required {
			req = append(req, p.Name)
		}
		if p.Summary == "" || p.Run == nil {
			t.Errorf("pass %s lacks a summary or a function", p.Name)
		}
	}
	if d := cmp.Diff([]string{"legalize", "lower", "bundle"}, req); d != "" {
		t.Errorf("required passes (-want +got):\n%s", d)
	}
}

func TestCompile(t *testing.T) {
	progs := []*ir.Program{
		irtest.RingAllReduce(4, ir.Simple),
		irtest.RingAllReduce(3, ir.LL),
		irtest.AllGatherRing(5),
		irtest.PairsAllReducePrimitive(3),
	}
	for _, p := range progs {
		t.Run(fmt.Sprintf("%s/%v", p.Name, p.Protocol), func(t *testing.T) {
			var out bytes.Buffer
			opts := testOpts(&out)
			opts.EmbedSource = true
			orig := p.Clone()
			s, err := Run(p, opts)
			if err != nil {
				t.Fatal(err)
			}
			if hasErrors(s.Diags) {
				t.Fatal(s.Diags)
			}
			if d := cmp.Diff(Names(), s.Ran); d != "" {
				t.Errorf("passes run (-want +got):\n%s", d)
			}
			if d := irtest.Diff(orig, p); d != "" {
				t.Errorf("Compile modified its input:\n%s", d)
			}
			b := s.Bundle
			data, err := bundle.Encode(b)
			if err != nil {
				t.Fatal(err)
			}
			back, err := bundle.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := back.CheckTables(); err != nil {
				t.Fatal(err)
			}
			if back.Meta != bundle.MetaOf(p) {
				t.Errorf("meta %+v, want %+v", back.Meta, bundle.MetaOf(p))
			}
			// The embedded source parses back to the input.
			src, ds := irtext.Parse("embedded", back.Source)
			if len(ds) > 0 {
				t.Fatal(ds)
			}
			if d := irtest.Diff(p, src); d != "" {
				t.Errorf("embedded source (-input +parsed):\n%s", d)
			}
			// Compile gives the same bundle.
			b2, ds2, err := Compile(p, opts)
			if err != nil || hasErrors(ds2) {
				t.Fatal(err, ds2)
			}
			id1, _ := b.ID()
			id2, _ := b2.ID()
			if id1 != id2 {
				t.Errorf("two compilations differ: %v vs %v", id1, id2)
			}
			if out.Len() != 0 {
				t.Errorf("unexpected output %q", out.String())
			}
		})
	}
}

func TestStopAfter(t *testing.T) {
	p := irtest.RingAllReduce(3, ir.Simple)
	var out bytes.Buffer
	opts := testOpts(&out)
	opts.StopAfter = "legalize"
	s, err := Run(p, opts)
	if err != nil || hasErrors(s.Diags) {
		t.Fatal(err, s.Diags)
	}
	if d := cmp.Diff([]string{"verify-input", "legalize"}, s.Ran); d != "" {
		t.Errorf("ran (-want +got):\n%s", d)
	}
	if s.Prog.Level() != ir.LevelPrimitive || s.Bundle != nil || s.Tables != nil {
		t.Errorf("state after legalize: level %v bundle %v tables %v", s.Prog.Level(), s.Bundle, s.Tables)
	}
	b, ds, err := Compile(p, opts)
	if b != nil || len(ds) != 0 || err != nil {
		t.Errorf("Compile stopped early = %v, %v, %v", b, ds, err)
	}
}

func TestPrintAfter(t *testing.T) {
	p := irtest.RingAllReduce(2, ir.Simple)
	var out bytes.Buffer
	opts := testOpts(&out)
	opts.PrintAfter = []string{"legalize", "bundle"}
	if _, _, err := Compile(p, opts); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// The legalised ring in the textual IR, then the bundle line.
	if !strings.HasPrefix(got, "# after legalize\nprogram \"ring_allreduce_2\" allreduce") {
		t.Errorf("print-after legalize:\n%s", got)
	}
	// It parses back to the legalised program.
	text := strings.SplitN(strings.TrimPrefix(got, "# after legalize\n"), "# after bundle", 2)
	q, ds := irtext.Parse("printed", []byte(text[0]))
	if len(ds) > 0 || q.Level() != ir.LevelPrimitive || len(q.Ranks[0].Channels) != 2 {
		t.Errorf("printed program: %v", ds)
	}
	if len(text) != 2 || !strings.Contains(text[1], ": bundle ") || !strings.Contains(text[1], "2 ranks") {
		t.Errorf("print-after bundle: %q", got)
	}
	out.Reset()
	opts.PrintAfter = []string{"all"}
	if _, _, err := Compile(p, opts); err != nil {
		t.Fatal(err)
	}
	for _, n := range Names() {
		if !strings.Contains(out.String(), "# after "+n) {
			t.Errorf("print-after all: nothing after %s", n)
		}
	}
}

func TestTimePasses(t *testing.T) {
	var out bytes.Buffer
	opts := testOpts(&out)
	opts.TimePasses = true
	s, err := Run(irtest.RingAllReduce(3, ir.Simple), opts)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tm := range s.Timings {
		names = append(names, tm.Pass)
		if tm.Elapsed <= 0 {
			t.Errorf("%s: elapsed %v", tm.Pass, tm.Elapsed)
		}
	}
	if d := cmp.Diff(Names(), names); d != "" {
		t.Errorf("timed passes (-want +got):\n%s", d)
	}
	// Ops: 3 ranks of 5 transfer ops, then 15 primitives per rank.
	if s.Timings[0].Ops != 15 || s.Timings[1].Ops != 45 {
		t.Errorf("ops %+v", s.Timings)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 7 || !strings.Contains(lines[0], "pass") || !strings.Contains(lines[6], "total") {
		t.Errorf("timing table:\n%s", out.String())
	}
}

func TestDiagnosticsStop(t *testing.T) {
	p := irtest.RingAllReduce(3, ir.Simple)
	p.File = "ring.txt"
	p.Ranks[1].TBs[0].Ops = p.Ranks[1].TBs[0].Ops[:4] // a receive short
	var out bytes.Buffer
	s, err := Run(p, testOpts(&out))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"verify-input"}, s.Ran); d != "" {
		t.Errorf("ran (-want +got):\n%s", d)
	}
	if !hasErrors(s.Diags) || s.Bundle != nil {
		t.Fatalf("diags %v bundle %v", s.Diags, s.Bundle)
	}
	if s.Diags[0].File != "ring.txt" || s.Diags[0].Code != diag.TransferMismatch {
		t.Errorf("first diagnostic %v", s.Diags[0])
	}
	// Without the input verifier, legalize reports the same problem itself.
	opts := testOpts(&out)
	opts.Skip = []string{"verify-input"}
	b, ds, err := Compile(p, opts)
	if err != nil || b != nil || len(ds) == 0 || ds[0].Code != diag.TransferMismatch {
		t.Errorf("skip verify-input: %v %v %v", b, ds, err)
	}
}

func TestSkip(t *testing.T) {
	var out bytes.Buffer
	opts := testOpts(&out)
	opts.Skip = []string{"verify-input", "verify"}
	s, err := Run(irtest.RingAllReduce(3, ir.Simple), opts)
	if err != nil || s.Bundle == nil {
		t.Fatal(err, s.Diags)
	}
	if d := cmp.Diff([]string{"legalize", "lower", "bundle"}, s.Ran); d != "" {
		t.Errorf("ran (-want +got):\n%s", d)
	}
}

func TestBadOptions(t *testing.T) {
	p := irtest.RingAllReduce(2, ir.Simple)
	for _, o := range []Options{
		{StopAfter: "optimize"},
		{PrintAfter: []string{"legalise"}},
		{Skip: []string{"legalize"}},
		{Skip: []string{"nope"}},
	} {
		b, ds, err := Compile(p, o)
		if !errors.Is(err, ErrOptions) || b != nil || ds != nil {
			t.Errorf("%+v: %v, %v, %v", o, b, ds, err)
		}
	}
}

// A pass that panics, or fails, is an internal error naming it.
func TestInternalError(t *testing.T) {
	i := 1
	if pipeline[i].Name != "legalize" {
		t.Fatal("pipeline changed")
	}
	saved := pipeline[i].Run
	defer func() { pipeline[i].Run = saved }()
	pipeline[i].Run = func(s *State) error {
		var m map[string]int
		m["x"] = 1 // panics
		return nil
	}
	var out bytes.Buffer
	s, err := Run(irtest.RingAllReduce(2, ir.Simple), testOpts(&out))
	var ie *InternalError
	if !errors.As(err, &ie) || ie.Pass != "legalize" || !ie.Panic || len(ie.Stack) == 0 {
		t.Fatalf("got %v", err)
	}
	if !strings.Contains(err.Error(), "internal compiler error in pass legalize: panic: assignment to entry in nil map") {
		t.Errorf("message %q", err.Error())
	}
	if d := cmp.Diff([]string{"verify-input", "legalize"}, s.Ran); d != "" {
		t.Errorf("ran (-want +got):\n%s", d)
	}
	pipeline[i].Run = func(s *State) error { return errors.New("boom") }
	_, _, err = Compile(irtest.RingAllReduce(2, ir.Simple), testOpts(&out))
	if !errors.As(err, &ie) || ie.Pass != "legalize" || ie.Panic || err.Error() != "internal compiler error in pass legalize: boom" {
		t.Errorf("got %v", err)
	}
	// A pass that breaks the program is caught by VerifyEach.
	pipeline[i].Run = func(s *State) error {
		q := s.Prog.Clone()
		q.Ranks[0].Channels = append(q.Ranks[0].Channels, ir.Channel{Peer: 1, PeerChannel: 7})
		s.Prog = q
		return nil
	}
	_, ds, err := Compile(irtest.RingAllReduce(2, ir.Simple), testOpts(&out))
	if !errors.As(err, &ie) || ie.Pass != "legalize" || !strings.Contains(err.Error(), "verify-each after legalize") || len(ds) == 0 {
		t.Errorf("got %v, %v", err, ds)
	}
}

func TestNilProgram(t *testing.T) {
	var out bytes.Buffer
	b, ds, err := Compile(nil, testOpts(&out))
	if err != nil || b != nil || !hasErrors(ds) {
		t.Errorf("Compile(nil) = %v, %v, %v", b, ds, err)
	}
}

// BenchmarkCompile measures the whole pipeline on the ring allreduce
// (goal: 50 ms at 64 ranks on the 2-core development machine).
func BenchmarkCompile(b *testing.B) {
	for _, n := range []int{8, 64} {
		p := irtest.RingAllReduce(n, ir.Simple)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bd, ds, err := Compile(p, Options{})
				if err != nil || bd == nil {
					b.Fatal(err, ds)
				}
			}
		})
	}
}

// BenchmarkPasses times each pass at 64 and 1024 ranks, up to verify (the
// passes this package owns; lower is codegen/optable's).
func BenchmarkPasses(b *testing.B) {
	for _, n := range []int{64, 1024} {
		p := irtest.RingAllReduce(n, ir.Simple)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				s, err := Run(p, Options{StopAfter: "verify", TimePasses: true, Out: &bytes.Buffer{}})
				if err != nil || hasErrors(s.Diags) {
					b.Fatal(err, s.Diags)
				}
				for _, t := range s.Timings {
					b.ReportMetric(float64(t.Elapsed.Nanoseconds()), t.Pass+"-ns/op")
				}
			}
		})
	}
}
