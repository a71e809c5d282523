// The measurement build of the executor kernel (never embedded): the
// product's executor (executor.cuh), with the knobs a bench build may set
// (COPY_UNROLL, REDUCE_UNROLL, MAX_THREADS: executor.cuh), the launch-phase
// timestamps of THESEUS_PROBE_TIMES, and the reference copy kernels the
// bandwidth benchmark times the executor's ops against. Built by
// `cuda/kernel/build.sh bench` (bench/gpu/prepare.sh) into a folder of
// theseus_<datatype>.ptx modules, which THESEUS_PTX_DIR or the cuda
// benchmarks' -bw.refs and -bw.variants flags load. Every build of it
// computes the product kernel's results.
//
// THESEUS_PROBE_TIMES=1: thread 0 of block 0 writes %globaltimer at fixed
// points of each launch (THESEUS_PROBE in executor.cuh) into slots of the
// stream's failure record page, 2048 bytes in; cuda's ProbeTimes (a test
// helper) reads them, and BenchmarkLatency -lat.probe prints them.
#if THESEUS_PROBE_TIMES
#define THESEUS_PROBE(err, i)                                                                         \
  do {                                                                                                \
    if (tid() == 0 && bid() == 0) ((volatile unsigned long long*)((char*)(err) + 2048))[i] = gtime(); \
  } while (0)
#endif

#include "executor.cuh"

// ---------------------------------------------------------------- reference copies

// theseus_stream_copy is the bandwidth benchmark's reference point
// (cuda/bw_test.go), not part of any collective: a plain grid-stride copy of
// n16 16-byte vectors, the kernel the op bandwidth goals are stated against.
struct theseus_stream_copy_args {
  const char* src;
  char* dst;
  i64 n16;
};
extern "C" __global__ void __launch_bounds__(1024) theseus_stream_copy(theseus_stream_copy_args a) {
  const i64 stride = (i64)nthreads() * __nvvm_read_ptx_sreg_nctaid_x();
  for (i64 i = (i64)bid() * nthreads() + tid(); i < a.n16; i += stride) st_v4(a.dst + i * 16, ld_v4(a.src + i * 16));
}

// theseus_block_copy is the same copy with each block streaming through
// its own contiguous 1/grid of the buffer (the executor's access pattern:
// one chunk per threadblock).
struct theseus_block_copy_args {
  const char* src;
  char* dst;
  i64 n16;
};
extern "C" __global__ void __launch_bounds__(1024) theseus_block_copy(theseus_block_copy_args a) {
  const i64 nb = __nvvm_read_ptx_sreg_nctaid_x(), nt = nthreads();
  const i64 per = a.n16 / nb;
  const char* src = a.src + (i64)bid() * per * 16;
  char* dst = a.dst + (i64)bid() * per * 16;
  const i64 span = 4 * nt, nfull = per / span;
  for (i64 k = 0; k < nfull; k++) {
    const i64 v = k * span + tid();
    v4 x0 = ld_v4(src + v * 16), x1 = ld_v4(src + (v + nt) * 16), x2 = ld_v4(src + (v + 2 * nt) * 16),
       x3 = ld_v4(src + (v + 3 * nt) * 16);
    st_v4(dst + v * 16, x0);
    st_v4(dst + (v + nt) * 16, x1);
    st_v4(dst + (v + 2 * nt) * 16, x2);
    st_v4(dst + (v + 3 * nt) * 16, x3);
  }
}

// More reference copies, to find which access pattern a copy needs to
// reach the memcpy ceiling. Each takes theseus_block_copy_args and copies
// all n16 vectors (cuda/bw_test.go, bwExtraRefs, gives each its grids).
//
// theseus_ref_flat1 and theseus_ref_flat4 copy 1 or 4 vectors per thread
// and 16*nt or 64*nt contiguous bytes per block, one block per such tile,
// no loop (the BabelStream shape: the block scheduler hands out the tiles
// in order).
// copy_round4 copies vectors v, v+nt, v+2nt, v+3nt of src to dst, the four
// loads before the four stores.
DEV void copy_round4(const char* src, char* dst, i64 v, i64 nt) {
  v4 x[4];
#pragma unroll
  for (int u = 0; u < 4; u++) x[u] = ld_v4(src + (v + u * nt) * 16);
#pragma unroll
  for (int u = 0; u < 4; u++) st_v4(dst + (v + u * nt) * 16, x[u]);
}
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_flat1(theseus_block_copy_args a) {
  const i64 i = (i64)bid() * nthreads() + tid();
  if (i < a.n16) st_v4(a.dst + i * 16, ld_v4(a.src + i * 16));
}
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_flat4(theseus_block_copy_args a) {
  const i64 nt = nthreads(), base = (i64)bid() * 4 * nt + tid();
  v4 x[4];
#pragma unroll
  for (int u = 0; u < 4; u++)
    if (base + u * nt < a.n16) x[u] = ld_v4(a.src + (base + u * nt) * 16);
#pragma unroll
  for (int u = 0; u < 4; u++)
    if (base + u * nt < a.n16) st_v4(a.dst + (base + u * nt) * 16, x[u]);
}
// theseus_ref_streamU is the grid-stride copy with U vectors in flight per
// thread, spaced by the whole grid (n16 a multiple of U * grid threads).
template <int U>
DEV void ref_stream(theseus_block_copy_args a) {
  const i64 g = (i64)nthreads() * __nvvm_read_ptx_sreg_nctaid_x();
  for (i64 i = (i64)bid() * nthreads() + tid(); i + (U - 1) * g < a.n16; i += U * g) {
    v4 x[U];
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = ld_v4(a.src + (i + u * g) * 16);
#pragma unroll
    for (int u = 0; u < U; u++) st_v4(a.dst + (i + u * g) * 16, x[u]);
  }
}
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_stream4(theseus_block_copy_args a) { ref_stream<4>(a); }
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_stream8(theseus_block_copy_args a) { ref_stream<8>(a); }
// theseus_ref_tiles deals tiles of 4*nt vectors (64 KiB at 1024 threads)
// round-robin to the blocks: block b copies tiles b, b+grid, ... (what a
// schedule of many interleaved chunks per threadblock does).
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_tiles(theseus_block_copy_args a) {
  const i64 nt = nthreads(), nb = __nvvm_read_ptx_sreg_nctaid_x(), tile = 4 * nt;
  for (i64 t = bid(); (t + 1) * tile <= a.n16; t += nb) {
    const i64 v = t * tile + tid();
    copy_round4(a.src, a.dst, v, nt);
  }
}
// theseus_ref_pipe is theseus_block_copy (one contiguous part per block)
// software-pipelined: the next round's 4 loads are issued before this
// round's 4 stores, so 8 vectors per thread are in flight.
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_pipe(theseus_block_copy_args a) {
  const i64 nb = __nvvm_read_ptx_sreg_nctaid_x(), nt = nthreads();
  const i64 per = a.n16 / nb;
  const char* src = a.src + (i64)bid() * per * 16;
  char* dst = a.dst + (i64)bid() * per * 16;
  const i64 span = 4 * nt, nfull = per / span;
  if (nfull == 0) return;
  v4 x[4];
#pragma unroll
  for (int u = 0; u < 4; u++) x[u] = ld_v4(src + (tid() + u * nt) * 16);
  for (i64 k = 0; k < nfull; k++) {
    const i64 v = k * span + tid();
    v4 y[4];
    if (k + 1 < nfull) {
#pragma unroll
      for (int u = 0; u < 4; u++) y[u] = ld_v4(src + (v + span + u * nt) * 16);
    }
#pragma unroll
    for (int u = 0; u < 4; u++) st_v4(dst + (v + u * nt) * 16, x[u]);
#pragma unroll
    for (int u = 0; u < 4; u++) x[u] = y[u];
  }
}
// theseus_ref_dyn deals tiles of 4*nt vectors to the blocks as they ask
// (an atomic tile counter, ctr[0]): blocks on faster multiprocessors copy
// more tiles, as the block scheduler balances theseus_ref_flat*. The last
// block to finish (ctr[1]) resets both counters for the next launch.
struct theseus_ref_dyn_args {
  const char* src;
  char* dst;
  i64 n16;
  u64* ctr;
};
extern "C" __global__ void __launch_bounds__(1024) theseus_ref_dyn(theseus_ref_dyn_args a) {
  __shared__ i64 s_tile;
  const i64 nt = nthreads(), tile = 4 * nt, ntiles = a.n16 / tile;
  for (;;) {
    if (tid() == 0) s_tile = (i64)atom_add_gpu(&a.ctr[0], 1);
    bar();
    const i64 t = s_tile;
    bar();
    if (t >= ntiles) break;
    const i64 v = t * tile + tid();
    copy_round4(a.src, a.dst, v, nt);
  }
  if (tid() == 0 && atom_add_gpu(&a.ctr[1], 1) + 1 == (u64)__nvvm_read_ptx_sreg_nctaid_x()) {
    a.ctr[0] = 0;
    a.ctr[1] = 0;
  }
}
