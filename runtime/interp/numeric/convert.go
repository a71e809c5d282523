package numeric

import (
	"math"
	"math/bits"
	"sync"
)

// This file converts between float32 and the narrow floating-point formats
// (docs/design/ir.md §8). Widening is exact. Narrowing rounds once, to
// nearest with ties to even, with subnormal results kept (no flush to zero):
//
//   - float16 (IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits, bias
//     15): a magnitude that rounds above 65504 becomes ±Inf (0x7c00).
//   - bfloat16 (1, 8, 7, bias 127): a magnitude that rounds above
//     3.3895314e38 becomes ±Inf (0x7f80).
//   - fp8 e4m3 (OCP E4M3FN: 1, 4, 3, bias 7, no infinities, NaN is S.1111.111):
//     saturates: every finite or infinite value that rounds above 448 becomes
//     ±448 (0x7e / 0xfe).
//   - fp8 e5m2 (OCP E5M2: 1, 5, 2, bias 15, IEEE-like): saturates to ±57344
//     (0x7b / 0xfb); ±Inf also becomes ±57344 (NVIDIA's __NV_SATFINITE).
//
// A NaN narrows to the target's canonical NaN (every exponent and mantissa
// bit set: 0x7fff, 0x7fff, 0x7f, 0x7f) with the sign bit of the input kept.
// A NaN widens to a quiet float32 NaN with the same sign whose top mantissa
// bits are the input's mantissa.

// Canonical NaN bit patterns (sign bit clear) of each floating-point type:
// every exponent and mantissa bit set. Reductions produce exactly these
// (see Reduce).
const (
	NaN16   uint16 = 0x7fff             // float16
	NaNBF16 uint16 = 0x7fff             // bfloat16
	NaNE4M3 uint8  = 0x7f               // fp8 e4m3
	NaNE5M2 uint8  = 0x7f               // fp8 e5m2
	NaN32   uint32 = 0x7fffffff         // float32
	NaN64   uint64 = 0x7fffffffffffffff // float64
)

// Largest finite values (positive bit patterns).
const (
	MaxF16  uint16 = 0x7bff // 65504
	MaxBF16 uint16 = 0x7f7f // 3.3895314e38
	MaxE4M3 uint8  = 0x7e   // 448
	MaxE5M2 uint8  = 0x7b   // 57344
)

// format describes a narrow binary floating-point format.
type format struct {
	ebits, mbits uint
	bias         int
	hasInf       bool   // all-ones exponent with zero mantissa is ±Inf
	satfinite    bool   // overflow (and ±Inf) saturates to maxFinite
	maxFinite    uint32 // positive bit pattern of the largest finite value
	nan          uint32 // positive canonical NaN
}

var (
	fmtF16  = format{ebits: 5, mbits: 10, bias: 15, hasInf: true, maxFinite: uint32(MaxF16), nan: uint32(NaN16)}
	fmtBF16 = format{ebits: 8, mbits: 7, bias: 127, hasInf: true, maxFinite: uint32(MaxBF16), nan: uint32(NaNBF16)}
	fmtE4M3 = format{ebits: 4, mbits: 3, bias: 7, satfinite: true, maxFinite: uint32(MaxE4M3), nan: uint32(NaNE4M3)}
	fmtE5M2 = format{ebits: 5, mbits: 2, bias: 15, hasInf: true, satfinite: true, maxFinite: uint32(MaxE5M2), nan: uint32(NaNE5M2)}
)

func (f format) signBit() uint32 { return 1 << (f.ebits + f.mbits) }

// narrow rounds x to format f (round to nearest, ties to even).
func (f format) narrow(x float32) uint32 {
	b := math.Float32bits(x)
	var sign uint32
	if b>>31 != 0 {
		sign = f.signBit()
	}
	exp := int(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man != 0 {
			return sign | f.nan
		}
		if f.satfinite || !f.hasInf {
			return sign | f.maxFinite
		}
		return sign | f.inf()
	}
	if exp == 0 && man == 0 {
		return sign
	}
	// x = sig * 2^e2 exactly.
	sig, e2 := man|1<<23, exp-150
	if exp == 0 {
		sig, e2 = man, -149
	}
	// Unbiased exponent of the result, clamped to the subnormal range.
	e := e2 + bits.Len32(sig) - 1
	if minE := 1 - f.bias; e < minE {
		e = minE
	}
	if e+f.bias > 1<<f.ebits { // far above the range: overflow without shifting
		return f.overflow(sign)
	}
	// q is the significand in units of 2^(e-mbits): mbits+1 bits for normal
	// results, fewer for subnormal ones, possibly 2^(mbits+1) after rounding
	// up (a carry into the next binade).
	shift := e - int(f.mbits) - e2
	var q uint32
	if shift <= 0 {
		q = sig << uint(-shift)
	} else {
		q = rne(sig, uint(shift))
	}
	// One formula covers subnormal results (q < 2^mbits, biased exponent 0)
	// and carries: code = (e+bias-1)<<mbits + q.
	code := uint32(e+f.bias-1)<<f.mbits + q
	if code > f.maxFinite {
		return f.overflow(sign)
	}
	return sign | code
}

func (f format) inf() uint32 { return (1<<f.ebits - 1) << f.mbits }

func (f format) overflow(sign uint32) uint32 {
	if f.satfinite || !f.hasInf {
		return sign | f.maxFinite
	}
	return sign | f.inf()
}

// rne shifts v right by s bits, rounding to nearest with ties to even.
func rne(v uint32, s uint) uint32 {
	if s >= 32 {
		return 0 // v < 2^24, so v/2^s < 1/2
	}
	q := v >> s
	rem := v & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || (rem == half && q&1 == 1) {
		q++
	}
	return q
}

// widen converts a format-f bit pattern to float32 exactly.
func (f format) widen(c uint32) float32 {
	neg := c&f.signBit() != 0
	c &^= f.signBit()
	exp := int(c >> f.mbits)
	man := c & (1<<f.mbits - 1)
	maxExp := 1<<f.ebits - 1
	var sign uint32
	if neg {
		sign = 1 << 31
	}
	switch {
	case f.hasInf && exp == maxExp && man == 0:
		return math.Float32frombits(sign | 0x7f800000)
	case (f.hasInf && exp == maxExp) || (!f.hasInf && c == f.nan):
		return math.Float32frombits(sign | 0x7fc00000 | man<<(23-f.mbits))
	case exp == 0:
		v := float32(math.Ldexp(float64(man), 1-f.bias-int(f.mbits)))
		if neg {
			v = -v
		}
		return v
	}
	v := float32(math.Ldexp(float64(1<<f.mbits|man), exp-f.bias-int(f.mbits)))
	if neg {
		v = -v
	}
	return v
}

var (
	f16Once  sync.Once
	f16Table *[1 << 16]float32
	e4m3Tab  [256]float32
	e5m2Tab  [256]float32
)

func init() {
	for i := range 256 {
		e4m3Tab[i] = fmtE4M3.widen(uint32(i))
		e5m2Tab[i] = fmtE5M2.widen(uint32(i))
	}
}

func f16tab() *[1 << 16]float32 {
	f16Once.Do(func() {
		t := new([1 << 16]float32)
		for i := range t {
			t[i] = fmtF16.widen(uint32(i))
		}
		f16Table = t
	})
	return f16Table
}

// F16ToF32 widens an IEEE 754 binary16 value to float32 exactly.
func F16ToF32(h uint16) float32 { return f16tab()[h] }

// F32ToF16 rounds x to binary16, to nearest with ties to even; magnitudes
// that round above 65504 become ±Inf; NaN becomes sign|0x7fff.
func F32ToF16(x float32) uint16 {
	// The classic bit-level rounding (F. Giesen's float_to_half_fast3_rtne),
	// checked against the generic narrowing in the tests.
	const (
		f32Inf     = 0xff << 23
		f16Over    = (127 + 16) << 23 // 65536: everything above rounds to Inf
		minNormal  = 113 << 23        // 2^-14, the smallest normal float16
		denormBias = ((127 - 15) + (23 - 10) + 1) << 23
	)
	u := math.Float32bits(x)
	sign := uint16(u>>16) & 0x8000
	u &^= 1 << 31
	switch {
	case u > f32Inf:
		return sign | NaN16
	case u >= f16Over:
		return sign | 0x7c00
	case u < minNormal:
		// Adding 0.5 (denormBias as a float) aligns the float16 subnormal
		// mantissa with the float32 one; float32 addition rounds to nearest
		// even, which is exactly the rounding we need.
		f := math.Float32frombits(u) + math.Float32frombits(denormBias)
		return sign | uint16(math.Float32bits(f)-denormBias)
	}
	odd := (u >> 13) & 1
	u = u - (127-15)<<23 + 0xfff + odd
	return sign | uint16(u>>13)
}

// BF16ToF32 widens a bfloat16 value to float32 exactly (NaNs become quiet).
func BF16ToF32(h uint16) float32 {
	if h&0x7f80 == 0x7f80 && h&0x7f != 0 {
		return math.Float32frombits(uint32(h)<<16 | 0x400000)
	}
	return math.Float32frombits(uint32(h) << 16)
}

// F32ToBF16 rounds x to bfloat16, to nearest with ties to even (subnormals
// kept); magnitudes that round above MaxBF16 become ±Inf; NaN becomes
// sign|0x7fff.
func F32ToBF16(x float32) uint16 {
	b := math.Float32bits(x)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16)&0x8000 | NaNBF16
	}
	// Adding 0x7fff plus the lowest kept bit rounds to nearest even in the
	// bit-pattern domain; carries run into the exponent (and up to Inf)
	// exactly as rounding requires.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// E4M3ToF32 widens an fp8 e4m3 (E4M3FN) value to float32 exactly.
func E4M3ToF32(c uint8) float32 { return e4m3Tab[c] }

// F32ToE4M3 rounds x to fp8 e4m3, to nearest with ties to even, saturating
// to ±448 (±Inf included); NaN becomes sign|0x7f.
func F32ToE4M3(x float32) uint8 { return uint8(fmtE4M3.narrow(x)) }

// E5M2ToF32 widens an fp8 e5m2 value to float32 exactly.
func E5M2ToF32(c uint8) float32 { return e5m2Tab[c] }

// F32ToE5M2 rounds x to fp8 e5m2, to nearest with ties to even, saturating
// to ±57344 (±Inf included); NaN becomes sign|0x7f.
func F32ToE5M2(x float32) uint8 { return uint8(fmtE5M2.narrow(x)) }
