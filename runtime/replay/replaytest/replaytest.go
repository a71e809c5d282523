// Package replaytest is the C side of replay records (runtime/replay) for
// tests without a GPU: th_replay_call from Go (what a C caller does on
// each call), a fake launch function that records launch counters instead
// of launching a kernel, and replay.h's field offsets, which TestLayout
// compares with runtime/replay's mirror of the struct.
package replaytest

/*
#cgo CFLAGS: -I${SRCDIR}/..
#include <stddef.h>
#include "replay.h"

static int fake_result;
static uint32_t fake_err;
static uint64_t fake_launches[1 << 16];
static uint32_t fake_n;
static struct { th_replay* r; uint64_t n; } fake_last[64];

// fake_launch records the launch counter in r's argument (at off_launch)
// and returns fake_result.
static int fake_launch(th_replay* r) {
  if (fake_result != TH_REPLAY_LAUNCHED) return fake_result;
  uint64_t n;
  memcpy(&n, r->arg + r->off_launch, sizeof n);
  uint32_t i = __atomic_fetch_add(&fake_n, 1, __ATOMIC_RELAXED);
  if (i < sizeof fake_launches / sizeof fake_launches[0]) fake_launches[i] = n;
  for (int j = 0; j < 64; j++) {
    th_replay* o = 0;
    if (__atomic_compare_exchange_n(&fake_last[j].r, &o, r, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || o == r) {
      __atomic_store_n(&fake_last[j].n, n, __ATOMIC_RELEASE);
      break;
    }
  }
  return TH_REPLAY_LAUNCHED;
}
static uint64_t fake_last_of(uintptr_t r) {
  for (int j = 0; j < 64; j++)
    if ((uintptr_t)__atomic_load_n(&fake_last[j].r, __ATOMIC_ACQUIRE) == r) return __atomic_load_n(&fake_last[j].n, __ATOMIC_ACQUIRE);
  return 0;
}
static uintptr_t fake_fn(void) { return (uintptr_t)&fake_launch; }
static void fake_reset(int result) { fake_result = result; fake_n = 0; }
static uint32_t fake_count(void) { return __atomic_load_n(&fake_n, __ATOMIC_RELAXED); }
static uint64_t fake_at(uint32_t i) { return fake_launches[i]; }

static uintptr_t fake_err_addr(void) { return (uintptr_t)&fake_err; }
static void fake_set_err(uint32_t v) { __atomic_store_n(&fake_err, v, __ATOMIC_RELEASE); }
static int call(uintptr_t r, const uint64_t* key) { return th_replay_call((th_replay*)r, key); }

static size_t offsets[] = {
  offsetof(th_replay, state), offsetof(th_replay, poison), offsetof(th_replay, key),
  offsetof(th_replay, left), offsetof(th_replay, taken), offsetof(th_replay, launch_base),
  offsetof(th_replay, launch), offsetof(th_replay, ctx), offsetof(th_replay, stream),
  offsetof(th_replay, fn), offsetof(th_replay, grid), offsetof(th_replay, threads),
  offsetof(th_replay, shmem), offsetof(th_replay, timed), offsetof(th_replay, err),
  offsetof(th_replay, off_launch), offsetof(th_replay, arg_bytes), offsetof(th_replay, t_launches),
  offsetof(th_replay, t_ns), offsetof(th_replay, last_result), offsetof(th_replay, arg),
  sizeof(th_replay),
};
static size_t offset_at(int i) { return offsets[i]; }
static int offset_count(void) { return sizeof offsets / sizeof offsets[0]; }
*/
import "C"

import "github.com/theseus-ccl/theseus/runtime/replay"

// Fn is the fake launch function (a th_replay_launch_fn).
func Fn() uintptr { return uintptr(C.fake_fn()) }

// ErrWord is the address of a failure code word in C memory (for
// replay.Launch.Err); SetErr sets it.
func ErrWord() uintptr { return uintptr(C.fake_err_addr()) }

// SetErr sets the word at ErrWord.
func SetErr(v uint32) { C.fake_set_err(C.uint32_t(v)) }

// Reset forgets the recorded launches; later launches return result
// (replay.Launched, Declined or Failed; only Launched ones are recorded).
// Not safe while a fake launch may run.
func Reset(result int) { C.fake_reset(C.int(result)) }

// Launches returns the launch counters of the recorded launches, in order
// (at most 65536).
func Launches() []uint64 {
	n := uint32(C.fake_count())
	out := make([]uint64, 0, n)
	for i := uint32(0); i < n && i < 1<<16; i++ {
		out = append(out, uint64(C.fake_at(C.uint32_t(i))))
	}
	return out
}

// LastLaunch is the launch counter of r's last fake launch (0 if none;
// the first 64 records to launch are tracked, for the life of the
// process).
func LastLaunch(r *replay.Record) uint64 { return uint64(C.fake_last_of(C.uintptr_t(r.Addr()))) }

// Call is th_replay_call(r, k): it reports whether the call was launched.
func Call(r *replay.Record, k replay.Key) bool {
	var ck [replay.KeyWords]C.uint64_t
	for i, w := range k {
		ck[i] = C.uint64_t(w)
	}
	return C.call(C.uintptr_t(r.Addr()), &ck[0]) != 0
}

// Offsets returns replay.h's offsets of struct th_replay's fields, in
// declaration order without the padding, then the struct's size.
func Offsets() []uintptr {
	out := make([]uintptr, int(C.offset_count()))
	for i := range out {
		out[i] = uintptr(C.offset_at(C.int(i)))
	}
	return out
}
