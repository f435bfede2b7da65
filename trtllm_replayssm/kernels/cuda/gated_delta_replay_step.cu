// ReplaySSM gated delta-rule decode step for sm_90 (GDN: a log-decay per value head; KDA, with
// PER_CHANNEL: one per key channel), bf16 activations and records, bf16, fp32 (CKPT_F32) or
// fp8-e4m3 (CKPT_FP8: codes with one fp32 scale per value row; head_k_dim 128) checkpoints,
// compiled at run time by NVRTC (trtllm_replayssm/kernels/nvrtc.py) and launched by
// trtllm_replayssm/kernels/gated_delta_replay_cuda.py, which documents the contract (the Triton
// kernel's, kernels/gated_delta_replay.py). GDN: two launches (1 and 2 below), at small batches
// launch 2 alone or, smaller still, one kernel without a ring (3); KDA: launch 2 alone, forming its
// coefficients itself. Notation of
// trtllm_replayssm/reference/gated_delta.py: a row's cursor w, records j < w of (d_j, k̂_j, g_j),
// q̂ = scale q / |q|, k̂ = k / |k| (with L2NORM), e_j = exp(g + sum_{j<i<w} g_i),
// e0 = exp(g + sum_{i<w} g_i) (KDA: per channel).
//
// 1. delta_replay_coefficients (GDN), one CTA per (key head, batch row), a warp per value head of
//    the key head (VPK warps). Reads the row's cursor, the key head's k records 0..L-1 (those at
//    j >= w are selected out, never multiplied: they may hold anything), the value head's g
//    records, q, k, g, beta; writes per (row, value head) a coefficient block
//        sq[LP]   e_j (k̂_j . q̂) for j < w, 0 after
//        sk[LP]   e_j (k̂_j . k̂) for j < w, 0 after
//        e[LP]    e_j for j < w, 0 after                 (the flush's record weights)
//        e0, kq = k̂ . q̂, beta, w (int)
//    and per (row, key head) q̂ and k̂ in fp32 (the qk block, warp 0; fp8 checkpoints: then q and
//    k as f16 for the step's tensor-core products, FP8_MMA below). For w < L-1 it appends g at
//    w (every warp) and k̂ at w (warp 0), rounded to the record dtype. Padding rows (slot < 0)
//    read and write nothing. The cursor is only read here: the step kernel advances it.
// 2. delta_replay_step, persistent: CTA c takes units u = c, c + gridDim.x, ..., a unit being ROWS
//    value rows (a part) of one value head of one batch row, u = (b VHEADS + h) PARTS + part.
//    Warp PRODUCER (the last) is the producer: per unit it waits for a free stage and fills it
//    with one TMA tensor-map copy per 128-byte box of the checkpoint rows (128-byte swizzle), one
//    bulk copy per d record position 0..w-1 (the part's ROWS values), one per k record 0..L-2
//    for a flush, v of the part, the coefficient block and the qk block. Each consumer warp owns
//    16 rows, a lane per row and half of head_k_dim (lanes 0-15 and 16-31):
//        hq = e0 (S0 q̂) + sum_j sq_j d_j,   hk = e0 (S0 k̂) + sum_j sk_j d_j   (exact fp32)
//        d = beta (v - hk),   o = hq + d kq
//    o to out, d appended at w (w < L-1). A flush unit (w == L-1) also forms
//        S = e0 S0 + sum_{j<w} (e_j d_j) k̂_jᵀ + d k̂ᵀ
//    in exact fp32 FMAs, rounds it into the stage in the checkpoint dtype and stores its rows
//    with TMA tensor stores. fp8 (CKPT_FP8): the producer copies the unit's row scales beside its
//    codes; S0 q̂ and S0 k̂ are formed from the codes (in two launches on tensor cores, the codes
//    widened to f16 and the step's raw q and k as f16 times powers of two, which launch 1 appends
//    to the qk block, FP8_MMA below) and times the row's scale; a flush folds each row once and
//    holds it (a row over four lanes, eight rows of the warp at a time; with FLUSH_MMA the warp's
//    16 rows on tensor cores, held as accumulator tiles), takes the row's new scale max |row| /
//    448 (1 for a zero row), then stores codes (value / scale, nearest even) and the scales. A
//    unit that does not flush gives its stage back once read. GDN: a
//    consumer of a row's (head 0, part 0) unit writes the new cursor (0 after a flush, else w+1):
//    its stage holds the coefficient block, so the coefficient grid, the cursor's only other
//    reader, is complete. The producer reads each unit's cursor itself and may see it advanced
//    (w' = w + 1, or 0 after a flush): it copies for either value (d records 0..w'-1, 0..L-2 at
//    w' = 0; the k records when w' is L-1 or 0), and the consumers take the exact w from the
//    coefficient block.
//    One launch (ONE_LAUNCH: KDA always, its per-channel g records being otherwise read twice and
//    a per-(row, value head) block written and read back; GDN at small batches): the producer
//    counts each unit's cursor read in arrivals[slot], the row's last read advancing the cursor,
//    so every unit sees the exact w; it copies records 0..w-1 of d, k̂ and g (KDA: fp32 per
//    channel; GDN: 4-byte cp.async) and the step's q, k (KDA: g), and puts w and beta (GDN: g) in
//    the stage; these are copied before the checkpoint and tracked by the stage's recs barrier,
//    the checkpoint alone by its full barrier. The consumer warps first form the unit's
//    coefficient and qk blocks in the stage together (unit_coefficients; KDA: the scores take
//    the decays inside, sq_j = (e_j ⊙ k̂_j) . q̂, e0 = 1 in the block, the qk block is e0 ⊙ q̂,
//    e0 ⊙ k̂, k̂, e0, and a flush's U_j = e_j ⊙ k̂_j replace its g records), append g and k̂, wait
//    for the checkpoint and go on as above; a KDA flush forms
//    S = S0 Diag(e0) + sum_{j<w} d_j U_jᵀ + d k̂ᵀ.
//    With COEF_WARPS, that many warps between the consumers and the producer form each unit's
//    coefficients instead, as soon as its stage is full, and arrive on the stage's third (ready)
//    barrier; the consumers wait for it and go straight to the products, so one unit's coefficients
//    are formed while the consumers work on the unit before it.
// 3. delta_replay_small (GDN): the whole step in one launch without a ring (its comment, below).
//
// Compile-time constants (-D): CKPT_F32 (0: bf16 checkpoint, 1: fp32), CKPT_FP8 (1: fp8), KHEADS, VHEADS (a multiple
// of KHEADS, VHEADS / KHEADS <= 32), DK (head_k_dim: a multiple of 64 up to 256), DV (head_v_dim),
// ROWS (rows of a unit: a multiple of 16 up to 128 dividing DV), LREC (L, <= 32), LP (L rounded
// up to 16), STAGES, MIN_CTAS (the step and small kernels' register cap: resident CTAs a multiprocessor),
// SM_ROWS (the small kernel's rows a CTA: a multiple of 16 up to 128 dividing DV),
// PER_CHANNEL (0: GDN, a log-decay per value head; 1: KDA, one per key channel; the small kernel
// takes GDN only), ONE_LAUNCH (1: the step kernel forms the coefficients itself, always for KDA;
// 0: GDN's two launches), COEF_WARPS (one launch: 0, the consumers form them; else the warps that
// do), S0_MMA (bf16 checkpoint, one launch: S0 q̂ and S0 k̂ on tensor cores, the fp32 vectors as
// three bf16 parts each), FLUSH_MMA (a flush's fold of the records on tensor cores), the forms
// COALESCE_RECS, DEFER_COUNT, FLUSH_FIRST, DEALT_UNITS and REC_WARPS (each described where it is defined),
// L2NORM (0 / 1), and the dtype codes G_CODE, BETA_CODE of g and beta (0 fp32, 1 bf16, 2 fp16).

#define VPK (VHEADS / KHEADS)               // value heads per key head
#define PARTS (DV / ROWS)                   // units per (row, value head)
#define CONSUMERS (ROWS / 16)
#ifndef COEF_WARPS
#define COEF_WARPS 0
#endif
#define PRODUCER (CONSUMERS + COEF_WARPS)   // the producer's warp index
#define CWARPS (COEF_WARPS ? COEF_WARPS : CONSUMERS)  // warps forming a unit's coefficients (one launch)
#define CKPT_ROWS ROWS                      // a unit: ROWS value rows of one value head
#define CKPT_COLS DK
#include "ckpt_stage.cuh"
#include "delta_records.cuh"
#define EPC (16 / ES)                       // checkpoint elements per 16-byte chunk
#define HALF (DK / 2)                       // columns of a lane (lanes 0-15: the first half)
#define FOLD_RECS (LREC - 1)                // records a flush folds (w = L - 1)
#define D_BYTES (LP * ROWS * 2)
#define K_BYTES (LP * DK * 2)
#define V_BYTES (ROWS * 2)
#ifndef S0_MMA
#define S0_MMA 0
#endif
// fp8 in two launches (GDN): S0 q̂ and S0 k̂ on tensor cores (s0_dots_fp8) from the step's raw q
// and k (bf16: exact in f16 within its range) as f16 times powers of two, which launch 1 appends
// to the qk block: q, then k (QK_F16_STRIDE u16 apart: a quarter-warp's reads of the two are at
// most 2-way bank conflicts), then the factors rq 2^-eq, rk 2^-ek (q̂ = rq q, k̂ = rk k) and 2
// pad. One launch (KDA; GDN at small batches) keeps the exact fp32 products: there the f16 vectors
// would be formed per unit, and KDA's step was 3-7% slower so (kernel notes, session 39).
#define FP8_MMA (CKPT_FP8 && !ONE_LAUNCH)
// The binade launch 1 takes the f16 q and k into: f16's top one for the tensor-core products; [1, 2)
// for S0_HFMA2's f16 sums (s0_dots_hfma2), so that a sum of 16 products of a code stays in range.
#define QK_F16_TOP (S0_HFMA2 ? 0 : 14)
#define QK_F16_STRIDE (DK + 16)
#define QK_F16 (2 * DK)                              // float offset of the f16 q in the qk block
#define QK_FACTORS (QK_F16 + QK_F16_STRIDE)          // float offset of rq 2^-eq, rk 2^-ek
// GDN: q̂, k̂ (FP8_MMA: then the vectors and factors above); KDA: e0 ⊙ q̂, e0 ⊙ k̂, k̂, e0.
#define QK_FLOATS (FP8_MMA ? QK_FACTORS + 4 : (PER_CHANNEL ? 4 : 2) * DK)
#define QK_BYTES (QK_FLOATS * 4)
#if S0_MMA && CKPT_F32
#error "S0_MMA takes a bf16 checkpoint"
#endif
#ifndef FLUSH_MMA
#define FLUSH_MMA 0
#endif
// COALESCE_RECS: a unit's k̂ records, and its d records where a unit spans every value row, as one
// bulk copy each (the host checks that records are contiguous over positions) instead of one a
// record.
#ifndef COALESCE_RECS
#define COALESCE_RECS 0
#endif
#define COALESCE_D (COALESCE_RECS && ROWS == DV)
// DEFER_COUNT (one launch): a block of 32 units' cursor reads counted once the CTA's first STAGES
// units of it are issued (or all, where it has fewer), not after the first: the count's atomic
// round trip then does not hold back the next units' copies.
#ifndef DEFER_COUNT
#define DEFER_COUNT 0
#endif
// FLUSH_FIRST (one launch): each block of 32 units taken with its flushing units first, so that a
// flush's fold overlaps the other units' coefficients instead of following them; each stage's meta
// then names its unit.
#ifndef FLUSH_FIRST
#define FLUSH_FIRST 0
#endif
// DEALT_UNITS (one launch, batch <= 1024): every CTA's producer reads every row's slot and cursor,
// marks the flushing rows (dealing_order) and takes its dealt share of the units (dealt_share): as
// many as the fixed order u = c, c + gridDim.x, ... gives it, of them floor or ceil of F / gridDim.x
// of the F flush units, spread over its timeline, not as many as the fixed order happens to give it
// (session 65: 3.30 at the busiest CTA against a mean of 1.94, GDN batch 64). Each CTA then counts
// itself once, after its last unit, instead of each unit's cursor read (count_launch_reads); each
// stage's meta names its unit.
#ifndef DEALT_UNITS
#define DEALT_UNITS 0
#endif
// DEALT_SPREAD (with DEALT_UNITS): a CTA's flush units evenly spaced from the middle of its first
// n / nf units on, none first (dealt_unit).
#ifndef DEALT_SPREAD
#define DEALT_SPREAD 0
#endif
#if DEALT_SPREAD && !DEALT_UNITS
#error "DEALT_SPREAD places DEALT_UNITS' flush units"
#endif
#if DEALT_UNITS && !(ONE_LAUNCH && !FLUSH_FIRST && !DEFER_COUNT)
#error "DEALT_UNITS takes the step kernel in one launch, without FLUSH_FIRST and DEFER_COUNT"
#endif
// CLAIMED_UNITS (one launch, without FLUSH_FIRST, DEFER_COUNT and DEALT_UNITS): each CTA takes its
// first STAGES units in the fixed order u = c, c + gridDim.x, ..., then units claimed one at a time
// from the launch's count (ClaimedUnits), so that CTAs that stream faster take more units and all
// end together (the Mamba-2 step's claims, kernel notes "Session 68"); each stage's meta names its
// unit, and an end marker (unit -1) ends the consumers and the coefficient warps. The count is the
// low CLAIM_BITS bits of the word where each CTA counts itself once, after its last unit, as with
// DEALT_UNITS (count_launch_reads: arrivals[the first row's slot]), so the launch's last count,
// which advances every cursor, also zeroes the claims.
#ifndef CLAIMED_UNITS
#define CLAIMED_UNITS 0
#endif
#if CLAIMED_UNITS && !(ONE_LAUNCH && !FLUSH_FIRST && !DEFER_COUNT && !DEALT_UNITS)
#error "CLAIMED_UNITS takes the step kernel in one launch, without FLUSH_FIRST, DEFER_COUNT and DEALT_UNITS"
#endif
#define CLAIM_BITS 21                       // CLAIMED_UNITS: the host keeps units + 3 claims a CTA below 2^21
#define LAUNCH_SHIFT (CLAIMED_UNITS ? CLAIM_BITS : 0)  // count_launch_reads: a CTA counts 1 << LAUNCH_SHIFT
#define ORDER_ROWS 1024                     // DEALT_UNITS: the batch rows it orders at most
#define ORDER_BYTES (DEALT_UNITS ? 65 * 4 + 12 : 0)  // 32 words of flushing bits, 33 prefix counts; 16-byte multiple
#if CKPT_FP8 && (S0_MMA || DK != 128)
#error "an fp8 checkpoint takes its own S0 products, head_k_dim 128"
#endif
// S0_QGMMA (KDA, fp8 checkpoint, L2NORM, whole warpgroups of consumers; sm_90a): S0 q̂ and S0 k̂ on
// tensor cores in fp8 (s0_dots_qgmma) instead of fp32 FMAs on the widened codes.
#ifndef S0_QGMMA
#define S0_QGMMA 0
#endif
#if S0_QGMMA && !(CKPT_FP8 && PER_CHANNEL && L2NORM && ROWS % 64 == 0 && !CONSUMER_SUMS)
#error "S0_QGMMA takes KDA with an fp8 checkpoint, L2NORM, 64 or 128 rows a unit and normalised vectors"
#endif
// S0_HFMA2 (fp8 checkpoint; KDA: L2NORM; GDN: two launches): S0 q̂ and S0 k̂ as f16x2 FMAs on CUDA
// cores (s0_dots_hfma2) instead of fp32 FMAs on the codes widened to fp32 (KDA) or tensor-core
// products (GDN, FP8_MMA): no tensor core (whose use lowers the SM clock, kernel notes "Session
// 64"), half the arithmetic instructions of the FMA form.
#ifndef S0_HFMA2
#define S0_HFMA2 0
#endif
#if S0_HFMA2 && !(CKPT_FP8 && (PER_CHANNEL ? L2NORM && !CONSUMER_SUMS && !S0_QGMMA : !ONE_LAUNCH))
#error "S0_HFMA2 takes an fp8 checkpoint: KDA with L2NORM and normalised vectors, in place of S0_QGMMA; GDN in two launches"
#endif
// REC_WARPS (GDN in one launch): the warps forming a unit's coefficients split its records, not
// its columns (records_coefficients).
#ifndef REC_WARPS
#define REC_WARPS 0
#endif
#if REC_WARPS && (PER_CHANNEL || !ONE_LAUNCH)
#error "REC_WARPS takes GDN in one launch"
#endif
// CONSUMER_SUMS (KDA with coefficient warps): the coefficient warps hand their per-warp partial
// scores and norms over as they are (no named barrier, no second pass), with the qk block's
// vectors unnormalised (e0 ⊙ q, e0 ⊙ k, k, e0); each consumer warp sums the partials itself, forms
// rq and rk, scales its S0 products, scores and the flush's new record by them, and appends k̂.
// What it moves: the chain after the coefficient warps' barrier (1.14 of their 2.10 µs a unit at
// KDA fp8 256, H100, session 60) onto the consumers, who wait for them.
#ifndef CONSUMER_SUMS
#define CONSUMER_SUMS 0
#endif
#if CONSUMER_SUMS && !(PER_CHANNEL && COEF_WARPS && !S0_MMA)
#error "CONSUMER_SUMS takes KDA with coefficient warps and its exact S0 products"
#endif
// Each warp role's first wait takes a zero computed from the kernel parameters it reads after that
// wait (params_zero; the coefficient warps and the consumers in its parity, the producer of one
// launch in a trap before its programmatic wait), so that their constant-bank loads, cold at each
// launch, are issued before the wait and miss while it waits, not after it: 1-4% faster at batch
// 1-4 on an H100, neutral elsewhere (session 56).
// sq[LP], sk[LP], e[LP], e0, kq, beta, w (int); S0_MMA: then rq, rk (GDN's q̂ = rq q, k̂ = rk k), 2 pad
#define COEF_FLOATS (3 * LP + (S0_MMA ? 8 : 4))
#define COEF_BYTES (COEF_FLOATS * 4)
#define OFF_D CKPT_BYTES
#define OFF_K (OFF_D + D_BYTES)
#define OFF_QK (OFF_K + K_BYTES)
#define OFF_COEF (OFF_QK + QK_BYTES)
#define OFF_V (OFF_COEF + COEF_BYTES)
// One launch only: the g records (KDA: [LP] slots of 4 DK bytes, record j's fp16 g at G_REC(j) DK
// halves, then a flush's U_j = e_j ⊙ k̂_j in fp32 over slot j, its columns in u_index order; GDN:
// [LP] fp32), the step's q, k (bf16; also with S0_MMA) and KDA's g (G_CODE), the consumer warps'
// partial sums. KDA's g records lie in the upper half of their slots, or with COALESCE_RECS
// contiguous from the first slot (one bulk copy; slot j then holds records 2j and 2j + 1).
#define G_BYTES (ONE_LAUNCH ? (PER_CHANNEL ? LP * DK * 4 : LP * 4) : 0)
#define OFF_G (OFF_V + ((V_BYTES + 15) / 16) * 16)
#define G_REC(j) (COALESCE_RECS ? (j) : 2 * (j) + 1)  // KDA: record j's g, in DK halves from OFF_G
#if PER_CHANNEL
// Float index of column c in a flush's U_j: of each 32 columns (a warp's in unit_coefficients) the
// first 16 in the slot's lower half, which holds no g, the last 16 in its upper half, over the g
// of the same 32 columns (the float of column 32 i + 16 + m over the fp16 g of columns 32 i + 2m,
// 2m + 1). Runs of 16 columns stay contiguous: the fold reads them as float4. With COALESCE_RECS
// the slot's halves hold records 2j and 2j + 1, and the floats of a warp's columns lie over those
// records' g of the same columns, which scan_column (from the last record down) has read first.
__device__ __forceinline__ int u_index(int c) { return (c & 16 ? DK / 2 : 0) + (c >> 5) * 16 + (c & 15); }
#endif
#define IN_BYTES (ONE_LAUNCH || S0_MMA ? DK * 4 + (PER_CHANNEL ? DK * 4 : 0) : 0)  // (GDN's S0_MMA: q, k too)
#define OFF_IN (OFF_G + G_BYTES)
#define RED_FLOATS (ONE_LAUNCH ? CWARPS * (2 * LP + 4) : 0)
#define OFF_RED (OFF_IN + IN_BYTES)
#define FRAG_BYTES (S0_MMA && PER_CHANNEL ? DK * 16 : 0)  // KDA's S0_MMA B fragments [DK / 16][32 lanes][2 u32]
#define OFF_FRAG (OFF_RED + RED_FLOATS * 4)
#define SCALE_BYTES (CKPT_FP8 ? ROWS * 4 : 0)  // fp8: the unit's row scales
#define OFF_SCALE (OFF_FRAG + FRAG_BYTES)
#define OFF_META (OFF_SCALE + SCALE_BYTES)
#define UNIT_IN_META (FLUSH_FIRST || DEALT_UNITS || CLAIMED_UNITS)  // the producer names each stage's unit
#define META_BYTES (UNIT_IN_META ? 32 : 16)  // slot, w, beta, GDN's g; then the unit, padding
#define STAGE_BYTES (((OFF_META + META_BYTES) + 1023) / 1024 * 1024)
// The unit a consumer's or coefficient warp's stage holds: its i-th unit u, or with FLUSH_FIRST,
// DEALT_UNITS or CLAIMED_UNITS the one the producer put in the meta (CLAIMED_UNITS' end marker: -1).
__device__ __forceinline__ int stage_unit(const unsigned char* gstage, int u) {
  return UNIT_IN_META ? ((const int*)(gstage + OFF_META))[4] : u;
}
#define PER_LANE (DK / 32)                  // head_k_dim elements per lane in the coefficient launch
__host__ __device__ constexpr int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}
#define SCORE_RECS pow2_at_least((LP + VPK - 1) / VPK)  // records a warp of the coefficient launch scores
#define SCORE_CHUNK (SCORE_RECS < 16 ? SCORE_RECS : 16)  // records a reduce-scatter of their 2 x scores

// Dynamic shared memory the step kernel indexes (bytes; full and empty mbarriers per stage after
// the stages): the launcher's step_shared_bytes must equal it (a CPU test reads this from the PTX).
// mbarriers a stage: full, empty and, in one launch, recs (the records, the step's inputs and
// the meta, which full then leaves out: the coefficients are formed while the checkpoint is on
// its way) and with COEF_WARPS a fourth, ready (the coefficient warps are done). BAR_RECS is full
// in two launches.
#define NBARS (ONE_LAUNCH ? (COEF_WARPS ? 4 : 3) : 2)
#define BAR_RECS(st) (bars + 8 * (ONE_LAUNCH ? 2 * STAGES + (st) : (st)))
#define BAR_READY(st) (bars + 8 * (3 * STAGES + (st)))
// The coefficient warps arrive on ready a thread each, once each thread's part of the blocks is
// written (no barrier among them after their last writes: a warp goes on to its next unit while
// the others finish this one); the consumers see every part once the barrier completes.
#define READY_ARRIVALS (CWARPS * 32)
// DEALT_UNITS: the producer's row order (ORDER_BYTES) after the mbarriers.
extern "C" __device__ unsigned int delta_step_shared_bytes = STAGES * STAGE_BYTES + 1024 + 8 * NBARS * STAGES + ORDER_BYTES;

// The 8 bf16 values of a 16-byte chunk as fp32.
__device__ __forceinline__ void unpack8(uint4 c, float* v) {
  const u32 wd[4] = {c.x, c.y, c.z, c.w};
  unpack_bf16x2(wd, v);
}

// A 16-byte checkpoint chunk as its EPC elements in fp32 (fp8: the codes, unscaled).
__device__ __forceinline__ void chunk_to_f32(uint4 c, float* v) {
#if CKPT_F32
  v[0] = __uint_as_float(c.x);
  v[1] = __uint_as_float(c.y);
  v[2] = __uint_as_float(c.z);
  v[3] = __uint_as_float(c.w);
#elif CKPT_FP8
  const u32 wd[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) e4m3x2_to_f32((u16)(wd[i >> 1] >> (16 * (i & 1))), v[2 * i], v[2 * i + 1]);
#else
  unpack8(c, v);
#endif
}

// EPC bf16 values from p (aligned to their size: 8, 16 or, fp8, 2 x 16 bytes) as fp32: the
// columns of one checkpoint chunk in a bf16 row (q, k or a k record).
__device__ __forceinline__ void load_bf16_chunk(const u16* p, float* v) {
#if CKPT_F32
  const uint2 c2 = *(const uint2*)p;
  const u32 c[2] = {c2.x, c2.y};
  unpack_bf16x2(c, v);
#elif CKPT_FP8
  unpack8(*(const uint4*)p, v);
  unpack8(*(const uint4*)(p + 8), v + 8);
#else
  unpack8(*(const uint4*)p, v);
#endif
}

// Four floats of shared memory at a 16-byte aligned p in one load (NVVM splits a float4 load into
// four where it cannot prove the address aligned: the KDA fold's e0, k̂ and U reads).
__device__ __forceinline__ float4 lds_float4(const float* p) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(smem_u32(p)));
  return v;
}

// The EPC checkpoint elements of a stage from (row, col) on (col a multiple of EPC) as fp32.
__device__ __forceinline__ void load_chunk(const unsigned char* stage, u32 row, u32 col, float* v) {
  chunk_to_f32(*(const uint4*)(stage + ckpt_offset(row, col)), v);
}

// EPC fp32 values as one 16-byte chunk of the checkpoint dtype (rounded).
__device__ __forceinline__ uint4 pack_chunk(const float* v) {
#if CKPT_F32
  return make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]), __float_as_uint(v[3]));
#elif CKPT_FP8
  u32 wd[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) wd[i] = (u32)pack_e4m3x2(v[4 * i], v[4 * i + 1]) | ((u32)pack_e4m3x2(v[4 * i + 2], v[4 * i + 3]) << 16);
  return make_uint4(wd[0], wd[1], wd[2], wd[3]);
#else
  return make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
#endif
}

// ------------------------------------------------------------------ launch 1: coefficients

// PER_LANE (2, 4 or 8) bf16 values from p (aligned to their size) as fp32, in one load.
__device__ __forceinline__ void load_lane_bf16(const u16* p, float* v) {
  u32 c[PER_LANE / 2];
  load_words(p, c);
  unpack_bf16x2(c, v);
}

// A coefficient block's scalars after e0 (written by the caller): kq, beta, w (int); with S0_MMA
// then rq and rk (q̂ = rq q, k̂ = rk k).
__device__ __forceinline__ void coef_scalars(float* blk, float kq, float beta, int w, float rq, float rk) {
  blk[3 * LP + 1] = kq;
  blk[3 * LP + 2] = beta;
  ((int*)blk)[3 * LP + 3] = w;
#if S0_MMA
  blk[3 * LP + 4] = rq;
  blk[3 * LP + 5] = rk;
#endif
}

// GDN's decays, a lane a record, from exact suffix sums (no prefix subtraction): lane j's g record
// in (read below w only), e_j = exp(g + sum_{j<i<w} g_i) out (0 from w on), and in every lane
// e0 = exp(g + sum_{i<w} g_i).
__device__ __forceinline__ float record_decays(float g_lane, int w, float gh, int lane, float& e0) {
  float total;
  const float later = warp_suffix_sums(lane < w ? g_lane : 0.0f, lane, total);
  const float ej = lane < w ? __expf(later + gh) : 0.0f;
  e0 = __expf(total + gh);
  return ej;
}

// A warp's scores of records j0 + c .. j0 + c + CHUNK - 1 (chunk c of its RECS records, each
// lane's PER_LANE columns in kr[j]): k̂_j . a and k̂_j . b (the lane's columns of a and b), records
// at j >= w selected out before the sums (they may hold NaN), reduce-scattered: lane l < 2 CHUNK
// returns record j0 + c + l % CHUNK's (l < CHUNK: its a score, else its b score).
template <int RECS, int CHUNK>
__device__ __forceinline__ float chunk_scores(const float (&kr)[RECS][PER_LANE], const float* a, const float* b, int c,
                                              int j0, int w, int lane) {
  float part[2 * CHUNK];
#pragma unroll
  for (int j = 0; j < CHUNK; ++j) {
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      sa += kr[c + j][i] * a[i];
      sb += kr[c + j][i] * b[i];
    }
    const bool valid = j0 + c + j < w;
    part[j] = valid ? sa : 0.0f;
    part[CHUNK + j] = valid ? sb : 0.0f;
  }
  return warp_reduce_scatter<2 * CHUNK>(part, lane);
}

#if !ONE_LAUNCH
extern "C" __global__ void __launch_bounds__(VPK * 32) delta_replay_coefficients(
    float* __restrict__ coef_out,    // [batch, VHEADS, COEF_FLOATS]
    float* __restrict__ qk_out,      // [batch, KHEADS, QK_FLOATS]
    u16* __restrict__ k_records, long long skr_slot, long long skr_head, long long skr_pos,
    float* __restrict__ g_records, long long sgr_slot, long long sgr_head, long long sgr_pos,
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
  // The key head's records are split over its value heads' warps for the scores (SCORE_RECS a
  // warp, from record j0: a power of two covering LP over the VPK warps); a warp past the last
  // record loads none.
  const int j0 = warp * SCORE_RECS;
  float qv[PER_LANE], kv[PER_LANE], kr[SCORE_RECS][PER_LANE];
  load_lane_bf16(q + b * sq_batch + kh * sq_head + lane * PER_LANE, qv);
  load_lane_bf16(k + b * sk_batch + kh * sk_head + lane * PER_LANE, kv);
  u16* const krec = k_records + slot * skr_slot + kh * skr_head;
#pragma unroll
  for (int j = 0; j < SCORE_RECS; ++j) {
    if (j0 + j < LREC) {
      load_lane_bf16(krec + (j0 + j) * skr_pos + lane * PER_LANE, kr[j]);
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
#if FP8_MMA
  // The step kernel's S0 q̂ and S0 k̂ on tensor cores take the raw q and k (bf16: exact in f16
  // within its range) as f16 times the powers of two that put their largest magnitudes in f16's
  // top binade (S0_HFMA2's f16x2 FMAs: in [1, 2)); the factors rq 2^-eq, rk 2^-ek follow below.
  // Every warp forms the factors (its shuffles outside a branch on the warp), warp 0 stores.
  float q_inverse, k_inverse;
  const float q_scale = f16_range_scale(warp_max(max_abs<PER_LANE>(qv)), QK_F16_TOP, q_inverse);
  const float k_scale = f16_range_scale(warp_max(max_abs<PER_LANE>(kv)), QK_F16_TOP, k_inverse);
  if (warp == 0) {
    u16* qf = (u16*)(qk_out + ((long long)b * KHEADS + kh) * QK_FLOATS + QK_F16) + lane * PER_LANE;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      qf[i] = f32_to_f16(qv[i] * q_scale);
      qf[QK_F16_STRIDE + i] = f32_to_f16(kv[i] * k_scale);
    }
  }
#endif
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
  // k̂_j . q̂ and k̂_j . k̂ of the warp's records (records at j >= w selected out before the sums:
  // they may hold NaN), SCORE_CHUNK at a time reduce-scattered (lane l < 2 SCORE_CHUNK holds value
  // l: the q scores, then the k scores), into the CTA's shared block; lane j < LP then takes
  // record j's two scores. The key head's q̂ . k̂_j do not depend on the value head: each record's
  // are formed once a CTA, not once a warp.
  __shared__ float scores[2 * LP];  // q scores [LP], k scores [LP]
#pragma unroll
  for (int c = 0; c < SCORE_RECS; c += SCORE_CHUNK) {
    const float r = chunk_scores<SCORE_RECS, SCORE_CHUNK>(kr, qv, kv, c, j0, w, lane);
    const int i = lane & (SCORE_CHUNK - 1), record = j0 + c + i;
    if (lane < 2 * SCORE_CHUNK && record < LP) scores[(lane < SCORE_CHUNK ? 0 : LP) + record] = r;
  }
  __syncthreads();
  const float pq = lane < LP ? scores[lane] : 0.0f, pk = lane < LP ? scores[LP + lane] : 0.0f;
  float* blk = coef_out + ((long long)b * VHEADS + h) * COEF_FLOATS;
  float e0;
  const float ej = record_decays(gj, w, gh, lane, e0);
  if (lane < LP) {
    blk[lane] = ej * pq;
    blk[LP + lane] = ej * pk;
    blk[2 * LP + lane] = ej;
  }
  if (lane == 0) {
    blk[3 * LP] = e0;
    coef_scalars(blk, kq, bh, w, rq, rk);
    if (w < LREC - 1) grec[w] = gh;
  }
  if (warp == 0) {
    float* qk = qk_out + ((long long)b * KHEADS + kh) * QK_FLOATS + lane * PER_LANE;
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      qk[i] = qv[i];
      qk[DK + i] = kv[i];
    }
#if FP8_MMA
    if (lane == 0) {
      qk[QK_FACTORS] = rq * q_inverse;
      qk[QK_FACTORS + 1] = rk * k_inverse;
    }
#endif
    if (w < LREC - 1) {
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) krec[w * skr_pos + lane * PER_LANE + i] = f32_to_bf16(kv[i]);
    }
  }
}
#endif  // !ONE_LAUNCH

// ------------------------------------------------------------------ launch 2: the step

// S0 q̂ and S0 k̂ (q̂, k̂ fp32 in shared memory at qks, qks + DK) of the warp's row r0 + (lane & 15),
// returned in every lane; exact fp32 products.
// A lane a row and half of its columns (lanes 0-15: the first half), one 16-byte chunk a shared
// load (a quarter-warp reads 8 rows' same chunk: 8 distinct bank groups under the swizzle).
__device__ __forceinline__ void s0_dots(const unsigned char* stage, const float* qks, int r0, int lane, float& sq, float& sk) {
  const int row = r0 + (lane & 15), half = lane >> 4;
  float aq[4] = {}, ak[4] = {};
#pragma unroll
  for (int c = 0; c < HALF; c += EPC) {
    const int col = half * HALF + c;
    float s[EPC];
    load_chunk(stage, row, col, s);
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
  sq = (aq[0] + aq[1]) + (aq[2] + aq[3]);
  sk = (ak[0] + ak[1]) + (ak[2] + ak[3]);
  sq += __shfl_xor_sync(0xffffffffu, sq, 16);
  sk += __shfl_xor_sync(0xffffffffu, sk, 16);
}

#if FP8_MMA
// fp8 in two launches: S0 q̂ and S0 k̂ of the warp's row r0 + (lane & 15), returned in every lane,
// in codes (the caller applies the row's scale): the codes times the qk block's f16 q and k
// (fp8_rows_times_f16; B column n is q for even n, k for odd n), then the factors rq 2^-eq and
// rk 2^-ek. Lane (g, t) of the product holds D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]:
// lanes t = 0 hold q (column 0) and k (column 1) of rows g and g + 8.
__device__ __forceinline__ void s0_dots_fp8(const unsigned char* gstage, int r0, int lane, float& sq, float& sk) {
  const float* qks = (const float*)(gstage + OFF_QK);
  float d[4];
  fp8_rows_times_f16(gstage, r0, lane, (const u16*)(qks + QK_F16) + ((lane >> 2) & 1) * QK_F16_STRIDE + 32 * (lane & 3), d);
  const int r = lane & 15, src = (r & 7) * 4;
  const float ql = __shfl_sync(0xffffffffu, d[0], src), qh = __shfl_sync(0xffffffffu, d[2], src);
  const float kl = __shfl_sync(0xffffffffu, d[1], src), kh = __shfl_sync(0xffffffffu, d[3], src);
  sq = (r < 8 ? ql : qh) * qks[QK_FACTORS];
  sk = (r < 8 ? kl : kh) * qks[QK_FACTORS + 1];
}
#endif

#if S0_MMA
// S0_MMA: S0 q̂ and S0 k̂ on tensor cores (bf16 checkpoint): the warp's 16 rows are the A operand
// of m16n8k16 products (ldmatrix from the swizzled boxes), k tile by k tile, into two fp32
// accumulators (even and odd tiles). The B operand: GDN, the step's raw q and k (bf16, exact) in
// columns 0 and 1, the norms applied to the sums (q̂ = rq q, k̂ = rk k: rq, rk in the coefficient
// block); KDA, whose vectors e0 ⊙ q̂ and e0 ⊙ k̂ are not bf16, their three bf16 parts each
// (split3, exact to 24 bits) in columns 0-2 and 3-5, from the fragment block that
// unit_coefficients fills (frag_column). Lane (g = lane / 4, t = lane % 4) of the product holds
// D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1]; rows go to lanes r and r + 16.
#if PER_CHANNEL
// KDA: column c of B, as a lane of k tile c / 16 holds it ([tile][lane][2 u32]), columns 6-7 zero.
__device__ __forceinline__ void frag_column(unsigned char* gstage, int c, float x, float y) {
  u16* f = (u16*)(gstage + OFF_FRAG);
  const int kin = c & 15, base = ((c >> 4) * 32 + ((kin & 7) >> 1)) * 4 + (kin >> 3) * 2 + (kin & 1);
  float p[8];
  split3(x, p[0], p[1], p[2]);
  split3(y, p[3], p[4], p[5]);
  p[6] = p[7] = 0.0f;
#pragma unroll
  for (int n = 0; n < 8; ++n) f[base + n * 16] = f32_to_bf16(p[n]);  // lane n * 4 + t: + 16 u16 a column
}
#endif

__device__ __forceinline__ void s0_dots_mma(u32 stage, const unsigned char* gstage, int r0, int lane, float& sq, float& sk) {
  float part[2][4] = {};
  const u32 arow = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#if !PER_CHANNEL
  const u16* in = (const u16*)(gstage + OFF_IN) + (lane >> 2) * DK;  // lanes 0-3: q, 4-7: k
  const bool holds = lane < 8;
#endif
#pragma unroll
  for (int k0 = 0; k0 < DK; k0 += 16) {
    u32 a0, a1, a2, a3;
    ldmatrix_x4(stage + ckpt_offset(arow, k0 + (lane >> 4) * 8), a0, a1, a2, a3);
#if PER_CHANNEL
    const uint2 b = ((const uint2*)(gstage + OFF_FRAG))[(k0 / 16) * 32 + lane];
    const u32 b0 = b.x, b1 = b.y;
#else
    u32 b0 = 0, b1 = 0;
    if (holds) {
      b0 = *(const u32*)(in + k0 + 2 * (lane & 3));
      b1 = *(const u32*)(in + k0 + 8 + 2 * (lane & 3));
    }
#endif
    mma_bf16(part[(k0 / 16) & 1], a0, a1, a2, a3, b0, b1);
  }
  float d[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = part[0][i] + part[1][i];
  const int r = lane & 15, src = (r & 7) * 4;
#if PER_CHANNEL
  const int t = lane & 3;
  float qlo = t == 0 ? d[0] + d[1] : (t == 1 ? d[0] : 0.0f), klo = t == 1 ? d[1] : (t == 2 ? d[0] + d[1] : 0.0f);
  float qhi = t == 0 ? d[2] + d[3] : (t == 1 ? d[2] : 0.0f), khi = t == 1 ? d[3] : (t == 2 ? d[2] + d[3] : 0.0f);
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    qlo += __shfl_xor_sync(0xffffffffu, qlo, o);
    klo += __shfl_xor_sync(0xffffffffu, klo, o);
    qhi += __shfl_xor_sync(0xffffffffu, qhi, o);
    khi += __shfl_xor_sync(0xffffffffu, khi, o);
  }
  const float scale_q = 1.0f, scale_k = 1.0f;
#else
  const float qlo = d[0], klo = d[1], qhi = d[2], khi = d[3];  // lanes t = 0: columns 0 (q) and 1 (k)
  const float* cf = (const float*)(gstage + OFF_COEF);
  const float scale_q = cf[3 * LP + 4], scale_k = cf[3 * LP + 5];
#endif
  const float ql = __shfl_sync(0xffffffffu, qlo, src), qh = __shfl_sync(0xffffffffu, qhi, src);
  const float kl = __shfl_sync(0xffffffffu, klo, src), kh = __shfl_sync(0xffffffffu, khi, src);
  sq = (r < 8 ? ql : qh) * scale_q;
  sk = (r < 8 ? kl : kh) * scale_k;
}
#endif

#if S0_QGMMA
// S0_QGMMA: S0 q̂ and S0 k̂ of the warp's row r0 + (lane & 15), returned in every lane, in codes
// (the caller applies the row's scale), as fp8 products on tensor cores: each warpgroup of
// consumers (64 rows) takes its rows of the stage's codes as the A operand of four
// wgmma m64n8k32 e4m3 products (k steps of 32 columns), straight from the checkpoint box (K-major,
// 128-byte swizzle: what TMA wrote). B is [8][DK] e4m3 (K-major, the same swizzle), formed by the
// consumers in the stage's k̂-record area, which KDA's consumers never read and which is free once
// the coefficient warps are done (ready): rows 0-3 the parts of X = fq (e0 ⊙ q̂), rows 4-7 those of
// X = fk (e0 ⊙ k̂), part p = e4m3(r_p) with r_0 = X, r_{p+1} = 16 (r_p - part p) (exact in fp32),
// so X = sum_p 16^-p part_p to within 2^-16 |X| plus e4m3's subnormal step at the last part.
// fq = 16 / 2^ceil(log2 scale) and fk = 16 keep |X| <= 16 e0 (|q̂| <= scale, |k̂| <= 1 with
// L2NORM), far below e4m3's 448 while e0 <= 1 (g <= 0). The tensor cores sum the fp8 products
// in fp32 with ~14 bits kept (Hopper's fp8 accumulation), ~2^-14 of sum |S0 X| against the exact
// products' 2^-24: far below the fp8 codes' own 2^-4 and the bf16 output's 2^-8.
#define QG_PARTS 4
static_assert(OFF_K % 1024 == 0 && K_BYTES >= 8 * DK, "S0_QGMMA's B tile: 1024-aligned in the k̂-record area");

// The wgmma shared-memory descriptor of a K-major e4m3 tile in the 128-byte swizzle whose 8-row
// groups lie 1024 bytes apart, from its shared address (a group's start, or + 32 bytes a k step
// inside the 128-byte rows): start >> 4 (bits 0-13), leading byte offset 16 (unused in a swizzled
// K-major tile), stride byte offset 1024 (bits 32-45), layout 1 = 128-byte swizzle (bits 62-63).
__device__ __forceinline__ unsigned long long sw128_desc(u32 addr) {
  return (unsigned long long)((addr & 0x3ffffu) >> 4) | (1ull << 16) | ((unsigned long long)(1024 >> 4) << 32) | (1ull << 62);
}

// B for the unit in the stage (every consumer thread, tid 0 .. CONSUMERS * 32 - 1, 128 of them
// working: a vector and two columns each), then visible to the tensor cores (async proxy) and to
// every consumer (named barrier 2).
__device__ __forceinline__ void qgmma_b_tile(unsigned char* gstage, int tid, float fq) {
  if (tid < DK) {
    const int v = tid / (DK / 2), c = 2 * (tid % (DK / 2));
    const float f = v ? 16.0f : fq;
    const float2 x = *(const float2*)((const float*)(gstage + OFF_QK) + v * DK + c);
    float r0 = x.x * f, r1 = x.y * f;
#pragma unroll
    for (int p = 0; p < QG_PARTS; ++p) {
      const u16 code = pack_e4m3x2(r0, r1);
      *(u16*)(gstage + OFF_K + swizzle128(4 * v + p, c)) = code;
      float a, b;
      e4m3x2_to_f32(code, a, b);
      r0 = (r0 - a) * 16.0f;
      r1 = (r1 - b) * 16.0f;
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("bar.sync 2, %0;" ::"n"(CONSUMERS * 32) : "memory");
}

__device__ __forceinline__ void s0_dots_qgmma(u32 stage, int warp, int lane, float fq, float& sq, float& sk) {
  const u32 a = stage + (warp >> 2) * (64 * 128), b = stage + OFF_K;
  float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f;
  asm volatile(
      "{\n .reg .pred p;\n setp.eq.b32 p, 0, 0;\n wgmma.fence.sync.aligned;\n"
      " wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %8, p, 1, 1;\n"
      " wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %5, %9, p, 1, 1;\n"
      " wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %6, %10, p, 1, 1;\n"
      " wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %7, %11, p, 1, 1;\n"
      " wgmma.commit_group.sync.aligned;\n wgmma.wait_group.sync.aligned 0;\n}"
      : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
      : "l"(sw128_desc(a)), "l"(sw128_desc(a + 32)), "l"(sw128_desc(a + 64)), "l"(sw128_desc(a + 96)),
        "l"(sw128_desc(b)), "l"(sw128_desc(b + 32)), "l"(sw128_desc(b + 64)), "l"(sw128_desc(b + 96))
      : "memory");
  // Lane (g, t) holds D[g][2t], D[g][2t + 1], D[g + 8][2t], D[g + 8][2t + 1] of the warp's 16 rows:
  // parts 2t % 4 and 2t % 4 + 1 of q (t < 2) or k (t >= 2); the pair of lanes t, t ^ 1 sums them.
  const int t = lane & 3;
  const float w0 = (t & 1) ? 1.0f / 256.0f : 1.0f, w1 = w0 * (1.0f / 16.0f), f = (t < 2 ? 1.0f / fq : 1.0f / 16.0f);
  float lo = (d0 * w0 + d1 * w1) * f, hi = (d2 * w0 + d3 * w1) * f;
  lo += __shfl_xor_sync(0xffffffffu, lo, 1);
  hi += __shfl_xor_sync(0xffffffffu, hi, 1);
  const int r = lane & 15, src = (r & 7) * 4;
  const float ql = __shfl_sync(0xffffffffu, lo, src), qh = __shfl_sync(0xffffffffu, hi, src);
  const float kl = __shfl_sync(0xffffffffu, lo, src + 2), kh = __shfl_sync(0xffffffffu, hi, src + 2);
  sq = r < 8 ? ql : qh;
  sk = r < 8 ? kl : kh;
}
#endif

#if S0_HFMA2 && PER_CHANNEL
// S0_HFMA2, KDA: the vectors X = fq (e0 ⊙ q̂) and fk (e0 ⊙ k̂) in f16, written by unit_coefficients into
// the stage's k̂-record area once its scan has read the records (KDA's consumers never read that
// area), at H2_INDEX(vector, column): each half of head_k_dim padded to HALF + 8 halves, so that
// the two halves a warp's lanes read (lanes 0-15, 16-31) lie in other banks. fq = 2^-e for scale in
// [2^e, 2^(e+1)) and fk = H2_FK = 2 keep |X| < 2 (|q̂| <= scale, |k̂| <= 1 with L2NORM; e0 <= 1, g <= 0).
// A code times an element of X is then below 896 in magnitude, and a sum of 16 of them below 14336,
// within f16's 65504. Each f16 FMA rounds to 11 bits: a chain's 16 roundings leave at most ~2^-7 of
// sum |S0 X| (~2^-9 typically), against the exact products' 2^-24 and the codes' own 2^-4.
#define H2_HALF (HALF + 8)
#define H2_FK 2.0f
#define H2_INDEX(v, c) ((v) * 2 * H2_HALF + ((c) / HALF) * H2_HALF + (c) % HALF)
static_assert(K_BYTES >= 4 * H2_HALF * 2, "S0_HFMA2's vectors: in the k̂-record area");
#endif

#if S0_HFMA2
__device__ __forceinline__ u32 hfma2(u32 a, u32 b, u32 c) {
  u32 d;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

__device__ __forceinline__ u32 hadd2(u32 a, u32 b) {
  u32 d;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The two halves of an f16x2 summed in fp32.
__device__ __forceinline__ float f16x2_sum(u32 v) {
  float lo, hi;
  f16x2_to_f32(v, lo, hi);
  return lo + hi;
}

// S0 q̂ and S0 k̂ of row r0 + (lane & 15), in every lane, in codes (the caller applies the row's
// scale): a lane's half row of codes, a 16-byte chunk at a time as f16x2 pairs, times the f16 pairs
// of the two vectors X (each with |X| < 2) in f16x2 FMAs into two accumulators a vector (chunks 0, 2
// and 1, 3: chains of 16 products a half), then summed in fp32 over the halves and the lane pair,
// times the inverse factors ``iq`` and ``ik``. X: the q vector's half h at xq + h hstride halves,
// the k vector ``vstride`` halves after it (16-byte aligned). KDA: fq (e0 ⊙ q̂) and fk (e0 ⊙ k̂) in
// the k̂-record area (H2_INDEX); GDN: launch 1's raw q and k times powers of two that put their
// largest magnitudes in [1, 2) (QK_F16_TOP), in the qk block.
__device__ __forceinline__ void s0_dots_hfma2(const unsigned char* stage, const u16* xq, int vstride, int hstride, float iq,
                                              float ik, int r0, int lane, float& sq, float& sk) {
  const int row = r0 + (lane & 15), half = lane >> 4;
  const u16* x = xq + half * hstride;
  u32 aq[2] = {0u, 0u}, ak[2] = {0u, 0u};
#pragma unroll
  for (int c = 0; c < HALF; c += 16) {
    const uint4 ch = *(const uint4*)(stage + ckpt_offset(row, half * HALF + c));
    const uint4 q0 = *(const uint4*)(x + c), q1 = *(const uint4*)(x + c + 8);
    const uint4 k0 = *(const uint4*)(x + vstride + c), k1 = *(const uint4*)(x + vstride + c + 8);
    const u32 wd[4] = {ch.x, ch.y, ch.z, ch.w};
    const u32 qw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const u32 kw[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
    const int a = (c / 16) & 1;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const u32 s2 = e4m3x2_to_f16x2((u16)(wd[i >> 1] >> (16 * (i & 1))));
      aq[a] = hfma2(s2, qw[i], aq[a]);
      ak[a] = hfma2(s2, kw[i], ak[a]);
    }
  }
  sq = f16x2_sum(hadd2(aq[0], aq[1])) * iq;
  sk = f16x2_sum(hadd2(ak[0], ak[1])) * ik;
  sq += __shfl_xor_sync(0xffffffffu, sq, 16);
  sk += __shfl_xor_sync(0xffffffffu, sk, 16);
}
#endif

#if FLUSH_MMA
// A flush's fold of the records on tensor cores, for the warp's 16 rows r0 .. r0 + 15: the records
// term as m16n8k16 products [16 rows][LP records] x [LP records][8 columns], an n tile at a time
// into fp32 accumulators (records from w on are zero in both operands), then d k̂ᵀ and the decayed
// checkpoint added in fp32 FMAs and the rows rounded into the stage in place. The operand that is
// not bf16 goes in FLUSH_PARTS bf16 parts (split3: exact to 24 bits with three, the fp32
// checkpoint; to 16 bits with two, the bf16 and fp8 ones), smallest part first:
//   KDA: S = S0 Diag(e0) + D Uᵀ + d k̂ᵀ, A = the d records (bf16, exact), B = U's parts (fp32 U_j,
//        written over the g records by unit_coefficients, columns at u_index);
//   GDN: S = e0 S0 + A K̂ + d k̂ᵀ, A = the parts of e_j d_j (e_j from the coefficient block),
//        B = the k̂ records (bf16, exact).
// d: the new record of row r0 + (lane & 15), in every lane. Lane (g = lane / 4, t = lane % 4)
// holds rows r0 + g and r0 + g + 8, columns 2t and 2t + 1 of a tile: it reads and writes only
// those elements of the stage. fp8 (CKPT_FP8): the decayed checkpoint from the codes times the
// stage's row scales; every tile's sums held in registers, then stored as codes with each row's
// new scale (store_warp_rows_fp8), the scales to ``scale_out`` (the unit's [ROWS] row scales,
// global; unused otherwise).
#define FLUSH_PARTS (CKPT_F32 ? 3 : 2)
#define FLUSH_A (PER_CHANNEL ? 1 : FLUSH_PARTS)  // A operands (parts) a record block
// Records j and j + 1 of a bf16 [LP][stride] block at column col as one bf16x2 word, zero from w on.
__device__ __forceinline__ u32 bf16_pair(const u16* p, int stride, int j, int col, int w) {
  const u32 lo = j < w ? p[j * stride + col] : 0u, hi = j + 1 < w ? p[(j + 1) * stride + col] : 0u;
  return lo | (hi << 16);
}

// v's FLUSH_PARTS parts, largest first, each rounded to bf16 when packed: hi, mid, lo of split3,
// or with two parts hi and the remainder v - hi (exact in fp32; what split3's mid + lo add up to).
__device__ __forceinline__ void flush_parts(float v, float (&p)[3]) {
  if (FLUSH_PARTS == 2) {
    p[0] = bf16_to_f32(f32_to_bf16(v));
    p[1] = v - p[0];
  } else {
    split3(v, p[0], p[1], p[2]);
  }
}

__device__ __forceinline__ void flush_fold_mma(unsigned char* gstage, int r0, int lane, int w, float d, float* scale_out) {
  const u16* ds = (const u16*)(gstage + OFF_D);
  const float* qks = (const float*)(gstage + OFF_QK);
  const int g = lane >> 2, t = lane & 3;
  const float d_lo = __shfl_sync(0xffffffffu, d, g), d_hi = __shfl_sync(0xffffffffu, d, g + 8);
#if !PER_CHANNEL
  const float* ej = (const float*)(gstage + OFF_COEF) + 2 * LP;  // e_j
#endif
  u32 a[LP / 16][FLUSH_A][4];  // per record block and part: rows g, g + 8 x records 2t, 2t + 1 (+ 8)
#pragma unroll
  for (int s = 0; s < LP / 16; ++s) {
    const int j = s * 16 + 2 * t;
#if PER_CHANNEL
    a[s][0][0] = bf16_pair(ds, ROWS, j, r0 + g, w);
    a[s][0][1] = bf16_pair(ds, ROWS, j, r0 + g + 8, w);
    a[s][0][2] = bf16_pair(ds, ROWS, j + 8, r0 + g, w);
    a[s][0][3] = bf16_pair(ds, ROWS, j + 8, r0 + g + 8, w);
#else
#pragma unroll
    for (int r = 0; r < 4; ++r) {  // register r: rows g (+ 8 for odd r), records j (+ 8 for r >= 2)
      const int row = r0 + g + 8 * (r & 1), jr = j + 8 * (r >> 1);
      float lo[3], hi[3];
      flush_parts(jr < w ? ej[jr] * bf16_to_f32(ds[jr * ROWS + row]) : 0.0f, lo);
      flush_parts(jr + 1 < w ? ej[jr + 1] * bf16_to_f32(ds[(jr + 1) * ROWS + row]) : 0.0f, hi);
#pragma unroll
      for (int k = 0; k < FLUSH_A; ++k) a[s][k][r] = pack_bf16x2(lo[k], hi[k]);
    }
#endif
  }
#if PER_CHANNEL
  const float* us = (const float*)(gstage + OFF_G);
  const float* khat = qks + 2 * DK;
#else
  const u16* ks = (const u16*)(gstage + OFF_K);
  const float* khat = qks + DK;
  const float e0 = ((const float*)(gstage + OFF_COEF))[3 * LP];
#endif
#if CKPT_FP8
  const float* old_scale = (const float*)(gstage + OFF_SCALE);
  const float row_scale[2] = {old_scale[r0 + g], old_scale[r0 + g + 8]};
  float held[DK / 8][4];
#pragma unroll
#else
#pragma unroll 1
#endif
  for (int n0 = 0; n0 < DK; n0 += 8) {
    float acc[4] = {};
#pragma unroll
    for (int s = 0; s < LP / 16; ++s) {
      // B: column n0 + g, records j, j + 1 (b0) and j + 8, j + 9 (b1).
      const int j = s * 16 + 2 * t;
#if PER_CHANNEL
      const int js[4] = {j, j + 1, j + 8, j + 9};
      float p[4][3];
#pragma unroll
      for (int e = 0; e < 4; ++e) flush_parts(js[e] < w ? us[js[e] * DK + u_index(n0 + g)] : 0.0f, p[e]);
#pragma unroll
      for (int k = FLUSH_PARTS - 1; k >= 0; --k)
        mma_bf16(acc, a[s][0][0], a[s][0][1], a[s][0][2], a[s][0][3], pack_bf16x2(p[0][k], p[1][k]),
                 pack_bf16x2(p[2][k], p[3][k]));
#else
      const u32 b0 = bf16_pair(ks, DK, j, n0 + g, w), b1 = bf16_pair(ks, DK, j + 8, n0 + g, w);
#pragma unroll
      for (int k = FLUSH_A - 1; k >= 0; --k) mma_bf16(acc, a[s][k][0], a[s][k][1], a[s][k][2], a[s][k][3], b0, b1);
#endif
    }
    const int col = n0 + 2 * t;
#if PER_CHANNEL
    const float e0a = qks[3 * DK + col], e0b = qks[3 * DK + col + 1];
#else
    const float e0a = e0, e0b = e0;
#endif
    const float ka = khat[col], kb = khat[col + 1];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r0 + g + 8 * h;
      const float dr = h ? d_hi : d_lo;
      unsigned char* at = gstage + ckpt_offset(row, col);
#if CKPT_F32
      const float2 s0 = *(const float2*)at;
      *(float2*)at = make_float2(fmaf(e0a, s0.x, fmaf(dr, ka, acc[2 * h])), fmaf(e0b, s0.y, fmaf(dr, kb, acc[2 * h + 1])));
#elif CKPT_FP8
      float c0, c1;
      e4m3x2_to_f32(*(const u16*)at, c0, c1);
      held[n0 / 8][2 * h] = fmaf(e0a, c0 * row_scale[h], fmaf(dr, ka, acc[2 * h]));
      held[n0 / 8][2 * h + 1] = fmaf(e0b, c1 * row_scale[h], fmaf(dr, kb, acc[2 * h + 1]));
#else
      const u32 s0 = *(const u32*)at;
      *(u32*)at = pack_bf16x2(fmaf(e0a, __uint_as_float(s0 << 16), fmaf(dr, ka, acc[2 * h])),
                              fmaf(e0b, __uint_as_float(s0 & 0xffff0000u), fmaf(dr, kb, acc[2 * h + 1])));
#endif
    }
  }
#if CKPT_FP8
  store_warp_rows_fp8(gstage, r0, lane, held, scale_out);
#endif
}
#endif

#if !FLUSH_MMA
// A flush's fold in exact fp32 FMAs for the warp's 16 rows r0 .. r0 + 15 (FLUSH_MMA: flush_fold_mma):
//   GDN: S = e0 S0 + sum_{j<w} (e_j d_j) k̂_jᵀ + d k̂ᵀ   (k̂_j: the bf16 k records),
//   KDA: S = S0 Diag(e0) + sum_{j<w} d_j U_jᵀ + d k̂ᵀ   (U_j = e_j ⊙ k̂_j, fp32, written over the g
//        records by unit_coefficients, columns at u_index; e0 per column in the qk block),
// w = L - 1, rounded into the stage in place; the caller stores the rows. A lane holds 8 rows x 4
// columns (FOLD_LPR lanes a row: 32, or 16 for head_k_dim 64, the warp then taking two sets of 8
// rows at once), so that each record's operand read from shared memory (4 columns of k̂_j or U_j)
// serves 8 rows and the 8 rows' weights d_j are one 16-byte broadcast: a record costs the warp 2-5
// shared-memory wavefronts, where a row a lane (each lane reading every column of a record for its
// one row) cost it 32. Passes of 8 rows, over column blocks of 128 (head_k_dim 256: two).
// fp8 (CKPT_FP8, head_k_dim 128: a pass holds whole rows): the decayed checkpoint from the codes
// times the stage's row scales; each row's new scale max |row| / 448 (1 for a zero row) from a
// max reduce-scatter of the pass's 8 rows over the warp (lane l: row l % 8), the values divided by
// it to nearest even (reference.rounding.fp8_row_encode's rule); lanes 0-7 write the pass's scales
// to ``scale_out`` (the unit's [ROWS] row scales, global; unused otherwise).
// d: the new record of row r0 + (lane & 15), in lanes lane and lane + 16.
#define FOLD_COLS 4                                             // columns of a lane
#define FOLD_LPR (DK / FOLD_COLS < 32 ? DK / FOLD_COLS : 32)  // lanes a row
#define FOLD_SETS (32 / FOLD_LPR)                               // sets of 8 rows a pass
__device__ __forceinline__ void flush_fold_fma(unsigned char* gstage, int r0, int lane, float d, float* scale_out) {
  const u16* ds = (const u16*)(gstage + OFF_D);
  const float* qks = (const float*)(gstage + OFF_QK);
#if PER_CHANNEL
  const float* us = (const float*)(gstage + OFF_G);
  const float* khat = qks + 2 * DK;
#else
  const u16* ks = (const u16*)(gstage + OFF_K);
  const float* ej = (const float*)(gstage + OFF_COEF) + 2 * LP;  // e_j, then e0
  const float* khat = qks + DK;
#endif
  const int set = lane / FOLD_LPR;
#pragma unroll 1
  for (int p = 0; p < 16; p += 8 * FOLD_SETS) {
    const int rb = r0 + p + 8 * set;  // the lane's rows rb .. rb + 7
    float dr[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) dr[i] = __shfl_sync(0xffffffffu, d, p + 8 * set + i);
#pragma unroll 1
    for (int col = FOLD_COLS * (lane % FOLD_LPR); col < DK; col += FOLD_COLS * FOLD_LPR) {
      float e0c[FOLD_COLS], kc[FOLD_COLS], s[8][FOLD_COLS];
      *(float4*)kc = lds_float4(khat + col);
#if PER_CHANNEL
      *(float4*)e0c = lds_float4(qks + 3 * DK + col);
#else
#pragma unroll
      for (int c = 0; c < FOLD_COLS; ++c) e0c[c] = ej[LP];
#endif
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        load_quad(gstage, rb + i, col, s[i]);
#if CKPT_FP8
        const float sc = ((const float*)(gstage + OFF_SCALE))[rb + i];
#pragma unroll
        for (int c = 0; c < FOLD_COLS; ++c) s[i][c] *= sc;
#endif
#pragma unroll
        for (int c = 0; c < FOLD_COLS; ++c) s[i][c] = fmaf(e0c[c], s[i][c], dr[i] * kc[c]);
      }
#pragma unroll 16  // all of L = 16's records; L = 32 whole would spill (the fp32 builds' 128 registers)
      for (int j = 0; j < FOLD_RECS; ++j) {
        float a[8];  // rows rb .. rb + 7's weights of record j
        u32 dw[4];
        load_words(ds + j * ROWS + rb, dw);
        unpack_bf16x2(dw, a);
#if PER_CHANNEL
        *(float4*)kc = lds_float4(us + j * DK + u_index(col));
#else
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] *= ej[j];
        u32 kw[2];
        load_words(ks + j * DK + col, kw);
        unpack_bf16x2(kw, kc);
#endif
#pragma unroll
        for (int i = 0; i < 8; ++i) {
#pragma unroll
          for (int c = 0; c < FOLD_COLS; ++c) s[i][c] = fmaf(a[i], kc[c], s[i][c]);
        }
      }
#if CKPT_FP8
      float m[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) m[i] = max_abs<FOLD_COLS>(s[i]);
      const float new_scale = fp8_row_scale(warp_reduce_scatter<8, MaxOp>(m, lane));  // row rb + lane % 8's
      const float new_inverse = __frcp_rn(new_scale);
      if (lane < 8) scale_out[rb + lane] = new_scale;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float sc = __shfl_sync(0xffffffffu, new_scale, i), inverse = __shfl_sync(0xffffffffu, new_inverse, i);
#pragma unroll
        for (int c = 0; c < FOLD_COLS; ++c) s[i][c] = div_by_reciprocal(s[i][c], sc, inverse);
      }
#endif
#pragma unroll
      for (int i = 0; i < 8; ++i) store_quad(gstage, rb + i, col, s[i]);
    }
  }
}
#endif

#if ONE_LAUNCH && PER_CHANNEL
// KDA: column c's suffix scan over records w-1 .. 0 (unit_coefficients): u_j = e_j k̂_j[c] with
// e_j = exp(gc + sum_{j<i<w} g_i) (exp2_ftz of fma(sum, LOG2E, gc2), gc2 = gc LOG2E), added into
// the scores' partial sums pq[j] += u_j qc, pk[j] += u_j kc; returns sum_{i<w} g_i. The records go
// in blocks of SCAN_BLOCK, from the highest block that holds one below w: a block's g and k̂ are
// all loaded before its arithmetic (so that no load waits behind the previous record's), then its
// records scanned without branches, those from w on masked (u and g taken as zero). FLUSH (w ==
// L-1): u_j also stored at U_j's u_index(c) over slot j, after a __syncwarp once the warp has read
// the block's g (whole warps: DK is a multiple of 32). Two builds, so that the steps that do not
// flush run without the warp barriers.
#define SCAN_BLOCK 4
template <bool FLUSH>
__device__ __forceinline__ float scan_column(unsigned char* gstage, int w, int c, float gc2, float qc, float kc,
                                             float (&pq)[LP], float (&pk)[LP]) {
  const grec_t* gs = (const grec_t*)(gstage + OFF_G);
  const u16* ks = (const u16*)(gstage + OFF_K);
  float* us = (float*)(gstage + OFF_G);
  float acc = 0.0f;
#pragma unroll
  for (int j0 = LP - SCAN_BLOCK; j0 >= 0; j0 -= SCAN_BLOCK) {
    if (j0 < w) {  // the unit's w: the same in every thread
      float gj[SCAN_BLOCK], kj[SCAN_BLOCK];
#pragma unroll
      for (int e = 0; e < SCAN_BLOCK; ++e) {
        gj[e] = f16_to_f32(gs[G_REC(j0 + e) * DK + c]);
        kj[e] = bf16_to_f32(ks[(j0 + e) * DK + c]);
      }
      if (FLUSH) __syncwarp();
#pragma unroll
      for (int e = SCAN_BLOCK - 1; e >= 0; --e) {
        const int j = j0 + e;
        const bool live = j < w;
        const float u = live ? exp2_ftz(fmaf(acc, LOG2E, gc2)) * kj[e] : 0.0f;
        if (FLUSH && live) us[j * DK + u_index(c)] = u;
        pq[j] += u * qc;
        pk[j] += u * kc;
        acc += live ? gj[e] : 0.0f;
      }
    }
  }
  return acc;
}
#endif

#if ONE_LAUNCH
// GDN with two warps or more forming the coefficients: the first forms the decays after the
// first barrier, while the others scale the qk block, instead of before it, where the others
// waited for it at the barrier.
#define DECAYS_LATE (!PER_CHANNEL && CWARPS > 1)

// GDN (one warp, lane j record j): the decays e_j (0 from w on) and e0 into the coefficient block
// from the stage's g records; ``grec_w`` (not null) takes this step's g.
__device__ __forceinline__ void stage_decays(unsigned char* gstage, int w, float gh, int lane, grec_t* grec_w) {
  float* cf = (float*)(gstage + OFF_COEF);
  float e0;
  const float* gs = (const float*)(gstage + OFF_G);  // GDN's g records
  const float ej = record_decays(lane < w ? gs[lane] : 0.0f, w, gh, lane, e0);
  if (lane < LP) cf[2 * LP + lane] = ej;
  if (lane == 0) {
    cf[3 * LP] = e0;
    if (grec_w) grec_w[0] = gh;
  }
}

// The norms' factors from |q|² and |k|²: q̂ = rq q, k̂ = rk k with rq = scale / |q|, rk = 1 / |k|
// (L2NORM; else rq = scale, rk = 1).
__device__ __forceinline__ void qk_factors(float nq, float nk, float scale, float& rq, float& rk) {
#if L2NORM
  rq = rsqrtf(nq + 1e-6f) * scale;
  rk = rsqrtf(nk + 1e-6f);
#else
  rq = scale;
  rk = 1.0f;
#endif
}

// The CWARPS warps' partial norms (rn: [CWARPS][4] of |q|², |k|², q . k) summed in a fixed order,
// their factors (qk_factors) into rq and rk; returns q . k.
__device__ __forceinline__ float summed_norms(const float* rn, float scale, float& rq, float& rk) {
  float nq = 0.0f, nk = 0.0f, nqk = 0.0f;
#pragma unroll
  for (int i = 0; i < CWARPS; ++i) {
    nq += rn[i * 4];
    nk += rn[i * 4 + 1];
    nqk += rn[i * 4 + 2];
  }
  qk_factors(nq, nk, scale, rq, rk);
  return nqk;
}

// Where a unit appends the step's k̂ (record w of the key head's row, from the kernel's k_records and
// its strides): part 0 of the key head's first value head, else null. A macro, not a function:
// written in place it keeps the routed builds' code as it was (as an inline function NVRTC moved
// the strides' parameter loads).
#define K_APPEND_AT(slot, h, part, w) \
  ((part) == 0 && (h) % VPK == 0 ? k_records + (slot) * skr_slot + ((h) / VPK) * skr_head + (w) * skr_pos : nullptr)

// One launch (KDA; GDN when asked): a unit's coefficients, formed by CWARPS warps together (the
// consumer warps, or the COEF_WARPS coefficient warps; tid: 0 .. CWARPS*32-1, named barrier 1)
// from the stage the producer filled: the step's q, k
// (bf16; KDA: g, G_CODE) at OFF_IN, records 0..w-1 of k̂ (OFF_K) and g (OFF_G; KDA fp16, GDN a
// scalar each in fp32). q̂ = scale q / |q|, k̂ = k / |k| (with L2NORM). One pass, a thread a
// column c, on the raw q and k (the norms are scalars, applied once the pass's sums are in):
//   KDA: e_j = exp(g + sum_{j<i<w} g_i) for j < w from a suffix scan over the column's g records
//        (exact sums, no prefix subtraction), e0 = exp(g + sum_{i<w} g_i), U_j = e_j ⊙ k̂_j
//        (scan_column; a flush, w == L-1, writes it over slot j at u_index: lanes 0-15 to the
//        slot's lower half, which holds no g, lanes 16-31 over the g of two lanes of the same
//        warp once the warp has read them); scores sq_j = U_j . q̂, sk_j = U_j . k̂; the qk block
//        e0 ⊙ q̂, e0 ⊙ k̂, k̂, e0; e0 = 1 in the coefficient block.
//   GDN: scores k̂_j . q̂ and k̂_j . k̂, then times e_j (warp 0: suffix sums of the g records, a
//        lane a record); the qk block q̂, k̂; e_j and e0 in the coefficient block.
// The scores and |q|², |k|², q . k are per-warp sums (a butterfly reduce-scatter for the scores)
// added over the warps in a fixed order after the first barrier; each thread then scales its own
// columns of the qk block; the second barrier publishes the blocks. Writes the stage's coefficient
// block (as launch 1 does) and qk block; appends g (part 0 of the head; KDA's rounded to fp16) and
// k̂ (part 0 of the key head's first value head) at w below L-1 (records 0..w-1, the only ones read,
// are not written).
__device__ __forceinline__ void unit_coefficients(unsigned char* gstage, int w, int tid, float beta, float gh,
                                                  float scale, grec_t* grec_w, u16* krec_w) {
  const int lane = tid & 31, warp = tid >> 5;
  const u16* qin = (const u16*)(gstage + OFF_IN);
  const u16* kin = qin + DK;
  float* qks = (float*)(gstage + OFF_QK);
  float* cf = (float*)(gstage + OFF_COEF);
  float* red = (float*)(gstage + OFF_RED);  // [CWARPS][2 LP] scores, then [CWARPS][4] norms
  float* rn = red + CWARPS * 2 * LP;
  const bool append = w < LREC - 1;
  float nq = 0.0f, nk = 0.0f, nqk = 0.0f;
  float pq[LP], pk[LP];
#pragma unroll
  for (int j = 0; j < LP; ++j) pq[j] = pk[j] = 0.0f;
  for (int c = tid; c < DK; c += CWARPS * 32) {
    const float qc = bf16_to_f32(qin[c]), kc = bf16_to_f32(kin[c]);
    nq += qc * qc;
    nk += kc * kc;
    nqk += qc * kc;
#if PER_CHANNEL
    const float gc = load_f32<G_CODE>(qin + 2 * DK, c), gc2 = gc * LOG2E;
    const float acc = w == LREC - 1 ? scan_column<true>(gstage, w, c, gc2, qc, kc, pq, pk)
                                    : scan_column<false>(gstage, w, c, gc2, qc, kc, pq, pk);
    const float e0 = exp2_ftz(fmaf(acc, LOG2E, gc2));
    qks[c] = e0 * qc;
    qks[DK + c] = e0 * kc;
    qks[2 * DK + c] = kc;
    qks[3 * DK + c] = e0;
    if (grec_w && append) grec_w[c] = grec_value(gc);
#else
    const u16* ks = (const u16*)(gstage + OFF_K);
#pragma unroll
    for (int j = 0; j < LP; ++j) {
      if (j < w) {
        const float kj = bf16_to_f32(ks[j * DK + c]);
        pq[j] += kj * qc;
        pk[j] += kj * kc;
      }
    }
    qks[c] = qc;
    qks[DK + c] = kc;
#endif
  }
  // Lane l < 16 of chunk c0 holds the warp's part of record c0 + l's q score, lane 16 + l its k score.
#pragma unroll
  for (int c0 = 0; c0 < LP; c0 += 16) {
    float v[32];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      v[j] = pq[c0 + j];
      v[16 + j] = pk[c0 + j];
    }
    const float r = warp_reduce_scatter<32>(v, lane);
    red[warp * 2 * LP + (lane < 16 ? c0 + lane : LP + c0 + lane - 16)] = r;
  }
  nq = warp_sum(nq);
  nk = warp_sum(nk);
  nqk = warp_sum(nqk);
  if (lane == 0) {
    rn[warp * 4] = nq;
    rn[warp * 4 + 1] = nk;
    rn[warp * 4 + 2] = nqk;
  }
#if !PER_CHANNEL && !DECAYS_LATE
  if (warp == 0) stage_decays(gstage, w, gh, lane, append ? grec_w : nullptr);
#endif
#if CONSUMER_SUMS
  // The partial sums are the hand-off (each thread's writes released by its own arrival on ready);
  // the consumers form the norms, the scores and the k̂ append (consumer_norms).
  if (tid == 0) {
    cf[3 * LP] = 1.0f;
    coef_scalars(cf, 0.0f, beta, w, 1.0f, 1.0f);  // kq: formed by the consumers
  }
  return;
#endif
  asm volatile("bar.sync 1, %0;" ::"n"(CWARPS * 32) : "memory");
  float rq, rk;
  nqk = summed_norms(rn, scale, rq, rk);
#if S0_HFMA2
  float fq_inverse;  // (unused here: the consumers form their own)
  const float fq = f16_range_scale(scale, 0, fq_inverse);  // 2^-e for scale in [2^e, 2^(e+1))
#endif
  // The qk block's columns scaled: q̂ and k̂ (DECAYS_LATE: by the warps but the first, which forms
  // the decays meanwhile; else each thread its own columns, written by it above).
#if DECAYS_LATE
  for (int c = tid - 32; c >= 0 && c < DK; c += (CWARPS - 1) * 32) {
#else
  for (int c = tid; c < DK; c += CWARPS * 32) {
#endif
    qks[c] *= rq;
    qks[DK + c] *= rk;
#if PER_CHANNEL
    const float kh = qks[2 * DK + c] * rk;
    qks[2 * DK + c] = kh;
#else
    const float kh = qks[DK + c];
#endif
    if (krec_w && append) krec_w[c] = f32_to_bf16(kh);
#if S0_MMA && PER_CHANNEL
    frag_column(gstage, c, qks[c], qks[DK + c]);
#endif
#if S0_HFMA2
    u16* const x = (u16*)(gstage + OFF_K);  // the scan has read the k̂ records (the first barrier)
    x[H2_INDEX(0, c)] = f32_to_f16(qks[c] * fq);
    x[H2_INDEX(1, c)] = f32_to_f16(qks[DK + c] * H2_FK);
#endif
  }
#if DECAYS_LATE
  // The scores: the first warp, after its decays.
  if (warp == 0) stage_decays(gstage, w, gh, lane, append ? grec_w : nullptr);
  __syncwarp();
  for (int t = warp == 0 ? lane : 2 * LP; t < 2 * LP; t += 32) {
#else
  for (int t = tid; t < 2 * LP; t += CWARPS * 32) {
#endif
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < CWARPS; ++i) sum += red[i * 2 * LP + t];
    sum *= t < LP ? rq : rk;
    cf[t] = PER_CHANNEL ? sum : sum * cf[2 * LP + (t % LP)];
  }
  if (tid == 0) {
    if (PER_CHANNEL) cf[3 * LP] = 1.0f;
    coef_scalars(cf, nqk * rq * rk, beta, w, rq, rk);
  }
  if (!COEF_WARPS) asm volatile("bar.sync 1, %0;" ::"n"(CWARPS * 32) : "memory");  // else: ready's arrivals
}

#if REC_WARPS
#define REC_RECS pow2_at_least((LP + CWARPS - 1) / CWARPS)
#define REC_CHUNK (REC_RECS < 16 ? REC_RECS : 16)

// REC_WARPS: from a lane's PER_LANE columns of the raw q and k (the warp holding all of
// head_k_dim), in every lane: q̂ = rq q, k̂ = rk k (rq = scale / |q|, rk = 1 / |k| with L2NORM,
// else scale and 1) and q . k.
__device__ __forceinline__ void norm_factors(const float* qv, const float* kv, float scale, float& rq, float& rk,
                                             float& nqk) {
  float nq = 0.0f, nk = 0.0f;
  nqk = 0.0f;
#pragma unroll
  for (int i = 0; i < PER_LANE; ++i) {
    nq += qv[i] * qv[i];
    nk += kv[i] * kv[i];
    nqk += qv[i] * kv[i];
  }
  nq = warp_sum(nq);
  nk = warp_sum(nk);
  nqk = warp_sum(nqk);
  qk_factors(nq, nk, scale, rq, rk);
}

// GDN, one launch, REC_WARPS: unit_coefficients' blocks with the CWARPS warps splitting the records
// (REC_RECS a warp, from record warp REC_RECS; every column, PER_LANE a lane) instead of the
// columns. Each warp sums its records' scores k̂_j . q and k̂_j . k over the whole of head_k_dim
// itself (one reduce-scatter of 2 REC_CHUNK values a chunk) and forms the norms |q|², |k|², q . k
// and the decays (a lane a record) itself, so that it writes its records' scores, times rq or rk
// and e_j, straight into the coefficient block: no partial sums in shared memory and one named
// barrier instead of two. Warp 0 writes e_j, e0 and the scalars and appends g; lane l of warp
// l % CWARPS writes its columns of q̂, k̂ and appends k̂.
__device__ __forceinline__ void records_coefficients(unsigned char* gstage, int w, int tid, float beta, float gh,
                                                     float scale, grec_t* grec_w, u16* krec_w) {
  const int lane = tid & 31, warp = tid >> 5, j0 = warp * REC_RECS, c0 = lane * PER_LANE;
  const u16* qin = (const u16*)(gstage + OFF_IN);
  const u16* ks = (const u16*)(gstage + OFF_K);
  const float* gs = (const float*)(gstage + OFF_G);  // GDN's g records
  float* qks = (float*)(gstage + OFF_QK);
  float* cf = (float*)(gstage + OFF_COEF);
  const bool append = w < LREC - 1;
  float qv[PER_LANE], kv[PER_LANE], kr[REC_RECS][PER_LANE];
  load_lane_bf16(qin + c0, qv);
  load_lane_bf16(qin + DK + c0, kv);
#pragma unroll
  for (int j = 0; j < REC_RECS; ++j) {
    if (j0 + j < w) {
      load_lane_bf16(ks + (j0 + j) * DK + c0, kr[j]);
    } else {
#pragma unroll
      for (int i = 0; i < PER_LANE; ++i) kr[j][i] = 0.0f;
    }
  }
  const float gj = lane < w ? gs[lane] : 0.0f;
  float rq, rk, nqk;
  norm_factors(qv, kv, scale, rq, rk, nqk);
  float e0;
  const float ej = record_decays(gj, w, gh, lane, e0);  // lane j: e_j
#pragma unroll
  for (int c = 0; c < REC_RECS; c += REC_CHUNK) {
    const float r = chunk_scores<REC_RECS, REC_CHUNK>(kr, qv, kv, c, j0, w, lane);
    const int record = j0 + c + (lane & (REC_CHUNK - 1));
    const float e = __shfl_sync(0xffffffffu, ej, record & 31);
    if (lane < 2 * REC_CHUNK && record < LP) cf[(lane < REC_CHUNK ? 0 : LP) + record] = r * (lane < REC_CHUNK ? rq : rk) * e;
  }
  if (warp == 0) {
    if (lane < LP) cf[2 * LP + lane] = ej;
    if (lane == 0) {
      cf[3 * LP] = e0;
      coef_scalars(cf, nqk * rq * rk, beta, w, rq, rk);
      if (grec_w && append) grec_w[0] = gh;
    }
  }
  if (lane % CWARPS == warp) {
#pragma unroll
    for (int i = 0; i < PER_LANE; ++i) {
      qks[c0 + i] = qv[i] * rq;
      qks[DK + c0 + i] = kv[i] * rk;
      if (krec_w && append) krec_w[c0 + i] = f32_to_bf16(kv[i] * rk);
    }
  }
  if (!COEF_WARPS) asm volatile("bar.sync 1, %0;" ::"n"(CWARPS * 32) : "memory");  // else: ready's arrivals
}
#endif

#if CONSUMER_SUMS
// A consumer warp's share of CONSUMER_SUMS: from the coefficient warps' partial norms (rn) the
// factors rq = scale / |q| and rk = 1 / |k| (with L2NORM; else scale and 1) and kq = q̂ . k̂, in
// every lane; from their partial scores (red) score t of lane t and t + 32 (t < 2 LP: q scores,
// then k scores), times rq or rk, in lo and hi. ``krec_w`` (not null): lane-strided columns of
// k̂ = rk k appended from the qk block's raw k.
__device__ __forceinline__ void consumer_norms(const unsigned char* gstage, int lane, float scale, u16* krec_w,
                                               float& rq, float& rk, float& kq, float& lo, float& hi) {
  const float* red = (const float*)(gstage + OFF_RED);
  const float nqk = summed_norms(red + CWARPS * 2 * LP, scale, rq, rk);
  kq = nqk * rq * rk;
  lo = hi = 0.0f;
#pragma unroll
  for (int i = 0; i < CWARPS; ++i) {
    lo += red[i * 2 * LP + lane];
    if (2 * LP > 32) hi += red[i * 2 * LP + (32 + lane) % (2 * LP)];
  }
  lo *= lane < LP ? rq : rk;
  hi *= rk;  // 2 LP > 32: t = 32 + lane >= LP
  if (krec_w) {
    const float* kraw = (const float*)(gstage + OFF_QK) + 2 * DK;
    for (int c = lane; c < DK; c += 32) krec_w[c] = f32_to_bf16(kraw[c] * rk);
  }
}
#endif

// One launch: unit_coefficients for the unit of (slot >= 0, value head h, part) in a stage, with w,
// beta and GDN's g from the stage's meta and the append positions: g at part 0, k̂ at part 0 of the
// key head's first value head.
__device__ __forceinline__ void stage_coefficients(unsigned char* gstage, int slot, int h, int part, int tid, float scale,
                                                   grec_t* g_records, long long sgr_slot, long long sgr_head,
                                                   long long sgr_pos, u16* k_records, long long skr_slot,
                                                   long long skr_head, long long skr_pos) {
  const int* meta = (const int*)(gstage + OFF_META);
  const int w = meta[1];
  grec_t* grec_w = part == 0 ? g_records + slot * sgr_slot + h * sgr_head + w * sgr_pos : nullptr;
  u16* krec_w = K_APPEND_AT(slot, h, part, w);
#if REC_WARPS
  records_coefficients(gstage, w, tid, ((const float*)meta)[2], ((const float*)meta)[3], scale, grec_w, krec_w);
#else
  unit_coefficients(gstage, w, tid, ((const float*)meta)[2], ((const float*)meta)[3], scale, grec_w, krec_w);
#endif
}

// One launch (GDN): a 4-byte asynchronous copy to shared memory, and the arrival that makes the
// full barrier ``bar`` wait for the executing thread's copies (its pending count raised by one at
// once, lowered when they land: no .noinc).
__device__ __forceinline__ void cp_async4(u32 dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

__device__ __forceinline__ void cp_async_mbar_arrive(u32 bar) {
  asm volatile("cp.async.mbarrier.arrive.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// One launch: a unit's cursor read counted (after the read); the row's last advances the cursor.
__device__ __forceinline__ void count_cursor_read(int u, int units, int slot, int w, int* arrivals, int* cursor) {
  if (u >= units || slot < 0) return;
  advance_after_last_arrival(count_arrival(arrivals, slot), VHEADS * PARTS, arrivals, cursor, slot, w, LREC);
}

#if DEALT_UNITS || CLAIMED_UNITS
// DEALT_UNITS, CLAIMED_UNITS: the slots and cursors of rows r0 + 32 m + lane, m < 8 (slot -1 and
// cursor 0 past the batch and for a padding row), the slot loads and then the cursor loads in flight
// together.
__device__ __forceinline__ void read_rows8(const int* slot_ids, const int* cursor, int batch, int r0, int lane, int (&slot)[8],
                                           int (&w)[8]) {
#pragma unroll
  for (int m = 0; m < 8; ++m) slot[m] = r0 + m * 32 + lane < batch ? slot_ids[r0 + m * 32 + lane] : -1;
#pragma unroll
  for (int m = 0; m < 8; ++m) w[m] = slot[m] >= 0 ? cursor[slot[m]] : 0;
}
#endif

#if DEALT_UNITS

// DEALT_UNITS: the rows' flushing bits (a slot, cursor L-1) in ``order``'s words 0..31 (bit b % 32 of
// word b / 32), their prefix counts (flush rows below word j) in words 32..64 (64: all of them). Every
// CTA builds the same order from the same reads: the cursors advance only once every CTA has counted
// itself (count_launch_reads, after its last unit). Lanes take rows lane, lane + 32, ..., 8 a round
// (the slot loads, then the cursor loads, in flight together). Returns the slot of the first row
// that has one (-1: none), in every lane.
__device__ __forceinline__ int dealing_order(const int* slot_ids, const int* cursor, int batch, u32* order, int lane) {
  int first = -1;
  for (int r0 = 0; r0 < batch; r0 += 8 * 32) {
    int slot[8], w[8];
    read_rows8(slot_ids, cursor, batch, r0, lane, slot, w);
#pragma unroll
    for (int m = 0; m < 8; ++m) {
      const u32 f = __ballot_sync(0xffffffffu, slot[m] >= 0 && w[m] == LREC - 1);
      if (lane == 0 && r0 + m * 32 < batch) order[r0 / 32 + m] = f;
      const u32 live = __ballot_sync(0xffffffffu, slot[m] >= 0);
      const int s = __shfl_sync(0xffffffffu, slot[m], live ? __ffs(live) - 1 : 0);
      if (first < 0 && live) first = s;
    }
  }
  __syncwarp();
  const int words = (batch + 31) / 32, n = lane < words ? __popc(order[lane]) : 0;
  int below = n;  // inclusive scan, then less the lane's own
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, below, o);
    if (lane >= o) below += t;
  }
  order[32 + lane] = below - n;
  if (lane == 31) order[64] = below;
  __syncwarp();
  return first;
}

// DEALT_UNITS: CTA c's share of the launch's units. The flushing rows' F units (in row order, a
// row's units b VHEADS PARTS + j consecutive) are dealt c, c + G, ... (G = gridDim.x), the other rows'
// c2, c2 + G, ... with c2 = (c - F) mod G: as many units as the fixed order gives CTA c, of them
// floor or ceil of F / G flush units. Its nf flush units lie spread evenly among its n units: its
// k-th unit flushes where floor((k nf + h) / n) steps, h = n - 1 (its first unit, then every n / nf:
// a flush's longer arithmetic then covers the ring's first copies; KDA fp8 64 on an H100, us, 29.12
// against 32.02 with DEALT_SPREAD) or with DEALT_SPREAD h = n / 2 (none first: GDN fp32 64, one CTA
// of two stages a multiprocessor, 111.18 against 113.61).
struct DealtShare {
  int c2, nf, n;
};

__device__ __forceinline__ DealtShare dealt_share(const u32* order, int units) {
  const int c = blockIdx.x, grid = gridDim.x, f_units = (int)order[64] * (VHEADS * PARTS);
  DealtShare d;
  d.c2 = ((c - f_units) % grid + grid) % grid;
  d.nf = f_units > c ? (f_units - c - 1) / grid + 1 : 0;
  d.n = (units - c - 1) / grid + 1;  // the grid is at most the units
  return d;
}

// DEALT_UNITS: the CTA's k-th unit and its slot (unit ``units``, slot -1 past its last). Its cursor
// is read where it is used (no cursor advances before every CTA's last unit).
__device__ __forceinline__ void dealt_unit(int k, int units, const u32* order, DealtShare d, const int* slot_ids,
                                           int& unit, int& slot) {
  unit = units;
  slot = -1;
  if (k < d.n) {
    const int h = DEALT_SPREAD ? d.n / 2 : d.n - 1;
    const int before = (k * d.nf + h) / d.n;  // flush units among the CTA's first k
    const bool flushing = ((k + 1) * d.nf + h) / d.n > before;
    const int p = flushing ? (int)blockIdx.x + before * (int)gridDim.x : d.c2 + (k - before) * (int)gridDim.x;
    const int r = p / (VHEADS * PARTS);  // the r-th flushing (else other) row
    int j = 0;                           // its word: the first with more such rows below its end than r
    while ((flushing ? (int)order[32 + j + 1] : 32 * (j + 1) - (int)order[32 + j + 1]) <= r) ++j;
    const int below = flushing ? (int)order[32 + j] : 32 * j - (int)order[32 + j];
    const int b = 32 * j + (int)__fns(flushing ? order[j] : ~order[j], 0, r - below + 1);
    unit = b * (VHEADS * PARTS) + (p - r * (VHEADS * PARTS));
    slot = slot_ids[b];
  }
}

#endif

#if DEALT_UNITS || CLAIMED_UNITS
// DEALT_UNITS, CLAIMED_UNITS: the CTA counted once its producer has issued its last unit (every
// cursor read and claim of it done), 1 << LAUNCH_SHIFT in the arrivals of the launch's first row
// with a slot (``first``; CLAIMED_UNITS' claims are the bits below); the launch's last count
// advances every row's cursor (0 after a flush, else w + 1; 8 rows a lane a round, read_rows8) and
// zeroes that word.
__device__ __forceinline__ void count_launch_reads(int first, int batch, const int* slot_ids, int* arrivals, int* cursor,
                                                   int lane) {
  if (first < 0) return;
  int arrived = 0;
  if (lane == 0) arrived = count_arrival<1 << LAUNCH_SHIFT>(arrivals, first);
  if (__shfl_sync(0xffffffffu, arrived, 0) >> LAUNCH_SHIFT != (int)gridDim.x - 1) return;
  for (int r0 = 0; r0 < batch; r0 += 8 * 32) {
    int slot[8], w[8];
    read_rows8(slot_ids, cursor, batch, r0, lane, slot, w);
#pragma unroll
    for (int m = 0; m < 8; ++m)
      if (slot[m] >= 0) cursor[slot[m]] = next_cursor(w[m], LREC);
  }
  if (lane == 0) arrivals[first] = 0;
}
#endif

// FLUSH_FIRST: the place in its block's order of the unit of lane ``lane`` (``slot``, cursor ``w``):
// the flushing units (a slot, w = L-1) first, then the others, each in lane order, so that lanes
// past the last unit (slot -1) stay last. Every lane of the warp calls it.
__device__ __forceinline__ int flush_first_place(int slot, int w, int lane) {
  const u32 flushing = __ballot_sync(0xffffffffu, slot >= 0 && w == LREC - 1);
  const u32 below = (1u << lane) - 1u;
  return (flushing >> lane & 1u) ? __popc(flushing & below) : __popc(flushing) + __popc(~flushing & below);
}

// One launch: element (batch row, value head) of unit u of a [batch, VHEADS] input (beta; GDN's g)
// in fp32, 0 past the last unit.
template <int CODE>
__device__ __forceinline__ float unit_scalar(int u, int units, const void* p, long long s_batch, long long s_head) {
  if (u >= units) return 0.0f;
  const int bh = u / PARTS, b = bh / VHEADS, h = bh - b * VHEADS;
  return load_f32<CODE>(p, b * s_batch + h * s_head);
}

#if CLAIMED_UNITS
// CLAIMED_UNITS: the slot of the launch's first row that has one (-1: none), in every lane; rows
// 32 at a time, a lane each.
__device__ __forceinline__ int first_live_slot(const int* slot_ids, int batch, int lane) {
  for (int r0 = 0; r0 < batch; r0 += 32) {
    const int slot = r0 + lane < batch ? slot_ids[r0 + lane] : -1;
    const u32 live = __ballot_sync(0xffffffffu, slot >= 0);
    if (live) return __shfl_sync(0xffffffffu, slot, __ffs(live) - 1);
  }
  return -1;
}

// CLAIMED_UNITS: the producer's claimed units, unit pool + n for n the launch word's low CLAIM_BITS
// bits before each claim's increment. Lane 0 advances a pipeline three units deep after each unit
// it issues (from its (STAGES - 2)-th), so that no round trip waits behind the stage copies it
// follows: a claim requested (three units ahead), the row of the claim requested a unit ago read
// (slot, beta and GDN's g: two ahead), the cursor of the row read a unit ago (one ahead; cursors
// advance only at the launch's last count). ``at`` is the word + lane: at a provably warp-uniform
// address ptxas makes a one-lane atomic warp-aggregated, its result shuffled at once, a wait for
// the round trip (kernel notes, sessions 21 and 68). ``pool`` is ``units`` where there is nothing to
// claim (no live row, or no unit past the first STAGES rounds): then no claim is requested.
struct ClaimedUnits {
  int* at;
  int pool;
  int claim;          // requested a unit ago (raw: the word before the increment)
  int u2, slot2;      // the row read a unit ago
  float beta2, g2;
  int u1, slot1, w1;  // the next unit (u1 >= units: none left) and its cursor, read a unit ago
  float beta1, g1;
};

__device__ __forceinline__ ClaimedUnits start_claims(int first, int units, int* arrivals, int lane) {
  ClaimedUnits c;
  c.pool = first < 0 ? units : min(STAGES * (int)gridDim.x, units);
  c.at = arrivals + max(first, 0) + lane;
  c.claim = 0;
  c.u2 = c.u1 = units;
  c.slot2 = c.slot1 = -1;
  c.w1 = 0;
  c.beta2 = c.g2 = c.beta1 = c.g1 = 0.0f;
  if (lane == 0 && c.pool < units) c.claim = atomicAdd(c.at, 1);
  return c;
}

// Lane 0 only.
__device__ __forceinline__ void advance_claims(ClaimedUnits& c, int units, const int* slot_ids, const int* cursor,
                                               const void* beta, long long sb_batch, long long sb_head, const void* g,
                                               long long sg_batch, long long sg_head) {
  c.u1 = c.u2;
  c.slot1 = c.slot2;
  c.beta1 = c.beta2;
  c.g1 = c.g2;
  c.w1 = c.slot1 >= 0 ? cursor[c.slot1] : 0;
  c.u2 = c.pool + (c.claim & ((1 << CLAIM_BITS) - 1));
  c.slot2 = c.u2 < units ? slot_ids[c.u2 / (VHEADS * PARTS)] : -1;
  c.beta2 = unit_scalar<BETA_CODE>(c.u2, units, beta, sb_batch, sb_head);
  c.g2 = PER_CHANNEL ? 0.0f : unit_scalar<G_CODE>(c.u2, units, g, sg_batch, sg_head);
  if (c.pool < units) c.claim = atomicAdd(c.at, 1);
}
#endif
#endif

extern "C" __global__ void __launch_bounds__((PRODUCER + 1) * 32, MIN_CTAS) delta_replay_step(
    const __grid_constant__ TensorMap ckpt_load,   // checkpoint, boxes [BOXC cols, ROWS rows]
    const __grid_constant__ TensorMap ckpt_store,  // checkpoint, boxes [BOXC cols, 16 rows]
    const float* __restrict__ coef,                // [batch, VHEADS, COEF_FLOATS] (one launch: unused)
    const float* __restrict__ qk,                  // [batch, KHEADS, QK_FLOATS] (one launch: unused)
    float* __restrict__ ckpt_scale, long long ssc_slot, long long ssc_head,  // fp8: [slot, VHEADS, DV], rows dense
    u16* __restrict__ d_records, long long sdr_slot, long long sdr_head, long long sdr_pos,
    u16* __restrict__ k_records, long long skr_slot, long long skr_head, long long skr_pos,
    grec_t* __restrict__ g_records, long long sgr_slot, long long sgr_head, long long sgr_pos,
    const u16* __restrict__ v, long long sv_batch, long long sv_head,
    u16* __restrict__ out, long long so_batch, long long so_head,
    const int* __restrict__ slot_ids, int* __restrict__ cursor, int batch,
    // One launch only (KDA; GDN when asked): the step's q, k, g, beta, the arrival counts
    const u16* __restrict__ q, long long sq_batch, long long sq_head,
    const u16* __restrict__ k, long long sk_batch, long long sk_head,
    const void* __restrict__ g, long long sg_batch, long long sg_head,
    const void* __restrict__ beta, long long sb_batch, long long sb_head,
    int* __restrict__ arrivals, float scale) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;  // stages 1024-byte aligned (128-byte swizzle)
  unsigned char* const gbase = smem_raw + (base - raw);
  const u32 bars = base + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES] (one launch: recs[STAGES], ready[STAGES])
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int units = batch * VHEADS * PARTS;
  // The next grid (launched programmatically) may be scheduled now; it waits for this grid's
  // completion before reading anything.
  asm volatile("griddepcontrol.launch_dependents;");
#if ONE_LAUNCH
  if (threadIdx.x == 0) {  // recs: the producer's arrival and the records' bytes; ready: the coefficient warps'
    for (int s = 2 * STAGES; s < NBARS * STAGES; ++s) mbar_init(bars + 8 * s, s < 3 * STAGES ? 1 : READY_ARRIVALS);
  }
#endif
  ring_init(bars, STAGES, CONSUMERS);

#if COEF_WARPS
  if (warp >= CONSUMERS && warp < PRODUCER) {
    // ---------------- coefficient warps: each unit's coefficients, as soon as its stage is full,
    // while the consumers work on the previous units; the stage's ready barrier then lets them in.
    int i = 0;
    // The appends' strides, loaded before the first wait (params_zero).
    const u32 warm = params_zero(sgr_slot | sgr_head | sgr_pos | skr_slot | skr_head | skr_pos);
    for (int u = blockIdx.x; CLAIMED_UNITS || u < units; u += gridDim.x, ++i) {
      const int st = i % STAGES;
      unsigned char* const gstage = gbase + st * STAGE_BYTES;
      mbar_wait(BAR_RECS(st), ((i / STAGES) & 1) ^ warm);  // the records and inputs: the checkpoint may still be on its way
      const int slot = ((const int*)(gstage + OFF_META))[0];
      const int unit = stage_unit(gstage, u), bh = unit / PARTS;
      if (slot >= 0)
        stage_coefficients(gstage, slot, bh % VHEADS, unit - bh * PARTS, threadIdx.x - CONSUMERS * 32, scale, g_records,
                           sgr_slot, sgr_head, sgr_pos, k_records, skr_slot, skr_head, skr_pos);
      mbar_arrive(BAR_READY(st));
      if (CLAIMED_UNITS && unit < 0) break;  // the producer's end marker
    }
    return;
  }
#endif

  if (warp == PRODUCER) {
    // ---------------- producer
    if (lane == 0) prefetch_tensor_maps(&ckpt_load, &ckpt_store);
    // Slots and cursors of the CTA's next 32 units, a lane each, requested before any
    // checkpoint tile (a load issued after the tiles waits behind them).
    int slot_l, w_l;
#if ONE_LAUNCH
    // One launch: the previous grid (the previous step, say) may have written the cursors, the
    // records and the checkpoints, so nothing is read before it completes. Each unit's cursor
    // read is counted once the first unit of its 32 has been requested (DEFER_COUNT: its first
    // STAGES units; the row's last count advances it; DEALT_UNITS and CLAIMED_UNITS: the CTA once,
    // after its last unit, count_launch_reads), its beta (and GDN's g) read beside it.
    // The slot, cursor and beta pointers and the records' strides loaded before the wait (a trap
    // no parameter can reach keeps ptxas from sinking the loads past it).
    if (params_zero((long long)slot_ids | (long long)cursor | (long long)beta | sb_batch | sb_head | sdr_slot |
                    sdr_head | skr_slot | skr_head | sgr_slot | sgr_head))
      __trap();
    asm volatile("griddepcontrol.wait;" ::: "memory");
#if DEALT_UNITS
    // The rows' flushing bits, the CTA's share, its first 32 units (a lane each).
    u32* const order = (u32*)(gbase + STAGES * STAGE_BYTES + 8 * NBARS * STAGES);
    const int first_slot = dealing_order(slot_ids, cursor, batch, order, lane);
    const DealtShare share = dealt_share(order, units);
    int unit_l;
    dealt_unit(lane, units, order, share, slot_ids, unit_l, slot_l);
    w_l = slot_l >= 0 ? cursor[slot_l] : 0;
#else
    int unit_l = blockIdx.x + lane * gridDim.x;
    unit_slot_cursor(unit_l, units, (VHEADS * PARTS), slot_ids, cursor, slot_l, w_l);
#endif
#if CLAIMED_UNITS
    // The first row's slot (the launch word's) and the first claim, requested with the first
    // STAGES units' rows.
    const int first_slot = first_live_slot(slot_ids, batch, lane);
    ClaimedUnits claims = start_claims(first_slot, units, arrivals, lane);
#endif
    float beta_l = unit_scalar<BETA_CODE>(unit_l, units, beta, sb_batch, sb_head);
    float g_l = PER_CHANNEL ? 0.0f : unit_scalar<G_CODE>(unit_l, units, g, sg_batch, sg_head);
#if FLUSH_FIRST
    int place_l = flush_first_place(slot_l, w_l, lane);
#endif
#else
    unit_slot_cursor(blockIdx.x + lane * gridDim.x, units, (VHEADS * PARTS), slot_ids, cursor, slot_l, w_l);
    // The first STAGES units' checkpoint rows need only the slot: requested before the wait for
    // the coefficient grid, so that they load while it runs.
    prefetch_first_units(&ckpt_load, base, bars, STAGE_BYTES, STAGES, units, VHEADS, PARTS, slot_l, lane);
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    int i = 0;
    // CLAIMED_UNITS: the loop ends after the end marker's stage.
    for (int u = blockIdx.x; CLAIMED_UNITS || u < units; u += gridDim.x, ++i) {
      const int k32 = i & 31;
      if (!CLAIMED_UNITS && k32 == 0 && i > 0) {
#if DEALT_UNITS
        dealt_unit(i + lane, units, order, share, slot_ids, unit_l, slot_l);
        w_l = slot_l >= 0 ? cursor[slot_l] : 0;
#else
        unit_slot_cursor(u + lane * gridDim.x, units, (VHEADS * PARTS), slot_ids, cursor, slot_l, w_l);
#endif
#if ONE_LAUNCH
#if !DEALT_UNITS
        unit_l = u + lane * gridDim.x;
#endif
        beta_l = unit_scalar<BETA_CODE>(unit_l, units, beta, sb_batch, sb_head);
        if (!PER_CHANNEL) g_l = unit_scalar<G_CODE>(unit_l, units, g, sg_batch, sg_head);
#if FLUSH_FIRST
        place_l = flush_first_place(slot_l, w_l, lane);
#endif
#endif
      }
#if FLUSH_FIRST
      const int src = __ffs(__ballot_sync(0xffffffffu, place_l == k32)) - 1;  // the lane whose unit goes k32-th
#else
      const int src = k32;
#endif
#if CLAIMED_UNITS
      // The first STAGES units in the fixed order, then lane 0's claimed ones; once none is left the
      // end marker (unit -1, slot -1).
      const bool claimed = u >= units || i >= STAGES;
      const int from = claimed ? 0 : src;
      const int next = __shfl_sync(0xffffffffu, claims.u1, 0);
      const bool end = claimed && next >= units;
      const int unit = end ? -1 : claimed ? next : u;
      const int slot = end ? -1 : __shfl_sync(0xffffffffu, claimed ? claims.slot1 : slot_l, from);
      const int w = __shfl_sync(0xffffffffu, claimed ? claims.w1 : w_l, from);
#else
#if DEALT_UNITS
      const int unit = __shfl_sync(0xffffffffu, unit_l, src);
#else
      const int unit = u + (src - k32) * (int)gridDim.x;
#endif
      const int slot = __shfl_sync(0xffffffffu, slot_l, src);
      const int w = __shfl_sync(0xffffffffu, w_l, src);
#endif
      const int st = i % STAGES;
      const u32 stage = base + st * STAGE_BYTES;
      const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
      const bool prefetched = !ONE_LAUNCH && i < STAGES;
      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);
      const int bh = unit / PARTS, part = unit - bh * PARTS, b = bh / VHEADS, h = bh - b * VHEADS, kh = h / VPK;
#if ONE_LAUNCH
      // The exact cursor (advanced only once every unit of the row has read it): records 0..w-1
      // of d (the unit's rows), k̂ and g, and the step's q, k, v (KDA: g; GDN's g and beta: meta).
#if CLAIMED_UNITS
      const float bt = __shfl_sync(0xffffffffu, claimed ? claims.beta1 : beta_l, from);
      const float gt = __shfl_sync(0xffffffffu, claimed ? claims.g1 : g_l, from);
#else
      const float bt = __shfl_sync(0xffffffffu, beta_l, src), gt = __shfl_sync(0xffffffffu, g_l, src);
#endif
#if !PER_CHANNEL
      // GDN's g records (4 bytes each, too small for a bulk copy): asynchronous copies the full
      // barrier tracks, registered (each lane's pending count +1) before lane 0's arrival.
      if (slot >= 0) {
        if (lane < w) cp_async4(stage + OFF_G + lane * 4, g_records + slot * sgr_slot + h * sgr_head + lane * sgr_pos);
        cp_async_mbar_arrive(BAR_RECS(st));
      }
      __syncwarp();
#endif
      if (lane == 0) {
        int* meta = (int*)(gbase + st * STAGE_BYTES + OFF_META);
        meta[0] = slot;
        meta[1] = w;
        ((float*)meta)[2] = bt;
        ((float*)meta)[3] = gt;
        if (UNIT_IN_META) meta[4] = unit;
        const u32 rec_bytes = w * (ROWS * 2 + DK * 2 + (PER_CHANNEL ? DK * 2 : 0)) + V_BYTES + DK * 4 + (PER_CHANNEL ? DK * G_SIZE : 0);
        if (slot < 0) {
          mbar_arrive(full);
          mbar_arrive(BAR_RECS(st));
        } else {
          mbar_arrive_expect_tx(full, (prefetched ? 0 : CKPT_BYTES) + SCALE_BYTES);
          mbar_arrive_expect_tx(BAR_RECS(st), rec_bytes);
        }
      }
      __syncwarp();
      if (slot >= 0) {
        // The records and inputs first (the coefficients are formed from them), then the checkpoint.
        const u32 recs = BAR_RECS(st);
#if COALESCE_RECS
        if (w > 0 && lane == 4) bulk_load(stage + OFF_K, k_records + slot * skr_slot + kh * skr_head, w * (DK * 2), recs);
#if PER_CHANNEL
        if (w > 0 && lane == 6) bulk_load(stage + OFF_G, g_records + slot * sgr_slot + h * sgr_head, w * (DK * 2), recs);
#endif
#endif
#if COALESCE_D
        if (w > 0 && lane == 5) bulk_load(stage + OFF_D, d_records + slot * sdr_slot + h * sdr_head, w * (ROWS * 2), recs);
#endif
        if (lane < w) {
#if !COALESCE_D
          bulk_load(stage + OFF_D + lane * (ROWS * 2), d_records + slot * sdr_slot + h * sdr_head + lane * sdr_pos + part * ROWS,
                    ROWS * 2, recs);
#endif
#if !COALESCE_RECS
          bulk_load(stage + OFF_K + lane * (DK * 2), k_records + slot * skr_slot + kh * skr_head + lane * skr_pos, DK * 2, recs);
#endif
#if PER_CHANNEL && !COALESCE_RECS
          bulk_load(stage + OFF_G + lane * (DK * 4) + DK * 2, g_records + slot * sgr_slot + h * sgr_head + lane * sgr_pos, DK * 2,
                    recs);  // fp16, the upper half of slot j
#endif
        }
        if (lane == 0) bulk_load(stage + OFF_V, v + b * sv_batch + h * sv_head + part * ROWS, V_BYTES, recs);
        if (lane == 1) bulk_load(stage + OFF_IN, q + b * sq_batch + kh * sq_head, DK * 2, recs);
        if (lane == 2) bulk_load(stage + OFF_IN + DK * 2, k + b * sk_batch + kh * sk_head, DK * 2, recs);
#if PER_CHANNEL
        if (lane == 3) bulk_load(stage + OFF_IN + DK * 4, (const unsigned char*)g + (b * sg_batch + h * sg_head) * G_SIZE, DK * G_SIZE, recs);
#endif
        if (!prefetched && lane < NBOX) tma_load_4d(stage + lane * (ROWS * 128), &ckpt_load, lane * BOXC, part * ROWS, h, slot, full);
        if (CKPT_FP8 && lane == 31)
          bulk_load(stage + OFF_SCALE, ckpt_scale + slot * ssc_slot + h * ssc_head + part * ROWS, SCALE_BYTES, full);
      }
#if DEFER_COUNT
      const int u0 = u - k32 * gridDim.x;  // the block's first unit
      if (k32 == min(STAGES - 1, (units - 1 - u0) / (int)gridDim.x))
        count_cursor_read(u0 + lane * gridDim.x, units, slot_l, w_l, arrivals, cursor);
#elif CLAIMED_UNITS
      if (end) break;
      if (lane == 0 && i >= STAGES - 2)
        advance_claims(claims, units, slot_ids, cursor, beta, sb_batch, sb_head, g, sg_batch, sg_head);
#elif !DEALT_UNITS
      if (k32 == 0) count_cursor_read(u + lane * gridDim.x, units, slot_l, w_l, arrivals, cursor);
#endif
#else
      // For a cursor read w' that may be one step ahead (w + 1, or 0 after a flush): d records
      // 0..w'-1 (0..L-2 at w' = 0), the k records 0..L-2 when the unit may flush (w' = L-1 or 0).
      const int nd = w == 0 ? LREC - 1 : w;
      const bool k_rows = w == LREC - 1 || w == 0;
      if (lane == 0) {
        ((int*)(gbase + st * STAGE_BYTES + OFF_META))[0] = slot;
        if (slot < 0) {
          mbar_arrive(full);
        } else {
          const u32 bytes = (prefetched ? 0 : CKPT_BYTES) + nd * ROWS * 2 + (k_rows ? (LREC - 1) * DK * 2 : 0) +
                            V_BYTES + COEF_BYTES + QK_BYTES + SCALE_BYTES + (S0_MMA ? DK * 4 : 0);
          mbar_arrive_expect_tx(full, bytes);
        }
      }
      __syncwarp();
      if (slot >= 0) {
        if (!prefetched && lane < NBOX) tma_load_4d(stage + lane * (ROWS * 128), &ckpt_load, lane * BOXC, part * ROWS, h, slot, full);
#if COALESCE_D
        if (nd > 0 && lane == 6) bulk_load(stage + OFF_D, d_records + slot * sdr_slot + h * sdr_head, nd * (ROWS * 2), full);
#else
        if (lane < nd)
          bulk_load(stage + OFF_D + lane * (ROWS * 2), d_records + slot * sdr_slot + h * sdr_head + lane * sdr_pos + part * ROWS,
                    ROWS * 2, full);
#endif
#if COALESCE_RECS
        if (LREC > 1 && k_rows && lane == 7)
          bulk_load(stage + OFF_K, k_records + slot * skr_slot + kh * skr_head, (LREC - 1) * (DK * 2), full);
#else
        if (k_rows && lane < LREC - 1)
          bulk_load(stage + OFF_K + lane * (DK * 2), k_records + slot * skr_slot + kh * skr_head + lane * skr_pos, DK * 2, full);
#endif
        if (lane == 0) bulk_load(stage + OFF_COEF, coef + (long long)bh * COEF_FLOATS, COEF_BYTES, full);
        if (lane == 1) bulk_load(stage + OFF_QK, qk + ((long long)b * KHEADS + kh) * QK_FLOATS, QK_BYTES, full);
        if (lane == 2) bulk_load(stage + OFF_V, v + b * sv_batch + h * sv_head + part * ROWS, V_BYTES, full);
        if (CKPT_FP8 && lane == 5)
          bulk_load(stage + OFF_SCALE, ckpt_scale + slot * ssc_slot + h * ssc_head + part * ROWS, SCALE_BYTES, full);
#if S0_MMA
        if (lane == 3) bulk_load(stage + OFF_IN, q + b * sq_batch + kh * sq_head, DK * 2, full);
        if (lane == 4) bulk_load(stage + OFF_IN + DK * 2, k + b * sk_batch + kh * sk_head, DK * 2, full);
#endif
      }
#endif
    }
#if DEALT_UNITS || CLAIMED_UNITS
    __syncwarp();  // every lane's cursor reads used
    count_launch_reads(first_slot, batch, slot_ids, arrivals, cursor, lane);
#endif
    return;
  }

  // ---------------- consumers: warp owns rows r0 .. r0 + 15 of each unit, lane (lane & 15)'s
  // row over columns [half HALF, (half + 1) HALF)
  const int r0 = warp * 16;
  const int row = r0 + (lane & 15), half = lane >> 4;
#if S0_QGMMA
  int scale_exp;
  frexpf(scale, &scale_exp);
  const float fq = ldexpf(16.0f, -scale_exp);  // 16 / 2^ceil(log2 scale) or less: qgmma_b_tile
#endif
#if S0_HFMA2 && PER_CHANNEL
  float fq_inverse;  // 2^e for scale in [2^e, 2^(e+1)): undoes unit_coefficients' fq = 2^-e
  f16_range_scale(scale, 0, fq_inverse);
#endif
  int i = 0;
  // The output's and the d appends' strides, loaded before the first wait (params_zero; with the
  // consumers forming the coefficients, the g and k̂ appends' too).
  const u32 warm = params_zero(so_batch | so_head | sdr_slot | sdr_head | sdr_pos | sgr_slot | sgr_head | sgr_pos |
                               skr_slot | skr_head | skr_pos);
  for (int u = blockIdx.x; CLAIMED_UNITS || u < units; u += gridDim.x, ++i) {
    const int st = i % STAGES;
    const u32 stage = base + st * STAGE_BYTES;
    unsigned char* const gstage = gbase + st * STAGE_BYTES;
    const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
#if ONE_LAUNCH && !COEF_WARPS
    mbar_wait(BAR_RECS(st), ((i / STAGES) & 1) ^ warm);  // the records and inputs, the checkpoint maybe not yet
#else
    mbar_wait(full, ((i / STAGES) & 1) ^ warm);
#if COEF_WARPS
    mbar_wait(BAR_READY(st), (i / STAGES) & 1);  // the coefficient warps are done with it
#endif
#endif
    const int slot = ((const int*)(gstage + OFF_META))[0];
    const int unit = stage_unit(gstage, u), bh = unit / PARTS, part = unit - bh * PARTS, b = bh / VHEADS, h = bh - b * VHEADS;
    if (CLAIMED_UNITS && unit < 0) break;  // the producer's end marker
#if ONE_LAUNCH && !COEF_WARPS
    // The unit's coefficients from its records and inputs, while its checkpoint may still be copied.
    if (slot >= 0)
      stage_coefficients(gstage, slot, h, part, warp * 32 + lane, scale, g_records, sgr_slot, sgr_head, sgr_pos, k_records,
                         skr_slot, skr_head, skr_pos);
    mbar_wait(full, (i / STAGES) & 1);
#endif
    bool released = false;  // the stage given back to the producer
    if (slot >= 0) {
      const float* cf = (const float*)(gstage + OFF_COEF);
      const float* qks = (const float*)(gstage + OFF_QK);
      const u16* ds = (const u16*)(gstage + OFF_D);
      // S0 q̂ and S0 k̂ of row r0 + (lane & 15), in every lane: exact fp32 products, on tensor
      // cores (S0_MMA, S0_QGMMA, FP8_MMA) or in f16x2 FMAs (S0_HFMA2).
      float sq, sk;
#if S0_MMA
      s0_dots_mma(stage, gstage, r0, lane, sq, sk);
#elif S0_QGMMA
      qgmma_b_tile(gstage, warp * 32 + lane, fq);
      s0_dots_qgmma(stage, warp, lane, fq, sq, sk);
#elif S0_HFMA2
#if PER_CHANNEL
      s0_dots_hfma2(gstage, (const u16*)(gstage + OFF_K), 2 * H2_HALF, H2_HALF, fq_inverse, 1.0f / H2_FK, r0,
                    lane, sq, sk);
#else
      s0_dots_hfma2(gstage, (const u16*)(qks + QK_F16), QK_F16_STRIDE, HALF, qks[QK_FACTORS], qks[QK_FACTORS + 1], r0, lane,
                    sq, sk);
#endif
#elif FP8_MMA
      s0_dots_fp8(gstage, r0, lane, sq, sk);
#else
      s0_dots(gstage, qks, r0, lane, sq, sk);
#endif
#if CKPT_FP8
      const float row_scale = ((const float*)(gstage + OFF_SCALE))[row];  // codes x scale: the row's values
      sq *= row_scale;
      sk *= row_scale;
#endif
      const int w = ((const int*)cf)[3 * LP + 3];  // exact; the producer's read may be one step ahead
#if CONSUMER_SUMS
      // The norms and scores from the coefficient warps' partials (consumer_norms); warp 0 of the
      // unit appends k̂ where unit_coefficients would have.
      float nrq, nrk, kq, score_lo, score_hi;
      u16* const krec_w = warp == 0 && w < LREC - 1 ? K_APPEND_AT(slot, h, part, w) : nullptr;
      consumer_norms(gstage, lane, scale, krec_w, nrq, nrk, kq, score_lo, score_hi);
      sq *= nrq;
      sk *= nrk;
#endif
#if !ONE_LAUNCH
      // The row's cursor advances here, once (head 0, part 0): the coefficient grid that read it
      // has completed (its block is in this stage). One launch: the producers count their reads.
      if (h == 0 && part == 0 && warp == 0 && lane == 0) cursor[slot] = next_cursor(w, LREC);
#endif
      // Records term: lanes 0-15 take even j, 16-31 odd j (fixed trip count, predicated by w).
      float rq = 0.0f, rk = 0.0f;
#pragma unroll
      for (int j = half; j < LP; j += 2) {
#if CONSUMER_SUMS
        // record j's scores, shuffled by every lane: q score t = j, k score t = LP + j (lane t of
        // lo, lane t - 32 of hi)
        const float cq = __shfl_sync(0xffffffffu, score_lo, j);
        const float ck = __shfl_sync(0xffffffffu, LP < 32 ? score_lo : score_hi, (LP + j) & 31);
        if (j < w) {
          const float dj = bf16_to_f32(ds[j * ROWS + row]);
          rq += cq * dj;
          rk += ck * dj;
        }
#else
        if (j < w) {
          const float dj = bf16_to_f32(ds[j * ROWS + row]);
          rq += cf[j] * dj;
          rk += cf[LP + j] * dj;
        }
#endif
      }
      const float vr = bf16_to_f32(((const u16*)(gstage + OFF_V))[row]);
#if CONSUMER_SUMS
      const float e0 = cf[3 * LP], beta = cf[3 * LP + 2];
#else
      const float e0 = cf[3 * LP], kq = cf[3 * LP + 1], beta = cf[3 * LP + 2];
#endif
      // A unit that does not flush has read its stage: release it before the arithmetic.
      released = w != LREC - 1;
      if (released) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty);
      }
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
        // Flush: the warp's 16 rows folded into the stage (on tensor cores with FLUSH_MMA, else in
        // exact fp32 FMAs), then stored by TMA.
        float* const scale_out = CKPT_FP8 ? ckpt_scale + slot * ssc_slot + h * ssc_head + part * ROWS : nullptr;
#if CONSUMER_SUMS
        const float dk = d * nrk;  // the qk block holds the raw k: the new record's k̂ = rk k
#else
        const float dk = d;
#endif
#if FLUSH_MMA
        flush_fold_mma(gstage, r0, lane, w, dk, scale_out);
#else
        flush_fold_fma(gstage, r0, lane, dk, scale_out);
#endif
        store_warp_rows(&ckpt_store, stage, NBOX, ROWS * 128, BOXC, r0, part * ROWS + r0, h, slot, lane);
      }
    }
    if (!released) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty);
    }
  }
}

// ------------------------------------------------------------------ one launch for small batches (GDN)
#if !PER_CHANNEL

// delta_replay_small: the whole step in one launch without a ring, for batches too small to fill the
// persistent kernel's. One CTA of SM_THREADS threads per (SM_ROWS value rows of a value head,
// batch row); grid (VHEADS * DV / SM_ROWS, batch). A row is 8 threads (part p = thread % 8), each
// holding 16-byte checkpoint chunks p, p + 8, ... of the row in registers. One round of cache
// loads after the slot (the cursor, the chunks, the key head's L k records, the CTA's d records,
// the g records), predicated on the slot instead of behind a padding-row branch; records past the
// cursor are loaded and discarded by selects. Every group of 8 threads forms |q| and |k| from its
// chunks (q̂ = scale q / |q|, k̂ = k / |k| with L2NORM, applied to the sums as scalars); 16 teams of
// 8 threads (the first 128) the record scores k̂_j . q̂ and k̂_j . k̂ (team k: records k, k + 16);
// each warp the decays (lane j: record j). Per row hq, hk, d and o as in the step kernel.
// Appends (w < L-1): d (each CTA its rows), g (the head's first CTA), k̂ (the key head's first
// value head's first CTA). A flush folds S = e0 S0 + sum_{j<w} (e_j d_j) k̂_jᵀ + d k̂ᵀ in fp32
// FMAs from the registers and stores the rounded chunks. Each CTA counts itself once in
// arrivals[slot] (acquire-release, after the barrier that follows every thread's cursor use, before
// any store); the row's last advances the cursor (0 after a flush, else w + 1) and zeroes the count.
// Launched programmatically: waits for the previous kernel before any read and lets the next grid
// be scheduled at once. fp8 (CKPT_FP8): a chunk holds 16 codes, the row's scale is read beside the
// chunks, S0 q and S0 k are the codes' sums times it, and a flush scales the codes, folds, takes
// the row's new scale over its 8 threads and stores codes and (thread 0 of the row) the scale.
// One parameter of each 64-byte line of the parameter bank (39 of 8 bytes and a float from offset
// 0x210) is loaded before the wait, which a trap no parameter can reach keeps them before
// (params_zero): the bank is cold at each launch, and its misses then overlap the wait (H100,
// session 57, µs, batch 1 / 2: bf16 4.20 -> 3.98 / 7.09 -> 6.93, fp32 4.95 -> 4.73 / 8.27 -> 8.13,
// fp8 3.92 -> 3.71 / 6.72 -> 6.57).
#define SM_THREADS (SM_ROWS * 8)              // rows x 8 threads
#define SM_CPT (DK * ES / 128)                // 16-byte checkpoint chunks per thread
#define SM_KPT (DK / 64)                      // 16-byte k chunks (8 bf16) per thread in the scores
#define SM_DCH (SM_ROWS / 8)                  // 16-byte d-record chunks per record of the CTA's rows
#define SM_CTAS_PER_HEAD (DV / SM_ROWS)

// Sum over the 8 threads of a row (lanes 8r .. 8r + 7).
__device__ __forceinline__ float row_sum8(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  v += __shfl_xor_sync(0xffffffffu, v, 4);
  return v;
}

extern "C" __global__ void __launch_bounds__(SM_THREADS, MIN_CTAS) delta_replay_small(
    unsigned char* __restrict__ ckpt, long long sck_slot, long long sck_head, long long sck_row,  // elements
    float* __restrict__ ckpt_scale, long long ssc_slot, long long ssc_head,  // fp8: [slot, VHEADS, DV], rows dense
    u16* __restrict__ d_records, long long sdr_slot, long long sdr_head, long long sdr_pos,
    u16* __restrict__ k_records, long long skr_slot, long long skr_head, long long skr_pos,
    float* __restrict__ g_records, long long sgr_slot, long long sgr_head,
    int* __restrict__ cursor, int* __restrict__ arrivals,
    const u16* __restrict__ q, long long sq_batch, long long sq_head,
    const u16* __restrict__ k, long long sk_batch, long long sk_head,
    const u16* __restrict__ v, long long sv_batch, long long sv_head,
    const void* __restrict__ g, long long sg_batch, long long sg_head,
    const void* __restrict__ beta, long long sb_batch, long long sb_head,
    u16* __restrict__ out, long long so_batch, long long so_head,
    const int* __restrict__ slot_ids, float scale) {
  __shared__ __align__(16) u16 ds[LP][SM_ROWS];  // d records of the CTA's rows
  __shared__ __align__(16) u16 ks[LP][DK];       // k records for a flush
  __shared__ float sq_s[LP], sk_s[LP];           // k̂_j . q̂, k̂_j . k̂ (zero from w on)
  if (params_zero((long long)ckpt | ssc_head | skr_pos | sq_head | sg_batch | (long long)slot_ids))
    __trap();
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  const int t = threadIdx.x, lane = t & 31, p = t & 7, rl = t >> 3;
  const int team = t >> 3;  // score teams: the first 16 (threads 0-127), records team, team + 16
  const int h = blockIdx.x / SM_CTAS_PER_HEAD, rb = blockIdx.x - h * SM_CTAS_PER_HEAD, b = blockIdx.y;
  const int kh = h / VPK, row = rb * SM_ROWS + rl;
  const int slot = slot_ids[b];
  // The step's inputs need no slot: requested with it. q and k chunks p + 8 m (8 columns each).
  const u16* qrow = q + b * sq_batch + kh * sq_head;
  const u16* krow = k + b * sk_batch + kh * sk_head;
  uint4 qb[SM_KPT], kb[SM_KPT];
#pragma unroll
  for (int m = 0; m < SM_KPT; ++m) {
    qb[m] = *(const uint4*)(qrow + (p + 8 * m) * 8);
    kb[m] = *(const uint4*)(krow + (p + 8 * m) * 8);
  }
  const float gh = load_f32<G_CODE>(g, b * sg_batch + h * sg_head);
  const float bh = load_f32<BETA_CODE>(beta, b * sb_batch + h * sb_head);
  const float vr = bf16_to_f32(v[b * sv_batch + h * sv_head + row]);
  // One round of loads after the slot, none for a padding row.
  const bool live = slot >= 0;
  const unsigned long long us = live ? (unsigned)slot : 0u;
  const int w = (int)load4_if(live, cursor + us);
  unsigned char* ck_t = ckpt + (us * sck_slot + h * sck_head + row * sck_row) * ES + p * 16;  // chunk p + 8 m: + 128 m bytes
  uint4 ck[SM_CPT];
#pragma unroll
  for (int m = 0; m < SM_CPT; ++m) ck[m] = load16_if(live, ck_t + 128 * m);
#if CKPT_FP8
  float* const scale_t = ckpt_scale + us * ssc_slot + h * ssc_head + row;  // the row's scale
  const float row_scale = __uint_as_float(load4_if(live, scale_t));
#else
  const float row_scale = 1.0f;
#endif
  u16* const krec = k_records + us * skr_slot + kh * skr_head;
  uint4 kr[LP / 16][SM_KPT];
#pragma unroll
  for (int i = 0; i < LP / 16; ++i) {
#pragma unroll
    for (int m = 0; m < SM_KPT; ++m)
      kr[i][m] = load16_if(live && t < 128 && team + 16 * i < LREC, krec + (team + 16 * i) * skr_pos + (p + 8 * m) * 8);
  }
  u16* const drec = d_records + us * sdr_slot + h * sdr_head + rb * SM_ROWS;
  const uint4 dr = load16_if(live && t < SM_DCH * LREC, drec + (long long)(t / SM_DCH) * sdr_pos + 8 * (t % SM_DCH));
  float* const grec = g_records + us * sgr_slot + h * sgr_head;
  const float gj = __uint_as_float(load4_if(live && lane < LREC, grec + lane));
  // |q|, |k| and q . k over each group of 8 threads (every group holds the whole rows).
  float nq = 0.0f, nk = 0.0f, qk = 0.0f;
#pragma unroll
  for (int m = 0; m < SM_KPT; ++m) {
    float qv[8], kv[8];
    unpack8(qb[m], qv);
    unpack8(kb[m], kv);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      nq += qv[e] * qv[e];
      nk += kv[e] * kv[e];
      qk += qv[e] * kv[e];
    }
  }
#if L2NORM
  const float rq = rsqrtf(row_sum8(nq) + 1e-6f) * scale, rk = rsqrtf(row_sum8(nk) + 1e-6f);
#else
  const float rq = scale, rk = 1.0f;
  (void)nq;
  (void)nk;
#endif
  const float kq = row_sum8(qk) * rq * rk;
  // Scores of the team's records, selected to zero from w on (records there may hold anything).
  if (t < 128) {
#pragma unroll
    for (int i = 0; i < LP / 16; ++i) {
      const int j = team + 16 * i;
      float pq = 0.0f, pk = 0.0f;
#pragma unroll
      for (int m = 0; m < SM_KPT; ++m) {
        float rv[8], qv[8], kv[8];
        unpack8(kr[i][m], rv);
        unpack8(qb[m], qv);
        unpack8(kb[m], kv);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          pq += rv[e] * qv[e];
          pk += rv[e] * kv[e];
        }
      }
      pq = row_sum8(pq);
      pk = row_sum8(pk);
      if (p == 0) {
        sq_s[j] = j < w ? pq * rq : 0.0f;
        sk_s[j] = j < w ? pk * rk : 0.0f;
      }
      if (w == LREC - 1 && j < LREC) {  // the flush reads the k records from shared memory
#pragma unroll
        for (int m = 0; m < SM_KPT; ++m) *(uint4*)(&ks[j][(p + 8 * m) * 8]) = kr[i][m];
      }
    }
  }
  if (t < SM_DCH * LREC) *(uint4*)(&ds[t / SM_DCH][8 * (t % SM_DCH)]) = dr;
  __syncthreads();
  // Every thread's cursor read is performed once the barrier completes: count the CTA once.
  int arrived = 0;
  if (t == 0 && live) arrived = count_arrival(arrivals, slot);
  // Decays (lane j: record j) and the lane's record coefficients.
  float e0;
  const float ej = record_decays(gj, w, gh, lane, e0);
  const float cq = lane < LP ? ej * sq_s[lane] : 0.0f, ckk = lane < LP ? ej * sk_s[lane] : 0.0f;
  // S0 q and S0 k (raw q and k; normalised as scalars) over the thread's chunks, summed over the row.
  float aq = 0.0f, ak = 0.0f;
#pragma unroll
  for (int m = 0; m < SM_CPT; ++m) {
    const int col = (p + 8 * m) * EPC;
    float x[EPC], qv[EPC], kv[EPC];
    chunk_to_f32(ck[m], x);
#if CKPT_F32 || CKPT_FP8
    load_bf16_chunk(qrow + col, qv);
    load_bf16_chunk(krow + col, kv);
#else
    unpack8(qb[m], qv);  // bf16 chunks: the thread's q and k chunks are its checkpoint chunks' columns
    unpack8(kb[m], kv);
#endif
#pragma unroll
    for (int e = 0; e < EPC; ++e) {
      aq += x[e] * qv[e];
      ak += x[e] * kv[e];
    }
  }
  // Records term: the part's records j = p, p + 8, ...
  float rq_rec = 0.0f, rk_rec = 0.0f;
#pragma unroll
  for (int i = 0; i < LP / 8; ++i) {
    const int j = p + 8 * i;
    const float a = __shfl_sync(0xffffffffu, cq, j), c = __shfl_sync(0xffffffffu, ckk, j);
    const float dj = j < w ? bf16_to_f32(ds[j][rl]) : 0.0f;
    rq_rec += a * dj;
    rk_rec += c * dj;
  }
  const float hq = e0 * rq * (row_sum8(aq) * row_scale) + row_sum8(rq_rec);  // fp8: the codes' sums times the row scale
  const float hk = e0 * rk * (row_sum8(ak) * row_scale) + row_sum8(rk_rec);
  const float d = bh * (vr - hk);
  if (!live) return;
  if (p == 0) {
    out[b * so_batch + h * so_head + row] = f32_to_bf16(hq + d * kq);
    if (w < LREC - 1) drec[(long long)w * sdr_pos + rl] = f32_to_bf16(d);
  }
  if (w < LREC - 1) {
    if (rb == 0 && t == 0) grec[w] = gh;
    if (rb == 0 && h % VPK == 0 && t < 8) {
#pragma unroll
      for (int m = 0; m < SM_KPT; ++m) {
        float kv[8];
        unpack8(kb[m], kv);
        *(uint4*)(krec + w * skr_pos + (p + 8 * m) * 8) =
            make_uint4(pack_bf16x2(kv[0] * rk, kv[1] * rk), pack_bf16x2(kv[2] * rk, kv[3] * rk),
                       pack_bf16x2(kv[4] * rk, kv[5] * rk), pack_bf16x2(kv[6] * rk, kv[7] * rk));
      }
    }
  } else {
    // Flush: the row's chunks S = e0 S0 + d k̂ᵀ + sum_{j<w} (e_j d_j) k̂_jᵀ in fp32, rounded, stored
    // (fp8: all of the thread's chunks first, for the row's new scale).
    float held[SM_CPT][EPC];
#pragma unroll
    for (int m = 0; m < SM_CPT; ++m) {
      const int col = (p + 8 * m) * EPC;
      float(&s)[EPC] = held[m];
      float kc[EPC];
      chunk_to_f32(ck[m], s);
#if CKPT_F32 || CKPT_FP8
      load_bf16_chunk(krow + col, kc);
#else
      unpack8(kb[m], kc);
#endif
#pragma unroll
      for (int e = 0; e < EPC; ++e) s[e] = e0 * (s[e] * row_scale) + d * (kc[e] * rk);
#pragma unroll 4
      for (int j = 0; j < LREC - 1; ++j) {
        const float aj = __shfl_sync(0xffffffffu, ej, j) * bf16_to_f32(ds[j][rl]);
        float kj[EPC];
        load_bf16_chunk(ks[j] + col, kj);
#pragma unroll
        for (int e = 0; e < EPC; ++e) s[e] += aj * kj[e];
      }
#if !CKPT_FP8
      *(uint4*)(ck_t + 128 * m) = pack_chunk(s);
#endif
    }
#if CKPT_FP8
    // The row's new scale max |row| / 448 (1 for a zero row) over its 8 threads, the codes value /
    // scale to nearest even; thread 0 of the row stores the scale.
    const float new_scale = fp8_row_scale(row_max8(max_abs<SM_CPT * EPC>(&held[0][0])));
    const float inverse = __frcp_rn(new_scale);
#pragma unroll
    for (int m = 0; m < SM_CPT; ++m) {
#pragma unroll
      for (int e = 0; e < EPC; ++e) held[m][e] = div_by_reciprocal(held[m][e], new_scale, inverse);
      *(uint4*)(ck_t + 128 * m) = pack_chunk(held[m]);
    }
    if (p == 0) *scale_t = new_scale;
#endif
  }
  if (t == 0) advance_after_last_arrival(arrived, VHEADS * SM_CTAS_PER_HEAD, arrivals, cursor, slot, w, LREC);
}
#endif  // !PER_CHANNEL
