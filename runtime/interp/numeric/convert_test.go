package numeric

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// value computes what a narrow-format bit pattern means from the format's
// definition (sign, exponent, mantissa), independently of widen: the
// expected values of the exhaustive tests.
func value(f format, c uint32) (v float64, nan bool) {
	neg := c&f.signBit() != 0
	c &^= f.signBit()
	exp := int(c >> f.mbits)
	man := float64(c & (1<<f.mbits - 1))
	maxExp := 1<<f.ebits - 1
	switch {
	case f.hasInf && exp == maxExp && man == 0:
		v = math.Inf(1)
	case f.hasInf && exp == maxExp:
		return 0, true
	case !f.hasInf && exp == maxExp && int(man) == 1<<f.mbits-1:
		return 0, true
	case exp == 0:
		v = man / float64(uint(1)<<f.mbits) * math.Pow(2, float64(1-f.bias))
	default:
		v = (1 + man/float64(uint(1)<<f.mbits)) * math.Pow(2, float64(exp-f.bias))
	}
	if neg {
		v = -v
	}
	return v, false
}

type namedFmt struct {
	name   string
	f      format
	widen  func(uint32) float32
	narrow func(float32) uint32
	codes  int
}

var formats = []namedFmt{
	{"float16", fmtF16, func(c uint32) float32 { return F16ToF32(uint16(c)) }, func(x float32) uint32 { return uint32(F32ToF16(x)) }, 1 << 16},
	{"bfloat16", fmtBF16, func(c uint32) float32 { return BF16ToF32(uint16(c)) }, func(x float32) uint32 { return uint32(F32ToBF16(x)) }, 1 << 16},
	{"e4m3", fmtE4M3, func(c uint32) float32 { return E4M3ToF32(uint8(c)) }, func(x float32) uint32 { return uint32(F32ToE4M3(x)) }, 1 << 8},
	{"e5m2", fmtE5M2, func(c uint32) float32 { return E5M2ToF32(uint8(c)) }, func(x float32) uint32 { return uint32(F32ToE5M2(x)) }, 1 << 8},
}

// TestWidenExhaustive checks every bit pattern of every narrow format against
// its definition, and that narrowing it back gives the same bits (NaN: the
// canonical NaN with the sign kept; e5m2 ±Inf: saturated to ±57344).
func TestWidenExhaustive(t *testing.T) {
	for _, nf := range formats {
		t.Run(nf.name, func(t *testing.T) {
			for c := uint32(0); c < uint32(nf.codes); c++ {
				want, nan := value(nf.f, c)
				got := nf.widen(c)
				sign := c & nf.f.signBit()
				if nan {
					if got == got || math.Signbit(float64(got)) != (sign != 0) {
						t.Fatalf("widen(%#x) = %v (%#x), want NaN with sign %v", c, got, math.Float32bits(got), sign != 0)
					}
					if back := nf.narrow(got); back != sign|nf.f.nan {
						t.Fatalf("narrow(widen(%#x)) = %#x, want %#x", c, back, sign|nf.f.nan)
					}
					continue
				}
				if float64(got) != want || math.Signbit(float64(got)) != (sign != 0) {
					t.Fatalf("widen(%#x) = %v, want %v", c, got, want)
				}
				wantBack := c
				if nf.f.satfinite && math.IsInf(want, 0) {
					wantBack = sign | nf.f.maxFinite
				}
				if back := nf.narrow(got); back != wantBack {
					t.Fatalf("narrow(widen(%#x)) = %#x, want %#x", c, back, wantBack)
				}
			}
		})
	}
}

// oracle rounds x to format f by searching the sorted finite values of f:
// nearest, ties to the even bit pattern; beyond the largest finite value by
// at least half an ulp (of the binade above) it overflows.
type oracle struct {
	f    format
	vals []float64 // non-negative finite values, ascending
	code []uint32
}

func newOracle(f format, codes int) *oracle {
	o := &oracle{f: f}
	for c := uint32(0); c < uint32(codes)/2; c++ { // positive patterns
		v, nan := value(f, c)
		if nan || math.IsInf(v, 0) {
			continue
		}
		o.vals = append(o.vals, v)
		o.code = append(o.code, c)
	}
	idx := make([]int, len(o.vals))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return o.vals[idx[a]] < o.vals[idx[b]] })
	vs, cs := make([]float64, len(idx)), make([]uint32, len(idx))
	for i, j := range idx {
		vs[i], cs[i] = o.vals[j], o.code[j]
	}
	o.vals, o.code = vs, cs
	return o
}

func (o *oracle) round(x float32) uint32 {
	var sign uint32
	a := float64(x)
	if math.Signbit(a) {
		sign = o.f.signBit()
		a = -a
	}
	if math.IsNaN(a) {
		return sign | o.f.nan
	}
	n := len(o.vals)
	top, below := o.vals[n-1], o.vals[n-2]
	// The overflow threshold: the midpoint between the largest finite value
	// and the next value the exponent range would allow (top + ulp).
	if lim := top + (top-below)/2; a > lim || (a == lim && o.code[n-1]&1 == 1) || math.IsInf(a, 0) {
		if o.f.satfinite || !o.f.hasInf {
			return sign | o.f.maxFinite
		}
		return sign | o.f.inf()
	}
	i := sort.SearchFloat64s(o.vals, a)
	if i < n && o.vals[i] == a {
		return sign | o.code[i]
	}
	if i == n {
		return sign | o.code[n-1]
	}
	lo, hi := i-1, i
	dl, dh := a-o.vals[lo], o.vals[hi]-a
	switch {
	case dl < dh:
		return sign | o.code[lo]
	case dh < dl:
		return sign | o.code[hi]
	case o.code[lo]&1 == 0:
		return sign | o.code[lo]
	}
	return sign | o.code[hi]
}

// TestNarrowHalfway checks, for every pair of adjacent finite values of
// each format, the exact midpoint (a tie: it must go to the even pattern)
// and the float32 values one ulp either side of it, against the oracle.
func TestNarrowHalfway(t *testing.T) {
	for _, nf := range formats {
		t.Run(nf.name, func(t *testing.T) {
			o := newOracle(nf.f, nf.codes)
			check := func(x float32) {
				t.Helper()
				for _, y := range []float32{x, -x} {
					if got, want := nf.narrow(y), o.round(y); got != want {
						t.Fatalf("narrow(%v = %#x) = %#x, want %#x", y, math.Float32bits(y), got, want)
					}
				}
			}
			for i := 0; i+1 < len(o.vals); i++ {
				m := float32((o.vals[i] + o.vals[i+1]) / 2)
				if float64(m) != (o.vals[i]+o.vals[i+1])/2 {
					t.Fatalf("midpoint of %v and %v not exact in float32", o.vals[i], o.vals[i+1])
				}
				check(m)
				check(math.Nextafter32(m, 0))
				check(math.Nextafter32(m, float32(math.Inf(1))))
			}
			// Around the overflow threshold.
			n := len(o.vals)
			lim := float32(o.vals[n-1] + (o.vals[n-1]-o.vals[n-2])/2)
			for _, x := range []float32{lim, math.Nextafter32(lim, 0), math.Nextafter32(lim, 1e30), float32(math.Inf(1)), math.MaxFloat32, 1e-45, 0} {
				check(x)
			}
		})
	}
}

// TestNarrowRandom compares narrowing with the oracle on random float32 bit
// patterns (all exponents, subnormals and NaNs included).
func TestNarrowRandom(t *testing.T) {
	n := 200000
	if testing.Short() {
		n = 20000
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, nf := range formats {
		o := newOracle(nf.f, nf.codes)
		for range n {
			x := math.Float32frombits(r.Uint32())
			if got, want := nf.narrow(x), o.round(x); got != want {
				t.Fatalf("%s: narrow(%v = %#x) = %#x, want %#x", nf.name, x, math.Float32bits(x), got, want)
			}
		}
	}
}

// TestBF16FastPathMatchesGeneric checks the bit-trick bfloat16 rounding
// against the generic narrowing on random and boundary patterns.
func TestBF16FastPathMatchesGeneric(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 300000 {
		b := r.Uint32()
		if i < 1<<16 {
			b = uint32(i)<<16 | 0x8000 // every tie
		}
		x := math.Float32frombits(b)
		if got, want := F32ToBF16(x), uint16(fmtBF16.narrow(x)); got != want {
			t.Fatalf("F32ToBF16(%#x) = %#x, generic %#x", b, got, want)
		}
	}
}

// TestNarrowExamples pins well-known values.
func TestNarrowExamples(t *testing.T) {
	f := func(b uint32) float32 { return math.Float32frombits(b) }
	cases := []struct {
		name string
		got  uint32
		want uint32
	}{
		{"f16 1", uint32(F32ToF16(1)), 0x3c00},
		{"f16 1+2^-11 tie to even", uint32(F32ToF16(1 + 1.0/2048)), 0x3c00},
		{"f16 1+3*2^-11 tie to even (up)", uint32(F32ToF16(1 + 3.0/2048)), 0x3c02},
		{"f16 65504", uint32(F32ToF16(65504)), 0x7bff},
		{"f16 65519 rounds down", uint32(F32ToF16(65519)), 0x7bff},
		{"f16 65520 overflows", uint32(F32ToF16(65520)), 0x7c00},
		{"f16 -inf", uint32(F32ToF16(float32(math.Inf(-1)))), 0xfc00},
		{"f16 2^-24 min subnormal", uint32(F32ToF16(float32(math.Ldexp(1, -24)))), 0x0001},
		{"f16 2^-25 tie to zero", uint32(F32ToF16(float32(math.Ldexp(1, -25)))), 0x0000},
		{"f16 3*2^-25 tie to 2", uint32(F32ToF16(float32(math.Ldexp(3, -25)))), 0x0002},
		{"f16 -0", uint32(F32ToF16(float32(math.Copysign(0, -1)))), 0x8000},
		{"f16 NaN", uint32(F32ToF16(f(0xffc00001))), 0xffff},
		{"f16 0.1", uint32(F32ToF16(0.1)), 0x2e66},
		{"bf16 1", uint32(F32ToBF16(1)), 0x3f80},
		{"bf16 1+2^-8 tie", uint32(F32ToBF16(1 + 1.0/256)), 0x3f80},
		{"bf16 1+3*2^-8 tie", uint32(F32ToBF16(1 + 3.0/256)), 0x3f82},
		{"bf16 max float overflows", uint32(F32ToBF16(math.MaxFloat32)), 0x7f80},
		{"bf16 min f32 subnormal", uint32(F32ToBF16(f(1))), 0x0000},
		{"bf16 f32 subnormal 0x8000 tie", uint32(F32ToBF16(f(0x8000))), 0x0000},
		{"bf16 f32 subnormal 0x18000 tie", uint32(F32ToBF16(f(0x18000))), 0x0002},
		{"bf16 NaN", uint32(F32ToBF16(f(0x7f800001))), 0x7fff},
		{"e4m3 448", uint32(F32ToE4M3(448)), 0x7e},
		{"e4m3 464 saturates", uint32(F32ToE4M3(464)), 0x7e},
		{"e4m3 1e9 saturates", uint32(F32ToE4M3(1e9)), 0x7e},
		{"e4m3 -inf saturates", uint32(F32ToE4M3(float32(math.Inf(-1)))), 0xfe},
		{"e4m3 NaN", uint32(F32ToE4M3(f(0x7fc00000))), 0x7f},
		{"e4m3 -NaN", uint32(F32ToE4M3(f(0xffc00000))), 0xff},
		{"e4m3 1", uint32(F32ToE4M3(1)), 0x38},
		{"e4m3 17 tie to 16", uint32(F32ToE4M3(17)), 0x58},
		{"e4m3 19 tie to 20", uint32(F32ToE4M3(19)), 0x5a},
		{"e4m3 2^-9 min subnormal", uint32(F32ToE4M3(float32(math.Ldexp(1, -9)))), 0x01},
		{"e4m3 2^-10 tie to zero", uint32(F32ToE4M3(float32(math.Ldexp(1, -10)))), 0x00},
		{"e5m2 57344", uint32(F32ToE5M2(57344)), 0x7b},
		{"e5m2 65536 saturates", uint32(F32ToE5M2(65536)), 0x7b},
		{"e5m2 inf saturates", uint32(F32ToE5M2(float32(math.Inf(1)))), 0x7b},
		{"e5m2 1", uint32(F32ToE5M2(1)), 0x3c},
		{"e5m2 9 tie to 8", uint32(F32ToE5M2(9)), 0x48},
		{"e5m2 11 tie to 12", uint32(F32ToE5M2(11)), 0x4a},
		{"e5m2 NaN", uint32(F32ToE5M2(f(0x7f800001))), 0x7f},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("%s: got %#x, want %#x", c.name, c.got, c.want)
		}
	}
	widen := []struct {
		name string
		got  float32
		want float64
	}{
		{"f16 0x3555", F16ToF32(0x3555), 0.333251953125},
		{"f16 0x0001", F16ToF32(0x0001), math.Ldexp(1, -24)},
		{"f16 0x7bff", F16ToF32(0x7bff), 65504},
		{"bf16 0x4049", BF16ToF32(0x4049), 3.140625},
		{"e4m3 0x7e", E4M3ToF32(0x7e), 448},
		{"e4m3 0x01", E4M3ToF32(0x01), math.Ldexp(1, -9)},
		{"e4m3 0x08 min normal", E4M3ToF32(0x08), math.Ldexp(1, -6)},
		{"e5m2 0x7b", E5M2ToF32(0x7b), 57344},
		{"e5m2 0x01", E5M2ToF32(0x01), math.Ldexp(1, -16)},
		{"e5m2 0x7c", E5M2ToF32(0x7c), math.Inf(1)},
	}
	for _, c := range widen {
		if float64(c.got) != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestF16FastPathMatchesGeneric checks the bit-level float16 rounding
// against the generic narrowing on every float32 whose top 20 bits vary
// (low bits set to the interesting tie patterns) and on random patterns.
func TestF16FastPathMatchesGeneric(t *testing.T) {
	lows := []uint32{0, 1, 0xfff, 0x1000, 0x1001, 0x1fff, 0x2000}
	for hi := uint32(0); hi < 1<<19; hi++ {
		for _, lo := range lows {
			b := hi<<13 | lo
			for _, s := range []uint32{0, 1 << 31} {
				x := math.Float32frombits(b | s)
				if got, want := F32ToF16(x), uint16(fmtF16.narrow(x)); got != want {
					t.Fatalf("F32ToF16(%#x) = %#x, generic %#x", b|s, got, want)
				}
			}
		}
	}
}
