"""Conventional Mamba-2 decode step (read-modify-write of the whole state): the baseline.

Grid (cdiv(head_dim, BLOCK_HEAD_DIM), nheads, batch); each program owns a
[BLOCK_HEAD_DIM, d_state] tile of one head's state of one row.
"""
from __future__ import annotations

from typing import Optional

import triton
import triton.language as tl

from torch import Tensor

from .common import (LaunchConfig, mamba2_launch_config, mamba2_step_args, mamba2_step_constexprs,
                     process_dt, skip_gate_store)

__all__ = ["launch_mamba2_decode_step"]


@triton.jit
def _mamba2_decode_step_kernel(
    # state [slot, nheads, head_dim, d_state], d_state contiguous
    state_ptr, stride_s_slot, stride_s_head, stride_s_dim,
    # x, z, out [batch, nheads, head_dim], head_dim contiguous
    x_ptr, stride_x_batch, stride_x_head,
    z_ptr, stride_z_batch, stride_z_head,
    out_ptr, stride_o_batch, stride_o_head,
    # dt [batch, nheads]; A, dt_bias [nheads]; D [nheads] or [nheads, head_dim]
    dt_ptr, stride_dt_batch, stride_dt_head,
    A_ptr, dt_bias_ptr, D_ptr, stride_D_head,
    # B, C [batch, ngroups, d_state], d_state contiguous
    B_ptr, stride_B_batch, stride_B_group,
    C_ptr, stride_C_batch, stride_C_group,
    slot_ids_ptr,
    head_dim, d_state, heads_per_group,
    BLOCK_HEAD_DIM: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
):
    i_p, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    i_b = i_b.to(tl.int64)
    i_g = i_h // heads_per_group
    o_p = i_p * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
    o_n = tl.arange(0, BLOCK_D_STATE)
    m_p = o_p < head_dim
    m_n = o_n < d_state

    p_s = state_ptr + slot * stride_s_slot + i_h * stride_s_head + o_p[:, None] * stride_s_dim + o_n[None, :]
    m_s = m_p[:, None] & m_n[None, :]
    b_s = tl.load(p_s, mask=m_s, other=0.0).to(tl.float32)

    dt = process_dt(dt_ptr + i_b * stride_dt_batch + i_h * stride_dt_head, dt_bias_ptr, i_h,
                    HAS_DT_BIAS, DT_SOFTPLUS)
    decay = tl.exp(tl.load(A_ptr + i_h).to(tl.float32) * dt)
    b_x = tl.load(x_ptr + i_b * stride_x_batch + i_h * stride_x_head + o_p, mask=m_p, other=0.0).to(tl.float32)
    b_B = tl.load(B_ptr + i_b * stride_B_batch + i_g * stride_B_group + o_n, mask=m_n, other=0.0).to(tl.float32)
    b_C = tl.load(C_ptr + i_b * stride_C_batch + i_g * stride_C_group + o_n, mask=m_n, other=0.0).to(tl.float32)

    b_s = b_s * decay + (dt * b_x)[:, None] * b_B[None, :]
    tl.store(p_s, b_s.to(state_ptr.dtype.element_ty), mask=m_s)
    y = tl.sum(b_s * b_C[None, :], axis=1)
    skip_gate_store(y, b_x, o_p, m_p, i_h, D_ptr, stride_D_head,
                    z_ptr + i_b * stride_z_batch + i_h * stride_z_head,
                    out_ptr + i_b * stride_o_batch + i_h * stride_o_head,
                    HAS_D, D_PER_DIM, HAS_Z)


def launch_mamba2_decode_step(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor,
                              C: Tensor, *, slot_ids: Tensor, D: Optional[Tensor] = None,
                              z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None,
                              dt_softplus: bool = True, out: Tensor,
                              config: Optional[LaunchConfig] = None) -> Tensor:
    """Launch the conventional step; arguments as ``ops.mamba2_decode_step`` (already checked)."""
    batch, nheads, head_dim = x.shape
    d_state = B.shape[2]
    cfg = config or mamba2_launch_config("decode_step", head_dim, d_state, batch, state.dtype)
    grid = (triton.cdiv(head_dim, cfg.block_head_dim), nheads, batch)
    _mamba2_decode_step_kernel[grid](
        state, state.stride(0), state.stride(1), state.stride(2),
        *mamba2_step_args(x, dt, A, B, C, slot_ids, D, z, dt_bias, out),
        BLOCK_HEAD_DIM=cfg.block_head_dim, **cfg.launch_options(),
        **mamba2_step_constexprs(D, z, dt_bias, dt_softplus, d_state),
    )
    return out
