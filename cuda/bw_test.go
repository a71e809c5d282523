package cuda

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

var (
	bwRun      = flag.Bool("bw", false, "measure op bandwidth against the device-to-device memcpy ceiling")
	bwVariants = flag.String("bw.variants", "", "comma-separated folders of kernel variant modules (theseus_<dtype>.ptx, built by cuda/kernel/build.sh with THESEUS_PTX_OUT) to measure beside the embedded kernel")
)

// bwProgram is a one-rank program of tbs threadblocks, each running one op
// on its own chunk: copy i[j] -> o[j], or reduce [i[j], o[j]] -> o[j].
func bwProgram(tbs, threads int, reduce bool) *ir.Program {
	p := &ir.Program{Name: "bw", Collective: ir.AllReduce, NRanks: 1, Root: -1, Protocol: ir.Simple,
		ChunksPerBlock: int64(tbs), OutOfPlace: true, NumThreads: threads}
	r := ir.Rank{}
	for j := 0; j < tbs; j++ {
		op := ir.Op{Code: ir.OpCopy, Count: 1,
			Srcs: []ir.Ref{{Buf: ir.Input, Off: int64(j), Chan: -1}}, Dsts: []ir.Ref{{Buf: ir.Output, Off: int64(j), Chan: -1}}}
		if reduce {
			op.Code = ir.OpReduce
			op.Srcs = append(op.Srcs, ir.Ref{Buf: ir.Output, Off: int64(j), Chan: -1})
		}
		r.TBs = append(r.TBs, ir.Threadblock{SendPeer: -1, RecvPeer: -1, Chan: -1, Ops: []ir.Op{op}})
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

// bwReference measures the memcpy ceiling and the plain 16-byte
// grid-stride copy (theseus_stream_copy) in bytes moved (read + write) per
// second, the latter at its best grid.
func bwReference(t *testing.T) (memcpy, stream float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := currentDevice0(t)
	sms, _ := d.Attribute(driver.AttrMultiprocessorCount)
	a, err := driver.MemAlloc(bwBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.MemFree(a)
	b, err := driver.MemAlloc(bwBytes)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.MemFree(b)
	el, err := timeLoop(3, 50, func() error { return driver.CopyDtoD(b, a, bwBytes) }, driver.Synchronize)
	if err != nil {
		t.Fatal(err)
	}
	memcpy = 2 * bwBytes / el.Seconds()
	ptx, err := PTX(ir.Float32)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	fn, err := mod.Function("theseus_stream_copy")
	if err != nil {
		t.Fatal(err)
	}
	args := new([3]uint64)
	args[0], args[1], args[2] = uint64(a), uint64(b), bwBytes/16
	for _, g := range [][2]int{{sms, 1024}, {2 * sms, 1024}, {4 * sms, 512}, {8 * sms, 256}, {16 * sms, 128}} {
		el, err := timeLoop(3, 50, func() error { return driver.Launch1(fn, g[0], g[1], 0, 0, unsafe.Pointer(args)) }, driver.Synchronize)
		if err != nil {
			t.Fatal(err)
		}
		bw := 2 * bwBytes / el.Seconds()
		fmt.Printf("BW stream-copy grid=%dx%d: %.1f GB/s = %.3f of memcpy\n", g[0], g[1], bw/1e9, bw/memcpy)
		stream = max(stream, bw)
	}
	// The executor's pattern: each block through its own contiguous part.
	bfn, err := mod.Function("theseus_block_copy")
	if err != nil {
		t.Fatal(err)
	}
	bargs := new([3]uint64)
	for _, g := range [][2]int{{sms, 512}, {sms, 1024}, {2 * sms, 512}, {4 * sms, 256}} {
		bargs[0], bargs[1], bargs[2] = uint64(a), uint64(b), bwBytes/16
		el, err := timeLoop(3, 50, func() error { return driver.Launch1(bfn, g[0], g[1], 0, 0, unsafe.Pointer(bargs)) }, driver.Synchronize)
		if err != nil {
			t.Fatal(err)
		}
		bw := 2 * bwBytes / el.Seconds()
		fmt.Printf("BW block-copy grid=%dx%d: %.1f GB/s = %.3f of memcpy\n", g[0], g[1], bw/1e9, bw/memcpy)
	}
	return memcpy, stream
}

// TestBandwidth reports copy and reduce op bandwidth (bytes moved: reads +
// writes) of the executor kernel as a fraction of the memcpy ceiling
// measured in the same run, for several grid shapes, one slice and the
// runtime's pipelining, and for the kernel variants named by -bw.variants.
// Run with -bw on a GPU; "BW best" lines give each operation's best.
func TestBandwidth(t *testing.T) {
	requireGPU(t)
	if !*bwRun {
		t.Skip("bandwidth report: run with -bw")
	}
	ceil, stream := bwReference(t)
	fmt.Printf("BW memcpy %.1f GB/s; plain grid-stride copy %.3f of it\n", ceil/1e9, stream/ceil)
	variants := []string{""}
	if *bwVariants != "" {
		variants = append(variants, strings.Split(*bwVariants, ",")...)
	}
	defer func() { ptxSource = PTX; unloadModules(t) }()
	for _, v := range variants {
		name := "embedded"
		if v == "" {
			ptxSource = PTX
		} else {
			name = filepath.Base(v)
			ptxSource = variantPTX(v)
		}
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
			slicesList := []int64{1}
			if v == "" {
				slicesList = []int64{1, 16, 128} // pipelined: threadblocks interleave at 1/slices of a chunk
			}
			for _, shape := range [][2]int{{132, 512}, {132, 1024}, {264, 512}, {528, 256}} {
				for _, slices := range slicesList {
					tbs, threads := shape[0], shape[1]
					tables, err := optable.LowerAll(bwProgram(tbs, threads, c.reduce))
					if err != nil {
						t.Fatal(err)
					}
					w, err := NewWorld(0, tables)
					if err != nil {
						t.Fatal(err)
					}
					count := int64(bwBytes) / int64(c.dt.Size())
					el, err := w.Time(interp.Request{Count: count, DataType: c.dt, RedOp: ir.Sum, Slices: slices}, 3, 20)
					w.Close()
					if err != nil {
						// A variant built for fewer threads cannot launch the larger shapes.
						fmt.Printf("BW %s %s tbs=%d threads=%d: %v\n", name, c.name, tbs, threads, err)
						continue
					}
					bw := c.moved * float64(count*int64(c.dt.Size())) / el.Seconds()
					at := fmt.Sprintf("tbs=%d threads=%d slices=%d", tbs, threads, slices)
					fmt.Printf("BW %s %-16s %s: %.1f GB/s = %.3f of memcpy (%v per op)\n", name, c.name, at, bw/1e9, bw/ceil, el)
					if bw > best {
						best, bestAt = bw, at
					}
				}
			}
			fmt.Printf("BW best %s %-16s %.3f of memcpy (%.1f GB/s, %s)\n", name, c.name, best/ceil, best/1e9, bestAt)
		}
		if err := reportKernelAttributes(name); err != nil {
			t.Log(err)
		}
	}
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
		regs, err := m.fn.Attribute(driver.FuncAttrNumRegs)
		if err != nil {
			return err
		}
		local, _ := m.fn.Attribute(driver.FuncAttrLocalSizeBytes)
		maxT, _ := m.fn.Attribute(driver.FuncAttrMaxThreadsPerBlock)
		fmt.Printf("KERNEL %s %v: %d registers, %d local bytes per thread, at most %d threads\n", name, k.dt, regs, local, maxT)
	}
	return nil
}
