// Package policy is the frontend of Theseus policy expressions, the
// usability and preference conditions of schedule manifest entries
// (docs/policy-language.md). It runs the stages of expr-lang's design, each
// in its own file:
//
//	parse   (grammar.go, parse.go)  participle grammar → Node tree with byte spans
//	check   (check.go)              types against the attribute manifest
//	fold    (fold.go)               constant folding
//	compile (compile.go)            bytecode (codegen/bytecode)
//
// Compile chains them. Every problem is a diag.Diagnostic with a stable
// code (TS03xx), a file:line:col and a one-line hint.
package policy

import (
	"fmt"
	"strings"

	"github.com/theseus-ccl/theseus/codegen/bytecode"
)

// Kind is the kind of a Node.
type Kind uint8

const (
	KInt     Kind = iota // integer constant (I)
	KFloat               // float constant (F)
	KBool                // bool constant (B)
	KVec                 // vector constant (V)
	KAttr                // attribute reference (Name, and Attr once checked)
	KUnary               // Op is "-" or "!"; Kids[0]
	KBinary              // Op is an arithmetic or comparison operator; Kids[0], Kids[1]
	KLogic               // Op is "&&" or "||"; Kids[0], Kids[1] (short-circuit)
	KTernary             // Kids: cond, then, else
	KCall                // Op is the function name; Kids are the arguments
	KIndex               // Kids: vector, index
	KConvert             // int → float, inserted by the checker; Kids[0]
)

// Span is a half-open byte range [From, To) of the source.
type Span struct{ From, To int }

// Node is one node of the expression tree. Type is set by the checker.
type Node struct {
	Kind Kind
	Op   string
	Name string
	Kids []*Node
	Span Span
	Type bytecode.Type

	I int64
	F float64
	B bool
	V []float64

	Attr Attr // resolved attribute, for KAttr after checking
}

// IsConst reports whether n is a constant.
func (n *Node) IsConst() bool { return n.Kind <= KVec }

// String prints the tree in a fully parenthesised form (tests and
// debugging); types follow a colon once checked.
func (n *Node) String() string {
	var b strings.Builder
	n.write(&b)
	return b.String()
}

func (n *Node) write(b *strings.Builder) {
	switch n.Kind {
	case KInt:
		fmt.Fprint(b, n.I)
	case KFloat:
		b.WriteString(bytecode.FormatFloat(n.F))
	case KBool:
		fmt.Fprint(b, n.B)
	case KVec:
		b.WriteString(bytecode.FormatVector(n.V))
	case KAttr:
		b.WriteString(n.Name)
	case KUnary:
		b.WriteString("(" + n.Op)
		n.Kids[0].write(b)
		b.WriteString(")")
	case KBinary, KLogic:
		b.WriteString("(")
		n.Kids[0].write(b)
		b.WriteString(" " + n.Op + " ")
		n.Kids[1].write(b)
		b.WriteString(")")
	case KTernary:
		b.WriteString("(")
		n.Kids[0].write(b)
		b.WriteString(" ? ")
		n.Kids[1].write(b)
		b.WriteString(" : ")
		n.Kids[2].write(b)
		b.WriteString(")")
	case KCall:
		b.WriteString(n.Op + "(")
		for i, k := range n.Kids {
			if i > 0 {
				b.WriteString(", ")
			}
			k.write(b)
		}
		b.WriteString(")")
	case KIndex:
		n.Kids[0].write(b)
		b.WriteString("[")
		n.Kids[1].write(b)
		b.WriteString("]")
	case KConvert:
		b.WriteString("float(")
		n.Kids[0].write(b)
		b.WriteString(")")
	}
	if n.Type != bytecode.Invalid && n.Kind != KConvert && !n.IsConst() {
		b.WriteString(":" + n.Type.String())
	}
}
