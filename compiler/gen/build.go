package gen

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
)

// MaxOps bounds the ops of one generated program (about 150 bytes each in
// memory); Generate and Check refuse larger requests with ErrOptions
// instead of exhausting memory. A 2048-rank ring allreduce (8.4 M ops)
// fits. For the all-pairs oneshot, whose every op lists all n ranks, the
// estimate counts each listed ref as an op, so it serves at most 2046
// ranks (at one channel).
const MaxOps = 1 << 23

// Executor limits the generated programs respect (the verifier's TS0110
// limits, docs/design/ir.md): threadblocks per rank (one resident CUDA
// block each) and transfer-level channel indices (0..31, as in MSCCL XML).
// Generate returns ErrOptions rather than a program over them.
const (
	MaxThreadblocks     = 128
	MaxTransferChannels = 32
	// MaxChannelEnds bounds the channel ends (ir.Channel) of one rank, the
	// verifier's per-rank limit (compiler/verify.MaxChannels). Check
	// refuses oneshot, pull and push, which open channels*(nranks-1) of
	// them on every rank (push: on the root of gather and scatter), over it.
	MaxChannelEnds = 4096
)

// gen is the state of one Generate call: the program under construction,
// per-rank threadblock and lane bookkeeping, and the relay set.
type gen struct {
	a     *Algorithm
	o     Options
	n, K  int
	coll  ir.Collective
	root  int    // Program.Root for rooted collectives, -1 otherwise
	order []int  // Options.Order or the identity
	avoid []bool // indexed by rank
	p     *ir.Program
	rs    []rankState
	relay []bool
	slab  []ir.Ref
	err   error
}

type tbKey struct{ send, recv, lane int }

type rankState struct {
	tbs     map[tbKey]int
	sendOn  map[[2]int]int // (peer, chan) -> tb
	recvOn  map[[2]int]int
	lanes   map[int]*laneState
	scratch int64 // chunks of scratch the rank's ops use
}

// laneState serialises the ops of one lane of one rank: every op emitted
// with seq waits (a dependency) for the previous op of its lane when that
// op ran in another threadblock.
type laneState struct {
	tb, step int
	// par lists ops emitted with par since the last seq op: they depend on
	// it, not on each other, and the next seq op depends on all of them.
	par    []ir.Dep
	scrTBs map[int]bool // threadblocks that access local scratch
	scrW   map[int]bool // threadblocks that write local scratch
}

// checkGen validates o for algorithm a and returns the generator state
// without its program; full fills in the order and avoid tables (Check
// does without them, and allocates nothing per rank).
func checkGen(a *Algorithm, o Options, full bool) (*gen, error) {
	n := o.NRanks
	if n < 1 || n > ir.MaxRanks {
		return nil, fmt.Errorf("%w: nranks %d out of range [1,%d]", ErrOptions, n, ir.MaxRanks)
	}
	if o.Protocol >= ir.NumProtocols {
		return nil, fmt.Errorf("%w: unknown protocol %v", ErrOptions, o.Protocol)
	}
	if o.Collective >= ir.NumCollectives {
		return nil, fmt.Errorf("%w: unknown collective %v", ErrOptions, o.Collective)
	}
	K := o.Channels
	if K == 0 {
		K = 1
	}
	if K < 1 || K > MaxChannels {
		return nil, fmt.Errorf("%w: channels %d out of range [1,%d]", ErrOptions, o.Channels, MaxChannels)
	}
	if o.NLocalRanks < 0 || o.NLocalRanks > n || (o.NLocalRanks > 0 && n%o.NLocalRanks != 0) {
		return nil, fmt.Errorf("%w: nlocalranks %d must be in [1,%d] and divide nranks %d", ErrOptions, o.NLocalRanks, n, n)
	}
	root := -1
	if o.Collective.Rooted() {
		if o.Root < 0 || o.Root >= n {
			return nil, fmt.Errorf("%w: root %d out of range [0,%d)", ErrOptions, o.Root, n)
		}
		root = o.Root
	} else if o.Root != 0 {
		return nil, fmt.Errorf("%w: root %d given for non-rooted collective %v", ErrOptions, o.Root, o.Collective)
	}
	var order []int
	if full {
		order = make([]int, n)
	}
	if o.Order != nil {
		if len(o.Order) != n {
			return nil, fmt.Errorf("%w: order has %d ranks, want %d", ErrOptions, len(o.Order), n)
		}
		seen := make([]bool, n)
		for i, r := range o.Order {
			if r < 0 || r >= n || seen[r] {
				return nil, fmt.Errorf("%w: order[%d] = %d: not a permutation of 0..%d", ErrOptions, i, r, n-1)
			}
			seen[r] = true
			if full {
				order[i] = r
			}
		}
	} else {
		for i := range order {
			order[i] = i
		}
	}
	var avoid []bool
	if full {
		avoid = make([]bool, n)
	}
	for i, r := range o.Avoid {
		if r < 0 || r >= n || slices.Contains(o.Avoid[:i], r) {
			return nil, fmt.Errorf("%w: avoid[%d] = %d: out of range or repeated", ErrOptions, i, r)
		}
		if full {
			avoid[r] = true
		}
	}
	g := &gen{a: a, o: o, n: n, K: K, coll: o.Collective, root: root, order: order, avoid: avoid}
	// direct's and twoshot's busiest rank has a threadblock per peer and
	// one of its own per lane (twoshot at 1000 ranks built 1.4 GB before
	// finding it out).
	if (a.Name == "direct" || a.Name == "twoshot") && n > 1 && int64(n)*int64(K) > MaxThreadblocks {
		alt := "pull (one node) and push serve any nranks"
		if a.Name == "twoshot" {
			alt = "oneshot and ring serve more ranks"
		}
		return nil, fmt.Errorf("%w: %s %v on %d ranks with %d channels needs %d threadblocks per rank (limit %d); %s",
			ErrOptions, a.Name, o.Collective, n, K, n*K, MaxThreadblocks, alt)
	}
	// pull and push: K lanes of min(nranks-1, pullTBs) threadblocks.
	if (a.Name == "pull" || a.Name == "push") && n > 1 && K*min(n-1, pullTBs) > MaxThreadblocks {
		return nil, fmt.Errorf("%w: %s %v on %d ranks with %d channels needs %d threadblocks per rank (limit %d); use fewer channels",
			ErrOptions, a.Name, o.Collective, n, K, K*min(n-1, pullTBs), MaxThreadblocks)
	}
	if (a.Name == "oneshot" || a.Name == "pull" || a.Name == "push") && int64(K)*int64(n-1) > MaxChannelEnds {
		return nil, fmt.Errorf("%w: %s %v on %d ranks with %d channels needs %d channel ends per rank (limit %d); use fewer channels or ranks",
			ErrOptions, a.Name, o.Collective, n, K, int64(K)*int64(n-1), MaxChannelEnds)
	}
	if est := g.estimate(); est > MaxOps {
		return nil, fmt.Errorf("%w: %s %v on %d ranks with %d channels would have about %d ops (limit %d)",
			ErrOptions, a.Name, o.Collective, n, K, est, MaxOps)
	}
	return g, nil
}

func newGen(a *Algorithm, o Options) (*gen, error) {
	g, err := checkGen(a, o, true)
	if err != nil {
		return nil, err
	}
	n := g.n
	g.p = &ir.Program{
		Collective: o.Collective,
		NRanks:     n,
		Root:       g.root,
		Protocol:   o.Protocol,
		InPlace:    true,
		OutOfPlace: true,
		Ranks:      make([]ir.Rank, n),
	}
	if o.NLocalRanks > 0 && o.NLocalRanks < n {
		// Several nodes: the program needs that shape, and its channels
		// between nodes are port channels (legalised transfers across nodes
		// are puts; docs/transport.md).
		g.p.NLocalRanks = o.NLocalRanks
	}
	g.rs = make([]rankState, n)
	g.relay = make([]bool, n)
	return g, nil
}

// estimate is an upper bound of the op count, to refuse absurd requests
// before allocating.
func (g *gen) estimate() int64 {
	n, K := int64(g.n), int64(g.K)
	lg := int64(1)
	for 1<<lg < n {
		lg++
	}
	switch g.a.Name {
	case "ring":
		if g.coll.Rooted() {
			return 4 * n * K
		}
		return 2 * n * n * K
	case "oneshot":
		// Six ops per rank and lane, but the copy lists n-1 refs and the
		// reduce n (LL), or the reduce n and the handshakes n-1 channels
		// each (Simple): count the refs.
		return 6*n*K + 2*n*n*K
	case "twoshot", "direct":
		return 5*n*n*K + 2*n*K
	case "rhd":
		if g.coll == ir.AllReduce {
			return n * K * (4*lg + 6)
		}
		return n*K*(4*lg+6) + n*n*K
	case "hier":
		return 3*n*n*K + 4*n*K
	case "pull", "push":
		if g.coll.Rooted() {
			// The root's copies and handshake lists: about 4(n-1) per lane.
			return 16 * n * K
		}
		return 2*n*n*K + 8*n*K
	}
	return 16 * n * K
}

// fail records the first internal error; generators check g.err at the end.
func (g *gen) fail(format string, args ...any) {
	if g.err == nil {
		g.err = fmt.Errorf("gen: internal error in %s: %s", g.a.Name, fmt.Sprintf(format, args...))
	}
}

// refs copies rs into the program's ref slab (one allocation per 4096 refs).
func (g *gen) refs(rs ...ir.Ref) []ir.Ref {
	if len(rs) == 0 {
		return nil
	}
	if len(g.slab) < len(rs) {
		g.slab = make([]ir.Ref, max(4096, len(rs)))
	}
	out := g.slab[:len(rs):len(rs)]
	copy(out, rs)
	g.slab = g.slab[len(rs):]
	return out
}

func in(off int64) ir.Ref  { return ir.Ref{Buf: ir.Input, Off: off, Chan: -1} }
func out(off int64) ir.Ref { return ir.Ref{Buf: ir.Output, Off: off, Chan: -1} }
func scr(off int64) ir.Ref { return ir.Ref{Buf: ir.Scratch, Off: off, Chan: -1} }

func mod(a, n int) int { return ((a % n) + n) % n }

// pidx numbers rank r's peers 0..n-2 in rank order, skipping r.
func pidx(r, p int) int {
	if p < r {
		return p
	}
	return p - 1
}

// tb returns the threadblock of rank r that sends to send and receives from
// recv (-1: none) on IR channel ch, for lane lane, creating it if needed.
// A rank may send on a (peer, channel) from one threadblock only, and
// receive on it in one only (ir.md §5.2); a conflict is an internal error.
func (g *gen) tb(r, lane, send, recv, ch int) int {
	rs := &g.rs[r]
	k := tbKey{send, recv, lane}
	if t, ok := rs.tbs[k]; ok {
		return t
	}
	if rs.tbs == nil {
		rs.tbs = map[tbKey]int{}
		rs.sendOn = map[[2]int]int{}
		rs.recvOn = map[[2]int]int{}
	}
	t := len(g.p.Ranks[r].TBs)
	if send >= 0 {
		if o, dup := rs.sendOn[[2]int{send, ch}]; dup {
			g.fail("rank %d: threadblocks %d and %d both send to %d on channel %d", r, o, t, send, ch)
		}
		rs.sendOn[[2]int{send, ch}] = t
	}
	if recv >= 0 {
		if o, dup := rs.recvOn[[2]int{recv, ch}]; dup {
			g.fail("rank %d: threadblocks %d and %d both receive from %d on channel %d", r, o, t, recv, ch)
		}
		rs.recvOn[[2]int{recv, ch}] = t
	}
	c := ch
	if send < 0 && recv < 0 {
		c = -1
	}
	g.p.Ranks[r].TBs = append(g.p.Ranks[r].TBs, ir.Threadblock{SendPeer: send, RecvPeer: recv, Chan: c})
	rs.tbs[k] = t
	return t
}

// reserve makes room for n more ops in threadblock t of rank r (a hint
// for large programs).
func (g *gen) reserve(r, t, n int) {
	tb := &g.p.Ranks[r].TBs[t]
	if cap(tb.Ops)-len(tb.Ops) < n {
		ops := make([]ir.Op, len(tb.Ops), len(tb.Ops)+n)
		copy(ops, tb.Ops)
		tb.Ops = ops
	}
}

// emit appends op to threadblock t of rank r and returns its step.
func (g *gen) emit(r, t int, op ir.Op) int {
	tb := &g.p.Ranks[r].TBs[t]
	tb.Ops = append(tb.Ops, op)
	rs := &g.rs[r]
	for _, x := range op.Srcs {
		if x.Buf == ir.Scratch && x.Chan < 0 {
			rs.scratch = max(rs.scratch, x.Off+op.Count)
		}
	}
	for _, x := range op.Dsts {
		if x.Buf == ir.Scratch && x.Chan < 0 {
			rs.scratch = max(rs.scratch, x.Off+op.Count)
		}
	}
	return len(tb.Ops) - 1
}

// pub marks step of threadblock t of rank r as publishing and returns the
// dependency on it.
func (g *gen) pub(r, t, step int) ir.Dep {
	g.p.Ranks[r].TBs[t].Ops[step].Publish = true
	return ir.Dep{TB: t, Step: step}
}

// seq emits op on threadblock t of rank r in lane lane, after the lane's
// previous op (and after every par op since): when that op ran in another
// threadblock, op depends on it.
func (g *gen) seq(r, lane, t int, op ir.Op) int {
	ls := g.lane(r, lane)
	if ls.tb >= 0 && ls.tb != t {
		op.Deps = append(op.Deps, g.pub(r, ls.tb, ls.step))
	}
	for _, d := range ls.par {
		if d.TB != t {
			op.Deps = append(op.Deps, g.pub(r, d.TB, d.Step))
		}
	}
	step := g.emit(r, t, op)
	ls.tb, ls.step, ls.par = t, step, ls.par[:0]
	ls.track(t, op)
	return step
}

// par emits op on threadblock t of rank r in lane lane after the lane's
// last seq op but in parallel with the other par ops that follow it (for
// example sends of the same result to several children). The ops of one
// par group must not touch storage another of them writes, and t must not
// be the threadblock of the last seq op or of another op of the group.
func (g *gen) par(r, lane, t int, op ir.Op) int {
	ls := g.lane(r, lane)
	if ls.tb == t {
		g.fail("rank %d lane %d: par op in the threadblock of its anchor", r, lane)
	}
	for _, d := range ls.par {
		if d.TB == t {
			g.fail("rank %d lane %d: two par ops in threadblock %d", r, lane, t)
		}
	}
	if ls.tb >= 0 {
		op.Deps = append(op.Deps, g.pub(r, ls.tb, ls.step))
	}
	step := g.emit(r, t, op)
	ls.par = append(ls.par, ir.Dep{TB: t, Step: step})
	ls.track(t, op)
	return step
}

func (g *gen) lane(r, lane int) *laneState {
	rs := &g.rs[r]
	if rs.lanes == nil {
		rs.lanes = map[int]*laneState{}
	}
	ls := rs.lanes[lane]
	if ls == nil {
		ls = &laneState{tb: -1}
		rs.lanes[lane] = ls
	}
	return ls
}

// track records local scratch accesses of op in threadblock t.
func (ls *laneState) track(t int, op ir.Op) {
	for _, x := range op.Srcs {
		if x.Buf == ir.Scratch && x.Chan < 0 {
			ls.markScratch(t, false)
		}
	}
	for _, x := range op.Dsts {
		if x.Buf == ir.Scratch && x.Chan < 0 {
			ls.markScratch(t, true)
		}
	}
}

func (ls *laneState) markScratch(t int, write bool) {
	if ls.scrTBs == nil {
		ls.scrTBs = map[int]bool{}
		ls.scrW = map[int]bool{}
	}
	ls.scrTBs[t] = true
	if write {
		ls.scrW[t] = true
	}
}

// closeLanes makes every scratch-writing threadblock of a lane wait, at
// the end of each slice, for the lane's last op: the scratch is reused by
// the next slice (ir.md §4), and a writer must not overwrite a chunk in
// slice s+1 that another threadblock of its lane still reads in slice s.
func (g *gen) closeLanes() {
	for r := range g.rs {
		rs := &g.rs[r]
		lanes := make([]int, 0, len(rs.lanes))
		for l := range rs.lanes {
			lanes = append(lanes, l)
		}
		slices.Sort(lanes)
		for _, l := range lanes {
			ls := rs.lanes[l]
			if len(ls.scrTBs) < 2 {
				continue
			}
			ws := make([]int, 0, len(ls.scrW))
			for t := range ls.scrW {
				if t != ls.tb || len(ls.par) > 0 {
					ws = append(ws, t)
				}
			}
			slices.Sort(ws)
			for _, t := range ws {
				var deps []ir.Dep
				if ls.tb != t {
					deps = append(deps, g.pub(r, ls.tb, ls.step))
				}
				for _, d := range ls.par {
					if d.TB != t {
						deps = append(deps, g.pub(r, d.TB, d.Step))
					}
				}
				g.emit(r, t, ir.Op{Code: ir.OpNop, Deps: deps})
			}
		}
	}
}

// Op constructors (transfer and data ops of count c chunks).
func (g *gen) opSend(c int64, src ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpSend, Srcs: g.refs(src), Count: c}
}
func (g *gen) opRecv(c int64, dst ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpRecv, Dsts: g.refs(dst), Count: c}
}
func (g *gen) opRCS(c int64, dst ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpRecvCopySend, Dsts: g.refs(dst), Count: c}
}
func (g *gen) opRRS(c int64, src ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpRecvReduceSend, Srcs: g.refs(src), Count: c}
}
func (g *gen) opRRC(c int64, src, dst ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpRecvReduceCopy, Srcs: g.refs(src), Dsts: g.refs(dst), Count: c}
}
func (g *gen) opRRCS(c int64, src, dst ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpRecvReduceCopySend, Srcs: g.refs(src), Dsts: g.refs(dst), Count: c}
}
func (g *gen) opCopy(c int64, src ir.Ref, dsts ...ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpCopy, Srcs: g.refs(src), Dsts: g.refs(dsts...), Count: c}
}
func (g *gen) opReduce(c int64, srcs []ir.Ref, dsts ...ir.Ref) ir.Op {
	return ir.Op{Code: ir.OpReduce, Srcs: g.refs(srcs...), Dsts: g.refs(dsts...), Count: c}
}

// runs splits items (logical ids, in order) into maximal runs over which
// every location function advances by exactly one chunk of the same buffer,
// so that one op of count len(run) covers each run on every rank involved.
// Both ends of a transfer emit their ops from the same runs, so the counts
// pair.
func runs(items []int64, fns ...func(int64) ir.Ref) [][]int64 {
	if len(items) == 0 {
		return nil
	}
	var out [][]int64
	start := 0
	for i := 1; i < len(items); i++ {
		for _, f := range fns {
			a, b := f(items[i-1]), f(items[i])
			if a.Buf != b.Buf || a.Chan != b.Chan || a.Packet != b.Packet || b.Off != a.Off+1 {
				out = append(out, items[start:i])
				start = i
				break
			}
		}
	}
	return append(out, items[start:])
}

// trivial is the one-rank program: each lane copies its input chunk to its
// output chunk (a self-copy when in place).
func (g *gen) trivial() {
	g.p.ChunksPerBlock = int64(g.K)
	for k := 0; k < g.K; k++ {
		t := g.tb(0, k, -1, -1, k)
		g.seq(0, k, t, g.opCopy(1, in(int64(k)), out(int64(k))))
	}
}

// finish closes lanes, checks the avoid list, declares buffer sizes and
// names the program.
func (g *gen) finish() error {
	if g.err != nil {
		return g.err
	}
	g.closeLanes()
	var bad []string
	for r := 0; r < g.n; r++ {
		if g.avoid[r] && g.relay[r] {
			bad = append(bad, strconv.Itoa(r))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s %v on %d ranks relays through avoided rank(s) %s (%s)",
			ErrAvoid, g.a.Name, g.coll, g.n, strings.Join(bad, ","), g.a.Constraints)
	}
	p := g.p
	for r := range p.Ranks {
		if nt := len(p.Ranks[r].TBs); nt > MaxThreadblocks {
			return fmt.Errorf("%w: %s %v on %d ranks with %d channels needs %d threadblocks on rank %d (limit %d); use fewer channels",
				ErrOptions, g.a.Name, g.coll, g.n, g.K, nt, r, MaxThreadblocks)
		}
		for t := range p.Ranks[r].TBs {
			if c := p.Ranks[r].TBs[t].Chan; c >= MaxTransferChannels {
				return fmt.Errorf("%w: %s with %d channels uses transfer channel %d (limit %d); use fewer channels",
					ErrOptions, g.a.Name, g.K, c, MaxTransferChannels-1)
			}
		}
	}
	if p.ChunksPerBlock < 1 {
		return fmt.Errorf("gen: internal error in %s: chunks per block not set", g.a.Name)
	}
	root := max(g.root, 0)
	for r := range p.Ranks {
		in := ir.Blocks(g.coll, ir.Input, g.n, r, root) * p.ChunksPerBlock
		outc := ir.Blocks(g.coll, ir.Output, g.n, r, root) * p.ChunksPerBlock
		p.Ranks[r].Chunks = [ir.NumBufKinds]int64{in, outc, g.rs[r].scratch}
	}
	if p.Protocol == ir.LL {
		p.SliceBytes = 0
	}
	name := g.o.Name
	if name == "" {
		name = fmt.Sprintf("%s_%v_n%d", g.a.Name, g.coll, g.n)
		if p.NLocalRanks > 0 {
			name += fmt.Sprintf("_l%d", p.NLocalRanks)
		}
		name += fmt.Sprintf("_k%d_%v", g.K, p.Protocol)
		if g.root >= 0 {
			name += fmt.Sprintf("_root%d", g.root)
		}
	}
	p.Name = name
	p.Meta = map[string]string{
		"generator": "theseus/compiler/gen",
		"algorithm": g.a.Name,
		"channels":  strconv.Itoa(g.K),
	}
	if len(g.o.Avoid) > 0 {
		p.Meta["avoid"] = joinInts(g.o.Avoid)
	}
	if g.o.Order != nil && g.a.UsesOrder {
		p.Meta["order"] = joinInts(g.o.Order)
	}
	return nil
}

func joinInts(a []int) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}
