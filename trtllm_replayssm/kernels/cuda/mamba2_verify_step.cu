// ReplaySSM Mamba-2 speculative verify for sm_90, bf16 activations, bf16 or fp32 (CKPT_F32)
// checkpoints: the outputs of VT window tokens per row from checkpoint + committed records, in two
// launches, compiled at run time by NVRTC (trtllm_replayssm/kernels/nvrtc.py) and launched by
// trtllm_replayssm/kernels/mamba2_verify_cuda.py. The contract is the Triton kernel's
// (kernels/mamba2_verify.py): a row with w committed records and n <= VT window tokens flushes when
// w + n > L - 1; y_s = exp(A (Λ + c_s)) (S0 . C_s) + Σ_{k<w} dt_k exp(A (λ_k + c_s)) (B_k . C_s) x_k
// + Σ_{j<=s} dt_j exp(A c_{j,s}) (B_j . C_s) x_j with Λ = Σ_{i<w} dt_i, λ_k = Σ_{k<i<w} dt_i, c_s =
// Σ_{i<=s} dt_i and c_{j,s} = Σ_{j<i<=s} dt_i over the window (every sum formed term by term: no
// subtraction enters an exponent). A flush row's outputs take the same form (S0 and the history,
// equal to the folded S1 = exp(A Λ) S0 + Σ_{k<w} dt_k exp(A λ_k) x_k B_kᵀ and the window), and it
// stores S1 over the checkpoint.
//
// 1. mamba2_verify_coefficients, one CTA of COEF_WARPS warps per (group, batch row, 16 heads of the
//    group): B_k . C_s of the history records k < L (warps over records, lanes over d_state) and
//    B_j . C_s of the window (j <= s), once per CTA; then each warp, for every COEF_WARPS-th head,
//    a coefficient block (floats; TP = VT rounded up to 4 or 8):
//        hist[LP][TP]  dt_k exp(A (λ_k + c_s)) (B_k . C_s) for k < w, s < VT; 0 elsewhere
//        win[TP][TP]   dt_j exp(A c_{j,s}) (B_j . C_s) for j <= s < VT; 0 elsewhere
//        decay[TP]     exp(A (Λ + c_s))
//        wgt[LP]       dt_k exp(A λ_k) for k < w (the flush's fold weights); 0 after
//        fold decay exp(A Λ), w, n (ints)
//    and per (row, group) the window's C as dense rows [VT][DSTATE] in the checkpoint's dtype (fp32
//    rows take fp32 C: no conversion in the step kernel's loop). Writes the window's dt records (at
//    w + s, or at s for a flush row: lane s read record s before), a non-flush row's window B
//    records at w + s (the group's first CTA, from the registers that formed B_j . C_s), and
//    pending[slot] := n. The cursor is only read. Padding rows (slot < 0) read and write nothing.
//    B and C rows are read in 32-bit pairs, B rows by the step kernel in 16-byte chunks (aligned:
//    the launcher checks).
// 2. mamba2_verify_step, persistent as mamba2_replay_step: a unit is one head of one batch row, all
//    ROWS rows of it; CTA c takes units c, c + gridDim.x, ... Warp CONSUMERS (the last) is the
//    producer: per unit one TMA tensor-map copy per 128-byte box of the checkpoint rows (the first
//    STAGES units' before the wait for the coefficient grid), one bulk copy of the history's x
//    records 0..w-1, a flush unit's B records 0..w-1 (one per row, padded), the coefficient block
//    and the window's C rows. Each consumer warp owns 16 rows: S0 . C_s for the VT tokens (bf16
//    rows: m16n8k16 tensor-core products with C_s as column s of the B operand; fp32 rows: exact
//    fp32 FMAs, a lane per row and half of d_state, VT sums), the history and window terms (half a
//    warp each over records), y_s + D x_s gated by silu(z_s), stored for s < n; a unit that does
//    not flush gives its stage back once read. It then writes the window's x records of its rows
//    (at w + s, or at s for a flush unit: only this unit reads the head's x records, and its
//    history is in the stage). A flush unit folds S1 = exp(A Λ) S0 + Σ_{k<w} wgt_k x_k B_kᵀ in the
//    stage (fold_warp_rows: tensor cores, 24-bit parts, fp32 accumulators), stores its rows with TMA
//    tensor stores. Each flush unit counts itself in arrivals[slot] as soon as its stage is full (its
//    B records read); the row's last unit writes the window's B records of every group at 0..n-1,
//    zeroes the count and sets the cursor to 0.
//
// Compile-time constants (-D): those of mamba2_common.cuh, and LREC (L, <= 32), LP (L rounded up to
// 16), VT (window tokens, 1-8), STAGES, MIN_CTAS (the step kernel's register cap: resident CTAs a
// multiprocessor), COEF_WARPS (1, 2, 4, 8 or 16: a divisor of LP), HAS_NUM_TOKENS (0: every row has
// VT tokens).

#include "mamba2_common.cuh"
#include "verify_common.cuh"

#define TP (VT <= 4 ? 4 : 8)                     // window tokens padded (coefficient rows: 16-byte loads)
#define C_OFF_HIST 0                             // coefficient block, in floats
#define C_OFF_WIN (LP * TP)
#define C_OFF_DECAY (C_OFF_WIN + TP * TP)
#define C_OFF_WGT (C_OFF_DECAY + TP)
#define C_OFF_FOLD (C_OFF_WGT + LP)
#define C_OFF_W (C_OFF_FOLD + 1)
#define C_OFF_N (C_OFF_FOLD + 2)
#define COEF_FLOATS ((C_OFF_FOLD + 3 + 3) / 4 * 4)
#define COEF_BYTES (COEF_FLOATS * 4)
#define X_BYTES (LP * ROWS * 2)
#define B_BYTES (LP * REC_PITCH)
#define C_BYTES (VT * DSTATE * ES)              // the window's C rows, in the checkpoint's dtype
#define OFF_X CKPT_BYTES
#define OFF_B (OFF_X + X_BYTES)
#define OFF_C (OFF_B + B_BYTES)
#define OFF_COEF (OFF_C + C_BYTES)
#define OFF_META (OFF_COEF + COEF_BYTES)
#define STAGE_BYTES (((OFF_META + 16) + 1023) / 1024 * 1024)
#define WPW ((VT + COEF_WARPS - 1) / COEF_WARPS)  // window records per warp in B_j . C_s

// Dynamic shared memory the step kernel indexes (bytes; full and empty mbarriers per stage after
// the stages): the launcher's verify_shared_bytes must equal it (a CPU test reads this from the PTX).
extern "C" __device__ unsigned int mamba2_verify_shared_bytes = STAGES * STAGE_BYTES + 1024 + 16 * STAGES;
// The coefficient block's floats: the launcher's verify_coefficient_floats must equal it.
extern "C" __device__ unsigned int mamba2_verify_coefficient_floats = COEF_FLOATS;

// A flush row's window B records: rows (g, s) of B (g < NGROUPS, s < n; 16-byte aligned rows) into
// record positions s of every group, by one warp in 16-byte chunks, eight loads a lane in flight.
__device__ __forceinline__ void write_window_B(u16* Br, long long sBr_group, long long sBr_pos, const u16* B,
                                               long long sB_tok, long long sB_group, int n, int lane) {
  constexpr int CH = DSTATE / 8;  // 16-byte chunks of a row
  const int total = NGROUPS * n * CH;
  for (int e0 = 0; e0 < total; e0 += 8 * 32) {
    uint4 v[8];
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int e = e0 + 32 * m + lane, gg = e / (n * CH), s = e / CH - gg * n, kk = e % CH;
      if (e < total) v[m] = *(const uint4*)(B + s * sB_tok + gg * sB_group + kk * 8);
    }
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const int e = e0 + 32 * m + lane, gg = e / (n * CH), s = e / CH - gg * n, kk = e % CH;
      if (e < total) *(uint4*)(Br + gg * sBr_group + s * sBr_pos + kk * 8) = v[m];
    }
  }
}

// The lane's share of one B row (PER_LANE consecutive bf16 from ``row``, read as 32-bit pairs, kept
// in ``raw``) dotted with every window token's C (the lane's elements of C_s in c[s]): part[s] += .
__device__ __forceinline__ void add_row_dot_c(const u16* row, const float (&c)[VT][PER_LANE], float (&part)[VT],
                                              u32 (&raw)[PER_LANE / 2]) {
#pragma unroll
  for (int e = 0; e < PER_LANE; e += 2) {
    const u32 v = ((const u32*)row)[e / 2];
    raw[e / 2] = v;
    const float b0 = bf16_to_f32((u16)(v & 0xffffu)), b1 = bf16_to_f32((u16)(v >> 16));
#pragma unroll
    for (int s = 0; s < VT; ++s) part[s] += b0 * c[s][e] + b1 * c[s][e + 1];
  }
}

// ------------------------------------------------------------------ launch 1: coefficients

extern "C" __global__ void __launch_bounds__(COEF_WARPS * 32) mamba2_verify_coefficients(
    float* __restrict__ coef_out,  // [batch, NHEADS, COEF_FLOATS]
    void* __restrict__ c_out,      // [batch, NGROUPS, VT, DSTATE], the checkpoint's dtype (bf16 or fp32)
    float* __restrict__ dt_records, long long sdtr_slot, long long sdtr_head,
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    const int* __restrict__ cursor, int* __restrict__ pending,
    const void* __restrict__ dt, long long sdt_batch, long long sdt_tok, long long sdt_head,
    const float* __restrict__ A, const void* __restrict__ dt_bias,
    const u16* __restrict__ B, long long sB_batch, long long sB_tok, long long sB_group,
    const u16* __restrict__ C, long long sC_batch, long long sC_tok, long long sC_group,
    const int* __restrict__ slot_ids, const int* __restrict__ num_tokens) {
  // Programmatic after the previous kernel: wait for it before any read; then the step kernel may
  // start (it waits for this grid before reading what it writes).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  __shared__ float bch[LP][VT];  // B_k . C_s of the history (zero for k >= w)
  __shared__ float bcw[VT][VT];  // B_j . C_s of the window (j <= s; zero below)
  const int g = blockIdx.x / COEF_SPLIT, split = blockIdx.x - g * COEF_SPLIT, b = blockIdx.y;
  const int h0 = split * HPC, hn = min(HPG - h0, HPC);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long slot = slot_ids[b];
  if (slot < 0) return;
  const int n = window_tokens(num_tokens, b);
  // The window's C, lanes over d_state (PER_LANE consecutive elements a lane, read as 32-bit pairs).
  float c[VT][PER_LANE];
#pragma unroll
  for (int s = 0; s < VT; ++s) {
    const u32* Crow = (const u32*)(C + b * sC_batch + s * sC_tok + g * sC_group + lane * PER_LANE);
#pragma unroll
    for (int k = 0; k < PER_LANE; k += 2) {
      const u32 v = Crow[k / 2];
      c[s][k] = bf16_to_f32((u16)(v & 0xffffu));
      c[s][k + 1] = bf16_to_f32((u16)(v >> 16));
    }
  }
  // B_k . C_s of this warp's history records k = warp + COEF_WARPS r (all L: records past the
  // cursor are loaded and discarded by a select below, never multiplied into a kept value).
  u16* const Brec = B_records + slot * sBr_slot + g * sBr_group;
  float hpart[RPW][VT];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int k = warp + COEF_WARPS * r;
#pragma unroll
    for (int s = 0; s < VT; ++s) hpart[r][s] = 0.0f;
    u32 raw[PER_LANE / 2];  // unused: a history record's B is not written back
    if (k < LREC) add_row_dot_c(Brec + k * sBr_pos + lane * PER_LANE, c, hpart[r], raw);
  }
  // B_j . C_s of this warp's window records j = warp + COEF_WARPS r, for s >= j; their B kept as
  // read (32-bit pairs) for the records.
  float wpart[WPW][VT];
  u32 wraw[WPW][PER_LANE / 2];
#pragma unroll
  for (int r = 0; r < WPW; ++r) {
    const int j = warp + COEF_WARPS * r;
#pragma unroll
    for (int s = 0; s < VT; ++s) wpart[r][s] = 0.0f;
#pragma unroll
    for (int e = 0; e < PER_LANE / 2; ++e) wraw[r][e] = 0u;
    if (j < VT) add_row_dot_c(B + b * sB_batch + j * sB_tok + g * sB_group + lane * PER_LANE, c, wpart[r], wraw[r]);
  }
  // Each head of this warp: the window's processed dt (lane s: token s), the dt records (lane k:
  // record k), A.
  float dtw[HPW], dtk[HPW], ah[HPW];
#pragma unroll
  for (int q = 0; q < HPW; ++q) {
    const int h = g * HPG + h0 + min(warp + COEF_WARPS * q, hn - 1);
    ah[q] = A[h];
    dtw[q] = lane < VT ? processed_dt(dt, b * sdt_batch + lane * sdt_tok + h * sdt_head, dt_bias, h) : 0.0f;
    dtk[q] = lane < LREC ? dt_records[slot * sdtr_slot + h * sdtr_head + lane] : 0.0f;
  }
  const int w = cursor[slot];
  const bool flush = verify_flushes(w, n);
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int k = warp + COEF_WARPS * r;
#pragma unroll
    for (int s = 0; s < VT; ++s) {
      const float v = warp_sum(k < w ? hpart[r][s] : 0.0f);
      if (lane == 0) bch[k][s] = v;
    }
  }
#pragma unroll
  for (int r = 0; r < WPW; ++r) {
    const int j = warp + COEF_WARPS * r;
    if (j < VT) {
#pragma unroll
      for (int s = 0; s < VT; ++s) {
        const float v = s >= j ? warp_sum(wpart[r][s]) : 0.0f;
        if (lane == 0) bcw[j][s] = v;
      }
    }
  }
  if (split == 0) {
    // The window's C rows for the step kernel, in the checkpoint's dtype (warps over tokens), and
    // a non-flush row's window B records at w + j (this warp's window records j < n: past the
    // history, read by nobody in this launch).
#pragma unroll
    for (int s = 0; s < VT; ++s) {
      if (s % COEF_WARPS != warp) continue;
#if CKPT_F32
      float* crow = (float*)c_out + (((long long)b * NGROUPS + g) * VT + s) * DSTATE + lane * PER_LANE;
#pragma unroll
      for (int k = 0; k < PER_LANE; k += 2) *(float2*)(crow + k) = make_float2(c[s][k], c[s][k + 1]);
#else
      u32* crow = (u32*)((u16*)c_out + (((long long)b * NGROUPS + g) * VT + s) * DSTATE + lane * PER_LANE);
#pragma unroll
      for (int k = 0; k < PER_LANE; k += 2) crow[k / 2] = pack_bf16x2(c[s][k], c[s][k + 1]);
#endif
    }
    if (!flush) {
#pragma unroll
      for (int r = 0; r < WPW; ++r) {
        const int j = warp + COEF_WARPS * r;
        if (j < n) {
          u32* brow = (u32*)(Brec + (w + j) * sBr_pos + lane * PER_LANE);
#pragma unroll
          for (int e = 0; e < PER_LANE / 2; ++e) brow[e] = wraw[r][e];
        }
      }
    }
    if (g == 0 && threadIdx.x == 0) pending[slot] = n;
  }
  __syncthreads();
#pragma unroll
  for (int q = 0; q < HPW; ++q) {
    const int hl = warp + COEF_WARPS * q;
    if (hl >= hn) break;  // warp-uniform
    const int h = g * HPG + h0 + hl;
    const float a = ah[q];
    float total;
    const float later = warp_suffix_sums(lane < w ? dtk[q] : 0.0f, lane, total);  // lane k: Σ_{k<i<w} dt_i
    float dall[VT];  // the window's dt in every lane
#pragma unroll
    for (int i = 0; i < VT; ++i) dall[i] = __shfl_sync(0xffffffffu, dtw[q], i);
    float cum[VT];  // c_s = Σ_{i<=s} dt_i
#pragma unroll
    for (int s = 0; s < VT; ++s) cum[s] = (s > 0 ? cum[s - 1] : 0.0f) + dall[s];
    float* blk = coef_out + ((long long)b * NHEADS + h) * COEF_FLOATS;
    if (lane < LP) {  // lane k: history row k, fold weight k
      const bool live = lane < w;
      const float dk = dtk[q];
#pragma unroll
      for (int s = 0; s < TP; ++s)
        blk[C_OFF_HIST + lane * TP + s] = live && s < VT ? dk * __expf(a * (later + cum[s < VT ? s : 0])) * bch[lane][s < VT ? s : 0] : 0.0f;
      blk[C_OFF_WGT + lane] = live ? dk * __expf(a * later) : 0.0f;
    }
#pragma unroll
    for (int e0 = 0; e0 < TP * TP; e0 += 32) {  // window entry (j, s) = (e / TP, e % TP)
      const int e = e0 + lane;
      if (e < TP * TP) {
        const int j = e / TP, s = e % TP;
        float dj = 0.0f, between = 0.0f;  // dt_j, c_{j,s} = Σ_{j<i<=s} dt_i
#pragma unroll
        for (int i = 0; i < VT; ++i) {
          if (i == j) dj = dall[i];
          if (i > j && i <= s) between += dall[i];
        }
        blk[C_OFF_WIN + e] = j <= s && s < VT ? dj * __expf(a * between) * bcw[j][s < VT ? s : 0] : 0.0f;
      }
    }
    if (lane < TP) {
      float c_mine = 0.0f;  // c_lane
#pragma unroll
      for (int i = 0; i < VT; ++i)
        if (i <= lane) c_mine += dall[i];
      blk[C_OFF_DECAY + lane] = __expf(a * (total + c_mine));
    }
    if (lane == 0) {
      blk[C_OFF_FOLD] = __expf(a * total);
      ((int*)blk)[C_OFF_W] = w;
      ((int*)blk)[C_OFF_N] = n;
    }
    // The window's dt records: lane s < n writes record w + s (or s at a flush: lane s read it above).
    if (lane < n) dt_records[slot * sdtr_slot + h * sdtr_head + (flush ? lane : w + lane)] = dtw[q];
  }
}

// ------------------------------------------------------------------ launch 2: the verify step

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 32, MIN_CTAS) mamba2_verify_step(
    const __grid_constant__ TensorMap ckpt_load,   // checkpoint, boxes [BOXC cols, ROWS rows]
    const __grid_constant__ TensorMap ckpt_store,  // checkpoint, boxes [BOXC cols, 16 rows]
    const float* __restrict__ coef,                // [batch, NHEADS, COEF_FLOATS]
    const unsigned char* __restrict__ c_rows,      // [batch, NGROUPS, VT, DSTATE], the checkpoint's dtype
    u16* __restrict__ x_records, long long sxr_slot, long long sxr_head,  // positions dense
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    const u16* __restrict__ x, long long sx_batch, long long sx_tok, long long sx_head,
    const u16* __restrict__ B, long long sB_batch, long long sB_tok, long long sB_group,
    const void* __restrict__ D, long long sD_head,
    const u16* __restrict__ z, long long sz_batch, long long sz_tok, long long sz_head,
    u16* __restrict__ out, long long so_batch, long long so_tok, long long so_head,
    const int* __restrict__ slot_ids, const int* __restrict__ num_tokens, int* __restrict__ cursor,
    int* __restrict__ arrivals, int batch) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;  // stages 1024-byte aligned (128-byte swizzle)
  unsigned char* const gbase = smem_raw + (base - raw);
  const u32 bars = base + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int units = batch * NHEADS;
  asm volatile("griddepcontrol.launch_dependents;");
  ring_init(bars, STAGES, CONSUMERS);

  if (warp == CONSUMERS) {
    // ---------------- producer
    if (lane == 0) prefetch_tensor_maps(&ckpt_load, &ckpt_store);
    // Slot, cursor and token count of the CTA's next 32 units, a lane each. The cursor does not
    // move in this launch before every unit of its row has been copied (a flush row's last unit
    // resets it after all of them counted themselves, each after its stage was full).
    int slot_l = -1, w_l = 0, n_l = 0;
    if (blockIdx.x + lane * gridDim.x < units) {
      const int bl = (blockIdx.x + lane * gridDim.x) / NHEADS;
      slot_l = slot_ids[bl];
      n_l = window_tokens(num_tokens, bl);
    }
    if (slot_l >= 0) w_l = cursor[slot_l];
    prefetch_first_units(&ckpt_load, base, bars, STAGE_BYTES, STAGES, units, NHEADS, 1, slot_l, lane);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
      const int k = i & 31;
      if (k == 0 && i > 0) {
        const int uk = u + lane * gridDim.x;
        slot_l = -1;
        if (uk < units) {
          slot_l = slot_ids[uk / NHEADS];
          n_l = window_tokens(num_tokens, uk / NHEADS);
        }
        w_l = slot_l >= 0 ? cursor[slot_l] : 0;
      }
      const int slot = __shfl_sync(0xffffffffu, slot_l, k);
      const int w = __shfl_sync(0xffffffffu, w_l, k);
      const int n = __shfl_sync(0xffffffffu, n_l, k);
      const int st = i % STAGES;
      const u32 stage = base + st * STAGE_BYTES;
      const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
      const bool prefetched = i < STAGES;
      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);
      const int b = u / NHEADS, h = u - b * NHEADS, g = h / HPG;
      const bool flush = verify_flushes(w, n);
      if (lane == 0) {
        ((int*)(gbase + st * STAGE_BYTES + OFF_META))[0] = slot;
        if (slot < 0) {
          mbar_arrive(full);
        } else {
          const u32 bytes = (prefetched ? 0 : CKPT_BYTES) + w * ROWS * 2 + COEF_BYTES + C_BYTES + (flush ? w * DSTATE * 2 : 0);
          mbar_arrive_expect_tx(full, bytes);
        }
      }
      __syncwarp();
      if (slot >= 0) {
        if (!prefetched && lane < NBOX) tma_load_4d(stage + lane * (ROWS * 128), &ckpt_load, lane * BOXC, 0, h, slot, full);
        // The history's x records 0..w-1: one dense range (position stride head_dim).
        if (lane == 31 && w > 0) bulk_load(stage + OFF_X, x_records + slot * sxr_slot + h * sxr_head, w * ROWS * 2, full);
        if (flush && lane < w)
          bulk_load(stage + OFF_B + lane * REC_PITCH, B_records + slot * sBr_slot + g * sBr_group + lane * sBr_pos, DSTATE * 2, full);
        if (lane == 0) {
          bulk_load(stage + OFF_COEF, coef + (long long)u * COEF_FLOATS, COEF_BYTES, full);
          bulk_load(stage + OFF_C, c_rows + ((long long)b * NGROUPS + g) * C_BYTES, C_BYTES, full);
        }
      }
    }
    return;
  }

  // ---------------- consumers: warp owns rows r0 .. r0 + 15 of each unit; lane: row r0 + (lane & 15),
  // half lane >> 4 (of d_state for fp32 S0 . C_s, of the records for the history and window terms)
  const int r0 = warp * 16;
  const int row = r0 + (lane & 15), half = lane >> 4;
  const int gq = lane >> 2, tq = lane & 3;
  int i = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
    const int b = u / NHEADS, h = u - b * NHEADS;
    // The window's x, z and the skip weight of the lane's row, requested before the wait.
    u16 xw[VT], zw[VT];
#pragma unroll
    for (int s = 0; s < VT; ++s) {
      xw[s] = x[b * sx_batch + s * sx_tok + h * sx_head + row];
#if HAS_Z
      zw[s] = z[b * sz_batch + s * sz_tok + h * sz_head + row];
#else
      zw[s] = 0;
#endif
    }
    const float d_skip = skip_weight(D, sD_head, h, row);
    const int st = i % STAGES;
    const u32 stage = base + st * STAGE_BYTES;
    unsigned char* const gstage = gbase + st * STAGE_BYTES;
    const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
    mbar_wait(full, (i / STAGES) & 1);
    const int slot = ((const int*)(gstage + OFF_META))[0];
    bool released = false;
    if (slot >= 0) {
      const u16* xs = (const u16*)(gstage + OFF_X);
      const float* cf = (const float*)(gstage + OFF_COEF);
      const int w = ((const int*)cf)[C_OFF_W], n = ((const int*)cf)[C_OFF_N];
      const bool flush = verify_flushes(w, n);
      if (flush && warp == 0) {
        // The stage is full, so this unit's B records have been read: count it. The row's last unit
        // (every unit of the row has read its cursor and records) writes the window's B records of
        // every group over the history, zeroes the count and sets the cursor to 0.
        int arrived = 0;
        if (lane == 0) arrived = count_arrival(arrivals, slot);
        if (__shfl_sync(0xffffffffu, arrived, 0) == NHEADS - 1) {
          write_window_B(B_records + slot * sBr_slot, sBr_group, sBr_pos, B + b * sB_batch, sB_tok, sB_group, n, lane);
          if (lane == 0) {
            arrivals[slot] = 0;
            cursor[slot] = 0;
          }
        }
      }
      float y[VT];  // the lane's half of each token's sum, before the halves are added
#if CKPT_F32
      // S0 . C_s in exact fp32: lanes 0-15 over columns [0, DSTATE/2), 16-31 over the rest, 4
      // columns (one 16-byte chunk) a shared load, conflict-free as in the replay step; two sums a
      // token.
      {
        float p[VT][2];
#pragma unroll
        for (int s = 0; s < VT; ++s) p[s][0] = p[s][1] = 0.0f;
#pragma unroll 4
        const float* cs = (const float*)(gstage + OFF_C);
        for (int q = 0; q < DSTATE / 8; ++q) {
          const int kc = half * (DSTATE / 2) + 4 * q;
          const float4 v = *(const float4*)(gstage + ckpt_offset(row, kc));
#pragma unroll
          for (int s = 0; s < VT; ++s) {
            const float4 c4 = *(const float4*)(cs + s * DSTATE + kc);
            p[s][0] += v.x * c4.x;
            p[s][1] += v.y * c4.y;
            p[s][0] += v.z * c4.z;
            p[s][1] += v.w * c4.w;
          }
        }
#pragma unroll
        for (int s = 0; s < VT; ++s) y[s] = cf[C_OFF_DECAY + s] * (p[s][0] + p[s][1]);
      }
#else
      // S0 . C_s on tensor cores: m16n8k16, A = the warp's 16 rows (ldmatrix from the swizzled
      // boxes), B = C_s as column s (lanes 4 s .. 4 s + 3 hold it), two fp32 accumulators (even and
      // odd k tiles). Column s of row r sits in lane 4 (r % 8) + s / 2, element s % 2 (+ 2 for r >= 8).
      {
        const u16* cs = (const u16*)(gstage + OFF_C);
        float part[2][4] = {};
        const u32 arow = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int k0 = 0; k0 < DSTATE; k0 += 16) {
          u32 a0, a1, a2, a3;
          ldmatrix_x4(stage + ckpt_offset(arow, k0 + (lane >> 4) * 8), a0, a1, a2, a3);
          u32 b0 = 0, b1 = 0;
          if (gq < VT) {
            b0 = *(const u32*)(cs + gq * DSTATE + k0 + 2 * tq);
            b1 = *(const u32*)(cs + gq * DSTATE + k0 + 8 + 2 * tq);
          }
          mma_bf16(part[(k0 / 16) & 1], a0, a1, a2, a3, b0, b1);
        }
        float acc[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) acc[q] = part[0][q] + part[1][q];
#pragma unroll
        for (int s = 0; s < VT; ++s) {
          const int src = 4 * (lane & 7) + (s >> 1);
          const float lo = __shfl_sync(0xffffffffu, acc[s & 1], src);
          const float hi = __shfl_sync(0xffffffffu, acc[2 + (s & 1)], src);
          y[s] = half == 0 ? cf[C_OFF_DECAY + s] * ((lane & 8) ? hi : lo) : 0.0f;
        }
      }
#endif
      // History: records k = half, half + 2, ... < w, a coefficient row (TP floats) per record;
      // a fixed trip count, predicated by w.
#pragma unroll
      for (int q = 0; q < LP / 2; ++q) {
        const int k = half + 2 * q;
        if (k < w) {
          const float xk = bf16_to_f32(xs[k * ROWS + row]);
          const float4* ch = (const float4*)(cf + C_OFF_HIST + k * TP);
#pragma unroll
          for (int v4 = 0; v4 < TP / 4; ++v4) {
            const float4 c4 = ch[v4];
            if (4 * v4 + 0 < VT) y[4 * v4 + 0] += c4.x * xk;
            if (4 * v4 + 1 < VT) y[4 * v4 + 1] += c4.y * xk;
            if (4 * v4 + 2 < VT) y[4 * v4 + 2] += c4.z * xk;
            if (4 * v4 + 3 < VT) y[4 * v4 + 3] += c4.w * xk;
          }
        }
      }
      // Window: tokens j of this half's parity, into outputs s >= j.
#pragma unroll
      for (int j = 0; j < VT; ++j) {
        if ((j & 1) == half) {
          const float xj = bf16_to_f32(xw[j]);
#pragma unroll
          for (int s = j; s < VT; ++s) y[s] += cf[C_OFF_WIN + j * TP + s] * xj;
        }
      }
      const float fold_decay = cf[C_OFF_FOLD];
      // A unit that does not flush has read its stage: give it back before the outputs.
      released = !flush;
      if (released) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty);
      }
#pragma unroll
      for (int s = 0; s < VT; ++s) y[s] += __shfl_xor_sync(0xffffffffu, y[s], 16);
      // Outputs and the window's x records: tokens of this half's parity, s < n.
      u16* xrec = x_records + slot * sxr_slot + h * sxr_head + row;
#pragma unroll
      for (int s = 0; s < VT; ++s) {
        if ((s & 1) == half && s < n) {
          const RowInputs rs = {d_skip, bf16_to_f32(zw[s])};
          out[b * so_batch + s * so_tok + h * so_head + row] = f32_to_bf16(row_output(y[s], rs, bf16_to_f32(xw[s])));
          xrec[(long long)(flush ? s : w + s) * ROWS] = xw[s];
        }
      }
      if (flush) {
        fold_warp_rows(gstage, xs, stage + OFF_B, cf + C_OFF_WGT, fold_decay, w - 1, r0, lane);
        store_warp_rows(&ckpt_store, stage, NBOX, ROWS * 128, BOXC, r0, r0, h, slot, lane);
      }
    }
    if (!released) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
    }
  }
}
