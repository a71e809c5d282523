/* lostpeer.c — a rank dies in the middle of a collective; the survivors
 * abort and destroy their communicator as PyTorch's watchdog does, and must
 * neither crash nor hang (issue 21, "the crash after a lost peer").
 *
 *   lostpeer MODE RANK NRANKS [IDHEX]   rank 0 makes the id and prints "ID <hex>"
 *
 * Every rank initialises, makes a few checked allreduces, and starts a
 * watchdog thread that polls ncclCommGetAsyncError (as ProcessGroupNCCL's
 * watchdog does, but every 200 us). After one more small allreduce (a
 * barrier) the last rank enqueues a large allreduce and kills itself
 * (SIGKILL). The others enqueue the same calls and, by MODE:
 *   sync     block in theseusStreamSynchronize, which the watchdog's
 *            ncclCommAbort (from its thread, on the asynchronous error)
 *            must end;
 *   call     keep making collectives of new sizes (a new size sets up new
 *            launch state, a new schedule exchanges with the peers, the
 *            dead one included) until one fails, while the watchdog aborts;
 *            then ncclCommAbort on the main thread too, racing it;
 *   destroy  block in theseusStreamSynchronize until it fails, then call
 *            ncclCommDestroy while the watchdog calls ncclCommAbort at the
 *            same moment.
 * Afterwards each survivor polls ncclCommGetAsyncError and makes a
 * collective on the dead handle (both must fail cleanly) and frees its
 * buffers. Checks: the first error comes within THESEUS_TIMEOUT of the
 * call (it is an error, not a hang: the watchdog saw an asynchronous
 * error); nothing crashes. Output: "LOSTPEER rank R mode M: ..." and
 * "DONE rank R"; exit 0 when every check passed.
 *
 * LOSTPEER_CUDA=1 runs on the CUDA backend (device 0's primary context,
 * a stream of the program's own), for ncclabi/gpu/run_lostpeer.sh. */
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

#define BIG (1u << 20) /* float32 elements of the large call: 4 MiB */

static ncclComm_t g_comm;
static cudaStream_t g_stream;
static float* g_buf;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The watchdog: polls the asynchronous error; on the first error (or when
 * told to by the main thread) aborts the communicator. */
static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int saw, aborted, stop, go;
  ncclResult_t async, abort_rc;
  pthread_barrier_t race; /* destroy mode: the watchdog's abort and the main thread's destroy start together */
  int race_mode;
} wd = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

static void* watchdog(void* arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&wd.mu);
    int stop = wd.stop;
    pthread_mutex_unlock(&wd.mu);
    if (stop) break;
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(g_comm, &st);
    pthread_mutex_lock(&wd.mu);
    int first = 0;
    if (!wd.saw && (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress))) {
      wd.saw = 1;
      wd.async = r != ncclSuccess ? r : st;
      first = 1;
      pthread_cond_broadcast(&wd.cv);
    }
    pthread_mutex_unlock(&wd.mu);
    if (first) {
      if (wd.race_mode) pthread_barrier_wait(&wd.race);
      ncclResult_t ar = ncclCommAbort(g_comm);
      pthread_mutex_lock(&wd.mu);
      wd.aborted = 1;
      wd.abort_rc = ar;
      pthread_cond_broadcast(&wd.cv);
      pthread_mutex_unlock(&wd.mu);
      /* PyTorch's watchdog keeps polling its work items: the handle is
       * dead now, and the call must say so (not crash). */
      for (int i = 0; i < 200; i++) {
        ncclResult_t s2;
        ncclCommGetAsyncError(g_comm, &s2);
        usleep(100);
      }
      break;
    }
    usleep(200);
  }
  return NULL;
}

static void wait_aborted(void) {
  pthread_mutex_lock(&wd.mu);
  while (!wd.aborted) pthread_cond_wait(&wd.cv, &wd.mu);
  pthread_mutex_unlock(&wd.mu);
}

static ncclResult_t allreduce(size_t count) {
  return ncclAllReduce(g_buf, g_buf + BIG, count, ncclFloat32, ncclSum, g_comm, g_stream);
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: lostpeer sync|call|destroy RANK NRANKS [IDHEX]\n");
    return 2;
  }
  const char* mode = argv[1];
  g_rank = atoi(argv[2]);
  g_n = atoi(argv[3]);
  const char* t = getenv("THESEUS_TIMEOUT");
  double timeout_ms = t && *t ? atof(t) : 60000;
  if (getenv("LOSTPEER_CUDA") && atoi(getenv("LOSTPEER_CUDA"))) {
    cudadl_setup();
    g_stream = (cudaStream_t)cudadl_stream();
  }
  ncclUniqueId id;
  pair_id(argc > 4 ? argv[4] : NULL, &id);
  OK(ncclCommInitRank(&g_comm, g_n, id, g_rank));
  OK(ncclMemAlloc((void**)&g_buf, 2 * (size_t)BIG * sizeof(float)));
  for (int i = 0; i < 3; i++) {
    OK(allreduce(1024));
    OK(theseusStreamSynchronize(g_comm, g_stream));
  }
  OK(allreduce(BIG));
  OK(theseusStreamSynchronize(g_comm, g_stream));
  wd.race_mode = strcmp(mode, "destroy") == 0;
  pthread_barrier_init(&wd.race, NULL, 2);
  pthread_t th;
  pthread_create(&th, NULL, watchdog, NULL);
  /* A barrier: when the victim's call of it is done, every rank has
   * enqueued it, so every survivor is past its checked calls above (the
   * survivors do not wait for it: its launch may be in flight when the
   * victim dies). */
  double t0 = now_ms();
  ncclResult_t first = allreduce(8);
  if (g_rank == g_n - 1) {
    /* The victim: a collective in flight, then gone. */
    OK(first);
    OK(theseusStreamSynchronize(g_comm, g_stream));
    allreduce(BIG);
    fflush(stdout);
    raise(SIGKILL);
  }
  if (first == ncclSuccess) first = allreduce(BIG);
  if (strcmp(mode, "call") == 0) {
    size_t count = 3;
    for (int i = 0; first == ncclSuccess && i < 100000; i++) {
      first = allreduce(count);
      count = count * 7 % BIG + 1;
    }
  } else if (first == ncclSuccess) {
    first = theseusStreamSynchronize(g_comm, g_stream);
  }
  /* On the GPU the survivor's calls may all have completed before the
   * victim died (its kernels had done their part): then the loss shows only
   * as the asynchronous error, which the watchdog must see within the
   * timeout. */
  if (first == ncclSuccess) {
    pthread_mutex_lock(&wd.mu);
    while (!wd.saw && now_ms() - t0 < timeout_ms) {
      pthread_mutex_unlock(&wd.mu);
      usleep(1000);
      pthread_mutex_lock(&wd.mu);
    }
    pthread_mutex_unlock(&wd.mu);
  }
  double t_err = now_ms() - t0;
  CHECK(first != ncclSuccess || wd.saw, "mode %s: no call failed and no asynchronous error after the peer died", mode);
  CHECK(t_err < timeout_ms, "mode %s: the first error came after %.0f ms, THESEUS_TIMEOUT is %.0f ms", mode, t_err, timeout_ms);
  ncclResult_t second = ncclSuccess;
  if (strcmp(mode, "destroy") == 0) {
    pthread_mutex_lock(&wd.mu);
    while (!wd.saw) pthread_cond_wait(&wd.cv, &wd.mu);
    pthread_mutex_unlock(&wd.mu);
    pthread_barrier_wait(&wd.race);
    second = ncclCommDestroy(g_comm); /* racing the watchdog's ncclCommAbort */
  } else if (strcmp(mode, "call") == 0) {
    second = ncclCommAbort(g_comm); /* racing the watchdog's */
  }
  wait_aborted();
  pthread_mutex_lock(&wd.mu);
  wd.stop = 1;
  pthread_mutex_unlock(&wd.mu);
  pthread_join(th, NULL);
  CHECK(wd.saw, "the watchdog saw no asynchronous error");
  CHECK(wd.abort_rc == ncclSuccess || wd.abort_rc == ncclInvalidArgument, "watchdog's ncclCommAbort = %d", (int)wd.abort_rc);
  CHECK(second == ncclSuccess || second == ncclInvalidArgument, "main thread's second call = %d", (int)second);
  /* The handle is dead: every call on it fails cleanly. */
  ncclResult_t st;
  ncclResult_t ar = ncclCommGetAsyncError(g_comm, &st);
  CHECK(ar == ncclInvalidArgument, "ncclCommGetAsyncError after abort = %d", (int)ar);
  ncclResult_t cr = allreduce(1024);
  CHECK(cr == ncclInvalidArgument, "ncclAllReduce after abort = %d", (int)cr);
  CHECK(ncclCommDestroy(g_comm) == ncclInvalidArgument, "ncclCommDestroy after abort");
  OK(ncclMemFree(g_buf));
  printf("LOSTPEER rank %d mode %s: first error %d (%s) after %.1f ms; async %d; watchdog abort %d; main %d\n", g_rank, mode,
         (int)first, ncclGetErrorString(first), t_err, (int)wd.async, (int)wd.abort_rc, (int)second);
  printf("DONE rank %d\n", g_rank);
  fflush(stdout);
  return g_fail ? 1 : 0;
}
