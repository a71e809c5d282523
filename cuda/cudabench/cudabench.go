// Package cudabench holds measurement helpers for the CUDA backend's
// benchmarks (cuda/driver's BenchmarkHostPaths and BenchmarkAfterLaunch,
// cuda's BenchmarkCallHost): the cost of a cgo crossing, of a clock read in
// C, and C code that reads other memory. It needs no driver and no GPU. No
// product package imports it (internal/layering checks that).
package cudabench

/*
#cgo nocallback cb_nop
#cgo nocallback cb_nop_ptr
#cgo noescape cb_nop_ptr
#cgo nocallback cb_touch
#cgo nocallback cb_clock_cost
#include <stddef.h>
#include <stdint.h>
#include <time.h>

static void cb_nop(void) {}
static void cb_nop_ptr(void* p) { (void)p; }
// cb_touch reads one byte of every 64-byte line of [p, p+n).
static uint64_t cb_touch(uintptr_t p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; i += 64) s += *(volatile uint8_t*)(p + i);
  return s;
}
static int64_t cb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
// cb_clock_cost is the mean cost of one CLOCK_MONOTONIC read over n reads, in ns.
static double cb_clock_cost(int n) {
  int64_t t0 = cb_now();
  for (int i = 0; i < n; i++) cb_now();
  return (double)(cb_now() - t0) / (n + 1);
}
*/
import "C"

import (
	"time"
	"unsafe"
)

// Nop is one call from Go into an empty C function and back.
func Nop() { C.cb_nop() }

// CrossingCost is the mean cost of one call from Go into an empty C
// function and back (the cgo crossing every launch makes once), measured
// over n calls (at least 1) on the calling goroutine.
func CrossingCost(n int) time.Duration {
	n = max(n, 1)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		C.cb_nop()
	}
	return time.Since(t0) / time.Duration(n)
}

// CrossingCostPointer is CrossingCost for an empty C function given p, a
// pointer to Go memory: the call then pays cgo's pointer check, as every
// launch does for its argument.
func CrossingCostPointer(n int, p unsafe.Pointer) time.Duration {
	n = max(n, 1)
	t0 := time.Now()
	for i := 0; i < n; i++ {
		C.cb_nop_ptr(p)
	}
	return time.Since(t0) / time.Duration(n)
}

// ClockCost is the mean cost of one read of CLOCK_MONOTONIC from C (what
// the launch-time accounting, cuda.TimeLaunches, reads twice per launch),
// measured over n reads (at least 1).
func ClockCost(n int) time.Duration {
	return time.Duration(float64(C.cb_clock_cost(C.int(max(n, 1)))) + 0.5)
}

// Touch reads one byte of every 64-byte line of the n bytes at p, from C:
// memory traffic other than the caller's own. p must stay valid until it
// returns.
func Touch(p unsafe.Pointer, n int) { C.cb_touch(C.uintptr_t(uintptr(p)), C.size_t(n)) }
