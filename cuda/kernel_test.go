package cuda

import (
	"bytes"
	"fmt"
	"io/fs"
	"regexp"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/cuda/gputest"
	"github.com/theseus-ccl/theseus/ir"
)

// TestKernelModules: one embedded PTX module per datatype, each with the
// executor's two entry points and the trace's clock (theseus_clock) and no
// other (the reference copies are in the measurement build, kernel/bench.cu)
// but for the uint8 module's point-to-point engine (kernel/p2p.cuh), all
// different, and nothing else
// embedded (no GPU needed).
func TestKernelModules(t *testing.T) {
	seen := map[string]ir.DataType{}
	entry := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	for _, dt := range ir.AllDataTypes() {
		ptx, err := PTX(dt)
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		if !bytes.Contains(ptx, []byte(".target sm_80")) {
			t.Errorf("%v: not an sm_80 module", dt)
		}
		var entries []string
		for _, m := range entry.FindAllSubmatch(ptx, -1) {
			entries = append(entries, string(m[1]))
		}
		want := []string{ClockKernelName, KernelName, UnitsKernelName}
		if dt == ir.Uint8 {
			want = append(want, P2PKernelName)
		}
		if !slices.Equal(entries, want) {
			t.Errorf("%v: entry points %v, want %v", dt, entries, want)
		}
		if prev, dup := seen[string(ptx)]; dup {
			t.Errorf("%v and %v have the same module", prev, dt)
		}
		seen[string(ptx)] = dt
	}
	files, err := fs.Glob(ptxFS, "kernel/ptx/*")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != int(ir.NumDataTypes) {
		t.Errorf("%d embedded modules %v, want %d", len(files), files, ir.NumDataTypes)
	}
	if _, err := PTX(ir.DataType(ir.NumDataTypes)); err == nil {
		t.Error("a module for an invalid datatype")
	}
}

// TestModuleLoad loads every datatype's module on GPU 0 and reports how
// long the load took (on a machine whose driver cache is cold, the JIT
// compile: the cost of a process's first collective of that datatype) and
// the registers and local (spill) bytes per thread ptxas chose.
func TestModuleLoad(t *testing.T) {
	gputest.Require(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	currentDevice0(t)
	for _, dt := range ir.AllDataTypes() {
		ptx, err := PTX(dt)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		mod, err := driver.LoadModule(ptx)
		el := time.Since(start)
		if err != nil {
			t.Fatalf("%v: %v", dt, err)
		}
		names := []string{KernelName, UnitsKernelName, ClockKernelName}
		if dt == ir.Uint8 {
			names = append(names, P2PKernelName)
		}
		for _, name := range names {
			fn, err := mod.Function(name)
			if err != nil {
				t.Fatalf("%v: %v", dt, err)
			}
			regs, _ := fn.Attribute(driver.FuncAttrNumRegs)
			local, _ := fn.Attribute(driver.FuncAttrLocalSizeBytes)
			maxT, _ := fn.Attribute(driver.FuncAttrMaxThreadsPerBlock)
			fmt.Printf("KERNEL %v %s: loaded in %.2f s, %d registers, %d local bytes per thread, at most %d threads\n", dt, name, el.Seconds(), regs, local, maxT)
			if maxT < 512 {
				t.Errorf("%v %s: at most %d threads per block; the runtime launches up to 512", dt, name, maxT)
			}
		}
		mod.Unload()
	}
}

// currentDevice0 opens GPU 0 and makes its context current on the calling
// OS thread, which the caller holds (runtime.LockOSThread).
func currentDevice0(t testing.TB) *driver.Device {
	t.Helper()
	d, err := driver.OpenDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	if err := d.SetCurrent(); err != nil {
		t.Fatal(err)
	}
	return d
}
