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
	"slices"
	"sync"

	"github.com/theseus-ccl/theseus/cuda/driver"
	"github.com/theseus-ccl/theseus/ir"
	"github.com/theseus-ccl/theseus/runtime/device"
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

// ResidentKernelName is the entry point of the persistent executor's
// modules (kernel/resident.cuh; ResidentPTX).
const ResidentKernelName = "theseus_resident"

// ClockKernelName is the entry point, in every module, that maps the GPU's
// %globaltimer to the host's clock for traces (trace.go). A module built
// before it (THESEUS_PTX_DIR) may lack it: its launches are traced
// without a clock mapping of their own (trace.go, calibrate).
const ClockKernelName = "theseus_clock"

// PTX returns the executor kernel's module for datatype dt. Errors: a
// datatype outside ir.AllDataTypes.
func PTX(dt ir.DataType) ([]byte, error) { return embeddedPTX(moduleExec, dt) }

// ResidentPTX returns the persistent executor's module for datatype dt
// (executor.cuh built with THESEUS_RESIDENT: theseus_resident only), one
// of ResidentDataTypes. Errors: another datatype.
func ResidentPTX(dt ir.DataType) ([]byte, error) { return embeddedPTX(moduleResident, dt) }

// ResidentDataTypes are the datatypes with a persistent executor's module
// (kernel/build.sh, RESIDENT_DTYPES): in persistent mode a launch of
// another datatype is a kernel launch.
var ResidentDataTypes = []ir.DataType{ir.Float32, ir.Float16, ir.Bfloat16, ir.Float64}

func hasResident(dt ir.DataType) bool { return slices.Contains(ResidentDataTypes, dt) }

// The kinds of module: the executor's (theseus_<datatype>.ptx: theseus_exec
// and theseus_units) and the persistent executor's
// (theseus_resident_<datatype>.ptx).
type moduleKind uint8

const (
	moduleExec moduleKind = iota
	moduleResident
)

func (k moduleKind) file(dt ir.DataType) string {
	if k == moduleResident {
		return "theseus_resident_" + dt.String() + ".ptx"
	}
	return "theseus_" + dt.String() + ".ptx"
}

func embeddedPTX(k moduleKind, dt ir.DataType) ([]byte, error) {
	if dt.Size() == 0 {
		return nil, fmt.Errorf("cuda: no kernel for %v", dt)
	}
	return ptxFS.ReadFile("kernel/ptx/" + k.file(dt))
}

// modulePTX is the embedded module, or with THESEUS_PTX_DIR set the module
// of that directory (docs/env.md: a measurement build of the kernel,
// `build.sh bench`, run through unchanged clients).
func modulePTX(k moduleKind, dt ir.DataType) ([]byte, error) {
	dir := env.PTXDir.String()
	if dir == "" {
		return embeddedPTX(k, dt)
	}
	if dt.Size() == 0 {
		return nil, fmt.Errorf("cuda: no kernel for %v", dt)
	}
	b, err := os.ReadFile(filepath.Join(dir, k.file(dt)))
	if err != nil {
		return nil, fmt.Errorf("cuda: THESEUS_PTX_DIR: %w", err)
	}
	return b, nil
}

type moduleKey struct {
	ctx  driver.Context
	dt   ir.DataType
	kind moduleKind
}

type module struct {
	mod driver.Module
	k   kernels
}

// kernels are a loaded module's entry points.
type kernels struct {
	exec     driver.Function // KernelName
	units    driver.Function // UnitsKernelName
	p2p      driver.Function // P2PKernelName (the uint8 module's; 0 in the others)
	p2pBases bool            // the module has P2PBasesName: its p2p adds the launch's buffer offsets
	clock    driver.Function // ClockKernelName, 0 when the module has none
	resident driver.Function // ResidentKernelName (a resident module)
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
	// specs are the specialised modules loaded, by context and key.
	specs = map[specKey]driver.Function{}
)

// SpecKernelName is the one entry point of a specialised module
// (codegen/specialize; kernel/executor.cuh, theseus_spec): it takes the
// generic kernel's launch argument.
const SpecKernelName = "theseus_spec"

type specKey struct {
	ctx driver.Context
	key [32]byte
}

// specKernel returns the entry point of specialised module k (a bundle's:
// device.Args.Kernel) loaded in the calling thread's current context ctx,
// loading (and JIT-compiling) it on first use per context. With peers
// (several ranks of this process share ctx), it loads k.Peers too, in the
// same call: a load may wait for the context's running kernels, so every
// rank's module must be in before any rank launches one, or the first
// launch's kernel waits for a peer whose launch waits in the load for it
// (docs/specialize.md, "At run time"). The functions are fully loaded
// here (driver.Function.Load), not lazily at their first launch.
func specKernel(ctx driver.Context, k *device.Kernel, peers bool) (driver.Function, error) {
	modMu.Lock()
	defer modMu.Unlock()
	if peers {
		for _, p := range k.Peers {
			if _, err := specKernelLocked(ctx, p); err != nil {
				return 0, err
			}
		}
	}
	return specKernelLocked(ctx, k)
}

func specKernelLocked(ctx driver.Context, k *device.Kernel) (driver.Function, error) {
	key := specKey{ctx, k.Key}
	if fn, ok := specs[key]; ok {
		return fn, nil
	}
	mod, err := driver.LoadModule(k.PTX)
	if err != nil {
		return 0, fmt.Errorf("cuda: load specialised kernel: %w", err)
	}
	fn, err := mod.Function(SpecKernelName)
	if err == nil {
		err = fn.Load()
	}
	if err != nil {
		mod.Unload()
		return 0, err
	}
	specs[key] = fn
	return fn, nil
}

// kernel returns the executor kernel's entry points for datatype dt loaded
// in the calling thread's current context ctx, loading (and JIT-compiling)
// the module on first use per context and datatype.
func kernel(ctx driver.Context, dt ir.DataType) (kernels, error) {
	return loadKernel(ctx, dt, moduleExec)
}

// residentKernel is kernel for the persistent executor's module.
func residentKernel(ctx driver.Context, dt ir.DataType) (driver.Function, error) {
	k, err := loadKernel(ctx, dt, moduleResident)
	return k.resident, err
}

func loadKernel(ctx driver.Context, dt ir.DataType, kind moduleKind) (kernels, error) {
	modMu.Lock()
	defer modMu.Unlock()
	key := moduleKey{ctx, dt, kind}
	if m, ok := modules[key]; ok {
		return m.k, nil
	}
	ptx, err := modulePTX(kind, dt)
	if err != nil {
		return kernels{}, err
	}
	mod, err := driver.LoadModule(ptx)
	if err != nil {
		return kernels{}, fmt.Errorf("cuda: load executor kernel (%v): %w", dt, err)
	}
	var k kernels
	entries := map[string]*driver.Function{KernelName: &k.exec, UnitsKernelName: &k.units}
	if kind == moduleResident {
		entries = map[string]*driver.Function{ResidentKernelName: &k.resident}
	}
	for name, fn := range entries {
		if *fn, err = mod.Function(name); err != nil {
			mod.Unload()
			return kernels{}, err
		}
	}
	if dt == ir.Uint8 && kind == moduleExec {
		if k.p2p, err = mod.Function(P2PKernelName); err != nil {
			mod.Unload()
			return kernels{}, err
		}
		_, err := mod.Function(P2PBasesName)
		k.p2pBases = err == nil
	}
	if fn, err := mod.Function(ClockKernelName); err == nil {
		k.clock = fn
	}
	modules[key] = &module{mod: mod, k: k}
	return k, nil
}
