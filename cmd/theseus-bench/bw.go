package main

import (
	"github.com/theseus-ccl/theseus/ir"
)

// shape is how nccl-tests turns a requested size in bytes into the count
// argument of a collective, and how it reports and rates the result
// (nccl-tests src/*.cu, GetCollByteCount and GetBw).
type shape struct {
	// Count is the NCCL count argument, in elements.
	Count int64
	// Bytes is the size column: the larger of the send and receive
	// buffers, in bytes (count × type size × blocks; ir.MessageBytes).
	Bytes int64
}

// align is nccl-tests' ALIGN for the collectives that split a buffer into
// nranks blocks: each block holds a multiple of 4 elements.
const align = 4

// shapeOf returns the count and reported size of collective coll for a
// requested size of bytes, elements of es bytes, on n ranks, as nccl-tests
// computes them:
//
//   - allreduce, broadcast, reduce: count = bytes/es;
//   - allgather, reducescatter, gather, scatter: count = ⌊bytes/es/(4n)⌋·4
//     (each rank's block is a multiple of 4 elements);
//   - alltoall: count = ⌊bytes/es/n⌋ rounded down to a multiple of 16/es
//     elements (16-byte blocks).
func shapeOf(coll ir.Collective, bytes int64, es int, n int) shape {
	e := int64(es)
	elems := bytes / e
	var count int64
	switch coll {
	case collAlltoAllv: // the size is what each rank sends in all (nccl-tests alltoallv)
		return shape{Count: elems, Bytes: elems * e}
	case ir.AllGather, ir.ReduceScatter, ir.Gather, ir.Scatter:
		count = elems / (align * int64(n)) * align
	case ir.AllToAll:
		count = elems / int64(n)
		if per := 16 / e; per > 1 {
			count -= count % per
		}
	default:
		count = elems
	}
	return shape{Count: count, Bytes: count * e * ir.MaxBlocks(coll, n)}
}

// busFactor is nccl-tests' bus-bandwidth factor: busbw = algbw × factor, so
// that busbw is comparable with the hardware's peak bandwidth whatever the
// collective (nccl-tests doc/PERFORMANCE.md).
//
//   - allreduce: 2(n−1)/n;
//   - allgather, reducescatter, alltoall, gather, scatter: (n−1)/n;
//   - broadcast, reduce: 1.
func busFactor(coll ir.Collective, n int) float64 {
	nf := float64(n)
	switch coll {
	case ir.AllReduce:
		return 2 * (nf - 1) / nf
	case ir.AllGather, ir.ReduceScatter, ir.AllToAll, ir.Gather, ir.Scatter, collAlltoAllv:
		return (nf - 1) / nf
	}
	return 1
}

// bandwidth returns algbw and busbw in GB/s (10^9 bytes per second) of one
// call of coll with count elements of es bytes on n ranks taking sec
// seconds. algbw is the bytes one rank's buffer holds divided by the time:
// count·es for allreduce, broadcast and reduce, and count·es·n (the whole
// receive or send buffer) for allgather, reducescatter, alltoall, gather and
// scatter (nccl-tests GetBw). Zero time gives zero bandwidths.
func bandwidth(coll ir.Collective, count int64, es int, n int, sec float64) (algbw, busbw float64) {
	if sec <= 0 {
		return 0, 0
	}
	blocks := float64(1) // sendrecv; alltoallv's count is every element a rank sends
	if coll != collAlltoAllv && coll != ir.SendRecv {
		blocks = float64(ir.MaxBlocks(coll, n))
	}
	bytes := float64(count) * float64(es) * blocks
	algbw = bytes / 1e9 / sec
	return algbw, algbw * busFactor(coll, n)
}
