/* minimpi.c — see mpi.h. Every collective is an allgather of each rank's
 * bytes through files <MINIMPI_DIR>/<comm>.<seq>.<rank> (written to a
 * temporary name, then renamed, so a reader never sees half a file), which
 * every member reads once all are there. Waits are bounded by
 * MINIMPI_TIMEOUT seconds (default 600); a timeout aborts the process. */
#define _GNU_SOURCE
#include "mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXCOMMS 64

struct comm {
  int used;
  char name[128];
  int size, rank;
  int* world; /* world rank of each member */
  unsigned long seq;
  int splits;
};

static struct comm comms[MAXCOMMS];
static int wrank = -1, wsize = -1;
static char dir[512];
static double timeout_s = 600;

static void die(const char* msg) {
  fprintf(stderr, "minimpi rank %d: %s\n", wrank, msg);
  fflush(stderr);
  _exit(70);
}

static int type_size(MPI_Datatype t) {
  switch (t) {
    case MPI_BYTE: case MPI_CHAR: return 1;
    case MPI_INT: case MPI_FLOAT: return 4;
    case MPI_LONG: case MPI_LONG_LONG: case MPI_INT64_T: case MPI_UINT64_T: case MPI_DOUBLE: case MPI_UNSIGNED_LONG: return 8;
  }
  die("unsupported datatype");
  return 0;
}

int MPI_Init(int* argc, char*** argv) {
  (void)argc; (void)argv;
  const char *r = getenv("MINIMPI_RANK"), *s = getenv("MINIMPI_SIZE"), *d = getenv("MINIMPI_DIR");
  if (!r || !s || !d) {
    /* a lone process: rank 0 of 1, collectives are copies */
    r = "0";
    s = "1";
    d = "/tmp";
  }
  wrank = atoi(r);
  wsize = atoi(s);
  snprintf(dir, sizeof dir, "%s", d);
  if (getenv("MINIMPI_TIMEOUT")) timeout_s = atof(getenv("MINIMPI_TIMEOUT"));
  struct comm* w = &comms[0];
  w->used = 1;
  snprintf(w->name, sizeof w->name, "w");
  w->size = wsize;
  w->rank = wrank;
  w->world = malloc(sizeof(int) * (size_t)wsize);
  for (int i = 0; i < wsize; i++) w->world[i] = i;
  return MPI_SUCCESS;
}

int MPI_Initialized(int* flag) { *flag = wrank >= 0; return MPI_SUCCESS; }
int MPI_Finalize(void) { MPI_Barrier(MPI_COMM_WORLD); return MPI_SUCCESS; }
int MPI_Abort(MPI_Comm comm, int code) { (void)comm; fprintf(stderr, "minimpi rank %d: MPI_Abort(%d)\n", wrank, code); _exit(code ? code : 1); }

static struct comm* get(MPI_Comm c) {
  if (c < 0 || c >= MAXCOMMS || !comms[c].used) die("bad communicator");
  return &comms[c];
}

int MPI_Comm_size(MPI_Comm c, int* size) { *size = get(c)->size; return MPI_SUCCESS; }
int MPI_Comm_rank(MPI_Comm c, int* rank) { *rank = get(c)->rank; return MPI_SUCCESS; }

/* Allgather of n bytes from every member: out[r*n ...] is member r's. */
static void exchange(struct comm* c, const void* mine, size_t n, void* out) {
  unsigned long seq = c->seq++;
  char tmp[700], fin[700];
  snprintf(tmp, sizeof tmp, "%s/%s.%lu.%d.tmp", dir, c->name, seq, c->rank);
  snprintf(fin, sizeof fin, "%s/%s.%lu.%d", dir, c->name, seq, c->rank);
  FILE* f = fopen(tmp, "wb");
  if (!f || (n && fwrite(mine, 1, n, f) != n) || fclose(f) != 0 || rename(tmp, fin) != 0) die("cannot write an exchange file");
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < c->size; r++) {
    snprintf(fin, sizeof fin, "%s/%s.%lu.%d", dir, c->name, seq, r);
    for (;;) {
      FILE* g = fopen(fin, "rb");
      if (g) {
        size_t got = n ? fread((char*)out + (size_t)r * n, 1, n, g) : 0;
        fclose(g);
        if (got != n) die("short exchange file");
        break;
      }
      struct timespec now, ts = {0, 200000};
      clock_gettime(CLOCK_MONOTONIC, &now);
      if ((double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec) > timeout_s) die("timed out waiting for a peer");
      nanosleep(&ts, NULL);
    }
  }
}

int MPI_Barrier(MPI_Comm comm) {
  struct comm* c = get(comm);
  char* all = malloc((size_t)c->size);
  char x = 1;
  exchange(c, &x, 1, all);
  free(all);
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm) {
  struct comm* c = get(comm);
  size_t n = (size_t)count * (size_t)type_size(type);
  char* all = malloc(n * (size_t)c->size + 1);
  exchange(c, buf, n, all);
  memcpy(buf, all + (size_t)root * n, n);
  free(all);
  return MPI_SUCCESS;
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm) {
  struct comm* c = get(comm);
  size_t n = (size_t)recvcount * (size_t)type_size(recvtype);
  const void* mine = sendbuf == MPI_IN_PLACE ? (char*)recvbuf + (size_t)c->rank * n : sendbuf;
  if (sendbuf != MPI_IN_PLACE && (size_t)sendcount * (size_t)type_size(sendtype) != n) die("allgather size mismatch");
  char* copy = malloc(n + 1);
  memcpy(copy, mine, n);
  exchange(c, copy, n, recvbuf);
  free(copy);
  return MPI_SUCCESS;
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm) {
  struct comm* c = get(comm);
  size_t n = (size_t)sendcount * (size_t)type_size(sendtype);
  (void)recvcount; (void)recvtype;
  char* all = malloc(n * (size_t)c->size + 1);
  exchange(c, sendbuf == MPI_IN_PLACE ? (char*)recvbuf + (size_t)c->rank * n : sendbuf, n, all);
  if (c->rank == root) memcpy(recvbuf, all, n * (size_t)c->size);
  free(all);
  return MPI_SUCCESS;
}

#define RED(T)                                                              \
  do {                                                                      \
    T* o = (T*)recvbuf;                                                     \
    for (int i = 0; i < count; i++) {                                       \
      T acc = ((T*)all)[i];                                                 \
      for (int r = 1; r < c->size; r++) {                                   \
        T v = ((T*)(all + (size_t)r * n))[i];                               \
        acc = op == MPI_SUM ? acc + v : op == MPI_MIN ? (v < acc ? v : acc) \
                                                      : (v > acc ? v : acc); \
      }                                                                     \
      o[i] = acc;                                                           \
    }                                                                       \
  } while (0)

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm) {
  struct comm* c = get(comm);
  size_t n = (size_t)count * (size_t)type_size(type);
  char* all = malloc(n * (size_t)c->size + 1);
  exchange(c, sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf, n, all);
  if (op != MPI_SUM && op != MPI_MIN && op != MPI_MAX) die("unsupported op");
  switch (type) {
    case MPI_INT: RED(int); break;
    case MPI_LONG: RED(long); break;
    case MPI_LONG_LONG: case MPI_INT64_T: RED(long long); break;
    case MPI_UINT64_T: case MPI_UNSIGNED_LONG: RED(unsigned long long); break;
    case MPI_FLOAT: RED(float); break;
    case MPI_DOUBLE: RED(double); break;
    default: die("unsupported allreduce type");
  }
  free(all);
  return MPI_SUCCESS;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm) {
  struct comm* c = get(comm);
  int mine[3] = {color, key, c->rank};
  int* all = malloc(sizeof mine * (size_t)c->size);
  exchange(c, mine, sizeof mine, all);
  int split = c->splits++;
  int slot = -1;
  for (int i = 1; i < MAXCOMMS; i++)
    if (!comms[i].used) { slot = i; break; }
  if (slot < 0) die("too many communicators");
  struct comm* n = &comms[slot];
  memset(n, 0, sizeof *n);
  n->used = 1;
  unsigned long h = 5381; /* the parent's name, hashed: identical on every member */
  for (const char* p = c->name; *p; p++) h = h * 33 + (unsigned char)*p;
  snprintf(n->name, sizeof n->name, "%lx-%d-%d", h, split, color);
  n->world = malloc(sizeof(int) * (size_t)c->size);
  /* members: same color, ordered by (key, rank) */
  for (int pass = 0; pass < c->size; pass++) {
    int best = -1;
    for (int r = 0; r < c->size; r++) {
      int* e = all + 3 * r;
      if (e[0] != color) continue;
      int taken = 0;
      for (int k = 0; k < n->size; k++) if (n->world[k] == c->world[r]) taken = 1;
      if (taken) continue;
      if (best < 0 || e[1] < all[3 * best + 1] || (e[1] == all[3 * best + 1] && r < best)) best = r;
    }
    if (best < 0) break;
    if (best == c->rank) n->rank = n->size;
    n->world[n->size++] = c->world[best];
  }
  free(all);
  *newcomm = slot;
  return MPI_SUCCESS;
}

int MPI_Comm_free(MPI_Comm* comm) {
  if (*comm > 0 && *comm < MAXCOMMS) {
    free(comms[*comm].world);
    comms[*comm].used = 0;
  }
  *comm = -1;
  return MPI_SUCCESS;
}
