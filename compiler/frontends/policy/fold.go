package policy

import (
	"math"

	"github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/diag"
)

// fold replaces constant sub-expressions by their values, bottom-up, so one
// pass reaches the fixed point. It also drops the dead arm of a ?: with a
// constant condition, and simplifies && and || with a constant left operand
// (or a neutral constant right operand: x && true, x || false). Values are
// computed with the VM's own semantics (bytecode/semantics.go). A constant
// sub-expression that faults (1/0, [1][5], floor(1e300)) is a TS0307 error,
// even where it would never be evaluated.
func fold(r *reporter, n *Node) *Node {
	for i, k := range n.Kids {
		n.Kids[i] = fold(r, k)
	}
	switch n.Kind {
	case KLogic:
		l, rt := n.Kids[0], n.Kids[1]
		and := n.Op == "&&"
		if l.Kind == KBool {
			if l.B == and {
				return rt
			}
			return l
		}
		if rt.Kind == KBool && rt.B == and {
			return l
		}
		return n
	case KTernary:
		if c := n.Kids[0]; c.Kind == KBool {
			if c.B {
				return n.Kids[1]
			}
			return n.Kids[2]
		}
		return n
	case KInt, KFloat, KBool, KVec, KAttr:
		return n
	}
	for _, k := range n.Kids {
		if !k.IsConst() {
			return n
		}
	}
	v, f := evalConst(n)
	if f != bytecode.FaultNone {
		r.errorf(diag.PolicyConstFold, n.Span.From, "", "%s in the constant expression %q", f, r.src[n.Span.From:n.Span.To])
		return n
	}
	v.Span = n.Span
	return v
}

func cInt(v int64) *Node     { return &Node{Kind: KInt, I: v, Type: tInt} }
func cFloat(v float64) *Node { return &Node{Kind: KFloat, F: v, Type: tFloat} }
func cBool(v bool) *Node     { return &Node{Kind: KBool, B: v, Type: tBool} }

// evalConst evaluates a node whose children are all constants.
func evalConst(n *Node) (*Node, bytecode.Fault) {
	k := n.Kids
	switch n.Kind {
	case KConvert:
		return cFloat(float64(k[0].I)), 0
	case KUnary:
		switch {
		case n.Op == "!":
			return cBool(!k[0].B), 0
		case n.Type == tInt:
			return cInt(-k[0].I), 0
		default:
			return cFloat(-k[0].F), 0
		}
	case KIndex:
		f, fault := bytecode.Index(k[0].V, k[1].I)
		return cFloat(f), fault
	case KBinary:
		return evalBinary(n.Op, k[0], k[1])
	case KCall:
		return evalCall(n)
	}
	return n, 0
}

func evalBinary(op string, a, b *Node) (*Node, bytecode.Fault) {
	switch a.Type {
	case tBool:
		if op == "==" {
			return cBool(a.B == b.B), 0
		}
		return cBool(a.B != b.B), 0
	case tInt:
		x, y := a.I, b.I
		switch op {
		case "+":
			return cInt(x + y), 0
		case "-":
			return cInt(x - y), 0
		case "*":
			return cInt(x * y), 0
		case "/":
			v, f := bytecode.DivI(x, y)
			return cInt(v), f
		case "%":
			v, f := bytecode.ModI(x, y)
			return cInt(v), f
		case "==":
			return cBool(x == y), 0
		case "!=":
			return cBool(x != y), 0
		case "<":
			return cBool(x < y), 0
		case "<=":
			return cBool(x <= y), 0
		case ">":
			return cBool(x > y), 0
		case ">=":
			return cBool(x >= y), 0
		}
	default:
		x, y := a.F, b.F
		switch op {
		case "+":
			return cFloat(x + y), 0
		case "-":
			return cFloat(x - y), 0
		case "*":
			return cFloat(x * y), 0
		case "/":
			return cFloat(x / y), 0
		case "%":
			return cFloat(math.Mod(x, y)), 0
		case "==":
			return cBool(x == y), 0
		case "!=":
			return cBool(x != y), 0
		case "<":
			return cBool(x < y), 0
		case "<=":
			return cBool(x <= y), 0
		case ">":
			return cBool(x > y), 0
		case ">=":
			return cBool(x >= y), 0
		}
	}
	return nil, bytecode.FaultNone
}

func evalCall(n *Node) (*Node, bytecode.Fault) {
	k := n.Kids
	isInt := n.Type == tInt
	switch n.Op {
	case "min", "max", "clamp":
		// clamp(x, lo, hi) = min(max(x, lo), hi), as compiled.
		pick := func(op string, a, b *Node) *Node {
			if isInt {
				if op == "min" {
					return cInt(min(a.I, b.I))
				}
				return cInt(max(a.I, b.I))
			}
			if op == "min" {
				return cFloat(bytecode.MinF(a.F, b.F))
			}
			return cFloat(bytecode.MaxF(a.F, b.F))
		}
		if n.Op == "clamp" {
			return pick("min", pick("max", k[0], k[1]), k[2]), 0
		}
		acc := k[0]
		for _, x := range k[1:] {
			acc = pick(n.Op, acc, x)
		}
		return acc, 0
	case "abs":
		if isInt {
			return cInt(bytecode.AbsI(k[0].I)), 0
		}
		return cFloat(math.Abs(k[0].F)), 0
	case "floor", "ceil":
		if k[0].Type == tInt {
			return cInt(k[0].I), 0
		}
		f := bytecode.Floor
		if n.Op == "ceil" {
			f = bytecode.Ceil
		}
		v, fault := f(k[0].F)
		return cInt(v), fault
	case "log2":
		return cFloat(math.Log2(k[0].F)), 0
	case "pow":
		return cFloat(math.Pow(k[0].F, k[1].F)), 0
	case "len":
		return cInt(int64(len(k[0].V))), 0
	case "sum":
		return cFloat(bytecode.Sum(k[0].V)), 0
	case "minof":
		return cFloat(bytecode.MinOf(k[0].V)), 0
	case "maxof":
		return cFloat(bytecode.MaxOf(k[0].V)), 0
	case "contains":
		return cBool(bytecode.Contains(k[0].V, k[1].F)), 0
	}
	return n, 0
}
