package verify

import (
	"fmt"
	"sort"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// replayMode says what one replay of the happens-before order checks, in
// which buffer arrangement, and how storage is shared between the two
// modelled iterations.
type replayMode struct {
	sem     bool // symbolic execution of iteration 0
	inPlace bool
	// raceUser, raceScratch: the storage whose races are checked.
	raceUser, raceScratch bool
	// The second iteration has storage of its own for user buffers (slices
	// touch different pieces of them) or for scratch (LL launches
	// alternate scratch halves). Its accesses there can race neither with
	// the first iteration nor in a way the first iteration does not show,
	// so they are not tracked.
	tagUser, tagScratch bool
}

func (m replayMode) arrangement() string {
	if m.inPlace {
		return "in-place"
	}
	return "out-of-place"
}

// needIt1 reports whether iteration 1 can add anything: only when some
// checked storage is shared between the iterations.
func (m replayMode) needIt1() bool {
	return m.raceScratch && !m.tagScratch || m.raceUser && !m.tagUser
}

const itBit = 1 << 30 // iteration 1 flag in recorded accesses (node ids are < 2^29)

// replayer is the state of one replay.
type replayer struct {
	c  *checker
	m  replayMode
	pl ir.Placement

	// Storage locations: region r*3+k (rank r, physical buffer k) runs
	// from regBase to regEnd. alias* map a logical (rank, buffer) through
	// ir.Placement.Resolve, which for the program's own root is a shift of
	// the chunk index: chunk j is at aliasLoc + j; aliasRace and aliasRace1
	// say whether its accesses are race-checked in iteration 0 and 1.
	regBase, regEnd       []int
	aliasLoc              []int
	aliasRace, aliasRace1 []bool

	// races: per location the last write and the reads since (one inline,
	// more in multi), each a node with itBit for iteration 1, plus one (0
	// is none).
	raceOn bool
	lastW  []int32
	rd     []int32 // 0 none, -1 several (in multi)
	multi  map[int][]int32
	hs     *hbState
	own    *ownerState // peer accesses to user buffers (owner.go), in one replayer

	// semantics (iteration 0)
	sem              bool
	sets             *setArena
	val              []vset
	wr               []int32 // last writer node plus one, 0 none
	fifo             []vset  // per connection, a queue at fifoBase
	fifoBase         []int
	fifoHead, fifoTl []int

	// Diagnostics wait in out, each with the key that names its finding,
	// until replay merges the replayers' lists (in arrangement order, each
	// finding once).
	out    []pending
	seen   map[any]bool
	counts map[diag.Code]int

	it1            bool   // iteration 1 matters (m.needIt1)
	srcLoc, dstLoc []int  // per ref of the current op: location of chunk 0
	srcRace        []bool // ... and whether its races are checked
	dstRace        []bool
	stop           bool
}

// pending is a diagnostic of a replayer and the key of its finding (nil:
// always reported).
type pending struct {
	d   diag.Diagnostic
	key any
}

// Keys of findings: an op's TS0208/TS0210, a race between two ops, a
// rank's postcondition.
type (
	opKey struct {
		g, s int32
		code diag.Code
	}
	raceKey struct {
		xg, xs, yg, ys int32
		code           diag.Code
	}
	postKey int
)

// emit records a diagnostic under key, once per replayer.
func (rp *replayer) emit(key any, code diag.Code, sev diag.Severity, r, t, s int, format string, args ...any) {
	if key != nil {
		if rp.seen[key] {
			return
		}
		rp.seen[key] = true
	}
	c := rp.c
	rp.out = append(rp.out, pending{c.mkDiag(code, sev, c.pos(r, t, s), r, t, s, "", format, args...), key})
	rp.counts[code]++
}

func (c *checker) newReplayer(m replayMode) *replayer {
	rp := &replayer{c: c, m: m, raceOn: m.raceUser || m.raceScratch, sem: m.sem, it1: m.needIt1(),
		pl: ir.Placement{Collective: c.p.Collective, NRanks: c.n, ChunksPerBlock: c.C,
			ProgRoot: c.root, Root: c.root, InPlace: m.inPlace}}
	const K = int(ir.NumBufKinds)
	R := c.n * K
	rp.regBase, rp.regEnd = make([]int, R), make([]int, R)
	L := 0
	for r := 0; r < c.n; r++ {
		for k := range ir.NumBufKinds {
			i := r*K + int(k)
			rp.regBase[i] = L
			L += int(c.size[r][k])
			rp.regEnd[i] = L
		}
	}
	rp.aliasLoc, rp.aliasRace, rp.aliasRace1 = make([]int, R), make([]bool, R), make([]bool, R)
	for r := 0; r < c.n; r++ {
		for k := range ir.NumBufKinds {
			sk, off := rp.pl.Resolve(r, k, 0)
			i, j := r*K+int(k), r*K+int(sk)
			rp.aliasLoc[i] = rp.regBase[j] + int(off)
			if sk == ir.Scratch {
				rp.aliasRace[i], rp.aliasRace1[i] = m.raceScratch, m.raceScratch && !m.tagScratch
			} else {
				rp.aliasRace[i], rp.aliasRace1[i] = m.raceUser, m.raceUser && !m.tagUser
			}
		}
	}
	if rp.raceOn {
		rp.lastW = make([]int32, L)
		rp.rd = make([]int32, L)
		rp.multi = map[int][]int32{}
		rp.hs = c.newHBState()
	}
	rp.seen, rp.counts = map[any]bool{}, map[diag.Code]int{}
	if rp.sem {
		// a ring's partial sums are one or two intervals
		rp.sets = &setArena{iv: make([]uint64, 0, 5*c.combines)}
		rp.val = make([]vset, L)
		rp.wr = make([]int32, L)
		// Every input chunk holds its own contribution, wherever the
		// arrangement places it.
		for r := 0; r < c.n; r++ {
			base := rp.aliasLoc[r*K+int(ir.Input)]
			for k := int64(0); k < c.size[r][ir.Input]; k++ {
				rp.val[base+int(k)] = rp.sets.single(uint64(k)*uint64(c.n) + uint64(r))
			}
		}
		rp.fifoBase = make([]int, len(c.conns)+1)
		for ci := range c.conns {
			rp.fifoBase[ci+1] = rp.fifoBase[ci] + int(c.conns[ci].chunks)
		}
		rp.fifo = make([]vset, rp.fifoBase[len(c.conns)])
		rp.fifoHead = append([]int(nil), rp.fifoBase[:len(c.conns)]...)
		rp.fifoTl = append([]int(nil), rp.fifoBase[:len(c.conns)]...)
	}
	return rp
}

// finish checks the postconditions of a completed run and reports the
// findings of its checkers in their order, each finding once.
func (c *checker) finish(cks []*replayer) {
	seen := map[any]bool{}
	for _, rp := range cks {
		if rp.sem && !rp.stop {
			rp.postcondition()
		}
		if rp.own != nil {
			rp.ownerFinish()
		}
		for _, p := range rp.out {
			if p.key != nil {
				if seen[p.key] {
					continue
				}
				seen[p.key] = true
			}
			c.rep.add(p.d)
		}
		if rp.own != nil {
			c.rep.drop(diag.PeerAccessLate, rp.own.moreLate)
		}
	}
}

// node hands node (g, it, s) of the simulation to the checkers, once it
// has run: they replay its accesses if it is a data op.
func (rp *replayer) node(g, it, s int32, tb *tbInfo) {
	if rp.own != nil && it == 0 {
		rp.ownerNode(g, s, tb)
	}
	if rp.stop || it > 0 && !rp.it1 {
		return
	}
	if k := ir.Opcode(rp.c.opk[tb.op0+s] & kCode); k >= ir.OpCopy && k <= ir.OpRecvReduceCopySend {
		rp.op(g, it, s, tb, tb.op0+s)
	}
}

// loc0 is the storage location of chunk 0 of ref and whether races on it
// are checked in iteration it.
func (rp *replayer) loc0(ref *cref, it int32) (int, bool) {
	i := int(ref.q)*int(ir.NumBufKinds) + int(ref.buf)
	race := rp.aliasRace[i]
	if it > 0 {
		race = rp.aliasRace1[i]
	}
	return rp.aliasLoc[i] + int(ref.off), race
}

// op replays one data op (global index o0): chunk by chunk, its reads then
// its writes.
func (rp *replayer) op(g, it, s int32, tb *tbInfo, o0 int32) {
	c := rp.c
	idx := it*tb.nops + s
	node := tb.base() + idx
	enc := node
	if it == 1 {
		enc |= itBit
	}
	sem := rp.sem && it == 0
	if !sem && !rp.raceOn {
		return
	}
	hdr := c.refAt[o0]
	h := &c.crefs[hdr]
	count, nsrc, ndst := int(h.off), int(h.q), int(h.aux)
	refs := c.crefs[hdr+1 : int(hdr)+1+nsrc+ndst]
	rp.srcLoc, rp.dstLoc, rp.srcRace, rp.dstRace = rp.srcLoc[:0], rp.dstLoc[:0], rp.srcRace[:0], rp.dstRace[:0]
	tracked := false
	for i := range refs {
		l, race := rp.loc0(&refs[i], it)
		tracked = tracked || race
		if i < nsrc {
			rp.srcLoc, rp.srcRace = append(rp.srcLoc, l), append(rp.srcRace, race)
		} else {
			rp.dstLoc, rp.dstRace = append(rp.dstLoc, l), append(rp.dstRace, race)
		}
	}
	if !sem && !tracked {
		return
	}
	info := &opFlags[c.opk[o0]&kCode]
	for t := 0; t < count; t++ {
		if rp.raceOn {
			for i, l := range rp.srcLoc {
				if rp.srcRace[i] {
					rp.read(l+t, enc, g, idx)
				}
			}
			for i, l := range rp.dstLoc {
				if rp.dstRace[i] {
					rp.write(l+t, enc, g, idx)
				}
			}
		}
		if !sem {
			continue
		}
		// semantics: combine the received value and the srcs
		v := vUndef
		have := false
		if info.recvs {
			v, have = rp.fifo[rp.fifoHead[tb.inConn]], true
			rp.fifoHead[tb.inConn]++
		}
		for _, l := range rp.srcLoc {
			x := rp.val[l+t]
			if x == vUndef {
				rp.opOnce(g, s, diag.UninitRead, "reads %s, which holds no value when this op runs (nothing has written it before, in happens-before order)",
					rp.locName(l+t))
				x = vPoison
			}
			switch {
			case !have:
				v, have = x, true
			case v == vPoison || x == vPoison:
				v = vPoison
			default:
				u, overlap := rp.sets.union(v, x)
				if overlap {
					var t1, t2 [2]uint64
					rp.opOnce(g, s, diag.DoubleReduce, "combines %s with %s (from %s), which share contributions",
						formatSet(rp.sets.view(v, &t1), c.n), formatSet(rp.sets.view(x, &t2), c.n), rp.locName(l+t))
					u = vPoison
				}
				v = u
			}
		}
		for _, l := range rp.dstLoc {
			rp.val[l+t] = v
			rp.wr[l+t] = node + 1
		}
		if info.sends {
			rp.fifo[rp.fifoTl[tb.outConn]] = v
			rp.fifoTl[tb.outConn]++
		}
	}
	if sem && (rp.sets.size() > MaxWork || rp.sets.full()) {
		rp.emit(diag.Limits, diag.Limits, diag.Error, -1, -1, -1, "the symbolic values grew past %d intervals; the postcondition is not checked", int64(MaxWork))
		rp.sem = false
	}
}

// opFlags caches the op-info bits the replay needs.
var opFlags = func() (f [ir.NumOpcodes]struct{ recvs, sends, data bool }) {
	for o := range ir.NumOpcodes {
		f[o].recvs, f[o].sends, f[o].data = o.Info().Recvs, o.Info().Sends, o.Info().Data
	}
	return
}()

// opOnce reports a diagnostic about step s of g once per Verify call.
func (rp *replayer) opOnce(g, s int32, code diag.Code, format string, args ...any) {
	tb := &rp.c.tbs[g]
	msg := fmt.Sprintf(format, args...)
	if rp.c.p.InPlace && rp.c.p.OutOfPlace {
		msg += fmt.Sprintf(" (%s)", rp.m.arrangement())
	}
	rp.emit(opKey{g, s, code}, code, diag.Error, int(tb.rank), int(tb.id), int(s), "%s", msg)
}

// read records a read of location l by node y (with itBit) = (yg, yi).
func (rp *replayer) read(l int, y, yg, yi int32) {
	if w := rp.lastW[l]; w > 0 {
		rp.check(l, w-1, true, y, false, yg, yi)
	}
	y1 := y + 1
	switch r := rp.rd[l]; {
	case r == 0:
		rp.rd[l] = y1
	case r == y1:
	case r > 0:
		rp.multi[l] = []int32{r - 1, y}
		rp.rd[l] = -1
	default:
		if ls := rp.multi[l]; ls[len(ls)-1] != y {
			rp.multi[l] = append(ls, y)
		}
	}
}

// write records a write of location l by node y. Checking it against the
// reads since the last write (or that write, if none) suffices: with the
// accesses in a topological order, the earlier ones were checked against
// each other when they happened.
func (rp *replayer) write(l int, y, yg, yi int32) {
	switch r := rp.rd[l]; {
	case r == 0:
		if w := rp.lastW[l]; w > 0 {
			rp.check(l, w-1, true, y, true, yg, yi)
		}
	case r > 0:
		rp.check(l, r-1, false, y, true, yg, yi)
	default:
		for _, x := range rp.multi[l] {
			rp.check(l, x, false, y, true, yg, yi)
		}
		delete(rp.multi, l)
	}
	rp.lastW[l], rp.rd[l] = y+1, 0
}

// check reports a race unless x (an earlier access, with itBit) happens
// before y.
func (rp *replayer) check(l int, x int32, xw bool, y int32, yw bool, yg, yi int32) {
	if x == y || !rp.raceOn {
		return
	}
	xit, yit := x&itBit != 0, y&itBit != 0
	c := rp.c
	code := diag.Race
	switch {
	case xit != yit:
		if c.launchIters() && c.tbs[c.tbOfNode(x&^itBit)].rank == c.tbs[yg].rank {
			return // one rank's launches run in order: the kernel boundary orders them
		}
		code = diag.RaceAcrossLaunch
	case yit:
		return // iteration 1 repeats iteration 0's races
	}
	xn := x &^ itBit
	if c.ordered(rp.hs, xn, yg, yi) {
		return
	}
	xg := c.tbOfNode(xn)
	xi := xn - c.tbs[xg].base()
	xt, yt := &c.tbs[xg], &c.tbs[yg]
	k := raceKey{xg, xi % xt.nops, yg, yi % yt.nops, code}
	verb := func(w bool) string {
		if w {
			return "writes"
		}
		return "reads"
	}
	where := rp.locName(l)
	if code == diag.Race {
		rp.emit(k, code, diag.Error, int(yt.rank), int(yt.id), int(yi%yt.nops),
			"data race on %s (%s): %s %s it and %s %s it, and no chain of signals, waits, dependencies or barriers orders them",
			where, rp.m.arrangement(), c.nodeName(xg, xi), verb(xw), c.nodeName(yg, yi), verb(yw))
	} else {
		what := "a handshake at the start of the schedule, or a launch fence in the runtime"
		if c.p.Protocol != ir.LL {
			what = "a credit (wait for the reader's signal) before reusing it"
		}
		rp.emit(k, code, diag.Warning, int(yt.rank), int(yt.id), int(yi%yt.nops),
			"race between one %s and the next on %s (%s): %s %s it and %s %s it, and nothing orders them; add %s",
			c.iterWord(), where, rp.m.arrangement(), c.nodeName(xg, xi), verb(xw), c.nodeName(yg, yi), verb(yw), what)
	}
	// Stop looking once neither more errors nor more TS0206 warnings could
	// be shown.
	if c.rep.nerr+rp.counts[diag.Race] >= c.rep.max && rp.counts[diag.RaceAcrossLaunch] >= c.rep.max {
		rp.raceOn = false
		if !rp.sem {
			rp.stop = true
		}
	}
}

// locName describes storage location l, e.g. "rank 2's output chunk 5".
func (rp *replayer) locName(l int) string {
	i := sort.Search(len(rp.regEnd), func(i int) bool { return rp.regEnd[i] > l })
	if i >= len(rp.regEnd) {
		return fmt.Sprintf("location %d", l)
	}
	r, k := i/int(ir.NumBufKinds), ir.BufKind(i%int(ir.NumBufKinds))
	return fmt.Sprintf("rank %d's %s chunk %d", r, k.LongName(), l-rp.regBase[i])
}

// postcondition checks ir.md §6's postcondition on every rank's output and
// reports the first wrong chunk of each rank (once per rank over all
// arrangements).
func (rp *replayer) postcondition() {
	c := rp.c
	if c.p.Collective == ir.Custom {
		return
	}
	n := uint64(c.n)
	C := uint64(c.C)
	root := uint64(max(c.root, 0))
	for r := 0; r < c.n; r++ {
		if !c.exists[r][ir.Output] {
			continue
		}
		ur := uint64(r)
		outBase := rp.aliasLoc[r*int(ir.NumBufKinds)+int(ir.Output)]
		wrong, first := 0, int64(-1)
		var firstWant [2]uint64
		for k := int64(0); k < c.size[r][ir.Output]; k++ {
			uk := uint64(k)
			var lo, hi uint64
			switch c.p.Collective {
			case ir.AllReduce, ir.Reduce:
				lo, hi = uk*n, uk*n+n
			case ir.AllGather, ir.Gather:
				lo = (uk%C)*n + uk/C
			case ir.ReduceScatter:
				lo, hi = (ur*C+uk)*n, (ur*C+uk)*n+n
			case ir.AllToAll:
				lo = (ur*C+uk%C)*n + uk/C
			case ir.Broadcast:
				lo = uk*n + root
			case ir.Scatter:
				lo = (ur*C+uk)*n + root
			case ir.SendRecv:
				lo = uk*n + (ur+n-1)%n
			}
			if hi == 0 {
				hi = lo + 1
			}
			v := rp.val[outBase+int(k)]
			if v == vPoison || rp.sets.equal(v, lo, hi) {
				continue
			}
			if wrong == 0 {
				first, firstWant = k, [2]uint64{lo, hi}
			}
			wrong++
		}
		if wrong == 0 {
			continue
		}
		l := outBase + int(first)
		v := rp.val[l]
		holds := "nothing (never written)"
		if v != vUndef {
			var t [2]uint64
			holds = formatSet(rp.sets.view(v, &t), c.n)
		}
		more := ""
		if wrong > 1 {
			more = fmt.Sprintf("; %d of its %d output chunks are wrong", wrong, c.size[r][ir.Output])
		}
		arr := ""
		if c.p.InPlace && c.p.OutOfPlace {
			arr = " (" + rp.m.arrangement() + ")"
		}
		want := formatSet(firstWant[:], c.n)
		if w := rp.wr[l] - 1; w >= 0 {
			g := c.tbOfNode(w)
			tb := &c.tbs[g]
			s := (w - tb.base()) % tb.nops
			rp.emit(postKey(r), diag.Postcondition, diag.Error, int(tb.rank), int(tb.id), int(s),
				"%v: rank %d output chunk %d holds %s, want %s; last written by %s%s%s",
				c.p.Collective, r, first, holds, want, c.opName(int(tb.rank), int(tb.id), int(s)), more, arr)
		} else {
			if v != vUndef {
				holds += " (its input, never written)"
			}
			rp.emit(postKey(r), diag.Postcondition, diag.Error, r, -1, -1, "%v: rank %d output chunk %d holds %s, want %s; no op writes it%s%s",
				c.p.Collective, r, first, holds, want, more, arr)
		}
	}
}
