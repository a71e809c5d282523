// Package devicetest holds test helpers for backends and for the runtime
// packages above them: reference data for every collective (deterministic
// inputs per rank and the exact expected outputs, NCCL 2.25 semantics) and
// a null backend that measures the executor's host cost without running
// anything.
package devicetest

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
)

// Case is one collective request on every rank of a communicator.
type Case struct {
	Coll     ir.Collective
	DataType ir.DataType
	RedOp    ir.RedOp // meaningful for reducing collectives
	Count    int64    // NCCL count: elements per block
	NRanks   int
	Root     int // physical root of rooted collectives
	InPlace  bool
	Seed     uint64
}

func (c Case) String() string {
	s := fmt.Sprintf("%v/%v", c.Coll, c.DataType)
	if c.Coll.Reduces() {
		s += "/" + c.RedOp.String()
	}
	if c.Coll.Rooted() {
		s += fmt.Sprintf("/root%d", c.Root)
	}
	place := "out"
	if c.InPlace {
		place = "in"
	}
	return s + fmt.Sprintf("/n%d/%s", c.Count, place)
}

func (c Case) root() int {
	if c.Coll.Rooted() {
		return c.Root
	}
	return 0
}

func (c Case) blockBytes() int64 { return c.Count * int64(c.DataType.Size()) }

// Bytes returns physical rank rank's input and output sizes in bytes (0 when
// the collective gives the rank no such buffer).
func (c Case) Bytes(rank int) (in, out int64) {
	bb := c.blockBytes()
	return ir.Blocks(c.Coll, ir.Input, c.NRanks, rank, c.root()) * bb, ir.Blocks(c.Coll, ir.Output, c.NRanks, rank, c.root()) * bb
}

// InPlaceLayout returns, for an in-place request, the size of the one
// buffer rank rank allocates and where its input and output lie in it
// (ir.md §3); ok is false when the rank's buffers do not alias (non-roots
// of rooted collectives), and then the caller allocates them separately.
func (c Case) InPlaceLayout(rank int) (size, inOff, outOff int64, ok bool) {
	in, out := c.Bytes(rank)
	off := int64(rank) * c.blockBytes()
	isRoot := rank == c.Root
	switch c.Coll {
	case ir.AllReduce, ir.AllToAll, ir.SendRecv:
		return max(in, out), 0, 0, true
	case ir.Broadcast, ir.Reduce:
		if isRoot {
			return max(in, out), 0, 0, true
		}
	case ir.AllGather:
		return out, off, 0, true
	case ir.Gather:
		if isRoot {
			return out, off, 0, true
		}
	case ir.ReduceScatter:
		return in, 0, off, true
	case ir.Scatter:
		if isRoot {
			return in, 0, off, true
		}
	}
	return 0, 0, 0, false
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// Input returns physical rank rank's input (nil when it has none). Values
// are chosen so that every order of reduction gives the same result, bit
// for bit: for sum and avg, integers whose magnitudes over all ranks stay
// within the type's exact integers; for prod, 0, ±1 and ±2^k with bounded
// exponents; for max and min, any non-NaN value (−0 made +0); integers and
// non-reducing collectives take arbitrary bits.
func (c Case) Input(rank int) []byte {
	in, _ := c.Bytes(rank)
	b := make([]byte, in)
	c.fill(b, rank)
	return b
}

func (c Case) fill(b []byte, rank int) {
	es := c.DataType.Size()
	seed := splitmix(c.Seed ^ uint64(rank+1)*0x100000001b3 ^ uint64(c.Coll)<<56 ^ uint64(c.DataType)<<48 ^ uint64(c.RedOp)<<40)
	if !c.Coll.Reduces() || !c.DataType.IsFloat() {
		for i := 0; i < len(b); i += 8 {
			var w [8]byte
			binary.LittleEndian.PutUint64(w[:], splitmix(seed+uint64(i)))
			copy(b[i:], w[:])
		}
		return
	}
	n := int64(c.NRanks)
	for i := 0; i+es <= len(b); i += es {
		r := splitmix(seed + uint64(i))
		var v float64
		switch c.RedOp {
		case ir.Sum, ir.Avg:
			share := max(exactInt(c.DataType)/n, 1)
			if e := int64(i / es); exactInt(c.DataType) < n && (int64(rank)+e)%n >= exactInt(c.DataType) {
				share = 0
			}
			v = float64(int64(r%uint64(2*share+1)) - share)
		case ir.Prod:
			k := prodExp(c.DataType) / int(n)
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
			putNonNaN(b[i:i+es], c.DataType, r)
			continue
		}
		putFloat(b[i:i+es], c.DataType, v)
	}
}

func exactInt(dt ir.DataType) int64 {
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

func prodExp(dt ir.DataType) int {
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

func putFloat(b []byte, dt ir.DataType, v float64) {
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

// putNonNaN writes bits derived from r that are not a NaN (nor an e5m2
// infinity, nor −0).
func putNonNaN(b []byte, dt ir.DataType, r uint64) {
	for ; ; r = splitmix(r) {
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

// Expected returns physical rank rank's expected output, computed directly
// from every rank's Input (nil when the rank has no output).
func (c Case) Expected(rank int) []byte {
	n := c.NRanks
	bb := c.blockBytes()
	inputs := make([][]byte, n)
	input := func(q int) []byte {
		if inputs[q] == nil {
			inputs[q] = c.Input(q)
		}
		return inputs[q]
	}
	block := func(b []byte, i int) []byte { return b[int64(i)*bb : int64(i+1)*bb] }
	reduce := func(blk func(q int) []byte) []byte {
		srcs := make([][]byte, n)
		for q := range srcs {
			srcs[q] = blk(q)
		}
		out := make([]byte, bb)
		if err := numeric.Reduce(c.DataType, c.RedOp, out, srcs); err != nil {
			panic(err)
		}
		if c.RedOp == ir.Avg {
			if err := numeric.Divide(c.DataType, out, n); err != nil {
				panic(err)
			}
		}
		return out
	}
	R := c.root()
	switch c.Coll {
	case ir.AllReduce:
		return reduce(input)
	case ir.ReduceScatter:
		return reduce(func(q int) []byte { return block(input(q), rank) })
	case ir.Reduce:
		if rank != R {
			return nil
		}
		return reduce(input)
	case ir.AllGather, ir.Gather:
		if c.Coll == ir.Gather && rank != R {
			return nil
		}
		out := make([]byte, 0, int64(n)*bb)
		for q := range n {
			out = append(out, input(q)...)
		}
		return out
	case ir.Broadcast:
		return slices.Clone(input(R))
	case ir.Scatter:
		return slices.Clone(block(input(R), rank))
	case ir.AllToAll:
		out := make([]byte, 0, int64(n)*bb)
		for q := range n {
			out = append(out, block(input(q), rank)...)
		}
		return out
	case ir.SendRecv:
		return slices.Clone(input((rank + n - 1) % n))
	}
	return nil
}

// Wrong counts the elements of size es that differ between got and want, bit
// for bit (every element when the lengths differ).
func Wrong(got, want []byte, es int) int64 {
	if len(got) != len(want) {
		return int64(max(len(got), len(want)) / max(es, 1))
	}
	var w int64
	for i := 0; i+es <= len(want); i += es {
		if string(got[i:i+es]) != string(want[i:i+es]) {
			w++
		}
	}
	return w
}
