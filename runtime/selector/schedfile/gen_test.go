package schedfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/selector"
)

// genCase is one generated entry at one shape.
type genCase struct {
	algo      string
	coll      ir.Collective
	n, l      int
	proto     ir.Protocol
	k         int
	avoid     []int
	wantChans int // the channels the loader settles on
}

func (c genCase) String() string {
	return fmt.Sprintf("%s/%s/n%d/l%d/%s/k%d/avoid%v", c.algo, c.coll, c.n, c.l, c.proto, c.k, c.avoid)
}

func (c genCase) request(rank int) selector.LoadRequest {
	return selector.LoadRequest{Path: c.String(), Collective: c.coll, NRanks: c.n, NLocalRanks: c.l, Rank: rank,
		Gen: &selector.GenSpec{Algorithm: c.algo, Protocol: c.proto, Channels: c.k, Avoid: c.avoid, NLocalRanks: c.l}}
}

var genCases = []genCase{
	{algo: "ring", coll: ir.AllReduce, n: 1, k: 1, wantChans: 1},
	{algo: "ring", coll: ir.AllReduce, n: 3, k: 2, wantChans: 2},
	{algo: "ring", coll: ir.AllGather, n: 5, k: 1, wantChans: 1},
	{algo: "ring", coll: ir.ReduceScatter, n: 6, k: 4, wantChans: 4},
	{algo: "ring", coll: ir.AllReduce, n: 2, k: 32, wantChans: 32},
	{algo: "hier", coll: ir.AllReduce, n: 8, l: 4, k: 2, wantChans: 2},
	{algo: "hier", coll: ir.AllGather, n: 6, l: 2, k: 1, wantChans: 1},
	{algo: "hier", coll: ir.ReduceScatter, n: 4, l: 1, k: 1, wantChans: 1},
	{algo: "dbtree", coll: ir.AllReduce, n: 7, k: 1, avoid: []int{3}, wantChans: 1},
	{algo: "tree", coll: ir.Broadcast, n: 7, k: 2, wantChans: 2},
	{algo: "chain", coll: ir.Reduce, n: 6, k: 1, avoid: []int{2}, wantChans: 1},
	{algo: "direct", coll: ir.AllToAll, n: 4, proto: ir.LL, k: 1, wantChans: 1},
	{algo: "direct", coll: ir.Scatter, n: 5, k: 1, wantChans: 1},
	{algo: "oneshot", coll: ir.AllReduce, n: 4, proto: ir.LL, k: 1, wantChans: 1},
	{algo: "rhd", coll: ir.AllGather, n: 6, k: 1, wantChans: 1},
	// direct at 9 ranks takes 8 threadblocks per lane: 32 lanes exceed
	// gen.MaxThreadblocks, 16 do too, 8 fit.
	{algo: "direct", coll: ir.AllGather, n: 9, k: 32, wantChans: 8},
}

// TestGeneratedMatchesCompile: a generated entry's bundle, built rank by
// rank from the legalisation plan, has exactly the metadata, summaries
// and tables `theseusc compile` gives the whole program (the same
// generator options through compiler/passes), on every rank, whichever
// rank loads first; the bundle records that it was verified.
func TestGeneratedMatchesCompile(t *testing.T) {
	for _, c := range genCases {
		t.Run(c.String(), func(t *testing.T) {
			first := c.n / 2
			info, err := Loader{}.LoadFor(c.request(first))
			if err != nil {
				t.Fatal(err)
			}
			b := info.Artifact.(*bundle.Bundle)
			for r := range c.n {
				if (b.Tables[r] != nil) != (r == first) {
					t.Fatalf("after rank %d's load, rank %d's section written = %v", first, r, b.Tables[r] != nil)
				}
			}
			p, err := gen.Generate(c.algo, gen.Options{Collective: c.coll, NRanks: c.n, NLocalRanks: c.l, Protocol: c.proto,
				Channels: c.wantChans, Avoid: c.avoid})
			if err != nil {
				t.Fatal(err)
			}
			want, ds, err := passes.Compile(p, passes.Options{})
			if err != nil || want == nil {
				t.Fatal(err, ds)
			}
			for r := range c.n {
				if _, err := (Loader{}).LoadFor(c.request(r)); err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			if b.Meta != want.Meta || !b.Verified || !want.Verified {
				t.Errorf("meta %+v (verified %v), compile's %+v", b.Meta, b.Verified, want.Meta)
			}
			if d := cmp.Diff(want.Ranks, b.Ranks, cmpopts.EquateEmpty()); d != "" {
				t.Errorf("summaries (-compile +generated):\n%s", d)
			}
			for r := range c.n {
				if !bytes.Equal(b.Tables[r], want.Tables[r]) {
					t.Errorf("rank %d's table differs from compile's", r)
				}
			}
			if err := b.CheckTables(); err != nil {
				t.Error(err)
			}
			if info.NRanks != c.n || info.Collective != c.coll || !info.InPlace || !info.OutOfPlace {
				t.Errorf("info %+v", info)
			}
		})
	}
}

// TestGeneratedConcurrentRanks: ranks of one process (goroutines) load the
// same shape at once; each gets its table, the shape is built once.
func TestGeneratedConcurrentRanks(t *testing.T) {
	c := genCase{algo: "ring", coll: ir.AllReduce, n: 8, k: 3}
	var wg sync.WaitGroup
	bs := make([]*bundle.Bundle, c.n)
	for r := range c.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			info, err := Loader{}.LoadFor(c.request(r))
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
				return
			}
			bs[r] = info.Artifact.(*bundle.Bundle)
			if _, err := bs[r].Table(r); err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
		}()
	}
	wg.Wait()
	for r := range bs {
		if bs[r] != bs[0] {
			t.Fatalf("rank %d got another bundle", r)
		}
	}
	// K=3 is not halved: the ring accepts it.
	if bs[0].Meta.ChunksPerBlock != int64(c.n*3) {
		t.Errorf("chunks per block %d, want %d (3 channels)", bs[0].Meta.ChunksPerBlock, c.n*3)
	}
}

// TestGeneratedErrors: a shape the generator refuses at every channel count
// (the ring keeps every rank relaying: avoid fails), an unknown algorithm,
// and the failure is the same for every rank (cached per shape).
func TestGeneratedErrors(t *testing.T) {
	c := genCase{algo: "ring", coll: ir.AllReduce, n: 4, k: 1, avoid: []int{1}}
	_, err := Loader{}.LoadFor(c.request(0))
	if !errors.Is(err, gen.ErrAvoid) {
		t.Errorf("ring avoiding a rank: %v, want gen.ErrAvoid", err)
	}
	if _, err2 := (Loader{}).LoadFor(c.request(3)); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("rank 3: %v, rank 0: %v", err2, err)
	}
	bad := genCase{algo: "nosuch", coll: ir.AllReduce, n: 2, k: 1}
	if _, err := (Loader{}).LoadFor(bad.request(0)); !errors.Is(err, gen.ErrUnknownAlgorithm) {
		t.Errorf("unknown algorithm: %v", err)
	}
}

// TestGeneratedLargeRegenerates: a program over keepOps is not kept after
// the first rank's section; another rank's section is written from a
// regenerated program (not verified again), and equals compile's.
func TestGeneratedLargeRegenerates(t *testing.T) {
	if testing.Short() {
		t.Skip("a 384-rank ring")
	}
	c := genCase{algo: "ring", coll: ir.AllReduce, n: 384, k: 1}
	info, err := Loader{}.LoadFor(c.request(7))
	if err != nil {
		t.Fatal(err)
	}
	b := info.Artifact.(*bundle.Bundle)
	v, _ := genCache.Load(genKey{algo: "ring", coll: ir.AllReduce, channels: 1, n: 384, avoid: "[]"})
	sh := v.(*genShape)
	if sh.strong != nil {
		t.Fatal("a program over keepOps is kept")
	}
	raw, err := b.TableBytes(200)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: 384})
	want, _, err := passes.Compile(p, passes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw, want.Tables[200]) || !bytes.Equal(b.Tables[7], want.Tables[7]) {
		t.Error("tables differ from compile's")
	}
}

// ringBundle compiles compiler/gen's n-rank ring allreduce (1 channel,
// Simple) and writes its bundle under dir.
func ringBundle(b *testing.B, dir string, n int) string {
	b.Helper()
	p, err := gen.Generate("ring", gen.Options{Collective: ir.AllReduce, NRanks: n})
	if err != nil {
		b.Fatal(err)
	}
	bd, ds, err := passes.Compile(p, passes.Options{})
	if err != nil || bd == nil {
		b.Fatal(err, ds)
	}
	path := filepath.Join(dir, fmt.Sprintf("ring%d.tsb", n))
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := bd.WriteTo(f); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkLoadRank is what one rank of a job pays to load a compiled ring
// allreduce bundle (compiler/gen, 1 channel; the 1024-rank one is 571 MB):
// Loader.LoadFor opens it (header, head with every rank's summary and the
// section index, the ID over the head) and reads and checks the calling
// rank's section only (its SHA-256, optable.Decode, the table against the
// summary). Ranks load in turn (rank i%n), so no section is read twice.
// Goal (issue 20): at 1024 ranks, <= 50 ms and <= 64 MB allocated.
func BenchmarkLoadRank(b *testing.B) {
	for _, n := range []int{8, 64, 256, 1024} {
		b.Run(fmt.Sprintf("nranks=%d", n), func(b *testing.B) {
			if n > 256 && testing.Short() {
				b.Skip("a 571 MB bundle")
			}
			path := ringBundle(b, b.TempDir(), n)
			st, _ := os.Stat(path)
			b.ReportMetric(float64(st.Size())/1e6, "bundle-MB")
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				r := i % n
				i++
				info, err := Loader{}.LoadFor(selector.LoadRequest{Path: path, Collective: ir.AllReduce, NRanks: n, Rank: r})
				if err != nil {
					b.Fatal(err)
				}
				if bd := info.Artifact.(*bundle.Bundle); bd.Tables[r] == nil || bd.Tables[(r+1)%n] != nil && n > 1 {
					b.Fatal("not exactly the calling rank's section read")
				}
			}
		})
	}
}

// BenchmarkLoadGenerated is a generated entry's cost (compiler/gen's ring
// allreduce, 1 channel), by nranks:
//
//   - shape: the first load of a shape in a process: generate the whole
//     program, verify it with every check, prepare the legalisation (every
//     rank's channel ends and slots), write the calling rank's section;
//   - rank: one more rank's section of a shape already built: legalise that
//     rank alone and lower it against the others' channel ends.
func BenchmarkLoadGenerated(b *testing.B) {
	for _, n := range []int{8, 64, 256, 1024} {
		c := genCase{algo: "ring", coll: ir.AllReduce, n: n, k: 1}
		key := genKey{algo: "ring", coll: ir.AllReduce, channels: 1, n: n, avoid: "[]"}
		b.Run(fmt.Sprintf("shape/nranks=%d", n), func(b *testing.B) {
			if n > 256 && testing.Short() {
				b.Skip("seconds per iteration")
			}
			b.ReportAllocs()
			for b.Loop() {
				genCache.Delete(key)
				if _, err := (Loader{}).LoadFor(c.request(n / 2)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("rank/nranks=%d", n), func(b *testing.B) {
			if n > 256 && testing.Short() {
				b.Skip("seconds to set up")
			}
			info, err := Loader{}.LoadFor(c.request(0))
			if err != nil {
				b.Fatal(err)
			}
			v, _ := genCache.Load(key)
			sh := v.(*genShape)
			src, _ := sh.source() // keep a large program while measuring
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if _, _, err := sh.section(i % n); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.StopTimer()
			runtime.KeepAlive(src)
			runtime.KeepAlive(info)
		})
	}
}

// TestGeneratedPrebuiltKernels: a generated entry whose shape has prebuilt
// specialised kernels (runtime/speckernels: the one-channel LL one-shot
// allreduce of 2, 4 and 8 ranks on one node) gives each rank's kernel of
// its datatypes, none for another datatype; other shapes have none.
func TestGeneratedPrebuiltKernels(t *testing.T) {
	for _, c := range []genCase{
		{algo: "oneshot", coll: ir.AllReduce, n: 2, proto: ir.LL, k: 1},
		{algo: "oneshot", coll: ir.AllReduce, n: 8, proto: ir.LL, k: 1},
	} {
		for r := range c.n {
			info, err := Loader{}.LoadFor(c.request(r))
			if err != nil {
				t.Fatal(err)
			}
			b := info.Artifact.(*bundle.Bundle)
			if !b.HasKernels() {
				t.Fatalf("%v: no kernels", c)
			}
			for _, dt := range []ir.DataType{ir.Float32, ir.Bfloat16, ir.Float16} {
				if ptx, err := b.Kernel(r, dt); err != nil || !bytes.Contains(ptx, []byte(".entry theseus_spec")) {
					t.Errorf("%v rank %d %v: %d bytes, %v; want the specialised module", c, r, dt, len(ptx), err)
				}
			}
			if ptx, err := b.Kernel(r, ir.Int32); err != nil || ptx != nil {
				t.Errorf("%v rank %d int32: %d bytes, %v; want none", c, r, len(ptx), err)
			}
		}
	}
	for _, c := range []genCase{
		{algo: "oneshot", coll: ir.AllReduce, n: 3, proto: ir.LL, k: 1},                 // not built
		{algo: "oneshot", coll: ir.AllReduce, n: 2, proto: ir.LL, k: 16},                // the wide one
		{algo: "ring", coll: ir.AllReduce, n: 2, k: 1},                                  // Simple
		{algo: "oneshot", coll: ir.AllReduce, n: 4, l: 2, proto: ir.LL, k: 1},           // two nodes
		{algo: "dbtree", coll: ir.AllReduce, n: 4, k: 1, avoid: []int{3}, wantChans: 1}, // an avoided rank
	} {
		info, err := Loader{}.LoadFor(c.request(0))
		if err != nil {
			t.Fatal(err)
		}
		if b := info.Artifact.(*bundle.Bundle); b.HasKernels() {
			t.Errorf("%v: prebuilt kernels", c)
		}
	}
}
