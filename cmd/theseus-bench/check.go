package main

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device/devicetest"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
)

// The data check. Every rank's input comes from devicetest.Case.Input: values
// for which every order of reduction gives the same bits (small integers for
// sum and avg, 0, ±1 and ±2^k for prod, any non-NaN value for max and min,
// arbitrary bits where nothing is reduced), so the expected result is exact
// whatever schedule runs. The expected output of each rank is computed
// directly from the inputs with runtime/interp/numeric (NCCL 2.25 semantics,
// ir.md §8), and every element of every rank's output is compared bit for
// bit: #wrong is the number of elements that differ, summed over the ranks.

// refKey identifies one set of inputs: a case without its arrangement (in
// place and out of place use the same data).
type refKey struct {
	Coll     ir.Collective
	DataType ir.DataType
	RedOp    ir.RedOp
	Count    int64
	NRanks   int
	Root     int
	Seed     uint64
}

// reference holds the inputs and expected outputs of one case, computed
// once, on demand, and shared by the ranks of this process.
type reference struct {
	c        devicetest.Case
	inOnce   []sync.Once
	inputs   [][]byte
	outOnce  []sync.Once
	expected [][]byte
	users    int // ranks of this process still to finish with it
}

func newReference(k refKey, users int) *reference {
	n := k.NRanks
	return &reference{
		c: devicetest.Case{Coll: k.Coll, DataType: k.DataType, RedOp: k.RedOp, Count: k.Count, NRanks: n,
			Root: k.Root, Seed: k.Seed},
		inOnce: make([]sync.Once, n), inputs: make([][]byte, n),
		outOnce: make([]sync.Once, n), expected: make([][]byte, n), users: users,
	}
}

// Input is rank q's input (nil when it has none).
func (r *reference) Input(q int) []byte {
	r.inOnce[q].Do(func() { r.inputs[q] = r.c.Input(q) })
	return r.inputs[q]
}

// Expected is rank q's expected output (nil when it has none). Ranks whose
// expected output is the same (allreduce, allgather, broadcast) share one
// slice.
func (r *reference) Expected(q int) []byte {
	switch r.c.Coll {
	case ir.AllReduce, ir.AllGather, ir.Broadcast:
		q = 0
	}
	r.outOnce[q].Do(func() { r.expected[q] = r.expect(q) })
	return r.expected[q]
}

// expect computes rank q's expected output from the inputs (NCCL 2.25
// semantics; devicetest.Case.Expected computes the same, without sharing
// the inputs between ranks).
func (r *reference) expect(q int) []byte {
	c := r.c
	n := c.NRanks
	bb := c.Count * int64(c.DataType.Size())
	block := func(b []byte, i int) []byte { return b[int64(i)*bb : int64(i+1)*bb] }
	reduce := func(blk func(p int) []byte) []byte {
		srcs := make([][]byte, n)
		for p := range srcs {
			srcs[p] = blk(p)
		}
		out := make([]byte, bb)
		if err := numeric.Reduce(c.DataType, c.RedOp, out, srcs); err != nil {
			panic(err) // unreachable: the types and sizes are ours
		}
		if c.RedOp == ir.Avg {
			if err := numeric.Divide(c.DataType, out, n); err != nil {
				panic(err)
			}
		}
		return out
	}
	root := c.Root
	switch c.Coll {
	case ir.AllReduce:
		return reduce(r.Input)
	case ir.ReduceScatter:
		return reduce(func(p int) []byte { return block(r.Input(p), q) })
	case ir.Reduce:
		if q != root {
			return nil
		}
		return reduce(r.Input)
	case ir.AllGather, ir.Gather:
		if c.Coll == ir.Gather && q != root {
			return nil
		}
		out := make([]byte, 0, int64(n)*bb)
		for p := range n {
			out = append(out, r.Input(p)...)
		}
		return out
	case ir.Broadcast:
		return slices.Clone(r.Input(root))
	case ir.Scatter:
		return slices.Clone(block(r.Input(root), q))
	case ir.AllToAll:
		out := make([]byte, 0, int64(n)*bb)
		for p := range n {
			out = append(out, block(r.Input(p), q)...)
		}
		return out
	}
	panic(fmt.Sprintf("no reference for %s", c.Coll))
}

// references shares reference data between the ranks of one process (all
// of them in-process, one in multi-process mode) and drops it once every
// local rank is done with it.
type references struct {
	mu    sync.Mutex
	local int
	m     map[refKey]*reference
}

func newReferences(localRanks int) *references {
	return &references{local: localRanks, m: map[refKey]*reference{}}
}

// Get returns the reference for k; the caller calls Done(k) when finished.
func (rs *references) Get(k refKey) *reference {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.m[k]
	if r == nil {
		r = newReference(k, rs.local)
		rs.m[k] = r
	}
	return r
}

// Done releases one local rank's use of k.
func (rs *references) Done(k refKey) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r := rs.m[k]; r != nil {
		if r.users--; r.users <= 0 {
			delete(rs.m, k)
		}
	}
}

// countWrong counts the elements of es bytes that differ between got and
// want, bit for bit (every element of the longer when the lengths differ).
// Equal stretches are skipped 64 KiB at a time.
func countWrong(got, want []byte, es int) int64 {
	if len(got) != len(want) {
		return int64(max(len(got), len(want)) / max(es, 1))
	}
	const stride = 64 << 10
	var w int64
	for off := 0; off < len(want); off += stride {
		end := min(off+stride, len(want))
		if bytes.Equal(got[off:end], want[off:end]) {
			continue
		}
		for i := off; i+es <= end; i += es {
			if !bytes.Equal(got[i:i+es], want[i:i+es]) {
				w++
			}
		}
	}
	return w
}
