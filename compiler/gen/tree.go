package gen

import "github.com/theseus-ccl/theseus/ir"

// tree is a spanning tree over all ranks: parent[v] is -1 at the root;
// kids[v] lists v's children in order.
type tree struct {
	root   int
	parent []int
	kids   [][]int
}

// heapTree lays the ranks of order out as a binary heap: order[i] has
// children order[2i+1] and order[2i+2]. Positions floor(n/2).. are leaves,
// so the last ceil(n/2) ranks of order never relay.
func heapTree(order []int) tree {
	n := len(order)
	tr := tree{root: order[0], parent: make([]int, n), kids: make([][]int, n)}
	tr.parent[order[0]] = -1
	for i := 1; i < n; i++ {
		p := order[(i-1)/2]
		tr.parent[order[i]] = p
		tr.kids[p] = append(tr.kids[p], order[i])
	}
	return tr
}

// rootedHeap hangs a heap over rest (all ranks but root) below root, which
// gets the single child rest[0].
func rootedHeap(root int, rest []int) tree {
	n := len(rest) + 1
	tr := tree{root: root, parent: make([]int, n), kids: make([][]int, n)}
	tr.parent[root] = -1
	tr.parent[rest[0]] = root
	tr.kids[root] = []int{rest[0]}
	for i := 1; i < len(rest); i++ {
		p := rest[(i-1)/2]
		tr.parent[rest[i]] = p
		tr.kids[p] = append(tr.kids[p], rest[i])
	}
	return tr
}

// pathTree is the chain path[0] -> path[1] -> ... rooted at path[0].
func pathTree(path []int) tree {
	n := len(path)
	tr := tree{root: path[0], parent: make([]int, n), kids: make([][]int, n)}
	tr.parent[path[0]] = -1
	for i := 1; i < n; i++ {
		tr.parent[path[i]] = path[i-1]
		tr.kids[path[i-1]] = []int{path[i]}
	}
	return tr
}

// treeRelays marks the ranks that relay in tr: ranks with two or more tree
// neighbours, except the root of a broadcast or reduce (a pure source or
// sink).
func (g *gen) treeRelays(tr tree) {
	for v := range tr.parent {
		deg := len(tr.kids[v])
		if tr.parent[v] >= 0 {
			deg++
		}
		if v == tr.root && g.coll.Rooted() {
			continue
		}
		if deg >= 2 {
			g.relay[v] = true
		}
	}
}

// splitAvoid returns the ranks of g.order except skip, without (u) and with
// (v) the avoided ones, each in Order's order.
func (g *gen) splitAvoid(skip int) (u, v []int) {
	for _, r := range g.order {
		switch {
		case r == skip:
		case g.avoid[r]:
			v = append(v, r)
		default:
			u = append(u, r)
		}
	}
	return u, v
}

func reversed(a []int) []int {
	b := make([]int, len(a))
	for i, x := range a {
		b[len(a)-1-i] = x
	}
	return b
}

func cat(parts ...[]int) []int {
	var out []int
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// treeAllReduce emits, in one lane on IR channel ch, a tree allreduce of
// chunk c: reduce up (each rank adds its children's partial sums to its
// input, in child order, and sends the sum to its parent), then broadcast
// down. Up and down use different threadblocks, so slice s+1 can travel up
// while slice s travels down (NCCL's split tree).
//
// Threadblocks of rank v (parent p, children k0, k1):
//
//	up:   (recv k0) rrc i -> o; (send p, recv k1) rrs o          interior
//	      (send p) send i                                          leaf
//	      (recv k0) rrc i -> o; (recv k1) rrc o -> o                root
//	down: (send k0, recv p) rcs o; (send k1) send o                interior
//	      (recv p) recv o                                          leaf
//	      (send k0) send o; (send k1) send o                       root
func (g *gen) treeAllReduce(tr tree, lane, ch int, c int64) {
	io, oo := in(c), out(c)
	for v := range tr.parent {
		p, ks := tr.parent[v], tr.kids[v]
		if len(ks) == 0 {
			t := g.tb(v, lane, p, -1, ch)
			g.seq(v, lane, t, g.opSend(1, io))
		}
		acc := io
		for j, k := range ks {
			if j == len(ks)-1 && p >= 0 {
				t := g.tb(v, lane, p, k, ch)
				g.seq(v, lane, t, g.opRRS(1, acc))
			} else {
				t := g.tb(v, lane, -1, k, ch)
				g.seq(v, lane, t, g.opRRC(1, acc, oo))
				acc = oo
			}
		}
		rest := ks
		if p >= 0 {
			if len(ks) > 0 {
				t := g.tb(v, lane, ks[0], p, ch)
				g.seq(v, lane, t, g.opRCS(1, oo))
				rest = ks[1:]
			} else {
				t := g.tb(v, lane, -1, p, ch)
				g.seq(v, lane, t, g.opRecv(1, oo))
			}
		}
		for _, k := range rest {
			t := g.tb(v, lane, k, -1, ch)
			g.par(v, lane, t, g.opSend(1, oo))
		}
	}
}

// treeRooted emits a broadcast from, or a reduce to, tr.root of chunk c in
// one lane (g.coll decides). Broadcast: the root sends its input to each
// child and copies it to its output; an interior rank receives into its
// output and forwards it (rcs, then send to further children); a leaf
// receives. Reduce: as the up phase of treeAllReduce, but intermediate sums
// of non-root ranks (which have no output buffer) go to scratch chunk c.
func (g *gen) treeRooted(tr tree, lane, ch int, c int64) {
	io, oo := in(c), out(c)
	for v := range tr.parent {
		p, ks := tr.parent[v], tr.kids[v]
		if g.coll == ir.Broadcast {
			switch {
			case v == tr.root:
				for _, k := range ks {
					t := g.tb(v, lane, k, -1, ch)
					g.par(v, lane, t, g.opSend(1, io))
				}
				t := g.tb(v, lane, -1, -1, ch)
				g.seq(v, lane, t, g.opCopy(1, io, oo))
			case len(ks) == 0:
				t := g.tb(v, lane, -1, p, ch)
				g.seq(v, lane, t, g.opRecv(1, oo))
			default:
				t := g.tb(v, lane, ks[0], p, ch)
				g.seq(v, lane, t, g.opRCS(1, oo))
				for _, k := range ks[1:] {
					t := g.tb(v, lane, k, -1, ch)
					g.seq(v, lane, t, g.opSend(1, oo))
				}
			}
			continue
		}
		// Reduce.
		if len(ks) == 0 {
			t := g.tb(v, lane, p, -1, ch)
			g.seq(v, lane, t, g.opSend(1, io))
		}
		acc := io
		for j, k := range ks {
			if j == len(ks)-1 && p >= 0 {
				t := g.tb(v, lane, p, k, ch)
				g.seq(v, lane, t, g.opRRS(1, acc))
				continue
			}
			dst := scr(c)
			if p < 0 {
				dst = oo
			}
			t := g.tb(v, lane, -1, k, ch)
			g.seq(v, lane, t, g.opRRC(1, acc, dst))
			acc = dst
		}
	}
}

// buildTree: one binary tree in heap order per lane. Allreduce: the tree
// over Order with avoided ranks last (leaves). Broadcast/reduce: rooted at
// Root, then the rest of Order, avoided ranks last.
func buildTree(g *gen) error {
	K := g.K
	g.p.ChunksPerBlock = int64(K)
	g.p.SliceBytes = PipelineSliceBytes
	var tr tree
	if g.coll.Rooted() {
		u, v := g.splitAvoid(g.root)
		tr = heapTree(cat([]int{g.root}, u, v))
	} else {
		u, v := g.splitAvoid(-1)
		tr = heapTree(cat(u, v))
	}
	for k := 0; k < K; k++ {
		if g.coll.Rooted() {
			g.treeRooted(tr, k, k, int64(k))
		} else {
			g.treeAllReduce(tr, k, k, int64(k))
		}
	}
	g.treeRelays(tr)
	return g.err
}

// buildDBTree: NCCL's double binary tree. The block is cut in two halves
// (chunks 0..K-1 and K..2K-1); half t runs on tree t. Tree 0 is the heap
// over U (Order without avoided ranks) then the avoided ranks; tree 1 the
// heap over U reversed then the avoided ranks, so that the interior ranks of
// one tree are leaves of the other (when 2*floor(n/2) <= |U|). For
// broadcast/reduce both trees hang below Root.
func buildDBTree(g *gen) error {
	K := g.K
	g.p.ChunksPerBlock = int64(2 * K)
	g.p.SliceBytes = PipelineSliceBytes
	var trees [2]tree
	if g.coll.Rooted() {
		u, v := g.splitAvoid(g.root)
		trees[0] = rootedHeap(g.root, cat(u, v))
		trees[1] = rootedHeap(g.root, cat(reversed(u), v))
	} else {
		u, v := g.splitAvoid(-1)
		trees[0] = heapTree(cat(u, v))
		trees[1] = heapTree(cat(reversed(u), v))
	}
	for t, tr := range trees {
		for k := 0; k < K; k++ {
			lane := t*K + k
			if g.coll.Rooted() {
				g.treeRooted(tr, lane, lane, int64(lane))
			} else {
				g.treeAllReduce(tr, lane, lane, int64(lane))
			}
		}
		g.treeRelays(tr)
	}
	return g.err
}

// buildChain: a pipelined chain Root -> Order (without Root and avoided
// ranks) -> avoided ranks; broadcast flows down the chain, reduce up it.
func buildChain(g *gen) error {
	K := g.K
	g.p.ChunksPerBlock = int64(K)
	g.p.SliceBytes = PipelineSliceBytes
	u, v := g.splitAvoid(g.root)
	tr := pathTree(cat([]int{g.root}, u, v))
	for k := 0; k < K; k++ {
		g.treeRooted(tr, k, k, int64(k))
	}
	g.treeRelays(tr)
	return g.err
}
