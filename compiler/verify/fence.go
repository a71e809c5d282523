package verify

import (
	"slices"

	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
)

// NeedsLaunchFence reports whether the runtime must fence every launch of
// p (optable.Table.FenceLaunches): the verifier found a race that only
// consecutive iterations can have (TS0206, a warning) on a Simple program.
// LL launches are always fenced; a Simple program is not sliced unless its
// slice bytes allow it, but consecutive launches of one shape are not
// fenced by default, so the race would happen between them
// (docs/known-issues.md §14). ds are the program's diagnostics.
func NeedsLaunchFence(p *ir.Program, ds []diag.Diagnostic) bool {
	if p == nil || p.Protocol == ir.LL {
		return false
	}
	for _, d := range ds {
		if d.Code == diag.RaceAcrossLaunch {
			return true
		}
	}
	return false
}

// SelfFencedLL reports whether the runtime may leave the repeated launches
// of the LL program p unfenced (optable.Table.SelfFenced): its own packets
// already order every scratch half's reuse. ds are p's diagnostics.
//
// Why LL launches are fenced at all (docs/executor.md, "Fences"): launch L
// uses scratch half L mod 2, so a packet written at launch L+1 lands in the
// half its reader polled at launch L-1. A writer that received nothing from
// that reader could start L+1 while the reader still polls L-1's packets
// (the root of a direct LL broadcast only sends). The verifier proves two
// consecutive launches with each rank's own launches in order and nothing
// more; the runtime's fence covers the third.
//
// p needs no fence when, for every packet slot and every pair of a rank W
// that writes it and a different rank R that reads it, W reads in the same
// launch a packet that R writes: R wrote it at launch L, so R had finished
// L-1 (a rank's launches run in order) before W could finish L and start
// L+1. At the transfer level a send is a packet write into the receiver's
// scratch and a receive reads one, so the rule is that every rank receives
// from each peer it sends to. It reports false for a program that is not
// LL, that has a race across launches (TS0206, which the fence hides), or
// that the rule does not prove; false is always safe (the launch is fenced,
// as before).
func SelfFencedLL(p *ir.Program, ds []diag.Diagnostic) bool {
	if p == nil || p.Protocol != ir.LL || len(p.Ranks) != p.NRanks {
		return false
	}
	for _, d := range ds {
		if d.Code == diag.RaceAcrossLaunch {
			return false
		}
	}
	type slot struct {
		owner int
		chunk int64
	}
	type use struct{ writers, readers []int }
	add := func(s []int, r int) []int {
		if slices.Contains(s, r) {
			return s
		}
		return append(s, r)
	}
	slots := map[slot]*use{}
	at := func(k slot) *use {
		u := slots[k]
		if u == nil {
			u = &use{}
			slots[k] = u
		}
		return u
	}
	// pairs: (writer, reader) of a packet, ranks apart; from[w]: the ranks
	// whose packets w reads.
	type pair struct{ w, r int }
	var pairs []pair
	from := make([]map[int]bool, p.NRanks)
	for r := range from {
		from[r] = map[int]bool{}
	}
	const maxChunks = 1 << 20 // a larger program is left fenced
	chunks := int64(0)
	for r := range p.Ranks {
		rk := &p.Ranks[r]
		owner := func(ref ir.Ref) (int, bool) {
			if ref.Local() {
				return r, true
			}
			if ref.Chan >= len(rk.Channels) {
				return 0, false
			}
			return rk.Channels[ref.Chan].Peer, true
		}
		for _, tb := range rk.TBs {
			for _, op := range tb.Ops {
				info := op.Code.Info()
				if info.Sends && tb.SendPeer >= 0 && tb.SendPeer < p.NRanks && tb.SendPeer != r {
					pairs = append(pairs, pair{r, tb.SendPeer})
					from[tb.SendPeer][r] = true
				}
				if !info.Data {
					continue
				}
				for i, refs := range [][]ir.Ref{op.Srcs, op.Dsts} {
					for _, ref := range refs {
						if !ref.Packet || ref.Buf != ir.Scratch {
							continue
						}
						o, ok := owner(ref)
						if !ok || op.Count < 1 {
							return false
						}
						if chunks += op.Count; chunks > maxChunks {
							return false
						}
						for k := ref.Off; k < ref.Off+op.Count; k++ {
							u := at(slot{o, k})
							if i == 0 {
								u.readers = add(u.readers, r)
							} else {
								u.writers = add(u.writers, r)
							}
						}
					}
				}
			}
		}
	}
	for _, u := range slots {
		for _, w := range u.writers {
			for _, r := range u.readers {
				if r != w {
					from[r][w] = true
					pairs = append(pairs, pair{w, r})
				}
			}
		}
	}
	for _, pr := range pairs {
		if !from[pr.w][pr.r] {
			return false
		}
	}
	return true
}
