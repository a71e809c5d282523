package cuda

import (
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/bundle"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/codegen/specialize"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/passes"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	kernelsrc "github.com/theseus-ccl/theseus/cuda/kernel"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
	"github.com/theseus-ccl/theseus/runtime/interp"
	"github.com/theseus-ccl/theseus/runtime/selector/schedfile"
	"github.com/theseus-ccl/theseus/runtime/speckernels"
)

var diffSpec = flag.String("diff.spec", "", "TestDifferentialSpecialized: a directory of bundles with specialised kernels (theseusc compile --specialize; bench/gpu/make-spec-context.sh); default: build the default context's LL schedules of 2 and 4 ranks here with clang-14")

// specBundles are TestDifferentialSpecialized's bundles: those of
// -diff.spec, or, with clang-14 on this machine, the default context's
// LL allreduce, allgather and reducescatter of 2 and 4 ranks specialised
// for float32 and bfloat16.
func specBundles(t *testing.T) map[string]*bundle.Bundle {
	out := map[string]*bundle.Bundle{}
	if *diffSpec != "" {
		files, _ := filepath.Glob(filepath.Join(*diffSpec, "*.tsb"))
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b, err := bundle.Decode(data)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(b.Kernels) > 0 {
				out[filepath.Base(f)] = b
			}
		}
		if len(out) == 0 {
			t.Fatalf("-diff.spec %s: no bundle with specialised kernels", *diffSpec)
		}
		return out
	}
	clang, err := exec.LookPath("clang-14")
	if err != nil {
		t.Skip("no specialised kernels to test: give -diff.spec DIR (bench/gpu/make-spec-context.sh builds one) or install clang-14")
	}
	for _, c := range []struct {
		algo string
		coll ir.Collective
	}{{"oneshot", ir.AllReduce}, {"direct", ir.AllGather}, {"direct", ir.ReduceScatter}} {
		for _, n := range []int{2, 4} {
			p, err := gen.Generate(c.algo, gen.Options{Collective: c.coll, NRanks: n, Protocol: ir.LL})
			if err != nil {
				t.Fatal(err)
			}
			b, ds, err := passes.Compile(p, passes.Options{})
			if err != nil || b == nil {
				t.Fatalf("%s: %v %v", p.Name, err, ds)
			}
			for r := range n {
				src, err := specialize.Source(b.Tables[r], p.Name, r)
				if err != nil {
					t.Fatal(err)
				}
				mods, err := specialize.Compile(context.Background(), src, specialize.Options{Clang: clang, Kernel: kernelsrc.Sources,
					Flags: kernelsrc.ClangFlags(), DataTypes: []ir.DataType{ir.Float32, ir.Bfloat16}})
				if err != nil {
					t.Fatal(err)
				}
				for dt, ptx := range mods {
					b.Kernels = append(b.Kernels, bundle.Kernel{Rank: r, DataType: dt, PTX: ptx})
				}
			}
			bundle.SortKernels(b.Kernels)
			out[p.Name] = b
		}
	}
	return out
}

// TestDifferentialSpecialized is TestDifferential for specialised kernels
// (docs/specialize.md): each bundle's programs run on the GPU with every
// rank's specialised kernel of the request's datatype (World.Kernels) and
// on the host interpreter, over the datatypes the bundle has kernels for,
// every redop, both arrangements and the differential test's counts and
// packet formats, two launches each, and every rank's output must be
// bit-identical.
func TestDifferentialSpecialized(t *testing.T) {
	gputest.Require(t)
	bs := specBundles(t)
	names := make([]string, 0, len(bs))
	for n := range bs {
		names = append(names, n)
	}
	sort.Strings(names)
	var st diffSpecStats
	start := time.Now()
	for _, name := range names {
		b := bs[name]
		t.Run(name, func(t *testing.T) {
			tables := make([]*optable.Table, b.Meta.NRanks)
			for r := range tables {
				var err error
				if tables[r], err = b.Table(r); err != nil {
					t.Fatal(err)
				}
			}
			kernels := map[[2]int]*device.Kernel{}
			for _, k := range b.Kernels {
				kernels[[2]int{k.Rank, int(k.DataType)}] = &device.Kernel{Key: sha256.Sum256(k.PTX), PTX: k.PTX}
			}
			p := &ir.Program{Collective: b.Meta.Collective, NRanks: b.Meta.NRanks, Protocol: b.Meta.Protocol,
				InPlace: b.Meta.InPlace, OutOfPlace: b.Meta.OutOfPlace}
			diffSpecWorld(t, name, tables, p, kernels, &st)
		})
	}
	fmt.Printf("DIFFSPEC %d bundles, %d cases, %d mismatched, %d specialised launches, %v\n", len(bs), st.total, st.wrong, st.launches, time.Since(start).Round(time.Millisecond))
}

// TestDifferentialPrebuilt is TestDifferentialSpecialized for the kernels
// the library carries (runtime/speckernels: the default context's
// one-channel LL one-shot allreduce of 2, 4 and 8 ranks on one node): each
// shape's tables as the runtime generates them (schedfile.GeneratedTables),
// every rank's module of the archive for them (a module missing for its
// table fails: the runtime would run the generic executor instead), on the
// GPU against the host interpreter, bit for bit. Needs no clang.
func TestDifferentialPrebuilt(t *testing.T) {
	gputest.Require(t)
	var st diffSpecStats
	start := time.Now()
	for _, sh := range speckernels.Shapes {
		t.Run(sh.String(), func(t *testing.T) {
			set := speckernels.Lookup(sh)
			if set == nil {
				t.Fatalf("the archive has no kernels for %s", sh)
			}
			raw, err := schedfile.GeneratedTables(sh.Algo, sh.Coll, sh.Proto, sh.Channels, sh.NRanks, sh.NLocalRanks)
			if err != nil {
				t.Fatal(err)
			}
			tables := make([]*optable.Table, sh.NRanks)
			kernels := map[[2]int]*device.Kernel{}
			for r := range tables {
				if tables[r], err = optable.Decode(raw[r]); err != nil {
					t.Fatal(err)
				}
				for _, dt := range speckernels.DataTypes {
					ptx, err := set.Kernel(r, dt, raw[r])
					if err != nil || ptx == nil {
						t.Fatalf("rank %d %v: no prebuilt module for the generated table (%v)", r, dt, err)
					}
					kernels[[2]int{r, int(dt)}] = &device.Kernel{Key: sha256.Sum256(ptx), PTX: ptx}
				}
			}
			p, err := gen.Generate(sh.Algo, gen.Options{Collective: sh.Coll, NRanks: sh.NRanks, Protocol: sh.Proto, Channels: sh.Channels})
			if err != nil {
				t.Fatal(err)
			}
			diffSpecWorld(t, sh.String(), tables, &ir.Program{Collective: sh.Coll, NRanks: sh.NRanks, Protocol: sh.Proto,
				InPlace: p.InPlace, OutOfPlace: p.OutOfPlace}, kernels, &st)
		})
	}
	fmt.Printf("DIFFPREBUILT %d shapes, %d cases, %d mismatched, %d specialised launches, %v\n", len(speckernels.Shapes), st.total, st.wrong, st.launches, time.Since(start).Round(time.Millisecond))
}

// diffSpecStats are the specialised differential tests' counts.
type diffSpecStats struct{ total, wrong, launches int }

// diffSpecWorld runs the differential cases of p (diffCases) on the GPU,
// every rank with its specialised kernel of the case's datatype (kernels,
// by rank and datatype; cases of datatypes without one are skipped), and
// on the host interpreter, two launches each, and fails on the first
// output that is not bit-identical, or when no launch ran a specialised
// kernel.
func diffSpecWorld(t *testing.T, name string, tables []*optable.Table, p *ir.Program, kernels map[[2]int]*device.Kernel, st *diffSpecStats) {
	t.Helper()
	gw, err := NewWorld(0, tables)
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	used := 0
	defer func() { st.launches += used }() // (a failed case returns early)
	gw.Kernels = func(l int, dt ir.DataType) *device.Kernel {
		k := kernels[[2]int{l, int(dt)}]
		if k != nil {
			used++
		}
		return k
	}
	hw, err := newHostWorld(tables)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(2, uint64(len(name))))
	for _, c := range diffCases(p, true) {
		if kernels[[2]int{0, int(c.dt)}] == nil {
			continue
		}
		for launch := range 2 {
			st.total++
			req := interp.Request{Count: c.count, DataType: c.dt, RedOp: c.op, Root: c.root, InPlace: c.inplace,
				PacketType: c.pt, Launch: uint64(launch + 1), Timeout: 5 * time.Second}
			h, bad, msg := diffHost(rng, tables, hw, gw, req)
			if !bad {
				bad, msg = diffGPU(gw, h)
			}
			if bad {
				st.wrong++
				t.Errorf("%s %v %v inplace=%v count=%d %v launch=%d: %s", name, c.dt, c.op, c.inplace, c.count, c.pt, launch, msg)
				return
			}
		}
	}
	if used == 0 {
		t.Errorf("%s: no launch ran a specialised kernel", name)
	}
}
