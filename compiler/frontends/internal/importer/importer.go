// Package importer holds what the MSCCL XML importer (compiler/frontends/msccl)
// and the MSCCL++ JSON importer (compiler/frontends/mscclpp) share: byte
// offset to line:col positions, the diagnostic collection both report
// through, the MSCCL protocol and buffer names, and the inference of a
// rooted collective's root (neither format names one).
package importer

import (
	"fmt"
	"sort"
	"strings"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// LineIndex maps byte offsets of one input to 1-based line and byte-column
// positions. It holds the byte offset of the start of each line.
type LineIndex []int

// NewLineIndex indexes the lines of data ('\n' ends a line).
func NewLineIndex(data []byte) LineIndex {
	li := LineIndex{0}
	for i, c := range data {
		if c == '\n' {
			li = append(li, i+1)
		}
	}
	return li
}

// Pos returns the position of byte offset off; an offset before the input
// is taken as 0, one past its end stays on the last line.
func (li LineIndex) Pos(off int) ir.Pos {
	if off < 0 {
		off = 0
	}
	l := sort.Search(len(li), func(i int) bool { return li[i] > off }) - 1
	if l < 0 {
		l = 0
	}
	return ir.Pos{Line: int32(l + 1), Col: int32(off - li[l] + 1)}
}

// Add appends to l a diagnostic of severity sev with code at pos in file,
// about rank, threadblock tb and step (-1 for none). An empty hint takes the
// code's documented hint (diag.Lookup).
func Add(l *diag.List, file string, sev diag.Severity, code diag.Code, pos ir.Pos, rank, tb, step int, hint, format string, args ...any) {
	if hint == "" {
		if ci, ok := diag.Lookup(code); ok {
			hint = ci.Hint
		}
	}
	l.Add(diag.Diagnostic{Code: code, Severity: sev, File: file, Line: int(pos.Line), Col: int(pos.Col),
		Rank: rank, TB: tb, Step: step, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// Result returns l's diagnostics sorted by position (diag.Sort), with a
// TS0009 note "N more errors not shown" when l dropped some over its cap.
func Result(l *diag.List, file string) []diag.Diagnostic {
	items := l.Items
	if n := l.Dropped(); n > 0 {
		items = append(items, diag.Diagnostic{Code: diag.ImportNote, Severity: diag.Note, File: file,
			Rank: -1, TB: -1, Step: -1, Msg: fmt.Sprintf("%d more errors not shown", n)})
	}
	diag.Sort(items)
	return items
}

// Protocol maps an MSCCL or MSCCL++ protocol name, in any case: Simple, LL,
// and LL128, which Theseus runs as Simple (mapped is then true). ok is
// false for any other name.
func Protocol(name string) (p ir.Protocol, mapped, ok bool) {
	switch {
	case strings.EqualFold(name, "Simple"):
		return ir.Simple, false, true
	case strings.EqualFold(name, "LL"):
		return ir.LL, false, true
	case strings.EqualFold(name, "LL128"):
		return ir.Simple, true, true
	}
	return 0, false, false
}

// Buf maps an MSCCL or MSCCL++ buffer name: exactly i, o or s (both
// formats' parsers accept nothing else).
func Buf(name string) (ir.BufKind, bool) {
	switch name {
	case "i":
		return ir.Input, true
	case "o":
		return ir.Output, true
	case "s":
		return ir.Scratch, true
	}
	return 0, false
}

// InferRoot finds the root of prog's rooted collective: by NCCL semantics
// only the root has an input (broadcast, scatter) or an output (reduce,
// gather), so the one rank whose ops name that buffer locally (Chan -1) is
// the root, and a note at pos says so. When no rank or several do, it
// warns at pos and returns 0. The diagnostics go to l, for file.
func InferRoot(prog *ir.Program, l *diag.List, file string, pos ir.Pos) int {
	buf := ir.Input
	if prog.Collective == ir.Reduce || prog.Collective == ir.Gather {
		buf = ir.Output
	}
	var users []int
	for r := range prog.Ranks {
		if usesLocally(&prog.Ranks[r], buf) {
			users = append(users, r)
		}
	}
	if len(users) == 1 {
		Add(l, file, diag.Note, diag.ImportNote, pos, -1, -1, -1, "",
			"%s root taken as rank %d, the only rank that uses its %s buffer", prog.Collective, users[0], buf.LongName())
		return users[0]
	}
	Add(l, file, diag.Warning, diag.ImportNote, pos, -1, -1, -1, "",
		"cannot tell the %s root (%d ranks use their %s buffer); assuming root 0", prog.Collective, len(users), buf.LongName())
	return 0
}

func usesLocally(r *ir.Rank, buf ir.BufKind) bool {
	for _, tb := range r.TBs {
		for _, op := range tb.Ops {
			for _, ref := range op.Srcs {
				if ref.Buf == buf && ref.Chan < 0 {
					return true
				}
			}
			for _, ref := range op.Dsts {
				if ref.Buf == buf && ref.Chan < 0 {
					return true
				}
			}
		}
	}
	return false
}
