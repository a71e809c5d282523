// floor.cu — the hardware floor of a small collective on one GPU: what
// two ranks pay per call when each call is one kernel launch per rank that
// meets the other rank's launch through memory, and nothing else. A
// measurement probe (never part of the product), built on the GPU machine
// by bench/gpu/floor.sh with nvcc.
//
// Ranks: two streams of one process (as cuda BenchmarkLatency's goroutine
// ranks), or two processes (fork before CUDA starts; the peer's flag page
// through cudaIpc; under MPS, as nccl-tests runs). Each call is one launch
// of `grid` blocks of `threads` threads per rank; block 0's thread 0 runs
// the variant's handshake with the peer's launch, the other blocks exit.
// Times are per call over `iters` calls: eager (one launch each, the
// stream synchronised once at the end) and replayed (the same launches
// captured into one CUDA graph, replayed once).
//
// Variants (the handshake of one call, thread 0 of block 0):
//   empty   no handshake: the launch alone
//   vol     volatile store of the call's number into the peer's flag,
//           volatile polling of its own flag
//   rel     st.release.sys / ld.acquire.sys
//   sc      vol with fence.sc.sys before the store and after the poll
//   acqrel  vol with fence.acq_rel.sys before the store and after the poll
//   two     rel twice (two dependent rounds, as a copy op then a reduce op)
//   done    rel, then a bar.sync and a st.release.sys of a done word
//           into host-mapped memory (the executor's done word)
//
//   floor <mode: streams|procs> <variant> <grid> <threads> <iters>
//
// Output: one line per process, "FLOOR mode=... eager_us=... graph_us=...",
// the best of five timed repetitions of `iters` calls.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

typedef unsigned long long u64;

enum { V_EMPTY, V_VOL, V_REL, V_SC, V_ACQREL, V_TWO, V_DONE };

struct Args {
  u64* mine;    // this rank's flag line (the peer writes it)
  u64* peer;    // the peer's flag line (this rank writes it)
  u64* count;   // this rank's call counter (device memory, its own)
  u64* done;    // host-mapped done word (V_DONE)
  u64 timeout;  // ns
};

__device__ __forceinline__ u64 gtime() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void st_vol(u64* p, u64 v) { *(volatile u64*)p = v; }
__device__ __forceinline__ u64 ld_vol(const u64* p) { return *(const volatile u64*)p; }
__device__ __forceinline__ void st_rel(u64* p, u64 v) { asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory"); }
__device__ __forceinline__ u64 ld_acq(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

template <int V>
__device__ bool handshake(const Args& a, u64 want) {
  const u64 t0 = gtime();
  if (V == V_SC) asm volatile("fence.sc.sys;" ::: "memory");
  if (V == V_ACQREL) asm volatile("fence.acq_rel.sys;" ::: "memory");
  if (V == V_VOL || V == V_SC || V == V_ACQREL)
    st_vol(a.peer, want);
  else
    st_rel(a.peer, want);
  for (;;) {
    const u64 v = (V == V_VOL || V == V_SC || V == V_ACQREL) ? ld_vol(a.mine) : ld_acq(a.mine);
    if (v >= want) break;
    if (gtime() - t0 > a.timeout) return false;
  }
  if (V == V_SC) asm volatile("fence.sc.sys;" ::: "memory");
  if (V == V_ACQREL) asm volatile("fence.acq_rel.sys;" ::: "memory");
  return true;
}

template <int V>
__global__ void call(Args a) {
  if (V == V_EMPTY) return;
  if (blockIdx.x != 0) return;
  if (threadIdx.x == 0) {
    const u64 n = *a.count + 1;
    *a.count = n;
    bool ok;
    if (V == V_TWO)
      ok = handshake<V_REL>(a, 2 * n - 1) && handshake<V_REL>(a, 2 * n);
    else
      ok = handshake<V>(a, n);
    if (!ok) asm volatile("trap;");
  }
  if (V == V_DONE) {
    __syncthreads();
    if (threadIdx.x == 0) st_rel(a.done, *a.count);
  }
}

typedef void (*Kern)(Args);

static Kern pick(const char* v, int* id) {
  static const struct {
    const char* name;
    Kern k;
    int id;
  } t[] = {{"empty", call<V_EMPTY>, V_EMPTY}, {"vol", call<V_VOL>, V_VOL},          {"rel", call<V_REL>, V_REL},
           {"sc", call<V_SC>, V_SC},          {"acqrel", call<V_ACQREL>, V_ACQREL}, {"two", call<V_TWO>, V_TWO},
           {"done", call<V_DONE>, V_DONE}};
  for (auto& e : t)
    if (!strcmp(e.name, v)) {
      *id = e.id;
      return e.k;
    }
  fprintf(stderr, "unknown variant %s\n", v);
  exit(2);
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A rank's stream and its launch arguments.
struct Rank {
  cudaStream_t s;
  Args a;
};

static void launch_all(Kern k, Rank* rk, int nr, int grid, int threads, int iters) {
  for (int i = 0; i < iters; i++)
    for (int r = 0; r < nr; r++) k<<<grid, threads, 0, rk[r].s>>>(rk[r].a);
}

static void measure(const char* mode, const char* vname, Kern k, Rank* rk, int nr, int grid, int threads, int iters,
                    void (*barrier)(void*), void* bctx) {
  // warm up
  launch_all(k, rk, nr, grid, threads, 50);
  for (int r = 0; r < nr; r++) CK(cudaStreamSynchronize(rk[r].s));
  double best_e = 1e30, best_g = 1e30;
  for (int rep = 0; rep < 5; rep++) {
    barrier(bctx);
    double t0 = now_us();
    launch_all(k, rk, nr, grid, threads, iters);
    for (int r = 0; r < nr; r++) CK(cudaStreamSynchronize(rk[r].s));
    double e = (now_us() - t0) / iters;
    if (e < best_e) best_e = e;
  }
  // graphs: one per rank stream (streams mode: both captured, launched back to back)
  cudaGraphExec_t ex[2];
  for (int r = 0; r < nr; r++) {
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(rk[r].s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < iters; i++) k<<<grid, threads, 0, rk[r].s>>>(rk[r].a);
    CK(cudaStreamEndCapture(rk[r].s, &g));
    CK(cudaGraphInstantiate(&ex[r], g, 0));
    CK(cudaGraphDestroy(g));
  }
  for (int r = 0; r < nr; r++) CK(cudaGraphLaunch(ex[r], rk[r].s));  // warm-up replay
  for (int r = 0; r < nr; r++) CK(cudaStreamSynchronize(rk[r].s));
  for (int rep = 0; rep < 5; rep++) {
    barrier(bctx);
    double t0 = now_us();
    for (int r = 0; r < nr; r++) CK(cudaGraphLaunch(ex[r], rk[r].s));
    for (int r = 0; r < nr; r++) CK(cudaStreamSynchronize(rk[r].s));
    double g = (now_us() - t0) / iters;
    if (g < best_g) best_g = g;
  }
  for (int r = 0; r < nr; r++) CK(cudaGraphExecDestroy(ex[r]));
  printf("FLOOR mode=%s variant=%s grid=%d threads=%d iters=%d eager_us=%.2f graph_us=%.2f\n", mode, vname, grid, threads, iters,
         best_e, best_g);
  fflush(stdout);
}

static void nobarrier(void*) {}

// The two processes meet through a pair of pipes before each timed rep.
struct Pipes {
  int rd, wr;
};
static void pipe_barrier(void* p) {
  Pipes* q = (Pipes*)p;
  char c = 1;
  if (write(q->wr, &c, 1) != 1 || read(q->rd, &c, 1) != 1) {
    fprintf(stderr, "pipe barrier failed\n");
    exit(1);
  }
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: floor streams|procs <variant> <grid> <threads> <iters>\n");
    return 2;
  }
  const char* mode = argv[1];
  int vid;
  Kern k = pick(argv[2], &vid);
  const int grid = atoi(argv[3]), threads = atoi(argv[4]), iters = atoi(argv[5]);
  const u64 timeout = 2000000000ull;
  if (!strcmp(mode, "streams")) {
    CK(cudaSetDevice(0));
    u64 *flags, *done;
    CK(cudaMalloc(&flags, 4096));
    CK(cudaMemset(flags, 0, 4096));
    CK(cudaHostAlloc(&done, 4096, cudaHostAllocMapped));
    u64* ddone;
    CK(cudaHostGetDevicePointer(&ddone, done, 0));
    Rank rk[2];
    for (int r = 0; r < 2; r++) {
      CK(cudaStreamCreateWithFlags(&rk[r].s, cudaStreamNonBlocking));
      rk[r].a = Args{flags + 16 * r, flags + 16 * (1 - r), flags + 64 + 16 * r, ddone + 16 * r, timeout};
    }
    measure(mode, argv[2], k, rk, 2, grid, threads, iters, nobarrier, nullptr);
    return 0;
  }
  // procs: rank 0 allocates both flag lines, rank 1 maps them.
  int p2c[2], c2p[2], h[2];
  if (pipe(p2c) || pipe(c2p) || pipe(h)) return 1;
  pid_t pid = fork();
  const int r = pid == 0 ? 1 : 0;
  Pipes pp = r == 0 ? Pipes{c2p[0], p2c[1]} : Pipes{p2c[0], c2p[1]};
  CK(cudaSetDevice(0));
  u64* flags;
  if (r == 0) {
    CK(cudaMalloc(&flags, 4096));
    CK(cudaMemset(flags, 0, 4096));
    CK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t ih;
    CK(cudaIpcGetMemHandle(&ih, flags));
    if (write(h[1], &ih, sizeof ih) != sizeof ih) return 1;
  } else {
    cudaIpcMemHandle_t ih;
    if (read(h[0], &ih, sizeof ih) != sizeof ih) return 1;
    CK(cudaIpcOpenMemHandle((void**)&flags, ih, cudaIpcMemLazyEnablePeerAccess));
  }
  u64 *cnt, *done, *ddone;
  CK(cudaMalloc(&cnt, 256));
  CK(cudaMemset(cnt, 0, 256));
  CK(cudaHostAlloc(&done, 4096, cudaHostAllocMapped));
  CK(cudaHostGetDevicePointer(&ddone, done, 0));
  Rank rk;
  CK(cudaStreamCreateWithFlags(&rk.s, cudaStreamNonBlocking));
  rk.a = Args{flags + 16 * r, flags + 16 * (1 - r), cnt, ddone, timeout};
  CK(cudaDeviceSynchronize());
  measure(r == 0 ? "procs" : "procs-rank1", argv[2], k, &rk, 1, grid, threads, iters, pipe_barrier, &pp);
  if (r == 0) {
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  return 0;
}
