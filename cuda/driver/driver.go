// Package driver binds the few CUDA driver API entry points Theseus needs,
// with no CUDA toolkit at build time: cgo declares the driver's types
// itself, libcuda.so.1 is opened with dlopen, and versioned entry points are
// resolved with cuGetProcAddress (falling back to dlsym of the _v2 names).
//
// CUDA contexts are per OS thread. Callers that run CUDA work from
// goroutines must call runtime.LockOSThread and make the context current
// (Context.SetCurrent) first; Device.Run does both.
//
// Every call returns a *Error carrying cuGetErrorName and cuGetErrorString.
// When no driver is present, Load returns ErrNoDriver, and GPU tests skip
// saying so.
package driver

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -I${SRCDIR}/../../runtime/replay
#cgo nocallback th_replay_fn
#cgo noescape th_launch_checked
#cgo nocallback th_launch_checked
#cgo noescape th_prelaunch
#cgo nocallback th_prelaunch
#cgo noescape th_launch1
#cgo nocallback th_launch1
#cgo nocallback th_queue_launch
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void* CUcontext;
typedef void* CUmodule;
typedef void* CUfunction;
typedef void* CUstream;
typedef void* CUevent;
typedef unsigned long long CUdeviceptr;
typedef struct { char reserved[64]; } CUipcMemHandle;

static void* th_lib;
static void* th_fn[80];

enum {
  F_cuInit, F_cuDriverGetVersion, F_cuDeviceGetCount, F_cuDeviceGet, F_cuDeviceGetAttribute,
  F_cuDeviceGetName, F_cuDevicePrimaryCtxRetain, F_cuDevicePrimaryCtxRelease, F_cuCtxSetCurrent,
  F_cuCtxGetCurrent, F_cuCtxGetDevice, F_cuCtxSynchronize, F_cuMemAlloc, F_cuMemFree, F_cuMemcpyHtoD,
  F_cuMemcpyDtoH, F_cuMemcpyHtoDAsync, F_cuMemcpyDtoHAsync, F_cuMemcpyDtoD, F_cuMemsetD8,
  F_cuMemHostAlloc, F_cuMemFreeHost, F_cuMemHostGetDevicePointer, F_cuModuleLoadData,
  F_cuModuleUnload, F_cuModuleGetFunction, F_cuLaunchKernel, F_cuStreamCreate, F_cuStreamDestroy,
  F_cuStreamSynchronize, F_cuStreamQuery, F_cuStreamIsCapturing, F_cuEventCreate, F_cuEventDestroy,
  F_cuEventRecord, F_cuEventSynchronize, F_cuEventQuery, F_cuEventElapsedTime, F_cuStreamWaitEvent,
  F_cuIpcGetMemHandle, F_cuIpcOpenMemHandle, F_cuIpcCloseMemHandle, F_cuMemGetAddressRange,
  F_cuPointerGetAttribute, F_cuGetErrorName, F_cuGetErrorString, F_cuFuncSetAttribute,
  F_cuMemGetInfo, F_cuModuleGetGlobal, F_cuCtxGetStreamPriorityRange, F_cuStreamCreateWithPriority,
  F_cuMemsetD32, F_cuFuncGetAttribute, F_cuMemcpyDtoDAsync, F_cuMemsetD8Async,
  F_cuStreamBeginCapture, F_cuStreamEndCapture, F_cuGraphInstantiateWithFlags, F_cuGraphLaunch,
  F_cuGraphExecDestroy, F_cuGraphDestroy, F_cuOccupancyMaxActiveBlocksPerMultiprocessor,
  F_cuThreadExchangeStreamCaptureMode,
  // Optional from here on: a driver without them loads, and the calls
  // that need them fail (driver lacks ...).
  F_cuStreamWriteValue32, F_cuStreamWaitValue32, F_cuFuncLoad,
  F_COUNT
};
enum { F_OPTIONAL = F_cuStreamWriteValue32 };

static const char* th_names[] = {
  "cuInit", "cuDriverGetVersion", "cuDeviceGetCount", "cuDeviceGet", "cuDeviceGetAttribute",
  "cuDeviceGetName", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease", "cuCtxSetCurrent",
  "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxSynchronize", "cuMemAlloc", "cuMemFree", "cuMemcpyHtoD",
  "cuMemcpyDtoH", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyDtoD", "cuMemsetD8",
  "cuMemHostAlloc", "cuMemFreeHost", "cuMemHostGetDevicePointer", "cuModuleLoadData",
  "cuModuleUnload", "cuModuleGetFunction", "cuLaunchKernel", "cuStreamCreate", "cuStreamDestroy",
  "cuStreamSynchronize", "cuStreamQuery", "cuStreamIsCapturing", "cuEventCreate", "cuEventDestroy",
  "cuEventRecord", "cuEventSynchronize", "cuEventQuery", "cuEventElapsedTime", "cuStreamWaitEvent",
  "cuIpcGetMemHandle", "cuIpcOpenMemHandle", "cuIpcCloseMemHandle", "cuMemGetAddressRange",
  "cuPointerGetAttribute", "cuGetErrorName", "cuGetErrorString", "cuFuncSetAttribute",
  "cuMemGetInfo", "cuModuleGetGlobal", "cuCtxGetStreamPriorityRange", "cuStreamCreateWithPriority",
  "cuMemsetD32", "cuFuncGetAttribute", "cuMemcpyDtoDAsync", "cuMemsetD8Async",
  "cuStreamBeginCapture", "cuStreamEndCapture", "cuGraphInstantiateWithFlags", "cuGraphLaunch",
  "cuGraphExecDestroy", "cuGraphDestroy", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
  "cuThreadExchangeStreamCaptureMode",
  "cuStreamWriteValue32", "cuStreamWaitValue32", "cuFuncLoad",
};

// The _v2 names dlsym falls back to when cuGetProcAddress is missing.
static const char* th_v2[] = {
  0, 0, 0, 0, 0, 0, 0, "cuDevicePrimaryCtxRelease_v2", 0, 0, 0, 0, "cuMemAlloc_v2", "cuMemFree_v2",
  "cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
  "cuMemcpyDtoD_v2", "cuMemsetD8_v2", 0, 0, "cuMemHostGetDevicePointer_v2", 0, 0, 0, 0, 0,
  "cuStreamDestroy_v2", 0, 0, 0, 0, "cuEventDestroy_v2", 0, 0, 0, 0, 0, 0, "cuIpcOpenMemHandle_v2",
  0, "cuMemGetAddressRange_v2", 0, 0, 0, 0, "cuMemGetInfo_v2", "cuModuleGetGlobal_v2", 0, 0,
  "cuMemsetD32_v2", 0, "cuMemcpyDtoDAsync_v2", 0,
  "cuStreamBeginCapture_v2", 0, 0, 0, 0, 0, 0, 0,
  // The stream memory operations' _v2 entry points (CUDA 11.7 and later)
  // are on without the NVreg_EnableStreamMemOPs module parameter the
  // first ones needed; cuGetProcAddress at 12.0 returns them.
  "cuStreamWriteValue32_v2", "cuStreamWaitValue32_v2",
  // cuFuncLoad is CUDA 12.4's: asked for 12.0's ABI, cuGetProcAddress
  // may not return it, so dlsym looks for it by its own name.
  "cuFuncLoad",
};

_Static_assert(sizeof(th_names) / sizeof(th_names[0]) == F_COUNT, "th_names");
_Static_assert(sizeof(th_v2) / sizeof(th_v2[0]) == F_COUNT, "th_v2");
_Static_assert(F_COUNT <= 80, "th_fn");

typedef CUresult (*pfnGetProcAddress)(const char*, void**, int, unsigned long long, int*);

// th_load opens the driver and resolves every entry point. Returns 0 on
// success, 1 when libcuda.so.1 cannot be opened, 2 when a symbol is missing
// (its index is stored in *missing).
static int th_load(int* missing) {
  if (th_lib) return 0;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!h) return 1;
  pfnGetProcAddress gpa = (pfnGetProcAddress)dlsym(h, "cuGetProcAddress_v2");
  for (int i = 0; i < F_COUNT; i++) {
    void* p = 0;
    if (gpa) {
      // Ask for the CUDA 12.0 ABI of every entry point: the declarations
      // above are 12.0's. (With the driver's own version, CUDA 13 returns
      // e.g. cuCtxSynchronize_v2, which takes a context argument.)
      int status = 0;
      if (gpa(th_names[i], &p, 12000, 0, &status) != 0) p = 0;
    }
    if (!p && th_v2[i]) p = dlsym(h, th_v2[i]);
    if (!p && i < F_OPTIONAL) p = dlsym(h, th_names[i]);
    if (!p && i < F_OPTIONAL) { *missing = i; dlclose(h); return 2; }
    th_fn[i] = p;
  }
  th_lib = h;
  return 0;
}

static const char* th_name(int i) { return th_names[i]; }

#define FN(T, i) ((T)th_fn[i])
static CUresult th_cuInit(unsigned f) { return FN(CUresult(*)(unsigned), F_cuInit)(f); }
static CUresult th_cuDriverGetVersion(int* v) { return FN(CUresult(*)(int*), F_cuDriverGetVersion)(v); }
static CUresult th_cuDeviceGetCount(int* n) { return FN(CUresult(*)(int*), F_cuDeviceGetCount)(n); }
static CUresult th_cuDeviceGet(CUdevice* d, int o) { return FN(CUresult(*)(CUdevice*, int), F_cuDeviceGet)(d, o); }
static CUresult th_cuDeviceGetAttribute(int* v, int a, CUdevice d) { return FN(CUresult(*)(int*, int, CUdevice), F_cuDeviceGetAttribute)(v, a, d); }
static CUresult th_cuDeviceGetName(char* n, int l, CUdevice d) { return FN(CUresult(*)(char*, int, CUdevice), F_cuDeviceGetName)(n, l, d); }
static CUresult th_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) { return FN(CUresult(*)(CUcontext*, CUdevice), F_cuDevicePrimaryCtxRetain)(c, d); }
static CUresult th_cuDevicePrimaryCtxRelease(CUdevice d) { return FN(CUresult(*)(CUdevice), F_cuDevicePrimaryCtxRelease)(d); }
static CUresult th_cuCtxSetCurrent(CUcontext c) { return FN(CUresult(*)(CUcontext), F_cuCtxSetCurrent)(c); }
static CUresult th_cuCtxGetCurrent(CUcontext* c) { return FN(CUresult(*)(CUcontext*), F_cuCtxGetCurrent)(c); }
static CUresult th_cuCtxGetDevice(CUdevice* d) { return FN(CUresult(*)(CUdevice*), F_cuCtxGetDevice)(d); }
static CUresult th_cuCtxSynchronize(void) { return FN(CUresult(*)(void), F_cuCtxSynchronize)(); }
static CUresult th_cuMemAlloc(CUdeviceptr* p, size_t n) { return FN(CUresult(*)(CUdeviceptr*, size_t), F_cuMemAlloc)(p, n); }
static CUresult th_cuMemFree(CUdeviceptr p) { return FN(CUresult(*)(CUdeviceptr), F_cuMemFree)(p); }
static CUresult th_cuMemcpyHtoD(CUdeviceptr d, const void* s, size_t n) { return FN(CUresult(*)(CUdeviceptr, const void*, size_t), F_cuMemcpyHtoD)(d, s, n); }
static CUresult th_cuMemcpyDtoH(void* d, CUdeviceptr s, size_t n) { return FN(CUresult(*)(void*, CUdeviceptr, size_t), F_cuMemcpyDtoH)(d, s, n); }
static CUresult th_cuMemcpyHtoDAsync(CUdeviceptr d, const void* s, size_t n, CUstream st) { return FN(CUresult(*)(CUdeviceptr, const void*, size_t, CUstream), F_cuMemcpyHtoDAsync)(d, s, n, st); }
static CUresult th_cuMemcpyDtoHAsync(void* d, CUdeviceptr s, size_t n, CUstream st) { return FN(CUresult(*)(void*, CUdeviceptr, size_t, CUstream), F_cuMemcpyDtoHAsync)(d, s, n, st); }
static CUresult th_cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) { return FN(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t), F_cuMemcpyDtoD)(d, s, n); }
static CUresult th_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return FN(CUresult(*)(CUdeviceptr, CUdeviceptr, size_t, CUstream), F_cuMemcpyDtoDAsync)(d, s, n, st); }
static CUresult th_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) { return FN(CUresult(*)(CUdeviceptr, unsigned char, size_t), F_cuMemsetD8)(d, v, n); }
static CUresult th_cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) { return FN(CUresult(*)(CUdeviceptr, unsigned, size_t), F_cuMemsetD32)(d, v, n); }
static CUresult th_cuMemHostAlloc(void** p, size_t n, unsigned f) { return FN(CUresult(*)(void**, size_t, unsigned), F_cuMemHostAlloc)(p, n, f); }
static CUresult th_cuMemFreeHost(void* p) { return FN(CUresult(*)(void*), F_cuMemFreeHost)(p); }
static CUresult th_cuMemHostGetDevicePointer(CUdeviceptr* d, void* p, unsigned f) { return FN(CUresult(*)(CUdeviceptr*, void*, unsigned), F_cuMemHostGetDevicePointer)(d, p, f); }
static CUresult th_cuModuleLoadData(CUmodule* m, const void* img) { return FN(CUresult(*)(CUmodule*, const void*), F_cuModuleLoadData)(m, img); }
static CUresult th_cuModuleUnload(CUmodule m) { return FN(CUresult(*)(CUmodule), F_cuModuleUnload)(m); }
static CUresult th_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* n) { return FN(CUresult(*)(CUfunction*, CUmodule, const char*), F_cuModuleGetFunction)(f, m, n); }
static CUresult th_cuModuleGetGlobal(CUdeviceptr* p, size_t* n, CUmodule m, const char* name) { return FN(CUresult(*)(CUdeviceptr*, size_t*, CUmodule, const char*), F_cuModuleGetGlobal)(p, n, m, name); }
static CUresult th_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shm, CUstream s, void** params, void** extra) {
  return FN(CUresult(*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**, void**), F_cuLaunchKernel)(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}
// th_launch1 launches f with a single by-value parameter block (the kernel's
// one struct argument), avoiding a Go-allocated void** array.
static CUresult th_launch1(CUfunction f, unsigned gx, unsigned bx, unsigned shm, CUstream s, void* arg) {
  void* params[1] = { arg };
  return th_cuLaunchKernel(f, gx, 1, 1, bx, 1, 1, shm, s, params, 0);
}
static CUresult th_cuStreamCreate(CUstream* s, unsigned f) { return FN(CUresult(*)(CUstream*, unsigned), F_cuStreamCreate)(s, f); }
static CUresult th_cuStreamDestroy(CUstream s) { return FN(CUresult(*)(CUstream), F_cuStreamDestroy)(s); }
static CUresult th_cuStreamSynchronize(CUstream s) { return FN(CUresult(*)(CUstream), F_cuStreamSynchronize)(s); }
static CUresult th_cuStreamQuery(CUstream s) { return FN(CUresult(*)(CUstream), F_cuStreamQuery)(s); }
static CUresult th_cuStreamIsCapturing(CUstream s, int* st) { return FN(CUresult(*)(CUstream, int*), F_cuStreamIsCapturing)(s, st); }
// th_prelaunch makes c current on the calling thread unless it already is,
// and, when check is set, reads s's capture status into *st (a failed
// query reads as not capturing): one crossing from Go instead of two or
// three. *which says which call failed (0 cuCtxGetCurrent, 1 cuCtxSetCurrent).
static CUresult th_prelaunch(CUcontext c, CUstream s, int check, int* st, int* which) {
  CUcontext cur = 0;
  *st = 0;
  *which = 0;
  CUresult r = th_cuCtxGetCurrent(&cur);
  if (r != 0) return r;
  if (cur != c) {
    *which = 1;
    r = th_cuCtxSetCurrent(c);
    if (r != 0) return r;
  }
  if (check && th_cuStreamIsCapturing(s, st) != 0) *st = 0;
  return 0;
}
// th_now is CLOCK_MONOTONIC in nanoseconds (the clock Go's time.Since
// uses).
static int64_t th_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
// th_launch_out is th_launch_checked's result, returned by value so that
// the call passes no pointer to Go memory but the kernel argument.
typedef struct {
  CUresult r;
  int which;      // the failing call: 0 cuCtxGetCurrent, 1 cuCtxSetCurrent, 2 cuLaunchKernel
  int capturing;  // the stream is being captured (check set)
  int64_t ns;     // timed: ns inside cuLaunchKernel
} th_launch_out;
// th_launch_checked is th_prelaunch then th_launch1, in one crossing from
// Go: make c current unless it is, read s's capture status when check is
// set (a failed query reads as not capturing), and when the stream is
// being captured set the 32-bit word at capfield (a field of arg; may be
// null) to capval; then launch f with arg. With timed set the time spent
// inside cuLaunchKernel is measured (CLOCK_MONOTONIC).
static th_launch_out th_launch_checked(CUcontext c, CUstream s, int check, CUfunction f, unsigned gx, unsigned bx,
                                       uintptr_t argp, uintptr_t capp, int32_t capval, int timed) {
  void* arg = (void*)argp;
  int32_t* capfield = (int32_t*)capp;
  th_launch_out o = {0, 0, 0, 0};
  CUcontext cur = 0;
  o.r = th_cuCtxGetCurrent(&cur);
  if (o.r != 0) return o;
  if (cur != c) {
    o.which = 1;
    o.r = th_cuCtxSetCurrent(c);
    if (o.r != 0) return o;
  }
  if (check) {
    int st = 0;
    if (th_cuStreamIsCapturing(s, &st) == 0 && st == 1) {
      o.capturing = 1;
      if (capfield) *capfield = capval;
    }
  }
  o.which = 2;
  int64_t t1 = timed ? th_now() : 0;
  o.r = th_launch1(f, gx, bx, 0, s, arg);
  if (timed) o.ns = th_now() - t1;
  return o;
}
// th_replay_launch is the launch function of replay records
// (runtime/replay, replay.h), called by th_replay_call on a C caller's
// thread with the record busy: it launches only when the record's
// context is current (it never switches contexts on a caller's thread)
// and the stream is not being captured (a captured launch is fenced and
// its memory kept: the Go path's work); otherwise it declines. A failed
// cuLaunchKernel enqueued nothing: the Go path launches again and
// reports the error.
#include "replay.h"
static int th_replay_launch(th_replay* r, th_replay_entry* e) {
  CUcontext cur = 0;
  if (th_cuCtxGetCurrent(&cur) != 0 || cur != (CUcontext)r->ctx) return TH_REPLAY_DECLINED;
  int st = 0;
  if (th_cuStreamIsCapturing((CUstream)r->stream, &st) != 0 || st != 0) return TH_REPLAY_DECLINED;
  int64_t t1 = r->timed ? th_now() : 0;
  CUresult res = th_launch1((CUfunction)e->fn, e->grid, e->threads, e->shmem, (CUstream)r->stream, e->arg);
  if (res != 0) return TH_REPLAY_FAILED;
  if (r->timed) {
    r->t_ns += th_now() - t1;
    r->t_launches++;
  }
  return TH_REPLAY_LAUNCHED;
}
static uintptr_t th_replay_fn(void) { return (uintptr_t)&th_replay_launch; }
static int th_has(int i) { return th_fn[i] != 0; }
// CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(*addr - value) >= 0.
#define TH_WAIT_GEQ 0
static CUresult th_cuStreamWriteValue32(CUstream s, CUdeviceptr a, unsigned v, unsigned f) { return FN(CUresult(*)(CUstream, CUdeviceptr, unsigned, unsigned), F_cuStreamWriteValue32)(s, a, v, f); }
static CUresult th_cuStreamWaitValue32(CUstream s, CUdeviceptr a, unsigned v, unsigned f) { return FN(CUresult(*)(CUstream, CUdeviceptr, unsigned, unsigned), F_cuStreamWaitValue32)(s, a, v, f); }
// th_queue_out is th_queue_launch's result.
typedef struct {
  CUresult r;
  int which;      // the failing call: 0 cuCtxGetCurrent, 1 cuCtxSetCurrent, 2 cuStreamWriteValue32, 3 cuStreamWaitValue32
  int capturing;  // the stream is being captured: nothing was written or enqueued
} th_queue_out;
// th_queue_launch is a persistent executor's launch (cuda/resident.go;
// the layout is cuda/kernel/queue.h's), in one crossing from Go: make c
// current unless it is; when check is set and the stream is being
// captured, do nothing more (the caller makes a kernel launch instead: a graph is replayed
// without the host, so a captured call cannot be a queue item); else
// write item seq's descriptor into its slot (seq last, released), then
// enqueue on s the release (cuStreamWriteValue32 of seq into the slot's
// doorbell word) and the wait for its completion (cuStreamWaitValue32
// until the done word reaches seq). The default flags: the write is
// ordered after the stream's earlier work (a memory barrier first), the
// wait compares in sequence order (GEQ).
static th_queue_out th_queue_launch(CUcontext c, CUstream s, int check, uintptr_t slotp, uint32_t seq, uint64_t arg, uint64_t launch,
                                    int32_t nfence, uint32_t grid, uint64_t in, uint64_t out, CUdeviceptr bell, CUdeviceptr done) {
  th_queue_out o = {0, 0, 0};
  CUcontext cur = 0;
  o.r = th_cuCtxGetCurrent(&cur);
  if (o.r != 0) return o;
  if (cur != c) {
    o.which = 1;
    o.r = th_cuCtxSetCurrent(c);
    if (o.r != 0) return o;
  }
  int st = 0;
  if (check && th_cuStreamIsCapturing(s, &st) == 0 && st != 0) {
    o.capturing = 1;
    return o;
  }
  char* slot = (char*)slotp;
  *(volatile uint64_t*)(slot + 0) = arg;
  *(volatile uint64_t*)(slot + 8) = launch;
  *(volatile int32_t*)(slot + 16) = nfence;
  *(volatile uint32_t*)(slot + 24) = grid;
  *(volatile uint32_t*)(slot + 28) = 0;
  *(volatile uint64_t*)(slot + 32) = in;
  *(volatile uint64_t*)(slot + 40) = out;
  __atomic_store_n((uint32_t*)(slot + 20), seq, __ATOMIC_RELEASE);
  o.which = 2;
  o.r = th_cuStreamWriteValue32(s, bell, seq, 0);
  if (o.r != 0) return o;
  o.which = 3;
  o.r = th_cuStreamWaitValue32(s, done, seq, TH_WAIT_GEQ);
  return o;
}
static CUresult th_cuStreamWaitEvent(CUstream s, CUevent e, unsigned f) { return FN(CUresult(*)(CUstream, CUevent, unsigned), F_cuStreamWaitEvent)(s, e, f); }
static CUresult th_cuEventCreate(CUevent* e, unsigned f) { return FN(CUresult(*)(CUevent*, unsigned), F_cuEventCreate)(e, f); }
static CUresult th_cuEventDestroy(CUevent e) { return FN(CUresult(*)(CUevent), F_cuEventDestroy)(e); }
static CUresult th_cuEventRecord(CUevent e, CUstream s) { return FN(CUresult(*)(CUevent, CUstream), F_cuEventRecord)(e, s); }
static CUresult th_cuEventSynchronize(CUevent e) { return FN(CUresult(*)(CUevent), F_cuEventSynchronize)(e); }
static CUresult th_cuEventQuery(CUevent e) { return FN(CUresult(*)(CUevent), F_cuEventQuery)(e); }
static CUresult th_cuEventElapsedTime(float* ms, CUevent a, CUevent b) { return FN(CUresult(*)(float*, CUevent, CUevent), F_cuEventElapsedTime)(ms, a, b); }
static CUresult th_cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) { return FN(CUresult(*)(CUipcMemHandle*, CUdeviceptr), F_cuIpcGetMemHandle)(h, p); }
static CUresult th_cuIpcOpenMemHandle(CUdeviceptr* p, CUipcMemHandle* h, unsigned f) { return FN(CUresult(*)(CUdeviceptr*, CUipcMemHandle, unsigned), F_cuIpcOpenMemHandle)(p, *h, f); }
static CUresult th_cuIpcCloseMemHandle(CUdeviceptr p) { return FN(CUresult(*)(CUdeviceptr), F_cuIpcCloseMemHandle)(p); }
static CUresult th_cuMemGetAddressRange(CUdeviceptr* base, size_t* size, CUdeviceptr p) { return FN(CUresult(*)(CUdeviceptr*, size_t*, CUdeviceptr), F_cuMemGetAddressRange)(base, size, p); }
static CUresult th_cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) { return FN(CUresult(*)(void*, int, CUdeviceptr), F_cuPointerGetAttribute)(data, attr, p); }
static CUresult th_cuGetErrorName(CUresult e, const char** s) { return FN(CUresult(*)(CUresult, const char**), F_cuGetErrorName)(e, s); }
static CUresult th_cuGetErrorString(CUresult e, const char** s) { return FN(CUresult(*)(CUresult, const char**), F_cuGetErrorString)(e, s); }
static CUresult th_cuFuncSetAttribute(CUfunction f, int a, int v) { return FN(CUresult(*)(CUfunction, int, int), F_cuFuncSetAttribute)(f, a, v); }
static CUresult th_cuThreadExchangeStreamCaptureMode(int* mode) { return FN(CUresult(*)(int*), F_cuThreadExchangeStreamCaptureMode)(mode); }
static CUresult th_cuOccupancy(int* n, CUfunction f, int block, size_t smem) { return FN(CUresult(*)(int*, CUfunction, int, size_t), F_cuOccupancyMaxActiveBlocksPerMultiprocessor)(n, f, block, smem); }
static CUresult th_cuFuncLoad(CUfunction f) { return FN(CUresult(*)(CUfunction), F_cuFuncLoad)(f); }
static CUresult th_cuFuncGetAttribute(int* v, int a, CUfunction f) { return FN(CUresult(*)(int*, int, CUfunction), F_cuFuncGetAttribute)(v, a, f); }
static CUresult th_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream st) { return FN(CUresult(*)(CUdeviceptr, unsigned char, size_t, CUstream), F_cuMemsetD8Async)(d, v, n, st); }
typedef void* CUgraph;
typedef void* CUgraphExec;
static CUresult th_cuStreamBeginCapture(CUstream s, int mode) { return FN(CUresult(*)(CUstream, int), F_cuStreamBeginCapture)(s, mode); }
static CUresult th_cuStreamEndCapture(CUstream s, CUgraph* g) { return FN(CUresult(*)(CUstream, CUgraph*), F_cuStreamEndCapture)(s, g); }
static CUresult th_cuGraphInstantiate(CUgraphExec* e, CUgraph g) { return FN(CUresult(*)(CUgraphExec*, CUgraph, unsigned long long), F_cuGraphInstantiateWithFlags)(e, g, 0); }
static CUresult th_cuGraphLaunch(CUgraphExec e, CUstream s) { return FN(CUresult(*)(CUgraphExec, CUstream), F_cuGraphLaunch)(e, s); }
static CUresult th_cuGraphExecDestroy(CUgraphExec e) { return FN(CUresult(*)(CUgraphExec), F_cuGraphExecDestroy)(e); }
static CUresult th_cuGraphDestroy(CUgraph g) { return FN(CUresult(*)(CUgraph), F_cuGraphDestroy)(g); }
static CUresult th_cuMemGetInfo(size_t* free, size_t* total) { return FN(CUresult(*)(size_t*, size_t*), F_cuMemGetInfo)(free, total); }
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// Result is a CUresult.
type Result int

// Selected CUresult values.
const (
	Success            Result = 0
	ErrorInvalidValue  Result = 1
	ErrorNotReady      Result = 600
	ErrorNoDevice      Result = 100
	ErrorAlreadyMapped Result = 208
	ErrorNotFound      Result = 500
)

// Error is a failed driver call.
type Error struct {
	Call   string
	Result Result
	Name   string // cuGetErrorName
	Text   string // cuGetErrorString
}

func (e *Error) Error() string {
	return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Call, e.Name, int(e.Result), e.Text)
}

// ErrNoDriver means libcuda.so.1 could not be opened: no NVIDIA driver.
var ErrNoDriver = errors.New("cuda: no driver (libcuda.so.1 not found)")

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens the driver and calls cuInit(0). It is safe to call many times.
// Entry points are resolved at their CUDA 12.0 ABI (cuGetProcAddress with
// cudaVersion 12000), which every driver since 12.0 provides.
func Load() error {
	loadOnce.Do(func() {
		var missing C.int
		switch C.th_load(&missing) {
		case 1:
			loadErr = ErrNoDriver
			return
		case 2:
			loadErr = fmt.Errorf("cuda: driver lacks %s", C.GoString(C.th_name(missing)))
			return
		}
		loadErr = check("cuInit", C.th_cuInit(0))
	})
	return loadErr
}

func check(call string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	e := &Error{Call: call, Result: Result(r)}
	var s *C.char
	if C.th_cuGetErrorName(r, &s) == 0 && s != nil {
		e.Name = C.GoString(s)
	}
	if C.th_cuGetErrorString(r, &s) == 0 && s != nil {
		e.Text = C.GoString(s)
	}
	return e
}

// IsResult reports whether err is a driver error with result r.
func IsResult(err error, r Result) bool {
	var e *Error
	return errors.As(err, &e) && e.Result == r
}

// Version returns the driver's CUDA version (e.g. 13000).
func Version() (int, error) {
	var v C.int
	err := check("cuDriverGetVersion", C.th_cuDriverGetVersion(&v))
	return int(v), err
}

// DeviceCount returns the number of visible GPUs.
func DeviceCount() (int, error) {
	if err := Load(); err != nil {
		return 0, err
	}
	var n C.int
	err := check("cuDeviceGetCount", C.th_cuDeviceGetCount(&n))
	return int(n), err
}

// Ptr is a device address (CUdeviceptr).
type Ptr uint64

// Stream is a CUstream (0 is the legacy default stream).
type Stream uintptr

// Event is a CUevent.
type Event uintptr

// Context is a CUcontext.
type Context uintptr

// Function is a CUfunction.
type Function uintptr

// Module is a CUmodule.
type Module uintptr

// IpcHandle is an exported allocation handle (CUipcMemHandle, 64 bytes).
type IpcHandle [64]byte

// Device attributes used by Theseus (CUdevice_attribute values).
const (
	AttrMultiprocessorCount = 16
	AttrComputeCapMajor     = 75
	AttrComputeCapMinor     = 76
	AttrUnifiedAddressing   = 41
)

// Pointer attributes (CUpointer_attribute values).
const (
	PointerAttrContext  = 1
	PointerAttrBufferID = 7
	PointerAttrDevOrd   = 9
)

// Device is one GPU with its retained primary context.
type Device struct {
	Ordinal int
	ctx     C.CUcontext
	dev     C.CUdevice
}

var (
	devMu   sync.Mutex
	devices = map[int]*Device{}
)

// OpenDevice returns GPU ordinal with its primary context retained. The
// context is retained once per process and kept for the process's lifetime
// (releasing it would destroy every module and allocation in it while other
// users of the device may still hold them), so the same *Device is returned
// for the same ordinal.
func OpenDevice(ordinal int) (*Device, error) {
	if err := Load(); err != nil {
		return nil, err
	}
	devMu.Lock()
	defer devMu.Unlock()
	if d, ok := devices[ordinal]; ok {
		return d, nil
	}
	d := &Device{Ordinal: ordinal}
	if err := check("cuDeviceGet", C.th_cuDeviceGet(&d.dev, C.int(ordinal))); err != nil {
		return nil, err
	}
	if err := check("cuDevicePrimaryCtxRetain", C.th_cuDevicePrimaryCtxRetain(&d.ctx, d.dev)); err != nil {
		return nil, err
	}
	devices[ordinal] = d
	return d, nil
}

// Close is a no-op kept for symmetry: the primary context stays retained
// for the process's lifetime (see OpenDevice).
func (d *Device) Close() error { return nil }

// Context returns the primary context.
func (d *Device) Context() Context { return Context(unsafe.Pointer(d.ctx)) }

// SetCurrent makes the device's context current on the calling OS thread.
// The caller must hold the thread (runtime.LockOSThread).
func (d *Device) SetCurrent() error {
	return check("cuCtxSetCurrent", C.th_cuCtxSetCurrent(d.ctx))
}

// Prelaunch makes the device's context current on the calling OS thread
// (cuCtxSetCurrent only when another one is: cuCtxGetCurrent first) and,
// when checkCapture is set, reports whether stream s is being captured
// (cuStreamIsCapturing; a failed query reads as not capturing), in one
// call from Go. The caller must hold the thread (runtime.LockOSThread).
// Errors: cuCtxGetCurrent's or cuCtxSetCurrent's.
func (d *Device) Prelaunch(s Stream, checkCapture bool) (capturing bool, err error) {
	var st, which C.int
	ck := C.int(0)
	if checkCapture {
		ck = 1
	}
	if r := C.th_prelaunch(d.ctx, handle[C.CUstream](uintptr(s)), ck, &st, &which); r != 0 {
		return false, check([]string{"cuCtxGetCurrent", "cuCtxSetCurrent"}[which], r)
	}
	return st == CaptureActive, nil
}

// handle reinterprets v as the driver handle type T (a C pointer type)
// without a call into C: each C.f(...) in Go is a cgo crossing, a few
// hundred nanoseconds on a virtual machine, even for a cast.
func handle[T any](v uintptr) T { return *(*T)(unsafe.Pointer(&v)) }

// LaunchTiming selects what Device.Launch measures (the launch-time
// accounting, off otherwise).
type LaunchTiming int32

const (
	// TimeNothing measures nothing.
	TimeNothing LaunchTiming = iota
	// TimeLaunch measures the time inside cuLaunchKernel.
	TimeLaunch
)

// LaunchResult is what Device.Launch reports besides an error.
type LaunchResult struct {
	// Capturing: the stream was being captured into a CUDA graph.
	Capturing bool
	// LaunchTime is the time inside cuLaunchKernel (TimeLaunch).
	LaunchTime time.Duration
}

// Launch is Prelaunch followed by Launch1, in one call from Go (one cgo
// crossing instead of two, and no thread to hold: the context switch and
// the launch run on the same OS thread by construction). It makes the
// device's context current on the calling thread unless it is; when
// checkCapture is set it reads whether stream s is being captured (a failed
// query reads as not capturing) and, when it is, stores capVal in the
// int32 at capField (a field of the kernel argument arg, or nil) before
// launching f on grid x block threads with arg (see Launch1). timing says
// what it measures (LaunchResult). Errors: cuCtxGetCurrent's,
// cuCtxSetCurrent's or cuLaunchKernel's.
func (d *Device) Launch(s Stream, checkCapture bool, f Function, grid, block int, arg, capField unsafe.Pointer, capVal int32, timing LaunchTiming) (LaunchResult, error) {
	ck := C.int(0)
	if checkCapture {
		ck = 1
	}
	// arg and capField go as integers: cgo would otherwise check each
	// pointer to Go memory on every launch (tens of nanoseconds). The
	// memory stays where it is (Go's heap does not move objects) and in use
	// until the call returns (KeepAlive); C keeps no pointer to it.
	o := C.th_launch_checked(d.ctx, handle[C.CUstream](uintptr(s)), ck, handle[C.CUfunction](uintptr(f)), C.uint(grid), C.uint(block),
		C.uintptr_t(uintptr(arg)), C.uintptr_t(uintptr(capField)), C.int32_t(capVal), C.int(timing))
	runtime.KeepAlive(arg)
	runtime.KeepAlive(capField)
	res := LaunchResult{Capturing: o.capturing != 0, LaunchTime: time.Duration(o.ns)}
	if o.r != 0 {
		return res, check([]string{"cuCtxGetCurrent", "cuCtxSetCurrent", "cuLaunchKernel"}[o.which], o.r)
	}
	return res, nil
}

// ReplayLaunchFn is the launch function of replay records
// (runtime/replay): make no context current, launch only when the
// record's context is current and its stream is not being captured, and
// time cuLaunchKernel when the record asks (replay.Launch.Timed).
func ReplayLaunchFn() uintptr { return uintptr(C.th_replay_fn()) }

// QueueResult is what Device.QueueLaunch reports besides an error.
type QueueResult struct {
	// Capturing: the stream was being captured into a CUDA graph, and
	// nothing was written or enqueued.
	Capturing bool
	// Enqueued: the release was enqueued (its wait may have failed).
	Enqueued bool
}

// ErrNoMemOps means the driver lacks the stream memory operations
// (cuStreamWriteValue32 and cuStreamWaitValue32, CUDA 11.7 and later).
var ErrNoMemOps = errors.New("cuda: the driver lacks cuStreamWriteValue32/cuStreamWaitValue32 (CUDA 11.7 or later)")

// HasMemOps reports whether the driver has the stream memory operations.
func HasMemOps() bool {
	return Load() == nil && C.th_has(C.F_cuStreamWriteValue32) != 0 && C.th_has(C.F_cuStreamWaitValue32) != 0
}

// QueueLaunch is a persistent executor's launch of item seq
// (cuda/resident.go, kernel/queue.h) in one call from Go: the device's
// context made current unless it is; when checkCapture is set and stream
// s is being captured, nothing more (Capturing); else the item's
// descriptor (arg, launch, nfence, grid, input and output bases) written into slot, host memory
// the resident kernel reads, with seq last, then on s the release
// (cuStreamWriteValue32 of seq into bell) and the wait for the item's
// completion (cuStreamWaitValue32 until done reaches seq in sequence
// order). Errors: the failing driver call's, ErrNoMemOps.
func (d *Device) QueueLaunch(s Stream, checkCapture bool, slot unsafe.Pointer, seq uint32, arg, launch uint64, nfence int32, grid uint32, in, out, bell, done Ptr) (QueueResult, error) {
	if !HasMemOps() {
		return QueueResult{}, ErrNoMemOps
	}
	ck := C.int(0)
	if checkCapture {
		ck = 1
	}
	o := C.th_queue_launch(d.ctx, handle[C.CUstream](uintptr(s)), ck, C.uintptr_t(uintptr(slot)), C.uint32_t(seq), C.uint64_t(arg),
		C.uint64_t(launch), C.int32_t(nfence), C.uint32_t(grid), C.uint64_t(in), C.uint64_t(out), C.CUdeviceptr(bell), C.CUdeviceptr(done))
	res := QueueResult{Capturing: o.capturing != 0, Enqueued: o.which == 3}
	if o.r != 0 {
		return res, check([]string{"cuCtxGetCurrent", "cuCtxSetCurrent", "cuStreamWriteValue32", "cuStreamWaitValue32"}[o.which], o.r)
	}
	return res, nil
}

// Attribute reads a device attribute.
func (d *Device) Attribute(attr int) (int, error) {
	var v C.int
	err := check("cuDeviceGetAttribute", C.th_cuDeviceGetAttribute(&v, C.int(attr), d.dev))
	return int(v), err
}

// Name is the device's marketing name.
func (d *Device) Name() string {
	var buf [256]C.char
	if C.th_cuDeviceGetName(&buf[0], 256, d.dev) != 0 {
		return "?"
	}
	return C.GoString(&buf[0])
}

// CurrentDevice returns the ordinal of the calling thread's current
// context's device, or -1 when the thread has no current context.
func CurrentDevice() (int, error) {
	if err := Load(); err != nil {
		return -1, err
	}
	var c C.CUcontext
	if err := check("cuCtxGetCurrent", C.th_cuCtxGetCurrent(&c)); err != nil {
		return -1, err
	}
	if c == nil {
		return -1, nil
	}
	var d C.CUdevice
	err := check("cuCtxGetDevice", C.th_cuCtxGetDevice(&d))
	return int(d), err
}

// MemAlloc allocates bytes of device memory in the current context.
func MemAlloc(bytes int64) (Ptr, error) {
	var p C.CUdeviceptr
	err := check("cuMemAlloc", C.th_cuMemAlloc(&p, C.size_t(bytes)))
	return Ptr(p), err
}

// MemFree frees device memory.
func MemFree(p Ptr) error { return check("cuMemFree", C.th_cuMemFree(C.CUdeviceptr(p))) }

// MemsetD8 sets bytes to v (synchronous with respect to the host).
func MemsetD8(p Ptr, v byte, bytes int64) error {
	return check("cuMemsetD8", C.th_cuMemsetD8(C.CUdeviceptr(p), C.uchar(v), C.size_t(bytes)))
}

// MemsetD8Async enqueues a memset of bytes bytes to v on stream s.
func MemsetD8Async(p Ptr, v byte, bytes int64, s Stream) error {
	return check("cuMemsetD8Async", C.th_cuMemsetD8Async(C.CUdeviceptr(p), C.uchar(v), C.size_t(bytes), handle[C.CUstream](uintptr(s))))
}

// CopyDtoHAsync enqueues a device-to-host copy on stream s; dst must stay
// alive and untouched until the stream has run it.
func CopyDtoHAsync(dst []byte, src Ptr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoHAsync", C.th_cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)), handle[C.CUstream](uintptr(s))))
}

// CopyHtoDAsync enqueues a host-to-device copy on stream s. src must stay
// unchanged until the stream has run the copy (synchronize s first).
func CopyHtoDAsync(dst Ptr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoDAsync", C.th_cuMemcpyHtoDAsync(C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src)), handle[C.CUstream](uintptr(s))))
}

// MemsetD32 sets n 32-bit words to v.
func MemsetD32(p Ptr, v uint32, n int64) error {
	return check("cuMemsetD32", C.th_cuMemsetD32(C.CUdeviceptr(p), C.uint(v), C.size_t(n)))
}

// CopyHtoD copies host bytes to device memory (synchronous).
func CopyHtoD(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD", C.th_cuMemcpyHtoD(C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// CopyDtoH copies device memory to host bytes (synchronous).
func CopyDtoH(dst []byte, src Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH", C.th_cuMemcpyDtoH(unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}

// CopyDtoDAsync enqueues a device-to-device copy on stream s.
func CopyDtoDAsync(dst, src Ptr, bytes int64, s Stream) error {
	return check("cuMemcpyDtoDAsync", C.th_cuMemcpyDtoDAsync(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes), handle[C.CUstream](uintptr(s))))
}

// CopyDtoD copies device memory (synchronous with respect to the host).
func CopyDtoD(dst, src Ptr, bytes int64) error {
	return check("cuMemcpyDtoD", C.th_cuMemcpyDtoD(C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(bytes)))
}

// HostAlloc allocates page-locked, device-mapped host memory (for error
// and abort flags the kernel and the host both see). It returns the host
// address, the device address, and an error.
func HostAlloc(bytes int64) (unsafe.Pointer, Ptr, error) {
	var p unsafe.Pointer
	const portable, devicemap = 1, 2
	if err := check("cuMemHostAlloc", C.th_cuMemHostAlloc(&p, C.size_t(bytes), portable|devicemap)); err != nil {
		return nil, 0, err
	}
	C.memset(p, 0, C.size_t(bytes))
	var d C.CUdeviceptr
	if err := check("cuMemHostGetDevicePointer", C.th_cuMemHostGetDevicePointer(&d, p, 0)); err != nil {
		C.th_cuMemFreeHost(p)
		return nil, 0, err
	}
	return p, Ptr(d), nil
}

// FreeHost frees HostAlloc memory.
func FreeHost(p unsafe.Pointer) error { return check("cuMemFreeHost", C.th_cuMemFreeHost(p)) }

// MemInfo returns free and total device memory in bytes.
func MemInfo() (free, total int64, err error) {
	var f, t C.size_t
	err = check("cuMemGetInfo", C.th_cuMemGetInfo(&f, &t))
	return int64(f), int64(t), err
}

// LoadModule loads a PTX or cubin image (JIT-compiling PTX for the device).
func LoadModule(image []byte) (Module, error) {
	img := C.CBytes(append(append([]byte(nil), image...), 0))
	defer C.free(img)
	var m C.CUmodule
	err := check("cuModuleLoadData", C.th_cuModuleLoadData(&m, img))
	return Module(unsafe.Pointer(m)), err
}

// Unload unloads a module.
func (m Module) Unload() error {
	return check("cuModuleUnload", C.th_cuModuleUnload(handle[C.CUmodule](uintptr(m))))
}

// Function returns a kernel of the module by (mangled) name.
func (m Module) Function(name string) (Function, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var f C.CUfunction
	err := check("cuModuleGetFunction", C.th_cuModuleGetFunction(&f, handle[C.CUmodule](uintptr(m)), cs))
	return Function(unsafe.Pointer(f)), err
}

// Global returns the address and size of a module global.
func (m Module) Global(name string) (Ptr, int64, error) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var p C.CUdeviceptr
	var n C.size_t
	err := check("cuModuleGetGlobal", C.th_cuModuleGetGlobal(&p, &n, handle[C.CUmodule](uintptr(m)), cs))
	return Ptr(p), int64(n), err
}

// Function attributes (CUfunction_attribute values).
const (
	FuncAttrMaxThreadsPerBlock = 0
	FuncAttrNumRegs            = 4
	FuncAttrLocalSizeBytes     = 3
	FuncAttrSharedSizeBytes    = 1 // static shared memory per block
	// FuncAttrPreferredSharedCarveout is the share of the unified L1 /
	// shared memory a multiprocessor gives shared memory when it runs the
	// function, in percent of the most it can (0: the most L1; -1: the
	// driver's choice). Settable.
	FuncAttrPreferredSharedCarveout = 9
)

// SetAttribute sets a settable function attribute (cuFuncSetAttribute).
func (f Function) SetAttribute(attr, v int) error {
	return check("cuFuncSetAttribute", C.th_cuFuncSetAttribute(handle[C.CUfunction](uintptr(f)), C.int(attr), C.int(v)))
}

// Attribute reads a function attribute.
func (f Function) Attribute(attr int) (int, error) {
	var v C.int
	err := check("cuFuncGetAttribute", C.th_cuFuncGetAttribute(&v, C.int(attr), handle[C.CUfunction](uintptr(f))))
	return int(v), err
}

// Load finishes loading f into its context now (cuFuncLoad, CUDA 12.4;
// with an older driver, a read of its register count, which needs the
// loaded function). Under lazy loading (CUDA_MODULE_LOADING=LAZY, the
// default since CUDA 12.2) cuModuleGetFunction may return a partially
// loaded function whose first launch completes the load, and a load may
// synchronize the context: a launch that waits there for a kernel of the
// same context that is itself waiting for this launch's kernel never
// returns (until that kernel's timeout). A caller that launches kernels
// which wait for each other loads them all first.
func (f Function) Load() error {
	if C.th_has(C.F_cuFuncLoad) != 0 {
		return check("cuFuncLoad", C.th_cuFuncLoad(handle[C.CUfunction](uintptr(f))))
	}
	_, err := f.Attribute(FuncAttrNumRegs)
	return err
}

// MaxActiveBlocksPerSM is how many blocks of f with block threads and
// sharedBytes of dynamic shared memory one multiprocessor holds at once
// (cuOccupancyMaxActiveBlocksPerMultiprocessor).
func (f Function) MaxActiveBlocksPerSM(block, sharedBytes int) (int, error) {
	var n C.int
	err := check("cuOccupancyMaxActiveBlocksPerMultiprocessor", C.th_cuOccupancy(&n, handle[C.CUfunction](uintptr(f)), C.int(block), C.size_t(sharedBytes)))
	return int(n), err
}

// Launch1 launches f on grid x block threads with one by-value parameter:
// the kernel's single struct argument at arg (copied by the driver before
// Launch1 returns, so arg may be reused). arg must point to C or pinned
// Go memory that does not contain Go pointers.
func Launch1(f Function, grid, block, sharedBytes int, s Stream, arg unsafe.Pointer) error {
	return check("cuLaunchKernel", C.th_launch1(handle[C.CUfunction](uintptr(f)), C.uint(grid), C.uint(block), C.uint(sharedBytes), handle[C.CUstream](uintptr(s)), arg))
}

// NewStream creates a non-blocking stream.
func NewStream() (Stream, error) {
	var s C.CUstream
	err := check("cuStreamCreate", C.th_cuStreamCreate(&s, 1))
	return Stream(unsafe.Pointer(s)), err
}

// Destroy destroys the stream.
func (s Stream) Destroy() error {
	return check("cuStreamDestroy", C.th_cuStreamDestroy(handle[C.CUstream](uintptr(s))))
}

// Synchronize waits for the stream's work.
func (s Stream) Synchronize() error {
	return check("cuStreamSynchronize", C.th_cuStreamSynchronize(handle[C.CUstream](uintptr(s))))
}

// Done reports whether the stream's work has finished.
func (s Stream) Done() (bool, error) {
	r := C.th_cuStreamQuery(handle[C.CUstream](uintptr(s)))
	if Result(r) == ErrorNotReady {
		return false, nil
	}
	return true, check("cuStreamQuery", r)
}

// Capture statuses (CUstreamCaptureStatus).
const (
	CaptureNone        = 0
	CaptureActive      = 1
	CaptureInvalidated = 2
)

// CaptureStatus reports whether the stream is being captured into a graph.
func (s Stream) CaptureStatus() (int, error) {
	var st C.int
	err := check("cuStreamIsCapturing", C.th_cuStreamIsCapturing(handle[C.CUstream](uintptr(s)), &st))
	return int(st), err
}

// Stream capture modes (CUstreamCaptureMode).
const (
	CaptureModeGlobal      = 0
	CaptureModeThreadLocal = 1
	CaptureModeRelaxed     = 2
)

// ExchangeCaptureMode sets the calling OS thread's stream capture
// interaction mode (cuThreadExchangeStreamCaptureMode) and returns the
// previous one. A thread in CaptureModeRelaxed may make calls that stream
// capture otherwise forbids while another stream is being captured
// (cuMemAlloc, synchronising a stream that is not captured), as NCCL does
// for its allocations during capture. The mode belongs to the OS thread:
// call it with the goroutine locked to its thread, and restore the mode
// before unlocking.
func ExchangeCaptureMode(mode int) (int, error) {
	m := C.int(mode)
	err := check("cuThreadExchangeStreamCaptureMode", C.th_cuThreadExchangeStreamCaptureMode(&m))
	return int(m), err
}

// Graph is a captured CUDA graph (CUgraph); GraphExec an instantiated one.
type (
	Graph     uintptr
	GraphExec uintptr
)

// BeginCapture starts capturing the stream's work into a graph
// (cuStreamBeginCapture, mode one of CaptureMode*).
func (s Stream) BeginCapture(mode int) error {
	return check("cuStreamBeginCapture", C.th_cuStreamBeginCapture(handle[C.CUstream](uintptr(s)), C.int(mode)))
}

// EndCapture ends the capture and returns the graph.
func (s Stream) EndCapture() (Graph, error) {
	var g C.CUgraph
	err := check("cuStreamEndCapture", C.th_cuStreamEndCapture(handle[C.CUstream](uintptr(s)), &g))
	return Graph(uintptr(g)), err
}

// Instantiate makes an executable graph of g.
func (g Graph) Instantiate() (GraphExec, error) {
	var e C.CUgraphExec
	err := check("cuGraphInstantiateWithFlags", C.th_cuGraphInstantiate(&e, handle[C.CUgraph](uintptr(g))))
	return GraphExec(uintptr(e)), err
}

// Destroy destroys the graph.
func (g Graph) Destroy() error {
	return check("cuGraphDestroy", C.th_cuGraphDestroy(handle[C.CUgraph](uintptr(g))))
}

// Launch enqueues one replay of the graph on stream s.
func (e GraphExec) Launch(s Stream) error {
	return check("cuGraphLaunch", C.th_cuGraphLaunch(handle[C.CUgraphExec](uintptr(e)), handle[C.CUstream](uintptr(s))))
}

// Destroy destroys the executable graph.
func (e GraphExec) Destroy() error {
	return check("cuGraphExecDestroy", C.th_cuGraphExecDestroy(handle[C.CUgraphExec](uintptr(e))))
}

// WaitEvent makes the stream wait for the event.
func (s Stream) WaitEvent(e Event) error {
	return check("cuStreamWaitEvent", C.th_cuStreamWaitEvent(handle[C.CUstream](uintptr(s)), handle[C.CUevent](uintptr(e)), 0))
}

// NewEvent creates an event; timing false makes it cheaper
// (CU_EVENT_DISABLE_TIMING).
func NewEvent(timing bool) (Event, error) {
	var e C.CUevent
	flags := C.uint(0)
	if !timing {
		flags = 2
	}
	err := check("cuEventCreate", C.th_cuEventCreate(&e, flags))
	return Event(unsafe.Pointer(e)), err
}

// Destroy destroys the event.
func (e Event) Destroy() error {
	return check("cuEventDestroy", C.th_cuEventDestroy(handle[C.CUevent](uintptr(e))))
}

// Record records the event on the stream.
func (e Event) Record(s Stream) error {
	return check("cuEventRecord", C.th_cuEventRecord(handle[C.CUevent](uintptr(e)), handle[C.CUstream](uintptr(s))))
}

// Synchronize waits for the event.
func (e Event) Synchronize() error {
	return check("cuEventSynchronize", C.th_cuEventSynchronize(handle[C.CUevent](uintptr(e))))
}

// Done reports whether the event has completed.
func (e Event) Done() (bool, error) {
	r := C.th_cuEventQuery(handle[C.CUevent](uintptr(e)))
	if Result(r) == ErrorNotReady {
		return false, nil
	}
	return true, check("cuEventQuery", r)
}

// Elapsed returns the milliseconds between two recorded timing events.
func Elapsed(start, end Event) (float32, error) {
	var ms C.float
	err := check("cuEventElapsedTime", C.th_cuEventElapsedTime(&ms, handle[C.CUevent](uintptr(start)), handle[C.CUevent](uintptr(end))))
	return float32(ms), err
}

// IpcGetHandle exports an allocation for other processes.
func IpcGetHandle(p Ptr) (IpcHandle, error) {
	var h C.CUipcMemHandle
	err := check("cuIpcGetMemHandle", C.th_cuIpcGetMemHandle(&h, C.CUdeviceptr(p)))
	return *(*IpcHandle)(unsafe.Pointer(&h)), err
}

// IpcOpen maps another process's exported allocation
// (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS).
func IpcOpen(h IpcHandle) (Ptr, error) {
	var p C.CUdeviceptr
	ch := *(*C.CUipcMemHandle)(unsafe.Pointer(&h))
	err := check("cuIpcOpenMemHandle", C.th_cuIpcOpenMemHandle(&p, &ch, 1))
	return Ptr(p), err
}

// IpcClose unmaps an imported allocation.
func IpcClose(p Ptr) error {
	return check("cuIpcCloseMemHandle", C.th_cuIpcCloseMemHandle(C.CUdeviceptr(p)))
}

// AddressRange returns the base and size of the allocation containing p.
func AddressRange(p Ptr) (Ptr, int64, error) {
	var base C.CUdeviceptr
	var size C.size_t
	err := check("cuMemGetAddressRange", C.th_cuMemGetAddressRange(&base, &size, C.CUdeviceptr(p)))
	return Ptr(base), int64(size), err
}

// BufferID returns CU_POINTER_ATTRIBUTE_BUFFER_ID of p: a process-unique id
// of the allocation, different for an allocation freed and reallocated at
// the same address.
func BufferID(p Ptr) (uint64, error) {
	var id C.ulonglong
	err := check("cuPointerGetAttribute", C.th_cuPointerGetAttribute(unsafe.Pointer(&id), PointerAttrBufferID, C.CUdeviceptr(p)))
	return uint64(id), err
}

// PointerDevice returns the ordinal of the device that owns p.
func PointerDevice(p Ptr) (int, error) {
	var d C.int
	err := check("cuPointerGetAttribute", C.th_cuPointerGetAttribute(unsafe.Pointer(&d), PointerAttrDevOrd, C.CUdeviceptr(p)))
	return int(d), err
}

// Synchronize waits for all work of the current context.
func Synchronize() error { return check("cuCtxSynchronize", C.th_cuCtxSynchronize()) }
