/* fakenccl.c — a stand-in "real NCCL" for the fallback tests on machines
 * without GPUs (THESEUS_NCCL_LIB_PATH=libfakenccl.so). It implements the
 * calls Theseus forwards (send/recv, groups, float32 allreduce with sum or a
 * pre-multiplied sum, registration, communicator lifetime) between processes
 * of one host through files in $FAKE_NCCL_DIR: a send writes a file
 * (atomically, by rename), a receive waits for it. Receives in a group wait
 * at ncclGroupEnd. Every call is counted in $FAKE_NCCL_DIR/calls.<pid>
 * (nothing is counted without FAKE_NCCL_DIR).
 * Built and used only by ncclabi/capi_test.go.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum { ok = 0, sysErr = 2, invArg = 4, invUsage = 5 } res_t;
typedef struct { char internal[128]; } uid_t_;

struct fcomm {
  char token[40];
  int rank, n;
  unsigned long long* sseq; /* per peer */
  unsigned long long* rseq;
  float scalars[16];
  int nscalars;
};
typedef struct fcomm* comm_t;

/* Calls are counted only when FAKE_NCCL_DIR names a directory (tests use a
 * temporary one; nothing is left in /tmp). */
static const char* dir(void) { return getenv("FAKE_NCCL_DIR"); }

/* Where sends leave their files (the fallback tests set FAKE_NCCL_DIR). */
static const char* data_dir(void) { return dir() ? dir() : "/tmp"; }

static void count_call(const char* name) {
  char p[512];
  if (!dir()) return;
  snprintf(p, sizeof p, "%s/calls.%d", dir(), (int)getpid());
  FILE* f = fopen(p, "a");
  if (f) {
    fprintf(f, "%s\n", name);
    fclose(f);
  }
}

static char last_error[256];

int ncclGetVersion(int* v) { *v = 22803; return ok; }
const char* ncclGetLastError(comm_t c) { (void)c; return last_error; }
const char* ncclGetErrorString(int r) { return r ? "fake error" : "no error"; }

res_t ncclGetUniqueId(uid_t_* id) {
  count_call("ncclGetUniqueId");
  memset(id, 0, sizeof *id);
  unsigned long long a = (unsigned long long)getpid() * 2654435761ull ^ (unsigned long long)time(NULL);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(id->internal, sizeof id->internal, "FAKE%llx%lx", a, (long)ts.tv_nsec);
  return ok;
}

res_t ncclCommInitRank(comm_t* c, int n, uid_t_ id, int rank) {
  count_call("ncclCommInitRank");
  if (strncmp(id.internal, "FAKE", 4) != 0) {
    snprintf(last_error, sizeof last_error, "fake: not a fake id");
    return invArg;
  }
  struct fcomm* f = calloc(1, sizeof *f);
  snprintf(f->token, sizeof f->token, "%s", id.internal);
  f->rank = rank;
  f->n = n;
  f->sseq = calloc((size_t)n, sizeof *f->sseq);
  f->rseq = calloc((size_t)n, sizeof *f->rseq);
  *c = f;
  return ok;
}

res_t ncclCommSplit(comm_t c, int color, int key, comm_t* nc, void* cfg) {
  (void)c; (void)color; (void)key; (void)cfg;
  count_call("ncclCommSplit");
  *nc = NULL; /* not needed by the tests */
  return ok;
}

res_t ncclCommCount(comm_t c, int* n) { *n = c->n; return ok; }
res_t ncclCommUserRank(comm_t c, int* r) { *r = c->rank; return ok; }
res_t ncclCommFinalize(comm_t c) { (void)c; count_call("ncclCommFinalize"); return ok; }
res_t ncclCommDestroy(comm_t c) {
  count_call("ncclCommDestroy");
  free(c->sseq);
  free(c->rseq);
  free(c);
  return ok;
}
res_t ncclCommAbort(comm_t c) { count_call("ncclCommAbort"); return ncclCommDestroy(c); }
res_t ncclCommGetAsyncError(comm_t c, int* st) { (void)c; *st = ok; return ok; }

/* ---- transport ---- */

static void path(char* p, size_t n, comm_t c, int from, int to, unsigned long long seq, const char* sfx) {
  snprintf(p, n, "%s/%s-%d-%d-%llu%s", data_dir(), c->token, from, to, seq, sfx);
}

static res_t do_send(comm_t c, const void* buf, size_t bytes, int peer) {
  char tmp[512], fin[512];
  unsigned long long s = c->sseq[peer]++;
  path(tmp, sizeof tmp, c, c->rank, peer, s, ".tmp");
  path(fin, sizeof fin, c, c->rank, peer, s, "");
  FILE* f = fopen(tmp, "wb");
  if (!f) return sysErr;
  if (bytes && fwrite(buf, 1, bytes, f) != bytes) { fclose(f); return sysErr; }
  fclose(f);
  return rename(tmp, fin) ? sysErr : ok;
}

static res_t do_recv(comm_t c, void* buf, size_t bytes, int peer) {
  char fin[512];
  unsigned long long s = c->rseq[peer]++;
  path(fin, sizeof fin, c, peer, c->rank, s, "");
  for (long i = 0; i < 600000; i++) { /* up to a minute */
    FILE* f = fopen(fin, "rb");
    if (f) {
      size_t got = bytes ? fread(buf, 1, bytes, f) : 0;
      fclose(f);
      unlink(fin);
      if (got != bytes) {
        snprintf(last_error, sizeof last_error, "fake: short message %zu of %zu", got, bytes);
        return sysErr;
      }
      return ok;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  snprintf(last_error, sizeof last_error, "fake: timed out waiting for %s", fin);
  return sysErr;
}

static const int sizes[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

static int depth;
static struct pending { comm_t c; void* buf; size_t bytes; int peer; } pend[1024];
static int npend;

res_t ncclGroupStart(void) { depth++; return ok; }
res_t ncclGroupEnd(void) {
  if (depth <= 0) return invUsage;
  if (--depth > 0) return ok;
  res_t r = ok;
  for (int i = 0; i < npend; i++) {
    res_t x = do_recv(pend[i].c, pend[i].buf, pend[i].bytes, pend[i].peer);
    if (x != ok && r == ok) r = x;
  }
  npend = 0;
  return r;
}

res_t ncclSend(const void* buf, size_t count, int dt, int peer, comm_t c, void* stream) {
  (void)stream;
  count_call("ncclSend");
  return do_send(c, buf, count * (size_t)sizes[dt], peer);
}

res_t ncclRecv(void* buf, size_t count, int dt, int peer, comm_t c, void* stream) {
  (void)stream;
  count_call("ncclRecv");
  size_t bytes = count * (size_t)sizes[dt];
  if (depth > 0) {
    if (npend >= 1024) return invUsage;
    pend[npend++] = (struct pending){c, buf, bytes, peer};
    return ok;
  }
  return do_recv(c, buf, bytes, peer);
}

res_t ncclRedOpCreatePreMulSum(int* op, void* scalar, int dt, int residence, comm_t c) {
  count_call("ncclRedOpCreatePreMulSum");
  if (dt != 7 || residence != 1 || c->nscalars >= 16) return invArg;
  c->scalars[c->nscalars] = *(float*)scalar;
  *op = 5 + c->nscalars++;
  return ok;
}

res_t ncclRedOpDestroy(int op, comm_t c) { (void)op; (void)c; count_call("ncclRedOpDestroy"); return ok; }

/* float32 allreduce: sum, or a pre-multiplied sum. */
res_t ncclAllReduce(const void* send, void* recv, size_t count, int dt, int op, comm_t c, void* stream) {
  (void)stream;
  count_call("ncclAllReduce");
  if (dt != 7 || (op != 0 && (op < 5 || op >= 5 + c->nscalars))) {
    snprintf(last_error, sizeof last_error, "fake: allreduce supports float32 sum and premulsum only");
    return invArg;
  }
  float k = op == 0 ? 1.0f : c->scalars[op - 5];
  size_t bytes = count * 4;
  float* mine = malloc(bytes ? bytes : 1);
  float* tmp = malloc(bytes ? bytes : 1);
  for (size_t i = 0; i < count; i++) mine[i] = k * ((const float*)send)[i];
  for (int p = 0; p < c->n; p++)
    if (p != c->rank) do_send(c, mine, bytes, p);
  float* out = recv;
  float* acc = calloc(count ? count : 1, 4);
  for (int p = 0; p < c->n; p++) {
    const float* src = mine;
    if (p != c->rank) {
      if (do_recv(c, tmp, bytes, p) != ok) { free(mine); free(tmp); free(acc); return sysErr; }
      src = tmp;
    }
    for (size_t i = 0; i < count; i++) acc[i] += src[i];
  }
  memcpy(out, acc, bytes);
  free(mine);
  free(tmp);
  free(acc);
  return ok;
}

res_t ncclCommRegister(comm_t c, void* buf, size_t size, void** h) {
  (void)c; (void)size;
  count_call("ncclCommRegister");
  *h = buf;
  return ok;
}
res_t ncclCommDeregister(comm_t c, void* h) { (void)c; (void)h; count_call("ncclCommDeregister"); return ok; }
