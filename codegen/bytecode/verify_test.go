package bytecode

import (
	"errors"
	"strings"
	"testing"
)

// good is `msgsize <= 65536 && slow_rank != 2` as the policy compiler emits it.
func good() *Program {
	return &Program{
		Code:  []Opcode{OpReq, OpPushI, OpLeI, OpJFK, OpAttrI, OpPushI, OpNeI},
		Args:  []int32{int32(ReqMessageSize), 0, 0, 7, 1, 1, 0},
		Ints:  []int64{65536, 2},
		Spans: []Span{{0, 7}, {11, 16}, {0, 16}, {0, 34}, {20, 29}, {33, 34}, {20, 34}},
		Imports: []Import{
			{Name: "msgsize", Type: Int, Origin: Endo, Path: ReqMessageSize},
			{Name: "slow_rank", Type: Int, Origin: Exo},
		},
		Result:   Bool,
		MaxStack: 2,
		Source:   "msgsize <= 65536 && slow_rank != 2",
	}
}

func TestVerifyAcceptsGood(t *testing.T) {
	if err := Verify(good()); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyRejects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(p *Program)
		want   string
	}{
		{"empty", func(p *Program) { p.Code, p.Args, p.Spans = nil, nil, nil }, "empty program"},
		{"args length", func(p *Program) { p.Args = p.Args[:3] }, "operands for"},
		{"spans length", func(p *Program) { p.Spans = p.Spans[:1] }, "spans for"},
		{"span outside source", func(p *Program) { p.Spans[0] = Span{0, 99} }, "outside the"},
		{"bad opcode", func(p *Program) { p.Code[2] = NumOpcodes }, "undefined opcode"},
		{"int pool index", func(p *Program) { p.Args[1] = 5 }, "outside the 2 int constants"},
		{"negative pool index", func(p *Program) { p.Args[1] = -1 }, "outside the 2 int constants"},
		{"request field", func(p *Program) { p.Args[0] = int32(NumReqFields) }, "not a request field"},
		{"import index", func(p *Program) { p.Args[4] = 9 }, "outside the 2 imports"},
		{"attr reads endo import", func(p *Program) { p.Args[4] = 0 }, "want an exo int"},
		{"attr type", func(p *Program) { p.Code[4] = OpAttrF }, "want an exo float"},
		{"operand of no-arg op", func(p *Program) { p.Args[2] = 1 }, "takes no operand"},
		{"backward jump", func(p *Program) { p.Args[3] = 1 }, "is not after"},
		{"jump past end", func(p *Program) { p.Args[3] = 8 }, "is not after"},
		{"operand type", func(p *Program) { p.Code[2] = OpLeF }, "operand 1 is int, want float"},
		{"stack mismatch at join", func(p *Program) { p.Args[3] = 6 }, "differs"},
		{"underflow", func(p *Program) { p.Code[0], p.Args[0] = OpNot, 0 }, "needs 1 operands"},
		{"result type", func(p *Program) { p.Result = Int }, "want [int]"},
		{"vector result", func(p *Program) { p.Result = Vector }, "result type vector"},
		{"declared depth too small", func(p *Program) { p.MaxStack = 1 }, "more than the declared 1"},
		{"declared depth too large", func(p *Program) { p.MaxStack = MaxStack + 1 }, "outside [1, 256]"},
		{"rank-local flag missing", func(p *Program) { p.Args[0] = int32(ReqSendBuf) }, "rank-local flag is false"},
		{"rank-local flag spurious", func(p *Program) { p.Flags = FlagRankLocal }, "rank-local flag is true"},
		{"endo import type", func(p *Program) { p.Imports[0].Type = Float }, "must be an int"},
		{"import origin", func(p *Program) { p.Imports[1].Origin = 7 }, "bad origin"},
		{"import name", func(p *Program) { p.Imports[1].Name = "" }, "bad name"},
		{"bool operand", func(p *Program) { p.Code[1], p.Args[1] = OpPushB, 2 }, "not 0 or 1"},
		{"unreachable", func(p *Program) {
			// PUSHB 1; JMP 3; NOT; (end) — NOT is unreachable.
			p.Code, p.Args, p.Spans = []Opcode{OpPushB, OpJmp, OpNot}, []int32{1, 3, 0}, nil
		}, "unreachable"},
		{"leftover values", func(p *Program) {
			p.Code, p.Args, p.Spans = []Opcode{OpPushB, OpPushB}, []int32{1, 1}, nil
		}, "ends with stack"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := good()
			tc.mutate(p)
			err := Verify(p)
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("Verify = %v, want a *VerifyError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Verify = %q, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestVerifyTernaryAndOr(t *testing.T) {
	// b ? 1 : 2.0 (converted), then the || of two bools: both joins balance.
	p := &Program{
		Code: []Opcode{OpPushB, OpJF, OpPushI, OpI2F, OpJmp, OpPushF, OpPushF, OpGtF, OpJTK, OpPushB},
		Args: []int32{1, 5, 0, 0, 6, 0, 0, 0, 10, 0},
		Ints: []int64{1}, Floats: []float64{2},
		Result: Bool, MaxStack: 2,
	}
	if err := Verify(p); err != nil {
		t.Fatal(err)
	}
}

func TestSemantics(t *testing.T) {
	const minI = -1 << 63
	if v, f := DivI(minI, -1); v != minI || f != FaultNone {
		t.Errorf("DivI(MinInt64, -1) = %d, %v", v, f)
	}
	if _, f := DivI(1, 0); f != FaultDivZero {
		t.Errorf("DivI(1, 0) fault %v", f)
	}
	if v, f := ModI(-7, 3); v != -1 || f != FaultNone {
		t.Errorf("ModI(-7, 3) = %d, %v; want the sign of the dividend", v, f)
	}
	if v, f := ModI(minI, -1); v != 0 || f != FaultNone {
		t.Errorf("ModI(MinInt64, -1) = %d, %v", v, f)
	}
	if _, f := Floor(9.3e18); f != FaultConvert {
		t.Errorf("Floor(9.3e18) fault %v", f)
	}
	if v, f := Floor(-9223372036854775808.0); v != minI || f != FaultNone {
		t.Errorf("Floor(-2^63) = %d, %v", v, f)
	}
	if v, f := Ceil(-0.5); v != 0 || f != FaultNone {
		t.Errorf("Ceil(-0.5) = %d, %v", v, f)
	}
	if AbsI(minI) != minI {
		t.Errorf("AbsI(MinInt64) must wrap")
	}
	if MinOf(nil) <= 1e308 || MaxOf(nil) >= -1e308 || Sum(nil) != 0 {
		t.Errorf("empty-vector identities wrong")
	}
	if _, f := Index([]float64{1}, 1); f != FaultIndex {
		t.Errorf("Index past the end fault %v", f)
	}
	if _, f := Index([]float64{1}, -1); f != FaultIndex {
		t.Errorf("negative Index fault %v", f)
	}
}

func TestOpcodeTableComplete(t *testing.T) {
	seen := map[string]bool{}
	for op := OpInvalid + 1; op < NumOpcodes; op++ {
		info := op.Info()
		if info.Name == "" || seen[info.Name] {
			t.Errorf("opcode %d has an empty or repeated name %q", op, info.Name)
		}
		seen[info.Name] = true
		if (info.Push == Invalid) != op.IsJump() {
			t.Errorf("%s: only jumps push nothing", op)
		}
		if k := op.WithConst(); k != OpInvalid {
			ki := k.Info()
			if len(ki.Pops) != 1 || ki.Pops[0] != info.Pops[0] || ki.Push != info.Push || ki.Name != info.Name+"K" {
				t.Errorf("%s -> %s: superinstruction does not match", op, k)
			}
		}
	}
	if Verify(nil) == nil {
		t.Error("Verify(nil) succeeded")
	}
}
