package device

import "testing"

func TestRegionSet(t *testing.T) {
	var s RegionSet
	if _, ok := s.Find(100, 1); ok {
		t.Fatal("empty set found a region")
	}
	s.Add(Region{Base: 1000, Size: 100, Gen: 2})
	s.Add(Region{Base: 100, Size: 50, Gen: 1})
	s.Add(Region{Base: 5000, Size: 10, Gen: 3})
	for _, c := range []struct {
		p    Ptr
		n    int64
		gen  uint64
		want bool
	}{
		{100, 50, 1, true}, {120, 30, 1, true}, {120, 31, 0, false}, {99, 1, 0, false},
		{1000, 0, 2, true}, {1099, 1, 2, true}, {1100, 1, 0, false}, {5009, 1, 3, true}, {6000, 1, 0, false},
	} {
		r, ok := s.Find(c.p, c.n)
		if ok != c.want || (ok && r.Gen != c.gen) {
			t.Errorf("Find(%d, %d) = %+v, %v; want gen %d, %v", c.p, c.n, r, ok, c.gen, c.want)
		}
	}
	s.Remove(1000)
	if _, ok := s.Find(1050, 1); ok {
		t.Error("found a removed region")
	}
	if r, ok := s.Find(5000, 10); !ok || r.Gen != 3 {
		t.Errorf("Find after Remove = %+v, %v", r, ok)
	}
	s.Remove(42) // not there: no change
	if _, ok := s.Find(100, 1); !ok {
		t.Error("lost a region")
	}
}
