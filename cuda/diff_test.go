package cuda

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/compiler/gen"
	"github.com/theseus-ccl/theseus/compiler/legalize"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/diag"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/ir/irtest"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

var (
	diffFull    = flag.Bool("diff.full", false, "run every datatype x redop for every program (long)")
	diffCorpus  = flag.String("diff.corpus", "", "directory of foreign schedules to include (default: ../../shared/corpus if present)")
	diffOut     = flag.String("diff.out", "", "append one line per case to this file")
	diffSample  = flag.Int("diff.sample", 7, "without -diff.full, run every Nth datatype x redop x shape case of a program (plus every float32 sum case)")
	diffThreads = flag.Int("diff.threads", 0, "threads per block for tables that do not say (0: the World's default, 512)")
	diffPTX     = flag.String("diff.ptx", "", "a folder of a measurement build of the kernel (theseus_<dtype>.ptx, cuda/kernel/build.sh bench) to run instead of the embedded kernel")
	diffPar     = flag.Bool("diff.parallel", false, "run programs in parallel (each World's ranks must then share the GPU with others': spin-waiting threadblocks of one program can starve another's and time out)")
)

type diffProgram struct {
	name string
	p    *ir.Program
}

func legalized(p *ir.Program) (*ir.Program, error) {
	if p.Level() == ir.LevelPrimitive {
		return p, nil
	}
	q, ds := legalize.Legalize(p)
	for _, d := range ds {
		if d.Severity == diag.Error {
			return nil, fmt.Errorf("legalize %s: %v", p.Name, d)
		}
	}
	return q, nil
}

// diffPrograms lists the schedules of the differential test: the generators
// for 2, 4 and 8 ranks, both protocols, and the IR fixtures.
func diffPrograms(t testing.TB) []diffProgram {
	var out []diffProgram
	for _, a := range gen.Algorithms() {
		for _, coll := range a.Collectives {
			for _, n := range []int{2, 4, 8} {
				for _, proto := range []ir.Protocol{ir.Simple, ir.LL} {
					opts := gen.Options{Collective: coll, NRanks: n, Protocol: proto}
					if a.Name == "hier" {
						if n < 4 {
							continue
						}
						opts.NLocalRanks = 2
					}
					// One channel; and for the all-pairs LL programs also the
					// default context's wide entries, a channel per chunk
					// (examples/contexts llWideChannels, 32/n).
					channels := []int{1}
					if proto == ir.LL && (a.Name == "oneshot" || a.Name == "direct") {
						channels = append(channels, 32/n)
					}
					for _, k := range channels {
						opts.Channels = k
						p, err := gen.Generate(a.Name, opts)
						if err != nil {
							break // not every algorithm fits every shape
						}
						q, err := legalized(p)
						if err != nil {
							t.Errorf("generator %s, %d channels: %v", a.Name, k, err)
							continue
						}
						name := fmt.Sprintf("%s/%s/n%d/%s", a.Name, coll, n, proto)
						if k > 1 {
							name += fmt.Sprintf("/k%d", k)
						}
						out = append(out, diffProgram{name, q})
					}
				}
			}
		}
	}
	out = append(out, diffProgram{"irtest/pairs4", irtest.PairsAllReducePrimitive(4)})
	// One rank, independent copies and reduces: the kernel runs them as
	// shared work (cuda/units.go) unless the request is avg.
	out = append(out, diffProgram{"bw/copy/n1", bwProgram(4, 256, 2, false)}, diffProgram{"bw/reduce/n1", bwProgram(4, 256, 2, true)})
	return out
}

func randomBytes(rng *rand.Rand, b []byte) {
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
}

type diffCase struct {
	dt      ir.DataType
	op      ir.RedOp
	inplace bool
	count   int64
	pt      ir.PacketType
	root    int
}

func diffCases(p *ir.Program, full bool) []diffCase {
	dts := ir.AllDataTypes()
	ops := ir.AllRedOps()
	if !p.Collective.Reduces() {
		ops = []ir.RedOp{ir.Sum}
	}
	var arr []bool
	if p.OutOfPlace {
		arr = append(arr, false)
	}
	if p.InPlace {
		arr = append(arr, true)
	}
	counts := []int64{1, 7, 1000, 65537}
	pts := []ir.PacketType{ir.LL16}
	if p.Protocol == ir.LL {
		pts = append(pts, ir.LL8)
	}
	roots := []int{0}
	if p.Collective.Rooted() {
		roots = []int{0, p.NRanks - 1}
	}
	var cs []diffCase
	i := 0
	for _, dt := range dts {
		for _, op := range ops {
			for _, ip := range arr {
				for _, n := range counts {
					for _, pt := range pts {
						for _, root := range roots {
							i++
							// Without -diff.full: every datatype and every redop
							// appear, but not every combination.
							if !full && i%max(*diffSample, 1) != 0 && !(dt == ir.Float32 && op == ir.Sum) {
								continue
							}
							cs = append(cs, diffCase{dt, op, ip, n, pt, root})
						}
					}
				}
			}
		}
	}
	return cs
}

// TestDifferential runs schedules on the GPU and on the host interpreter
// with the same random inputs (every bit pattern, NaNs included) and
// requires bit-identical outputs on every rank, over two consecutive
// launches (so scratch halves, semaphores and epochs carry over).
func TestDifferential(t *testing.T) {
	gputest.Require(t)
	progs := diffPrograms(t)
	progs = append(progs, corpusPrograms(t)...)
	if *diffPTX != "" {
		defer useKernel(t, *diffPTX, false)()
	}
	var log *os.File
	if *diffOut != "" {
		f, err := os.OpenFile(*diffOut, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		log = f
	}
	var mu sync.Mutex
	total, wrong, notResident := 0, 0, 0
	start := time.Now()
	// Programs run one after another unless -diff.parallel: on the H200,
	// 8 programs at once timed out waiting on each other's spinning
	// threadblocks (bench/results/2026-11-29-h200-second).
	t.Run("programs", func(t *testing.T) {
		for _, dp := range progs {
			t.Run(dp.name, func(t *testing.T) {
				if *diffPar {
					t.Parallel()
				}
				tables, err := optable.LowerAll(dp.p)
				if err != nil {
					t.Fatalf("lower: %v", err)
				}
				gw, err := NewWorld(0, tables)
				if err != nil {
					t.Fatalf("gpu world: %v", err)
				}
				defer gw.Close()
				if *diffThreads > 0 {
					gw.Threads = *diffThreads
				}
				hw, err := newHostWorld(tables)
				if err != nil {
					t.Fatal(err)
				}
				rng := rand.New(rand.NewPCG(1, uint64(len(dp.name))))
				cases := diffCases(dp.p, *diffFull)
				refused := 0
			cases:
				for _, c := range cases {
					for launch := 0; launch < 2; launch++ {
						mu.Lock()
						total++
						mu.Unlock()
						req := interp.Request{Count: c.count, DataType: c.dt, RedOp: c.op, Root: c.root, InPlace: c.inplace,
							PacketType: c.pt, Launch: uint64(launch + 1), Timeout: 5 * time.Second}
						h, bad, msg := diffHost(rng, tables, hw, gw, req)
						if !bad {
							bad, msg = diffGPU(gw, h)
						}
						// Several ranks on one GPU may need more threadblocks at
						// once than it holds (one GPU per rank holds them): fewer
						// threads per block (the kernel takes any). Only the GPU
						// runs again, on the same inputs: the host has run this
						// launch number already, and a second run of it finds
						// every dependency counter met (its epoch is the
						// launch's), so its threadblocks race and its output is
						// wrong.
						for bad && strings.Contains(msg, ErrNotResident.Error()) && gw.Threads > 128 {
							gw.Threads /= 2
							t.Logf("%s: %d threads per block, so that every rank's threadblocks are resident", dp.name, gw.Threads)
							bad, msg = diffGPU(gw, h)
						}
						if bad && strings.Contains(msg, ErrNotResident.Error()) {
							// Still not resident (a datatype's module may hold
							// fewer blocks than another's): this case is refused,
							// the rest of the program still runs. The GPU World's
							// launch counter stayed, so the next case's host run
							// reuses it, on a fresh host World
							// (TestDifferentialRecovery).
							t.Logf("%s %v %v count=%d: refused: %s", dp.name, c.dt, c.op, c.count, msg)
							mu.Lock()
							notResident++
							mu.Unlock()
							refused++
							if hw, err = newHostWorld(tables); err != nil {
								t.Fatal(err)
							}
							continue cases
						}
						line := fmt.Sprintf("%s %v %v inplace=%v count=%d %v root=%d launch=%d: %s", dp.name, c.dt, c.op, c.inplace, c.count, c.pt, c.root, launch, msg)
						if log != nil {
							mu.Lock()
							fmt.Fprintln(log, line)
							mu.Unlock()
						}
						if bad {
							mu.Lock()
							wrong++
							mu.Unlock()
							t.Error(line)
							return
						}
					}
				}
				if refused == len(cases) {
					t.Skipf("%s: no case fits on this GPU (its threadblocks are not all resident at once, even at 128 threads per block)", dp.name)
				}
			})
		}
	})
	t.Logf("%d cases, %d mismatched, %d refused (not resident), %v", total, wrong, notResident, time.Since(start))
	fmt.Printf("DIFF %d programs, %d cases, %d mismatched, %d refused (not resident), %v\n", len(progs), total, wrong, notResident, time.Since(start).Round(time.Millisecond))
}

// newHostWorld is the host interpreter's World for a program's tables.
func newHostWorld(tables []*optable.Table) (*interp.World, error) { return interp.NewWorld(tables) }

// hostRun is one request run on the host interpreter: the request (with
// the launch counter the GPU world will use), every rank's input and
// initial output buffer as drawn, and the host's outputs.
type hostRun struct {
	req             interp.Request
	inputs, initOut [][]byte
	want            [][]byte
}

// diffHost draws random buffers for req and runs it on the host world hw,
// with the launch counter gw will use for its next launch. A request must
// run on hw once per launch counter: see diffGPU for retries.
func diffHost(rng *rand.Rand, tables []*optable.Table, hw *interp.World, gw *World, req interp.Request) (h hostRun, bad bool, msg string) {
	// The GPU world keeps its own launch counter; give the host the same.
	req.Launch = gw.launch + 1
	h.req = req
	if err := hw.AllocBuffers(req); err != nil {
		return h, true, "host alloc: " + err.Error()
	}
	n := len(tables)
	h.inputs, h.initOut, h.want = make([][]byte, n), make([][]byte, n), make([][]byte, n)
	for p := 0; p < n; p++ {
		b := hw.Bufs[p]
		randomBytes(rng, b.Output) // in place, the input lies in here
		randomBytes(rng, b.Input)
		h.inputs[p] = append([]byte(nil), b.Input...)
		h.initOut[p] = append([]byte(nil), b.Output...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := interp.Run(ctx, tables, req, hw); err != nil {
		return h, true, "host: " + err.Error()
	}
	for p := 0; p < n; p++ {
		h.want[p] = append([]byte(nil), hw.Bufs[p].Output...)
	}
	return h, false, "ok"
}

// diffGPU runs h's request on the GPU world with h's inputs and compares
// the outputs with the host's. It may run again after an error that left
// gw's launch counter alone (ErrNotResident from prepare).
func diffGPU(gw *World, h hostRun) (bad bool, msg string) {
	if gw.launch+1 != h.req.Launch {
		return true, fmt.Sprintf("gpu: launch counter %d, but the host ran launch %d", gw.launch+1, h.req.Launch)
	}
	outs, _, err := gw.Run(h.req, h.inputs, h.initOut)
	if err != nil {
		return true, "gpu: " + err.Error()
	}
	for p, want := range h.want {
		if !bytes.Equal(outs[p], want) {
			first := -1
			for i := range want {
				if i >= len(outs[p]) || outs[p][i] != want[i] {
					first = i
					break
				}
			}
			if first < 0 || first >= len(outs[p]) {
				return true, fmt.Sprintf("rank %d output is %d bytes, host %d", p, len(outs[p]), len(want))
			}
			return true, fmt.Sprintf("rank %d output differs (%d bytes, first at byte %d: gpu %#x host %#x)", p, len(want), first, outs[p][first], want[first])
		}
	}
	return false, "ok"
}

// corpusPrograms imports the foreign schedules (../shared/corpus or
// -diff.corpus) with the importers, when they are built in.
func corpusPrograms(t testing.TB) []diffProgram {
	dir := *diffCorpus
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "corpus")
	}
	if _, err := os.Stat(dir); err != nil {
		t.Logf("no corpus at %s: skipping foreign schedules", dir)
		return nil
	}
	var files []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && (strings.HasSuffix(p, ".xml") || strings.HasSuffix(p, ".json")) {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	var out []diffProgram
	for _, f := range files {
		p, err := importFile(f)
		if err != nil {
			t.Logf("corpus %s: not run: %v", filepath.Base(f), err)
			continue
		}
		q, err := legalized(p)
		if err != nil {
			t.Logf("corpus %s: not run: %v", filepath.Base(f), err)
			continue
		}
		out = append(out, diffProgram{"corpus/" + filepath.Base(f), q})
	}
	return out
}
