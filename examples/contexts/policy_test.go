package contexts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
)

// quietLog drops the selector's messages; warnings fail the test.
type quietLog struct{ t *testing.T }

func (l quietLog) Warnf(format string, args ...any) { l.t.Errorf("selector warning: "+format, args...) }
func (l quietLog) Infof(string, ...any)             {}

// newSelector returns a selector over a private copy of the embedded
// context whose slow_rank log holds slow (none when slow is nil).
func newSelector(t *testing.T, slow *int) *selector.Selector {
	t.Helper()
	logs := map[string]int{}
	if slow != nil {
		logs[SlowRankLog] = *slow
	}
	return newSelectorWith(t, logs, "")
}

// newSelectorWith returns a selector over a private copy of the embedded
// context whose value logs (SlowRankLog, LLMaxBytesLog) hold one value each
// as logs says, and whose schedule manifest is replaced by the file
// manifest when not "".
func newSelectorWith(t *testing.T, logs map[string]int, manifest string) *selector.Selector {
	t.Helper()
	dir := t.TempDir()
	if err := Materialize(dir); err != nil {
		t.Fatal(err)
	}
	for name, v := range logs {
		line := fmt.Sprintf("{\"value\":%d}\n", v)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if manifest != "" {
		data, err := os.ReadFile(manifest)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "schedule_manifest.jsonl"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := selector.New(selector.Options{Dir: dir, Loader: schedfile.Loader{}, Logger: quietLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// request is a float32 request of msg bytes (ir.MessageBytes).
func request(c ir.Collective, n, nlocal int, msg int64, root int) *selector.Request {
	r := &selector.Request{Coll: c, Count: msg / 4 / ir.MaxBlocks(c, n), DataType: ir.Float32, RedOp: ir.Sum,
		Root: -1, NRanks: n, NLocalRanks: nlocal}
	if c.Rooted() {
		r.Root = root
	}
	return r
}

func chosenName(t *testing.T, s *selector.Selector, r *selector.Request) string {
	t.Helper()
	e, err := s.Explain(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if e.Chosen == selector.None {
		t.Fatalf("no schedule for %+v:\n%s", r, e)
	}
	for _, c := range e.Candidates {
		if c.ID == e.Chosen {
			return c.Name
		}
	}
	t.Fatalf("chosen %d is not among the candidates", e.Chosen)
	return ""
}

func ptr(v int) *int { return &v }

// TestExplain pins what the default context selects for a few requests.
func TestExplain(t *testing.T) {
	cases := []struct {
		slow   *int
		coll   ir.Collective
		n, l   int
		msg    int64
		root   int
		want   string
		reason string
	}{
		{nil, ir.AllReduce, 4, 4, 8, 0, "allreduce_oneshot_ll", "small: LL all-pairs"},
		{nil, ir.AllReduce, 4, 4, 2 << 10, 0, "allreduce_oneshot_ll", "up to 2 KiB: LL, one channel"},
		{nil, ir.AllReduce, 4, 4, 32 << 10, 0, "allreduce_oneshot_ll_wide", "32 KiB is still small: LL, a channel per chunk"},
		{nil, ir.AllReduce, 4, 4, 256<<10 + 16, 0, "allreduce_ring", "large: ring"},
		{nil, ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_ring", "large: ring"},
		{nil, ir.AllReduce, 3, 3, 64 << 20, 0, "allreduce_ring", "3 ranks: ring"},
		{nil, ir.AllReduce, 16, 16, 64 << 20, 0, "allreduce_ring", "16 ranks on one node: ring"},
		{nil, ir.AllReduce, 8, 4, 64 << 20, 0, "allreduce_hier", "two nodes: hierarchical"},
		{nil, ir.AllReduce, 8, 2, 64 << 20, 0, "allreduce_hier", "four nodes: hierarchical"},
		{nil, ir.AllReduce, 6, 3, 64 << 20, 0, "allreduce_hier", "two nodes of 3: hierarchical"},
		{nil, ir.AllReduce, 2, 1, 64 << 20, 0, "allreduce_hier", "two nodes of one rank: hierarchical"},
		{nil, ir.AllGather, 16, 4, 64 << 20, 0, "allgather_hier", "four nodes: hierarchical"},
		{nil, ir.AllReduce, 1, 1, 64 << 20, 0, "allreduce_ring", "one rank: a local copy"},
		{ptr(-1), ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_ring", "-1: nobody is slow"},
		{ptr(2), ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_dbtree_avoid2", "slow 2: trees with 2 a leaf"},
		{ptr(2), ir.AllReduce, 8, 4, 64 << 20, 0, "allreduce_dbtree_avoid2", "slow 2 beats the node shape"},
		{ptr(2), ir.AllReduce, 6, 6, 64 << 20, 0, "allreduce_dbtree_avoid2", "at 6 ranks too"},
		{ptr(2), ir.AllReduce, 4, 4, 1024, 0, "allreduce_oneshot_ll", "one-shot relays through nobody"},
		{ptr(9), ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_ring", "a rank outside the communicator is ignored"},
		{ptr(9), ir.AllReduce, 12, 12, 64 << 20, 0, "allreduce_dbtree_avoid9", "slow 9 at 12 ranks"},
		{ptr(20), ir.AllReduce, 24, 24, 64 << 20, 0, "allreduce_ring", "no avoid variant for rank 20: the demoted ring is still the best"},
		{ptr(1), ir.AllReduce, 2, 2, 64 << 20, 0, "allreduce_ring", "nobody relays at 2 ranks"},
		{nil, ir.AllGather, 4, 4, 1 << 20, 0, "allgather_ring", "large allgather: ring"},
		{ptr(3), ir.AllGather, 4, 4, 1 << 20, 0, "allgather_direct", "slow: direct relays through nobody"},
		{ptr(3), ir.ReduceScatter, 8, 8, 1 << 20, 0, "reducescatter_direct", "slow: direct relays through nobody"},
		{nil, ir.AllToAll, 4, 4, 64 << 20, 0, "alltoall_direct", "alltoall: direct"},
		{nil, ir.AllToAll, 200, 200, 1 << 20, 0, "alltoall_pull", "beyond 128 ranks: pull"},
		{nil, ir.Gather, 4, 4, 1024, 2, "gather_direct", "gather: direct"},
		{nil, ir.Scatter, 130, 130, 1 << 20, 7, "scatter_pull", "beyond 128 ranks: pull"},
		{nil, ir.AllToAll, 256, 8, 1 << 20, 0, "alltoall_push", "beyond 128 ranks on several nodes: push"},
		{nil, ir.AllToAll, 256, 8, 1024, 0, "alltoall_push", "small messages too (direct LL needs 255 threadblocks)"},
		{nil, ir.Gather, 1024, 8, 1 << 20, 5, "gather_push", "beyond 128 ranks on several nodes: push"},
		{ptr(3), ir.Scatter, 130, 1, 1 << 20, 129, "scatter_push", "nodes of one rank, a slow rank: push relays through nobody"},
		{nil, ir.AllToAll, 64, 8, 1 << 20, 0, "alltoall_direct", "up to 128 ranks on several nodes: direct"},
		{nil, ir.Broadcast, 4, 4, 1024, 3, "broadcast_direct", "small broadcast: direct"},
		{nil, ir.Broadcast, 130, 130, 1024, 3, "broadcast_tree", "small broadcast beyond 128 ranks: tree"},
		{nil, ir.Broadcast, 4, 4, 256 << 10, 0, "broadcast_tree", "medium broadcast: tree"},
		{nil, ir.Broadcast, 4, 4, 4 << 20, 1, "broadcast_chain", "large broadcast: chain"},
		{ptr(2), ir.Broadcast, 4, 4, 4 << 20, 1, "broadcast_chain_avoid1", "slow 2 is logical 1 for root 1"},
		{ptr(1), ir.Broadcast, 4, 4, 4 << 20, 1, "broadcast_chain", "the slow rank is the root, which never relays"},
		{ptr(0), ir.Reduce, 4, 4, 4 << 20, 1, "reduce_chain", "slow 0 is logical 3, the tail"},
		{ptr(2), ir.Reduce, 4, 4, 256 << 10, 1, "reduce_tree_avoid1", "slow 2 is logical 1, interior in the tree"},
		{ptr(5), ir.Broadcast, 8, 8, 256 << 10, 3, "broadcast_tree_avoid2", "slow 5 is logical 2 for root 3"},
	}
	sels := map[string]*selector.Selector{}
	for _, c := range cases {
		key := "nil"
		if c.slow != nil {
			key = fmt.Sprint(*c.slow)
		}
		s := sels[key]
		if s == nil {
			s = newSelector(t, c.slow)
			sels[key] = s
		}
		if got := chosenName(t, s, request(c.coll, c.n, c.l, c.msg, c.root)); got != c.want {
			t.Errorf("slow %s, %s n=%d l=%d %d B root %d: chose %s, want %s (%s)", key, c.coll, c.n, c.l, c.msg, c.root, got, c.want, c.reason)
		}
	}
}

// TestEveryRequestServedAvoidingSlow sweeps every collective, world size,
// node shape, message size, root and slow rank: some schedule is always
// selected, and it never relays through the slow rank when a schedule that
// avoids it exists (at n <= 2 nothing relays).
func TestEveryRequestServedAvoidingSlow(t *testing.T) {
	_, es := mustBuild(t)
	byName := map[string]*entry{}
	for _, e := range es {
		byName[e.Name] = e
	}
	sizes := []int64{0, 16, 64 << 10, 64<<10 + 16<<3, 1 << 20, 1<<20 + 16<<3, 64 << 20}
	slows := []int{-1, 0, 1, 2, 3, 4, 5, 6, 7}
	maxN := 8
	if testing.Short() {
		slows, maxN = []int{-1, 1, 3}, 4
	}
	for _, slow := range slows {
		s := newSelector(t, ptr(slow))
		for _, sh := range shapesUpTo(maxN) {
			n, l := sh.n, sh.l
			for _, c := range collectives {
				for _, root := range rootsOf(c, n) {
					for _, msg := range sizes {
						r := request(c, n, l, msg, root)
						id, err := s.Select(context.Background(), r)
						if err != nil {
							t.Fatal(err)
						}
						if id == selector.None {
							t.Fatalf("slow %d: no schedule for %s n=%d l=%d %d B root %d", slow, c, n, l, msg, root)
						}
						ref, _ := s.Schedule(id)
						e := byName[ref.File]
						if e == nil {
							t.Fatalf("selected unknown schedule %s", ref.File)
						}
						logical := slow
						if c.Rooted() && slow >= 0 {
							logical = (slow - root + n) % n
						}
						if e.Avoid == nil && slow >= 0 && slow < n && slices.Contains(e.Relays(n), logical) && avoidable(c, n, logical) {
							t.Errorf("slow %d: %s n=%d l=%d %d B root %d chose %s, which relays through it",
								slow, c, n, l, msg, root, e.Name)
						}
					}
				}
			}
		}
		s.Close() // each shape's schedules were built for this selector only
	}
}

// avoidable reports whether the default context has a schedule that keeps
// (logical) rank a off relaying paths for collective c at n ranks, in
// every message-size regime: the avoid variants for ranks below avoidRanks,
// and the relay-free direct exchange of allgather and reducescatter.
func avoidable(c ir.Collective, n, a int) bool {
	switch c {
	case ir.AllGather, ir.ReduceScatter, ir.AllToAll, ir.Gather, ir.Scatter:
		return true
	}
	return a < avoidRanks
}

// rootsOf lists the roots a request of c at n ranks may name: every rank
// for a rooted collective, 0 otherwise.
func rootsOf(c ir.Collective, n int) []int {
	if !c.Rooted() {
		return []int{0}
	}
	roots := make([]int, n)
	for r := range roots {
		roots[r] = r
	}
	return roots
}
