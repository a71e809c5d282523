// Package legalize turns a transfer-level program (two-sided MSCCL-style
// send/recv ops) into a primitive-level one (one-sided copies and reduces
// through channels, signal/wait on semaphores, LL packets), exactly as
// docs/design/ir.md §7 specifies. Executors only run primitive programs.
//
// The scheme, per connection (A→B, c) of ir.md §5.2 with T transfers per
// slice whose largest count is M chunks:
//
//   - a new channel end on A {Peer B, Init T} and one on B {Peer A, Init 0},
//     paired with each other (Init 0 on both for LL, which has no credits);
//   - T slots of M chunks in B's scratch, after the scratch B declared;
//     transfer i of every slice uses slot i;
//   - Simple: send = wait [a] · copy src → B.s[slot] · signal [a];
//     recv = wait [b] · copy s[slot] → dst · signal [b]; rcs/rrs/rrc/rrcs
//     combine the halves (one wait on the incoming end and the outgoing end,
//     one copy or reduce, one signal on the outgoing end and the incoming end);
//   - LL: the data op alone, with packet refs to the slots.
//
// docs/passes.md describes the scheme and its scratch cost.
package legalize

import (
	"cmp"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// Legalize returns a new program in which every transfer op of p is replaced
// by primitive ops (ir.md §7), with the channel ends and scratch slots they
// need appended to each rank. p itself is not modified and the result shares
// no memory with it.
//
//   - Primitive ops (and copy, reduce, nop) are kept as they are; only their
//     dependency step indices are renumbered.
//   - A transfer op's Deps move to the first primitive of its expansion and
//     its Publish to the last.
//   - Declared channels keep their indices; new ends follow them, ordered on
//     each rank by (peer, transfer channel, sending end before receiving end).
//   - Each rank's scratch grows by T·M chunks per inbound connection; slots
//     are laid out in the order of that rank's receiving ends.
//   - Threadblocks lose their transfer-level SendPeer, RecvPeer and Chan
//     (set to -1): at the primitive level, channels name the peers.
//
// A program that has no transfer op is returned as a deep copy, unchanged.
//
// When p cannot be legalised (a transfer op without a valid peer, wrong
// operand counts, a connection whose sends and receives do not pair, two
// threadblocks on one end of a connection, a dependency on a missing step,
// or scratch beyond 2^63 chunks), Legalize returns nil and error
// diagnostics with codes TS0111, TS0105, TS0200, TS0203 or TS0011. Legalize
// checks only what it needs to translate; run the verifier on its input for
// everything else. It never panics on a malformed program.
func Legalize(p *ir.Program) (*ir.Program, []diag.Diagnostic) {
	if p == nil {
		return nil, []diag.Diagnostic{mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to legalise")}
	}
	if p.Level() != ir.LevelTransfer {
		return p.Clone(), nil
	}
	pl, ds := prepare(p)
	if pl == nil {
		return nil, ds
	}
	return pl.Program(), nil
}

// A Plan is Legalize's analysis of a transfer-level program — its
// connections, the new channel ends and the scratch slots — from which any
// rank's primitives can be written on its own (Rank), without the others.
// A runtime that runs one rank of a large program legalises that rank only.
// A Plan only reads the program it was made from, which must not change
// while the Plan is used; it is safe for concurrent use.
type Plan struct {
	l legalizer
	// endStart[r] is the index in l.ends of rank r's first new channel end.
	endStart []int
}

// Prepare analyses p as Legalize does, with the same diagnostics, and
// returns the Plan (nil with the diagnostics when p cannot be legalised).
// p must be a transfer-level program (ir.LevelTransfer): a program with no
// transfer op needs no legalisation (Legalize returns a copy of it).
func Prepare(p *ir.Program) (*Plan, []diag.Diagnostic) {
	if p == nil {
		return nil, []diag.Diagnostic{mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to legalise")}
	}
	if p.Level() != ir.LevelTransfer {
		return nil, []diag.Diagnostic{mkDiag(p, diag.WrongLevel, -1, -1, -1, p.Pos, "the program has no transfer op: it needs no legalisation")}
	}
	return prepare(p)
}

func prepare(p *ir.Program) (*Plan, []diag.Diagnostic) {
	pl := &Plan{l: legalizer{p: p, n: len(p.Ranks), ll: p.Protocol == ir.LL}}
	l := &pl.l
	l.collect()
	if len(l.diags) == 0 {
		l.pair()
	}
	if len(l.diags) == 0 {
		l.assignEnds()
	}
	if len(l.diags) == 0 {
		l.checkDeps()
	}
	if len(l.diags) > 0 {
		return nil, l.diags
	}
	pl.endStart = make([]int, l.n+1)
	e := 0
	for r := 0; r <= l.n; r++ {
		for e < len(l.ends) && l.ends[e].rank < r {
			e++
		}
		pl.endStart[r] = e
	}
	return pl, nil
}

// Program returns the whole legalised program (what Legalize returns),
// writing the ranks on up to GOMAXPROCS goroutines when the program is
// large.
func (pl *Plan) Program() *ir.Program {
	q := pl.header()
	q.Ranks = make([]ir.Rank, pl.l.n)
	work := func(r int) { pl.l.buildRank(&q.Ranks[r], r, pl.endStart[r]) }
	workers := min(runtime.GOMAXPROCS(0), pl.l.n)
	if workers < 2 || pl.l.p.NumOps() < parallelOps {
		for r := range q.Ranks {
			work(r)
		}
		return q
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := int(next.Add(1) - 1)
				if r >= pl.l.n {
					return
				}
				work(r)
			}
		}()
	}
	wg.Wait()
	return q
}

// parallelOps is the program size (transfer-level ops) from which Program
// writes ranks on several goroutines.
const parallelOps = 1 << 16

// Skeleton returns the legalised program with every rank's buffers,
// position and channel ends (declared and new) but no threadblocks: the
// other ranks as one rank's table needs them (codegen/optable checks a
// rank's channels and remote refs against its peers').
func (pl *Plan) Skeleton() *ir.Program {
	q := pl.header()
	q.Ranks = make([]ir.Rank, pl.l.n)
	for r := range q.Ranks {
		pl.l.rankHeader(&q.Ranks[r], r, pl.endStart[r])
	}
	return q
}

// Rank returns rank r (0 <= r < nranks) of the legalised program, exactly
// as Program writes it.
func (pl *Plan) Rank(r int) ir.Rank {
	var rk ir.Rank
	pl.l.buildRank(&rk, r, pl.endStart[r])
	return rk
}

// header is the legalised program without ranks.
func (pl *Plan) header() *ir.Program {
	q := *pl.l.p
	if pl.l.p.Meta != nil {
		q.Meta = make(map[string]string, len(pl.l.p.Meta))
		for k, v := range pl.l.p.Meta {
			q.Meta[k] = v
		}
	}
	q.Ranks = nil
	return &q
}

// side is one threadblock's half of a connection: the sends of (rank src,
// tb with SendPeer dst, Chan ch), or the receives of (rank dst, tb with
// RecvPeer src, Chan ch).
type side struct {
	src, dst, ch int
	tb           int
	n            int   // transfers per slice
	max          int64 // largest count, chunks
	pos          ir.Pos
}

func cmpSide(a, b side) int {
	if c := cmp.Compare(a.src, b.src); c != 0 {
		return c
	}
	if c := cmp.Compare(a.dst, b.dst); c != 0 {
		return c
	}
	return cmp.Compare(a.ch, b.ch)
}

// conn is a connection (src→dst, ch) with its channel ends and slots.
type conn struct {
	src, dst, ch     int
	sendTB, recvTB   int
	t                int   // transfers per slice
	m                int64 // slot size, chunks
	sendEnd, recvEnd int   // channel index on src and on dst
	base             int64 // first scratch chunk of slot 0 on dst
	// port: src and dst may be on different nodes (legalizer.port): the
	// ends are port channels, and every put through them is one copy from
	// a local ref of the same layout (docs/transport.md); tmp is, for LL,
	// the first scratch chunk of the sender's own T slots, where it builds
	// the packets it puts.
	port bool
	tmp  int64
}

// end is one new channel end, for ordering.
type end struct {
	rank, peer, ch int
	recv           bool
	conn           int
}

type legalizer struct {
	p     *ir.Program
	n     int
	ll    bool
	diags []diag.Diagnostic

	sends, recvs []side
	conns        []conn
	ends         []end
	// tbBase[r] is the index of rank r's first threadblock in the flat
	// per-threadblock arrays sendConn and recvConn (-1: none).
	tbBase             []int
	sendConn, recvConn []int32
	newEnds            []int   // new channel ends per rank
	scratch            []int64 // grown scratch per rank
}

func mkDiag(p *ir.Program, code diag.Code, r, t, s int, pos ir.Pos, format string, args ...any) diag.Diagnostic {
	ci, _ := diag.Lookup(code)
	d := diag.Diagnostic{Code: code, Severity: diag.Error, Rank: r, TB: t, Step: s,
		Line: int(pos.Line), Col: int(pos.Col), Msg: fmt.Sprintf(format, args...), Hint: ci.Hint}
	if p != nil {
		d.File = p.File
	}
	return d
}

func (l *legalizer) errorf(code diag.Code, r, t, s int, pos ir.Pos, format string, args ...any) {
	if len(l.diags) >= diag.DefaultMax {
		return
	}
	l.diags = append(l.diags, mkDiag(l.p, code, r, t, s, pos, format, args...))
}

// collect finds every threadblock's send and receive side and checks what
// the expansion needs: peers in range and operand counts.
func (l *legalizer) collect() {
	l.tbBase = make([]int, l.n+1)
	for r := range l.p.Ranks {
		l.tbBase[r+1] = l.tbBase[r] + len(l.p.Ranks[r].TBs)
	}
	for r := range l.p.Ranks {
		for t := range l.p.Ranks[r].TBs {
			tb := &l.p.Ranks[r].TBs[t]
			if len(tb.Ops) > math.MaxInt32/3 {
				l.errorf(diag.TooLarge, r, t, -1, tb.Pos, "threadblock has %d ops; legalisation supports at most %d", len(tb.Ops), math.MaxInt32/3)
				continue
			}
			snd := side{src: r, dst: tb.SendPeer, ch: tb.Chan, tb: t}
			rcv := side{src: tb.RecvPeer, dst: r, ch: tb.Chan, tb: t}
			bad := false
			for s := range tb.Ops {
				op := &tb.Ops[s]
				info := op.Code.Info()
				if !op.Code.IsTransfer() {
					continue
				}
				if len(op.Srcs) < info.MinSrcs || len(op.Srcs) > info.MaxSrcs ||
					len(op.Dsts) < info.MinDsts || len(op.Dsts) > info.MaxDsts {
					l.errorf(diag.BadCount, r, t, s, op.Pos, "%s takes %d source and %d destination refs, not %d and %d",
						op.Code, info.MinSrcs, info.MinDsts, len(op.Srcs), len(op.Dsts))
					bad = true
				}
				if op.Count < 1 {
					l.errorf(diag.BadCount, r, t, s, op.Pos, "%s of %d chunks: transfers move at least one chunk", op.Code, op.Count)
					bad = true
				}
				if info.Sends {
					if tb.SendPeer < 0 || tb.SendPeer >= l.n || tb.SendPeer == r {
						l.errorf(diag.BadPeer, r, t, s, op.Pos, "%s needs a send peer other than rank %d in [0,%d), the threadblock has %d",
							op.Code, r, l.n, tb.SendPeer)
						bad = true
					}
					if snd.n == 0 {
						snd.pos = op.Pos
					}
					snd.n++
					snd.max = max(snd.max, op.Count)
				}
				if info.Recvs {
					if tb.RecvPeer < 0 || tb.RecvPeer >= l.n || tb.RecvPeer == r {
						l.errorf(diag.BadPeer, r, t, s, op.Pos, "%s needs a receive peer other than rank %d in [0,%d), the threadblock has %d",
							op.Code, r, l.n, tb.RecvPeer)
						bad = true
					}
					if rcv.n == 0 {
						rcv.pos = op.Pos
					}
					rcv.n++
					rcv.max = max(rcv.max, op.Count)
				}
			}
			if bad {
				continue
			}
			if snd.n > 0 {
				l.sends = append(l.sends, snd)
			}
			if rcv.n > 0 {
				l.recvs = append(l.recvs, rcv)
			}
		}
	}
}

// pair joins send sides with receive sides into connections.
func (l *legalizer) pair() {
	slices.SortFunc(l.sends, cmpSide)
	slices.SortFunc(l.recvs, cmpSide)
	for i := 1; i < len(l.sends); i++ {
		if a, b := l.sends[i-1], l.sends[i]; cmpSide(a, b) == 0 {
			l.errorf(diag.TransferMismatch, b.src, b.tb, -1, b.pos,
				"threadblocks %d and %d of rank %d both send to rank %d on channel %d; a connection has one sending threadblock",
				a.tb, b.tb, b.src, b.dst, b.ch)
		}
	}
	for i := 1; i < len(l.recvs); i++ {
		if a, b := l.recvs[i-1], l.recvs[i]; cmpSide(a, b) == 0 {
			l.errorf(diag.TransferMismatch, b.dst, b.tb, -1, b.pos,
				"threadblocks %d and %d of rank %d both receive from rank %d on channel %d; a connection has one receiving threadblock",
				a.tb, b.tb, b.dst, b.src, b.ch)
		}
	}
	if len(l.diags) > 0 {
		return
	}
	l.conns = make([]conn, 0, min(len(l.sends), len(l.recvs)))
	i, j := 0, 0
	for i < len(l.sends) || j < len(l.recvs) {
		var c int
		switch {
		case i == len(l.sends):
			c = 1
		case j == len(l.recvs):
			c = -1
		default:
			c = cmpSide(l.sends[i], l.recvs[j])
		}
		switch {
		case c < 0:
			s := l.sends[i]
			l.errorf(diag.TransferMismatch, s.src, s.tb, -1, s.pos,
				"rank %d sends %d transfers to rank %d on channel %d, but no threadblock of rank %d receives from rank %d on channel %d",
				s.src, s.n, s.dst, s.ch, s.dst, s.src, s.ch)
			i++
		case c > 0:
			s := l.recvs[j]
			l.errorf(diag.TransferMismatch, s.dst, s.tb, -1, s.pos,
				"rank %d receives %d transfers from rank %d on channel %d, but no threadblock of rank %d sends to rank %d on channel %d",
				s.dst, s.n, s.src, s.ch, s.src, s.dst, s.ch)
			j++
		default:
			s, r := l.sends[i], l.recvs[j]
			i++
			j++
			if s.n != r.n {
				l.errorf(diag.TransferMismatch, r.dst, r.tb, -1, r.pos,
					"rank %d receives %d transfers per slice from rank %d on channel %d, but rank %d sends %d",
					r.dst, r.n, r.src, r.ch, s.src, s.n)
				continue
			}
			l.checkCounts(s, r)
			l.conns = append(l.conns, conn{src: s.src, dst: s.dst, ch: s.ch, sendTB: s.tb, recvTB: r.tb,
				t: s.n, m: max(s.max, r.max), port: l.port(s.src, s.dst)})
		}
	}
}

// checkCounts reports the first transfer of a connection whose send and
// receive counts differ, walking the two threadblocks side by side.
func (l *legalizer) checkCounts(s, r side) {
	sops := l.p.Ranks[s.src].TBs[s.tb].Ops
	rops := l.p.Ranks[r.dst].TBs[r.tb].Ops
	i, j := 0, 0
	for k := 0; k < s.n; k++ {
		for !sops[i].Code.Info().Sends {
			i++
		}
		for !rops[j].Code.Info().Recvs {
			j++
		}
		if a, b := sops[i].Count, rops[j].Count; a != b {
			l.errorf(diag.TransferMismatch, r.dst, r.tb, j, rops[j].Pos,
				"transfer %d from rank %d to rank %d on channel %d: %d chunks sent (tb %d step %d), %d received",
				k, s.src, s.dst, s.ch, a, s.tb, i, b)
			return
		}
		i++
		j++
	}
}

// assignEnds numbers the new channel ends and lays out the slots.
func (l *legalizer) assignEnds() {
	l.ends = make([]end, 0, 2*len(l.conns))
	for i, c := range l.conns {
		l.ends = append(l.ends, end{rank: c.src, peer: c.dst, ch: c.ch, conn: i},
			end{rank: c.dst, peer: c.src, ch: c.ch, recv: true, conn: i})
	}
	slices.SortFunc(l.ends, func(a, b end) int {
		if c := cmp.Compare(a.rank, b.rank); c != 0 {
			return c
		}
		if c := cmp.Compare(a.peer, b.peer); c != 0 {
			return c
		}
		if c := cmp.Compare(a.ch, b.ch); c != 0 {
			return c
		}
		if a.recv == b.recv {
			return 0
		}
		if a.recv {
			return 1
		}
		return -1
	})
	l.newEnds = make([]int, l.n)
	l.scratch = make([]int64, l.n)
	for r := range l.p.Ranks {
		l.scratch[r] = l.p.Ranks[r].Chunks[ir.Scratch]
	}
	for _, e := range l.ends {
		idx := len(l.p.Ranks[e.rank].Channels) + l.newEnds[e.rank]
		l.newEnds[e.rank]++
		c := &l.conns[e.conn]
		if !e.recv {
			c.sendEnd = idx
			if c.port && l.ll {
				// The sender's packet slots (LL across nodes).
				c.tmp = l.scratch[e.rank]
				size, ok := mulAdd(int64(c.t), c.m, c.tmp)
				if !ok || c.tmp < 0 {
					l.errorf(diag.TooLarge, e.rank, c.sendTB, -1, ir.Pos{},
						"the scratch of rank %d does not fit 2^63 chunks with %d packet slots of %d chunks to rank %d", e.rank, c.t, c.m, c.dst)
					return
				}
				l.scratch[e.rank] = size
			}
			continue
		}
		c.recvEnd = idx
		c.base = l.scratch[e.rank]
		if c.base < 0 {
			l.errorf(diag.BadGeometry, e.rank, -1, -1, l.p.Ranks[e.rank].Pos,
				"rank %d declares %d scratch chunks; the size cannot be negative", e.rank, c.base)
			return
		}
		size, ok := mulAdd(int64(c.t), c.m, c.base)
		if !ok {
			l.errorf(diag.TooLarge, e.rank, c.recvTB, -1, ir.Pos{},
				"the scratch of rank %d does not fit 2^63 chunks with %d slots of %d chunks from rank %d", e.rank, c.t, c.m, c.src)
			return
		}
		l.scratch[e.rank] = size
	}
	l.sendConn = make([]int32, l.tbBase[l.n])
	l.recvConn = make([]int32, l.tbBase[l.n])
	for i := range l.sendConn {
		l.sendConn[i], l.recvConn[i] = -1, -1
	}
	for i, c := range l.conns {
		l.sendConn[l.tbBase[c.src]+c.sendTB] = int32(i)
		l.recvConn[l.tbBase[c.dst]+c.recvTB] = int32(i)
	}
}

func mulAdd(a, b, c int64) (int64, bool) {
	if a != 0 && b > (math.MaxInt64-c)/a {
		return 0, false
	}
	return a*b + c, true
}

// checkDeps reports dependencies that cannot be renumbered.
func (l *legalizer) checkDeps() {
	for r := range l.p.Ranks {
		tbs := l.p.Ranks[r].TBs
		for t := range tbs {
			for s := range tbs[t].Ops {
				op := &tbs[t].Ops[s]
				for _, d := range op.Deps {
					if d.TB < 0 || d.TB >= len(tbs) || d.Step < 0 || d.Step >= len(tbs[d.TB].Ops) {
						l.errorf(diag.BadDep, r, t, s, op.Pos, "dependency on threadblock %d step %d, which rank %d does not have", d.TB, d.Step, r)
					}
				}
			}
		}
	}
}

// expansion is the number of primitives op becomes when the threadblock
// sends on out (nil: none).
func (l *legalizer) expansion(c ir.Opcode, out *conn) int {
	n := 1
	if c.IsTransfer() && !l.ll {
		n = 3
	}
	if l.splitPut(c, out) {
		n++
	}
	return n
}

// splitPut reports whether transfer op c's data op is cut in two because it
// sends across nodes: a port channel puts one local ref as it is (docs/
// transport.md), so the op first computes what it sends into a local ref
// (its destination, the received slot, or for LL its packet slot) and then
// puts that. A Simple send is such a put already.
func (l *legalizer) splitPut(c ir.Opcode, out *conn) bool {
	if out == nil || !out.port || !c.Info().Sends {
		return false
	}
	return l.ll || c != ir.OpSend
}

// rankSlab holds one rank's output refs, channel lists and dependencies in
// three preallocated arrays that the ops slice into.
type rankSlab struct {
	refs  []ir.Ref
	chans []int
	deps  []ir.Dep
}

func (s *rankSlab) takeRefs(n int) []ir.Ref {
	if n == 0 {
		return nil
	}
	r := s.refs[:n:n]
	s.refs = s.refs[n:]
	return r
}

func (s *rankSlab) takeChans(n int) []int {
	if n == 0 {
		return nil
	}
	r := s.chans[:n:n]
	s.chans = s.chans[n:]
	return r
}

func (s *rankSlab) takeDeps(n int) []ir.Dep {
	if n == 0 {
		return nil
	}
	r := s.deps[:n:n]
	s.deps = s.deps[n:]
	return r
}

// rankHeader writes rank r's buffers, position and channel ends (declared,
// then the new ones from l.ends[e:]) into dst; it returns the index past
// r's new ends.
func (l *legalizer) rankHeader(dst *ir.Rank, r, e int) int {
	src := &l.p.Ranks[r]
	dst.Chunks = src.Chunks
	dst.Chunks[ir.Scratch] = l.scratch[r]
	dst.Pos = src.Pos
	dst.Channels = make([]ir.Channel, len(src.Channels), len(src.Channels)+l.newEnds[r])
	copy(dst.Channels, src.Channels)
	for ; e < len(l.ends) && l.ends[e].rank == r; e++ {
		end := l.ends[e]
		c := &l.conns[end.conn]
		ch := ir.Channel{Peer: end.peer, Type: ir.MemoryChannel}
		if c.port {
			ch.Type = ir.PortChannel
		}
		if end.recv {
			ch.PeerChannel = c.sendEnd
		} else {
			ch.PeerChannel = c.recvEnd
			if !l.ll {
				ch.Init = int64(c.t)
			}
		}
		dst.Channels = append(dst.Channels, ch)
	}
	return e
}

// buildRank writes rank r of the legalised program into dst; e is the index
// in l.ends of its first new channel end. It only reads l, so ranks can be
// written concurrently.
func (l *legalizer) buildRank(dst *ir.Rank, r, e int) {
	src := &l.p.Ranks[r]
	l.rankHeader(dst, r, e)
	// off[t][k] is the first new step of old step k of threadblock t;
	// off[t][len(ops)] the new op count.
	// Step offsets and slab sizes.
	total := 0
	for t := range src.TBs {
		total += len(src.TBs[t].Ops) + 1
	}
	offBuf := make([]int32, total)
	offs := make([][]int32, 0, len(src.TBs))
	var nrefs, nchans, ndeps int
	at := 0
	for t := range src.TBs {
		ops := src.TBs[t].Ops
		off := offBuf[at : at+len(ops)+1]
		at += len(ops) + 1
		k := int32(0)
		out := l.outConn(r, t)
		for s := range ops {
			op := &ops[s]
			off[s] = k
			k += int32(l.expansion(op.Code, out))
			nrefs += len(op.Srcs) + len(op.Dsts)
			if l.splitPut(op.Code, out) {
				nrefs += 4 // the second op's refs, and the packet slot
			}
			nchans += len(op.Chans)
			ndeps += len(op.Deps)
			if op.Code.IsTransfer() {
				info := op.Code.Info()
				w := 0
				if info.Recvs {
					nrefs++
					w++
				}
				if info.Sends {
					nrefs++
					w++
				}
				if !l.ll {
					nchans += 2 * w
				}
			}
		}
		off[len(ops)] = k
		offs = append(offs, off)
	}
	slab := rankSlab{refs: make([]ir.Ref, nrefs), chans: make([]int, nchans), deps: make([]ir.Dep, ndeps)}

	dst.TBs = make([]ir.Threadblock, len(src.TBs))
	for t := range src.TBs {
		stb := &src.TBs[t]
		dtb := &dst.TBs[t]
		dtb.SendPeer, dtb.RecvPeer, dtb.Chan, dtb.Pos = -1, -1, -1, stb.Pos
		dtb.Ops = make([]ir.Op, offs[t][len(stb.Ops)])
		var in, out *conn
		if i := l.recvConn[l.tbBase[r]+t]; i >= 0 {
			in = &l.conns[i]
		}
		if i := l.sendConn[l.tbBase[r]+t]; i >= 0 {
			out = &l.conns[i]
		}
		nin, nout := int64(0), int64(0) // transfers so far on in and out
		for s := range stb.Ops {
			op := &stb.Ops[s]
			ops := dtb.Ops[offs[t][s]:offs[t][s+1]]
			deps := slab.takeDeps(len(op.Deps))
			for i, d := range op.Deps {
				deps[i] = ir.Dep{TB: d.TB, Step: int(offs[d.TB][d.Step+1] - 1)}
			}
			if !op.Code.IsTransfer() {
				ops[0] = ir.Op{Code: op.Code, Count: op.Count, Barrier: op.Barrier, BarrierTBs: op.BarrierTBs,
					Deps: deps, Publish: op.Publish, Pos: op.Pos,
					Srcs:  append(slab.takeRefs(len(op.Srcs))[:0], op.Srcs...),
					Dsts:  append(slab.takeRefs(len(op.Dsts))[:0], op.Dsts...),
					Chans: append(slab.takeChans(len(op.Chans))[:0], op.Chans...)}
				if len(op.Srcs) == 0 {
					ops[0].Srcs = nil
				}
				if len(op.Dsts) == 0 {
					ops[0].Dsts = nil
				}
				if len(op.Chans) == 0 {
					ops[0].Chans = nil
				}
				continue
			}
			info := op.Code.Info()
			var inSlot, outSlot ir.Ref
			var waits, signals []int
			w := 0
			if info.Recvs {
				inSlot = ir.Ref{Buf: ir.Scratch, Off: in.base + nin*in.m, Chan: -1, Packet: l.ll}
				nin++
				w++
			}
			if info.Sends {
				outSlot = ir.Ref{Buf: ir.Scratch, Off: out.base + nout*out.m, Chan: out.sendEnd, Packet: l.ll}
				nout++
				w++
			}
			if !l.ll {
				waits, signals = slab.takeChans(w), slab.takeChans(w)
				switch {
				case info.Recvs && info.Sends:
					waits[0], waits[1] = in.recvEnd, out.sendEnd
					signals[0], signals[1] = out.sendEnd, in.recvEnd
				case info.Recvs:
					waits[0], signals[0] = in.recvEnd, in.recvEnd
				default:
					waits[0], signals[0] = out.sendEnd, out.sendEnd
				}
			}
			// The data op: local srcs, then the received value; local
			// dsts, then the next hop's slot.
			nsrc := len(op.Srcs)
			if info.Recvs {
				nsrc++
			}
			ndst := len(op.Dsts)
			if info.Sends {
				ndst++
			}
			srcs := append(slab.takeRefs(nsrc)[:0], op.Srcs...)
			if info.Recvs {
				srcs = append(srcs, inSlot)
			}
			dsts := append(slab.takeRefs(ndst)[:0], op.Dsts...)
			if info.Sends {
				dsts = append(dsts, outSlot)
			}
			code := ir.OpCopy
			if len(srcs) > 1 {
				code = ir.OpReduce
			}
			data := []ir.Op{{Code: code, Srcs: srcs, Dsts: dsts, Count: op.Count, Pos: op.Pos}}
			if l.splitPut(op.Code, out) {
				data = l.cutPut(data[0], inSlot, out, nout-1, &slab)
			}
			if l.ll {
				copy(ops, data)
				ops[0].Deps = deps
				ops[len(ops)-1].Publish = op.Publish
				continue
			}
			ops[0] = ir.Op{Code: ir.OpWait, Chans: waits, Deps: deps, Pos: op.Pos}
			copy(ops[1:], data)
			ops[len(ops)-1] = ir.Op{Code: ir.OpSignal, Chans: signals, Publish: op.Publish, Pos: op.Pos}
		}
	}
}

// port reports whether the connection between ranks a and b gets port
// channels: the program runs on several nodes (0 < NLocalRanks < NRanks)
// and a and b are on different ones — or the collective is rooted, whose
// root rotation (ir.md §3) may place any two ranks on different nodes.
// On one node a port channel runs like a memory channel.
func (l *legalizer) port(a, b int) bool {
	nl := l.p.NLocalRanks
	if nl <= 0 || nl >= l.n {
		return false
	}
	return a/nl != b/nl || l.p.Collective.Rooted()
}

// outConn is the connection threadblock t of rank r sends on, or nil.
func (l *legalizer) outConn(r, t int) *conn {
	if i := l.sendConn[l.tbBase[r]+t]; i >= 0 {
		return &l.conns[i]
	}
	return nil
}

// cutPut splits data op d, whose last destination is the slot of the next
// hop across nodes, into the op computing what is sent and the put of it
// (splitPut): the value lands in d's first local destination, or (Simple)
// the received slot in, or (LL) the sender's packet slot of transfer i;
// then one copy moves it to the next hop's slot.
func (l *legalizer) cutPut(d ir.Op, in ir.Ref, out *conn, i int64, slab *rankSlab) []ir.Op {
	outSlot := d.Dsts[len(d.Dsts)-1]
	local := d.Dsts[:len(d.Dsts)-1]
	var from ir.Ref
	switch {
	case l.ll:
		// Packets are put as they are: build them in the sender's slot
		// (received packets, rcs, are put from where they arrived).
		from = ir.Ref{Buf: ir.Scratch, Off: out.tmp + i*out.m, Chan: -1, Packet: true}
		if d.Code == ir.OpCopy && len(d.Srcs) == 1 && d.Srcs[0].Packet && d.Srcs[0].Chan < 0 {
			from = d.Srcs[0]
		} else {
			local = append(slab.takeRefs(len(local) + 1)[:0], append(local, from)...)
		}
	case len(local) > 0:
		from = local[0]
	default:
		// rrs: reduce into the received slot, then put it.
		from = in
		local = append(slab.takeRefs(1)[:0], in)
	}
	first := d
	first.Dsts = local
	put := ir.Op{Code: ir.OpCopy, Srcs: append(slab.takeRefs(1)[:0], from), Dsts: append(slab.takeRefs(1)[:0], outSlot), Count: d.Count, Pos: d.Pos}
	if len(local) == 0 {
		return []ir.Op{put} // unreachable: a send's value is its source
	}
	return []ir.Op{first, put}
}

// ScratchCost returns, per rank, the scratch chunks Legalize adds to p: the
// sum over the rank's inbound connections of T·M (transfers per slice times
// the largest transfer, in chunks). It does the analysis of Legalize without
// building the program, and returns nil with Legalize's error diagnostics
// when p cannot be legalised. A program without transfer ops costs nothing.
func ScratchCost(p *ir.Program) ([]int64, []diag.Diagnostic) {
	if p == nil {
		return nil, []diag.Diagnostic{mkDiag(nil, diag.BadValue, -1, -1, -1, ir.Pos{}, "no program to legalise")}
	}
	out := make([]int64, len(p.Ranks))
	if p.Level() != ir.LevelTransfer {
		return out, nil
	}
	l := legalizer{p: p, n: len(p.Ranks), ll: p.Protocol == ir.LL}
	l.collect()
	if len(l.diags) == 0 {
		l.pair()
	}
	if len(l.diags) == 0 {
		l.assignEnds()
	}
	if len(l.diags) > 0 {
		return nil, l.diags
	}
	for r := range out {
		out[r] = l.scratch[r] - p.Ranks[r].Chunks[ir.Scratch]
	}
	return out, nil
}
