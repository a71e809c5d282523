/* callbench.c — host cost of a data call through libtheseus_nccl.so, from C
 * (a measurement, not a test). Built and run by ncclabi/capitest's
 * BenchmarkCAPICall against ncclabi/include/nccl.h only, on the host
 * backend (THESEUS_BACKEND=host).
 *
 *   callbench RANK NRANKS [IDHEX]   one rank; rank 0 makes the id and prints "ID <hex>"
 *
 * Environment: CALLBENCH_ITERS (calls per measurement, default 5000),
 * CALLBENCH_BYTES (bytes per rank's message, default 1024),
 * CALLBENCH_COLLS (a subset of "allreduce,broadcast,allgather"),
 * CALLBENCH_VARIANTS (a subset of "same,cycle,shift").
 *
 * For each collective and variant the rank enqueues CALLBENCH_ITERS calls in
 * batches of 256 (below the host stream's queue depth), timing each batch
 * (wall clock and the calling thread's CPU time), and waits for its stream
 * after each batch outside the timed part. "same" passes the same buffers
 * every call; "cycle" and "shift" move them by one message per call within
 * one allocation, as nccl-tests' startColl does (totalnbytes * (iter %
 * steps), steps = maxbytes / totalnbytes): "cycle" over 8 positions (4 KiB
 * messages of a sweep to 32 KiB), each found again in the executor's L3;
 * "shift" over more positions than the L3 keeps (a sweep to 8 GiB), so every
 * call sets up its launch state again. Output, one line per measurement:
 *
 *   RESULT <coll> <variant> calls <n> wall_ns <per call> cpu_ns <per call>
 *
 * plus two reference lines: ncclGetVersion (C only) and
 * ncclCommGetAsyncError (one crossing into Go).
 *
 * CALLBENCH_CUDA=1 runs on the CUDA backend (on a GPU machine; 2 processes
 * on one GPU need MPS and THESEUS_ALLOW_SHARED_DEVICE=1): the program makes
 * device 0's primary context current through libcuda.so.1 (dlopen, as a
 * CUDA client would through cudaSetDevice), calls on a non-blocking stream
 * of its own, and with THESEUS_TIME_LAUNCHES=1 also prints, per
 * measurement, the time the library spent inside cuLaunchKernel per call
 * (theseusCommLaunchTime) and the host time per call without it:
 *
 *   RESULT <coll> <variant> calls <n> wall_ns <w> cpu_ns <c> launch_ns <l> host_ns <w - l> native <n>
 */
#include "nccl.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BATCH 256
#ifndef STEPS
#define STEPS 8192 /* > the executor's maxL3 (4096) */
#endif

static int g_rank;

#include "ok.h"
#include "pair.h"
#include "cudadl.h"

static double clk(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static long envl(const char* k, long def) {
  const char* v = getenv(k);
  return v && *v ? atol(v) : def;
}

static int listed(const char* k, const char* name) {
  const char* v = getenv(k);
  return !v || !*v || strstr(v, name) != NULL;
}

enum { ALLREDUCE, BROADCAST, ALLGATHER };

static cudaStream_t g_stream; /* NULL on the host backend */

static ncclResult_t call(int coll, const char* s, char* d, size_t count, ncclComm_t c) {
  switch (coll) {
    case ALLREDUCE:
      return ncclAllReduce(s, d, count, ncclFloat32, ncclSum, c, g_stream);
    case BROADCAST:
      return ncclBroadcast(s, d, count, ncclFloat32, 0, c, g_stream);
    default:
      return ncclAllGather(s, d, count, ncclFloat32, c, g_stream);
  }
}

int main(int argc, char** argv) {
  if (argc < 3) return 102;
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_rank = atoi(argv[1]);
  int n = atoi(argv[2]);
  long iters = envl("CALLBENCH_ITERS", 5000);
  size_t bytes = (size_t)envl("CALLBENCH_BYTES", 1024);
  ncclUniqueId id;
  pair_id(argc > 3 ? argv[3] : NULL, &id);
  int cuda = envl("CALLBENCH_CUDA", 0) != 0;
  if (cuda) { /* device 0 current, and a stream of the program's own */
    cudadl_setup();
    g_stream = (cudaStream_t)cudadl_stream();
  }
  ncclComm_t c;
  OK(ncclCommInitRank(&c, n, id, g_rank));
  size_t total = bytes * (size_t)n; /* the largest buffer: allgather's receive */
  char *A, *B;
  OK(ncclMemAlloc((void**)&A, total * STEPS));
  OK(ncclMemAlloc((void**)&B, total * STEPS));
  if (!cuda) memset(A, 1, total * STEPS); /* device memory on cuda: left as allocated */

  static const char* const names[] = {"allreduce", "broadcast", "allgather"};
  long pos = 0; /* the shift position, continued across measurements */
  for (int coll = ALLREDUCE; coll <= ALLGATHER; coll++) {
    if (!listed("CALLBENCH_COLLS", names[coll])) continue;
    size_t msg = coll == ALLGATHER ? bytes * (size_t)n : bytes; /* max(send, recv) */
    static const char* const variants[] = {"same", "cycle", "shift"};
    static const long steps[] = {1, 8, STEPS};
    for (int v = 0; v < 3; v++) {
      if (!listed("CALLBENCH_VARIANTS", variants[v])) continue;
      long shift = v > 0, nsteps = steps[v];
      /* Warm up: the schedule's materialisation, the selector's epochs. */
      for (int i = 0; i < 64; i++, pos += shift) {
        size_t off = shift ? msg * (size_t)(pos % nsteps) : 0;
        OK(call(coll, A + off, B + off, bytes / 4, c));
      }
      OK(theseusStreamSynchronize(c, g_stream));
      uint64_t l0 = 0, ln0 = 0, l1 = 0, ln1 = 0, nat = 0;
      OK(theseusCommLaunchTime(c, &l0, &ln0));
      double wall = 0, cpu = 0;
      for (long done = 0; done < iters;) {
        long k = iters - done < BATCH ? iters - done : BATCH;
        double w0 = clk(CLOCK_MONOTONIC), c0 = clk(CLOCK_THREAD_CPUTIME_ID);
        for (long i = 0; i < k; i++, pos += shift) {
          size_t off = shift ? msg * (size_t)(pos % nsteps) : 0;
          ncclResult_t r = call(coll, A + off, B + off, bytes / 4, c);
          if (r != ncclSuccess) OK(r);
        }
        wall += clk(CLOCK_MONOTONIC) - w0;
        cpu += clk(CLOCK_THREAD_CPUTIME_ID) - c0;
        OK(theseusStreamSynchronize(c, g_stream));
        done += k;
      }
      OK(theseusCommLaunchTime(c, &l1, &ln1));
      OK(theseusCommStats(c, &nat, NULL, NULL));
      if (cuda) {
        double launch = l1 > l0 ? (double)(ln1 - ln0) / iters : 0;
        printf("RESULT %s %s calls %ld wall_ns %.1f cpu_ns %.1f launch_ns %.1f host_ns %.1f native %llu launches %llu\n",
               names[coll], variants[v], iters, wall / iters, cpu / iters, launch, wall / iters - launch,
               (unsigned long long)nat, (unsigned long long)(l1 - l0));
      } else {
        printf("RESULT %s %s calls %ld wall_ns %.1f cpu_ns %.1f\n", names[coll], variants[v], iters, wall / iters,
               cpu / iters);
      }
    }
  }
  /* References: a call that stays in C, and one that crosses into Go. */
  int v;
  double t0 = clk(CLOCK_MONOTONIC);
  for (long i = 0; i < iters; i++) ncclGetVersion(&v);
  double t1 = clk(CLOCK_MONOTONIC);
  ncclResult_t st;
  for (long i = 0; i < iters; i++) ncclCommGetAsyncError(c, &st);
  double t2 = clk(CLOCK_MONOTONIC);
  printf("REF ncclGetVersion wall_ns %.1f\n", (t1 - t0) / iters);
  printf("REF ncclCommGetAsyncError wall_ns %.1f\n", (t2 - t1) / iters);
  OK(ncclMemFree(A));
  OK(ncclMemFree(B));
  OK(ncclCommDestroy(c));
  printf("DONE rank %d\n", g_rank);
  return 0;
}
