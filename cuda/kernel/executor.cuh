// The generic executor kernel of Theseus: one CUDA block per threadblock of
// a rank's op table (optable.h); each block walks its ops for every pipeline
// slice, exactly as docs/design/ir.md specifies, in the element order of the
// host interpreter (runtime/interp), so results are bit-identical.
//
// This header is the whole executor: theseus.cu (the product, embedded by
// package cuda) and bench.cu (measurement builds, never embedded) include
// it. Built without the CUDA toolkit: clang --cuda-device-only -nocudainc
// (build.sh), so it declares what it needs from NVVM builtins and inline
// PTX. No fused multiply-add (-ffp-contract=off), no flush-to-zero.

#pragma once

#include "launch.h"
#include "optable.h"

#define __device__ __attribute__((device))
#define __global__ __attribute__((global))
#define __shared__ __attribute__((shared))
#define DEV __device__ __attribute__((always_inline)) inline
#define NOINLINE __device__ __attribute__((noinline))
#define __launch_bounds__(n) __attribute__((launch_bounds(n)))

// Tuning knobs, fixed here for the product; a measurement build (bench.cu,
// bench/gpu/prepare.sh) may set them with -D: 16-byte vectors in flight per
// thread in a copy and in a reduce, and the kernel's launch bound (the most
// threads per block a table may ask for).
#ifndef COPY_UNROLL
#define COPY_UNROLL 4
#endif
#ifndef REDUCE_UNROLL
#define REDUCE_UNROLL 2
#endif
#ifndef MAX_THREADS
#define MAX_THREADS THESEUS_EXEC_MAX_THREADS
#endif
// The module's datatype (an ir.DataType number): build.sh builds one module
// per datatype, and the host loads the module of a request's datatype.
#ifndef THESEUS_DTYPE
#error "THESEUS_DTYPE (the module's ir.DataType number) must be defined"
#endif
// THESEUS_PROBE(err, i) marks point i of a launch (theseus_exec, data_op_t)
// for a measurement build that times them (bench.cu); here it does nothing.
#ifndef THESEUS_PROBE
#define THESEUS_PROBE(err, i) ((void)0)
#endif

typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int64_t i64;
typedef int32_t i32;

struct alignas(16) v4 {
  u32 x, y, z, w;
};

// ---------------------------------------------------------------- hardware

DEV u32 tid() { return __nvvm_read_ptx_sreg_tid_x(); }
DEV u32 nthreads() { return __nvvm_read_ptx_sreg_ntid_x(); }
DEV u32 bid() { return __nvvm_read_ptx_sreg_ctaid_x(); }
DEV void bar() { asm volatile("bar.sync 0;" ::: "memory"); }
DEV u64 gtime() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
DEV void fence_sys() { asm volatile("fence.sc.sys;" ::: "memory"); }
DEV void fence_gpu() { asm volatile("fence.sc.gpu;" ::: "memory"); }
DEV u64 ld_acquire_sys(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
// ld_poll_sys reads a word a peer (or this rank's previous launch) writes
// with release semantics: an acquire load on every poll.
DEV u64 ld_poll_sys(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
DEV u64 ld_acquire_gpu(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
DEV void st_release_gpu(u64* p, u64 v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
DEV void red_add_release_sys(u64* p, u64 v) {
  asm volatile("red.release.sys.global.add.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
DEV u64 atom_add_gpu(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
// atom_add_relaxed_gpu orders nothing but the word itself: for counters
// that hand out work and publish no data (take_unit).
DEV u64 atom_add_relaxed_gpu(u64* p, u64 v) {
  u64 old;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}
DEV u32 ld_volatile_u32(const volatile u32* p) { return *p; }
DEV u32 atom_cas_u32(u32* p, u32 cmp, u32 v) {
  u32 old;
  asm volatile("atom.global.cas.b32 %0, [%1], %2, %3;" : "=r"(old) : "l"(p), "r"(cmp), "r"(v) : "memory");
  return old;
}
DEV u64 atom_cas_u64(u64* p, u64 cmp, u64 v) {
  u64 old;
  asm volatile("atom.global.cas.b64 %0, [%1], %2, %3;" : "=l"(old) : "l"(p), "l"(cmp), "l"(v) : "memory");
  return old;
}
DEV void st_volatile_u32(volatile u32* p, u32 v) { *p = v; }
// ld_v4 and st_v4 load and store the data of copies and reduces (plain
// weak accesses: no cache hints).
DEV v4 ld_v4(const void* p) {
  v4 r;
  asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p) : "memory");
  return r;
}
DEV void st_v4(void* p, v4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
DEV v4 ld_volatile_v4(const void* p) {
  v4 r;
  asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p) : "memory");
  return r;
}
DEV void st_volatile_v4(void* p, v4 v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
DEV void ld_volatile_v2(const void* p, u32& a, u32& b) {
  asm volatile("ld.volatile.global.v2.u32 {%0,%1}, [%2];" : "=r"(a), "=r"(b) : "l"(p) : "memory");
}
DEV void st_volatile_v2(void* p, u32 a, u32 b) {
  asm volatile("st.volatile.global.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(a), "r"(b) : "memory");
}
DEV float f16_to_f32(u16 h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
DEV u16 f32_to_f16(float f) {
  u16 h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
DEV u16 f32_to_bf16(float f) {
  u16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
DEV float bits_f32(u32 b) { return __builtin_bit_cast(float, b); }
DEV u32 f32_bits(float f) { return __builtin_bit_cast(u32, f); }
DEV double bits_f64(u64 b) { return __builtin_bit_cast(double, b); }
// pow2f is 2^k exactly, for k in [-149, 127].
DEV float pow2f(int k) { return k >= -126 ? bits_f32((u32)(k + 127) << 23) : bits_f32(1u << (k + 149)); }
DEV u64 f64_bits(double f) { return __builtin_bit_cast(u64, f); }

// ---------------------------------------------------------------- numerics
// Exactly runtime/interp/numeric (docs/design/ir.md §8).

// fp8 formats: ebits, mbits, bias, hasInf; both saturate to the largest
// finite value; canonical NaN 0x7f; NaN keeps the input's sign on narrowing.
struct Fp8Fmt {
  int ebits, mbits, bias;
  bool hasInf;
  u32 maxFinite;
};
DEV u32 rne_shift(u32 v, u32 s) {
  if (s >= 32) return 0;
  u32 q = v >> s;
  u32 rem = v & ((1u << s) - 1);
  u32 half = 1u << (s - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return q;
}
DEV u32 narrow_fp8(float x, Fp8Fmt f) {
  u32 b = f32_bits(x);
  u32 sign = (b >> 31) ? (1u << (f.ebits + f.mbits)) : 0;
  int exp = (b >> 23) & 0xff;
  u32 man = b & 0x7fffff;
  if (exp == 0xff) {
    if (man != 0) return sign | 0x7f;
    return sign | f.maxFinite;
  }
  if (exp == 0 && man == 0) return sign;
  u32 sig = man | (1u << 23);
  int e2 = exp - 150;
  if (exp == 0) {
    sig = man;
    e2 = -149;
  }
  int e = e2 + (32 - __builtin_clz(sig)) - 1;
  int minE = 1 - f.bias;
  if (e < minE) e = minE;
  if (e + f.bias > (1 << f.ebits)) return sign | f.maxFinite;
  int shift = e - f.mbits - e2;
  u32 q = shift <= 0 ? (sig << (u32)(-shift)) : rne_shift(sig, (u32)shift);
  u32 code = ((u32)(e + f.bias - 1) << f.mbits) + q;
  if (code > f.maxFinite) return sign | f.maxFinite;
  return sign | code;
}
DEV float widen_fp8(u32 c, Fp8Fmt f) {
  u32 signbit = 1u << (f.ebits + f.mbits);
  bool neg = (c & signbit) != 0;
  c &= ~signbit;
  int exp = (int)(c >> f.mbits);
  u32 man = c & ((1u << f.mbits) - 1);
  int maxExp = (1 << f.ebits) - 1;
  u32 sign = neg ? 0x80000000u : 0;
  if (f.hasInf && exp == maxExp && man == 0) return bits_f32(sign | 0x7f800000u);
  if ((f.hasInf && exp == maxExp) || (!f.hasInf && c == 0x7fu)) return bits_f32(sign | 0x7fc00000u | (man << (23 - f.mbits)));
  float v;
  if (exp == 0) {
    v = (float)man * pow2f(1 - f.bias - f.mbits);
  } else {
    v = (float)((1u << f.mbits) | man) * pow2f(exp - f.bias - f.mbits);
  }
  return neg ? -v : v;
}
#define E4M3 (Fp8Fmt{4, 3, 7, false, 0x7e})
#define E5M2 (Fp8Fmt{5, 2, 15, true, 0x7b})

enum { RSUM = 0, RPROD = 1, RMAX = 2, RMIN = 3, RAVG = 4 };
enum { T_I8 = 0, T_U8, T_I32, T_U32, T_I64, T_U64, T_F16, T_F32, T_F64, T_BF16, T_E4M3, T_E5M2 };

template <typename C>
DEV C fmax_rule(C a, C b) {
  if (b != b) return a;
  if (a != a || b > a) return b;
  return a;
}
template <typename C>
DEV C fmin_rule(C a, C b) {
  if (b != b) return a;
  if (a != a || b < a) return b;
  return a;
}
template <typename C, int OP>
DEV C combine_f(C a, C b) {
  if (OP == RSUM || OP == RAVG) return a + b;
  if (OP == RPROD) return a * b;
  if (OP == RMAX) return fmax_rule(a, b);
  return fmin_rule(a, b);
}
template <typename C, int OP>
DEV C combine_i(C a, C b) {
  if (OP == RSUM || OP == RAVG) return (C)(a + b);
  if (OP == RPROD) return (C)(a * b);
  if (OP == RMAX) return a > b ? a : b;
  return a < b ? a : b;
}

// Traits: E is the storage type, C the compute type.
template <int T> struct Tr;
#define INT_TRAITS(ID, TY)                                        \
  template <> struct Tr<ID> {                                     \
    typedef TY E;                                                 \
    typedef TY C;                                                 \
    static DEV C widen(E e) { return e; }                         \
    static DEV E narrow(C c) { return c; }                        \
    template <int OP> static DEV C comb(C a, C b) { return combine_i<C, OP>(a, b); } \
  };
INT_TRAITS(T_I8, int8_t)
INT_TRAITS(T_U8, uint8_t)
INT_TRAITS(T_I32, int32_t)
INT_TRAITS(T_U32, uint32_t)
INT_TRAITS(T_I64, int64_t)
INT_TRAITS(T_U64, uint64_t)
template <> struct Tr<T_F32> {
  typedef u32 E;
  typedef float C;
  static DEV C widen(E e) { return bits_f32(e); }
  static DEV E narrow(C c) { return c != c ? 0x7fffffffu : f32_bits(c); }
  template <int OP> static DEV C comb(C a, C b) { return combine_f<C, OP>(a, b); }
};
template <> struct Tr<T_F64> {
  typedef u64 E;
  typedef double C;
  static DEV C widen(E e) { return bits_f64(e); }
  static DEV E narrow(C c) { return c != c ? 0x7fffffffffffffffull : f64_bits(c); }
  template <int OP> static DEV C comb(C a, C b) { return combine_f<C, OP>(a, b); }
};
template <> struct Tr<T_F16> {
  typedef u16 E;
  typedef float C;
  static DEV C widen(E e) { return f16_to_f32(e); }
  static DEV E narrow(C c) { return c != c ? (u16)0x7fff : f32_to_f16(c); }
  template <int OP> static DEV C comb(C a, C b) { return combine_f<C, OP>(a, b); }
};
template <> struct Tr<T_BF16> {
  typedef u16 E;
  typedef float C;
  static DEV C widen(E e) { return bits_f32((u32)e << 16); }
  static DEV E narrow(C c) { return c != c ? (u16)0x7fff : f32_to_bf16(c); }
  template <int OP> static DEV C comb(C a, C b) { return combine_f<C, OP>(a, b); }
};
template <> struct Tr<T_E4M3> {
  typedef u8 E;
  typedef float C;
  static DEV C widen(E e) { return widen_fp8(e, E4M3); }
  static DEV E narrow(C c) { return c != c ? (u8)0x7f : (u8)narrow_fp8(c, E4M3); }
  template <int OP> static DEV C comb(C a, C b) { return combine_f<C, OP>(a, b); }
};
template <> struct Tr<T_E5M2> {
  typedef u8 E;
  typedef float C;
  static DEV C widen(E e) { return widen_fp8(e, E5M2); }
  static DEV E narrow(C c) { return c != c ? (u8)0x7f : (u8)narrow_fp8(c, E5M2); }
  template <int OP> static DEV C comb(C a, C b) { return combine_f<C, OP>(a, b); }
};

// ---------------------------------------------------------------- context

#define MAX_REFS 128  // srcs + dsts of one op (codegen/optable enforces the same limit)

struct Ctx {
  const theseus_launch* L;
  const theseus_optable_header* h;
  const theseus_op* ops;
  const theseus_ref* refs;
  const theseus_dep* deps;
  const i32* chan_list;
  const theseus_chan_rt* chans;
  const theseus_tb* tbs;
  i64 es;
  i64 chunkB;  // bytes of one scratch chunk (2x payload for LL)
  i64 half;    // byte offset of this launch's scratch half
  u32 flag;    // LL flag
  bool ll;
  int tb;
  u64 op_base;   // index of ops[0] in the table's op section (staged ops; else 0)
  u64 ref_base;  // index of refs[0] in the table's ref section (staged refs; else 0)
};

// The op table's records as the executor reads them: the launch's table
// (staged in shared memory, or in global memory: Ctx), or, in a
// specialised module (THESEUS_SPECIALIZED: one rank's table compiled in by
// `theseusc compile --specialize`, codegen/specialize), the generated
// file's constant arrays spec_hdr, spec_tbs, spec_ops, spec_refs,
// spec_deps and spec_chan_list. There exec_block is instantiated per
// threadblock and its op loops are unrolled (T_UNROLL), so every op's
// fields are constants the compiler folds: the same code, evaluated over
// one table.
#ifdef THESEUS_SPECIALIZED
#define T_HDR(c) (&spec_hdr)
#define T_OPS(c) spec_ops
#define T_OP_BASE(c) 0
#define T_REFS(c) spec_refs
#define T_REF_BASE(c) 0
#define T_DEPS(c) spec_deps
#define T_CHAN_LIST(c) spec_chan_list
#define T_TBS(c) spec_tbs
#define T_UNROLL _Pragma("unroll")
#else
#define T_HDR(c) ((c).h)
#define T_OPS(c) ((c).ops)
#define T_OP_BASE(c) ((c).op_base)
#define T_REFS(c) ((c).refs)
#define T_REF_BASE(c) ((c).ref_base)
#define T_DEPS(c) ((c).deps)
#define T_CHAN_LIST(c) ((c).chan_list)
#define T_TBS(c) ((c).tbs)
#define T_UNROLL
#endif

__shared__ int s_fail;

DEV theseus_error* err_rec(const Ctx& c) { return (theseus_error*)c.L->error; }

// fail records the first failure of the launch (first writer wins) and
// marks this block failed. Called by one thread.
NOINLINE void fail(const Ctx& c, u32 code, u32 what, i64 step, i64 slice, i32 ch, u64 have, u64 want) {
  s_fail = 1;
  if (atom_cas_u32((u32*)c.L->claim, 0u, code) != 0u) return;  // first failure of the rank wins
  theseus_error* e = err_rec(c);
  e->what = what;
  e->rank = c.L->rank;
  e->tb = c.tb;
  e->step = step;
  e->slice = slice;
  e->channel = ch;
  e->launch = c.L->launch;
  e->have = have;
  e->want = want;
  fence_sys();
  st_volatile_u32((volatile u32*)&e->code, code);
  fence_sys();
}

// stop reports whether the launch must stop (another failure, or abort).
DEV bool stop(const Ctx& c) {
  return ld_volatile_u32((const volatile u32*)c.L->abort_word) != 0 ||
         ld_volatile_u32((const volatile u32*)c.L->claim) != 0;
}

// spin waits until cond() holds, the timeout passes (fail), or the launch
// stops. Returns false on failure. Called by one thread.
template <typename F>
DEV bool spin(const Ctx& c, F cond, u32 what, i64 step, i64 slice, i32 ch, u64 want, const u64* word) {
  if (cond()) return true;
  u64 t0 = gtime();
  for (u32 n = 1;; n++) {
    if (cond()) return true;
    if ((n & 1023) == 0) {
      if (stop(c)) {
        fail(c, THESEUS_ERR_ABORTED, what, step, slice, ch, word ? *word : 0, want);
        return false;
      }
      if (gtime() - t0 > c.L->timeout_ns) {
        fail(c, THESEUS_ERR_TIMEOUT, what, step, slice, ch, word ? *word : 0, want);
        return false;
      }
    }
  }
}

// ---------------------------------------------------------------- geometry

// resolve maps (buffer, chunk) of logical rank at physical rank p to the
// storage buffer and chunk (ir.Placement.Resolve).
DEV void resolve(const Ctx& c, int p, int& k, i64& chunk) {
  if (k == THESEUS_BUF_SCRATCH) return;
  const theseus_optable_header* h = T_HDR(c);
  i64 C = h->chunks_per_block;
  i64 n = c.L->nranks;
  int coll = h->collective;
  bool rooted = coll == THESEUS_COLL_BROADCAST || coll == THESEUS_COLL_REDUCE || coll == THESEUS_COLL_GATHER ||
                coll == THESEUS_COLL_SCATTER;
  bool isRoot = p == c.L->root;
  i64 sh = c.L->shift;
  if (sh != 0) {
    bool perRank = (k == THESEUS_BUF_OUTPUT && coll == THESEUS_COLL_GATHER && isRoot) ||
                   (k == THESEUS_BUF_INPUT && coll == THESEUS_COLL_SCATTER && isRoot);
    if (perRank) {
      i64 b = chunk / C, j = chunk % C;
      chunk = ((b + sh) % n) * C + j;
    }
  }
  (void)rooted;
  if (!c.L->inplace) return;
  switch (coll) {
    case THESEUS_COLL_ALLREDUCE:
    case THESEUS_COLL_ALLTOALL:
    case THESEUS_COLL_SENDRECV:
      k = THESEUS_BUF_OUTPUT;
      return;
    case THESEUS_COLL_BROADCAST:
    case THESEUS_COLL_REDUCE:
      if (isRoot) k = THESEUS_BUF_OUTPUT;
      return;
    case THESEUS_COLL_ALLGATHER:
      if (k == THESEUS_BUF_INPUT) {
        k = THESEUS_BUF_OUTPUT;
        chunk += (i64)p * C;
      }
      return;
    case THESEUS_COLL_GATHER:
      if (k == THESEUS_BUF_INPUT && isRoot) {
        k = THESEUS_BUF_OUTPUT;
        chunk += (i64)p * C;
      }
      return;
    case THESEUS_COLL_REDUCESCATTER:
      if (k == THESEUS_BUF_OUTPUT) {
        k = THESEUS_BUF_INPUT;
        chunk += (i64)p * C;
      }
      return;
    case THESEUS_COLL_SCATTER:
      if (k == THESEUS_BUF_OUTPUT && isRoot) {
        k = THESEUS_BUF_INPUT;
        chunk += (i64)p * C;
      }
      return;
  }
}

// Where one ref of one chunk lives: a pointer and its valid bytes (user
// buffers) or -1 (scratch: a whole chunk).
struct Place {
  char* p;
  i64 bytes;  // -1 for scratch
  bool packet;
};

// port_mirror (port_exec.cuh): a scratch chunk that peers on other nodes
// put into lives in the mirror on the staged path.
DEV bool port_mirror(const Ctx& c, i64 chunk, u64& base);

DEV Place place(const Ctx& c, const theseus_ref& r, i64 t, i64 s) {
  Place pl;
  pl.packet = (r.flags & THESEUS_REF_PACKET) != 0;
  int k = r.buf;
  i64 chunk = r.off + t;
  int phys = c.L->rank;
  u64 base;
  bool remote = (r.flags & THESEUS_REF_REMOTE) != 0;
  if (remote) phys = c.chans[r.channel].peer_phys;
  resolve(c, phys, k, chunk);
  base = remote ? c.chans[r.channel].peer_buf[k] : c.L->buf[k];
  if (k == THESEUS_BUF_SCRATCH) {
    if (!remote && c.L->port != 0) port_mirror(c, chunk, base);
    pl.p = (char*)(base + (u64)c.half + (u64)(chunk * c.chunkB));
    pl.bytes = -1;
    return pl;
  }
  i64 C = T_HDR(c)->chunks_per_block;
  i64 b = chunk / C, j = chunk % C;
  i64 piece = s * C + j;
  i64 cnt = c.L->count, st = c.L->stride;
  i64 lo = piece * st;
  if (lo > cnt) lo = cnt;
  i64 hi = lo + st;
  if (hi > cnt) hi = cnt;
  pl.p = (char*)(base + (u64)((b * cnt + lo) * c.es));
  pl.bytes = (hi - lo) * c.es;
  return pl;
}

// ---------------------------------------------------------------- data ops

// The refs of the op being run, staged in shared memory per chunk: their
// addresses, valid bytes (-1: scratch) and packet flags.
__shared__ char* s_ptr[THESEUS_MAX_REFS];
__shared__ i64 s_len[THESEUS_MAX_REFS];
__shared__ u8 s_pkt[THESEUS_MAX_REFS];

template <int T, int OP>
DEV void scalar_elem(int nsrc, int ndst, i64 e) {
  typedef typename Tr<T>::E E;
  typedef typename Tr<T>::C C;
  char* const* src = s_ptr;
  char* const* dst = s_ptr + nsrc;
  E v = *(const E*)(src[0] + e);
  if (nsrc > 1) {
    C acc = Tr<T>::widen(v);
    for (int i = 1; i < nsrc; i++) acc = Tr<T>::template comb<OP>(acc, Tr<T>::widen(*(const E*)(src[i] + e)));
    v = Tr<T>::narrow(acc);
  }
  for (int d = 0; d < ndst; d++) *(E*)(dst[d] + e) = v;
}

template <int T, int OP>
DEV v4 combine_vec(int nsrc, i64 off) {
  typedef typename Tr<T>::E E;
  typedef typename Tr<T>::C C;
  const int L = 16 / sizeof(E);
  C acc[L];
  v4 a = ld_v4(s_ptr[0] + off);
  const E* ea = (const E*)&a;
  for (int l = 0; l < L; l++) acc[l] = Tr<T>::widen(ea[l]);
  for (int i = 1; i < nsrc; i++) {
    v4 b = ld_v4(s_ptr[i] + off);
    const E* eb = (const E*)&b;
    for (int l = 0; l < L; l++) acc[l] = Tr<T>::template comb<OP>(acc[l], Tr<T>::widen(eb[l]));
  }
  v4 r;
  E* er = (E*)&r;
  for (int l = 0; l < L; l++) er[l] = Tr<T>::narrow(acc[l]);
  return r;
}

// The fast loops index with 32-bit vector offsets within segments of
// SEG_VECS vectors (256 MiB), and hide the loop counter from the compiler
// (opaque_u32) so that it recomputes each address from the counter instead
// of keeping one pointer per unrolled access live across the loop: under
// the kernel's 64-register bound that pressure spilled to local memory
// inside the loop (docs/design/cuda.md, "The kernel's data paths").
#define SEG_VECS (1ll << 24)
DEV u32 opaque_u32(u32 x) {
  asm volatile("" : "+r"(x));
  return x;
}

// The two commonest data ops in tight loops of their own (not inlined:
// their registers are their own, nothing of the kernel's context is live
// across them, and every address is an argument): a copy of one src to one
// dst, and a reduce of two srcs into one dst. nvec 16-byte vectors at
// 16-byte aligned addresses; every load of a round is issued before its
// stores. Numerics as combine_vec.
NOINLINE void copy_vec(const char* s, char* d, i64 nvec) {
  for (i64 seg = 0; seg < nvec; seg += SEG_VECS) {
    const u32 n = (u32)(nvec - seg < SEG_VECS ? nvec - seg : SEG_VECS);
    const char* sb = s + seg * 16;
    char* db = d + seg * 16;
    const u32 nt = nthreads();
    u32 v = tid();
    for (; v + (COPY_UNROLL - 1) * nt < n; v = opaque_u32(v + COPY_UNROLL * nt)) {
      v4 a[COPY_UNROLL];
#pragma unroll
      for (int u = 0; u < COPY_UNROLL; u++) a[u] = ld_v4(sb + (u64)((v + u * nt) * 16u));
#pragma unroll
      for (int u = 0; u < COPY_UNROLL; u++) st_v4(db + (u64)((v + u * nt) * 16u), a[u]);
    }
    for (; v < n; v += nt) st_v4(db + (u64)(v * 16u), ld_v4(sb + (u64)(v * 16u)));
  }
}

// copy_bytes copies n bytes with every thread of the block: 16-byte vectors
// between a head and a tail when the two addresses agree modulo 16, else
// byte by byte (any alignment works; unequal ones are slower). The point-to-point
// engine's chunks and the port channels' kernel staging use it.
DEV void copy_bytes(char* d, const char* s, i64 n) {
  if (n <= 0) return;
  const u32 th = tid(), nt = nthreads();
  if ((((u64)d ^ (u64)s) & 15) == 0) {
    i64 head = (i64)((16 - ((u64)s & 15)) & 15);
    if (head > n) head = n;
    for (i64 i = th; i < head; i += nt) d[i] = s[i];
    const i64 nvec = (n - head) / 16;
    if (nvec > 0) copy_vec(s + head, d + head, nvec);
    for (i64 i = head + nvec * 16 + th; i < n; i += nt) d[i] = s[i];
    return;
  }
  for (i64 i = th; i < n; i += nt) d[i] = s[i];
}

template <int T, int OP>
DEV v4 combine2(v4 a, v4 b) {
  typedef typename Tr<T>::E E;
  const int L = 16 / sizeof(E);
  const E* ea = (const E*)&a;
  const E* eb = (const E*)&b;
  v4 r;
  E* er = (E*)&r;
#pragma unroll
  for (int l = 0; l < L; l++) er[l] = Tr<T>::narrow(Tr<T>::template comb<OP>(Tr<T>::widen(ea[l]), Tr<T>::widen(eb[l])));
  return r;
}

template <int T, int OP>
NOINLINE void reduce2_vec(const char* s0, const char* s1, char* d, i64 nvec) {
  for (i64 seg = 0; seg < nvec; seg += SEG_VECS) {
    const u32 n = (u32)(nvec - seg < SEG_VECS ? nvec - seg : SEG_VECS);
    const char* ab = s0 + seg * 16;
    const char* bb = s1 + seg * 16;
    char* db = d + seg * 16;
    const u32 nt = nthreads();
    u32 v = tid();
    for (; v + (REDUCE_UNROLL - 1) * nt < n; v = opaque_u32(v + REDUCE_UNROLL * nt)) {
      v4 a[REDUCE_UNROLL], b[REDUCE_UNROLL];
#pragma unroll
      for (int u = 0; u < REDUCE_UNROLL; u++) a[u] = ld_v4(ab + (u64)((v + u * nt) * 16u));
#pragma unroll
      for (int u = 0; u < REDUCE_UNROLL; u++) b[u] = ld_v4(bb + (u64)((v + u * nt) * 16u));
#pragma unroll
      for (int u = 0; u < REDUCE_UNROLL; u++) st_v4(db + (u64)((v + u * nt) * 16u), combine2<T, OP>(a[u], b[u]));
    }
    for (; v < n; v += nt) st_v4(db + (u64)(v * 16u), combine2<T, OP>(ld_v4(ab + (u64)(v * 16u)), ld_v4(bb + (u64)(v * 16u))));
  }
}

// Plain (non-packet) element-wise combine of the staged refs over nbytes.
// 16-byte vector path (exact scalar head and tail); a scalar path when the
// refs' addresses disagree modulo 16.
template <int T, int OP>
DEV void combine_plain(int nsrc, int ndst, i64 nbytes) {
  typedef typename Tr<T>::E E;
  const i64 es = sizeof(E);
  const u32 th = tid(), nt = nthreads();
  char* const* dst = s_ptr + nsrc;
  // The vectors start on a 128-byte boundary when every ref lies at the
  // same place within a 128-byte line (each warp's access then covers whole
  // lines), else on a 16-byte boundary when they agree modulo 16; the
  // elements before and after go one by one. Refs that disagree modulo 16
  // go element by element.
  u64 mis = (u64)s_ptr[0] & 127;
  bool co16 = true, co128 = true;
  for (int i = 1; i < nsrc + ndst; i++) {
    u64 m = (u64)s_ptr[i] & 127;
    co128 &= m == mis;
    co16 &= (m & 15) == (mis & 15);
  }
  i64 head = co128 ? (i64)((128 - mis) & 127) : co16 ? (i64)((16 - (mis & 15)) & 15) : nbytes;
  if (head > nbytes) head = nbytes;
  i64 nvec = (nbytes - head) / 16;
  i64 tail0 = head + nvec * 16;
  for (i64 e = (i64)th * es; e < head; e += (i64)nt * es) scalar_elem<T, OP>(nsrc, ndst, e);
  for (i64 e = tail0 + (i64)th * es; e < nbytes; e += (i64)nt * es) scalar_elem<T, OP>(nsrc, ndst, e);
  if (nvec == 0) return;
  if (nsrc == 1 && ndst == 1) return copy_vec(s_ptr[0] + head, dst[0] + head, nvec);
  if (nsrc == 2 && ndst == 1) return reduce2_vec<T, OP>(s_ptr[0] + head, s_ptr[1] + head, dst[0] + head, nvec);
  if (nsrc == 1) {
    const char* s0 = s_ptr[0] + head;
    i64 v = th;
    for (; v + (COPY_UNROLL - 1) * (i64)nt < nvec; v += COPY_UNROLL * (i64)nt) {
      v4 a[COPY_UNROLL];
#pragma unroll
      for (int u = 0; u < COPY_UNROLL; u++) a[u] = ld_v4(s0 + (v + u * (i64)nt) * 16);
      for (int d = 0; d < ndst; d++) {
        char* d0 = dst[d] + head;
#pragma unroll
        for (int u = 0; u < COPY_UNROLL; u++) st_v4(d0 + (v + u * (i64)nt) * 16, a[u]);
      }
    }
    for (; v < nvec; v += nt) {
      v4 a = ld_v4(s0 + v * 16);
      for (int d = 0; d < ndst; d++) st_v4(dst[d] + head + v * 16, a);
    }
    return;
  }
  i64 v = th;
  for (; v + (REDUCE_UNROLL - 1) * (i64)nt < nvec; v += REDUCE_UNROLL * (i64)nt) {
    v4 o[REDUCE_UNROLL];
#pragma unroll
    for (int u = 0; u < REDUCE_UNROLL; u++) o[u] = combine_vec<T, OP>(nsrc, head + (v + u * (i64)nt) * 16);
    for (int d = 0; d < ndst; d++) {
#pragma unroll
      for (int u = 0; u < REDUCE_UNROLL; u++) st_v4(dst[d] + head + (v + u * (i64)nt) * 16, o[u]);
    }
  }
  for (; v < nvec; v += nt) {
    v4 o = combine_vec<T, OP>(nsrc, head + v * 16);
    for (int d = 0; d < ndst; d++) st_v4(dst[d] + head + v * 16, o);
  }
}

// read_packet waits for packet pk at p (LL16: 16 bytes, 8 data; LL8: 8
// bytes, 4 data) to carry flag and returns its data words. Returns false on
// failure (recorded by fail).
DEV bool read_packet(const Ctx& c, const char* p, bool ll8, u32 flag, u32& d0, u32& d1, i64 step, i64 slice) {
  u64 t0 = 0;
  for (u32 n = 0;; n++) {
    u32 f0, f1 = 0;
    bool ok;
    if (ll8) {
      ld_volatile_v2(p, d0, f0);
      ok = f0 == flag;
    } else {
      v4 v = ld_volatile_v4(p);
      d0 = v.x;
      f0 = v.y;
      d1 = v.z;
      f1 = v.w;
      ok = f0 == flag && f1 == flag;
    }
    if (ok) return true;
    if (n == 0) t0 = gtime();
    if ((n & 1023) == 1023) {
      if (stop(c)) {
        fail(c, THESEUS_ERR_ABORTED, THESEUS_WAIT_PACKET, step, slice, -1, f0, flag);
        return false;
      }
      if (gtime() - t0 > c.L->timeout_ns) {
        fail(c, THESEUS_ERR_TIMEOUT, THESEUS_WAIT_PACKET, step, slice, -1, f0, flag);
        return false;
      }
    }
  }
}

// load_bytes returns the n (1 to 8) bytes at p as a little-endian word
// (the rest zero): one load when they are a whole aligned word or half
// word, else byte by byte.
DEV u64 load_bytes(const char* p, i64 n) {
  if (n == 8 && ((u64)p & 7) == 0) return *(const u64*)p;
  if (n == 4 && ((u64)p & 3) == 0) return (u64)*(const u32*)p;
  u64 w = 0;
  for (i64 k = 0; k < n; k++) w |= (u64)(u8)p[k] << (8 * k);
  return w;
}

// store_bytes writes the low n (1 to 8) bytes of w to p, as load_bytes
// reads them.
DEV void store_bytes(char* p, u64 w, i64 n) {
  if (n == 8 && ((u64)p & 7) == 0) {
    *(u64*)p = w;
    return;
  }
  if (n == 4 && ((u64)p & 3) == 0) {
    *(u32*)p = (u32)w;
    return;
  }
  for (i64 k = 0; k < n; k++) p[k] = (char)(w >> (8 * k));
}

// word_elem is element e of the little-endian word w of elements E.
template <typename E>
DEV E word_elem(u64 w, int e) {
  const u64 t = w >> (8 * sizeof(E) * e);
  E v;
  __builtin_memcpy(&v, &t, sizeof(E));
  return v;
}

// elem_word is r placed as element e of a little-endian word of elements E.
template <typename E>
DEV u64 elem_word(E r, int e) {
  u64 t = 0;
  __builtin_memcpy(&t, &r, sizeof(E));
  return t << (8 * sizeof(E) * e);
}

// Packet-aware combine of the staged refs. It works in groups of G =
// max(payload, element size) bytes (payload: 8 bytes per LL16 packet, 4 per
// LL8 packet), at most 8, each held as one word in registers (the loops
// over a group's elements and packets have constant bounds, so that
// nothing of a group goes to local memory). Plain refs are read and
// written byte-exactly over nbytes; packet srcs wait for this launch's
// flag; packet dsts are written over pbytes (the whole scratch chunk's
// payload), with zero data past nbytes.
template <int T, int OP>
DEV void combine_packets(const Ctx& c, int nsrc, int ndst, i64 nbytes, i64 pbytes, bool anyPktDst, i64 step,
                         i64 slice) {
  typedef typename Tr<T>::E E;
  typedef typename Tr<T>::C C;
  const i64 es = sizeof(E);
  const bool ll8 = c.L->ll8 != 0;
  const i64 pay = ll8 ? 4 : 8;
  const i64 G = pay > es ? pay : es;
  const int nq = (int)(G / pay);  // packets per group: 1, or 2 (LL8 packets of 8-byte elements)
  const int NE = 8 / sizeof(E) > 0 ? 8 / sizeof(E) : 1;  // elements per 8 bytes
  const i64 total = anyPktDst ? pbytes : nbytes;
  const u32 flag = c.flag;
  for (i64 g = (i64)tid() * G; g < total; g += (i64)nthreads() * G) {
    i64 vb = nbytes - g;
    if (vb < 0) vb = 0;
    if (vb > G) vb = G;
    const int ne = (int)(vb / es);
    u64 out = 0;  // the group's result bytes (zero past ne elements)
    if (vb > 0) {
      C acc[NE];
      u64 first = 0;
      for (int i = 0; i < nsrc; i++) {
        const char* sp = s_ptr[i];
        u64 w = 0;
        if (s_pkt[i]) {
bool ok = true;
#pragma unroll
          for (int q = 0; q < 2; q++) {
            u32 d0 = 0, d1 = 0;
            if (q < nq && ok) ok = read_packet(c, sp + (g / pay + q) * pay * 2, ll8, flag, d0, d1, step, slice);
            w |= (ll8 ? (u64)d0 : (u64)d0 | (u64)d1 << 32) << (32 * q);  // (q 1: LL8, 4-byte payloads)
          }
          if (!ok) return;
        } else {
          w = load_bytes(sp + g, vb);
        }
        if (i == 0) first = w;
#pragma unroll
        for (int e = 0; e < NE; e++) {
          if (e < ne) {
            const C v = Tr<T>::widen(word_elem<E>(w, e));
            acc[e] = i == 0 ? v : Tr<T>::template comb<OP>(acc[e], v);
          }
        }
      }
      if (nsrc == 1) {
        // A copy: the source's bits, unconverted.
        out = ne * es >= 8 ? first : first & ((1ull << (8 * ne * es)) - 1);
      } else {
#pragma unroll
        for (int e = 0; e < NE; e++) {
          if (e < ne) out |= elem_word<E>(Tr<T>::narrow(acc[e]), e);
        }
      }
    }
    for (int d = 0; d < ndst; d++) {
      char* dp = s_ptr[nsrc + d];
      if (s_pkt[nsrc + d]) {
#pragma unroll
        for (int q = 0; q < 2; q++) {
          if (q < nq) {
            char* pp = dp + (g / pay + q) * pay * 2;
            const u64 part = out >> (32 * q);
            if (ll8)
              st_volatile_v2(pp, (u32)part, flag);
            else
              st_volatile_v4(pp, v4{(u32)part, flag, (u32)(part >> 32), flag});
          }
        }
      } else {
        store_bytes(dp + g, out, vb);
      }
    }
  }
}

// unit_of is take_unit's answer for v, what its atomic add returned: a
// separate step so that the add can be issued a unit ahead and its
// latency hidden behind the current unit's copy (units_loop).
DEV u64 unit_of(u64* w, u32 ep, u64 v) {
  for (;;) {
    if ((u32)(v >> 32) == ep) return v & 0xffffffffull;
    u64 cur = v + 1;
    while ((u32)(cur >> 32) != ep) {
      const u64 old = atom_cas_u64(w, cur, (u64)ep << 32);
      if (old == cur) break;
      cur = old;
    }
    v = atom_add_relaxed_gpu(w, 1);
  }
}

// take_unit returns the next unit of shared work of launch ep (the launch
// counter's low 32 bits) from counter w, (epoch << 32) | next unit. The
// last threadblock of a launch zeroes the word (units_loop); a word still
// holding another epoch (zero, or a launch that failed half-way) is reset
// to this launch's first by compare-and-swap, whichever threadblock gets
// there first, and the take repeated. The count of blocks done (w[1]) has
// no epoch: after a launch that failed half-way it is off, and the next
// launch of the entry would zero w early. No next launch happens: a
// failure is sticky (the executor refuses later launches), and a failed
// communicator must be aborted. Only a word left by a failed launch
// exactly a multiple of 2^32 launches earlier could pass for this
// launch's. Launches of one rank run one at a time, so no other launch
// moves the word meanwhile.
DEV u64 take_unit(u64* w, u32 ep) { return unit_of(w, ep, atom_add_relaxed_gpu(w, 1)); }

__shared__ u64 s_unit[2];  // units_loop: the current unit and the next

// units_other runs one unit that is not a copy of aligned refs through the
// op's usual vector paths (combine_plain). Not inlined: its registers are
// its own, so the units loop keeps its values in registers (inlined, the
// loop spilled to local memory on every unit).
template <int T, int OP>
NOINLINE void units_other(char* s0, char* s1, char* d0, int nsrc, i64 nbytes) {
  // Thread 0 stages every pointer: a block may have as few as one thread.
  if (tid() == 0) {
    s_ptr[0] = s0;
    if (nsrc == 2) s_ptr[1] = s1;
    s_ptr[nsrc] = d0;
  }
  bar();
  combine_plain<T, OP>(nsrc, 1, nbytes);
}

template <int T>
DEV void units_other_op(int redop, char* s0, char* s1, char* d0, int nsrc, i64 nbytes) {
  switch (redop) {
    case RSUM:
    case RAVG:
      return units_other<T, RSUM>(s0, s1, d0, nsrc, nbytes);
    case RPROD:
      return units_other<T, RPROD>(s0, s1, d0, nsrc, nbytes);
    case RMAX:
      return units_other<T, RMAX>(s0, s1, d0, nsrc, nbytes);
    default:
      return units_other<T, RMIN>(s0, s1, d0, nsrc, nbytes);
  }
}

// A run of shared work as the units loop keeps it in shared memory: its
// refs as absolute addresses (theseus_run's buffer and offset resolved).
struct URun {
  char* p[3];  // src0, src1, dst
  u64 nbytes, first;
  u32 tile;
  u32 nsrc;
};
__shared__ URun s_runs[THESEUS_MAX_RUNS];

// units_loop runs the launch's shared work (docs/design/cuda.md, "Shared
// work"): each threadblock takes the next unit until none is left, so
// threadblocks on faster multiprocessors take more (a static split leaves
// the copy to wait for the slowest). The units are tiles of independent
// copies and two-source reduces, so the order they run in changes no
// result. A unit is found from its number alone (the runs in shared
// memory), so its copy starts right after it is taken. Inlined into
// theseus_units, whose own state is small, so that the copy loop keeps its
// values in registers as the reference copy's does (bench.cu,
// theseus_ref_dyn).
template <int T>
DEV void units_loop(const theseus_launch& L) {
  const int nr = L.nruns < THESEUS_MAX_RUNS ? L.nruns : THESEUS_MAX_RUNS;
  const u64 n = (u64)L.nunits;
  const u32 ep = (u32)L.launch;
  const i64 nt = nthreads();
  u64* ctr = (u64*)L.unit_ctr;
  // (a block-stride loop: a block may have fewer threads than runs)
  for (int i = tid(); i < nr; i += (int)nt) {
    const theseus_run R = ((const theseus_run*)L.units)[i];
    URun& u = s_runs[i];
    for (int k = 0; k < 3; k++) u.p[k] = (char*)L.buf[R.buf[k] < 3 ? R.buf[k] : 0] + R.off[k];
    u.nbytes = R.nbytes;
    u.first = R.first;
    u.tile = R.tile;
    u.nsrc = R.nsrc;
  }
  // Thread 0 takes the next unit while the block works on the current
  // one: it issues the counter's atomic add before its share of the copy
  // and reads the result only after it. The unit
  // alternates between s_unit[0] and [1]: thread 0 writes the next while
  // other threads may still be reading the current.
  if (tid() == 0) s_unit[0] = take_unit(ctr, ep);
  bar();
  int r = 0;  // the run of the last unit: a block's units only go up
  for (int k = 0;; k ^= 1) {
    const u64 u = s_unit[k];
    u64 next = 0;
    if (tid() == 0 && u < n) next = atom_add_relaxed_gpu(ctr, 1);
    if (u >= n) {
      // The last threadblock out (every other has taken its last unit)
      // zeroes the counter for the next launch of this entry, so that only
      // a launch that failed half-way leaves a word for the epoch check.
      if (tid() == 0 && atom_add_gpu(ctr + 1, 1) + 1 == (u64)__nvvm_read_ptx_sreg_nctaid_x()) {
        ctr[1] = 0;
        ctr[0] = 0;
      }
      return;
    }
    if (u < s_runs[r].first) r = 0;
    while (r + 1 < nr && s_runs[r + 1].first <= u) r++;
    const URun& R = s_runs[r];
    const u64 at = (u - R.first) * (u64)R.tile;
    const i64 nbytes = (i64)(R.nbytes - at < (u64)R.tile ? R.nbytes - at : (u64)R.tile);
    const char* s0 = R.p[0] + at;
    char* d0 = R.p[2] + at;
    if (R.nsrc == 1 && (((u64)s0 | (u64)d0) & 15) == 0) {
      // A copy of aligned refs: the plain loop of the reference copies,
      // 4 vectors in flight per thread; the last partial round and the
      // bytes past the last vector one by one.
      const i64 nvec = nbytes / 16;
      i64 v = tid();
      for (; v + 3 * nt < nvec; v += 4 * nt) {
        v4 x[4];
#pragma unroll
        for (int q = 0; q < 4; q++) x[q] = ld_v4(s0 + (v + q * nt) * 16);
#pragma unroll
        for (int q = 0; q < 4; q++) st_v4(d0 + (v + q * nt) * 16, x[q]);
      }
      for (; v < nvec; v += nt) st_v4(d0 + v * 16, ld_v4(s0 + v * 16));
      for (i64 b = nvec * 16 + tid(); b < nbytes; b += nt) d0[b] = s0[b];
    } else {
      units_other_op<T>(L.redop, (char*)s0, R.nsrc == 2 ? R.p[1] + at : nullptr, d0, (int)R.nsrc, nbytes);
    }
    if (tid() == 0) s_unit[k ^ 1] = unit_of(ctr, ep, next);
    bar();  // the next unit is in; every thread is done with s_ptr
  }
}

// units_t is units_loop behind a call, for theseus_exec (whose registers
// are spoken for by its own state).
template <int T>
NOINLINE void units_t(const theseus_launch& L) {
  units_loop<T>(L);
}

// ---------------------------------------------------------------- port channels

#include "port_exec.cuh"

// data_op_t runs data op *op (copy or reduce) of step step, slice s; with
// no op (nullptr), the launch's shared work instead. Inlined into
// theseus_exec: called, each data op spent about a microsecond between its
// start and the first barrier here (docs/design/cuda.md, "Small
// launches").
template <int T, int OP>
DEV void data_op_t(const Ctx& c, const theseus_op* opp, i64 step, i64 s) {
  if (opp == nullptr) return units_t<T>(*c.L);
  const theseus_op& op = *opp;
  const int nsrc = op.nsrc, ndst = op.ndst, nref = nsrc + ndst;
  if (nref > THESEUS_MAX_REFS) {
    if (tid() == 0) fail(c, THESEUS_ERR_TOOMANYREFS, 0, step, s, -1, nref, THESEUS_MAX_REFS);
    return;
  }
  const theseus_ref* r = T_REFS(c) + (op.ref_start - T_REF_BASE(c));
  const i64 strideB = c.L->stride * c.es;
  for (i64 t = 0; t < op.count; t++) {
    bar();  // the previous chunk's users of the staged refs are done
    THESEUS_PROBE(c.L->error, 12);
#ifdef THESEUS_SPECIALIZED
    // Unrolled, so that each ref is a constant: ref i is placed by thread
    // i mod nthreads, as below.
    T_UNROLL
    for (int i = 0; i < nref; i++) {
      if ((u32)i % nthreads() != tid()) continue;
#else
    for (int i = tid(); i < nref; i += nthreads()) {
#endif
      Place p = place(c, r[i], t, s);
      s_ptr[i] = p.p;
      s_len[i] = p.bytes;
      s_pkt[i] = p.packet;
    }
    bar();
    THESEUS_PROBE(c.L->error, 13);
    i64 L = -1;
    bool anyPkt = false, anyPktDst = false;
    for (int i = 0; i < nref; i++) {
      i64 b = s_len[i];
      if (b >= 0 && (L < 0 || b < L)) L = b;
      anyPkt |= s_pkt[i] != 0;
      if (i >= nsrc) anyPktDst |= s_pkt[i] != 0;
    }
    if (L < 0) L = strideB;
    if (!anyPkt) {
      if (L > 0) combine_plain<T, OP>(nsrc, ndst, L);
    } else {
      combine_packets<T, OP>(c, nsrc, ndst, L, strideB, anyPktDst, step, s);
    }
    THESEUS_PROBE(c.L->error, 14);
  }
}

template <int T>
DEV void data_op_op(const Ctx& c, const theseus_op* op, i64 step, i64 s) {
  switch (c.L->redop) {
    case RSUM:
    case RAVG:
      return data_op_t<T, RSUM>(c, op, step, s);
    case RPROD:
      return data_op_t<T, RPROD>(c, op, step, s);
    case RMAX:
      return data_op_t<T, RMAX>(c, op, step, s);
    default:
      return data_op_t<T, RMIN>(c, op, step, s);
  }
}

DEV void data_op(const Ctx& c, const theseus_op* op, i64 step, i64 s) {
  // A module built for one datatype (build.sh): the host loads the module
  // of the request's datatype; any other is a host bug, reported, never run.
  if (c.L->dtype != THESEUS_DTYPE) {
    if (tid() == 0) fail(c, THESEUS_ERR_BADOP, 0, step, s, -1, 0x100u | c.L->dtype, THESEUS_DTYPE);
    return;
  }
  return data_op_op<THESEUS_DTYPE>(c, op, step, s);
}

// ---------------------------------------------------------------- avg epilogue

template <int T>
NOINLINE void divide_t(char* p, i64 n, int nranks) {
  typedef typename Tr<T>::E E;
  typedef typename Tr<T>::C C;
  E* e = (E*)p;
  i64 total = (i64)nthreads() * __nvvm_read_ptx_sreg_nctaid_x();
  for (i64 i = (i64)bid() * nthreads() + tid(); i < n; i += total) {
    C v = Tr<T>::widen(e[i]);
    e[i] = Tr<T>::narrow(v / (C)nranks);
  }
}

DEV void divide(const Ctx& c, char* p, i64 n) {
  int nr = c.L->nranks;
  if (c.L->dtype == THESEUS_DTYPE) divide_t<THESEUS_DTYPE>(p, n, nr);  // else data_op has failed the launch
}

// ---------------------------------------------------------------- sync ops

// A rank-local barrier among n threadblocks on barrier word id. Called by
// thread 0. Arrival counts persist across launches.
DEV bool tb_barrier(const Ctx& c, int id, int n, i64 step, i64 slice) {
  u64* words = (u64*)c.L->barriers;
  u64* arrive = &words[id];
  u64* mine = &words[THESEUS_MAX_BARRIERS + (u64)c.tb * THESEUS_MAX_BARRIERS + id];
  u64 k = *mine + 1;
  *mine = k;
  fence_gpu();
  atom_add_gpu(arrive, 1);
  u64 want = k * (u64)n;
  return spin(c, [&] { return ld_acquire_gpu(arrive) >= want; }, THESEUS_WAIT_BARRIER, step, slice, id, want, arrive);
}

// ---------------------------------------------------------------- the kernel

// The launch's arguments, in shared memory for the launch (taking the
// address of the parameter would copy it to every thread's local memory),
// and this rank's done word as the launch found it.
__shared__ theseus_launch s_launch;
__shared__ u64 s_prev;
__shared__ u64 s_hostlc;  // the launch counter the host gave (started, finished and pairing words)

// launch_begin (thread 0) fills s_launch, s_prev and s_fail. The launch
// counter: the host's, or one past this rank's done word when that is
// larger. Launches of one communicator rank run in stream order, so the
// done word holds the previous launch's counter; a CUDA graph replays a
// captured launch with its captured argument, and this keeps every
// replay's counter (LL flag, scratch half, dependency epoch, fence, unit
// epoch) distinct and equal on every rank (docs/design/cuda.md, "The launch
// counter"). Without a done word (the test harness) s_prev is the counter
// less one.
DEV void launch_begin(const theseus_launch& launch) {
  s_launch = launch;
  s_hostlc = launch.launch;
  s_prev = launch.launch - 1;
  if (launch.done != 0) {
    s_prev = ld_acquire_sys((const u64*)launch.done);
    if (s_prev + 1 > launch.launch) s_launch.launch = s_prev + 1;
  }
  s_fail = 0;
}

// launch_fence (thread 0): do not touch scratch a peer's previous launch
// may still read (docs/design/runtime.md): wait for every peer's done word
// to reach this rank's own as the launch found it (s_prev). Every rank runs
// the same sequence of launches, so that is each peer's previous launch,
// also after launches that were captured but never replayed (the host
// counted them, the device never ran them; docs/known-issues.md, 17). A
// timeout or an abort fails the launch (s_fail). A fenced launch's nfence
// counts the done words and the fences with peers on other nodes (the
// last, port_fence).
DEV void launch_fence(const Ctx& c) {
  const theseus_launch& L = *c.L;
  if (L.nfence <= 0) return;
  const u64* const* fw = (const u64* const*)L.fence;
  const u64 want = s_prev;
  const int nlocal = L.nfence - (L.port != 0 ? port_launch(c)->nfence : 0);
  for (int f = 0; f < nlocal; f++) {
    const u64* w = fw[f];
    if (!spin(c, [&] { return ld_poll_sys(w) >= want; }, THESEUS_WAIT_FENCE, -1, -1, f, want, w)) return;
  }
  port_fence(c);  // the peers on other nodes
}

// atom_max_sys raises *p to at least v (relaxed: the word orders nothing
// but itself).
DEV void atom_max_sys(u64* p, u64 v) {
  asm volatile("red.relaxed.sys.global.max.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// launch_pair (thread 0, after launch_begin): the first block raises this
// rank's started word to the host's launch counter; then, for a launch
// that reaches peers' buffers, wait until every such peer has started the
// same launch, which it does only once the buffers it moved for it are
// bound here (the channel records rewritten: executor level L2). A
// timeout or an abort fails the launch (s_fail).
DEV void launch_pair(const theseus_launch& launch) {
  if (launch.started != 0 && bid() == 0) atom_max_sys((u64*)launch.started, launch.launch);
  if (launch.npair <= 0) return;
  Ctx c = Ctx{};
  c.L = &s_launch;
  c.tb = bid();
  const u64* const* pw = (const u64* const*)launch.pair;
  const u64 want = launch.launch;
  for (int i = 0; i < launch.npair; i++) {
    const u64* w = pw[i];
    if (!spin(c, [&] { return ld_poll_sys(w) >= want; }, THESEUS_WAIT_PAIR, -1, -1, i, want, w)) break;
  }
}

// launch_done (every thread): the last of the launch's ntb threadblocks to
// finish publishes the launch (counter lc) as done in the rank's done word.
DEV void launch_done(u64 lc, u64 ntb) {
  const theseus_launch& L = s_launch;
  if (L.done == 0) return;
  bar();
  if (tid() == 0) {
    // One block: the barrier orders every thread's accesses before thread
    // 0's release store, which is cumulative over them (PTX memory model),
    // so the count of finished blocks and the full fences add nothing.
    if (ntb == 1) {
      asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(L.done), "l"(lc) : "memory");
      if (L.hdone != 0) atom_max_sys((u64*)L.hdone, s_hostlc);
      return;
    }
    fence_sys();
    u64 old = atom_add_gpu((u64*)L.finish, 1);
    if ((old + 1) % ntb == 0) {
      fence_sys();
      asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(L.done), "l"(lc) : "memory");
      if (L.hdone != 0) atom_max_sys((u64*)L.hdone, s_hostlc);
    }
  }
}

// ---------------------------------------------------------------- trace
// A traced launch (launch.trace set: THESEUS_TRACE, docs/trace.md) records
// each op and each block's launch into the trace buffer; an untraced one
// pays a test of launch.trace per op in thread 0. The start times wait in
// shared memory (s_trace_t0: the block's entry, s_trace_op: the current
// op's start), not in registers the op loop would have to keep.
__shared__ u64 s_trace_t0, s_trace_op;

// trace_rec (thread 0) records [begin, now) as step step of threadblock tb
// in slice slice of launch lc.
DEV void trace_rec(u64 trace, u64 begin, u64 lc, u32 tb, u32 step, i64 slice, u32 op) {
  theseus_trace* h = (theseus_trace*)trace;
  const u64 i = atom_add_relaxed_gpu(&h->head, 1);
  if (i >= h->cap) return;
  theseus_trace_rec* r = (theseus_trace_rec*)((char*)h + THESEUS_TRACE_HEADER) + i;
  r->begin = begin;
  r->end = gtime();
  r->slice = (u32)slice;
  r->tb = (u16)tb;
  r->step = (u16)step;
  r->op = (u8)op;
  fence_gpu();
  r->launch = (u32)lc;
}

#if !defined(THESEUS_RESIDENT) && !defined(THESEUS_SPECIALIZED)  // (the executor's modules' entries: below)
// theseus_clock maps %globaltimer to the host's clock (cuda/trace.go):
// thread 0 stores it into host-mapped memory over and over, each store
// pushed out with a system fence, while the host reads it.
extern "C" __global__ void theseus_clock(theseus_clock_arg a) {
  if (tid() != 0 || bid() != 0) return;
  volatile u64* out = (volatile u64*)a.out;
  const u64 t0 = gtime();
  for (;;) {
    const u64 t = gtime();
    *out = t;
    fence_sys();
    if (t - t0 >= a.ns) break;
  }
}
#endif

// Staging: the table header, this block's threadblock
// record, its ops and the refs they use, and the channel records, copied
// into shared memory by one warp while thread 0 reads the launch state, so
// that the op loop reads its metadata from shared memory instead of
// making a chain of dependent global loads per op (each goes to L2 after
// the launch's acquires; docs/design/cuda.md, "Small launches"). Ops and
// refs past the bounds stay in global memory.
#define THESEUS_STAGE_OPS 32
#define THESEUS_STAGE_REFS 128
#define THESEUS_STAGE_CHANS 16
static_assert(sizeof(theseus_optable_header) % 8 == 0 && sizeof(theseus_tb) % 8 == 0 && sizeof(theseus_op) % 8 == 0 &&
                  sizeof(theseus_ref) % 8 == 0 && sizeof(theseus_chan_rt) % 8 == 0,
              "staged records are copied in whole 8-byte words");
__shared__ theseus_optable_header s_hdr;
__shared__ theseus_tb s_tbr;
__shared__ theseus_op s_ops[THESEUS_STAGE_OPS];
__shared__ theseus_ref s_refs[THESEUS_STAGE_REFS];
__shared__ theseus_chan_rt s_chans[THESEUS_STAGE_CHANS];
__shared__ u64 s_staged[3];  // ops staged, refs staged (ref base + 1, 0: not), channels staged

DEV void warp_sync(u32 mask) { asm volatile("bar.warp.sync %0;" ::"r"(mask) : "memory"); }

// stage_copy copies n 8-byte words from global src to shared dst, lane
// (of width lanes) taking every width-th word.
DEV void stage_copy(void* dst, const void* src, u64 n, u32 lane, u32 width) {
  u64* d = (u64*)dst;
  const u64* s = (const u64*)src;
  for (u64 i = lane; i < n; i += width) d[i] = s[i];
}

// stage_meta runs on the lanes of one warp (mask: its lanes, width of
// them) of threadblock tb. A specialised module's table is constants: only
// the channel records are staged there.
DEV void stage_meta(const theseus_launch& launch, u32 lane, u32 width, u32 mask, u32 tb) {
  const u8* base = (const u8*)launch.table;
  stage_copy(&s_hdr, base, sizeof(theseus_optable_header) / 8, lane, width);
  warp_sync(mask);
  if (tb < s_hdr.num_tbs) {
    stage_copy(&s_tbr, base + s_hdr.off_tbs + (u64)tb * sizeof(theseus_tb), sizeof(theseus_tb) / 8, lane, width);
  } else if (lane == 0) {
    s_tbr.op_start = 0;
    s_tbr.op_count = 0;
  }
  // A launch that reaches peers' buffers reads its channel records only
  // after the pairing wait (launch_pair): they may be rewritten until then.
  const bool chans = s_hdr.num_channels <= THESEUS_STAGE_CHANS && launch.npair <= 0;
  if (chans) stage_copy(s_chans, (const void*)launch.chans, s_hdr.num_channels * sizeof(theseus_chan_rt) / 8, lane, width);
  warp_sync(mask);
#ifdef THESEUS_SPECIALIZED
  const bool ops = false;
#else
  const bool ops = s_tbr.op_count <= THESEUS_STAGE_OPS;
#endif
  if (ops) stage_copy(s_ops, base + s_hdr.off_ops + s_tbr.op_start * sizeof(theseus_op), s_tbr.op_count * sizeof(theseus_op) / 8, lane, width);
  warp_sync(mask);
  u64 lo = ~0ull, hi = 0;
  if (ops) {
    for (u64 i = 0; i < s_tbr.op_count; i++) {
      const u64 n = (u64)s_ops[i].nsrc + s_ops[i].ndst;
      if (n == 0) continue;
      if (s_ops[i].ref_start < lo) lo = s_ops[i].ref_start;
      if (s_ops[i].ref_start + n > hi) hi = s_ops[i].ref_start + n;
    }
  }
  const bool refs = ops && lo < hi && hi - lo <= THESEUS_STAGE_REFS;
  if (refs) stage_copy(s_refs, base + s_hdr.off_refs + lo * sizeof(theseus_ref), (hi - lo) * sizeof(theseus_ref) / 8, lane, width);
  if (lane == 0) {
    s_staged[0] = ops;
    s_staged[1] = refs ? lo + 1 : 0;
    s_staged[2] = chans;
  }
}

// exec_block runs launch's op table on this block: it walks its
// threadblock's ops for every pipeline slice (or, with shared work, takes
// units as theseus_units does). The body of theseus_exec, and of the
// persistent executor's items (resident.cuh), inlined into each. TB is the
// threadblock, or -1 for the block's own (bid()); a specialised module
// instantiates it per threadblock of its table.
template <int TB>
DEV void exec_block(const theseus_launch& launch) {
#ifdef THESEUS_SPECIALIZED
  static_assert(TB >= 0, "a specialised module runs its table's threadblocks");
#endif
  const u32 tbi = TB >= 0 ? (u32)TB : bid();
  THESEUS_PROBE(launch.error, 0);
  if (launch.trace != 0 && tid() == 0) s_trace_t0 = gtime();
  {
    // Warp 1 stages the metadata while thread 0 reads the launch state;
    // a block of fewer than 64 threads stages with warp 0, after it.
    const u32 w = nthreads() >= 64 ? 1 : 0;
    const u32 width = nthreads() - 32 * w >= 32 ? 32 : nthreads() - 32 * w;
    const u32 mask = width == 32 ? 0xffffffffu : (1u << width) - 1;
    if (tid() == 0) {
      launch_begin(launch);
      launch_pair(launch);
    }
    if (tid() / 32 == w) stage_meta(launch, tid() & 31, width, mask, tbi);
  }
  bar();
  if (launch.npair > 0 && s_hdr.num_channels <= THESEUS_STAGE_CHANS) {
    // Past the pairing wait: the channel records are final for this launch.
    if (tid() < 32) stage_copy(s_chans, (const void*)launch.chans, s_hdr.num_channels * sizeof(theseus_chan_rt) / 8, tid(), 32);
    if (tid() == 0) s_staged[2] = 1;
    bar();
  }
  THESEUS_PROBE(launch.error, 1);
  const u64 lc = s_launch.launch;  // the launch counter
  // The block's context in shared memory, filled by one thread: the
  // functions that are not inlined take the context by reference, so a
  // per-thread context lives in local memory, and every read of it from
  // them is a local load that misses L1 once data streams through it.
  __shared__ Ctx s_ctx;
  Ctx& c = s_ctx;
  if (tid() == 0) {
    c.L = &s_launch;
    const u8* base = (const u8*)launch.table;
    const theseus_optable_header* h = &s_hdr;
    c.h = h;
#ifndef THESEUS_SPECIALIZED  // (the table's records are constants there: T_*)
    c.ops = s_staged[0] ? s_ops : (const theseus_op*)(base + h->off_ops);
    c.op_base = s_staged[0] ? s_tbr.op_start : 0;
    c.refs = s_staged[1] ? s_refs : (const theseus_ref*)(base + h->off_refs);
    c.ref_base = s_staged[1] ? s_staged[1] - 1 : 0;
    c.deps = (const theseus_dep*)(base + h->off_deps);
    c.chan_list = (const i32*)(base + h->off_chan_list);
    c.tbs = (const theseus_tb*)(base + h->off_tbs);
#else
    (void)base;
#endif
    c.chans = s_staged[2] ? s_chans : (const theseus_chan_rt*)launch.chans;
    c.es = launch.elem_size;
    c.ll = h->protocol == THESEUS_PROTO_LL;
    c.chunkB = launch.stride * c.es * (c.ll ? 2 : 1);
    c.half = launch.scratch_half ? (i64)(lc & 1) * launch.scratch_half : 0;
    c.flag = (u32)(lc % 0xFFFFFFFFull) + 1;  // interp.LLFlag
    c.tb = tbi;
  }
  bar();
  THESEUS_PROBE(launch.error, 2);
  if (tid() == 0) launch_fence(c);
  bar();
  THESEUS_PROBE(launch.error, 3);
  if (s_fail) return;
  theseus_tb tbr = {};
#ifdef THESEUS_SPECIALIZED
  tbr = T_TBS(c)[TB];  // the generated table ends with an empty threadblock for blocks past its own
#else
  tbr = s_tbr;  // zero for a table without threadblocks
#endif
  const u64 epoch = (lc & ((1ull << 24) - 1)) << 40;
  u64* publish = (u64*)launch.publish;
  // Shared work replaces the threadblocks' own op lists (the host builds
  // it only for launches whose ops are independent tiles of copies and
  // reduces: cuda/units.go).
  if (launch.units != 0) {
    data_op(c, nullptr, -1, 0);
    bar();
    if (s_fail) return;
  }
  for (i64 s = 0; launch.units == 0 && s < launch.slices; s++) {
    T_UNROLL
    for (u64 i = 0; i < tbr.op_count; i++) {
      THESEUS_PROBE(launch.error, 4 + 3 * (i & 1));
      if (s_launch.trace != 0 && tid() == 0) s_trace_op = gtime();
      const theseus_op& op = T_OPS(c)[tbr.op_start + i - T_OP_BASE(c)];
      if (op.ndep > 0 && tid() == 0) {
        T_UNROLL
        for (u32 d = 0; d < op.ndep; d++) {
          const theseus_dep dep = T_DEPS(c)[op.dep_start + d];
          u64 target = epoch | (u64)(s * (i64)T_TBS(c)[dep.tb].op_count + dep.step + 1);
          u64* w = &publish[dep.tb];
          if (!spin(c, [&] { u64 v = ld_acquire_gpu(w); return v >= target && (v >> 40) == (epoch >> 40); },
                    THESEUS_WAIT_DEPENDENCY, (i64)i, s, dep.tb, target, w))
            break;
        }
      }
      bar();
      THESEUS_PROBE(launch.error, 5 + 3 * (i & 1));
      if (s_fail) return;
      switch (op.opcode) {
        case THESEUS_OP_NOP:
          break;
        case THESEUS_OP_COPY:
        case THESEUS_OP_REDUCE:
          // (a put to a peer on another node goes through the proxy)
          if (!port_data_op(c, op, (i64)i, s)) data_op(c, &op, (i64)i, s);  // a failure sets s_fail, checked below
          break;
        case THESEUS_OP_SIGNAL:
          bar();  // every thread's writes before the signal
          if (tid() == 0) {
            fence_sys();
            T_UNROLL
            for (u32 k = 0; k < op.nchan; k++) {
              const i32 cid = T_CHAN_LIST(c)[op.chan_start + k];
              const theseus_chan_rt& ch = c.chans[cid];
              if (ch.port != 0) {
                if (!port_signal(c, cid, (i64)i, s)) break;
                continue;
              }
              red_add_release_sys((u64*)ch.peer_inbound, 1);
            }
          }
          break;
        case THESEUS_OP_WAIT:
          if (tid() == 0) {
            T_UNROLL
            for (u32 k = 0; k < op.nchan; k++) {
              i32 cid = T_CHAN_LIST(c)[op.chan_start + k];
              const theseus_chan_rt& ch = c.chans[cid];
              u64* exp = (u64*)ch.expected;
              u64 want = *exp + 1;
              *exp = want;
              const u64* in = (const u64*)ch.inbound;
              if (!spin(c, [&] { return ld_poll_sys(in) >= want; }, THESEUS_WAIT_SEMAPHORE, (i64)i, s, cid, want, in))
                break;
            }
            fence_sys();
          }
          break;
        case THESEUS_OP_FLUSH:
          if (tid() == 0) {
            fence_sys();
            for (u32 k = 0; k < op.nchan; k++) {
              const i32 cid = T_CHAN_LIST(c)[op.chan_start + k];
              if (c.chans[cid].port != 0 && !port_flush(c, cid, (i64)i, s)) break;
            }
          }
          break;
        case THESEUS_OP_BARRIER:
          bar();
          if (tid() == 0) {
            fence_gpu();
            tb_barrier(c, op.barrier_id, op.barrier_tbs, (i64)i, s);
          }
          break;
        default:
          if (tid() == 0) fail(c, THESEUS_ERR_BADOP, 0, (i64)i, s, -1, op.opcode, 0);
      }
      THESEUS_PROBE(launch.error, 6 + 3 * (i & 1));
      if (op.flags & THESEUS_OPF_PUBLISH) {
        bar();
        if (tid() == 0) {
          fence_gpu();
          st_release_gpu(&publish[tbi], epoch | (u64)(s * (i64)tbr.op_count + (i64)i + 1));
        }
      }
      bar();
      if (s_fail) return;
      if (s_launch.trace != 0 && tid() == 0) trace_rec(s_launch.trace, s_trace_op, lc, c.tb, (u32)i, s, op.opcode);
    }
  }
  // avg epilogue: after every threadblock of the rank is done, divide the
  // result region by nranks (ir.md §8).
  int coll = T_HDR(c)->collective;
  bool reduces = coll == THESEUS_COLL_ALLREDUCE || coll == THESEUS_COLL_REDUCESCATTER || coll == THESEUS_COLL_REDUCE;
  if (launch.redop == RAVG && reduces && !(coll == THESEUS_COLL_REDUCE && launch.rank != launch.root)) {
    if (tid() == 0) {
      fence_gpu();
      tb_barrier(c, THESEUS_EPILOGUE_BARRIER, (int)T_HDR(c)->num_tbs, -1, -1);
    }
    bar();
    if (s_fail) return;
    // The result is the output (reducescatter in place: input block rank).
    int k = THESEUS_BUF_OUTPUT;
    i64 chunk = 0;
    resolve(c, launch.rank, k, chunk);
    char* p = (char*)launch.buf[k] + chunk * 0;
    if (k == THESEUS_BUF_INPUT) p = (char*)launch.buf[k] + (i64)launch.rank * launch.count * c.es;
    divide(c, p, launch.count);
  }
  THESEUS_PROBE(launch.error, 10);
  launch_done(lc, T_HDR(c)->num_tbs > 0 ? T_HDR(c)->num_tbs : 1);
  THESEUS_PROBE(launch.error, 11);
  if (s_launch.trace != 0 && tid() == 0) trace_rec(s_launch.trace, s_trace_t0, lc, c.tb, THESEUS_TRACE_LAUNCH, 0, 0);
}

// The module's entry points. The product's modules (theseus.cu) and the
// measurement builds (bench.cu) have theseus_exec and theseus_units; a
// module of the persistent executor (THESEUS_RESIDENT) has only
// theseus_resident (resident.cuh), which runs exec_block per item; a
// specialised module (THESEUS_SPECIALIZED) only theseus_spec.
#if defined(THESEUS_SPECIALIZED)

// theseus_spec runs the one rank's table the module was generated for
// (exec_block per threadblock: THESEUS_SPEC_CASES, from the generated
// file, is `case k: exec_block<k>(L); break;` for each, and blocks past
// them run its empty threadblock THESEUS_SPEC_NTBS).
extern "C" __global__ void __launch_bounds__(MAX_THREADS) theseus_spec(theseus_launch launch) {
  switch (bid()) {
    THESEUS_SPEC_CASES(launch)
    default:
      exec_block<THESEUS_SPEC_NTBS>(launch);
  }
}

#elif !defined(THESEUS_RESIDENT)

// theseus_exec runs a rank's op table (exec_block).
extern "C" __global__ void __launch_bounds__(MAX_THREADS) theseus_exec(theseus_launch launch) { exec_block<-1>(launch); }

// theseus_units is the executor's entry for a launch of shared work
// (launch.units set: cuda/units.go; docs/design/cuda.md, "Shared work"):
// theseus_exec's launch counter, fence and done word around the units
// loop, without the op table. The host launches it instead of theseus_exec
// for such launches, so that they run none of theseus_exec's prologue:
// its context and op-loop state do not fit the 64-register bound together
// and spill to local memory once per warp, traffic that slows a copy
// measurably against a reference with the same loop (docs/design/cuda.md,
// "The kernel's data paths"). Every block of the grid counts toward the
// done word.
extern "C" __global__ void __launch_bounds__(MAX_THREADS) theseus_units(theseus_launch launch) {
  __shared__ Ctx s_uctx;  // only L and tb: what fail and spin read
  if (launch.trace != 0 && tid() == 0) s_trace_t0 = gtime();
  if (tid() == 0) {
    launch_begin(launch);
    launch_pair(launch);
    s_uctx = Ctx{};
    s_uctx.L = &s_launch;
    s_uctx.tb = bid();
  }
  bar();
  const Ctx& c = s_uctx;
  if (tid() == 0) launch_fence(c);
  bar();
  if (s_fail) return;
  // The module's one datatype: the loop inlined here (data_op would reach
  // it through two calls).
  if (s_launch.dtype != THESEUS_DTYPE) {
    if (tid() == 0) fail(c, THESEUS_ERR_BADOP, 0, -1, 0, -1, 0x100u | s_launch.dtype, THESEUS_DTYPE);
    return;
  }
  units_loop<THESEUS_DTYPE>(s_launch);
  bar();
  if (s_fail) return;
  launch_done(s_launch.launch, __nvvm_read_ptx_sreg_nctaid_x());
  if (s_launch.trace != 0 && tid() == 0) trace_rec(s_launch.trace, s_trace_t0, s_launch.launch, bid(), THESEUS_TRACE_LAUNCH, 0, 0);
}

#endif

// The point-to-point engine (the uint8 module's theseus_p2p entry).
#if !defined(THESEUS_RESIDENT) && !defined(THESEUS_SPECIALIZED)
#include "p2p.cuh"
#endif

#if defined(THESEUS_RESIDENT) && !defined(THESEUS_SPECIALIZED)
#include "resident.cuh"
#endif
