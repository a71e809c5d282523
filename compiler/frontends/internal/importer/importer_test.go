package importer

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

func TestLineIndex(t *testing.T) {
	li := NewLineIndex([]byte("ab\n\ncd\n"))
	for _, c := range []struct {
		off  int
		want ir.Pos
	}{
		{-5, ir.Pos{Line: 1, Col: 1}},
		{0, ir.Pos{Line: 1, Col: 1}},
		{2, ir.Pos{Line: 1, Col: 3}}, // the newline itself
		{3, ir.Pos{Line: 2, Col: 1}},
		{5, ir.Pos{Line: 3, Col: 2}},
		{7, ir.Pos{Line: 4, Col: 1}}, // just past the end
		{9, ir.Pos{Line: 4, Col: 3}},
	} {
		if got := li.Pos(c.off); got != c.want {
			t.Errorf("Pos(%d) = %v, want %v", c.off, got, c.want)
		}
	}
}

func TestNames(t *testing.T) {
	type proto struct {
		P          ir.Protocol
		Mapped, OK bool
	}
	for name, want := range map[string]proto{
		"Simple": {ir.Simple, false, true}, "simple": {ir.Simple, false, true}, "LL": {ir.LL, false, true},
		"ll": {ir.LL, false, true}, "LL128": {ir.Simple, true, true}, "LL64": {}, "": {},
	} {
		var got proto
		got.P, got.Mapped, got.OK = Protocol(name)
		if got != want {
			t.Errorf("Protocol(%q) = %+v, want %+v", name, got, want)
		}
	}
	for name, want := range map[string]ir.BufKind{"i": ir.Input, "o": ir.Output, "s": ir.Scratch} {
		if got, ok := Buf(name); !ok || got != want {
			t.Errorf("Buf(%q) = %v, %v", name, got, ok)
		}
	}
	for _, name := range []string{"I", "input", "x", ""} {
		if _, ok := Buf(name); ok {
			t.Errorf("Buf(%q) accepted", name)
		}
	}
}

func TestAddAndResult(t *testing.T) {
	var l diag.List
	Add(&l, "f", diag.Warning, diag.UnknownField, ir.Pos{Line: 3, Col: 4}, 1, 2, 3, "", "b %d", 7)
	Add(&l, "f", diag.Error, diag.BadValue, ir.Pos{Line: 1, Col: 2}, -1, -1, -1, "own hint", "a")
	ci, _ := diag.Lookup(diag.UnknownField)
	want := []diag.Diagnostic{
		{Code: diag.BadValue, Severity: diag.Error, File: "f", Line: 1, Col: 2, Rank: -1, TB: -1, Step: -1, Msg: "a", Hint: "own hint"},
		{Code: diag.UnknownField, Severity: diag.Warning, File: "f", Line: 3, Col: 4, Rank: 1, TB: 2, Step: 3, Msg: "b 7", Hint: ci.Hint},
	}
	if d := cmp.Diff(want, Result(&l, "f")); d != "" {
		t.Errorf("Result (-want +got):\n%s", d)
	}
	// Past the list's cap the rest are counted and noted.
	var full diag.List
	n := 0
	for ; full.Dropped() == 0; n++ {
		Add(&full, "f", diag.Error, diag.BadValue, ir.Pos{Line: 1, Col: 1}, -1, -1, -1, "", "e%d", n)
	}
	got := Result(&full, "f")
	note := diag.Diagnostic{Code: diag.ImportNote, Severity: diag.Note, File: "f", Rank: -1, TB: -1, Step: -1,
		Msg: fmt.Sprintf("%d more errors not shown", full.Dropped())}
	if len(got) != len(full.Items)+1 || !slices.Contains(got, note) {
		t.Errorf("%d diagnostics for %d kept, want them and %v", len(got), len(full.Items), note)
	}
}

func TestInferRoot(t *testing.T) {
	local := func(b ir.BufKind) ir.Rank {
		return ir.Rank{TBs: []ir.Threadblock{{Ops: []ir.Op{{Code: ir.OpCopy,
			Srcs: []ir.Ref{{Buf: b, Chan: -1}}, Dsts: []ir.Ref{{Buf: ir.Scratch, Chan: -1}}}}}}}
	}
	remote := ir.Rank{TBs: []ir.Threadblock{{Ops: []ir.Op{{Code: ir.OpCopy,
		Srcs: []ir.Ref{{Buf: ir.Scratch, Chan: -1}}, Dsts: []ir.Ref{{Buf: ir.Output, Chan: 0}}}}}}}
	for _, c := range []struct {
		coll  ir.Collective
		ranks []ir.Rank
		root  int
		sev   diag.Severity
		msg   string
	}{
		{ir.Broadcast, []ir.Rank{local(ir.Scratch), local(ir.Input), local(ir.Output)}, 1, diag.Note,
			"broadcast root taken as rank 1, the only rank that uses its input buffer"},
		{ir.Reduce, []ir.Rank{remote, local(ir.Output), local(ir.Input)}, 1, diag.Note,
			"reduce root taken as rank 1, the only rank that uses its output buffer"},
		{ir.Gather, []ir.Rank{local(ir.Output), local(ir.Output)}, 0, diag.Warning,
			"cannot tell the gather root (2 ranks use their output buffer); assuming root 0"},
		{ir.Scatter, []ir.Rank{local(ir.Output)}, 0, diag.Warning,
			"cannot tell the scatter root (0 ranks use their input buffer); assuming root 0"},
	} {
		var l diag.List
		pos := ir.Pos{Line: 2, Col: 5}
		root := InferRoot(&ir.Program{Collective: c.coll, Ranks: c.ranks}, &l, "f", pos)
		want := []diag.Diagnostic{{Code: diag.ImportNote, Severity: c.sev, File: "f", Line: 2, Col: 5,
			Rank: -1, TB: -1, Step: -1, Msg: c.msg}}
		if root != c.root {
			t.Errorf("%v: root %d, want %d", c.coll, root, c.root)
		}
		if d := cmp.Diff(want, l.Items); d != "" {
			t.Errorf("%v: diagnostics (-want +got):\n%s", c.coll, d)
		}
	}
}
