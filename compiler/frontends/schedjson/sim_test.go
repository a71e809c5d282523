package schedjson

import (
	"fmt"
	"maps"
	"slices"

	"github.com/theseus-ccl/theseus/ir"
)

// This file is a small symbolic interpreter used as a test oracle for the
// example and bad-input schedules: one launch, one slice, values are
// multisets of (rank, input chunk) contributions (docs/design/ir.md §6). It
// runs any runnable op round-robin (transfer FIFOs, semaphores, LL packet
// slots, dependencies), and reports a stuck program, a read of an undefined
// chunk, a ref outside its buffer, an LL slot written twice, an unbalanced
// semaphore, or a wrong output. It does not look for races; that is the
// verifier's job.

type val map[[2]int64]int

func (v val) String() string {
	keys := slices.SortedFunc(maps.Keys(v), func(a, b [2]int64) int {
		if a[0] != b[0] {
			return int(a[0] - b[0])
		}
		return int(a[1] - b[1])
	})
	s := "{"
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%d.%d", k[0], k[1])
		if v[k] != 1 {
			s += fmt.Sprintf("x%d", v[k])
		}
	}
	return s + "}"
}

func combine(vs ...val) val {
	out := val{}
	for _, v := range vs {
		for k, n := range v {
			out[k] += n
		}
	}
	return out
}

type conn struct{ from, to, ch int }

type slot struct {
	rank  int
	buf   ir.BufKind
	chunk int64
}

func simulate(p *ir.Program, inPlace bool) error {
	n := p.NRanks
	C := p.ChunksPerBlock
	if n != len(p.Ranks) || C < 1 {
		return fmt.Errorf("bad header")
	}
	pl := ir.Placement{Collective: p.Collective, NRanks: n, ChunksPerBlock: C, ProgRoot: p.Root, Root: p.Root, InPlace: inPlace}
	size := func(r int, k ir.BufKind) int64 {
		if k == ir.Scratch {
			return p.Ranks[r].Chunks[ir.Scratch]
		}
		return ir.Blocks(p.Collective, k, n, r, p.Root) * C
	}
	store := map[slot]val{}
	packets := map[slot]val{}
	for r := range n {
		for c := int64(0); c < size(r, ir.Input); c++ {
			k, cc := pl.Resolve(r, ir.Input, c)
			store[slot{r, k, cc}] = val{{int64(r), c}: 1}
		}
	}
	where := func(r int, ref ir.Ref, t int64) (slot, error) {
		q := r
		if ref.Chan >= 0 {
			if ref.Chan >= len(p.Ranks[r].Channels) {
				return slot{}, fmt.Errorf("rank %d: channel %d out of range", r, ref.Chan)
			}
			q = p.Ranks[r].Channels[ref.Chan].Peer
		}
		if c := ref.Off + t; c >= size(q, ref.Buf) {
			return slot{}, fmt.Errorf("rank %d: %v chunk %d of rank %d out of range (%d chunks)", r, ref.Buf, c, q, size(q, ref.Buf))
		}
		k, c := pl.Resolve(q, ref.Buf, ref.Off+t)
		return slot{q, k, c}, nil
	}
	queues := map[conn][][]val{}
	inbound := make([][]int64, n)
	expected := make([][]int64, n)
	published := make([][]int, n)
	pc := make([][]int, n)
	for r := range n {
		for _, c := range p.Ranks[r].Channels {
			inbound[r] = append(inbound[r], c.Init)
		}
		expected[r] = make([]int64, len(p.Ranks[r].Channels))
		published[r] = make([]int, len(p.Ranks[r].TBs))
		pc[r] = make([]int, len(p.Ranks[r].TBs))
	}
	// runnable reports whether op can start; it has no side effects.
	runnable := func(r int, tb *ir.Threadblock, op *ir.Op) (bool, error) {
		for _, d := range op.Deps {
			if d.TB < 0 || d.TB >= len(published[r]) {
				return false, fmt.Errorf("rank %d: dependency on tb %d", r, d.TB)
			}
			if published[r][d.TB] < d.Step+1 {
				return false, nil
			}
		}
		if op.Code.Info().Recvs && len(queues[conn{tb.RecvPeer, r, tb.Chan}]) == 0 {
			return false, nil
		}
		if op.Code == ir.OpWait {
			for _, c := range op.Chans {
				if inbound[r][c] < expected[r][c]+1 {
					return false, nil
				}
			}
		}
		for _, s := range op.Srcs {
			if !s.Packet {
				continue
			}
			for t := int64(0); t < op.Count; t++ {
				w, err := where(r, s, t)
				if err != nil {
					return false, err
				}
				if _, ok := packets[w]; !ok {
					return false, nil
				}
			}
		}
		return true, nil
	}
	for progress := true; progress; {
		progress = false
		for r := range n {
			for ti := range p.Ranks[r].TBs {
				tb := &p.Ranks[r].TBs[ti]
				if pc[r][ti] >= len(tb.Ops) {
					continue
				}
				step := pc[r][ti]
				op := &tb.Ops[step]
				ok, err := runnable(r, tb, op)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				info := op.Code.Info()
				if op.Code == ir.OpBarrier {
					return fmt.Errorf("barrier not simulated")
				}
				var got []val
				if info.Recvs {
					k := conn{tb.RecvPeer, r, tb.Chan}
					got = queues[k][0]
					queues[k] = queues[k][1:]
					if int64(len(got)) != op.Count {
						return fmt.Errorf("rank %d tb %d step %d: received %d chunks, want %d", r, ti, step, len(got), op.Count)
					}
				}
				if op.Code == ir.OpWait {
					for _, c := range op.Chans {
						expected[r][c]++
					}
				}
				var sent []val
				for t := int64(0); t < op.Count && info.Data; t++ {
					var srcs []val
					for _, s := range op.Srcs {
						w, err := where(r, s, t)
						if err != nil {
							return err
						}
						m := store
						if s.Packet {
							m = packets
						}
						v, ok := m[w]
						if !ok {
							return fmt.Errorf("rank %d tb %d step %d reads undefined %v", r, ti, step, w)
						}
						srcs = append(srcs, v)
					}
					if got != nil {
						srcs = append(srcs, got[t])
					}
					v := combine(srcs...)
					for _, d := range op.Dsts {
						w, err := where(r, d, t)
						if err != nil {
							return err
						}
						if d.Packet {
							if _, dup := packets[w]; dup {
								return fmt.Errorf("rank %d tb %d step %d: LL slot %v written twice", r, ti, step, w)
							}
							packets[w] = v
						} else {
							store[w] = v
						}
					}
					sent = append(sent, v)
				}
				if info.Sends {
					k := conn{r, tb.SendPeer, tb.Chan}
					queues[k] = append(queues[k], sent)
				}
				if op.Code == ir.OpSignal {
					for _, c := range op.Chans {
						ch := p.Ranks[r].Channels[c]
						inbound[ch.Peer][ch.PeerChannel]++
					}
				}
				if op.Publish {
					published[r][ti] = step + 1
				}
				pc[r][ti]++
				progress = true
			}
		}
	}
	for r := range n {
		for ti, tb := range p.Ranks[r].TBs {
			if pc[r][ti] < len(tb.Ops) {
				return fmt.Errorf("stuck: rank %d tb %d step %d (%v)", r, ti, pc[r][ti], tb.Ops[pc[r][ti]].Code)
			}
		}
	}
	for k, q := range queues {
		if len(q) != 0 {
			return fmt.Errorf("connection %+v has %d unreceived transfers", k, len(q))
		}
	}
	for r := range n {
		for c := range p.Ranks[r].Channels {
			if inbound[r][c] != expected[r][c] {
				return fmt.Errorf("rank %d channel %d: semaphore %d, expected %d after the launch", r, c, inbound[r][c], expected[r][c])
			}
		}
	}
	for r := range n {
		for c := int64(0); c < size(r, ir.Output); c++ {
			want := val{}
			b, j := c/C, c%C
			switch p.Collective {
			case ir.AllReduce:
				for q := range n {
					want[[2]int64{int64(q), c}] = 1
				}
			case ir.AllGather:
				want[[2]int64{b, j}] = 1
			case ir.Broadcast:
				want[[2]int64{int64(p.Root), c}] = 1
			default:
				return fmt.Errorf("postcondition of %v not simulated", p.Collective)
			}
			k, cc := pl.Resolve(r, ir.Output, c)
			if got := store[slot{r, k, cc}]; got.String() != want.String() {
				return fmt.Errorf("postcondition: rank %d output chunk %d = %v, want %v", r, c, got, want)
			}
		}
	}
	return nil
}
