package bytecode

import "fmt"

// Opcode is one VM instruction. Every opcode is declared here, once, with
// its mnemonic, its operand kind and its stack effect (the Info table);
// Verify, Disassemble and the VM all read this table.
//
// Instructions are type-specialised: the checker has resolved every type, so
// the VM never inspects a value's type. Scalars occupy one 64-bit stack slot
// (ints as themselves, floats as their IEEE bits, bools as 0/1); a vector
// occupies one slot holding a handle the VM resolves.
type Opcode uint8

const (
	OpInvalid Opcode = iota

	// Loads.
	OpPushI // push Ints[arg]
	OpPushF // push Floats[arg]
	OpPushB // push arg (0 false, 1 true)
	OpPushV // push vector constant Vecs[arg]
	OpReq   // push request field arg (ReqField); an int
	OpAttrI // push int attribute Imports[arg]
	OpAttrF // push float attribute Imports[arg]
	OpAttrB // push bool attribute Imports[arg]
	OpAttrV // push vector attribute Imports[arg]

	// Conversion and unary operators.
	OpI2F  // int -> float (exact up to 2^53, then rounded to nearest even)
	OpNegI // -x, wrapping (-MinInt64 = MinInt64)
	OpNegF // -x
	OpNot  // !b

	// Integer arithmetic: wraps modulo 2^64; division truncates toward zero.
	OpAddI
	OpSubI
	OpMulI
	OpDivI // faults on division by zero; MinInt64 / -1 = MinInt64
	OpModI // sign of the dividend; faults on modulo by zero

	// Float arithmetic: IEEE-754 (x/0 is ±Inf or NaN, never a fault).
	OpAddF
	OpSubF
	OpMulF
	OpDivF
	OpModF // math.Mod

	// Comparisons push a bool.
	OpEqI
	OpNeI
	OpLtI
	OpLeI
	OpGtI
	OpGeI
	OpEqF // IEEE: NaN compares unequal to everything
	OpNeF
	OpLtF
	OpLeF
	OpGtF
	OpGeF
	OpEqB
	OpNeB

	// Built-in functions.
	OpMinI
	OpMaxI
	OpMinF // NaN if either operand is NaN
	OpMaxF
	OpAbsI  // wrapping: abs(MinInt64) = MinInt64
	OpAbsF  //
	OpFloor // float -> int; faults on NaN or outside the int64 range
	OpCeil  // float -> int; faults on NaN or outside the int64 range
	OpLog2  // float -> float (log2(0) = -Inf, log2(x<0) = NaN)
	OpPow   // float, float -> float (math.Pow)
	OpLen   // vector -> int
	OpSum   // vector -> float (0 for an empty vector)
	OpMinOf // vector -> float (+Inf for an empty vector)
	OpMaxOf // vector -> float (-Inf for an empty vector)
	OpIndex // vector, int -> float; faults when the index is outside [0, len)
	OpContains

	// Binary operators with a constant right operand (superinstructions the
	// compiler emits for "x op constant"): the operand indexes Ints (…IK) or
	// Floats (…FK); semantics as the plain opcode.
	OpAddIK
	OpSubIK
	OpMulIK
	OpDivIK
	OpModIK
	OpEqIK
	OpNeIK
	OpLtIK
	OpLeIK
	OpGtIK
	OpGeIK
	OpAddFK
	OpSubFK
	OpMulFK
	OpDivFK
	OpModFK
	OpEqFK
	OpNeFK
	OpLtFK
	OpLeFK
	OpGtFK
	OpGeFK

	OpReqF   // push request field arg (ReqField) converted to float (REQ; I2F)
	OpIndexK // vector -> float: element Ints[arg] (v[constant]); faults when out of range

	// Control flow. Jump operands are absolute instruction indices greater
	// than the jump's own index (jumps only go forward, so every program
	// terminates in at most len(Code) steps).
	OpJmp // pc = arg
	OpJF  // pop b; if !b { pc = arg }
	OpJFK // && : if top is false, pc = arg keeping it; else pop it
	OpJTK // || : if top is true, pc = arg keeping it; else pop it

	NumOpcodes
)

// ArgKind says what an instruction's operand means.
type ArgKind uint8

const (
	ArgNone   ArgKind = iota // operand unused (must be 0)
	ArgInt                   // index into Ints
	ArgFloat                 // index into Floats
	ArgVec                   // index into Vecs
	ArgBool                  // 0 or 1
	ArgReq                   // a ReqField
	ArgImport                // index into Imports
	ArgJump                  // absolute target, > pc and <= len(Code)
)

// OpInfo is the static description of an opcode.
type OpInfo struct {
	Name string
	Arg  ArgKind
	// Pops lists the operand types, deepest first; Push is the result type
	// (Invalid for jumps, which Verify handles specially).
	Pops []Type
	Push Type
}

var (
	ii = []Type{Int, Int}
	ff = []Type{Float, Float}
	bb = []Type{Bool, Bool}
	i1 = []Type{Int}
	f1 = []Type{Float}
	b1 = []Type{Bool}
	v1 = []Type{Vector}
)

var opInfo = [NumOpcodes]OpInfo{
	OpInvalid:  {Name: "INVALID"},
	OpPushI:    {Name: "PUSHI", Arg: ArgInt, Push: Int},
	OpPushF:    {Name: "PUSHF", Arg: ArgFloat, Push: Float},
	OpPushB:    {Name: "PUSHB", Arg: ArgBool, Push: Bool},
	OpPushV:    {Name: "PUSHV", Arg: ArgVec, Push: Vector},
	OpReq:      {Name: "REQ", Arg: ArgReq, Push: Int},
	OpAttrI:    {Name: "ATTRI", Arg: ArgImport, Push: Int},
	OpAttrF:    {Name: "ATTRF", Arg: ArgImport, Push: Float},
	OpAttrB:    {Name: "ATTRB", Arg: ArgImport, Push: Bool},
	OpAttrV:    {Name: "ATTRV", Arg: ArgImport, Push: Vector},
	OpI2F:      {Name: "I2F", Pops: i1, Push: Float},
	OpNegI:     {Name: "NEGI", Pops: i1, Push: Int},
	OpNegF:     {Name: "NEGF", Pops: f1, Push: Float},
	OpNot:      {Name: "NOT", Pops: b1, Push: Bool},
	OpAddI:     {Name: "ADDI", Pops: ii, Push: Int},
	OpSubI:     {Name: "SUBI", Pops: ii, Push: Int},
	OpMulI:     {Name: "MULI", Pops: ii, Push: Int},
	OpDivI:     {Name: "DIVI", Pops: ii, Push: Int},
	OpModI:     {Name: "MODI", Pops: ii, Push: Int},
	OpAddF:     {Name: "ADDF", Pops: ff, Push: Float},
	OpSubF:     {Name: "SUBF", Pops: ff, Push: Float},
	OpMulF:     {Name: "MULF", Pops: ff, Push: Float},
	OpDivF:     {Name: "DIVF", Pops: ff, Push: Float},
	OpModF:     {Name: "MODF", Pops: ff, Push: Float},
	OpEqI:      {Name: "EQI", Pops: ii, Push: Bool},
	OpNeI:      {Name: "NEI", Pops: ii, Push: Bool},
	OpLtI:      {Name: "LTI", Pops: ii, Push: Bool},
	OpLeI:      {Name: "LEI", Pops: ii, Push: Bool},
	OpGtI:      {Name: "GTI", Pops: ii, Push: Bool},
	OpGeI:      {Name: "GEI", Pops: ii, Push: Bool},
	OpEqF:      {Name: "EQF", Pops: ff, Push: Bool},
	OpNeF:      {Name: "NEF", Pops: ff, Push: Bool},
	OpLtF:      {Name: "LTF", Pops: ff, Push: Bool},
	OpLeF:      {Name: "LEF", Pops: ff, Push: Bool},
	OpGtF:      {Name: "GTF", Pops: ff, Push: Bool},
	OpGeF:      {Name: "GEF", Pops: ff, Push: Bool},
	OpEqB:      {Name: "EQB", Pops: bb, Push: Bool},
	OpNeB:      {Name: "NEB", Pops: bb, Push: Bool},
	OpMinI:     {Name: "MINI", Pops: ii, Push: Int},
	OpMaxI:     {Name: "MAXI", Pops: ii, Push: Int},
	OpMinF:     {Name: "MINF", Pops: ff, Push: Float},
	OpMaxF:     {Name: "MAXF", Pops: ff, Push: Float},
	OpAbsI:     {Name: "ABSI", Pops: i1, Push: Int},
	OpAbsF:     {Name: "ABSF", Pops: f1, Push: Float},
	OpFloor:    {Name: "FLOOR", Pops: f1, Push: Int},
	OpCeil:     {Name: "CEIL", Pops: f1, Push: Int},
	OpLog2:     {Name: "LOG2", Pops: f1, Push: Float},
	OpPow:      {Name: "POW", Pops: ff, Push: Float},
	OpLen:      {Name: "LEN", Pops: v1, Push: Int},
	OpSum:      {Name: "SUM", Pops: v1, Push: Float},
	OpMinOf:    {Name: "MINOF", Pops: v1, Push: Float},
	OpMaxOf:    {Name: "MAXOF", Pops: v1, Push: Float},
	OpIndex:    {Name: "INDEX", Pops: []Type{Vector, Int}, Push: Float},
	OpContains: {Name: "CONTAINS", Pops: []Type{Vector, Float}, Push: Bool},
	OpAddIK:    {Name: "ADDIK", Arg: ArgInt, Pops: i1, Push: Int},
	OpSubIK:    {Name: "SUBIK", Arg: ArgInt, Pops: i1, Push: Int},
	OpMulIK:    {Name: "MULIK", Arg: ArgInt, Pops: i1, Push: Int},
	OpDivIK:    {Name: "DIVIK", Arg: ArgInt, Pops: i1, Push: Int},
	OpModIK:    {Name: "MODIK", Arg: ArgInt, Pops: i1, Push: Int},
	OpEqIK:     {Name: "EQIK", Arg: ArgInt, Pops: i1, Push: Bool},
	OpNeIK:     {Name: "NEIK", Arg: ArgInt, Pops: i1, Push: Bool},
	OpLtIK:     {Name: "LTIK", Arg: ArgInt, Pops: i1, Push: Bool},
	OpLeIK:     {Name: "LEIK", Arg: ArgInt, Pops: i1, Push: Bool},
	OpGtIK:     {Name: "GTIK", Arg: ArgInt, Pops: i1, Push: Bool},
	OpGeIK:     {Name: "GEIK", Arg: ArgInt, Pops: i1, Push: Bool},
	OpAddFK:    {Name: "ADDFK", Arg: ArgFloat, Pops: f1, Push: Float},
	OpSubFK:    {Name: "SUBFK", Arg: ArgFloat, Pops: f1, Push: Float},
	OpMulFK:    {Name: "MULFK", Arg: ArgFloat, Pops: f1, Push: Float},
	OpDivFK:    {Name: "DIVFK", Arg: ArgFloat, Pops: f1, Push: Float},
	OpModFK:    {Name: "MODFK", Arg: ArgFloat, Pops: f1, Push: Float},
	OpEqFK:     {Name: "EQFK", Arg: ArgFloat, Pops: f1, Push: Bool},
	OpNeFK:     {Name: "NEFK", Arg: ArgFloat, Pops: f1, Push: Bool},
	OpLtFK:     {Name: "LTFK", Arg: ArgFloat, Pops: f1, Push: Bool},
	OpLeFK:     {Name: "LEFK", Arg: ArgFloat, Pops: f1, Push: Bool},
	OpGtFK:     {Name: "GTFK", Arg: ArgFloat, Pops: f1, Push: Bool},
	OpGeFK:     {Name: "GEFK", Arg: ArgFloat, Pops: f1, Push: Bool},
	OpReqF:     {Name: "REQF", Arg: ArgReq, Push: Float},
	OpIndexK:   {Name: "INDEXK", Arg: ArgInt, Pops: v1, Push: Float},
	OpJmp:      {Name: "JMP", Arg: ArgJump},
	OpJF:       {Name: "JF", Arg: ArgJump, Pops: b1},
	OpJFK:      {Name: "JFK", Arg: ArgJump},
	OpJTK:      {Name: "JTK", Arg: ArgJump},
}

// Info returns the opcode's static description; an unknown opcode gets the
// OpInvalid entry.
func (op Opcode) Info() *OpInfo {
	if op >= NumOpcodes {
		return &opInfo[OpInvalid]
	}
	return &opInfo[op]
}

// Valid reports whether op is a defined opcode.
func (op Opcode) Valid() bool { return op > OpInvalid && op < NumOpcodes }

func (op Opcode) String() string {
	if op.Valid() {
		return opInfo[op].Name
	}
	return fmt.Sprintf("OP(%d)", uint8(op))
}

// IsJump reports whether op transfers control.
func (op Opcode) IsJump() bool { return op.Info().Arg == ArgJump }

// WithConst returns the superinstruction that applies op to the value on
// the stack and a constant operand, or OpInvalid if there is none.
func (op Opcode) WithConst() Opcode {
	switch {
	case op >= OpAddI && op <= OpModI:
		return OpAddIK + (op - OpAddI)
	case op >= OpEqI && op <= OpGeI:
		return OpEqIK + (op - OpEqI)
	case op >= OpAddF && op <= OpModF:
		return OpAddFK + (op - OpAddF)
	case op >= OpEqF && op <= OpGeF:
		return OpEqFK + (op - OpEqF)
	}
	return OpInvalid
}
