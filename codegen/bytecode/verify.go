package bytecode

import (
	"fmt"
	"slices"
)

// VerifyError reports the first problem Verify found. PC is the
// instruction index, or -1 for problems of the program as a whole.
type VerifyError struct {
	PC  int
	Msg string
}

func (e *VerifyError) Error() string {
	if e.PC < 0 {
		return "bytecode: " + e.Msg
	}
	return fmt.Sprintf("bytecode: pc %d: %s", e.PC, e.Msg)
}

func verr(pc int, format string, args ...any) error {
	return &VerifyError{PC: pc, Msg: fmt.Sprintf(format, args...)}
}

// Verify checks everything the VM relies on, so that a program read from a
// bundle (untrusted bytes) can never make the VM index out of range, read a
// value as the wrong type, loop or overflow its stack:
//
//   - the parallel slices agree in length; sizes are within the limits;
//   - every opcode is defined; every operand is in range for its kind
//     (constant-pool and import indices, request fields, booleans);
//   - jumps go strictly forward and land inside the program or just past it;
//   - an abstract interpretation over types gives every instruction one
//     consistent stack on all paths, with the operand types the opcode
//     requires, no unreachable instruction, and exactly one value of type
//     Result at the end;
//   - the deepest stack is at most p.MaxStack, which is at most MaxStack;
//   - ATTR* operands name exo imports of the opcode's type; endo imports are
//     ints with a valid path;
//   - FlagRankLocal is set exactly when the program reads request.sendbuf
//     or request.recvbuf.
//
// It returns nil or a *VerifyError.
func Verify(p *Program) error {
	if p == nil {
		return verr(-1, "no program")
	}
	n := len(p.Code)
	switch {
	case n == 0:
		return verr(-1, "empty program")
	case n > MaxCode:
		return verr(-1, "%d instructions, over the limit of %d", n, MaxCode)
	case len(p.Args) != n:
		return verr(-1, "%d operands for %d instructions", len(p.Args), n)
	case len(p.Spans) != 0 && len(p.Spans) != n:
		return verr(-1, "%d spans for %d instructions", len(p.Spans), n)
	case len(p.Source) > MaxSource:
		return verr(-1, "source of %d bytes, over the limit of %d", len(p.Source), MaxSource)
	case p.Result != Int && p.Result != Float && p.Result != Bool:
		return verr(-1, "result type %s (want int, float or bool)", p.Result)
	case p.MaxStack < 1 || p.MaxStack > MaxStack:
		return verr(-1, "declared stack depth %d outside [1, %d]", p.MaxStack, MaxStack)
	case len(p.Imports) > MaxImports:
		return verr(-1, "%d imports, over the limit of %d", len(p.Imports), MaxImports)
	}
	for i, s := range p.Spans {
		if s.From < 0 || s.To < s.From || int(s.To) > len(p.Source) {
			return verr(i, "span [%d,%d) outside the %d-byte source", s.From, s.To, len(p.Source))
		}
	}
	for i, im := range p.Imports {
		if im.Name == "" || len(im.Name) > 256 {
			return verr(-1, "import %d has a bad name", i)
		}
		if im.Type == Invalid || im.Type >= NumTypes {
			return verr(-1, "import %d (%s) has bad type %d", i, im.Name, im.Type)
		}
		switch im.Origin {
		case Exo:
		case Endo:
			if im.Type != Int || im.Path >= NumReqFields {
				return verr(-1, "endo import %d (%s) must be an int with a request path", i, im.Name)
			}
		default:
			return verr(-1, "import %d (%s) has bad origin %d", i, im.Name, im.Origin)
		}
	}
	for i, v := range p.Vecs {
		if len(v) > MaxVectorLen {
			return verr(-1, "vector constant %d has %d elements, over the limit of %d", i, len(v), MaxVectorLen)
		}
	}

	var (
		cur       = make([]Type, 0, 16)
		pending   = map[int][]Type{}
		reachable = true
		depth     = 0
		rankLocal = false
	)
	join := func(pc, target int, st []Type) error {
		if old, ok := pending[target]; ok {
			if !slices.Equal(old, st) {
				return verr(pc, "stack %v at jump target %d differs from %v on another path", st, target, old)
			}
			return nil
		}
		pending[target] = slices.Clone(st)
		return nil
	}
	for pc := 0; pc <= n; pc++ {
		if st, ok := pending[pc]; ok {
			if reachable && !slices.Equal(st, cur) {
				return verr(pc, "stack %v on fall-through differs from %v on a jump here", cur, st)
			}
			cur = append(cur[:0], st...)
			reachable = true
			delete(pending, pc)
		}
		if pc == n {
			break
		}
		if !reachable {
			return verr(pc, "unreachable instruction")
		}
		op, arg := p.Code[pc], p.Args[pc]
		if !op.Valid() {
			return verr(pc, "undefined opcode %d", uint8(op))
		}
		info := op.Info()
		if err := checkArg(p, pc, op, info.Arg, arg); err != nil {
			return err
		}
		if (op == OpReq || op == OpReqF) && ReqField(arg).RankLocal() {
			rankLocal = true
		}
		// Pop the operands, checking their types (deepest first).
		k := len(info.Pops)
		if len(cur) < k {
			return verr(pc, "%s needs %d operands, stack has %d", op, k, len(cur))
		}
		for j, t := range info.Pops {
			if got := cur[len(cur)-k+j]; got != t {
				return verr(pc, "%s operand %d is %s, want %s", op, j+1, got, t)
			}
		}
		cur = cur[:len(cur)-k]
		switch op {
		case OpJmp:
			if err := join(pc, int(arg), cur); err != nil {
				return err
			}
			reachable = false
		case OpJF:
			if err := join(pc, int(arg), cur); err != nil {
				return err
			}
		case OpJFK, OpJTK:
			if len(cur) == 0 || cur[len(cur)-1] != Bool {
				return verr(pc, "%s needs a bool on the stack", op)
			}
			if err := join(pc, int(arg), cur); err != nil {
				return err
			}
			cur = cur[:len(cur)-1]
		default:
			cur = append(cur, info.Push)
		}
		depth = max(depth, len(cur))
		if depth > MaxStack {
			return verr(pc, "stack deeper than %d", MaxStack)
		}
	}
	if !reachable {
		return verr(n, "end of program unreachable")
	}
	if len(cur) != 1 || cur[0] != p.Result {
		return verr(n, "program ends with stack %v, want [%s]", cur, p.Result)
	}
	if depth > p.MaxStack {
		return verr(-1, "stack reaches depth %d, more than the declared %d", depth, p.MaxStack)
	}
	if rankLocal != p.RankLocal() {
		return verr(-1, "rank-local flag is %v, but the program %s read request.sendbuf/recvbuf", p.RankLocal(), map[bool]string{true: "does", false: "does not"}[rankLocal])
	}
	return nil
}

func checkArg(p *Program, pc int, op Opcode, kind ArgKind, arg int32) error {
	in := func(n int) bool { return arg >= 0 && int(arg) < n }
	switch kind {
	case ArgNone:
		if arg != 0 {
			return verr(pc, "%s takes no operand, has %d", op, arg)
		}
	case ArgInt:
		if !in(len(p.Ints)) {
			return verr(pc, "%s operand %d outside the %d int constants", op, arg, len(p.Ints))
		}
	case ArgFloat:
		if !in(len(p.Floats)) {
			return verr(pc, "%s operand %d outside the %d float constants", op, arg, len(p.Floats))
		}
	case ArgVec:
		if !in(len(p.Vecs)) {
			return verr(pc, "%s operand %d outside the %d vector constants", op, arg, len(p.Vecs))
		}
	case ArgBool:
		if arg != 0 && arg != 1 {
			return verr(pc, "%s operand %d is not 0 or 1", op, arg)
		}
	case ArgReq:
		if !in(int(NumReqFields)) {
			return verr(pc, "%s operand %d is not a request field", op, arg)
		}
	case ArgImport:
		if !in(len(p.Imports)) {
			return verr(pc, "%s operand %d outside the %d imports", op, arg, len(p.Imports))
		}
		im := p.Imports[arg]
		want := map[Opcode]Type{OpAttrI: Int, OpAttrF: Float, OpAttrB: Bool, OpAttrV: Vector}[op]
		if im.Origin != Exo || im.Type != want {
			return verr(pc, "%s reads import %d (%s, %s %s), want an exo %s", op, arg, im.Name, im.Origin, im.Type, want)
		}
	case ArgJump:
		if int(arg) <= pc || int(arg) > len(p.Code) {
			return verr(pc, "%s target %d is not after %d and within the program", op, arg, pc)
		}
	}
	return nil
}
