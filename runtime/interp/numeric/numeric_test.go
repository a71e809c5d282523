package numeric

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
)

// enc encodes values of dt (given as raw bit patterns) little-endian.
func enc(dt ir.DataType, xs ...uint64) []byte {
	es := dt.Size()
	b := make([]byte, len(xs)*es)
	for i, x := range xs {
		switch es {
		case 1:
			b[i] = byte(x)
		case 2:
			binary.LittleEndian.PutUint16(b[i*2:], uint16(x))
		case 4:
			binary.LittleEndian.PutUint32(b[i*4:], uint32(x))
		case 8:
			binary.LittleEndian.PutUint64(b[i*8:], x)
		}
	}
	return b
}

func dec(dt ir.DataType, b []byte) []uint64 {
	es := dt.Size()
	out := make([]uint64, len(b)/es)
	for i := range out {
		switch es {
		case 1:
			out[i] = uint64(b[i])
		case 2:
			out[i] = uint64(binary.LittleEndian.Uint16(b[i*2:]))
		case 4:
			out[i] = uint64(binary.LittleEndian.Uint32(b[i*4:]))
		case 8:
			out[i] = binary.LittleEndian.Uint64(b[i*8:])
		}
	}
	return out
}

func f32(x float32) uint64 { return uint64(math.Float32bits(x)) }
func f64(x float64) uint64 { return math.Float64bits(x) }
func i64(x int64) uint64   { return uint64(x) }

// reduce runs Reduce over per-source element lists and returns the result
// bits.
func reduce(t *testing.T, dt ir.DataType, op ir.RedOp, srcs ...[]uint64) []uint64 {
	t.Helper()
	bs := make([][]byte, len(srcs))
	for i, s := range srcs {
		bs[i] = enc(dt, s...)
	}
	dst := make([]byte, len(bs[0]))
	if err := Reduce(dt, op, dst, bs); err != nil {
		t.Fatal(err)
	}
	return dec(dt, dst)
}

func TestReduceExamples(t *testing.T) {
	negZero32 := f32(float32(math.Copysign(0, -1)))
	nanPay := uint64(0x7fc00001)
	cases := []struct {
		name string
		dt   ir.DataType
		op   ir.RedOp
		srcs [][]uint64
		want []uint64
	}{
		{"int8 sum wraps", ir.Int8, ir.Sum, [][]uint64{{100, i64(-128), 5}, {100, i64(-1), 7}}, []uint64{0xc8, 0x7f, 12}},
		{"int8 max signed", ir.Int8, ir.Max, [][]uint64{{i64(-1), 3}, {1, i64(-4)}}, []uint64{1, 3}},
		{"uint8 max unsigned", ir.Uint8, ir.Max, [][]uint64{{0xff, 3}, {1, 4}}, []uint64{0xff, 4}},
		{"uint8 prod wraps", ir.Uint8, ir.Prod, [][]uint64{{16, 3}, {16, 5}}, []uint64{0, 15}},
		{"int32 min signed", ir.Int32, ir.Min, [][]uint64{{0xffffffff, 7}, {1, 9}}, []uint64{0xffffffff, 7}},
		{"uint32 min unsigned", ir.Uint32, ir.Min, [][]uint64{{0xffffffff, 7}, {1, 9}}, []uint64{1, 7}},
		{"int64 sum wraps", ir.Int64, ir.Sum, [][]uint64{{math.MaxInt64}, {1}}, []uint64{1 << 63}},
		{"uint64 prod", ir.Uint64, ir.Prod, [][]uint64{{1 << 40}, {1 << 30}}, []uint64{0}},
		{"avg reduces as sum", ir.Int32, ir.Avg, [][]uint64{{3}, {4}, {5}}, []uint64{12}},
		// Left to right, one rounding per step in float32.
		{"f32 order (1e8-1e8)+1", ir.Float32, ir.Sum, [][]uint64{{f32(1e8)}, {f32(-1e8)}, {f32(1)}}, []uint64{f32(1)}},
		{"f32 order (1+1e8)-1e8", ir.Float32, ir.Sum, [][]uint64{{f32(1)}, {f32(1e8)}, {f32(-1e8)}}, []uint64{f32(0)}},
		{"f64 sum", ir.Float64, ir.Sum, [][]uint64{{f64(0.1)}, {f64(0.2)}}, []uint64{0x3fd3333333333334}}, // 0.30000000000000004
		// float16 combined in float32 and rounded once: 1 + 2^-11 + 2^-11
		// is 1+2^-10 (0x3c01); rounding after each add would give 1.
		{"f16 rounds once", ir.Float16, ir.Sum, [][]uint64{{0x3c00}, {0x1000}, {0x1000}}, []uint64{0x3c01}},
		{"f16 prod overflows to inf", ir.Float16, ir.Prod, [][]uint64{{0x7bff}, {0x4000}}, []uint64{0x7c00}},
		{"bf16 rounds once", ir.Bfloat16, ir.Sum, [][]uint64{{0x3f80}, {0x3b80}, {0x3b80}}, []uint64{0x3f81}},
		{"e4m3 saturates", ir.Fp8E4M3, ir.Sum, [][]uint64{{0x7e, 0xfe}, {0x7e, 0xfe}}, []uint64{0x7e, 0xfe}},
		{"e5m2 saturates", ir.Fp8E5M2, ir.Sum, [][]uint64{{0x7b}, {0x7b}}, []uint64{0x7b}},
		{"e5m2 inf input saturates", ir.Fp8E5M2, ir.Max, [][]uint64{{0x7c}, {0x3c}}, []uint64{0x7b}},
		// NaN results are the positive canonical NaN.
		{"f32 NaN+1", ir.Float32, ir.Sum, [][]uint64{{nanPay}, {f32(1)}}, []uint64{0x7fffffff}},
		{"f32 inf-inf", ir.Float32, ir.Sum, [][]uint64{{f32(float32(math.Inf(1)))}, {f32(float32(math.Inf(-1)))}}, []uint64{0x7fffffff}},
		{"f64 -NaN*2", ir.Float64, ir.Prod, [][]uint64{{0xfff8000000000001}}, nil}, // placeholder replaced below
		{"f16 -NaN+1", ir.Float16, ir.Sum, [][]uint64{{0xfe01}, {0x3c00}}, []uint64{0x7fff}},
		{"e4m3 -NaN+1", ir.Fp8E4M3, ir.Sum, [][]uint64{{0xff}, {0x38}}, []uint64{0x7f}},
		// max/min: NaN loses to a number, two NaNs give NaN, ties keep the left operand.
		{"f32 max NaN", ir.Float32, ir.Max, [][]uint64{{nanPay, f32(2), nanPay}, {f32(1), nanPay, 0xffc00000}}, []uint64{f32(1), f32(2), 0x7fffffff}},
		{"f32 min NaN", ir.Float32, ir.Min, [][]uint64{{nanPay, f32(2)}, {f32(1), nanPay}}, []uint64{f32(1), f32(2)}},
		{"f32 max +0,-0 keeps left", ir.Float32, ir.Max, [][]uint64{{0, negZero32}, {negZero32, 0}}, []uint64{0, negZero32}},
		{"f32 min +0,-0 keeps left", ir.Float32, ir.Min, [][]uint64{{0, negZero32}, {negZero32, 0}}, []uint64{0, negZero32}},
		{"f16 max +0,-0 keeps left", ir.Float16, ir.Max, [][]uint64{{0x0000, 0x8000}, {0x8000, 0x0000}}, []uint64{0x0000, 0x8000}},
		{"e4m3 min", ir.Fp8E4M3, ir.Min, [][]uint64{{0x38, 0x7f}, {0xb8, 0x7f}}, []uint64{0xb8, 0x7f}},
		{"f64 max three", ir.Float64, ir.Max, [][]uint64{{f64(1)}, {f64(3)}, {f64(2)}}, []uint64{f64(3)}},
	}
	for i := range cases {
		if cases[i].want == nil { // f64 -NaN*2
			cases[i].srcs = [][]uint64{{0xfff8000000000001}, {f64(2)}}
			cases[i].want = []uint64{0x7fffffffffffffff}
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if d := cmp.Diff(c.want, reduce(t, c.dt, c.op, c.srcs...)); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
		})
	}
}

// TestReduceLong crosses the internal block size and compares with a
// per-element reference, for every type and op.
func TestReduceLong(t *testing.T) {
	const n = 3*block + 17
	for _, dt := range ir.AllDataTypes() {
		for _, op := range ir.AllRedOps() {
			srcs := make([][]byte, 3)
			for s := range srcs {
				xs := make([]uint64, n)
				for e := range xs {
					xs[e] = uint64(e*7+s*13) % 50
					if dt == ir.Float32 {
						xs[e] = f32(float32(xs[e]))
					}
				}
				srcs[s] = enc(dt, xs...)
			}
			got := make([]byte, len(srcs[0]))
			if err := Reduce(dt, op, got, srcs); err != nil {
				t.Fatal(err)
			}
			es := dt.Size()
			for e := 0; e < n; e++ {
				one := make([]byte, es)
				if err := Reduce(dt, op, one, [][]byte{srcs[0][e*es : (e+1)*es], srcs[1][e*es : (e+1)*es], srcs[2][e*es : (e+1)*es]}); err != nil {
					t.Fatal(err)
				}
				if string(one) != string(got[e*es:(e+1)*es]) {
					t.Fatalf("%v %v element %d: %x vs %x", dt, op, e, got[e*es:(e+1)*es], one)
				}
			}
		}
	}
}

func TestReduceAliasAndUnaligned(t *testing.T) {
	// dst is src 0 (MSCCL re: dst = dst ⊕ src).
	a := enc(ir.Float32, f32(1), f32(2))
	b := enc(ir.Float32, f32(10), f32(20))
	if err := Reduce(ir.Float32, ir.Sum, a, [][]byte{a, b}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]uint64{f32(11), f32(22)}, dec(ir.Float32, a)); d != "" {
		t.Error(d)
	}
	// Misaligned operands take the copying path and give the same result.
	raw := make([]byte, 1+16*3)
	x, y, z := raw[1:17], raw[17:33], raw[33:49]
	copy(x, enc(ir.Int32, 1, 2, 3, 4))
	copy(y, enc(ir.Int32, 10, 20, 30, 40))
	if err := Reduce(ir.Int32, ir.Sum, z, [][]byte{x, y}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]uint64{11, 22, 33, 44}, dec(ir.Int32, z)); d != "" {
		t.Error(d)
	}
	// One source: a bit copy, NaN payload kept.
	one := make([]byte, 4)
	if err := Reduce(ir.Float32, ir.Sum, one, [][]byte{enc(ir.Float32, 0x7fc00001)}); err != nil {
		t.Fatal(err)
	}
	if got := dec(ir.Float32, one)[0]; got != 0x7fc00001 {
		t.Errorf("one-source reduce changed bits: %#x", got)
	}
}

func TestReduceErrors(t *testing.T) {
	b4 := make([]byte, 4)
	cases := []struct {
		name string
		err  error
	}{
		{"bad type", Reduce(ir.NumDataTypes, ir.Sum, b4, [][]byte{b4, b4})},
		{"bad op", Reduce(ir.Int32, ir.NumRedOps, b4, [][]byte{b4, b4})},
		{"no srcs", Reduce(ir.Int32, ir.Sum, b4, nil)},
		{"length mismatch", Reduce(ir.Int32, ir.Sum, b4, [][]byte{b4, make([]byte, 8)})},
		{"ragged", Reduce(ir.Int32, ir.Sum, make([]byte, 3), [][]byte{make([]byte, 3), make([]byte, 3)})},
		{"divide by 0 ranks", Divide(ir.Int32, b4, 0)},
		{"divide bad type", Divide(ir.NumDataTypes, b4, 2)},
	}
	for _, c := range cases {
		if c.err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

func TestDivide(t *testing.T) {
	cases := []struct {
		name   string
		dt     ir.DataType
		nranks int
		in     []uint64
		want   []uint64
	}{
		{"int8 truncates toward zero", ir.Int8, 2, []uint64{i64(-7), 7, i64(-128)}, []uint64{i64(-3) & 0xff, 3, i64(-64) & 0xff}},
		{"uint8", ir.Uint8, 2, []uint64{255}, []uint64{127}},
		{"int32", ir.Int32, 3, []uint64{i64(-10) & 0xffffffff}, []uint64{i64(-3) & 0xffffffff}},
		{"uint32", ir.Uint32, 3, []uint64{0xffffffff}, []uint64{0x55555555}},
		{"int64", ir.Int64, 4, []uint64{i64(-9)}, []uint64{i64(-2)}},
		{"uint64", ir.Uint64, 4, []uint64{1<<64 - 1}, []uint64{1<<62 - 1}},
		{"float32", ir.Float32, 3, []uint64{f32(7)}, []uint64{f32(float32(7) / 3)}},
		{"float64", ir.Float64, 3, []uint64{f64(7)}, []uint64{f64(7.0 / 3)}},
		{"float32 NaN canonical", ir.Float32, 3, []uint64{0xffc00001}, []uint64{0x7fffffff}},
		{"float16 1/3", ir.Float16, 3, []uint64{0x3c00}, []uint64{0x3555}},
		{"bfloat16 1/3", ir.Bfloat16, 3, []uint64{0x3f80}, []uint64{0x3eab}},
		{"e4m3 1/3", ir.Fp8E4M3, 3, []uint64{0x38}, []uint64{0x2b}},
		{"e5m2 1/3", ir.Fp8E5M2, 3, []uint64{0x3c}, []uint64{0x35}},
		{"e5m2 -57344/2", ir.Fp8E5M2, 2, []uint64{0xfb}, []uint64{0xf7}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := enc(c.dt, c.in...)
			if err := Divide(c.dt, b, c.nranks); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.want, dec(c.dt, b)); d != "" {
				t.Errorf("-want +got:\n%s", d)
			}
		})
	}
}

func BenchmarkReduceF32Sum2(b *testing.B) {
	const n = 1 << 20
	x, y, d := make([]byte, 4*n), make([]byte, 4*n), make([]byte, 4*n)
	b.SetBytes(4 * n)
	for b.Loop() {
		if err := Reduce(ir.Float32, ir.Sum, d, [][]byte{x, y}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReduceF16Sum2(b *testing.B) {
	const n = 1 << 20
	x, y, d := make([]byte, 2*n), make([]byte, 2*n), make([]byte, 2*n)
	b.SetBytes(2 * n)
	for b.Loop() {
		if err := Reduce(ir.Float16, ir.Sum, d, [][]byte{x, y}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReduceBF16Sum2(b *testing.B) {
	const n = 1 << 20
	x, y, d := make([]byte, 2*n), make([]byte, 2*n), make([]byte, 2*n)
	b.SetBytes(2 * n)
	for b.Loop() {
		if err := Reduce(ir.Bfloat16, ir.Sum, d, [][]byte{x, y}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReduceE4M3Sum2(b *testing.B) {
	const n = 1 << 20
	x, y, d := make([]byte, n), make([]byte, n), make([]byte, n)
	b.SetBytes(n)
	for b.Loop() {
		if err := Reduce(ir.Fp8E4M3, ir.Sum, d, [][]byte{x, y}); err != nil {
			b.Fatal(err)
		}
	}
}
