package cli

import "fmt"

// MemoryLimit is the default bound, in bytes, on what a command may
// allocate: def (why: defWhy), lowered to half the process's address-space
// limit (ulimit -v; the garbage collector needs room beside the live
// buffers) and to three quarters of physical memory where they are known.
// why names the bound that applies, for the error message. A Go program
// cannot recover from running out of memory (it dies with a fatal error,
// or the kernel kills it), so commands check their needs against it before
// they allocate (theseusc sim, theseus-bench).
func MemoryLimit(def int64, defWhy string) (limit int64, why string) {
	limit, why = def, defWhy
	if as := AddressSpaceLimit(); as > 0 && as/2 < limit {
		limit, why = as/2, fmt.Sprintf("half the address-space limit of %d bytes (ulimit -v)", as)
	}
	if ram := PhysicalMemory(); ram > 0 && ram/4*3 < limit {
		limit, why = ram/4*3, fmt.Sprintf("three quarters of the %d bytes of physical memory", ram)
	}
	return limit, why
}
