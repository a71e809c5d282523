package bytecode

import (
	"fmt"
	"math"
	"strings"
)

// Limits on programs. They bound what the compiler emits and what Decode
// and Verify accept from disk.
const (
	// MaxStack is the deepest value stack a program may need. The VM
	// preallocates exactly this many slots.
	MaxStack = 256
	// MaxCode is the most instructions in one program.
	MaxCode = 1 << 16
	// MaxImports is the most attributes one program may read.
	MaxImports = 1 << 10
	// MaxVectorLen bounds a vector constant (THESEUS_VECTOR_ATTRIBUTE_MAX_LENGTH
	// may be lower; it may not be higher).
	MaxVectorLen = 1 << 20
	// MaxSource bounds the source text carried for diagnostics, in bytes.
	MaxSource = 1 << 16
)

// Span is a half-open byte range [From, To) of the program's Source.
type Span struct {
	From, To int32
}

// Import is one attribute a program reads. The selector links imports to
// the attribute manifest by Name when a program is loaded, and refuses the
// link unless the manifest declares the same type, origin and path. Endo
// imports are read through REQ Path and are listed so that links are
// checked; Exo imports are read through ATTR* operands indexing this table.
type Import struct {
	Name   string
	Type   Type
	Origin Origin
	Path   ReqField // meaningful for Endo only
}

// Flags are static properties of a program that the selector acts on.
type Flags uint8

const (
	// FlagRankLocal marks programs that read request.sendbuf or
	// request.recvbuf, whose values differ between ranks: selecting among
	// them costs an agreement step (ARCHITECTURE.md §5). Verify recomputes
	// it, so a bundle cannot hide it.
	FlagRankLocal Flags = 1 << iota
)

// Program is one compiled policy expression. Code, Args and Spans are
// parallel: instruction i is Code[i] with operand Args[i], compiled from
// Source[Spans[i].From:Spans[i].To]. Spans may be empty (no source kept);
// otherwise it has len(Code) entries.
type Program struct {
	Code    []Opcode
	Args    []int32
	Spans   []Span
	Ints    []int64
	Floats  []float64
	Vecs    [][]float64
	Imports []Import
	// Result is the type left on the stack: Bool for usability
	// expressions, Int or Float for preferences.
	Result Type
	// MaxStack is the deepest stack the program reaches (<= MaxStack).
	MaxStack int
	Flags    Flags
	Source   string
}

// RankLocal reports whether FlagRankLocal is set.
func (p *Program) RankLocal() bool { return p.Flags&FlagRankLocal != 0 }

// SpanText returns the source text of instruction pc, or "" if unknown.
func (p *Program) SpanText(pc int) string {
	if pc < 0 || pc >= len(p.Spans) {
		return ""
	}
	s := p.Spans[pc]
	if s.From < 0 || s.To < s.From || int(s.To) > len(p.Source) {
		return ""
	}
	return p.Source[s.From:s.To]
}

// Disassemble prints a listing: a header with the source, result type,
// stack depth, flags and imports, then one line per instruction with its
// index, mnemonic, operand, the operand's meaning and the source it came
// from. The format is stable: golden tests and `theseusc dump` use it.
func (p *Program) Disassemble() string {
	var b strings.Builder
	fmt.Fprintf(&b, "; source: %q\n", p.Source)
	fmt.Fprintf(&b, "; result %s, stack %d", p.Result, p.MaxStack)
	if p.RankLocal() {
		b.WriteString(", rank-local")
	}
	b.WriteString("\n")
	for i, im := range p.Imports {
		if im.Origin == Endo {
			fmt.Fprintf(&b, "; import %d: %s %s endo %s\n", i, im.Name, im.Type, im.Path)
		} else {
			fmt.Fprintf(&b, "; import %d: %s %s exo\n", i, im.Name, im.Type)
		}
	}
	for pc, op := range p.Code {
		arg := int32(0)
		if pc < len(p.Args) {
			arg = p.Args[pc]
		}
		info := op.Info()
		line := fmt.Sprintf("%04d  %-8s", pc, op)
		if info.Arg != ArgNone {
			line += fmt.Sprintf(" %d", arg)
		}
		if c := p.operandComment(op, arg); c != "" {
			line = fmt.Sprintf("%-22s ; %s", line, c)
		}
		if t := p.SpanText(pc); t != "" {
			if !strings.Contains(line, ";") {
				line = fmt.Sprintf("%-22s ;", line)
			}
			line += fmt.Sprintf("  `%s`", t)
		}
		b.WriteString(strings.TrimRight(line, " "))
		b.WriteString("\n")
	}
	return b.String()
}

func (p *Program) operandComment(op Opcode, arg int32) string {
	i := int(arg)
	switch op.Info().Arg {
	case ArgInt:
		if i >= 0 && i < len(p.Ints) {
			return fmt.Sprint(p.Ints[i])
		}
	case ArgFloat:
		if i >= 0 && i < len(p.Floats) {
			return FormatFloat(p.Floats[i])
		}
	case ArgVec:
		if i >= 0 && i < len(p.Vecs) {
			return FormatVector(p.Vecs[i])
		}
	case ArgReq:
		return ReqField(arg).Path()
	case ArgImport:
		if i >= 0 && i < len(p.Imports) {
			return p.Imports[i].Name
		}
	case ArgJump:
		return fmt.Sprintf("-> %04d", arg)
	}
	return ""
}

// FormatFloat prints a float so that it reads back as a float (1 -> "1.0").
func FormatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	s := fmt.Sprint(f)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

// FormatVector prints a vector as [a, b, c], eliding after 8 elements.
func FormatVector(v []float64) string {
	var b strings.Builder
	b.WriteString("[")
	for i, x := range v {
		if i == 8 {
			fmt.Fprintf(&b, ", ... (%d elements)", len(v))
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(FormatFloat(x))
	}
	b.WriteString("]")
	return b.String()
}
