/* nccl_test.c — the C acceptance test of libtheseus_nccl.so, compiled
 * against ncclabi/include/nccl.h only (no CUDA) and run by
 * ncclabi/capi_test.go on the host backend (THESEUS_BACKEND=host).
 *
 *   nccl_test ranks  RANK NRANKS [IDHEX]   one rank of the multi-process suite;
 *                                         rank 0 makes the id and prints "ID <hex>"
 *   nccl_test grouped NRANKS               NRANKS communicators in one process,
 *                                         created in one group from one thread
 *   nccl_test badid  RANK NRANKS [IDHEX]   rank 1 joins with a corrupted id
 *   nccl_test fallback RANK NRANKS [IDHEX] calls served by the fallback NCCL (and
 *                                         point-to-point calls native beside it)
 *   nccl_test mismatch RANK NRANKS [IDHEX] rank 0 calls AllReduce, the others Broadcast
 *   nccl_test abi                          prints ABI numbers ("name value")
 *
 * Every check prints "FAIL ..." on failure; each finished part prints
 * "PASS <part>". The exit status is the number of failures (capped). With
 * NCCL_TEST_FULL=1 the sweeps cover every count and type combination.
 */
#include "nccl.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_rank, g_n, g_fail, g_full;
static cudaStream_t g_stream = NULL;

#include "ok.h"
#include "pair.h"

/* A call that must fail with want and leave a reason in ncclGetLastError. */
#define EXPECT(call, want, what)                                                               \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    const char* e_ = ncclGetLastError(NULL);                                                   \
    CHECK(r_ == (want), "%s: %s = %d, want %d", what, #call, (int)r_, (int)(want));            \
    CHECK(e_ && strlen(e_) > 0, "%s: empty ncclGetLastError", what);                           \
    printf("BAD %s -> %s: %s\n", what, ncclGetErrorString(r_), e_ ? e_ : "");                  \
  } while (0)

static void pass(const char* part) {
  printf("PASS %s rank %d\n", part, g_rank);
  fflush(stdout);
}

static void sync_comm(ncclComm_t c) { OK(theseusStreamSynchronize(c, g_stream)); }

/* ---- element values ------------------------------------------------------- */

static const int dt_size[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
static const char* const dt_name[12] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                        "f16", "f32", "f64", "bf16", "e4m3", "e5m2"};
static const char* const op_name[5] = {"sum", "prod", "max", "min", "avg"};

static uint32_t f32bits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

/* Encodes v, a small value that every type represents exactly (a multiple
 * of 0.25 up to 16), as element i of buf. */
static void put(void* buf, size_t i, int dt, double v) {
  uint32_t b = f32bits((float)v);
  uint32_t s = b >> 31, e = (b >> 23) & 0xff, m = b & 0x7fffff;
  int zero = v == 0;
  switch (dt) {
    case 0: ((int8_t*)buf)[i] = (int8_t)v; break;
    case 1: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case 2: ((int32_t*)buf)[i] = (int32_t)v; break;
    case 3: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case 4: ((int64_t*)buf)[i] = (int64_t)v; break;
    case 5: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case 6: ((uint16_t*)buf)[i] = zero ? 0 : (uint16_t)((s << 15) | ((e - 127 + 15) << 10) | (m >> 13)); break;
    case 7: ((float*)buf)[i] = (float)v; break;
    case 8: ((double*)buf)[i] = v; break;
    case 9: ((uint16_t*)buf)[i] = (uint16_t)(b >> 16); break;
    case 10: ((uint8_t*)buf)[i] = zero ? 0 : (uint8_t)((s << 7) | ((e - 127 + 7) << 3) | (m >> 20)); break;
    case 11: ((uint8_t*)buf)[i] = zero ? 0 : (uint8_t)((s << 7) | ((e - 127 + 15) << 2) | (m >> 21)); break;
  }
}

/* Input value of rank r at element i for op: exact under every reduction
 * order and type for up to 4 ranks (sums <= 8, products powers of 2). */
static double val(int r, size_t i, int op) {
  if (op == 1) return 1 + (double)((r + i) % 2);
  return (double)((r + i) % 3);
}

static double expect_red(size_t i, int op, int dt) {
  double acc = val(0, i, op);
  for (int r = 1; r < g_n; r++) {
    double v = val(r, i, op);
    switch (op) {
      case 0: case 4: acc += v; break;
      case 1: acc *= v; break;
      case 2: acc = v > acc ? v : acc; break;
      case 3: acc = v < acc ? v : acc; break;
    }
  }
  if (op == 4) {
    int isint = dt <= 5;
    acc = isint ? (double)((long long)acc / g_n) : acc / g_n;
  }
  return acc;
}

static uint8_t pat(int r, int q, size_t b) { return (uint8_t)(r * 37 + q * 101 + b * 11 + 5); }

/* Compares n bytes; reports the first difference. */
static int same(const char* what, const void* got, const void* want, size_t n) {
  const uint8_t *g = got, *w = want;
  for (size_t i = 0; i < n; i++) {
    if (g[i] != w[i]) {
      CHECK(0, "%s: byte %zu is %#x, want %#x", what, i, g[i], w[i]);
      return 0;
    }
  }
  return 1;
}

/* ---- buffers ----------------------------------------------------------------- */

static size_t BUF_BYTES = 1 << 20; /* 64 MiB with NCCL_TEST_FULL */
static uint8_t *A, *B, *W; /* send, recv (ncclMemAlloc), expected (malloc) */

static void fill_red(void* buf, size_t count, int dt, int op, int rank, size_t first) {
  for (size_t i = 0; i < count; i++) put(buf, i, dt, val(rank, first + i, op));
}

/* ---- the collectives ---------------------------------------------------------- */

static void t_allreduce(ncclComm_t c, size_t count, int dt, int op, int inplace) {
  char what[96];
  snprintf(what, sizeof what, "allreduce %s %s count %zu%s", dt_name[dt], op_name[op], count,
           inplace ? " in place" : "");
  uint8_t* recv = inplace ? A : B;
  fill_red(A, count, dt, op, g_rank, 0);
  memset(B, 0xee, count * dt_size[dt]);
  OK(ncclAllReduce(A, recv, count, (ncclDataType_t)dt, (ncclRedOp_t)op, c, g_stream));
  sync_comm(c);
  for (size_t i = 0; i < count; i++) put(W, i, dt, expect_red(i, op, dt));
  same(what, recv, W, count * dt_size[dt]);
}

static void t_reducescatter(ncclComm_t c, size_t count, int dt, int op, int inplace) {
  char what[96];
  snprintf(what, sizeof what, "reducescatter %s %s count %zu%s", dt_name[dt], op_name[op], count,
           inplace ? " in place" : "");
  size_t sz = dt_size[dt];
  fill_red(A, count * g_n, dt, op, g_rank, 0);
  uint8_t* recv = inplace ? A + g_rank * count * sz : B;
  OK(ncclReduceScatter(A, recv, count, (ncclDataType_t)dt, (ncclRedOp_t)op, c, g_stream));
  sync_comm(c);
  for (size_t i = 0; i < count; i++) put(W, i, dt, expect_red(g_rank * count + i, op, dt));
  same(what, recv, W, count * sz);
}

static void t_reduce(ncclComm_t c, size_t count, int dt, int op, int root, int inplace) {
  char what[96];
  snprintf(what, sizeof what, "reduce %s %s count %zu root %d%s", dt_name[dt], op_name[op], count,
           root, inplace ? " in place" : "");
  fill_red(A, count, dt, op, g_rank, 0);
  uint8_t* recv = inplace ? A : B;
  OK(ncclReduce(A, g_rank == root ? recv : (inplace ? A : NULL), count, (ncclDataType_t)dt,
                (ncclRedOp_t)op, root, c, g_stream));
  sync_comm(c);
  if (g_rank == root) {
    for (size_t i = 0; i < count; i++) put(W, i, dt, expect_red(i, op, dt));
    same(what, recv, W, count * dt_size[dt]);
  }
}

static void t_allgather(ncclComm_t c, size_t count, int dt, int inplace) {
  char what[96];
  snprintf(what, sizeof what, "allgather %s count %zu%s", dt_name[dt], count, inplace ? " in place" : "");
  size_t bytes = count * dt_size[dt];
  uint8_t* send = inplace ? B + g_rank * bytes : A;
  for (size_t b = 0; b < bytes; b++) send[b] = pat(g_rank, 0, b);
  OK(ncclAllGather(send, B, count, (ncclDataType_t)dt, c, g_stream));
  sync_comm(c);
  for (int r = 0; r < g_n; r++)
    for (size_t b = 0; b < bytes; b++) W[r * bytes + b] = pat(r, 0, b);
  same(what, B, W, g_n * bytes);
}

static void t_broadcast(ncclComm_t c, size_t count, int dt, int root, int mode) {
  /* mode 0: out of place, 1: in place (ncclBroadcast send == recv), 2: ncclBcast */
  char what[96];
  snprintf(what, sizeof what, "broadcast %s count %zu root %d mode %d", dt_name[dt], count, root, mode);
  size_t bytes = count * dt_size[dt];
  uint8_t* recv = mode ? A : B;
  for (size_t b = 0; b < bytes; b++) A[b] = g_rank == root ? pat(root, 1, b) : 0xcc;
  if (mode == 2)
    OK(ncclBcast(A, count, (ncclDataType_t)dt, root, c, g_stream));
  else
    OK(ncclBroadcast(A, recv, count, (ncclDataType_t)dt, root, c, g_stream));
  sync_comm(c);
  for (size_t b = 0; b < bytes; b++) W[b] = pat(root, 1, b);
  same(what, recv, W, bytes);
}

static void t_alltoall(ncclComm_t c, size_t count, int dt) {
  char what[96];
  snprintf(what, sizeof what, "alltoall %s count %zu", dt_name[dt], count);
  size_t bytes = count * dt_size[dt];
  for (int q = 0; q < g_n; q++)
    for (size_t b = 0; b < bytes; b++) A[q * bytes + b] = pat(g_rank, q, b);
  OK(ncclAlltoAll(A, B, count, (ncclDataType_t)dt, c, g_stream));
  sync_comm(c);
  for (int r = 0; r < g_n; r++)
    for (size_t b = 0; b < bytes; b++) W[r * bytes + b] = pat(r, g_rank, b);
  same(what, B, W, g_n * bytes);
}

static void t_gather(ncclComm_t c, size_t count, int dt, int root, int inplace) {
  char what[96];
  snprintf(what, sizeof what, "gather %s count %zu root %d%s", dt_name[dt], count, root, inplace ? " in place" : "");
  size_t bytes = count * dt_size[dt];
  uint8_t* send = (inplace && g_rank == root) ? B + root * bytes : A;
  for (size_t b = 0; b < bytes; b++) send[b] = pat(g_rank, 2, b);
  OK(ncclGather(send, g_rank == root ? B : NULL, count, (ncclDataType_t)dt, root, c, g_stream));
  sync_comm(c);
  if (g_rank == root) {
    for (int r = 0; r < g_n; r++)
      for (size_t b = 0; b < bytes; b++) W[r * bytes + b] = pat(r, 2, b);
    same(what, B, W, g_n * bytes);
  }
}

static void t_scatter(ncclComm_t c, size_t count, int dt, int root, int inplace) {
  char what[96];
  snprintf(what, sizeof what, "scatter %s count %zu root %d%s", dt_name[dt], count, root, inplace ? " in place" : "");
  size_t bytes = count * dt_size[dt];
  if (g_rank == root)
    for (int q = 0; q < g_n; q++)
      for (size_t b = 0; b < bytes; b++) A[q * bytes + b] = pat(root, q + 3, b);
  uint8_t* recv = (inplace && g_rank == root) ? A + root * bytes : B;
  OK(ncclScatter(g_rank == root ? A : NULL, recv, count, (ncclDataType_t)dt, root, c, g_stream));
  sync_comm(c);
  for (size_t b = 0; b < bytes; b++) W[b] = pat(root, g_rank + 3, b);
  same(what, recv, W, bytes);
}

static void collectives(ncclComm_t c) {
  /* AllReduce: every type x op at an odd count; counts 0, 1, 7 and a larger one. */
  size_t big = g_full ? 262147 : 1003;
  for (int dt = 0; dt < 12; dt++)
    for (int op = 0; op < 5; op++) t_allreduce(c, g_full ? 1003 : 61, dt, op, 0);
  size_t counts[] = {0, 1, 7, big};
  for (int k = 0; k < 4; k++) {
    t_allreduce(c, counts[k], 7, 0, 0);
    t_allreduce(c, counts[k], 7, 0, 1);
  }
  pass("allreduce");
  int rs_dt[] = {7, 9, 4, 10};
  for (int k = 0; k < 4; k++) {
    t_reducescatter(c, 7, rs_dt[k], k % 2 ? 2 : 0, 0);
    t_reducescatter(c, big, rs_dt[k], 4, 0);
  }
  t_reducescatter(c, 1003, 7, 0, 1);
  pass("reducescatter");
  t_reduce(c, big, 7, 0, 0, 0);
  t_reduce(c, 7, 0, 3, g_n - 1, 0);
  t_reduce(c, 1003, 10, 0, g_n - 1, 1);
  pass("reduce");
  t_allgather(c, 1, 0, 0);
  t_allgather(c, 7, 0, 0);
  t_allgather(c, big, 0, 0);
  t_allgather(c, 100, 8, 1);
  t_allgather(c, 7, 6, 1);
  pass("allgather");
  for (int root = 0; root < g_n; root++) t_broadcast(c, root % 2 ? 1003 : 1, 7, root, root % 3);
  t_broadcast(c, big, 0, 0, 0);
  pass("broadcast");
  t_alltoall(c, 1, 1);
  t_alltoall(c, 7, 7);
  t_alltoall(c, 1003, 7);
  pass("alltoall");
  t_gather(c, 7, 7, 0, 0);
  t_gather(c, 1003, 0, g_n - 1, 1);
  t_scatter(c, 7, 7, 0, 0);
  t_scatter(c, 1003, 0, g_n - 1, 1);
  pass("gather_scatter");
  if (g_full) {
    for (int dt = 0; dt < 12; dt++) {
      size_t cs[] = {0, 1, 7, 1000003};
      for (int k = 0; k < 4; k++) {
        if (cs[k] * dt_size[dt] * g_n > BUF_BYTES) continue;
        for (int op = 0; op < 5; op++) {
          t_allreduce(c, cs[k], dt, op, 0);
          t_allreduce(c, cs[k], dt, op, 1);
          t_reducescatter(c, cs[k], dt, op, 0);
          t_reducescatter(c, cs[k], dt, op, 1);
          t_reduce(c, cs[k], dt, op, g_n - 1, 0);
        }
        t_allgather(c, cs[k], dt, 0);
        t_allgather(c, cs[k], dt, 1);
        t_alltoall(c, cs[k], dt);
      }
    }
    pass("full sweep");
  }
}

/* Staging: plain malloc buffers (not backend allocations). */
static void malloc_buffers(ncclComm_t c) {
  uint8_t *sA = A, *sB = B;
  A = malloc(BUF_BYTES);
  B = malloc(BUF_BYTES);
  t_allreduce(c, 1003, 7, 0, 0);
  t_allgather(c, 7, 0, 0);
  sync_comm(c);
  A = sA;
  B = sB;
  pass("malloc buffers");
}

/* Groups: nested, deferred to the outermost end, several collectives. */
static void groups(ncclComm_t c) {
  size_t n = 257;
  uint8_t* A2 = A + 4096;
  uint8_t* B2 = B + 4096;
  fill_red(A, n, 7, 0, g_rank, 0);
  for (size_t b = 0; b < 64; b++) A2[b] = pat(g_rank, 9, b);
  OK(ncclGroupStart());
  OK(ncclAllReduce(A, B, n, ncclFloat32, ncclSum, c, g_stream));
  OK(ncclGroupStart());
  OK(ncclAllGather(A2, B2, 64, ncclUint8, c, g_stream));
  OK(ncclGroupEnd());
  OK(ncclBroadcast(A2 + 8192, B2 + 8192, 0, ncclUint8, 0, c, g_stream)); /* count 0 */
  OK(ncclGroupEnd());
  sync_comm(c);
  for (size_t i = 0; i < n; i++) put(W, i, 7, expect_red(i, 0, 7));
  same("group allreduce", B, W, n * 4);
  for (int r = 0; r < g_n; r++)
    for (size_t b = 0; b < 64; b++) W[r * 64 + b] = pat(r, 9, b);
  same("group allgather", B2, W, g_n * 64);
  EXPECT(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  pass("groups");
}

/* An all-to-all written as grouped ncclSend/ncclRecv (how clients built
 * against NCCL < 2.28, PyTorch's all_to_all_single and nccl-tests'
 * alltoall_perf, issue one) runs natively, without a fallback. */
static void p2p_alltoall(ncclComm_t c) {
  size_t count = 13, bytes = count * 4;
  for (int q = 0; q < g_n; q++)
    for (size_t b = 0; b < bytes; b++) A[q * bytes + b] = pat(g_rank, q + 7, b);
  OK(ncclGroupStart());
  for (int q = 0; q < g_n; q++) {
    OK(ncclSend(A + q * bytes, count, ncclFloat32, q, c, g_stream));
    OK(ncclRecv(B + q * bytes, count, ncclFloat32, q, c, g_stream));
  }
  OK(ncclGroupEnd());
  sync_comm(c);
  for (int r = 0; r < g_n; r++)
    for (size_t b = 0; b < bytes; b++) W[r * bytes + b] = pat(r, g_rank + 7, b);
  same("grouped send/recv all-to-all", B, W, g_n * bytes);
  pass("p2p alltoall");
}

/* Exchange a fresh id through rank 0's broadcast on comm c. */
static ncclUniqueId share_id(ncclComm_t c) {
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (g_rank == 0) OK(ncclGetUniqueId(&id));
  memcpy(A, &id, sizeof id);
  OK(ncclBroadcast(A, B, sizeof id, ncclUint8, 0, c, g_stream));
  sync_comm(c);
  memcpy(&id, B, sizeof id);
  return id;
}

static void split(ncclComm_t c) {
  ncclComm_t sub = NULL;
  int color = g_rank % 2, key = -g_rank;
  OK(ncclCommSplit(c, color, key, &sub, NULL));
  CHECK(sub != NULL, "split returned NULL");
  int n = 0, r = -1;
  OK(ncclCommCount(sub, &n));
  OK(ncclCommUserRank(sub, &r));
  int members = (g_n + 1 - color) / 2;
  CHECK(n == members, "split: %d ranks, want %d", n, members);
  /* keys -rank: the highest old rank comes first */
  int want = 0;
  for (int q = g_rank + 2; q < g_n; q += 2) want++;
  CHECK(r == want, "split: rank %d, want %d", r, want);
  /* an allreduce on the child: sum of the old ranks of its members */
  int32_t* in = (int32_t*)A;
  for (int i = 0; i < 33; i++) in[i] = g_rank + i;
  OK(ncclAllReduce(A, B, 33, ncclInt32, ncclSum, sub, g_stream));
  sync_comm(sub);
  int32_t* out = (int32_t*)B;
  for (int i = 0; i < 33; i++) {
    int32_t s = 0;
    for (int q = color; q < g_n; q += 2) s += q + i;
    CHECK(out[i] == s, "split allreduce [%d] = %d, want %d", i, out[i], s);
  }
  OK(ncclCommDestroy(sub));
  /* NCCL_SPLIT_NOCOLOR: the last rank takes part but gets NULL. */
  sub = (ncclComm_t)0x1;
  OK(ncclCommSplit(c, g_rank == g_n - 1 ? NCCL_SPLIT_NOCOLOR : 0, 0, &sub, NULL));
  if (g_rank == g_n - 1) {
    CHECK(sub == NULL, "NOCOLOR split returned %p", (void*)sub);
  } else {
    CHECK(sub != NULL, "split returned NULL");
    OK(ncclCommCount(sub, &n));
    CHECK(n == g_n - 1, "split without the last rank: %d ranks", n);
    OK(ncclCommDestroy(sub));
  }
  pass("split");
}

static void poll_comm(ncclComm_t c, const char* what) {
  ncclResult_t st = ncclInProgress;
  for (long i = 0; i < 200000000 && st == ncclInProgress; i++) {
    OK(ncclCommGetAsyncError(c, &st));
    if (st == ncclInProgress) {
      struct timespec ts = {0, 100000};
      nanosleep(&ts, NULL);
    }
  }
  CHECK(st == ncclSuccess, "%s: state %d (%s)", what, (int)st, ncclGetLastError(NULL));
}

static void nonblocking(ncclComm_t c) {
  ncclUniqueId id = share_id(c);
  /* A client built against NCCL 2.27 passes a 72-byte config (commName,
   * collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs after byte 48): read up
   * to byte 48, the rest ignored. */
  struct {
    ncclConfig_t base; /* trafficClass (2.26) is its last 4 bytes */
    const char* commName;
    int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs;
  } big = {NCCL_CONFIG_INITIALIZER, "theseus-test", 0, 1, 0, 2};
  big.base.size = sizeof big;
  big.base.version = 22703;
  big.base.blocking = 0;
  CHECK(sizeof big == 72, "2.27 config is %zu bytes", sizeof big);
  ncclConfig_t* cfgp = &big.base;
  ncclComm_t nb = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nb, g_n, id, g_rank, cfgp);
  CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init = %d", (int)r);
  CHECK(nb != NULL, "non-blocking init: NULL comm");
  poll_comm(nb, "non-blocking init");
  fill_red(A, 99, 7, 2, g_rank, 0);
  r = ncclAllReduce(A, B, 99, ncclFloat32, ncclMax, nb, g_stream);
  CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking allreduce = %d", (int)r);
  poll_comm(nb, "non-blocking allreduce");
  sync_comm(nb);
  for (size_t i = 0; i < 99; i++) put(W, i, 7, expect_red(i, 2, 7));
  same("non-blocking allreduce", B, W, 99 * 4);
  r = ncclCommFinalize(nb);
  CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking finalize = %d", (int)r);
  poll_comm(nb, "non-blocking finalize");
  OK(ncclCommDestroy(nb));
  pass("nonblocking");
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ncclCommInitRankScalable, then ncclCommAbort: rank 0 aborts while the
 * others wait in a collective it never joins; their wait must end (with an
 * error naming the lost rank) long before THESEUS_TIMEOUT. */
static void scalable_and_abort(ncclComm_t c) {
  ncclUniqueId id = share_id(c);
  ncclComm_t s = NULL;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  OK(ncclCommInitRankScalable(&s, g_n, g_rank, 1, &id, &cfg));
  t_allreduce(s, 17, 2, 0, 0);
  ncclResult_t st;
  OK(ncclCommGetAsyncError(s, &st));
  CHECK(st == ncclSuccess, "scalable comm async error %d", (int)st);
  /* a barrier on c: every rank has checked s before rank 0 aborts it */
  OK(ncclAllReduce(A, B, 1, ncclInt32, ncclSum, c, g_stream));
  sync_comm(c);
  double t0 = now();
  if (g_rank == 0) {
    OK(ncclCommAbort(s));
  } else {
    ncclResult_t r = ncclAllReduce(A, B, 1000, ncclFloat32, ncclSum, s, g_stream);
    if (r == ncclSuccess) r = theseusStreamSynchronize(s, g_stream);
    ncclResult_t as = ncclSuccess;
    ncclCommGetAsyncError(s, &as);
    printf("ABORTWAIT rank %d -> %d, async %d after %.3f s: %s\n", g_rank, (int)r, (int)as, now() - t0,
           ncclGetLastError(NULL));
    CHECK(r != ncclSuccess && as == ncclRemoteError, "a collective on a comm whose rank 0 aborted: %d, async %d",
          (int)r, (int)as);
    OK(ncclCommAbort(s));
  }
  double dt = now() - t0;
  const char* tmo = getenv("THESEUS_TIMEOUT");
  double limit = tmo ? atof(tmo) / 2000.0 : 30.0;
  CHECK(dt < limit, "abort took %.3f s to unblock (limit %.1f s)", dt, limit);
  EXPECT(ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, s, g_stream), ncclInvalidArgument, "use after abort");
  pass("scalable_abort");
}

static void bad_calls(ncclComm_t c) {
  EXPECT(ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, NULL, g_stream), ncclInvalidArgument, "null comm");
  OK(ncclCommDestroy(NULL)); /* NCCL 2.25: a no-op */
  OK(ncclCommAbort(NULL));
  /* A NULL comm inside a group abandons the group on every rank: nothing of it runs. */
  OK(ncclGroupStart());
  OK(ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, c, g_stream));
  EXPECT(ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, NULL, g_stream), ncclInvalidArgument, "null comm in a group");
  EXPECT(ncclGroupEnd(), ncclInvalidArgument, "group with a null comm");
  EXPECT(ncclAllReduce(A, B, 1, (ncclDataType_t)12, ncclSum, c, g_stream), ncclInvalidArgument, "bad dtype");
  EXPECT(ncclAllReduce(A, B, 1, ncclFloat32, (ncclRedOp_t)7, c, g_stream), ncclInvalidArgument, "bad op");
  EXPECT(ncclAllGather(A, B, SIZE_MAX / 2, ncclFloat64, c, g_stream), ncclInvalidArgument, "count overflow");
  EXPECT(ncclBroadcast(A, B, 1, ncclFloat32, g_n, c, g_stream), ncclInvalidArgument, "root out of range");
  EXPECT(ncclAllReduce(NULL, B, 4, ncclFloat32, ncclSum, c, g_stream), ncclInvalidArgument, "null sendbuff");
  EXPECT(ncclCommCount(c, NULL), ncclInvalidArgument, "null output");
  EXPECT(ncclGetVersion(NULL), ncclInvalidArgument, "null version");
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  ncclComm_t x = (ncclComm_t)0x1;
  EXPECT(ncclCommSplit(c, 0, 0, &x, &bad), ncclInvalidArgument, "config without magic");
  CHECK(x == NULL, "failed split left newcomm %p", (void*)x);
  /* Point-to-point calls run natively (p2p_test.c tests them); bad ones are
   * refused with a reason before anything is set up. */
  EXPECT(ncclSend(A, 1, ncclFloat32, g_n, c, g_stream), ncclInvalidArgument, "send to a peer out of range");
  EXPECT(ncclRecv(NULL, 1, ncclFloat32, (g_rank + 1) % g_n, c, g_stream), ncclInvalidArgument, "recv into NULL");
  EXPECT(ncclSend(A, 1, ncclFloat32, g_rank, c, g_stream), ncclInvalidUsage, "send to itself without its receive");
  size_t* m = calloc((size_t)g_n * g_n, sizeof(size_t));
  m[1] = 1;
  EXPECT(ncclAlltoAllv(A, B, m, NULL, ncclFloat32, c, g_stream), ncclInvalidArgument, "alltoallv without its GPU matrix");
  free(m);
  /* Calls without a schedule path or a fallback NCCL: rejected with a reason. */
  void* h = NULL;
  /* Registration is native (no fallback needed); bad arguments fail. */
  OK(ncclCommRegister(c, A, 64, &h));
  OK(ncclCommDeregister(c, h));
  EXPECT(ncclCommDeregister(c, h), ncclInvalidArgument, "deregister twice");
  EXPECT(ncclCommRegister(c, NULL, 64, &h), ncclInvalidArgument, "register a NULL buffer");
  ncclWindow_t w;
  EXPECT(ncclCommWindowRegister(c, A, 4096, &w, NCCL_WIN_DEFAULT), ncclInvalidUsage, "window register");
  EXPECT(ncclDevCommCreate(c, NULL, NULL), ncclInvalidUsage, "device communicator");
  float scalar = 0.5f;
  ncclRedOp_t op;
  EXPECT(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, c), ncclInvalidUsage,
         "premulsum without fallback");
  ncclComm_t shr = NULL;
  int ex = 0;
  /* ncclCommShrink is native (testdata/ctest/resilience.c); bad lists and
   * flags fail at once. */
  EXPECT(ncclCommShrink(c, &g_rank, 1, &shr, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidArgument, "shrink excluding itself");
  EXPECT(ncclCommShrink(c, &ex, 1, &shr, NULL, 4), ncclInvalidArgument, "shrink flags");
  EXPECT(ncclCommRevoke(c, 3), ncclInvalidArgument, "revoke flags");
  ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
  OK(ncclGroupStart());
  EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidUsage, "group simulate");
  EXPECT(ncclGroupEnd(), ncclInvalidUsage, "group closed by simulate");
  uint64_t nat = 0, fb = 0, rej = 0;
  OK(theseusCommStats(c, &nat, &fb, &rej));
  CHECK(nat > 0 && fb == 0 && rej >= 8, "stats native %llu fallback %llu rejected %llu", (unsigned long long)nat,
        (unsigned long long)fb, (unsigned long long)rej);
  /* Launch timing is the CUDA backend's (THESEUS_TIME_LAUNCHES): zeros here. */
  uint64_t nl = 1, lns = 1;
  OK(theseusCommLaunchTime(c, &nl, &lns));
  CHECK(nl == 0 && lns == 0, "launch time on the host backend: %llu launches, %llu ns", (unsigned long long)nl,
        (unsigned long long)lns);
  OK(theseusCommLaunchTime(c, NULL, NULL));
  EXPECT(theseusCommLaunchTime(NULL, &nl, &lns), ncclInvalidArgument, "launch time of a null comm");
  pass("bad calls");
}

static void errors_and_version(void) {
  int v = 0;
  OK(ncclGetVersion(&v));
  CHECK(v == 22501 && v == NCCL_VERSION_CODE && NCCL_VERSION(2, 25, 1) == 22501, "version %d", v);
  CHECK(strcmp(ncclGetErrorString(ncclSuccess), "no error") == 0, "error string of success");
  CHECK(strstr(ncclGetErrorString(ncclInvalidUsage), "invalid usage") != NULL, "error string");
  CHECK(strcmp(ncclGetErrorString((ncclResult_t)99), "unknown result code") == 0, "unknown result");
  pass("version");
}

static ncclUniqueId get_id(int argc, char** argv, int idx) {
  ncclUniqueId id;
  if (g_rank != 0 && argc <= idx) fprintf(stderr, "rank %d needs the id\n", g_rank);
  pair_id(argc > idx ? argv[idx] : NULL, &id);
  return id;
}

static void alloc_buffers(void) {
  OK(ncclMemAlloc((void**)&A, BUF_BYTES));
  OK(ncclMemAlloc((void**)&B, BUF_BYTES));
  W = malloc(BUF_BYTES);
}

static int mode_ranks(int argc, char** argv) {
  errors_and_version();
  ncclUniqueId id = get_id(argc, argv, 4);
  alloc_buffers();
  ncclComm_t c = NULL;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  int n = 0, r = -1, d = -1;
  OK(ncclCommCount(c, &n));
  OK(ncclCommUserRank(c, &r));
  OK(ncclCommCuDevice(c, &d));
  CHECK(n == g_n && r == g_rank && d == 0, "count %d rank %d device %d", n, r, d);
  ncclResult_t st;
  OK(ncclCommGetAsyncError(c, &st));
  CHECK(st == ncclSuccess, "async error %d", (int)st);
  pass("init");
  collectives(c);
  malloc_buffers(c);
  groups(c);
  p2p_alltoall(c);
  split(c);
  nonblocking(c);
  scalable_and_abort(c);
  bad_calls(c);
  OK(ncclCommGetAsyncError(c, &st));
  CHECK(st == ncclSuccess, "async error after the suite %d", (int)st);
  OK(ncclCommFinalize(c));
  OK(ncclCommDestroy(c));
  EXPECT(ncclCommGetAsyncError(c, &st), ncclInvalidArgument, "use after destroy");
  EXPECT(ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, c, g_stream), ncclInvalidArgument, "collective after destroy");
  OK(ncclMemFree(A));
  OK(ncclMemFree(B));
  pass("destroy");
  return g_fail;
}

/* Several communicators created and used from one thread: grouped init
 * (nccl-tests' default) and ncclCommInitAll. */
static int mode_grouped(int nranks) {
  g_n = nranks;
  g_rank = 0;
  errors_and_version();
  alloc_buffers();
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  ncclComm_t comms[8];
  OK(ncclGroupStart());
  for (int i = 0; i < nranks; i++) OK(ncclCommInitRank(&comms[i], nranks, id, i));
  OK(ncclGroupEnd());
  for (int i = 0; i < nranks; i++) {
    int r = -1;
    OK(ncclCommUserRank(comms[i], &r));
    CHECK(r == i, "grouped init: comm %d has rank %d", i, r);
  }
  /* One allreduce per communicator, in one group, from this thread. */
  size_t count = 515;
  OK(ncclGroupStart());
  for (int i = 0; i < nranks; i++) {
    fill_red(A + i * 8192, count, 7, 0, i, 0);
    OK(ncclAllReduce(A + i * 8192, B + i * 8192, count, ncclFloat32, ncclSum, comms[i], g_stream));
  }
  OK(ncclGroupEnd());
  for (size_t i = 0; i < count; i++) put(W, i, 7, expect_red(i, 0, 7));
  for (int i = 0; i < nranks; i++) {
    sync_comm(comms[i]);
    same("grouped allreduce", B + i * 8192, W, count * 4);
  }
  for (int i = 0; i < nranks; i++) OK(ncclCommDestroy(comms[i]));
  pass("grouped init");
  OK(ncclCommInitAll(comms, nranks, NULL));
  OK(ncclGroupStart());
  for (int i = 0; i < nranks; i++) {
    for (size_t b = 0; b < 40; b++) A[i * 8192 + b] = pat(i, 0, b);
    OK(ncclAllGather(A + i * 8192, B + i * 8192, 40, ncclInt8, comms[i], g_stream));
  }
  OK(ncclGroupEnd());
  for (int r = 0; r < nranks; r++)
    for (size_t b = 0; b < 40; b++) W[r * 40 + b] = pat(r, 0, b);
  for (int i = 0; i < nranks; i++) {
    sync_comm(comms[i]);
    same("InitAll allgather", B + i * 8192, W, nranks * 40);
    OK(ncclCommDestroy(comms[i]));
  }
  pass("initall");
  return g_fail;
}

/* Rank 1 joins with a corrupted id: it fails at once; the others report
 * the missing rank after THESEUS_TIMEOUT. */
static int mode_badid(int argc, char** argv) {
  ncclUniqueId id = get_id(argc, argv, 4);
  if (g_rank == 1) id.internal[30] ^= 0x5a; /* the nonce */
  ncclComm_t c = NULL;
  ncclResult_t r = ncclCommInitRank(&c, g_n, id, g_rank);
  printf("BADID rank %d -> %d (%s): %s\n", g_rank, (int)r, ncclGetErrorString(r), ncclGetLastError(NULL));
  CHECK(r != ncclSuccess, "init with a mismatched id succeeded");
  CHECK(c == NULL, "failed init left comm %p", (void*)c);
  if (g_rank == 1)
    CHECK(r == ncclInvalidArgument || r == ncclInvalidUsage, "corrupted id: %d", (int)r);
  else
    CHECK(r == ncclRemoteError || r == ncclSystemError, "peer of a corrupted id: %d", (int)r);
  pass("badid");
  return g_fail;
}

/* Rank 0 calls ncclAllReduce while the others call ncclBroadcast: user
 * misuse (NCCL requires the same collectives in the same order on every
 * rank). The rank that finds it gets ncclInvalidUsage, the others
 * ncclRemoteError (at once, not after THESEUS_TIMEOUT), all with a reason
 * that says the ranks issued different collectives; never
 * ncclInternalError ("please report this issue"). */
static int mode_mismatch(int argc, char** argv) {
  ncclUniqueId id = get_id(argc, argv, 4);
  alloc_buffers();
  ncclComm_t c = NULL;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  size_t count = BUF_BYTES / 8; /* 128 Ki float32: past the small-message schedules */
  ncclResult_t r = g_rank == 0 ? ncclAllReduce(A, B, count, ncclFloat32, ncclSum, c, g_stream)
                               : ncclBroadcast(A, B, count, ncclFloat32, 0, c, g_stream);
  if (r == ncclSuccess) r = theseusStreamSynchronize(c, g_stream);
  const char* e = ncclGetLastError(c);
  ncclResult_t ar = ncclSuccess;
  OK(ncclCommGetAsyncError(c, &ar));
  printf("MISMATCH rank %d -> %d (%s) async %d: %s\n", g_rank, (int)r, ncclGetErrorString(r), (int)ar, e ? e : "");
  CHECK(r == ncclInvalidUsage || r == ncclRemoteError, "different collectives: %d", (int)r);
  CHECK(e && strstr(e, "issued different collectives"), "reason: %s", e ? e : "(null)");
  CHECK(!strstr(ncclGetErrorString(r), "please report"), "%s", ncclGetErrorString(r));
  OK(ncclCommAbort(c));
  pass("mismatch");
  return g_fail;
}

static int mode_fallback(int argc, char** argv) {
  ncclUniqueId id = get_id(argc, argv, 4);
  alloc_buffers();
  ncclComm_t c = NULL;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  /* Ring exchange with send/recv in a group: native (the point-to-point
   * engine), although a fallback is loaded. */
  int next = (g_rank + 1) % g_n, prev = (g_rank + g_n - 1) % g_n;
  for (size_t b = 0; b < 100; b++) A[b] = pat(g_rank, 4, b);
  OK(ncclGroupStart());
  OK(ncclSend(A, 25, ncclFloat32, next, c, g_stream));
  OK(ncclRecv(B, 25, ncclFloat32, prev, c, g_stream));
  OK(ncclGroupEnd());
  sync_comm(c);
  for (size_t b = 0; b < 100; b++) W[b] = pat(prev, 4, b);
  same("native ring beside a fallback", B, W, 100);
  pass("native sendrecv with a fallback");
  /* AlltoAllv: rank i sends i+j+1 int8 elements to rank j. */
  size_t* m = malloc(sizeof(size_t) * g_n * g_n);
  for (int i = 0; i < g_n; i++)
    for (int j = 0; j < g_n; j++) m[i * g_n + j] = (size_t)(i + j + 1);
  size_t off = 0;
  for (int j = 0; j < g_n; j++)
    for (size_t k = 0; k < m[g_rank * g_n + j]; k++) A[off++] = pat(g_rank, j, k);
  OK(ncclAlltoAllv(A, B, m, m, ncclInt8, c, g_stream));
  sync_comm(c);
  off = 0;
  for (int i = 0; i < g_n; i++)
    for (size_t k = 0; k < m[i * g_n + g_rank]; k++) W[off++] = pat(i, g_rank, k);
  same("native alltoallv beside a fallback", B, W, off);
  free(m);
  pass("native alltoallv with a fallback");
  /* PreMulSum lives on the shadow communicator. */
  float scalar = 0.5f;
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, c));
  CHECK((int)op >= ncclNumOps, "premulsum op %d", (int)op);
  float* in = (float*)A;
  for (int i = 0; i < 10; i++) in[i] = (float)(g_rank + i);
  OK(ncclAllReduce(A, B, 10, ncclFloat32, op, c, g_stream));
  float* out = (float*)B;
  for (int i = 0; i < 10; i++) {
    float s = 0;
    for (int r = 0; r < g_n; r++) s += 0.5f * (float)(r + i);
    CHECK(out[i] == s, "premulsum [%d] = %g, want %g", i, out[i], s);
  }
  OK(ncclRedOpDestroy(op, c));
  void* h = NULL;
  OK(ncclCommRegister(c, A, 4096, &h));
  OK(ncclCommDeregister(c, h));
  pass("fallback premulsum register");
  /* No schedule serves anything (empty selection context): the
   * allreduce runs on the fallback, and is counted. */
  fill_red(A, 77, 7, 0, g_rank, 0);
  OK(ncclAllReduce(A, B, 77, ncclFloat32, ncclSum, c, g_stream));
  for (size_t i = 0; i < 77; i++) put(W, i, 7, expect_red(i, 0, 7));
  same("no-schedule allreduce on the fallback", B, W, 77 * 4);
  uint64_t nat = 9, fb = 0, rej = 9;
  OK(theseusCommStats(c, &nat, &fb, &rej));
  CHECK(nat == 3 && fb == 2 && rej == 0, "stats native %llu fallback %llu rejected %llu",
        (unsigned long long)nat, (unsigned long long)fb, (unsigned long long)rej);
  pass("fallback no schedule");
  OK(ncclCommDestroy(c));
  return g_fail;
}

/* Host cost per call from C (a measurement, not a test): a 1-rank
 * communicator on the host backend; prints ns per call. */
static int mode_bench(int iters) {
  g_n = 1;
  alloc_buffers();
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  ncclComm_t c;
  OK(ncclCommInitRank(&c, 1, id, 0));
  double t0 = now();
  int v;
  for (int i = 0; i < iters; i++) ncclGetVersion(&v);
  double t1 = now();
  ncclResult_t st;
  for (int i = 0; i < iters; i++) ncclCommGetAsyncError(c, &st);
  double t2 = now();
  for (int i = 0; i < iters; i++) ncclAllReduce(A, B, 0, ncclFloat32, ncclSum, c, g_stream);
  double t3 = now();
  for (int i = 0; i < iters; i++) {
    ncclGroupStart();
    ncclAllReduce(A, B, 0, ncclFloat32, ncclSum, c, g_stream);
    ncclGroupEnd();
  }
  double t4 = now();
  printf("ncclGetVersion (C only)          %8.1f ns/call\n", 1e9 * (t1 - t0) / iters);
  printf("ncclCommGetAsyncError (C -> Go)  %8.1f ns/call\n", 1e9 * (t2 - t1) / iters);
  printf("ncclAllReduce count 0            %8.1f ns/call\n", 1e9 * (t3 - t2) / iters);
  printf("group { ncclAllReduce count 0 }  %8.1f ns/call\n", 1e9 * (t4 - t3) / iters);
  OK(ncclCommDestroy(c));
  return 0;
}

/* Go in a host process: a signal handler installed without SA_ONSTACK
 * gets it at the next communicator creation; a child after fork() is
 * refused every call (in C, before any Go code) while the parent goes on. */
static void on_usr1(int sig) { (void)sig; }

static int mode_hostproc(void) {
  g_n = 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr1;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR1, &sa, NULL);
  alloc_buffers();
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  ncclComm_t c;
  OK(ncclCommInitRank(&c, 1, id, 0));
  struct sigaction now_sa;
  sigaction(SIGUSR1, NULL, &now_sa);
  CHECK(now_sa.sa_flags & SA_ONSTACK, "SIGUSR1 handler flags %#x lack SA_ONSTACK after init", now_sa.sa_flags);
  CHECK(now_sa.sa_handler == on_usr1 && (now_sa.sa_flags & SA_RESTART), "the handler itself was changed");
  pass("sa_onstack");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    ncclResult_t st;
    int v = 0;
    ncclResult_t r1 = ncclCommGetAsyncError(c, &st);
    ncclResult_t r2 = ncclAllReduce(A, B, 1, ncclFloat32, ncclSum, c, g_stream);
    ncclResult_t r3 = ncclGetVersion(&v);
    const char* e = ncclGetLastError(NULL);
    int ok = r1 == ncclInvalidUsage && r2 == ncclInvalidUsage && r3 == ncclSuccess && v == 22501 && strstr(e, "after fork") != NULL;
    printf("CHILD %d %d %d: %s\n", (int)r1, (int)r2, (int)r3, e);
    fflush(stdout);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child after fork: status %#x", status);
  t_allreduce(c, 33, 7, 0, 0);
  OK(ncclCommDestroy(c));
  pass("fork");
  return g_fail;
}

static int mode_abi(void) {
#define P(name, v) printf("%s %lld\n", name, (long long)(v))
  P("NCCL_VERSION_CODE", NCCL_VERSION_CODE);
  P("NCCL_UNIQUE_ID_BYTES", NCCL_UNIQUE_ID_BYTES);
  P("sizeof(ncclUniqueId)", sizeof(ncclUniqueId));
  P("sizeof(ncclConfig_t)", sizeof(ncclConfig_t));
  P("offsetof(ncclConfig_t,size)", offsetof(ncclConfig_t, size));
  P("offsetof(ncclConfig_t,magic)", offsetof(ncclConfig_t, magic));
  P("offsetof(ncclConfig_t,version)", offsetof(ncclConfig_t, version));
  P("offsetof(ncclConfig_t,blocking)", offsetof(ncclConfig_t, blocking));
  P("offsetof(ncclConfig_t,cgaClusterSize)", offsetof(ncclConfig_t, cgaClusterSize));
  P("offsetof(ncclConfig_t,minCTAs)", offsetof(ncclConfig_t, minCTAs));
  P("offsetof(ncclConfig_t,maxCTAs)", offsetof(ncclConfig_t, maxCTAs));
  P("offsetof(ncclConfig_t,netName)", offsetof(ncclConfig_t, netName));
  P("offsetof(ncclConfig_t,splitShare)", offsetof(ncclConfig_t, splitShare));
  P("sizeof(ncclSimInfo_t)", sizeof(ncclSimInfo_t));
  P("offsetof(ncclSimInfo_t,estimatedTime)", offsetof(ncclSimInfo_t, estimatedTime));
  P("sizeof(ncclRedOp_t)", sizeof(ncclRedOp_t));
  P("sizeof(ncclDataType_t)", sizeof(ncclDataType_t));
  P("sizeof(ncclResult_t)", sizeof(ncclResult_t));
  P("NCCL_API_MAGIC", NCCL_API_MAGIC);
  P("NCCL_SPLIT_NOCOLOR", NCCL_SPLIT_NOCOLOR);
  P("NCCL_CONFIG_UNDEF_INT", NCCL_CONFIG_UNDEF_INT);
  P("ncclSuccess", ncclSuccess);
  P("ncclUnhandledCudaError", ncclUnhandledCudaError);
  P("ncclSystemError", ncclSystemError);
  P("ncclInternalError", ncclInternalError);
  P("ncclInvalidArgument", ncclInvalidArgument);
  P("ncclInvalidUsage", ncclInvalidUsage);
  P("ncclRemoteError", ncclRemoteError);
  P("ncclInProgress", ncclInProgress);
  P("ncclNumResults", ncclNumResults);
  P("ncclInt8", ncclInt8);
  P("ncclChar", ncclChar);
  P("ncclUint8", ncclUint8);
  P("ncclInt32", ncclInt32);
  P("ncclInt", ncclInt);
  P("ncclUint32", ncclUint32);
  P("ncclInt64", ncclInt64);
  P("ncclUint64", ncclUint64);
  P("ncclFloat16", ncclFloat16);
  P("ncclHalf", ncclHalf);
  P("ncclFloat32", ncclFloat32);
  P("ncclFloat", ncclFloat);
  P("ncclFloat64", ncclFloat64);
  P("ncclDouble", ncclDouble);
  P("ncclBfloat16", ncclBfloat16);
  P("ncclFloat8e4m3", ncclFloat8e4m3);
  P("ncclFloat8e5m2", ncclFloat8e5m2);
  P("ncclNumTypes", ncclNumTypes);
  P("ncclSum", ncclSum);
  P("ncclProd", ncclProd);
  P("ncclMax", ncclMax);
  P("ncclMin", ncclMin);
  P("ncclAvg", ncclAvg);
  P("ncclNumOps", ncclNumOps);
  P("ncclMaxRedOp", ncclMaxRedOp);
  P("ncclScalarDevice", ncclScalarDevice);
  P("ncclScalarHostImmediate", ncclScalarHostImmediate);
  int v = 0;
  ncclGetVersion(&v);
  P("ncclGetVersion", v);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  P("NCCL_CONFIG_INITIALIZER.size", cfg.size);
  P("NCCL_CONFIG_INITIALIZER.blocking", cfg.blocking);
#undef P
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: nccl_test ranks|badid|fallback|mismatch RANK NRANKS [IDHEX] | grouped NRANKS | abi\n");
    return 102;
  }
  g_full = getenv("NCCL_TEST_FULL") && atoi(getenv("NCCL_TEST_FULL"));
  if (g_full) BUF_BYTES = (size_t)64 << 20;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc;
  if (strcmp(argv[1], "abi") == 0) return mode_abi();
  if (strcmp(argv[1], "hostproc") == 0) return mode_hostproc();
  if (strcmp(argv[1], "bench") == 0) return mode_bench(argc > 2 ? atoi(argv[2]) : 200000);
  if (strcmp(argv[1], "grouped") == 0) {
    rc = mode_grouped(argc > 2 ? atoi(argv[2]) : 4);
  } else {
    if (argc < 4) return 102;
    g_rank = atoi(argv[2]);
    g_n = atoi(argv[3]);
    if (strcmp(argv[1], "ranks") == 0)
      rc = mode_ranks(argc, argv);
    else if (strcmp(argv[1], "badid") == 0)
      rc = mode_badid(argc, argv);
    else if (strcmp(argv[1], "fallback") == 0)
      rc = mode_fallback(argc, argv);
    else if (strcmp(argv[1], "mismatch") == 0)
      rc = mode_mismatch(argc, argv);
    else
      return 102;
  }
  printf("DONE rank %d failures %d\n", g_rank, rc);
  return rc > 99 ? 99 : rc;
}
