// The checkpoint stage of the CUDA C++ persistent kernels (Mamba-2 step and verify, GDN/KDA step):
// CKPT_ROWS rows of CKPT_COLS columns (a multiple of 64), TMA-copied as boxes of 128 bytes of
// columns with the 128-byte swizzle, each box [CKPT_ROWS][128 B]; element sizes, offsets, fp32
// pairs in and out, and a consumer warp's flush fold of records on tensor cores. Needs CKPT_F32
// (the -D constant), CKPT_ROWS and CKPT_COLS (the including file defines them before including
// this), and LP for the fold; CKPT_FP8 (default 0) for fp8-e4m3 codes, one fp32 scale per row
// held by the including kernel (pairs in and out are then codes, unscaled). sm_90.

#include "replay_common.cuh"

#ifndef CKPT_FP8
#define CKPT_FP8 0
#endif
#if CKPT_FP8 && CKPT_F32
#error "CKPT_FP8 and CKPT_F32 name two checkpoint dtypes"
#endif
#define ES (CKPT_F32 ? 4 : (CKPT_FP8 ? 1 : 2))  // checkpoint element bytes
#define BOXC (128 / ES)                     // checkpoint columns per 128-byte box
#define NBOX (CKPT_COLS / BOXC)             // boxes of a checkpoint row
#define CKPT_BYTES (CKPT_ROWS * CKPT_COLS * ES)
#define REC_PITCH (CKPT_COLS * 2 + 16)      // a bf16 record row of CKPT_COLS in shared memory, padded:
                                            // ldmatrix rows 16 bytes apart in banks

// Offset of checkpoint element (row, col) in a stage: boxes of BOXC columns, each [CKPT_ROWS][128 B].
__device__ __forceinline__ u32 ckpt_offset(u32 row, u32 col) {
  return (col / BOXC) * (CKPT_ROWS * 128u) + swizzle128(row, (col % BOXC) * ES);
}

// Checkpoint elements (row, col) and (row, col + 1) of a stage as fp32 (col even), and back,
// rounded to the checkpoint dtype (fp8: the codes, to nearest even, saturating at 448).
__device__ __forceinline__ void load_pair(const unsigned char* stage, u32 row, u32 col, float& a, float& b) {
#if CKPT_F32
  const Pair v = *(const Pair*)(stage + ckpt_offset(row, col));
  a = v.x;
  b = v.y;
#elif CKPT_FP8
  e4m3x2_to_f32(*(const u16*)(stage + ckpt_offset(row, col)), a, b);
#else
  const u32 v = *(const u32*)(stage + ckpt_offset(row, col));
  a = bf16_to_f32((u16)(v & 0xffffu));
  b = bf16_to_f32((u16)(v >> 16));
#endif
}

__device__ __forceinline__ void store_pair(unsigned char* stage, u32 row, u32 col, float a, float b) {
#if CKPT_F32
  Pair v;
  v.x = a;
  v.y = b;
  *(Pair*)(stage + ckpt_offset(row, col)) = v;
#elif CKPT_FP8
  *(u16*)(stage + ckpt_offset(row, col)) = pack_e4m3x2(a, b);
#else
  *(u32*)(stage + ckpt_offset(row, col)) = pack_bf16x2(a, b);
#endif
}

// Checkpoint elements (row, col) .. (row, col + 3) of a stage as fp32 (col a multiple of 4: one
// load of 16, 8 or 4 bytes inside one 16-byte chunk), and back, rounded as store_pair rounds.
__device__ __forceinline__ void load_quad(const unsigned char* stage, u32 row, u32 col, float (&v)[4]) {
  const unsigned char* p = stage + ckpt_offset(row, col);
#if CKPT_F32
  const float4 x = *(const float4*)p;
  v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
#elif CKPT_FP8
  const u32 x = *(const u32*)p;
  e4m3x2_to_f32((u16)(x & 0xffffu), v[0], v[1]);
  e4m3x2_to_f32((u16)(x >> 16), v[2], v[3]);
#else
  const uint2 x = *(const uint2*)p;
  const u32 wd[2] = {x.x, x.y};
  unpack_bf16x2(wd, v);
#endif
}

__device__ __forceinline__ void store_quad(unsigned char* stage, u32 row, u32 col, const float (&v)[4]) {
  unsigned char* p = stage + ckpt_offset(row, col);
#if CKPT_F32
  *(float4*)p = make_float4(v[0], v[1], v[2], v[3]);
#elif CKPT_FP8
  *(u32*)p = (u32)pack_e4m3x2(v[0], v[1]) | ((u32)pack_e4m3x2(v[2], v[3]) << 16);
#else
  *(uint2*)p = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
#endif
}

// ------------------------------------------------------------------ the persistent kernels' producer

// The first ``stages`` units' checkpoint rows of a CTA, requested by the producer warp before it
// waits for the coefficient grid: they need only the slot (lane i's ``slot_l``: unit i's slot, < 0
// for a padding row). Unit u = blockIdx.x + i gridDim.x is the CKPT_ROWS rows of part u % parts of
// head (u / parts) % heads. Stage i at base + i stage_bytes, its full mbarrier at bars + 8 i.
__device__ __forceinline__ void prefetch_first_units(const TensorMap* ckpt_load, u32 base, u32 bars, u32 stage_bytes,
                                                     int stages, int units, int heads, int parts, int slot_l, int lane) {
#pragma unroll 1
  for (int i = 0; i < stages; ++i) {
    const int u = blockIdx.x + i * gridDim.x;
    const int slot = __shfl_sync(0xffffffffu, slot_l, i);
    if (u >= units || slot < 0) continue;
    const int hp = u % (heads * parts), h = hp / parts, part = hp - h * parts;
    const u32 full = bars + 8 * i;
    if (lane == 0) mbar_expect_tx(full, CKPT_BYTES);
    __syncwarp();
    if (lane < NBOX) tma_load_4d(base + i * stage_bytes + lane * (CKPT_ROWS * 128), ckpt_load, lane * BOXC, part * CKPT_ROWS, h, slot, full);
  }
}

#if CKPT_FP8
// ------------------------------------------------------------------ fp8 rows times f16 vectors

// A consumer warp's 16 fp8 rows r0 .. r0 + 15 of a stage (CKPT_COLS 128) times the 8 columns of
// an f16 operand B on tensor cores: m16n8k16 products of the codes widened exactly to f16
// (cvt.rn.f16x2.e4m3x2) into two fp32 accumulators (even and odd k tiles), summed into d. Lane
// (gq, tq) = (lane / 4, lane % 4) reads columns 32 tq .. 32 tq + 31 of rows r0 + gq and r0 + gq + 8
// as 16-byte chunks 2 tq and 2 tq + 1 (under the swizzle a quarter-warp's rows 2q and 2q + 1 read
// even and odd chunks: conflict-free); k tile t takes columns 4t .. 4t + 3 of every lane's range
// (the products sum the columns in another order, the same for both operands). ``b``: the lane's
// 32 f16 values of column gq of B, at columns 32 tq .. 32 tq + 31 (shared memory, 16-byte
// aligned). Out: d[0], d[1] = rows r0 + gq, columns 2 tq and 2 tq + 1 of the product; d[2], d[3]
// the same for row r0 + gq + 8 (the m16n8k16 accumulator layout). Codes, not values: the caller
// applies the row scales.
__device__ __forceinline__ void fp8_rows_times_f16(const unsigned char* gstage, int r0, int lane, const u16* b,
                                                   float (&d)[4]) {
  const int gq = lane >> 2, tq = lane & 3;
  u32 code[2][8];  // rows r0 + gq, r0 + gq + 8: four codes a word, the lane's 32 columns
#pragma unroll
  for (int rh = 0; rh < 2; ++rh) {
#pragma unroll
    for (int ch = 0; ch < 2; ++ch) {
      const uint4 v = *(const uint4*)(gstage + ckpt_offset(r0 + gq + 8 * rh, 32 * tq + 16 * ch));
      code[rh][4 * ch] = v.x, code[rh][4 * ch + 1] = v.y, code[rh][4 * ch + 2] = v.z, code[rh][4 * ch + 3] = v.w;
    }
  }
  u32 bw[16];  // f16 pairs of the lane's 32 columns of B
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const uint4 v = ((const uint4*)b)[q];
    bw[4 * q] = v.x, bw[4 * q + 1] = v.y, bw[4 * q + 2] = v.z, bw[4 * q + 3] = v.w;
  }
  float part[2][4] = {};
#pragma unroll
  for (int t = 0; t < 8; ++t)
    mma_f16(part[t & 1], e4m3x2_to_f16x2((u16)code[0][t]), e4m3x2_to_f16x2((u16)code[1][t]),
            e4m3x2_to_f16x2((u16)(code[0][t] >> 16)), e4m3x2_to_f16x2((u16)(code[1][t] >> 16)), bw[2 * t], bw[2 * t + 1]);
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = part[0][i] + part[1][i];
}
#endif

// ------------------------------------------------------------------ the flush fold

// One 64-column block ``cb`` of a consumer warp's 16 rows r0 .. r0 + 15 of a stage, folded into
// fp32 accumulators: s[n][2 half + e] = row (r0 + gq + 8 half), column cb 64 + 8 n + 2 tq + e of
// S = decay (row_scale[half] S0) + sum_{j <= last} wgt_j x_j B_jᵀ (8 n tiles of 8 columns on
// tensor cores, wgt_j x_j in three bf16 parts over accumulators started from the decayed S0;
// row_scale: 1, or an fp8 row's scale, its codes' values formed first as the reference does). xs: the records' per-row
// values x_j, [LP][CKPT_ROWS] bf16 in shared memory; b_rows: shared address of the LP records'
// column rows B_j, REC_PITCH bytes apart; wgt[LP]; records after ``last`` are neither read nor
// weighted.
__device__ __forceinline__ void fold_column_block(const unsigned char* gstage, const u16* xs, u32 b_rows, const float* wgt,
                                                  const float (&row_scale)[2], float decay, int last, int r0, int lane,
                                                  int cb, float (&s)[8][4]) {
  const int gq = lane >> 2, tq = lane & 3;
  const int kr = (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix row of B (a record) of this lane
#pragma unroll
  for (int n = 0; n < 8; ++n) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      load_pair(gstage, r0 + gq + 8 * half, cb * 64 + n * 8 + 2 * tq, s[n][2 * half], s[n][2 * half + 1]);
      s[n][2 * half] = (s[n][2 * half] * row_scale[half]) * decay;
      s[n][2 * half + 1] = (s[n][2 * half + 1] * row_scale[half]) * decay;
    }
  }
#pragma unroll
  for (int k0 = 0; k0 < LP; k0 += 16) {
    // A: rows (gq, gq + 8) x records (k0 + 2 tq + {0, 1}, + 8), s_j x_j in three parts.
    u32 ah[4], am[4], al[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int rr = r0 + gq + 8 * (q & 1);
      const int j = k0 + 2 * tq + 8 * (q >> 1);
      float v0 = 0.0f, v1 = 0.0f;
      if (j <= last) v0 = wgt[j] * bf16_to_f32(xs[j * CKPT_ROWS + rr]);
      if (j + 1 <= last) v1 = wgt[j + 1] * bf16_to_f32(xs[(j + 1) * CKPT_ROWS + rr]);
      float h0, m0, l0, h1, m1, l1;
      split3(v0, h0, m0, l0);
      split3(v1, h1, m1, l1);
      ah[q] = pack_bf16x2(h0, h1);
      am[q] = pack_bf16x2(m0, m1);
      al[q] = pack_bf16x2(l0, l1);
    }
    // B: records as rows k (clamped to last: finite values times a zero A), 8 columns a tile.
    const int k = k0 + kr <= last ? k0 + kr : last;
#pragma unroll
    for (int n = 0; n < 8; n += 2) {
      u32 b0, b1, b2, b3;
      ldmatrix_x4_trans(b_rows + k * REC_PITCH + (cb * 64 + n * 8 + (lane >> 4) * 8) * 2, b0, b1, b2, b3);
      mma_bf16(s[n], ah[0], ah[1], ah[2], ah[3], b0, b1);
      mma_bf16(s[n], am[0], am[1], am[2], am[3], b0, b1);
      mma_bf16(s[n], al[0], al[1], al[2], al[3], b0, b1);
      mma_bf16(s[n + 1], ah[0], ah[1], ah[2], ah[3], b2, b3);
      mma_bf16(s[n + 1], am[0], am[1], am[2], am[3], b2, b3);
      mma_bf16(s[n + 1], al[0], al[1], al[2], al[3], b2, b3);
    }
  }
}

#if !CKPT_FP8
// A consumer warp's 16 rows r0 .. r0 + 15 of a stage folded in place (fold_column_block, one
// 64-column block at a time), rounded to the checkpoint dtype.
__device__ __forceinline__ void fold_warp_rows(unsigned char* gstage, const u16* xs, u32 b_rows, const float* wgt,
                                               float decay, int last, int r0, int lane) {
  const int gq = lane >> 2, tq = lane & 3;
  const float unscaled[2] = {1.0f, 1.0f};
#pragma unroll 1
  for (int cb = 0; cb < CKPT_COLS / 64; ++cb) {
    float s[8][4];
    fold_column_block(gstage, xs, b_rows, wgt, unscaled, decay, last, r0, lane, cb, s);
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
        store_pair(gstage, r0 + gq + 8 * half, cb * 64 + n * 8 + 2 * tq, s[n][2 * half], s[n][2 * half + 1]);
    }
  }
}
#else
// fp8: a consumer warp's 16 rows r0 .. r0 + 15 of folded fp32 values held as CKPT_COLS / 8 m16n8
// accumulator tiles (lane (gq, tq) = (lane / 4, lane % 4): s[n][0..1] row r0 + gq, s[n][2..3] row
// r0 + gq + 8, columns 8 n + 2 tq and 8 n + 2 tq + 1) stored into the stage as codes: each row's
// new scale max |row| / 448 (1 for a zero row; a row's columns lie in the 4 lanes of its quad),
// the row divided by it to nearest even (reference.rounding.fp8_row_encode's rule;
// div_by_reciprocal); the scales written to ``scale_out`` (global, the unit's [CKPT_ROWS] row
// scales) by lane tq == 0 of each quad.
__device__ __forceinline__ void store_warp_rows_fp8(unsigned char* gstage, int r0, int lane, const float (&s)[CKPT_COLS / 8][4],
                                                    float* scale_out) {
  const int gq = lane >> 2, tq = lane & 3;
  float amax[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < CKPT_COLS / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) amax[e >> 1] = fmaxf(amax[e >> 1], fabsf(s[n][e]));
  }
  float new_scale[2], inverse[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    amax[half] = fmaxf(amax[half], __shfl_xor_sync(0xffffffffu, amax[half], 1));
    amax[half] = fmaxf(amax[half], __shfl_xor_sync(0xffffffffu, amax[half], 2));
    new_scale[half] = fp8_row_scale(amax[half]);
    inverse[half] = __frcp_rn(new_scale[half]);
  }
#pragma unroll
  for (int n = 0; n < CKPT_COLS / 8; ++n) {
#pragma unroll
    for (int half = 0; half < 2; ++half)
      store_pair(gstage, r0 + gq + 8 * half, n * 8 + 2 * tq, div_by_reciprocal(s[n][2 * half], new_scale[half], inverse[half]),
                 div_by_reciprocal(s[n][2 * half + 1], new_scale[half], inverse[half]));
  }
  if (tq == 0) {
    scale_out[r0 + gq] = new_scale[0];
    scale_out[r0 + gq + 8] = new_scale[1];
  }
}

// fp8: a consumer warp's 16 rows r0 .. r0 + 15 of a stage folded in place from their codes and
// row scales ``scale`` (the stage's, [CKPT_ROWS] fp32), every column block held in registers,
// then stored as codes with new row scales (store_warp_rows_fp8).
__device__ __forceinline__ void fold_warp_rows(unsigned char* gstage, const u16* xs, u32 b_rows, const float* wgt,
                                               float decay, int last, int r0, int lane, const float* scale,
                                               float* scale_out) {
  const int gq = lane >> 2;
  const float row_scale[2] = {scale[r0 + gq], scale[r0 + gq + 8]};
  float s[CKPT_COLS / 8][4];
#pragma unroll
  for (int cb = 0; cb < CKPT_COLS / 64; ++cb)
    fold_column_block(gstage, xs, b_rows, wgt, row_scale, decay, last, r0, lane, cb, *reinterpret_cast<float(*)[8][4]>(s + 8 * cb));
  store_warp_rows_fp8(gstage, r0, lane, s, scale_out);
}
#endif
