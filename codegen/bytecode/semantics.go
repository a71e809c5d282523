package bytecode

import (
	"fmt"
	"math"
)

// This file is the one definition of the scalar semantics of policy
// expressions (docs/policy-language.md, "Semantics"). The compiler's
// constant folder and the VM both call these functions, so a folded
// constant and a run-time evaluation always agree.

// Fault is a run-time evaluation error. The zero Fault means success.
type Fault uint8

const (
	FaultNone      Fault = iota
	FaultDivZero         // integer division or modulo by zero
	FaultIndex           // vector index outside [0, len)
	FaultConvert         // floor/ceil of NaN or of a value outside the int64 range
	FaultEnv             // the environment lacks an attribute the program reads
	FaultNotLoaded       // the program was not loaded (verified) before evaluation
)

var faultNames = [...]string{"", "integer division by zero", "vector index out of range",
	"float-to-int conversion out of range", "attribute missing from the environment", "program not loaded"}

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return fmt.Sprintf("fault(%d)", uint8(f))
}

// DivI is integer division truncating toward zero (Go semantics): x / 0
// faults; MinInt64 / -1 wraps to MinInt64.
func DivI(a, b int64) (int64, Fault) {
	if b == 0 {
		return 0, FaultDivZero
	}
	if b == -1 {
		return -a, FaultNone // wraps for MinInt64, like Go
	}
	return a / b, FaultNone
}

// ModI is the remainder with the sign of the dividend (Go semantics): x % 0
// faults; MinInt64 % -1 = 0.
func ModI(a, b int64) (int64, Fault) {
	if b == 0 {
		return 0, FaultDivZero
	}
	if b == -1 {
		return 0, FaultNone
	}
	return a % b, FaultNone
}

// AbsI is |x|, wrapping: AbsI(MinInt64) = MinInt64.
func AbsI(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

// MinF and MaxF propagate NaN (Go's builtin min/max semantics, which treat
// -0 < +0).
func MinF(a, b float64) float64 { return min(a, b) }

// MaxF: see MinF.
func MaxF(a, b float64) float64 { return max(a, b) }

// FloatToInt converts an integral float to int64; NaN and values outside
// [-2^63, 2^63) fault.
func FloatToInt(f float64) (int64, Fault) {
	if !(f >= -9223372036854775808.0 && f < 9223372036854775808.0) {
		return 0, FaultConvert
	}
	return int64(f), FaultNone
}

// Floor is floor(x) as an int64 (faults as FloatToInt).
func Floor(f float64) (int64, Fault) { return FloatToInt(math.Floor(f)) }

// Ceil is ceil(x) as an int64 (faults as FloatToInt).
func Ceil(f float64) (int64, Fault) { return FloatToInt(math.Ceil(f)) }

// Sum adds the elements in index order (0 for an empty vector).
func Sum(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s
}

// MinOf is the smallest element (+Inf for an empty vector; NaN if any
// element is NaN).
func MinOf(v []float64) float64 {
	m := math.Inf(1)
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

// MaxOf is the largest element (-Inf for an empty vector; NaN if any
// element is NaN).
func MaxOf(v []float64) float64 {
	m := math.Inf(-1)
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// Index returns v[i]; i outside [0, len(v)) faults.
func Index(v []float64, i int64) (float64, Fault) {
	if i < 0 || i >= int64(len(v)) {
		return 0, FaultIndex
	}
	return v[i], FaultNone
}

// Contains reports whether some element == x (IEEE equality: NaN is never
// contained).
func Contains(v []float64, x float64) bool {
	for _, e := range v {
		if e == x {
			return true
		}
	}
	return false
}

// Bits and FromBits convert between a float and its stack slot.
func Bits(f float64) int64 { return int64(math.Float64bits(f)) }

// FromBits: see Bits.
func FromBits(b int64) float64 { return math.Float64frombits(uint64(b)) }

// B2I converts a bool to its stack slot (0 or 1).
func B2I(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
