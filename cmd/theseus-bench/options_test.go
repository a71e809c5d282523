package main

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/theseus"
)

func TestSizes(t *testing.T) {
	for _, c := range []struct {
		min, max, f, step int64
		want              []int64
	}{
		{8, 64, 2, 0, []int64{8, 16, 32, 64}},
		{8, 100, 4, 0, []int64{8, 32}},
		{1, 1, 2, 0, []int64{1}},
		{0, 3, 1, 1, []int64{0, 1, 2, 3}},
		{10, 35, 1, 10, []int64{10, 20, 30}},
		{8, 64 << 20, 2, 0, nil}, // checked by length below
	} {
		got, err := sizes(c.min, c.max, c.f, c.step)
		if err != nil {
			t.Fatalf("sizes(%d, %d, %d, %d): %v", c.min, c.max, c.f, c.step, err)
		}
		if c.want == nil {
			if len(got) != 24 || got[0] != 8 || got[23] != 64<<20 {
				t.Errorf("8 B..64 MiB by 2: %d sizes %v", len(got), got)
			}
			continue
		}
		if d := cmp.Diff(c.want, got); d != "" {
			t.Errorf("sizes(%d, %d, %d, %d) (-want +got):\n%s", c.min, c.max, c.f, c.step, d)
		}
	}
	for _, c := range [][4]int64{{10, 5, 2, 0}, {-1, 5, 2, 0}, {0, 8, 2, 0}, {8, 64, 1, 0}, {8, maxBytesLimit + 1, 2, 0}, {8, 64, 0, 1 << 20}, {8, 64, -2, 1 << 20}} {
		if _, err := sizes(c[0], c[1], c[2], c[3]); err == nil {
			t.Errorf("sizes%v: no error", c)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"8": 8, "128M": 128 << 20, "1G": 1 << 30, "64K": 64 << 10, "2MB": 2 << 20, " 16 ": 16} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "12Q", "M"} {
		if _, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q): no error", in)
		}
	}
}

func TestIterations(t *testing.T) {
	for _, c := range []struct {
		size                  int64
		itersSet, warmSet, ck bool
		iters, warmup         int
	}{
		{8, false, false, true, 20, 5},
		{0, false, false, true, 20, 5},
		{256 << 10, false, false, true, 16, 4},
		{1 << 20, false, false, true, 4, 1},
		{64 << 20, false, false, true, 1, 0}, // the check run warms up
		{64 << 20, false, false, false, 1, 1},
		{64 << 20, true, true, true, 20, 5}, // given on the command line: as given
	} {
		it, w := iterations(c.size, 20, 5, c.itersSet, c.warmSet, c.ck)
		if it != c.iters || w != c.warmup {
			t.Errorf("iterations(%d, set %v/%v, check %v) = %d, %d; want %d, %d", c.size, c.itersSet, c.warmSet, c.ck, it, w, c.iters, c.warmup)
		}
	}
}

func TestParseLists(t *testing.T) {
	ts, err := parseTypes("float,half,bf16,int")
	if err != nil {
		t.Fatal(err)
	}
	want := []dtype{{"float", theseus.Float32}, {"half", theseus.Float16}, {"bfloat16", theseus.Bfloat16}, {"int32", theseus.Int32}}
	if d := cmp.Diff(want, ts); d != "" {
		t.Errorf("types (-want +got):\n%s", d)
	}
	if all, _ := parseTypes("all"); len(all) != 12 {
		t.Errorf("all types: %d", len(all))
	}
	if _, err := parseTypes("float128"); err == nil {
		t.Error("float128 accepted")
	}
	ops, err := parseOps("max,avg")
	if err != nil || len(ops) != 2 || ops[1].Op != theseus.Avg {
		t.Errorf("ops %v, %v", ops, err)
	}
	if _, err := parseOps("mulsum"); err == nil {
		t.Error("mulsum accepted")
	}
	cs, err := parseColls("all_reduce,gather")
	if err != nil || !cmp.Equal(cs, []ir.Collective{ir.AllReduce, ir.Gather}) {
		t.Errorf("colls %v, %v", cs, err)
	}
	cs, err = parseColls("sendrecv,alltoallv")
	if err != nil || !cmp.Equal(cs, []ir.Collective{ir.SendRecv, collAlltoAllv}) {
		t.Errorf("point-to-point rows %v, %v", cs, err)
	}
	if cs, err := parseColls("all"); err != nil || slices.Contains(cs, ir.SendRecv) || slices.Contains(cs, collAlltoAllv) {
		t.Errorf("all: %v, %v (the point-to-point rows are outside all)", cs, err)
	}
	for _, bad := range []string{"custom", "bogus"} {
		if _, err := parseColls(bad); err == nil {
			t.Errorf("collective %q accepted", bad)
		}
	}
}

// FuzzSizes: any range and step either fails or yields a short increasing
// list inside the range; it never loops or panics.
func FuzzSizes(f *testing.F) {
	f.Add(int64(8), int64(64<<20), int64(2), int64(0))
	f.Add(int64(0), int64(10), int64(1), int64(3))
	f.Fuzz(func(t *testing.T, min, max, factor, step int64) {
		got, err := sizes(min, max, factor, step)
		if err != nil {
			return
		}
		if len(got) == 0 || got[0] != min {
			t.Fatalf("sizes(%d, %d, %d, %d) = %v", min, max, factor, step, got)
		}
		for i, s := range got {
			if s > max || i > 0 && s <= got[i-1] {
				t.Fatalf("sizes(%d, %d, %d, %d) = %v", min, max, factor, step, got)
			}
		}
	})
}
