package irtest

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
)

func mod(a, n int) int { return ((a % n) + n) % n }

// RingAllReduce is the classic MSCCL transfer-level ring allreduce on
// nranks ranks with the given protocol.
//
// Geometry: C = nranks chunks per block; every rank declares input = output
// = nranks chunks and no scratch. Each rank r has one threadblock with
// SendPeer (r+1) mod n, RecvPeer (r-1) mod n and Chan 0, running 2n-1 steps
// (all counts 1 chunk, all indices mod n):
//
//	step 0            send i[r]                      reduce-scatter starts chunk r
//	step k, 1..n-2    rrs  i[r-k]                    add own part of chunk r-k, pass on
//	step n-1          rrcs i[r+1] -> o[r+1]          chunk r+1 is complete: store, start allgather
//	step n+j, 0..n-3  rcs  o[r-j]                    store chunk r-j, pass on
//	step 2n-2         recv o[r+2]                    last chunk arrives
//
// Chunk c thus starts on rank c, gathers every rank's input chunk c in
// rank order c, c+1, ..., c-1 (each exactly once), is stored complete on
// rank c-1 and is then forwarded around the ring to ranks c .. c-2. Every
// rank reads each of its own input chunks exactly once, in steps 0..n-1,
// and writes an output chunk only from step n-1 on, in the same op as (or
// after) its last read of that chunk; so the program is correct in place
// (input = output) as well as out of place, and it declares both.
//
// nranks = 1 degenerates to one threadblock with no peers running
// copy i[0] -> o[0]. It panics if nranks < 1.
func RingAllReduce(nranks int, proto ir.Protocol) *ir.Program {
	if nranks < 1 {
		panic(fmt.Sprintf("irtest.RingAllReduce: nranks %d < 1", nranks))
	}
	n := nranks
	b := New(ir.AllReduce, n, int64(n)).Name(fmt.Sprintf("ring_allreduce_%d", n)).
		Protocol(proto).Arrangements(true, true)
	C := int64(n)
	if n == 1 {
		b.Rank(0).Chunks(1, 1, 0).PrimTB().Copy(1, I(0), O(0))
		return b.Build()
	}
	for r := 0; r < n; r++ {
		tb := b.Rank(r).Chunks(C, C, 0).TB(mod(r+1, n), mod(r-1, n), 0)
		tb.Send(1, I(int64(r)))
		for k := 1; k <= n-2; k++ {
			tb.RRS(1, I(int64(mod(r-k, n))))
		}
		c := int64(mod(r+1, n))
		tb.RRCS(1, I(c), O(c))
		for j := 0; j <= n-3; j++ {
			tb.RCS(1, O(int64(mod(r-j, n))))
		}
		tb.Recv(1, O(int64(mod(r+2, n))))
	}
	return b.Build()
}

// PairsChannel is the index, on rank r, of the channel that
// PairsAllReducePrimitive pairs with peer q (q != r): peers in rank order,
// skipping r itself, so q if q < r and q-1 if q > r.
func PairsChannel(r, q int) int {
	if q < r {
		return q
	}
	return q - 1
}

// PairsAllReducePrimitive is a primitive-level one-shot all-pairs allreduce
// on nranks ranks (Simple protocol, out of place only).
//
// Geometry: C = nranks chunks per block; every rank declares input = output
// = nranks chunks and no scratch. Every pair of ranks (r, q) shares one
// memory channel, end PairsChannel(r, q) on r and PairsChannel(q, r) on q,
// both with Init 0. Each rank has one threadblock (no transfer peers, Chan
// -1) whose channel list `all` is every channel of the rank, 0..n-2:
//
//	step 0            signal all     "my input is ready"
//	step 1            wait   all     every peer's input is ready
//	step 2+j, 0..C-1  reduce x_0[j], ..., x_{n-1}[j] -> o[j]
//	                  where x_q = i (local) for q = r, else peer q's i through
//	                  channel PairsChannel(r, q)
//	step C+2          signal all     "I have finished reading your input"
//	step C+3          wait   all     no peer reads my input any more
//
// The sources of each reduce are in rank order 0..n-1 on every rank, so all
// ranks combine in the same order and get bit-identical results. The closing
// handshake keeps a rank from returning (after which its user may overwrite
// its input) while a peer still reads that input. Each launch balances (two
// signals and two waits per channel end), so semaphores carry over between
// launches. In place is not supported: rank r would overwrite its input
// chunk j (= output chunk j) while a peer may still be reading it.
//
// nranks = 1 degenerates to copy i[j] -> o[j] for each j with no channels.
// It panics if nranks < 1.
func PairsAllReducePrimitive(nranks int) *ir.Program {
	if nranks < 1 {
		panic(fmt.Sprintf("irtest.PairsAllReducePrimitive: nranks %d < 1", nranks))
	}
	n := nranks
	C := int64(n)
	b := New(ir.AllReduce, n, C).Name(fmt.Sprintf("pairs_allreduce_%d", n)).Arrangements(false, true)
	for r := 0; r < n; r++ {
		b.Rank(r).Chunks(C, C, 0)
	}
	for r := 0; r < n; r++ {
		for q := r + 1; q < n; q++ {
			cr, cq := b.Connect(r, q, ir.MemoryChannel, 0, 0)
			if cr != PairsChannel(r, q) || cq != PairsChannel(q, r) {
				panic("irtest: channel numbering out of order")
			}
		}
	}
	for r := 0; r < n; r++ {
		tb := b.Rank(r).PrimTB()
		if n == 1 {
			for j := int64(0); j < C; j++ {
				tb.Copy(1, I(j), O(j))
			}
			continue
		}
		all := make([]int, n-1)
		for c := range all {
			all[c] = c
		}
		tb.Signal(all...).Wait(all...)
		for j := int64(0); j < C; j++ {
			srcs := make([]ir.Ref, 0, n)
			for q := 0; q < n; q++ {
				if q == r {
					srcs = append(srcs, I(j))
				} else {
					srcs = append(srcs, Remote(I(j), PairsChannel(r, q)))
				}
			}
			tb.Reduce(1, srcs, O(j))
		}
		tb.Signal(all...).Wait(all...)
	}
	return b.Build()
}

// AllGatherRing is the transfer-level ring allgather on nranks ranks
// (Simple protocol, in place and out of place).
//
// Geometry: C = 1 chunk per block; every rank declares input = 1 and
// output = nranks chunks and no scratch. Each rank r has one threadblock
// with SendPeer (r+1) mod n, RecvPeer (r-1) mod n and Chan 0 (indices
// mod n):
//
//	step 0            send i[0]           rank r's block starts around the ring
//	step 1            copy i[0] -> o[r]   own block into place
//	step 2+k, 0..n-3  rcs  o[r-1-k]       store block r-1-k, pass it on
//	step n            recv o[r+1]         the last block arrives
//
// In place, i[0] is o[r] (ir.Placement), so step 1 copies a chunk onto
// itself, which is harmless; every other step touches other output chunks.
//
// nranks = 1 degenerates to one threadblock with no peers running
// copy i[0] -> o[0]. It panics if nranks < 1.
func AllGatherRing(nranks int) *ir.Program {
	if nranks < 1 {
		panic(fmt.Sprintf("irtest.AllGatherRing: nranks %d < 1", nranks))
	}
	n := nranks
	b := New(ir.AllGather, n, 1).Name(fmt.Sprintf("ring_allgather_%d", n)).Arrangements(true, true)
	if n == 1 {
		b.Rank(0).Chunks(1, 1, 0).PrimTB().Copy(1, I(0), O(0))
		return b.Build()
	}
	for r := 0; r < n; r++ {
		tb := b.Rank(r).Chunks(1, int64(n), 0).TB(mod(r+1, n), mod(r-1, n), 0)
		tb.Send(1, I(0))
		tb.Copy(1, I(0), O(int64(r)))
		for k := 0; k <= n-3; k++ {
			tb.RCS(1, O(int64(mod(r-1-k, n))))
		}
		tb.Recv(1, O(int64(mod(r+1, n))))
	}
	return b.Build()
}

// Mailbox is a 2-rank sendrecv at the primitive level: each rank puts its
// input into the peer's scratch chunk 0, signals, waits for the peer's
// signal and copies its scratch into its output. With credit, each rank
// then signals that it has read its scratch and, before its next put, waits
// for the peer's credit (the channel ends start with one credit each, so
// the credit waits come first). Without the credit, the verifier reports the
// race between one slice (or launch) and the next, TS0206.
func Mailbox(credit bool) *Builder {
	b := New(ir.SendRecv, 2, 1).Name("mailbox")
	var init int64
	if credit {
		init = 1
	}
	data0, data1 := b.Connect(0, 1, ir.MemoryChannel, 0, 0)
	cred0, cred1 := b.Connect(0, 1, ir.MemoryChannel, init, init)
	for r, ch := range [][2]int{{data0, cred0}, {data1, cred1}} {
		tb := b.Rank(r).Chunks(1, 1, 1).PrimTB()
		if credit {
			tb.Wait(ch[1])
		}
		tb.Copy(1, I(0), Remote(S(0), ch[0])).Signal(ch[0]).Wait(ch[0]).Copy(1, S(0), O(0))
		if credit {
			tb.Signal(ch[1])
		}
	}
	return b
}
