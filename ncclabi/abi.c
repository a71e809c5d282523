/* abi.c — the public NCCL symbols of libtheseus_nccl.so.
 *
 * Every function of nccl.h is defined here, as NCCL does it: pncclX is the
 * strong definition and ncclX a weak alias of it, so a profiler or
 * interposer that defines ncclX and calls pncclX reaches the library (the Go
 * c-shared link is -Bsymbolic, so these calls never go back through an
 * interposed ncclX). Each definition
 *   - refuses the call in a child process after fork() (the Go runtime does
 *     not survive fork: no Go code may run there), in C, before any Go code;
 *   - passes the calling thread's group depth (C thread-local storage) to
 *     the Go implementation (exports.go), whose names start with thsGo.
 * Since this file includes our nccl.h, every definition is checked against
 * the public prototypes by the compiler.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim.h"
#include "_cgo_export.h"

/* ---- handles ------------------------------------------------------------ */

ncclComm_t ths_comm_alloc(void) {
  static uint64_t serial;
  ncclComm_t c = (ncclComm_t)calloc(1, sizeof(struct ncclComm));
  if (c) {
    c->magic = THS_COMM_MAGIC;
    c->serial = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED);
  }
  return c;
}

/* Only for handles the library never gave out (an init that failed before
 * the handle was registered). */
void ths_comm_free(ncclComm_t c) { free(c); }

/* ---- last error ----------------------------------------------------------- */

static char ths_last_error_buf[1024];
static pthread_mutex_t ths_last_error_mu = PTHREAD_MUTEX_INITIALIZER;

void ths_set_last_error(const char* msg, size_t len) {
  if (len >= sizeof ths_last_error_buf) len = sizeof ths_last_error_buf - 1;
  int locked = !ths_forked && pthread_mutex_lock(&ths_last_error_mu) == 0;
  memcpy(ths_last_error_buf, msg, len);
  ths_last_error_buf[len] = 0;
  if (locked) pthread_mutex_unlock(&ths_last_error_mu);
}

const char* ths_last_error(void) { return ths_last_error_buf; }

/* ---- fork ------------------------------------------------------------------ */

volatile int ths_forked = 0;

static void ths_on_fork_child(void) { ths_forked = 1; }

static void __attribute__((constructor)) ths_ctor(void) {
  pthread_atfork(NULL, NULL, ths_on_fork_child);
}

static ncclResult_t ths_after_fork(const char* api) {
  char buf[512];
  int n = snprintf(buf, sizeof buf,
                   "%s: called in a child process after fork(): libtheseus_nccl.so runs on the Go "
                   "runtime, which does not survive fork; create communicators after fork, or exec",
                   api);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
  ths_set_last_error(buf, (size_t)n);
  char line[600];
  int m = snprintf(line, sizeof line, "%d THESEUS WARN NCCL %s\n", (int)getpid(), buf);
  if (m > 0) {
    ssize_t w = write(2, line, (size_t)(m < (int)sizeof line ? m : (int)sizeof line - 1));
    (void)w;
  }
  return ncclInvalidUsage;
}

/* ---- signal handlers ------------------------------------------------------- */

int ths_fix_signal_handlers(char* names, size_t len) {
  int n = 0;
  size_t off = 0;
  if (len) names[0] = 0;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction sa;
    if (sigaction(sig, NULL, &sa) != 0) continue;
    void* h = (sa.sa_flags & SA_SIGINFO) ? (void*)sa.sa_sigaction : (void*)sa.sa_handler;
    if (h == (void*)SIG_DFL || h == (void*)SIG_IGN || (sa.sa_flags & SA_ONSTACK)) continue;
    sa.sa_flags |= SA_ONSTACK;
    if (sigaction(sig, &sa, NULL) == 0) {
      n++;
      if (off < len) {
        int k = snprintf(names + off, len - off, "%s%d", n > 1 ? "," : "", sig);
        if (k > 0) off += (size_t)k;
      }
    }
  }
  return n;
}

/* ---- signal stacks ----------------------------------------------------------------
 *
 * A C thread that calls into Go gets an alternate signal stack from the Go
 * runtime when it has none: the 32 KiB of an M's signal goroutine, with no
 * guard page below it. A handler of the host process that runs there (the
 * process's handlers get SA_ONSTACK at communicator creation, as Go
 * requires: ths_fix_signal_handlers) and needs more (a stack-trace printer
 * on SIGABRT or SIGSEGV, as PyTorch's watchdog thread may raise once it
 * has polled ncclCommGetAsyncError) writes past it into the Go runtime's
 * memory. So before a thread first enters Go through this library it gets
 * one of THS_SIGSTACK_BYTES, with a guard page, which Go then uses; a
 * thread that has one already keeps it. The stack stays for the thread's
 * life (Go keeps using it until the thread exits). */
#include <sys/mman.h>

#define THS_SIGSTACK_BYTES (256u << 10)

static __thread int ths_sigstack_done;

static void ths_sigstack_slow(void) {
  ths_sigstack_done = 1;
  stack_t cur;
  if (sigaltstack(NULL, &cur) != 0 || !(cur.ss_flags & SS_DISABLE)) return; /* one already (or in use) */
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char* p = (char*)mmap(NULL, THS_SIGSTACK_BYTES + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (p == MAP_FAILED) return;
  mprotect(p, page, PROT_NONE); /* an overflow faults here instead of writing below */
  stack_t ss;
  memset(&ss, 0, sizeof ss);
  ss.ss_sp = p + page;
  ss.ss_size = THS_SIGSTACK_BYTES;
  if (sigaltstack(&ss, NULL) != 0) munmap(p, THS_SIGSTACK_BYTES + page);
}

static inline void ths_sigstack(void) {
  if (__builtin_expect(!ths_sigstack_done, 0)) ths_sigstack_slow();
}

/* ---- the API ------------------------------------------------------------------ */

static __thread int32_t ths_depth; /* this thread's ncclGroupStart depth */

#define THS_DEF(name, params, body)                                      \
  ncclResult_t p##name params {                                          \
    if (__builtin_expect(ths_forked, 0)) return ths_after_fork(#name);   \
    ths_sigstack();                                                      \
    body                                                                 \
  }                                                                      \
  ncclResult_t name params __attribute__((weak, alias("p" #name)));

#define THS_REJECT(name, params, reason) \
  THS_DEF(name, params, { return thsGoReject((char*)#name, (char*)(reason)); })

/* Memory and version. */
THS_DEF(ncclMemAlloc, (void** ptr, size_t size), { return thsGoMemAlloc(ptr, size); })
THS_DEF(ncclMemFree, (void* ptr), { return thsGoMemFree(ptr); })
/* Pure C, so also answered after fork. */
ncclResult_t pncclGetVersion(int* version) {
  if (!version) {
    if (ths_forked) return ths_after_fork("ncclGetVersion");
    ths_sigstack();
    return thsGoFail(ncclInvalidArgument, (char*)"ncclGetVersion: version is NULL");
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
ncclResult_t ncclGetVersion(int* version) __attribute__((weak, alias("pncclGetVersion")));
THS_DEF(ncclGetUniqueId, (ncclUniqueId* uniqueId), { return thsGoGetUniqueId(uniqueId); })

/* Communicators. */
THS_DEF(ncclCommInitRankConfig,
        (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config),
        { return thsGoCommInitRank(comm, nranks, &commId, rank, config, 0, &ths_depth); })
THS_DEF(ncclCommInitRank, (ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank),
        { return thsGoCommInitRank(comm, nranks, &commId, rank, NULL, 1, &ths_depth); })
THS_DEF(ncclCommInitAll, (ncclComm_t* comm, int ndev, const int* devlist),
        { return thsGoCommInitAll(comm, ndev, (int*)devlist); })
THS_DEF(ncclCommInitRankScalable,
        (ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
         ncclConfig_t* config),
        {
          if (nId < 1 || !commIds)
            return thsGoFail(ncclInvalidArgument,
                             (char*)"ncclCommInitRankScalable: nId must be >= 1 and commIds non-NULL");
          return thsGoCommInitRank(newcomm, nranks, &commIds[0], myrank, config, 2, &ths_depth);
        })
THS_DEF(ncclCommFinalize, (ncclComm_t comm), { return thsGoCommFinalize(comm); })
THS_DEF(ncclCommDestroy, (ncclComm_t comm), { return thsGoCommDestroy(comm); })
THS_DEF(ncclCommAbort, (ncclComm_t comm), { return thsGoCommAbort(comm); })
THS_DEF(ncclCommRevoke, (ncclComm_t comm, int revokeFlags), { return thsGoCommRevoke(comm, revokeFlags); })
THS_DEF(ncclCommSplit,
        (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config),
        { return thsGoCommSplit(comm, color, key, newcomm, config, &ths_depth); })
THS_DEF(ncclCommShrink,
        (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
         ncclConfig_t* config, int shrinkFlags),
        {
          return thsGoCommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config,
                                 shrinkFlags, &ths_depth);
        })

/* Errors and queries. ncclGetErrorString and ncclGetLastError need no Go:
 * their strings are static C storage. */
static const char* const ths_result_text[] = {
    "no error",
    "unhandled cuda error (run with THESEUS_DEBUG=INFO for details)",
    "unhandled system error (run with THESEUS_DEBUG=INFO for details)",
    "internal error - please report this issue to the Theseus developers",
    "invalid argument (run with THESEUS_DEBUG=WARN for details)",
    "invalid usage (run with THESEUS_DEBUG=WARN for details)",
    "remote process exited or there was a network error",
    "Theseus operation in progress",
};

const char* pncclGetErrorString(ncclResult_t result) {
  if ((unsigned)result < sizeof ths_result_text / sizeof ths_result_text[0])
    return ths_result_text[result];
  return "unknown result code";
}
const char* ncclGetErrorString(ncclResult_t result) __attribute__((weak, alias("pncclGetErrorString")));

const char* pncclGetLastError(ncclComm_t comm) {
  (void)comm; /* NCCL keeps one text per process, too */
  return ths_last_error();
}
const char* ncclGetLastError(ncclComm_t comm) __attribute__((weak, alias("pncclGetLastError")));

void pncclResetDebugInit(void) {
  if (ths_forked) {
    ths_after_fork("ncclResetDebugInit");
    return;
  }
  ths_sigstack();
  thsGoResetDebugInit();
}
void ncclResetDebugInit(void) __attribute__((weak, alias("pncclResetDebugInit")));

THS_DEF(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t* asyncError),
        { return thsGoCommGetAsyncError(comm, asyncError); })
THS_DEF(ncclCommCount, (const ncclComm_t comm, int* count), { return thsGoCommQuery(comm, count, 0); })
THS_DEF(ncclCommCuDevice, (const ncclComm_t comm, int* device), { return thsGoCommQuery(comm, device, 1); })
THS_DEF(ncclCommUserRank, (const ncclComm_t comm, int* rank), { return thsGoCommQuery(comm, rank, 2); })

/* Registration. */
THS_DEF(ncclCommRegister, (const ncclComm_t comm, void* buff, size_t size, void** handle),
        { return thsGoCommRegister(comm, buff, size, handle); })
THS_DEF(ncclCommDeregister, (const ncclComm_t comm, void* handle),
        { return thsGoCommDeregister(comm, handle); })
THS_REJECT(ncclCommWindowRegister,
           (ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags),
           "symmetric memory windows belong to NCCL's symmetric kernels; Theseus schedules address "
           "user buffers directly (use plain buffers, or ncclMemAlloc)")
THS_REJECT(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win),
           "symmetric memory windows are not supported (ncclCommWindowRegister never succeeds)")

/* Device communicators (NCCL 2.28 device API). */
THS_REJECT(ncclDevCommCreate,
           (ncclComm_t comm, const struct ncclDevCommRequirements* reqs, struct ncclDevComm* outDevComm),
           "the NCCL device API (GPU-initiated communication) has no Theseus equivalent")
THS_REJECT(ncclDevCommDestroy, (ncclComm_t comm, const struct ncclDevComm* devComm),
           "the NCCL device API (GPU-initiated communication) has no Theseus equivalent")

/* Reduction operators. */
THS_DEF(ncclRedOpCreatePreMulSum,
        (ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
         ncclComm_t comm),
        { return thsGoRedOpCreatePreMulSum((int*)op, scalar, (int)datatype, (int)residence, comm); })
THS_DEF(ncclRedOpDestroy, (ncclRedOp_t op, ncclComm_t comm),
        { return thsGoRedOpDestroy((int)op, comm); })

/* Data calls: kind is abi.Coll. */
enum {
  K_ALLREDUCE = 0, K_ALLGATHER = 1, K_REDUCESCATTER = 2, K_BROADCAST = 3, K_REDUCE = 4,
  K_ALLTOALL = 5, K_GATHER = 6, K_SCATTER = 7, K_SEND = 8, K_RECV = 9, K_ALLTOALLV = 10
};

/* Launches from C (runtime/replay/replay.h; docs/ncclabi.md, "Launches from
 * C"): the C launcher of the runtime's launch plans. After a data call
 * outside a group that the runtime served from a launch plan (or whose full
 * path kept one), Go arms the communicator's replay record with the plan's
 * launch and thsGoColl returns its
 * address; this thread keeps it in a small direct-mapped cache keyed by
 * the comm handle's value (the handle is never dereferenced here: an
 * unknown handle must still get ncclInvalidArgument from Go). The next data
 * call on that comm outside a group is launched by th_replay_call when the
 * record is still armed and accepts the call's key; in every other case the
 * call goes to Go as before. Records are never freed, so a stale entry is
 * harmless (a disarmed record declines). */
#define THS_REPLAY_SLOTS 8
static __thread struct {
  ncclComm_t comm;
  th_replay* rec;
} ths_replay_cache[THS_REPLAY_SLOTS];

static inline unsigned ths_replay_slot(ncclComm_t comm) {
  uintptr_t v = (uintptr_t)comm;
  return (unsigned)((v >> 4) ^ (v >> 7) ^ (v >> 12)) % THS_REPLAY_SLOTS;
}

static inline int ths_replay_try(int kind, const void* send, const void* recv, size_t count, int dt, int op,
                                 int root, ncclComm_t comm, const void* stream) {
  if (ths_depth != 0 || comm == NULL) return 0;
  unsigned i = ths_replay_slot(comm);
  if (ths_replay_cache[i].comm != comm) return 0;
  const uint64_t key[TH_REPLAY_KEY_WORDS] = {
      (uint64_t)kind,  (uint64_t)(uintptr_t)send, (uint64_t)(uintptr_t)recv, (uint64_t)count,
      (uint64_t)(int64_t)dt, (uint64_t)(int64_t)op, (uint64_t)(int64_t)root, (uint64_t)(uintptr_t)stream};
  return th_replay_call(ths_replay_cache[i].rec, key);
}

static inline void ths_replay_keep(ncclComm_t comm, uintptr_t rec) {
  unsigned i = ths_replay_slot(comm);
  if (rec) {
    ths_replay_cache[i].comm = comm;
    ths_replay_cache[i].rec = (th_replay*)rec;
  } else if (ths_replay_cache[i].comm == comm) {
    ths_replay_cache[i].comm = NULL;
  }
}

/* Every data call: from the replay record when it takes the call, else
 * through Go (which may arm the record for the next one). The key packs
 * the arguments as abi.Op.ReplayKey does. */
#define COLL(kind, send, recv, count, dt, op, root, comm, stream, cc, cg)                          \
  if ((kind) != K_ALLTOALLV &&                                                                    \
      ths_replay_try(kind, (const void*)(send), (const void*)(recv), count, (int)(dt), (int)(op), \
                     root, comm, (const void*)(stream)))                                          \
    return ncclSuccess;                                                                           \
  uintptr_t rec_ = 0;                                                                             \
  ncclResult_t r_ = thsGoColl(kind, (void*)(send), (void*)(recv), count, (int)(dt), (int)(op),    \
                              root, comm, (void*)(stream), (size_t*)(cc), (size_t*)(cg),          \
                              &ths_depth, &rec_);                                                 \
  if (comm != NULL) ths_replay_keep(comm, rec_);                                                  \
  return r_;

THS_DEF(ncclReduce,
        (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
         int root, ncclComm_t comm, cudaStream_t stream),
        { COLL(K_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream, NULL, NULL) })
THS_DEF(ncclBcast,
        (void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream),
        { COLL(K_BROADCAST, buff, buff, count, datatype, 0, root, comm, stream, NULL, NULL) })
THS_DEF(ncclBroadcast,
        (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream),
        { COLL(K_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream, NULL, NULL) })
THS_DEF(ncclAllReduce,
        (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
         ncclComm_t comm, cudaStream_t stream),
        { COLL(K_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, -1, comm, stream, NULL, NULL) })
THS_DEF(ncclReduceScatter,
        (const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
         ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
        { COLL(K_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream, NULL, NULL) })
THS_DEF(ncclAllGather,
        (const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
         ncclComm_t comm, cudaStream_t stream),
        { COLL(K_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, 0, -1, comm, stream, NULL, NULL) })
THS_DEF(ncclAlltoAll,
        (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
         cudaStream_t stream),
        { COLL(K_ALLTOALL, sendbuff, recvbuff, count, datatype, 0, -1, comm, stream, NULL, NULL) })
THS_DEF(ncclGather,
        (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream),
        { COLL(K_GATHER, sendbuff, recvbuff, count, datatype, 0, root, comm, stream, NULL, NULL) })
THS_DEF(ncclScatter,
        (const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream),
        { COLL(K_SCATTER, sendbuff, recvbuff, count, datatype, 0, root, comm, stream, NULL, NULL) })
THS_DEF(ncclAlltoAllv,
        (const void* sendbuff, void* recvbuff, const size_t* cntMatrixCpu, const size_t* cntMatrixGpu,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream),
        { COLL(K_ALLTOALLV, sendbuff, recvbuff, 0, datatype, 0, -1, comm, stream, cntMatrixCpu, cntMatrixGpu) })
THS_DEF(ncclSend,
        (const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream),
        { COLL(K_SEND, sendbuff, NULL, count, datatype, 0, peer, comm, stream, NULL, NULL) })
THS_DEF(ncclRecv,
        (void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
         cudaStream_t stream),
        { COLL(K_RECV, NULL, recvbuff, count, datatype, 0, peer, comm, stream, NULL, NULL) })

/* Groups. */
THS_DEF(ncclGroupStart, (void), { return thsGoGroupStart(&ths_depth); })
THS_DEF(ncclGroupEnd, (void), { return thsGoGroupEnd(&ths_depth); })
THS_DEF(ncclGroupSimulateEnd, (ncclSimInfo_t* simInfo), { return thsGoGroupSimulateEnd(simInfo, &ths_depth); })

/* Theseus extensions (no pnccl twins: not NCCL functions). */
ncclResult_t theseusStreamSynchronize(ncclComm_t comm, cudaStream_t stream) {
  if (__builtin_expect(ths_forked, 0)) return ths_after_fork("theseusStreamSynchronize");
  ths_sigstack();
  return thsGoStreamSync(comm, (void*)stream);
}

ncclResult_t theseusCommLaunchTime(ncclComm_t comm, uint64_t* launches, uint64_t* launchNs) {
  if (__builtin_expect(ths_forked, 0)) return ths_after_fork("theseusCommLaunchTime");
  ths_sigstack();
  return thsGoCommLaunchTime(comm, launches, launchNs);
}

ncclResult_t theseusCommStats(ncclComm_t comm, uint64_t* native, uint64_t* fallback, uint64_t* rejected) {
  if (__builtin_expect(ths_forked, 0)) return ths_after_fork("theseusCommStats");
  ths_sigstack();
  return thsGoCommStats(comm, native, fallback, rejected);
}

/* ---- Newer NCCL calls (2.28/2.29) that clients may bind to -------------------
 * Not declared in our nccl.h; exported so that a client built against a
 * newer header loads, and rejected when called. Arguments are declared as
 * the newer nccl.h declares them (pointers and ints), only to keep the
 * calling convention. */
#define THS_REJECT_EXTRA(name, params, reason)                                                \
  ncclResult_t p##name params;                                                                \
  ncclResult_t name params;                                                                   \
  THS_REJECT(name, params, reason)

THS_REJECT_EXTRA(ncclCommSuspend, (ncclComm_t comm, int flags),
                 "communicator suspension (NCCL 2.29) is not supported")
THS_REJECT_EXTRA(ncclCommResume, (ncclComm_t comm),
                 "communicator suspension (NCCL 2.29) is not supported")
THS_REJECT_EXTRA(ncclCommMemStats, (ncclComm_t comm, int stat, uint64_t* value),
                 "communicator memory statistics (NCCL 2.29) are not supported")
THS_REJECT_EXTRA(ncclCommGetUniqueId, (ncclComm_t comm, ncclUniqueId* uniqueId),
                 "growing communicators (NCCL 2.29) is not supported")
THS_REJECT_EXTRA(ncclCommGrow,
                 (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                  ncclComm_t* newcomm, ncclConfig_t* config),
                 "growing communicators (NCCL 2.29) is not supported")
THS_REJECT_EXTRA(ncclWinGetUserPtr, (ncclComm_t comm, ncclWindow_t win, void** outUserPtr),
                 "symmetric memory windows are not supported")
THS_REJECT_EXTRA(ncclCommQueryProperties, (ncclComm_t comm, void* props),
                 "the NCCL device API is not supported")
THS_REJECT_EXTRA(ncclGetLsaMultimemDevicePointer, (ncclWindow_t window, size_t offset, void** outPtr),
                 "the NCCL device API is not supported")
THS_REJECT_EXTRA(ncclGetPeerDevicePointer, (ncclWindow_t window, size_t offset, int peer, void** outPtr),
                 "the NCCL device API is not supported")
THS_REJECT_EXTRA(ncclPutSignal,
                 (const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                  ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags,
                  ncclComm_t comm, cudaStream_t stream),
                 "one-sided window operations (NCCL 2.29) are not supported")
THS_REJECT_EXTRA(ncclSignal,
                 (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream),
                 "one-sided window operations (NCCL 2.29) are not supported")
THS_REJECT_EXTRA(ncclWaitSignal, (int nDesc, void* signalDescs, ncclComm_t comm, cudaStream_t stream),
                 "one-sided window operations (NCCL 2.29) are not supported")
