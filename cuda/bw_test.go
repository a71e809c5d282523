package cuda

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

// The bandwidth benchmarks (BenchmarkBandwidth*) report bytes moved per
// second (reads + writes) in GB/s and as a fraction of the device-to-device
// memcpy ceiling measured in the same process (of-memcpy). The reference
// copies they compare against are in the measurement build of the kernel
// (kernel/bench.cu), which -bw.refs names; kernel variants to measure
// beside the embedded kernel are measurement builds too (-bw.variants).
// bench/gpu/prepare.sh builds both, bench/gpu/run-all.sh runs them.
var (
	bwVariants = flag.String("bw.variants", "", "comma-separated folders of measurement builds of the kernel (cuda/kernel/build.sh bench) that BenchmarkBandwidth measures beside the embedded kernel")
	bwRefs     = flag.String("bw.refs", "", "folder of a measurement build of the kernel (cuda/kernel/build.sh bench): BenchmarkBandwidthRefs times its reference copies; BenchmarkBandwidth and BenchmarkBandwidthSharing time its block-contiguous copy and theseus_ref_dyn over each unsliced copy's own buffers")
	bwTiles    = flag.String("bw.tile", "65536", "BenchmarkBandwidthSharing: comma-separated unit tile sizes in bytes (multiples of 128)")
	bwAligns   = flag.String("bw.align", "0", "BenchmarkBandwidthSharing: comma-separated chunk alignments in bytes (0: the layout's own)")
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

// bwBytes is the size of each buffer the bandwidth benchmarks move.
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
	return time.Since(start) / time.Duration(max(iters, 1)), nil
}

// bwSetup holds the GPU for a bandwidth benchmark: the calling goroutine
// locked to its thread with device 0's context current (until the
// benchmark ends); it returns the device, its multiprocessor count, and
// the memcpy ceiling.
func bwSetup(b *testing.B) (d *driver.Device, sms int, ceil float64) {
	b.Helper()
	gputest.Require(b)
	d = onGPU(b)
	sms, _ = d.Attribute(driver.AttrMultiprocessorCount)
	return d, sms, memcpyCeiling(b)
}

// onGPU locks the calling goroutine to its thread and makes device 0's
// context current there, until the benchmark ends: each sub-benchmark
// runs on a goroutine of its own, so each calls it before it uses the
// driver directly.
func onGPU(b testing.TB) *driver.Device {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	return currentDevice0(b)
}

var ceiling struct {
	once sync.Once
	bw   float64
	err  error
}

// memcpyCeiling is cuMemcpyDtoD's bandwidth over bwBytes (bytes read and
// written per second), measured once per process (3 warm-up and 50 timed
// copies) with the caller's context current.
func memcpyCeiling(b *testing.B) float64 {
	ceiling.once.Do(func() {
		var a, c driver.Ptr
		if a, ceiling.err = driver.MemAlloc(bwBytes); ceiling.err != nil {
			return
		}
		defer driver.MemFree(a)
		if c, ceiling.err = driver.MemAlloc(bwBytes); ceiling.err != nil {
			return
		}
		defer driver.MemFree(c)
		var el time.Duration
		el, ceiling.err = timeLoop(3, 50, func() error { return driver.CopyDtoD(c, a, bwBytes) }, driver.Synchronize)
		ceiling.bw = 2 * bwBytes / el.Seconds()
	})
	if ceiling.err != nil {
		b.Fatal(ceiling.err)
	}
	return ceiling.bw
}

// reportBW reports moved bytes per el as GB/s and as a fraction of ceil.
func reportBW(b *testing.B, moved float64, el time.Duration, ceil float64) float64 {
	bw := moved / el.Seconds()
	b.ReportMetric(bw/1e9, "GB/s")
	b.ReportMetric(bw/ceil, "of-memcpy")
	return bw
}

// BenchmarkBandwidthMemcpy is the ceiling the other bandwidth benchmarks
// are stated against: cuMemcpyDtoD over 1 GiB.
func BenchmarkBandwidthMemcpy(b *testing.B) {
	_, _, ceil := bwSetup(b)
	a, c := bwRefBuffers(b)
	el, err := timeLoop(1, b.N, func() error { return driver.CopyDtoD(c, a, bwBytes) }, driver.Synchronize)
	if err != nil {
		b.Fatal(err)
	}
	reportBW(b, 2*bwBytes, el, ceil)
}

// bwRefBuffers allocates the reference kernels' two buffers of bwBytes,
// freed when the benchmark ends.
func bwRefBuffers(b testing.TB) (x, y driver.Ptr) {
	for _, p := range []*driver.Ptr{&x, &y} {
		var err error
		if *p, err = driver.MemAlloc(bwBytes); err != nil {
			b.Fatal(err)
		}
		q := *p
		b.Cleanup(func() { driver.MemFree(q) })
	}
	return x, y
}

// refModule is the -bw.refs build's float32 module, loaded into the
// current context until the benchmark ends, with theseus_ref_dyn's two
// counter words (zeroed). ok is false without -bw.refs.
type refModule struct {
	mod driver.Module
	ctr driver.Ptr
}

func loadRefs(b testing.TB) (m refModule, ok bool) {
	if *bwRefs == "" {
		return m, false
	}
	ptx, err := variantPTX(*bwRefs)(ir.Float32)
	if err != nil {
		b.Fatal(err)
	}
	if m.mod, err = driver.LoadModule(ptx); err != nil {
		b.Fatalf("-bw.refs %s: %v", *bwRefs, err)
	}
	b.Cleanup(func() { m.mod.Unload() })
	if m.ctr, err = driver.MemAlloc(16); err == nil {
		err = driver.MemsetD8(m.ctr, 0, 16)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { driver.MemFree(m.ctr) })
	return m, true
}

// time runs reference kernel name of m over n16 16-byte vectors from src to
// dst on grid x threads: 3 warm-up launches, then iters, and returns the
// mean time of one.
func (m refModule) time(b testing.TB, name string, src, dst driver.Ptr, n16 int64, grid, threads, iters int) time.Duration {
	fn, err := m.mod.Function(name)
	if err != nil {
		b.Fatal(err)
	}
	// The fourth word is theseus_ref_dyn's counters (the others take three).
	args := new([4]uint64)
	args[0], args[1], args[2], args[3] = uint64(src), uint64(dst), uint64(n16), uint64(m.ctr)
	el, err := timeLoop(3, iters, func() error { return driver.Launch1(fn, grid, threads, 0, 0, unsafe.Pointer(args)) }, driver.Synchronize)
	if err != nil {
		b.Fatal(err)
	}
	return el
}

// bwRef is a reference copy of the measurement build (kernel/bench.cu) and
// the grids it is timed at.
type bwRef struct {
	kernel     string
	grids      [][2]int
	blockParts bool // it copies theseus_block_copy's parts (blockCopyBytes), else all bwBytes
}

// bwRefList lists the measurement build's reference copies for a GPU of
// sms multiprocessors: the plain grid-stride copy (stream-copy), the
// block-contiguous copy (block-copy: the executor's partition), one tile
// per block (flat1: one vector per thread; flat4: four), grid-stride with
// 4 or 8 vectors in flight (stream4, stream8), tiles dealt round-robin to
// the blocks (tiles) or to whichever block asks next (dyn), and the
// block-contiguous copy software-pipelined (pipe).
func bwRefList(sms int) []bwRef {
	n16 := bwBytes / 16
	stride := [][2]int{{2 * sms, 1024}, {4 * sms, 512}, {8 * sms, 256}, {16 * sms, 128}}
	return []bwRef{
		{kernel: "theseus_stream_copy", grids: [][2]int{{sms, 1024}, {2 * sms, 1024}, {4 * sms, 512}, {8 * sms, 256}, {16 * sms, 128}}},
		{kernel: "theseus_block_copy", grids: [][2]int{{sms, 512}, {sms, 1024}, {2 * sms, 512}, {4 * sms, 256}}, blockParts: true},
		{kernel: "theseus_ref_flat1", grids: [][2]int{{n16 / 256, 256}, {n16 / 512, 512}, {n16 / 1024, 1024}}},
		{kernel: "theseus_ref_flat4", grids: [][2]int{{n16 / 1024, 256}, {n16 / 2048, 512}, {n16 / 4096, 1024}}},
		{kernel: "theseus_ref_stream4", grids: stride},
		{kernel: "theseus_ref_stream8", grids: stride},
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

// BenchmarkBandwidthRefs times the reference copies of the -bw.refs
// measurement build over 1 GiB (sub-benchmarks kernel/grid=blocksxthreads),
// each as a fraction of memcpy: what a plain copy of each access pattern
// reaches on this GPU.
func BenchmarkBandwidthRefs(b *testing.B) {
	_, sms, ceil := bwSetup(b)
	m, ok := loadRefs(b)
	if !ok {
		b.Skip("reference copies: run with -bw.refs=<a measurement build of the kernel>")
	}
	x, y := bwRefBuffers(b)
	for _, r := range bwRefList(sms) {
		for _, g := range r.grids {
			name := fmt.Sprintf("%s/grid=%dx%d", strings.ReplaceAll(strings.TrimPrefix(r.kernel, "theseus_"), "_", "-"), g[0], g[1])
			b.Run(name, func(b *testing.B) {
				onGPU(b)
				el := m.time(b, r.kernel, x, y, bwBytes/16, g[0], g[1], b.N)
				moved := float64(2 * bwBytes)
				if r.blockParts {
					moved = blockCopyBytes(g[0], g[1])
				}
				reportBW(b, moved, el, ceil)
			})
		}
	}
}

// bwVariant is a kernel to measure: a name ("embedded", or a measurement
// build's folder name) and its folder ("" for the embedded modules).
type bwVariant struct {
	name, dir string
}

// bwVariantList returns the embedded kernel and the -bw.variants folders.
// A folder's flags.txt (written by bench/gpu/prepare.sh) names its build
// flags, logged by BenchmarkBandwidth.
func bwVariantList() []bwVariant {
	vs := []bwVariant{{"embedded", ""}}
	if *bwVariants == "" {
		return vs
	}
	for _, dir := range strings.Split(*bwVariants, ",") {
		if dir = strings.TrimSpace(dir); dir != "" {
			vs = append(vs, bwVariant{filepath.Base(dir), dir})
		}
	}
	return vs
}

// useKernel makes the executor modules loaded from now on those of folder
// dir (THESEUS_PTX_DIR; "" for the embedded ones), shared work off when
// noSharing (THESEUS_WORK_SHARING=0), dropping every module loaded so far.
// The returned function restores the environment and drops the modules
// again.
func useKernel(b testing.TB, dir string, noSharing bool) (restore func()) {
	over := map[string]string{}
	if dir != "" {
		over[env.PTXDir.Name] = dir
	}
	if noSharing {
		over[env.WorkSharing.Name] = "0"
	}
	undo := env.SetLookupForTest(func(k string) (string, bool) {
		for name, v := range over {
			if strings.HasSuffix(k, "_"+name) {
				return v, true
			}
		}
		return os.LookupEnv(k)
	})
	unloadModules(b)
	return func() { undo(); unloadModules(b) }
}

// BenchmarkBandwidth reports copy and reduce op bandwidth of the executor
// kernel (one rank, 1 GiB per buffer, in a fresh World per case) as GB/s
// and a fraction of memcpy, for several grid shapes, pipeline slices,
// round-robin chunks and with shared work off, and for the measurement
// builds named by -bw.variants (unsliced shapes only). Sub-benchmarks:
// variant/op/tbs=N,threads=N,slices=N[,tiles=N][,sharing=off]. With
// -bw.refs, beside each unsliced copy it also reports, over the same
// buffers at the same grid, the block-contiguous reference copy
// (block-copy-same), memcpy (memcpy-same) and theseus_ref_dyn (dyn-same),
// each a fraction of the memcpy ceiling: that separates the kernel's cost
// from the buffers' placement. <variant>/kernel reports the loaded
// modules' registers and local (spill) bytes per thread.
func BenchmarkBandwidth(b *testing.B) {
	d, _, ceil := bwSetup(b)
	refs, _ := loadRefs(b)
	for _, v := range bwVariantList() {
		if v.dir != "" {
			if flags, err := os.ReadFile(filepath.Join(v.dir, "flags.txt")); err == nil {
				b.Logf("variant %s: built with %s", v.name, strings.TrimSpace(string(flags)))
			}
		}
		for _, c := range []struct {
			name   string
			reduce bool
			dt     ir.DataType
			moved  float64 // bytes moved per byte of buffer
		}{{"copy-fp32", false, ir.Float32, 2}, {"reduce-fp32-sum", true, ir.Float32, 3}, {"reduce-bf16-sum", true, ir.Bfloat16, 3}} {
			// {slices, tiles, shared}: pipelining (threadblocks interleave
			// at 1/slices of a chunk), chunks dealt round-robin (tiles), and
			// shared work (cuda/units.go: on by default; 0 runs each
			// threadblock's own ops, THESEUS_WORK_SHARING=0).
			splits := [][3]int{{1, 1, 1}}
			if v.dir == "" {
				splits = [][3]int{{1, 1, 1}, {1, 1, 0}, {16, 1, 1}, {1, 4, 0}}
			}
			// The last two shapes have more threadblocks than the GPU holds
			// at once (2 of 512 threads or 4 of 256 per multiprocessor at
			// the kernel's 64 registers): the hardware runs them in waves,
			// handing each multiprocessor the next threadblock as one ends.
			for _, shape := range [][2]int{{132, 512}, {132, 1024}, {264, 512}, {528, 256}, {1056, 512}, {2112, 256}} {
				for _, split := range splits {
					tbs, threads := shape[0], shape[1]
					slices, tiles, shared := int64(split[0]), split[1], split[2] == 1
					name := fmt.Sprintf("%s/%s/tbs=%d,threads=%d,slices=%d", v.name, c.name, tbs, threads, slices)
					if tiles > 1 {
						name += fmt.Sprintf(",tiles=%d", tiles)
					}
					if !shared {
						name += ",sharing=off"
					}
					b.Run(name, func(b *testing.B) {
						onGPU(b)
						defer useKernel(b, v.dir, !shared)()
						bwOp(b, bwCase{tbs: tbs, threads: threads, tiles: tiles, slices: slices, align: 256 / int64(c.dt.Size()),
							dt: c.dt, reduce: c.reduce, moved: c.moved}, refs, ceil)
					})
				}
			}
		}
		b.Run(v.name+"/kernel", func(b *testing.B) {
			onGPU(b)
			defer useKernel(b, v.dir, false)()
			reportKernelAttributes(b, d.Context())
		})
	}
}

// bwCase is one executor case of the bandwidth benchmarks: tbs
// threadblocks of threads each, tiles ops each (bwProgram) over count
// elements of dt, rounded down to a multiple of tbs*tiles*align (align >
// 0) so that every chunk starts a multiple of align elements into the
// buffer, at slices pipeline slices; moved is bytes moved per byte of
// buffer (2 for a copy, 3 for a reduce).
type bwCase struct {
	tbs, threads, tiles int
	slices, align       int64
	dt                  ir.DataType
	reduce              bool
	moved               float64
}

// bwOp times b.N launches of case c in a fresh World and reports its
// bandwidth; an unsliced copy with the -bw.refs build (refs.mod set) also
// reports the same-buffer references (BenchmarkBandwidth). A table whose
// shape the kernel cannot launch (a variant built for fewer threads)
// skips the sub-benchmark, saying so.
//
// BenchmarkBandwidth aligns chunks to 256 bytes, as theseus_block_copy's
// parts are: ir.Layout starts chunks on 128-byte lines, and on the H200 a
// copy whose chunks start on odd 128-byte lines runs up to 8% slower
// (docs/design/cuda.md, "The kernel's data paths").
func bwOp(b *testing.B, c bwCase, refs refModule, ceil float64) {
	tables, err := optable.LowerAll(bwProgram(c.tbs, c.threads, c.tiles, c.reduce))
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWorld(0, tables)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	count := int64(bwBytes) / int64(c.dt.Size())
	if c.align > 0 {
		k := int64(c.tbs*c.tiles) * c.align
		count = count / k * k
	}
	req := interp.Request{Count: count, DataType: c.dt, RedOp: ir.Sum, Slices: c.slices}
	if _, err := w.Time(req, 3, 1); err != nil {
		b.Skipf("%v", err)
	}
	b.ResetTimer()
	el, err := w.Time(req, 0, b.N)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	opBytes := count * int64(c.dt.Size())
	bw := reportBW(b, c.moved*float64(opBytes), el, ceil)
	if c.reduce || c.slices != 1 || c.tiles != 1 || refs.mod == 0 {
		return
	}
	// The context is current on this (locked) thread: onGPU.
	src, dst := w.bufs[0][0], w.bufs[0][1]
	bel := refs.time(b, "theseus_block_copy", src, dst, bwBytes/16, c.tbs, c.threads, 50)
	b.ReportMetric(blockCopyBytes(c.tbs, c.threads)/bel.Seconds()/ceil, "block-copy-same")
	mel, err := timeLoop(3, 50, func() error { return driver.CopyDtoD(dst, src, opBytes) }, driver.Synchronize)
	if err != nil {
		b.Fatal(err)
	}
	same := 2 * float64(opBytes) / mel.Seconds()
	b.ReportMetric(same/ceil, "memcpy-same")
	b.ReportMetric(bw/same, "of-memcpy-same")
	// theseus_ref_dyn copies whole tiles of 4*threads vectors only.
	n16 := opBytes / 16
	tile := int64(4 * c.threads)
	del := refs.time(b, "theseus_ref_dyn", src, dst, n16, c.tbs, c.threads, 50)
	b.ReportMetric(float64(2*16*(n16/tile*tile))/del.Seconds()/ceil, "dyn-same")
}

// variantPTX reads a measurement build's modules from dir
// (theseus_<dtype>.ptx, as cuda/kernel/build.sh bench writes them).
func variantPTX(dir string) func(ir.DataType) ([]byte, error) {
	return func(dt ir.DataType) ([]byte, error) {
		return os.ReadFile(filepath.Join(dir, "theseus_"+dt.String()+".ptx"))
	}
}

// unloadModules drops every loaded executor module (after the modules'
// source changed; no World may be using them).
func unloadModules(t testing.TB) {
	modMu.Lock()
	defer modMu.Unlock()
	for k, m := range modules {
		if err := m.mod.Unload(); err != nil {
			t.Log(err)
		}
		delete(modules, k)
	}
}

// reportKernelAttributes loads the float32 and bfloat16 executor modules
// (the bandwidth benchmarks' datatypes) in the current context and reports
// each entry point's registers and local (spill) bytes per thread.
func reportKernelAttributes(b *testing.B, ctx driver.Context) {
	for _, dt := range []ir.DataType{ir.Float32, ir.Bfloat16} {
		k, err := kernel(ctx, dt)
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range []struct {
			name string
			fn   driver.Function
		}{{"exec", k.exec}, {"units", k.units}} {
			regs, err := e.fn.Attribute(driver.FuncAttrNumRegs)
			if err != nil {
				b.Fatal(err)
			}
			local, _ := e.fn.Attribute(driver.FuncAttrLocalSizeBytes)
			b.ReportMetric(float64(regs), fmt.Sprintf("%v-%s-registers", dt, e.name))
			b.ReportMetric(float64(local), fmt.Sprintf("%v-%s-local-bytes", dt, e.name))
		}
	}
}

// TestBWVariantList: -bw.variants names folders, blanks ignored (no GPU
// needed).
func TestBWVariantList(t *testing.T) {
	old := *bwVariants
	*bwVariants = "/x/u8, /y/t512,"
	defer func() { *bwVariants = old }()
	got := bwVariantList()
	want := []bwVariant{{"embedded", ""}, {"u8", "/x/u8"}, {"t512", "/y/t512"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bwVariantList() = %v, want %v", got, want)
	}
}

// TestBWProgram runs the bandwidth benchmarks' programs on the host
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

// BenchmarkBandwidthSharing reports the executor's fp32 copy (bwProgram,
// one op per threadblock) with shared work at each -bw.tile unit size
// (tile=0: shared work off) and each -bw.align chunk alignment, on four
// grid shapes. Sub-benchmarks tile=N,align=N/tbs=N,threads=N.
func BenchmarkBandwidthSharing(b *testing.B) {
	_, _, ceil := bwSetup(b)
	refs, _ := loadRefs(b)
	ints := func(s string) (out []int64) {
		for _, f := range strings.Split(s, ",") {
			if strings.TrimSpace(f) == "" {
				continue
			}
			v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				b.Fatalf("%q: %v", s, err)
			}
			out = append(out, v)
		}
		return out
	}
	defer func() { unitTile = UnitTile }()
	for _, tile := range append([]int64{0}, ints(*bwTiles)...) { // 0: no shared work
		for _, al := range ints(*bwAligns) {
			for _, shape := range [][2]int{{132, 512}, {132, 1024}, {264, 512}, {528, 256}} {
				b.Run(fmt.Sprintf("tile=%d,align=%d/tbs=%d,threads=%d", tile, al, shape[0], shape[1]), func(b *testing.B) {
					onGPU(b)
					unitTile = max(tile, 128)
					defer useKernel(b, "", tile == 0)()
					bwOp(b, bwCase{tbs: shape[0], threads: shape[1], tiles: 1, slices: 1, align: al / 4, dt: ir.Float32, moved: 2}, refs, ceil)
				})
			}
		}
	}
}
