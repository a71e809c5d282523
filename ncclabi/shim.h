/* shim.h — declarations shared by the C files of libtheseus_nccl.so and the
 * cgo preamble (declarations only: files with //export may not define C
 * functions). */
#ifndef THESEUS_NCCLABI_SHIM_H_
#define THESEUS_NCCLABI_SHIM_H_

#define THESEUS_NCCL_NO_CUDA_HEADERS 1
#include "nccl.h"

#include <stddef.h>
#include <stdint.h>

#include "replay.h"

/* The C side of a communicator handle. Allocated by ths_comm_alloc and
 * never freed, so a destroyed handle stays a detectable tombstone. */
struct ncclComm {
  uint64_t magic; /* THS_COMM_MAGIC */
  uint64_t serial;
};
#define THS_COMM_MAGIC 0x5448534e43434c31ull /* "THSNCCL1" */

ncclComm_t ths_comm_alloc(void);
void ths_comm_free(ncclComm_t c);

/* Last error text (static storage; ncclGetLastError returns it). */
void ths_set_last_error(const char* msg, size_t len);
const char* ths_last_error(void);

/* Adds SA_ONSTACK to installed signal handlers that lack it; returns how
 * many it changed. */
int ths_fix_signal_handlers(char* names, size_t len);

/* 1 in a child process after fork(). */
extern volatile int ths_forked;

/* ---- Fallback NCCL (fallback.c) ---- */
int ths_fb_open(const char* path, char* err, size_t errlen);
int ths_fb_has(const char* name);
int ths_fb_version(void);
ncclResult_t ths_fb_get_unique_id(ncclUniqueId* id);
ncclResult_t ths_fb_comm_init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId* id, int rank);
ncclResult_t ths_fb_comm_init_all(ncclComm_t* comms, int ndev, const int* devlist);
ncclResult_t ths_fb_comm_split(ncclComm_t comm, int color, int key, ncclComm_t* newcomm);
ncclResult_t ths_fb_comm_shrink(ncclComm_t comm, int* exclude, int n, ncclComm_t* newcomm, int flags);
ncclResult_t ths_fb_comm_finalize(ncclComm_t comm);
ncclResult_t ths_fb_comm_destroy(ncclComm_t comm);
ncclResult_t ths_fb_comm_abort(ncclComm_t comm);
ncclResult_t ths_fb_comm_get_async_error(ncclComm_t comm, ncclResult_t* state);
ncclResult_t ths_fb_comm_user_rank(ncclComm_t comm, int* rank);
ncclResult_t ths_fb_group_start(void);
ncclResult_t ths_fb_group_end(void);
/* kind: the abi.Coll value (0 AllReduce … 9 Recv). */
ncclResult_t ths_fb_coll(int kind, const void* send, void* recv, size_t count, int dtype, int op,
                         int root, ncclComm_t comm, void* stream);
ncclResult_t ths_fb_register(ncclComm_t comm, void* buf, size_t size, void** handle);
ncclResult_t ths_fb_deregister(ncclComm_t comm, void* handle);
ncclResult_t ths_fb_premulsum(int* op, void* scalar, int dtype, int residence, ncclComm_t comm);
ncclResult_t ths_fb_redop_destroy(int op, ncclComm_t comm);
const char* ths_fb_last_error(void);

#endif
