// ReplaySSM gated delta-rule speculative verify (GDN; KDA with PER_CHANNEL) for sm_90, bf16
// activations and records, bf16 or fp32 (CKPT_F32) checkpoints: the outputs of VT window tokens per
// row from checkpoint + committed records, in two launches, compiled at run time by NVRTC (trtllm_replayssm/kernels/nvrtc.py) and launched by
// trtllm_replayssm/kernels/gated_delta_verify_cuda.py. The contract is the Triton kernel's
// (kernels/gated_delta_verify.py): a row with w committed records and n <= VT window tokens flushes
// when w + n > L - 1, its cursor then flagged w + VERIFY_FLUSHED until the commit.
//
// Notation (per batch row and value head h of key head kh): S0 the checkpoint [DV][DK]; records j < w
// of (d_j, k̂_j, g_j); window tokens s < VT of raw q_s, k_s (bf16), v_s, g_s, β_s; k̂_s = rk_s k_s,
// q̂_s = rq_s q_s (rk_s = 1 / |k_s|, rq_s = scale / |q_s| with L2NORM); E0 = exp(Σ_{i<w} g_i),
// e_j = exp(Σ_{j<i<w} g_i), c_s = Σ_{i<=s} g_s, γ_{j,s} = exp(Σ_{j<i<=s} g_i) (every sum formed
// term by term: no subtraction enters an exponent). Per state row (value row r):
//     P^k_s = wk_s (S0 . k_s) + Σ_{j<w} hk[j][s] d_j,   wk_s = exp(Σ_{i<w} g_i + c_s) rk_s,
//     P^q_s = wq_s (S0 . q_s) + Σ_{j<w} hq[j][s] d_j,   hk[j][s] = exp(Σ_{j<i<w} g_i + c_s) (k̂_j . k̂_s)
//     d_s = β_s (v_s - P^k_s - Σ_{j<s} A[j][s] d_s'),  A[j][s] = γ_{j,s} (k̂_j . k̂_s)
//     o_s = P^q_s + Σ_{j<=s} Q[j][s] d_j',               Q[j][s] = γ_{j,s} (k̂_j . q̂_s)
// (d' the window's d; hq, wq like hk, wk with q̂_s): the serial recurrence from the committed state
// S_c = E0 S0 + Σ_{j<w} e_j d_j k̂_jᵀ, never formed but at a flush, where it is the new checkpoint.
//
// 1. delta_verify_coefficients, one CTA of VPK warps per (key head, batch row). The raw products of
//    the window's 2 VT vectors u = (k_0 .. k_{VT-1}, q_0 .. q_{VT-1}) with each other and with the
//    key head's k̂ records 0..L-1 (records at j >= w selected out before the sums: they may hold
//    anything), lanes over head_k_dim, 32 sums at a time by a butterfly reduce-scatter, spread over
//    the warps; the norms from the products' diagonal. Then each warp, for its value head, a
//    coefficient block (floats; TP = VT rounded up to 4 or 8):
//        hk[LP][TP], hq[LP][TP]   the history weights above (0 for j >= w, s >= VT)
//        A[TP][TP], Q[TP][TP]     the window's (0 off j < s, j <= s)
//        wk[TP], wq[TP], beta[TP]
//        wgt[LP]                  e_j (the flush's fold weights; 0 from w on)
//        E0, w, n (ints)
//    and per (row, key head) the window's raw u rows [2 VT][QK_PITCH bytes] in the checkpoint's
//    dtype (fp32 rows: no conversion in the step kernel). Writes the window's g records (each warp,
//    its value head) and k̂ records (rounded to bf16) at w + s, or at s for a flush row, whose
//    history k̂ records 0..w-1 it first copies to khist (the step kernel folds from that copy, since
//    the window's records overwrite the history); pending[slot] := n; a flush row's cursor := w +
//    VERIFY_FLUSHED (CTAs of the row that read it after take the flag off). Padding rows (slot < 0)
//    read and write nothing.
// 2. delta_verify_step, persistent as delta_replay_step: a unit is ROWS value rows (a part) of one
//    value head of one batch row, u = (b VHEADS + h) PARTS + part; CTA c takes units c, c + gridDim.x,
//    ... Warp CONSUMERS (the last) is the producer: per unit one TMA tensor-map copy per 128-byte box
//    of the checkpoint rows (the first STAGES units' before the wait for the coefficient grid), one
//    bulk copy per d record 0..w-1 (the part's ROWS values), a flush unit's khist records, the
//    coefficient block and the u rows. Each consumer warp owns 16 rows: S0 . u_c for the 2 VT vectors
//    (bf16 rows: m16n8k16 tensor-core products, u_c as column c of the B operand, exact bf16 inputs;
//    fp32 rows: exact fp32 FMAs up to T = 3, a lane per row and half of head_k_dim, from T = 4 m16n8k8
//    products in three TF32 parts, about fp32), the history terms (half a
//    warp each over records), the window's forward substitution in fp32, o_s to out and d_s to the d
//    records at w + s (or s at a flush) for s < n. A unit that does not flush gives its stage back
//    once read. A flush unit folds S_c = E0 S0 + Σ_{j<w} e_j d_j k̂_jᵀ in the stage (fold_warp_rows:
//    tensor cores, 24-bit parts, fp32 accumulators) and stores its rows with TMA tensor stores.
//    Nothing in this launch moves a cursor.
//
// KDA (PER_CHANNEL: g per key channel; one value head per key head). The decays act per channel
// inside every product: with E0, e_j, C_s = exp(c_s) and γ_{j,s} vectors over head_k_dim,
//     P^k_s = S0 . (E0 ⊙ C_s ⊙ k̂_s) + Σ_{j<w} d_j (U_j . (C_s ⊙ k̂_s)) + Σ_{j<s} d'_j ((γ_{j,s} ⊙ k̂_j) . k̂_s)
// with U_j = e_j ⊙ k̂_j, so the same per-row form holds with per-value-head u rows (E0 ⊙ C_s ⊙ k̂_s
// and E0 ⊙ C_s ⊙ q̂_s: wk = wq = 1) and per-channel weighted sums for hk, hq, A and Q. Launch 1 is
// then a CTA of DK threads per (value head, row), a thread a channel: the decays e_j as running
// sums over the records before the cursor, newest first (only those are read); the window's sums
// (norms, products) by warp reduce-scatters and a shared-memory pass, the history's (U_j . C_s k_s,
// U_j . C_s q_s) as a [records x channels] x [channels x 2 VT] product on tensor cores (three TF32
// products: about fp32), each warp over its 32 channels, the warps' parts added in shared memory;
// it writes E0 into the block, the u rows (fp32 rows; bf16 rows as three bf16 parts each, split3:
// tensor-core operands exact to 24 bits) and a flush row's U_j as three bf16 parts to the scratch
// buffer. A flush unit folds S_c = S0 Diag(E0) + Σ_{j<w} d_j U_jᵀ (fold_warp_rows_channels: the
// bf16 d records against U's three parts on tensor cores).
// One launch (FUSED_COEF; KDA with a unit a (row, value head), where the launcher's rule finds the
// stages and the scratch fit): the step kernel alone, with DK coefficient threads (warps CONSUMERS
// + 1 on) beside the consumers and the producer. The producer copies into each unit's stage, ahead
// of its checkpoint rows and d records, what launch 1 reads (the records before the cursor, the
// window's q, k and g rows; the stage's recs barrier) and puts w and n in its meta; the
// coefficient threads then form launch 1's block, u rows and a flush's U_j parts straight into the
// stage (kda_form_coefficients, scratch after the mbarriers), append the window's g and k̂ records
// and arrive on the stage's ready barrier, which the consumers wait for after the full one. Every
// thread waits for the previous grid before its first read.
//
// Compile-time constants (-D): CKPT_F32 (0: bf16 checkpoint, 1: fp32), KHEADS, VHEADS (a multiple of
// KHEADS, VHEADS / KHEADS <= 32), DK (head_k_dim: a multiple of 64 up to 256), DV (head_v_dim), ROWS
// (rows of a unit: a multiple of 16 up to 128 dividing DV), LREC (L, <= 32), LP (L rounded up to 16),
// VT (window tokens, 1-8), STAGES, MIN_CTAS and COEF_MIN_CTAS (the step and coefficient kernels'
// register caps: resident CTAs a multiprocessor), L2NORM (0 / 1), HAS_NUM_TOKENS (0: every row has
// VT tokens), PER_CHANNEL (0: GDN, 1: KDA, VHEADS == KHEADS) and the dtype codes G_CODE, BETA_CODE of
// g and beta (0 fp32, 1 bf16, 2 fp16), FUSED_COEF (0 / 1: one launch, above).

#define VPK (VHEADS / KHEADS)                // value heads per key head: the coefficient CTA's warps
#define PARTS (DV / ROWS)                    // units per (row, value head)
#define CONSUMERS (ROWS / 16)
#define CKPT_ROWS ROWS
#define CKPT_COLS DK
#include "ckpt_stage.cuh"
#include "verify_common.cuh"
#include "delta_records.cuh"

#define PER_LANE (DK / 32)                   // head_k_dim elements a lane in the coefficient launch
#define NV (2 * VT)                          // window vectors: k_0 .. k_{VT-1}, q_0 .. q_{VT-1}
#define NVP (NV <= 2 ? 2 : NV <= 4 ? 4 : NV <= 8 ? 8 : 16)  // NV rounded up to a power of two
#define RG (32 / NVP)                        // history records a reduce-scatter of 32 sums
#define NE (NV * (NV + 1) / 2)               // window products u_a . u_b, a <= b
#define TP (VT <= 4 ? 4 : 8)                 // window tokens padded (coefficient rows: 16-byte loads)
// fp32 rows: S0 . u_c in exact fp32 FMAs up to T = 3, from T = 4 as three TF32 tensor-core products
// (about fp32): the FMAs' work grows with the 2T vectors, a product's is one n tile of 8 (H200,
// session 34, µs, FMA / TF32 at batch 256: GDN T = 4 460.4 / 438.0, T = 8 879.3 / 798.1, KDA T = 4
// 344.0 / 336.7, T = 8 579.7 / 529.2; GDN T = 2 351.2 with FMAs, 390.2 with TF32 in a later call).
#define S0_FMA (CKPT_F32 && VT < 4)
#if PER_CHANNEL && VHEADS != KHEADS
#error "the KDA verify takes one value head per key head"
#endif
#define U_PARTS (PER_CHANNEL && !CKPT_F32 ? 3 : 1)  // bf16 parts of a u row (KDA's are fp32 values)
#define NCOL (NV * U_PARTS)                  // u rows: the columns of the tensor-core S0 products
#define NT ((NCOL + 7) / 8)                  // n tiles of the tensor-core S0 products
#define K_PARTS (PER_CHANNEL ? 3 : 1)        // bf16 parts of a flush's key rows (KDA: U_j, fp32)
#define U_HEADS (PER_CHANNEL ? VHEADS : KHEADS)  // u rows and scratch keys per (row, key or value head)
#define C_HK 0                               // coefficient block, in floats
#define C_HQ (LP * TP)
#define C_A (2 * LP * TP)
#define C_Q (C_A + TP * TP)
#define C_WK (C_Q + TP * TP)
#define C_WQ (C_WK + TP)
#define C_BETA (C_WQ + TP)
#define C_WGT (C_BETA + TP)
#define C_FOLD (C_WGT + LP)
#define C_W (C_FOLD + 1)
#define C_N (C_FOLD + 2)
#define C_E0 ((C_FOLD + 3 + 3) / 4 * 4)      // KDA: E0 per channel
#define COEF_FLOATS (C_E0 + (PER_CHANNEL ? DK : 0))
#define COEF_BYTES (COEF_FLOATS * 4)
#define QK_PITCH (DK * ES + 16)              // a u row's bytes, padded: the B operand loads in distinct banks
#define QK_BYTES (NCOL * QK_PITCH)
#define D_BYTES (LP * ROWS * 2)
#define K_BYTES (K_PARTS * LP * REC_PITCH)
#define OFF_D CKPT_BYTES
#define OFF_K (OFF_D + D_BYTES)
#define OFF_QK (OFF_K + K_BYTES)
#define OFF_COEF (OFF_QK + QK_BYTES)
#define OFF_META (OFF_COEF + COEF_BYTES)
#define STAGE_BYTES (((OFF_META + 16) + 1023) / 1024 * 1024)
#ifndef FUSED_COEF
#define FUSED_COEF 0
#endif
#if FUSED_COEF && !(PER_CHANNEL && PARTS == 1)
#error "FUSED_COEF takes KDA with units of every value row (one unit a row and value head)"
#endif
// The step kernel's threads: the consumer warps, the producer, FUSED_COEF's DK coefficient threads.
#define STEP_THREADS ((CONSUMERS + 1) * 32 + (FUSED_COEF ? DK : 0))
// Its mbarriers after the stages, 8 bytes each: full[STAGES], empty[STAGES], with FUSED_COEF then
// ready[STAGES] (the coefficient threads' arrival) and recs[STAGES] (the producer's copies of the
// records and the window, below); then, 16-byte aligned, the coefficient scratch.
#define BARS_BYTES (((FUSED_COEF ? 4 : 2) * 8 * STAGES + 15) / 16 * 16)
#define READY(s) (bars + 8 * (2 * STAGES + (s)))
#define RECS(s) (bars + 8 * (3 * STAGES + (s)))

#if PER_CHANNEL
// KDA: the window's sums a unit's coefficient threads reduce, index i (compile-time after
// unrolling): the squared norms (k then q, 2 VT) and the products (VT x VT: entry (j, s) is A's
// γ_{j,s} k_j k_s for j < s, else Q's γ_{s,j} k_s q_j); raw k, q.
#define R_WIN (2 * VT)
#define NRED (R_WIN + VT * VT)
#define RED_PAD ((NRED + 31) / 32 * 32)  // a warp's reduced window sums, whole chunks of 32
#define NT8 (((NV + 7) / 8) * 8)   // the history product's columns: V rows, zero past NV
#define UPAD (DK + 4)              // a row of the U / V operands in shared memory (conflict-free fragments)
#define UROWS (LREC - 1)           // U's rows: records j < w <= L - 1 (rows past them read as zero)
// Dynamic shared scratch of a unit's coefficients (floats): U [UROWS][UPAD] and V [NT8][UPAD] in
// fp32, the history product's operands (each warp's partial history sums, [DK / 32][LP][NT8], take
// V's place after it); the coefficient launch's dynamic shared memory, the fused step kernel's after
// its barriers (the window's sums are static: kda_form_coefficients). The launcher's
// delta_verify_coef_shared_bytes must equal it (a CPU test reads this from the PTX).
#define SCR_V (UROWS * UPAD)
#define SCR_FLOATS (SCR_V + NT8 * UPAD)
#endif
#if FUSED_COEF
#define FUSED_SCRATCH_BYTES (SCR_FLOATS * 4)
// What the producer copies for the coefficient threads, into regions of the stage they overwrite
// only after their first barrier: the records before the cursor into the key-row region (g [UROWS]
// [DK] fp16, then k̂ [UROWS][DK] bf16), the window's q, k (bf16) and g (G_SIZE) rows [VT][DK] into
// the u-row region.
#define OFF_RAW_G OFF_K
#define OFF_RAW_K (OFF_K + UROWS * DK * 2)
#define OFF_WIN_Q OFF_QK
#define OFF_WIN_K (OFF_QK + VT * DK * 2)
#define OFF_WIN_G (OFF_QK + VT * DK * 4)
static_assert(2 * UROWS * DK * 2 <= K_BYTES && VT * DK * (4 + G_SIZE) <= QK_BYTES, "the copies fit their regions");
#else
#define FUSED_SCRATCH_BYTES 0
#endif

// Dynamic shared memory the step kernel indexes (bytes: the stages, 1 KB of alignment slack, the
// mbarriers, FUSED_COEF's coefficient scratch), the coefficient block's floats and a u row's pitch:
// the launcher's verify_shared_bytes, verify_coefficient_floats and qk_pitch must equal them (a CPU
// test reads them from the PTX).
extern "C" __device__ unsigned int delta_verify_shared_bytes =
    STAGES * STAGE_BYTES + 1024 + BARS_BYTES + FUSED_SCRATCH_BYTES;
extern "C" __device__ unsigned int delta_verify_coefficient_floats = COEF_FLOATS;
extern "C" __device__ unsigned int delta_verify_qk_pitch = QK_PITCH;

// The lane's PER_LANE elements of a and b dotted, fp32.
__device__ __forceinline__ float lane_dot(const float (&a)[PER_LANE], const float (&b)[PER_LANE]) {
  float s = 0.0f;
#pragma unroll
  for (int e = 0; e < PER_LANE; ++e) s += a[e] * b[e];
  return s;
}

// ------------------------------------------------------------------ launch 1: coefficients

// The parameters of the coefficients' work, in both kernels that do it (delta_verify_coefficients;
// delta_verify_step with FUSED_COEF): the k̂ and g records (strides: slot, head, position), the
// pending counts, the window's q, k, g and beta (strides: batch, token, head), the query scale.
#define COEF_PARAMS                                                                    \
  u16* __restrict__ k_records, long long skr_slot, long long skr_head, long long skr_pos,      \
  grec_t* __restrict__ g_records, long long sgr_slot, long long sgr_head, long long sgr_pos,   \
  int* __restrict__ pending,                                                                  \
  const u16* __restrict__ q, long long sq_batch, long long sq_tok, long long sq_head,         \
  const u16* __restrict__ k, long long sk_batch, long long sk_tok, long long sk_head,         \
  const void* __restrict__ g, long long sg_batch, long long sg_tok, long long sg_head,        \
  const void* __restrict__ beta, long long sb_batch, long long sb_tok, long long sb_head,     \
  float scale
// KDA: what kda_form_coefficients writes, from those parameters and the cursors.
#define KDA_GLOBALS \
  {k_records, skr_slot, skr_head, skr_pos, g_records, sgr_slot, sgr_head, sgr_pos, pending, cursor, scale}

#if PER_CHANNEL
extern "C" __device__ unsigned int delta_verify_coef_shared_bytes = SCR_FLOATS * 4;

__device__ __forceinline__ float kda_partial(int i, const float (&ks)[VT], const float (&qs)[VT], const float (&gw)[VT]) {
  if (i < VT) return ks[i] * ks[i];
  if (i < R_WIN) return qs[i - VT] * qs[i - VT];
  const int e = i - R_WIN, j = e / VT, s = e % VT;
  const int lo = j < s ? j : s, hi = j < s ? s : j;  // γ_{lo,hi} = exp(Σ_{lo<m<=hi} g_m)
  float between = 0.0f;
#pragma unroll
  for (int m = 0; m < VT; ++m)
    if (m > lo && m <= hi) between += gw[m];
  const float gamma = __expf(between);
  return j < s ? gamma * ks[j] * ks[s] : gamma * ks[s] * qs[j];
}

// The history's sums over this warp's 32 channels, H[j][v] = Σ_c U[j][c] V[v][c] (U: [UROWS][UPAD],
// rows from UROWS on zero; V: [NT8][UPAD] in shared memory), on tensor cores in three TF32 products
// (hi hi + hi lo + lo hi: about fp32 accuracy), into the accumulators acc (lane (g = lane / 4, t = lane % 4) of tile (mt,
// nt) holds rows 16 mt + g (+ 8), columns 8 nt + 2 t (+ 1)). The lane reads A rows g, g + 8 and B
// columns g at k t, t + 4: UPAD = DK + 4 puts them in distinct banks.
__device__ __forceinline__ void history_sums_mma(const float* su, const float* sv, float (&acc)[LP / 16][NT8 / 8][4],
                                                 int warp, int lane) {
  const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < LP / 16; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT8 / 8; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;
  }
#pragma unroll
  for (int k0 = warp * 32; k0 < warp * 32 + 32; k0 += 8) {
    u32 bh[NT8 / 8][2], bl[NT8 / 8][2];
#pragma unroll
    for (int nt = 0; nt < NT8 / 8; ++nt) {
      tf32_split(sv[(nt * 8 + gq) * UPAD + k0 + tq], bh[nt][0], bl[nt][0]);
      tf32_split(sv[(nt * 8 + gq) * UPAD + k0 + tq + 4], bh[nt][1], bl[nt][1]);
    }
#pragma unroll
    for (int mt = 0; mt < (UROWS + 15) / 16; ++mt) {  // tiles past U's rows stay zero
      u32 ah[4], al[4];
      const int r = mt * 16 + gq;
      const float* a = su + r * UPAD + k0 + tq;
      tf32_split(r < UROWS ? a[0] : 0.0f, ah[0], al[0]);
      tf32_split(r + 8 < UROWS ? a[8 * UPAD] : 0.0f, ah[1], al[1]);
      tf32_split(r < UROWS ? a[4] : 0.0f, ah[2], al[2]);
      tf32_split(r + 8 < UROWS ? a[8 * UPAD + 4] : 0.0f, ah[3], al[3]);
#pragma unroll
      for (int nt = 0; nt < NT8 / 8; ++nt) {
        mma_tf32(acc[mt][nt], al[0], al[1], al[2], al[3], bh[nt][0], bh[nt][1]);
        mma_tf32(acc[mt][nt], ah[0], ah[1], ah[2], ah[3], bl[nt][0], bl[nt][1]);
        mma_tf32(acc[mt][nt], ah[0], ah[1], ah[2], ah[3], bh[nt][0], bh[nt][1]);
      }
    }
  }
}

// history_sums_mma's accumulators into this warp's [LP][NT8] slice of hred.
__device__ __forceinline__ void store_history_sums(float* hred, const float (&acc)[LP / 16][NT8 / 8][4], int lane) {
  const int gq = lane >> 2, tq = lane & 3;
#pragma unroll
  for (int mt = 0; mt < LP / 16; ++mt) {
#pragma unroll
    for (int nt = 0; nt < NT8 / 8; ++nt) {
      const int r = mt * 16 + gq, col = nt * 8 + 2 * tq;
      *(float2*)(hred + r * NT8 + col) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
      *(float2*)(hred + (r + 8) * NT8 + col) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
    }
  }
}

// A consumer warp's 16 rows r0 .. r0 + 15 of a stage folded in place: S = S0 Diag(E0) + Σ_{j<=last}
// x_j U_jᵀ, 64 columns at a time (8 n tiles of 8) on tensor cores: A = the records' per-row values
// x_j (bf16 d records, exact), B = U_j's three bf16 parts (part p of record j at k_rows + (p LP + j)
// REC_PITCH), fp32 accumulators started from S0 Diag(E0), rounded to the checkpoint dtype. Records
// after ``last`` are neither read nor weighted.
__device__ __forceinline__ void fold_warp_rows_channels(unsigned char* gstage, const u16* xs, u32 k_rows, const float* e0,
                                                        int last, int r0, int lane) {
  const int gq = lane >> 2, tq = lane & 3;
  const int kr = (lane & 7) + ((lane >> 3) & 1) * 8;  // ldmatrix row of B (a record) of this lane
#pragma unroll 1
  for (int cb = 0; cb < DK / 64; ++cb) {
    float s[8][4];
#pragma unroll
    for (int nn = 0; nn < 8; ++nn) {
      const int col = cb * 64 + nn * 8 + 2 * tq;
      const float d0 = e0[col], d1 = e0[col + 1];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        load_pair(gstage, r0 + gq + 8 * half, col, s[nn][2 * half], s[nn][2 * half + 1]);
        s[nn][2 * half] *= d0;
        s[nn][2 * half + 1] *= d1;
      }
    }
#pragma unroll
    for (int k0 = 0; k0 < LP; k0 += 16) {
      u32 a[4];
#pragma unroll
      for (int qq = 0; qq < 4; ++qq) {
        const int rr = r0 + gq + 8 * (qq & 1), j = k0 + 2 * tq + 8 * (qq >> 1);
        const u32 lo = j <= last ? xs[j * ROWS + rr] : 0u, hi = j + 1 <= last ? xs[(j + 1) * ROWS + rr] : 0u;
        a[qq] = lo | (hi << 16);
      }
      const int kk = k0 + kr <= last ? k0 + kr : last;  // clamped: finite values times a zero A
#pragma unroll
      for (int pp = 0; pp < 3; ++pp) {
#pragma unroll
        for (int nn = 0; nn < 8; nn += 2) {
          u32 b0, b1, b2, b3;
          ldmatrix_x4_trans(k_rows + (pp * LP + kk) * REC_PITCH + (cb * 64 + nn * 8 + (lane >> 4) * 8) * 2, b0, b1, b2, b3);
          mma_bf16(s[nn], a[0], a[1], a[2], a[3], b0, b1);
          mma_bf16(s[nn + 1], a[0], a[1], a[2], a[3], b2, b3);
        }
      }
    }
#pragma unroll
    for (int nn = 0; nn < 8; ++nn) {
#pragma unroll
      for (int half = 0; half < 2; ++half)
        store_pair(gstage, r0 + gq + 8 * half, cb * 64 + nn * 8 + 2 * tq, s[nn][2 * half], s[nn][2 * half + 1]);
    }
  }
}

// What a KDA unit's coefficients write in global memory besides their block (the window's g and k̂
// records, the pending counts, a flushing row's cursor flag), and the query scale.
struct KdaGlobals {
  u16* k_records;
  long long skr_slot, skr_head, skr_pos;
  grec_t* g_records;
  long long sgr_slot, sgr_head, sgr_pos;
  int* pending;
  int* cursor;
  float scale;
};

// Channel c of a KDA unit's inputs: the window's k, q and g, token c's beta (c < VT), the committed
// records w (the cursor, flag off), the tokens n, and record j's raw g (fp16, low half) and k̂
// (bf16, high half) in one register for j < LP (kda_read_window, kda_read_records).
struct KdaInputs {
  float ks[VT], qs[VT], gw[VT], bs;
  u32 rec[LP];
  int w, n;
};

// Channel c of the window's vectors into ``in``, from global memory or from a stage the producer
// filled: token s's q at q[s qtok], k at k[s ktok], g at element gbase + s gtok of g (G_CODE)
// (channel c's pointers and base).
__device__ __forceinline__ void kda_read_window(KdaInputs& in, const u16* q, long long qtok, const u16* k, long long ktok,
                                                const void* g, long long gbase, long long gtok) {
#pragma unroll
  for (int s = 0; s < VT; ++s) {
    in.ks[s] = bf16_to_f32(k[s * ktok]);
    in.qs[s] = bf16_to_f32(q[s * qtok]);
    in.gw[s] = load_f32<G_CODE>(g, gbase + s * gtok);
  }
}

// A 16-bit load issued where the code stands (generic address: global or shared memory), never
// sunk into the branch that uses its value: plain loads of KDA's records were, at T = 8, each then
// waiting a round trip inside the scan (session 59: +15% at batch 256 on an H100).
__device__ __forceinline__ u16 load_u16_here(const u16* p) {
  u16 v;
  asm volatile("ld.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}

// Channel c of the records before the cursor (in.w) into ``in``: record j's g at grec[j gpos] and
// k̂ at krec[j kpos] (channel c's pointers; global memory or a stage). Only those are read (a
// window's history is ~w of the L positions, and they are most of the coefficients' bytes):
// positions past them read record w - 1 again (an L1 hit, or the stage's copy) and are selected out
// by kda_form_coefficients; position offsets in 32 bits (the launcher's record_offset_unsupported:
// with 64-bit ones the capped coefficient launch spilled).
// NEWEST_FIRST: the loads in the order kda_form_coefficients scans the records (session 60: at T =
// 8 under a 128-register cap ptxas then keeps 44 of the 47 ahead of the scan, in position order 4;
// under the 64-register cap that order spills, so that build and the fused step keep position order).
template <bool NEWEST_FIRST>
__device__ __forceinline__ void kda_read_records(KdaInputs& in, const grec_t* grec, int gpos, const u16* krec, int kpos) {
  const int last = in.w > 0 ? in.w - 1 : 0;
#pragma unroll
  for (int i = 0; i < LP; ++i) {
    const int j = NEWEST_FIRST ? LP - 1 - i : i;
    const int jj = j < last ? j : last;
    in.rec[j] = j < LREC ? (u32)load_u16_here(grec + jj * gpos) | ((u32)load_u16_here(krec + jj * kpos) << 16) : 0u;
  }
}

// The DK threads forming a KDA unit's coefficients meet at named barrier 1.
__device__ __forceinline__ void coef_sync() { asm volatile("bar.sync 1, %0;" ::"n"(DK) : "memory"); }

// A KDA unit's coefficients from its inputs (kda_read_window, kda_read_records), by DK threads (c:
// the thread's channel; warp c / 32, lane c % 32) meeting at named barrier 1: the coefficient block ``blk``, the
// u rows ``urow`` and a flush row's U_j in three bf16 parts (part p of record j at uparts + (p LP +
// j) upitch, channel c at + c), in global memory for the step kernel (delta_verify_coefficients) or
// in the unit's stage (FUSED_COEF); the window's g and k̂ records, pending and a flush row's cursor
// flag. scr: SCR_FLOATS of shared scratch; the caller puts a barrier before its next use.
__device__ __forceinline__ void kda_form_coefficients(const KdaInputs& in, const KdaGlobals& gl, int h, long long slot, int c,
                                                      float* scr, float* blk, unsigned char* urow, u16* uparts, int upitch) {
  const int lane = c & 31, warp = c >> 5, w = in.w, n = in.n;
  const bool flush = verify_flushes(w, n);
  float* const su = scr;
  float* const sv = scr + SCR_V;
  float* const hred = sv;  // after the barrier that follows the products; U stays for a flush's parts
  // Each warp's reduced window sums and their total: static, so that their addresses are constants
  // (carved from the dynamic scratch, the capped coefficient launch spilled 20 bytes).
  __shared__ float red[DK / 32][RED_PAD];
  __shared__ float tot[NRED];
  static_assert((DK / 32) * LP * NT8 <= NT8 * UPAD, "the warps' history sums fit V's place");
  // U[j][c] = e_j k̂_j with e_j = exp(Σ_{j<i<w} g_i), newest first (0 from w on: the history product
  // and a flush's parts read these rows); E0 = exp(Σ_{i<w} g_i).
  float later = 0.0f;
#pragma unroll
  for (int j = LP - 1; j >= 0; --j) {
    const bool held = j < w;  // false from UROWS on
    if (j < UROWS) su[j * UPAD + c] = held ? __expf(later) * __uint_as_float(in.rec[j] & 0xffff0000u) : 0.0f;
    later += held ? grec_to_f32((grec_t)(in.rec[j] & 0xffffu)) : 0.0f;
  }
  const float e0 = __expf(later);
  float cum = 0.0f, cs[VT];  // C_s = exp(Σ_{i<=s} g_i)
#pragma unroll
  for (int s = 0; s < VT; ++s) {
    cum += in.gw[s];
    cs[s] = __expf(cum);
  }
  // The history's other operand: V[v][c] = C_s k_s (v = s < VT) or C_s q_s (v = VT + s).
#pragma unroll
  for (int v = 0; v < NT8; ++v)
    sv[v * UPAD + c] = v < NV ? cs[v % VT] * (v < VT ? in.ks[v % VT] : in.qs[v % VT]) : 0.0f;
  // The window's sums: each warp reduce-scatters 32 at a time, then thread t adds the warps' t-th.
#pragma unroll
  for (int ch = 0; ch < RED_PAD / 32; ++ch) {
    float part[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) part[i] = ch * 32 + i < NRED ? kda_partial(ch * 32 + i, in.ks, in.qs, in.gw) : 0.0f;
    red[warp][ch * 32 + lane] = warp_reduce_scatter<32>(part, lane);
  }
  coef_sync();
  // The history's sums: each warp over its 32 channels, then (after a barrier: hred takes V's
  // place) into hred, which the block below adds up.
  float hacc[LP / 16][NT8 / 8][4];
  history_sums_mma(su, sv, hacc, warp, lane);
  for (int i = c; i < NRED; i += DK) {
    float t = 0.0f;
#pragma unroll
    for (int v = 0; v < DK / 32; ++v) t += red[v][i];
    tot[i] = t;
  }
  coef_sync();
  store_history_sums(hred + warp * LP * NT8, hacc, lane);
  coef_sync();
  float rk[VT], rq[VT];
#pragma unroll
  for (int s = 0; s < VT; ++s) {
#if L2NORM
    rk[s] = rsqrtf(tot[s] + 1e-6f);
    rq[s] = rsqrtf(tot[VT + s] + 1e-6f) * gl.scale;
#else
    rk[s] = 1.0f;
    rq[s] = gl.scale;
#endif
  }
  for (int e = c; e < LP * TP; e += DK) {  // history rows j, tokens s: the warps' sums, normed
    const int j = e / TP, s = e % TP;
    float vk = 0.0f, vq = 0.0f;
    if (j < w && s < VT) {
#pragma unroll
      for (int v = 0; v < DK / 32; ++v) {
        vk += hred[(v * LP + j) * NT8 + s];
        vq += hred[(v * LP + j) * NT8 + VT + s];
      }
      float r_k = rk[0], r_q = rq[0];
#pragma unroll
      for (int m = 1; m < VT; ++m) {
        if (m == s) {
          r_k = rk[m];
          r_q = rq[m];
        }
      }
      vk *= r_k;
      vq *= r_q;
    }
    blk[C_HK + e] = vk;
    blk[C_HQ + e] = vq;
  }
  for (int e = c; e < TP * TP; e += DK) {  // window entry (j, s)
    const int j = e / TP, s = e % TP;
    float a = 0.0f, qv = 0.0f;
#pragma unroll
    for (int jj = 0; jj < VT; ++jj) {
#pragma unroll
      for (int ss = 0; ss < VT; ++ss) {
        if (jj == j && ss == s) {
          if (jj < ss) a = rk[jj] * rk[ss] * tot[R_WIN + jj * VT + ss];
          if (jj <= ss) qv = rk[jj] * rq[ss] * tot[R_WIN + ss * VT + jj];
        }
      }
    }
    blk[C_A + e] = a;
    blk[C_Q + e] = qv;
  }
  if (c < TP) {
    blk[C_WK + c] = c < VT ? 1.0f : 0.0f;  // E0 ⊙ C_s is in the u rows
    blk[C_WQ + c] = c < VT ? 1.0f : 0.0f;
    blk[C_BETA + c] = in.bs;
  }
  if (c < LP) blk[C_WGT + c] = 0.0f;  // unused: U_j carries e_j
  if (c == 0) {
    blk[C_FOLD] = 1.0f;
    ((int*)blk)[C_W] = w;
    ((int*)blk)[C_N] = n;
  }
  blk[C_E0 + c] = e0;
  // The u rows (channel c of each), the window's g and k̂ records, a flush row's U_j parts.
#pragma unroll
  for (int v = 0; v < NV; ++v) {
    const int s = v % VT;
    const float x = e0 * cs[s] * (v < VT ? rk[s] * in.ks[s] : rq[s] * in.qs[s]);
#if CKPT_F32
    ((float*)(urow + v * QK_PITCH))[c] = x;
#else
    float p[3];
    split3(x, p[0], p[1], p[2]);
#pragma unroll
    for (int pp = 0; pp < 3; ++pp) ((u16*)(urow + (v * 3 + pp) * QK_PITCH))[c] = f32_to_bf16(p[pp]);
#endif
  }
  grec_t* const grec = gl.g_records + slot * gl.sgr_slot + h * gl.sgr_head + c;
  u16* const krec = gl.k_records + slot * gl.skr_slot + h * gl.skr_head + c;
  const int base = flush ? 0 : w;
#pragma unroll
  for (int s = 0; s < VT; ++s) {
    if (s < n) {
      grec[(base + s) * gl.sgr_pos] = grec_value(in.gw[s]);
      krec[(base + s) * gl.skr_pos] = f32_to_bf16(rk[s] * in.ks[s]);
    }
  }
  if (flush) {
#pragma unroll
    for (int j = 0; j < UROWS; ++j) {
      if (j < w) {
        float p[3];
        split3(su[j * UPAD + c], p[0], p[1], p[2]);  // U_j's channel c, this thread's own (no barrier)
#pragma unroll
        for (int pp = 0; pp < 3; ++pp) uparts[(pp * LP + j) * upitch + c] = f32_to_bf16(p[pp]);
      }
    }
  }
  if (h == 0 && c == 0) {
    gl.pending[slot] = n;
    if (flush) gl.cursor[slot] = w + VERIFY_FLUSHED;
  }
}
#endif  // PER_CHANNEL

#if !FUSED_COEF  // FUSED_COEF: the step kernel forms the coefficients itself
extern "C" __global__ void __launch_bounds__(PER_CHANNEL ? DK : VPK * 32, COEF_MIN_CTAS) delta_verify_coefficients(
    float* __restrict__ coef_out,       // [batch, VHEADS, COEF_FLOATS]
    unsigned char* __restrict__ u_out,  // [batch, U_HEADS, NCOL, QK_PITCH bytes]: the u rows, the checkpoint's dtype
    u16* __restrict__ khist,            // [batch, U_HEADS, K_PARTS, LP, DK]: a flush row's history keys (KDA: U_j)
    COEF_PARAMS, const int* __restrict__ slot_ids, const int* __restrict__ num_tokens, int* __restrict__ cursor) {
  // Programmatic after the previous kernel: wait for it before any read; then the step kernel may
  // start (it waits for this grid before reading what it writes).
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
#if PER_CHANNEL
  // KDA: a CTA of DK threads per (value head, row), a thread a channel.
  extern __shared__ float scr[];  // SCR_FLOATS
  const int h = blockIdx.x, b = blockIdx.y, c = threadIdx.x;
  const long long slot = slot_ids[b];
  if (slot < 0) return;
  const KdaGlobals gl = KDA_GLOBALS;
  KdaInputs in;
  in.n = window_tokens(num_tokens, b);
  kda_read_window(in, q + b * sq_batch + h * sq_head + c, sq_tok, k + b * sk_batch + h * sk_head + c, sk_tok, g,
                  b * sg_batch + h * sg_head + c, sg_tok);
  in.bs = c < VT ? load_f32<BETA_CODE>(beta, b * sb_batch + c * sb_tok + h * sb_head) : 0.0f;
  in.w = cursor[slot] & (VERIFY_FLUSHED - 1);
  kda_read_records<(COEF_MIN_CTAS * DK * 128 <= 65536)>(in, g_records + slot * sgr_slot + h * sgr_head + c, (int)sgr_pos, k_records + slot * skr_slot + h * skr_head + c,
                   (int)skr_pos);
  const long long bh = (long long)b * VHEADS + h;
  kda_form_coefficients(in, gl, h, slot, c, scr, coef_out + bh * COEF_FLOATS, u_out + bh * QK_BYTES, khist + bh * 3 * LP * DK, DK);
#else
  // GDN: a CTA of VPK warps per (key head, row), a warp a value head.
  __shared__ float gram[NV][NV];  // u_a . u_b
  __shared__ float hraw[LP][NV];  // k̂_j . u_b of the history (0 for j >= w)
  const int kh = blockIdx.x, b = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int h = kh * VPK + warp;
  const long long slot = slot_ids[b];
  if (slot < 0) return;
  const int n = window_tokens(num_tokens, b);
  // The window's raw vectors, lanes over head_k_dim; this warp's value head's g records, g, beta.
  float uv[NV][PER_LANE];
#pragma unroll
  for (int s = 0; s < VT; ++s) {
    u32 c[PER_LANE / 2];
    load_words(k + b * sk_batch + s * sk_tok + kh * sk_head + lane * PER_LANE, c);
    unpack_bf16x2(c, uv[s]);
    load_words(q + b * sq_batch + s * sq_tok + kh * sq_head + lane * PER_LANE, c);
    unpack_bf16x2(c, uv[VT + s]);
  }
  grec_t* const grec = g_records + slot * sgr_slot + h * sgr_head;
  const float gj = lane < LREC ? grec_load(grec + lane * sgr_pos) : 0.0f;
  const float gs = lane < VT ? load_f32<G_CODE>(g, b * sg_batch + lane * sg_tok + h * sg_head) : 0.0f;
  const float bs = lane < VT ? load_f32<BETA_CODE>(beta, b * sb_batch + lane * sb_tok + h * sb_head) : 0.0f;
  const int w = cursor[slot] & (VERIFY_FLUSHED - 1);  // another CTA of the row may have flagged it
  const bool flush = verify_flushes(w, n);
  u16* const krec = k_records + slot * skr_slot + kh * skr_head;
  u16* const kcopy = khist + ((long long)b * KHEADS + kh) * LP * DK;
  // History products: chunks of RG records (NVP sums each), chunk ch to warp ch % VPK.
#pragma unroll
  for (int ch = 0; ch < LP / RG; ++ch) {
    if (ch % VPK != warp) continue;  // warp-uniform
    u32 kw[RG][PER_LANE / 2];
#pragma unroll
    for (int i = 0; i < RG; ++i) {
      const int j = ch * RG + i;
#pragma unroll
      for (int e = 0; e < PER_LANE / 2; ++e) kw[i][e] = 0u;
      if (j < LREC) load_words(krec + j * skr_pos + lane * PER_LANE, kw[i]);
    }
    float part[32];
#pragma unroll
    for (int i = 0; i < RG; ++i) {
      float kr[PER_LANE];
      unpack_bf16x2(kw[i], kr);
#pragma unroll
      for (int c = 0; c < NVP; ++c) part[i * NVP + c] = c < NV && ch * RG + i < w ? lane_dot(kr, uv[c < NV ? c : 0]) : 0.0f;
    }
    const float r = warp_reduce_scatter<32>(part, lane);
    if (lane % NVP < NV) hraw[ch * RG + lane / NVP][lane % NVP] = r;
    if (flush) {
#pragma unroll
      for (int i = 0; i < RG; ++i) {
        const int j = ch * RG + i;
        if (j < w) {
          u32* dst = (u32*)(kcopy + j * DK + lane * PER_LANE);
#pragma unroll
          for (int e = 0; e < PER_LANE / 2; ++e) dst[e] = kw[i][e];
        }
      }
    }
  }
  // Window products u_a . u_b (a <= b), 32 a chunk, after the history's chunks in the warp order.
#pragma unroll
  for (int ch = 0; ch < (NE + 31) / 32; ++ch) {
    if ((LP / RG + ch) % VPK != warp) continue;  // warp-uniform
    float part[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) part[i] = 0.0f;
    int e = 0;
#pragma unroll
    for (int a = 0; a < NV; ++a) {
#pragma unroll
      for (int c = a; c < NV; ++c, ++e)
        if (e >= ch * 32 && e < ch * 32 + 32) part[e - ch * 32] = lane_dot(uv[a], uv[c]);
    }
    const float r = warp_reduce_scatter<32>(part, lane);
    e = 0;
#pragma unroll
    for (int a = 0; a < NV; ++a) {
#pragma unroll
      for (int c = a; c < NV; ++c, ++e) {
        if (e == ch * 32 + lane) {
          gram[a][c] = r;
          gram[c][a] = r;
        }
      }
    }
  }
  __syncthreads();
  // Norms (every warp) and this warp's value head's block.
  float rk[VT], rq[VT], gall[VT], cum[VT];
#pragma unroll
  for (int s = 0; s < VT; ++s) {
#if L2NORM
    rk[s] = rsqrtf(gram[s][s] + 1e-6f);
    rq[s] = rsqrtf(gram[VT + s][VT + s] + 1e-6f) * scale;
#else
    rk[s] = 1.0f;
    rq[s] = scale;
#endif
    gall[s] = __shfl_sync(0xffffffffu, gs, s);
    cum[s] = (s > 0 ? cum[s - 1] : 0.0f) + gall[s];
  }
  float total;
  const float later = warp_suffix_sums(lane < w ? gj : 0.0f, lane, total);  // lane j: Σ_{j<i<w} g_i
  float* blk = coef_out + ((long long)b * VHEADS + h) * COEF_FLOATS;
  if (lane < LP) {  // lane j: history row j, fold weight j
    const bool held = lane < w;
#pragma unroll
    for (int s = 0; s < TP; ++s) {
      const int sc = s < VT ? s : 0;
      const float dec = __expf(later + cum[sc]);
      blk[C_HK + lane * TP + s] = held && s < VT ? dec * rk[sc] * hraw[lane][sc] : 0.0f;
      blk[C_HQ + lane * TP + s] = held && s < VT ? dec * rq[sc] * hraw[lane][VT + sc] : 0.0f;
    }
    blk[C_WGT + lane] = held ? __expf(later) : 0.0f;
  }
#pragma unroll
  for (int e0 = 0; e0 < TP * TP; e0 += 32) {  // window entry (j, s) = (e / TP, e % TP)
    const int e = e0 + lane;
    if (e < TP * TP) {
      const int j = e / TP, s = e % TP;
      float between = 0.0f, rkj = 0.0f, rks = 0.0f, rqs = 0.0f;  // Σ_{j<i<=s} g_i, norms
#pragma unroll
      for (int i = 0; i < VT; ++i) {
        if (i > j && i <= s) between += gall[i];
        if (i == j) rkj = rk[i];
        if (i == s) {
          rks = rk[i];
          rqs = rq[i];
        }
      }
      const int jc = j < VT ? j : 0, sc = s < VT ? s : 0;
      const float dec = __expf(between);
      blk[C_A + e] = j < s && s < VT ? dec * rkj * rks * gram[jc][sc] : 0.0f;
      blk[C_Q + e] = j <= s && s < VT ? dec * rkj * rqs * gram[jc][VT + sc] : 0.0f;
    }
  }
  if (lane < TP) {
    float rkl = 0.0f, rql = 0.0f, cl = 0.0f;
#pragma unroll
    for (int s = 0; s < VT; ++s) {
      if (s == lane) {
        rkl = rk[s];
        rql = rq[s];
        cl = cum[s];
      }
    }
    const float dec = __expf(total + cl);
    blk[C_WK + lane] = lane < VT ? dec * rkl : 0.0f;
    blk[C_WQ + lane] = lane < VT ? dec * rql : 0.0f;
    blk[C_BETA + lane] = bs;
  }
  if (lane == 0) {
    blk[C_FOLD] = __expf(total);
    ((int*)blk)[C_W] = w;
    ((int*)blk)[C_N] = n;
  }
  const int base = flush ? 0 : w;  // the window's first record position
  // The window's g records (lane s; every g record of this value head was read above, by the scan).
  if (lane < n) grec[(base + lane) * sgr_pos] = grec_value(gs);
  // The window's u rows for the step kernel (warp c % VPK: row c) and k̂ records (the key head's
  // history records were all read before the barrier above).
#pragma unroll
  for (int c = 0; c < NV; ++c) {
    if (c % VPK != warp) continue;  // warp-uniform
    unsigned char* urow = u_out + (((long long)b * KHEADS + kh) * NV + c) * QK_PITCH + lane * PER_LANE * ES;
#pragma unroll
    for (int e = 0; e < PER_LANE; e += 2) {
#if CKPT_F32
      *(float2*)(urow + e * 4) = make_float2(uv[c][e], uv[c][e + 1]);
#else
      *(u32*)(urow + e * 2) = pack_bf16x2(uv[c][e], uv[c][e + 1]);
#endif
    }
    if (c < VT && c < n) {
      u32* kout = (u32*)(krec + (base + c) * skr_pos + lane * PER_LANE);
#pragma unroll
      for (int e = 0; e < PER_LANE; e += 2) kout[e / 2] = pack_bf16x2(rk[c] * uv[c][e], rk[c] * uv[c][e + 1]);
    }
  }
  if (kh == 0 && threadIdx.x == 0) {
    pending[slot] = n;
    if (flush) cursor[slot] = w + VERIFY_FLUSHED;
  }
#endif
}
#endif  // !FUSED_COEF

// ------------------------------------------------------------------ launch 2: the verify step

extern "C" __global__ void __launch_bounds__(STEP_THREADS, MIN_CTAS) delta_verify_step(
    const __grid_constant__ TensorMap ckpt_load,   // checkpoint, boxes [BOXC cols, ROWS rows]
    const __grid_constant__ TensorMap ckpt_store,  // checkpoint, boxes [BOXC cols, 16 rows]
#if !FUSED_COEF
    const float* __restrict__ coef,                // [batch, VHEADS, COEF_FLOATS]
    const unsigned char* __restrict__ u_rows,      // [batch, U_HEADS, NCOL, QK_PITCH bytes]
    const u16* __restrict__ khist,                 // [batch, U_HEADS, K_PARTS, LP, DK]
#endif
    u16* __restrict__ d_records, long long sdr_slot, long long sdr_head, long long sdr_pos,
    const u16* __restrict__ v, long long sv_batch, long long sv_tok, long long sv_head,
    u16* __restrict__ out, long long so_batch, long long so_tok, long long so_head,
    const int* __restrict__ slot_ids, const int* __restrict__ num_tokens,
    int* __restrict__ cursor,  // written only with FUSED_COEF (a flushing row's flag)
    int batch
#if FUSED_COEF
    , COEF_PARAMS
#endif
) {
  extern __shared__ unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  const u32 base = (raw + 1023u) & ~1023u;  // stages 1024-byte aligned (128-byte swizzle)
  unsigned char* const gbase = smem_raw + (base - raw);
  const u32 bars = base + STAGES * STAGE_BYTES;  // full[STAGES], empty[STAGES] (FUSED_COEF: ready, recs)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int units = batch * VHEADS * PARTS;
  asm volatile("griddepcontrol.launch_dependents;");
#if FUSED_COEF
  // One launch: the previous grid may have written every input (cursors, records, checkpoints), so
  // no thread reads anything before it completes.
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(READY(s), 1);  // the coefficient threads' arrival
      mbar_init(RECS(s), 1);   // the producer's arrival and its copies' bytes
    }
  }
#endif
  ring_init(bars, STAGES, CONSUMERS);

#if FUSED_COEF
  if (warp > CONSUMERS) {
    // ---------------- coefficient warps (KDA, a unit a (row, value head)): each unit's coefficient
    // block, u rows and a flush's U_j parts formed in its stage from the records and window rows
    // the producer copied there (recs barrier), while the consumers work on the units before it;
    // the stage's ready barrier then lets them in.
    const int c = threadIdx.x - (CONSUMERS + 1) * 32;
    float* const scr = (float*)(gbase + STAGES * STAGE_BYTES + BARS_BYTES);
    const KdaGlobals gl = KDA_GLOBALS;
    int i = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
      const int b = u / VHEADS, h = u - b * VHEADS;
      const int st = i % STAGES;
      unsigned char* const gstage = gbase + st * STAGE_BYTES;
      const float bs = c < VT ? load_f32<BETA_CODE>(beta, b * sb_batch + c * sb_tok + h * sb_head) : 0.0f;
      mbar_wait(RECS(st), (i / STAGES) & 1);
      const int* const meta = (const int*)(gstage + OFF_META);  // slot, w, n (the producer's)
      const int slot = meta[0];
      if (slot >= 0) {
        KdaInputs in;
        in.w = meta[1];
        in.n = meta[2];
        in.bs = bs;
        kda_read_window(in, (const u16*)(gstage + OFF_WIN_Q) + c, DK, (const u16*)(gstage + OFF_WIN_K) + c, DK,
                        gstage + OFF_WIN_G, c, DK);
        kda_read_records<false>(in, (const grec_t*)(gstage + OFF_RAW_G) + c, DK, (const u16*)(gstage + OFF_RAW_K) + c, DK);
        kda_form_coefficients(in, gl, h, slot, c, scr, (float*)(gstage + OFF_COEF), gstage + OFF_QK, (u16*)(gstage + OFF_K),
                              REC_PITCH / 2);
      }
      coef_sync();  // every thread's stage writes before the arrival; the scratch free again
      if (c == 0) mbar_arrive(READY(st));
    }
    return;
  }
#endif

  if (warp == CONSUMERS) {
    // ---------------- producer
    if (lane == 0) prefetch_tensor_maps(&ckpt_load, &ckpt_store);
    // Slot, committed records and token count of the CTA's next 32 units, a lane each (the
    // coefficient grid may flag a flush row's cursor meanwhile: the flag is taken off).
    int slot_l = -1, w_l = 0, n_l = 0;
    const int per_row = VHEADS * PARTS;
    if (blockIdx.x + lane * gridDim.x < units) {
      const int bl = (blockIdx.x + lane * gridDim.x) / per_row;
      slot_l = slot_ids[bl];
      n_l = window_tokens(num_tokens, bl);
    }
    if (slot_l >= 0) w_l = cursor[slot_l] & (VERIFY_FLUSHED - 1);
    prefetch_first_units(&ckpt_load, base, bars, STAGE_BYTES, STAGES, units, VHEADS, PARTS, slot_l, lane);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    int i = 0;
    for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
      const int k32 = i & 31;
      if (k32 == 0 && i > 0) {
        const int uk = u + lane * gridDim.x;
        slot_l = -1;
        if (uk < units) {
          slot_l = slot_ids[uk / per_row];
          n_l = window_tokens(num_tokens, uk / per_row);
        }
        w_l = slot_l >= 0 ? cursor[slot_l] & (VERIFY_FLUSHED - 1) : 0;
      }
      const int slot = __shfl_sync(0xffffffffu, slot_l, k32);
      const int w = __shfl_sync(0xffffffffu, w_l, k32);
      const int n = __shfl_sync(0xffffffffu, n_l, k32);
      const int st = i % STAGES;
      const u32 stage = base + st * STAGE_BYTES;
      const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
      const bool prefetched = i < STAGES;
      if (!prefetched) mbar_wait(empty, ((i / STAGES) & 1) ^ 1);
      const int bh = u / PARTS, part = u - bh * PARTS, b = bh / VHEADS, h = bh - b * VHEADS, kh = h / VPK;
      const bool flush = verify_flushes(w, n);
      if (lane == 0) {
        int* const meta = (int*)(gbase + st * STAGE_BYTES + OFF_META);
        meta[0] = slot;
#if FUSED_COEF
        // For the coefficient threads: w, n, and the records' and window's copies (below).
        meta[1] = w;
        meta[2] = n;
        if (slot < 0) {
          mbar_arrive(RECS(st));
        } else {
          mbar_arrive_expect_tx(RECS(st), w * (DK * 4) + VT * (DK * (4 + G_SIZE)));
        }
#endif
        if (slot < 0) {
          mbar_arrive(full);
        } else {
          const u32 bytes = (prefetched ? 0 : CKPT_BYTES) + w * ROWS * 2 +
                            (FUSED_COEF ? 0 : (flush ? K_PARTS * w * DK * 2 : 0) + COEF_BYTES + QK_BYTES);
          mbar_arrive_expect_tx(full, bytes);
        }
      }
      __syncwarp();
#if FUSED_COEF
      if (slot >= 0) {  // first: the coefficient threads wait for these, the consumers for the checkpoint
        if (lane < w) {
          bulk_load(stage + OFF_RAW_G + lane * (DK * 2), g_records + slot * sgr_slot + h * sgr_head + lane * sgr_pos, DK * 2, RECS(st));
          bulk_load(stage + OFF_RAW_K + lane * (DK * 2), k_records + slot * skr_slot + h * skr_head + lane * skr_pos, DK * 2, RECS(st));
        }
        if (lane < VT) {
          bulk_load(stage + OFF_WIN_Q + lane * (DK * 2), q + b * sq_batch + lane * sq_tok + h * sq_head, DK * 2, RECS(st));
          bulk_load(stage + OFF_WIN_K + lane * (DK * 2), k + b * sk_batch + lane * sk_tok + h * sk_head, DK * 2, RECS(st));
          bulk_load(stage + OFF_WIN_G + lane * (DK * G_SIZE),
                    (const unsigned char*)g + (b * sg_batch + lane * sg_tok + h * sg_head) * G_SIZE, DK * G_SIZE, RECS(st));
        }
      }
#endif
      if (slot >= 0) {
        if (!prefetched && lane < NBOX) tma_load_4d(stage + lane * (ROWS * 128), &ckpt_load, lane * BOXC, part * ROWS, h, slot, full);
        if (lane < w)
          bulk_load(stage + OFF_D + lane * (ROWS * 2), d_records + slot * sdr_slot + h * sdr_head + lane * sdr_pos + part * ROWS,
                    ROWS * 2, full);
#if !FUSED_COEF
        const long long uh = (long long)b * U_HEADS + (PER_CHANNEL ? h : kh);
        if (flush) {
          for (int e = lane; e < K_PARTS * w; e += 32) {  // part e / w of record e % w
            const int pp = e / w, j = e - pp * w;
            bulk_load(stage + OFF_K + (pp * LP + j) * REC_PITCH, khist + ((uh * K_PARTS + pp) * LP + j) * DK, DK * 2, full);
          }
        }
        if (lane == 0) bulk_load(stage + OFF_COEF, coef + ((long long)b * VHEADS + h) * COEF_FLOATS, COEF_BYTES, full);
        if (lane == 1) bulk_load(stage + OFF_QK, u_rows + uh * QK_BYTES, QK_BYTES, full);
#endif
      }
    }
    return;
  }

  // ---------------- consumers: warp owns rows r0 .. r0 + 15 of each unit; lane: row r0 + (lane & 15),
  // half lane >> 4 (of head_k_dim for fp32 S0 . u_c, of the records for the history terms)
  const int r0 = warp * 16;
  const int row = r0 + (lane & 15), half = lane >> 4;
  int i = 0;
  for (int u = blockIdx.x; u < units; u += gridDim.x, ++i) {
    const int bh = u / PARTS, part = u - bh * PARTS, b = bh / VHEADS, h = bh - b * VHEADS;
    const int vrow = part * ROWS + row;
    // The window's v of the lane's row, requested before the wait.
    u16 vw[VT];
#pragma unroll
    for (int s = 0; s < VT; ++s) vw[s] = v[b * sv_batch + s * sv_tok + h * sv_head + vrow];
    const int st = i % STAGES;
    const u32 stage = base + st * STAGE_BYTES;
    unsigned char* const gstage = gbase + st * STAGE_BYTES;
    const u32 full = bars + 8 * st, empty = bars + 8 * (STAGES + st);
    mbar_wait(full, (i / STAGES) & 1);
#if FUSED_COEF
    mbar_wait(READY(st), (i / STAGES) & 1);
#endif
    const int slot = ((const int*)(gstage + OFF_META))[0];
    bool released = false;
    if (slot >= 0) {
      const float* cf = (const float*)(gstage + OFF_COEF);
      const u16* ds = (const u16*)(gstage + OFF_D);
      const int w = ((const int*)cf)[C_W], n = ((const int*)cf)[C_N];
      const bool flush = verify_flushes(w, n);
      float pk[VT], pq[VT];  // the lane's half of P^k_s and P^q_s, before the halves are added
#if S0_FMA
      // S0 . u_c in exact fp32: lanes 0-15 over columns [0, DK/2), 16-31 over the rest, 4 columns (one
      // 16-byte chunk) a shared load; two sums a vector.
      {
        const unsigned char* us = gstage + OFF_QK;
        float p[NV][2];
#pragma unroll
        for (int c = 0; c < NV; ++c) p[c][0] = p[c][1] = 0.0f;
#pragma unroll 4
        for (int qq = 0; qq < DK / 8; ++qq) {
          const int kc = half * (DK / 2) + 4 * qq;
          const float4 s4 = *(const float4*)(gstage + ckpt_offset(row, kc));
#pragma unroll
          for (int c = 0; c < NV; ++c) {
            const float4 u4 = *(const float4*)(us + c * QK_PITCH + kc * 4);
            p[c][0] += s4.x * u4.x;
            p[c][1] += s4.y * u4.y;
            p[c][0] += s4.z * u4.z;
            p[c][1] += s4.w * u4.w;
          }
        }
#pragma unroll
        for (int s = 0; s < VT; ++s) {
          pk[s] = cf[C_WK + s] * (p[s][0] + p[s][1]);
          pq[s] = cf[C_WQ + s] * (p[VT + s][0] + p[VT + s][1]);
        }
      }
#else
      // S0 . u_c on tensor cores, B = u_c as column c % 8 of n tile c / 8 (lanes 4 (c % 8) .. + 3 hold
      // it), two fp32 accumulators a tile (even and odd k tiles). Column c of row r sits in lane
      // 4 (r % 8) + (c % 8) / 2, element c % 2 (+ 2 for r >= 8). bf16 rows: m16n8k16, A = the warp's 16
      // rows by ldmatrix from the swizzled boxes; fp32 rows from T = 4: m16n8k8 in three TF32 products
      // (hi hi + hi lo + lo hi: about fp32), A by ldmatrix too (below).
      {
        const unsigned char* us = gstage + OFF_QK;
        const int gq = lane >> 2, tq = lane & 3;
        float acc[NT][2][4] = {};
#if CKPT_F32
        // A by ldmatrix: fp32 elements read as b16 pairs, its four 8 x 16-byte matrices (rows 0-7 /
        // 8-15 of the warp's 16, columns k0 .. k0 + 3 / k0 + 4 .. k0 + 7) are the TF32 fragment's
        // a0 .. a3, one instruction for four scalar loads.
        const u32 arow = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int k0 = 0; k0 < DK; k0 += 8) {
          u32 a[4], ah[4], al[4];
          ldmatrix_x4(stage + ckpt_offset(arow, k0 + (lane >> 4) * 4), a[0], a[1], a[2], a[3]);
#pragma unroll
          for (int qq = 0; qq < 4; ++qq) tf32_split(__uint_as_float(a[qq]), ah[qq], al[qq]);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int c = nt * 8 + gq;
            u32 bh[2] = {0u, 0u}, bl[2] = {0u, 0u};
            if (c < NCOL) {
              tf32_split(*(const float*)(us + c * QK_PITCH + (k0 + tq) * 4), bh[0], bl[0]);
              tf32_split(*(const float*)(us + c * QK_PITCH + (k0 + tq + 4) * 4), bh[1], bl[1]);
            }
            float* d = acc[nt][(k0 / 8) & 1];
            mma_tf32(d, al[0], al[1], al[2], al[3], bh[0], bh[1]);
            mma_tf32(d, ah[0], ah[1], ah[2], ah[3], bl[0], bl[1]);
            mma_tf32(d, ah[0], ah[1], ah[2], ah[3], bh[0], bh[1]);
          }
        }
#else
        const u32 arow = r0 + (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
        for (int k0 = 0; k0 < DK; k0 += 16) {
          u32 a0, a1, a2, a3;
          ldmatrix_x4(stage + ckpt_offset(arow, k0 + (lane >> 4) * 8), a0, a1, a2, a3);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const int c = nt * 8 + gq;
            u32 b0 = 0, b1 = 0;
            if (c < NCOL) {
              b0 = *(const u32*)(us + c * QK_PITCH + (k0 + 2 * tq) * 2);
              b1 = *(const u32*)(us + c * QK_PITCH + (k0 + 8 + 2 * tq) * 2);
            }
            mma_bf16(acc[nt][(k0 / 16) & 1], a0, a1, a2, a3, b0, b1);
          }
        }
#endif
#pragma unroll
        for (int c = 0; c < NV; ++c) {
          float val = 0.0f;  // the sum of vector c's U_PARTS columns
#pragma unroll
          for (int pp = 0; pp < U_PARTS; ++pp) {
            const int col = c * U_PARTS + pp, nt = col / 8, cc = col % 8, src = 4 * (lane & 7) + (cc >> 1);
            const float lo = __shfl_sync(0xffffffffu, acc[nt][0][cc & 1] + acc[nt][1][cc & 1], src);
            const float hi = __shfl_sync(0xffffffffu, acc[nt][0][2 + (cc & 1)] + acc[nt][1][2 + (cc & 1)], src);
            val += half == 0 ? ((lane & 8) ? hi : lo) : 0.0f;
          }
          if (c < VT) {
            pk[c] = cf[C_WK + c] * val;
          } else {
            pq[c - VT] = cf[C_WQ + c - VT] * val;
          }
        }
      }
#endif
      // History: records j = half, half + 2, ... < w (w <= L - 1), coefficient rows of TP floats.
#pragma unroll
      for (int qq = 0; qq < LREC / 2; ++qq) {
        const int j = half + 2 * qq;
        if (j < w) {
          const float dj = bf16_to_f32(ds[j * ROWS + row]);
          const float4* hk = (const float4*)(cf + C_HK + j * TP);
          const float4* hq = (const float4*)(cf + C_HQ + j * TP);
#pragma unroll
          for (int v4 = 0; v4 < TP / 4; ++v4) {
            const float4 ck = hk[v4], cq = hq[v4];
            const float kk[4] = {ck.x, ck.y, ck.z, ck.w}, qv[4] = {cq.x, cq.y, cq.z, cq.w};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              if (4 * v4 + e < VT) {
                pk[4 * v4 + e] += kk[e] * dj;
                pq[4 * v4 + e] += qv[e] * dj;
              }
            }
          }
        }
      }
      // The window's scalars, read before a unit that does not flush gives its stage back.
      float A[VT][VT], Q[VT][VT], bt[VT];
#pragma unroll
      for (int s = 0; s < VT; ++s) {
        bt[s] = cf[C_BETA + s];
#pragma unroll
        for (int j = 0; j <= s; ++j) {
          A[j][s] = cf[C_A + j * TP + s];
          Q[j][s] = cf[C_Q + j * TP + s];
        }
      }
      released = !flush;
      if (released) {
        __syncwarp();
        if (lane == 0) mbar_arrive(empty);
      }
#pragma unroll
      for (int s = 0; s < VT; ++s) {
        pk[s] += __shfl_xor_sync(0xffffffffu, pk[s], 16);
        pq[s] += __shfl_xor_sync(0xffffffffu, pq[s], 16);
      }
      // The window, serially (every lane: its row's d_s and o_s).
      float d[VT], o[VT];
#pragma unroll
      for (int s = 0; s < VT; ++s) {
        float r = bf16_to_f32(vw[s]) - pk[s];
#pragma unroll
        for (int j = 0; j < s; ++j) r -= A[j][s] * d[j];
        d[s] = bt[s] * r;
        float os = pq[s];
#pragma unroll
        for (int j = 0; j <= s; ++j) os += Q[j][s] * d[j];
        o[s] = os;
      }
      // Outputs and the window's d records: tokens of this half's parity, s < n.
      u16* drec = d_records + slot * sdr_slot + h * sdr_head + vrow;
      const int wbase = flush ? 0 : w;
#pragma unroll
      for (int s = 0; s < VT; ++s) {
        if ((s & 1) == half && s < n) {
          out[b * so_batch + s * so_tok + h * so_head + vrow] = f32_to_bf16(o[s]);
          drec[(long long)(wbase + s) * sdr_pos] = f32_to_bf16(d[s]);
        }
      }
      if (flush) {
        __syncwarp();
#if PER_CHANNEL
        fold_warp_rows_channels(gstage, ds, stage + OFF_K, cf + C_E0, w - 1, r0, lane);
#else
        fold_warp_rows(gstage, ds, stage + OFF_K, cf + C_WGT, cf[C_FOLD], w - 1, r0, lane);
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
