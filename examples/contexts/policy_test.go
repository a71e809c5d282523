package contexts

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		{nil, ir.AllReduce, 4, 4, 8, 0, "allreduce_n4_oneshot_ll", "small: LL all-pairs"},
		{nil, ir.AllReduce, 4, 4, 64 << 10, 0, "allreduce_n4_oneshot_ll", "64 KiB is still small"},
		{nil, ir.AllReduce, 4, 4, 64<<10 + 16, 0, "allreduce_n4_ring", "large: ring"},
		{nil, ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_n4_ring", "large: ring"},
		{nil, ir.AllReduce, 8, 4, 64 << 20, 0, "allreduce_n8_hier_l4", "two nodes: hierarchical"},
		{nil, ir.AllReduce, 8, 2, 64 << 20, 0, "allreduce_n8_hier_l2", "four nodes: hierarchical"},
		{ptr(-1), ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_n4_ring", "-1: nobody is slow"},
		{ptr(2), ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_n4_dbtree_avoid2", "slow 2: trees with 2 a leaf"},
		{ptr(2), ir.AllReduce, 8, 4, 64 << 20, 0, "allreduce_n8_dbtree_avoid2", "slow 2 beats the node shape"},
		{ptr(2), ir.AllReduce, 4, 4, 1024, 0, "allreduce_n4_oneshot_ll", "one-shot relays through nobody"},
		{ptr(9), ir.AllReduce, 4, 4, 64 << 20, 0, "allreduce_n4_ring", "a rank outside the communicator is ignored"},
		{ptr(1), ir.AllReduce, 2, 2, 64 << 20, 0, "allreduce_n2_ring", "nobody relays at 2 ranks"},
		{nil, ir.AllGather, 4, 4, 1 << 20, 0, "allgather_n4_ring", "large allgather: ring"},
		{ptr(3), ir.AllGather, 4, 4, 1 << 20, 0, "allgather_n4_direct", "slow: direct relays through nobody"},
		{ptr(3), ir.ReduceScatter, 8, 8, 1 << 20, 0, "reducescatter_n8_direct", "slow: direct relays through nobody"},
		{nil, ir.AllToAll, 4, 4, 64 << 20, 0, "alltoall_n4_direct", "alltoall: direct"},
		{nil, ir.Gather, 4, 4, 1024, 2, "gather_n4_direct", "gather: direct"},
		{nil, ir.Broadcast, 4, 4, 1024, 3, "broadcast_n4_direct", "small broadcast: direct"},
		{nil, ir.Broadcast, 4, 4, 256 << 10, 0, "broadcast_n4_tree", "medium broadcast: tree"},
		{nil, ir.Broadcast, 4, 4, 4 << 20, 1, "broadcast_n4_chain", "large broadcast: chain"},
		{ptr(2), ir.Broadcast, 4, 4, 4 << 20, 1, "broadcast_n4_chain_avoid1", "slow 2 is logical 1 for root 1"},
		{ptr(1), ir.Broadcast, 4, 4, 4 << 20, 1, "broadcast_n4_chain", "the slow rank is the root, which never relays"},
		{ptr(0), ir.Reduce, 4, 4, 4 << 20, 1, "reduce_n4_chain", "slow 0 is logical 3, the tail"},
		{ptr(2), ir.Reduce, 4, 4, 256 << 10, 1, "reduce_n4_tree_avoid1", "slow 2 is logical 1, interior in the tree"},
		{ptr(5), ir.Broadcast, 8, 8, 256 << 10, 3, "broadcast_n8_tree_avoid2", "slow 5 is logical 2 for root 3"},
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
	_, es, _ := mustBuild(t)
	byName := map[string]*entry{}
	for _, e := range es {
		byName[e.Name] = e
	}
	sizes := []int64{0, 16, 64 << 10, 64<<10 + 16<<3, 1 << 20, 1<<20 + 16<<3, 64 << 20}
	for _, slow := range []int{-1, 0, 1, 2, 3, 4, 5, 6, 7} {
		s := newSelector(t, ptr(slow))
		for _, n := range worlds {
			for _, l := range append(divisors(n), n) {
				for _, c := range collectives {
					roots := rootsOf(c, n)
					for _, root := range roots {
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
							name := strings.TrimSuffix(filepath.Base(ref.File), ".tsb")
							e := byName[name]
							if e == nil {
								t.Fatalf("selected unknown schedule %s", ref.File)
							}
							logical := slow
							if c.Rooted() && slow >= 0 {
								logical = (slow - root + n) % n
							}
							if slow >= 0 && slow < n && slices.Contains(e.Relays, logical) {
								t.Errorf("slow %d: %s n=%d l=%d %d B root %d chose %s, which relays through it",
									slow, c, n, l, msg, root, name)
							}
						}
					}
				}
			}
		}
	}
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
