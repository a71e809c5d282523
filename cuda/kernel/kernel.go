// Package kernel holds the CUDA executor's sources (executor.cuh and the
// headers it includes), the flags clang-14 compiles them with
// (clang.flags, which build.sh reads too), for the tools that compile the
// executor outside build.sh: `theseusc compile --specialize`
// (codegen/specialize) builds a schedule's specialised kernels from
// them. Package cuda embeds the product's PTX (ptx/), built by build.sh.
package kernel

import (
	"embed"
	"strings"
)

// Sources are the executor's sources: executor.cuh, resident.cuh,
// port_exec.cuh, launch.h, optable.h, queue.h and port.h (the port-channel
// FIFO of the proxy, runtime/transport/proxy, whose tests check it).
//
//go:embed executor.cuh resident.cuh port_exec.cuh launch.h optable.h queue.h port.h
var Sources embed.FS

//go:embed clang.flags
var flags string

// ClangFlags are the flags every module of the executor is compiled with
// (clang-14 in CUDA device-only mode, sm_80 PTX; build.sh adds
// -DTHESEUS_DTYPE and -S -o).
func ClangFlags() []string { return strings.Fields(flags) }
