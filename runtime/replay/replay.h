/* replay.h — the replay record: a collective call that C code may launch
 * again without entering Go: the C launcher of launch plans (docs/design/cuda.md,
 * "Launches from C").
 *
 * Shared by three parties, each of which includes this file:
 *   - runtime/replay (Go): allocates records (C memory, never freed), arms
 *     and disarms them, and takes the count of the calls made from C;
 *   - a device backend (cuda/driver): fills the launch part and provides
 *     the launch function;
 *   - the caller's C side (ncclabi/abi.c): th_replay_call on each data call.
 *
 * A record holds up to TH_REPLAY_ENTRIES calls (entries) of one
 * communicator on one stream, told apart by their keys, which share the
 * communicator's launch counter, its budget of calls before the selector's
 * next epoch and the fence rule across launches.
 *
 * Protocol. state is 0 (off), 1 (armed) or 2 (busy: one C call is using the
 * record). Only Go arms a record (0 -> 1, after writing every other field);
 * a C call moves it 1 -> 2 -> 1; Go disarms it (1 -> 0), waiting while it is
 * 2. So while a record is armed nothing but th_replay_call writes it, and
 * once Go has disarmed it no C call is using it and none will until Go arms
 * it again. poison may be set at any time, from any thread: every call is
 * then declined until Go arms the record again.
 */
#ifndef THESEUS_REPLAY_H_
#define THESEUS_REPLAY_H_

#include <stdint.h>
#include <string.h>

#define TH_REPLAY_KEY_WORDS 8
#define TH_REPLAY_ARG_BYTES 320
#define TH_REPLAY_ENTRIES 16

enum { TH_REPLAY_OFF = 0, TH_REPLAY_ARMED = 1, TH_REPLAY_BUSY = 2 };

/* What a launch function returns. */
enum {
  TH_REPLAY_LAUNCHED = 0, /* enqueued */
  TH_REPLAY_DECLINED = 1, /* nothing enqueued: the caller's Go path must decide (a capture, another context) */
  TH_REPLAY_FAILED = 2    /* the launch failed, nothing enqueued: the Go path relaunches and reports */
};

/* One call a record repeats: its key and its launch. */
typedef struct {
  uint64_t key[TH_REPLAY_KEY_WORDS]; /* the call, packed by the caller */
  void* fn;                          /* CUfunction */
  uint32_t grid, threads, shmem;
  int32_t nfence;    /* the fence count written when the launch is fenced */
  int32_t sig;       /* the scratch layout's id: a launch whose sig differs from the last launch's is fenced */
  uint32_t fence_all; /* every launch is fenced */
  uint32_t off_launch; /* byte offset in arg of the 64-bit launch counter */
  uint32_t off_nfence; /* byte offset in arg of the 32-bit fence count */
  uint32_t arg_bytes;
  uint32_t pad_;
  /* The kernel's by-value argument (every field but the launch counter
   * and the fence count as the call's last launch had it). */
  uint8_t arg[TH_REPLAY_ARG_BYTES] __attribute__((aligned(16)));
} th_replay_entry;

typedef struct th_replay th_replay;
typedef int (*th_replay_launch_fn)(th_replay* r, th_replay_entry* e);

struct th_replay {
  /* The protocol's words (atomic). */
  uint32_t state;
  uint32_t poison;
  /* left: calls C may still make before Go must see one (the selector's
   * next epoch); taken: calls made from C since Go last took the count,
   * fenced: how many of them were fenced, last_entry: the entry of the
   * last (-1: none). */
  int64_t left;
  int64_t taken;
  int64_t fenced;
  int32_t last_entry;
  /* The scratch layout id of the last launch (-1: none of the entries'). */
  int32_t last_sig;
  /* The launch counter of the last launch when armed: the n-th call made
   * from C launches with launch_base + n. */
  uint64_t launch_base;
  uint32_t nentries;
  uint32_t timed;
  /* What every entry's launch shares, filled by the backend. */
  th_replay_launch_fn launch;
  void* ctx;    /* the context that must be current */
  void* stream; /* CUstream */
  /* The stream's failure record: a nonzero 32-bit code declines. */
  const uint32_t* err;
  /* timed: launches made from C and the ns spent inside cuLaunchKernel for
   * them (cumulative, never reset). */
  int64_t t_launches, t_ns;
  /* Calls the record did not launch although it was armed and accepted
   * (calls left, no poison, no stream failure): misses matched no entry's
   * key, declines were declined by the launch function (another context
   * current, the stream being captured). Cumulative, never reset. */
  int64_t misses, declines;
  uint64_t pad_; /* the entries start on a 16-byte boundary either way */
  th_replay_entry entries[TH_REPLAY_ENTRIES];
};

/* th_replay_call launches the call that key packs from r, when r is armed,
 * not poisoned, has calls left, one of its entries has key and its stream
 * has no recorded failure: with the next launch counter, fenced when the
 * entry's scratch layout differs from the last launch's or the entry
 * fences every launch. It returns 1 when the call was enqueued (the caller
 * reports success), 0 when the caller must take its usual path. */
static inline int th_replay_call(th_replay* r, const uint64_t key[TH_REPLAY_KEY_WORDS]) {
  uint32_t armed = TH_REPLAY_ARMED;
  if (!__atomic_compare_exchange_n(&r->state, &armed, TH_REPLAY_BUSY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
    return 0;
  int ok = 0;
  if (r->left > 0 && __atomic_load_n(&r->poison, __ATOMIC_ACQUIRE) == 0 &&
      __atomic_load_n(r->err, __ATOMIC_ACQUIRE) == 0) {
    uint32_t n = r->nentries < TH_REPLAY_ENTRIES ? r->nentries : TH_REPLAY_ENTRIES;
    uint32_t i = 0;
    for (; i < n; i++) {
      th_replay_entry* e = &r->entries[i];
      if (e->key[1] != key[1] || memcmp(e->key, key, sizeof e->key) != 0) continue;
      int fence = e->sig != r->last_sig || e->fence_all;
      uint64_t launch = r->launch_base + (uint64_t)r->taken + 1;
      int32_t nfence = fence ? e->nfence : 0;
      memcpy(e->arg + e->off_launch, &launch, sizeof launch);
      memcpy(e->arg + e->off_nfence, &nfence, sizeof nfence);
      int res = r->launch(r, e);
      if (res == TH_REPLAY_LAUNCHED) {
        r->taken++;
        r->left--;
        if (fence) r->fenced++;
        r->last_sig = e->sig;
        r->last_entry = (int32_t)i;
        ok = 1;
      } else if (res == TH_REPLAY_DECLINED) {
        r->declines++;
      }
      break;
    }
    if (i == n) r->misses++;
  }
  __atomic_store_n(&r->state, TH_REPLAY_ARMED, __ATOMIC_RELEASE);
  return ok;
}

#endif
