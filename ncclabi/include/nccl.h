/*
 * nccl.h — the public header of libtheseus_nccl.so, Theseus's NCCL-compatible
 * library. Written for Theseus from the published NCCL ABI facts
 * (docs/ncclabi.md, "ABI numbers"); it is not NVIDIA's header.
 *
 * Compatibility baseline: NCCL 2.25.1. NCCL_VERSION_CODE and ncclGetVersion()
 * both report 22501. Every value, type size and struct offset of the 2.25.1
 * ABI is kept exactly (enums, the 128-byte ncclUniqueId passed by value, the
 * 48-byte ncclConfig_t). The header also declares selected newer NCCL calls
 * (2.27/2.28: ncclCommShrink, ncclCommWindowRegister, ncclAlltoAll, ncclGather,
 * ncclScatter, ncclDevCommCreate, ...) and Theseus extensions (ncclAlltoAllv,
 * theseus*). Which calls run natively, go to the fallback NCCL
 * (THESEUS_NCCL_LIB_PATH) or are rejected with ncclInvalidUsage is listed in
 * docs/support-matrix.md.
 */
#ifndef NCCL_H_
#define NCCL_H_

/* CUDA types. With the CUDA toolkit's headers on the include path we use
 * them (as NVIDIA's nccl.h does, including the fp16/bf16/fp8 headers that
 * clients such as nccl-tests expect nccl.h to pull in). Without them (the
 * host backend, CI) cudaStream_t is declared as the same incomplete struct
 * pointer the CUDA runtime uses, so the two declarations are compatible.
 * Define THESEUS_NCCL_NO_CUDA_HEADERS to never include CUDA headers. */
#if !defined(THESEUS_NCCL_NO_CUDA_HEADERS) && defined(__has_include)
#if __has_include(<cuda_runtime.h>)
#define THESEUS_NCCL_HAVE_CUDA_HEADERS 1
#endif
#endif

#ifdef THESEUS_NCCL_HAVE_CUDA_HEADERS
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
#else
typedef struct CUstream_st* cudaStream_t;
#endif

#define NCCL_MAJOR 2
#define NCCL_MINOR 25
#define NCCL_PATCH 1
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 22501
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

/* Theseus identifies itself to clients that want to know. */
#define THESEUS_NCCL 1
#define THESEUS_NCCL_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* Opaque handle to a communicator. */
typedef struct ncclComm* ncclComm_t;
/* Opaque handle to a registered memory window (NCCL 2.27+). */
typedef struct ncclWindow* ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* Error type. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f

/* Magic of ncclConfig_t (checked by every *Config call). */
#define NCCL_API_MAGIC 0xcafebeef

/* Communicator configuration, NCCL 2.25 layout (48 bytes). Clients built
 * against newer headers pass larger structs (2.27: 72 bytes); Theseus reads
 * min(config->size, 48) bytes and defaults the rest. */
typedef struct ncclConfig_v21700 {
  /* attributes that users should never touch. */
  size_t size;
  unsigned int magic;
  unsigned int version;
  /* attributes that users are able to customize. */
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
} ncclConfig_t;

/* Must be assigned to every ncclConfig_t when it is created. */
#define NCCL_CONFIG_INITIALIZER                                                   \
  {                                                                               \
    sizeof(ncclConfig_t),  /* size */                                             \
    NCCL_API_MAGIC,        /* magic */                                            \
    NCCL_VERSION_CODE,     /* version */                                          \
    NCCL_CONFIG_UNDEF_INT, /* blocking */                                         \
    NCCL_CONFIG_UNDEF_INT, /* cgaClusterSize */                                   \
    NCCL_CONFIG_UNDEF_INT, /* minCTAs */                                          \
    NCCL_CONFIG_UNDEF_INT, /* maxCTAs */                                          \
    NCCL_CONFIG_UNDEF_PTR, /* netName */                                          \
    NCCL_CONFIG_UNDEF_INT  /* splitShare */                                       \
  }

/* Query of ncclGroupSimulateEnd. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime;
} ncclSimInfo_t;

#define NCCL_SIM_INFO_INITIALIZER                                                 \
  {                                                                               \
    sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION_CODE, NCCL_UNDEF_FLOAT        \
  }

/* Flags of newer calls (declared for clients; see docs/support-matrix.md). */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

/* Reduction operation selector. */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  /* The number of built-in ops; also the least id of an op made by
   * ncclRedOpCreatePreMulSum. */
  ncclNumOps = 5,
  /* The largest valid value; forces a 4-byte enum. */
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

/* Data types. */
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives. */
typedef enum {
  ncclScalarDevice = 0,
  ncclScalarHostImmediate = 1
} ncclScalarResidence_t;

/* ---- Memory and version ---------------------------------------------- */

/* Allocate memory usable by collectives (backend memory: device memory on
 * cuda, a shared-memory segment on the host backend). */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

/* Stores NCCL_VERSION_CODE (22501) in *version. */
ncclResult_t ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);

/* Makes a unique id and starts its bootstrap root in this process. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* ---- Communicators ----------------------------------------------------- */

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
/* NCCL 2.23+: several ids; Theseus joins every rank through commIds[0]. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config);
/* NCCL 2.27+. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
/* NCCL 2.29+: stops the communicator's work; it stays a parent for
 * ncclCommSplit and ncclCommShrink until finalized, destroyed or aborted. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* ---- Errors and queries ----------------------------------------------- */

/* Both return strings owned by the library (static storage). */
const char* ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);
/* Re-reads THESEUS_DEBUG, THESEUS_DEBUG_SUBSYS and THESEUS_DEBUG_FILE. */
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/* ---- Registration ------------------------------------------------------ */

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);
/* NCCL 2.27+. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* ---- Device communicators (NCCL 2.28 device API; host entry points) ----- */

struct ncclDevCommRequirements;
struct ncclDevComm;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                               struct ncclDevComm* outDevComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements* reqs,
                                struct ncclDevComm* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm* devComm);

/* ---- User-defined reduction operators ---------------------------------- */

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives (counts in elements) ----------------------------------- */

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);
/* Deprecated in-place broadcast. */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
/* In place when recvbuff == sendbuff + rank * recvcount. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);
/* In place when sendbuff == recvbuff + rank * sendcount. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* NCCL 2.28+: count elements to and from every rank. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
/* NCCL 2.28+: in place when sendbuff == recvbuff + root * count (at the root). */
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                        ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
/* NCCL 2.28+: in place when recvbuff == sendbuff + root * count (at the root). */
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* Theseus extension (not in NCCL). cntMatrix{Cpu,Gpu} are two identical
 * copies (host and device memory) of the nranks x nranks row-major matrix
 * whose element [i*nranks + j] is the number of elements rank i sends to rank
 * j. Each rank's send (receive) blocks are packed in peer order: the block
 * for peer j starts at the sum of the counts to (from) peers 0..j-1. */
ncclResult_t ncclAlltoAllv(const void* sendbuff, void* recvbuff, const size_t* cntMatrixCpu,
                           const size_t* cntMatrixGpu, ncclDataType_t datatype, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAlltoAllv(const void* sendbuff, void* recvbuff, const size_t* cntMatrixCpu,
                            const size_t* cntMatrixGpu, ncclDataType_t datatype, ncclComm_t comm,
                            cudaStream_t stream);

/* ---- Point to point ------------------------------------------------------ */

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* ---- Groups -------------------------------------------------------------- */

ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

/* ---- Theseus extensions -------------------------------------------------- */

/* Waits until every operation this communicator enqueued on stream has
 * completed (the host backend has no cudaStreamSynchronize; on cuda it is
 * cuStreamSynchronize). Returns the operations' error, if any. */
ncclResult_t theseusStreamSynchronize(ncclComm_t comm, cudaStream_t stream);
/* Counters of one communicator: requests served natively by a Theseus
 * schedule, requests that ran on the fallback NCCL, and requests rejected.
 * Any pointer may be NULL. */
ncclResult_t theseusCommStats(ncclComm_t comm, uint64_t* native, uint64_t* fallback,
                              uint64_t* rejected);
/* The launches of this communicator's calls whose time inside
 * cuLaunchKernel was measured (THESEUS_TIME_LAUNCHES=1, CUDA backend), and
 * that time in nanoseconds, since the communicator was created: a
 * caller's time per call less launchNs / launches is the library's own
 * host time. Zeros when launches are not timed. Either pointer may be
 * NULL. */
ncclResult_t theseusCommLaunchTime(ncclComm_t comm, uint64_t* launches, uint64_t* launchNs);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
