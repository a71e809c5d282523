package contexts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

// staticManifest writes the default context's schedule manifest in the form
// it had before ll_max_bytes existed (commit a8fa0ce): LL schedules with the
// static window "max_bytes":llMaxDefault and preference 30 (the wide ones
// 31), the Simple ones that compete with them taking over with
// "min_bytes":llMaxDefault+1. Its lines are in the
// same order as the default context's, so a schedule has the same id (and
// name) in both. It returns the file's path.
func staticManifest(t *testing.T) string {
	t.Helper()
	_, es := mustBuild(t)
	var static []*entry
	withLL := map[ir.Collective]bool{}
	for _, e := range es {
		withLL[e.Coll] = withLL[e.Coll] || e.Protocol == ir.LL
	}
	for _, e := range es {
		c := *e
		switch {
		case c.Protocol == ir.LL:
			c.MaxBytes, c.Pref = llMaxDefault, fmt.Sprint(prefSmall)
			if c.Channels == llWideChannels {
				c.Pref = fmt.Sprint(prefWide)
			}
		case withLL[c.Coll] && c.MinBytes == 0 && c.MaxBytes == 0:
			c.MinBytes = llMaxDefault + 1
		}
		static = append(static, &c)
	}
	data, err := manifestLines(static)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "static_schedule_manifest.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// selectedName selects r and returns the chosen schedule's file name
// without directory and extension, or "" when no schedule serves r.
func selectedName(t *testing.T, s *selector.Selector, r *selector.Request) string {
	t.Helper()
	id, err := s.Select(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if id == selector.None {
		return ""
	}
	ref, ok := s.Schedule(id)
	if !ok {
		t.Fatalf("selected %d, which the selector does not know", id)
	}
	return strings.TrimSuffix(filepath.Base(ref.File), ".tsb")
}

// sweepCounts are the per-block counts (float32 elements) of the size sweep
// for a collective with b blocks: one element, and the counts one below, at
// and one above each of 1 KiB, 32 KiB (broadcast's and reduce's direct
// window), 256 KiB (the default LL crossover), 1 MiB (the broadcast/reduce tree window's end), 4 MiB (llCap) and 16 MiB,
// so that the message sizes straddle every threshold by one element per
// block.
func sweepCounts(b int64) []int64 {
	out := []int64{1}
	for _, target := range []int64{1 << 10, llNarrowMax, smallMax, llMaxDefault, midMax, llCap, 16 << 20} {
		c := target / 4 / b
		out = append(out, c-1, c, c+1)
	}
	return out
}

// TestStaticCrossoverEquivalence: with ll_max_bytes at its default, the
// default context selects exactly what the static-window manifest it
// replaces selects, for every collective, world size, node shape, root,
// slow rank (none, each rank, one outside the communicator) and a size
// sweep across every threshold.
func TestStaticCrossoverEquivalence(t *testing.T) {
	slows := []int{-1, 0, 1, 2, 3, 4, 5, 6, 7, 9}
	if testing.Short() {
		slows = []int{-1, 0, 2, 5}
	}
	compared := 0
	static := staticManifest(t)
	maxN := 8
	if testing.Short() {
		maxN = 4
	}
	for _, slow := range slows {
		logs := map[string]int{}
		if slow >= 0 {
			logs[SlowRankLog] = slow
		}
		now := newSelectorWith(t, logs, "")
		old := newSelectorWith(t, logs, static)
		for _, sh := range shapesUpTo(maxN)[1:] { // one rank has no crossover (LL needs 2)
			n, l := sh.n, sh.l
			{
				for _, c := range collectives {
					roots := rootsOf(c, n)
					b := ir.MaxBlocks(c, n)
					for _, root := range roots {
						for _, count := range sweepCounts(b) {
							r := &selector.Request{Coll: c, Count: count, DataType: ir.Float32, RedOp: ir.Sum,
								Root: -1, NRanks: n, NLocalRanks: l}
							if c.Rooted() {
								r.Root = root
							}
							got, want := selectedName(t, now, r), selectedName(t, old, r)
							if got == "" {
								t.Errorf("slow %d: no schedule for %s n=%d l=%d %d B root %d", slow, c, n, l, count*4*b, root)
							}
							if got != want {
								t.Errorf("slow %d: %s n=%d l=%d %d B root %d: chose %s, the static windows chose %s",
									slow, c, n, l, count*4*b, root, got, want)
							}
							compared++
						}
					}
				}
			}
		}
	}
	t.Logf("%d requests compared", compared)
}

// TestLLMaxBytes pins what the default context selects when an operator
// has published ll_max_bytes: the LL/Simple crossover of allreduce,
// allgather, reducescatter and alltoall moves both ways, never past llCap,
// and leaves broadcast and reduce (Simple on both sides of their static
// windows) and the slow_rank policies alone.
func TestLLMaxBytes(t *testing.T) {
	cases := []struct {
		ll, slow int // -1: not published
		coll     ir.Collective
		n, l     int
		msg      int64
		want     string
		reason   string
	}{
		{1 << 20, -1, ir.AllReduce, 2, 2, 512 << 10, "allreduce_oneshot_ll_wide", "the hot swap at 2 ranks: 512 KiB moves to LL"},
		{-1, -1, ir.AllReduce, 2, 2, 512 << 10, "allreduce_ring", "default: 512 KiB is above 256 KiB"},
		{-1, -1, ir.AllReduce, 2, 2, 256 << 10, "allreduce_oneshot_ll_wide", "default: 256 KiB is LL"},
		{-1, -1, ir.AllReduce, 8, 4, 256 << 10, "allreduce_oneshot_ll", "several nodes: the one-channel LL"},
		{262144, -1, ir.AllReduce, 2, 2, 512 << 10, "allreduce_ring", "publishing the default again: back to the ring"},
		{1 << 20, -1, ir.AllReduce, 4, 4, 1 << 20, "allreduce_oneshot_ll_wide", "1 MiB is at the crossover"},
		{1 << 20, -1, ir.AllReduce, 4, 4, 1<<20 + 16, "allreduce_ring", "one element above it"},
		{1 << 20, -1, ir.AllReduce, 8, 4, 2 << 20, "allreduce_hier", "above it, the node shape still decides"},
		{1 << 20, -1, ir.AllGather, 8, 8, 1 << 20, "allgather_direct_ll_wide", "allgather follows"},
		{1 << 20, -1, ir.ReduceScatter, 4, 4, 512 << 10, "reducescatter_direct_ll_wide", "reducescatter follows"},
		{1 << 20, -1, ir.AllToAll, 4, 4, 1 << 20, "alltoall_direct_ll_wide", "alltoall follows"},
		{1 << 20, 2, ir.AllReduce, 4, 4, 256 << 10, "allreduce_oneshot_ll_wide", "LL relays through nobody: a slow rank changes nothing"},
		{1 << 20, 2, ir.AllReduce, 4, 4, 2 << 20, "allreduce_dbtree_avoid2", "above the crossover slow_rank decides as before"},
		{1 << 20, -1, ir.Broadcast, 4, 4, 256 << 10, "broadcast_tree", "broadcast keeps its static windows"},
		{0, -1, ir.AllReduce, 4, 4, 1024, "allreduce_ring", "0: LL never preferred"},
		{0, -1, ir.AllReduce, 8, 2, 1024, "allreduce_hier", "0: the hierarchical schedule for small messages too"},
		{0, 3, ir.AllGather, 4, 4, 1024, "allgather_direct", "0 and a slow rank: the relay-free Simple direct"},
		{0, -1, ir.AllToAll, 2, 2, 64, "alltoall_direct", "0: Simple alltoall"},
		{0, -1, ir.Broadcast, 4, 4, 1024, "broadcast_direct", "broadcast keeps its static windows"},
		{64 << 20, -1, ir.AllReduce, 4, 4, llCap, "allreduce_oneshot_ll_wide", "LL up to its static cap"},
		{64 << 20, -1, ir.AllReduce, 4, 4, llCap + 16, "allreduce_ring", "never above llCap"},
		{64 << 20, -1, ir.AllToAll, 8, 8, 64 << 20, "alltoall_direct", "never above llCap"},
	}
	sels := map[[2]int]*selector.Selector{}
	for _, c := range cases {
		key := [2]int{c.ll, c.slow}
		s := sels[key]
		if s == nil {
			logs := map[string]int{}
			if c.ll >= 0 {
				logs[LLMaxBytesLog] = c.ll
			}
			if c.slow >= 0 {
				logs[SlowRankLog] = c.slow
			}
			s = newSelectorWith(t, logs, "")
			sels[key] = s
		}
		if got := chosenName(t, s, request(c.coll, c.n, c.l, c.msg, 0)); got != c.want {
			t.Errorf("ll_max_bytes %d, slow %d, %s n=%d l=%d %d B: chose %s, want %s (%s)", c.ll, c.slow, c.coll, c.n, c.l, c.msg, got, c.want, c.reason)
		}
	}
}

// TestLLMaxBytesAtRunTime: appending {"value":1048576} to ll_max_bytes.jsonl
// of a context in use moves the 512 KiB allreduce from the Simple ring to
// the LL one-shot (the wide one: 512 KiB is above llNarrowMax) at the next epoch (not before), and appending 262144 (the default) moves
// it back, on each of two ranks at the same request (one MIN-allreduce
// agrees on the snapshot, docs/selection-context.md §7).
func TestLLMaxBytesAtRunTime(t *testing.T) {
	const n, period = 2, 4
	dir := t.TempDir()
	if err := Materialize(dir); err != nil {
		t.Fatal(err)
	}
	group := selector.NewInProcessGroup(n)
	sels := make([]*selector.Selector, n)
	for r := range n {
		s, err := selector.New(selector.Options{Dir: dir, Loader: schedfile.Loader{}, Logger: quietLog{t},
			CheckPeriod: period, Agreement: group[r], Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		sels[r] = s
	}
	publish := func(v int) {
		f, err := os.OpenFile(filepath.Join(dir, LLMaxBytesLog), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if _, err := fmt.Fprintf(f, "{\"value\":%d}\n", v); err != nil {
			t.Fatal(err)
		}
	}
	// Requests 1..12; epochs at 1, 5, 9. Published after request 2 (read
	// at 5) and after request 6 (read at 9).
	var want []string
	for i := 1; i <= 12; i++ {
		switch {
		case i < 5 || i >= 9:
			want = append(want, "allreduce_ring")
		default:
			want = append(want, "allreduce_oneshot_ll_wide") // 512 KiB: above llNarrowMax
		}
	}
	got := make([][]string, n)
	for i := 1; i <= 12; i++ {
		names := make([]string, n)
		errs := make([]error, n)
		done := make(chan int, n)
		for r := range n {
			go func() {
				defer func() { done <- r }()
				id, err := sels[r].Select(context.Background(), request(ir.AllReduce, n, n, 512<<10, 0))
				if err != nil || id == selector.None {
					errs[r] = fmt.Errorf("rank %d request %d: id %d, %v", r, i, id, err)
					return
				}
				ref, _ := sels[r].Schedule(id)
				names[r] = strings.TrimSuffix(filepath.Base(ref.File), ".tsb")
			}()
		}
		for range n {
			<-done
		}
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for r := range n {
			got[r] = append(got[r], names[r])
		}
		switch i {
		case 2:
			publish(1 << 20)
		case 6:
			publish(262144)
		}
	}
	for r := range n {
		for i := range want {
			if got[r][i] != want[i] {
				t.Errorf("rank %d request %d: %s, want %s", r, i+1, got[r][i], want[i])
			}
		}
	}
}

// TestLLPreferenceBounds: an LL schedule's preference at or below
// ll_max_bytes (prefSmall) beats every Simple preference of the default
// context, and above it (llOff) loses to every one of them, whatever
// slow_rank says; so the crossover is ll_max_bytes exactly. The Simple
// schedules that compete with LL have no lower size bound, and the LL ones
// no other upper bound than llCap.
func TestLLPreferenceBounds(t *testing.T) {
	_, es := mustBuild(t)
	for _, e := range es {
		if e.Coll.Rooted() {
			continue
		}
		if e.Protocol == ir.LL {
			// The one-channel entry at every size, the wide one above llNarrowMax.
			lo, pref := int64(0), llPref(prefSmall)
			if e.Channels == llWideChannels {
				lo, pref = llNarrowMax+1, llPref(prefWide)
			}
			if e.Pref != pref || e.MinBytes != lo || e.MaxBytes != llCap {
				t.Errorf("%s: window %d..%d, preference %q", e.Name, e.MinBytes, e.MaxBytes, e.Pref)
			}
			continue
		}
		if e.MinBytes != 0 || e.MaxBytes != 0 {
			t.Errorf("%s: Simple with a static window %d..%d", e.Name, e.MinBytes, e.MaxBytes)
		}
	}
	// The Simple preferences range over [prefBase-demote, prefHier]
	// (demoted ring, undemoted hier); avoidPref and prefFlat lie inside.
	lo, hi := prefBase-demote, prefHier
	for _, p := range []int{prefBase, prefHier - demote, avoidPref, prefFlat} {
		lo, hi = min(lo, p), max(hi, p)
	}
	if !(prefSmall > hi && llOff < lo) {
		t.Errorf("LL preferences %d / %d do not bracket the Simple ones %d..%d", prefSmall, llOff, lo, hi)
	}
}
