// The persistent executor's kernel (THESEUS_EXECUTOR=persistent;
// docs/design/cuda.md, "The persistent executor"): theseus_resident stays
// resident on its grid of THESEUS_PERSISTENT_BLOCKS threadblocks and runs
// one communicator rank's launches as items of a queue in host memory
// (queue.h; the protocol is runtime/resident's), each through exec_block,
// the body of theseus_exec. Included by executor.cuh in a module built
// with THESEUS_RESIDENT (build.sh: ptx/theseus_resident_<datatype>.ptx),
// which has no other entry.
//
// Block 0's thread 0 takes the items in sequence order: it waits for item
// seq's descriptor in its slot (host memory, ahead of the release), then
// for the caller's stream to release it (cuStreamWriteValue32 of seq into
// the slot's doorbell word, device memory), and hands it to the other
// blocks through the dispatch word (this kernel's number, seq and the
// item's grid in one 64-bit word, so that a block that was not in the last
// items never takes a stale descriptor). Each block of the item's grid
// runs exec_block on the prepared launch with the descriptor's launch
// counter and fence and the queue's failure record; the last one to finish
// stores seq into the done word, which the stream waits on
// (cuStreamWaitValue32), and into the status line's completed. With no
// item, block 0 exits after the idle time or when asked (the handshake of
// runtime/resident), and on the abort word.

#include "queue.h"

DEV u32 ld_acquire_sys_u32(const u32* p) {
  u32 v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
DEV void st_release_sys_u32(u32* p, u32 v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
DEV u64 ld_acquire_gpu_u64(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
DEV u64 ld_volatile_u64(const u64* p) { return *(const volatile u64*)p; }
DEV void pause_ns(u32 ns) { asm volatile("nanosleep.u32 %0;" ::"r"(ns)); }
static_assert(sizeof(theseus_launch) % 8 == 0, "the prepared launch is copied in whole 8-byte words");

// The dispatch word: kernel number (16 bits), item seq (32), grid (16;
// 0: exit).
DEV u64 disp_word(u32 instance, u32 seq, u32 grid) {
  return (u64)(instance & 0xffffu) << 48 | (u64)seq << 16 | (grid & 0xffffu);
}

// The item a block runs: the prepared launch with the descriptor's fields
// (counter, fence, input and output bases) and the queue's failure record.
__shared__ theseus_launch s_item;
__shared__ u64 s_disp;

// The dispatch area (theseus_resident_args.dispatch): the item word, the count
// of the item's blocks finished, then the item's descriptor for the other
// blocks.
enum { D_WORD = 0, D_FIN = 1, D_ARG = 2, D_LAUNCH = 3, D_NFENCE = 4, D_IN = 5, D_OUT = 6 };

// resident_abandon (block 0, thread 0) is the exit on the abort word:
// issued items that will not run fail (the first failure of the queue),
// the done word goes past every item the host may have issued without a
// later completion, so that their streams' waits return
// (runtime/resident.Consumer.Abandon).
NOINLINE void resident_abandon(const theseus_resident_args& R, theseus_qstatus* st, u32 next) {
  if (ld_volatile_u32(&st->issued) != next - 1 && atom_cas_u32((u32*)R.claim, 0u, THESEUS_ERR_ABORTED) == 0u) {
    theseus_error* e = (theseus_error*)R.error;
    e->what = 0;
    e->rank = -1;
    e->tb = -1;
    e->step = -1;
    e->slice = -1;
    e->channel = -1;
    e->launch = 0;
    e->have = next;
    e->want = 0;
    fence_sys();
    st_volatile_u32((volatile u32*)&e->code, THESEUS_ERR_ABORTED);
  }
  st_release_sys_u32((u32*)R.done, next - 1 + R.nslots);
  st_volatile_u32((volatile u32*)&st->aborted, 1u);
  fence_sys();
  st_volatile_u32((volatile u32*)&st->state, THESEUS_Q_STOPPED);
  fence_sys();
}

// resident_take (block 0, thread 0) waits for item seq and returns its
// dispatch word, with its descriptor in the dispatch area; or an exit word
// (idle, asked to exit, or aborted).
NOINLINE u64 resident_take(const theseus_resident_args& R, theseus_qstatus* st, u32 seq) {
  const theseus_qslot* sl = (const theseus_qslot*)(R.status + sizeof(theseus_qstatus)) + (seq & (R.nslots - 1));
  const volatile u32* abort = (const volatile u32*)R.abort_word;
  u64* d = (u64*)R.dispatch;
  u64 t0 = gtime();
  // The descriptor: written by the host before it enqueues the release,
  // so it is here ahead of the release (each poll of host memory is a
  // round trip over the bus, which paces this loop; the words that end it
  // are read every 16th).
  for (u32 n = 1;; n++) {
    if (ld_acquire_sys_u32(&sl->seq) == seq) break;
    if ((n & 15) != 0) continue;  // every 16th poll: abort, exit, idle time
    if (*abort != 0) {
      resident_abandon(R, st, seq);
      return disp_word(R.instance, seq, 0);
    }
    const u64 now = gtime();
    if (ld_volatile_u32(&st->exit) != 0 || (R.idle_ns != 0 && now - t0 > R.idle_ns)) {
      // The handshake: state Exiting, fence, issued; exit if nothing came.
      st_volatile_u32((volatile u32*)&st->state, THESEUS_Q_EXITING);
      fence_sys();
      if (ld_volatile_u32(&st->issued) == seq - 1) {
        st_volatile_u32((volatile u32*)&st->state, THESEUS_Q_STOPPED);
        fence_sys();
        return disp_word(R.instance, seq, 0);
      }
      st_volatile_u32((volatile u32*)&st->state, THESEUS_Q_RUNNING);
      t0 = now;
    }
  }
  const u64 arg = ld_volatile_u64(&sl->arg), launch = ld_volatile_u64(&sl->launch);
  const u64 in = ld_volatile_u64(&sl->in), out = ld_volatile_u64(&sl->out);
  const u32 nfence = ld_volatile_u32((const volatile u32*)&sl->nfence), grid = ld_volatile_u32(&sl->grid);
  // The release: the caller's stream reached the item.
  const u32* bell = (const u32*)R.doorbell + (seq & (R.nslots - 1));
  for (u32 n = 1; (int)(ld_acquire_sys_u32(bell) - seq) < 0; n++) {
    if ((n & 1023) == 0 && *abort != 0) {
      resident_abandon(R, st, seq);
      return disp_word(R.instance, seq, 0);
    }
  }
  // Released, so every block of the last item has finished with the
  // dispatch area (its stream waited for the done word the last of them
  // stored): it takes this item's descriptor now.
  d[D_ARG] = arg;
  d[D_LAUNCH] = launch;
  d[D_NFENCE] = nfence;
  d[D_IN] = in;
  d[D_OUT] = out;
  d[D_FIN] = 0;
  return disp_word(R.instance, seq, grid);
}

extern "C" __global__ void __launch_bounds__(MAX_THREADS) theseus_resident(theseus_resident_args R) {
  theseus_qstatus* st = (theseus_qstatus*)R.status;
  u64* d = (u64*)R.dispatch;
  if (tid() == 0) {
    u32 sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    if (bid() < THESEUS_Q_MAX_BLOCKS) st_volatile_u32((volatile u32*)&st->smid[bid()], sm + 1);
    if (bid() == 0) {
      // Every block has seen item first - 1: the first word is no item.
      d[D_FIN] = 0;
      st_release_gpu(&d[D_WORD], disp_word(R.instance, R.first - 1, 1));
    }
  }
  u32 seen = R.first - 1;  // the last item this block has seen
  for (;;) {
    bar();  // every thread has read the last s_disp
    if (tid() == 0) {
      u64 w;
      if (bid() == 0) {
        w = resident_take(R, st, seen + 1);
        st_release_gpu(&d[D_WORD], w);
      } else {
        // Follow block 0's word: this kernel's, and an item not yet seen.
        for (u32 n = 1;; n++) {
          w = ld_acquire_gpu_u64(&d[D_WORD]);
          if ((u32)(w >> 48) == (R.instance & 0xffffu) && ((w & 0xffffu) == 0 || (u32)(w >> 16) != seen)) break;
          if (n > 1024) pause_ns(64);
        }
      }
      s_disp = w;
    }
    bar();
    const u64 w = s_disp;
    const u32 grid = (u32)(w & 0xffffu);
    if (grid == 0) return;  // exit (block 0 has left the queue Stopped)
    seen = (u32)(w >> 16);
    if (bid() >= grid) continue;  // not in this item
    const theseus_launch* arg = (const theseus_launch*)d[D_ARG];
    // The prepared launch into shared memory, a word per thread.
    for (u32 i = tid(); i < sizeof(theseus_launch) / 8; i += nthreads()) ((u64*)&s_item)[i] = ((const u64*)arg)[i];
    bar();
    if (tid() == 0) {
      s_item.launch = d[D_LAUNCH];
      s_item.nfence = (i32)(u32)d[D_NFENCE];
      s_item.error = R.error;
      s_item.claim = R.claim;
      s_item.buf[THESEUS_BUF_INPUT] = d[D_IN];
      s_item.buf[THESEUS_BUF_OUTPUT] = d[D_OUT];
    }
    bar();
    // After a failure the queue's later items are skipped, as a failed
    // stream skips its later launches.
    if (ld_volatile_u32((const volatile u32*)R.claim) == 0) exec_block<-1>(s_item);
    bar();
    if (tid() == 0) {
      fence_sys();
      if (atom_add_gpu(&d[D_FIN], 1) + 1 == grid) {
        st_release_sys_u32((u32*)R.done, seen);
        st_volatile_u32((volatile u32*)&st->completed, seen);
        fence_sys();
      }
    }
  }
}
