"""Conventional speculative verify for the gated delta rule (GDN, KDA; the baseline): read the
state once, run the window's tokens serially in registers, store the state after every token.

Grid (cdiv(head_v_dim, BLOCK_V), v_heads, batch), the conventional decode kernel's tiling and
launch configuration; a program owns a [BLOCK_V, head_k_dim] tile of one value head's state.
The float64 reference is :func:`trtllm_replayssm.reference.spec.gated_delta_snapshot_verify_ref`.
"""
from __future__ import annotations

from typing import Optional

import triton
import triton.language as tl

from torch import Tensor

from .common import LaunchConfig, window_tokens
from .gated_delta_common import (decay_columns, gated_delta_launch_config, load_log_decay, load_qk,
                                 multiprocessor_count)

__all__ = ["launch_gated_delta_snapshot_verify"]


@triton.jit
def _gated_delta_snapshot_verify_kernel(
    # state [slot, v_heads, head_v_dim, head_k_dim] (read only); snapshots [slot, T_max, ...]
    state_ptr, stride_s_slot, stride_s_head, stride_s_row,
    snap_ptr, stride_p_slot, stride_p_tok, stride_p_head, stride_p_row,
    # q, k [batch, T, k_heads, head_k_dim]; v, out [batch, T, v_heads, head_v_dim]
    q_ptr, stride_q_batch, stride_q_tok, stride_q_head,
    k_ptr, stride_k_batch, stride_k_tok, stride_k_head,
    v_ptr, stride_v_batch, stride_v_tok, stride_v_head,
    out_ptr, stride_o_batch, stride_o_tok, stride_o_head,
    # g [batch, T, v_heads(, head_k_dim)]; beta [batch, T, v_heads]
    g_ptr, stride_g_batch, stride_g_tok, stride_g_head,
    beta_ptr, stride_beta_batch, stride_beta_tok, stride_beta_head,
    slot_ids_ptr, num_tokens_ptr, scale,
    T, head_v_dim, head_k_dim, v_per_k,
    BLOCK_T: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_NUM_TOKENS: tl.constexpr, PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr,
):
    i_v, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    n = window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS)
    i_b = i_b.to(tl.int64)
    i_hk = i_h // v_per_k
    o_v = i_v * BLOCK_V + tl.arange(0, BLOCK_V)
    o_k = tl.arange(0, BLOCK_K)
    m_v = o_v < head_v_dim
    m_k = o_k < head_k_dim
    m_c = m_v[:, None] & m_k[None, :]
    o_c = o_v[:, None] * stride_s_row + o_k[None, :]
    b_s = tl.load(state_ptr + slot * stride_s_slot + i_h * stride_s_head + o_c, mask=m_c, other=0.0).to(tl.float32)
    p_snap = snap_ptr + slot * stride_p_slot + i_h * stride_p_head + o_v[:, None] * stride_p_row + o_k[None, :]
    p_q = q_ptr + i_b * stride_q_batch + i_hk * stride_q_head
    p_k = k_ptr + i_b * stride_k_batch + i_hk * stride_k_head
    p_v = v_ptr + i_b * stride_v_batch + i_h * stride_v_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_g = g_ptr + i_b * stride_g_batch + i_h * stride_g_head
    p_beta = beta_ptr + i_b * stride_beta_batch + i_h * stride_beta_head
    for s in tl.static_range(BLOCK_T):
        if s < n:
            b_q, b_k = load_qk(p_q + s * stride_q_tok, p_k + s * stride_k_tok, o_k, m_k, scale, USE_QK_L2NORM)
            g = load_log_decay(p_g + s * stride_g_tok, o_k, m_k, PER_CHANNEL)
            beta = tl.load(p_beta + s * stride_beta_tok).to(tl.float32)
            b_v = tl.load(p_v + s * stride_v_tok + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_s = decay_columns(b_s, tl.exp(g), PER_CHANNEL)
            b_d = beta * (b_v - tl.sum(b_s * b_k[None, :], axis=1))
            b_s += b_d[:, None] * b_k[None, :]
            tl.store(p_snap + s * stride_p_tok, b_s.to(snap_ptr.dtype.element_ty), mask=m_c)
            tl.store(p_o + s * stride_o_tok + o_v, tl.sum(b_s * b_q[None, :], axis=1).to(out_ptr.dtype.element_ty), mask=m_v)


def launch_gated_delta_snapshot_verify(state: Tensor, snapshots: Tensor, q: Tensor, k: Tensor,
                                       v: Tensor, g: Tensor, beta: Tensor, *, slot_ids: Tensor,
                                       num_tokens: Optional[Tensor] = None, scale: float,
                                       use_qk_l2norm: bool, out: Tensor,
                                       config: Optional[LaunchConfig] = None) -> Tensor:
    """Launch the snapshot verify; arguments already checked by the op."""
    batch, T, v_heads, head_v_dim = v.shape
    k_heads, head_k_dim = q.shape[2], q.shape[3]
    cfg = config or gated_delta_launch_config("decode_step", head_v_dim, head_k_dim, batch * v_heads, state.dtype,
                                              multiprocessors=multiprocessor_count(state.device))
    grid = (triton.cdiv(head_v_dim, cfg.block_head_dim), v_heads, batch)
    _gated_delta_snapshot_verify_kernel[grid](
        state, state.stride(0), state.stride(1), state.stride(2),
        snapshots, snapshots.stride(0), snapshots.stride(1), snapshots.stride(2), snapshots.stride(3),
        q, q.stride(0), q.stride(1), q.stride(2),
        k, k.stride(0), k.stride(1), k.stride(2),
        v, v.stride(0), v.stride(1), v.stride(2),
        out, out.stride(0), out.stride(1), out.stride(2),
        g, g.stride(0), g.stride(1), g.stride(2),
        beta, beta.stride(0), beta.stride(1), beta.stride(2),
        slot_ids, num_tokens if num_tokens is not None else slot_ids, scale,
        T, head_v_dim, head_k_dim, v_heads // k_heads,
        BLOCK_T=triton.next_power_of_2(T), BLOCK_V=cfg.block_head_dim,
        BLOCK_K=triton.next_power_of_2(head_k_dim), HAS_NUM_TOKENS=num_tokens is not None,
        PER_CHANNEL=g.dim() == 4, USE_QK_L2NORM=use_qk_l2norm, **cfg.launch_options(),
    )
    return out
