package ir

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// This file is the one definition of chunk geometry (docs/design/ir.md,
// "Chunks", "Slices", "In place", "Roots"). The verifier, the host
// interpreter, the CUDA kernel's launch arguments and the runtime all call
// it, so they agree on every element.

// Blocks returns how many count-element blocks buffer k has on physical rank
// rank, under NCCL 2.25 buffer semantics; 0 means the buffer does not exist
// on that rank (for example the output of a non-root rank in reduce). root
// is the request's root (ignored for non-rooted collectives). Scratch has no
// blocks and returns 0. Custom collectives return -1: their input and output
// are exactly the declared chunks.
func Blocks(c Collective, k BufKind, nranks, rank, root int) int64 {
	n := int64(nranks)
	isRoot := rank == root
	switch k {
	case Input:
		switch c {
		case AllReduce, AllGather, Reduce, Gather, SendRecv:
			return 1
		case Broadcast:
			if isRoot {
				return 1
			}
			return 0
		case ReduceScatter, AllToAll:
			return n
		case Scatter:
			if isRoot {
				return n
			}
			return 0
		}
	case Output:
		switch c {
		case AllReduce, ReduceScatter, Broadcast, Scatter, SendRecv:
			return 1
		case Reduce:
			if isRoot {
				return 1
			}
			return 0
		case AllGather, AllToAll:
			return n
		case Gather:
			if isRoot {
				return n
			}
			return 0
		}
	}
	if c == Custom && k != Scratch {
		return -1
	}
	return 0
}

// MaxBlocks is the larger of the input and output block counts over all
// ranks: the factor between the NCCL count and the message size.
func MaxBlocks(c Collective, nranks int) int64 {
	switch c {
	case AllGather, ReduceScatter, AllToAll, Gather, Scatter:
		return int64(nranks)
	}
	return 1
}

// MessageBytes is the message size of a request in bytes: the larger of the
// input and output buffers, count * size(dt) * MaxBlocks. It is the quantity
// the schedule-size window and request.messagesize refer to. It returns an
// error on overflow.
func MessageBytes(c Collective, nranks int, count int64, dt DataType) (int64, error) {
	if count < 0 {
		return 0, fmt.Errorf("negative count %d", count)
	}
	hi, lo := bits.Mul64(uint64(count), uint64(dt.Size())*uint64(MaxBlocks(c, nranks)))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, fmt.Errorf("count %d of %s overflows the 63-bit message size", count, dt)
	}
	return int64(lo), nil
}

// ErrLayout is returned for impossible geometries.
var ErrLayout = errors.New("ir: bad layout")

// Layout is the resolved geometry of one request: a buffer of B blocks holds
// B*Count elements; each block is cut into Slices*ChunksPerBlock pieces of
// Stride elements (the last non-empty piece may be shorter and trailing
// pieces may be empty). Chunk j of a block, in slice s, is piece
// s*ChunksPerBlock+j. Scratch chunks are Stride elements each (per slice).
type Layout struct {
	Count          int64 // elements per block, >= 0
	ElemSize       int64 // bytes per element: 1, 2, 4 or 8
	ChunksPerBlock int64 // >= 1
	Slices         int64 // >= 1
	Stride         int64 // elements per piece; a multiple of Unit(), 0 when Count is 0
}

// Align is the byte alignment of chunk boundaries within a block.
const Align = 16

// LineAlign is the byte alignment of chunk boundaries within a block when a
// piece (one chunk of one slice) holds at least LineAlignFrom bytes.
const (
	LineAlign     = 128
	LineAlignFrom = 8192
)

// Bounds that keep every product of the geometry inside 63 bits:
// pieces*Stride <= count + pieces*128 < 2^63.
const (
	MaxBlockBytes = 1 << 62 // bytes of one block (count * element size)
	MaxPieces     = 1 << 40 // chunks per block times slices
)

// NewLayout computes the geometry for count elements of dt per block.
// Errors: ErrLayout (wrapped) for count < 0, chunksPerBlock < 1, slices < 1,
// an invalid datatype, or an overflow of the 63-bit byte range.
func NewLayout(count int64, dt DataType, chunksPerBlock, slices int64) (Layout, error) {
	es := int64(dt.Size())
	if es == 0 || count < 0 || chunksPerBlock < 1 || slices < 1 {
		return Layout{}, fmt.Errorf("%w: count %d, datatype %v, chunks %d, slices %d", ErrLayout, count, dt, chunksPerBlock, slices)
	}
	pieces, ok := mul(chunksPerBlock, slices)
	if !ok || pieces > MaxPieces {
		return Layout{}, fmt.Errorf("%w: %d chunks x %d slices is over %d pieces per block", ErrLayout, chunksPerBlock, slices, int64(MaxPieces))
	}
	if b, ok := mul(count, es); !ok || b > MaxBlockBytes {
		return Layout{}, fmt.Errorf("%w: %d elements of %d bytes is over %d bytes per block", ErrLayout, count, es, int64(MaxBlockBytes))
	}
	unit := Align / es
	stride := (count + pieces - 1) / pieces
	if stride*es >= LineAlignFrom {
		// Large pieces start on a 128-byte line: a warp's 16-byte-per-
		// thread access then covers whole lines, which large ops need to
		// reach the memory's bandwidth (docs/design/cuda.md, "The kernel's
		// data paths").
		unit = LineAlign / es
	}
	stride = (stride + unit - 1) / unit * unit
	return Layout{Count: count, ElemSize: es, ChunksPerBlock: chunksPerBlock, Slices: slices, Stride: stride}, nil
}

// Unit is the number of elements in 16 bytes.
func (l Layout) Unit() int64 { return Align / l.ElemSize }

// UserChunk returns the element range [start, end) of chunk k in slice s of
// a user (input or output) buffer, relative to the start of that buffer.
// end-start is in [0, Stride]. k must be in [0, B*ChunksPerBlock).
func (l Layout) UserChunk(k, s int64) (start, end int64) {
	b, j := k/l.ChunksPerBlock, k%l.ChunksPerBlock
	p := s*l.ChunksPerBlock + j
	st := min(p*l.Stride, l.Count)
	en := min(st+l.Stride, l.Count)
	return b*l.Count + st, b*l.Count + en
}

// ScratchChunk returns the element offset of scratch chunk i (any slice: the
// scratch is reused by every slice). Each scratch chunk holds Stride
// elements.
func (l Layout) ScratchChunk(i int64) int64 { return i * l.Stride }

// ScratchBytes is the size in bytes of a scratch of the given chunks: data
// bytes, doubled for the LL packet layout (LL8 and LL16 both carry half
// payload).
func (l Layout) ScratchBytes(chunks int64, packet bool) int64 {
	b := chunks * l.Stride * l.ElemSize
	if packet {
		b *= 2
	}
	return b
}

// Slices picks the number of pipeline slices for a chunk of chunkElems
// elements: enough that one slice of one chunk is at most sliceBytes
// (sliceBytes <= 0 means unsliced).
func SlicesFor(count, chunksPerBlock int64, dt DataType, sliceBytes int64) int64 {
	if sliceBytes <= 0 || count <= 0 || chunksPerBlock < 1 {
		return 1
	}
	chunkBytes := (count + chunksPerBlock - 1) / chunksPerBlock * int64(dt.Size())
	s := (chunkBytes + sliceBytes - 1) / sliceBytes
	return max(s, 1)
}

func mul(a, b int64) (int64, bool) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// Placement says how the program's logical buffers map onto a request's
// physical buffers: root rotation and in-place aliasing.
type Placement struct {
	Collective     Collective
	NRanks         int
	ChunksPerBlock int64
	ProgRoot       int // Program.Root (ignored unless rooted)
	Root           int // the request's root (ignored unless rooted)
	InPlace        bool
}

// Shift is the rank rotation of a rooted request: physical = logical+Shift.
func (pl Placement) Shift() int {
	if !pl.Collective.Rooted() || pl.NRanks == 0 {
		return 0
	}
	return ((pl.Root-pl.ProgRoot)%pl.NRanks + pl.NRanks) % pl.NRanks
}

// Physical returns the physical rank that runs logical rank l.
func (pl Placement) Physical(l int) int {
	if pl.NRanks == 0 {
		return l
	}
	return (l + pl.Shift()) % pl.NRanks
}

// Logical returns the logical rank run by physical rank p.
func (pl Placement) Logical(p int) int {
	if pl.NRanks == 0 {
		return p
	}
	return ((p-pl.Shift())%pl.NRanks + pl.NRanks) % pl.NRanks
}

// Resolve maps chunk `chunk` of logical buffer k of the rank running on
// physical rank p to the physical storage that holds it: the buffer (Input,
// Output or Scratch) and the chunk index in it. Per-rank blocks of rooted
// collectives rotate with the ranks, and in-place requests alias input and
// output as NCCL defines (allgather/gather: input = output + rank*count;
// reducescatter/scatter: output = input + rank*count; otherwise input =
// output).
func (pl Placement) Resolve(p int, k BufKind, chunk int64) (BufKind, int64) {
	if k == Scratch {
		return k, chunk
	}
	C := pl.ChunksPerBlock
	n := int64(pl.NRanks)
	if sh := int64(pl.Shift()); sh != 0 && Blocks(pl.Collective, k, pl.NRanks, p, pl.Root) == n {
		b, j := chunk/C, chunk%C
		chunk = ((b+sh)%n)*C + j
	}
	if !pl.InPlace {
		return k, chunk
	}
	isRoot := p == pl.Root
	switch pl.Collective {
	case AllReduce, AllToAll, SendRecv:
		return Output, chunk
	case Broadcast, Reduce:
		if isRoot {
			return Output, chunk
		}
	case AllGather:
		if k == Input {
			return Output, int64(p)*C + chunk
		}
	case Gather:
		if k == Input && isRoot {
			return Output, int64(p)*C + chunk
		}
	case ReduceScatter:
		if k == Output {
			return Input, int64(p)*C + chunk
		}
	case Scatter:
		if k == Output && isRoot {
			return Input, int64(p)*C + chunk
		}
	}
	return k, chunk
}
