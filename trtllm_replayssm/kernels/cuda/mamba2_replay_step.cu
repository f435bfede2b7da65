// ReplaySSM Mamba-2 decode step for sm_90, bf16 activations, bf16, fp32 (CKPT_F32) or fp8-e4m3
// (CKPT_FP8: codes with one fp32 scale per row, d_state 128; the op's entries) checkpoints:
// two launches (1 and 2 below), or for small batches one (3), compiled at run time by NVRTC (trtllm_replayssm/kernels/nvrtc.py) and launched
// by trtllm_replayssm/kernels/mamba2_replay_cuda.py, which documents the contract. No headers:
// bf16 is handled as 16-bit integers, conversions and products in inline PTX. Launches 1 and 2
// have two sets of entries: the op's and, compiled with AOT_ENTRIES=1 or 2 for sm_90a, those of the
// TensorRT AOT plugin layers (plugins/mamba2_cuda.py; "entries of launches 1 and 2" below).
//
// 1. mamba2_replay_coefficients, one CTA of COEF_WARPS warps (the table's 4 or 16) per (group, batch row,
//    16 heads of the group): B_j . C once per CTA (warps over records j, lanes over d_state),
//    then each warp the weights of every COEF_WARPS-th head (lanes over records). Reads the
//    row's cursor w, the group's B records 0..w-1, the step's B and C, and each head's dt
//    records; writes per (row, head) a coefficient block
//        coef[LP]  coef_j = s_j (B_j . C) for j < w, dt (B . C) at j = w, 0 after
//        wgt[LP]   s_j for j < w, dt at j = w, 0 after        (the flush's record weights)
//        decay     exp(A (sum_{j<w} dt_j + dt)),   w,   fp8 checkpoints: 2^-e (C's scale, below)
//    with s_j = dt_j exp(A (dt + sum_{j<i<w} dt_i)) (suffix sums, no subtraction); per
//    (row, group) C as a dense row (fp8 checkpoints: f16 times the power of two 2^e that puts
//    its largest magnitude in [2^14, 2^15)); appends the step's record (x, dt, B) at w, for every w
//    (at w == L-1 the fold below reads it as record L-1). Padding rows (slot < 0) read and write
//    nothing. The cursor is only read here: the step kernel advances it.
// 2. mamba2_replay_step, persistent: CTA c takes units u = c, c + gridDim.x, ... (CLAIMED_UNITS:
//    only its first STAGES so, then units claimed one at a time from a count, fill_claimed_stages),
//    a unit being one head of one batch row, u = b * NHEADS + h, all ROWS = head_dim rows of it. Warp
//    CONSUMERS (the last) is the producer: per unit it waits for a free stage and fills it with
//    one TMA tensor-map copy per 128-byte box of the checkpoint rows (128-byte swizzle), one
//    bulk copy of x records 0..w, one per B record row for a flush (all L, padded rows), the
//    coefficient block and C. Each consumer warp owns 16 rows: S0 . C (bf16 rows: m16n8k16
//    tensor-core products with C as column 0; fp32 rows: exact fp32 FMAs, a lane per row and
//    half of d_state), the record term sum_j coef_j x_j from shared memory, y = decay
//    (S0 . C) + records + D x, gated by silu(z); a unit that does not flush gives its stage back
//    once read, before that arithmetic. A consumer of a row's head-0 unit writes the
//    new cursor (0 after a flush, else w+1): its stage holds the coefficient block, so the
//    coefficient grid, the cursor's only other reader, is complete. The producer reads each
//    unit's cursor itself, before its first checkpoint tiles (so that the read does not wait
//    behind them), and may see it advanced: it copies for either value, and the consumers take
//    the exact w from the coefficient block. A flush unit
//    (w == L-1) forms S = decay S0 + sum_{j<=w} s_j x_j B_jᵀ on tensor cores (s_j x_j in three
//    bf16 parts: 24 bits; fp32 accumulators from decay S0), rounds it to the checkpoint dtype in
//    the stage and stores its 16 rows with TMA tensor stores (whole sectors). fp8 checkpoints
//    (CKPT_FP8, DSTATE 128): the producer copies the unit's ROWS row scales too; S0 . C on tensor
//    cores from the codes widened to f16 (exact) and C as f16 times a power of two (launch 1
//    writes it so, and the power's inverse in the coefficient block), times the row's scale; a
//    flush folds from the scaled codes, holds the row in registers for its new scale
//    max |row| / 448 and writes codes and scales (ckpt_stage.cuh).
// 3. mamba2_replay_small: the whole step in one launch without a ring (its comment, below).
//
// Compile-time constants (-D): CKPT_F32 (0: bf16 checkpoint, 1: fp32), CKPT_FP8 (1: fp8, CKPT_F32 0), NHEADS, NGROUPS, ROWS
// (head_dim, a multiple of 16, <= 128), DSTATE (a multiple of 64, <= 256), LREC (L, <= 32), LP
// (L rounded up to 16), STAGES, MIN_CTAS (the step kernel's and the small kernel's register cap:
// resident CTAs a multiprocessor), COEF_WARPS (1, 2, 4, 8 or 16: a divisor of LP), SM_ROWS (the small kernel's rows a CTA,
// a multiple of 8 from 16 to 128 dividing ROWS), SM_EARLY_MATH (0 / 1: its arithmetic after / before
// the barrier), CLAIMED_UNITS (0 / 1: the step kernel's units after each CTA's first STAGES claimed), HAS_D,
// D_PER_DIM, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, and the dtype codes DT_CODE,
// DTB_CODE, D_CODE of dt, dt_bias and D (0 fp32, 1 bf16, 2 fp16); AOT_ENTRIES (0: the op's entries of
// launches 1 and 2 and the small kernel; 1, 2: TensorRT's entry of launch 1, of launch 2).

#include "mamba2_common.cuh"
#if CKPT_FP8 && (CKPT_F32 || DSTATE != 128)
#error "an fp8 checkpoint takes rows of 128 codes (one 128-byte box; the flush holds them in registers)"
#endif
#if CKPT_FP8 && AOT_ENTRIES
#error "the TensorRT AOT entries take bf16 checkpoints (plugins/mamba2_cuda.py export_unsupported)"
#endif
#ifndef CLAIMED_UNITS
#define CLAIMED_UNITS 0
#endif
#if CLAIMED_UNITS && AOT_ENTRIES
#error "the TensorRT AOT entries take the static unit order (CLAIMED_UNITS 0)"
#endif

#define X_BYTES (LP * ROWS * 2)
#define B_BYTES (LP * REC_PITCH)
#define C_BYTES (DSTATE * 2)
#define COEF_FLOATS (2 * LP + 4)            // coef[LP], wgt[LP], decay, w (int), fp8: C's inverse scale, pad
#define COEF_BYTES (COEF_FLOATS * 4)
#define OFF_X CKPT_BYTES
#define OFF_B (OFF_X + X_BYTES)
#define OFF_C (OFF_B + B_BYTES)
#define OFF_COEF (OFF_C + C_BYTES)
#define SCALE_BYTES (CKPT_FP8 ? ROWS * 4 : 0)  // fp8: the unit's row scales
#define OFF_SCALE (OFF_COEF + COEF_BYTES)
#define OFF_META (OFF_SCALE + SCALE_BYTES)
#define STAGE_BYTES (((OFF_META + 16) + 1023) / 1024 * 1024)

// Dynamic shared memory the step kernel indexes (bytes; full and empty mbarriers per stage after
// the stages): the launcher's step_shared_bytes must equal it (a CPU test reads this from the PTX).
extern "C" __device__ unsigned int mamba2_step_shared_bytes = STAGES * STAGE_BYTES + 1024 + 16 * STAGES;

// ------------------------------------------------------------------ rows out of range

// In the TensorRT AOT entries a row whose slot id is >= num_slots or whose cursor is outside
// [0, LREC) is a padding row, read and written nowhere: an engine has no error channel, and its
// builder may time the layers on buffers it never initialised (the Triton plugin's rule). The op
// validates its inputs, so its entries compile without these checks (the identities below).
#if AOT_ENTRIES
__device__ __forceinline__ long long row_slot(long long slot, int num_slots) { return slot < num_slots ? slot : -1; }
__device__ __forceinline__ bool cursor_out_of_range(int w) { return (unsigned)w >= LREC; }
#else
__device__ __forceinline__ long long row_slot(long long slot, int) { return slot; }
__device__ __forceinline__ bool cursor_out_of_range(int) { return false; }
#endif

// CLAIMED_UNITS: the step kernel's claim count, the word after the coefficient blocks of a launch's
// ``units`` (batch rows x NHEADS); the coefficient launch zeroes it, the step kernel claims from it.
__device__ __forceinline__ int* claim_count(const float* coef, int units) {
  return (int*)(coef + (long long)units * COEF_FLOATS);
}

// ------------------------------------------------------------------ launch 1: coefficients



// The coefficient launch's work, for its entries (below: the op's, with strides; TensorRT's, dense).
__device__ __forceinline__ void coefficients(
    float* __restrict__ coef_out,         // [batch, NHEADS, COEF_FLOATS]
    u16* __restrict__ c_out,              // [batch, NGROUPS, DSTATE]
    u16* __restrict__ x_records, long long sxr_slot, long long sxr_head, long long sxr_pos,
    float* __restrict__ dt_records, long long sdtr_slot, long long sdtr_head,
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    const int* __restrict__ cursor,
    const u16* __restrict__ x, long long sx_batch, long long sx_head,
    const void* __restrict__ dt, long long sdt_batch, long long sdt_head,
    const float* __restrict__ A, const void* __restrict__ dt_bias,
    const u16* __restrict__ B, long long sB_batch, long long sB_group,
    const u16* __restrict__ C, long long sC_batch, long long sC_group,
    const int* __restrict__ slot_ids, int num_slots) {
  // Launched programmatically after the previous kernel in the stream (with pdl; the previous
  // step kernel lets this grid's CTAs be scheduled while it drains): wait for that kernel to
  // complete before any read (a no-op when not launched programmatically). Then
  // the step kernel may start: it waits for this grid's completion before reading anything
  // written here, and its reads before that wait (slots, cursors, checkpoint rows) see the
  // previous step's writes, which completed before this wait returned.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  // CLAIMED_UNITS: the step kernel's claim count zeroed for its launch (the previous step kernel,
  // its last user, is complete: the wait above).
  if (CLAIMED_UNITS && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0)
    *claim_count(coef_out, gridDim.y * NHEADS) = 0;
  __shared__ float bc_shared[LP];
  const int g = blockIdx.x / COEF_SPLIT, split = blockIdx.x - g * COEF_SPLIT, b = blockIdx.y;
  const int h0 = split * HPC, hn = min(HPG - h0, HPC);  // this CTA's heads of the group: h0 .. h0 + hn - 1
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long slot = row_slot(slot_ids[b], num_slots);
  if (slot < 0) return;
  // Two memory round trips: every input and record the CTA may use needs only the slot (records
  // past the cursor are loaded and discarded: no load waits for w), then the cursor's uses.
  const u16* Crow = C + b * sC_batch + g * sC_group;
  float c[PER_LANE];
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k) c[k] = bf16_to_f32(Crow[lane * PER_LANE + k]);
  // B_j . C of this warp's records, j = warp + COEF_WARPS r (lanes over d_state); the step's B
  // stands at j = w.
  u16* const Brec = B_records + slot * sBr_slot + g * sBr_group;
  const u16* Bnow = B + b * sB_batch + g * sB_group;
  float part[RPW];
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int j = warp + COEF_WARPS * r;
    float acc = 0.0f;
    if (j < LREC) {
      const u16* row = Brec + j * sBr_pos + lane * PER_LANE;
#pragma unroll
      for (int k = 0; k < PER_LANE; k += 2) {
        const u32 v = *(const u32*)(row + k);
        acc += bf16_to_f32((u16)(v & 0xffffu)) * c[k] + bf16_to_f32((u16)(v >> 16)) * c[k + 1];
      }
    }
    part[r] = acc;
  }
  float now = 0.0f;
#pragma unroll
  for (int k = 0; k < PER_LANE; ++k) now += bf16_to_f32(Bnow[lane * PER_LANE + k]) * c[k];
  // Each head of this warp: the step's dt and x, the dt records (lane j: record j).
  float dth[HPW], dtj[HPW], ah[HPW];
  u16 xv[HPW][XPL];
#pragma unroll
  for (int q = 0; q < HPW; ++q) {
    const int h = g * HPG + h0 + min(warp + COEF_WARPS * q, hn - 1);
    dth[q] = processed_dt(dt, b * sdt_batch + h * sdt_head, dt_bias, h);
    ah[q] = A[h];
    dtj[q] = lane < LREC ? dt_records[slot * sdtr_slot + h * sdtr_head + lane] : 0.0f;
    const u16* xrow = x + b * sx_batch + h * sx_head;
#pragma unroll
    for (int k = 0; k < XPL; ++k) xv[q][k] = lane + 32 * k < ROWS ? xrow[lane + 32 * k] : (u16)0;
  }
  const int w = cursor[slot];
  if (cursor_out_of_range(w)) return;  // the CTA's threads all read the same w
#pragma unroll
  for (int r = 0; r < RPW; ++r) {
    const int j = warp + COEF_WARPS * r;
    const float v = warp_sum(j < w ? part[r] : (j == w ? now : 0.0f));
    if (lane == 0) bc_shared[j] = v;
  }
#if CKPT_FP8
  // The step kernel's S0 . C takes C as f16 times 2^e (its tensor-core products on the codes,
  // widened to f16): the power of two that puts C's largest magnitude in f16's top binade.
  float c_inverse;
  const float c_scale = f16_range_scale(warp_max(max_abs<PER_LANE>(c)), 14, c_inverse);
#endif
  if (warp == 0 && split == 0) {  // the step's C for the step kernel and its B as record w
    u16* crow = c_out + ((long long)b * NGROUPS + g) * DSTATE;
    u16* brow = Brec + w * sBr_pos;
    for (int k = lane; k < DSTATE; k += 32) {
#if CKPT_FP8
      crow[k] = f32_to_f16(bf16_to_f32(Crow[k]) * c_scale);
#else
      crow[k] = Crow[k];
#endif
      brow[k] = Bnow[k];
    }
  }
  __syncthreads();
  const float bc = lane < LP ? bc_shared[lane] : 0.0f;  // lane j: B_j . C (the step's B at w)
#pragma unroll
  for (int q = 0; q < HPW; ++q) {
    const int hl = warp + COEF_WARPS * q;
    if (hl >= hn) break;  // warp-uniform
    const int h = g * HPG + h0 + hl;
    float total;
    const float s = record_weight(dtj[q], dth[q], ah[q], w, lane, total);
    float* blk = coef_out + ((long long)b * NHEADS + h) * COEF_FLOATS;
    if (lane < LP) {
      blk[lane] = s * bc;
      blk[LP + lane] = s;
    }
    if (lane == 0) {
      blk[2 * LP] = __expf(ah[q] * (total + dth[q]));
      ((int*)blk)[2 * LP + 1] = w;
#if CKPT_FP8
      blk[2 * LP + 2] = c_inverse;
#endif
      dt_records[slot * sdtr_slot + h * sdtr_head + w] = dth[q];
    }
    u16* xrec = x_records + slot * sxr_slot + h * sxr_head + w * sxr_pos;
#pragma unroll
    for (int k = 0; k < XPL; ++k)
      if (lane + 32 * k < ROWS) xrec[lane + 32 * k] = xv[q][k];
  }
}

// ------------------------------------------------------------------ launch 2: the step


#if CLAIMED_UNITS
// The step kernel's producer after its first STAGES units (CLAIMED_UNITS): units pool + n claimed
// one at a time from the launch's count (n = count++, claim_count), each filled into stage
// i % STAGES, i = i0, i0 + 1, ..., until a claim is past the last unit; then an end marker (unit
// -1) for the consumers. CTAs that stream faster take more units, so that they end together
// (kernel notes, sessions 21 and 68). Lane 0 requests each claim two units ahead and the claimed
// unit's slot and exact w (its coefficient block: the coefficient grid is complete) one unit
// ahead, so that no round trip waits behind the stage copies it follows (session 21's claims,
// each waited for where it was made, lost).
template <class Fill>
__device__ __forceinline__ void fill_claimed_stages(Fill& fill_stage, int i, int pool, int units, const float* coef,
                                                    const int* slot_ids, int lane) {
  // The count + lane, used by lane 0 only: an atomic at a provably warp-uniform address becomes a
  // warp-aggregated one whose result is shuffled at once, a wait for the round trip (session 21).
  int* const claim_at = claim_count(coef, units) + lane;
  int u_next = units, slot_next = -1, w_next = 0, claim_a = 0, claim_b = 0;
  auto read_row = [&](int u) {  // lane 0: the row's slot and w, requested (padding rows: w unused)
    u_next = u;
    if (u < units) {
      slot_next = slot_ids[u / NHEADS];
      w_next = ((const int*)coef)[(long long)u * COEF_FLOATS + 2 * LP + 1];
    }
  };
  // One unit: the stage filled with the unit whose row was read a unit ago; a claim requested into
  // ``fresh`` and the row of ``older``, claimed a unit ago, read. Two claim registers taking turns:
  // a copy of a claim would wait for its round trip where it is copied.
  auto fill_next = [&](int& fresh, int older) {
    const int u = __shfl_sync(0xffffffffu, u_next, 0);
    if (u >= units) return false;
    const int slot = __shfl_sync(0xffffffffu, slot_next, 0);
    const int w = __shfl_sync(0xffffffffu, w_next, 0);
    if (lane == 0) {
      fresh = atomicAdd(claim_at, 1);
      read_row(pool + older);
    }
    fill_stage(i++, u, slot, slot < 0 ? 0 : w);
    return true;
  };
  if (lane == 0) {
    read_row(pool + atomicAdd(claim_at, 1));
    claim_b = atomicAdd(claim_at, 1);
  }
  while (fill_next(claim_a, claim_b) && fill_next(claim_b, claim_a)) {
  }
  fill_stage(i, -1, -1, 0);
}
#endif

// The step kernel's work, for its entries (below: the op's, with strides and the maps as
// parameters; TensorRT's, dense, with the maps patched in global memory).
__device__ __forceinline__ void step(
    const TensorMap* ckpt_load,   // checkpoint, boxes [BOXC cols (128 bytes), ROWS rows]
    const TensorMap* ckpt_store,  // checkpoint, boxes [BOXC cols, 16 rows]
    const float* __restrict__ coef,                // [batch, NHEADS, COEF_FLOATS]
    const u16* __restrict__ c_rows,                // [batch, NGROUPS, DSTATE]
    float* __restrict__ ckpt_scale, long long ssc_slot, long long ssc_head,  // fp8: [slot, NHEADS, ROWS], rows dense
    u16* __restrict__ x_records, long long sxr_slot, long long sxr_head,  // positions dense
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    const void* __restrict__ D, long long sD_head,
    const u16* __restrict__ z, long long sz_batch, long long sz_head,
    u16* __restrict__ out, long long so_batch, long long so_head,
    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch, int num_slots) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;  // stages 1024-byte aligned (128-byte swizzle)
  unsigned char* const gbase = smem_raw + (base - raw);
  const u32 bars = base + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int units = batch * NHEADS;
  // The next step's coefficient grid (launched programmatically) may be scheduled now, into
  // what this grid leaves free; it waits for this grid's completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;");
  ring_init(bars, STAGES, CONSUMERS);

  if (warp == CONSUMERS) {
    // ---------------- producer
    if (lane == 0) prefetch_tensor_maps(ckpt_load, ckpt_store);
    // Slots and cursors of the CTA's next 32 units, a lane each. The first ones are requested
    // before any checkpoint tile: a load issued after the tiles waits behind them (up to 128 KiB
    // per multiprocessor, microseconds; kernel notes, session 16). A cursor read here may
    // already be advanced by this launch (the row's head-0 unit, by a consumer) to w + 1, or 0
    // after a flush, so the copies are sized for either value and the consumers take the exact
    // w from the coefficient block.
    int slot_l = -1, w_l = 0;
    if (blockIdx.x + lane * gridDim.x < units) slot_l = row_slot(slot_ids[(blockIdx.x + lane * gridDim.x) / NHEADS], num_slots);
    if (slot_l >= 0) w_l = cursor[slot_l];
    if (cursor_out_of_range(w_l)) slot_l = -1, w_l = 0;  // skipped as layer 1 skipped it
    // The first STAGES units' checkpoint rows need only the slot (an input): requested before
    // the wait for the coefficient grid, so that they load while it runs (programmatic
    // dependent launch; a no-op wait otherwise).
    prefetch_first_units(ckpt_load, base, bars, STAGE_BYTES, STAGES, units, NHEADS, 1, slot_l, lane);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    // Stage i % STAGES filled with unit u of the row in ``slot`` (< 0: a padding row, nothing
    // copied) at a cursor read ``w``, which may be one step ahead (above).
    auto fill_stage = [&](int i, int u, int slot, int w) {
      const int st = i % STAGES;
      const u32 stage = base + st * STAGE_BYTES;
      const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
      const bool prefetched = i < STAGES;
      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);
      const int b = u / NHEADS, h = u - b * NHEADS, g = h / HPG;
      // For a cursor read w' that may be one step ahead (above): x records 0..w' (all L at w' = 0,
      // which may be a wrapped L-1), every B record row when the unit may flush (w' = L-1, or 0).
      const int nx = w == 0 ? LREC : w + 1;
      const bool b_rows = w == LREC - 1 || w == 0;
      if (lane == 0) {
        int* meta = (int*)(gbase + st * STAGE_BYTES + OFF_META);
        meta[0] = slot;
        meta[1] = w;
        if (CLAIMED_UNITS) meta[2] = u;  // the consumers learn a claimed unit here
        if (slot < 0) {
          mbar_arrive(full);
        } else {
          const u32 bytes = (prefetched ? 0 : CKPT_BYTES) + nx * ROWS * 2 + COEF_BYTES + C_BYTES + SCALE_BYTES +
                            (b_rows ? LREC * DSTATE * 2 : 0);
          mbar_arrive_expect_tx(full, bytes);
        }
      }
      __syncwarp();
      if (slot >= 0) {
        if (!prefetched && lane < NBOX) tma_load_4d(stage + lane * (ROWS * 128), ckpt_load, lane * BOXC, 0, h, slot, full);
        const u16* Brow0 = B_records + slot * sBr_slot + g * sBr_group;
        // x records 0..nx-1 are one dense range (position stride head_dim, checked by the launcher).
        if (lane == 31) bulk_load(stage + OFF_X, x_records + slot * sxr_slot + h * sxr_head, nx * ROWS * 2, full);
        // B record rows padded (REC_PITCH: the fold's ldmatrix reads are conflict-free).
        if (b_rows && lane < LREC) bulk_load(stage + OFF_B + lane * REC_PITCH, Brow0 + lane * sBr_pos, DSTATE * 2, full);
        if (lane == 0) {
          bulk_load(stage + OFF_COEF, coef + (long long)u * COEF_FLOATS, COEF_BYTES, full);
          bulk_load(stage + OFF_C, c_rows + ((long long)b * NGROUPS + g) * DSTATE, C_BYTES, full);
        }
        if (CKPT_FP8 && lane == 1) bulk_load(stage + OFF_SCALE, ckpt_scale + slot * ssc_slot + h * ssc_head, SCALE_BYTES, full);
      }
    };
    int i = 0;
    // CLAIMED_UNITS: the CTA's units c + i gridDim.x only for the first STAGES (those requested
    // before the coefficient grid completes), then claimed ones.
    for (int u = blockIdx.x; u < units && (!CLAIMED_UNITS || i < STAGES); u += gridDim.x, ++i) {
      const int k = i & 31;
      if (k == 0 && i > 0) {
        const int uk = u + lane * gridDim.x;
        slot_l = uk < units ? (int)row_slot(slot_ids[uk / NHEADS], num_slots) : -1;
        w_l = slot_l >= 0 ? cursor[slot_l] : 0;
        if (cursor_out_of_range(w_l)) slot_l = -1, w_l = 0;
      }
      fill_stage(i, u, __shfl_sync(0xffffffffu, slot_l, k), __shfl_sync(0xffffffffu, w_l, k));
    }
#if CLAIMED_UNITS
    fill_claimed_stages(fill_stage, i, min(STAGES * (int)gridDim.x, units), units, coef, slot_ids, lane);
#endif
    return;
  }

  // ---------------- consumers: warp owns rows r0 .. r0 + 15 of each unit
  const int r0 = warp * 16;
  const int gq = lane >> 2, tq = lane & 3;
  const int row = r0 + (lane & 15);
  int i = 0;
  for (int su = blockIdx.x; CLAIMED_UNITS || su < units; su += gridDim.x, ++i) {
    // The unit: su, or with CLAIMED_UNITS after the first STAGES the one the producer claimed.
    const bool claimed = CLAIMED_UNITS && (su >= units || i >= STAGES);
    int u = su, b = u / NHEADS, h = u - b * NHEADS;
    // Inputs that do not depend on the stage, requested before the wait (a claimed unit's after it).
    RowInputs ri;
    if (!claimed) ri = row_inputs(D, sD_head, z, sz_batch, sz_head, b, h, row);
    const int st = i % STAGES;
    const u32 stage = base + st * STAGE_BYTES;
    unsigned char* const gstage = gbase + st * STAGE_BYTES;
    const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
    mbar_wait(full, (i / STAGES) & 1);
    const int slot = ((const int*)(gstage + OFF_META))[0];
    if (claimed) {
      u = ((const int*)(gstage + OFF_META))[2];
      if (u < 0) break;  // the producer's end marker
      b = u / NHEADS, h = u - b * NHEADS;
      ri = row_inputs(D, sD_head, z, sz_batch, sz_head, b, h, row);
    }
    bool released = false;  // the stage given back to the producer
    if (slot >= 0) {
      const u16* xs = (const u16*)(gstage + OFF_X);
      const u16* cs = (const u16*)(gstage + OFF_C);
      // S0 . C for the lane's row r0 + (lane & 15), in every lane (both halves of the warp).
#if CKPT_F32
      // fp32 rows: exact fp32 products, lanes 0-15 over columns [0, DSTATE/2), 16-31 over the
      // rest, 4 columns (one 16-byte chunk: the swizzle moves whole chunks) a shared load; the
      // 16 lanes of a half read 16 rows' same chunk, 8 distinct banks groups a quarter-warp:
      // conflict-free. Four independent sums.
      float p4[4] = {};
#pragma unroll
      for (int q = 0; q < DSTATE / 8; ++q) {
        const int k = (lane >> 4) * (DSTATE / 2) + 4 * q;
        const float4 v = *(const float4*)(gstage + ckpt_offset(row, k));
        const uint2 c2 = *(const uint2*)(cs + k);
        p4[0] += v.x * __uint_as_float(c2.x << 16);
        p4[1] += v.y * __uint_as_float(c2.x & 0xffff0000u);
        p4[2] += v.z * __uint_as_float(c2.y << 16);
        p4[3] += v.w * __uint_as_float(c2.y & 0xffff0000u);
      }
      float s0c_row = (p4[0] + p4[1]) + (p4[2] + p4[3]);
      s0c_row += __shfl_xor_sync(0xffffffffu, s0c_row, 16);
#elif CKPT_FP8
      // fp8 rows on tensor cores (fp8_rows_times_f16): C as f16 times 2^e (the coefficient
      // launch: c_rows, 2^-e in the coefficient block) in every column of B, so every column of
      // the accumulators holds S0 . C (in codes: times the row's scale below).
      float acc[4];
      fp8_rows_times_f16(gstage, r0, lane, cs + 32 * tq, acc);
      const float* row_scales = (const float*)(gstage + OFF_SCALE);
#else
      // bf16 rows on tensor cores: m16n8k16 products, A = the warp's 16 rows by ldmatrix from the
      // swizzled boxes, C as column 0 of the B operand (lanes 0-3 hold it), two independent fp32
      // accumulators (even and odd k tiles).
      float part[2][4] = {};
      const u32 arow = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int k0 = 0; k0 < DSTATE; k0 += 16) {
        u32 a0, a1, a2, a3;
        ldmatrix_x4(stage + ckpt_offset(arow, k0 + (lane >> 4) * 8), a0, a1, a2, a3);
        u32 b0 = 0, b1 = 0;
        if (gq == 0) {
          b0 = *(const u32*)(cs + k0 + 2 * tq);
          b1 = *(const u32*)(cs + k0 + 8 + 2 * tq);
        }
        mma_bf16(part[(k0 / 16) & 1], a0, a1, a2, a3, b0, b1);
      }
      float acc[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[q] = part[0][q] + part[1][q];
#endif
      const float* cf = (const float*)(gstage + OFF_COEF);
      const int w = ((const int*)cf)[2 * LP + 1];  // exact; the producer's read may be one step ahead
      // The row's cursor advances here, once (head 0): the coefficient grid that read it has
      // completed (its block is in this stage).
      if (h == 0 && warp == 0 && lane == 0) cursor[slot] = next_cursor(w, LREC);
      const float decay = cf[2 * LP];
#if CKPT_FP8
      // The row's code scale times C's inverse power of two, read before the stage is released.
      const float s0c_factor = row_scales[row] * cf[2 * LP + 2];
#endif
      // Records term for row r0 + (lane & 15): lanes 0-15 take even j, 16-31 odd j, in two
      // independent sums, a fixed trip count (predicated by w) so that the shared-memory reads
      // are issued together.
      float rec = 0.0f, rec2 = 0.0f;
#pragma unroll
      for (int q = 0; q < LP / 2; q += 2) {
        const int j = (lane >> 4) + 2 * q;
        if (j <= w) rec += cf[j] * bf16_to_f32(xs[j * ROWS + row]);
        if (j + 2 <= w) rec2 += cf[j + 2] * bf16_to_f32(xs[(j + 2) * ROWS + row]);
      }
      const float x_now = bf16_to_f32(xs[w * ROWS + row]);
      // A unit that does not flush has read its stage: release it now, before the arithmetic and
      // the output store (the producer refills it meanwhile; kernel notes, session 17).
      released = w != LREC - 1;
      if (released) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty);
      }
      rec += rec2;
      rec += __shfl_xor_sync(0xffffffffu, rec, 16);
#if !CKPT_F32
      // Row gq's result sits in lane 4 gq (c0), row gq + 8's in the same lane (c2).
      const int src = 4 * (lane & 7);
      const float s0c_lo = __shfl_sync(0xffffffffu, acc[0], src);
      const float s0c_hi = __shfl_sync(0xffffffffu, acc[2], src);
#endif
      if (lane < 16) {
#if CKPT_F32
        float y = decay * s0c_row + rec;
#elif CKPT_FP8
        const float s0c_row = ((lane & 8) ? s0c_hi : s0c_lo) * s0c_factor;
        float y = decay * s0c_row + rec;
#else
        float y = decay * ((lane & 8) ? s0c_hi : s0c_lo) + rec;
#endif
        y = row_output(y, ri, x_now);
        out[b * so_batch + h * so_head + row] = f32_to_bf16(y);
      }
      if (w == LREC - 1) {
        // Flush: S = decay S0 + sum_{j <= w} s_j x_j B_jᵀ for the warp's rows, rounded into the stage.
#if CKPT_FP8
        fold_warp_rows(gstage, xs, stage + OFF_B, cf + LP, decay, w, r0, lane, row_scales,
                       ckpt_scale + slot * ssc_slot + h * ssc_head);
#else
        fold_warp_rows(gstage, xs, stage + OFF_B, cf + LP, decay, w, r0, lane);
#endif
        store_warp_rows(ckpt_store, stage, NBOX, ROWS * 128, BOXC, r0, r0, h, slot, lane);
      }
    }
    if (!released) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
    }
  }
}

// ------------------------------------------------------------------ entries of launches 1 and 2

#if !AOT_ENTRIES
// The op's (mamba2_replay_cuda.py): strides as parameters, the checkpoint's tensor maps encoded on
// the host and passed by value.
extern "C" __global__ void __launch_bounds__(COEF_WARPS * 32) mamba2_replay_coefficients(
    float* __restrict__ coef_out, u16* __restrict__ c_out,
    u16* __restrict__ x_records, long long sxr_slot, long long sxr_head, long long sxr_pos,
    float* __restrict__ dt_records, long long sdtr_slot, long long sdtr_head,
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    const int* __restrict__ cursor,
    const u16* __restrict__ x, long long sx_batch, long long sx_head,
    const void* __restrict__ dt, long long sdt_batch, long long sdt_head,
    const float* __restrict__ A, const void* __restrict__ dt_bias,
    const u16* __restrict__ B, long long sB_batch, long long sB_group,
    const u16* __restrict__ C, long long sC_batch, long long sC_group,
    const int* __restrict__ slot_ids) {
  coefficients(coef_out, c_out, x_records, sxr_slot, sxr_head, sxr_pos, dt_records, sdtr_slot, sdtr_head, B_records,
               sBr_slot, sBr_group, sBr_pos, cursor, x, sx_batch, sx_head, dt, sdt_batch, sdt_head, A, dt_bias, B,
               sB_batch, sB_group, C, sC_batch, sC_group, slot_ids, 0);
}

extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 32, MIN_CTAS) mamba2_replay_step(
    const __grid_constant__ TensorMap ckpt_load, const __grid_constant__ TensorMap ckpt_store,
    const float* __restrict__ coef, const u16* __restrict__ c_rows,
    float* __restrict__ ckpt_scale, long long ssc_slot, long long ssc_head,
    u16* __restrict__ x_records, long long sxr_slot, long long sxr_head,
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    const void* __restrict__ D, long long sD_head,
    const u16* __restrict__ z, long long sz_batch, long long sz_head,
    u16* __restrict__ out, long long so_batch, long long so_head,
    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch) {
  step(&ckpt_load, &ckpt_store, coef, c_rows, ckpt_scale, ssc_slot, ssc_head, x_records, sxr_slot, sxr_head, B_records,
       sBr_slot, sBr_group, sBr_pos, D, sD_head, z, sz_batch, sz_head, out, so_batch, so_head, slot_ids, cursor, batch, 0);
}
#else
// TensorRT AOT plugin entries (plugins/mamba2_cuda.py; sm_90a: tensormap.replace), one a module:
// AOT_ENTRIES 1 compiles layer 1's, 2 layer 2's. Parameters in TensorRT's launch order: the
// plugin layer's input pointers, its int32 scalars, its output pointers (an aliased output is its
// input's buffer: the kernels write through the output). Every tensor dense, so strides are
// constants of the geometry. Without programmatic launches the griddepcontrol instructions are
// no-ops.
#define XR_SLOT ((long long)NHEADS * LREC * ROWS)
#define BR_SLOT ((long long)NGROUPS * LREC * DSTATE)

#if AOT_ENTRIES == 1
// Layer 1: the coefficient launch. Records appended in place (outputs 2-4 alias inputs 0-2).
extern "C" __global__ void __launch_bounds__(COEF_WARPS * 32) mamba2_replay_coefficients_aot(
    const u16* x_records_in, const float* dt_records_in, const u16* B_records_in, const int* __restrict__ cursor,
    const u16* __restrict__ x, const void* __restrict__ dt, const float* __restrict__ A, const u16* __restrict__ B,
    const u16* __restrict__ C, const int* __restrict__ slot_ids, const void* __restrict__ dt_bias, int num_slots,
    float* __restrict__ coef_out, u16* __restrict__ c_out, u16* x_records, float* dt_records, u16* B_records) {
  coefficients(coef_out, c_out, x_records, XR_SLOT, LREC * ROWS, ROWS, dt_records, NHEADS * LREC, LREC, B_records,
               BR_SLOT, LREC * DSTATE, DSTATE, cursor, x, NHEADS * ROWS, ROWS, dt, NHEADS, 1, A, dt_bias, B,
               NGROUPS * DSTATE, DSTATE, C, NGROUPS * DSTATE, DSTATE, slot_ids, num_slots);
}
#else

// Thread 0 copies the host-encoded template maps (template[0]: load, [1]: store; encoded for
// this geometry with a placeholder address and slot count) to this CTA's own pair in global
// memory, writes the checkpoint's address and slot count into both (tensormap.replace), and
// releases them to the tensor-map proxy; after the barrier every thread acquires both, as a TMA
// copy through them requires (PTX ISA: tensormap.replace, fence.proxy.tensormap).
__device__ __forceinline__ void patch_checkpoint_maps(const TensorMap* tmpl, TensorMap* own, const void* checkpoint,
                                                      int num_slots) {
  if (threadIdx.x == 0) {
    for (int m = 0; m < 2; ++m) {
      for (int k = 0; k < 16; ++k) own[m].opaque[k] = tmpl[m].opaque[k];
      asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" ::"l"(own + m), "l"(checkpoint)
                   : "memory");
      asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], 3, %1;" ::"l"(own + m), "r"(num_slots)
                   : "memory");
    }
    asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
  }
  __syncthreads();
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(own) : "memory");
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(own + 1) : "memory");
}

// Layer 2: the step kernel. maps: [gridDim.x][2] tensor maps, a pair per CTA (scratch).
extern "C" __global__ void __launch_bounds__((CONSUMERS + 1) * 32, MIN_CTAS) mamba2_replay_step_aot(
    const void* checkpoint_in, const float* __restrict__ coef, const u16* __restrict__ c_rows,
    const u16* __restrict__ x_records, const u16* __restrict__ B_records, const int* cursor_in,
    const int* __restrict__ slot_ids, const void* __restrict__ D, const u16* __restrict__ z, const u16* x,
    const TensorMap* __restrict__ map_template, int batch, int num_slots,
    u16* __restrict__ out, void* checkpoint, int* __restrict__ cursor, TensorMap* __restrict__ maps) {
  TensorMap* const own = maps + 2 * blockIdx.x;
  patch_checkpoint_maps(map_template, own, checkpoint, num_slots);
  step(own, own + 1, coef, c_rows, nullptr, 0, 0, (u16*)x_records, XR_SLOT, LREC * ROWS, (u16*)B_records, BR_SLOT,
       LREC * DSTATE, DSTATE, D, D_PER_DIM ? ROWS : 1, z, NHEADS * ROWS, ROWS, out, NHEADS * ROWS, ROWS, slot_ids, cursor,
       batch, num_slots);
}
#endif  // AOT_ENTRIES == 1
#endif  // !AOT_ENTRIES

// ------------------------------------------------------------------ one launch for small batches
#if !AOT_ENTRIES  // the op's only

// mamba2_replay_small: the whole step in one launch without a pipeline, for batches too small to
// fill the persistent kernel's ring (kernel notes, sessions 18-19). One CTA of SM_THREADS threads
// per (SM_ROWS rows of a head, batch row); grid (NHEADS * ROWS / SM_ROWS, batch). A row is 8
// threads (part p = thread % 8), each holding 16-byte checkpoint chunks p, p + 8, ... of the row
// in registers. The memory chain is one round trip after the slot: the cache loads (the cursor,
// the chunks, all L x records of the CTA's rows and B records of the group, the dt records) are
// predicated on the slot instead of behind a padding-row branch, so that the compiler forms their
// addresses while the slot is read (records past the cursor are loaded and discarded by selects,
// never multiplied: they may hold anything; a padding row loads and stores nothing). Then B_j . C
// by 16 teams of 8 threads (the first 128; team k: records k, k + 16), each warp the head's
// weights (lane j: record j), and per row decay (S0 . C) + sum_j coef_j x_j + D x, gated by
// silu(z); with SM_EARLY_MATH the weights, S0 . C and the gate before the barrier. Appends the
// step's record at w (x: each CTA its rows; dt: the head's first CTA; B: the group's first head's
// first CTA, 8 threads); a flush (w == L-1) folds S = decay S0 + sum_{j<=w} s_j x_j B_jᵀ in fp32
// FMAs from the registers and stores the rounded chunks. Each CTA counts itself once in
// arrivals[slot] (acquire-release, after the barrier that follows every thread's use of its cursor
// read, before any store); the row's last advances the cursor (0 after a flush, else w + 1) and
// zeroes the count. Launched programmatically: waits for the previous kernel before any read, and
// lets the next grid be scheduled at once. fp8 (CKPT_FP8): a thread's chunk holds 16 codes; S0 . C
// from them times the row's scale (read with the chunks); a flush scales the codes, folds, takes
// the row's new scale max |row| / 448 over its 8 threads and stores codes and scale.
#define SM_THREADS (SM_ROWS * 8)               // rows x 8 threads
#define SM_XCH (SM_ROWS / 8)                   // 16-byte x-record chunks per record of the CTA's rows
#define SM_CPT (DSTATE * ES / 128)             // 16-byte checkpoint chunks per thread (1-8)
#define SM_EPC (16 / ES)                       // checkpoint elements per chunk (8 bf16, 4 fp32, 16 fp8)
#define SM_BPT (DSTATE / 64)                   // 16-byte B chunks (8 bf16) per team thread (1-4)
#define SM_CTAS_PER_HEAD (ROWS / SM_ROWS)

// The small kernel's arithmetic on a thread's own inputs: each warp the head's weights (lane j:
// record j) and decay, the row's S0 . C (reduced over its 8 threads) and gate.
struct SmallRowMath {
  float sw, decay, s0c, gate;
};
template <int CPT, int BPT>
__device__ __forceinline__ SmallRowMath small_row_math(float dtj, float dth, float a, int w, int lane, int p, RowInputs ri,
                                                       const uint4 (&ck)[CPT], const uint4 (&cb)[BPT], const u16* Crow) {
  SmallRowMath m;
  float total;
  m.sw = record_weight(dtj, dth, a, w, lane, total);
  m.decay = __expf(a * (total + dth));
  m.gate = row_gate(ri);
  float s0c = 0.0f, s0c2 = 0.0f;
#pragma unroll
  for (int k = 0; k < CPT; ++k) {
#if CKPT_F32
    const uint2 c2 = *(const uint2*)(Crow + (p + 8 * k) * 4);  // C for the chunk's 4 columns
    s0c += __uint_as_float(ck[k].x) * __uint_as_float(c2.x << 16) + __uint_as_float(ck[k].y) * __uint_as_float(c2.x & 0xffff0000u);
    s0c2 += __uint_as_float(ck[k].z) * __uint_as_float(c2.y << 16) + __uint_as_float(ck[k].w) * __uint_as_float(c2.y & 0xffff0000u);
#elif CKPT_FP8
    // fp8: the chunk's 16 codes against C's 16 columns (two 16-byte loads), the row scale applied
    // by the caller.
    const uint4 c_lo = *(const uint4*)(Crow + (p + 8 * k) * 16), c_hi = *(const uint4*)(Crow + (p + 8 * k) * 16 + 8);
    const u32 vw[4] = {ck[k].x, ck[k].y, ck[k].z, ck[k].w};
    const u32 cw[8] = {c_lo.x, c_lo.y, c_lo.z, c_lo.w, c_hi.x, c_hi.y, c_hi.z, c_hi.w};
#pragma unroll
    for (int e = 0; e < 8; ++e) {  // codes 2e, 2e + 1 of the chunk: C word e
      float lo, hi;
      e4m3x2_to_f32((u16)(vw[e >> 1] >> (16 * (e & 1))), lo, hi);
      const float d = lo * __uint_as_float(cw[e] << 16) + hi * __uint_as_float(cw[e] & 0xffff0000u);
      if (e & 1) s0c2 += d; else s0c += d;
    }
#else
    const uint4 c4 = cb[k];  // CPT == BPT for bf16: the same chunks
    s0c += dot_bf16x2(ck[k].x, c4.x) + dot_bf16x2(ck[k].y, c4.y);
    s0c2 += dot_bf16x2(ck[k].z, c4.z) + dot_bf16x2(ck[k].w, c4.w);
#endif
  }
  m.s0c = s0c + s0c2;
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) m.s0c += __shfl_xor_sync(0xffffffffu, m.s0c, o);
  return m;
}

extern "C" __global__ void __launch_bounds__(SM_THREADS, MIN_CTAS) mamba2_replay_small(
    unsigned char* __restrict__ ckpt, long long sck_slot, long long sck_head, long long sck_row,  // elements
    float* __restrict__ ckpt_scale, long long ssc_slot, long long ssc_head,  // fp8: [slot, NHEADS, ROWS], rows dense
    u16* __restrict__ x_records, long long sxr_slot, long long sxr_head,  // positions dense (ROWS apart)
    float* __restrict__ dt_records, long long sdtr_slot, long long sdtr_head,
    u16* __restrict__ B_records, long long sBr_slot, long long sBr_group, long long sBr_pos,
    int* __restrict__ cursor, int* __restrict__ arrivals,
    const u16* __restrict__ x, long long sx_batch, long long sx_head,
    const void* __restrict__ dt, long long sdt_batch, long long sdt_head,
    const float* __restrict__ A, const void* __restrict__ dt_bias,
    const u16* __restrict__ B, long long sB_batch, long long sB_group,
    const u16* __restrict__ C, long long sC_batch, long long sC_group,
    const void* __restrict__ D, long long sD_head,
    const u16* __restrict__ z, long long sz_batch, long long sz_head,
    u16* __restrict__ out, long long so_batch, long long so_head,
    const int* __restrict__ slot_ids) {
  __shared__ __align__(16) u16 xs[LP][SM_ROWS];  // x records of the CTA's rows (record w: the step's x)
  __shared__ __align__(16) u16 bs[LP][DSTATE];   // B records for a flush (record w: the step's B)
  __shared__ float bc_s[LP];                     // B_j . C (the step's B at w, zero after)
  // One parameter of each 64-byte line of the parameter bank (42 of 8 bytes from offset 0x210;
  // tests/kernels/test_mamba2_cuda_compile.py checks the cover) loaded before the wait, which a
  // trap no parameter can reach keeps them before (params_zero): the bank is cold at each launch,
  // and its misses then overlap the wait. Kernel notes, session 56 (H100): bf16 batch 1 3.93 ->
  // 3.60 µs; every parameter loaded there instead held 42 values across the wait, spilled in the
  // form for four CTAs a multiprocessor and lost 16% at fp32 batch 4.
  if (params_zero((long long)ckpt | ssc_head | sBr_slot | (long long)dt | (long long)C | (long long)out)) __trap();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int t = threadIdx.x, lane = t & 31, p = t & 7, rl = t >> 3;
  const int team = t >> 3;  // B_j . C teams: the first 16 (threads 0-127), records team, team + 16
  const int h = blockIdx.x / SM_CTAS_PER_HEAD, rb = blockIdx.x - h * SM_CTAS_PER_HEAD, b = blockIdx.y;
  const int g = h / HPG, row = rb * SM_ROWS + rl;
  const int slot = slot_ids[b];
  // The step's inputs need no slot: requested with it.
  const u16* Crow = C + b * sC_batch + g * sC_group;
  const u16* Bnow = B + b * sB_batch + g * sB_group;
  const float dth = processed_dt(dt, b * sdt_batch + h * sdt_head, dt_bias, h);
  const float a = A[h];
  const u16 x_raw = x[b * sx_batch + h * sx_head + row];
  const float x_now = bf16_to_f32(x_raw);
  const RowInputs ri = row_inputs(D, sD_head, z, sz_batch, sz_head, b, h, row);
  uint4 bnow[SM_BPT];  // the step's B, chunks p + 8 k (team threads)
#pragma unroll
  for (int k = 0; k < SM_BPT; ++k) bnow[k] = *(const uint4*)(Bnow + (p + 8 * k) * 8);
  uint4 cb[SM_BPT];  // C for the thread's B chunks (bf16: its checkpoint chunks too)
#pragma unroll
  for (int k = 0; k < SM_BPT; ++k) cb[k] = *(const uint4*)(Crow + (p + 8 * k) * 8);
  // One round of loads after the slot, none for a padding row (slot < 0: its CTA reads and writes
  // nothing of the cache and returns before the stores).
  const bool live = slot >= 0;
  const unsigned long long us = live ? (unsigned)slot : 0u;
  const int w = (int)load4_if(live, cursor + us);
  unsigned char* ck_t = ckpt + (us * sck_slot + h * sck_head + row * sck_row) * ES + p * 16;  // chunk p + 8 k: + 128 k bytes
  uint4 ck[SM_CPT];  // checkpoint chunks p + 8 k of the row
#pragma unroll
  for (int k = 0; k < SM_CPT; ++k) ck[k] = load16_if(live, ck_t + 128 * k);
#if CKPT_FP8
  float* const scale_t = ckpt_scale + us * ssc_slot + h * ssc_head + row;  // the row's scale
  const float row_scale = __uint_as_float(load4_if(live, scale_t));
#endif
  const u16* brec_t = B_records + us * sBr_slot + g * sBr_group + team * sBr_pos + p * 8;  // + 16 m records, + 64 k elements
  uint4 brec[LP / 16][SM_BPT];
#pragma unroll
  for (int m = 0; m < LP / 16; ++m) {
#pragma unroll
    for (int k = 0; k < SM_BPT; ++k)
      brec[m][k] = load16_if(live && t < 128 && team + 16 * m < LREC, brec_t + 16 * m * sBr_pos + 64 * k);
  }
  // x records: chunk t = (record t / SM_XCH, rows 8 (t % SM_XCH) ..) of the CTA's rows.
  const uint4 xr = load16_if(live && t < SM_XCH * LREC, x_records + us * sxr_slot + h * sxr_head +
                                                            (long long)(t / SM_XCH) * ROWS + rb * SM_ROWS + 8 * (t % SM_XCH));
  const float dtj = __uint_as_float(load4_if(live && lane < LREC, dt_records + us * sdtr_slot + h * sdtr_head + lane));
  // SM_EARLY_MATH: the thread's own arithmetic while the CTA's other loads are in flight (kernel
  // notes, session 19: after the barrier it took ~0.9 of the step's ~3 µs at batch 1), at the cost
  // of registers live across the barrier; otherwise after the barrier.
#if SM_EARLY_MATH
  const SmallRowMath rm = small_row_math(dtj, dth, a, w, lane, p, ri, ck, cb, Crow);
#endif
  // B_j . C of the team's records (the step's B at j == w, zero after w), summed over the team.
  if (t < 128) {
#pragma unroll
    for (int m = 0; m < LP / 16; ++m) {
      const int j = team + 16 * m;
      float pr = 0.0f, pn = 0.0f;
#pragma unroll
      for (int k = 0; k < SM_BPT; ++k) {
        pr += dot_bf16x2(brec[m][k].x, cb[k].x) + dot_bf16x2(brec[m][k].y, cb[k].y) + dot_bf16x2(brec[m][k].z, cb[k].z) +
              dot_bf16x2(brec[m][k].w, cb[k].w);
        pn += dot_bf16x2(bnow[k].x, cb[k].x) + dot_bf16x2(bnow[k].y, cb[k].y) + dot_bf16x2(bnow[k].z, cb[k].z) +
              dot_bf16x2(bnow[k].w, cb[k].w);
      }
      float v = j < w ? pr : (j == w ? pn : 0.0f);
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      if (p == 0) bc_s[j] = v;
      if (w == LREC - 1) {  // the flush reads every record's B from shared memory
#pragma unroll
        for (int k = 0; k < SM_BPT; ++k) *(uint4*)(&bs[j][(p + 8 * k) * 8]) = j == w ? bnow[k] : brec[m][k];
      }
    }
  }
  if (t < SM_XCH * LREC) *(uint4*)(&xs[t / SM_XCH][8 * (t % SM_XCH)]) = xr;
  __syncthreads();
  // Every thread's cursor read is performed once the barrier completes: count the CTA once; the
  // row's last CTA advances the cursor at the end (acquire and release here, before any store of
  // the CTA: a fence at the end would wait for the stores, session 19).
  int arrived = 0;
  if (t == 0 && live) arrived = count_arrival(arrivals, slot);
#if !SM_EARLY_MATH
  const SmallRowMath rm = small_row_math(dtj, dth, a, w, lane, p, ri, ck, cb, Crow);
#endif
  const float sw = rm.sw, decay = rm.decay;
  const float cf = sw * (lane < LP ? bc_s[lane] : 0.0f);
  // Records term: the part's records j = p, p + 8, ... (x at w: the step's; zero after w).
  float rec = 0.0f;
#pragma unroll
  for (int m = 0; m < LP / 8; ++m) {
    const int j = p + 8 * m;
    const float cj = __shfl_sync(0xffffffffu, cf, j);
    const float xj = j < w ? bf16_to_f32(xs[j][rl]) : (j == w ? x_now : 0.0f);
    rec += cj * xj;
  }
#pragma unroll
  for (int o = 1; o < 8; o <<= 1) rec += __shfl_xor_sync(0xffffffffu, rec, o);
#if CKPT_FP8
  const float s0c = rm.s0c * row_scale;
#else
  const float s0c = rm.s0c;
#endif
  const float y = row_skip(decay * s0c + rec, ri, x_now) * rm.gate;
  if (!live) return;
  if (p == 0) {
    out[b * so_batch + h * so_head + row] = f32_to_bf16(y);
    x_records[us * sxr_slot + h * sxr_head + (long long)w * ROWS + row] = x_raw;
  }
  if (rb == 0 && t == 0) dt_records[us * sdtr_slot + h * sdtr_head + w] = dth;
  if (rb == 0 && h % HPG == 0 && t < 8) {
    u16* brow = B_records + us * sBr_slot + g * sBr_group + w * sBr_pos;
#pragma unroll
    for (int k = 0; k < SM_BPT; ++k) *(uint4*)(brow + (p + 8 * k) * 8) = bnow[k];
  }
  if (w == LREC - 1) {
    // Flush: the row's chunks S = decay S0 + sum_{j <= w} s_j x_j B_jᵀ in fp32, rounded, stored.
    float s[SM_CPT][SM_EPC];
#pragma unroll
    for (int k = 0; k < SM_CPT; ++k) {
#if CKPT_F32
      s[k][0] = decay * __uint_as_float(ck[k].x);
      s[k][1] = decay * __uint_as_float(ck[k].y);
      s[k][2] = decay * __uint_as_float(ck[k].z);
      s[k][3] = decay * __uint_as_float(ck[k].w);
#elif CKPT_FP8
      const u32 vw[4] = {ck[k].x, ck[k].y, ck[k].z, ck[k].w};
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        e4m3x2_to_f32((u16)(vw[e >> 1] >> (16 * (e & 1))), s[k][2 * e], s[k][2 * e + 1]);
        s[k][2 * e] = (s[k][2 * e] * row_scale) * decay;  // the codes' values first, as the reference
        s[k][2 * e + 1] = (s[k][2 * e + 1] * row_scale) * decay;
      }
#else
      const u32 wd[4] = {ck[k].x, ck[k].y, ck[k].z, ck[k].w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[k][2 * e] = decay * __uint_as_float(wd[e] << 16);
        s[k][2 * e + 1] = decay * __uint_as_float(wd[e] & 0xffff0000u);
      }
#endif
    }
#pragma unroll 4
    for (int j = 0; j < LREC; ++j) {
      const float vj = __shfl_sync(0xffffffffu, sw, j) * (j == w ? x_now : bf16_to_f32(xs[j][rl]));
      const u16* bsj = bs[j];
#pragma unroll
      for (int k = 0; k < SM_CPT; ++k) {
        const int col = (p + 8 * k) * SM_EPC;
#if CKPT_F32
        const uint2 bj = *(const uint2*)(&bsj[col]);
        s[k][0] += vj * __uint_as_float(bj.x << 16);
        s[k][1] += vj * __uint_as_float(bj.x & 0xffff0000u);
        s[k][2] += vj * __uint_as_float(bj.y << 16);
        s[k][3] += vj * __uint_as_float(bj.y & 0xffff0000u);
#else
#pragma unroll
        for (int half = 0; half < SM_EPC / 8; ++half) {  // 8 B columns a 16-byte load (fp8: two)
          const uint4 bj = *(const uint4*)(&bsj[col + 8 * half]);
          const u32 wd[4] = {bj.x, bj.y, bj.z, bj.w};
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[k][8 * half + 2 * e] += vj * __uint_as_float(wd[e] << 16);
            s[k][8 * half + 2 * e + 1] += vj * __uint_as_float(wd[e] & 0xffff0000u);
          }
        }
#endif
      }
    }
#if CKPT_FP8
    // The row's new scale max |row| / 448 (1 for a zero row) over its 8 threads, the codes
    // value / scale to nearest even (reference.rounding.fp8_row_encode's rule); thread 0 of the
    // row stores the scale.
    const float new_scale = fp8_row_scale(row_max8(max_abs<SM_CPT * SM_EPC>(&s[0][0])));
    const float inverse = __frcp_rn(new_scale);
    if (p == 0) *scale_t = new_scale;
#endif
#pragma unroll
    for (int k = 0; k < SM_CPT; ++k) {
#if CKPT_F32
      *(uint4*)(ck_t + 128 * k) =
          make_uint4(__float_as_uint(s[k][0]), __float_as_uint(s[k][1]), __float_as_uint(s[k][2]), __float_as_uint(s[k][3]));
#elif CKPT_FP8
      u32 wd[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        wd[i] = (u32)pack_e4m3x2(div_by_reciprocal(s[k][4 * i], new_scale, inverse),
                                 div_by_reciprocal(s[k][4 * i + 1], new_scale, inverse)) |
                ((u32)pack_e4m3x2(div_by_reciprocal(s[k][4 * i + 2], new_scale, inverse),
                                  div_by_reciprocal(s[k][4 * i + 3], new_scale, inverse)) << 16);
      *(uint4*)(ck_t + 128 * k) = make_uint4(wd[0], wd[1], wd[2], wd[3]);
#else
      *(uint4*)(ck_t + 128 * k) = make_uint4(pack_bf16x2(s[k][0], s[k][1]), pack_bf16x2(s[k][2], s[k][3]),
                                             pack_bf16x2(s[k][4], s[k][5]), pack_bf16x2(s[k][6], s[k][7]));
#endif
    }
  }
  if (t == 0) advance_after_last_arrival(arrived, NHEADS * SM_CTAS_PER_HEAD, arrivals, cursor, slot, w, LREC);
}
#endif  // !AOT_ENTRIES
