// Package progs builds primitive-level test schedules for every collective,
// for the interpreter's tests, Simulate's tests and benchmarks. They are
// written by hand (no legaliser) so that every primitive is exercised:
// remote reads and writes, multi-destination copies, scratch, semaphores,
// dependencies, barriers and LL packets.
package progs

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

// ch is the channel of rank r to peer q in a full mesh built by mesh.
func ch(r, q int) int { return irtest.PairsChannel(r, q) }

// mesh connects every pair of ranks with one channel (both ends Init 0).
func mesh(b *irtest.Builder, n int, typ ir.ChannelType) {
	for r := 0; r < n; r++ {
		for q := r + 1; q < n; q++ {
			b.Connect(r, q, typ, 0, 0)
		}
	}
}

func all(r, n int) []int {
	out := make([]int, 0, n-1)
	for q := 0; q < n; q++ {
		if q != r {
			out = append(out, ch(r, q))
		}
	}
	return out
}

// handshake is signal all; wait all (every peer reached this point).
func handshake(tb *irtest.TBBuilder, r, n int) {
	if n > 1 {
		tb.Signal(all(r, n)...).Wait(all(r, n)...)
	}
}

// from is ref on rank q as seen from rank r: local when q == r.
func from(ref ir.Ref, r, q int) ir.Ref {
	if q == r {
		return ref
	}
	return irtest.Remote(ref, ch(r, q))
}

// AllPairs is a Simple-protocol, one-threadblock schedule of coll on n
// ranks in which each rank pulls what it needs from its peers' buffers (or
// pushes into them) through a full mesh of memory channels, between an
// opening and a closing handshake (signal all; wait all). k is the chunks
// of one rank's share; root is the program root of rooted collectives. All
// of them support both arrangements. The reductions combine sources in rank
// order on every rank.
//
//   - allreduce (C = n*k): reduce my share from every rank's input into my
//     output, then copy it into every peer's output (one multi-destination
//     copy);
//   - allgather (C = k): one copy of my input into my output block and every
//     peer's output block;
//   - reducescatter (C = k): reduce my block of every rank's input into my
//     output;
//   - broadcast, scatter (C = k): pull from the root; reduce, gather: the root
//     pulls from everyone;
//   - alltoall, sendrecv (C = k): pull into scratch, handshake, copy scratch
//     into the output (so that in place, nobody overwrites what a peer still
//     reads).
func AllPairs(coll ir.Collective, n int, k int64, root int) *ir.Program {
	C := k
	if coll == ir.AllReduce {
		C = int64(n) * k
	}
	b := irtest.New(coll, n, C).Name(fmt.Sprintf("allpairs_%v_%d", coll, n)).Arrangements(true, true)
	if coll.Rooted() {
		b.Root(root)
	}
	mesh(b, n, ir.MemoryChannel)
	N := int64(n)
	for r := 0; r < n; r++ {
		R := int64(r)
		rb := b.Rank(r)
		tb := rb.PrimTB()
		handshake(tb, r, n)
		switch coll {
		case ir.AllReduce:
			srcs := make([]ir.Ref, n)
			for q := range srcs {
				srcs[q] = from(irtest.I(R*k), r, q)
			}
			if n == 1 {
				tb.Copy(k, srcs[0], irtest.O(0))
				break
			}
			tb.Reduce(k, srcs, irtest.O(R*k))
			var dsts []ir.Ref
			for q := 0; q < n; q++ {
				if q != r {
					dsts = append(dsts, from(irtest.O(R*k), r, q))
				}
			}
			tb.Copy(k, irtest.O(R*k), dsts...)
		case ir.AllGather:
			dsts := make([]ir.Ref, n)
			for q := range dsts {
				dsts[q] = from(irtest.O(R*k), r, q)
			}
			tb.Copy(k, irtest.I(0), dsts...)
		case ir.ReduceScatter:
			srcs := make([]ir.Ref, n)
			for q := range srcs {
				srcs[q] = from(irtest.I(R*k), r, q)
			}
			if n == 1 {
				tb.Copy(k, srcs[0], irtest.O(0))
			} else {
				tb.Reduce(k, srcs, irtest.O(0))
			}
		case ir.Broadcast:
			tb.Copy(k, from(irtest.I(0), r, root), irtest.O(0))
		case ir.Scatter:
			tb.Copy(k, from(irtest.I(R*k), r, root), irtest.O(0))
		case ir.Reduce:
			if r != root {
				break
			}
			srcs := make([]ir.Ref, n)
			for q := range srcs {
				srcs[q] = from(irtest.I(0), r, q)
			}
			if n == 1 {
				tb.Copy(k, srcs[0], irtest.O(0))
			} else {
				tb.Reduce(k, srcs, irtest.O(0))
			}
		case ir.Gather:
			if r != root {
				break
			}
			for q := 0; q < n; q++ {
				tb.Copy(k, from(irtest.I(0), r, q), irtest.O(int64(q)*k))
			}
		case ir.AllToAll:
			rb.Chunks(0, 0, N*k)
			for q := 0; q < n; q++ {
				tb.Copy(k, from(irtest.I(R*k), r, q), irtest.S(int64(q)*k))
			}
			handshake(tb, r, n)
			tb.Copy(N*k, irtest.S(0), irtest.O(0))
		case ir.SendRecv:
			rb.Chunks(0, 0, k)
			tb.Copy(k, from(irtest.I(0), r, (r+n-1)%n), irtest.S(0))
			handshake(tb, r, n)
			tb.Copy(k, irtest.S(0), irtest.O(0))
		default:
			panic(fmt.Sprintf("progs.AllPairs: no schedule for %v", coll))
		}
		handshake(tb, r, n)
	}
	return b.Build()
}

// AllPairsLL is an LL-protocol schedule of coll (allreduce, allgather,
// reducescatter or alltoall; C = k) on n >= 2 ranks: each rank writes what
// a peer needs as packets into slot (its rank) of that peer's scratch
// (remote packet destinations), then combines or copies the packets that
// arrived in its own scratch with its own input. No semaphores: the packet
// flags order everything, and the scratch halves alternate per launch.
func AllPairsLL(coll ir.Collective, n int, k int64) *ir.Program {
	b := irtest.New(coll, n, k).Name(fmt.Sprintf("allpairs_ll_%v_%d", coll, n)).Protocol(ir.LL).Arrangements(true, true)
	mesh(b, n, ir.MemoryChannel)
	N := int64(n)
	slot := func(q int) ir.Ref { return irtest.Packet(irtest.S(int64(q) * k)) }
	for r := 0; r < n; r++ {
		R := int64(r)
		rb := b.Rank(r).Chunks(0, 0, N*k)
		tb := rb.PrimTB()
		switch coll {
		case ir.AllReduce:
			var dsts []ir.Ref
			for q := 0; q < n; q++ {
				if q != r {
					dsts = append(dsts, irtest.Remote(slot(r), ch(r, q)))
				}
			}
			tb.Copy(k, irtest.I(0), dsts...)
			srcs := make([]ir.Ref, n)
			for q := range srcs {
				srcs[q] = slot(q)
				if q == r {
					srcs[q] = irtest.I(0)
				}
			}
			tb.Reduce(k, srcs, irtest.O(0))
		case ir.AllGather:
			dsts := []ir.Ref{irtest.O(R * k)}
			for q := 0; q < n; q++ {
				if q != r {
					dsts = append(dsts, irtest.Remote(slot(r), ch(r, q)))
				}
			}
			tb.Copy(k, irtest.I(0), dsts...)
			for q := 0; q < n; q++ {
				if q != r {
					tb.Copy(k, slot(q), irtest.O(int64(q)*k))
				}
			}
		case ir.ReduceScatter:
			for q := 0; q < n; q++ {
				if q != r {
					tb.Copy(k, irtest.I(int64(q)*k), irtest.Remote(slot(r), ch(r, q)))
				}
			}
			srcs := make([]ir.Ref, n)
			for q := range srcs {
				srcs[q] = slot(q)
				if q == r {
					srcs[q] = irtest.I(R * k)
				}
			}
			tb.Reduce(k, srcs, irtest.O(0))
		case ir.AllToAll:
			for q := 0; q < n; q++ {
				if q != r {
					tb.Copy(k, irtest.I(int64(q)*k), irtest.Remote(slot(r), ch(r, q)))
				}
			}
			for q := 0; q < n; q++ {
				src := slot(q)
				if q == r {
					src = irtest.I(R * k)
				}
				tb.Copy(k, src, irtest.O(int64(q)*k))
			}
		default:
			panic(fmt.Sprintf("progs.AllPairsLL: no schedule for %v", coll))
		}
	}
	return b.Build()
}

// DepsAllReduce is a Simple allreduce (C = n*k, n >= 2, both arrangements)
// that spreads each rank's work over two threadblocks joined by
// dependencies and a barrier:
//
//	tb0: handshake; pull my share of every peer's input into scratch slot q
//	     (the last pull publishes); nop waiting for tb1's reduce; copy my
//	     reduced share into every peer's output; handshake; barrier 0
//	tb1: nop waiting for tb0's last pull; reduce my input share and the
//	     scratch slots, in rank order, into my output (publishes); barrier 0
//
// The barrier closes each slice, so the next slice's pulls never overwrite
// scratch that tb1 still reads.
func DepsAllReduce(n int, k int64) *ir.Program {
	N := int64(n)
	b := irtest.New(ir.AllReduce, n, N*k).Name(fmt.Sprintf("deps_allreduce_%d", n)).Arrangements(true, true)
	mesh(b, n, ir.PortChannel)
	for r := 0; r < n; r++ {
		R := int64(r)
		rb := b.Rank(r).Chunks(0, 0, N*k)
		t0, t1 := rb.PrimTB(), rb.PrimTB()
		handshake(t0, r, n)
		for q := 0; q < n; q++ {
			if q != r {
				t0.Copy(k, irtest.Remote(irtest.I(R*k), ch(r, q)), irtest.S(int64(q)*k))
			}
		}
		lastPull := t0.Len() - 1
		t0.Publish()
		t1.Nop().Dep(0, lastPull)
		srcs := make([]ir.Ref, n)
		for q := range srcs {
			srcs[q] = irtest.S(int64(q) * k)
			if q == r {
				srcs[q] = irtest.I(R * k)
			}
		}
		t1.Reduce(k, srcs, irtest.O(R*k)).Publish()
		t0.Nop().Dep(1, t1.Len()-1)
		var dsts []ir.Ref
		for q := 0; q < n; q++ {
			if q != r {
				dsts = append(dsts, irtest.Remote(irtest.O(R*k), ch(r, q)))
			}
		}
		t0.Copy(k, irtest.O(R*k), dsts...)
		t0.Flush(all(r, n)...)
		handshake(t0, r, n)
		t0.Barrier(0, 2)
		t1.Barrier(0, 2)
	}
	return b.Build()
}
