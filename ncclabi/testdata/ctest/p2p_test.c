/* p2p_test.c — the point-to-point acceptance test of libtheseus_nccl.so (C,
 * no CUDA; run by ncclabi/capitest on the host backend, one process per
 * rank, without a fallback NCCL):
 *
 *   p2p_test p2p      RANK NRANKS [IDHEX]  every pattern of issue 22, twice
 *                                          each, every received byte checked;
 *                                          then theseusCommStats: every call
 *                                          native, none on a fallback
 *   p2p_test mismatch RANK NRANKS [IDHEX]  rank 1 receives fewer elements than
 *                                          rank 0 sends: an error naming the
 *                                          pair on both, within THESEUS_TIMEOUT
 *
 * Rank 0 makes the id and prints "ID <hex>". Every check prints "FAIL ..."
 * on failure; each finished part prints "PASS <part> rank R". The exit
 * status is the number of failures (capped).
 */
#include "nccl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank, g_n, g_fail;
static uint64_t g_calls; /* data calls issued (each ncclSend, ncclRecv, ...) */
static cudaStream_t g_stream = NULL;

#include "ok.h"
#include "pair.h"

static void pass(const char* part) {
  printf("PASS %s rank %d\n", part, g_rank);
  fflush(stdout);
}

static const int dt_size[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

/* Byte i of the k-th transfer from src to dst in repetition rep. */
static uint8_t pb(int src, int dst, int k, int rep, size_t i) {
  return (uint8_t)(src * 37 + dst * 11 + k * 5 + rep * 3 + i * 7 + (i >> 8));
}

/* One op of a pattern. */
typedef struct {
  int recv, peer;
  size_t count;
  int dt;
} op_t;

#define MAXOPS 64

typedef struct {
  const char* name;
  int (*ops)(op_t* o); /* this rank's ops in call order; returns how many */
  int ungrouped;       /* each op its own call */
  int allreduce;       /* an ncclAllReduce first in the group */
  int foreign;         /* malloc'd buffers instead of ncclMemAlloc'd */
} pattern_t;

static int add(op_t* o, int n, int recv, int peer, size_t count, int dt) {
  o[n].recv = recv;
  o[n].peer = peer;
  o[n].count = count;
  o[n].dt = dt;
  return n + 1;
}

static int both(op_t* o, int n, int ps, int pr, size_t count, int dt) {
  n = add(o, n, 0, ps, count, dt);
  return add(o, n, 1, pr, count, dt);
}

static int p_ring(op_t* o) { return both(o, 0, (g_rank + 1) % g_n, (g_rank + g_n - 1) % g_n, 70001, ncclFloat32); }

static int p_chain(op_t* o) {
  int n = 0;
  if (g_rank > 0) n = add(o, n, 1, g_rank - 1, 300001, ncclUint8);
  if (g_rank < g_n - 1) n = add(o, n, 0, g_rank + 1, 300001, ncclUint8);
  return n;
}

static int p_pairs(op_t* o) {
  int q = g_rank ^ 1;
  return q < g_n ? both(o, 0, q, q, 12345, ncclFloat64) : 0;
}

/* A fixed pseudo-random matrix with empty cells. */
static size_t rnd_count(int s, int d) {
  unsigned x = (unsigned)(s * 7919 + d * 104729 + 12345);
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x % 3 == 0 ? 0 : x % 40000;
}

static int p_allpairs(op_t* o) {
  int n = 0;
  for (int k = 0; k < g_n; k++) {
    int q = (g_rank + k) % g_n;
    n = add(o, n, 0, q, rnd_count(g_rank, q), ncclBfloat16);
    n = add(o, n, 1, q, rnd_count(q, g_rank), ncclBfloat16);
  }
  return n;
}

static int p_self(op_t* o) { return both(o, 0, g_rank, g_rank, 5003, ncclInt32); }

static int p_zero(op_t* o) {
  int nx = (g_rank + 1) % g_n, pv = (g_rank + g_n - 1) % g_n;
  int n = both(o, 0, nx, pv, 0, ncclFloat16);
  n = both(o, n, nx, pv, 17, ncclFloat16);
  return both(o, n, (g_rank + 2) % g_n, (g_rank + g_n - 2) % g_n, 0, ncclFloat16);
}

static int p_thrice(op_t* o) {
  int nx = (g_rank + 1) % g_n, pv = (g_rank + g_n - 1) % g_n;
  int n = add(o, 0, 0, nx, 100, ncclInt8);
  n = add(o, n, 0, nx, 200000, ncclInt8);
  n = add(o, n, 1, pv, 100, ncclInt8);
  n = add(o, n, 0, nx, 3, ncclInt8);
  n = add(o, n, 1, pv, 200000, ncclInt8);
  return add(o, n, 1, pv, 3, ncclInt8);
}

static int p_hypercube(op_t* o) {
  int n = 0;
  for (int mask = 1; mask < g_n; mask <<= 1)
    if ((g_rank ^ mask) < g_n) n = both(o, n, g_rank ^ mask, g_rank ^ mask, 1000 * (size_t)mask + 1, ncclFloat8e4m3);
  return n;
}

static int p_ungrouped(op_t* o) {
  int q = g_rank ^ 1;
  if (q >= g_n) return 0;
  if (g_rank % 2 == 0) return both(o, 0, q, q, 60000, ncclUint32);
  int n = add(o, 0, 1, q, 60000, ncclUint32);
  return add(o, n, 0, q, 60000, ncclUint32);
}

static int p_dtypes(op_t* o) {
  int dts[5] = {ncclInt8, ncclUint64, ncclFloat16, ncclFloat32, ncclFloat8e5m2}, n = 0;
  for (int i = 0; i < 5; i++) n = both(o, n, (g_rank + 1) % g_n, (g_rank + g_n - 1) % g_n, 1000 + 7 * (size_t)i, dts[i]);
  return n;
}

static void* xalloc(size_t n, int foreign) {
  void* p = NULL;
  if (foreign) {
    p = calloc(1, n);
  } else {
    OK(ncclMemAlloc(&p, n));
    memset(p, 0, n);
  }
  return p;
}

static void xfree(void* p, int foreign) {
  if (foreign)
    free(p);
  else
    OK(ncclMemFree(p));
}

/* run_pattern runs p twice on c and checks every received byte. */
static void run_pattern(ncclComm_t c, const pattern_t* p) {
  op_t o[MAXOPS];
  int n = p->ops(o);
  uint8_t* buf[MAXOPS];
  uint8_t* base[MAXOPS];
  int k[MAXOPS];
  for (int i = 0; i < n; i++) {
    size_t nb = o[i].count * dt_size[o[i].dt];
    base[i] = xalloc(nb + 64, p->foreign);
    buf[i] = base[i] + 1 + (2 * i) % 13; /* any alignment */
    k[i] = 0;
    for (int j = 0; j < i; j++)
      if (o[j].peer == o[i].peer && o[j].recv == o[i].recv) k[i]++;
  }
  float* ar = NULL;
  if (p->allreduce) OK(ncclMemAlloc((void**)&ar, 8000));
  for (int rep = 0; rep < 2; rep++) {
    for (int i = 0; i < n; i++) {
      size_t nb = o[i].count * dt_size[o[i].dt];
      for (size_t b = 0; b < nb; b++) buf[i][b] = o[i].recv ? 0 : pb(g_rank, o[i].peer, k[i], rep, b);
    }
    if (!p->ungrouped) OK(ncclGroupStart());
    if (p->allreduce) {
      for (int i = 0; i < 1000; i++) ar[i] = (float)(g_rank + i);
      OK(ncclAllReduce(ar, ar + 1000, 1000, ncclFloat32, ncclSum, c, g_stream));
      g_calls++;
    }
    for (int i = 0; i < n; i++) {
      if (o[i].recv)
        OK(ncclRecv(buf[i], o[i].count, (ncclDataType_t)o[i].dt, o[i].peer, c, g_stream));
      else
        OK(ncclSend(buf[i], o[i].count, (ncclDataType_t)o[i].dt, o[i].peer, c, g_stream));
      g_calls++;
    }
    if (!p->ungrouped) OK(ncclGroupEnd());
    OK(theseusStreamSynchronize(c, g_stream));
    for (int i = 0; i < n; i++) {
      if (!o[i].recv) continue;
      size_t nb = o[i].count * dt_size[o[i].dt];
      for (size_t b = 0; b < nb; b++) {
        uint8_t want = pb(o[i].peer, g_rank, k[i], rep, b);
        if (buf[i][b] != want) {
          CHECK(0, "%s rep %d: receive %d from rank %d: byte %zu of %zu is %u, want %u", p->name, rep, k[i], o[i].peer, b, nb,
                buf[i][b], want);
          break;
        }
      }
    }
    if (p->allreduce)
      for (int i = 0; i < 1000; i++) {
        float want = (float)(g_n * i + g_n * (g_n - 1) / 2);
        if (ar[1000 + i] != want) {
          CHECK(0, "%s: allreduce [%d] = %g, want %g", p->name, i, ar[1000 + i], want);
          break;
        }
      }
  }
  for (int i = 0; i < n; i++) xfree(base[i], p->foreign);
  if (ar) OK(ncclMemFree(ar));
  pass(p->name);
}

/* In-place gather and scatter as nccl-tests writes them (grouped send and
 * receive; the root's own block is both the send and the receive). */
static void gather_scatter_inplace(ncclComm_t c) {
  const size_t count = 4099;
  const int root = g_n - 1;
  uint8_t* rb;
  OK(ncclMemAlloc((void**)&rb, count * 4 * g_n + 16));
  for (int rep = 0; rep < 2; rep++) {
    memset(rb, 0, count * 4 * g_n);
    for (size_t b = 0; b < count * 4; b++) rb[g_rank * count * 4 + b] = pb(g_rank, root, 0, rep, b);
    OK(ncclGroupStart());
    OK(ncclSend(rb + g_rank * count * 4, count, ncclFloat32, root, c, g_stream));
    if (g_rank == root)
      for (int r = 0; r < g_n; r++) OK(ncclRecv(rb + r * count * 4, count, ncclFloat32, r, c, g_stream));
    OK(ncclGroupEnd());
    OK(theseusStreamSynchronize(c, g_stream));
    g_calls += 1 + (g_rank == root ? g_n : 0);
    if (g_rank == root)
      for (int r = 0; r < g_n; r++)
        for (size_t b = 0; b < count * 4; b++)
          if (rb[r * count * 4 + b] != pb(r, root, 0, rep, b)) {
            CHECK(0, "in-place gather: block %d byte %zu", r, b);
            break;
          }
    /* Scatter in place: the root's block for itself stays where it is. */
    if (g_rank == root)
      for (int r = 0; r < g_n; r++)
        for (size_t b = 0; b < count * 4; b++) rb[r * count * 4 + b] = pb(root, r, 1, rep, b);
    OK(ncclGroupStart());
    if (g_rank == root)
      for (int r = 0; r < g_n; r++) OK(ncclSend(rb + r * count * 4, count, ncclFloat32, r, c, g_stream));
    OK(ncclRecv(rb + g_rank * count * 4, count, ncclFloat32, root, c, g_stream));
    OK(ncclGroupEnd());
    OK(theseusStreamSynchronize(c, g_stream));
    g_calls += 1 + (g_rank == root ? g_n : 0);
    for (size_t b = 0; b < count * 4; b++)
      if (rb[g_rank * count * 4 + b] != pb(root, g_rank, 1, rep, b)) {
        CHECK(0, "in-place scatter: byte %zu", b);
        break;
      }
  }
  OK(ncclMemFree(rb));
  pass("gather scatter in place");
}

/* AlltoAllv of matrix m (elements of dt), twice, checked. */
static void alltoallv(ncclComm_t c, const char* name, const size_t* m, int dt) {
  size_t es = dt_size[dt], sn = 0, rn = 0;
  for (int j = 0; j < g_n; j++) {
    sn += m[g_rank * g_n + j];
    rn += m[j * g_n + g_rank];
  }
  uint8_t *sb, *rb;
  size_t* gm;
  OK(ncclMemAlloc((void**)&sb, sn * es + 16));
  OK(ncclMemAlloc((void**)&rb, rn * es + 16));
  OK(ncclMemAlloc((void**)&gm, sizeof(size_t) * g_n * g_n));
  memcpy(gm, m, sizeof(size_t) * g_n * g_n); /* the "GPU" copy */
  uint8_t *s = sb + 3, *r = rb + 5;
  for (int rep = 0; rep < 2; rep++) {
    size_t off = 0;
    for (int j = 0; j < g_n; j++)
      for (size_t b = 0; b < m[g_rank * g_n + j] * es; b++) s[off++] = pb(g_rank, j, 9, rep, b);
    memset(r, 0, rn * es);
    OK(ncclAlltoAllv(s, r, m, gm, (ncclDataType_t)dt, c, g_stream));
    g_calls++;
    OK(theseusStreamSynchronize(c, g_stream));
    off = 0;
    for (int i = 0; i < g_n; i++)
      for (size_t b = 0; b < m[i * g_n + g_rank] * es; b++, off++)
        if (r[off] != pb(i, g_rank, 9, rep, b)) {
          CHECK(0, "alltoallv %s rep %d: from rank %d byte %zu is %u", name, rep, i, b, r[off]);
          i = g_n;
          break;
        }
  }
  OK(ncclMemFree(sb));
  OK(ncclMemFree(rb));
  OK(ncclMemFree(gm));
}

static void matrices(ncclComm_t c) {
  size_t* m = calloc((size_t)g_n * g_n, sizeof(size_t));
  for (int i = 0; i < g_n; i++)
    for (int j = 0; j < g_n; j++) m[i * g_n + j] = rnd_count(i, j) / 4;
  alltoallv(c, "random", m, ncclFloat16);
  for (int i = 0; i < g_n; i++)
    for (int j = 0; j < g_n; j++) m[i * g_n + j] = j < 4 ? 20000 + (size_t)(i * 13 + j) : 10; /* 4 hot experts */
  alltoallv(c, "skewed", m, ncclFloat32);
  memset(m, 0, sizeof(size_t) * g_n * g_n);
  alltoallv(c, "empty", m, ncclInt8);
  for (int j = 0; j < g_n; j++) m[(g_n / 2) * g_n + j] = 30000 + (size_t)j;
  alltoallv(c, "single hot row", m, ncclUint8);
  free(m);
  pass("alltoallv");
}

/* Bad calls: the reason, the result, nothing launched. */
static void bad_calls(ncclComm_t c, void* a) {
  struct {
    ncclResult_t got, want;
    const char* what;
  } t[16];
  int n = 0;
  size_t* m = calloc((size_t)g_n * g_n, sizeof(size_t));
#define BAD(call, w)                                    \
  do {                                                  \
    t[n].got = (call);                                  \
    t[n].want = (w);                                    \
    t[n].what = #call;                                  \
    const char* e_ = ncclGetLastError(NULL);            \
    printf("BAD %s -> %d: %s\n", #call, t[n].got, e_); \
    n++;                                                \
  } while (0)
  BAD(ncclSend(a, 1, ncclFloat32, g_n, c, g_stream), ncclInvalidArgument);
  BAD(ncclRecv(NULL, 4, ncclFloat32, 0, c, g_stream), ncclInvalidArgument);
  BAD(ncclSend(a, 1, (ncclDataType_t)12, 0, c, g_stream), ncclInvalidArgument);
  BAD(ncclSend(a, 1, ncclFloat32, g_rank, c, g_stream), ncclInvalidUsage); /* a send to itself, no receive */
  BAD(ncclSend(a, 1 << 20, ncclFloat32, (g_rank + 1) % g_n, c, g_stream), ncclInvalidArgument); /* 4 MiB from 4 KiB */
  /* Each on this rank's own cell: every rank refuses its call. */
  size_t* me = &m[g_rank * g_n + g_rank];
  *me = 1;
  BAD(ncclAlltoAllv(a, a, m, NULL, ncclFloat32, c, g_stream), ncclInvalidArgument);
  *me = (size_t)1 << 63;
  BAD(ncclAlltoAllv(a, a, m, m, ncclInt8, c, g_stream), ncclInvalidArgument);
  *me = 4096;
  BAD(ncclAlltoAllv(a, a, m, m, ncclInt32, c, g_stream), ncclInvalidArgument); /* 16 KiB from 4 KiB */
#undef BAD
  for (int i = 0; i < n; i++) CHECK(t[i].got == t[i].want, "%s = %d, want %d", t[i].what, (int)t[i].got, (int)t[i].want);
  free(m);
  pass("bad calls");
}

static const pattern_t patterns[] = {
    {"ring", p_ring, 0, 0, 0},
    {"chain", p_chain, 0, 0, 0},
    {"pairs", p_pairs, 0, 0, 0},
    {"all-pairs", p_allpairs, 0, 0, 0},
    {"self", p_self, 0, 0, 0},
    {"zero counts", p_zero, 0, 0, 0},
    {"same peer thrice", p_thrice, 0, 0, 0},
    {"hypercube", p_hypercube, 0, 0, 0},
    {"collective in the group", p_ring, 0, 1, 0},
    {"ungrouped", p_ungrouped, 1, 0, 0},
    {"datatypes", p_dtypes, 0, 0, 0},
    {"malloc buffers", p_allpairs, 0, 0, 1},
};

static int mode_p2p(int argc, char** argv) {
  ncclUniqueId id;
  pair_id(argc > 4 ? argv[4] : NULL, &id);
  ncclComm_t c;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  for (size_t i = 0; i < sizeof(patterns) / sizeof(patterns[0]); i++) run_pattern(c, &patterns[i]);
  gather_scatter_inplace(c);
  matrices(c);
  void* a;
  OK(ncclMemAlloc(&a, 4096));
  uint64_t nat = 0, fb = 1, rej = 1;
  OK(theseusCommStats(c, &nat, &fb, &rej));
  CHECK(nat == g_calls && fb == 0 && rej == 0, "stats: native %llu (want %llu), fallback %llu, rejected %llu",
        (unsigned long long)nat, (unsigned long long)g_calls, (unsigned long long)fb, (unsigned long long)rej);
  pass("every call native");
  bad_calls(c, a);
  ncclResult_t st;
  OK(ncclCommGetAsyncError(c, &st));
  CHECK(st == ncclSuccess, "async error %d after the bad calls", (int)st);
  OK(ncclMemFree(a));
  OK(ncclCommDestroy(c));
  pass("destroy");
  return g_fail;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Rank 1 receives 2 Mi floats where rank 0 sends 16 Mi (64 MiB): more than
 * the FIFOs hold (16 MiB with the built-in 32 channels for 2 ranks), so the
 * send cannot complete before the receive has looked at it (both fail, and
 * rank 0 stays until rank 1 is done). */
static int mode_mismatch(int argc, char** argv) {
  ncclUniqueId id;
  pair_id(argc > 4 ? argv[4] : NULL, &id);
  ncclComm_t c;
  OK(ncclCommInitRank(&c, g_n, id, g_rank));
  const size_t sent = (size_t)16 << 20, got = (size_t)2 << 20;
  float* buf;
  OK(ncclMemAlloc((void**)&buf, sent * 4));
  memset(buf, 0, sent * 4);
  double t0 = now();
  ncclResult_t r = ncclSuccess;
  if (g_rank == 0) r = ncclSend(buf, sent, ncclFloat32, 1, c, g_stream);
  if (g_rank == 1) r = ncclRecv(buf, got, ncclFloat32, 0, c, g_stream);
  if (r == ncclSuccess) r = theseusStreamSynchronize(c, g_stream);
  ncclResult_t as = ncclSuccess;
  OK(ncclCommGetAsyncError(c, &as));
  const char* e = ncclGetLastError(c);
  printf("MISMATCH rank %d -> %d async %d after %.3f s: %s\n", g_rank, (int)r, (int)as, now() - t0, e ? e : "");
  if (g_rank <= 1) {
    CHECK(r == ncclInvalidUsage, "a send and a receive of different counts: %d", (int)r);
    CHECK(e && strstr(e, "disagree") && strstr(e, g_rank == 0 ? "rank 1" : "rank 0"), "reason: %s", e ? e : "(null)");
  }
  if (g_rank == 1)
    for (size_t i = got; i < sent; i++)
      if (buf[i] != 0) {
        CHECK(0, "float %zu past the receive was written", i);
        break;
      }
  pass("mismatch");
  OK(ncclCommAbort(c));
  return g_fail;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc < 4) {
    fprintf(stderr, "usage: p2p_test p2p|mismatch RANK NRANKS [IDHEX]\n");
    return 102;
  }
  g_rank = atoi(argv[2]);
  g_n = atoi(argv[3]);
  int rc;
  if (strcmp(argv[1], "p2p") == 0)
    rc = mode_p2p(argc, argv);
  else if (strcmp(argv[1], "mismatch") == 0)
    rc = mode_mismatch(argc, argv);
  else
    return 102;
  printf("DONE rank %d failures %d\n", g_rank, rc);
  return rc > 99 ? 99 : rc;
}
