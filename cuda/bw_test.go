package cuda

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

var (
	bwRun      = flag.Bool("bw", false, "measure op bandwidth against the device-to-device memcpy ceiling")
	bwVariants = flag.String("bw.variants", "", "comma-separated folders of kernel variant modules (theseus_<dtype>.ptx, built by cuda/kernel/build.sh with THESEUS_PTX_OUT) to measure beside the embedded kernel")
	bwRefs     = flag.String("bw.refs", "", "folder of a kernel variant built with THESEUS_BW_REFS=1: its theseus_ref_dyn is timed over each unsliced copy's own buffers")
	bwRepeat   = flag.Int("bw.repeat", 1, "times each executor case is measured, each in a fresh World (new buffers): the spread shows how much buffer placement moves a figure")
)

// bwProgram is a one-rank program of tbs threadblocks, each running tiles
// ops on chunks of its own: copy i[c] -> o[c], or reduce [i[c], o[c]] ->
// o[c]. The buffer has tbs*tiles chunks, dealt round-robin: threadblock j
// runs chunks j, j+tbs, j+2*tbs, ... (tiles 1: one contiguous chunk each).
func bwProgram(tbs, threads, tiles int, reduce bool) *ir.Program {
	p := &ir.Program{Name: "bw", Collective: ir.AllReduce, NRanks: 1, Root: -1, Protocol: ir.Simple,
		ChunksPerBlock: int64(tbs * tiles), OutOfPlace: true, NumThreads: threads}
	r := ir.Rank{}
	for j := 0; j < tbs; j++ {
		tb := ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1}
		for k := 0; k < tiles; k++ {
			c := int64(j + k*tbs)
			op := ir.Op{Code: ir.OpCopy, Count: 1,
				Srcs: []ir.Ref{{Buf: ir.Input, Off: c, Chan: -1}}, Dsts: []ir.Ref{{Buf: ir.Output, Off: c, Chan: -1}}}
			if reduce {
				op.Code = ir.OpReduce
				op.Srcs = append(op.Srcs, ir.Ref{Buf: ir.Output, Off: c, Chan: -1})
			}
			tb.Ops = append(tb.Ops, op)
		}
		r.TBs = append(r.TBs, tb)
	}
	p.Ranks = []ir.Rank{r}
	return p
}

// bwBytes is the size of each buffer the bandwidth test moves.
const bwBytes = 1 << 30

// timeLoop runs fn warm times, then iters times, and returns the mean time
// of one of the timed runs (the stream's work included, through sync).
func timeLoop(warm, iters int, fn func() error, sync func() error) (time.Duration, error) {
	for i := 0; i < warm; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := sync(); err != nil {
		return 0, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := fn(); err != nil {
			return 0, err
		}
	}
	if err := sync(); err != nil {
		return 0, err
	}
	return time.Since(start) / time.Duration(iters), nil
}

// bwReference measures the memcpy ceiling, then the reference copy kernels
// of the embedded module (bwRefKernels), in bytes moved (read + write) per
// second; stream is the plain grid-stride copy at its best grid.
func bwReference(t *testing.T, sms int, a, b driver.Ptr) (memcpy, stream float64) {
	el, err := timeLoop(3, 50, func() error { return driver.CopyDtoD(b, a, bwBytes) }, driver.Synchronize)
	if err != nil {
		t.Fatal(err)
	}
	memcpy = 2 * bwBytes / el.Seconds()
	ptx, err := PTX(ir.Float32)
	if err != nil {
		t.Fatal(err)
	}
	if stream, err = bwRefKernels(t, "", ptx, a, b, sms, memcpy, true); err != nil {
		t.Fatal(err)
	}
	return memcpy, stream
}

// embeddedBlockCopy loads the embedded float32 module once more, for its
// block-contiguous reference copy (theseus_block_copy), unloaded when the
// test ends.
func embeddedBlockCopy(t *testing.T) driver.Function {
	ptx, err := PTX(ir.Float32)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mod.Unload() })
	fn, err := mod.Function("theseus_block_copy")
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

// bwRefBuffers allocates the reference kernels' two buffers of bwBytes,
// freed when the test ends.
func bwRefBuffers(t *testing.T) (a, b driver.Ptr) {
	for _, p := range []*driver.Ptr{&a, &b} {
		var err error
		if *p, err = driver.MemAlloc(bwBytes); err != nil {
			t.Fatal(err)
		}
		q := *p
		t.Cleanup(func() { driver.MemFree(q) })
	}
	return a, b
}

// bwRefKernels times the reference copies of module ptx from a to b
// (bwBytes): the plain grid-stride copy (theseus_stream_copy), the
// block-contiguous copy (theseus_block_copy, the executor's partition) and,
// in a module that has it, the bulk copy (theseus_bulk_copy, the
// THESEUS_BULK_COPY variant), each as a fraction of memcpy. A variant's
// reference copies use its loads and stores (cache hints), so they show
// what a variant does to a plain copy. all: every grid (the embedded
// module), else the best grids of the embedded module's last runs. Returns
// the grid-stride copy's best; the error is a module the driver would not
// load (other failures end the test).
func bwRefKernels(t *testing.T, name string, ptx []byte, a, b driver.Ptr, sms int, memcpy float64, all bool) (stream float64, err error) {
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		return 0, fmt.Errorf("load module: %w", err)
	}
	defer mod.Unload()
	ctr, err := driver.MemAlloc(16)
	if err != nil {
		return 0, err
	}
	defer driver.MemFree(ctr)
	if err := driver.MemsetD8(ctr, 0, 16); err != nil {
		return 0, err
	}
	label := ""
	if name != "" {
		label = name + " "
	}
	run := func(kernel string, grids [][2]int, moved func(nb, nt int) float64) (best float64) {
		fn, err := mod.Function(kernel)
		if err != nil {
			t.Fatal(err)
		}
		// The fourth word is theseus_ref_dyn's counters (the others take three).
		args := new([4]uint64)
		args[0], args[1], args[2], args[3] = uint64(a), uint64(b), bwBytes/16, uint64(ctr)
		for _, g := range grids {
			el, err := timeLoop(3, 50, func() error { return driver.Launch1(fn, g[0], g[1], 0, 0, unsafe.Pointer(args)) }, driver.Synchronize)
			if err != nil {
				t.Fatal(err)
			}
			bw := moved(g[0], g[1]) / el.Seconds()
			fmt.Printf("BW %s%s grid=%dx%d: %.1f GB/s = %.3f of memcpy\n", label, strings.ReplaceAll(strings.TrimPrefix(kernel, "theseus_"), "_", "-"), g[0], g[1], bw/1e9, bw/memcpy)
			best = max(best, bw)
		}
		return best
	}
	whole := func(int, int) float64 { return 2 * bwBytes }
	streamGrids := [][2]int{{sms, 1024}, {2 * sms, 1024}, {4 * sms, 512}, {8 * sms, 256}, {16 * sms, 128}}
	blockGrids := [][2]int{{sms, 512}, {sms, 1024}, {2 * sms, 512}, {4 * sms, 256}}
	if !all {
		streamGrids = [][2]int{{2 * sms, 1024}, {4 * sms, 512}}
		blockGrids = [][2]int{{sms, 512}, {sms, 1024}}
	}
	stream = run("theseus_stream_copy", streamGrids, whole)
	// The executor's pattern: each block through its own contiguous part.
	run("theseus_block_copy", blockGrids, blockCopyBytes)
	// The THESEUS_BW_REFS variant's reference copies (bwExtraRefs).
	for _, r := range bwExtraRefs(sms) {
		if strings.Contains(string(ptx), ".entry "+r.kernel+"(") {
			moved := whole
			if r.blockParts {
				moved = blockCopyBytes
			}
			run(r.kernel, r.grids, moved)
		}
	}
	if strings.Contains(string(ptx), ".entry theseus_bulk_copy(") {
		// One thread per block drives the copy engine; the block's other
		// threads only hold the block's place. Blocks per SM: 1 to 6 (the
		// variant's static shared memory allows 6 on an H200).
		run("theseus_bulk_copy", [][2]int{{sms, 128}, {2 * sms, 128}, {4 * sms, 128}, {6 * sms, 128}}, whole)
	}
	return stream, nil
}

// bwExtraRef is a reference copy of the THESEUS_BW_REFS variant
// (cuda/kernel/theseus.cu) and the grids it is timed at.
type bwExtraRef struct {
	kernel     string
	grids      [][2]int
	blockParts bool // it copies theseus_block_copy's parts (blockCopyBytes), else all bwBytes
}

// bwExtraRefs lists the THESEUS_BW_REFS variant's reference copies for a
// GPU of sms multiprocessors: one tile per block (flat1: one vector per
// thread; flat4: four), grid-stride with 4 or 8 vectors in flight
// (stream4, stream8; nc: stream4 on the non-coherent path), tiles dealt
// round-robin to the blocks (tiles) or to whichever block asks next (dyn),
// and the block-contiguous copy software-pipelined (pipe).
func bwExtraRefs(sms int) []bwExtraRef {
	n16 := bwBytes / 16
	stride := [][2]int{{2 * sms, 1024}, {4 * sms, 512}, {8 * sms, 256}, {16 * sms, 128}}
	return []bwExtraRef{
		{kernel: "theseus_ref_flat1", grids: [][2]int{{n16 / 256, 256}, {n16 / 512, 512}, {n16 / 1024, 1024}}},
		{kernel: "theseus_ref_flat4", grids: [][2]int{{n16 / 1024, 256}, {n16 / 2048, 512}, {n16 / 4096, 1024}}},
		{kernel: "theseus_ref_stream4", grids: stride},
		{kernel: "theseus_ref_stream8", grids: stride},
		{kernel: "theseus_ref_nc", grids: stride},
		{kernel: "theseus_ref_tiles", grids: [][2]int{{sms, 1024}, {2 * sms, 1024}, {2 * sms, 512}, {4 * sms, 256}, {8 * sms, 256}}},
		{kernel: "theseus_ref_dyn", grids: [][2]int{{sms, 1024}, {2 * sms, 512}, {4 * sms, 256}, {8 * sms, 256}}},
		{kernel: "theseus_ref_pipe", grids: [][2]int{{sms, 512}, {sms, 1024}, {2 * sms, 512}}, blockParts: true},
	}
}

// blockCopyBytes is what theseus_block_copy moves (read + write) over
// bwBytes at grid nb x nt: each block copies whole rounds of 4*nt vectors
// of its 1/nb share and leaves the rest (up to 4*nt-1 vectors a block).
func blockCopyBytes(nb, nt int) float64 {
	per := int64(bwBytes/16) / int64(nb)
	span := 4 * int64(nt)
	return float64(2 * 16 * int64(nb) * (per / span * span))
}

// bwVariant is a kernel to measure: a name ("embedded", or a variant
// folder's base name) and its modules.
type bwVariant struct {
	name string
	ptx  func(ir.DataType) ([]byte, error)
}

// bwVariantList returns the embedded kernel and the -bw.variants folders
// whose float32 module targets at most compute capability cc (major*10 +
// minor); others are reported and left out. A folder's flags.txt (written
// by bench/gpu/prepare.sh) names its build flags in the report.
func bwVariantList(cc int) []bwVariant {
	vs := []bwVariant{{"embedded", PTX}}
	if *bwVariants == "" {
		return vs
	}
	for _, dir := range strings.Split(*bwVariants, ",") {
		name := filepath.Base(dir)
		ptx, err := variantPTX(dir)(ir.Float32)
		// "BW best" lines are what bench/gpu/run-all.sh summarises.
		if err != nil {
			fmt.Printf("BW best %s: skipped: %v\n", name, err)
			continue
		}
		if sm := ptxTarget(ptx); sm > cc {
			fmt.Printf("BW best %s: skipped: its modules target sm_%d, this GPU is sm_%d\n", name, sm, cc)
			continue
		}
		if flags, err := os.ReadFile(filepath.Join(dir, "flags.txt")); err == nil {
			fmt.Printf("BW variant %s: built with %s\n", name, strings.TrimSpace(string(flags)))
		}
		vs = append(vs, bwVariant{name, variantPTX(dir)})
	}
	return vs
}

// ptxTarget returns the compute capability (major*10 + minor) of a PTX
// module's .target directive (".target sm_90" and ".target sm_90a": 90), or
// 0 when it has none (the driver then judges the module when it loads it).
func ptxTarget(ptx []byte) int {
	for _, line := range strings.Split(string(ptx), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != ".target" {
			continue
		}
		sm, ok := strings.CutPrefix(f[1], "sm_")
		if !ok {
			return 0
		}
		digits := len(sm) - len(strings.TrimLeft(sm, "0123456789"))
		n, err := strconv.Atoi(sm[:digits])
		if err != nil {
			return 0
		}
		return n
	}
	return 0
}

// TestBandwidth reports copy and reduce op bandwidth (bytes moved: reads +
// writes) of the executor kernel as a fraction of the memcpy ceiling
// measured in the same run, for several grid shapes, one slice and the
// runtime's pipelining, and for the kernel variants named by -bw.variants
// (a variant whose modules target a newer GPU than this one is reported
// and skipped). Beside each unsliced copy it times the reference
// block-contiguous copy over the same buffers at the same grid, which
// separates the kernel's cost from the buffers' placement. Run with -bw on
// a GPU; "BW best" lines give each operation's best.
func TestBandwidth(t *testing.T) {
	gputest.Require(t)
	if !*bwRun {
		t.Skip("bandwidth report: run with -bw")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := currentDevice0(t)
	sms, _ := d.Attribute(driver.AttrMultiprocessorCount)
	major, _ := d.Attribute(driver.AttrComputeCapMajor)
	minor, _ := d.Attribute(driver.AttrComputeCapMinor)
	a, b := bwRefBuffers(t)
	ceil, stream := bwReference(t, sms, a, b)
	fmt.Printf("BW memcpy %.1f GB/s; plain grid-stride copy %.3f of it\n", ceil/1e9, stream/ceil)
	variants := bwVariantList(10*major + minor)
	// The embedded module's block-contiguous copy, for the same-buffer
	// comparison.
	blockFn := embeddedBlockCopy(t)
	loadRefDyn(t)
	defer func() { ptxSource = modulePTX; unloadModules(t) }()
	for _, v := range variants {
		if v.name != "embedded" {
			// The variant's own reference copies first; a module the driver
			// cannot load (its JIT rejects the PTX) is reported and skipped.
			ptx, err := v.ptx(ir.Float32)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bwRefKernels(t, v.name, ptx, a, b, sms, ceil, false); err != nil {
				fmt.Printf("BW best %s: skipped: %v\n", v.name, err)
				continue
			}
		}
		ptxSource = v.ptx
		unloadModules(t)
		// (ir.Layout starts these chunks on 128-byte lines: no separate
		// aligned case is needed.)
		for _, c := range []struct {
			name   string
			reduce bool
			dt     ir.DataType
			moved  float64 // bytes moved per byte of buffer
		}{{"copy fp32", false, ir.Float32, 2}, {"reduce fp32 sum", true, ir.Float32, 3}, {"reduce bf16 sum", true, ir.Bfloat16, 3}} {
			best := 0.0
			bestAt := ""
			// {slices, tiles, shared}: pipelining (threadblocks interleave
			// at 1/slices of a chunk), chunks dealt round-robin (tiles), and
			// shared work (cuda/units.go: on by default; 0 runs each
			// threadblock's own ops, THESEUS_WORK_SHARING=0).
			splits := [][3]int{{1, 1, 1}}
			if v.name == "embedded" {
				splits = [][3]int{{1, 1, 1}, {1, 1, 0}, {16, 1, 1}, {1, 4, 0}}
			}
			// The last two shapes have more threadblocks than the GPU holds
			// at once (2 of 512 threads or 4 of 256 per multiprocessor at
			// the kernel's 64 registers): the hardware runs them in waves,
			// handing each multiprocessor the next threadblock as one ends.
			for _, shape := range [][2]int{{132, 512}, {132, 1024}, {264, 512}, {528, 256}, {1056, 512}, {2112, 256}} {
				for _, split := range splits {
					for run := 0; run < max(*bwRepeat, 1); run++ {
						tbs, threads := shape[0], shape[1]
						slices, tiles, shared := int64(split[0]), split[1], split[2] == 1
						at := fmt.Sprintf("tbs=%d threads=%d slices=%d", tbs, threads, slices)
						if tiles > 1 {
							at += fmt.Sprintf(" tiles=%d", tiles)
						}
						if !shared {
							at += " sharing=off"
						}
						restore := env.SetLookupForTest(func(k string) (string, bool) {
							if strings.HasSuffix(k, "_WORK_SHARING") && !shared {
								return "0", true
							}
							return os.LookupEnv(k)
						})
						if *bwRepeat > 1 {
							at += fmt.Sprintf(" run=%d", run)
						}
						bw, note, err := bwOp(tbs, threads, tiles, slices, c.dt, c.reduce, c.moved, blockFn, ceil)
						restore()
						if err != nil {
							// A variant built for fewer threads cannot launch the larger shapes.
							fmt.Printf("BW %s %s %s: %v\n", v.name, c.name, at, err)
							continue
						}
						fmt.Printf("BW %s %-16s %s: %.1f GB/s = %.3f of memcpy%s\n", v.name, c.name, at, bw/1e9, bw/ceil, note)
						if bw > best {
							best, bestAt = bw, at
						}
					}
				}
			}
			fmt.Printf("BW best %s %-16s %.3f of memcpy (%.1f GB/s, %s)\n", v.name, c.name, best/ceil, best/1e9, bestAt)
		}
		if err := reportKernelAttributes(v.name); err != nil {
			t.Log(err)
		}
	}
}

// bwOp times one op case of TestBandwidth in a fresh World: tbs
// threadblocks of threads each, one copy (or reduce) op each over its
// chunk of bwBytes, at the given slices. Returns bytes moved per second and
// a note for the report line: the time per op and, for an unsliced copy,
// the block-contiguous reference copy (blockFn) over the same buffers at
// the same grid, as a fraction of memcpy (ceil).
//
// The count is rounded down (by less than 0.01%) so that every chunk starts
// on a 256-byte boundary, as theseus_block_copy's parts do: ir.Layout
// starts chunks on 128-byte lines, and on the H200 a copy whose chunks
// start on odd 128-byte lines runs up to 8% slower
// (bench/results/2026-11-29-h200-fifth, TestBandwidthSharing -bw.align).
func bwOp(tbs, threads, tiles int, slices int64, dt ir.DataType, reduce bool, moved float64, blockFn driver.Function, ceil float64) (bw float64, note string, err error) {
	return bwOpAligned(tbs, threads, tiles, slices, 256/int64(dt.Size()), dt, reduce, moved, blockFn, ceil)
}

// bwOpAligned is bwOp over count elements rounded down to a multiple of
// tbs*tiles*align (align > 0), so that every chunk starts a multiple of
// align elements into the buffer.
func bwOpAligned(tbs, threads, tiles int, slices, align int64, dt ir.DataType, reduce bool, moved float64, blockFn driver.Function, ceil float64) (bw float64, note string, err error) {
	tables, err := optable.LowerAll(bwProgram(tbs, threads, tiles, reduce))
	if err != nil {
		return 0, "", err
	}
	w, err := NewWorld(0, tables)
	if err != nil {
		return 0, "", err
	}
	defer w.Close()
	count := int64(bwBytes) / int64(dt.Size())
	if align > 0 {
		k := int64(tbs*tiles) * align
		count = count / k * k
	}
	el, err := w.Time(interp.Request{Count: count, DataType: dt, RedOp: ir.Sum, Slices: slices}, 3, 50)
	if err != nil {
		return 0, "", err
	}
	bw = moved * float64(count*int64(dt.Size())) / el.Seconds()
	note = fmt.Sprintf(" (%v per op)", el)
	if reduce || slices != 1 || tiles != 1 {
		return bw, note, nil
	}
	// World.Time left the context current on this (locked) thread.
	args := new([3]uint64)
	args[0], args[1], args[2] = uint64(w.bufs[0][0]), uint64(w.bufs[0][1]), bwBytes/16
	bel, err := timeLoop(3, 50, func() error { return driver.Launch1(blockFn, tbs, threads, 0, 0, unsafe.Pointer(args)) }, driver.Synchronize)
	if err != nil {
		return 0, "", err
	}
	ref := blockCopyBytes(tbs, threads) / bel.Seconds()
	note = note[:len(note)-1] + fmt.Sprintf("; block-copy on these buffers %.3f", ref/ceil)
	// memcpy over these same buffers (what their placement allows), and the
	// -bw.refs module's dynamically balanced copy (theseus_ref_dyn) at this
	// grid over them: the executor's shared work runs the same loop.
	opBytes := count * int64(dt.Size())
	mel, err := timeLoop(3, 50, func() error { return driver.CopyDtoD(w.bufs[0][1], w.bufs[0][0], opBytes) }, driver.Synchronize)
	if err != nil {
		return 0, "", err
	}
	same := 2 * float64(opBytes) / mel.Seconds()
	note += fmt.Sprintf("; memcpy on these buffers %.3f, the op %.3f of it", same/ceil, bw/same)
	if refDyn.fn != 0 {
		dargs := new([4]uint64)
		n16 := opBytes / 16
		dargs[0], dargs[1], dargs[2], dargs[3] = uint64(w.bufs[0][0]), uint64(w.bufs[0][1]), uint64(n16), uint64(refDyn.ctr)
		del, err := timeLoop(3, 50, func() error { return driver.Launch1(refDyn.fn, tbs, threads, 0, 0, unsafe.Pointer(dargs)) }, driver.Synchronize)
		if err != nil {
			return 0, "", err
		}
		// It copies whole tiles of 4*threads vectors only.
		tile := int64(4 * threads)
		d := float64(2*16*(n16/tile*tile)) / del.Seconds()
		note += fmt.Sprintf("; ref-dyn on these buffers %.3f, %.3f of their memcpy", d/ceil, d/same)
	}
	return bw, note + ")", nil
}

// refDyn is the -bw.refs module's theseus_ref_dyn and its counter words,
// loaded by loadRefDyn (fn 0: none).
var refDyn struct {
	fn  driver.Function
	ctr driver.Ptr
}

// loadRefDyn loads theseus_ref_dyn from the float32 module in folder
// -bw.refs (a variant built with THESEUS_BW_REFS=1), unloaded when the
// test ends; with no -bw.refs it does nothing.
func loadRefDyn(t *testing.T) {
	if *bwRefs == "" {
		return
	}
	ptx, err := variantPTX(*bwRefs)(ir.Float32)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		t.Fatal(err)
	}
	fn, err := mod.Function("theseus_ref_dyn")
	if err != nil {
		mod.Unload()
		t.Fatal(err)
	}
	ctr, err := driver.MemAlloc(16)
	if err == nil {
		err = driver.MemsetD8(ctr, 0, 16)
	}
	if err != nil {
		mod.Unload()
		t.Fatal(err)
	}
	refDyn.fn, refDyn.ctr = fn, ctr
	t.Cleanup(func() {
		refDyn.fn, refDyn.ctr = 0, 0
		driver.MemFree(ctr)
		mod.Unload()
	})
}

// variantPTX reads a kernel variant's modules from dir (theseus_<dtype>.ptx,
// as cuda/kernel/build.sh writes them with THESEUS_PTX_OUT), for ptxSource.
func variantPTX(dir string) func(ir.DataType) ([]byte, error) {
	return func(dt ir.DataType) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, "theseus_"+dt.String()+".ptx"))
	}
}

// unloadModules drops every loaded executor module (after a test swapped
// ptxSource; no World may be using them).
func unloadModules(t *testing.T) {
	modMu.Lock()
	defer modMu.Unlock()
	for k, m := range modules {
		if err := m.mod.Unload(); err != nil {
			t.Log(err)
		}
		delete(modules, k)
	}
}

// reportKernelAttributes prints the registers, local (spill) bytes and
// launch bound of the loaded executor modules.
func reportKernelAttributes(name string) error {
	modMu.Lock()
	defer modMu.Unlock()
	for k, m := range modules {
		for _, e := range []struct {
			name string
			fn   driver.Function
		}{{KernelName, m.k.exec}, {UnitsKernelName, m.k.units}} {
			regs, err := e.fn.Attribute(driver.FuncAttrNumRegs)
			if err != nil {
				return err
			}
			local, _ := e.fn.Attribute(driver.FuncAttrLocalSizeBytes)
			maxT, _ := e.fn.Attribute(driver.FuncAttrMaxThreadsPerBlock)
			fmt.Printf("KERNEL %s %v %s: %d registers, %d local bytes per thread, at most %d threads\n", name, k.dt, e.name, regs, local, maxT)
		}
	}
	return nil
}

// TestPTXTarget reads the .target of the embedded modules, of an sm_90
// variant header as cuda/kernel/build.sh writes it, and of odd inputs (no
// GPU needed).
func TestPTXTarget(t *testing.T) {
	ptx, err := PTX(ir.Float32)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ptx  string
		want int
	}{
		{string(ptx), 80},
		{"//\n.version 8.0\n.target sm_90\n.address_size 64\n", 90},
		{".version 8.0\n.target sm_90a, debug\n", 90},
		{".target sm_100f\n", 100},
		{"\t.target   sm_75\n", 75},
		{".version 8.0\n", 0},
		{".target compute_90\n", 0},
		{".target sm_\n", 0},
		{"", 0},
	} {
		if got := ptxTarget([]byte(c.ptx)); got != c.want {
			t.Errorf("ptxTarget(%.40q) = %d, want %d", c.ptx, got, c.want)
		}
	}
}

// TestBWVariantList: -bw.variants folders whose modules target a newer GPU,
// or that hold no float32 module, are left out of the bandwidth report
// (no GPU needed).
func TestBWVariantList(t *testing.T) {
	root := t.TempDir()
	write := func(name, target, flags string) string {
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if target != "" {
			ptx := "//\n.version 8.0\n.target " + target + "\n.address_size 64\n"
			if err := os.WriteFile(filepath.Join(dir, "theseus_float32.ptx"), []byte(ptx), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if flags != "" {
			if err := os.WriteFile(filepath.Join(dir, "flags.txt"), []byte(flags+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	dirs := []string{write("cs", "sm_80", "-DTHESEUS_LD_HINTS=2"), write("bulk", "sm_90", "-DTHESEUS_BULK_COPY=1"), write("empty", "", "")}
	old := *bwVariants
	*bwVariants = strings.Join(dirs, ",")
	defer func() { *bwVariants = old }()
	names := func(vs []bwVariant) (out []string) {
		for _, v := range vs {
			out = append(out, v.name)
		}
		return out
	}
	for _, c := range []struct {
		cc   int
		want []string
	}{{80, []string{"embedded", "cs"}}, {90, []string{"embedded", "cs", "bulk"}}, {100, []string{"embedded", "cs", "bulk"}}} {
		vs := bwVariantList(c.cc)
		if diff := cmp.Diff(c.want, names(vs)); diff != "" {
			t.Errorf("sm_%d: variants (-want +got):\n%s", c.cc, diff)
		}
		for _, v := range vs[1:] {
			ptx, err := v.ptx(ir.Float32)
			if err != nil || ptxTarget(ptx) > c.cc {
				t.Errorf("sm_%d: %s: module %q, %v", c.cc, v.name, ptx, err)
			}
		}
	}
}

// TestBWProgram runs the bandwidth test's programs on the host
// interpreter (no GPU needed): every output element is its input (copy)
// or input plus output (reduce), with chunks dealt one per threadblock and
// round-robin (tiles 4).
func TestBWProgram(t *testing.T) {
	for _, c := range []struct {
		tbs, tiles int
		reduce     bool
	}{{3, 1, false}, {3, 4, false}, {2, 4, true}} {
		tables, err := optable.LowerAll(bwProgram(c.tbs, 128, c.tiles, c.reduce))
		if err != nil {
			t.Fatal(err)
		}
		if got := len(tables[0].TBs[0].Ops); got < c.tiles {
			t.Errorf("tbs=%d tiles=%d: threadblock 0 has %d ops, want at least %d", c.tbs, c.tiles, got, c.tiles)
		}
		req := interp.Request{Count: int64(c.tbs*c.tiles) * 40, DataType: ir.Float32, RedOp: ir.Sum, Slices: 1, Launch: 1}
		w, err := interp.NewWorld(tables)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AllocBuffers(req); err != nil {
			t.Fatal(err)
		}
		in, out := w.Bufs[0].Input, w.Bufs[0].Output
		f32 := func(b []byte, i int) float32 { return *(*float32)(unsafe.Pointer(&b[4*i])) }
		for i := 0; i < int(req.Count); i++ {
			*(*float32)(unsafe.Pointer(&in[4*i])) = float32(i)
			*(*float32)(unsafe.Pointer(&out[4*i])) = 0.5
		}
		if err := interp.Run(t.Context(), tables, req, w); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < int(req.Count); i++ {
			want := float32(i)
			if c.reduce {
				want += 0.5
			}
			if got := f32(out, i); got != want {
				t.Fatalf("tbs=%d tiles=%d reduce=%v: out[%d] = %v, want %v", c.tbs, c.tiles, c.reduce, i, got, want)
			}
		}
	}
}

var (
	bwSharing   = flag.Bool("bw.sharing", false, "measure the executor's copy with shared work at each -bw.tile and -bw.carveout")
	bwTiles     = flag.String("bw.tile", "65536", "comma-separated unit tile sizes in bytes (multiples of 128) for -bw.sharing")
	bwCarveouts = flag.String("bw.carveout", "-1", "comma-separated shared-memory carveouts (percent; -1: the driver's choice) for -bw.sharing")
	bwAligns    = flag.String("bw.align", "0", "comma-separated chunk alignments in bytes (0: the layout's own) for -bw.sharing")
	bwEntries   = flag.String("bw.entry", "units", "comma-separated entry points for shared work (units: theseus_units, exec: theseus_exec) for -bw.sharing")
)

// TestBandwidthSharing reports the executor's fp32 copy (bwProgram, one op
// per threadblock) as a fraction of memcpy with shared work at each unit
// tile size, and without it, at each shared-memory carveout of the
// executor kernel. Run with -bw.sharing on a GPU.
func TestBandwidthSharing(t *testing.T) {
	gputest.Require(t)
	if !*bwSharing {
		t.Skip("shared-work bandwidth report: run with -bw.sharing")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	currentDevice0(t)
	a, b := bwRefBuffers(t)
	el, err := timeLoop(3, 50, func() error { return driver.CopyDtoD(b, a, bwBytes) }, driver.Synchronize)
	if err != nil {
		t.Fatal(err)
	}
	ceil := 2 * bwBytes / el.Seconds()
	fmt.Printf("BWS memcpy %.1f GB/s\n", ceil/1e9)
	ints := func(s string) (out []int64) {
		for _, f := range strings.Split(s, ",") {
			if strings.TrimSpace(f) == "" {
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("%q: %v", s, err)
			}
			out = append(out, v)
		}
		return out
	}
	blockFn := embeddedBlockCopy(t)
	loadRefDyn(t)
	defer func() { kernelCarveout, unitTile, unitsEntry = -1, UnitTile, true; unloadModules(t) }()
	for _, co := range ints(*bwCarveouts) {
		kernelCarveout = int(co)
		unloadModules(t)
		for _, tile := range append([]int64{0}, ints(*bwTiles)...) { // 0: no shared work
			for i, entry := range strings.Split(*bwEntries, ",") {
				if tile == 0 && i > 0 {
					continue // without shared work the entry does not matter
				}
				unitsEntry = entry != "exec"
				unitTile = max(tile, 128)
				restore := env.SetLookupForTest(func(k string) (string, bool) {
					if strings.HasSuffix(k, "_WORK_SHARING") && tile == 0 {
						return "0", true
					}
					return os.LookupEnv(k)
				})
				for _, al := range ints(*bwAligns) {
					for _, shape := range [][2]int{{132, 512}, {132, 1024}, {264, 512}, {528, 256}} {
						at := fmt.Sprintf("carveout=%d tile=%d entry=%s align=%d tbs=%d threads=%d", co, tile, entry, al, shape[0], shape[1])
						bw, note, err := bwOpAligned(shape[0], shape[1], 1, 1, al/4, ir.Float32, false, 2, blockFn, ceil)
						if err != nil {
							fmt.Printf("BWS %s: %v\n", at, err)
							continue
						}
						fmt.Printf("BWS %s: %.1f GB/s = %.3f of memcpy%s\n", at, bw/1e9, bw/ceil, note)
					}
				}
				restore()
			}
		}
	}
}
