/* sigstack.c — a signal handler of the host process, installed without
 * SA_ONSTACK before the first communicator (which adds it, as the Go
 * runtime requires), runs on an alternate stack of at least 256 KiB with a
 * guard page on every thread that called into libtheseus_nccl.so, not on
 * the Go runtime's 32 KiB signal stack (which has no guard page): a
 * stack-trace printer in a SIGABRT or SIGSEGV handler, as PyTorch's
 * watchdog thread may raise, has room.
 *
 *   sigstack        one process, one rank (THESEUS_BACKEND=host)
 *
 * The handler records where it ran and uses 128 KiB of stack. Output:
 * "SIGSTACK <thread> onstack <0|1> size <bytes> used <bytes>" per thread,
 * then "DONE"; exit 0 when every thread that called into the library ran
 * the handler on such a stack. */
#include "nccl.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank, g_fail;

#include "ok.h"

#define USE (128u << 10)
#define WANT (256u << 10)

static __thread int t_onstack;
static __thread size_t t_size, t_used;

static void handler(int sig) {
  (void)sig;
  volatile char buf[USE];
  memset((char*)buf, 0x5a, sizeof buf);
  stack_t ss;
  sigaltstack(NULL, &ss);
  t_onstack = (ss.ss_flags & SS_ONSTACK) != 0;
  t_size = ss.ss_size;
  t_used = sizeof buf + (size_t)buf[7] - 0x5a;
}

static ncclComm_t comm;

static void check(const char* who) {
  raise(SIGUSR1);
  printf("SIGSTACK %s onstack %d size %zu used %zu\n", who, t_onstack, t_size, t_used);
  if (!t_onstack || t_size < WANT) {
    printf("FAIL %s: the handler ran %s, on %zu bytes\n", who, t_onstack ? "on an alternate stack" : "on the thread's stack", t_size);
    g_fail++;
  }
  fflush(stdout);
}

static void* other(void* arg) {
  (void)arg;
  ncclResult_t st;
  OK(ncclCommGetAsyncError(comm, &st)); /* this thread's first call into the library */
  check("thread");
  return NULL;
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = handler;
  sigaction(SIGUSR1, &sa, NULL);
  ncclUniqueId id;
  OK(ncclGetUniqueId(&id));
  OK(ncclCommInitRank(&comm, 1, id, 0));
  sigaction(SIGUSR1, NULL, &sa);
  if (!(sa.sa_flags & SA_ONSTACK)) {
    printf("FAIL: the communicator's creation did not add SA_ONSTACK to the handler\n");
    g_fail++;
  }
  check("main");
  pthread_t t;
  pthread_create(&t, NULL, other, NULL);
  pthread_join(t, NULL);
  OK(ncclCommDestroy(comm));
  printf("DONE\n");
  return g_fail ? 1 : 0;
}
