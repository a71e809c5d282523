// Package replaytest is the C side of replay records (runtime/replay) for
// tests without a GPU: th_replay_call from Go (what a C caller does on
// each call), a fake launch function that records each launch's entry,
// counter and fence count instead of launching a kernel, and replay.h's
// field offsets, which TestLayout compares with runtime/replay's mirror of
// the structs.
package replaytest

/*
#cgo CFLAGS: -I${SRCDIR}/..
#include <stddef.h>
#include "replay.h"

static int fake_result;
static uint32_t fake_err;
typedef struct { uintptr_t rec; int32_t entry; int32_t nfence; uint64_t launch; uint64_t tag; } fake_launch_t;
static fake_launch_t fake_launches[1 << 16];
static uint32_t fake_n;

// fake_launch records the launch (the entry, the counter and the fence
// count in its argument, and its first 8 bytes as a tag when the counter
// and the fence count are past them) and returns fake_result.
static int fake_launch(th_replay* r, th_replay_entry* e) {
  if (fake_result != TH_REPLAY_LAUNCHED) return fake_result;
  fake_launch_t l = {(uintptr_t)r, (int32_t)(e - r->entries), 0, 0, 0};
  if (e->arg_bytes >= 8 && e->off_launch >= 8 && e->off_nfence >= 8) memcpy(&l.tag, e->arg, sizeof l.tag);
  memcpy(&l.launch, e->arg + e->off_launch, sizeof l.launch);
  memcpy(&l.nfence, e->arg + e->off_nfence, sizeof l.nfence);
  uint32_t i = __atomic_fetch_add(&fake_n, 1, __ATOMIC_RELAXED);
  if (i < sizeof fake_launches / sizeof fake_launches[0]) fake_launches[i] = l;
  return TH_REPLAY_LAUNCHED;
}
static uintptr_t fake_fn(void) { return (uintptr_t)&fake_launch; }
static void fake_reset(int result) { fake_result = result; fake_n = 0; }
static uint32_t fake_count(void) { return __atomic_load_n(&fake_n, __ATOMIC_RELAXED); }
static fake_launch_t fake_at(uint32_t i) { return fake_launches[i]; }
static uintptr_t fake_err_addr(void) { return (uintptr_t)&fake_err; }
static void fake_set_err(uint32_t v) { __atomic_store_n(&fake_err, v, __ATOMIC_RELEASE); }

static int call(uintptr_t r, const uint64_t* key) { return th_replay_call((th_replay*)r, key); }

static size_t offsets[] = {
  offsetof(th_replay, state), offsetof(th_replay, poison), offsetof(th_replay, left),
  offsetof(th_replay, taken), offsetof(th_replay, fenced), offsetof(th_replay, last_entry),
  offsetof(th_replay, last_sig), offsetof(th_replay, launch_base), offsetof(th_replay, nentries),
  offsetof(th_replay, timed), offsetof(th_replay, launch), offsetof(th_replay, ctx),
  offsetof(th_replay, stream), offsetof(th_replay, err), offsetof(th_replay, t_launches),
  offsetof(th_replay, t_ns), offsetof(th_replay, misses), offsetof(th_replay, declines), offsetof(th_replay, entries),
  sizeof(th_replay),
  offsetof(th_replay_entry, key), offsetof(th_replay_entry, fn), offsetof(th_replay_entry, grid),
  offsetof(th_replay_entry, threads), offsetof(th_replay_entry, shmem), offsetof(th_replay_entry, nfence),
  offsetof(th_replay_entry, sig), offsetof(th_replay_entry, fence_all), offsetof(th_replay_entry, off_launch),
  offsetof(th_replay_entry, off_nfence), offsetof(th_replay_entry, arg_bytes), offsetof(th_replay_entry, arg),
  sizeof(th_replay_entry),
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

// Launch is one recorded launch.
type Launch struct {
	Record uintptr // the record's address
	Entry  int     // the entry launched
	Launch uint64  // its launch counter
	NFence int32   // its fence count (0: not fenced)
	Tag    uint64  // the argument's first 8 bytes (0 when the counter or fence count is there)
}

// LaunchCount is the number of launches since Reset, including those past
// the 65536 that Launches keeps.
func LaunchCount() int { return int(C.fake_count()) }

// Launches returns the recorded launches, in order (the first 65536 since
// Reset; LaunchCount counts them all).
func Launches() []Launch {
	n := uint32(C.fake_count())
	out := make([]Launch, 0, n)
	for i := uint32(0); i < n && i < 1<<16; i++ {
		l := C.fake_at(C.uint32_t(i))
		out = append(out, Launch{Record: uintptr(l.rec), Entry: int(l.entry), Launch: uint64(l.launch), NFence: int32(l.nfence), Tag: uint64(l.tag)})
	}
	return out
}

// LastLaunch is r's last recorded launch (ok false if none).
func LastLaunch(r *replay.Record) (Launch, bool) {
	ls := Launches()
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].Record == r.Addr() {
			return ls[i], true
		}
	}
	return Launch{}, false
}

// Call is th_replay_call(r, k): it reports whether the call was launched.
func Call(r *replay.Record, k replay.Key) bool {
	var ck [replay.KeyWords]C.uint64_t
	for i, w := range k {
		ck[i] = C.uint64_t(w)
	}
	return C.call(C.uintptr_t(r.Addr()), &ck[0]) != 0
}

// Offsets returns replay.h's offsets of struct th_replay's and
// th_replay_entry's fields, in declaration order without the padding, each
// followed by the struct's size.
func Offsets() []uintptr {
	out := make([]uintptr, int(C.offset_count()))
	for i := range out {
		out[i] = uintptr(C.offset_at(C.int(i)))
	}
	return out
}
