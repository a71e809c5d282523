/* The MPI calls nccl-tests makes, against ncclabi/gpu/minimpi, checked. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int fails;
#define CHECK(c, ...) do { if (!(c)) { printf("FAIL: " __VA_ARGS__); printf("\n"); fails++; } } while (0)

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  uint64_t h[16] = {0};
  h[rank] = 1000 + (uint64_t)rank;
  MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, sizeof(uint64_t), MPI_BYTE, MPI_COMM_WORLD);
  for (int r = 0; r < size; r++) CHECK(h[r] == 1000 + (uint64_t)r, "allgather[%d] = %llu", r, (unsigned long long)h[r]);
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &sub);
  int sr, ss;
  MPI_Comm_size(sub, &ss);
  MPI_Comm_rank(sub, &sr);
  int want = 0;
  for (int q = rank + 2; q < size; q += 2) want++;
  CHECK(ss == (size + 1 - rank % 2) / 2 && sr == want, "split: rank %d of %d", sr, ss);
  char id[128];
  memset(id, 0, sizeof id);
  if (sr == 0) snprintf(id, sizeof id, "id-of-color-%d", rank % 2);
  MPI_Bcast(id, sizeof id, MPI_BYTE, 0, sub);
  char wantid[128];
  snprintf(wantid, sizeof wantid, "id-of-color-%d", rank % 2);
  CHECK(strcmp(id, wantid) == 0, "bcast got %s", id);
  MPI_Barrier(MPI_COMM_WORLD);
  int e = rank + 1;
  MPI_Allreduce(MPI_IN_PLACE, &e, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  CHECK(e == size * (size + 1) / 2, "allreduce sum %d", e);
  int64_t m = 10 * rank;
  MPI_Allreduce(MPI_IN_PLACE, &m, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(m == 10 * (size - 1), "allreduce max %lld", (long long)m);
  long l = 5 + rank;
  MPI_Allreduce(MPI_IN_PLACE, &l, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
  CHECK(l == 5, "allreduce min %ld", l);
  double d[2] = {rank + 0.5, 1.0}, all[32];
  MPI_Gather(d, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int r = 0; r < size; r++) CHECK(all[2 * r] == r + 0.5, "gather[%d] = %g", r, all[2 * r]);
  MPI_Comm_free(&sub);
  MPI_Finalize();
  printf("rank %d done, %d failures\n", rank, fails);
  return fails;
}
