package reference

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/launch"
)

// Case is one collective request on every rank of a communicator, with
// the reference data to check it by: every rank's deterministic input
// (Input, from Seed) and exact expected output (Expected, NCCL 2.25
// semantics). theseus-bench's data check and the runtime's tests use it.
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
	if inOff, outOff, ok = launch.InPlaceOffsets(c.Coll, rank, c.Root, c.blockBytes()); !ok {
		return 0, 0, 0, false
	}
	return max(inOff+in, outOff+out), inOff, outOff, true
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
	seed := splitmix(c.Seed ^ uint64(rank+1)*0x100000001b3 ^ uint64(c.Coll)<<56 ^ uint64(c.DataType)<<48 ^ uint64(c.RedOp)<<40)
	k := uint64(0)
	next := func() uint64 { k++; return splitmix(seed + k) }
	Fill(b, c.DataType, c.RedOp, c.Coll.Reduces(), c.NRanks, rank, next)
}

// Expected returns physical rank rank's expected output, computed directly
// from every rank's Input (nil when the rank has no output).
func (c Case) Expected(rank int) []byte {
	inputs := make([][]byte, c.NRanks)
	input := func(q int) []byte {
		if inputs[q] == nil {
			inputs[q] = c.Input(q)
		}
		return inputs[q]
	}
	return Output(c.Coll, c.NRanks, rank, c.root(), c.Count, c.DataType, c.RedOp, input)
}
