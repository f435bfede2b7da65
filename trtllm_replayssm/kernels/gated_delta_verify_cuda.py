"""ReplaySSM gated delta-rule (GDN; KDA with one value head per key head) speculative verify in CUDA
C++ (``kernels/cuda/gated_delta_verify_step.cu``): bf16 or fp32 checkpoints, bf16 activations and
records, up to 8 window tokens, on sm_90.

Two launches on the current stream, the structure of the Mamba-2 CUDA verify
(:mod:`~trtllm_replayssm.kernels.mamba2_verify_cuda`): a coefficient launch per (row, key head)
forms the window's and the history's products once (the window solved per state row needs them
only as scalars: per value head a block of history weights, the window's triangular factors and
the checkpoint's weights), and a persistent kernel streams each value head's checkpoint rows
through a shared-memory ring (TMA) with the window's 2T raw query and key vectors as the columns of
tensor-core products (bf16 rows; fp32 rows from T = 4 in three TF32 parts, about fp32, below it exact
fp32 sums), then runs each row's window
serially in registers. The .cu file's header documents what each computes; the contract is the
Triton kernel's (:mod:`trtllm_replayssm.kernels.gated_delta_verify`): same cache tensors, same
results up to fp32 rounding, a flushing row's cursor flagged until the commit, no host sync,
padding rows (slot < 0) untouched, capturable in a CUDA graph. KDA's per-channel decays enter the
S0 vectors (per value head, fp32: three bf16 parts each as tensor-core operands on a bf16
checkpoint), the history and window weights (per-channel weighted sums, a CTA of head_k_dim threads
per (row, value head) in the coefficient launch) and the flush fold. Where a KDA unit spans every
value row and the scratch fits (:func:`fused_coefficients_fit`: Kimi Linear's fp32 checkpoints at
T <= 4), the step kernel's own coefficient warps form each unit's coefficients in its stage, and
the verify is one launch.

:func:`delta_verify_cuda_unsupported` says why a call cannot take this route (None: it can); the
launcher raises with that reason when asked to run anyway.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from torch import Tensor

from .gated_delta_common import multiprocessor_count
from .gated_delta_replay_cuda import delta_shape_unsupported, unit_rows
from .mamba2_replay_cuda import records_padded, step_threads
from .nvrtc import (
    DTYPE_CODE,
    REGISTERS_PER_SM,
    SMEM_PER_SM,
    SMEM_RESERVED_PER_CTA,
    KernelArgs,
    checkpoint_tensor_maps,
    copyable_rows,
    device_unsupported,
    load_kernel,
)

__all__ = [
    "SOURCE",
    "MAX_T_CUDA",
    "DeltaVerifyCudaConfig",
    "delta_verify_cuda_config",
    "delta_verify_cuda_unsupported",
    "delta_verify_coefficient_floats",
    "delta_verify_coef_shared_bytes",
    "delta_verify_coef_static_bytes",
    "delta_verify_qk_pitch",
    "delta_verify_shared_bytes",
    "delta_verify_defines",
    "fused_coefficients_fit",
    "launch_delta_replay_verify_cuda",
]

SOURCE = "gated_delta_verify_step.cu"
MAX_T_CUDA = 8  # window tokens: the kernels unroll over them (2T tensor-core columns, KDA's bf16 rows 6T)


@dataclass(frozen=True)
class DeltaVerifyCudaConfig:
    """How the verify's persistent kernel runs: units of ``rows`` value rows (a multiple of 16 up to
    128 dividing head_v_dim), ``stages`` units in flight per CTA (shared-memory ring),
    register-capped for ``min_ctas`` resident CTAs per multiprocessor, both launches programmatic
    (``pdl``: the coefficient launch after the previous kernel, the step kernel after it).
    ``fused`` (KDA, units of every value row): one launch, the step kernel's own coefficient warps
    forming each unit's coefficients in its stage (:func:`fused_coefficients_fit`)."""

    rows: int
    stages: int
    min_ctas: int
    pdl: bool = True
    fused: bool = False

    def label(self) -> str:
        return f"cuda,r{self.rows},{self.stages},{self.min_ctas},{'pdl' if self.pdl else 'nopdl'}" + (
            ",fused" if self.fused else ""
        )


def _tokens_padded(T: int) -> int:
    return 4 if T <= 4 else 8


def delta_verify_coefficient_floats(L: int, T: int, head_k_dim: int = 0, per_channel: bool = False) -> int:
    """Floats of one (row, value head) coefficient block: hk[LP][TP], hq[LP][TP], A[TP][TP],
    Q[TP][TP], wk[TP], wq[TP], beta[TP], wgt[LP], E0, w, n, rounded up to 4; KDA (``per_channel``)
    then E0 per channel (``head_k_dim`` floats). The .cu file's COEF_FLOATS (a CPU test reads the
    compiled value)."""
    LP, TP = records_padded(L), _tokens_padded(T)
    return (2 * LP * TP + 2 * TP * TP + 3 * TP + LP + 3 + 3) // 4 * 4 + (head_k_dim if per_channel else 0)


def delta_verify_qk_pitch(head_k_dim: int, state_bytes: int) -> int:
    """Bytes of one u row (the window's q / k vectors, or a bf16 part of one) in the checkpoint's
    dtype, padded by 16 (the .cu file's QK_PITCH)."""
    return head_k_dim * state_bytes + 16


def delta_verify_coef_shared_bytes(head_k_dim: int, L: int, T: int, per_channel: bool) -> int:
    """Dynamic shared scratch of KDA's coefficients for one unit (bytes; the coefficient launch's
    dynamic shared memory, the fused step kernel's after its stages): the tensor-core history
    product's operands U [L - 1][head_k_dim + 4] and V [2T rounded up to 8][head_k_dim + 4] in fp32
    (the .cu file's delta_verify_coef_shared_bytes; a CPU test reads the compiled value); GDN's
    takes none."""
    if not per_channel:
        return 0
    return (L - 1 + (2 * T + 7) // 8 * 8) * (head_k_dim + 4) * 4


def delta_verify_coef_static_bytes(head_k_dim: int, T: int) -> int:
    """Static shared memory of KDA's coefficients (bytes): each warp's reduced window sums (2T + T²,
    rounded up to 32) and their total, rounded up to 16 bytes (cuobjdump reports it beside the
    driver's per-CTA reservation; a CPU test compares)."""
    sums = 2 * T + T * T
    return ((head_k_dim // 32 * ((sums + 31) // 32 * 32) + sums) * 4 + 15) // 16 * 16


def _u_parts(state_bytes: int, per_channel: bool) -> int:
    """bf16 parts a u row takes: KDA's fp32 vectors on a bf16 checkpoint's tensor cores, 3."""
    return 3 if per_channel and state_bytes == 2 else 1


def _key_parts(per_channel: bool) -> int:
    """bf16 parts of a flush's key rows: KDA's U_j = e_j ⊙ k̂_j (fp32), 3."""
    return 3 if per_channel else 1


def delta_verify_shared_bytes(
    head_k_dim: int,
    rows: int,
    L: int,
    T: int,
    stages: int,
    state_bytes: int,
    per_channel: bool = False,
    fused: bool = False,
) -> int:
    """Dynamic shared memory of the verify kernel (bytes): ``stages`` stages of 1 KiB-rounded
    (checkpoint rows of ``state_bytes`` elements, the history's d records, a flush's key rows
    (padded; KDA: three bf16 parts of U_j), the window's u rows (2T; KDA on a bf16 checkpoint three
    parts each), the coefficient block, meta), 1 KiB of alignment slack, two mbarriers per stage
    (``fused``: four, then the coefficient scratch,
    :func:`delta_verify_coef_shared_bytes`). Mirrors the .cu file's delta_verify_shared_bytes (a
    CPU test reads the compiled value)."""
    LP = records_padded(L)
    stage = (
        rows * head_k_dim * state_bytes
        + LP * rows * 2
        + _key_parts(per_channel) * LP * (head_k_dim * 2 + 16)
        + 2 * T * _u_parts(state_bytes, per_channel) * delta_verify_qk_pitch(head_k_dim, state_bytes)
        + delta_verify_coefficient_floats(L, T, head_k_dim, per_channel) * 4
        + 16
    )
    stage = (stage + 1023) // 1024 * 1024
    if not fused:
        return stages * stage + 1024 + 16 * stages
    return stages * stage + 1024 + 32 * stages + delta_verify_coef_shared_bytes(head_k_dim, L, T, per_channel)


def _op(per_channel: bool) -> str:
    """The public op whose error messages these are."""
    return "kda_replay_verify" if per_channel else "gdn_replay_verify"


def _ctas(head_k_dim: int, rows: int, L: int, T: int, state_bytes: int, per_channel: bool) -> int:
    """Resident CTAs a multiprocessor of units of ``rows`` rows: shared memory (two stages) and a
    128-register cap, at most 3."""
    smem = delta_verify_shared_bytes(head_k_dim, rows, L, T, 2, state_bytes, per_channel)
    return min(3, SMEM_PER_SM // (smem + SMEM_RESERVED_PER_CTA), REGISTERS_PER_SM // (step_threads(rows) * 128))


def delta_verify_cuda_config(
    head_k_dim: int,
    head_v_dim: int,
    L: int,
    T: int,
    state_bytes: int,
    per_channel: bool = False,
    heads: Optional[int] = None,
    multiprocessors: int = 132,
) -> DeltaVerifyCudaConfig:
    """Units of 64 or 128 value rows (where they tile head_v_dim; else
    :func:`~.gated_delta_replay_cuda.unit_rows`), two stages, as many CTAs per multiprocessor as
    shared memory and a 128-register cap allow (at most 3): the unit size that keeps the most
    consumer warps resident, the smaller on a tie. Timed on an H200 (Qwen3.5-122B, fp32
    checkpoint, B = 16, docs/kernel-notes.md "Gated delta verify in CUDA", session 34), µs, 64 rows / 128
    rows / 32 rows / the Triton kernels: T = 8 (64 rows fit one CTA, 128 rows one CTA of twice the
    warps) batch 256 1057.6 / 879.1 / 1317.1 / 1003.3, batch 512 2081.2 / 1696.2 / 2585.6 / 1934.1;
    T = 4 (two CTAs of 64 rows, one of 128) batch 256 447.4 / 467.3 / 502.8 / 520.6.

    KDA in one launch (``fused``) where :func:`fused_coefficients_fit` and each of the
    ``multiprocessors`` takes at least :data:`FUSED_MIN_UNITS_PER_SM` of the ``heads`` (batch x
    value heads) units (None: many). Timed on an H100 (Kimi Linear, fp32, T = 4, session 59, µs,
    two launches / one): batch 16 31.66 / 33.27, 24 44.45 / 44.33, 32 55.48 / 53.63, 64 100.50 /
    91.26, 128 182.80 / 162.68, 256 345.09 / 302.94; T = 2: 16 26.47 / 28.43, 256 291.68 / 258.91.

    Raises:
        ValueError: one CTA does not fit a multiprocessor.
    """
    candidates = [r for r in (64, 128) if head_v_dim % r == 0] or [unit_rows(head_v_dim)]
    warps, rows = max((_ctas(head_k_dim, r, L, T, state_bytes, per_channel) * r, -r) for r in candidates)
    rows = -rows
    if warps < 1:
        raise ValueError(f"delta_verify_cuda_config: head_k_dim {head_k_dim}, L {L}, T {T} do not fit a multiprocessor")
    enough = heads is None or heads >= FUSED_MIN_UNITS_PER_SM * multiprocessors
    if per_channel and enough and fused_coefficients_fit(head_k_dim, head_v_dim, rows, L, T, state_bytes):
        return DeltaVerifyCudaConfig(rows=rows, stages=2, min_ctas=1, fused=True)
    return DeltaVerifyCudaConfig(rows=rows, stages=2, min_ctas=_ctas(head_k_dim, rows, L, T, state_bytes, per_channel))


FUSED_MAX_T = 4  # from T = 5 the consumers need more than the 128 registers a thread of 416 threads
# Below ~6 units a multiprocessor the one launch's per-CTA chain (records, coefficients, then the
# consumers) costs more than the coefficient launch's parallel CTAs (delta_verify_cuda_config's figures).
FUSED_MIN_UNITS_PER_SM = 6


def fused_coefficients_fit(head_k_dim: int, head_v_dim: int, rows: int, L: int, T: int, state_bytes: int) -> bool:
    """Whether KDA's verify can run in one launch with units of ``rows`` rows: a unit spans every
    value row (its coefficients are then formed once, by the step kernel's head_k_dim coefficient
    threads, and the window's records appended once), T <= :data:`FUSED_MAX_T` (ptxas gives a CTA
    of 13 warps 128 registers a thread; the bf16 consumers at T = 8 take 150 and spilled), and one
    CTA of two stages plus the coefficient scratch fits a multiprocessor's shared memory."""
    smem = delta_verify_shared_bytes(head_k_dim, rows, L, T, 2, state_bytes, True, fused=True)
    smem += delta_verify_coef_static_bytes(head_k_dim, T)
    return rows == head_v_dim and T <= FUSED_MAX_T and smem + SMEM_RESERVED_PER_CTA <= SMEM_PER_SM


COEF_CAPPED_REGISTERS = 64  # a thread of KDA's coefficient kernel, where it is capped
COEF_CAPPED_MAX_L = 20  # longer record buffers spill under the cap (CPU compile test)
COEF_CAPPED_MAX_T = 4
# Above COEF_CAPPED_MAX_T: KDA with an fp32 checkpoint at head_k_dim 128 and L in this range is
# capped at COEF_WIDE_REGISTERS (4 CTAs a multiprocessor). Outside it T = 8 spills under the cap
# (bf16: 8-16 bytes; L = 9 and head_k_dim 64: 8-16; L = 31 at T = 7: 24; CPU compile, session 60).
COEF_WIDE_REGISTERS = 128
COEF_WIDE_L = range(16, 25)


def coefficient_min_ctas(head_k_dim: int, L: int, T: int, per_channel: bool, state_bytes: int) -> int:
    """Resident CTAs a multiprocessor the coefficient kernel's registers are capped for: KDA (a CTA
    of head_k_dim threads) at L <= :data:`COEF_CAPPED_MAX_L` and T <= :data:`COEF_CAPPED_MAX_T`,
    as many as :data:`COEF_CAPPED_REGISTERS` a thread allow (8 at head_k_dim 128); at longer
    windows with an fp32 checkpoint at head_k_dim 128 and L in :data:`COEF_WIDE_L`, as many as
    :data:`COEF_WIDE_REGISTERS` allow (4); else 1 (uncapped: KDA at T = 8 takes 150-203
    registers, from L = 21 it spills under 64). Under a cap every window compiles without spills
    (CPU compile test).

    Timed on an H100 (session 57, Kimi Linear, fp32 / bf16 checkpoint, µs, the 6-CTA cap at T <= 2
    and uncapped at T = 4 -> 8 CTAs; docs/kernel-notes.md "Session 57"): fp32 T = 2 batch 16 28.35
    -> 27.80, 256 313.49 -> 304.64, T = 4 16 33.68 -> 33.92, 256 372.19 -> 363.52; bf16 T = 2 16
    20.31 -> 19.72, 256 220.03 -> 210.64, T = 4 16 26.20 -> 26.33, 256 288.11 -> 286.74. (Session
    35 on an H200, uncapped / 6 / 8 with 32-72 bytes of spills then: fp32 T = 2 262.8 / 256.7 /
    249.4, T = 4 336.0 / 340.4 / 328.4.) Session 60 (ncu, fp32, T = 8, batch 16): uncapped at 160
    registers, 3 CTAs a multiprocessor, the 512 CTAs took 1.29 waves and 19.81 µs, against 15.10
    at 127 registers (4 CTAs, one wave) before session 59."""
    if not per_channel:
        return 1
    if L <= COEF_CAPPED_MAX_L and T <= COEF_CAPPED_MAX_T:
        return REGISTERS_PER_SM // (head_k_dim * COEF_CAPPED_REGISTERS)
    if state_bytes == 4 and head_k_dim == 128 and L in COEF_WIDE_L:
        return REGISTERS_PER_SM // (head_k_dim * COEF_WIDE_REGISTERS)
    return 1


def delta_verify_cuda_unsupported(
    checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor
) -> Optional[str]:
    """Why the CUDA verify cannot run these tensors (None: it can): an sm_90 GPU, GDN or KDA with
    one value head per key head, at most :data:`MAX_T_CUDA` window tokens, the
    CUDA step's sizes, dtypes and alignment (:func:`~.gated_delta_replay_cuda.delta_shape_unsupported`
    on one token), q, k, v (KDA: g too) 16-byte aligned in every outer stride, and two stages of the verify
    kernel fitting a multiprocessor. q, k: [batch, T, k_heads, head_k_dim]; v: [batch, T, v_heads,
    head_v_dim]; g: [batch, T, v_heads] (GDN) or [batch, T, v_heads, head_k_dim] (KDA)."""
    return device_unsupported(checkpoint) or delta_verify_shape_unsupported(
        checkpoint, d_records, k_records, g_records, q, k, v, g
    )


def delta_verify_shape_unsupported(
    checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor
) -> Optional[str]:
    """The device-independent part of :func:`delta_verify_cuda_unsupported`."""
    per_channel = g.dim() == 4
    if per_channel and q.shape[2] != v.shape[2]:
        return f"KDA with {v.shape[2] // q.shape[2]} value heads per key head; the CUDA verify takes one"
    T = q.shape[1]
    if T > MAX_T_CUDA:
        return f"T {T}; the CUDA verify takes T <= {MAX_T_CUDA}"
    if checkpoint.dtype == torch.float8_e4m3fn:
        return "fp8 checkpoint; the CUDA verify reads bf16 or fp32 ones"
    reason = delta_shape_unsupported(checkpoint, d_records, k_records, g_records, q[:, 0], k[:, 0], v[:, 0], g[:, 0])
    if reason is not None:
        return reason
    for name, t in (("q", q), ("k", k), ("v", v)) + ((("g", g),) if per_channel else ()):  # KDA: g rows copied too
        if not copyable_rows(t):
            return f"{name} base or strides {t.stride()} not 16-byte aligned with a contiguous last dim"
    if per_channel:
        for name, t in (("k_records", k_records), ("g_records", g_records)):
            reason = record_offset_unsupported(name, d_records.shape[2], t.stride(2))
            if reason is not None:
                return reason
    _, _, head_v_dim, head_k_dim = checkpoint.shape
    if _ctas(head_k_dim, unit_rows(head_v_dim), d_records.shape[2], T, checkpoint.element_size(), per_channel) < 1:
        return f"two stages of head_k_dim {head_k_dim} {checkpoint.dtype} rows and T {T} do not fit a multiprocessor"
    return None


MAX_RECORD_OFFSET = 2**31 - 1  # KDA's coefficient kernel offsets record positions in 32 bits


def record_offset_unsupported(name: str, L: int, position_stride: int) -> Optional[str]:
    """Why KDA's coefficient kernel cannot index the record tensor ``name`` (None: it can): it
    offsets position j < L by j x ``position_stride`` elements in a 32-bit int (64-bit strides
    there spilled its registers under the cap; the caches' stride is head_k_dim)."""
    if (L - 1) * abs(position_stride) > MAX_RECORD_OFFSET:
        return f"{name} position stride {position_stride}: {L - 1} positions past a 32-bit offset"
    return None


def delta_verify_defines(
    k_heads: int,
    v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    L: int,
    T: int,
    cfg: DeltaVerifyCudaConfig,
    state_bytes: int,
    use_qk_l2norm: bool,
    g_dtype: torch.dtype,
    beta_dtype: torch.dtype,
    has_num_tokens: bool,
    per_channel: bool = False,
) -> Tuple[Tuple[str, int], ...]:
    """The .cu file's -D constants.

    Raises:
        ValueError: ``cfg.rows`` is not a multiple of 16 up to 128 dividing head_v_dim, or
            ``cfg.fused`` where :func:`fused_coefficients_fit` finds no room (or for GDN).
    """
    if cfg.rows % 16 or not 16 <= cfg.rows <= 128 or head_v_dim % cfg.rows:
        raise ValueError(
            f"{_op(per_channel)} (CUDA): rows {cfg.rows}; expected a multiple of 16 up to 128 dividing head_v_dim {head_v_dim}"
        )
    if cfg.fused and not (per_channel and fused_coefficients_fit(head_k_dim, head_v_dim, cfg.rows, L, T, state_bytes)):
        raise ValueError(
            f"{_op(per_channel)} (CUDA): config fused=True; expected KDA units of every value row ({head_v_dim}, got "
            f"{cfg.rows}), T <= {FUSED_MAX_T} (got {T}) and the stages and scratch fitting shared memory (L {L})"
        )
    d = dict(
        CKPT_F32=int(state_bytes == 4),
        KHEADS=k_heads,
        VHEADS=v_heads,
        DK=head_k_dim,
        DV=head_v_dim,
        ROWS=cfg.rows,
        LREC=L,
        LP=records_padded(L),
        VT=T,
        STAGES=cfg.stages,
        MIN_CTAS=cfg.min_ctas,
        COEF_MIN_CTAS=coefficient_min_ctas(head_k_dim, L, T, per_channel, state_bytes),
        L2NORM=int(bool(use_qk_l2norm)),
        HAS_NUM_TOKENS=int(has_num_tokens),
        G_CODE=DTYPE_CODE[g_dtype],
        BETA_CODE=DTYPE_CODE[beta_dtype],
        PER_CHANNEL=int(per_channel),
        FUSED_COEF=int(cfg.fused),
    )
    return tuple(sorted(d.items()))


def _coefficient_params(args: KernelArgs, k_records, g_records, pending, q, k, g, beta, scale) -> KernelArgs:
    """The .cu file's COEF_PARAMS appended to ``args``."""
    return (
        args.tensor(k_records, 3)
        .tensor(g_records, 3)
        .ptr(pending)
        .tensor(q, 3)
        .tensor(k, 3)
        .tensor(g, 3)
        .tensor(beta, 3)
        .f32(scale)
    )  # fmt: skip


def coefficient_args(
    coef, u_rows, khist, k_records, g_records, cursor, pending, q, k, g, beta, slot_ids, num_tokens, scale
) -> KernelArgs:
    """Parameters of ``delta_verify_coefficients``, in the .cu file's order (an absent num_tokens is
    slot_ids' pointer, never read)."""
    args = KernelArgs().ptr(coef).ptr(u_rows).ptr(khist)
    return (
        _coefficient_params(args, k_records, g_records, pending, q, k, g, beta, scale)
        .ptr(slot_ids).ptr(num_tokens if num_tokens is not None else slot_ids).ptr(cursor)
    )  # fmt: skip


def step_args(maps, coef, u_rows, khist, d_records, v, out, slot_ids, num_tokens, cursor) -> KernelArgs:
    """Parameters of ``delta_verify_step`` in two launches, in the .cu file's order: the
    checkpoint's (load, store) tensor maps first."""
    args = KernelArgs().tensor_map(maps[0]).tensor_map(maps[1]).ptr(coef).ptr(u_rows).ptr(khist)
    return _step_tail(args, d_records, v, out, slot_ids, num_tokens, cursor)


def fused_step_args(
    maps, d_records, v, out, slot_ids, num_tokens, cursor, k_records, g_records, pending, q, k, g, beta, scale
) -> KernelArgs:
    """Parameters of ``delta_verify_step`` with FUSED_COEF (KDA in one launch), in the .cu file's
    order."""
    args = _step_tail(KernelArgs().tensor_map(maps[0]).tensor_map(maps[1]), d_records, v, out, slot_ids, num_tokens, cursor)
    return _coefficient_params(args, k_records, g_records, pending, q, k, g, beta, scale)


def _step_tail(args: KernelArgs, d_records, v, out, slot_ids, num_tokens, cursor) -> KernelArgs:
    """The step kernel's parameters from d_records to batch, appended to ``args``."""
    return (
        args.tensor(d_records, 3)
        .tensor(v, 3)
        .tensor(out, 3)
        .ptr(slot_ids).ptr(num_tokens if num_tokens is not None else slot_ids).ptr(cursor)
        .i32(v.shape[0])
    )  # fmt: skip


def launch_delta_replay_verify_cuda(
    checkpoint: Tensor,
    d_records: Tensor,
    k_records: Tensor,
    g_records: Tensor,
    cursor: Tensor,
    pending: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
    config: Optional[DeltaVerifyCudaConfig] = None,
) -> Tensor:
    """The CUDA verify (GDN, or KDA: g's rank) on the cache tensors; arguments already checked by
    the op, in the Triton launcher's order.

    Raises:
        ValueError: when :func:`delta_verify_cuda_unsupported` names a reason (nothing is launched).
    """
    reason = delta_verify_cuda_unsupported(checkpoint, d_records, k_records, g_records, q, k, v, g)
    if reason is not None:
        raise ValueError(f"{_op(g.dim() == 4)} (CUDA): {reason}")
    batch, T, v_heads, head_v_dim = v.shape
    k_heads, head_k_dim = q.shape[2], q.shape[3]
    L = d_records.shape[2]
    es = checkpoint.element_size()
    per_channel = g.dim() == 4
    mps = multiprocessor_count(v.device)
    cfg = config or delta_verify_cuda_config(head_k_dim, head_v_dim, L, T, es, per_channel, heads=batch * v_heads, multiprocessors=mps)
    defines = delta_verify_defines(
        k_heads,
        v_heads,
        head_k_dim,
        head_v_dim,
        L,
        T,
        cfg,
        es,
        use_qk_l2norm,
        g.dtype,
        beta.dtype,
        num_tokens is not None,
        per_channel,
    )
    device = v.device
    stream = torch.cuda.current_stream(device).cuda_stream
    smem = delta_verify_shared_bytes(head_k_dim, cfg.rows, L, T, cfg.stages, es, per_channel, cfg.fused)
    step_kernel = load_kernel(SOURCE, "delta_verify_step", defines, device, smem)
    maps = checkpoint_tensor_maps(checkpoint, cfg.rows)
    threads = step_threads(cfg.rows) + (head_k_dim if cfg.fused else 0)
    units = batch * v_heads * (head_v_dim // cfg.rows)
    grid = (min(units, step_kernel.ctas_per_sm(threads, smem) * mps),)
    if cfg.fused:
        args = fused_step_args(
            maps, d_records, v, out, slot_ids, num_tokens, cursor, k_records, g_records, pending, q, k, g, beta, scale
        )
        step_kernel.launch(grid, threads, smem, stream, args, pdl=cfg.pdl)
        return out
    coef_smem = delta_verify_coef_shared_bytes(head_k_dim, L, T, per_channel)
    coef_kernel = load_kernel(SOURCE, "delta_verify_coefficients", defines, device, coef_smem)
    coef = torch.empty(
        batch * v_heads * delta_verify_coefficient_floats(L, T, head_k_dim, per_channel), dtype=torch.float32, device=device
    )
    u_heads = v_heads if per_channel else k_heads  # KDA's u rows and keys are per value head
    u_rows = torch.empty(
        batch * u_heads * 2 * T * _u_parts(es, per_channel) * delta_verify_qk_pitch(head_k_dim, es),
        dtype=torch.uint8,
        device=device,
    )
    khist = torch.empty(
        batch * u_heads * _key_parts(per_channel) * records_padded(L) * head_k_dim, dtype=torch.bfloat16, device=device
    )
    # GDN: a CTA of a warp per value head for each (key head, row); KDA: a CTA of a thread per key
    # channel for each (value head, row).
    coef_grid, coef_threads = ((v_heads, batch), head_k_dim) if per_channel else ((k_heads, batch), 32 * (v_heads // k_heads))
    coef_kernel.launch(
        coef_grid,
        coef_threads,
        coef_smem,
        stream,
        coefficient_args(
            coef, u_rows, khist, k_records, g_records, cursor, pending, q, k, g, beta, slot_ids, num_tokens, scale
        ),
        pdl=cfg.pdl,
    )
    step_kernel.launch(
        grid,
        threads,
        smem,
        stream,
        step_args(maps, coef, u_rows, khist, d_records, v, out, slot_ids, num_tokens, cursor),
        pdl=cfg.pdl,
    )
    return out
