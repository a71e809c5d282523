package gen

import (
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
)

func meta(b *irtest.Builder, algo string, k int) *irtest.Builder {
	return b.Meta("generator", "theseus/compiler/gen").Meta("algorithm", algo).Meta("channels", itoa(k))
}

func itoa(k int) string { return string(rune('0' + k)) }

// TestExactPrograms compares small generated programs with hand-written
// ones, op by op.
func TestExactPrograms(t *testing.T) {
	I, O, S := irtest.I, irtest.O, irtest.S
	pk := func(r ir.Ref, ch int) ir.Ref { return irtest.Packet(irtest.Remote(r, ch)) }

	// Ring allreduce, 3 ranks: rank r sends part r-1, adds its own share of
	// part r+1 and passes it on, completes part r (rrcs), forwards part r-1
	// and finally receives part r+1.
	ring := meta(irtest.New(ir.AllReduce, 3, 3).Name("ring_allreduce_n3_k1_simple").Arrangements(true, true), "ring", 1)
	for r := 0; r < 3; r++ {
		m := func(x int) int64 { return int64(mod(x, 3)) }
		ring.Rank(r).Chunks(3, 3, 0).TB(mod(r+1, 3), mod(r-1, 3), 0).
			Send(1, I(m(r-1))).RRS(1, I(m(r+1))).RRCS(1, I(m(r)), O(m(r))).RCS(1, O(m(r-1))).Recv(1, O(m(r+1)))
	}

	// Direct gather to root 1: peers send their input; the root receives
	// block p from p (peers visited from root+1) and copies its own.
	gather := meta(irtest.New(ir.Gather, 3, 1).Name("direct_gather_n3_k1_simple_root1").Root(1).Arrangements(true, true), "direct", 1)
	gather.Rank(0).Chunks(1, 0, 0).TB(1, -1, 0).Send(1, I(0))
	rb := gather.Rank(1).Chunks(1, 3, 0)
	rb.TB(-1, 2, 0).Recv(1, O(2))
	rb.TB(-1, 0, 0).Recv(1, O(0))
	rb.PrimTB().Copy(1, I(0), O(1))
	gather.Rank(2).Chunks(1, 0, 0).TB(1, -1, 0).Send(1, I(0))

	// One-shot LL allreduce, 3 ranks: a packet put of the input into slot
	// pidx(p, r) of each peer p, then one reduce in rank order.
	one := meta(irtest.New(ir.AllReduce, 3, 1).Name("oneshot_allreduce_n3_k1_ll").Protocol(ir.LL).Arrangements(true, true), "oneshot", 1)
	for r := 0; r < 3; r++ {
		rk := one.Rank(r).Chunks(1, 1, 2)
		var dsts []ir.Ref
		srcs := make([]ir.Ref, 3)
		for p := 0; p < 3; p++ {
			if p == r {
				srcs[p] = I(0)
				continue
			}
			rk.Channel(ir.Channel{Peer: p, PeerChannel: pidx(p, r), Type: ir.MemoryChannel})
			dsts = append(dsts, pk(S(int64(pidx(p, r))), pidx(r, p)))
			srcs[p] = irtest.Packet(S(int64(pidx(r, p))))
		}
		rk.PrimTB().Copy(1, I(0), dsts...).Reduce(1, srcs, O(0))
	}

	// Binary tree allreduce, 3 ranks (root 0, leaves 1 and 2): the root
	// accumulates both children, then sends the sum to both in parallel.
	tree := meta(irtest.New(ir.AllReduce, 3, 1).Name("tree_allreduce_n3_k1_simple").SliceBytes(PipelineSliceBytes).Arrangements(true, true), "tree", 1)
	r0 := tree.Rank(0).Chunks(1, 1, 0)
	r0.TB(-1, 1, 0).RRC(1, I(0), O(0)).Publish()
	r0.TB(-1, 2, 0).RRC(1, O(0), O(0)).Dep(0, 0).Publish()
	r0.TB(1, -1, 0).Send(1, O(0)).Dep(1, 0)
	r0.TB(2, -1, 0).Send(1, O(0)).Dep(1, 0)
	for r := 1; r < 3; r++ {
		rk := tree.Rank(r).Chunks(1, 1, 0)
		rk.TB(0, -1, 0).Send(1, I(0)).Publish()
		rk.TB(-1, 0, 0).Recv(1, O(0)).Dep(0, 0)
	}

	tests := []struct {
		algo string
		opts Options
		want *ir.Program
	}{
		{"ring", Options{Collective: ir.AllReduce, NRanks: 3}, ring.Build()},
		{"direct", Options{Collective: ir.Gather, NRanks: 3, Root: 1}, gather.Build()},
		{"oneshot", Options{Collective: ir.AllReduce, NRanks: 3, Protocol: ir.LL}, one.Build()},
		{"tree", Options{Collective: ir.AllReduce, NRanks: 3}, tree.Build()},
	}
	for _, tc := range tests {
		got, err := Generate(tc.algo, tc.opts)
		if err != nil {
			t.Fatalf("%s: %v", tc.algo, err)
		}
		if d := irtest.Diff(tc.want, got); d != "" {
			t.Errorf("%s %v (-want +got):\n%s", tc.algo, tc.opts.Collective, d)
		}
	}
}

// TestGeometry pins chunks per block, scratch and slice bytes of each
// generator (K = 2, 6 ranks, 3 per node).
func TestGeometry(t *testing.T) {
	type geo struct {
		C, scratch int64 // scratch of rank 1
		slice      int64
		tbs        int // threadblocks of rank 1
	}
	tests := []struct {
		algo string
		coll ir.Collective
		want geo
	}{
		{"ring", ir.AllReduce, geo{12, 0, 0, 2}},
		{"ring", ir.AllGather, geo{2, 0, 0, 2}},
		{"ring", ir.Broadcast, geo{2, 0, 0, 2}},
		{"oneshot", ir.AllReduce, geo{2, 2, 0, 2}},
		{"twoshot", ir.AllReduce, geo{12, 10, 0, 12}},
		{"tree", ir.AllReduce, geo{2, 0, PipelineSliceBytes, 8}},
		{"tree", ir.Reduce, geo{2, 2, PipelineSliceBytes, 4}},
		{"dbtree", ir.AllReduce, geo{4, 0, PipelineSliceBytes, 12}},
		{"rhd", ir.AllReduce, geo{8, 0, 0, 6}},
		{"rhd", ir.ReduceScatter, geo{2, 12, 0, 6}},
		{"hier", ir.AllReduce, geo{12, 0, 0, 4}},
		{"hier", ir.ReduceScatter, geo{2, 4, 0, 4}},
		{"direct", ir.AllToAll, geo{2, 0, 0, 12}},
		{"push", ir.AllToAll, geo{2, 10, 0, 8}},
		{"push", ir.Gather, geo{2, 0, 0, 2}},
		{"push", ir.Scatter, geo{2, 2, 0, 2}},
		{"chain", ir.Reduce, geo{2, 0, PipelineSliceBytes, 2}},
	}
	for _, tc := range tests {
		l := 0 // one node (several change the channels and, for LL, the scratch)
		if tc.algo == "hier" {
			l = 3
		}
		p, err := Generate(tc.algo, Options{Collective: tc.coll, NRanks: 6, NLocalRanks: l, Channels: 2})
		if err != nil {
			t.Fatalf("%s %v: %v", tc.algo, tc.coll, err)
		}
		got := geo{p.ChunksPerBlock, p.Ranks[1].Chunks[ir.Scratch], p.SliceBytes, len(p.Ranks[1].TBs)}
		if got != tc.want {
			t.Errorf("%s %v: got %+v, want %+v", tc.algo, tc.coll, got, tc.want)
		}
	}
	// LL programs are never sliced.
	p, err := Generate("tree", Options{Collective: ir.AllReduce, NRanks: 6, Protocol: ir.LL})
	if err != nil || p.SliceBytes != 0 {
		t.Errorf("tree LL: slice bytes %d, %v", p.SliceBytes, err)
	}
	// hier records its node shape; the others record several nodes (their
	// channels between nodes are port channels) and on one node run on any.
	p, _ = Generate("hier", Options{Collective: ir.AllGather, NRanks: 6, NLocalRanks: 3})
	q, _ := Generate("ring", Options{Collective: ir.AllGather, NRanks: 6, NLocalRanks: 3})
	one, _ := Generate("ring", Options{Collective: ir.AllGather, NRanks: 6, NLocalRanks: 6})
	if p.NLocalRanks != 3 || q.NLocalRanks != 3 || one.NLocalRanks != 0 {
		t.Errorf("NLocalRanks: hier %d, ring on 2 nodes %d, ring on one node %d", p.NLocalRanks, q.NLocalRanks, one.NLocalRanks)
	}
}

// peers returns, for each transfer channel, the peers rank r talks to.
func peers(p *ir.Program, r int) map[int][]int {
	set := map[int]map[int]bool{}
	for _, tb := range p.Ranks[r].TBs {
		for _, x := range []int{tb.SendPeer, tb.RecvPeer} {
			if x >= 0 {
				if set[tb.Chan] == nil {
					set[tb.Chan] = map[int]bool{}
				}
				set[tb.Chan][x] = true
			}
		}
	}
	out := map[int][]int{}
	for c, s := range set {
		for x := range s {
			out[c] = append(out[c], x)
		}
		sort.Ints(out[c])
	}
	return out
}

// TestAvoid checks that avoided ranks end up as leaves (one peer per tree)
// or chain tails, and that order is honoured.
func TestAvoid(t *testing.T) {
	// Binary tree over 8 ranks with 0 and 3 avoided: both are leaves.
	p, err := Generate("tree", Options{Collective: ir.AllReduce, NRanks: 8, Avoid: []int{0, 3}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []int{0, 3} {
		if got := peers(p, r); len(got[0]) != 1 {
			t.Errorf("tree: avoided rank %d talks to %v", r, got)
		}
	}
	if p.Meta["avoid"] != "0,3" {
		t.Errorf("meta avoid = %q", p.Meta["avoid"])
	}
	// Without avoid, rank 0 is the root with two children.
	p, _ = Generate("tree", Options{Collective: ir.AllReduce, NRanks: 8})
	if got := peers(p, 0); !cmp.Equal(got[0], []int{1, 2}) {
		t.Errorf("tree root peers %v", got)
	}
	// Double binary tree: rank 5 is a leaf of both trees (channels 0 and 1).
	p, err = Generate("dbtree", Options{Collective: ir.AllReduce, NRanks: 8, Avoid: []int{5}})
	if err != nil {
		t.Fatal(err)
	}
	if got := peers(p, 5); len(got[0]) != 1 || len(got[1]) != 1 {
		t.Errorf("dbtree: avoided rank 5 talks to %v", got)
	}
	// Without avoid, the two trees are complementary: no rank is interior
	// (two or more peers) in both.
	p, _ = Generate("dbtree", Options{Collective: ir.AllReduce, NRanks: 10})
	for r := 0; r < 10; r++ {
		if got := peers(p, r); len(got[0]) > 1 && len(got[1]) > 1 {
			t.Errorf("dbtree: rank %d interior in both trees: %v", r, got)
		}
	}
	// Chain broadcast from 2 over 5 ranks with 3 avoided: 3 is the tail.
	p, err = Generate("chain", Options{Collective: ir.Broadcast, NRanks: 5, Root: 2, Avoid: []int{3}})
	if err != nil {
		t.Fatal(err)
	}
	if got := peers(p, 3); !cmp.Equal(got[0], []int{4}) || len(p.Ranks[3].TBs) != 1 || p.Ranks[3].TBs[0].SendPeer != -1 {
		t.Errorf("chain: rank 3 peers %v", got)
	}
	// Order: a ring in the order 0 2 1 3 sends 0->2->1->3->0.
	p, err = Generate("ring", Options{Collective: ir.AllGather, NRanks: 4, Order: []int{0, 2, 1, 3}})
	if err != nil {
		t.Fatal(err)
	}
	next := map[int]int{}
	for r := 0; r < 4; r++ {
		next[r] = p.Ranks[r].TBs[0].SendPeer
	}
	if !cmp.Equal(next, map[int]int{0: 2, 2: 1, 1: 3, 3: 0}) {
		t.Errorf("ring order: %v", next)
	}
	// Ring broadcast: the tail (the root's predecessor) may be avoided.
	if _, err := Generate("ring", Options{Collective: ir.Broadcast, NRanks: 4, Avoid: []int{3}}); err != nil {
		t.Errorf("ring broadcast avoiding its tail: %v", err)
	}
	// Algorithms that never relay accept any avoid list, the root of a
	// broadcast included.
	for _, a := range []string{"direct", "oneshot"} {
		c := ir.AllReduce
		if a == "direct" {
			c = ir.AllToAll
		}
		if _, err := Generate(a, Options{Collective: c, NRanks: 6, Avoid: []int{0, 1, 2, 3, 4, 5}}); err != nil {
			t.Errorf("%s: %v", a, err)
		}
	}
	if _, err := Generate("tree", Options{Collective: ir.Broadcast, NRanks: 6, Avoid: []int{0}}); err != nil {
		t.Errorf("tree broadcast avoiding its root: %v", err)
	}
}

// BenchmarkGenerateRing1024 generates a 1024-rank ring allreduce (2 M
// transfer ops).
func BenchmarkGenerateRing1024(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Generate("ring", Options{Collective: ir.AllReduce, NRanks: 1024}); err != nil {
			b.Fatal(err)
		}
	}
}
