"""ReplaySSM gated delta-rule decode step (GDN: a log-decay per value head; KDA: one per key
channel) in CUDA C++ (``kernels/cuda/gated_delta_replay_step.cu``) for bf16, fp32 or fp8-e4m3
checkpoints (fp8: head_k_dim 128, the row scales ``checkpoint_scale`` [slot, v_heads,
head_v_dim] fp32 beside them, the step kernel at every batch), bf16 activations and bf16 records
on sm_90.

GDN: two launches per step on the current stream, a coefficient launch per (batch row, key head)
(the value heads' record scores and decays, q̂ and k̂, the k̂ and g appends) and a persistent
step kernel over units of ``rows`` value rows of one value head (TMA tensor-map copies of the
checkpoint, S0 q̂ and S0 k̂ in exact fp32, the d append, an exact-fp32 flush); at small batches
one launch of a kernel without a ring (``DeltaCudaConfig(small=True)``). KDA: the step kernel
alone, its consumer warps forming each unit's per-channel coefficients from the records it copies
(no coefficient launch: its per-channel records would be read twice, and its block written and read
back). The .cu file's
header documents what each computes; the contract is the Triton kernel's
(:mod:`trtllm_replayssm.kernels.gated_delta_replay`): same cache tensors, same results up to fp32
rounding, cursor advanced on the device, padding rows (slot < 0) untouched, capturable in a CUDA
graph.

:func:`delta_cuda_unsupported` says why a call cannot take this route (None: it can); the launcher
raises with that reason when asked to run anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Tuple

import torch

from torch import Tensor

from .gated_delta_common import multiprocessor_count
from .nvrtc import (
    DTYPE_CODE,
    REGISTERS_PER_SM,
    SMEM_PER_SM,
    SMEM_RESERVED_PER_CTA,
    KernelArgs,
    checkpoint_tensor_maps,
    compile_program,
    copyable_rows,
    device_unsupported,
    load_kernel,
    scale_unsupported,
)

__all__ = [
    "SOURCE",
    "DeltaCudaConfig",
    "delta_cuda_config",
    "delta_qk_floats",
    "runs_one_launch",
    "s0_hfma2_fits",
    "s0_qgmma_fits",
    "step_kernel_in_one_launch",
    "delta_cuda_unsupported",
    "delta_shape_unsupported",
    "records_unsupported",
    "delta_step_defines",
    "delta_step_shared_bytes",
    "unit_rows",
    "delta_coefficient_floats",
    "compile_delta_ptx",
    "launch_delta_replay_step_cuda",
]

SOURCE = "gated_delta_replay_step.cu"
CHECKPOINT_DTYPES = (torch.bfloat16, torch.float32, torch.float8_e4m3fn)  # element sizes 2, 4, 1
MAX_L_CUDA = 32  # one record per lane in the coefficient launch's scans
MAX_VALUE_HEADS_PER_KEY_HEAD = 32  # a warp per value head in a coefficient CTA
DEALT_UNITS_MAX_BATCH = 1024  # dealt_units: the rows its order holds (the .cu file's ORDER_ROWS)
DEALT_ORDER_BYTES = 272  # dealt_units: 32 words of flushing bits, 33 prefix counts, 16-byte rounded (ORDER_BYTES)
CLAIM_BITS = 21  # claimed_units: the launch word's claim bits (the .cu file's CLAIM_BITS); CTAs above them
# GDN up to this batch: the small one-launch kernel (H200, session 22: Qwen3.5-122B, L = 16, fp32 /
# bf16 batch 1 4.42 / 3.90 us against the two launches' 7.86 / 7.21, batch 2 7.48 / 6.70 against
# 9.94 / 8.41; from batch 4 the two launches are as fast or faster).
SMALL_MAX_BATCH = 2
# GDN above SMALL_MAX_BATCH and up to this batch: one launch (H200, session 23, Qwen3.5-122B, L = 16,
# us, one launch / two launches: fp32 batch 4 10.55 / 12.95, 16 28.64 / 28.75; bf16 4 9.27 / 12.77,
# 16 21.66 / 22.14; from batch 64 the two launches are faster: fp32 90.32 / 91.12, bf16 57.78 /
# 65.88, the coefficient launch shared by a key head's value heads and parts).
ONE_LAUNCH_MAX_BATCH = 16
# GDN with an fp32 checkpoint: one launch without coefficient warps up to this batch (H100, session
# 48, Qwen3.5-122B, L = 16, us, one launch / two launches (the table's 64-row units at 2 CTAs), two
# rounds alike to 0.3%: batch 4 11.15 / 11.64, 6 15.52 / 14.95, 8 19.55 / 18.65, 12 26.89 / 25.36,
# 16 34.02 / 32.22); above it one launch with them (GDN_F32_COEF_WARPS_MIN_BATCH).
F32_ONE_LAUNCH_MAX_BATCH = 4
# bf16 checkpoints from this batch: units of 128 value rows (session 22: batch 64 57.67 against
# 60.50 us with 64 rows, batch 256 194.59 against 193.95; batch 16 23.21 against 22.03).
WIDE_UNITS_BATCH = 64
# A bf16 checkpoint with coefficient warps up to this batch: one CTA an SM with as many stages as
# fit, up to 4 (H200, session 24, Kimi Linear, L = 16, us, coefficient warps / without: batch 1
# (32-row units) 4.73 / 5.21, 16 (128-row units, 4 stages) 13.65 / 15.53, 64 37.76 / 40.56); above
# it two stages at as many CTAs as fit where those are two or more (session 26, us, two CTAs / one
# CTA, 4 stages / no coefficient warps, 2 CTAs: batch 64 37.99 / 37.42 / -, 256 115.70 / - /
# 125.40, 512 216.35 / - / 236.16), else the deep ring at one CTA (H100, session 45, Kimi Linear,
# L = 32, us, 2 stages / 3: batch 128 109.79 / 97.60, 256 209.75 / 184.65, 512 404.10 / 353.95).
DEEP_RING_MAX_BATCH = 64
# GDN with a bf16 checkpoint from this batch: one launch, COEF_WARPS coefficient warps and the deep
# ring of 128-row units, one CTA of four stages (H100, sessions 44 and 45, Qwen3.5-122B, L =
# 16, us, the table / 128,4,1,one,cw4,fmma: batch 4 7.84 / 8.56, 8 12.89 / 12.85, 12 17.43 / 17.04,
# 16 21.91 / 21.30 and 22.14 / 21.31, 24 30.63 / 29.31, 32 40.51 / 36.92, 64 67.19 / 66.61 and
# 66.39 / 66.01; the table: 64-row units at 3 CTAs, one launch up to 16, then two, 128-row units
# from 64).
# Above DEEP_RING_MAX_BATCH too, not the two launches (H100, session 54, Qwen3.5-122B, us, the
# table's two launches of 128-row units / 128,3,1,one,cw4,fmma,cr,dc,rw: L = 16 batch 128 124.78 /
# 122.42, 256 244.67 / 236.99, 512 467.87 / 451.81; L = 32 128 135.25 / 128.70, 256 261.73 /
# 246.69, 512 501.38 / 471.94; with two stages 127.02 / 247.28 / 472.80 at L = 16), and at four
# stages there as below it (session 55, three stages / four, L = 16: batch 80 78.40 / 77.40, 96
# 93.57 / 92.62, 112 106.34 / 105.78, 256 233.42 / 232.58, 512 443.07 / 443.71; L = 8 128 126.08
# / 125.94, 256 237.95 / 234.53, 512 453.95 / 445.52; L = 32 128 127.03 / 127.04, 256 243.25 /
# 243.92, 512 463.76 / 467.10).
GDN_COEF_WARPS_MIN_BATCH = 12
# GDN with an fp32 checkpoint from this batch: one launch, COEF_WARPS coefficient warps, 128-row
# units, two stages at one CTA (H100, session 53, Qwen3.5-122B, us, the table's two launches of
# 64-row units at 2 CTAs / 128,2,1,one,cw4: L = 16 batch 64 113.91 / 114.69, 96 163.44 / 163.66,
# 128 221.26 / 219.74 and 226.54 / 224.45, 192 321.57 / 317.25, 256 422.94 / 415.10 and 433.06
# / 423.52, 512 829.09 / 809.82 and 851.87 / 828.93; L = 8 128 224.72 / 222.77, 512 850.21 /
# 830.26; L = 32 48 88.89 / 89.17, 96 171.45 / 167.83, 256 437.25 / 423.46).
# With the records split over the coefficient warps (rec_warps) from 64 (session 54, us, two
# launches / 128,2,1,one,cw4,cr,dc,rw: batch 16 32.66 / 32.99, 64 116.00 / 114.64, 96 166.32 /
# 163.98). From F32_ONE_LAUNCH_MAX_BATCH + 1 with 64-row units and four stages below
# GDN_F32_WIDE_UNITS_MIN_BATCH (H100, session 62, L = 16, us, the table then (two launches of
# 64-row units at 2 CTAs below 64) / 64,4,1,one,cw4,cr,dc,rw: Qwen3.5-122B batch 5 13.17 / 12.38,
# 8 18.52 / 18.10, 12 25.39 / 25.33, 16 32.40 / 32.28, 24 44.99 / 45.10, 32 59.82 / 58.62, 48
# 85.61 / 84.52, 60 104.95 / 103.35, 62 108.14 / 106.68, 64 113.17 / 111.90 (128-row units);
# Qwen3.5-4B 16 20.24 / 18.52, 64 60.71 / 59.98; on an H200 see GDN_F32_WIDE_UNITS_MIN_BATCH).
GDN_F32_COEF_WARPS_MIN_BATCH = F32_ONE_LAUNCH_MAX_BATCH + 1
# GDN with an fp32 checkpoint: 128-row units (two stages) from this batch, 64-row units (as many
# stages as fit, up to 4) below it (H100, session 62, L = 16, us, 128,2,1 / 64,4,1, both
# one,cw4,cr,dc,rw: Qwen3.5-122B batch 64 113.17 / 111.90, 66 115.46 / 115.42, 80 136.29 /
# 136.67, 96 161.58 / 161.60, 112 186.27 / 187.60, 128 217.89 / 217.90, 256 412.27 / 422.43).
# On the H200 128-row units win from batch 40, more so with flush_first (session 65, Qwen3.5-122B,
# L = 16, us, 64,4,1 / 128,2,1 / 128,2,1 with flush_first, all one,cw4,cr,dc,rw: batch 16 25.46 /
# 26.30 / -, 24 35.80 / 36.18 / 35.61, 32 45.78 / 46.82 / 45.82, 40 56.58 / 55.82 / 54.95, 48
# 67.27 / 66.07 / -, 64 88.03 / 86.43 / 85.35; another call: 48 - / 65.80 / 65.43, 64 - / 86.40 /
# 85.52): the issue-23 figures are the H200's, so 128-row units from 33.
GDN_F32_WIDE_UNITS_MIN_BATCH = 33
# KDA with a bf16 checkpoint: this many coefficient warps at every batch. GDN takes none since its
# flush fold went onto tensor cores (session 26, us, 64 rows, 3 CTAs / 128 rows, 4 stages, 4
# coefficient warps, both folding on tensor cores: Qwen3.5-122B batch 8 11.61 / 11.74, 16 18.96 /
# 18.93; Qwen3.5-4B 8 7.85 / 8.33, 16 12.32 / 12.59).
COEF_WARPS = 4
# GDN with an fp8 checkpoint folds its flush on tensor cores from this batch (H100, sessions 43 and
# 44, Qwen3.5-122B, L = 16, us, one launch, FMA fold / tensor cores: batch 4 7.57 / 7.98, 5 10.08 /
# 8.68, 6 11.18 / 9.25, 7 12.01 / 11.01, 8 12.47 / 11.67, 16 20.69 / 19.26; two launches at 64
# units: 64 53.08 / 46.02, 256 175.56 / 160.82).
FP8_FLUSH_MMA_MIN_BATCH = 5
# GDN with an fp8 checkpoint: one launch up to this batch (above SMALL_MAX_BATCH), two launches above
# it (H100, session 44, Qwen3.5-122B, L = 16, us, both folding on tensor cores, one launch / two at
# 3 stages and 3 CTAs: batch 8 11.57 / 12.07, 12 14.90 / 14.86, 13 16.43 / 15.24, 14 17.42 /
# 16.09, 16 19.11 / 17.16). Since the records split over the consumers (rec_warps) and the deferred
# count, one launch wins to 16 (session 55, two launches / 64,2,3,one,fmma,cr,dc,rw: L = 16 batch
# 13 15.09 / 14.56, 14 15.91 / 15.45, 15 16.34 / 15.74, 16 17.07 / 16.75, 20 19.44 / 20.07; batch 16
# at L = 32 18.36 / 18.11, at L = 8 17.35 / 17.67).
FP8_ONE_LAUNCH_MAX_BATCH = 16
# GDN's two launches with an fp8 checkpoint and its flush on tensor cores, 64-row units, (stages,
# CTAs an SM) in order of preference, from FP8_DEEP_RING_MIN_BATCH to DEEP_RING_MAX_BATCH (True)
# and elsewhere (False) (H100, sessions 43 and 44, Qwen3.5-122B, L = 16, us, two rounds alike to
# 1%, 2,3 / 3,3 / 4,3 / 4,2: batch 64 46.41 / 46.00 / 47.64 / 44.43, 256 160.32 / 155.28 / 155.26 /
# 165.05, 512 315.26 / 305.54 / 306.91 / 325.41; 3,3 / 4,2: batch 13 15.24 / 15.91, 16 17.16 /
# 17.64, 24 21.77 / 22.17, 32 26.87 / 26.58).
FP8_MMA_RINGS = {True: ((4, 2), (3, 3), (2, 3)), False: ((3, 3), (2, 3))}
FP8_DEEP_RING_MIN_BATCH = 32
# KDA with an fp8 checkpoint from KDA_FP8_RING_MIN_BATCH: rings this many stages deep at as many
# CTAs an SM as fit (H100, sessions 44 and 45, Kimi Linear, us, 128-row units. L = 16, the bf16
# table's ring / 3 stages at 2 CTAs: batch 16 15.42 / 16.64 (4 stages, 1 CTA), 32 24.90 / 25.92
# (4, 1), 64 41.73 / 41.04 and 41.56 / 40.93 (4, 1), 128 71.34 / 68.34, 256 127.55 / 120.64, 512
# 235.84 / 221.34 (2 stages, 2 CTAs). L = 32, one CTA, 2 stages / 3: 128 120.56 / 108.30, 256
# 226.90 / 202.62, 512 435.84 / 387.66). ncu at 256 (2 stages): the consumers wait 18% of their
# samples for the coefficient warps, which wait 40% of theirs for records the two-stage ring has
# not yet let in.
KDA_FP8_STAGES = 3
KDA_FP8_RING_MIN_BATCH = 64
# KDA with a bf16 checkpoint at these batches: three stages at one CTA, instead of four (up to
# DEEP_RING_MAX_BATCH) or two stages at two CTAs (above it) (H100, session 53, Kimi Linear, us,
# the table / 128,3,1,one,cw4: L = 16 batch 64 41.01 / 40.18 and 40.54 / 39.66, 96 58.26 / 56.31,
# 128 74.84 / 72.82 and 73.39 / 71.80, 160 90.14 / 87.99, 192 106.35 / 105.49, 256 137.82 /
# 137.07 and 134.89 / 134.55, 512 263.50 / 263.46; L = 8 96 55.08 / 53.19, 192 100.58 / 99.01,
# 256 130.94 / 128.64; at 48 three stages win too (31.49 / 30.69 with flushing units first), but
# an fp8 checkpoint, which takes the bf16 table below KDA_FP8_RING_MIN_BATCH, loses 4% there).
KDA_THREE_STAGE_BATCHES = range(64, 256)
# KDA up to this batch: units of 32 rows (16 where 32 do not tile head_v_dim), COEF_WARPS
# coefficient warps, two stages, registers uncapped (one CTA's), whatever the checkpoint (H100,
# session 56, Kimi Linear, L = 16, us, the table before / this form, same rounds: bf16 batch 1
# 3.86 / 3.62, 2 4.24 / 4.09; fp8 1 3.97 / 3.75, 2 4.17 / 4.07; fp32 1 4.18 / 3.70, 2 5.03 /
# 4.95; fp8 batch 2 L = 8 4.16 / 4.02, L = 32 4.81 / 4.89; at batch 3 and 4 it loses, bf16 4.78 /
# 5.41 and 5.20 / 5.78). Batch 1's gain is the register cap the table had for three CTAs (32,2,3
# 3.87, 32,2,1 3.62 at bf16): a unit a CTA, the cap only lengthened each role's chain.
KDA_NARROW_MAX_BATCH = 2
# The step kernel in one launch with a 16- or 32-bit checkpoint takes each block's flushing units
# first (``flush_first``) at FLUSH_FIRST_BATCHES (H100, session 52, us, table without / with it,
# Kimi Linear KDA bf16 L = 16: batch 1 4.07 / 4.26, 2 4.42 / 4.60, 8 8.13 / 8.07, 12 10.55 /
# 10.12, 16 12.96 / 12.15, 24 17.41 / 16.65, 32 22.28 / 21.40, 48 32.26 / 31.38, 64 40.42 / 40.31,
# 256 135.18 / 135.89; L = 8 16 12.53 / 12.06, 64 38.77 / 39.68; L = 32 16 14.75 / 14.48; KDA
# fp32 16 20.07 / 19.65, 64 64.78 / 65.09; Qwen3.5-122B GDN bf16 12 15.81 / 15.39, 16 20.17 /
# 19.61, 32 36.38 / 35.85, 64 65.65 / 66.74. An fp8 checkpoint gains nothing: KDA 12-48 0.3-1.2%
# slower, GDN 12 1.9% slower).
FLUSH_FIRST_BATCHES = range(12, 64)
# KDA with a bf16 checkpoint takes flush_first at KDA_BF16_FLUSH_FIRST_BATCHES (from 12 on), and its
# consumers sum the coefficient warps' partials (``consumer_sums``) at KDA_CONSUMER_SUMS_BATCHES (H200, session 65,
# Kimi Linear, L = 16, us, the table (flush_first up to 63) / with flush_first / consumer_sums /
# both: batch 16 - / 10.62 / - / 10.73, 32 - / 17.65 / - / 17.59, 48 - / 24.72 / - / 24.25, 64
# 32.91 / 31.88 / 32.39 / 31.36, 96 45.80 / 44.80 / 44.92 / 44.20, 128 58.93 / 57.37 / 57.72 /
# 56.56, 256 104.83 / 103.34 / 104.44 / 103.58 and 104.95 / 103.57 / - / 103.60, 512 197.50 /
# 197.36 / 196.54 / 196.99 and 197.06 / 196.48 / - / 196.16 (512: the rounds spread 1-7%)).
KDA_BF16_FLUSH_FIRST_BATCHES = range(12, 1 << 31)
KDA_CONSUMER_SUMS_BATCHES = range(48, 256)
# The step kernel in one launch deals its units (``dealt_units``, in place of flush_first and
# defer_count) with an fp8 KDA checkpoint at KDA_FP8_DEALT_BATCHES, a bf16 GDN one at
# GDN_BF16_DEALT_BATCHES, and with their flush units spread (``dealt_spread``) an fp32 GDN one at
# GDN_F32_DEALT_BATCHES and a bf16 KDA one at KDA_BF16_DEALT_BATCHES (H100, session 67, L = 16, us,
# the table without / with it: Kimi Linear KDA fp8 batch 16 10.56 / 11.07, 32 17.81 / 17.45, 48
# 24.32 / 23.60, 64 31.73 / 29.31 and 31.88 / 29.35, 96 43.89 / 40.30, 128 54.52 / 51.20, 192 76.34
# / 73.05, 256 96.94 / 94.58, 384 139.40 / 136.86, 512 181.89 / 178.53, 768 261.14 / 263.86;
# Qwen3.5-122B GDN bf16 24 26.75 / 26.90, 32 34.33 / 34.44, 48 49.15 / 48.54, 64 64.63 / 63.01, 96
# 92.81 / 90.85, 128 121.22 / 118.99, 256 233.76 / 232.51; GDN fp32, the table / dealt_units / with
# dealt_spread: 48 85.47 / 86.39 / 85.73, 64 112.50 / 113.61 / 111.18, 96 161.68 / 162.64 / 161.26,
# 128 217.86 / 217.18 / 215.90 (again, the table / with dealt_spread: 64 112.46 / 111.25, 96 161.68
# / 161.14, 128 217.50 / 215.58); KDA bf16, the table / with dealt_spread: 96 54.01 / 54.56, 128
# 70.43 / 70.07, 192 101.65 / 101.19, 256 135.23 / 132.70 and 135.08 / 132.66, 384 194.05 / 193.02,
# 512 257.46 / 257.06 (dealt_units alone: 16 12.03 / 12.97, 32 21.32 / 22.24, 48-512 within 1%)).
KDA_FP8_DEALT_BATCHES = range(32, 513)
GDN_BF16_DEALT_BATCHES = range(48, 257)
GDN_F32_DEALT_BATCHES = range(64, 129)
KDA_BF16_DEALT_BATCHES = range(256, 513)
# (per_channel, checkpoint element bytes) -> the batches that take dealt_units, and whether their
# flush units are spread (dealt_spread); other checkpoints take none.
DEALT_UNITS_ROUTES = {
    (True, 1): (KDA_FP8_DEALT_BATCHES, False),
    (True, 2): (KDA_BF16_DEALT_BATCHES, True),
    (False, 2): (GDN_BF16_DEALT_BATCHES, False),
    (False, 4): (GDN_F32_DEALT_BATCHES, True),
}
# The step kernel in one launch claims its units after each CTA's first stages (``claimed_units``,
# in place of flush_first, defer_count and dealt_units) at CLAIMED_UNITS_ROUTES' batches, by
# (per_channel, checkpoint element bytes); other checkpoints (GDN bf16, fp8) claim none. L = 16, us,
# the table / with claimed_units. H100, session 70: Qwen3.5-122B GDN fp32 256 421.38 / 409.44, 512
# 825.92 / 805.92; Kimi Linear KDA bf16 256 135.63 / 132.16, 512 263.58 / 253.63; fp8 256 95.34 /
# 93.30, 512 179.25 / 174.51; fp32 256 237.57 / 227.82, 512 455.41 / 438.70; GDN bf16, slower: 256
# 234.80 / 237.74, 512 453.09 / 463.62. H200, session 71: GDN fp32 48 65.81 / 63.88, 64 85.73 /
# 83.69, 96 122.14 / 118.74, 128 162.50 / 160.08; KDA fp32 32 27.92 / 26.53, 64 50.03 / 46.66, 128
# 91.90 / 86.90, 192 130.75 / 125.26; slower below 256: KDA bf16 32 17.69 / 19.22, 64 31.55 / 33.15,
# 128 56.91 / 60.82, 192 83.13 / 87.94; KDA fp8 32 17.16 / 18.61, 64 28.23 / 30.68, 128 46.35 /
# 50.18, 192 66.79 / 70.26. Up to CLAIMED_UNITS_MAX_BATCH, whose units stay inside the claim
# count's CLAIM_BITS for up to 256 units a batch row (check_claim_count); below the least batch
# timed, none.
CLAIMED_UNITS_MAX_BATCH = 4096
CLAIMED_UNITS_ROUTES = {
    (True, 1): range(256, CLAIMED_UNITS_MAX_BATCH + 1),
    (True, 2): range(256, CLAIMED_UNITS_MAX_BATCH + 1),
    (True, 4): range(32, CLAIMED_UNITS_MAX_BATCH + 1),
    (False, 4): range(48, CLAIMED_UNITS_MAX_BATCH + 1),
}
# GDN with an fp32 checkpoint and coefficient warps takes flush_first only with 128-row units, at
# these batches (H200, session 65, Qwen3.5-122B, L = 16, us, 128,2,1,one,cw4,cr,dc,rw without /
# with it: batch 24 36.18 / 35.61, 32 46.82 / 45.82, 40 55.82 / 54.95, 48 65.80 / 65.43, 64 86.43
# / 85.35 and 86.40 / 85.52, 96 122.18 / 121.92, 128 163.90 / 163.94, 256 307.39 / 308.05; its
# 64-row units below GDN_F32_WIDE_UNITS_MIN_BATCH were not timed with it).
GDN_F32_FLUSH_FIRST_BATCHES = range(GDN_F32_WIDE_UNITS_MIN_BATCH, 97)
# KDA with an fp8 checkpoint and L2-normalised q and k takes its S0 products in f16x2 FMAs
# (``s0_hfma2``) at every batch (H200, session 65, Kimi Linear, L = 16, us, the table without /
# with it: batch 1 3.63 / 3.47, 4 4.72 / 4.58, 8 6.78 / 6.57, 16 10.78 / 10.32, 32 18.41 / 17.47,
# 64 30.73 / 29.23 and 30.56 / 29.05, 128 54.00 / 51.17, 256 98.70 / 92.68 and 98.81 / 92.64, 512
# 188.98 / 176.41 and 188.72 / 176.44; ncu at 256: 191,624 / 180,161 cycles at 1.94 / 1.93 GHz).
# GDN's step kernel in one launch splits the records over the warps forming the coefficients
# (``rec_warps``) but with a bf16 checkpoint without coefficient warps at these batches (H100,
# session 54, Qwen3.5-122B, L = 16, us, table without / with it: batch 3 6.74 / 6.13, 4 7.63 /
# 8.05 and 7.70 / 8.07, 5 9.92 / 8.85, 6 10.79 / 9.43, 7 11.48 / 11.39, 8 12.04 / 12.27 and 12.14 /
# 12.30, 9 13.96 / 13.01, 10 15.07 / 14.68, 11 15.95 / 15.43; L = 8 batch 4 8.09 / 8.62, L = 32
# 9.10 / 8.46).
REC_WARPS_LOSING_BATCHES = (4, 8)


@dataclass(frozen=True)
class DeltaCudaConfig:
    """How the step kernel runs: units of ``rows`` value rows (a multiple of 16 up to 128 dividing
    head_v_dim), ``stages`` units in flight per CTA (shared-memory ring), register-capped for
    ``min_ctas`` resident CTAs per multiprocessor, both launches programmatic (``pdl``): the
    coefficient launch after the previous kernel, the step kernel after the coefficient launch.
    ``small``: one launch of
    ``delta_replay_small`` instead (no ring: a CTA per ``small_rows`` value rows of a head and batch
    row, a multiple of 16 up to 128 dividing head_v_dim, registers capped for ``min_ctas`` resident
    CTAs; the other fields unused). ``one_launch``: the step kernel alone, forming each unit's
    coefficients itself (always so for KDA, whatever this says: :func:`runs_one_launch`).
    ``coef_warps`` (one launch only): that many extra warps form each unit's coefficients as soon as
    its stage is full, while the consumer warps work on the units before it (0: the consumer warps
    form them first). ``s0_mma`` (a bf16 checkpoint only): the consumers' S0 q̂ and S0 k̂ on tensor
    cores (m16n8k16; GDN on the raw bf16 q and k, the norms applied after; KDA's e0 ⊙ q̂ and e0 ⊙ k̂
    as three bf16 parts each) instead of fp32 FMAs. ``flush_mma`` (the step kernel): a flush unit's
    fold of the records on tensor cores (KDA: the bf16 d records against U's bf16 parts; GDN: the
    parts of e_j d_j against the bf16 k̂ records; three parts for an fp32 checkpoint, two for a
    bf16 or fp8 one; fp8: the folded rows held in registers for their new scales) instead of fp32
    FMAs. ``coalesce_recs`` (the step kernel): a unit's k̂ records, its d records where ``rows``
    is head_v_dim and KDA's g records, copied as one bulk copy each instead of one a record (the
    records must be contiguous over positions: :func:`records_unsupported`). ``defer_count`` (the
    step kernel in one launch): each block of 32 units' cursor reads counted once the CTA's first
    ``stages`` units of it are issued, not after the first. ``flush_first`` (the step kernel in one
    launch): each block of 32 units taken with its flushing units first, so that a flush's fold
    overlaps the other units' coefficients instead of following them. ``dealt_units`` (the step
    kernel in one launch, without ``flush_first`` and ``defer_count``, batch up to
    :data:`DEALT_UNITS_MAX_BATCH`): every CTA reads every row's cursor and takes as many units as
    the fixed order gives it, of them its even share of the flush units (the first of its units,
    then evenly spaced; with ``dealt_spread`` evenly spaced from the middle of the first stretch,
    none first), instead of units c, c + grid, ... in row order; each CTA counts itself once and the
    launch's last count advances every cursor (kernel notes "Session 67"). ``rec_warps`` (GDN, the
    step kernel in one launch): the warps forming a unit's coefficients split its records instead of
    its columns, each summing its records' scores, norms and decays itself (one barrier instead of
    two, no partial sums in shared memory). ``consumer_sums`` (KDA with coefficient warps, exact S0
    products): the coefficient warps hand over their per-warp partial scores and norms without a
    barrier, and each consumer warp sums them, normalises and appends k̂ itself (not routed; a
    probe form, kernel notes "Session 61"). ``s0_qgmma`` (KDA, an fp8 checkpoint, L2-normalised q
    and k, ``rows`` 64 or 128, the step kernel; compiled for sm_90a): the consumers' S0 q̂ and S0 k̂
    as fp8 products on tensor cores (wgmma m64n8k32 on the codes as they lie in the stage, the
    vectors as four e4m3 parts each) instead of fp32 FMAs on the widened codes (a probe form, kernel
    notes "Session 64"). ``s0_hfma2`` (KDA, an fp8 checkpoint, L2-normalised q and k, the step
    kernel): the consumers' S0 q̂ and S0 k̂ as f16x2 FMAs on CUDA cores (the codes as f16 pairs
    against e0 ⊙ q̂ and e0 ⊙ k̂ in f16, which the coefficient warps write; sums of 16 products in
    f16, then fp32) instead of fp32 FMAs on the codes widened to fp32 (kernel notes "Session 65"; its
    f16 range takes e0 <= 1, i.e. log-decays g <= 0, as KDA's gate makes them); GDN in two launches
    with an fp8 checkpoint: the same products against launch 1's f16 q and k (each times the power of
    two that puts its largest magnitude in [1, 2)) instead of tensor-core products (session 66).
    ``even_grid`` (the step kernel): as few CTAs as take the units in as many rounds as the most that
    fit would (every CTA the same number of units), instead of the most that fit. ``claimed_units``
    (the step kernel in one launch, without ``flush_first``, ``defer_count`` and ``dealt_units``):
    each CTA takes its first ``stages`` units in the fixed order, then units claimed one at a time
    from a count kept in the low :data:`CLAIM_BITS` bits of the word where each CTA counts itself
    once (as with ``dealt_units``), so that CTAs that stream faster take more units
    (:data:`CLAIMED_UNITS_ROUTES`; kernel notes "Session 69" to "Session 71")."""

    rows: int
    stages: int
    min_ctas: int
    pdl: bool = True
    small: bool = False
    small_rows: int = 32
    one_launch: bool = False
    coef_warps: int = 0
    s0_mma: bool = False
    flush_mma: bool = False
    coalesce_recs: bool = False
    defer_count: bool = False
    flush_first: bool = False
    dealt_units: bool = False
    dealt_spread: bool = False
    rec_warps: bool = False
    consumer_sums: bool = False
    s0_qgmma: bool = False
    s0_hfma2: bool = False
    even_grid: bool = False
    claimed_units: bool = False

    def label(self) -> str:
        if self.small:
            return f"cuda,small,{self.small_rows},m{self.min_ctas}"
        one = ",one" if self.one_launch else ""
        cw = f",cw{self.coef_warps}" if self.coef_warps else ""
        mma = ",mma" if self.s0_mma else ""
        fmma = ",fmma" if self.flush_mma else ""
        cr = ",cr" if self.coalesce_recs else ""
        dc = ",dc" if self.defer_count else ""
        ff = ",ff" if self.flush_first else ""
        du = (",ds" if self.dealt_spread else ",du") if self.dealt_units else ""
        rw = ",rw" if self.rec_warps else ""
        cs = ",cs" if self.consumer_sums else ""
        qg = ",qg" if self.s0_qgmma else ""
        h2 = ",h2" if self.s0_hfma2 else ""
        eg = ",eg" if self.even_grid else ""
        cl = ",cl" if self.claimed_units else ""
        return (f"cuda,r{self.rows},{self.stages},{self.min_ctas},{'pdl' if self.pdl else 'nopdl'}"
                f"{one}{cw}{mma}{fmma}{cr}{dc}{ff}{du}{rw}{cs}{qg}{h2}{eg}{cl}")


def runs_one_launch(cfg: DeltaCudaConfig, per_channel: bool) -> bool:
    """Whether the step kernel forms the coefficients itself (no coefficient launch): always for
    KDA (``per_channel``), for GDN when ``cfg.one_launch``."""
    return per_channel or cfg.one_launch


def step_kernel_in_one_launch(cfg: DeltaCudaConfig, per_channel: bool) -> bool:
    """Whether ``cfg`` launches the step kernel (not the small kernel) in one launch: the builds that
    may take ``coef_warps``, ``defer_count``, ``flush_first``, ``dealt_units`` and ``claimed_units``."""
    return not cfg.small and runs_one_launch(cfg, per_channel)


def s0_qgmma_fits(cfg: DeltaCudaConfig, state_bytes: int, per_channel: bool) -> bool:
    """Whether ``cfg``'s build can take ``s0_qgmma`` (with L2-normalised q and k, which the launch
    names): KDA's step kernel with an fp8 checkpoint, whole warpgroups of consumers (64 or 128
    rows a unit) and no ``consumer_sums``."""
    return per_channel and state_bytes == 1 and not cfg.small and cfg.rows % 64 == 0 and not cfg.consumer_sums


def s0_hfma2_fits(cfg: DeltaCudaConfig, state_bytes: int, per_channel: bool) -> bool:
    """Whether ``cfg``'s build can take ``s0_hfma2``: KDA's step kernel with an fp8 checkpoint,
    without ``consumer_sums`` or ``s0_qgmma`` (with L2-normalised q and k, which the launch names),
    or GDN's step kernel in two launches with an fp8 checkpoint."""
    if state_bytes != 1 or cfg.small:
        return False
    if per_channel:
        return not cfg.consumer_sums and not cfg.s0_qgmma
    return not cfg.one_launch


def step_grid(units: int, resident: int, even: bool) -> int:
    """The persistent step kernel's CTAs for ``units`` units and ``resident`` CTAs that fit the
    device at once: ``min(units, resident)``, or with ``even`` the fewest CTAs that take the units
    in the same number of rounds, ceil(units / rounds) (e.g. 4,096 units on 132 SMs: 128 CTAs of 32
    units each instead of 4 CTAs with a 32nd unit)."""
    grid = min(units, resident)
    if not even:
        return grid
    rounds = -(-units // grid)
    return -(-units // rounds)


def _records_padded(L: int) -> int:
    return (L + 15) // 16 * 16


def check_claim_count(units: int, grid: int) -> None:
    """``claimed_units``' count holds the claims in :data:`CLAIM_BITS` bits: the units past each
    CTA's first stages and up to three claims a CTA past the last (its pipeline's depth).

    Raises:
        ValueError: ``units + 3 * grid`` reaches 2^CLAIM_BITS.
    """
    if units + 3 * grid >= 1 << CLAIM_BITS:
        raise ValueError(f"delta_replay_step (CUDA): claimed_units counts fewer than 2^{CLAIM_BITS} claims; got "
                         f"{units} units and {grid} CTAs")


def delta_coefficient_floats(L: int, s0_mma: bool = False) -> int:
    """Floats of one (row, value head) coefficient block: sq[LP], sk[LP], e[LP], e0, kq, beta, w;
    with ``s0_mma`` then rq, rk (q̂ = rq q, k̂ = rk k) and two floats of padding."""
    return 3 * _records_padded(L) + (8 if s0_mma else 4)


def delta_step_shared_bytes(head_k_dim: int, rows: int, L: int, stages: int, state_bytes: int,
                            per_channel: bool = False, one_launch: bool = False, coef_warps: int = 0,
                            s0_mma: bool = False, flush_first: bool = False, dealt_units: bool = False,
                            claimed_units: bool = False) -> int:
    """Dynamic shared memory of the step kernel (bytes): ``stages`` stages of 1 KiB-rounded
    (checkpoint rows of ``state_bytes`` elements, d records, k records, the qk block (GDN: q̂, k̂;
    KDA: e0 ⊙ q̂, e0 ⊙ k̂, k̂, e0), the coefficient block, v; in one launch (``one_launch`` or
    ``per_channel``) the g records, the step's q, k (and KDA's g), the consumer warps' partial sums;
    meta), 1 KiB of alignment slack, two mbarriers per stage (in one launch a third, the
    records', and with ``coef_warps`` a fourth, the coefficient warps'). With ``coef_warps`` the
    partial sums are those warps' instead of the consumers'; with ``s0_mma`` the stage also holds
    the step's q and k in two launches, and KDA's tensor-core B fragments (16 bytes a head_k_dim
    column); the meta is 16 bytes, 32 with ``flush_first``, ``dealt_units`` or ``claimed_units`` (the
    unit named); ``dealt_units`` adds
    the rows' order (:data:`DEALT_ORDER_BYTES`) after the mbarriers. Mirrors the .cu file's
    STAGE_BYTES (a CPU test reads the compiled value)."""
    LP = _records_padded(L)
    v_bytes = (rows * 2 + 15) // 16 * 16
    qk_floats = delta_qk_floats(head_k_dim, state_bytes, per_channel, one_launch)
    stage = rows * head_k_dim * state_bytes + LP * rows * 2 + LP * head_k_dim * 2 + qk_floats * 4
    stage += delta_coefficient_floats(L, s0_mma) * 4 + v_bytes + (32 if flush_first or dealt_units or claimed_units else 16)
    stage += rows * 4 if state_bytes == 1 else 0  # an fp8 checkpoint's row scales
    red = (coef_warps or rows // 16) * (2 * LP + 4) * 4
    if per_channel:
        stage += LP * head_k_dim * 4 + head_k_dim * 8 + red
    elif one_launch:
        stage += LP * 4 + head_k_dim * 4 + red
    elif s0_mma:
        stage += head_k_dim * 4
    stage += head_k_dim * 16 if s0_mma and per_channel else 0
    stage = (stage + 1023) // 1024 * 1024
    barriers = 2 + (one_launch or per_channel) + bool(coef_warps)  # full, empty; one launch: recs; ready (coef_warps)
    return stages * stage + 1024 + 8 * barriers * stages + (DEALT_ORDER_BYTES if dealt_units else 0)


def config_shared_bytes(cfg: DeltaCudaConfig, head_k_dim: int, L: int, state_bytes: int, per_channel: bool) -> int:
    """:func:`delta_step_shared_bytes` of ``cfg``'s step kernel (not the small kernel)."""
    return delta_step_shared_bytes(head_k_dim, cfg.rows, L, cfg.stages, state_bytes, per_channel,
                                   runs_one_launch(cfg, per_channel), cfg.coef_warps, cfg.s0_mma, cfg.flush_first,
                                   cfg.dealt_units, cfg.claimed_units)


def delta_qk_floats(head_k_dim: int, state_bytes: int, per_channel: bool, one_launch: bool) -> int:
    """Floats of a (row, key head) qk block, the .cu file's QK_FLOATS: GDN's q̂, k̂ (fp32), in two
    launches with an fp8 checkpoint then the step's q and k as f16 (head_k_dim + 16 values apart)
    and four floats (the factors rq 2^-eq, rk 2^-ek and pad) for the step's tensor-core products;
    KDA (one launch, per-channel decays): e0 ⊙ q̂, e0 ⊙ k̂, k̂, e0."""
    if per_channel:
        return 4 * head_k_dim
    if state_bytes == 1 and not one_launch:
        return 2 * head_k_dim + (head_k_dim + 16) + 4
    return 2 * head_k_dim


def _threads(rows: int, coef_warps: int = 0) -> int:
    """Threads of a step-kernel CTA: a consumer warp per 16 rows, the coefficient warps and the
    producer warp."""
    return (rows // 16 + coef_warps + 1) * 32


def unit_rows(head_v_dim: int, wide: bool = False) -> int:
    """Rows of a unit: 64 (128 when ``wide``) where they tile head_v_dim, else the largest multiple
    of 16 up to 128 that does."""
    for rows in ((128, 64) if wide else (64,)):
        if head_v_dim % rows == 0:
            return rows
    return max(r for r in range(16, 129, 16) if head_v_dim % r == 0)


def narrow_rows(head_v_dim: int) -> int:
    """Value rows a CTA of the small-batch forms takes (GDN's small kernel, KDA's units up to
    :data:`KDA_NARROW_MAX_BATCH`): 32 where they tile head_v_dim, else 16."""
    return 32 if head_v_dim % 32 == 0 else 16


def delta_cuda_config(head_k_dim: int, head_v_dim: int, L: int, batch: int, state_bytes: int,
                      per_channel: bool = False, one_launch: bool = False,
                      use_qk_l2norm: bool = True) -> DeltaCudaConfig:
    """The launch table: :func:`_table_shape`'s units, ring and launch form, and every step-kernel
    build (not the small kernel) with its records coalesced (``coalesce_recs``) and, in one launch,
    the cursor reads' count deferred (``defer_count``) and, with a 16- or 32-bit checkpoint at
    :func:`flush_first_batches`, the flushing units first (``flush_first``; figures beside the
    constants), or at DEALT_UNITS_ROUTES' batches the units dealt (``dealt_units``; their flush
    units spread, ``dealt_spread``, where the route says so), or at CLAIMED_UNITS_ROUTES'
    batches the units claimed after each CTA's first stages (``claimed_units``);
    KDA bf16 at
    KDA_CONSUMER_SUMS_BATCHES with ``consumer_sums``; KDA fp8 with ``use_qk_l2norm`` with
    ``s0_hfma2``.
    H100, session 51, L = 16, us, table without / with ``coalesce_recs`` and ``defer_count``: KDA
    bf16 batch 1 4.39 / 4.07, 16 14.24 / 13.02, 256 139.42 / 137.74; KDA fp8 16 13.35 / 11.03, 256
    107.46 / 101.73; GDN bf16 16 21.31 / 20.35, 64 66.43 / 66.04; GDN fp32 16 32.78 / 32.72, 256
    432.48 / 432.30; no cell slower beyond its rounds' spread but KDA fp8 512, 191.30 with
    ``coalesce_recs`` alone / 192.50 with both. GDN's step kernel in one launch takes
    ``rec_warps`` but at :data:`REC_WARPS_LOSING_BATCHES` with a bf16 checkpoint and no coefficient
    warps (H100, session 54, Qwen3.5-122B, L = 16, us, without / with: bf16 batch 12 15.29 /
    15.04, 16 19.45 / 19.02, 32 35.54 / 34.41, 64 65.57 / 64.36; L = 8 64 67.99 / 66.74, L = 32 16
    20.75 / 19.84, 64 69.73 / 67.29; fp8 3 5.71 / 5.54, 8 10.79 / 10.19, 12 14.14 / 13.26; fp32 4
    10.60 / 10.26, 256 413.87 / 412.26; Qwen3.5-4B bf16 64 37.57 / 36.77; bf16 3-11 beside the
    constant)."""
    cfg = _table_shape(head_k_dim, head_v_dim, L, batch, state_bytes, per_channel, one_launch)
    if cfg.small:
        return cfg
    one = runs_one_launch(cfg, per_channel)
    kda_bf16 = per_channel and state_bytes == 2
    dealt_batches, spread = DEALT_UNITS_ROUTES.get((per_channel, state_bytes), (range(0), False))
    claimed = one and batch in CLAIMED_UNITS_ROUTES.get((per_channel, state_bytes), range(0))
    dealt = one and not claimed and batch in dealt_batches
    flush_first = (one and not dealt and not claimed
                   and batch in flush_first_batches(state_bytes, per_channel, cfg.coef_warps > 0))
    losing = state_bytes == 2 and not cfg.coef_warps and batch in REC_WARPS_LOSING_BATCHES
    return replace(cfg, coalesce_recs=True, defer_count=one and not dealt and not claimed, flush_first=flush_first,
                   dealt_units=dealt, dealt_spread=dealt and spread, claimed_units=claimed,
                   rec_warps=one and not per_channel and not losing,
                   consumer_sums=kda_bf16 and cfg.coef_warps > 0 and batch in KDA_CONSUMER_SUMS_BATCHES,
                   s0_hfma2=per_channel and state_bytes == 1 and bool(use_qk_l2norm))


def flush_first_batches(state_bytes: int, per_channel: bool, coef_warps: bool) -> range:
    """The batches at which the step kernel in one launch takes ``flush_first``: KDA with a bf16
    checkpoint KDA_BF16_FLUSH_FIRST_BATCHES, GDN with an fp32 one and coefficient warps
    GDN_F32_FLUSH_FIRST_BATCHES, other 16- and 32-bit checkpoints FLUSH_FIRST_BATCHES, fp8 none."""
    if state_bytes == 1:
        return range(0)
    if per_channel and state_bytes == 2:
        return KDA_BF16_FLUSH_FIRST_BATCHES
    if not per_channel and state_bytes == 4 and coef_warps:
        return GDN_F32_FLUSH_FIRST_BATCHES
    return FLUSH_FIRST_BATCHES


def _table_shape(head_k_dim: int, head_v_dim: int, L: int, batch: int, state_bytes: int,
                 per_channel: bool = False, one_launch: bool = False) -> DeltaCudaConfig:
    """:func:`delta_cuda_config`'s units, ring and launch form (H200, docs/kernel-notes.md "CUDA
    gated delta step", "Session 23" and "Session 26"): GDN up to :data:`SMALL_MAX_BATCH` the small
    one-launch kernel, 32 rows a CTA where they tile head_v_dim (else 16), registers uncapped;
    otherwise the step kernel, in one launch for KDA, for GDN up to :func:`one_launch_max_batch`
    and with ``one_launch``, else after the coefficient launch: units of 64 value rows (128 for a bf16 checkpoint from
    :data:`WIDE_UNITS_BATCH`), two stages, as many CTAs per multiprocessor as shared memory and a
    128-register cap allow (at most 3), programmatic launches. GDN with a bf16 checkpoint: the
    flush fold on tensor cores (``flush_mma``). KDA with a bf16 checkpoint, GDN's from
    :data:`GDN_COEF_WARPS_MIN_BATCH` and GDN with an fp32 checkpoint from
    :data:`GDN_F32_COEF_WARPS_MIN_BATCH` (in one launch; 64-row units below
    :data:`GDN_F32_WIDE_UNITS_MIN_BATCH`): :data:`COEF_WARPS` coefficient warps; KDA
    up to :data:`KDA_NARROW_MAX_BATCH` (any checkpoint, where it fits) units of 32 rows (16 where
    32 do not tile head_v_dim), two stages, one CTA's registers, above it 128-row units (as wide units): up to :data:`DEEP_RING_MAX_BATCH`
    one CTA an SM with as many stages as fit, up to 4, above it two stages and as many CTAs as fit
    (no register cap but the launch bounds') where those are two or more, else the deep ring at
    one CTA; KDA at :data:`KDA_THREE_STAGE_BATCHES` three stages at one CTA where they fit (GDN's
    coefficient-warp builds: 128-row units, one CTA, as many stages as fit, up to 4). KDA with an
    fp32 checkpoint where one CTA of the standard units fits a multiprocessor
    (:func:`_wide_units_pay`, session 28): from batch 2, 128-row units (as wide units), two stages, one CTA, :data:`COEF_WARPS` coefficient
    warps. fp8 checkpoints (``state_bytes`` 1): the bf16 table (its stages fit: an fp8 stage is
    smaller) but GDN in two launches above :data:`FP8_ONE_LAUNCH_MAX_BATCH` (unless
    ``one_launch``) without wide units (the standard units at as many CTAs as fit; session 39,
    Qwen3.5-122B, L = 16, us, 64-row units at 3 CTAs / the bf16 table's 128-row units at 1:
    batch 64 59.80 / 71.88, 256 213.70 / 259.78, 512 406.99 / 490.94), and KDA's rings
    :data:`KDA_FP8_STAGES` deep from :data:`KDA_FP8_RING_MIN_BATCH` at as many CTAs as fit (at
    most 3); the flush in exact fp32 FMAs (a row folded once, over four lanes, and held for its new
    scale), except GDN's step kernel from :data:`FP8_FLUSH_MMA_MIN_BATCH`, which folds it on
    tensor cores (``flush_mma``), in two launches with the first of :func:`fp8_mma_rings`
    (stages, CTAs) that fits."""
    if state_bytes == 1:
        table = replace(_table_shape(head_k_dim, head_v_dim, L, batch, 2, per_channel, one_launch), flush_mma=False)
        if table.small:
            return table
        if per_channel:  # from KDA_FP8_RING_MIN_BATCH a deeper ring at as many CTAs as fit
            deeper = replace(table, stages=KDA_FP8_STAGES)
            ctas = _resident_ctas(deeper, head_k_dim, L, 1, True)
            return replace(deeper, min_ctas=ctas) if batch >= KDA_FP8_RING_MIN_BATCH and ctas >= 1 else table
        table = replace(table, flush_mma=batch >= FP8_FLUSH_MMA_MIN_BATCH)
        if table.coef_warps:  # GDN's bf16 coefficient warps are not timed with fp8: the standard units
            table = replace(table, rows=unit_rows(head_v_dim), stages=2, coef_warps=0)
            table = replace(table, min_ctas=_resident_ctas(table, head_k_dim, L, 2, False))
        if table.one_launch and (one_launch or batch <= FP8_ONE_LAUNCH_MAX_BATCH):
            return table
        table = replace(table, rows=unit_rows(head_v_dim), one_launch=False)
        for stages, ctas in fp8_mma_rings(batch):  # two launches, flush_mma
            if _resident_ctas(replace(table, stages=stages), head_k_dim, L, 1, False) >= ctas:
                return replace(table, stages=stages, min_ctas=ctas)
        return replace(table, min_ctas=_resident_ctas(table, head_k_dim, L, 1, False))
    if per_channel and batch <= KDA_NARROW_MAX_BATCH:
        narrow = DeltaCudaConfig(rows=narrow_rows(head_v_dim), stages=2, min_ctas=1, one_launch=True,
                                 coef_warps=COEF_WARPS)
        if delta_ctas_that_fit(narrow, head_k_dim, L, state_bytes, per_channel) >= 1:
            return narrow
    gdn_warps = not per_channel and ((state_bytes == 2 and batch >= GDN_COEF_WARPS_MIN_BATCH)
                                     or (state_bytes == 4 and batch >= GDN_F32_COEF_WARPS_MIN_BATCH))
    one_launch = one_launch or per_channel or gdn_warps or SMALL_MAX_BATCH < batch <= one_launch_max_batch(state_bytes)
    if not one_launch and batch <= SMALL_MAX_BATCH:
        return DeltaCudaConfig(rows=64, stages=2, min_ctas=1, small=True, small_rows=narrow_rows(head_v_dim))
    coef_warps = COEF_WARPS if gdn_warps or (per_channel and state_bytes == 2) else 0
    # GDN with a bf16 checkpoint folds the flush on tensor cores at every batch of the step kernel
    # (session 26, Qwen3.5-122B, L = 16, us, with / without: batch 4 7.16 / 7.52, 8 11.71 / 12.15,
    # 16 18.94 / 19.91, 64 55.02 / 57.61, 256 186.85 / 193.82, 512 348.14 / 357.41); an fp32
    # checkpoint gains nothing (256: 313.09 / 313.39) and KDA lost (bf16 256: 175.28 / 125.36, one
    # CTA an SM where the table's build fit two).
    flush_mma = state_bytes == 2 and not per_channel
    if coef_warps and batch > 1:
        wide = per_channel or state_bytes != 4 or batch >= GDN_F32_WIDE_UNITS_MIN_BATCH
        two = DeltaCudaConfig(rows=unit_rows(head_v_dim, wide=wide), stages=2, min_ctas=1, one_launch=True,
                              coef_warps=coef_warps, flush_mma=flush_mma)
        ctas = _resident_ctas(two, head_k_dim, L, state_bytes, per_channel)
        three = per_channel and batch in KDA_THREE_STAGE_BATCHES
        if per_channel and batch > DEEP_RING_MAX_BATCH and ctas >= 2 and not three:
            return replace(two, min_ctas=ctas)
        for stages in (3, 2) if three else (4, 3, 2):
            if delta_ctas_that_fit(replace(two, stages=stages), head_k_dim, L, state_bytes, per_channel) >= 1:
                return replace(two, stages=stages)
    if per_channel and not coef_warps and batch > 1 and _wide_units_pay(head_k_dim, head_v_dim, L, state_bytes):
        cfg = DeltaCudaConfig(rows=unit_rows(head_v_dim, wide=True), stages=2, min_ctas=1, one_launch=True,
                              coef_warps=COEF_WARPS)
        if delta_ctas_that_fit(cfg, head_k_dim, L, state_bytes, per_channel) >= 1:
            return cfg
    rows = unit_rows(head_v_dim, wide=state_bytes == 2 and batch >= WIDE_UNITS_BATCH)
    cfg = DeltaCudaConfig(rows=rows, stages=2, min_ctas=1, one_launch=one_launch, coef_warps=coef_warps,
                          flush_mma=flush_mma)
    ctas = _resident_ctas(cfg, head_k_dim, L, state_bytes, per_channel)
    if ctas < 1:
        raise ValueError(f"delta_cuda_config: head_k_dim {head_k_dim}, L {L} do not fit a multiprocessor")
    return replace(cfg, min_ctas=ctas)


def one_launch_max_batch(state_bytes: int) -> int:
    """GDN's largest batch that the launch table runs in one launch without coefficient warps (above
    :data:`SMALL_MAX_BATCH`; the coefficient-warp builds, a bf16 checkpoint's from
    :data:`GDN_COEF_WARPS_MIN_BATCH` and an fp32 one's from :data:`GDN_F32_COEF_WARPS_MIN_BATCH`, aside):
    :data:`F32_ONE_LAUNCH_MAX_BATCH` with an fp32 checkpoint, else :data:`ONE_LAUNCH_MAX_BATCH`."""
    return F32_ONE_LAUNCH_MAX_BATCH if state_bytes == 4 else ONE_LAUNCH_MAX_BATCH


def fp8_mma_rings(batch: int) -> tuple[tuple[int, int], ...]:
    """GDN's two launches with an fp8 checkpoint at ``batch``: the (stages, CTAs an SM) of
    :data:`FP8_MMA_RINGS` in order of preference (the table takes the first that fits)."""
    return FP8_MMA_RINGS[FP8_DEEP_RING_MIN_BATCH <= batch <= DEEP_RING_MAX_BATCH]


def _resident_ctas(cfg: DeltaCudaConfig, head_k_dim: int, L: int, state_bytes: int, per_channel: bool) -> int:
    """CTAs of ``cfg``'s step kernel a multiprocessor holds under the table's rule: as many as
    shared memory allows, at most 3, and without coefficient warps as many as a 128-register cap
    allows (0: not even one fits)."""
    ctas = min(3, delta_ctas_that_fit(cfg, head_k_dim, L, state_bytes, per_channel))
    if not cfg.coef_warps:
        ctas = min(ctas, REGISTERS_PER_SM // (_threads(cfg.rows) * 128))
    return ctas


def _wide_units_pay(head_k_dim: int, head_v_dim: int, L: int, state_bytes: int) -> bool:
    """Whether wide units tile head_v_dim in fewer units than the standard ones and a multiprocessor
    holds just one KDA step CTA of the standard units (two stages, no coefficient warps): an fp32
    checkpoint with L > 16 for Kimi Linear. There 128-row units with :data:`COEF_WARPS`
    coefficient warps are faster from batch 2 (H200, session 28, Kimi Linear,
    L = 32, us, 128 rows with coefficient warps / the 64-row units: batch 4 8.40 / 10.33, 16
    21.13 / 28.72, 64 64.61 / 97.49, 256 225.34 / 368.99, 512 420.30 / 715.17; batch 1 6.18 /
    5.61, where 64-row units keep twice the CTAs)."""
    narrow = DeltaCudaConfig(rows=unit_rows(head_v_dim), stages=2, min_ctas=1)
    if unit_rows(head_v_dim, wide=True) == narrow.rows:
        return False
    return delta_ctas_that_fit(narrow, head_k_dim, L, state_bytes, per_channel=True) == 1


def delta_ctas_that_fit(cfg: DeltaCudaConfig, head_k_dim: int, L: int, state_bytes: int,
                        per_channel: bool = False) -> int:
    """How many CTAs of ``cfg``'s step kernel the shared memory of one sm_90 multiprocessor holds
    (:func:`delta_step_shared_bytes` of its rows, stages, launch form, coefficient warps and S0
    products, plus the driver's reservation per CTA); ``cfg.min_ctas`` is not read."""
    return SMEM_PER_SM // (config_shared_bytes(cfg, head_k_dim, L, state_bytes, per_channel) + SMEM_RESERVED_PER_CTA)


def delta_cuda_unsupported(checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor,
                           q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                           checkpoint_scale: Optional[Tensor] = None) -> Optional[str]:
    """Why the CUDA gated delta-rule step cannot run these tensors (None: it can): an sm_90 GPU,
    :func:`delta_shape_unsupported` and :func:`records_unsupported`."""
    return (device_unsupported(checkpoint)
            or delta_shape_unsupported(checkpoint, d_records, k_records, g_records, q, k, v, g, checkpoint_scale)
            or records_unsupported(d_records, k_records, g_records))


def delta_shape_unsupported(checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor,
                            q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                            checkpoint_scale: Optional[Tensor] = None) -> Optional[str]:
    """The device-independent part of :func:`delta_cuda_unsupported`: a bf16, fp32 or fp8
    checkpoint (fp8: head_k_dim 128 and its ``checkpoint_scale``, value rows dense), bf16 q, k, v
    and d / k records, g records in fp32 (GDN) or fp16 (KDA), head_k_dim a multiple of 64 up to 256, head_v_dim a
    multiple of 16, L <= 32, at most 32 value heads per key head, two stages fitting a
    multiprocessor, and the TMA / bulk-copy alignment (16-byte aligned bases and outer strides,
    contiguous last dims; KDA's g and g records per channel contiguous too)."""
    per_channel = g.dim() == 3
    if per_channel and not (copyable_rows(g) and copyable_rows(g_records)):
        return f"KDA g strides {g.stride()} / g_records strides {g_records.stride()}; channels contiguous, rows 16-byte aligned"
    if checkpoint.dtype not in CHECKPOINT_DTYPES:
        return f"checkpoint {checkpoint.dtype}; the CUDA step takes bf16, fp32 or fp8"
    if checkpoint.dtype == torch.float8_e4m3fn:
        if checkpoint.shape[3] != 128:
            return f"head_k_dim {checkpoint.shape[3]} with an fp8 checkpoint; the CUDA step takes fp8 rows of 128"
        reason = scale_unsupported(checkpoint, checkpoint_scale)
        if reason is not None:
            return reason
    for name, t in (("q", q), ("k", k), ("v", v), ("d_records", d_records), ("k_records", k_records)):
        if t.dtype != torch.bfloat16:
            return f"{name} {t.dtype}; the CUDA step takes bf16"
    want_g = torch.float16 if per_channel else torch.float32  # the caches' g_record_dtype beside bf16 records
    if g_records.dtype != want_g or g_records.stride(-1) != 1:
        return f"g_records {g_records.dtype} strides {g_records.stride()}; the CUDA step takes {want_g}, positions dense"
    _, v_heads, head_v_dim, head_k_dim = checkpoint.shape
    k_heads, L = q.shape[1], d_records.shape[2]
    if head_k_dim % 64 or head_k_dim > 256:
        return f"head_k_dim {head_k_dim}; the CUDA step takes multiples of 64 up to 256"
    if head_v_dim % 16:
        return f"head_v_dim {head_v_dim}; the CUDA step takes multiples of 16"
    if L > MAX_L_CUDA:
        return f"L {L}; the CUDA step takes L <= {MAX_L_CUDA}"
    if v_heads // k_heads > MAX_VALUE_HEADS_PER_KEY_HEAD:
        return f"{v_heads // k_heads} value heads per key head; the CUDA step takes <= {MAX_VALUE_HEADS_PER_KEY_HEAD}"
    for name, t in (("checkpoint", checkpoint), ("d_records", d_records), ("k_records", k_records),
                    ("q", q), ("k", k), ("v", v)):
        if not copyable_rows(t):
            return f"{name} base or strides {t.stride()} not 16-byte aligned with a contiguous last dim"
    rows = unit_rows(head_v_dim)
    if delta_step_shared_bytes(head_k_dim, rows, L, 2, checkpoint.element_size(), per_channel) + SMEM_RESERVED_PER_CTA > SMEM_PER_SM:
        return f"two stages of {rows} x head_k_dim {head_k_dim} {checkpoint.dtype} rows do not fit a multiprocessor"
    return None


def records_unsupported(d_records: Tensor, k_records: Tensor, g_records: Tensor) -> Optional[str]:
    """Why the step kernel cannot copy these records (None: it can): the launch table's step-kernel
    builds copy a unit's k̂ records, its d records where the unit spans head_v_dim and KDA's g
    records (``g_records`` 4-D) as one bulk copy each (``coalesce_recs``), so ``k_records`` [slot,
    k_heads, L, head_k_dim], ``d_records`` [slot, v_heads, L, head_v_dim] and KDA's ``g_records``
    [slot, v_heads, L, head_k_dim] must be contiguous over positions (the caches' are)."""
    runs = [("d_records", d_records), ("k_records", k_records)] + ([("g_records", g_records)] if g_records.dim() == 4 else [])
    for name, t in runs:
        if t.stride(2) != t.shape[3]:
            return f"{name} strides {t.stride()}; the CUDA step takes records contiguous over positions"
    return None


def delta_step_defines(k_heads: int, v_heads: int, head_k_dim: int, head_v_dim: int, L: int, cfg: DeltaCudaConfig,
                       state_bytes: int, use_qk_l2norm: bool, g_dtype: torch.dtype,
                       beta_dtype: torch.dtype, per_channel: bool = False) -> Tuple[Tuple[str, int], ...]:
    """The .cu file's -D constants.

    Raises:
        ValueError: ``cfg.small`` with ``per_channel`` (the small kernel takes GDN only).
        ValueError: ``cfg.rows`` (``cfg.small_rows`` for the small kernel) is not a multiple of 16
            up to 128 dividing head_v_dim.
        ValueError: ``cfg.rec_warps`` outside GDN's step kernel in one launch.
        ValueError: ``cfg.dealt_units`` outside the step kernel in one launch, or with
            ``cfg.flush_first`` or ``cfg.defer_count``; ``cfg.dealt_spread`` without it.
        ValueError: ``cfg.claimed_units`` outside the step kernel in one launch, or with
            ``cfg.flush_first``, ``cfg.defer_count`` or ``cfg.dealt_units``.
        ValueError: ``cfg.consumer_sums`` outside KDA's step kernel with coefficient warps and
            exact S0 products.
        ValueError: ``cfg.s0_qgmma`` outside KDA's step kernel with an fp8 checkpoint, L2-normalised
            q and k, 64 or 128 rows a unit and no ``consumer_sums``.
        ValueError: ``cfg.s0_hfma2`` outside KDA's step kernel with an fp8 checkpoint, L2-normalised
            q and k, no ``consumer_sums`` and no ``s0_qgmma``, and GDN's in two launches with an fp8
            checkpoint.
        ValueError: the step kernel's stages need more shared memory than an sm_90 CTA takes
            (:data:`SMEM_PER_SM`).
    """
    if cfg.small and per_channel:
        raise ValueError("delta_replay_step (CUDA): the small kernel takes GDN only (a log-decay per value head)")
    one_launch_only = ((f"coef_warps {cfg.coef_warps}", cfg.coef_warps), ("defer_count", cfg.defer_count),
                       ("flush_first", cfg.flush_first), ("dealt_units", cfg.dealt_units), ("rec_warps", cfg.rec_warps),
                       ("claimed_units", cfg.claimed_units))
    for name, asked in one_launch_only:
        if asked and not step_kernel_in_one_launch(cfg, per_channel):
            raise ValueError(f"delta_replay_step (CUDA): {name} needs the step kernel in one launch; "
                             f"got small={cfg.small}, one_launch={cfg.one_launch}, per_channel={per_channel}")
    if cfg.dealt_spread and not cfg.dealt_units:
        raise ValueError("delta_replay_step (CUDA): dealt_spread places dealt_units' flush units; got dealt_units=False")
    if cfg.dealt_units and (cfg.flush_first or cfg.defer_count):
        raise ValueError("delta_replay_step (CUDA): dealt_units replaces flush_first and defer_count; got "
                         f"flush_first={cfg.flush_first}, defer_count={cfg.defer_count}")
    if cfg.claimed_units and (cfg.flush_first or cfg.defer_count or cfg.dealt_units):
        raise ValueError("delta_replay_step (CUDA): claimed_units replaces flush_first, defer_count and dealt_units; "
                         f"got flush_first={cfg.flush_first}, defer_count={cfg.defer_count}, dealt_units={cfg.dealt_units}")
    if cfg.rec_warps and per_channel:
        raise ValueError("delta_replay_step (CUDA): rec_warps takes GDN only (KDA's scan runs down the columns); "
                         "got per_channel=True")
    if cfg.consumer_sums and not (per_channel and cfg.coef_warps and not cfg.s0_mma and not cfg.small):
        raise ValueError("delta_replay_step (CUDA): consumer_sums takes KDA's step kernel with coefficient warps and "
                         f"exact S0 products; got per_channel={per_channel}, coef_warps={cfg.coef_warps}, "
                         f"s0_mma={cfg.s0_mma}, small={cfg.small}")
    # KDA's forms scale its normalised vectors e0 ⊙ q̂, e0 ⊙ k̂ by fixed factors; GDN's f16x2 form takes
    # launch 1's raw q and k with their own powers of two, normalised or not.
    s0_forms = (("s0_qgmma", s0_qgmma_fits(cfg, state_bytes, per_channel) and use_qk_l2norm,
                 "64 or 128 rows a unit and no consumer_sums"),
                ("s0_hfma2", s0_hfma2_fits(cfg, state_bytes, per_channel) and (use_qk_l2norm or not per_channel),
                 "no consumer_sums and no s0_qgmma, or GDN's in two launches with an fp8 checkpoint"))
    for name, fits, needs in s0_forms:
        if getattr(cfg, name) and not fits:
            raise ValueError(f"delta_replay_step (CUDA): {name} takes KDA's step kernel with an fp8 checkpoint, "
                             f"L2-normalised q and k, {needs}; got per_channel={per_channel}, {state_bytes}-byte "
                             f"checkpoint elements, use_qk_l2norm={bool(use_qk_l2norm)}, small={cfg.small}, "
                             f"one_launch={cfg.one_launch}, rows={cfg.rows}, consumer_sums={cfg.consumer_sums}, "
                             f"s0_qgmma={cfg.s0_qgmma}")
    if cfg.s0_mma and (cfg.small or state_bytes != 2):
        raise ValueError(
            f"delta_replay_step (CUDA): s0_mma needs a bf16 checkpoint and the step kernel; got "
            f"{state_bytes}-byte checkpoint elements, small={cfg.small}"
        )
    for name in ("flush_mma", "coalesce_recs"):
        if getattr(cfg, name) and cfg.small:
            raise ValueError(f"delta_replay_step (CUDA): {name} needs the step kernel; got small=True")
    if not 0 <= cfg.coef_warps <= 8:
        raise ValueError(f"delta_replay_step (CUDA): coef_warps {cfg.coef_warps}; expected 0 to 8")
    for name, rows in (("small_rows", cfg.small_rows),) if cfg.small else (("rows", cfg.rows),):
        if rows % 16 or not 16 <= rows <= 128 or head_v_dim % rows:
            raise ValueError(
                f"delta_replay_step (CUDA): {name} {rows}; expected a multiple of 16 up to 128 dividing head_v_dim {head_v_dim}"
            )
    if not cfg.small:
        smem = config_shared_bytes(cfg, head_k_dim, L, state_bytes, per_channel)
        if smem > SMEM_PER_SM:
            raise ValueError(f"delta_replay_step (CUDA): {cfg.label()} needs {smem} bytes of shared memory a CTA "
                             f"({state_bytes}-byte checkpoint elements, head_k_dim {head_k_dim}, L {L}); an sm_90 CTA "
                             f"takes at most {SMEM_PER_SM}")
    d = dict(CKPT_F32=int(state_bytes == 4), CKPT_FP8=int(state_bytes == 1), KHEADS=k_heads, VHEADS=v_heads, DK=head_k_dim, DV=head_v_dim,
             ROWS=cfg.small_rows if cfg.small else cfg.rows, SM_ROWS=cfg.small_rows if cfg.small else cfg.rows, LREC=L, LP=_records_padded(L), STAGES=cfg.stages, MIN_CTAS=cfg.min_ctas,
             L2NORM=int(bool(use_qk_l2norm)), PER_CHANNEL=int(per_channel),
             ONE_LAUNCH=int(runs_one_launch(cfg, per_channel)), COEF_WARPS=cfg.coef_warps, S0_MMA=int(cfg.s0_mma),
             FLUSH_MMA=int(cfg.flush_mma), COALESCE_RECS=int(cfg.coalesce_recs),
             DEFER_COUNT=int(cfg.defer_count), FLUSH_FIRST=int(cfg.flush_first), DEALT_UNITS=int(cfg.dealt_units), DEALT_SPREAD=int(cfg.dealt_spread), CLAIMED_UNITS=int(cfg.claimed_units), REC_WARPS=int(cfg.rec_warps),
             CONSUMER_SUMS=int(cfg.consumer_sums), S0_QGMMA=int(cfg.s0_qgmma), S0_HFMA2=int(cfg.s0_hfma2), G_CODE=DTYPE_CODE[g_dtype], BETA_CODE=DTYPE_CODE[beta_dtype])
    return tuple(sorted(d.items()))


def compile_delta_ptx(k_heads: int, v_heads: int, head_k_dim: int, head_v_dim: int, L: int, cfg: DeltaCudaConfig,
                      state_bytes: int, use_qk_l2norm: bool = True, per_channel: bool = False) -> str:
    """PTX of the source's entries for a shape, for sm_90 (CPU: no GPU needed), for tests."""
    defines = delta_step_defines(k_heads, v_heads, head_k_dim, head_v_dim, L, cfg, state_bytes, use_qk_l2norm,
                                 torch.float32, torch.float32, per_channel)
    return compile_program(SOURCE, "sm_90a" if cfg.s0_qgmma else "sm_90", defines, "ptx").decode()


def coefficient_args(coef, qk, k_records, g_records, cursor, q, k, g, beta, slot_ids, scale) -> KernelArgs:
    """Parameters of ``delta_replay_coefficients``, in the .cu file's order."""
    return (
        KernelArgs()
        .ptr(coef).ptr(qk)
        .tensor(k_records, 3)
        .tensor(g_records, 3)
        .ptr(cursor)
        .tensor(q, 2)
        .tensor(k, 2)
        .tensor(g, 2)
        .tensor(beta, 2)
        .ptr(slot_ids)
        .f32(scale)
    )  # fmt: skip


def small_args(checkpoint, checkpoint_scale, d_records, k_records, g_records, cursor, arrivals, q, k, v, g, beta, out,
               slot_ids, scale) -> KernelArgs:
    """Parameters of ``delta_replay_small``, in the .cu file's order (``checkpoint_scale``: an fp8
    checkpoint's row scales; None: another tensor's pointer, never read)."""
    sc = checkpoint_scale if checkpoint_scale is not None else g_records
    return (
        KernelArgs()
        .tensor(checkpoint, 3)
        .tensor(sc, 2)
        .tensor(d_records, 3)
        .tensor(k_records, 3)
        .tensor(g_records, 2)
        .ptr(cursor).ptr(arrivals)
        .tensor(q, 2)
        .tensor(k, 2)
        .tensor(v, 2)
        .tensor(g, 2)
        .tensor(beta, 2)
        .tensor(out, 2)
        .ptr(slot_ids)
        .f32(scale)
    )  # fmt: skip


def step_args(maps, coef, qk, checkpoint_scale, d_records, k_records, g_records, v, out, slot_ids, cursor, q, k, g, beta,
              arrivals, scale) -> KernelArgs:
    """Parameters of ``delta_replay_step``, in the .cu file's order: the checkpoint's (load, store)
    tensor maps first; ``coef`` and ``qk`` are the coefficient launch's blocks, 0 in one launch,
    where the step reads q, k, g, beta and counts cursor reads in ``arrivals`` (two launches: unused
    but for q and k with ``s0_mma``); ``checkpoint_scale``: an fp8 checkpoint's row scales (None:
    another tensor's pointer, never read)."""
    sc = checkpoint_scale if checkpoint_scale is not None else g_records
    return (
        KernelArgs()
        .tensor_map(maps[0]).tensor_map(maps[1])
        .ptr(coef).ptr(qk)
        .tensor(sc, 2)
        .tensor(d_records, 3)
        .tensor(k_records, 3)
        .tensor(g_records, 3)
        .tensor(v, 2)
        .tensor(out, 2)
        .ptr(slot_ids).ptr(cursor).i32(v.shape[0])
        .tensor(q, 2)
        .tensor(k, 2)
        .tensor(g, 2)
        .tensor(beta, 2)
        .ptr(arrivals).f32(scale)
    )  # fmt: skip


def launch_delta_replay_step_cuda(checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor,
                                  cursor: Tensor, arrivals: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                                  beta: Tensor, *, slot_ids: Tensor, scale: float, use_qk_l2norm: bool, out: Tensor,
                                  config: Optional[DeltaCudaConfig] = None,
                                  checkpoint_scale: Optional[Tensor] = None) -> Tensor:
    """The CUDA gated delta-rule (GDN, KDA) replay step on the cache tensors; arguments already checked by the op, in the
    Triton launcher's order. ``arrivals``: the small kernel counts each row's CTAs there, the
    step kernel in one launch (KDA; GDN where :func:`runs_one_launch`) each row's unit cursor
    reads (the last advances the cursor and resets the count to zero), with ``dealt_units`` each
    CTA once in the count of the batch's first row with a slot (the last advances every cursor; with
    ``claimed_units`` the claims count in that word's low :data:`CLAIM_BITS` bits);
    GDN's two launches do not use it (their step kernel advances the cursor once the coefficient
    grid is complete).

    Raises:
        ValueError: when :func:`delta_cuda_unsupported` names a reason (nothing is launched).
        ValueError: ``config.dealt_units`` with a batch above :data:`DEALT_UNITS_MAX_BATCH`.
        ValueError: ``config.claimed_units`` with more units and claims past them (three a CTA) than
            :data:`CLAIM_BITS` bits count.
    """
    reason = delta_cuda_unsupported(checkpoint, d_records, k_records, g_records, q, k, v, g, checkpoint_scale)
    if reason is not None:
        raise ValueError(f"delta_replay_step (CUDA): {reason}")
    batch, v_heads, head_v_dim = v.shape
    k_heads, head_k_dim = q.shape[1], q.shape[2]
    L = d_records.shape[2]
    es = checkpoint.element_size()
    per_channel = g.dim() == 3
    cfg = config or delta_cuda_config(head_k_dim, head_v_dim, L, batch, es, per_channel, use_qk_l2norm=use_qk_l2norm)
    defines = delta_step_defines(k_heads, v_heads, head_k_dim, head_v_dim, L, cfg, es, use_qk_l2norm, g.dtype, beta.dtype,
                                 per_channel)
    device = v.device
    stream = torch.cuda.current_stream(device).cuda_stream
    if cfg.small:
        small = load_kernel(SOURCE, "delta_replay_small", defines, device, 0)
        args = small_args(checkpoint, checkpoint_scale, d_records, k_records, g_records, cursor, arrivals, q, k, v, g, beta,
                          out, slot_ids, scale)
        small.launch((v_heads * head_v_dim // cfg.small_rows, batch), 8 * cfg.small_rows, 0, stream, args, pdl=True)
        return out
    if cfg.dealt_units and batch > DEALT_UNITS_MAX_BATCH:
        raise ValueError(f"delta_replay_step (CUDA): dealt_units orders at most {DEALT_UNITS_MAX_BATCH} batch rows; "
                         f"got batch {batch}")
    one_launch = runs_one_launch(cfg, per_channel)
    smem = config_shared_bytes(cfg, head_k_dim, L, es, per_channel)
    step_kernel = load_kernel(SOURCE, "delta_replay_step", defines, device, smem, arch_specific=cfg.s0_qgmma)
    coef = qk = 0  # one launch: formed in the step kernel
    if not one_launch:
        coef_kernel = load_kernel(SOURCE, "delta_replay_coefficients", defines, device, 0)
        coef = torch.empty(batch * v_heads * delta_coefficient_floats(L, cfg.s0_mma), dtype=torch.float32, device=device)
        qk = torch.empty(batch * k_heads * delta_qk_floats(head_k_dim, es, per_channel, one_launch), dtype=torch.float32,
                         device=device)
        coef_kernel.launch((k_heads, batch), 32 * (v_heads // k_heads), 0, stream,
                           coefficient_args(coef, qk, k_records, g_records, cursor, q, k, g, beta, slot_ids, scale),
                           pdl=cfg.pdl)
    maps = checkpoint_tensor_maps(checkpoint, cfg.rows)
    threads = _threads(cfg.rows, cfg.coef_warps)
    units = batch * v_heads * (head_v_dim // cfg.rows)
    grid = step_grid(units, step_kernel.ctas_per_sm(threads, smem) * multiprocessor_count(device), cfg.even_grid)
    if cfg.claimed_units:
        check_claim_count(units, grid)
    step_kernel.launch((grid,), threads, smem, stream,
                       step_args(maps, coef, qk, checkpoint_scale, d_records, k_records, g_records, v, out, slot_ids, cursor,
                                 q, k, g, beta, arrivals, scale), pdl=cfg.pdl)
    return out
