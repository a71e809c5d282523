package verify

import (
	"fmt"
	"strings"
)

// Symbolic values (ir.md §6): the set of (rank q, input chunk k)
// contributions a chunk holds, each numbered id = k*nranks + q, kept as a
// sorted list of disjoint, non-adjacent half-open intervals [lo, hi) of
// ids. A ring's partial sum of chunk k over ranks a..b is one or two
// intervals whatever nranks is.
//
// A vset is a handle: 0 is "undefined" (never written), 1 is "poisoned"
// (derived from an error already reported), handles with the top bit set
// are single ids (every input chunk; no allocation), and the others are 2 +
// the offset of [n, lo0, hi0, ..., lo(n-1), hi(n-1)] in an append-only
// arena. Values are immutable and shared freely.
type vset uint32

const (
	vUndef  vset = 0
	vPoison vset = 1
	vSingle vset = 1 << 31
)

type setArena struct {
	iv []uint64
}

func (a *setArena) reset() { a.iv = a.iv[:0] }

// single returns the value {id}.
func (a *setArena) single(id uint64) vset {
	if id < uint64(vSingle)-1 {
		return vSingle | vset(id)
	}
	off := len(a.iv)
	a.iv = append(a.iv, 1, id, id+1)
	return vset(off + 2)
}

// view returns v's intervals (tmp backs single ids). v must be defined.
func (a *setArena) view(v vset, tmp *[2]uint64) []uint64 {
	if v&vSingle != 0 {
		id := uint64(v &^ vSingle)
		tmp[0], tmp[1] = id, id+1
		return tmp[:]
	}
	off := int(v - 2)
	return a.iv[off+1 : off+1+2*int(a.iv[off])]
}

// size is the arena's length, for the verifier's memory bound.
func (a *setArena) size() int { return len(a.iv) }

// full reports whether the arena cannot take another value (handles are 31
// bits).
func (a *setArena) full() bool { return len(a.iv) >= int(vSingle)-4 }

// union returns x ∪ y and whether they share a contribution. Both must be
// defined and not poisoned.
func (a *setArena) union(x, y vset) (vset, bool) {
	var tx, ty [2]uint64
	xs, ys := a.view(x, &tx), a.view(y, &ty)
	off := len(a.iv)
	if len(xs) == 2 && len(ys) == 2 {
		// the common case: a partial sum meets one more contribution
		if xs[0] > ys[0] {
			xs, ys = ys, xs
		}
		if xs[1] < ys[0] {
			a.iv = append(a.iv, 2, xs[0], xs[1], ys[0], ys[1])
			return vset(off + 2), false
		}
		return a.interval(xs[0], max(xs[1], ys[1])), xs[1] > ys[0]
	}
	a.iv = append(a.iv, 0)
	overlap := false
	var lo, hi uint64
	have := false
	emit := func(l, h uint64) {
		if have && l <= hi {
			if l < hi {
				overlap = true
			}
			hi = max(hi, h)
			return
		}
		if have {
			a.iv = append(a.iv, lo, hi)
		}
		lo, hi, have = l, h, true
	}
	i, j := 0, 0
	for i < len(xs) || j < len(ys) {
		if j >= len(ys) || (i < len(xs) && xs[i] <= ys[j]) {
			emit(xs[i], xs[i+1])
			i += 2
		} else {
			emit(ys[j], ys[j+1])
			j += 2
		}
	}
	a.iv = append(a.iv, lo, hi)
	n := (len(a.iv) - off - 1) / 2
	if n == 1 {
		a.iv = a.iv[:off]
		return a.interval(lo, hi), overlap
	}
	a.iv[off] = uint64(n)
	return vset(off + 2), overlap
}

// interval returns the value [lo, hi).
func (a *setArena) interval(lo, hi uint64) vset {
	if hi == lo+1 && lo < uint64(vSingle)-1 {
		return vSingle | vset(lo)
	}
	off := len(a.iv)
	a.iv = append(a.iv, 1, lo, hi)
	return vset(off + 2)
}

// equal reports whether v is exactly the interval [lo, hi).
func (a *setArena) equal(v vset, lo, hi uint64) bool {
	if v == vUndef || v == vPoison {
		return false
	}
	var t [2]uint64
	got := a.view(v, &t)
	return len(got) == 2 && got[0] == lo && got[1] == hi
}

// formatSet writes intervals of ids as (rank, input chunk) pairs, ranks of
// one chunk grouped: {(0..3, 5), (7, 6)}. It stops after a few groups.
func formatSet(iv []uint64, nranks int) string {
	const maxGroups = 6
	n := uint64(nranks)
	var b strings.Builder
	b.WriteByte('{')
	groups := 0
	var total uint64
	for i := 0; i < len(iv); i += 2 {
		total += iv[i+1] - iv[i]
		for id := iv[i]; id < iv[i+1]; {
			k := id / n
			last := min(iv[i+1], (k+1)*n) - 1
			if groups < maxGroups {
				if groups > 0 {
					b.WriteString(", ")
				}
				if last == id {
					fmt.Fprintf(&b, "(%d, %d)", id%n, k)
				} else {
					fmt.Fprintf(&b, "(%d..%d, %d)", id%n, last%n, k)
				}
			}
			groups++
			id = last + 1
		}
	}
	if groups > maxGroups {
		fmt.Fprintf(&b, ", … %d contributions in all", total)
	}
	b.WriteByte('}')
	return b.String()
}
