/* mpi.h — "minimpi", the few MPI calls nccl-tests makes, for running one
 * process per rank on a machine without an MPI installation (the GPU test
 * machine). Not an MPI implementation: processes of one host only, started
 * by ncclabi/gpu/minimpirun.sh, collectives through files in a shared
 * directory. Written for Theseus's GPU acceptance scripts. */
#ifndef THESEUS_MINIMPI_H_
#define THESEUS_MINIMPI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_SUCCESS 0
#define MPI_COMM_WORLD ((MPI_Comm)0)
#define MPI_IN_PLACE ((void*)1)

#define MPI_DATATYPE_NULL ((MPI_Datatype)0)
#define MPI_BYTE ((MPI_Datatype)1)
#define MPI_CHAR ((MPI_Datatype)2)
#define MPI_INT ((MPI_Datatype)3)
#define MPI_LONG ((MPI_Datatype)4)
#define MPI_LONG_LONG ((MPI_Datatype)5)
#define MPI_INT64_T ((MPI_Datatype)6)
#define MPI_UINT64_T ((MPI_Datatype)7)
#define MPI_FLOAT ((MPI_Datatype)8)
#define MPI_DOUBLE ((MPI_Datatype)9)
#define MPI_UNSIGNED_LONG ((MPI_Datatype)10)
#define MPI_LONG_LONG_INT MPI_LONG_LONG

#define MPI_SUM ((MPI_Op)1)
#define MPI_MIN ((MPI_Op)2)
#define MPI_MAX ((MPI_Op)3)

int MPI_Init(int* argc, char*** argv);
int MPI_Initialized(int* flag);
int MPI_Finalize(void);
int MPI_Abort(MPI_Comm comm, int code);
int MPI_Comm_size(MPI_Comm comm, int* size);
int MPI_Comm_rank(MPI_Comm comm, int* rank);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* newcomm);
int MPI_Comm_free(MPI_Comm* comm);
int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm);
int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
                  MPI_Datatype recvtype, MPI_Comm comm);
int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
               MPI_Datatype recvtype, int root, MPI_Comm comm);
int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm);

#ifdef __cplusplus
}
#endif

#endif
