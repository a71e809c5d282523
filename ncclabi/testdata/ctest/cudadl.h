/* cudadl.h — the CUDA driver calls the C test programs make on the CUDA
 * backend, through dlopen("libcuda.so.1"), so that no CUDA toolkit is needed
 * to build them. The includer declares g_rank and includes <dlfcn.h>,
 * <stdio.h> and <stdlib.h> first. */
#ifndef THESEUS_CTEST_CUDADL_H_
#define THESEUS_CTEST_CUDADL_H_

static void* cudadl_lib;

/* cudadl_sym returns the driver's function name, or exits 100. */
static void* cudadl_sym(const char* name) {
  void* f = dlsym(cudadl_lib, name);
  if (!f) {
    printf("FAIL rank %d: libcuda.so.1 has no %s\n", g_rank, name);
    exit(100);
  }
  return f;
}

/* cudadl_check exits 100 when a driver call failed. */
static void cudadl_check(const char* what, int r) {
  if (r != 0) {
    printf("FAIL rank %d: %s = %d\n", g_rank, what, r);
    exit(100);
  }
}

/* cudadl_setup makes device 0's primary context current on this thread,
 * as a CUDA client's cudaSetDevice(0) would. */
static void cudadl_setup(void) {
  cudadl_lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cudadl_lib) {
    printf("FAIL rank %d: dlopen libcuda.so.1: %s\n", g_rank, dlerror());
    exit(100);
  }
  int dev = 0;
  void* ctx = NULL;
  cudadl_check("cuInit", ((int (*)(unsigned))cudadl_sym("cuInit"))(0));
  cudadl_check("cuDeviceGet", ((int (*)(int*, int))cudadl_sym("cuDeviceGet"))(&dev, 0));
  cudadl_check("cuDevicePrimaryCtxRetain", ((int (*)(void**, int))cudadl_sym("cuDevicePrimaryCtxRetain"))(&ctx, dev));
  cudadl_check("cuCtxSetCurrent", ((int (*)(void*))cudadl_sym("cuCtxSetCurrent"))(ctx));
}

/* cudadl_stream creates a non-blocking stream (cudadl_setup first). */
static void* cudadl_stream(void) {
  void* s = NULL;
  cudadl_check("cuStreamCreate", ((int (*)(void**, unsigned))cudadl_sym("cuStreamCreate"))(&s, 1 /* CU_STREAM_NON_BLOCKING */));
  return s;
}

#endif
