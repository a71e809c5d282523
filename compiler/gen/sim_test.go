package gen

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/theseus-ccl/theseus/ir"
)

// This file is a test oracle for the generators until compiler/verify and
// runtime/interp can be used: a symbolic executor of primitive-level
// programs (legalised ones) that runs several slices and launches with the
// threadblocks interleaved at random, and the postconditions of every
// collective (ir.md §6). A value is a multiset of contributions (launch,
// slice, rank, input chunk), so a scratch chunk reused too early, a read of
// a stale slice, a contribution reduced twice or a missing one all show up
// as wrong output values.

type contrib struct{ l, s, q, j int32 }

type val map[contrib]int

type ukey struct {
	rank, l, s int
	buf        ir.BufKind
	chunk      int64
}

type skey struct {
	rank, half int
	chunk      int64
}

type scell struct {
	v    val
	flag int
}

type tstate struct {
	l, s, pc int
	done     bool
}

type sim struct {
	p              *ir.Program
	pl             ir.Placement
	slices, rounds int
	user           map[ukey]val
	scratch        map[skey]*scell
	inbound, exp   [][]int64
	pub            [][]int64
	tbs            [][]tstate
}

// simulate runs primitive program p under one arrangement for the given
// slices (1 for LL) and launches, with a seeded random interleaving, and
// checks the postcondition. It returns a description of the first problem.
func simulate(p *ir.Program, inPlace bool, slices, launches int, seed uint64) error {
	if p.Protocol == ir.LL {
		slices = 1
	}
	n := len(p.Ranks)
	s := &sim{p: p, slices: slices, rounds: launches,
		pl:   ir.Placement{Collective: p.Collective, NRanks: n, ChunksPerBlock: p.ChunksPerBlock, ProgRoot: p.Root, Root: p.Root, InPlace: inPlace},
		user: map[ukey]val{}, scratch: map[skey]*scell{}}
	root := max(p.Root, 0)
	for r := 0; r < n; r++ {
		rk := &p.Ranks[r]
		in := make([]int64, len(rk.Channels))
		for c, ch := range rk.Channels {
			in[c] = ch.Init
		}
		s.inbound = append(s.inbound, in)
		s.exp = append(s.exp, make([]int64, len(rk.Channels)))
		s.pub = append(s.pub, make([]int64, len(rk.TBs)))
		s.tbs = append(s.tbs, make([]tstate, len(rk.TBs)))
		for t := range rk.TBs {
			if len(rk.TBs[t].Ops) == 0 {
				s.tbs[r][t].done = true
			}
		}
		nin := ir.Blocks(p.Collective, ir.Input, n, r, root) * p.ChunksPerBlock
		for l := 0; l < launches; l++ {
			for sl := 0; sl < slices; sl++ {
				for j := int64(0); j < nin; j++ {
					b, c := s.pl.Resolve(r, ir.Input, j)
					s.user[ukey{r, l, sl, b, c}] = val{{int32(l), int32(sl), int32(r), int32(j)}: 1}
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(seed, 99))
	type ref struct{ r, t int }
	var all []ref
	for r := range p.Ranks {
		for t := range p.Ranks[r].TBs {
			all = append(all, ref{r, t})
		}
	}
	for {
		rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
		progressed, live := false, false
		for _, x := range all {
			if s.tbs[x.r][x.t].done {
				continue
			}
			live = true
			// Run a random number of steps of this threadblock.
			for k := rng.IntN(3) + 1; k > 0 && !s.tbs[x.r][x.t].done; k-- {
				ok, err := s.step(x.r, x.t)
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				progressed = true
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
						stuck = append(stuck, fmt.Sprintf("rank %d tb %d launch %d slice %d step %d (%v)", r, t, st.l, st.s, st.pc, p.Ranks[r].TBs[t].Ops[st.pc].Code))
					}
				}
			}
			return fmt.Errorf("deadlock: %s", strings.Join(stuck, "; "))
		}
	}
	for r := range p.Ranks {
		for c, ch := range p.Ranks[r].Channels {
			if s.inbound[r][c] != s.exp[r][c]+ch.Init {
				return fmt.Errorf("rank %d channel %d unbalanced: inbound %d, expected %d, init %d", r, c, s.inbound[r][c], s.exp[r][c], ch.Init)
			}
		}
	}
	return s.check(slices, launches)
}

func (s *sim) peer(r int, ref ir.Ref) int {
	if ref.Chan < 0 {
		return r
	}
	return s.p.Ranks[r].Channels[ref.Chan].Peer
}

func (s *sim) half(l int) int {
	if s.p.Protocol == ir.LL {
		return l % 2
	}
	return 0
}

func (s *sim) read(r int, st tstate, ref ir.Ref, i int64) (val, bool, error) {
	rr := s.peer(r, ref)
	if ref.Buf == ir.Scratch {
		c := s.scratch[skey{rr, s.half(st.l), ref.Off + i}]
		if ref.Packet && (c == nil || c.flag != st.l+1) {
			return nil, false, nil
		}
		if c == nil || c.v == nil {
			return nil, false, fmt.Errorf("rank %d reads undefined scratch chunk %d of rank %d", r, ref.Off+i, rr)
		}
		return c.v, true, nil
	}
	b, c := s.pl.Resolve(rr, ref.Buf, ref.Off+i)
	v, ok := s.user[ukey{rr, st.l, st.s, b, c}]
	if !ok {
		return nil, false, fmt.Errorf("rank %d launch %d slice %d reads undefined %v chunk %d of rank %d", r, st.l, st.s, b, c, rr)
	}
	return v, true, nil
}

func (s *sim) write(r int, st tstate, ref ir.Ref, i int64, v val) error {
	rr := s.peer(r, ref)
	if ref.Buf == ir.Scratch {
		k := skey{rr, s.half(st.l), ref.Off + i}
		c := s.scratch[k]
		if c == nil {
			c = &scell{}
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
	s.user[ukey{rr, st.l, st.s, b, c}] = v
	return nil
}

func (s *sim) step(r, t int) (bool, error) {
	st := &s.tbs[r][t]
	tbs := s.p.Ranks[r].TBs
	ops := tbs[t].Ops
	if st.pc == 0 && st.s == 0 && st.l > 0 {
		for u := range s.tbs[r] {
			if o := s.tbs[r][u]; !o.done && o.l < st.l {
				return false, nil
			}
		}
	}
	op := &ops[st.pc]
	epoch := int64(st.l*s.slices + st.s)
	for _, d := range op.Deps {
		if s.pub[r][d.TB] < epoch*int64(len(tbs[d.TB].Ops))+int64(d.Step)+1 {
			return false, nil
		}
	}
	switch op.Code {
	case ir.OpWait:
		for _, c := range op.Chans {
			if s.inbound[r][c] < s.exp[r][c]+1 {
				return false, nil
			}
		}
		for _, c := range op.Chans {
			s.exp[r][c]++
		}
	case ir.OpSignal:
		for _, c := range op.Chans {
			ch := s.p.Ranks[r].Channels[c]
			s.inbound[ch.Peer][ch.PeerChannel]++
		}
	case ir.OpCopy, ir.OpReduce:
		vals := make([]val, op.Count)
		for i := int64(0); i < op.Count; i++ {
			v := val{}
			for _, src := range op.Srcs {
				x, ok, err := s.read(r, *st, src, i)
				if err != nil {
					return false, fmt.Errorf("tb %d step %d: %w", t, st.pc, err)
				}
				if !ok {
					return false, nil
				}
				for k, c := range x {
					v[k] += c
				}
			}
			vals[i] = v
		}
		for i := int64(0); i < op.Count; i++ {
			for _, d := range op.Dsts {
				if err := s.write(r, *st, d, i, vals[i]); err != nil {
					return false, err
				}
			}
		}
	case ir.OpNop, ir.OpFlush:
	default:
		return false, fmt.Errorf("rank %d tb %d step %d: cannot simulate %v", r, t, st.pc, op.Code)
	}
	if op.Publish {
		s.pub[r][t] = epoch*int64(len(ops)) + int64(st.pc) + 1
	}
	st.pc++
	if st.pc == len(ops) {
		st.pc = 0
		st.s++
		if st.s == s.slices {
			st.s = 0
			st.l++
			if st.l == s.rounds {
				st.done = true
			}
		}
	}
	return true, nil
}

// check compares every output chunk with the postcondition of ir.md §6.
func (s *sim) check(slices, launches int) error {
	p := s.p
	n := len(p.Ranks)
	C := p.ChunksPerBlock
	R := max(p.Root, 0)
	var bad []string
	for l := 0; l < launches; l++ {
		for sl := 0; sl < slices; sl++ {
			one := func(q int, j int64) val { return val{{int32(l), int32(sl), int32(q), int32(j)}: 1} }
			sum := func(j int64) val {
				v := val{}
				for q := 0; q < n; q++ {
					v[contrib{int32(l), int32(sl), int32(q), int32(j)}] = 1
				}
				return v
			}
			for r := 0; r < n; r++ {
				nout := ir.Blocks(p.Collective, ir.Output, n, r, R) * C
				for k := int64(0); k < nout; k++ {
					b, j := k/C, k%C
					var want val
					switch p.Collective {
					case ir.AllReduce:
						want = sum(k)
					case ir.AllGather, ir.Gather:
						want = one(int(b), j)
					case ir.ReduceScatter:
						want = sum(int64(r)*C + j)
					case ir.AllToAll:
						want = one(int(b), int64(r)*C+j)
					case ir.Broadcast:
						want = one(R, j)
					case ir.Reduce:
						want = sum(j)
					case ir.Scatter:
						want = one(R, int64(r)*C+j)
					default:
						return fmt.Errorf("no postcondition for %v", p.Collective)
					}
					bb, cc := s.pl.Resolve(r, ir.Output, k)
					got := s.user[ukey{r, l, sl, bb, cc}]
					if !sameVal(want, got) && len(bad) < 5 {
						bad = append(bad, fmt.Sprintf("rank %d launch %d slice %d output chunk %d: want %s, got %s", r, l, sl, k, fmtVal(want), fmtVal(got)))
					}
				}
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("wrong result:\n%s", strings.Join(bad, "\n"))
	}
	return nil
}

func sameVal(a, b val) bool {
	if len(a) != len(b) {
		return false
	}
	for k, c := range a {
		if b[k] != c {
			return false
		}
	}
	return true
}

func fmtVal(v val) string {
	if v == nil {
		return "<undefined>"
	}
	var parts []string
	for k, c := range v {
		x := fmt.Sprintf("L%dS%d:r%d.%d", k.l, k.s, k.q, k.j)
		if c != 1 {
			x += fmt.Sprintf("x%d", c)
		}
		parts = append(parts, x)
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, " ") + "}"
}
