// Device pieces shared by the CUDA C++ Mamba-2 kernels (mamba2_replay_step.cu, mamba2_verify_step.cu):
// the sizes of a head's checkpoint rows and of the coefficient CTAs, the checkpoint stage of
// ckpt_stage.cuh (CKPT_ROWS = ROWS, CKPT_COLS = DSTATE), the output's skip and gate, processed dt,
// record weights, and the producer's first checkpoint copies. Needs the -D constants CKPT_F32,
// NHEADS, NGROUPS, ROWS, DSTATE, LP, COEF_WARPS, HAS_D, D_PER_DIM, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS,
// DT_CODE, DTB_CODE and D_CODE (the including file's header says what each is). sm_90.

#define CONSUMERS (ROWS / 16)
#define CKPT_ROWS ROWS                      // a unit: all head_dim rows of one head
#define CKPT_COLS DSTATE
#include "ckpt_stage.cuh"

#define HPG (NHEADS / NGROUPS)                   // heads per group
#define HPC (HPG < 16 ? HPG : 16)                // heads per coefficient CTA
#define COEF_SPLIT ((HPG + HPC - 1) / HPC)       // coefficient CTAs per (group, row)
#define HPW ((HPC + COEF_WARPS - 1) / COEF_WARPS)  // heads per warp: warp q takes q, q + COEF_WARPS, ...
#define RPW (LP / COEF_WARPS)                    // records per warp in B_j . C: j = q, q + COEF_WARPS, ...
#define PER_LANE (DSTATE / 32)                   // d_state elements per lane (2 to 8)
#define XPL ((ROWS + 31) / 32)                   // x elements per lane and head

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
