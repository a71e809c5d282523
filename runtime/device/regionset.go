package device

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
)

// RegionSet is a set of non-overlapping allocations that a backend answers
// Lookup from without asking its driver: Find takes no lock (it reads a
// sorted slice that Add and Remove replace whole, copy on write), so it
// suits a per-call hot path; Add and Remove serialise on a mutex. The zero
// value is an empty set.
type RegionSet struct {
	mu  sync.Mutex
	cur atomic.Pointer[[]Region] // sorted by Base
}

// Add inserts r (whose bytes overlap no region of the set).
func (s *RegionSet) Add(r Region) {
	s.edit(func(rs []Region) []Region {
		i, _ := slices.BinarySearchFunc(rs, r.Base, func(x Region, base Ptr) int { return cmp.Compare(x.Base, base) })
		return slices.Insert(rs, i, r)
	})
}

// Remove drops the region that starts at base, if any.
func (s *RegionSet) Remove(base Ptr) {
	s.edit(func(rs []Region) []Region {
		return slices.DeleteFunc(rs, func(r Region) bool { return r.Base == base })
	})
}

func (s *RegionSet) edit(f func([]Region) []Region) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var rs []Region
	if old := s.cur.Load(); old != nil {
		rs = slices.Clone(*old)
	}
	rs = f(rs)
	s.cur.Store(&rs)
}

// Find returns the region that holds all of [p, p+n) bytes.
func (s *RegionSet) Find(p Ptr, n int64) (Region, bool) {
	rs := s.cur.Load()
	if rs == nil {
		return Region{}, false
	}
	i, found := slices.BinarySearchFunc(*rs, p, func(x Region, p Ptr) int { return cmp.Compare(x.Base, p) })
	if !found {
		i--
	}
	if i >= 0 && (*rs)[i].Contains(p, n) {
		return (*rs)[i], true
	}
	return Region{}, false
}
