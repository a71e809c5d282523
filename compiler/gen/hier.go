package gen

import (
	"fmt"

	"github.com/theseus-ccl/theseus/ir"
)

// buildHier: hierarchical algorithms for N nodes of L = NLocalRanks ranks
// (rank = node*L + local). Intra-node phases are rings over a node's ranks
// in local order; inter-node phases are rings over the N ranks that share a
// local rank ("rails"), so inter-node traffic never leaves its rail.
//
// allreduce (C = nK; lane k, local part l = chunks kn + lN .. kn + lN + N-1,
// sub-part m of it = chunk kn + lN + m):
//
//  1. intra-node ring reduce-scatter of the L local parts (input -> output);
//  2. inter-node ring allreduce of local part l among the rail of local rank
//     l, one sub-part per node (output -> output);
//  3. intra-node ring allgather of the local parts (output).
//
// allgather (C = K): 1. inter-node ring allgather of the rail's blocks;
// 2. intra-node ring allgather, each rank contributing its rail's N blocks.
//
// reducescatter (C = K; scratch s[kN + node]): 1. intra-node ring
// reduce-scatter where local rank l collects the node's partial sums of the
// N blocks of its rail (into scratch); 2. inter-node ring reduce-scatter of
// those N blocks along the rail (into the output).
//
// A phase over one rank (L = 1 or N = 1) is skipped.
func buildHier(g *gen) error {
	n, K := g.n, g.K
	L := g.o.NLocalRanks
	if L == 0 {
		return fmt.Errorf("%w: hier needs NLocalRanks (ranks per node) dividing NRanks", ErrOptions)
	}
	N := n / L
	g.p.NLocalRanks = L
	if L >= 3 || N >= 3 || (L >= 2 && N >= 2) {
		for r := range g.relay {
			g.relay[r] = true
		}
	}
	intra := func(node int) []int {
		m := make([]int, L)
		for l := range m {
			m[l] = node*L + l
		}
		return m
	}
	rail := func(l int) []int {
		m := make([]int, N)
		for q := range m {
			m[q] = q*L + l
		}
		return m
	}
	// railBlocks lists the blocks of local rank l on every node.
	railBlocks := func(l int) []int64 {
		b := make([]int64, N)
		for q := range b {
			b[q] = int64(q*L + l)
		}
		return b
	}
	K64 := int64(K)
	switch g.coll {
	case ir.AllReduce:
		g.p.ChunksPerBlock = int64(n * K)
		for k := 0; k < K; k++ {
			base := int64(k * n)
			local := func(l int) []int64 { return span(base+int64(l*N), base+int64((l+1)*N)) }
			if L > 1 {
				for node := 0; node < N; node++ {
					parts := make([][]int64, L)
					for q := range parts {
						parts[q] = local(q)
					}
					g.ringRS(&ringPhase{members: intra(node), lane: k, ch: k, parts: parts,
						src: func(_ int, it int64) ir.Ref { return in(it) },
						dst: func(_ int, it int64) ir.Ref { return out(it) }}, false)
				}
			}
			cur := in
			if L > 1 {
				cur = out
			}
			if N > 1 {
				for l := 0; l < L; l++ {
					parts := make([][]int64, N)
					for q := range parts {
						parts[q] = []int64{base + int64(l*N+q)}
					}
					ph := &ringPhase{members: rail(l), lane: k, ch: k, parts: parts,
						src: func(_ int, it int64) ir.Ref { return cur(it) },
						dst: func(_ int, it int64) ir.Ref { return out(it) }}
					g.ringRS(ph, true)
					g.ringAG(ph, true)
				}
			}
			if L > 1 {
				for node := 0; node < N; node++ {
					parts := make([][]int64, L)
					for q := range parts {
						parts[q] = local(q)
					}
					g.ringAG(&ringPhase{members: intra(node), lane: k, ch: k, parts: parts,
						src: func(_ int, it int64) ir.Ref { return out(it) },
						dst: func(_ int, it int64) ir.Ref { return out(it) }}, false)
				}
			}
		}
	case ir.AllGather:
		g.p.ChunksPerBlock = K64
		for k := 0; k < K; k++ {
			k64 := int64(k)
			blk := func(b int64) ir.Ref { return out(b*K64 + k64) }
			if N > 1 {
				for l := 0; l < L; l++ {
					m := rail(l)
					g.ringAG(&ringPhase{members: m, lane: k, ch: k, parts: blockParts(m),
						src: func(r int, b int64) ir.Ref {
							if b == int64(r) {
								return in(k64)
							}
							return blk(b)
						},
						dst: func(_ int, b int64) ir.Ref { return blk(b) }}, false)
				}
			}
			if L > 1 {
				for node := 0; node < N; node++ {
					parts := make([][]int64, L)
					for q := range parts {
						parts[q] = railBlocks(q)
					}
					g.ringAG(&ringPhase{members: intra(node), lane: k, ch: k, parts: parts,
						src: func(r int, b int64) ir.Ref {
							if N == 1 && b == int64(r) {
								return in(k64)
							}
							return blk(b)
						},
						dst: func(_ int, b int64) ir.Ref { return blk(b) }}, false)
				}
			}
		}
	case ir.ReduceScatter:
		g.p.ChunksPerBlock = K64
		for k := 0; k < K; k++ {
			k64 := int64(k)
			part := func(b int64) ir.Ref { return scr(k64*int64(N) + b/int64(L)) }
			if L > 1 {
				for node := 0; node < N; node++ {
					parts := make([][]int64, L)
					for q := range parts {
						parts[q] = railBlocks(q)
					}
					g.ringRS(&ringPhase{members: intra(node), lane: k, ch: k, parts: parts,
						src: func(_ int, b int64) ir.Ref { return in(b*K64 + k64) },
						dst: func(_ int, b int64) ir.Ref {
							if N == 1 {
								return out(k64)
							}
							return part(b)
						}}, false)
				}
			}
			if N > 1 {
				for l := 0; l < L; l++ {
					m := rail(l)
					g.ringRS(&ringPhase{members: m, lane: k, ch: k, parts: blockParts(m),
						src: func(_ int, b int64) ir.Ref {
							if L > 1 {
								return part(b)
							}
							return in(b*K64 + k64)
						},
						dst: func(_ int, _ int64) ir.Ref { return out(k64) }}, false)
				}
			}
		}
	}
	return g.err
}
