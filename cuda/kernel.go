// Package cuda is the CUDA backend of Theseus: the generic executor kernel
// (kernel/theseus.cu, compiled to PTX by `go generate` with clang-14 and
// embedded here), its launch arguments (kernel/launch.h), and the host code
// that allocates, exports and imports memory and launches a rank's op table.
// It needs no CUDA toolkit to build: the driver is loaded at run time
// (package cuda/driver).
package cuda

//go:generate ./kernel/build.sh

import (
	_ "embed"
	"fmt"
	"sync"

	"github.com/theseus-ccl/theseus/cuda/driver"
)

// PTX is the generic executor kernel, sm_80 PTX (JIT-compiled by the driver
// for the device it runs on).
//
//go:embed kernel/theseus.ptx
var PTX []byte

// KernelName is the kernel's entry point.
const KernelName = "theseus_exec"

type module struct {
	mod driver.Module
	fn  driver.Function
}

var (
	modMu   sync.Mutex
	modules = map[driver.Context]*module{}
)

// kernel returns the executor kernel loaded in the calling thread's current
// context (loading and JIT-compiling it on first use per context).
func kernel(ctx driver.Context) (driver.Function, error) {
	modMu.Lock()
	defer modMu.Unlock()
	if m, ok := modules[ctx]; ok {
		return m.fn, nil
	}
	mod, err := driver.LoadModule(PTX)
	if err != nil {
		return 0, fmt.Errorf("cuda: load executor kernel: %w", err)
	}
	fn, err := mod.Function(KernelName)
	if err != nil {
		mod.Unload()
		return 0, err
	}
	modules[ctx] = &module{mod: mod, fn: fn}
	return fn, nil
}
