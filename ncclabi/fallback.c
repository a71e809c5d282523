/* fallback.c — the real NCCL named by THESEUS_NCCL_LIB_PATH, opened with
 * dlopen and called through dlsym'd pointers.
 *
 * The library is opened by its real path (symlinks resolved), so that
 *   - the LD_AUDIT shim, which redirects the names libnccl.so and
 *     libnccl.so.2, does not send the fallback back to Theseus, and
 *   - the dynamic linker does not take our own SONAME (libnccl.so.2) as
 *     "already loaded";
 * and with RTLD_DEEPBIND, so that the real NCCL's references to its own
 * public functions bind inside it, not to Theseus's exported ncclX.
 * It is never dlclose'd (the process keeps it, as it keeps us).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

typedef ncclResult_t (*fn_get_unique_id)(ncclUniqueId*);
typedef ncclResult_t (*fn_init_rank)(ncclComm_t*, int, ncclUniqueId, int);
typedef ncclResult_t (*fn_init_all)(ncclComm_t*, int, const int*);
typedef ncclResult_t (*fn_split)(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*);
typedef ncclResult_t (*fn_shrink)(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int);
typedef ncclResult_t (*fn_comm)(ncclComm_t);
typedef ncclResult_t (*fn_async)(ncclComm_t, ncclResult_t*);
typedef ncclResult_t (*fn_void)(void);
typedef ncclResult_t (*fn_version)(int*);
typedef const char* (*fn_last_error)(ncclComm_t);
typedef ncclResult_t (*fn_allreduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_rooted)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
typedef ncclResult_t (*fn_register)(ncclComm_t, void*, size_t, void**);
typedef ncclResult_t (*fn_deregister)(ncclComm_t, void*);
typedef ncclResult_t (*fn_premulsum)(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t);
typedef ncclResult_t (*fn_redop_destroy)(ncclRedOp_t, ncclComm_t);

static struct {
  void* lib;
  int version;
  fn_get_unique_id get_unique_id;
  fn_init_rank init_rank;
  fn_init_all init_all;
  fn_split split;
  fn_shrink shrink;
  fn_comm finalize, destroy, abort_;
  fn_async async_error;
  fn_void group_start, group_end;
  fn_last_error last_error;
  fn_allreduce allreduce, reduce_scatter;
  fn_reduce reduce;
  fn_broadcast broadcast;
  fn_gather allgather, alltoall;
  fn_rooted gather, scatter;
  fn_send send;
  fn_recv recv;
  fn_register reg;
  fn_deregister dereg;
  fn_premulsum premulsum;
  fn_redop_destroy redop_destroy;
} fb;

static void* sym(const char* name) { return fb.lib ? dlsym(fb.lib, name) : NULL; }

int ths_fb_open(const char* path, char* err, size_t errlen) {
  char real[PATH_MAX];
  if (!realpath(path, real)) {
    snprintf(err, errlen, "THESEUS_NCCL_LIB_PATH=%s: no such file", path);
    return -1;
  }
  void* lib = dlopen(real, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib) {
    const char* e = dlerror();
    snprintf(err, errlen, "dlopen(%s): %s", real, e ? e : "unknown error");
    return -1;
  }
  fb.lib = lib;
  /* A Theseus library named as the fallback would call itself forever. */
  if (dlsym(lib, "theseusCommStats")) {
    snprintf(err, errlen, "%s is a Theseus library, not a real NCCL", real);
    fb.lib = NULL;
    return -1;
  }
#define LOAD(field, type, name) fb.field = (type)sym(name)
  LOAD(get_unique_id, fn_get_unique_id, "ncclGetUniqueId");
  LOAD(init_rank, fn_init_rank, "ncclCommInitRank");
  LOAD(init_all, fn_init_all, "ncclCommInitAll");
  LOAD(split, fn_split, "ncclCommSplit");
  LOAD(shrink, fn_shrink, "ncclCommShrink");
  LOAD(finalize, fn_comm, "ncclCommFinalize");
  LOAD(destroy, fn_comm, "ncclCommDestroy");
  LOAD(abort_, fn_comm, "ncclCommAbort");
  LOAD(async_error, fn_async, "ncclCommGetAsyncError");
  LOAD(group_start, fn_void, "ncclGroupStart");
  LOAD(group_end, fn_void, "ncclGroupEnd");
  LOAD(last_error, fn_last_error, "ncclGetLastError");
  LOAD(allreduce, fn_allreduce, "ncclAllReduce");
  LOAD(reduce_scatter, fn_allreduce, "ncclReduceScatter");
  LOAD(reduce, fn_reduce, "ncclReduce");
  LOAD(broadcast, fn_broadcast, "ncclBroadcast");
  LOAD(allgather, fn_gather, "ncclAllGather");
  LOAD(alltoall, fn_gather, "ncclAlltoAll");
  LOAD(gather, fn_rooted, "ncclGather");
  LOAD(scatter, fn_rooted, "ncclScatter");
  LOAD(send, fn_send, "ncclSend");
  LOAD(recv, fn_recv, "ncclRecv");
  LOAD(reg, fn_register, "ncclCommRegister");
  LOAD(dereg, fn_deregister, "ncclCommDeregister");
  LOAD(premulsum, fn_premulsum, "ncclRedOpCreatePreMulSum");
  LOAD(redop_destroy, fn_redop_destroy, "ncclRedOpDestroy");
#undef LOAD
  const char* required[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclCommDestroy", "ncclCommAbort",
                            "ncclGroupStart", "ncclGroupEnd", "ncclSend", "ncclRecv"};
  for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
    if (!sym(required[i])) {
      snprintf(err, errlen, "%s does not export %s", real, required[i]);
      fb.lib = NULL;
      return -1;
    }
  }
  fn_version v = (fn_version)sym("ncclGetVersion");
  if (v) v(&fb.version);
  snprintf(err, errlen, "%s", real);
  return 0;
}

int ths_fb_has(const char* name) { return sym(name) != NULL; }
int ths_fb_version(void) { return fb.version; }

#define CALL(f, ...) ((f) ? (f)(__VA_ARGS__) : ncclInvalidUsage)

ncclResult_t ths_fb_get_unique_id(ncclUniqueId* id) { return CALL(fb.get_unique_id, id); }
ncclResult_t ths_fb_comm_init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId* id, int rank) {
  return CALL(fb.init_rank, comm, nranks, *id, rank);
}
ncclResult_t ths_fb_comm_init_all(ncclComm_t* comms, int ndev, const int* devlist) {
  return CALL(fb.init_all, comms, ndev, devlist);
}
ncclResult_t ths_fb_comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm) {
  return CALL(fb.split, comm, color, key, newcomm, NULL);
}
ncclResult_t ths_fb_comm_shrink(ncclComm_t comm, int* exclude, int n, ncclComm_t* newcomm, int flags) {
  return CALL(fb.shrink, comm, exclude, n, newcomm, NULL, flags);
}
ncclResult_t ths_fb_comm_finalize(ncclComm_t comm) { return fb.finalize ? fb.finalize(comm) : ncclSuccess; }
ncclResult_t ths_fb_comm_destroy(ncclComm_t comm) { return CALL(fb.destroy, comm); }
ncclResult_t ths_fb_comm_abort(ncclComm_t comm) { return CALL(fb.abort_, comm); }
ncclResult_t ths_fb_comm_get_async_error(ncclComm_t comm, ncclResult_t* state) {
  *state = ncclSuccess;
  return fb.async_error ? fb.async_error(comm, state) : ncclSuccess;
}
ncclResult_t ths_fb_comm_user_rank(ncclComm_t comm, int* rank) {
  typedef ncclResult_t (*fn_int)(const ncclComm_t, int*);
  fn_int usr = (fn_int)sym("ncclCommUserRank");
  return usr ? usr(comm, rank) : ncclInvalidUsage;
}
ncclResult_t ths_fb_group_start(void) { return CALL(fb.group_start); }
ncclResult_t ths_fb_group_end(void) { return CALL(fb.group_end); }

/* Collectives the real library lacks (ncclAlltoAll, ncclGather and
 * ncclScatter before 2.28) run as grouped send/recv. */
static ncclResult_t p2p_rooted(int kind, const char* send, char* recv, size_t bytes, size_t count,
                               ncclDataType_t dt, int root, ncclComm_t comm, cudaStream_t s, int rank,
                               int nranks) {
  ncclResult_t r = fb.group_start(), r2;
  for (int p = 0; p < nranks && r == ncclSuccess; p++) {
    if (kind == 5) { /* alltoall */
      r = fb.send(send + (size_t)p * bytes, count, dt, p, comm, s);
      if (r == ncclSuccess) r = fb.recv(recv + (size_t)p * bytes, count, dt, p, comm, s);
    } else if (kind == 6) { /* gather */
      if (p == root) r = fb.send(send, count, dt, root, comm, s);
      if (r == ncclSuccess && rank == root) r = fb.recv(recv + (size_t)p * bytes, count, dt, p, comm, s);
    } else { /* scatter */
      if (rank == root) r = fb.send(send + (size_t)p * bytes, count, dt, p, comm, s);
      if (r == ncclSuccess && p == root) r = fb.recv(recv, count, dt, root, comm, s);
    }
  }
  r2 = fb.group_end();
  return r != ncclSuccess ? r : r2;
}

ncclResult_t ths_fb_coll(int kind, const void* send, void* recv, size_t count, int dtype, int op,
                         int root, ncclComm_t comm, void* stream) {
  cudaStream_t s = (cudaStream_t)stream;
  ncclDataType_t dt = (ncclDataType_t)dtype;
  ncclRedOp_t o = (ncclRedOp_t)op;
  switch (kind) {
    case 0: return CALL(fb.allreduce, send, recv, count, dt, o, comm, s);
    case 1: return CALL(fb.allgather, send, recv, count, dt, comm, s);
    case 2: return CALL(fb.reduce_scatter, send, recv, count, dt, o, comm, s);
    case 3: return CALL(fb.broadcast, send, recv, count, dt, root, comm, s);
    case 4: return CALL(fb.reduce, send, recv, count, dt, o, root, comm, s);
    case 5:
      if (fb.alltoall) return fb.alltoall(send, recv, count, dt, comm, s);
      break;
    case 6:
      if (fb.gather) return fb.gather(send, recv, count, dt, root, comm, s);
      break;
    case 7:
      if (fb.scatter) return fb.scatter(send, recv, count, dt, root, comm, s);
      break;
    case 8: return CALL(fb.send, send, count, dt, root, comm, s);
    case 9: return CALL(fb.recv, recv, count, dt, root, comm, s);
    default: return ncclInvalidArgument;
  }
  /* kinds 5-7 without a native call: emulate with send/recv. */
  typedef ncclResult_t (*fn_int)(const ncclComm_t, int*);
  fn_int cnt = (fn_int)sym("ncclCommCount"), usr = (fn_int)sym("ncclCommUserRank");
  int nranks = 0, rank = 0;
  if (!cnt || !usr || cnt(comm, &nranks) != ncclSuccess || usr(comm, &rank) != ncclSuccess)
    return ncclInvalidUsage;
  static const int sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  if (dtype < 0 || dtype > 11) return ncclInvalidArgument;
  size_t bytes = count * (size_t)sizes[dtype];
  return p2p_rooted(kind, (const char*)send, (char*)recv, bytes, count, dt, root, comm, s, rank, nranks);
}

ncclResult_t ths_fb_register(ncclComm_t comm, void* buf, size_t size, void** handle) {
  return CALL(fb.reg, comm, buf, size, handle);
}
ncclResult_t ths_fb_deregister(ncclComm_t comm, void* handle) { return CALL(fb.dereg, comm, handle); }
ncclResult_t ths_fb_premulsum(int* op, void* scalar, int dtype, int residence, ncclComm_t comm) {
  ncclRedOp_t o = ncclSum;
  ncclResult_t r = CALL(fb.premulsum, &o, scalar, (ncclDataType_t)dtype, (ncclScalarResidence_t)residence, comm);
  *op = (int)o;
  return r;
}
ncclResult_t ths_fb_redop_destroy(int op, ncclComm_t comm) {
  return CALL(fb.redop_destroy, (ncclRedOp_t)op, comm);
}
const char* ths_fb_last_error(void) {
  const char* s = fb.last_error ? fb.last_error(NULL) : NULL;
  return s ? s : "";
}
