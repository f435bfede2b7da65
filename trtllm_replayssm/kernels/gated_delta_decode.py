"""Conventional gated delta-rule decode step (GDN, KDA): read-modify-write of the whole state.

Grid (cdiv(head_v_dim, BLOCK_V), v_heads, batch); each program owns a [BLOCK_V, head_k_dim]
tile of one value head's state of one row: S' = S Diag(exp(g)), d = β (v - S' k̂),
S = S' + d k̂ᵀ (stored), o = S q̂.
"""
from __future__ import annotations

from typing import Optional

import triton
import triton.language as tl

from torch import Tensor

from .common import LaunchConfig
from .gated_delta_common import (decay_columns, gated_delta_launch_config, gated_delta_step_args,
                                 gated_delta_step_constexprs, load_log_decay, load_qk, multiprocessor_count)

__all__ = ["launch_gated_delta_decode_step"]


@triton.jit
def _gated_delta_decode_step_kernel(
    # state [slot, v_heads, head_v_dim, head_k_dim], head_k_dim contiguous
    state_ptr, stride_s_slot, stride_s_head, stride_s_row,
    # q, k [batch, k_heads, head_k_dim]; v [batch, v_heads, head_v_dim]; last dims contiguous
    q_ptr, stride_q_batch, stride_q_head,
    k_ptr, stride_k_batch, stride_k_head,
    v_ptr, stride_v_batch, stride_v_head,
    # g [batch, v_heads] (GDN) or [batch, v_heads, head_k_dim] (KDA); beta [batch, v_heads]
    g_ptr, stride_g_batch, stride_g_head,
    beta_ptr, stride_beta_batch, stride_beta_head,
    # out [batch, v_heads, head_v_dim]
    out_ptr, stride_o_batch, stride_o_head,
    slot_ids_ptr, scale,
    head_v_dim, head_k_dim, v_per_k,
    BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr,
):
    i_v, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    i_b = i_b.to(tl.int64)
    i_hk = i_h // v_per_k
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    o_k = tl.arange(0, BLOCK_K)
    m_v = o_v < head_v_dim
    m_k = o_k < head_k_dim

    p_s = state_ptr + slot * stride_s_slot + i_h * stride_s_head + o_v[:, None] * stride_s_row + o_k[None, :]
    m_s = m_v[:, None] & m_k[None, :]
    b_s = tl.load(p_s, mask=m_s, other=0.0).to(tl.float32)

    b_q, b_k = load_qk(q_ptr + i_b * stride_q_batch + i_hk * stride_q_head,
                       k_ptr + i_b * stride_k_batch + i_hk * stride_k_head, o_k, m_k, scale, USE_QK_L2NORM)
    g = load_log_decay(g_ptr + i_b * stride_g_batch + i_h * stride_g_head, o_k, m_k, PER_CHANNEL)
    beta = tl.load(beta_ptr + i_b * stride_beta_batch + i_h * stride_beta_head).to(tl.float32)
    b_v = tl.load(v_ptr + i_b * stride_v_batch + i_h * stride_v_head + o_v, mask=m_v, other=0.0).to(tl.float32)

    b_s = decay_columns(b_s, tl.exp(g), PER_CHANNEL)
    b_d = beta * (b_v - tl.sum(b_s * b_k[None, :], axis=1))
    b_s += b_d[:, None] * b_k[None, :]
    tl.store(p_s, b_s.to(state_ptr.dtype.element_ty), mask=m_s)
    b_o = tl.sum(b_s * b_q[None, :], axis=1)
    tl.store(out_ptr + i_b * stride_o_batch + i_h * stride_o_head + o_v, b_o.to(out_ptr.dtype.element_ty), mask=m_v)


def launch_gated_delta_decode_step(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                                   beta: Tensor, *, slot_ids: Tensor, scale: float,
                                   use_qk_l2norm: bool, out: Tensor,
                                   config: Optional[LaunchConfig] = None) -> Tensor:
    """Launch the conventional step; arguments as ``ops.gdn_decode_step`` / ``ops.kda_decode_step``
    (already checked)."""
    batch, v_heads, head_v_dim = v.shape
    head_k_dim = q.shape[2]
    cfg = config or gated_delta_launch_config("decode_step", head_v_dim, head_k_dim, batch * v_heads, state.dtype,
                                              multiprocessors=multiprocessor_count(state.device))
    grid = (triton.cdiv(head_v_dim, cfg.block_head_dim), v_heads, batch)
    _gated_delta_decode_step_kernel[grid](
        state, state.stride(0), state.stride(1), state.stride(2),
        *gated_delta_step_args(q, k, v, g, beta, out, slot_ids, scale),
        BLOCK_V=cfg.block_head_dim, **cfg.launch_options(),
        **gated_delta_step_constexprs(g, head_k_dim, use_qk_l2norm),
    )
    return out
