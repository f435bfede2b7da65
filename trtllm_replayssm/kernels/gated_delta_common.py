"""Triton helpers and launch arguments shared by the gated delta-rule (GDN, KDA) decode kernels.

Both families run the same kernels: ``PER_CHANNEL`` (a constexpr) selects KDA's log-decay per
key channel, [batch, v_heads, head_k_dim], over GDN's scalar per value head, [batch, v_heads].
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from torch import Tensor

from .common import LaunchConfig, split_dot

__all__ = [
    "fold_records",
    "gated_delta_launch_config",
    "gated_delta_step_args",
    "gated_delta_step_constexprs",
    "multiprocessor_count",
    "record_decays",
    "CPU_MULTIPROCESSORS",
    "H200_MULTIPROCESSORS",
]

CPU_MULTIPROCESSORS = 4  # "multiprocessors" of a CPU, where the kernels run under the interpreter
H200_MULTIPROCESSORS = 132  # the GPU the launch tables were tuned on (default target of AOT plugins)


def multiprocessor_count(device: torch.device) -> int:
    """Multiprocessors of ``device`` (a CUDA device's, asked once per device by torch's cache of
    device properties); CPU_MULTIPROCESSORS on any other device."""
    if device.type != "cuda":
        return CPU_MULTIPROCESSORS
    return torch.cuda.get_device_properties(device).multi_processor_count


@triton.jit
def load_qk(q_ptr, k_ptr, o_k, m_k, scale, USE_QK_L2NORM: tl.constexpr):
    """(scale * q̂, k̂) fp32 [BLOCK_K]: q and k of one key head, L2-normalised (eps 1e-6) when asked."""
    b_q = tl.load(q_ptr + o_k, mask=m_k, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + o_k, mask=m_k, other=0.0).to(tl.float32)
    if USE_QK_L2NORM:
        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=0) + 1e-6)
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)
    return b_q * scale, b_k


@triton.jit
def load_log_decay(g_ptr, o_k, m_k, PER_CHANNEL: tl.constexpr):
    """The token's log-decay, fp32: [BLOCK_K] (KDA, zero on padded channels) or a scalar (GDN)."""
    if PER_CHANNEL:
        g = tl.load(g_ptr + o_k, mask=m_k, other=0.0).to(tl.float32)
    else:
        g = tl.load(g_ptr).to(tl.float32)
    return g


@triton.jit
def decay_columns(b_s, decay, PER_CHANNEL: tl.constexpr):
    """S Diag(decay) for a [BLOCK_V, BLOCK_K] state tile: per key column (KDA) or uniform (GDN)."""
    if PER_CHANNEL:
        b_s = b_s * decay[None, :]
    else:
        b_s = b_s * decay
    return b_s


@triton.jit
def record_decays(p_gr, stride_gr_pos, o_l, o_k, m_k, w, g_after, PER_CHANNEL: tl.constexpr):
    """Decays of a row's w records and of its checkpoint to the point after them, from the g
    records at ``p_gr`` ([L] for GDN, [L, head_k_dim] for KDA; fp32, KDA's fp16 beside 16-bit
    records) and ``g_after``, the
    log-decay applied after the last record (the step's own g, or 0.0).

    Returns (e, e0): e_j = exp(Σ_{j<i<w} g_i + g_after) for the records, zero at j >= w
    (fp32 [BLOCK_L] for GDN, [BLOCK_L, BLOCK_K] for KDA, zero on padded channels), and
    e0 = exp(Σ_{i<w} g_i + g_after), the checkpoint's decay ([] or [BLOCK_K]). Σ_{j<i<w} is a
    reverse cumulative sum of the records shifted by one, never a difference of prefix sums.
    """
    m_l = o_l < w
    m_next = (o_l + 1) < w
    if PER_CHANNEL:
        b_gn = tl.load(p_gr + (o_l[:, None] + 1) * stride_gr_pos + o_k[None, :],
                       mask=m_next[:, None] & m_k[None, :], other=0.0).to(tl.float32)
        g0 = tl.load(p_gr + o_k, mask=m_k & (w > 0), other=0.0).to(tl.float32)
        e = tl.where(m_l[:, None], tl.exp(tl.cumsum(b_gn, axis=0, reverse=True) + g_after[None, :]), 0.0)
    else:
        b_gn = tl.load(p_gr + (o_l + 1) * stride_gr_pos, mask=m_next, other=0.0).to(tl.float32)
        g0 = tl.load(p_gr, mask=w > 0, other=0.0).to(tl.float32)
        e = tl.where(m_l, tl.exp(tl.cumsum(b_gn, axis=0, reverse=True) + g_after), 0.0)
    return e, tl.exp(tl.sum(b_gn, axis=0) + g0 + g_after)


@triton.jit
def fold_records(b_s, e0, b_dt, b_uk, e, PER_CHANNEL: tl.constexpr, SPLIT_K: tl.constexpr):
    """S Diag(e0) + Dᵀ (e ⊙ K) for one [BLOCK_V, BLOCK_K] fp32 state tile ``b_s``: the records
    folded in as one tile product (every dimension >= 16). ``b_dt`` is Dᵀ, the tile's d
    records, fp32 [BLOCK_V, BLOCK_L] (zero past the cursor); e, e0 from :func:`record_decays`.

    KDA (PER_CHANNEL): ``b_uk`` is U = e ⊙ K, fp32 [BLOCK_L, BLOCK_K] (formed once per program
    by the caller), and the product is exact fp32 (FMAs). GDN: ``b_uk`` is K as stored (fp32
    values); the scalar decays scale Dᵀ's columns and the product runs on tensor cores in TF32
    parts (:func:`~.common.split_dot`, about fp32 accuracy; K split only when SPLIT_K: 16-bit
    values are exact in TF32). ``e`` is read only for GDN."""
    if PER_CHANNEL:
        out = b_s * e0[None, :] + tl.dot(b_dt, b_uk, input_precision="ieee")
    else:
        out = split_dot(b_dt * e[None, :], b_uk, b_s * e0, SPLIT_K)
    return out


def gated_delta_step_args(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, out: Tensor,
                          slot_ids: Tensor, scale: float) -> tuple:
    """Kernel arguments of the step inputs, in the order both kernels declare them (q, k, v, g,
    beta, out with their batch and head strides, slot_ids, scale, head_v_dim, head_k_dim,
    v_heads per key head)."""
    return (q, q.stride(0), q.stride(1), k, k.stride(0), k.stride(1),
            v, v.stride(0), v.stride(1), g, g.stride(0), g.stride(1),
            beta, beta.stride(0), beta.stride(1), out, out.stride(0), out.stride(1),
            slot_ids, scale, v.shape[2], q.shape[2], v.shape[1] // q.shape[1])


def gated_delta_step_constexprs(g: Tensor, head_k_dim: int, use_qk_l2norm: bool) -> dict:
    return dict(BLOCK_K=triton.next_power_of_2(head_k_dim), PER_CHANNEL=g.dim() == 3,
                USE_QK_L2NORM=use_qk_l2norm)


def gated_delta_launch_config(route: str, head_v_dim: int, head_k_dim: int, heads: int,
                              state_dtype: torch.dtype, *, multiprocessors: int) -> LaunchConfig:
    """Launch configuration of the gated delta-rule kernels for ``heads`` = batch * v_heads
    (row, value head) pairs. Measured on an H200 (docs/kernel-notes.md, gated delta v2).

    - ``"decode_step"`` (conventional): one [rows, head_k_dim] tile per program, read-modify-
      write, one warp: 8 rows for a 4-byte state, 16 for a 2-byte one (sweep of 16 tilings,
      2026-11-30: one warp beat two by 2-17% at batch 64/256, most for bf16 state and KDA).
    - ``"replay_step"``: tiles of 16 value rows (the flush's tile product needs >= 16),
      one warp; a program walks as many tiles of its head as keeps >= ~8 programs per
      multiprocessor busy (``multiprocessors``: :func:`multiprocessor_count` of the launch's
      device), so the per-head work (decays, scores) is paid once per program.
    """
    if route == "decode_step":
        return LaunchConfig(block_head_dim=min(8 if state_dtype.itemsize >= 4 else 16,
                                               triton.next_power_of_2(head_v_dim)), num_warps=1)
    if route != "replay_step":
        raise ValueError(f"gated_delta_launch_config: route is {route!r}; expected 'decode_step' or 'replay_step'")
    tiles = triton.cdiv(head_v_dim, 16)
    spans = min(tiles, triton.next_power_of_2(triton.cdiv(PROGRAMS_PER_SM * multiprocessors, heads)))
    return LaunchConfig(block_head_dim=16, num_warps=1, chunks=triton.cdiv(tiles, spans),
                        num_stages=3 if spans < tiles else 1)


PROGRAMS_PER_SM = 8  # one-warp programs wanted per multiprocessor
