package msccl

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/frontends/internal/importtest"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	. "github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

// st writes one <step> with all ten attributes.
func st(s int, typ, sb string, so int, db string, do, cnt, depid, deps, hasdep int) string {
	return fmt.Sprintf(`<step s="%d" type="%s" srcbuf="%s" srcoff="%d" dstbuf="%s" dstoff="%d" cnt="%d" depid="%d" deps="%d" hasdep="%d"/>`,
		s, typ, sb, so, db, do, cnt, depid, deps, hasdep)
}

// diagKey is the part of a diagnostic the tests compare.
type diagKey struct {
	Sev        string
	Code       diag.Code
	Line, Col  int
	Rank, TB   int
	Step       int
	MsgContain string
}

func keys(ds []diag.Diagnostic) []diagKey {
	out := make([]diagKey, len(ds))
	for i, d := range ds {
		out[i] = diagKey{d.Severity.String(), d.Code, d.Line, d.Col, d.Rank, d.TB, d.Step, ""}
	}
	return out
}

// mustParse parses and fails on any error diagnostic.
func mustParse(t *testing.T, src string) (*ir.Program, []diag.Diagnostic) {
	t.Helper()
	return importtest.MustParse(t, Parse, "t.xml", src)
}

// wantErr parses and checks that exactly the given codes are reported as
// errors, and that the first one mentions msg; it returns the diagnostics.
func wantErr(t *testing.T, src, msg string, codes ...diag.Code) []diag.Diagnostic {
	t.Helper()
	return importtest.WantErr(t, Parse, "t.xml", src, msg, codes...)
}

const twoRankAllReduce = `<algo name="allreduce_binary_tree" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1" outofplace="0" minBytes="0" maxBytes="0">
  <gpu id="0" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="1" recv="1" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrcs" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="r" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="2" o_chunks="0" s_chunks="0">
    <tb id="0" send="0" recv="0" chan="0">
      <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="1" type="rrcs" srcbuf="i" srcoff="1" dstbuf="i" dstoff="1" cnt="1" depid="-1" deps="-1" hasdep="0"/>
      <step s="2" type="r" srcbuf="i" srcoff="0" dstbuf="i" dstoff="0" cnt="1" depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
`

func TestTwoRankAllReduceExact(t *testing.T) {
	got, ds := mustParse(t, twoRankAllReduce)
	if len(ds) != 0 {
		t.Errorf("diagnostics: %v", ds)
	}
	b := New(ir.AllReduce, 2, 2).Name("allreduce_binary_tree").Arrangements(true, false).
		Meta("format", "msccl-xml").Meta("msccl.nchannels", "1")
	b.Program().Root = -1
	b.Rank(0).Chunks(2, 0, 0).TB(1, 1, 0).Send(1, I(1)).RRCS(1, I(0), I(0)).Recv(1, I(1))
	b.Rank(1).Chunks(2, 0, 0).TB(0, 0, 0).Send(1, I(0)).RRCS(1, I(1), I(1)).Recv(1, I(0))
	if d := Diff(b.Build(), got); d != "" {
		t.Errorf("program (-want +got):\n%s", d)
	}
	// Positions: algo at 1:1, gpu 1 at line 9, its tb at 10:5, steps at 11..13:7.
	if got.Pos != (ir.Pos{Line: 1, Col: 1}) || got.Ranks[1].Pos != (ir.Pos{Line: 9, Col: 3}) ||
		got.Ranks[1].TBs[0].Pos != (ir.Pos{Line: 10, Col: 5}) {
		t.Errorf("positions: algo %v gpu1 %v tb %v", got.Pos, got.Ranks[1].Pos, got.Ranks[1].TBs[0].Pos)
	}
	for i, op := range got.Ranks[1].TBs[0].Ops {
		if want := (ir.Pos{Line: int32(11 + i), Col: 7}); op.Pos != want {
			t.Errorf("step %d at %v, want %v", i, op.Pos, want)
		}
	}
	if got.File != "t.xml" {
		t.Errorf("File = %q", got.File)
	}
}

// algo wraps gpu bodies in an <algo> with the given extra attributes.
func algo(attrs string, gpus ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `<algo name="a" proto="Simple" nchannels="1" nchunksperloop="%d" ngpus="%d" coll="allreduce" inplace="0" outofplace="1" %s>`+"\n",
		1, len(gpus), attrs)
	for i, g := range gpus {
		fmt.Fprintf(&b, `<gpu id="%d" i_chunks="1" o_chunks="1" s_chunks="8">%s</gpu>`+"\n", i, g)
	}
	b.WriteString("</algo>\n")
	return b.String()
}

func tb(id, send, recv int, steps ...string) string {
	return fmt.Sprintf(`<tb id="%d" send="%d" recv="%d" chan="0">%s</tb>`, id, send, recv, strings.Join(steps, ""))
}

func TestReduceFusion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []string
		want  func(tb *TBBuilder)
		warns []diag.Code
	}{{
		name: "three re into one dst fuse",
		steps: []string{
			st(0, "re", "s", 0, "o", 0, 1, -1, -1, 0),
			st(1, "re", "s", 1, "o", 0, 1, -1, -1, 0),
			st(2, "re", "s", 2, "o", 0, 1, -1, -1, 1),
		},
		want: func(b *TBBuilder) { b.Reduce(1, []ir.Ref{O(0), S(0), S(1), S(2)}, O(0)).Publish() },
	}, {
		name: "a depid on a later re starts a new reduction",
		steps: []string{
			st(0, "re", "s", 0, "o", 0, 1, -1, -1, 0),
			st(1, "re", "s", 1, "o", 0, 1, 1, 0, 0),
		},
		want: func(b *TBBuilder) {
			b.Reduce(1, []ir.Ref{O(0), S(0)}, O(0)).Reduce(1, []ir.Ref{O(0), S(1)}, O(0)).Dep(1, 0)
		},
	}, {
		name: "hasdep ends the fusion",
		steps: []string{
			st(0, "re", "s", 0, "o", 0, 1, -1, -1, 1),
			st(1, "re", "s", 1, "o", 0, 1, -1, -1, 0),
		},
		want: func(b *TBBuilder) {
			b.Reduce(1, []ir.Ref{O(0), S(0)}, O(0)).Publish().Reduce(1, []ir.Ref{O(0), S(1)}, O(0))
		},
	}, {
		name: "other dst offset or src buffer is a new reduction",
		steps: []string{
			st(0, "re", "s", 0, "o", 0, 1, -1, -1, 0),
			st(1, "re", "s", 1, "o", 1, 1, -1, -1, 0),
			st(2, "re", "i", 0, "o", 1, 1, -1, -1, 0),
		},
		want: func(b *TBBuilder) {
			b.Reduce(1, []ir.Ref{O(0), S(0)}, O(0)).Reduce(1, []ir.Ref{O(1), S(1)}, O(1)).Reduce(1, []ir.Ref{O(1), I(0)}, O(1))
		},
	}, {
		name: "no fusion across a nop",
		steps: []string{
			st(0, "re", "s", 0, "o", 0, 1, -1, -1, 0),
			st(1, "nop", "i", -1, "o", -1, 0, 1, 0, 0),
			st(2, "re", "s", 1, "o", 0, 1, 1, 0, 0),
		},
		want: func(b *TBBuilder) {
			b.Reduce(1, []ir.Ref{O(0), S(0)}, O(0)).Nop().Dep(1, 0).Reduce(1, []ir.Ref{O(0), S(1)}, O(0)).Dep(1, 0)
		},
	}, {
		name: "fused cnt is the last one's, with a warning",
		steps: []string{
			st(0, "re", "s", 0, "o", 0, 2, -1, -1, 0),
			st(1, "re", "s", 2, "o", 0, 1, -1, -1, 0),
		},
		want:  func(b *TBBuilder) { b.Reduce(1, []ir.Ref{O(0), S(0), S(2)}, O(0)) },
		warns: []diag.Code{diag.BadCount},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			src := algo("", tb(0, -1, -1, tc.steps...)+tb(1, -1, -1, st(0, "cpy", "i", 0, "s", 0, 1, -1, -1, 1)))
			got, ds := mustParse(t, src)
			var warns []diag.Code
			for _, d := range ds {
				if d.Severity == diag.Warning {
					warns = append(warns, d.Code)
				}
			}
			if d := cmp.Diff(tc.warns, warns); d != "" {
				t.Errorf("warnings (-want +got):\n%s\n%v", d, ds)
			}
			b := New(ir.AllReduce, 1, 1)
			tc.want(b.Rank(0).TB(-1, -1, 0))
			if d := cmp.Diff(b.Build().Ranks[0].TBs[0].Ops, got.Ranks[0].TBs[0].Ops, CmpOpts...); d != "" {
				t.Errorf("ops (-want +got):\n%s", d)
			}
		})
	}
}

// TestFusionCap: MSCCL stops fusing when the threadblock's running count of
// reductions reaches 16, so 20 fusable re steps become reductions of 16
// and 4 sources (plus the dst).
func TestFusionCap(t *testing.T) {
	var steps []string
	for i := 0; i < 20; i++ {
		steps = append(steps, st(i, "re", "s", i, "o", 0, 1, -1, -1, 0))
	}
	got, _ := mustParse(t, algo("", tb(0, -1, -1, steps...)))
	ops := got.Ranks[0].TBs[0].Ops
	if len(ops) != 2 || len(ops[0].Srcs) != 17 || len(ops[1].Srcs) != 5 {
		t.Fatalf("got %d ops with %d and %d srcs", len(ops), len(ops[0].Srcs), len(ops[len(ops)-1].Srcs))
	}
	if ops[1].Srcs[1] != S(16) {
		t.Errorf("second reduction starts at %v", ops[1].Srcs[1])
	}
}

// TestDepsRenumbered: dependencies name XML positions; fusion shifts the
// IR indices of later steps.
func TestDepsRenumbered(t *testing.T) {
	tb0 := tb(0, -1, -1,
		st(0, "re", "s", 0, "o", 0, 1, -1, -1, 0),
		st(1, "re", "s", 1, "o", 0, 1, -1, -1, 1),
		st(2, "cpy", "o", 0, "s", 4, 1, -1, -1, 1))
	tb1 := tb(1, -1, -1,
		st(0, "nop", "i", -1, "o", -1, 0, 0, 1, 0), // waits on the fused reduction
		st(1, "cpy", "s", 4, "i", 0, 1, 0, 2, 0),   // waits on the copy, IR step 1
		st(2, "cpy", "s", 4, "i", 0, 1, 0, 9, 0))   // missing step: kept as written
	got, _ := mustParse(t, algo("", tb0+tb1))
	var deps []ir.Dep
	for _, op := range got.Ranks[0].TBs[1].Ops {
		deps = append(deps, op.Deps...)
	}
	want := []ir.Dep{{TB: 0, Step: 0}, {TB: 0, Step: 1}, {TB: 0, Step: 9}}
	if d := cmp.Diff(want, deps); d != "" {
		t.Errorf("deps (-want +got):\n%s", d)
	}
}

func TestNopQuirks(t *testing.T) {
	src := algo("", tb(0, -1, -1,
		st(0, "nop", "i", -1, "o", -1, 0, 1, 0, 1), // hasdep on a nop does nothing
		st(1, "cpy", "i", 0, "o", 0, 1, -1, -1, 0), // follows nop deps without its own depid
		st(2, "nop", "i", -1, "o", -1, 0, -1, -1, 0),
	)+tb(1, -1, -1, st(0, "cpy", "i", 0, "s", 0, 1, -1, -1, 1)))
	got, ds := mustParse(t, src)
	line2 := strings.Split(src, "\n")[1]
	col := func(k int) int { return strings.Index(line2, fmt.Sprintf(`<step s="%d"`, k)) + 1 }
	want := []diagKey{
		{"warning", diag.ImportNote, 2, col(0), 0, 0, 0, ""},
		{"warning", diag.ImportNote, 2, col(1), 0, 0, 1, ""},
		{"warning", diag.ImportNote, 2, col(2), 0, 0, 2, ""},
	}
	if d := cmp.Diff(want, keys(ds)); d != "" {
		t.Errorf("diagnostics (-want +got):\n%s\n%v", d, ds)
	}
	if op := got.Ranks[0].TBs[0].Ops[0]; op.Publish || len(op.Deps) != 1 {
		t.Errorf("nop: publish %v deps %v", op.Publish, op.Deps)
	}
}

func TestHeaderVariants(t *testing.T) {
	gpu := tb(0, -1, -1, st(0, "cpy", "i", 0, "o", 0, 1, -1, -1, 0))
	for _, tc := range []struct {
		name  string
		src   string
		check func(t *testing.T, p *ir.Program, ds []diag.Diagnostic)
	}{{
		name: "LL128 maps to Simple with TS0008",
		src:  strings.Replace(algo("", gpu), `proto="Simple"`, `proto="LL128"`, 1),
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if p.Protocol != ir.Simple || len(ds) != 1 || ds[0].Code != diag.ProtocolMapped || ds[0].Severity != diag.Warning {
				t.Errorf("protocol %v, diags %v", p.Protocol, ds)
			}
		},
	}, {
		name: "LL",
		src:  strings.Replace(algo("", gpu), `proto="Simple"`, `proto="LL"`, 1),
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if p.Protocol != ir.LL {
				t.Errorf("protocol %v", p.Protocol)
			}
		},
	}, {
		name: "old format without outofplace, window or name",
		src: `<algo proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="allreduce" inplace="1" nthreads="256">` +
			`<gpu id="0" i_chunks="1" o_chunks="0" s_chunks="0">` + gpu + `</gpu></algo>`,
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if !p.InPlace || p.OutOfPlace || p.MinBytes != 0 || p.MaxBytes != 0 || p.NumThreads != 256 || p.Name != "t" {
				t.Errorf("got %+v", p)
			}
			for _, d := range ds {
				if d.Severity != diag.Note {
					t.Errorf("unexpected %v", d)
				}
			}
			if len(ds) != 3 {
				t.Errorf("want 3 notes (name, outofplace, nthreads), got %v", ds)
			}
		},
	}, {
		name: "maxBytes 0 is unlimited; values over 2^63-1 too",
		src:  algo(`minBytes="64" maxBytes="18446744073709551615"`, gpu),
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if p.MinBytes != 64 || p.MaxBytes != 0 {
				t.Errorf("window [%d, %d]", p.MinBytes, p.MaxBytes)
			}
		},
	}, {
		name: "redop is ignored with a note",
		src:  algo(`redop="max"`, gpu),
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if len(ds) != 1 || ds[0].Severity != diag.Note || !strings.Contains(ds[0].Msg, "redop") {
				t.Errorf("diags %v", ds)
			}
		},
	}, {
		name: "unknown attribute is a warning",
		src:  algo(`colour="red"`, gpu),
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if len(ds) != 1 || ds[0].Code != diag.UnknownField || ds[0].Severity != diag.Warning ||
				ds[0].Col != strings.Index(algo(`colour="red"`, gpu), "colour")+1 {
				t.Errorf("diags %v", ds)
			}
		},
	}, {
		name: "reduce_scatter spelling",
		src: `<algo name="rs" proto="Simple" nchannels="1" nchunksperloop="4" ngpus="2" coll="reduce_scatter" inplace="0" outofplace="1">` +
			`<gpu id="0" i_chunks="4" o_chunks="2" s_chunks="0">` + gpu + `</gpu><gpu id="1" i_chunks="4" o_chunks="2" s_chunks="0"></gpu></algo>`,
		check: func(t *testing.T, p *ir.Program, ds []diag.Diagnostic) {
			if p.Collective != ir.ReduceScatter || p.ChunksPerBlock != 2 {
				t.Errorf("%v C=%d", p.Collective, p.ChunksPerBlock)
			}
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			p, ds := mustParse(t, tc.src)
			tc.check(t, p, ds)
		})
	}
}

// TestGeometry checks ChunksPerBlock = nchunksperloop / MSCCL's size
// multiplier and the window scaling of gather/scatter.
func TestGeometry(t *testing.T) {
	for _, tc := range []struct {
		coll        string
		ngpus, nclp int
		wantC       int64
		wantWindow  [2]int64
	}{
		{"allreduce", 4, 8, 8, [2]int64{10, 100}},
		{"allgather", 4, 8, 2, [2]int64{10, 100}},
		{"alltoall", 4, 4, 1, [2]int64{10, 100}},
		{"reducescatter", 2, 6, 3, [2]int64{10, 100}},
		{"broadcast", 4, 3, 3, [2]int64{10, 100}},
		{"gather", 4, 2, 2, [2]int64{40, 400}},
		{"scatter", 2, 2, 2, [2]int64{20, 200}},
	} {
		t.Run(tc.coll, func(t *testing.T) {
			var b strings.Builder
			fmt.Fprintf(&b, `<algo name="g" proto="Simple" nchannels="1" nchunksperloop="%d" ngpus="%d" coll="%s" inplace="0" outofplace="1" minBytes="10" maxBytes="100">`,
				tc.nclp, tc.ngpus, tc.coll)
			for r := 0; r < tc.ngpus; r++ {
				fmt.Fprintf(&b, `<gpu id="%d" i_chunks="0" o_chunks="0" s_chunks="0"/>`, r)
			}
			b.WriteString(`</algo>`)
			p, _ := mustParse(t, b.String())
			if p.ChunksPerBlock != tc.wantC || [2]int64{p.MinBytes, p.MaxBytes} != tc.wantWindow {
				t.Errorf("C=%d window [%d, %d], want C=%d %v", p.ChunksPerBlock, p.MinBytes, p.MaxBytes, tc.wantC, tc.wantWindow)
			}
		})
	}
}

func TestRootInference(t *testing.T) {
	// Rank 2 is the only rank that reads its input: the broadcast root.
	src := `<algo name="b" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="3" coll="broadcast" inplace="0" outofplace="1">
<gpu id="0" i_chunks="0" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="2" chan="0">` + st(0, "r", "o", 0, "o", 0, 1, -1, -1, 0) + `</tb></gpu>
<gpu id="1" i_chunks="0" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="2" chan="0">` + st(0, "r", "o", 0, "o", 0, 1, -1, -1, 0) + `</tb></gpu>
<gpu id="2" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0" send="0" recv="-1" chan="0">` + st(0, "s", "i", 0, "o", 0, 1, -1, -1, 0) + `</tb>
<tb id="1" send="1" recv="-1" chan="0">` + st(0, "s", "i", 0, "o", 0, 1, -1, -1, 0) + `</tb>
<tb id="2" send="-1" recv="-1" chan="0">` + st(0, "cpy", "i", 0, "o", 0, 1, -1, -1, 0) + `</tb></gpu></algo>`
	p, _ := mustParse(t, src)
	if p.Root != 2 {
		t.Errorf("root %d, want 2", p.Root)
	}
	// Non-rooted collectives have Root -1.
	p, _ = mustParse(t, twoRankAllReduce)
	if p.Root != -1 {
		t.Errorf("allreduce root %d", p.Root)
	}
}

func TestInPlaceAllGatherWithoutInput(t *testing.T) {
	// In-place allgather files may declare i_chunks="0" and only use o: the
	// rank's own block of o is its input (NCCL in-place semantics).
	src := `<algo name="ag" proto="LL" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="1" outofplace="0" minBytes="0" maxBytes="1023">
<gpu id="0" i_chunks="0" o_chunks="2" s_chunks="0"><tb id="0" send="1" recv="1" chan="0">` +
		st(0, "s", "o", 0, "o", 0, 1, -1, -1, 0) + st(1, "r", "o", 1, "o", 1, 1, -1, -1, 0) + `</tb></gpu>
<gpu id="1" i_chunks="0" o_chunks="2" s_chunks="0"><tb id="0" send="0" recv="0" chan="0">` +
		st(0, "s", "o", 1, "o", 1, 1, -1, -1, 0) + st(1, "r", "o", 0, "o", 0, 1, -1, -1, 0) + `</tb></gpu></algo>`
	p, ds := mustParse(t, src)
	if len(ds) != 0 || p.ChunksPerBlock != 1 || !p.InPlace || p.OutOfPlace || p.Ranks[0].Chunks != [3]int64{0, 2, 0} {
		t.Errorf("got C=%d inplace=%v/%v chunks %v diags %v", p.ChunksPerBlock, p.InPlace, p.OutOfPlace, p.Ranks[0].Chunks, ds)
	}
}

func TestErrors(t *testing.T) {
	gpu := tb(0, -1, -1, st(0, "cpy", "i", 0, "o", 0, 1, -1, -1, 0))
	for _, tc := range []struct {
		name, src, msg string
		codes          []diag.Code
	}{
		{"empty", "", "no <algo>", []diag.Code{diag.MissingField}},
		{"truncated", `<algo name="a"`, "malformed XML", []diag.Code{diag.Syntax}},
		{"unclosed", `<algo name="a">`, "malformed XML", []diag.Code{diag.Syntax}},
		{"two algos", algo("", gpu) + algo("", gpu), "second <algo>", []diag.Code{diag.Syntax}},
		{"send coll", strings.Replace(algo("", gpu), `coll="allreduce"`, `coll="send"`, 1), "unsupported: coll", []diag.Code{diag.Unsupported}},
		{"alltoallv", strings.Replace(algo("", gpu), `coll="allreduce"`, `coll="alltoallv"`, 1), "unsupported: coll", []diag.Code{diag.Unsupported}},
		{"bogus coll", strings.Replace(algo("", gpu), `coll="allreduce"`, `coll="allsum"`, 1), "unknown collective", []diag.Code{diag.UnknownCollective}},
		{"bad proto", strings.Replace(algo("", gpu), `proto="Simple"`, `proto="LL256"`, 1), "unknown proto", []diag.Code{diag.BadValue}},
		{"ra", algo("", tb(0, -1, -1, st(0, "ra", "i", 0, "o", 0, 1, -1, -1, 0))), "step type ra", []diag.Code{diag.Unsupported}},
		{"unknown step", algo("", tb(0, -1, -1, st(0, "jump", "i", 0, "o", 0, 1, -1, -1, 0))), "unknown step type", []diag.Code{diag.UnknownOp}},
		{"bad buffer", algo("", tb(0, -1, -1, st(0, "cpy", "x", 0, "o", 0, 1, -1, -1, 0))), "not a buffer", []diag.Code{diag.BadValue}},
		{"negative used offset", algo("", tb(0, -1, -1, st(0, "cpy", "i", -1, "o", 0, 1, -1, -1, 0))), "srcoff=-1", []diag.Code{diag.BadValue}},
		{"hasdep 2", algo("", tb(0, -1, -1, st(0, "cpy", "i", 0, "o", 0, 1, -1, -1, 2))), "hasdep=2", []diag.Code{diag.BadValue}},
		{"depid without deps", algo("", tb(0, -1, -1, st(0, "cpy", "i", 0, "o", 0, 1, 1, -1, 0))), "deps=-1", []diag.Code{diag.BadValue}},
		{"step numbering", algo("", tb(0, -1, -1, st(1, "cpy", "i", 0, "o", 0, 1, -1, -1, 0))), "step s=1 is at position 0", []diag.Code{diag.DuplicateID}},
		{"missing attribute", algo("", `<tb id="0" send="-1" recv="-1" chan="0"><step s="0" type="cpy"/></tb>`), "lacks the srcbuf", []diag.Code{
			diag.MissingField, diag.MissingField, diag.MissingField, diag.MissingField, diag.MissingField, diag.MissingField, diag.MissingField, diag.MissingField}},
		{"tb gap", algo("", tb(0, -1, -1)+tb(2, -1, -1)), "tb 2 on gpu 0 has no tb 1", []diag.Code{diag.DuplicateID}},
		{"tb repeated", algo("", tb(0, -1, -1)+tb(0, -1, -1)), "tb id 0 repeated", []diag.Code{diag.DuplicateID}},
		{"gpu missing", strings.Replace(algo("", gpu, gpu), `<gpu id="1"`, `<gpu id="0"`, 1), "gpu id 0 repeated", []diag.Code{diag.DuplicateID}},
		{"ngpus vs gpus", strings.Replace(algo("", gpu), `ngpus="1"`, `ngpus="3"`, 1), "gpu 1 is missing", []diag.Code{diag.DuplicateID}},
		{"ngpus huge", strings.Replace(algo("", gpu), `ngpus="1"`, `ngpus="9999999"`, 1), "ngpus=9999999", []diag.Code{diag.TooLarge}},
		{"op format", algo("", `<tb id="0" send="-1" recv="-1" chan="0"><op step="0" type="cpy"/></tb>`), "<op> is the msccl-tools", []diag.Code{diag.UnknownField}},
		{"text", algo("", "hello"+gpu), "text \"hello\"", []diag.Code{diag.Syntax}},
		{"duplicate attribute", strings.Replace(algo("", gpu), `name="a"`, `name="a" name="b"`, 1), "attribute name repeated", []diag.Code{diag.BadValue}},
		{"not an integer", strings.Replace(algo("", gpu), `nchannels="1"`, `nchannels="one"`, 1), `nchannels="one"`, []diag.Code{diag.BadValue}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantErr(t, tc.src, tc.msg, tc.codes...)
		})
	}
}

func TestNChunksPerLoopNotMultiple(t *testing.T) {
	src := `<algo name="ag" proto="Simple" nchannels="1" nchunksperloop="6" ngpus="4" coll="allgather" inplace="0" outofplace="1">` +
		strings.Repeat(`<gpu id="X" i_chunks="0" o_chunks="0" s_chunks="0"/>`, 1) + `</algo>`
	src = strings.Replace(src, `<gpu id="X" i_chunks="0" o_chunks="0" s_chunks="0"/>`,
		`<gpu id="0" i_chunks="0" o_chunks="0" s_chunks="0"/><gpu id="1" i_chunks="0" o_chunks="0" s_chunks="0"/>`+
			`<gpu id="2" i_chunks="0" o_chunks="0" s_chunks="0"/><gpu id="3" i_chunks="0" o_chunks="0" s_chunks="0"/>`, 1)
	ds := wantErr(t, src, "nchunksperloop=6 is not a multiple of ngpus=4", diag.BadGeometry)
	if want := strings.Index(src, "nchunksperloop") + 1; ds[0].Line != 1 || ds[0].Col != want {
		t.Errorf("at %d:%d, want 1:%d (the nchunksperloop attribute)", ds[0].Line, ds[0].Col, want)
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	src := "<algo name=\"a\">\n  <gpu id=\"0\">\n    <tb id=\"0\" send=\"-1\"\n  </gpu>\n</algo>\n"
	ds := wantErr(t, src, "malformed XML", diag.Syntax)
	if ds[0].Line != 4 {
		t.Errorf("syntax error at line %d, want 4: %v", ds[0].Line, ds[0])
	}
}

func TestInputLimit(t *testing.T) {
	defer func(n int) { inputLimit = n }(inputLimit)
	inputLimit = 100
	wantErr(t, strings.Repeat(" ", 101), "over the limit", diag.TooLarge)
}

// TestUnknownElementsSkipped: elements MSCCL does not read are skipped
// with a warning, comments and processing instructions are fine.
func TestUnknownElementsSkipped(t *testing.T) {
	src := `<?xml version="1.0"?>
<!-- a comment -->
<algo name="a" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="1" coll="allreduce" inplace="0" outofplace="1">
  <meta><deep><deeper/></deep></meta>
  <gpu id="0" i_chunks="1" o_chunks="1" s_chunks="0"><tb id="0" send="-1" recv="-1" chan="0"><!-- c -->` +
		st(0, "cpy", "i", 0, "o", 0, 1, -1, -1, 0) + `</tb></gpu>
</algo>`
	p, ds := mustParse(t, src)
	if p.NumOps() != 1 || len(ds) != 1 || ds[0].Code != diag.UnknownField || ds[0].Line != 4 || ds[0].Col != 3 {
		t.Errorf("ops %d diags %v", p.NumOps(), ds)
	}
}

// TestScratchPerIteration: MSCCL gives each loop iteration its own scratch
// region (RCCL's MSCCL: gridOffset + (off+c)·sizePerMscclChunk, scratch of
// nBytes·nScratchChunks/nChunksPerLoop), so a program that uses scratch is
// imported never sliced (its scratch is sized to the message), and the
// verifier finds no race between iterations in a file that has none
// (testdata/scratch_pipeline.xml: a reducer reads the scratch a receiver
// writes; with iterations sharing one scratch, lint warned TS0206 on both
// ranks). A program without scratch keeps its slices. Simulated, the
// pipeline computes the allreduce.
func TestScratchPerIteration(t *testing.T) {
	data, err := os.ReadFile("testdata/scratch_pipeline.xml")
	if err != nil {
		t.Fatal(err)
	}
	p, ds := Parse("scratch_pipeline.xml", data)
	if p == nil || verify.HasErrors(ds) {
		t.Fatal(ds)
	}
	if p.SliceBytes != ir.Unsliced {
		t.Errorf("slice bytes %d, want ir.Unsliced", p.SliceBytes)
	}
	for _, d := range verify.Verify(p, verify.Options{}) {
		t.Errorf("verify: %v", d)
	}
	sliced := *p
	sliced.SliceBytes = 0
	if n := countCode(verify.Verify(&sliced, verify.Options{}), diag.RaceAcrossLaunch); n != 2 {
		t.Errorf("the same program sliced (one scratch for every slice): %d TS0206, want 2", n)
	}
	plain, ds := Parse("ring2.xml", []byte(strings.ReplaceAll(string(data), `s_chunks="1"`, `s_chunks="0"`)))
	if plain == nil || plain.SliceBytes != 0 {
		t.Errorf("without scratch: slice bytes %v (%v), want 0", plain, ds)
	}
	q, ds := legalize.Legalize(p)
	if q == nil {
		t.Fatal(ds)
	}
	res, err := interp.Simulate(q, interp.SimOptions{DataTypes: []ir.DataType{ir.Float32}, RedOps: []ir.RedOp{ir.Sum}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if !r.OK() {
			t.Errorf("%v", r)
		}
	}
}

func countCode(ds []diag.Diagnostic, c diag.Code) int {
	n := 0
	for _, d := range ds {
		if d.Code == c {
			n++
		}
	}
	return n
}
