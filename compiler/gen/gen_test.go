package gen

import (
	"errors"
	"fmt"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/theseus-ccl/theseus/compiler/verify"
	"github.com/theseus-ccl/theseus/ir"
)

func TestAlgorithmsTable(t *testing.T) {
	algos := Algorithms()
	var names []string
	for _, a := range algos {
		names = append(names, a.Name)
	}
	want := []string{"chain", "dbtree", "direct", "hier", "oneshot", "pull", "push", "rhd", "ring", "tree", "twoshot"}
	if d := cmp.Diff(want, names); d != "" {
		t.Fatalf("algorithm names (-want +got):\n%s", d)
	}
	seen := map[string]string{}
	for _, a := range algos {
		for _, s := range append([]string{a.Name}, a.Aliases...) {
			if o, dup := seen[s]; dup {
				t.Errorf("name %q used by %s and %s", s, o, a.Name)
			}
			seen[s] = a.Name
			for c := ir.Collective(0); c < ir.NumCollectives; c++ {
				if got, want := Supports(s, c), a.supports(c); got != want {
					t.Errorf("Supports(%q, %v) = %v, want %v", s, c, got, want)
				}
			}
		}
		if a.Summary == "" || a.Constraints == "" || len(a.Collectives) == 0 {
			t.Errorf("%s: incomplete documentation", a.Name)
		}
	}
	// The table returned is a copy.
	algos[0].Collectives[0] = ir.Custom
	if Algorithms()[0].Collectives[0] == ir.Custom {
		t.Error("Algorithms returns shared slices")
	}
	if Supports("nosuch", ir.AllReduce) {
		t.Error("Supports accepts an unknown algorithm")
	}
	// Every collective but sendrecv and custom has a generator.
	for c := ir.Collective(0); c < ir.NumCollectives; c++ {
		k := 0
		for _, a := range algos {
			if a.supports(c) {
				k++
			}
		}
		if c != ir.SendRecv && c != ir.Custom && k == 0 {
			t.Errorf("%v has %d generators", c, k)
		}
	}
}

func TestGenerateErrors(t *testing.T) {
	ar := Options{Collective: ir.AllReduce, NRanks: 8}
	with := func(f func(*Options)) Options { o := ar; f(&o); return o }
	tests := []struct {
		algo string
		opts Options
		want error
	}{
		{"nosuch", ar, ErrUnknownAlgorithm},
		{"direct", ar, ErrUnsupported},
		{"oneshot", Options{Collective: ir.AllGather, NRanks: 4}, ErrUnsupported},
		{"ring", with(func(o *Options) { o.NRanks = 0 }), ErrOptions},
		{"ring", with(func(o *Options) { o.NRanks = ir.MaxRanks + 1 }), ErrOptions},
		{"ring", with(func(o *Options) { o.Channels = -1 }), ErrOptions},
		{"ring", with(func(o *Options) { o.Channels = MaxChannels + 1 }), ErrOptions},
		{"ring", with(func(o *Options) { o.Protocol = ir.NumProtocols }), ErrOptions},
		{"ring", with(func(o *Options) { o.Root = 3 }), ErrOptions},
		{"ring", with(func(o *Options) { o.NLocalRanks = 3 }), ErrOptions},
		{"ring", with(func(o *Options) { o.NLocalRanks = -1 }), ErrOptions},
		{"ring", with(func(o *Options) { o.Order = []int{0, 1, 2} }), ErrOptions},
		{"ring", with(func(o *Options) { o.Order = []int{0, 1, 2, 3, 4, 5, 6, 6} }), ErrOptions},
		{"ring", with(func(o *Options) { o.Order = []int{0, 1, 2, 3, 4, 5, 6, 8} }), ErrOptions},
		{"ring", with(func(o *Options) { o.Avoid = []int{9} }), ErrOptions},
		{"ring", with(func(o *Options) { o.Avoid = []int{1, 1} }), ErrOptions},
		{"ring", with(func(o *Options) { o.Avoid = []int{1} }), ErrAvoid},
		{"rhd", with(func(o *Options) { o.Avoid = []int{1} }), ErrAvoid},
		{"hier", ar, ErrOptions},
		{"tree", with(func(o *Options) { o.Avoid = []int{0, 1, 2, 3, 4} }), ErrAvoid},
		{"chain", Options{Collective: ir.Broadcast, NRanks: 4, Avoid: []int{1, 2}}, ErrAvoid},
		{"chain", Options{Collective: ir.Broadcast, NRanks: 4, Root: 4}, ErrOptions},
		{"chain", Options{Collective: ir.Broadcast, NRanks: 4, Root: -1}, ErrOptions},
		{"dbtree", with(func(o *Options) { o.Channels = 17 }), ErrOptions},
		{"direct", Options{Collective: ir.AllToAll, NRanks: 100, Channels: 2}, ErrOptions},
		{"push", Options{Collective: ir.Scatter, NRanks: 8, Protocol: ir.LL}, ErrOptions},
		{"pull", Options{Collective: ir.AllToAll, NRanks: 8, NLocalRanks: 4}, ErrUnsupported},
		{"ring", with(func(o *Options) { o.NRanks = 4096; o.Channels = 4 }), ErrOptions},
	}
	for _, tc := range tests {
		p, err := Generate(tc.algo, tc.opts)
		if !errors.Is(err, tc.want) || p != nil {
			t.Errorf("Generate(%q, %+v) = %v, %v; want %v", tc.algo, tc.opts, p != nil, err, tc.want)
		}
	}
	// Aliases and case are accepted.
	for _, name := range []string{"RING", "allpairs", "Double-Binary-Tree", "halving-doubling", "hierarchical", "pipeline"} {
		a, ok := lookup(name)
		if !ok {
			t.Errorf("lookup(%q) failed", name)
			continue
		}
		o := Options{Collective: a.Collectives[0], NRanks: 4, NLocalRanks: 4}
		if _, err := Generate(name, o); err != nil {
			t.Errorf("Generate(%q): %v", name, err)
		}
	}
}

// TestStructure checks, for every generator on several sizes, what the
// verifier's structural and pairing checks need: exactly nranks ranks, the
// declared buffer sizes, refs inside their buffers, threadblock peers, one
// threadblock per connection end, sends and receives pairing in number and
// count per connection, dependencies on publishing steps of other
// threadblocks, and paired channel ends.
func TestStructure(t *testing.T) {
	ns := []int{2, 3, 7, 12}
	if !testing.Short() {
		ns = append(ns, 17)
	}
	for _, c := range cases(ns, []int{1, 3}) {
		p, err := Generate(c.algo, c.opts)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if err := checkStructure(p); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
}

func checkStructure(p *ir.Program) error {
	n := p.NRanks
	if len(p.Ranks) != n {
		return fmt.Errorf("%d ranks, want %d", len(p.Ranks), n)
	}
	if !p.InPlace || !p.OutOfPlace || p.MinBytes != 0 || p.MaxBytes != 0 {
		return fmt.Errorf("arrangements %v/%v window %d..%d", p.InPlace, p.OutOfPlace, p.MinBytes, p.MaxBytes)
	}
	if p.Collective.Rooted() != (p.Root >= 0) {
		return fmt.Errorf("root %d for %v", p.Root, p.Collective)
	}
	type conn struct{ a, b, c int }
	sends, recvs := map[conn][]int64{}, map[conn][]int64{}
	for r := range p.Ranks {
		rk := &p.Ranks[r]
		for k := ir.Input; k <= ir.Output; k++ {
			if want := ir.Blocks(p.Collective, k, n, r, max(p.Root, 0)) * p.ChunksPerBlock; rk.Chunks[k] != want {
				return fmt.Errorf("rank %d declares %d %v chunks, want %d", r, rk.Chunks[k], k, want)
			}
		}
		for c, ch := range rk.Channels {
			if ch.Peer < 0 || ch.Peer >= n || ch.Peer == r {
				return fmt.Errorf("rank %d channel %d: peer %d", r, c, ch.Peer)
			}
			o := p.Ranks[ch.Peer].Channels
			if ch.PeerChannel < 0 || ch.PeerChannel >= len(o) || o[ch.PeerChannel].Peer != r || o[ch.PeerChannel].PeerChannel != c {
				return fmt.Errorf("rank %d channel %d does not pair", r, c)
			}
		}
		sendEnd, recvEnd := map[[2]int]bool{}, map[[2]int]bool{}
		for t, tb := range rk.TBs {
			if len(tb.Ops) == 0 {
				return fmt.Errorf("rank %d tb %d is empty", r, t)
			}
			for _, x := range [][2]int{{tb.SendPeer, 0}, {tb.RecvPeer, 1}} {
				if x[0] == r || x[0] >= n || x[0] < -1 {
					return fmt.Errorf("rank %d tb %d: bad peer %d", r, t, x[0])
				}
			}
			if tb.SendPeer >= 0 {
				if sendEnd[[2]int{tb.SendPeer, tb.Chan}] {
					return fmt.Errorf("rank %d: two tbs send to %d on chan %d", r, tb.SendPeer, tb.Chan)
				}
				sendEnd[[2]int{tb.SendPeer, tb.Chan}] = true
			}
			if tb.RecvPeer >= 0 {
				if recvEnd[[2]int{tb.RecvPeer, tb.Chan}] {
					return fmt.Errorf("rank %d: two tbs receive from %d on chan %d", r, tb.RecvPeer, tb.Chan)
				}
				recvEnd[[2]int{tb.RecvPeer, tb.Chan}] = true
			}
			for s, op := range tb.Ops {
				info := op.Code.Info()
				where := fmt.Sprintf("rank %d tb %d step %d (%v)", r, t, s, op.Code)
				if info.Data && op.Count < 1 {
					return fmt.Errorf("%s: count %d", where, op.Count)
				}
				if len(op.Srcs) < info.MinSrcs || (info.MaxSrcs >= 0 && len(op.Srcs) > info.MaxSrcs) ||
					len(op.Dsts) < info.MinDsts || (info.MaxDsts >= 0 && len(op.Dsts) > info.MaxDsts) {
					return fmt.Errorf("%s: %d srcs, %d dsts", where, len(op.Srcs), len(op.Dsts))
				}
				if info.Sends {
					if tb.SendPeer < 0 {
						return fmt.Errorf("%s: no send peer", where)
					}
					k := conn{r, tb.SendPeer, tb.Chan}
					sends[k] = append(sends[k], op.Count)
				}
				if info.Recvs {
					if tb.RecvPeer < 0 {
						return fmt.Errorf("%s: no recv peer", where)
					}
					k := conn{tb.RecvPeer, r, tb.Chan}
					recvs[k] = append(recvs[k], op.Count)
				}
				for _, ref := range append(append([]ir.Ref(nil), op.Srcs...), op.Dsts...) {
					owner := r
					if ref.Chan >= 0 {
						if ref.Chan >= len(rk.Channels) {
							return fmt.Errorf("%s: channel %d", where, ref.Chan)
						}
						owner = rk.Channels[ref.Chan].Peer
					}
					size := p.Ranks[owner].Chunks[ref.Buf]
					if ref.Off < 0 || ref.Off+op.Count > size {
						return fmt.Errorf("%s: %v[%d+%d] outside %d chunks of rank %d", where, ref.Buf, ref.Off, op.Count, size, owner)
					}
				}
				for _, ch := range op.Chans {
					if ch < 0 || ch >= len(rk.Channels) {
						return fmt.Errorf("%s: channel %d", where, ch)
					}
				}
				for _, d := range op.Deps {
					if d.TB == t || d.TB < 0 || d.TB >= len(rk.TBs) || d.Step < 0 || d.Step >= len(rk.TBs[d.TB].Ops) {
						return fmt.Errorf("%s: bad dependency %+v", where, d)
					}
					if !rk.TBs[d.TB].Ops[d.Step].Publish {
						return fmt.Errorf("%s: dependency %+v on a step that does not publish", where, d)
					}
				}
			}
		}
	}
	var keys []conn
	for k := range sends {
		keys = append(keys, k)
	}
	for k := range recvs {
		if _, ok := sends[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return fmt.Sprint(keys[i]) < fmt.Sprint(keys[j]) })
	for _, k := range keys {
		if d := cmp.Diff(sends[k], recvs[k]); d != "" {
			return fmt.Errorf("connection %d->%d chan %d: sends and receives differ (-sends +recvs):\n%s", k.a, k.b, k.c, d)
		}
	}
	return nil
}

// TestCheck: Check accepts what Generate accepts on a sample of shapes and
// refuses, without building, direct beyond its threadblocks, hier without
// nlocalranks, pull and push with LL or over their threadblocks, and options
// out of range; pull serves where direct cannot.
func TestCheck(t *testing.T) {
	for _, c := range cases([]int{1, 2, 3, 6}, []int{1, 2}) {
		_, gerr := Generate(c.algo, c.opts)
		cerr := Check(c.algo, c.opts)
		if cerr != nil && gerr == nil {
			t.Errorf("%v: Check refuses (%v) what Generate accepts", c, cerr)
		}
		if gerr != nil && cerr == nil && !errors.Is(gerr, ErrAvoid) {
			t.Errorf("%v: Generate refuses (%v) what Check accepts", c, gerr)
		}
	}
	for _, c := range []struct {
		algo string
		o    Options
	}{
		{"direct", Options{Collective: ir.AllToAll, NRanks: 129}},
		{"direct", Options{Collective: ir.Gather, NRanks: 65, Channels: 2}},
		{"hier", Options{Collective: ir.AllReduce, NRanks: 8}},
		{"pull", Options{Collective: ir.AllToAll, NRanks: 8, Protocol: ir.LL}},
		{"push", Options{Collective: ir.Gather, NRanks: 8, NLocalRanks: 4, Protocol: ir.LL}},
		{"push", Options{Collective: ir.AllToAll, NRanks: 200, NLocalRanks: 8, Channels: 16}},
		{"ring", Options{Collective: ir.AllReduce, NRanks: 4, Avoid: []int{4}}},
	} {
		if err := Check(c.algo, c.o); !errors.Is(err, ErrOptions) {
			t.Errorf("%s %+v: Check = %v, want ErrOptions", c.algo, c.o, err)
		}
		if _, err := Generate(c.algo, c.o); err == nil {
			t.Errorf("%s %+v: Generate accepts it", c.algo, c.o)
		}
	}
	if testing.Short() {
		return
	}
	for _, c := range []ir.Collective{ir.AllToAll, ir.Gather, ir.Scatter} {
		o := Options{Collective: c, NRanks: 200}
		if err := Check("pull", o); err != nil {
			t.Fatal(err)
		}
		p, err := Generate("pull", o)
		if err != nil {
			t.Fatal(err)
		}
		if ds := verify.Verify(p, verify.Options{}); verify.HasErrors(ds) {
			t.Errorf("pull %s at 200 ranks: %v", c, ds[0])
		}
	}
}

// TestCheckBoundsAllPairs: the all-pairs generators refuse, up front and
// without building, the shapes whose programs would be over the op bound
// (counting oneshot's per-op peer lists) or over the verifier's channel
// ends per rank: t1 finding H1, where the default context's oneshot entry
// built gigabytes at 4096 ranks and ran out of memory at 65536.
func TestCheckBoundsAllPairs(t *testing.T) {
	if MaxChannelEnds != verify.MaxChannels {
		t.Errorf("MaxChannelEnds = %d, verify.MaxChannels = %d", MaxChannelEnds, verify.MaxChannels)
	}
	for _, c := range []struct {
		algo string
		o    Options
	}{
		{"oneshot", Options{Collective: ir.AllReduce, NRanks: 2048, Protocol: ir.LL}},
		{"oneshot", Options{Collective: ir.AllReduce, NRanks: 4096, Protocol: ir.LL}},
		{"oneshot", Options{Collective: ir.AllReduce, NRanks: 65536, Protocol: ir.LL}},
		{"oneshot", Options{Collective: ir.AllReduce, NRanks: 8192}},
		{"oneshot", Options{Collective: ir.AllReduce, NRanks: 200, Channels: 32, Protocol: ir.LL}},
		{"pull", Options{Collective: ir.Gather, NRanks: 200, Channels: 32}},
		{"twoshot", Options{Collective: ir.AllReduce, NRanks: 1000}},
		{"direct", Options{Collective: ir.AllToAll, NRanks: 1000}},
	} {
		var err error
		allocs := testing.AllocsPerRun(1, func() { err = Check(c.algo, c.o) })
		if !errors.Is(err, ErrOptions) {
			t.Errorf("%s %v at %d ranks, %d channels: Check = %v, want ErrOptions", c.algo, c.o.Collective, c.o.NRanks, c.o.Channels, err)
		}
		if allocs > 20 {
			t.Errorf("%s at %d ranks: Check made %v allocations", c.algo, c.o.NRanks, allocs)
		}
		// Generate refuses it as cheaply (twoshot at 1000 ranks built
		// 1.4 GB before refusing).
		allocs = testing.AllocsPerRun(1, func() { _, err = Generate(c.algo, c.o) })
		if !errors.Is(err, ErrOptions) || allocs > 20 {
			t.Errorf("%s at %d ranks: Generate = %v after %v allocations", c.algo, c.o.NRanks, err, allocs)
		}
	}
	// What the default context relies on at 1024 ranks still passes.
	if err := Check("oneshot", Options{Collective: ir.AllReduce, NRanks: 1024, Protocol: ir.LL}); err != nil {
		t.Error(err)
	}
	if err := Check("oneshot", Options{Collective: ir.AllReduce, NRanks: 128, Channels: 32, Protocol: ir.LL}); err != nil {
		t.Error(err)
	}
}
