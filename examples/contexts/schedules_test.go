package contexts

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	bc "github.com/theseus-ccl/theseus/codegen/bytecode"
	"github.com/theseus-ccl/theseus/compiler/frontends/policy"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/selector"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
	"github.com/theseus-ccl/theseus/runtime/selector/vm"
)

var full = flag.Bool("contexts.full", false, "build and simulate every schedule of the default context at more shapes over a wide case matrix")

func mustBuild(t *testing.T) (map[string][]byte, []*entry) {
	t.Helper()
	files, es, err := build()
	if err != nil {
		t.Fatal(err)
	}
	return files, es
}

// shape is a communicator's nranks and ranks per node (0: nodes of
// different sizes).
type shape struct{ n, l int }

// shapesUpTo lists every (n, l) with n <= max and l dividing n, one node
// (l = n) first.
func shapesUpTo(max int) []shape {
	var out []shape
	for n := 1; n <= max; n++ {
		out = append(out, shape{n, n})
		for l := 1; l < n; l++ {
			if n%l == 0 {
				out = append(out, shape{n, l})
			}
		}
	}
	return out
}

// channels is the channel count the runtime asks e's generator for at n
// ranks: e.Channels evaluated (wideChannels or llWideChannels), 1
// without one.
func (e *entry) channels(n int) int {
	switch e.Channels {
	case "":
		return 1
	case wideChannels:
		return max(1, min(64/n, 32))
	case llWideChannels:
		return max(1, min(32/n, 16))
	}
	panic("unknown channel expression " + e.Channels)
}

// program is what the runtime generates for e at shape s: the most
// channels from e.channels halving down that the generator accepts, nil
// when e does not serve s (gen.Check).
func (e *entry) program(t testing.TB, s shape) *ir.Program {
	t.Helper()
	o := e.opts(s.n, s.l)
	o.Channels = 1
	if gen.Check(e.Algo, o) != nil {
		return nil
	}
	for k := e.channels(s.n); ; k /= 2 {
		o.Channels = k
		p, err := gen.Generate(e.Algo, o)
		if err == nil {
			return p
		}
		if !errors.Is(err, gen.ErrOptions) || k == 1 {
			t.Fatalf("%s at %v: %v", e.Name, s, err)
		}
	}
}

// TestBuildAtShapes loads every entry the way the runtime does
// (schedfile's generated path: generate, verify with every check, legalise
// and lower each rank alone) at every shape up to 8 ranks it serves (16
// with -contexts.full), and checks each rank's table against the whole
// program compiled by compiler/passes at every shape up to 4 ranks.
func TestBuildAtShapes(t *testing.T) {
	_, es := mustBuild(t)
	maxN, cmpN := 8, 4
	if *full {
		maxN, cmpN = 16, 8
	}
	if testing.Short() {
		maxN, cmpN = 4, 3
	}
	for _, e := range es {
		served := 0
		for _, s := range shapesUpTo(maxN) {
			o := e.opts(s.n, s.l)
			if gen.Check(e.Algo, o) != nil {
				continue
			}
			served++
			req := selector.LoadRequest{Path: e.Name, Collective: e.Coll, NRanks: s.n, NLocalRanks: s.l,
				Gen: &selector.GenSpec{Algorithm: e.Algo, Protocol: e.Protocol, Channels: e.channels(s.n), Avoid: e.Avoid, NLocalRanks: o.NLocalRanks}}
			var b *bundle.Bundle
			for r := range s.n {
				req.Rank = r
				info, err := schedfile.Loader{}.LoadFor(req)
				if err != nil {
					t.Fatalf("%s at %v rank %d: %v", e.Name, s, r, err)
				}
				b = info.Artifact.(*bundle.Bundle)
			}
			if s.n > cmpN {
				continue
			}
			want, ds, err := passes.Compile(e.program(t, s), passes.Options{})
			if err != nil || want == nil {
				t.Fatalf("%s at %v: %v %v", e.Name, s, err, ds)
			}
			for r := range s.n {
				if string(b.Tables[r]) != string(want.Tables[r]) {
					t.Errorf("%s at %v: rank %d's table differs from compile's", e.Name, s, r)
				}
			}
		}
		if served == 0 && (e.Avoid == nil || e.Avoid[0] < maxN) {
			t.Errorf("%s serves no shape up to %d ranks", e.Name, maxN)
		}
	}
}

// simOptions is the case matrix: quick (float32 sum, int8 max for reducing
// collectives, a tiny count and one that leaves a short last chunk) or wide
// (-contexts.full: every data type, sum/prod/max/avg, counts 0, 1, 7, a
// short-tailed one and a large one).
func simOptions(p *ir.Program, wide bool) interp.SimOptions {
	unit := p.ChunksPerBlock * 3 * 16
	o := interp.SimOptions{
		DataTypes: []ir.DataType{ir.Float32, ir.Int8},
		RedOps:    []ir.RedOp{ir.Sum, ir.Max},
		Counts:    []int64{7, 2*unit + 5},
		Timeout:   30e9,
	}
	if wide {
		o.DataTypes = nil
		o.RedOps = []ir.RedOp{ir.Sum, ir.Prod, ir.Max, ir.Avg}
		o.Counts = []int64{0, 1, 7, 2*unit + 5, 64 * unit}
	}
	return o
}

// TestSimulate runs every entry's legalised program in the host interpreter
// (runtime/interp, Simulate) and requires #wrong = 0 in every case: at 3
// and 4 ranks on one node, and 4 ranks on two nodes, over the quick matrix
// (with -contexts.full also 5, 6 and 8 ranks over the wide one).
func TestSimulate(t *testing.T) {
	_, es := mustBuild(t)
	shapes := []shape{{3, 3}, {4, 4}, {4, 2}}
	if *full {
		shapes = append(shapes, shape{5, 5}, shape{6, 3}, shape{8, 8}, shape{8, 2})
	}
	if testing.Short() {
		shapes = shapes[:1]
	}
	for _, e := range es {
		for _, s := range shapes {
			p := e.program(t, s)
			if p == nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/n%d_l%d", e.Name, s.n, s.l), func(t *testing.T) {
				st, err := passes.Run(p, passes.Options{StopAfter: "legalize"})
				if err != nil || st.Prog == nil {
					t.Fatal(err)
				}
				res, err := interp.Simulate(st.Prog, simOptions(st.Prog, *full))
				if err != nil {
					t.Fatal(err)
				}
				bad := 0
				for _, r := range res {
					if !r.OK() {
						if bad < 3 {
							t.Errorf("%v", r)
						}
						bad++
					}
				}
				if bad > 0 {
					t.Fatalf("%d of %d cases wrong", bad, len(res))
				}
			})
		}
	}
}

// evalPolicy evaluates a policy expression of the default context for a
// request of nranks n, nlocalranks l, root root and message size msg, with
// slow_rank slow and ll_max_bytes llMax.
func evalPolicy(t testing.TB, expr string, want policy.Want, n, l, root int, msg, slow, llMax int64) vm.Value {
	t.Helper()
	prog := compiledPolicy(t, expr, want)
	env := vm.Env{Attrs: []int64{slow, llMax}}
	env.Req[bc.ReqNRanks], env.Req[bc.ReqNLocalRanks], env.Req[bc.ReqRoot], env.Req[bc.ReqMessageSize] = int64(n), int64(l), int64(root), msg
	var m vm.VM
	v, f := m.Eval(prog, &env)
	if !f.OK() {
		t.Fatalf("%q: %s", expr, f.Describe(prog))
	}
	return v
}

var policies sync.Map // expression -> *vm.Program

// compiledPolicy compiles and links expr once (slow_rank in slot 0,
// ll_max_bytes in slot 1).
func compiledPolicy(t testing.TB, expr string, want policy.Want) *vm.Program {
	if p, ok := policies.Load(expr); ok {
		return p.(*vm.Program)
	}
	attrs := policy.AttrMap{
		"slow_rank":    {Name: "slow_rank", Type: bc.Int, Origin: bc.Exo},
		"ll_max_bytes": {Name: "ll_max_bytes", Type: bc.Int, Origin: bc.Exo},
		"root":         {Name: "root", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqRoot},
		"msgsize":      {Name: "msgsize", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqMessageSize},
		"nranks":       {Name: "nranks", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqNRanks},
		"nlocalranks":  {Name: "nlocalranks", Type: bc.Int, Origin: bc.Endo, Path: bc.ReqNLocalRanks},
	}
	p, ds := policy.Compile(expr, attrs, policy.Options{Want: want})
	if p == nil {
		t.Fatalf("%q: %v", expr, ds)
	}
	prog, err := vm.Load(p, func(im bc.Import) (int, error) {
		if im.Name == "ll_max_bytes" {
			return 1, nil
		}
		return 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	policies.Store(expr, prog)
	return prog
}

// TestPoliciesMatchRelays: the relays each entry's policies assume
// (entry.Relays) are those of its programs (the relay analysis, relays) at
// every shape up to 12 ranks; the preference of a schedule that relays is
// demoted exactly when the slow rank (its logical rank, for rooted
// collectives, for every root) relays; an avoid variant is usable exactly
// when its rank is slow and relays in the schedule it replaces, and its
// own program keeps that rank off relaying paths.
func TestPoliciesMatchRelays(t *testing.T) {
	_, es := mustBuild(t)
	byName := map[string]*entry{}
	for _, e := range es {
		byName[e.Name] = e
	}
	maxN := 12
	if testing.Short() {
		maxN = 6
	}
	for _, e := range es {
		for _, s := range shapesUpTo(maxN) {
			p := e.program(t, s)
			if p == nil {
				continue
			}
			got := relays(p)
			if e.Avoid != nil {
				if slices.Contains(got, e.Avoid[0]) {
					t.Errorf("%s at %v relays through its avoided rank %d", e.Name, s, e.Avoid[0])
				}
			} else if want := e.Relays(s.n); !slices.Equal(got, want) {
				t.Errorf("%s at %v: relays %v, the policy assumes %v", e.Name, s, got, want)
			}
			roots := []int{0}
			if e.Coll.Rooted() {
				roots = rootsOf(e.Coll, s.n)
			}
			for _, root := range roots {
				for slow := -1; slow <= s.n; slow++ {
					logical := slow
					if e.Coll.Rooted() && slow >= 0 && slow < s.n {
						logical = (slow - root + s.n) % s.n
					}
					msg := int64(e.MinBytes) + 16
					if e.Usable != "" {
						base := e
						if e.Replaces != "" {
							base = byName[e.Replaces]
						}
						u := evalPolicy(t, e.Usable, policy.WantBool, s.n, s.l, root, msg, int64(slow), 65536).Bool()
						want := true
						switch {
						case e.Avoid != nil:
							want = slow >= 0 && slow < s.n && logical == e.Avoid[0] && slices.Contains(base.Relays(s.n), logical)
						case e.Protocol == ir.LL && e.Channels == llWideChannels:
							want = s.n > 1 && s.n < 32 && s.l == s.n // the wide LL: one node, at least 2 channels
						case e.Protocol == ir.LL:
							want = s.n > 1
						case e.Algo == "hier":
							want = s.l < s.n
						case e.Algo == "direct":
							want = s.n > 2
						case e.Algo == "push":
							want = s.l < s.n
						}
						if u != want {
							t.Errorf("%s at %v root %d slow %d: usable %v, want %v", e.Name, s, root, slow, u, want)
						}
					}
					if e.Protocol == ir.LL || e.Avoid != nil {
						continue
					}
					pref := evalPolicy(t, e.Pref, policy.WantNumber, s.n, s.l, root, msg, int64(slow), 65536).Number()
					relaysSlow := slow >= 0 && slow < s.n && slices.Contains(e.Relays(s.n), logical)
					if demotedNow := pref < float64(prefOf(e)); demotedNow != relaysSlow && e.Algo != "direct" {
						t.Errorf("%s at %v root %d slow %d: preference %v, relays through the slow rank %v", e.Name, s, root, slow, pref, relaysSlow)
					}
				}
			}
		}
	}
}

// prefOf is an entry's undemoted preference.
func prefOf(e *entry) int {
	switch e.Algo {
	case "hier":
		return prefHier
	case "pull", "push":
		return prefFlat
	}
	if e.MaxBytes == smallMax {
		return prefSmall
	}
	return prefBase
}

// TestRelaysMatchGen checks the relay analysis the slow_rank policies are
// checked with against compiler/gen's own notion (Options.Avoid: a
// generator that does not place avoided ranks returns ErrAvoid exactly for
// the ranks that relay), at 3 to 6 ranks.
func TestRelaysMatchGen(t *testing.T) {
	_, es := mustBuild(t)
	for _, e := range es {
		if e.Avoid != nil || usesAvoid(e.Algo) {
			continue // avoid changes the program: checked through the variants
		}
		for _, s := range shapesUpTo(6) {
			p := e.program(t, s)
			if p == nil || s.n < 3 {
				continue
			}
			var want []int
			for r := range s.n {
				o := e.opts(s.n, s.l)
				o.Avoid = []int{r}
				_, err := gen.Generate(e.Algo, o)
				switch {
				case errors.Is(err, gen.ErrAvoid):
					want = append(want, r)
				case err != nil:
					t.Fatalf("%s avoid %d: %v", e.Name, r, err)
				}
			}
			if d := cmp.Diff(want, relays(p)); d != "" {
				t.Errorf("%s at %v: relays (-gen +analysis):\n%s", e.Name, s, d)
			}
		}
	}
}

func usesAvoid(algo string) bool {
	for _, a := range gen.Algorithms() {
		if a.Name == algo {
			return a.UsesAvoid
		}
	}
	return false
}

// TestRelaysOfKnownShapes pins the analysis on programs whose relays
// docs/generators.md states.
func TestRelaysOfKnownShapes(t *testing.T) {
	cases := []struct {
		algo string
		opts gen.Options
		want []int
	}{
		{"ring", gen.Options{Collective: ir.AllReduce, NRanks: 2}, nil},
		{"ring", gen.Options{Collective: ir.AllReduce, NRanks: 4}, []int{0, 1, 2, 3}},
		{"ring", gen.Options{Collective: ir.Broadcast, NRanks: 4}, []int{1, 2}},
		{"chain", gen.Options{Collective: ir.Reduce, NRanks: 4, Avoid: []int{1}}, []int{2, 3}},
		{"tree", gen.Options{Collective: ir.Broadcast, NRanks: 8}, []int{1, 2, 3}},
		{"direct", gen.Options{Collective: ir.AllGather, NRanks: 4}, nil},
		{"oneshot", gen.Options{Collective: ir.AllReduce, NRanks: 4, Protocol: ir.LL}, nil},
		{"pull", gen.Options{Collective: ir.AllToAll, NRanks: 5}, nil},
	}
	for _, c := range cases {
		p, err := gen.Generate(c.algo, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(c.want, relays(p)); d != "" {
			t.Errorf("%s %v: (-want +got):\n%s", c.algo, c.opts, d)
		}
	}
}

// everyShape lists every nranks from 1 to 1024, each with every
// nlocalranks that divides it and with 0 (nodes of different sizes).
func everyShape() []shape {
	var out []shape
	for n := 1; n <= 1024; n++ {
		out = append(out, shape{n, 0})
		for l := 1; l <= n; l++ {
			if n%l == 0 {
				out = append(out, shape{n, l})
			}
		}
	}
	return out
}

// TestServesEveryShape: for every nranks from 1 to 1024, every node shape, every collective and a message size in every regime, with no
// slow rank and with a slow one, some entry of the default context matches
// (its collective, window, and generator serving the shape: gen.Check) and
// is usable. (That the matched programs then build is TestBuildAtShapes'
// and TestGeneratesLarge's.)
func TestServesEveryShape(t *testing.T) {
	_, es := mustBuild(t)
	sizes := []int64{16, llNarrowMax + 16, smallMax, smallMax + 16, llMaxDefault + 16, midMax + 16, llCap + 16}
	checked := 0
	for _, s := range everyShape() {
		served := map[ir.Collective][]bool{}
		for _, e := range es {
			o := e.opts(s.n, s.l)
			o.Channels = 1
			if gen.Check(e.Algo, o) != nil {
				continue
			}
			for _, slow := range []int64{-1, int64(s.n / 2)} {
				for i, msg := range sizes {
					if msg < e.MinBytes || e.MaxBytes != 0 && msg > e.MaxBytes {
						continue
					}
					if e.Usable != "" && !evalPolicy(t, e.Usable, policy.WantBool, s.n, s.l, 0, msg, slow, 65536).Bool() {
						continue
					}
					if served[e.Coll] == nil {
						served[e.Coll] = make([]bool, 2*len(sizes))
					}
					served[e.Coll][i+len(sizes)*int(min(slow+1, 1))] = true
				}
			}
		}
		for _, c := range collectives {
			for i, ok := range served[c] {
				if !ok {
					t.Errorf("%s at %d ranks, %d per node: nothing serves %d B (slow rank %v)", c, s.n, s.l, sizes[i%len(sizes)], i >= len(sizes))
				}
			}
			if served[c] == nil {
				t.Errorf("%s at %d ranks, %d per node: nothing serves it", c, s.n, s.l)
			}
			checked++
		}
	}
	t.Logf("%d (shape, collective) pairs checked", checked)
}

// TestGeneratesLarge: at the large shapes the sampled sweep cannot build
// (up to 1024 ranks), the entry that serves each collective's large
// messages on one node and on nodes of 8 (pull on one node, push on
// several) generates within gen's limits (its channel count halved as the
// runtime does).
func TestGeneratesLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("programs of up to 2 M ops")
	}
	_, es := mustBuild(t)
	want := map[string]bool{"allreduce_ring": true, "allreduce_hier": true, "allgather_ring": true, "reducescatter_hier": true,
		"alltoall_pull": true, "alltoall_push": true, "broadcast_chain": true, "reduce_tree": true,
		"gather_pull": true, "gather_push": true, "scatter_pull": true, "scatter_push": true}
	for _, e := range es {
		if !want[e.Name] {
			continue
		}
		shapes := []shape{{1024, 1024}, {1024, 8}, {200, 8}}
		switch e.Algo {
		case "pull": // one node only (it reads peers' memory)
			shapes = []shape{{1024, 1024}, {200, 200}}
		case "push": // where pull cannot: several nodes
			shapes = []shape{{1024, 8}, {1024, 1}, {200, 8}}
		}
		for _, s := range shapes {
			if e.program(t, s) == nil {
				t.Errorf("%s does not serve %v", e.Name, s)
			}
		}
	}
}

func TestMaterialize(t *testing.T) {
	dir, remove, err := TempDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Files() {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := Default().(interface{ ReadFile(string) ([]byte, error) }).ReadFile(name)
		if string(got) != string(want) {
			t.Errorf("%s differs from the embedded file", name)
		}
	}
	if err := Materialize(dir); err != nil {
		t.Errorf("materialising over an identical copy: %v", err)
	}
	log := filepath.Join(dir, SlowRankLog)
	if err := os.WriteFile(log, []byte(`{"value":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Materialize(dir); !errors.Is(err, ErrExists) {
		t.Errorf("materialising over a changed log: err = %v, want ErrExists", err)
	}
	if err := remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("remove left %s: %v", dir, err)
	}
	if len(Hash()) != 64 {
		t.Errorf("Hash() = %q", Hash())
	}
}

func ExampleFiles() {
	fmt.Println(Files())
	// Output: [attribute_manifest.jsonl ll_max_bytes.jsonl schedule_manifest.jsonl slow_rank.jsonl]
}
