package legalize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
)

// This file is a test oracle: a symbolic executor of primitive programs
// (ir.md §5, §6) that runs several slices and launches with the threadblocks
// interleaved at random, and the postconditions of allreduce and allgather.
// Values are multisets of tagged contributions (launch, slice, rank, input
// chunk), so a slot overwritten too early, a read of a stale slice or a
// contribution reduced twice shows up as a wrong value. It is no substitute
// for the verifier (it finds ordering bugs only on the interleavings it
// tries), but it checks legalisation end to end by execution.

type contrib struct{ l, s, q, j int32 }

// val maps a contribution to how often it was combined in.
type val map[contrib]int

func combine(vs ...val) val {
	out := val{}
	for _, v := range vs {
		for k, n := range v {
			out[k] += n
		}
	}
	return out
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
	v    val
	flag int // launch+1 of the last packet write
}

type tbState struct {
	l, s, pc int
	done     bool
}

type simulator struct {
	p        *ir.Program
	pl       ir.Placement
	slices   int
	launches int
	user     map[userKey]val
	scratch  map[scratchKey]*scratchCell
	inbound  [][]int64
	expected [][]int64
	// published[r][t] is the highest completion counter of threadblock t.
	published [][]int64
	tbs       [][]tbState
}

// simulate runs p (primitive level) for the given slices and launches under
// one arrangement, picking a runnable threadblock at random (seeded) at
// every step. It returns an error on a stuck program, an undefined read or
// unbalanced semaphores; otherwise the output values, keyed by rank, launch,
// slice and output chunk.
func simulate(p *ir.Program, inPlace bool, slicesN, launches int, seed uint64) (map[userKey]val, error) {
	if p.Protocol == ir.LL {
		slicesN = 1
	}
	n := len(p.Ranks)
	sim := &simulator{p: p, slices: slicesN, launches: launches,
		pl:      ir.Placement{Collective: p.Collective, NRanks: n, ChunksPerBlock: p.ChunksPerBlock, ProgRoot: p.Root, Root: p.Root, InPlace: inPlace},
		user:    map[userKey]val{},
		scratch: map[scratchKey]*scratchCell{},
	}
	for r := range n {
		rk := &p.Ranks[r]
		in := make([]int64, len(rk.Channels))
		for c, ch := range rk.Channels {
			in[c] = ch.Init
		}
		sim.inbound = append(sim.inbound, in)
		sim.expected = append(sim.expected, make([]int64, len(rk.Channels)))
		sim.published = append(sim.published, make([]int64, len(rk.TBs)))
		sim.tbs = append(sim.tbs, make([]tbState, len(rk.TBs)))
		for l := range launches {
			for s := range slicesN {
				for j := int64(0); j < inputChunks(p, r); j++ {
					k, c := sim.pl.Resolve(r, ir.Input, j)
					sim.user[userKey{r, l, s, k, c}] = val{{int32(l), int32(s), int32(r), int32(j)}: 1}
				}
			}
		}
		for t := range rk.TBs {
			if len(rk.TBs[t].Ops) == 0 {
				sim.tbs[r][t].done = true
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	type tbRef struct{ r, t int }
	var all []tbRef
	for r := range n {
		for t := range p.Ranks[r].TBs {
			all = append(all, tbRef{r, t})
		}
	}
	for {
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		progressed, live := false, false
		for _, x := range all {
			st := &sim.tbs[x.r][x.t]
			if st.done {
				continue
			}
			live = true
			ok, err := sim.step(x.r, x.t)
			if err != nil {
				return nil, err
			}
			if ok {
				progressed = true
				break
			}
		}
		if !live {
			break
		}
		if !progressed {
			var stuck []string
			for r := range n {
				for t, st := range sim.tbs[r] {
					if !st.done {
						stuck = append(stuck, fmt.Sprintf("rank %d tb %d launch %d slice %d step %d (%v)", r, t, st.l, st.s, st.pc, p.Ranks[r].TBs[t].Ops[st.pc].Code))
					}
				}
			}
			return nil, fmt.Errorf("deadlock: %s", strings.Join(stuck, "; "))
		}
	}
	for r := range n {
		for c := range p.Ranks[r].Channels {
			if sim.inbound[r][c] != sim.expected[r][c]+p.Ranks[r].Channels[c].Init {
				return nil, fmt.Errorf("rank %d channel %d unbalanced: inbound %d, expected %d, init %d", r, c,
					sim.inbound[r][c], sim.expected[r][c], p.Ranks[r].Channels[c].Init)
			}
		}
	}
	out := map[userKey]val{}
	for k, v := range sim.user {
		if k.buf == ir.Output {
			out[k] = v
		}
	}
	return out, nil
}

func inputChunks(p *ir.Program, r int) int64 {
	if b := ir.Blocks(p.Collective, ir.Input, len(p.Ranks), r, p.Root); b >= 0 {
		return b * p.ChunksPerBlock
	}
	return p.Ranks[r].Chunks[ir.Input]
}

func (sim *simulator) peer(r int, ref ir.Ref) int {
	if ref.Chan < 0 {
		return r
	}
	return sim.p.Ranks[r].Channels[ref.Chan].Peer
}

func (sim *simulator) half(l int) int {
	if sim.p.Protocol == ir.LL {
		return l % 2
	}
	return 0
}

// read returns the value of chunk i of ref, or ok=false when a packet read
// must still wait for its flag.
func (sim *simulator) read(r int, st tbState, ref ir.Ref, i int64) (val, bool, error) {
	rr := sim.peer(r, ref)
	if ref.Buf == ir.Scratch {
		c := sim.scratch[scratchKey{rr, sim.half(st.l), ref.Off + i}]
		if ref.Packet && (c == nil || c.flag != st.l+1) {
			return nil, false, nil
		}
		if c == nil || c.v == nil {
			return nil, false, fmt.Errorf("rank %d reads undefined scratch chunk %d of rank %d", r, ref.Off+i, rr)
		}
		return c.v, true, nil
	}
	k, c := sim.pl.Resolve(rr, ref.Buf, ref.Off+i)
	v, ok := sim.user[userKey{rr, st.l, st.s, k, c}]
	if !ok {
		return nil, false, fmt.Errorf("rank %d launch %d slice %d reads undefined %v chunk %d of rank %d", r, st.l, st.s, k, c, rr)
	}
	return v, true, nil
}

func (sim *simulator) write(r int, st tbState, ref ir.Ref, i int64, v val) {
	rr := sim.peer(r, ref)
	if ref.Buf == ir.Scratch {
		k := scratchKey{rr, sim.half(st.l), ref.Off + i}
		c := sim.scratch[k]
		if c == nil {
			c = &scratchCell{}
			sim.scratch[k] = c
		}
		c.v = v
		if ref.Packet {
			c.flag = st.l + 1
		}
		return
	}
	k, c := sim.pl.Resolve(rr, ref.Buf, ref.Off+i)
	sim.user[userKey{rr, st.l, st.s, k, c}] = v
}

// step runs the next op of threadblock t of rank r if it can run.
func (sim *simulator) step(r, t int) (bool, error) {
	st := &sim.tbs[r][t]
	tbs := sim.p.Ranks[r].TBs
	ops := tbs[t].Ops
	// A new launch starts only when the whole rank finished the previous one.
	if st.pc == 0 && st.s == 0 && st.l > 0 {
		for u := range sim.tbs[r] {
			if o := sim.tbs[r][u]; !o.done && o.l < st.l {
				return false, nil
			}
		}
	}
	op := &ops[st.pc]
	epoch := int64(st.l*sim.slices + st.s)
	for _, d := range op.Deps {
		if sim.published[r][d.TB] < epoch*int64(len(tbs[d.TB].Ops))+int64(d.Step)+1 {
			return false, nil
		}
	}
	switch op.Code {
	case ir.OpWait:
		for _, c := range op.Chans {
			if sim.inbound[r][c] < sim.expected[r][c]+1 {
				return false, nil
			}
		}
		for _, c := range op.Chans {
			sim.expected[r][c]++
		}
	case ir.OpSignal:
		for _, c := range op.Chans {
			ch := sim.p.Ranks[r].Channels[c]
			sim.inbound[ch.Peer][ch.PeerChannel]++
		}
	case ir.OpCopy, ir.OpReduce:
		vals := make([]val, op.Count)
		for i := range op.Count {
			var srcs []val
			for _, s := range op.Srcs {
				v, ok, err := sim.read(r, *st, s, i)
				if err != nil {
					return false, fmt.Errorf("tb %d step %d: %w", t, st.pc, err)
				}
				if !ok {
					return false, nil
				}
				srcs = append(srcs, v)
			}
			vals[i] = combine(srcs...)
		}
		for i := range op.Count {
			for _, d := range op.Dsts {
				sim.write(r, *st, d, i, vals[i])
			}
		}
	case ir.OpNop, ir.OpFlush:
	default:
		return false, fmt.Errorf("rank %d tb %d step %d: the simulator does not run %v", r, t, st.pc, op.Code)
	}
	if op.Publish {
		sim.published[r][t] = epoch*int64(len(ops)) + int64(st.pc) + 1
	}
	st.pc++
	if st.pc == len(ops) {
		st.pc = 0
		st.s++
		if st.s == sim.slices {
			st.s = 0
			st.l++
			if st.l == sim.launches {
				st.done = true
			}
		}
	}
	return true, nil
}

// wantOutputs is the postcondition of allreduce and allgather (ir.md §6)
// for every launch and slice.
func wantOutputs(p *ir.Program, slicesN, launches int) map[userKey]val {
	if p.Protocol == ir.LL {
		slicesN = 1
	}
	n := len(p.Ranks)
	C := p.ChunksPerBlock
	out := map[userKey]val{}
	for l := range launches {
		for s := range slicesN {
			for r := range n {
				switch p.Collective {
				case ir.AllReduce:
					for j := range C {
						v := val{}
						for q := range n {
							v[contrib{int32(l), int32(s), int32(q), int32(j)}] = 1
						}
						out[userKey{r, l, s, ir.Output, j}] = v
					}
				case ir.AllGather:
					for b := range int64(n) {
						for j := range C {
							out[userKey{r, l, s, ir.Output, b*C + j}] = val{{int32(l), int32(s), int32(b), int32(j)}: 1}
						}
					}
				default:
					panic("wantOutputs: " + p.Collective.String())
				}
			}
		}
	}
	return out
}

// describeMismatch names the first differing output chunks, in order.
func describeMismatch(want, got map[userKey]val) string {
	keys := make([]userKey, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b userKey) int {
		return cmpInts(a.rank, b.rank, a.l, b.l, a.s, b.s, int(a.chunk), int(b.chunk))
	})
	var lines []string
	for _, k := range keys {
		w, g := want[k], got[k]
		if fmt.Sprint(w) != fmt.Sprint(g) {
			lines = append(lines, fmt.Sprintf("rank %d launch %d slice %d output chunk %d: want %v, got %v", k.rank, k.l, k.s, k.chunk, w, g))
			if len(lines) == 5 {
				break
			}
		}
	}
	return strings.Join(lines, "\n")
}

func cmpInts(xs ...int) int {
	for i := 0; i+1 < len(xs); i += 2 {
		if xs[i] != xs[i+1] {
			if xs[i] < xs[i+1] {
				return -1
			}
			return 1
		}
	}
	return 0
}
