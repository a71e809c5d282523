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

// Eval runs p against env and returns its value, or a Fault. It allocates
// nothing. Env must hold every slot the linker gave (FaultEnv otherwise).
func (m *VM) Eval(p *Program, env *Env) (Value, Fault) {
	if p == nil {
		return Value{}, Fault{Code: bc.FaultNotLoaded}
	}
	if len(env.Attrs) < p.needAttrs || len(env.Vecs) < p.needVecs {
		return Value{}, Fault{Code: bc.FaultEnv}
	}
	st := &m.stack
	sp := -1
	code, args := p.code, p.args[:len(p.code)]
	for pc := 0; pc < len(code); pc++ {
		a := args[pc]
		switch code[pc] {
		case bc.OpPushI:
			sp++
			st[sp] = p.ints[a]
		case bc.OpPushF:
			sp++
			st[sp] = p.floats[a]
		case bc.OpPushB:
			sp++
			st[sp] = int64(a)
		case bc.OpPushV:
			sp++
			st[sp] = ^int64(a)
		case bc.OpReq:
			sp++
			st[sp] = env.Req[a]
		case bc.OpAttrI, bc.OpAttrF, bc.OpAttrB:
			sp++
			st[sp] = env.Attrs[a]
		case bc.OpAttrV:
			sp++
			st[sp] = int64(a)
		case bc.OpI2F:
			st[sp] = bc.Bits(float64(st[sp]))
		case bc.OpNegI:
			st[sp] = -st[sp]
		case bc.OpNegF:
			st[sp] = bc.Bits(-bc.FromBits(st[sp]))
		case bc.OpNot:
			st[sp] ^= 1
		case bc.OpAddI:
			sp--
			st[sp] += st[sp+1]
		case bc.OpSubI:
			sp--
			st[sp] -= st[sp+1]
		case bc.OpMulI:
			sp--
			st[sp] *= st[sp+1]
		case bc.OpDivI:
			sp--
			v, f := bc.DivI(st[sp], st[sp+1])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			st[sp] = v
		case bc.OpModI:
			sp--
			v, f := bc.ModI(st[sp], st[sp+1])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			st[sp] = v
		case bc.OpAddF:
			sp--
			st[sp] = bc.Bits(bc.FromBits(st[sp]) + bc.FromBits(st[sp+1]))
		case bc.OpSubF:
			sp--
			st[sp] = bc.Bits(bc.FromBits(st[sp]) - bc.FromBits(st[sp+1]))
		case bc.OpMulF:
			sp--
			st[sp] = bc.Bits(bc.FromBits(st[sp]) * bc.FromBits(st[sp+1]))
		case bc.OpDivF:
			sp--
			st[sp] = bc.Bits(bc.FromBits(st[sp]) / bc.FromBits(st[sp+1]))
		case bc.OpModF:
			sp--
			st[sp] = bc.Bits(math.Mod(bc.FromBits(st[sp]), bc.FromBits(st[sp+1])))
		case bc.OpEqI:
			sp--
			st[sp] = bc.B2I(st[sp] == st[sp+1])
		case bc.OpNeI:
			sp--
			st[sp] = bc.B2I(st[sp] != st[sp+1])
		case bc.OpLtI:
			sp--
			st[sp] = bc.B2I(st[sp] < st[sp+1])
		case bc.OpLeI:
			sp--
			st[sp] = bc.B2I(st[sp] <= st[sp+1])
		case bc.OpGtI:
			sp--
			st[sp] = bc.B2I(st[sp] > st[sp+1])
		case bc.OpGeI:
			sp--
			st[sp] = bc.B2I(st[sp] >= st[sp+1])
		case bc.OpEqF:
			sp--
			st[sp] = bc.B2I(bc.FromBits(st[sp]) == bc.FromBits(st[sp+1]))
		case bc.OpNeF:
			sp--
			st[sp] = bc.B2I(bc.FromBits(st[sp]) != bc.FromBits(st[sp+1]))
		case bc.OpLtF:
			sp--
			st[sp] = bc.B2I(bc.FromBits(st[sp]) < bc.FromBits(st[sp+1]))
		case bc.OpLeF:
			sp--
			st[sp] = bc.B2I(bc.FromBits(st[sp]) <= bc.FromBits(st[sp+1]))
		case bc.OpGtF:
			sp--
			st[sp] = bc.B2I(bc.FromBits(st[sp]) > bc.FromBits(st[sp+1]))
		case bc.OpGeF:
			sp--
			st[sp] = bc.B2I(bc.FromBits(st[sp]) >= bc.FromBits(st[sp+1]))
		case bc.OpEqB:
			sp--
			st[sp] = bc.B2I(st[sp] == st[sp+1])
		case bc.OpNeB:
			sp--
			st[sp] = bc.B2I(st[sp] != st[sp+1])
		case bc.OpMinI:
			sp--
			st[sp] = min(st[sp], st[sp+1])
		case bc.OpMaxI:
			sp--
			st[sp] = max(st[sp], st[sp+1])
		case bc.OpMinF:
			sp--
			st[sp] = bc.Bits(bc.MinF(bc.FromBits(st[sp]), bc.FromBits(st[sp+1])))
		case bc.OpMaxF:
			sp--
			st[sp] = bc.Bits(bc.MaxF(bc.FromBits(st[sp]), bc.FromBits(st[sp+1])))
		case bc.OpAbsI:
			st[sp] = bc.AbsI(st[sp])
		case bc.OpAbsF:
			st[sp] = bc.Bits(math.Abs(bc.FromBits(st[sp])))
		case bc.OpFloor, bc.OpCeil:
			conv := bc.Floor
			if code[pc] == bc.OpCeil {
				conv = bc.Ceil
			}
			v, f := conv(bc.FromBits(st[sp]))
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			st[sp] = v
		case bc.OpLog2:
			// A one-entry memo: the policies of one request keep taking the
			// log of the same message size. Same bits, fewer cycles.
			if x := st[sp]; x != m.log2In || !m.log2Set {
				m.log2In, m.log2Out, m.log2Set = x, bc.Bits(math.Log2(bc.FromBits(x))), true
			}
			st[sp] = m.log2Out
		case bc.OpPow:
			sp--
			if x, y := st[sp], st[sp+1]; x != m.powX || y != m.powY || !m.powSet {
				m.powX, m.powY, m.powOut, m.powSet = x, y, bc.Bits(math.Pow(bc.FromBits(x), bc.FromBits(y))), true
			}
			st[sp] = m.powOut
		case bc.OpLen:
			st[sp] = int64(len(vec(p, env, st[sp])))
		case bc.OpSum:
			st[sp] = bc.Bits(bc.Sum(vec(p, env, st[sp])))
		case bc.OpMinOf:
			st[sp] = bc.Bits(bc.MinOf(vec(p, env, st[sp])))
		case bc.OpMaxOf:
			st[sp] = bc.Bits(bc.MaxOf(vec(p, env, st[sp])))
		case bc.OpIndex:
			sp--
			v, f := bc.Index(vec(p, env, st[sp]), st[sp+1])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			st[sp] = bc.Bits(v)
		case bc.OpContains:
			sp--
			st[sp] = bc.B2I(bc.Contains(vec(p, env, st[sp]), bc.FromBits(st[sp+1])))
		case bc.OpAddIK:
			st[sp] += p.ints[a]
		case bc.OpSubIK:
			st[sp] -= p.ints[a]
		case bc.OpMulIK:
			st[sp] *= p.ints[a]
		case bc.OpDivIK:
			v, f := bc.DivI(st[sp], p.ints[a])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			st[sp] = v
		case bc.OpModIK:
			v, f := bc.ModI(st[sp], p.ints[a])
			if f != bc.FaultNone {
				return Value{}, Fault{f, int32(pc)}
			}
			st[sp] = v
		case bc.OpEqIK:
			st[sp] = bc.B2I(st[sp] == p.ints[a])
		case bc.OpNeIK:
			st[sp] = bc.B2I(st[sp] != p.ints[a])
		case bc.OpLtIK:
			st[sp] = bc.B2I(st[sp] < p.ints[a])
		case bc.OpLeIK:
			st[sp] = bc.B2I(st[sp] <= p.ints[a])
		case bc.OpGtIK:
			st[sp] = bc.B2I(st[sp] > p.ints[a])
		case bc.OpGeIK:
			st[sp] = bc.B2I(st[sp] >= p.ints[a])
		case bc.OpAddFK:
			st[sp] = bc.Bits(bc.FromBits(st[sp]) + bc.FromBits(p.floats[a]))
		case bc.OpSubFK:
			st[sp] = bc.Bits(bc.FromBits(st[sp]) - bc.FromBits(p.floats[a]))
		case bc.OpMulFK:
			st[sp] = bc.Bits(bc.FromBits(st[sp]) * bc.FromBits(p.floats[a]))
		case bc.OpDivFK:
			st[sp] = bc.Bits(bc.FromBits(st[sp]) / bc.FromBits(p.floats[a]))
		case bc.OpModFK:
			st[sp] = bc.Bits(math.Mod(bc.FromBits(st[sp]), bc.FromBits(p.floats[a])))
		case bc.OpEqFK:
			st[sp] = bc.B2I(bc.FromBits(st[sp]) == bc.FromBits(p.floats[a]))
		case bc.OpNeFK:
			st[sp] = bc.B2I(bc.FromBits(st[sp]) != bc.FromBits(p.floats[a]))
		case bc.OpLtFK:
			st[sp] = bc.B2I(bc.FromBits(st[sp]) < bc.FromBits(p.floats[a]))
		case bc.OpLeFK:
			st[sp] = bc.B2I(bc.FromBits(st[sp]) <= bc.FromBits(p.floats[a]))
		case bc.OpGtFK:
			st[sp] = bc.B2I(bc.FromBits(st[sp]) > bc.FromBits(p.floats[a]))
		case bc.OpGeFK:
			st[sp] = bc.B2I(bc.FromBits(st[sp]) >= bc.FromBits(p.floats[a]))
		case bc.OpJmp:
			pc = int(a) - 1
		case bc.OpJF:
			sp--
			if st[sp+1] == 0 {
				pc = int(a) - 1
			}
		case bc.OpJFK:
			if st[sp] == 0 {
				pc = int(a) - 1
			} else {
				sp--
			}
		case bc.OpJTK:
			if st[sp] != 0 {
				pc = int(a) - 1
			} else {
				sp--
			}
		}
	}
	return Value{Type: p.result, Bits: st[0]}, Fault{}
}
