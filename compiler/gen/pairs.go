package gen

import "github.com/theseus-ccl/theseus/ir"

// buildOneShot: all-pairs one-shot allreduce at the primitive level. Every
// rank combines all n inputs itself, so each rank moves (n-1) times the
// message but the latency is one hop.
//
// Channels: lane k has one memory channel per peer; on rank r the channel
// to peer p is k(n-1) + pidx(r, p) (peers in rank order, skipping r), Init 0.
// Chunks: C = K; lane k owns chunk k.
//
// LL (scratch K(n-1) chunks; sender q's packets land in slot k(n-1)+pidx(r,q)
// of receiver r):
//
//	copy   i[k] -> packet s[slot of r] on every peer        (one put per peer)
//	reduce x_0, ..., x_{n-1} -> o[k]   x_q = i[k] if q = r, else packet s[slot of q]
//
// Simple (scratch K chunks):
//
//	signal all; wait all                 every peer's input of this launch is ready
//	reduce x_0, ..., x_{n-1} -> s[k]     x_q = i[k] if q = r, else peer q's i[k] (remote read)
//	signal all; wait all                 no peer reads my input any more
//	copy   s[k] -> o[k]
//
// Across nodes (NLocalRanks below nranks; LL only, Simple reads peers'
// memory and is refused) the channels between nodes are port channels,
// which put packets as they are: rank r first writes its packets of lane
// k into its own slot K(n-1)+k, puts them from there to each peer on
// another node, and writes them straight to the peers on its node.
//
// Sources are in rank order on every rank, so every rank computes
// bit-identical results. In place is correct: LL reads its own input before
// writing the output in the same op and peers never read it; Simple stages
// the sum in scratch until every peer has finished reading.
func buildOneShot(g *gen) error {
	n, K := g.n, g.K
	g.p.ChunksPerBlock = int64(K)
	np := n - 1
	for r := 0; r < n; r++ {
		chans := make([]ir.Channel, K*np)
		for k := 0; k < K; k++ {
			for p := 0; p < n; p++ {
				if p == r {
					continue
				}
				chans[k*np+pidx(r, p)] = ir.Channel{Peer: p, PeerChannel: k*np + pidx(p, r), Type: chanType(g, r, p)}
			}
		}
		g.p.Ranks[r].Channels = chans
	}
	for r := 0; r < n; r++ {
		for k := 0; k < K; k++ {
			k64 := int64(k)
			t := g.tb(r, k, -1, -1, -1)
			all := make([]int, np)
			for i := range all {
				all[i] = k*np + i
			}
			srcs := make([]ir.Ref, n)
			if g.p.Protocol == ir.LL {
				dsts := make([]ir.Ref, 0, np)
				var far []ir.Ref
				for p := 0; p < n; p++ {
					if p != r {
						ref := ir.Ref{Buf: ir.Scratch, Off: int64(k*np + pidx(p, r)), Chan: k*np + pidx(r, p), Packet: true}
						if chanType(g, r, p) == ir.PortChannel {
							far = append(far, ref)
						} else {
							dsts = append(dsts, ref)
						}
					}
				}
				own := ir.Ref{Buf: ir.Scratch, Off: int64(K*np + k), Chan: -1, Packet: true}
				if len(far) > 0 {
					dsts = append(dsts, own)
				}
				g.emit(r, t, g.opCopy(1, in(k64), dsts...))
				for _, f := range far {
					g.emit(r, t, g.opCopy(1, own, f))
				}
				for q := 0; q < n; q++ {
					if q == r {
						srcs[q] = in(k64)
					} else {
						srcs[q] = ir.Ref{Buf: ir.Scratch, Off: int64(k*np + pidx(r, q)), Chan: -1, Packet: true}
					}
				}
				g.emit(r, t, g.opReduce(1, srcs, out(k64)))
				continue
			}
			for q := 0; q < n; q++ {
				if q == r {
					srcs[q] = in(k64)
				} else {
					srcs[q] = ir.Ref{Buf: ir.Input, Off: k64, Chan: k*np + pidx(r, q)}
				}
			}
			g.emit(r, t, ir.Op{Code: ir.OpSignal, Chans: all})
			g.emit(r, t, ir.Op{Code: ir.OpWait, Chans: all})
			g.emit(r, t, g.opReduce(1, srcs, scr(k64)))
			g.emit(r, t, ir.Op{Code: ir.OpSignal, Chans: all})
			g.emit(r, t, ir.Op{Code: ir.OpWait, Chans: all})
			g.emit(r, t, g.opCopy(1, scr(k64), out(k64)))
		}
		if g.p.Protocol == ir.LL {
			g.rs[r].scratch = int64(K * np)
			if g.p.NLocalRanks > 0 {
				g.rs[r].scratch += int64(K) // the packets put across nodes
			}
		}
	}
	return g.err
}

// buildTwoShot: all-pairs two-shot allreduce at the transfer level. The
// block is cut into n parts per lane (C = nK; part q of lane k is chunk
// kn+q); rank r owns part r.
//
// Rank r, lane k, threadblock (send p, recv p) for each peer p, and one
// reducer threadblock:
//
//	tb p:     send i[part p]; recv -> s[slot p]
//	reducer:  reduce x_0..x_{n-1} -> o[part r]   (x_r = i[part r], x_q = s[slot q];
//	                                              waits for every tb's recv)
//	tb p:     send o[part r] (after the reducer); recv -> o[part p]
//
// Slots: s[k(n-1) + pidx(r,p)]. Every transfer is one chunk; all peers are
// served in parallel.
func buildTwoShot(g *gen) error {
	n, K := g.n, g.K
	g.p.ChunksPerBlock = int64(n * K)
	np := n - 1
	if n >= 3 {
		for r := range g.relay {
			g.relay[r] = true
		}
	}
	for r := 0; r < n; r++ {
		for k := 0; k < K; k++ {
			part := func(q int) int64 { return int64(k*n + q) }
			slot := func(q int) int64 { return int64(k*np + pidx(r, q)) }
			tbs := make([]int, n)
			recvDeps := make([]ir.Dep, 0, np)
			for i := 1; i < n; i++ {
				p := (r + i) % n
				t := g.tb(r, k, p, p, k)
				tbs[p] = t
				g.emit(r, t, g.opSend(1, in(part(p))))
				s := g.emit(r, t, g.opRecv(1, scr(slot(p))))
				recvDeps = append(recvDeps, g.pub(r, t, s))
			}
			red := g.tb(r, k, -1, -1, k)
			srcs := make([]ir.Ref, n)
			for q := 0; q < n; q++ {
				if q == r {
					srcs[q] = in(part(r))
				} else {
					srcs[q] = scr(slot(q))
				}
			}
			op := g.opReduce(1, srcs, out(part(r)))
			op.Deps = recvDeps
			rd := g.pub(r, red, g.emit(r, red, op))
			for i := 1; i < n; i++ {
				p := (r + i) % n
				op := g.opSend(1, out(part(r)))
				op.Deps = []ir.Dep{rd}
				g.emit(r, tbs[p], op)
				g.emit(r, tbs[p], g.opRecv(1, out(part(p))))
			}
		}
	}
	return g.err
}

// chanType is the type of the channel between ranks r and p of g's
// program: a port channel between nodes (Program.NLocalRanks), else a
// memory channel.
func chanType(g *gen, r, p int) ir.ChannelType {
	if nl := g.p.NLocalRanks; nl > 0 && (r/nl != p/nl || g.coll.Rooted()) {
		return ir.PortChannel
	}
	return ir.MemoryChannel
}
