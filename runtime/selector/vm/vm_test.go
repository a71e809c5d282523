package vm_test

import (
	"errors"
	"math"
	"testing"

	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/runtime/selector/vm"
)

// The attribute manifest of these tests; slot i of Env is attribute i.
var attrList = []policy.Attr{
	{Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqMessageSize},
	{Name: "nranks", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqNRanks},
	{Name: "sendbuf", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqSendBuf},
	{Name: "slow_rank", Type: bc.Int, Origin: bc.Exo},
	{Name: "load", Type: bc.Float, Origin: bc.Exo},
	{Name: "degraded", Type: bc.Bool, Origin: bc.Exo},
	{Name: "bw", Type: bc.Vector, Origin: bc.Exo},
	{Name: "empty", Type: bc.Vector, Origin: bc.Exo},
}

var attrs = func() policy.AttrMap {
	m := policy.AttrMap{}
	for _, a := range attrList {
		m[a.Name] = a
	}
	return m
}()

func link(im bc.Import) (int, error) {
	for i, a := range attrList {
		if a.Name == im.Name {
			if a.Type != im.Type || a.Origin != im.Origin || a.Origin == bc.Endo && a.Path != im.Path {
				return 0, errors.New("declaration differs")
			}
			return i, nil
		}
	}
	return 0, errors.New("not declared")
}

func env() *vm.Env {
	e := &vm.Env{Attrs: make([]int64, len(attrList)), Vecs: make([][]float64, len(attrList))}
	e.Req[bc.ReqMessageSize] = 1 << 20
	e.Req[bc.ReqNRanks] = 8
	e.Req[bc.ReqSendBuf] = 0x7f0000001040
	e.Attrs[3] = 2             // slow_rank
	e.Attrs[4] = bc.Bits(0.25) // load
	e.Attrs[5] = 1             // degraded
	e.Vecs[6] = []float64{10, 20, 30, 40}
	e.Vecs[7] = []float64{}
	return e
}

func load(t testing.TB, src string, opt policy.Options) *vm.Program {
	t.Helper()
	p, ds := policy.Compile(src, attrs, opt)
	if p == nil {
		t.Fatalf("%s: %v", src, ds)
	}
	q, err := vm.Load(p, link)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	return q
}

func TestEval(t *testing.T) {
	inf := math.Inf(1)
	for _, tc := range []struct {
		src  string
		want any // int64, float64, bool, or bc.Fault
	}{
		{"msgsize / 1024", int64(1024)},
		{"msgsize <= 65536 && slow_rank != 2", false},
		{"msgsize > 65536 || 1 / (slow_rank - 2) > 0", true}, // short-circuit skips the division
		{"msgsize > 65536 && 1 / (slow_rank - 2) > 0", bc.FaultDivZero},
		{"slow_rank % (slow_rank - 2)", bc.FaultDivZero},
		{"-7 % slow_rank", int64(-1)},
		{"(-9223372036854775807 - 1) / (slow_rank - 3)", int64(math.MinInt64)},
		{"9223372036854775807 + slow_rank - 1", int64(math.MinInt64)}, // wraps
		{"100 - log2(msgsize)", 80.0},
		{"degraded ? 1 : 2.5", 1.0},
		{"!degraded ? 1 : 2.5", 2.5},
		{"bw[slow_rank] * load", 7.5},
		{"bw[slow_rank + 2]", bc.FaultIndex},
		{"bw[slow_rank - 3]", bc.FaultIndex},
		{"len(bw) + len(empty)", int64(4)},
		{"sum(bw) + sum(empty)", 100.0},
		{"minof(bw) + maxof(bw)", 50.0},
		{"minof(empty)", inf},
		{"maxof(empty)", -inf},
		{"contains(bw, slow_rank * 10)", true},
		{"contains(bw, load)", false},
		{"min(slow_rank, 7, nranks)", int64(2)},
		{"max(slow_rank, load)", 2.0},
		{"clamp(msgsize, 0, 4096)", int64(4096)},
		{"clamp(load, 0.5, 1)", 0.5},
		{"abs(slow_rank - 10) + abs(-load)", 8.25},
		{"floor(load * 10)", int64(2)},
		{"ceil(load * 10)", int64(3)},
		{"floor(load * 1e300)", bc.FaultConvert},
		{"floor(load / 0 - load / 0)", bc.FaultConvert}, // NaN
		{"load / 0", inf},
		{"pow(2, slow_rank)", 4.0},
		{"load % 0.1", math.Mod(0.25, 0.1)},
		{"degraded == (slow_rank == 2)", true},
		{"degraded != true", false},
		{"sendbuf % 64 == 0", true},
		{"contains([1, 2, -3.5], slow_rank) ? nranks : -nranks", int64(8)},
		{"log2(slow_rank - 2) < 0", true}, // -Inf
	} {
		t.Run(tc.src, func(t *testing.T) {
			p := load(t, tc.src, policy.Options{})
			var m vm.VM
			v, f := m.Eval(p, env())
			if want, ok := tc.want.(bc.Fault); ok {
				if f.Code != want {
					t.Fatalf("Eval = %v, fault %v; want fault %v", v, f.Code, want)
				}
				if f.Describe(p) == "" {
					t.Fatalf("fault has no description")
				}
				return
			}
			if !f.OK() {
				t.Fatalf("fault %s", f.Describe(p))
			}
			var got any
			switch v.Type {
			case bc.Int:
				got = v.Int()
			case bc.Float:
				got = v.Float()
			case bc.Bool:
				got = v.Bool()
			}
			if got != tc.want {
				t.Fatalf("Eval = %v (%T), want %v (%T)", got, got, tc.want, tc.want)
			}
		})
	}
}

func TestLoadRejects(t *testing.T) {
	p, _ := policy.Compile("slow_rank > 1", attrs, policy.Options{})
	if _, err := vm.Load(p, func(bc.Import) (int, error) { return 0, errors.New("gone") }); err == nil {
		t.Fatal("Load accepted a failing link")
	}
	bad := *p
	bad.Code = append([]bc.Opcode(nil), p.Code...)
	bad.Code[0] = bc.OpPushF
	var ve *bc.VerifyError
	if _, err := vm.Load(&bad, link); !errors.As(err, &ve) {
		t.Fatalf("Load of an unverifiable program = %v", err)
	}
	// An environment smaller than the linked slots is a fault, not a panic.
	q := load(t, "bw[0] > 0", policy.Options{})
	var m vm.VM
	if _, f := m.Eval(q, &vm.Env{}); f.Code != bc.FaultEnv {
		t.Fatalf("Eval with an empty Env: %v", f.Code)
	}
	if _, f := m.Eval(nil, &vm.Env{}); f.Code != bc.FaultNotLoaded {
		t.Fatalf("Eval(nil): %v", f.Code)
	}
}

const typical = "msgsize >= 4096 && msgsize <= 16777216 && !contains(bw, slow_rank) ? 100 - log2(msgsize) * load : -1"

func TestEvalAllocatesNothing(t *testing.T) {
	p := load(t, typical, policy.Options{})
	e := env()
	var m vm.VM
	if n := testing.AllocsPerRun(1000, func() { m.Eval(p, e) }); n != 0 {
		t.Fatalf("Eval allocates %v times per run", n)
	}
}

func BenchmarkEvalTypical(b *testing.B) {
	p := load(b, typical, policy.Options{})
	e := env()
	var m vm.VM
	b.ReportAllocs()
	for b.Loop() {
		m.Eval(p, e)
	}
}

func BenchmarkEvalWindow(b *testing.B) {
	p := load(b, "msgsize >= 1024 && msgsize < 1048576", policy.Options{})
	e := env()
	var m vm.VM
	b.ReportAllocs()
	for b.Loop() {
		m.Eval(p, e)
	}
}
