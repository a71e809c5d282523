/* resilience.c — issue 26 through the NCCL ABI: a communicator that loses
 * a rank and shrinks it away, native buffer registration, and buffers that
 * change on one rank only. One process per rank, on the host backend or,
 * with RES_CUDA=1, on the CUDA backend (device 0's primary context, a
 * stream of the program's own; ncclabi/gpu/run_resilience.sh).
 *
 *   resilience MODE ARG RANK NRANKS [IDHEX]   rank 0 makes the id and prints "ID <hex>"
 *
 * MODE shrink, ARG KIND:VICTIM (KIND kill or exclude):
 *   every rank runs the suite (every collective, checked element by
 *   element) on the NRANKS-rank communicator, then a barrier. kill: the
 *   victim enqueues a large allreduce and SIGKILLs itself; the survivors
 *   enqueue the same call, wait until it fails (an error within
 *   THESEUS_TIMEOUT: theseusStreamSynchronize or ncclCommGetAsyncError),
 *   shrink the victim away with NCCL_SHRINK_ABORT, run the suite on the
 *   new communicator, then ncclCommAbort the parent and destroy the new
 *   one. exclude: the victim stays alive, does not call ncclCommShrink,
 *   and destroys the parent after a while; the survivors shrink with
 *   NCCL_SHRINK_DEFAULT, run the suite, destroy both. Output: "SHRINK rank
 *   R: ..." lines, "PASS shrink rank R" (survivors) or "PASS victim rank R".
 * MODE register, ARG -:
 *   ncclCommRegister on an ncclMemAlloc buffer, allreduces reaching it,
 *   ncclCommDeregister, ncclMemFree, a new ncclMemAlloc of the same size
 *   (the same address, usually: "REGISTER rank R same address S"),
 *   registered again, allreduces on it with every result checked; then
 *   the same with buffers that are never registered. "PASS register rank R".
 * MODE pairing, ARG COUNT:
 *   Known Issue 3 turned around: rank 0 calls ncclAllReduce on the same two
 *   buffers every time, while every other rank moves between two buffer
 *   pairs from call to call (and rank 1 to fresh allocations now and then),
 *   COUNT float32 elements, in and out of place; every result checked.
 *   "PASS pairing rank R".
 * Every check prints "FAIL ..." when it fails; the exit status is 0 only
 * when every check passed. */
#include "nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_n, g_fail;

#include "ok.h"
#include "pair.h"
#include "cudadl.h"

static cudaStream_t g_stream;
static int g_cuda;
static int (*cuMemcpyHtoD_)(unsigned long long, const void*, size_t);
static int (*cuMemcpyDtoH_)(void*, unsigned long long, size_t);

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- device memory ------------------------------------------------------- */

static void to_dev(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (g_cuda)
    cudadl_check("cuMemcpyHtoD", cuMemcpyHtoD_((unsigned long long)(uintptr_t)dst, src, n));
  else
    memcpy(dst, src, n);
}

static void from_dev(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (g_cuda)
    cudadl_check("cuMemcpyDtoH", cuMemcpyDtoH_(dst, (unsigned long long)(uintptr_t)src, n));
  else
    memcpy(dst, src, n);
}

#define BIG (1u << 20)                    /* float32 elements of the large call */
#define BUF_BYTES ((size_t)4 * BIG * 4)   /* each device buffer */
static float *A, *B;                      /* device buffers (ncclMemAlloc) */
static float *H, *G;                      /* host: what goes in, what came back */

static void sync_comm(ncclComm_t c) { OK(theseusStreamSynchronize(c, g_stream)); }

/* up4 rounds a float count up to 16 bytes: a receive buffer this far past
 * a send buffer is congruent with it modulo 16, as schedule-executed
 * collectives require. */
static size_t up4(size_t n) { return (n + 3) & ~(size_t)3; }

/* ---- the suite -------------------------------------------------------------- */

/* Element i of rank r's input: small integers, exact as float32 sums of up
 * to 8 ranks in any order. */
static float val(int r, size_t i) { return (float)((r * 7 + (int)(i % 1009)) % 13); }

static long g_checked, g_wrong;

/* check compares count floats of the device buffer p with want(i). */
#define CHECKV(what, p, count, want)                                                           \
  do {                                                                                         \
    size_t n_ = (count);                                                                       \
    from_dev(G, (p), n_ * sizeof(float));                                                      \
    long w_ = 0;                                                                               \
    size_t first_ = 0;                                                                         \
    for (size_t i = 0; i < n_; i++) {                                                          \
      float e_ = (want);                                                                       \
      if (G[i] != e_) {                                                                        \
        if (w_ == 0) first_ = i;                                                               \
        w_++;                                                                                  \
      }                                                                                        \
    }                                                                                          \
    g_checked += (long)n_;                                                                     \
    g_wrong += w_;                                                                             \
    if (w_) {                                                                                  \
      size_t i = first_;                                                                       \
      CHECK(0, "%s: %ld of %zu wrong, first [%zu] = %g, want %g", what, w_, n_, i, G[i], (double)(want)); \
    }                                                                                          \
  } while (0)

static void fill(float* dev, size_t count, int r, size_t first) {
  for (size_t i = 0; i < count; i++) H[i] = val(r, first + i);
  to_dev(dev, H, count * sizeof(float));
}

static float sum_at(int n, size_t i) {
  float s = 0;
  for (int r = 0; r < n; r++) s += val(r, i);
  return s;
}

/* suite runs every collective on c (rank `me` of n) with every result
 * checked: counts 1, 7, 4099 (a schedule reaching the peers' buffers
 * serves the middle sizes) and one large, in and out of place. */
static void suite(ncclComm_t c, int me, int n, const char* tag) {
  char what[128];
  size_t counts[] = {1, 7, 4099, 65537};
  for (int k = 0; k < 4; k++) {
    size_t cnt = counts[k];
    for (int inplace = 0; inplace < 2; inplace++) {
      float* out = inplace ? A : B;
      snprintf(what, sizeof what, "%s allreduce count %zu%s", tag, cnt, inplace ? " in place" : "");
      fill(A, cnt, me, 0);
      OK(ncclAllReduce(A, out, cnt, ncclFloat32, ncclSum, c, g_stream));
      sync_comm(c);
      CHECKV(what, out, cnt, sum_at(n, i));
    }
    snprintf(what, sizeof what, "%s allgather count %zu", tag, cnt);
    fill(A, cnt, me, 0);
    OK(ncclAllGather(A, B, cnt, ncclFloat32, c, g_stream));
    sync_comm(c);
    CHECKV(what, B, n * cnt, val((int)(i / cnt), i % cnt));
    snprintf(what, sizeof what, "%s reducescatter count %zu", tag, cnt);
    fill(A, n * cnt, me, 0);
    OK(ncclReduceScatter(A, B, cnt, ncclFloat32, ncclSum, c, g_stream));
    sync_comm(c);
    CHECKV(what, B, cnt, sum_at(n, me * cnt + i));
    int root = (int)(k % n);
    snprintf(what, sizeof what, "%s broadcast count %zu root %d", tag, cnt, root);
    fill(A, cnt, me == root ? root + 20 : 99, 0);
    OK(ncclBroadcast(A, B, cnt, ncclFloat32, root, c, g_stream));
    sync_comm(c);
    CHECKV(what, B, cnt, val(root + 20, i));
    snprintf(what, sizeof what, "%s reduce count %zu root %d", tag, cnt, root);
    fill(A, cnt, me, 0);
    OK(ncclReduce(A, B, cnt, ncclFloat32, ncclSum, root, c, g_stream));
    sync_comm(c);
    if (me == root) CHECKV(what, B, cnt, sum_at(n, i));
    if (cnt * n > BIG) continue;
    snprintf(what, sizeof what, "%s alltoall count %zu", tag, cnt);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < cnt; i++) H[q * cnt + i] = val(me * n + q, i);
    to_dev(A, H, n * cnt * sizeof(float));
    OK(ncclAlltoAll(A, B, cnt, ncclFloat32, c, g_stream));
    sync_comm(c);
    CHECKV(what, B, n * cnt, val((int)(i / cnt) * n + me, i % cnt));
    snprintf(what, sizeof what, "%s gather count %zu root %d", tag, cnt, root);
    fill(A, cnt, me, 0);
    OK(ncclGather(A, me == root ? B : NULL, cnt, ncclFloat32, root, c, g_stream));
    sync_comm(c);
    if (me == root) CHECKV(what, B, n * cnt, val((int)(i / cnt), i % cnt));
    snprintf(what, sizeof what, "%s scatter count %zu root %d", tag, cnt, root);
    if (me == root) {
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < cnt; i++) H[q * cnt + i] = val(q + 50, i);
      to_dev(A, H, n * cnt * sizeof(float));
    }
    OK(ncclScatter(me == root ? A : NULL, B, cnt, ncclFloat32, root, c, g_stream));
    sync_comm(c);
    CHECKV(what, B, cnt, val(me + 50, i));
  }
}

/* ---- shrink ---------------------------------------------------------------- */

static int mode_shrink(const char* arg, ncclComm_t c) {
  int kill = strncmp(arg, "kill:", 5) == 0;
  const char* v = strchr(arg, ':');
  int victim = v ? atoi(v + 1) : g_n - 1;
  const char* t = getenv("THESEUS_TIMEOUT");
  double timeout_ms = t && *t ? atof(t) : 60000;
  suite(c, g_rank, g_n, "before");
  printf("SHRINK rank %d: %d ranks: %ld elements checked, %ld wrong\n", g_rank, g_n, g_checked, g_wrong);
  /* A barrier: every rank is past its checks before the victim goes. */
  fill(A, 1, g_rank, 0);
  OK(ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, c, g_stream));
  sync_comm(c);
  if (g_rank == victim) {
    if (kill) {
      ncclAllReduce(A, B, BIG, ncclFloat32, ncclSum, c, g_stream); /* in flight */
      fflush(stdout);
      raise(SIGKILL);
    }
    /* Alive but excluded: the survivors shrink without it; it then leaves
     * the parent. */
    usleep(500 * 1000);
    OK(ncclCommDestroy(c));
    printf("PASS victim rank %d\n", g_rank);
    return 0;
  }
  int flags = NCCL_SHRINK_DEFAULT;
  if (kill) {
    /* Mid-run: the next collective needs the victim. It must fail, within
     * the timeout, with an error the survivors see. */
    double t0 = now_ms();
    ncclResult_t r = ncclAllReduce(A, B, BIG, ncclFloat32, ncclSum, c, g_stream);
    if (r == ncclSuccess) r = theseusStreamSynchronize(c, g_stream);
    ncclResult_t as = ncclSuccess;
    while (r == ncclSuccess && as == ncclSuccess && now_ms() - t0 < 2 * timeout_ms) {
      ncclCommGetAsyncError(c, &as);
      usleep(1000);
    }
    if (r == ncclSuccess) r = as;
    double dt = now_ms() - t0;
    printf("SHRINK rank %d: first error %d (%s) after %.1f ms: %s\n", g_rank, (int)r, ncclGetErrorString(r), dt,
           ncclGetLastError(NULL));
    CHECK(r != ncclSuccess, "no error after rank %d died", victim);
    CHECK(dt < timeout_ms, "the error came after %.0f ms, THESEUS_TIMEOUT is %.0f ms", dt, timeout_ms);
    flags = NCCL_SHRINK_ABORT;
  }
  double t0 = now_ms();
  ncclComm_t sub = NULL;
  OK(ncclCommShrink(c, &victim, 1, &sub, NULL, flags));
  double dt = now_ms() - t0;
  int n = 0, me = -1;
  OK(ncclCommCount(sub, &n));
  OK(ncclCommUserRank(sub, &me));
  int want = g_rank > victim ? g_rank - 1 : g_rank;
  CHECK(n == g_n - 1 && me == want, "shrunk communicator: rank %d of %d, want %d of %d", me, n, want, g_n - 1);
  long before = g_wrong;
  g_checked = 0;
  suite(sub, me, n, "after");
  printf("SHRINK rank %d: %s without rank %d in %.1f ms: rank %d of %d: %ld elements checked, %ld wrong\n", g_rank,
         kill ? "NCCL_SHRINK_ABORT" : "NCCL_SHRINK_DEFAULT", victim, dt, me, n, g_checked, g_wrong - before);
  ncclResult_t st;
  OK(ncclCommGetAsyncError(sub, &st));
  CHECK(st == ncclSuccess, "the shrunk communicator's async error %d", (int)st);
  if (kill) {
    /* The parent after an abortive shrink: collectives are refused, and it
     * is aborted (as NCCL's fault-tolerance tests do), never a crash. */
    ncclResult_t cr = ncclAllReduce(A, B, 8, ncclFloat32, ncclSum, c, g_stream);
    CHECK(cr != ncclSuccess, "a collective on the revoked parent succeeded");
    OK(ncclCommAbort(c));
  } else {
    OK(ncclCommDestroy(c));
  }
  OK(ncclCommDestroy(sub));
  if (g_fail == 0) printf("PASS shrink rank %d\n", g_rank);
  return 0;
}

/* ---- registration ---------------------------------------------------------- */

/* The allreduces of one buffer p of SZ bytes, reached by the peers (the
 * middle sizes run a schedule that reads the peers' input buffers). */
#define REG_COUNT 4099
static void reg_round(ncclComm_t c, float* p, const char* tag) {
  char what[96];
  size_t counts[] = {REG_COUNT, 1024, 7};
  for (int k = 0; k < 3; k++) {
    size_t cnt = counts[k];
    snprintf(what, sizeof what, "%s allreduce count %zu", tag, cnt);
    fill(p, cnt, g_rank, 0);
    float* out = p + up4(cnt + 64);
    OK(ncclAllReduce(p, out, cnt, ncclFloat32, ncclSum, c, g_stream));
    sync_comm(c);
    CHECKV(what, out, cnt, sum_at(g_n, i));
    snprintf(what, sizeof what, "%s allreduce count %zu in place", tag, cnt);
    fill(p, cnt, g_rank + 1, 0);
    OK(ncclAllReduce(p, p, cnt, ncclFloat32, ncclSum, c, g_stream));
    sync_comm(c);
    CHECKV(what, p, cnt, sum_at(g_n + 1, i) - val(0, i));
  }
}

static int mode_register(ncclComm_t c) {
  const size_t sz = 64 << 10;
  for (int registered = 1; registered >= 0; registered--) {
    float* p = NULL;
    OK(ncclMemAlloc((void**)&p, sz));
    void* h = NULL;
    if (registered) {
      OK(ncclCommRegister(c, p, sz, &h));
      CHECK(h != NULL, "ncclCommRegister gave a NULL handle");
    }
    reg_round(c, p, registered ? "registered" : "unregistered");
    if (registered) OK(ncclCommDeregister(c, h));
    void* old = p;
    OK(ncclMemFree(p));
    /* Freed: a new allocation of the same size, most often at the same
     * address (the CUDA driver and mmap both reuse it). */
    OK(ncclMemAlloc((void**)&p, sz));
    printf("REGISTER rank %d %s same address %d\n", g_rank, registered ? "registered" : "unregistered", p == old);
    if (registered) OK(ncclCommRegister(c, p, sz, &h));
    reg_round(c, p, registered ? "re-registered" : "reallocated");
    if (registered) OK(ncclCommDeregister(c, h));
    OK(ncclMemFree(p));
  }
  /* Bad calls: a NULL buffer or handle, a handle of nothing. */
  void* h = NULL;
  CHECK(ncclCommRegister(c, NULL, 64, &h) == ncclInvalidArgument, "register NULL buffer");
  CHECK(ncclCommRegister(c, A, 64, NULL) == ncclInvalidArgument, "register with a NULL handle pointer");
  CHECK(ncclCommDeregister(c, (void*)0x1234) == ncclInvalidArgument, "deregister an unknown handle");
  OK(ncclCommDestroy(c));
  printf("REGISTER rank %d: %ld elements checked, %ld wrong\n", g_rank, g_checked, g_wrong);
  if (g_fail == 0) printf("PASS register rank %d\n", g_rank);
  return 0;
}

/* ---- pairing (Known Issue 3) ------------------------------------------------ */

static int mode_pairing(const char* arg, ncclComm_t c) {
  size_t cnt = (size_t)atol(arg);
  if (cnt == 0 || cnt > BIG) cnt = REG_COUNT;
  float* pairs[2][2] = {{A, B}, {A + BIG, B + BIG}};
  float* fresh = NULL;
  char what[96];
  for (int it = 0; it < 40; it++) {
    int inplace = (it / 10) % 2;
    int which = g_rank == 0 ? 0 : (it + g_rank) % 2;
    float *send = pairs[which][0], *recv = pairs[which][1];
    if (g_rank == 1 && it % 7 == 3) {
      /* rank 1 also takes a fresh allocation now and then */
      if (fresh) OK(ncclMemFree(fresh));
      OK(ncclMemAlloc((void**)&fresh, (up4(cnt + 256) + cnt) * sizeof(float)));
      send = fresh;
      recv = fresh + up4(cnt + 256);
    }
    if (inplace) recv = send;
    snprintf(what, sizeof what, "pairing call %d (buffers %d%s)", it, which, inplace ? ", in place" : "");
    fill(send, cnt, g_rank + it, 0);
    OK(ncclAllReduce(send, recv, cnt, ncclFloat32, ncclSum, c, g_stream));
    sync_comm(c);
    float s0 = 0;
    (void)s0;
    CHECKV(what, recv, cnt, sum_at(g_n + it, i) - sum_at(it, i));
  }
  if (fresh) OK(ncclMemFree(fresh));
  OK(ncclCommDestroy(c));
  printf("PAIRING rank %d: %ld elements checked, %ld wrong\n", g_rank, g_checked, g_wrong);
  if (g_fail == 0) printf("PASS pairing rank %d\n", g_rank);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: resilience shrink|register|pairing ARG RANK NRANKS [IDHEX]\n");
    return 102;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  const char* mode = argv[1];
  const char* arg = argv[2];
  g_rank = atoi(argv[3]);
  g_n = atoi(argv[4]);
  g_cuda = getenv("RES_CUDA") && atoi(getenv("RES_CUDA"));
  if (g_cuda) {
    cudadl_setup();
    g_stream = (cudaStream_t)cudadl_stream();
    cuMemcpyHtoD_ = (int (*)(unsigned long long, const void*, size_t))cudadl_sym("cuMemcpyHtoD_v2");
    cuMemcpyDtoH_ = (int (*)(void*, unsigned long long, size_t))cudadl_sym("cuMemcpyDtoH_v2");
  }
  ncclUniqueId id;
  pair_id(argc > 5 ? argv[5] : NULL, &id);
  ncclComm_t c = NULL;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  OK(ncclMemAlloc((void**)&A, BUF_BYTES));
  OK(ncclMemAlloc((void**)&B, BUF_BYTES));
  H = malloc(BUF_BYTES);
  G = malloc(BUF_BYTES);
  int rc = 102;
  if (strcmp(mode, "shrink") == 0)
    rc = mode_shrink(arg, c);
  else if (strcmp(mode, "register") == 0)
    rc = mode_register(c);
  else if (strcmp(mode, "pairing") == 0)
    rc = mode_pairing(arg, c);
  OK(ncclMemFree(A));
  OK(ncclMemFree(B));
  printf("DONE rank %d failures %d\n", g_rank, g_fail);
  return rc ? rc : (g_fail ? 1 : 0);
}
