// Package reference computes collectives directly, for checking schedules:
// inputs whose reductions are exact in any order (so that a schedule's
// result can be compared bit for bit with a direct computation that
// reduces in another order), the expected output of every collective under
// NCCL 2.25 semantics, and a bit-exact element comparison. runtime/interp's
// Simulate, the runtime's tests and theseus-bench all check against it.
package reference

import (
	"encoding/binary"
	"math"
	"slices"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
)

// Fill writes rank rank's input values into b (elements of dt), drawing
// 64-bit random numbers from next, such that every order of reduction over
// the n ranks gives the same result, bit for bit:
//   - sum and avg: integers whose magnitudes over all ranks stay within the
//     type's exact integers (each rank draws from its 1/n share; with more
//     ranks than exact integers, only that many contribute, rotating with
//     the element);
//   - prod: 0, ±1 and ±2^k with exponents bounded so that every partial
//     product stays normal;
//   - max and min: any non-NaN value, −0 made +0 (max(+0, −0) depends on the
//     order) and e5m2 infinities avoided (they saturate);
//   - integer types and non-reducing collectives: arbitrary bits (integer
//     arithmetic wraps, which is associative).
func Fill(b []byte, dt ir.DataType, op ir.RedOp, reduces bool, n, rank int, next func() uint64) {
	es := dt.Size()
	if es == 0 {
		return
	}
	if !reduces || !dt.IsFloat() {
		for i := 0; i < len(b); i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], next())
			copy(b[i:], w[:])
		}
		return
	}
	nn := int64(n)
	for i := 0; i+es <= len(b); i += es {
		r := next()
		var v float64
		switch op {
		case ir.Sum, ir.Avg:
			share := max(ExactInt(dt)/nn, 1)
			if e := int64(i / es); ExactInt(dt) < nn && (int64(rank)+e)%nn >= ExactInt(dt) {
				share = 0
			}
			v = float64(int64(r%uint64(2*share+1)) - share)
		case ir.Prod:
			k := ProdExp(dt) / n
			switch {
			case r%20 == 0:
				v = 0
			case k == 0 || (r>>8)&1 == 0:
				v = 1
			default:
				v = math.Ldexp(1, int((r>>16)%uint64(2*k+1))-k)
			}
			if (r>>9)&1 == 0 {
				v = -v
			}
		default:
			putNonNaN(b[i:i+es], dt, r, next)
			continue
		}
		PutFloat(b[i:i+es], dt, v)
	}
}

// ExactInt is the largest M such that every integer in [−M, M] is exact in
// the floating-point type dt.
func ExactInt(dt ir.DataType) int64 {
	switch dt {
	case ir.Float16:
		return 2048
	case ir.Bfloat16:
		return 256
	case ir.Fp8E4M3:
		return 16
	case ir.Fp8E5M2:
		return 8
	case ir.Float32:
		return 1 << 24
	}
	return 1 << 53
}

// ProdExp bounds the sum of |exponents| of ±2^k prod inputs of dt so that
// every partial product stays a normal number.
func ProdExp(dt ir.DataType) int {
	switch dt {
	case ir.Float16, ir.Fp8E5M2:
		return 14
	case ir.Fp8E4M3:
		return 6
	case ir.Bfloat16, ir.Float32:
		return 100
	}
	return 1000
}

// PutFloat writes v, rounded to dt, into b.
func PutFloat(b []byte, dt ir.DataType, v float64) {
	switch dt {
	case ir.Float16:
		binary.LittleEndian.PutUint16(b, numeric.F32ToF16(float32(v)))
	case ir.Bfloat16:
		binary.LittleEndian.PutUint16(b, numeric.F32ToBF16(float32(v)))
	case ir.Fp8E4M3:
		b[0] = numeric.F32ToE4M3(float32(v))
	case ir.Fp8E5M2:
		b[0] = numeric.F32ToE5M2(float32(v))
	case ir.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case ir.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

// putNonNaN writes the bits of r, or of later draws, until they are not a
// NaN nor an e5m2 infinity; zero is written as +0.
func putNonNaN(b []byte, dt ir.DataType, r uint64, next func() uint64) {
	for ; ; r = next() {
		var x float64
		switch dt {
		case ir.Float16:
			binary.LittleEndian.PutUint16(b, uint16(r))
			x = float64(numeric.F16ToF32(uint16(r)))
		case ir.Bfloat16:
			binary.LittleEndian.PutUint16(b, uint16(r))
			x = float64(numeric.BF16ToF32(uint16(r)))
		case ir.Fp8E4M3:
			b[0] = uint8(r)
			x = float64(numeric.E4M3ToF32(b[0]))
		case ir.Fp8E5M2:
			b[0] = uint8(r)
			x = float64(numeric.E5M2ToF32(b[0]))
			if math.IsInf(x, 0) {
				continue
			}
		case ir.Float32:
			binary.LittleEndian.PutUint32(b, uint32(r))
			x = float64(math.Float32frombits(uint32(r)))
		case ir.Float64:
			binary.LittleEndian.PutUint64(b, r)
			x = math.Float64frombits(r)
		}
		if math.IsNaN(x) {
			continue
		}
		if x == 0 {
			clear(b)
		}
		return
	}
}

// Output returns physical rank rank's output of collective coll over n
// ranks, computed directly from the ranks' inputs (input(q) is rank q's
// input buffer) with NCCL 2.25 semantics: count elements of dt per block,
// reduced with op (avg: sum, then divided by n), root the physical root of
// rooted collectives. It returns nil when the rank has no output (the
// non-roots of reduce and gather).
func Output(coll ir.Collective, n, rank, root int, count int64, dt ir.DataType, op ir.RedOp, input func(q int) []byte) []byte {
	bb := count * int64(dt.Size())
	block := func(b []byte, i int) []byte { return b[int64(i)*bb : int64(i+1)*bb] }
	reduce := func(blk func(q int) []byte) []byte {
		srcs := make([][]byte, n)
		for q := range srcs {
			srcs[q] = blk(q)
		}
		out := make([]byte, bb)
		if err := numeric.Reduce(dt, op, out, srcs); err != nil {
			panic(err) // unreachable: types and lengths are valid here
		}
		if op == ir.Avg {
			if err := numeric.Divide(dt, out, n); err != nil {
				panic(err)
			}
		}
		return out
	}
	concat := func(blk func(q int) []byte) []byte {
		out := make([]byte, 0, int64(n)*bb)
		for q := range n {
			out = append(out, blk(q)...)
		}
		return out
	}
	switch coll {
	case ir.AllReduce:
		return reduce(input)
	case ir.ReduceScatter:
		return reduce(func(q int) []byte { return block(input(q), rank) })
	case ir.Reduce:
		if rank != root {
			return nil
		}
		return reduce(input)
	case ir.AllGather:
		return concat(input)
	case ir.Gather:
		if rank != root {
			return nil
		}
		return concat(input)
	case ir.Broadcast:
		return slices.Clone(input(root))
	case ir.Scatter:
		return slices.Clone(block(input(root), rank))
	case ir.AllToAll:
		return concat(func(q int) []byte { return block(input(q), rank) })
	case ir.SendRecv:
		return slices.Clone(input((rank + n - 1) % n))
	}
	return nil
}

// Wrong counts the elements of es bytes that differ between got and want,
// bit for bit (every element when the lengths differ).
func Wrong(got, want []byte, es int) int64 {
	if es < 1 {
		es = 1
	}
	if len(got) != len(want) {
		return int64(max(len(got), len(want)) / es)
	}
	var w int64
	for i := 0; i+es <= len(want); i += es {
		if string(got[i:i+es]) != string(want[i:i+es]) {
			w++
		}
	}
	return w
}
