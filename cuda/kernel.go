// Package cuda is the CUDA backend of Theseus: the generic executor kernel
// (kernel/executor.cuh through kernel/theseus.cu, compiled to PTX by `go
// generate` with clang-14 and embedded here), its launch arguments (kernel/launch.h), and the host code
// that allocates, exports and imports memory and launches a rank's op table.
// It needs no CUDA toolkit to build: the driver is loaded at run time
// (package cuda/driver).
package cuda

//go:generate ./kernel/build.sh

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/env"
)

// ptxFS holds the executor kernel as sm_80 PTX, one module per datatype
// (kernel/ptx/theseus_<datatype>.ptx), JIT-compiled by the driver for the
// device it runs on the first time a process uses that datatype.
//
//go:embed kernel/ptx/*.ptx
var ptxFS embed.FS

// KernelName is the kernel's entry point in every module: it runs any op
// table.
const KernelName = "theseus_exec"

// UnitsKernelName is the entry point, in every module, for a launch of
// shared work (units.go): the same units loop as KernelName's without its
// prologue (kernel/executor.cuh, theseus_units).
const UnitsKernelName = "theseus_units"

// ClockKernelName is the entry point, in every module, that maps the GPU's
// %globaltimer to the host's clock for traces (trace.go). A module built
// before it (THESEUS_PTX_DIR) may lack it: its launches are traced
// without a clock mapping of their own (trace.go, calibrate).
const ClockKernelName = "theseus_clock"

// PTX returns the executor kernel's module for datatype dt. Errors: a
// datatype outside ir.AllDataTypes.
func PTX(dt ir.DataType) ([]byte, error) {
	if dt.Size() == 0 {
		return nil, fmt.Errorf("cuda: no kernel for %v", dt)
	}
	return ptxFS.ReadFile("kernel/ptx/theseus_" + dt.String() + ".ptx")
}

// modulePTX is PTX, or with THESEUS_PTX_DIR set the module of that
// directory (docs/env.md: a measurement build of the kernel, `build.sh
// bench`, run through unchanged clients).
func modulePTX(dt ir.DataType) ([]byte, error) {
	dir := env.PTXDir.String()
	if dir == "" {
		return PTX(dt)
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("cuda: no kernel for %v", dt)
	}
	b, err := os.ReadFile(filepath.Join(dir, "theseus_"+dt.String()+".ptx"))
	if err != nil {
		return nil, fmt.Errorf("cuda: THESEUS_PTX_DIR: %w", err)
	}
	return b, nil
}

type moduleKey struct {
	ctx driver.Context
	dt  ir.DataType
}

type module struct {
	mod driver.Module
	k   kernels
}

// kernels are a loaded module's entry points.
type kernels struct {
	exec  driver.Function // KernelName
	units driver.Function // UnitsKernelName
	p2p   driver.Function // P2PKernelName (the uint8 module's; 0 in the others)
	clock driver.Function // ClockKernelName, 0 when the module has none
}

// fn is the entry point for a launch with shared work (units) or without.
func (k kernels) fn(units bool) driver.Function {
	if units {
		return k.units
	}
	return k.exec
}

var (
	modMu   sync.Mutex
	modules = map[moduleKey]*module{}
)

// kernel returns the executor kernel's entry points for datatype dt loaded
// in the calling thread's current context ctx, loading (and JIT-compiling)
// the module on first use per context and datatype.
func kernel(ctx driver.Context, dt ir.DataType) (kernels, error) {
	modMu.Lock()
	defer modMu.Unlock()
	key := moduleKey{ctx, dt}
	if m, ok := modules[key]; ok {
		return m.k, nil
	}
	ptx, err := modulePTX(dt)
	if err != nil {
		return kernels{}, err
	}
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		return kernels{}, fmt.Errorf("cuda: load executor kernel (%v): %w", dt, err)
	}
	var k kernels
	for _, e := range []struct {
		name string
		fn   *driver.Function
	}{{KernelName, &k.exec}, {UnitsKernelName, &k.units}} {
		if *e.fn, err = mod.Function(e.name); err != nil {
			mod.Unload()
			return kernels{}, err
		}
	}
	if dt == ir.Uint8 {
		if k.p2p, err = mod.Function(P2PKernelName); err != nil {
			mod.Unload()
			return kernels{}, err
		}
	}
	if fn, err := mod.Function(ClockKernelName); err == nil {
		k.clock = fn
	}
	modules[key] = &module{mod: mod, k: k}
	return k, nil
}
