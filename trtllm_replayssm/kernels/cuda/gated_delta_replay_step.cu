// ReplaySSM GDN (gated delta rule, a log-decay per value head) decode step for sm_90, bf16
// activations and records, bf16 or fp32 (CKPT_F32) checkpoints: two launches, compiled at run
// time by NVRTC (trtllm_replayssm/kernels/nvrtc.py) and launched by
// trtllm_replayssm/kernels/gated_delta_replay_cuda.py, which documents the contract (the Triton
// kernel's, kernels/gated_delta_replay.py). Notation of trtllm_replayssm/reference/gated_delta.py:
// a row's cursor w, records j < w of (d_j, k̂_j, g_j), q̂ = scale q / |q|, k̂ = k / |k| (with
// L2NORM), e_j = exp(g + sum_{j<i<w} g_i), e0 = exp(g + sum_{i<w} g_i).
//
// 1. gdn_replay_coefficients, one CTA per (key head, batch row), a warp per value head of the
//    key head (VPK warps). Reads the row's cursor, the key head's k records 0..L-1 (those at
//    j >= w are selected out, never multiplied: they may hold anything), the value head's g
//    records, q, k, g, beta; writes per (row, value head) a coefficient block
//        sq[LP]   e_j (k̂_j . q̂) for j < w, 0 after
//        sk[LP]   e_j (k̂_j . k̂) for j < w, 0 after
//        e[LP]    e_j for j < w, 0 after                 (the flush's record weights)
//        e0, kq = k̂ . q̂, beta, w (int)
//    and per (row, key head) q̂ and k̂ in fp32 (the qk block, warp 0). For w < L-1 it appends g
//    at w (every warp) and k̂ at w (warp 0), rounded to the record dtype. Padding rows
//    (slot < 0) read and write nothing. The cursor is only read here: the step kernel advances it.
// 2. gdn_replay_step, persistent: CTA c takes units u = c, c + gridDim.x, ..., a unit being ROWS
//    value rows (a part) of one value head of one batch row, u = (b VHEADS + h) PARTS + part.
//    Warp CONSUMERS (the last) is the producer: per unit it waits for a free stage and fills it
//    with one TMA tensor-map copy per 128-byte box of the checkpoint rows (128-byte swizzle), one
//    bulk copy per d record position 0..w-1 (the part's ROWS values), one per k record 0..L-2
//    for a flush, v of the part, the coefficient block and the qk block. Each consumer warp owns
//    16 rows, a lane per row and half of head_k_dim (lanes 0-15 and 16-31):
//        hq = e0 (S0 q̂) + sum_j sq_j d_j,   hk = e0 (S0 k̂) + sum_j sk_j d_j   (exact fp32)
//        d = beta (v - hk),   o = hq + d kq
//    o to out, d appended at w (w < L-1). A flush unit (w == L-1) also forms
//        S = e0 S0 + sum_{j<w} (e_j d_j) k̂_jᵀ + d k̂ᵀ
//    in exact fp32 FMAs, rounds it into the stage in the checkpoint dtype and stores its rows
//    with TMA tensor stores. A unit that does not flush gives its stage back once read. A
//    consumer of a row's (head 0, part 0) unit writes the new cursor (0 after a flush, else w+1):
//    its stage holds the coefficient block, so the coefficient grid, the cursor's only other
//    reader, is complete. The producer reads each unit's cursor itself and may see it advanced:
//    it copies for either value (records 0..w, all L at 0, k records at L-1 or 0), and the
//    consumers take the exact w from the coefficient block.
//
// Compile-time constants (-D): CKPT_F32 (0: bf16 checkpoint, 1: fp32), KHEADS, VHEADS (a multiple
// of KHEADS, VHEADS / KHEADS <= 32), DK (head_k_dim: a multiple of 64 up to 256), DV (head_v_dim),
// ROWS (rows of a unit: a multiple of 16 up to 128 dividing DV), LREC (L, <= 32), LP (L rounded
// up to 16), STAGES, MIN_CTAS (the step kernel's register cap: resident CTAs a multiprocessor),
// L2NORM (0 / 1), and the dtype codes G_CODE, BETA_CODE of g and beta (0 fp32, 1 bf16, 2 fp16).

#include "replay_common.cuh"

#define VPK (VHEADS / KHEADS)               // value heads per key head
#define PARTS (DV / ROWS)                   // units per (row, value head)
#define CONSUMERS (ROWS / 16)
#define ES (CKPT_F32 ? 4 : 2)               // checkpoint element bytes
#define EPC (16 / ES)                       // checkpoint elements per 16-byte chunk
#define BOXC (128 / ES)                     // checkpoint columns per 128-byte box
#define NBOX (DK / BOXC)                    // boxes of a checkpoint row
#define HALF (DK / 2)                       // columns of a lane (lanes 0-15: the first half)
#define CKPT_BYTES (ROWS * DK * ES)
#define D_BYTES (LP * ROWS * 2)
#define K_BYTES (LP * DK * 2)
#define V_BYTES (ROWS * 2)
#define QK_FLOATS (2 * DK)                  // q̂, k̂
#define QK_BYTES (QK_FLOATS * 4)
#define COEF_FLOATS (3 * LP + 4)            // sq[LP], sk[LP], e[LP], e0, kq, beta, w (int)
#define COEF_BYTES (COEF_FLOATS * 4)
#define OFF_D CKPT_BYTES
#define OFF_K (OFF_D + D_BYTES)
#define OFF_QK (OFF_K + K_BYTES)
#define OFF_COEF (OFF_QK + QK_BYTES)
#define OFF_V (OFF_COEF + COEF_BYTES)
#define OFF_META (OFF_V + ((V_BYTES + 15) / 16) * 16)
#define STAGE_BYTES (((OFF_META + 16) + 1023) / 1024 * 1024)
#define PER_LANE (DK / 32)                  // head_k_dim elements per lane in the coefficient launch

// Dynamic shared memory the step kernel indexes (bytes; full and empty mbarriers per stage after
// the stages): the launcher's step_shared_bytes must equal it (a CPU test reads this from the PTX).
extern "C" __device__ unsigned int gdn_step_shared_bytes = STAGES * STAGE_BYTES + 1024 + 16 * STAGES;

// Offset of checkpoint element (row, col) in a stage: boxes of BOXC columns, each [ROWS][128 B].
__device__ __forceinline__ u32 ckpt_offset(u32 row, u32 col) {
  return (col / BOXC) * (ROWS * 128u) + swizzle128(row, (col % BOXC) * ES);
}

// The EPC checkpoint elements of a stage from (row, col) on (col a multiple of EPC) as fp32, and
// back, rounded to the checkpoint dtype.
__device__ __forceinline__ void load_chunk(const unsigned char* stage, u32 row, u32 col, float* v) {
  const uint4 c = *(const uint4*)(stage + ckpt_offset(row, col));
#if CKPT_F32
  v[0] = __uint_as_float(c.x);
  v[1] = __uint_as_float(c.y);
  v[2] = __uint_as_float(c.z);
  v[3] = __uint_as_float(c.w);
#else
  const u32 w4[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(w4[i] << 16);
    v[2 * i + 1] = __uint_as_float(w4[i] & 0xffff0000u);
  }
#endif
}

__device__ __forceinline__ void store_chunk(unsigned char* stage, u32 row, u32 col, const float* v) {
  uint4 c;
#if CKPT_F32
  c.x = __float_as_uint(v[0]);
  c.y = __float_as_uint(v[1]);
  c.z = __float_as_uint(v[2]);
  c.w = __float_as_uint(v[3]);
#else
  c.x = pack_bf16x2(v[0], v[1]);
  c.y = pack_bf16x2(v[2], v[3]);
  c.z = pack_bf16x2(v[4], v[5]);
  c.w = pack_bf16x2(v[6], v[7]);
#endif
  *(uint4*)(stage + ckpt_offset(row, col)) = c;
}

// ------------------------------------------------------------------ launch 1: coefficients

// PER_LANE (2, 4 or 8) bf16 values from p (aligned to their size) as fp32, in one load.
__device__ __forceinline__ void load_lane_bf16(const u16* p, float* v) {
#if PER_LANE == 2
  const u32 c[1] = {*(const u32*)p};
#elif PER_LANE == 4
  const uint2 c2 = *(const uint2*)p;
  const u32 c[2] = {c2.x, c2.y};
#else
  const uint4 c4 = *(const uint4*)p;
  const u32 c[4] = {c4.x, c4.y, c4.z, c4.w};
#endif
#pragma unroll
  for (int i = 0; i < PER_LANE / 2; ++i) {
    v[2 * i] = __uint_as_float(c[i] << 16);
    v[2 * i + 1] = __uint_as_float(c[i] & 0xffff0000u);
  }
}

// c ? a : b as one selp (a C++ select between two elements of an array became an indexed local-
// memory access).
__device__ __forceinline__ float select_f32(u32 c, float a, float b) {
  float r;
  asm("{\n.reg .pred p;\nsetp.ne.u32 p, %3, 0;\nselp.f32 %0, %1, %2, p;\n}" : "=f"(r) : "f"(a), "f"(b), "r"(c));
  return r;
}

// One butterfly step of warp_reduce_scatter32: lanes with bit N clear keep v[0, N), the others
// v[N, 2N) (moved down to v[0, N)), each adding its partner's copy of the half it keeps.
template <int N>
__device__ __forceinline__ void reduce_scatter_step(float* v, int lane) {
  const u32 upper = lane & N;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float send = select_f32(upper, v[i], v[i + N]);
    const float keep = select_f32(upper, v[i + N], v[i]);
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, N);
  }
}

// Butterfly reduce-scatter of 32 values over the warp: returns, in lane l, the sum over all lanes
// of v[l] (31 shuffles for 32 sums, against 160 for 32 warp_sums). v is consumed.
__device__ __forceinline__ float warp_reduce_scatter32(float* v, int lane) {
  reduce_scatter_step<16>(v, lane);
  reduce_scatter_step<8>(v, lane);
  reduce_scatter_step<4>(v, lane);
  reduce_scatter_step<2>(v, lane);
  reduce_scatter_step<1>(v, lane);
  return v[0];
}

extern "C" __global__ void __launch_bounds__(VPK * 32) gdn_replay_coefficients(
    float* __restrict__ coef_out,    // [batch, VHEADS, COEF_FLOATS]
    float* __restrict__ qk_out,      // [batch, KHEADS, QK_FLOATS]
    u16* __restrict__ k_records, long long skr_slot, long long skr_head, long long skr_pos,
    float* __restrict__ g_records, long long sgr_slot, long long sgr_head,
    const int* __restrict__ cursor,
    const u16* __restrict__ q, long long sq_batch, long long sq_head,
    const u16* __restrict__ k, long long sk_batch, long long sk_head,
    const void* __restrict__ g, long long sg_batch, long long sg_head,
    const void* __restrict__ beta, long long sb_batch, long long sb_head,
    const int* __restrict__ slot_ids, float scale) {
  // Launched programmatically after the previous kernel in the stream: wait for it before any
  // read, then let the step kernel be scheduled (it waits for this grid's completion before
  // reading anything written here).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int kh = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = kh * VPK + warp;
  const long long slot = slot_ids[b];
  if (slot < 0) return;
  // Everything but the cursor's uses needs only the slot: loaded first (one round trip).
  float qv[PER_LANE], kv[PER_LANE], kr[LP][PER_LANE];
  load_lane_bf16(q + b * sq_batch + kh * sq_head + lane * PER_LANE, qv);
  load_lane_bf16(k + b * sk_batch + kh * sk_head + lane * PER_LANE, kv);
  u16* const krec = k_records + slot * skr_slot + kh * skr_head;
#pragma unroll
  for (int j = 0; j < LP; ++j) {
    if (j < LREC) {
      load_lane_bf16(krec + j * skr_pos + lane * PER_LANE, kr[j]);
    } else {
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) kr[j][i] = 0.0f;
    }
  }
  float* const grec = g_records + slot * sgr_slot + h * sgr_head;
  const float gj = lane < LREC ? grec[lane] : 0.0f;
  const float gh = load_f32<G_CODE>(g, b * sg_batch + h * sg_head);
  const float bh = load_f32<BETA_CODE>(beta, b * sb_batch + h * sb_head);
  const int w = cursor[slot];
#if L2NORM
  float nq = 0.0f, nk = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    nq += qv[i] * qv[i];
    nk += kv[i] * kv[i];
  }
  const float rq = rsqrtf(warp_sum(nq) + 1e-6f) * scale, rk = rsqrtf(warp_sum(nk) + 1e-6f);
#else
  const float rq = scale, rk = 1.0f;
#endif
  float kq = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    qv[i] *= rq;
    kv[i] *= rk;
    kq += qv[i] * kv[i];
  }
  kq = warp_sum(kq);
  // k̂_j . q̂ and k̂_j . k̂ of every record, reduce-scattered: lane j gets record j's (records at
  // j >= w selected out before the sums: they may hold NaN).
  float pq = 0.0f, pk = 0.0f;
#pragma unroll
  for (int c = 0; c < LP; c += 16) {
    float part[32];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      float a = 0.0f, s = 0.0f;
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) {
        a += kr[c + j][i] * qv[i];
        s += kr[c + j][i] * kv[i];
      }
      part[j] = c + j < w ? a : 0.0f;
      part[16 + j] = c + j < w ? s : 0.0f;
    }
    // Lane l < 16 holds record c + l's q score, lane 16 + l its k score; lane j of the chunk
    // (j = c + (lane & 15)) takes both.
    const float r = warp_reduce_scatter32(part, lane);
    const float vq = __shfl_sync(0xffffffffu, r, lane & 15), vk = __shfl_sync(0xffffffffu, r, 16 + (lane & 15));
    if ((lane >> 4) == (c >> 4)) {
      pq = vq;
      pk = vk;
    }
  }
  // Decays from exact suffix sums of the g records (no prefix subtraction).
  float total;
  const float later = warp_suffix_sums(lane < w ? gj : 0.0f, lane, total);
  const float ej = lane < w ? __expf(later + gh) : 0.0f;
  float* blk = coef_out + ((long long)b * VHEADS + h) * COEF_FLOATS;
  if (lane < LP) {
    blk[lane] = ej * pq;
    blk[LP + lane] = ej * pk;
    blk[2 * LP + lane] = ej;
  }
  if (lane == 0) {
    blk[3 * LP] = __expf(total + gh);
    blk[3 * LP + 1] = kq;
    blk[3 * LP + 2] = bh;
    ((int*)blk)[3 * LP + 3] = w;
    if (w < LREC - 1) grec[w] = gh;
  }
  if (warp == 0) {
    float* qk = qk_out + ((long long)b * KHEADS + kh) * QK_FLOATS + lane * PER_LANE;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      qk[i] = qv[i];
      qk[DK + i] = kv[i];
    }
    if (w < LREC - 1) {
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) krec[w * skr_pos + lane * PER_LANE + i] = f32_to_bf16(kv[i]);
    }
  }
}

// ------------------------------------------------------------------ launch 2: the step

// EPC bf16 values of a k record row in shared memory from column col on, as fp32.
__device__ __forceinline__ void load_k_chunk(const u16* row, int col, float* v) {
#if CKPT_F32
  const uint2 c2 = *(const uint2*)(row + col);
  const u32 c[2] = {c2.x, c2.y};
#else
  const uint4 c4 = *(const uint4*)(row + col);
  const u32 c[4] = {c4.x, c4.y, c4.z, c4.w};
#endif
#pragma unroll
  for (int i = 0; i < EPC / 2; ++i) {
    v[2 * i] = __uint_as_float(c[i] << 16);
    v[2 * i + 1] = __uint_as_float(c[i] & 0xffff0000u);
  }
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 32, MIN_CTAS) gdn_replay_step(
    const __grid_constant__ TensorMap ckpt_load,   // checkpoint, boxes [BOXC cols, ROWS rows]
    const __grid_constant__ TensorMap ckpt_store,  // checkpoint, boxes [BOXC cols, 16 rows]
    const float* __restrict__ coef,                // [batch, VHEADS, COEF_FLOATS]
    const float* __restrict__ qk,                  // [batch, KHEADS, QK_FLOATS]
    u16* __restrict__ d_records, long long sdr_slot, long long sdr_head, long long sdr_pos,
    const u16* __restrict__ k_records, long long skr_slot, long long skr_head, long long skr_pos,
    const u16* __restrict__ v, long long sv_batch, long long sv_head,
    u16* __restrict__ out, long long so_batch, long long so_head,
    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;  // stages 1024-byte aligned (128-byte swizzle)
  unsigned char* const gbase = smem_raw + (base - raw);
  const u32 bars = base + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int units = batch * VHEADS * PARTS;
  // The next step's coefficient grid (launched programmatically) may be scheduled now; it waits
  // for this grid's completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;");
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bars + 8 * s, 1);
      mbar_init(bars + 8 * (STAGES + s), CONSUMERS);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  if (warp == CONSUMERS) {
    // ---------------- producer
    // Slots and cursors of the CTA's next 32 units, a lane each, requested before any
    // checkpoint tile (a load issued after the tiles waits behind them).
    int slot_l = -1, w_l = 0;
    if (blockIdx.x + lane * gridDim.x < units) slot_l = slot_ids[(blockIdx.x + lane * gridDim.x) / (VHEADS * PARTS)];
    if (slot_l >= 0) w_l = cursor[slot_l];
    // The first STAGES units' checkpoint rows need only the slot: requested before the wait for
    // the coefficient grid, so that they load while it runs.
#pragma unroll 1
    for (int i = 0; i < STAGES; ++i) {
      const int u = blockIdx.x + i * gridDim.x;
      const int slot = __shfl_sync(0xffffffffu, slot_l, i);
      if (u >= units || slot < 0) continue;
      const int hp = u % (VHEADS * PARTS), h = hp / PARTS, part = hp - h * PARTS;
      const u32 full = bars + 8 * i;
      if (lane == 0) mbar_expect_tx(full, CKPT_BYTES);
      __syncwarp();
      if (lane < NBOX) tma_load_4d(base + i * STAGE_BYTES + lane * (ROWS * 128), &ckpt_load, lane * BOXC, part * ROWS, h, slot, full);
    }
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
      const int k32 = i & 31;
      if (k32 == 0 && i > 0) {
        const int uk = u + lane * gridDim.x;
        slot_l = uk < units ? slot_ids[uk / (VHEADS * PARTS)] : -1;
        w_l = slot_l >= 0 ? cursor[slot_l] : 0;
      }
      const int slot = __shfl_sync(0xffffffffu, slot_l, k32);
      const int w = __shfl_sync(0xffffffffu, w_l, k32);
      const int st = i % STAGES;
      const u32 stage = base + st * STAGE_BYTES;
      const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
      const bool prefetched = i < STAGES;
      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);
      const int bh = u / PARTS, part = u - bh * PARTS, b = bh / VHEADS, h = bh - b * VHEADS, kh = h / VPK;
      // For a cursor read w' that may be one step ahead (w + 1, or 0 after a flush): d records
      // 0..w'-1 (0..L-2 at w' = 0), the k records 0..L-2 when the unit may flush (w' = L-1 or 0).
      const int nd = w == 0 ? LREC - 1 : w;
      const bool k_rows = w == LREC - 1 || w == 0;
      if (lane == 0) {
        ((int*)(gbase + st * STAGE_BYTES + OFF_META))[0] = slot;
        if (slot < 0) {
          mbar_arrive(full);
        } else {
          const u32 bytes = (prefetched ? 0 : CKPT_BYTES) + nd * ROWS * 2 + (k_rows ? (LREC - 1) * DK * 2 : 0) + V_BYTES +
                            COEF_BYTES + QK_BYTES;
          mbar_arrive_expect_tx(full, bytes);
        }
      }
      __syncwarp();
      if (slot >= 0) {
        if (!prefetched && lane < NBOX) tma_load_4d(stage + lane * (ROWS * 128), &ckpt_load, lane * BOXC, part * ROWS, h, slot, full);
        if (lane < nd)
          bulk_load(stage + OFF_D + lane * (ROWS * 2), d_records + slot * sdr_slot + h * sdr_head + lane * sdr_pos + part * ROWS,
                    ROWS * 2, full);
        if (k_rows && lane < LREC - 1)
          bulk_load(stage + OFF_K + lane * (DK * 2), k_records + slot * skr_slot + kh * skr_head + lane * skr_pos, DK * 2, full);
        if (lane == 0) bulk_load(stage + OFF_COEF, coef + (long long)bh * COEF_FLOATS, COEF_BYTES, full);
        if (lane == 1) bulk_load(stage + OFF_QK, qk + ((long long)b * KHEADS + kh) * QK_FLOATS, QK_BYTES, full);
        if (lane == 2) bulk_load(stage + OFF_V, v + b * sv_batch + h * sv_head + part * ROWS, V_BYTES, full);
      }
    }
    return;
  }

  // ---------------- consumers: warp owns rows r0 .. r0 + 15 of each unit, lane (lane & 15)'s
  // row over columns [half HALF, (half + 1) HALF)
  const int r0 = warp * 16;
  const int row = r0 + (lane & 15), half = lane >> 4;
  int i = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
    const int bh = u / PARTS, part = u - bh * PARTS, b = bh / VHEADS, h = bh - b * VHEADS;
    const int st = i % STAGES;
    const u32 stage = base + st * STAGE_BYTES;
    unsigned char* const gstage = gbase + st * STAGE_BYTES;
    const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
    mbar_wait(full, (i / STAGES) & 1);
    const int slot = ((const int*)(gstage + OFF_META))[0];
    bool released = false;  // the stage given back to the producer
    if (slot >= 0) {
      const float* cf = (const float*)(gstage + OFF_COEF);
      const float* qks = (const float*)(gstage + OFF_QK);
      const u16* ds = (const u16*)(gstage + OFF_D);
      // S0 q̂ and S0 k̂ of the lane's row and half: exact fp32 products, one 16-byte chunk a shared
      // load (a quarter-warp reads 8 rows' same chunk: 8 distinct bank groups under the swizzle).
      float aq[4] = {}, ak[4] = {};
#pragma unroll
      for (int c = 0; c < HALF; c += EPC) {
        const int col = half * HALF + c;
        float s[EPC];
        load_chunk(gstage, row, col, s);
#pragma unroll
        for (int e = 0; e < EPC; e += 4) {
          const float4 q4 = *(const float4*)(qks + col + e);
          const float4 k4 = *(const float4*)(qks + DK + col + e);
          aq[0] += s[e] * q4.x;
          aq[1] += s[e + 1] * q4.y;
          aq[2] += s[e + 2] * q4.z;
          aq[3] += s[e + 3] * q4.w;
          ak[0] += s[e] * k4.x;
          ak[1] += s[e + 1] * k4.y;
          ak[2] += s[e + 2] * k4.z;
          ak[3] += s[e + 3] * k4.w;
        }
      }
      const int w = ((const int*)cf)[3 * LP + 3];  // exact; the producer's read may be one step ahead
      // The row's cursor advances here, once (head 0, part 0): the coefficient grid that read it
      // has completed (its block is in this stage).
      if (h == 0 && part == 0 && warp == 0 && lane == 0) cursor[slot] = w == LREC - 1 ? 0 : w + 1;
      // Records term: lanes 0-15 take even j, 16-31 odd j (fixed trip count, predicated by w).
      float rq = 0.0f, rk = 0.0f;
#pragma unroll
      for (int j = half; j < LP; j += 2) {
        if (j < w) {
          const float dj = bf16_to_f32(ds[j * ROWS + row]);
          rq += cf[j] * dj;
          rk += cf[LP + j] * dj;
        }
      }
      const float vr = bf16_to_f32(((const u16*)(gstage + OFF_V))[row]);
      const float e0 = cf[3 * LP], kq = cf[3 * LP + 1], beta = cf[3 * LP + 2];
      // A unit that does not flush has read its stage: release it before the arithmetic.
      released = w != LREC - 1;
      if (released) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty);
      }
      float sq = (aq[0] + aq[1]) + (aq[2] + aq[3]), sk = (ak[0] + ak[1]) + (ak[2] + ak[3]);
      sq += __shfl_xor_sync(0xffffffffu, sq, 16);
      sk += __shfl_xor_sync(0xffffffffu, sk, 16);
      rq += __shfl_xor_sync(0xffffffffu, rq, 16);
      rk += __shfl_xor_sync(0xffffffffu, rk, 16);
      const float hq = e0 * sq + rq, hk = e0 * sk + rk;
      const float d = beta * (vr - hk);
      const float o = hq + d * kq;
      const int vrow = part * ROWS + row;
      if (lane < 16) {
        out[b * so_batch + h * so_head + vrow] = f32_to_bf16(o);
        if (w < LREC - 1) d_records[slot * sdr_slot + h * sdr_head + w * sdr_pos + vrow] = f32_to_bf16(d);
      }
      if (w == LREC - 1) {
        // Flush: S = e0 S0 + sum_{j<w} (e_j d_j) k̂_jᵀ + d k̂ᵀ for the lane's row and half, exact
        // fp32 FMAs (the k record chunks are read by all 16 lanes of a half: broadcasts),
        // rounded into the stage in place, then the warp's 16 rows stored by TMA.
        float a[LREC > 1 ? LREC - 1 : 1];
#pragma unroll
        for (int j = 0; j < LREC - 1; ++j) a[j] = cf[2 * LP + j] * bf16_to_f32(ds[j * ROWS + row]);
        const u16* ks = (const u16*)(gstage + OFF_K);
#pragma unroll 1
        for (int c = 0; c < HALF; c += EPC) {
          const int col = half * HALF + c;
          float s[EPC];
          load_chunk(gstage, row, col, s);
#pragma unroll
          for (int e = 0; e < EPC; ++e) s[e] = e0 * s[e] + d * qks[DK + col + e];
#pragma unroll
          for (int j = 0; j < LREC - 1; ++j) {
            float kc[EPC];
            load_k_chunk(ks + j * DK, col, kc);
#pragma unroll
            for (int e = 0; e < EPC; ++e) s[e] += a[j] * kc[e];
          }
          store_chunk(gstage, row, col, s);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncwarp();
        if (lane == 0) {
#pragma unroll
          for (int bx = 0; bx < NBOX; ++bx)
            tma_store_4d(&ckpt_store, stage + bx * (ROWS * 128) + r0 * 128, bx * BOXC, part * ROWS + r0, h, slot);
          asm volatile("cp.async.bulk.commit_group;" ::: "memory");
          asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        }
      }
    }
    if (!released) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
    }
  }
}
