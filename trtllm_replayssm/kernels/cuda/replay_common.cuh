// Device helpers shared by the CUDA C++ replay kernels (mamba2_replay_step.cu,
// gated_delta_replay_step.cu): integer types, bf16 / fp16 conversions, mbarriers, bulk and
// tensor-map (TMA) copies, the 128-byte swizzle, warp sums and scans, the persistent kernels' ring
// helpers and the small kernels' predicated loads. Included by NVRTC
// (trtllm_replayssm/kernels/nvrtc.py passes every kernels/cuda/*.cuh as a header). sm_90.

#pragma once

typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

struct __align__(64) TensorMap { u64 opaque[16]; };
struct __align__(8) Pair { float x, y; };

// ------------------------------------------------------------------ scalars

__device__ __forceinline__ float bf16_to_f32(u16 v) { return __uint_as_float(((u32)v) << 16); }

__device__ __forceinline__ float f16_to_f32(u16 v) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
  return f;
}

__device__ __forceinline__ u16 f32_to_bf16(float f) {
  u16 v;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}

// a.lo b.lo + a.hi b.hi of two bf16x2 words, in fp32.
__device__ __forceinline__ float dot_bf16x2(u32 a, u32 b) {
  return __uint_as_float(a << 16) * __uint_as_float(b << 16) + __uint_as_float(a & 0xffff0000u) * __uint_as_float(b & 0xffff0000u);
}

// Two floats as bf16x2: lo in bits 0-15.
__device__ __forceinline__ u32 pack_bf16x2(float lo, float hi) {
  u32 r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

// Two fp8-e4m3 codes (lo in bits 0-7) as f16x2 (lo in bits 0-15), exactly (subnormals included:
// every e4m3 value is an f16 normal or zero).
__device__ __forceinline__ u32 e4m3x2_to_f16x2(u16 v) {
  u32 h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  return h2;
}

// An f16x2 word (lo in bits 0-15) as two fp32 values, exactly.
__device__ __forceinline__ void f16x2_to_f32(u32 h2, float& lo, float& hi) {
  lo = f16_to_f32((u16)(h2 & 0xffffu));
  hi = f16_to_f32((u16)(h2 >> 16));
}

// Two fp8-e4m3 codes (lo in bits 0-7) as fp32, exactly (subnormals included).
__device__ __forceinline__ void e4m3x2_to_f32(u16 v, float& lo, float& hi) { f16x2_to_f32(e4m3x2_to_f16x2(v), lo, hi); }

__device__ __forceinline__ u16 f32_to_f16(float f) {
  u16 v;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
  return v;
}

// The power of two 2^e that takes a vector of largest magnitude ``amax`` (>= 0) into [2^top,
// 2^(top+1)) (top 14: f16's top binade below 65504; top 0: [1, 2), for f16 sums of products; e
// clamped to [-126, 126]: a zero or tiny vector gets 2^126, a non-finite one stays non-finite), and
// its inverse 2^-e, both exact. A bf16 value times it is an f16 value exactly unless it falls below
// 2^-14 (f16 subnormals: at most 2^-25 off, 2^-(39-top) of amax 2^e).
__device__ __forceinline__ float f16_range_scale(float amax, int top, float& inverse) {
  const int e = min(126, max(-126, top - (int)((__float_as_uint(amax) >> 23) & 0xffu) + 127));
  inverse = __uint_as_float((u32)(127 - e) << 23);
  return __uint_as_float((u32)(127 + e) << 23);
}

// 2^x by ex2.approx.ftz (MUFU.EX2 alone: results below 2^-126 flush to zero, where __expf
// rescales them at three instructions an exponential); exp(x) = exp2_ftz(x LOG2E).
#define LOG2E 1.4426950408889634f
__device__ __forceinline__ float exp2_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// Two floats as fp8-e4m3 codes (lo in bits 0-7), to nearest even, magnitudes saturating at 448.
__device__ __forceinline__ u16 pack_e4m3x2(float lo, float hi) {
  u16 r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
}

// An fp8 row's new scale from its largest magnitude: max |row| / 448 (1 for a zero row), IEEE
// division (reference.rounding.fp8_row_encode's rule).
__device__ __forceinline__ float fp8_row_scale(float amax) { return amax > 0.0f ? __fdiv_rn(amax, 448.0f) : 1.0f; }

// x / s to nearest (what IEEE division gives) from r = 1 / s to nearest (__frcp_rn), by
// Markstein's correction: q = x r to nearest is within an ulp of x / s, so e = x - q s is exact
// (one FMA) and q + e r to nearest is x / s to nearest. Valid where no step overflows or falls
// below fp32's normal range: the fp8 encoders divide by a row's scale max |row| / 448, so
// |x / s| <= 448, and a quotient below 2^-126 rounds to a zero code either way. Three
// instructions against IEEE division's ~10 and its slow-path branch.
__device__ __forceinline__ float div_by_reciprocal(float x, float s, float r) {
  const float q = __fmul_rn(x, r);
  return __fmaf_rn(__fmaf_rn(-q, s, x), r, q);
}

// The largest magnitude of N values.
template <int N>
__device__ __forceinline__ float max_abs(const float* v) {
  float m = 0.0f;
#pragma unroll
  for (int i = 0; i < N; ++i) m = fmaxf(m, fabsf(v[i]));
  return m;
}

// The max of v over the 8 lanes of a small kernel's row (lanes 8r .. 8r + 7).
__device__ __forceinline__ float row_max8(float v) {
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// N bf16x2 words as 2N fp32 values (each word's low half first).
template <int N>
__device__ __forceinline__ void unpack_bf16x2(const u32 (&c)[N], float* v) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[2 * i] = __uint_as_float(c[i] << 16);
    v[2 * i + 1] = __uint_as_float(c[i] & 0xffff0000u);
  }
}

// N (1, 2 or 4) 32-bit words from p (aligned to their size), in one load.
template <int N>
__device__ __forceinline__ void load_words(const void* p, u32 (&c)[N]) {
  if (N == 1) {
    c[0] = *(const u32*)p;
  } else if (N == 2) {
    const uint2 v = *(const uint2*)p;
    c[0] = v.x;
    c[N > 1 ? 1 : 0] = v.y;
  } else {
    const uint4 v = *(const uint4*)p;
    c[0] = v.x;
    c[N > 1 ? 1 : 0] = v.y;
    c[N > 2 ? 2 : 0] = v.z;
    c[N > 3 ? 3 : 0] = v.w;
  }
}

// A value of dtype code 0 (fp32), 1 (bf16) or 2 (fp16) at p[i], as fp32.
template <int CODE>
__device__ __forceinline__ float load_f32(const void* p, long long i) {
  if (CODE == 0) return ((const float*)p)[i];
  if (CODE == 1) return bf16_to_f32(((const u16*)p)[i]);
  return f16_to_f32(((const u16*)p)[i]);
}

// ------------------------------------------------------------------ shared memory, barriers, copies

__device__ __forceinline__ u32 smem_u32(const void* p) { return (u32)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

// Bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) into shared memory,
// completing on `bar`.
__device__ __forceinline__ void bulk_load(u32 dst, const void* src, u32 bytes, u32 bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

// One box of a 4-D tensor map at coordinates (c0, c1, c2, c3) into shared memory.
__device__ __forceinline__ void tma_load_4d(u32 dst, const TensorMap* map, int c0, int c1, int c2, int c3, u32 bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(dst),
      "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}

// 0 for ``bits``, an OR of kernel parameters that are never negative (pointers, strides): folded
// into a wait's parity, or tested by a trap before a wait without operands (griddepcontrol.wait),
// it makes ptxas load those parameters before the wait instead of sinking the loads past it, so
// that a constant-bank miss (the bank is cold at each launch) overlaps the wait.
__device__ __forceinline__ u32 params_zero(long long bits) { return bits < 0 ? 1u : 0u; }

// Asks this multiprocessor's TMA unit to fetch a checkpoint's load and store tensor maps (the
// kernel's __grid_constant__ parameters, or maps in global memory once acquired) ahead of their
// first copies, which otherwise wait for that read; issued before the programmatic wait, the
// fetch overlaps the previous grid's tail (one thread).
__device__ __forceinline__ void prefetch_tensor_maps(const TensorMap* load, const TensorMap* store) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(load) : "memory");
  asm volatile("prefetch.tensormap [%0];" ::"l"(store) : "memory");
}

__device__ __forceinline__ void tma_store_4d(const TensorMap* map, u32 src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(map),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
               : "memory");
}

// Byte offset of (row r, byte column cb) in a [rows][128-byte] box written with the 128-byte
// swizzle (16-byte chunk index XOR row % 8; the box starts 1024-byte aligned).
__device__ __forceinline__ u32 swizzle128(u32 r, u32 cb) { return r * 128u + ((((cb >> 4) ^ (r & 7u)) << 4) | (cb & 15u)); }

// ldmatrix (four 8x8 b16 matrices, plain or transposed) and the m16n8k16 bf16 product.
__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

// d += a b, m16n8k16, inputs of PTX type T ("bf16" or "f16"), fp32 accumulators.
#define MMA_M16N8K16(T)                                                                                     \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, " \
               "{%8, %9}, {%0, %1, %2, %3};"                                                                \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                             \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

__device__ __forceinline__ void mma_bf16(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  MMA_M16N8K16("bf16");
}

__device__ __forceinline__ void mma_f16(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  MMA_M16N8K16("f16");
}
#undef MMA_M16N8K16

// x as a TF32 high part and the fp32 remainder (x = hi + lo exactly; the MMA reads lo's top 19
// bits). hi is x rounded to 10 mantissa bits, half away from zero (cvt.rna.tf32.f32's rounding of a
// finite x), formed on the bit pattern: adding half a TF32 ulp to the magnitude carries into the
// exponent where it rounds up. Two integer instructions, where NVRTC emits four for cvt.rna (its
// guard for INF and NaN: here INF stays INF, and a NaN x leaves lo NaN, so the products are NaN
// either way).
__device__ __forceinline__ void tf32_split(float x, u32& hi, u32& lo) {
  hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  lo = __float_as_uint(x - __uint_as_float(hi));
}

// D += A B, m16n8k8, TF32 operands, fp32 accumulators.
__device__ __forceinline__ void mma_tf32(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// v = hi + mid + lo, each bf16, exact to 24 bits of v.
__device__ __forceinline__ void split3(float v, float& hi, float& mid, float& lo) {
  hi = bf16_to_f32(f32_to_bf16(v));
  float r = v - hi;
  mid = bf16_to_f32(f32_to_bf16(r));
  lo = r - mid;
}

// Sum over the warp, every lane gets it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Max over the warp, every lane gets it.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Suffix sums over the warp of v (lane j: v_j; zero it where it must not count): returns
// later_j = sum_{i > j} v_i (lane 31: 0, from an inclusive scan shifted by one lane: no prefix
// subtraction), and ``total`` = sum of all v_i in every lane.
__device__ __forceinline__ float warp_suffix_sums(float v, int lane, float& total) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float t = __shfl_down_sync(0xffffffffu, v, o);
    if (lane + o < 32) v += t;
  }
  float later = __shfl_down_sync(0xffffffffu, v, 1);
  if (lane == 31) later = 0.0f;
  total = __shfl_sync(0xffffffffu, v, 0);
  return later;
}

// c ? a : b as one selp (a C++ select between two elements of an array became an indexed local-
// memory access).
__device__ __forceinline__ float select_f32(u32 c, float a, float b) {
  float r;
  asm("{\n.reg .pred p;\nsetp.ne.u32 p, %3, 0;\nselp.f32 %0, %1, %2, p;\n}" : "=f"(r) : "f"(a), "f"(b), "r"(c));
  return r;
}

// The two reductions of warp_reduce_scatter: a sum, a maximum.
struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// One butterfly step of warp_reduce_scatter: lanes with bit N clear keep v[0, N), the others
// v[N, 2N) (moved down to v[0, N)), each combining it with its partner's copy of the half it keeps.
template <int N, class Op>
__device__ __forceinline__ void reduce_scatter_step(float* v, int lane) {
  const u32 upper = lane & N;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float send = select_f32(upper, v[i], v[i + N]);
    const float keep = select_f32(upper, v[i + N], v[i]);
    v[i] = Op()(keep, __shfl_xor_sync(0xffffffffu, send, N));
  }
}

// Butterfly reduce-scatter of N values (a power of two up to 32) over the warp: returns, in lane
// l, the sum (Op = MaxOp: the maximum) over all lanes of v[l % N] (N - 1 + 5 - log2 N shuffles:
// 31 for 32 sums, against 160 for 32 warp_sums). v is consumed.
template <int N, class Op = SumOp>
__device__ __forceinline__ float warp_reduce_scatter(float* v, int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "N: a power of two up to 32");
  if constexpr (N >= 32) reduce_scatter_step<16, Op>(v, lane);
  if constexpr (N >= 16) reduce_scatter_step<8, Op>(v, lane);
  if constexpr (N >= 8) reduce_scatter_step<4, Op>(v, lane);
  if constexpr (N >= 4) reduce_scatter_step<2, Op>(v, lane);
  if constexpr (N >= 2) reduce_scatter_step<1, Op>(v, lane);
  float r = v[0];
#pragma unroll
  for (int o = N; o < 32; o <<= 1) r = Op()(r, __shfl_xor_sync(0xffffffffu, r, o));
  return r;
}

// ------------------------------------------------------------------ the persistent step kernels' ring

// Full (one arrival and the stage's bytes) and empty (``consumers`` arrivals) mbarriers of
// ``stages`` stages at ``bars`` (full[stages], then empty[stages]), initialised by thread 0 and
// visible to the whole CTA on return.
__device__ __forceinline__ void ring_init(u32 bars, int stages, u32 consumers) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (stages + s), consumers);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
}

// A batch row's arrival counted in arrivals[slot], ADD added (acquire-release: the caller's reads of
// the row's cursor are performed before it); returns the count before it.
template <int ADD = 1>
__device__ __forceinline__ int count_arrival(int* arrivals, int slot) {
  int arrived;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(arrived) : "l"(arrivals + slot), "n"(ADD) : "memory");
  return arrived;
}

// A row's cursor after the step that read it at w: 0 after a flush (w == lrec - 1), else w + 1.
__device__ __forceinline__ int next_cursor(int w, int lrec) { return w == lrec - 1 ? 0 : w + 1; }

// After the row's last arrival (``arrived``, from count_arrival, == ``expected`` - 1): its cursor
// advanced (next_cursor) and its count zeroed for the next step.
__device__ __forceinline__ void advance_after_last_arrival(int arrived, int expected, int* arrivals, int* cursor,
                                                           int slot, int w, int lrec) {
  if (arrived == expected - 1) {
    cursor[slot] = next_cursor(w, lrec);
    arrivals[slot] = 0;
  }
}

// The slot and cursor of unit u (units of ``units_per_row`` per batch row): -1 and 0 past the
// last unit, 0 for a padding row's cursor.
__device__ __forceinline__ void unit_slot_cursor(int u, int units, int units_per_row, const int* slot_ids,
                                                 const int* cursor, int& slot, int& w) {
  slot = -1;
  w = 0;
  if (u < units) slot = slot_ids[u / units_per_row];
  if (slot >= 0) w = cursor[slot];
}

// A warp's 16 rows r0 .. r0 + 15 of a stage written back by TMA tensor stores: ``nbox`` boxes of
// [rows][128 B] (``box_bytes`` apart in the stage, ``boxc`` columns each) to tensor coordinates
// (column box, ``row``, ``head``, ``slot``). Makes the warp's shared-memory writes visible to the
// async proxy first; lane 0 issues and waits until the stage has been read.
__device__ __forceinline__ void store_warp_rows(const TensorMap* map, u32 stage, int nbox, u32 box_bytes, int boxc, int r0,
                                                int row, int head, int slot, int lane) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  __syncwarp();
  if (lane == 0) {
#pragma unroll
    for (int bx = 0; bx < nbox; ++bx) tma_store_4d(map, stage + bx * box_bytes + r0 * 128, bx * boxc, row, head, slot);
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
  }
}

// ------------------------------------------------------------------ the small kernels

// Loads that a predicate guards instead of a branch (zero where it is false): NVVM sinks
// arithmetic used only after a branch below it, which put ~140 instructions of 64-bit index
// arithmetic between the slot's arrival (the padding-row branch) and the cache loads (kernel
// notes, session 19). Volatile: issued where they stand, the padding-row return after them.
__device__ __forceinline__ uint4 load16_if(bool pred, const void* ptr) {
  uint4 v = make_uint4(0, 0, 0, 0);
  asm volatile(
      "{\n .reg .pred q;\n setp.ne.b32 q, %4, 0;\n @q ld.global.v4.u32 {%0, %1, %2, %3}, [%5];\n}"
      : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)
      : "r"((int)pred), "l"(ptr));
  return v;
}
__device__ __forceinline__ u32 load4_if(bool pred, const void* ptr) {
  u32 v = 0;
  asm volatile("{\n .reg .pred q;\n setp.ne.b32 q, %1, 0;\n @q ld.global.u32 %0, [%2];\n}" : "+r"(v) : "r"((int)pred), "l"(ptr));
  return v;
}
