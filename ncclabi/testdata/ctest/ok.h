/* ok.h — shared by the C test programs of ncclabi/testdata/ctest. OK(call)
 * runs an NCCL call and, unless it returns ncclSuccess, prints the call,
 * its result, ncclGetErrorString and ncclGetLastError with the including
 * program's g_rank, and exits 100. CHECK(cond, fmt, ...) prints
 * "FAIL rank R line L: " and the message when cond is false, and counts the
 * failure in g_fail. The includer declares g_rank (and g_fail, to use
 * CHECK) and includes <stdio.h>, <stdlib.h> and nccl.h first. */
#ifndef THESEUS_CTEST_OK_H_
#define THESEUS_CTEST_OK_H_

#define OK(call)                                                                              \
  do {                                                                                        \
    ncclResult_t r_ = (call);                                                                 \
    if (r_ != ncclSuccess) {                                                                  \
      printf("FAIL rank %d line %d: %s = %d (%s): %s\n", g_rank, __LINE__, #call, (int)r_,   \
             ncclGetErrorString(r_), ncclGetLastError(NULL));                                 \
      fflush(stdout);                                                                         \
      exit(100);                                                                              \
    }                                                                                         \
  } while (0)

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (!(cond)) {                                                       \
      printf("FAIL rank %d line %d: ", g_rank, __LINE__);                \
      printf(__VA_ARGS__);                                               \
      printf("\n");                                                      \
      fflush(stdout);                                                    \
      g_fail++;                                                          \
    }                                                                    \
  } while (0)

#endif
