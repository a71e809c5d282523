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
	"github.com/theseus-ccl/theseus/runtime/env"
)

// TestKernelModules: one embedded PTX module per datatype with the
// executor's two entry points and the trace's clock (theseus_clock) — and
// in the uint8 module the point-to-point engine's (kernel/p2p.cuh) — and
// one per ResidentDataTypes with the persistent executor's one, and no
// other (the reference copies are in the measurement build,
// kernel/bench.cu), all different, and nothing else embedded (no GPU
// needed).
func TestKernelModules(t *testing.T) {
	seen := map[string]string{}
	entry := regexp.MustCompile(`(?m)^\.visible \.entry (\w+)\(`)
	for _, dt := range ir.AllDataTypes() {
		kinds := []struct {
			ptx     func(ir.DataType) ([]byte, error)
			entries []string
		}{{PTX, []string{ClockKernelName, KernelName, UnitsKernelName}}, {ResidentPTX, []string{ResidentKernelName}}}
		if dt == ir.Uint8 {
			kinds[0].entries = append(kinds[0].entries, P2PBasesName, P2PKernelName)
		}
		if !hasResident(dt) {
			if _, err := ResidentPTX(dt); err == nil {
				t.Errorf("%v: a resident module, but not in ResidentDataTypes", dt)
			}
			kinds = kinds[:1]
		}
		for _, m := range kinds {
			ptx, err := m.ptx(dt)
			if err != nil {
				t.Fatalf("%v: %v", dt, err)
			}
			if !bytes.Contains(ptx, []byte(".target sm_80")) {
				t.Errorf("%v: not an sm_80 module", dt)
			}
			var entries []string
			for _, e := range entry.FindAllSubmatch(ptx, -1) {
				entries = append(entries, string(e[1]))
			}
			if !slices.Equal(entries, m.entries) {
				t.Errorf("%v: entry points %v, want %v", dt, entries, m.entries)
			}
			name := fmt.Sprintf("%v %v", dt, m.entries)
			if prev, dup := seen[string(ptx)]; dup {
				t.Errorf("%s and %s have the same module", prev, name)
			}
			seen[string(ptx)] = name
		}
	}
	files, err := fs.Glob(ptxFS, "kernel/ptx/*")
	if err != nil {
		t.Fatal(err)
	}
	if want := int(ir.NumDataTypes) + len(ResidentDataTypes); len(files) != want {
		t.Errorf("%d embedded modules %v, want %d", len(files), files, want)
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

// TestModuleLoadPTXDir JIT-compiles every module of THESEUS_PTX_DIR (a
// measurement build: cuda/kernel/build.sh bench), one subtest per
// datatype, and prints KERNEL lines as TestModuleLoad does; skipped when
// the variable is unset. The driver caches what it compiles, so a GPU
// script runs it for several builds at once, in separate processes,
// before it times or tests them (bench/gpu/latency-variants.sh).
func TestModuleLoadPTXDir(t *testing.T) {
	gputest.Require(t)
	dir := env.PTXDir.String()
	if dir == "" {
		t.Skip("THESEUS_PTX_DIR is not set")
	}
	for _, dt := range ir.AllDataTypes() {
		t.Run(dt.String(), func(t *testing.T) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			currentDevice0(t)
			ptx, err := modulePTX(moduleExec, dt)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			mod, err := driver.LoadModule(ptx)
			if err != nil {
				t.Fatalf("%s %v: %v", dir, dt, err)
			}
			defer mod.Unload()
			if _, err := mod.Function(KernelName); err != nil {
				t.Fatalf("%s %v: %v", dir, dt, err)
			}
			fmt.Printf("KERNEL %s %v: loaded in %.2f s\n", dir, dt, time.Since(start).Seconds())
		})
	}
}

// TestResidentModule loads the persistent executor's float32 module and
// reports what one resident threadblock takes: registers, local bytes,
// static shared memory, and how many such blocks of 256 and ExecMaxThreads threads
// fit on one multiprocessor (the SMs a resident kernel of
// THESEUS_PERSISTENT_BLOCKS blocks occupies: docs/design/cuda.md, "The
// persistent executor").
func TestResidentModule(t *testing.T) {
	gputest.Require(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d := currentDevice0(t)
	ptx, err := ResidentPTX(ir.Float32)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	el := time.Since(start)
	fn, err := mod.Function(ResidentKernelName)
	if err != nil {
		t.Fatal(err)
	}
	regs, _ := fn.Attribute(driver.FuncAttrNumRegs)
	local, _ := fn.Attribute(driver.FuncAttrLocalSizeBytes)
	shared, _ := fn.Attribute(driver.FuncAttrSharedSizeBytes)
	sms, _ := d.Attribute(driver.AttrMultiprocessorCount)
	per := map[int]int{}
	for _, th := range []int{256, ExecMaxThreads} {
		if per[th], err = fn.MaxActiveBlocksPerSM(th, 0); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("RESIDENT float32: loaded in %.2f s, %d registers, %d local bytes per thread, %d static shared bytes per block; "+
		"%d blocks of 256 threads or %d of %d fit on one of %d multiprocessors\n", el.Seconds(), regs, local, shared, per[256], per[ExecMaxThreads], ExecMaxThreads, sms)
	if per[256] < 1 || per[ExecMaxThreads] < 1 {
		t.Errorf("a resident block does not fit on a multiprocessor: %v", per)
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
