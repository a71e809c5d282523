package gen

import "github.com/theseus-ccl/theseus/ir"

// buildDirect: one-step algorithms in which data goes straight from the
// rank that has it to the rank that needs it. C = K: lane k moves chunk k of
// every block. A rank talks to peer p in threadblock (send p, recv p) of
// its lane; peers are visited from r+1 upwards so that no peer is everyone's
// first. Nothing relays.
//
//	alltoall:      tb p: send i[block p]; recv o[block p].     own: copy i[block r] -> o[block r]
//	allgather:     tb p: send i; recv o[block p].             own: copy i -> o[block r] after every send
//	reducescatter: tb p: send i[block p]; recv s[slot p].     reducer: reduce (rank order) -> o
//	gather:        root: tb p: recv o[block p]; copy i -> o[block root].  others: send i
//	scatter:       root: tb p: send i[block p]; copy i[block root] -> o. others: recv o
//	broadcast:     root: tb p: send i; copy i -> o after every send.       others: recv o
//	reduce:        root: tb p: recv s[slot p]; reducer -> o.               others: send i
//
// Scratch slots are s[k(n-1) + pidx(r, p)]; a threadblock that receives
// into a slot waits for the reducer before its next slice (the slot is
// reused). The own-block copy comes after the sends that read the same
// storage in place.
func buildDirect(g *gen) error {
	n, K := g.n, g.K
	K64 := int64(K)
	np := n - 1
	g.p.ChunksPerBlock = K64
	R := g.root
	for r := 0; r < n; r++ {
		for k := 0; k < K; k++ {
			k64 := int64(k)
			blk := func(b int) int64 { return int64(b)*K64 + k64 }
			slot := func(p int) int64 { return int64(k*np + pidx(r, p)) }
			peers := make([]int, 0, np)
			for i := 1; i < n; i++ {
				peers = append(peers, (r+i)%n)
			}
			isRoot := r == R
			switch g.coll {
			case ir.AllToAll:
				for _, p := range peers {
					t := g.tb(r, k, p, p, k)
					g.emit(r, t, g.opSend(1, in(blk(p))))
					g.emit(r, t, g.opRecv(1, out(blk(p))))
				}
				g.emit(r, g.tb(r, k, -1, -1, k), g.opCopy(1, in(blk(r)), out(blk(r))))
			case ir.AllGather, ir.Broadcast:
				if g.coll == ir.Broadcast && !isRoot {
					g.emit(r, g.tb(r, k, -1, R, k), g.opRecv(1, out(k64)))
					continue
				}
				var deps []ir.Dep
				for _, p := range peers {
					recv := -1
					if g.coll == ir.AllGather {
						recv = p
					}
					t := g.tb(r, k, p, recv, k)
					deps = append(deps, g.pub(r, t, g.emit(r, t, g.opSend(1, in(k64)))))
				}
				own := out(blk(r))
				if g.coll == ir.Broadcast {
					own = out(k64)
				}
				op := g.opCopy(1, in(k64), own)
				op.Deps = deps
				g.emit(r, g.tb(r, k, -1, -1, k), op)
				if g.coll == ir.AllGather {
					for _, p := range peers {
						g.emit(r, g.tb(r, k, p, p, k), g.opRecv(1, out(blk(p))))
					}
				}
			case ir.ReduceScatter, ir.Reduce:
				if g.coll == ir.Reduce && !isRoot {
					g.emit(r, g.tb(r, k, R, -1, k), g.opSend(1, in(k64)))
					continue
				}
				tbs := make([]int, n)
				var deps []ir.Dep
				for _, p := range peers {
					send := -1
					if g.coll == ir.ReduceScatter {
						send = p
					}
					t := g.tb(r, k, send, p, k)
					if send >= 0 {
						g.emit(r, t, g.opSend(1, in(blk(p))))
					}
					tbs[p] = t
					deps = append(deps, g.pub(r, t, g.emit(r, t, g.opRecv(1, scr(slot(p))))))
				}
				srcs := make([]ir.Ref, n)
				for q := 0; q < n; q++ {
					switch {
					case q != r:
						srcs[q] = scr(slot(q))
					case g.coll == ir.ReduceScatter:
						srcs[q] = in(blk(r))
					default:
						srcs[q] = in(k64)
					}
				}
				red := g.tb(r, k, -1, -1, k)
				op := g.opReduce(1, srcs, out(k64))
				op.Deps = deps
				rd := g.pub(r, red, g.emit(r, red, op))
				for _, p := range peers {
					g.emit(r, tbs[p], ir.Op{Code: ir.OpNop, Deps: []ir.Dep{rd}})
				}
			case ir.Gather:
				if !isRoot {
					g.emit(r, g.tb(r, k, R, -1, k), g.opSend(1, in(k64)))
					continue
				}
				for _, p := range peers {
					g.emit(r, g.tb(r, k, -1, p, k), g.opRecv(1, out(blk(p))))
				}
				g.emit(r, g.tb(r, k, -1, -1, k), g.opCopy(1, in(k64), out(blk(r))))
			case ir.Scatter:
				if !isRoot {
					g.emit(r, g.tb(r, k, -1, R, k), g.opRecv(1, out(k64)))
					continue
				}
				for _, p := range peers {
					g.emit(r, g.tb(r, k, p, -1, k), g.opSend(1, in(blk(p))))
				}
				g.emit(r, g.tb(r, k, -1, -1, k), g.opCopy(1, in(blk(r)), out(k64)))
			}
		}
	}
	return g.err
}
