package irtest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
)

// This file is the test oracle that the irtest fixtures, the JSON importer,
// the legaliser and the generators share: a symbolic executor of programs of
// either level (docs/design/ir.md §5, §6). A chunk's value is a multiset of
// contributions (launch, slice, rank, input chunk), so a scratch slot reused
// too early, a read of a stale slice, a contribution reduced twice or a
// missing one all show up as wrong output values. It finds ordering bugs
// only on the interleavings it tries; proving their absence is the
// verifier's job.

// ErrPostcondition is wrapped by Simulate's error when the program ran to
// the end but an output chunk differs from the collective's postcondition.
var ErrPostcondition = errors.New("postcondition")

// Schedule is how Simulate interleaves the threadblocks of all ranks.
type Schedule int

const (
	// RoundRobin is deterministic: each sweep visits rank 0's threadblocks
	// in order, then rank 1's, and so on, running one op of every
	// threadblock that can run. Seed is ignored.
	RoundRobin Schedule = iota
	// RandomBursts visits every threadblock in a random order each round
	// and runs 1 to 3 ops of each (coarse interleavings, cheap).
	RandomBursts
	// RandomSteps runs one op at a time, of a threadblock picked at random
	// among those that can run (fine interleavings, slower).
	RandomSteps
)

// SimOptions configures one Simulate run.
type SimOptions struct {
	// InPlace selects the in-place buffer arrangement (NCCL semantics,
	// ir.md "In place"); false is out-of-place.
	InPlace bool
	// Slices is the number of pipeline slices per launch (>= 0; 0 means 1).
	// LL programs always run one slice, as the runtime never slices them.
	Slices int
	// Launches is the number of consecutive launches (>= 0; 0 means 1).
	// Scratch, semaphores and dependency counters persist across launches
	// and LL launches alternate scratch halves (ir.md §5.4).
	Launches int
	// Schedule picks the interleaving; Seed seeds the random ones. A given
	// (Schedule, Seed) always gives the same interleaving of a program.
	Schedule Schedule
	Seed     uint64
}

// Contrib is one input chunk's contribution to a symbolic value: input
// chunk Chunk (a logical chunk index of the input buffer, in chunks) of
// rank Rank, in slice Slice of launch Launch.
type Contrib struct {
	Launch, Slice, Rank int
	Chunk               int64
}

// Value is a symbolic chunk value: how many times each contribution was
// combined into it. Values that Simulate returns share storage with each
// other and must not be modified.
type Value map[Contrib]int

// String prints v as {L<launch>S<slice>:r<rank>.<chunk> ...}, sorted, with
// xN after a contribution combined N > 1 times; a nil Value (a chunk never
// written) prints as <undefined>.
func (v Value) String() string {
	if v == nil {
		return "<undefined>"
	}
	parts := make([]string, 0, len(v))
	for k, c := range v {
		x := fmt.Sprintf("L%dS%d:r%d.%d", k.Launch, k.Slice, k.Rank, k.Chunk)
		if c != 1 {
			x += fmt.Sprintf("x%d", c)
		}
		parts = append(parts, x)
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, " ") + "}"
}

func (v Value) equal(w Value) bool {
	if len(v) != len(w) || (v == nil) != (w == nil) {
		return false
	}
	for k, c := range v {
		if w[k] != c {
			return false
		}
	}
	return true
}

// OutputKey names output chunk Chunk (a logical chunk index of the output
// buffer) of rank Rank after slice Slice of launch Launch.
type OutputKey struct {
	Rank, Launch, Slice int
	Chunk               int64
}

// Result is what a Simulate run computed.
type Result struct {
	// Outputs holds the final value of every output chunk that was
	// written, for every rank, launch and slice; unwritten chunks are
	// absent.
	Outputs map[OutputKey]Value
}

// Output returns output chunks [0, n) of rank after slice of launch, nil
// for unwritten ones.
func (r Result) Output(rank, launch, slice int, n int64) []Value {
	out := make([]Value, 0, max(n, 0))
	for c := int64(0); c < n; c++ {
		out = append(out, r.Outputs[OutputKey{rank, launch, slice, c}])
	}
	return out
}

// Arrangements returns the in-place flags of the buffer arrangements p
// declares, out-of-place (false) first: the values to try for
// SimOptions.InPlace.
func Arrangements(p *ir.Program) []bool {
	var a []bool
	if p.OutOfPlace {
		a = append(a, false)
	}
	if p.InPlace {
		a = append(a, true)
	}
	return a
}

// Simulate runs program p symbolically under opts: every launch and slice
// of every threadblock of every rank, interleaved as opts.Schedule says,
// honouring transfer FIFOs (per sender, receiver and channel), semaphores
// (signal/wait with each end's Init), dependencies and Publish, barriers,
// LL packet flags and scratch halves, and the rule that a rank starts a
// launch only when all its threadblocks finished the previous one. Input
// chunk j of rank r in slice s of launch l starts as {(l, s, r, j)}.
//
// It returns the output values and an error for the first problem found: a
// malformed program (a ref, channel, dependency or peer out of range; a
// header that does not match the ranks), an op it cannot run, a read of an
// undefined chunk, a packet slot written twice in one launch, a transfer
// count mismatch, a barrier with more arrivals than it declares, a stuck
// program (the message starts "stuck"), unreceived transfers, unbalanced
// semaphores, or a wrong output (ErrPostcondition, wrapped; the
// postconditions are ir.md §6's, checked for every rank, launch and slice;
// custom collectives have none). Outputs are filled in whenever the program
// ran to the end, including on a postcondition error.
func Simulate(p *ir.Program, opts SimOptions) (Result, error) {
	s, err := newSim(p, opts)
	if err != nil {
		return Result{}, err
	}
	if err := s.run(); err != nil {
		return Result{}, err
	}
	res := Result{Outputs: map[OutputKey]Value{}}
	for r := range s.n {
		for l := range s.launches {
			for sl := range s.slices {
				for k := int64(0); k < s.size(r, ir.Output); k++ {
					b, c := s.pl.Resolve(r, ir.Output, k)
					if v, ok := s.user[userKey{r, l, sl, b, c}]; ok {
						res.Outputs[OutputKey{r, l, sl, k}] = v
					}
				}
			}
		}
	}
	return res, s.check(res)
}

type userKey struct {
	rank, l, s int
	buf        ir.BufKind
	chunk      int64
}

type scratchKey struct {
	rank, half int
	chunk      int64
}

type scratchCell struct {
	v    Value
	flag int // launch+1 of the last packet write; 0 = never
}

type connKey struct{ from, to, ch int }

type barrierKey struct {
	rank, id, l, s, occurrence int
}

type tbState struct {
	l, s, pc int
	arrived  bool // at the barrier at pc
	done     bool
}

type sim struct {
	p                 *ir.Program
	pl                ir.Placement
	n                 int
	root              int
	slices, launches  int
	schedule          Schedule
	seed              uint64
	user              map[userKey]Value
	scratch           map[scratchKey]*scratchCell
	queues            map[connKey][][]Value
	barriers          map[barrierKey]int
	inbound, expected [][]int64
	published         [][]int64 // the highest completion counter of each threadblock
	tbs               [][]tbState
	srcBuf            []Value
}

func newSim(p *ir.Program, opts SimOptions) (*sim, error) {
	if p == nil {
		return nil, fmt.Errorf("bad header: nil program")
	}
	n := len(p.Ranks)
	if p.NRanks != n || p.ChunksPerBlock < 1 {
		return nil, fmt.Errorf("bad header: nranks %d with %d ranks, chunks per block %d", p.NRanks, n, p.ChunksPerBlock)
	}
	if opts.Slices < 0 || opts.Launches < 0 {
		return nil, fmt.Errorf("negative slices %d or launches %d", opts.Slices, opts.Launches)
	}
	if opts.Schedule < RoundRobin || opts.Schedule > RandomSteps {
		return nil, fmt.Errorf("unknown schedule %d", opts.Schedule)
	}
	s := &sim{p: p, n: n, root: max(p.Root, 0),
		slices: max(opts.Slices, 1), launches: max(opts.Launches, 1),
		schedule: opts.Schedule, seed: opts.Seed,
		pl: ir.Placement{Collective: p.Collective, NRanks: n, ChunksPerBlock: p.ChunksPerBlock,
			ProgRoot: p.Root, Root: p.Root, InPlace: opts.InPlace},
		user: map[userKey]Value{}, scratch: map[scratchKey]*scratchCell{},
		queues: map[connKey][][]Value{}, barriers: map[barrierKey]int{},
	}
	if p.Protocol == ir.LL {
		s.slices = 1
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	for r := range n {
		rk := &p.Ranks[r]
		in := make([]int64, len(rk.Channels))
		for c, ch := range rk.Channels {
			in[c] = ch.Init
		}
		s.inbound = append(s.inbound, in)
		s.expected = append(s.expected, make([]int64, len(rk.Channels)))
		s.published = append(s.published, make([]int64, len(rk.TBs)))
		s.tbs = append(s.tbs, make([]tbState, len(rk.TBs)))
		for t := range rk.TBs {
			if len(rk.TBs[t].Ops) == 0 {
				s.tbs[r][t].done = true
			}
		}
		for l := range s.launches {
			for sl := range s.slices {
				for j := int64(0); j < s.size(r, ir.Input); j++ {
					b, c := s.pl.Resolve(r, ir.Input, j)
					s.user[userKey{r, l, sl, b, c}] = Value{{l, sl, r, j}: 1}
				}
			}
		}
	}
	return s, nil
}

// size is the number of chunks of logical buffer k of rank r: the
// collective's blocks times ChunksPerBlock for input and output (the
// declared chunks for custom collectives), the declared chunks for scratch.
func (s *sim) size(r int, k ir.BufKind) int64 {
	if k == ir.Scratch {
		return s.p.Ranks[r].Chunks[ir.Scratch]
	}
	if b := ir.Blocks(s.p.Collective, k, s.n, r, s.root); b >= 0 {
		return b * s.p.ChunksPerBlock
	}
	return s.p.Ranks[r].Chunks[k]
}

// validate checks every index the run would follow, so that a malformed
// program is an error rather than a panic.
func (s *sim) validate() error {
	p := s.p
	for r := range p.Ranks {
		rk := &p.Ranks[r]
		for c, ch := range rk.Channels {
			if ch.Peer < 0 || ch.Peer >= s.n || ch.PeerChannel < 0 || ch.PeerChannel >= len(p.Ranks[ch.Peer].Channels) {
				return fmt.Errorf("rank %d: channel %d goes to rank %d channel %d, out of range", r, c, ch.Peer, ch.PeerChannel)
			}
		}
		for t := range rk.TBs {
			tb := &rk.TBs[t]
			for i := range tb.Ops {
				if err := s.validateOp(r, tb, &tb.Ops[i]); err != nil {
					return fmt.Errorf("rank %d tb %d step %d: %w", r, t, i, err)
				}
			}
		}
	}
	return nil
}

// maxCount bounds an op's chunk count, so that a malformed count is an
// error rather than a huge allocation.
const maxCount = 1 << 24

func (s *sim) validateOp(r int, tb *ir.Threadblock, op *ir.Op) error {
	rk := &s.p.Ranks[r]
	info := op.Code.Info()
	if !op.Code.Valid() {
		return fmt.Errorf("the simulator does not run %v", op.Code)
	}
	if info.Data && (op.Count < 1 || op.Count > maxCount) {
		return fmt.Errorf("%v of %d chunks (1 to %d)", op.Code, op.Count, maxCount)
	}
	if info.Recvs && (tb.RecvPeer < 0 || tb.RecvPeer >= s.n) {
		return fmt.Errorf("%v from rank %d, out of range", op.Code, tb.RecvPeer)
	}
	if info.Sends && (tb.SendPeer < 0 || tb.SendPeer >= s.n) {
		return fmt.Errorf("%v to rank %d, out of range", op.Code, tb.SendPeer)
	}
	for _, refs := range [][]ir.Ref{op.Srcs, op.Dsts} {
		for _, ref := range refs {
			if ref.Chan < -1 || ref.Chan >= len(rk.Channels) {
				return fmt.Errorf("channel %d out of range", ref.Chan)
			}
			if ref.Buf >= ir.NumBufKinds {
				return fmt.Errorf("buffer %v out of range", ref.Buf)
			}
			q := s.peer(r, ref)
			if n := s.size(q, ref.Buf); ref.Off < 0 || ref.Off > n-max(op.Count, 1) {
				bad := ref.Off
				if bad >= 0 && bad < n {
					bad = n // the first chunk past the end
				}
				return fmt.Errorf("%v chunk %d of rank %d out of range (%d chunks)", ref.Buf, bad, q, n)
			}
		}
	}
	for _, c := range op.Chans {
		if c < 0 || c >= len(rk.Channels) {
			return fmt.Errorf("channel %d out of range", c)
		}
	}
	for _, d := range op.Deps {
		if d.TB < 0 || d.TB >= len(rk.TBs) {
			return fmt.Errorf("dependency on tb %d, out of range", d.TB)
		}
	}
	if op.Code == ir.OpBarrier && op.BarrierTBs < 1 {
		return fmt.Errorf("barrier %d of %d threadblocks", op.Barrier, op.BarrierTBs)
	}
	return nil
}

func (s *sim) run() error {
	type ref struct{ r, t int }
	var all []ref
	for r := range s.p.Ranks {
		for t := range s.p.Ranks[r].TBs {
			all = append(all, ref{r, t})
		}
	}
	var rng *rand.Rand
	switch s.schedule {
	case RandomBursts:
		rng = rand.New(rand.NewPCG(s.seed, 99))
	case RandomSteps:
		rng = rand.New(rand.NewPCG(s.seed, 7))
	}
	for {
		if rng != nil {
			rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		}
		progressed, live := false, false
		for _, x := range all {
			st := &s.tbs[x.r][x.t]
			if st.done {
				continue
			}
			live = true
			burst := 1
			if s.schedule == RandomBursts {
				burst = rng.IntN(3) + 1
			}
			for ; burst > 0 && !st.done; burst-- {
				ok, err := s.step(x.r, x.t)
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				progressed = true
			}
			if progressed && s.schedule == RandomSteps {
				break
			}
		}
		if !live {
			break
		}
		if !progressed {
			var stuck []string
			for r := range s.tbs {
				for t, st := range s.tbs[r] {
					if !st.done && len(stuck) < 6 {
						stuck = append(stuck, fmt.Sprintf("rank %d tb %d launch %d slice %d step %d (%v)", r, t, st.l, st.s, st.pc, s.p.Ranks[r].TBs[t].Ops[st.pc].Code))
					}
				}
			}
			return fmt.Errorf("stuck (deadlock): %s", strings.Join(stuck, "; "))
		}
	}
	for k, q := range s.queues {
		if len(q) != 0 {
			return fmt.Errorf("connection rank %d -> rank %d channel %d has %d unreceived transfers", k.from, k.to, k.ch, len(q))
		}
	}
	for r := range s.p.Ranks {
		for c, ch := range s.p.Ranks[r].Channels {
			if s.inbound[r][c] != s.expected[r][c]+ch.Init {
				return fmt.Errorf("rank %d channel %d unbalanced: inbound %d, expected %d, init %d", r, c, s.inbound[r][c], s.expected[r][c], ch.Init)
			}
		}
	}
	return nil
}

func (s *sim) peer(r int, ref ir.Ref) int {
	if ref.Chan < 0 {
		return r
	}
	return s.p.Ranks[r].Channels[ref.Chan].Peer
}

// half is the LL scratch half of launch l (ir.md §5.4).
func (s *sim) half(l int) int {
	if s.p.Protocol == ir.LL {
		return l % 2
	}
	return 0
}

// read returns chunk i of ref, or ok=false when a packet read must still
// wait for its flag.
func (s *sim) read(r int, st *tbState, ref ir.Ref, i int64) (Value, bool, error) {
	rr := s.peer(r, ref)
	if ref.Buf == ir.Scratch {
		c := s.scratch[scratchKey{rr, s.half(st.l), ref.Off + i}]
		if ref.Packet && (c == nil || c.flag != st.l+1) {
			return nil, false, nil
		}
		if c == nil || c.v == nil {
			return nil, false, fmt.Errorf("rank %d reads undefined scratch chunk %d of rank %d", r, ref.Off+i, rr)
		}
		return c.v, true, nil
	}
	b, c := s.pl.Resolve(rr, ref.Buf, ref.Off+i)
	v, ok := s.user[userKey{rr, st.l, st.s, b, c}]
	if !ok {
		return nil, false, fmt.Errorf("rank %d launch %d slice %d reads undefined %v chunk %d of rank %d", r, st.l, st.s, b, c, rr)
	}
	return v, true, nil
}

func (s *sim) write(r int, st *tbState, ref ir.Ref, i int64, v Value) error {
	rr := s.peer(r, ref)
	if ref.Buf == ir.Scratch {
		k := scratchKey{rr, s.half(st.l), ref.Off + i}
		c := s.scratch[k]
		if c == nil {
			c = &scratchCell{}
			s.scratch[k] = c
		}
		if ref.Packet {
			if c.flag == st.l+1 {
				return fmt.Errorf("rank %d writes packet slot %d of rank %d twice in launch %d", r, ref.Off+i, rr, st.l)
			}
			c.flag = st.l + 1
		}
		c.v = v
		return nil
	}
	b, c := s.pl.Resolve(rr, ref.Buf, ref.Off+i)
	s.user[userKey{rr, st.l, st.s, b, c}] = v
	return nil
}

// step runs the next op of threadblock t of rank r if it can run, and
// reports whether it did anything.
func (s *sim) step(r, t int) (bool, error) {
	st := &s.tbs[r][t]
	tbs := s.p.Ranks[r].TBs
	tb := &tbs[t]
	ops := tb.Ops
	// A rank starts a launch only when all its threadblocks finished the
	// previous one.
	if st.pc == 0 && st.s == 0 && st.l > 0 {
		for _, o := range s.tbs[r] {
			if !o.done && o.l < st.l {
				return false, nil
			}
		}
	}
	op := &ops[st.pc]
	info := op.Code.Info()
	epoch := int64(st.l*s.slices + st.s)
	for _, d := range op.Deps {
		if s.published[r][d.TB] < epoch*int64(len(tbs[d.TB].Ops))+int64(d.Step)+1 {
			return false, nil
		}
	}
	// Everything that can block is checked before anything changes.
	var in connKey
	if info.Recvs {
		in = connKey{tb.RecvPeer, r, tb.Chan}
		if len(s.queues[in]) == 0 {
			return false, nil
		}
	}
	switch op.Code {
	case ir.OpWait:
		for _, c := range op.Chans {
			if s.inbound[r][c] < s.expected[r][c]+1 {
				return false, nil
			}
		}
	case ir.OpBarrier:
		k := barrierKey{r, op.Barrier, st.l, st.s, 0}
		for _, o := range ops[:st.pc] {
			if o.Code == ir.OpBarrier && o.Barrier == op.Barrier {
				k.occurrence++
			}
		}
		if !st.arrived {
			st.arrived = true
			s.barriers[k]++
			if s.barriers[k] > op.BarrierTBs {
				return false, fmt.Errorf("rank %d tb %d step %d: %d threadblocks arrive at barrier %d of %d", r, t, st.pc, s.barriers[k], op.Barrier, op.BarrierTBs)
			}
			return true, nil
		}
		if s.barriers[k] < op.BarrierTBs {
			return false, nil
		}
		st.arrived = false
	}
	var vals []Value
	if info.Data {
		vals = make([]Value, op.Count)
		for i := range op.Count {
			srcs := s.srcBuf[:0]
			for _, src := range op.Srcs {
				x, ok, err := s.read(r, st, src, i)
				if err != nil {
					return false, fmt.Errorf("tb %d step %d: %w", t, st.pc, err)
				}
				if !ok {
					return false, nil
				}
				srcs = append(srcs, x)
			}
			s.srcBuf = srcs
			vals[i] = combine(srcs)
		}
	}
	if info.Recvs {
		got := s.queues[in][0]
		if int64(len(got)) != op.Count {
			return false, fmt.Errorf("rank %d tb %d step %d: received %d chunks, want %d", r, t, st.pc, len(got), op.Count)
		}
		s.queues[in] = s.queues[in][1:]
		for i := range vals {
			// The local src comes first, the received value second (ir.md §5.2).
			if len(op.Srcs) == 0 {
				vals[i] = got[i]
			} else {
				vals[i] = combine([]Value{vals[i], got[i]})
			}
		}
	}
	for i := range vals {
		for _, d := range op.Dsts {
			if err := s.write(r, st, d, int64(i), vals[i]); err != nil {
				return false, fmt.Errorf("tb %d step %d: %w", t, st.pc, err)
			}
		}
	}
	if info.Sends {
		k := connKey{r, tb.SendPeer, tb.Chan}
		s.queues[k] = append(s.queues[k], vals)
	}
	switch op.Code {
	case ir.OpWait:
		for _, c := range op.Chans {
			s.expected[r][c]++
		}
	case ir.OpSignal:
		for _, c := range op.Chans {
			ch := s.p.Ranks[r].Channels[c]
			s.inbound[ch.Peer][ch.PeerChannel]++
		}
	}
	if op.Publish {
		s.published[r][t] = epoch*int64(len(ops)) + int64(st.pc) + 1
	}
	st.pc++
	if st.pc == len(ops) {
		st.pc = 0
		st.s++
		if st.s == s.slices {
			st.s = 0
			st.l++
			if st.l == s.launches {
				st.done = true
			}
		}
	}
	return true, nil
}

// combine adds up values. Values are never modified once made, so a single
// value is returned as it is.
func combine(vs []Value) Value {
	if len(vs) == 1 {
		return vs[0]
	}
	out := Value{}
	for _, v := range vs {
		for k, n := range v {
			out[k] += n
		}
	}
	return out
}

// want is the postcondition of ir.md §6 for output chunk k of rank r in
// slice sl of launch l; ok=false for a custom collective, which has none.
func (s *sim) want(r, l, sl int, k int64) (Value, bool) {
	C := s.p.ChunksPerBlock
	b, j := k/C, k%C
	one := func(q int, j int64) Value { return Value{{l, sl, q, j}: 1} }
	sum := func(j int64) Value {
		v := Value{}
		for q := range s.n {
			v[Contrib{l, sl, q, j}] = 1
		}
		return v
	}
	switch s.p.Collective {
	case ir.AllReduce:
		return sum(k), true
	case ir.AllGather, ir.Gather:
		return one(int(b), j), true
	case ir.ReduceScatter:
		return sum(int64(r)*C + j), true
	case ir.AllToAll:
		return one(int(b), int64(r)*C+j), true
	case ir.Broadcast:
		return one(s.root, j), true
	case ir.Reduce:
		return sum(j), true
	case ir.Scatter:
		return one(s.root, int64(r)*C+j), true
	case ir.SendRecv:
		return one((r+s.n-1)%s.n, k), true
	}
	return nil, false
}

// check compares every output chunk with its postcondition and names the
// first five that differ.
func (s *sim) check(res Result) error {
	var bad []string
	for l := range s.launches {
		for sl := range s.slices {
			for r := range s.n {
				for k := int64(0); k < s.size(r, ir.Output); k++ {
					want, ok := s.want(r, l, sl, k)
					if !ok {
						return nil
					}
					if got := res.Outputs[OutputKey{r, l, sl, k}]; !want.equal(got) && len(bad) < 5 {
						bad = append(bad, fmt.Sprintf("rank %d launch %d slice %d output chunk %d: want %v, got %v", r, l, sl, k, want, got))
					}
				}
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: wrong result:\n%s", ErrPostcondition, strings.Join(bad, "\n"))
	}
	return nil
}
