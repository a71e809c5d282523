package policy

import (
	"math"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
)

// emitter builds a bytecode.Program from a checked tree. Like expr-lang's
// compiler, emit appends the opcode, its operand and the node's span
// together; constants are deduplicated through index maps; forward jumps
// are emitted with a placeholder and patched once the target is known.
type emitter struct {
	p       *bc.Program
	ints    map[int64]int32
	floats  map[uint64]int32
	imports map[string]int32
	depth   int
}

func compile(n *Node, src string) *bc.Program {
	e := &emitter{
		p:       &bc.Program{Source: src, Result: n.Type},
		ints:    map[int64]int32{},
		floats:  map[uint64]int32{},
		imports: map[string]int32{},
	}
	e.node(n)
	return e.p
}

// emit appends one instruction and tracks the stack depth it leaves.
func (e *emitter) emit(op bc.Opcode, arg int32, sp Span) int {
	e.p.Code = append(e.p.Code, op)
	e.p.Args = append(e.p.Args, arg)
	e.p.Spans = append(e.p.Spans, bc.Span{From: int32(sp.From), To: int32(sp.To)})
	info := op.Info()
	e.depth -= len(info.Pops)
	if info.Push != bc.Invalid {
		e.depth++
	}
	if op == bc.OpJFK || op == bc.OpJTK {
		e.depth-- // on fall-through the tested bool is popped
	}
	e.p.MaxStack = max(e.p.MaxStack, e.depth)
	return len(e.p.Code) - 1
}

func (e *emitter) patch(at int) { e.p.Args[at] = int32(len(e.p.Code)) }

func (e *emitter) intConst(v int64) int32 {
	if i, ok := e.ints[v]; ok {
		return i
	}
	i := int32(len(e.p.Ints))
	e.p.Ints = append(e.p.Ints, v)
	e.ints[v] = i
	return i
}

func (e *emitter) floatConst(v float64) int32 {
	b := math.Float64bits(v)
	if i, ok := e.floats[b]; ok {
		return i
	}
	i := int32(len(e.p.Floats))
	e.p.Floats = append(e.p.Floats, v)
	e.floats[b] = i
	return i
}

func (e *emitter) importOf(a Attr) int32 {
	if i, ok := e.imports[a.Name]; ok {
		return i
	}
	i := int32(len(e.p.Imports))
	e.p.Imports = append(e.p.Imports, bc.Import{Name: a.Name, Type: a.Type, Origin: a.Origin, Path: a.Path})
	e.imports[a.Name] = i
	if a.Origin == bc.Endo && a.Path.RankLocal() {
		e.p.Flags |= bc.FlagRankLocal
	}
	return i
}

var (
	intOps = map[string]bc.Opcode{"+": bc.OpAddI, "-": bc.OpSubI, "*": bc.OpMulI, "/": bc.OpDivI, "%": bc.OpModI,
		"==": bc.OpEqI, "!=": bc.OpNeI, "<": bc.OpLtI, "<=": bc.OpLeI, ">": bc.OpGtI, ">=": bc.OpGeI}
	floatOps = map[string]bc.Opcode{"+": bc.OpAddF, "-": bc.OpSubF, "*": bc.OpMulF, "/": bc.OpDivF, "%": bc.OpModF,
		"==": bc.OpEqF, "!=": bc.OpNeF, "<": bc.OpLtF, "<=": bc.OpLeF, ">": bc.OpGtF, ">=": bc.OpGeF}
	vecOps = map[string]bc.Opcode{"len": bc.OpLen, "sum": bc.OpSum, "minof": bc.OpMinOf, "maxof": bc.OpMaxOf}
)

func (e *emitter) node(n *Node) {
	sp := n.Span
	switch n.Kind {
	case KInt:
		e.emit(bc.OpPushI, e.intConst(n.I), sp)
	case KFloat:
		e.emit(bc.OpPushF, e.floatConst(n.F), sp)
	case KBool:
		e.emit(bc.OpPushB, int32(bc.B2I(n.B)), sp)
	case KVec:
		e.p.Vecs = append(e.p.Vecs, n.V)
		e.emit(bc.OpPushV, int32(len(e.p.Vecs)-1), sp)
	case KAttr:
		i := e.importOf(n.Attr)
		if n.Attr.Origin == bc.Endo {
			e.emit(bc.OpReq, int32(n.Attr.Path), sp)
			return
		}
		op := map[bc.Type]bc.Opcode{bc.Int: bc.OpAttrI, bc.Float: bc.OpAttrF, bc.Bool: bc.OpAttrB, bc.Vector: bc.OpAttrV}[n.Type]
		e.emit(op, i, sp)
	case KConvert:
		if k := n.Kids[0]; k.Kind == KAttr && k.Attr.Origin == bc.Endo {
			e.importOf(k.Attr)
			e.emit(bc.OpReqF, int32(k.Attr.Path), sp) // REQ; I2F
			return
		}
		e.node(n.Kids[0])
		e.emit(bc.OpI2F, 0, sp)
	case KUnary:
		e.node(n.Kids[0])
		switch {
		case n.Op == "!":
			e.emit(bc.OpNot, 0, sp)
		case n.Type == bc.Int:
			e.emit(bc.OpNegI, 0, sp)
		default:
			e.emit(bc.OpNegF, 0, sp)
		}
	case KBinary:
		a, b := n.Kids[0], n.Kids[1]
		e.node(a)
		var op bc.Opcode
		switch a.Type {
		case bc.Bool:
			op = bc.OpNeB
			if n.Op == "==" {
				op = bc.OpEqB
			}
		case bc.Int:
			op = intOps[n.Op]
		default:
			op = floatOps[n.Op]
		}
		// x op constant: one superinstruction instead of a push and the op.
		if k := op.WithConst(); k != bc.OpInvalid && (b.Kind == KInt || b.Kind == KFloat) {
			if b.Kind == KInt {
				e.emit(k, e.intConst(b.I), sp)
			} else {
				e.emit(k, e.floatConst(b.F), sp)
			}
			return
		}
		e.node(b)
		e.emit(op, 0, sp)
	case KLogic:
		e.node(n.Kids[0])
		op := bc.OpJFK
		if n.Op == "||" {
			op = bc.OpJTK
		}
		j := e.emit(op, 0, sp)
		e.node(n.Kids[1])
		e.patch(j)
	case KTernary:
		e.node(n.Kids[0])
		jf := e.emit(bc.OpJF, 0, sp)
		base := e.depth
		e.node(n.Kids[1])
		jend := e.emit(bc.OpJmp, 0, sp)
		e.patch(jf)
		e.depth = base
		e.node(n.Kids[2])
		e.patch(jend)
	case KIndex:
		e.node(n.Kids[0])
		if i := n.Kids[1]; i.Kind == KInt {
			e.emit(bc.OpIndexK, e.intConst(i.I), sp) // v[constant]
			return
		}
		e.node(n.Kids[1])
		e.emit(bc.OpIndex, 0, sp)
	case KCall:
		e.call(n)
	}
}

func (e *emitter) call(n *Node) {
	sp, k := n.Span, n.Kids
	isInt := n.Type == bc.Int
	minmax := func(name string) bc.Opcode {
		switch {
		case name == "min" && isInt:
			return bc.OpMinI
		case name == "min":
			return bc.OpMinF
		case isInt:
			return bc.OpMaxI
		}
		return bc.OpMaxF
	}
	switch n.Op {
	case "min", "max":
		e.node(k[0])
		for _, a := range k[1:] {
			e.node(a)
			e.emit(minmax(n.Op), 0, sp)
		}
	case "clamp":
		e.node(k[0])
		e.node(k[1])
		e.emit(minmax("max"), 0, sp)
		e.node(k[2])
		e.emit(minmax("min"), 0, sp)
	case "abs":
		e.node(k[0])
		if isInt {
			e.emit(bc.OpAbsI, 0, sp)
		} else {
			e.emit(bc.OpAbsF, 0, sp)
		}
	case "floor", "ceil":
		e.node(k[0])
		if k[0].Type == bc.Float {
			op := bc.OpFloor
			if n.Op == "ceil" {
				op = bc.OpCeil
			}
			e.emit(op, 0, sp)
		}
	case "log2":
		e.node(k[0])
		e.emit(bc.OpLog2, 0, sp)
	case "pow":
		e.node(k[0])
		e.node(k[1])
		e.emit(bc.OpPow, 0, sp)
	case "len", "sum", "minof", "maxof":
		e.node(k[0])
		e.emit(vecOps[n.Op], 0, sp)
	case "contains":
		e.node(k[0])
		e.node(k[1])
		e.emit(bc.OpContains, 0, sp)
	}
}
