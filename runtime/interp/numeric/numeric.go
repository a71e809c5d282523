// Package numeric is the element arithmetic of Theseus collectives: every
// NCCL data type (int8, uint8, int32, uint32, int64, uint64, float16,
// float32, float64, bfloat16, fp8 e4m3, fp8 e5m2) and reduction (sum, prod,
// max, min, avg), exactly as docs/design/ir.md §8 specifies. The host
// interpreter calls it, and the CUDA kernel is tested bit for bit against
// it, so every rule below is part of the contract:
//
//   - Copies move bits and never come here.
//   - Reduce combines the sources of one op element by element, left to
//     right: r = s0 ⊕ s1 ⊕ … ⊕ sk-1, one rounding per ⊕ in the compute type.
//   - Compute types: float16, bfloat16, fp8 e4m3 and fp8 e5m2 are widened
//     exactly to float32, combined in float32 and rounded back once per op,
//     to nearest even (fp8 saturating to ±448 / ±57344, see F32ToE4M3 and
//     F32ToE5M2). float32 and float64 compute in their own precision. No
//     fused multiply-add, no flush of subnormals to zero.
//   - NaN: every NaN a reduction produces (sum, prod, avg, or max/min of two
//     NaNs) is the canonical NaN of the element type with the sign bit
//     clear: 0x7fff (float16, bfloat16), 0x7f (fp8), 0x7fffffff (float32),
//     0x7fffffffffffffff (float64). (Hardware differs in which NaN payload
//     and sign an IEEE operation returns; a fixed result makes backends agree.)
//   - max/min: if one operand is NaN the result is the other; if both are,
//     NaN; if they compare equal (+0 and -0 included) the result is the left
//     operand.
//   - Integers: sum and prod wrap modulo 2^bits; max and min compare by
//     value, signed or unsigned as the type says.
//   - avg (NCCL 2.25) is sum inside the schedule; Divide is the epilogue
//     that divides each element of a rank's result by nranks: floats in
//     float32 (float64 for float64) rounded once as above, integers with
//     division truncating toward zero.
//
// Buffers are byte slices holding little-endian elements; the package
// requires a little-endian host (amd64, arm64) and returns ErrHost
// otherwise.
package numeric

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/theseus-ccl/theseus/ir"
)

// ErrHost is returned on a big-endian host, where the package cannot view
// little-endian buffers as elements.
var ErrHost = errors.New("numeric: big-endian host not supported")

var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// block is how many elements the kernels combine at a time.
const block = 512

// Reduce sets dst[e] = srcs[0][e] ⊕ srcs[1][e] ⊕ … for every element e of
// dst, with ⊕ the reduction op over data type dt (Avg reduces as Sum; the
// division is Divide's). dst and every src are byte slices of the same
// length, a multiple of dt.Size(). dst may be the same slice as a src (the
// element is read before it is written); partially overlapping operands give
// unspecified results. With one src Reduce copies it unchanged, bits
// included (no NaN canonicalisation).
//
// Errors: an invalid data type or op, no srcs, unequal or unaligned
// lengths, or ErrHost.
func Reduce(dt ir.DataType, op ir.RedOp, dst []byte, srcs [][]byte) error {
	es := dt.Size()
	if es == 0 {
		return fmt.Errorf("numeric: invalid data type %v", dt)
	}
	if op >= ir.NumRedOps {
		return fmt.Errorf("numeric: invalid reduction op %v", op)
	}
	if !littleEndian {
		return ErrHost
	}
	if len(srcs) == 0 {
		return errors.New("numeric: reduce with no sources")
	}
	if len(dst)%es != 0 {
		return fmt.Errorf("numeric: %d bytes is not a whole number of %v elements", len(dst), dt)
	}
	for i, s := range srcs {
		if len(s) != len(dst) {
			return fmt.Errorf("numeric: source %d has %d bytes, destination %d", i, len(s), len(dst))
		}
	}
	if len(srcs) == 1 {
		copy(dst, srcs[0])
		return nil
	}
	if len(dst) == 0 {
		return nil
	}
	if op == ir.Avg {
		op = ir.Sum
	}
	if !aligned(dst, es) || !allAligned(srcs, es) {
		return reduceUnaligned(dt, op, dst, srcs)
	}
	switch dt {
	case ir.Int8:
		reduceInt(op, view[int8](dst), views[int8](srcs))
	case ir.Uint8:
		reduceInt(op, dst, srcs)
	case ir.Int32:
		reduceInt(op, view[int32](dst), views[int32](srcs))
	case ir.Uint32:
		reduceInt(op, view[uint32](dst), views[uint32](srcs))
	case ir.Int64:
		reduceInt(op, view[int64](dst), views[int64](srcs))
	case ir.Uint64:
		reduceInt(op, view[uint64](dst), views[uint64](srcs))
	case ir.Float32:
		reduceWide(op, view[float32](dst), views[float32](srcs), math.Float32frombits(NaN32))
	case ir.Float64:
		reduceWide(op, view[float64](dst), views[float64](srcs), math.Float64frombits(NaN64))
	case ir.Float16:
		reduceF16(op, view[uint16](dst), views[uint16](srcs))
	case ir.Bfloat16:
		reduceBF16(op, view[uint16](dst), views[uint16](srcs))
	case ir.Fp8E4M3:
		reduceNarrow(op, dst, srcs, E4M3ToF32, F32ToE4M3)
	case ir.Fp8E5M2:
		reduceNarrow(op, dst, srcs, E5M2ToF32, F32ToE5M2)
	}
	return nil
}

func aligned(b []byte, es int) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(es) == 0
}

func allAligned(bs [][]byte, es int) bool {
	for _, b := range bs {
		if !aligned(b, es) {
			return false
		}
	}
	return true
}

// reduceUnaligned copies misaligned operands into aligned temporaries.
func reduceUnaligned(dt ir.DataType, op ir.RedOp, dst []byte, srcs [][]byte) error {
	tmp := make([][]byte, len(srcs))
	for i, s := range srcs {
		tmp[i] = alignedCopy(s)
	}
	d := alignedCopy(dst)
	if err := Reduce(dt, op, d, tmp); err != nil {
		return err
	}
	copy(dst, d)
	return nil
}

func alignedCopy(b []byte) []byte {
	w := make([]uint64, (len(b)+7)/8)
	out := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), len(w)*8)[:len(b)]
	copy(out, b)
	return out
}

type elem interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64 | ~uint16
}

// view reinterprets an aligned little-endian byte slice as elements.
func view[T elem](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func views[T elem](bs [][]byte) [][]T {
	out := make([][]T, len(bs))
	for i, b := range bs {
		out[i] = view[T](b)
	}
	return out
}

type integer interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64
}

func reduceInt[T integer](op ir.RedOp, dst []T, srcs [][]T) {
	var acc [block]T
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		a := acc[:hi-lo]
		copy(a, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			s := s[lo:hi]
			switch op {
			case ir.Sum:
				for e := range a {
					a[e] += s[e]
				}
			case ir.Prod:
				for e := range a {
					a[e] *= s[e]
				}
			case ir.Max:
				for e := range a {
					if s[e] > a[e] {
						a[e] = s[e]
					}
				}
			case ir.Min:
				for e := range a {
					if s[e] < a[e] {
						a[e] = s[e]
					}
				}
			}
		}
		copy(dst[lo:hi], a)
	}
}

type float interface{ ~float32 | ~float64 }

// combineF applies one ⊕ of the max/min rules or an arithmetic op. The
// explicit conversions keep every step rounded to T (no fused operations).
func maxF[T float](a, b T) T {
	if b != b {
		return a
	}
	if a != a || b > a {
		return b
	}
	return a
}

func minF[T float](a, b T) T {
	if b != b {
		return a
	}
	if a != a || b < a {
		return b
	}
	return a
}

func combineBlock[T float](op ir.RedOp, a, s []T) {
	s = s[:len(a)]
	switch op {
	case ir.Sum:
		for e := range a {
			a[e] = T(a[e] + s[e])
		}
	case ir.Prod:
		for e := range a {
			a[e] = T(a[e] * s[e])
		}
	case ir.Max:
		for e := range a {
			a[e] = maxF(a[e], s[e])
		}
	case ir.Min:
		for e := range a {
			a[e] = minF(a[e], s[e])
		}
	}
}

// reduceWide combines float32 or float64 elements in their own precision;
// a NaN result becomes the type's positive canonical NaN.
func reduceWide[T float](op ir.RedOp, dst []T, srcs [][]T, nan T) {
	var acc [block]T
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		a := acc[:hi-lo]
		copy(a, srcs[0][lo:hi])
		for _, s := range srcs[1:] {
			combineBlock(op, a, s[lo:hi])
		}
		d := dst[lo:hi]
		for e, v := range a {
			if v != v {
				v = nan
			}
			d[e] = v
		}
	}
}

// reduceF16 is reduceNarrow specialised for float16 (the hot type), with
// the widening table and the rounding inlined.
func reduceF16(op ir.RedOp, dst []uint16, srcs [][]uint16) {
	tab := f16tab()
	nan := math.Float32frombits(NaN32)
	var acc, tmp [block]float32
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		a := acc[:hi-lo]
		for e, v := range srcs[0][lo:hi] {
			a[e] = tab[v]
		}
		for _, s := range srcs[1:] {
			t := tmp[:hi-lo]
			for e, v := range s[lo:hi] {
				t[e] = tab[v]
			}
			combineBlock(op, a, t)
		}
		d := dst[lo:hi]
		for e, v := range a {
			if v != v {
				v = nan
			}
			d[e] = F32ToF16(v)
		}
	}
}

// reduceBF16 is reduceNarrow specialised for bfloat16.
func reduceBF16(op ir.RedOp, dst []uint16, srcs [][]uint16) {
	nan := math.Float32frombits(NaN32)
	var acc, tmp [block]float32
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		a := acc[:hi-lo]
		for e, v := range srcs[0][lo:hi] {
			a[e] = BF16ToF32(v)
		}
		for _, s := range srcs[1:] {
			t := tmp[:hi-lo]
			for e, v := range s[lo:hi] {
				t[e] = BF16ToF32(v)
			}
			combineBlock(op, a, t)
		}
		d := dst[lo:hi]
		for e, v := range a {
			if v != v {
				v = nan
			}
			d[e] = F32ToBF16(v)
		}
	}
}

// reduceNarrow widens each source to float32, combines in float32, and
// rounds once. NaN results become the positive float32 canonical NaN before
// narrowing, so they narrow to the target's positive canonical NaN.
func reduceNarrow[T ~uint8 | ~uint16](op ir.RedOp, dst []T, srcs [][]T, widen func(T) float32, narrow func(float32) T) {
	nan := math.Float32frombits(NaN32)
	var acc, tmp [block]float32
	for lo := 0; lo < len(dst); lo += block {
		hi := min(lo+block, len(dst))
		a := acc[:hi-lo]
		for e, v := range srcs[0][lo:hi] {
			a[e] = widen(v)
		}
		for _, s := range srcs[1:] {
			t := tmp[:hi-lo]
			for e, v := range s[lo:hi] {
				t[e] = widen(v)
			}
			combineBlock(op, a, t)
		}
		d := dst[lo:hi]
		for e, v := range a {
			if v != v {
				v = nan
			}
			d[e] = narrow(v)
		}
	}
}

// Divide is the avg epilogue (NCCL 2.25, ir.md §8): it divides every
// element of buf by nranks in place. Floats divide in float32 (float64 for
// float64) and round once (fp8 saturating); a NaN result is the type's
// positive canonical NaN. Integers divide truncating toward zero (signed) or
// plainly (unsigned). len(buf) must be a multiple of dt.Size().
//
// Errors: an invalid data type, nranks < 1, a ragged buffer, or ErrHost.
func Divide(dt ir.DataType, buf []byte, nranks int) error {
	es := dt.Size()
	if es == 0 {
		return fmt.Errorf("numeric: invalid data type %v", dt)
	}
	if nranks < 1 {
		return fmt.Errorf("numeric: divide by nranks %d", nranks)
	}
	if !littleEndian {
		return ErrHost
	}
	if len(buf)%es != 0 {
		return fmt.Errorf("numeric: %d bytes is not a whole number of %v elements", len(buf), dt)
	}
	if len(buf) == 0 {
		return nil
	}
	if !aligned(buf, es) {
		d := alignedCopy(buf)
		if err := Divide(dt, d, nranks); err != nil {
			return err
		}
		copy(buf, d)
		return nil
	}
	n := int64(nranks)
	switch dt {
	case ir.Int8:
		divInt(view[int8](buf), n)
	case ir.Uint8:
		divUint(buf, uint64(n))
	case ir.Int32:
		divInt(view[int32](buf), n)
	case ir.Uint32:
		divUint(view[uint32](buf), uint64(n))
	case ir.Int64:
		divInt(view[int64](buf), n)
	case ir.Uint64:
		divUint(view[uint64](buf), uint64(n))
	case ir.Float32:
		d := float32(n)
		nan := math.Float32frombits(NaN32)
		for i, v := range view[float32](buf) {
			q := float32(v / d)
			if q != q {
				q = nan
			}
			view[float32](buf)[i] = q
		}
	case ir.Float64:
		d := float64(n)
		nan := math.Float64frombits(NaN64)
		b := view[float64](buf)
		for i, v := range b {
			q := float64(v / d)
			if q != q {
				q = nan
			}
			b[i] = q
		}
	case ir.Float16:
		divNarrow(view[uint16](buf), n, F16ToF32, F32ToF16)
	case ir.Bfloat16:
		divNarrow(view[uint16](buf), n, BF16ToF32, F32ToBF16)
	case ir.Fp8E4M3:
		divNarrow(buf, n, E4M3ToF32, F32ToE4M3)
	case ir.Fp8E5M2:
		divNarrow(buf, n, E5M2ToF32, F32ToE5M2)
	}
	return nil
}

func divInt[T ~int8 | ~int32 | ~int64](b []T, n int64) {
	for i, v := range b {
		b[i] = T(int64(v) / n)
	}
}

func divUint[T ~uint8 | ~uint32 | ~uint64](b []T, n uint64) {
	for i, v := range b {
		b[i] = T(uint64(v) / n)
	}
}

func divNarrow[T ~uint8 | ~uint16](b []T, n int64, widen func(T) float32, narrow func(float32) T) {
	d := float32(n)
	nan := math.Float32frombits(NaN32)
	for i, v := range b {
		q := float32(widen(v) / d)
		if q != q {
			q = nan
		}
		b[i] = narrow(q)
	}
}
