// Package vm evaluates policy bytecode (codegen/bytecode) for the selector.
//
// A Program is loaded once — verified (bytecode.Verify) and linked to the
// environment's attribute slots — and then evaluated any number of times by
// a reusable VM, whose value stack is a fixed array of bytecode.MaxStack
// slots. Evaluation allocates nothing, recurses nowhere, runs at most
// len(Code) instructions (jumps only go forward) and never panics: every
// run-time error (integer division by zero, a vector index out of range, a
// float-to-int conversion out of range) is returned as a Fault.
//
// A VM is not safe for concurrent use; give each goroutine its own.
package vm

import (
	"fmt"
	"math"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
)

// Env is what a program reads. Req holds the twelve request fields
// (bytecode.ReqField order). Attrs holds scalar exogenous attributes by
// slot (ints as themselves, floats as their IEEE bits, bools as 0/1) and
// Vecs vector attributes by slot; the Linker given to Load chooses the
// slots.
type Env struct {
	Req   [bc.NumReqFields]int64
	Attrs []int64
	Vecs  [][]float64
}

// Linker maps an import of a program to its slot in Env.Attrs (scalars) or
// Env.Vecs (vectors). It is also called for endo imports, whose slot is
// ignored, so that it can check the declaration; an error refuses the load.
type Linker func(im bc.Import) (slot int, err error)

// Program is a verified, linked program. It is immutable and may be shared
// by VMs on several goroutines.
type Program struct {
	code      []bc.Opcode
	args      []int32
	ints      []int64
	floats    []int64 // IEEE bits, pushed as they are
	vecs      [][]float64
	result    bc.Type
	needAttrs int
	needVecs  int
	src       *bc.Program
}

// Load verifies p and links its imports through link. Errors: a
// *bytecode.VerifyError, or the linker's error naming the import.
func Load(p *bc.Program, link Linker) (*Program, error) {
	if err := bc.Verify(p); err != nil {
		return nil, err
	}
	slots := make([]int, len(p.Imports))
	for i, im := range p.Imports {
		s, err := link(im)
		if err != nil {
			return nil, fmt.Errorf("attribute %q: %w", im.Name, err)
		}
		if im.Origin == bc.Exo && (s < 0 || s > math.MaxInt32) {
			return nil, fmt.Errorf("attribute %q: linker gave slot %d", im.Name, s)
		}
		slots[i] = s
	}
	q := &Program{
		code:   p.Code,
		args:   make([]int32, len(p.Args)),
		ints:   p.Ints,
		floats: make([]int64, len(p.Floats)),
		vecs:   p.Vecs,
		result: p.Result,
		src:    p,
	}
	for i, f := range p.Floats {
		q.floats[i] = bc.Bits(f)
	}
	for pc, op := range p.Code {
		a := p.Args[pc]
		switch op {
		case bc.OpAttrI, bc.OpAttrF, bc.OpAttrB:
			a = int32(slots[a])
			q.needAttrs = max(q.needAttrs, int(a)+1)
		case bc.OpAttrV:
			a = int32(slots[a])
			q.needVecs = max(q.needVecs, int(a)+1)
		}
		q.args[pc] = a
	}
	return q, nil
}

// Result is the type the program leaves.
func (p *Program) Result() bc.Type { return p.result }

// Source is the program as loaded.
func (p *Program) Source() *bc.Program { return p.src }

// RankLocal reports whether the program reads request.sendbuf/recvbuf.
func (p *Program) RankLocal() bool { return p.src.RankLocal() }

// Value is a result: Bits holds an int, a float's IEEE bits or a bool as
// 0/1, according to Type.
type Value struct {
	Type bc.Type
	Bits int64
}

// Int returns an int result.
func (v Value) Int() int64 { return v.Bits }

// Float returns a float result.
func (v Value) Float() float64 { return bc.FromBits(v.Bits) }

// Bool returns a bool result.
func (v Value) Bool() bool { return v.Bits != 0 }

// Number returns an int or float result as a float64 (ints beyond 2^53 are
// rounded to nearest even).
func (v Value) Number() float64 {
	if v.Type == bc.Float {
		return v.Float()
	}
	return float64(v.Bits)
}

func (v Value) String() string {
	switch v.Type {
	case bc.Int:
		return fmt.Sprint(v.Bits)
	case bc.Float:
		return bc.FormatFloat(v.Float())
	case bc.Bool:
		return fmt.Sprint(v.Bool())
	}
	return "invalid"
}

// Fault is a run-time error at instruction PC. The zero Fault is success.
type Fault struct {
	Code bc.Fault
	PC   int32
}

// OK reports whether evaluation succeeded.
func (f Fault) OK() bool { return f.Code == bc.FaultNone }

// Describe formats the fault with the source text of the instruction, e.g.
// `vector index out of range at "bw[slow_rank]"`.
func (f Fault) Describe(p *Program) string {
	if f.OK() {
		return ""
	}
	if p != nil {
		if t := p.src.SpanText(int(f.PC)); t != "" {
			return fmt.Sprintf("%s at %q", f.Code, t)
		}
	}
	return f.Code.String()
}

// VM evaluates programs. The zero VM is ready to use and can be reused for
// any number of evaluations.
type VM struct {
	stack [bc.MaxStack]int64
	// One-entry memos of the costliest pure functions, keyed by argument
	// bits.
	log2In, log2Out    int64
	powX, powY, powOut int64
	log2Set, powSet    bool
}

// vec resolves a vector handle: slots >= 0 are Env.Vecs, negative ones are
// the program's constants (^index).
func vec(p *Program, env *Env, h int64) []float64 {
	if h >= 0 {
		return env.Vecs[h]
	}
	return p.vecs[^h]
}

// stackMask keeps stack indices inside the array, so the compiler drops
// bounds checks; verified programs never reach it anyway.
const stackMask = bc.MaxStack - 1

// Eval runs p against env and returns its value, or a Fault. It allocates
// nothing. Env must hold every slot the linker gave (FaultEnv otherwise).
//
// The top of the stack lives in a local (tos); st[1..n-1] hold the values
// below it (st[0] is scratch), so most instructions touch no memory.
func (m *VM) Eval(p *Program, env *Env) (Value, Fault) {
	if p == nil {
		return Value{}, Fault{Code: bc.FaultNotLoaded}
	}
	if len(env.Attrs) < p.needAttrs || len(env.Vecs) < p.needVecs {
		return Value{}, Fault{Code: bc.FaultEnv}
	}
	st := &m.stack
	n := 0
	var tos int64
	code, args := p.code, p.args[:len(p.code)]
	push := func(v int64) {
		st[n&stackMask] = tos
		n++
		tos = v
	}
	pop := func() int64 {
		n--
		return st[n&stackMask]
	}
	for pc := 0; pc < len(code); pc++ {
		a := args[pc]
		switch code[pc] {
		case bc.OpPushI:
			push(p.ints[a])
		case bc.OpPushF:
			push(p.floats[a])
		case bc.OpPushB:
			push(int64(a))
		case bc.OpPushV:
			push(^int64(a))
		case bc.OpReq:
			push(env.Req[a])
		case bc.OpReqF:
			push(bc.Bits(float64(env.Req[a])))
		case bc.OpAttrI, bc.OpAttrF, bc.OpAttrB:
			push(env.Attrs[a])
		case bc.OpAttrV:
			push(int64(a))
		case bc.OpI2F:
			tos = bc.Bits(float64(tos))
		case bc.OpNegI:
			tos = -tos
		case bc.OpNegF:
			tos = bc.Bits(-bc.FromBits(tos))
		case bc.OpNot:
			tos ^= 1
		case bc.OpAddI:
			tos = pop() + tos
		case bc.OpSubI:
			tos = pop() - tos
		case bc.OpMulI:
			tos = pop() * tos
		case bc.OpDivI:
			v, f := bc.DivI(pop(), tos)
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = v
		case bc.OpModI:
			v, f := bc.ModI(pop(), tos)
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = v
		case bc.OpAddF:
			tos = bc.Bits(bc.FromBits(pop()) + bc.FromBits(tos))
		case bc.OpSubF:
			tos = bc.Bits(bc.FromBits(pop()) - bc.FromBits(tos))
		case bc.OpMulF:
			tos = bc.Bits(bc.FromBits(pop()) * bc.FromBits(tos))
		case bc.OpDivF:
			tos = bc.Bits(bc.FromBits(pop()) / bc.FromBits(tos))
		case bc.OpModF:
			tos = bc.Bits(math.Mod(bc.FromBits(pop()), bc.FromBits(tos)))
		case bc.OpEqI:
			tos = bc.B2I(pop() == tos)
		case bc.OpNeI:
			tos = bc.B2I(pop() != tos)
		case bc.OpLtI:
			tos = bc.B2I(pop() < tos)
		case bc.OpLeI:
			tos = bc.B2I(pop() <= tos)
		case bc.OpGtI:
			tos = bc.B2I(pop() > tos)
		case bc.OpGeI:
			tos = bc.B2I(pop() >= tos)
		case bc.OpEqF:
			tos = bc.B2I(bc.FromBits(pop()) == bc.FromBits(tos))
		case bc.OpNeF:
			tos = bc.B2I(bc.FromBits(pop()) != bc.FromBits(tos))
		case bc.OpLtF:
			tos = bc.B2I(bc.FromBits(pop()) < bc.FromBits(tos))
		case bc.OpLeF:
			tos = bc.B2I(bc.FromBits(pop()) <= bc.FromBits(tos))
		case bc.OpGtF:
			tos = bc.B2I(bc.FromBits(pop()) > bc.FromBits(tos))
		case bc.OpGeF:
			tos = bc.B2I(bc.FromBits(pop()) >= bc.FromBits(tos))
		case bc.OpEqB:
			tos = bc.B2I(pop() == tos)
		case bc.OpNeB:
			tos = bc.B2I(pop() != tos)
		case bc.OpMinI:
			tos = min(pop(), tos)
		case bc.OpMaxI:
			tos = max(pop(), tos)
		case bc.OpMinF:
			tos = bc.Bits(bc.MinF(bc.FromBits(pop()), bc.FromBits(tos)))
		case bc.OpMaxF:
			tos = bc.Bits(bc.MaxF(bc.FromBits(pop()), bc.FromBits(tos)))
		case bc.OpAbsI:
			tos = bc.AbsI(tos)
		case bc.OpAbsF:
			tos = bc.Bits(math.Abs(bc.FromBits(tos)))
		case bc.OpFloor, bc.OpCeil:
			conv := bc.Floor
			if code[pc] == bc.OpCeil {
				conv = bc.Ceil
			}
			v, f := conv(bc.FromBits(tos))
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = v
		case bc.OpLog2:
			// A one-entry memo: the policies of one request keep taking the
			// log of the same message size. Same bits, fewer cycles.
			if tos != m.log2In || !m.log2Set {
				m.log2In, m.log2Out, m.log2Set = tos, bc.Bits(math.Log2(bc.FromBits(tos))), true
			}
			tos = m.log2Out
		case bc.OpPow:
			x := pop()
			if x != m.powX || tos != m.powY || !m.powSet {
				m.powX, m.powY, m.powOut, m.powSet = x, tos, bc.Bits(math.Pow(bc.FromBits(x), bc.FromBits(tos))), true
			}
			tos = m.powOut
		case bc.OpLen:
			tos = int64(len(vec(p, env, tos)))
		case bc.OpSum:
			tos = bc.Bits(bc.Sum(vec(p, env, tos)))
		case bc.OpMinOf:
			tos = bc.Bits(bc.MinOf(vec(p, env, tos)))
		case bc.OpMaxOf:
			tos = bc.Bits(bc.MaxOf(vec(p, env, tos)))
		case bc.OpIndex:
			v, f := bc.Index(vec(p, env, pop()), tos)
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = bc.Bits(v)
		case bc.OpIndexK:
			v, f := bc.Index(vec(p, env, tos), p.ints[a])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = bc.Bits(v)
		case bc.OpContains:
			tos = bc.B2I(bc.Contains(vec(p, env, pop()), bc.FromBits(tos)))
		case bc.OpAddIK:
			tos += p.ints[a]
		case bc.OpSubIK:
			tos -= p.ints[a]
		case bc.OpMulIK:
			tos *= p.ints[a]
		case bc.OpDivIK:
			v, f := bc.DivI(tos, p.ints[a])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = v
		case bc.OpModIK:
			v, f := bc.ModI(tos, p.ints[a])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			tos = v
		case bc.OpEqIK:
			tos = bc.B2I(tos == p.ints[a])
		case bc.OpNeIK:
			tos = bc.B2I(tos != p.ints[a])
		case bc.OpLtIK:
			tos = bc.B2I(tos < p.ints[a])
		case bc.OpLeIK:
			tos = bc.B2I(tos <= p.ints[a])
		case bc.OpGtIK:
			tos = bc.B2I(tos > p.ints[a])
		case bc.OpGeIK:
			tos = bc.B2I(tos >= p.ints[a])
		case bc.OpAddFK:
			tos = bc.Bits(bc.FromBits(tos) + bc.FromBits(p.floats[a]))
		case bc.OpSubFK:
			tos = bc.Bits(bc.FromBits(tos) - bc.FromBits(p.floats[a]))
		case bc.OpMulFK:
			tos = bc.Bits(bc.FromBits(tos) * bc.FromBits(p.floats[a]))
		case bc.OpDivFK:
			tos = bc.Bits(bc.FromBits(tos) / bc.FromBits(p.floats[a]))
		case bc.OpModFK:
			tos = bc.Bits(math.Mod(bc.FromBits(tos), bc.FromBits(p.floats[a])))
		case bc.OpEqFK:
			tos = bc.B2I(bc.FromBits(tos) == bc.FromBits(p.floats[a]))
		case bc.OpNeFK:
			tos = bc.B2I(bc.FromBits(tos) != bc.FromBits(p.floats[a]))
		case bc.OpLtFK:
			tos = bc.B2I(bc.FromBits(tos) < bc.FromBits(p.floats[a]))
		case bc.OpLeFK:
			tos = bc.B2I(bc.FromBits(tos) <= bc.FromBits(p.floats[a]))
		case bc.OpGtFK:
			tos = bc.B2I(bc.FromBits(tos) > bc.FromBits(p.floats[a]))
		case bc.OpGeFK:
			tos = bc.B2I(bc.FromBits(tos) >= bc.FromBits(p.floats[a]))
		case bc.OpJmp:
			pc = int(a) - 1
		case bc.OpJF:
			c := tos
			tos = pop()
			if c == 0 {
				pc = int(a) - 1
			}
		case bc.OpJFK:
			if tos == 0 {
				pc = int(a) - 1
			} else {
				tos = pop()
			}
		case bc.OpJTK:
			if tos != 0 {
				pc = int(a) - 1
			} else {
				tos = pop()
			}
		}
	}
	return Value{Type: p.result, Bits: tos}, Fault{}
}
