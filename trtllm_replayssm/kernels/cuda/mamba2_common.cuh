// Device pieces shared by the CUDA C++ Mamba-2 kernels (mamba2_replay_step.cu, mamba2_verify_step.cu):
// the sizes of a head's checkpoint rows and of the coefficient CTAs, the checkpoint's swizzled
// stage layout, the output's skip and gate, processed dt, record weights, and a consumer warp's
// flush fold. Needs the -D constants CKPT_F32, NHEADS, NGROUPS, ROWS, DSTATE, LP, COEF_WARPS, HAS_D,
// D_PER_DIM, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, DT_CODE, DTB_CODE and D_CODE (the including file's
// header says what each is). sm_90.

#include "replay_common.cuh"

#define CONSUMERS (ROWS / 16)
#define ES (CKPT_F32 ? 4 : 2)               // checkpoint element bytes
#define BOXC (128 / ES)                     // checkpoint columns per 128-byte box
#define NBOX (DSTATE / BOXC)                // boxes of a checkpoint row
#define CKPT_BYTES (ROWS * DSTATE * ES)

#define B_PITCH (DSTATE * 2 + 16)           // padded: ldmatrix rows 16 bytes apart in banks

#define HPG (NHEADS / NGROUPS)                   // heads per group
#define HPC (HPG < 16 ? HPG : 16)                // heads per coefficient CTA
#define COEF_SPLIT ((HPG + HPC - 1) / HPC)       // coefficient CTAs per (group, row)
#define HPW ((HPC + COEF_WARPS - 1) / COEF_WARPS)  // heads per warp: warp q takes q, q + COEF_WARPS, ...
#define RPW (LP / COEF_WARPS)                    // records per warp in B_j . C: j = q, q + COEF_WARPS, ...
#define PER_LANE (DSTATE / 32)                   // d_state elements per lane (2 to 8)
#define XPL ((ROWS + 31) / 32)                   // x elements per lane and head

// Offset of checkpoint element (row, col) in a stage: boxes of BOXC columns, each [ROWS][128 B].
__device__ __forceinline__ u32 ckpt_offset(u32 row, u32 col) {
  return (col / BOXC) * (ROWS * 128u) + swizzle128(row, (col % BOXC) * ES);
}

// Checkpoint elements (row, col) and (row, col + 1) of a stage as fp32 (col even), and back,
// rounded to the checkpoint dtype.
__device__ __forceinline__ void load_pair(const unsigned char* stage, u32 row, u32 col, float& a, float& b) {
#if CKPT_F32
  const Pair v = *(const Pair*)(stage + ckpt_offset(row, col));
  a = v.x;
  b = v.y;
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
#else
  *(u32*)(stage + ckpt_offset(row, col)) = pack_bf16x2(a, b);
#endif
}

// ------------------------------------------------------------------ the output of a row

// The skip weight D of (head h, dim row), per head or per dim; 0 without D.
__device__ __forceinline__ float skip_weight(const void* D, long long sD_head, int h, int row) {
#if HAS_D
#if D_PER_DIM
  return load_f32<D_CODE>(D, h * sD_head + row);
#else
  return load_f32<D_CODE>(D, h * sD_head);
#endif
#else
  return 0.0f;
#endif
}

// A row's skip and gate inputs, requested early: D (per head or per dim; 0 without D) and z
// (0 without z) of (batch row b, head h, dim row).
struct RowInputs {
  float d_skip, zv;
};
__device__ __forceinline__ RowInputs row_inputs(const void* D, long long sD_head, const u16* z, long long sz_batch,
                                                long long sz_head, int b, int h, int row) {
  RowInputs r = {skip_weight(D, sD_head, h, row), 0.0f};
#if HAS_Z
  r.zv = bf16_to_f32(z[b * sz_batch + h * sz_head + row]);
#endif
  return r;
}

// y + D x, for the inputs the kernel was compiled with.
__device__ __forceinline__ float row_skip(float y, RowInputs r, float x_now) {
#if HAS_D
  y += r.d_skip * x_now;
#endif
  return y;
}

// The output's gate silu(z) (unused without z).
__device__ __forceinline__ float row_gate(RowInputs r) {
#if HAS_Z
  return r.zv / (1.0f + expf(-r.zv));
#else
  return 1.0f;
#endif
}

// y + D x, gated by silu(z), for the inputs the kernel was compiled with.
__device__ __forceinline__ float row_output(float y, RowInputs r, float x_now) {
  y = row_skip(y, r, x_now);
#if HAS_Z
  y *= row_gate(r);
#endif
  return y;
}

// ------------------------------------------------------------------ per-head weights

// A processed dt of head h: softplus(dt[i] + dt_bias[h]) (identity above 20); i: the element index.
__device__ __forceinline__ float processed_dt(const void* dt, long long i, const void* dt_bias, int h) {
  float v = load_f32<DT_CODE>(dt, i);
#if HAS_DT_BIAS
  v += load_f32<DTB_CODE>(dt_bias, h);
#endif
#if DT_SOFTPLUS
  v = v <= 20.0f ? log1pf(__expf(v)) : v;
#endif
  return v;
}

// Lane j's record weight s_j of one head (the whole warp calls it): dt_j exp(A (dt + sum_{j<i<w}
// dt_i)) for j < w, dt at j == w, zero after, from exact suffix sums (inclusive v_j by a warp
// scan, then later_j = v_{j+1}: no prefix subtraction). ``total``: sum_{j<w} dt_j.
__device__ __forceinline__ float record_weight(float dtj, float dth, float a, int w, int lane, float& total) {
  const float later = warp_suffix_sums(lane < w ? dtj : 0.0f, lane, total);
  return lane < w ? dtj * __expf(a * (later + dth)) : (lane == w ? dth : 0.0f);
}

// ------------------------------------------------------------------ the persistent kernels' producer

// The first ``stages`` units' checkpoint rows of a CTA (units blockIdx.x + i gridDim.x, each all
// ROWS rows of head u % NHEADS), requested by the producer warp before it waits for the
// coefficient grid: they need only the slot (lane i's ``slot_l``: unit i's slot, < 0 for a
// padding row). Stage i at base + i stage_bytes, its full mbarrier at bars + 8 i.
__device__ __forceinline__ void prefetch_first_units(const TensorMap* ckpt_load, u32 base, u32 bars, u32 stage_bytes,
                                                     int stages, int units, int slot_l, int lane) {
#pragma unroll 1
  for (int i = 0; i < stages; ++i) {
    const int u = blockIdx.x + i * gridDim.x;
    const int slot = __shfl_sync(0xffffffffu, slot_l, i);
    if (u >= units || slot < 0) continue;
    const u32 full = bars + 8 * i;
    if (lane == 0) mbar_expect_tx(full, CKPT_BYTES);
    __syncwarp();
    if (lane < NBOX) tma_load_4d(base + i * stage_bytes + lane * (ROWS * 128), ckpt_load, lane * BOXC, 0, u % NHEADS, slot, full);
  }
}

// ------------------------------------------------------------------ the flush fold

// A consumer warp's 16 rows r0 .. r0 + 15 of a stage folded in place: S = decay S0 + sum_{j <= last}
// wgt_j x_j B_jᵀ, 64 columns at a time (8 n tiles of 8 columns) on tensor cores, wgt_j x_j in
// three bf16 parts (24 bits) over fp32 accumulators started from decay S0, rounded to the
// checkpoint dtype. xs: x records [LP][ROWS] in shared memory; b_rows: shared address of LP B
// records B_PITCH bytes apart; wgt[LP]; records after ``last`` are neither read as x nor weighted.
__device__ __forceinline__ void fold_warp_rows(unsigned char* gstage, const u16* xs, u32 b_rows, const float* wgt,
                                               float decay, int last, int r0, int lane) {
  const int gq = lane >> 2, tq = lane & 3;
  const int kr = (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix row of B (a record) of this lane
#pragma unroll 1
  for (int cb = 0; cb < DSTATE / 64; ++cb) {
    float s[8][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        load_pair(gstage, r0 + gq + 8 * half, cb * 64 + n * 8 + 2 * tq, s[n][2 * half], s[n][2 * half + 1]);
        s[n][2 * half] *= decay;
        s[n][2 * half + 1] *= decay;
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
        if (j <= last) v0 = wgt[j] * bf16_to_f32(xs[j * ROWS + rr]);
        if (j + 1 <= last) v1 = wgt[j + 1] * bf16_to_f32(xs[(j + 1) * ROWS + rr]);
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
        ldmatrix_x4_trans(b_rows + k * B_PITCH + (cb * 64 + n * 8 + (lane >> 4) * 8) * 2, b0, b1, b2, b3);
        mma_bf16(s[n], ah[0], ah[1], ah[2], ah[3], b0, b1);
        mma_bf16(s[n], am[0], am[1], am[2], am[3], b0, b1);
        mma_bf16(s[n], al[0], al[1], al[2], al[3], b0, b1);
        mma_bf16(s[n + 1], ah[0], ah[1], ah[2], ah[3], b2, b3);
        mma_bf16(s[n + 1], am[0], am[1], am[2], am[3], b2, b3);
        mma_bf16(s[n + 1], al[0], al[1], al[2], al[3], b2, b3);
      }
    }
#pragma unroll
    for (int n = 0; n < 8; ++n) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
        store_pair(gstage, r0 + gq + 8 * half, cb * 64 + n * 8 + 2 * tq, s[n][2 * half], s[n][2 * half + 1]);
    }
  }
}
