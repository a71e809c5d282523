/* replay_check.c — the repeats of an NCCL data call launched from C
 * (docs/ncclabi.md, "Launches from C") compute what the calls through Go
 * compute, on the CUDA backend (a GPU test; ncclabi/gpu/run_replay_check.sh
 * runs it as 2 processes on one GPU under MPS).
 *
 *   replay_check RANK NRANKS [IDHEX]   rank 0 makes the id and prints "ID <hex>"
 *
 * Checks, each a sequence of identical calls, most of them launched from C
 * when THESEUS_REPLAY=1 (the script runs it with 1 and with 0):
 *   doubling   in-place float32 sum of 1.0 on every rank, K calls in a row
 *              without a wait: every element must be nranks^K exactly, so a
 *              call lost or launched twice shows;
 *   inputs     out-of-place sum whose input the stream rewrites before every
 *              call (cuMemsetD32Async): each result is copied back and
 *              checked;
 *   cycle      the doubling of four buffers, one call on each in turn (as a
 *              data-parallel job's gradient buckets, or nccl-tests' shifted
 *              buffers): of 256 B to 2 KiB (several entries of one record),
 *              then of 256 B to 4 MiB (several schedules);
 *   streams    the doubling on two streams and two buffers in turn, and
 *              after a grouped call;
 *   polling    the doubling while a second thread polls
 *              ncclCommGetAsyncError.
 * Output: "CHECK <name> ok" or "FAIL ...", then theseusCommStats' native
 * count and "DONE rank R". Exit 0 only when every check passed. */
#include "nccl.h"

#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_n, g_fail;

#include "ok.h"
#include "pair.h"
#include "cudadl.h"

static int (*cuMemsetD32Async_)(unsigned long long, unsigned, size_t, void*);
static int (*cuMemcpyDtoH_)(void*, unsigned long long, size_t);
static int (*cuStreamSynchronize_)(void*);

#define CU(call)                                                         \
  do {                                                                   \
    int r_ = (call);                                                     \
    if (r_ != 0) {                                                       \
      printf("FAIL rank %d line %d: %s = %d\n", g_rank, __LINE__, #call, r_); \
      exit(100);                                                         \
    }                                                                    \
  } while (0)

/* cuda_setup makes device 0 current, binds the driver calls the checks
 * make, and returns two streams of the program's own. */
static void cuda_setup(void** s1, void** s2) {
  cudadl_setup();
  cuMemsetD32Async_ = (int (*)(unsigned long long, unsigned, size_t, void*))cudadl_sym("cuMemsetD32Async");
  cuMemcpyDtoH_ = (int (*)(void*, unsigned long long, size_t))cudadl_sym("cuMemcpyDtoH_v2");
  cuStreamSynchronize_ = (int (*)(void*))cudadl_sym("cuStreamSynchronize");
  *s1 = cudadl_stream();
  *s2 = cudadl_stream();
}

static unsigned bits(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  return u;
}

enum { COUNT = 256 };

/* checkn compares the first count elements of the device buffer p with
 * want. */
static void checkn(const char* what, int step, void* p, size_t count, float want) {
  static float* h;
  static size_t hn;
  if (hn < count) {
    free(h);
    h = malloc(count * sizeof *h);
    hn = count;
  }
  CU(cuMemcpyDtoH_(h, (unsigned long long)(uintptr_t)p, count * sizeof *h));
  for (size_t i = 0; i < count; i++) {
    if (h[i] != want) {
      printf("FAIL rank %d %s step %d: element %zu is %g, want %g\n", g_rank, what, step, i, h[i], want);
      g_fail = 1;
      return;
    }
  }
}

/* check compares every element of the device buffer p with want. */
static void check(const char* what, int step, void* p, float want) {
  float h[COUNT];
  CU(cuMemcpyDtoH_(h, (unsigned long long)(uintptr_t)p, sizeof h));
  for (int i = 0; i < COUNT; i++) {
    if (h[i] != want) {
      printf("FAIL rank %d %s step %d: element %d is %g, want %g\n", g_rank, what, step, i, h[i], want);
      g_fail = 1;
      return;
    }
  }
}

/* doubling runs k in-place sums of 1.0 on s: every element becomes n^k. */
static void doubling(const char* what, ncclComm_t c, float* buf, void* s, int k) {
  CU(cuMemsetD32Async_((unsigned long long)(uintptr_t)buf, bits(1.0f), COUNT, s));
  for (int i = 0; i < k; i++) OK(ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, c, (cudaStream_t)s));
  CU(cuStreamSynchronize_(s));
  check(what, k, buf, powf((float)g_n, (float)k));
}

static volatile int g_stop;
static void* poller(void* arg) {
  ncclComm_t c = (ncclComm_t)arg;
  ncclResult_t st;
  while (!g_stop) {
    if (ncclCommGetAsyncError(c, &st) != ncclSuccess || st != ncclSuccess) {
      printf("FAIL rank %d polling: async error %d\n", g_rank, (int)st);
      g_fail = 1;
      return NULL;
    }
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 3) return 102;
  setvbuf(stdout, NULL, _IOLBF, 0);
  g_rank = atoi(argv[1]);
  g_n = atoi(argv[2]);
  void *s1 = NULL, *s2 = NULL;
  cuda_setup(&s1, &s2);
  ncclUniqueId id;
  pair_id(argc > 3 ? argv[3] : NULL, &id);
  ncclComm_t c;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  float *A, *B, *C;
  OK(ncclMemAlloc((void**)&A, COUNT * 4));
  OK(ncclMemAlloc((void**)&B, COUNT * 4));
  OK(ncclMemAlloc((void**)&C, COUNT * 4));
  int kmax = g_n == 2 ? 120 : 60; /* n^k stays a float32 */

  /* doubling: 20 rounds of k calls, k varying (the budget's epochs fall
   * anywhere in a round). */
  for (int r = 0; r < 20; r++) doubling("doubling", c, A, s1, kmax - (r * 7) % 40);
  printf("CHECK doubling %s\n", g_fail ? "FAILED" : "ok");

  /* inputs: the stream rewrites the input before every call. */
  int f0 = g_fail;
  for (int i = 0; i < 400; i++) {
    float v = (float)(i % 97 + 1);
    CU(cuMemsetD32Async_((unsigned long long)(uintptr_t)B, bits(v * (float)(g_rank + 1)), COUNT, s1));
    OK(ncclAllReduce(B, C, COUNT, ncclFloat32, ncclSum, c, (cudaStream_t)s1));
    if (i % 5 == 4 || i == 399) {
      CU(cuStreamSynchronize_(s1));
      check("inputs", i, C, v * (float)(g_n * (g_n + 1) / 2));
    }
  }
  printf("CHECK inputs %s\n", g_fail != f0 ? "FAILED" : "ok");

  /* cycle: four buffers of different sizes, one call on each in turn. */
  f0 = g_fail;
  for (int set = 0; set < 2; set++) {
    /* Set 0: four small buffers (one schedule: all entries of one record);
     * set 1: 256 B to 4 MiB (several schedules: the switches go through Go). */
    static const size_t sets[2][4] = {{64, 128, 256, 512}, {64, 1024, 65536, 1 << 20}};
    const size_t* counts = sets[set];
    float* bufs[4];
    for (int b = 0; b < 4; b++) OK(ncclMemAlloc((void**)&bufs[b], counts[b] * 4));
    for (int r = 0; r < 6; r++) {
      int k = kmax / 2 - r * 3;
      for (int b = 0; b < 4; b++)
        CU(cuMemsetD32Async_((unsigned long long)(uintptr_t)bufs[b], bits(1.0f), counts[b], s1));
      for (int i = 0; i < k; i++)
        for (int b = 0; b < 4; b++)
          OK(ncclAllReduce(bufs[b], bufs[b], counts[b], ncclFloat32, ncclSum, c, (cudaStream_t)s1));
      CU(cuStreamSynchronize_(s1));
      for (int b = 0; b < 4; b++) checkn("cycle", r * 4 + b, bufs[b], counts[b], powf((float)g_n, (float)k));
    }
    for (int b = 0; b < 4; b++) OK(ncclMemFree(bufs[b]));
  }
  printf("CHECK cycle %s\n", g_fail != f0 ? "FAILED" : "ok");

  /* streams: two streams and two buffers in turn, then after a group. */
  f0 = g_fail;
  for (int r = 0; r < 10; r++) {
    doubling("streams/s1", c, A, s1, 30 + r);
    doubling("streams/s2", c, B, s2, 31 + r);
    OK(ncclGroupStart());
    OK(ncclAllReduce(C, C, COUNT, ncclFloat32, ncclSum, c, (cudaStream_t)s1));
    OK(ncclGroupEnd());
    doubling("streams/after-group", c, C, s1, 25 + r);
  }
  printf("CHECK streams %s\n", g_fail != f0 ? "FAILED" : "ok");

  /* polling: another thread polls the async error meanwhile. */
  f0 = g_fail;
  pthread_t t;
  pthread_create(&t, NULL, poller, c);
  for (int r = 0; r < 10; r++) doubling("polling", c, A, s1, kmax - r);
  g_stop = 1;
  pthread_join(t, NULL);
  printf("CHECK polling %s\n", g_fail != f0 ? "FAILED" : "ok");

  uint64_t nat = 0;
  OK(theseusCommStats(c, &nat, NULL, NULL));
  printf("NATIVE rank %d %llu\n", g_rank, (unsigned long long)nat);
  OK(ncclMemFree(A));
  OK(ncclMemFree(B));
  OK(ncclMemFree(C));
  OK(ncclCommDestroy(c));
  printf("DONE rank %d\n", g_rank);
  return g_fail ? 1 : 0;
}
