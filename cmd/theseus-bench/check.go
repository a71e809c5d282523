package main

import (
	"bytes"
	"fmt"
	"slices"
	"sync"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp/numeric"
	collref "github.com/theseus-ccl/theseus/runtime/interp/reference"
)

// The data check. Every rank's input comes from collref.Case.Input: values
// for which every order of reduction gives the same bits (small integers for
// sum and avg, 0, ±1 and ±2^k for prod, any non-NaN value for max and min,
// arbitrary bits where nothing is reduced), so the expected result is exact
// whatever schedule runs. The values' constraints are per element index
// (whatever the count), so each rank generates one stream per datatype and
// reduction, as long as the largest input of the run, and every case reads
// a prefix of it: generation costs one pass over the largest size instead of
// one per row. The expected output of each rank is computed
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
	rs       *references
	c        collref.Case
	inOnce   []sync.Once
	inputs   [][]byte
	outOnce  []sync.Once
	expected [][]byte
	users    int // ranks of this process still to finish with it
}

func newReference(rs *references, k refKey, users int) *reference {
	n := k.NRanks
	return &reference{rs: rs,
		c: collref.Case{Coll: k.Coll, DataType: k.DataType, RedOp: k.RedOp, Count: k.Count, NRanks: n,
			Root: k.Root, Seed: k.Seed},
		inOnce: make([]sync.Once, n), inputs: make([][]byte, n),
		outOnce: make([]sync.Once, n), expected: make([][]byte, n), users: users,
	}
}

// Input is rank q's input (nil when it has none).
func (r *reference) Input(q int) []byte {
	r.inOnce[q].Do(func() {
		in, _ := r.c.Bytes(q)
		if in > 0 {
			r.inputs[q] = r.rs.stream(r.c, q, in)[:in:in]
		}
	})
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
// semantics; collref.Case.Expected computes the same, without sharing
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
// local rank is done with it. It also keeps the input streams of the
// datatype-and-reduction class used last.
type references struct {
	mu      sync.Mutex
	local   int
	minLen  int64 // bytes: streams are at least this long (the run's largest input)
	m       map[refKey]*reference
	streams map[streamKey]*stream
	recent  []classKey // most recent last; at most maxClasses
}

// classKey is a datatype-and-reduction class: the cases whose inputs are
// prefixes of the same streams. Reduces false means arbitrary bits (no
// reduction).
type classKey struct {
	DataType ir.DataType
	RedOp    ir.RedOp
	Reduces  bool
	NRanks   int
	Seed     uint64
}

type streamKey struct {
	classKey
	Rank int
}

type stream struct {
	once sync.Once
	len  int64
	data []byte
}

// maxClasses is how many classes' streams are kept: one, since the rows of
// a class come together (allColls lists the reducing collectives first).
const maxClasses = 1

func newReferences(localRanks int, minLen int64) *references {
	return &references{local: localRanks, minLen: minLen, m: map[refKey]*reference{}, streams: map[streamKey]*stream{}}
}

// Get returns the reference for k; the caller calls Done(k) when finished.
func (rs *references) Get(k refKey) *reference {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	r := rs.m[k]
	if r == nil {
		r = newReference(rs, k, rs.local)
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

// stream returns at least need bytes of rank q's input stream for case c's
// class: collref.Case's input of an allreduce (reducing collectives) or an
// allgather (the others) of that datatype, reduction, size and seed, long
// enough for the run's largest input.
func (rs *references) stream(c collref.Case, q int, need int64) []byte {
	ck := classKey{DataType: c.DataType, RedOp: c.RedOp, Reduces: c.Coll.Reduces(), NRanks: c.NRanks, Seed: c.Seed}
	if !ck.Reduces {
		ck.RedOp = ir.Sum
	}
	k := streamKey{ck, q}
	rs.mu.Lock()
	s := rs.streams[k]
	if s == nil || s.len < need {
		s = &stream{len: max(need, rs.minLen)}
		rs.streams[k] = s
	}
	rs.touch(ck)
	rs.mu.Unlock()
	s.once.Do(func() {
		es := int64(c.DataType.Size())
		gen := collref.Case{Coll: ir.AllGather, DataType: c.DataType, RedOp: ck.RedOp, Count: (s.len + es - 1) / es,
			NRanks: c.NRanks, Seed: c.Seed}
		if ck.Reduces {
			gen.Coll = ir.AllReduce
		}
		s.data = gen.Input(q)
	})
	return s.data
}

// touch marks class ck as used and drops the streams of classes beyond the
// maxClasses most recent (rs.mu held).
func (rs *references) touch(ck classKey) {
	if i := slices.Index(rs.recent, ck); i >= 0 {
		rs.recent = slices.Delete(rs.recent, i, i+1)
	}
	rs.recent = append(rs.recent, ck)
	if len(rs.recent) <= maxClasses {
		return
	}
	old := rs.recent[0]
	rs.recent = rs.recent[1:]
	for k := range rs.streams {
		if k.classKey == old {
			delete(rs.streams, k)
		}
	}
}

// fill sets every byte of b to v at memmove speed.
func fill(b []byte, v byte) {
	if len(b) == 0 {
		return
	}
	b[0] = v
	for i := 1; i < len(b); i *= 2 {
		copy(b[i:], b[:i])
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
