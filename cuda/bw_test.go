package cuda

import (
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/codegen/optable"
	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/interp"
)

var bwRun = flag.Bool("bw", false, "measure op bandwidth against the device-to-device memcpy ceiling")

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

// memcpyCeiling times a device-to-device copy of bytes, returning bytes
// moved (read + written) per second.
func memcpyCeiling(t *testing.T, bytes int64) float64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d, err := driver.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	d.SetCurrent()
	a, err := driver.MemAlloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.MemFree(a)
	b, err := driver.MemAlloc(bytes)
	if err != nil {
		t.Fatal(err)
	}
	defer driver.MemFree(b)
	for i := 0; i < 3; i++ {
		if err := driver.CopyDtoD(b, a, bytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := driver.Synchronize(); err != nil {
		t.Fatal(err)
	}
	const iters = 20
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := driver.CopyDtoD(b, a, bytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := driver.Synchronize(); err != nil {
		t.Fatal(err)
	}
	el := time.Since(start) / iters
	return 2 * float64(bytes) / el.Seconds()
}

// TestBandwidth reports copy and reduce op bandwidth (bytes moved: reads +
// writes) as a fraction of the memcpy ceiling measured in the same run.
// Run with -bw on a GPU.
func TestBandwidth(t *testing.T) {
	requireGPU(t)
	if !*bwRun {
		t.Skip("bandwidth report: run with -bw")
	}
	const bytes = 4 << 30 // per buffer
	ceil := memcpyCeiling(t, bytes)
	t.Logf("memcpy DtoD ceiling: %.1f GB/s (read+write)", ceil/1e9)
	fmt.Printf("BW memcpy %.1f GB/s\n", ceil/1e9)
	for _, c := range []struct {
		name   string
		reduce bool
		dt     ir.DataType
		moved  float64 // bytes moved per byte of buffer
	}{{"copy fp32", false, ir.Float32, 2}, {"reduce fp32 sum", true, ir.Float32, 3}, {"reduce bf16 sum", true, ir.Bfloat16, 3}} {
		for _, shape := range [][2]int{{132, 512}, {132, 1024}, {264, 512}, {264, 1024}, {528, 512}} {
			tbs, threads := shape[0], shape[1]
			p := bwProgram(tbs, threads, c.reduce)
			tables, err := optable.LowerAll(p)
			if err != nil {
				t.Fatal(err)
			}
			w, err := NewWorld(0, tables)
			if err != nil {
				t.Fatal(err)
			}
			count := int64(bytes) / int64(c.dt.Size())
			el, err := w.Time(interp.Request{Count: count, DataType: c.dt, RedOp: ir.Sum, Slices: 1}, 3, 20)
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			bw := c.moved * float64(bytes) / el.Seconds()
			line := fmt.Sprintf("BW %-16s tbs=%d threads=%d: %.1f GB/s = %.3f of memcpy (%v per op)", c.name, tbs, threads, bw/1e9, bw/ceil, el)
			t.Log(line)
			fmt.Println(line)
		}
	}
}
