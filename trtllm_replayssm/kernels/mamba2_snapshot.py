"""Conventional speculative verify for Mamba-2 (the baseline): read the state once, run the
window's tokens serially in registers, store the state after every token (T snapshots).

Grid (cdiv(head_dim, BLOCK_HEAD_DIM), nheads, batch), the conventional decode kernel's tiling and
launch configuration; each program owns a [BLOCK_HEAD_DIM, d_state] tile of one head's state.
The float64 reference is :func:`trtllm_replayssm.reference.spec.mamba2_snapshot_verify_ref`.
"""
from __future__ import annotations

from typing import Optional

import triton
import triton.language as tl

from torch import Tensor

from .common import (LaunchConfig, mamba2_launch_config, mamba2_optional_inputs, mamba2_step_constexprs, process_dt,
                     skip_gate_store, window_tokens)

__all__ = ["launch_mamba2_snapshot_verify"]


@triton.jit
def _mamba2_snapshot_verify_kernel(
    # state [slot, nheads, head_dim, d_state], d_state contiguous (read only)
    state_ptr, stride_s_slot, stride_s_head, stride_s_dim,
    # snapshots [slot, T_max, nheads, head_dim, d_state], d_state contiguous
    snap_ptr, stride_p_slot, stride_p_tok, stride_p_head, stride_p_dim,
    # x, z, out [batch, T, nheads, head_dim], head_dim contiguous
    x_ptr, stride_x_batch, stride_x_tok, stride_x_head,
    z_ptr, stride_z_batch, stride_z_tok, stride_z_head,
    out_ptr, stride_o_batch, stride_o_tok, stride_o_head,
    # dt [batch, T, nheads]; A, dt_bias [nheads]; D [nheads] or [nheads, head_dim]
    dt_ptr, stride_dt_batch, stride_dt_tok, stride_dt_head,
    A_ptr, dt_bias_ptr, D_ptr, stride_D_head,
    # B, C [batch, T, ngroups, d_state], d_state contiguous
    B_ptr, stride_B_batch, stride_B_tok, stride_B_group,
    C_ptr, stride_C_batch, stride_C_tok, stride_C_group,
    # slot_ids, num_tokens [batch] int32
    slot_ids_ptr, num_tokens_ptr,
    T, head_dim, d_state, heads_per_group,
    BLOCK_T: tl.constexpr, BLOCK_HEAD_DIM: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
    HAS_NUM_TOKENS: tl.constexpr, HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr,
    HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
):
    i_p, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    n = window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS)
    i_b = i_b.to(tl.int64)
    i_g = i_h // heads_per_group
    o_p = i_p * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
    o_n = tl.arange(0, BLOCK_D_STATE)
    m_p = o_p < head_dim
    m_n = o_n < d_state
    m_c = m_p[:, None] & m_n[None, :]
    o_c = o_p[:, None] * stride_s_dim + o_n[None, :]
    b_s = tl.load(state_ptr + slot * stride_s_slot + i_h * stride_s_head + o_c, mask=m_c, other=0.0).to(tl.float32)
    A = tl.load(A_ptr + i_h).to(tl.float32)
    p_snap = snap_ptr + slot * stride_p_slot + i_h * stride_p_head + o_p[:, None] * stride_p_dim + o_n[None, :]
    p_x = x_ptr + i_b * stride_x_batch + i_h * stride_x_head
    p_z = z_ptr + i_b * stride_z_batch + i_h * stride_z_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_B = B_ptr + i_b * stride_B_batch + i_g * stride_B_group
    p_C = C_ptr + i_b * stride_C_batch + i_g * stride_C_group
    for s in tl.static_range(BLOCK_T):
        if s < n:
            dt = process_dt(dt_ptr + i_b * stride_dt_batch + s * stride_dt_tok + i_h * stride_dt_head,
                            dt_bias_ptr, i_h, HAS_DT_BIAS, DT_SOFTPLUS)
            b_x = tl.load(p_x + s * stride_x_tok + o_p, mask=m_p, other=0.0).to(tl.float32)
            b_B = tl.load(p_B + s * stride_B_tok + o_n, mask=m_n, other=0.0).to(tl.float32)
            b_C = tl.load(p_C + s * stride_C_tok + o_n, mask=m_n, other=0.0).to(tl.float32)
            b_s = b_s * tl.exp(A * dt) + (dt * b_x)[:, None] * b_B[None, :]
            tl.store(p_snap + s * stride_p_tok, b_s.to(snap_ptr.dtype.element_ty), mask=m_c)
            skip_gate_store(tl.sum(b_s * b_C[None, :], axis=1), b_x, o_p, m_p, i_h, D_ptr,
                            stride_D_head, p_z + s * stride_z_tok, p_o + s * stride_o_tok,
                            HAS_D, D_PER_DIM, HAS_Z)


def launch_mamba2_snapshot_verify(state: Tensor, snapshots: Tensor, x: Tensor, dt: Tensor,
                                  A: Tensor, B: Tensor, C: Tensor, *, slot_ids: Tensor,
                                  num_tokens: Optional[Tensor] = None, D: Optional[Tensor] = None,
                                  z: Optional[Tensor] = None, dt_bias: Optional[Tensor] = None,
                                  dt_softplus: bool = True, out: Tensor,
                                  config: Optional[LaunchConfig] = None) -> Tensor:
    """Launch the snapshot verify; arguments already checked by the op."""
    batch, T, nheads, head_dim = x.shape
    ngroups, d_state = B.shape[2], B.shape[3]
    cfg = config or mamba2_launch_config("decode_step", head_dim, d_state, batch, state.dtype)
    grid = (triton.cdiv(head_dim, cfg.block_head_dim), nheads, batch)
    zz, DD, bias = mamba2_optional_inputs(x, A, D, z, dt_bias)
    _mamba2_snapshot_verify_kernel[grid](
        state, state.stride(0), state.stride(1), state.stride(2),
        snapshots, snapshots.stride(0), snapshots.stride(1), snapshots.stride(2), snapshots.stride(3),
        x, x.stride(0), x.stride(1), x.stride(2),
        zz, zz.stride(0), zz.stride(1), zz.stride(2),
        out, out.stride(0), out.stride(1), out.stride(2),
        dt, dt.stride(0), dt.stride(1), dt.stride(2),
        A, bias, DD, DD.stride(0),
        B, B.stride(0), B.stride(1), B.stride(2),
        C, C.stride(0), C.stride(1), C.stride(2),
        slot_ids, num_tokens if num_tokens is not None else slot_ids,
        T, head_dim, d_state, nheads // ngroups,
        BLOCK_T=triton.next_power_of_2(T), BLOCK_HEAD_DIM=cfg.block_head_dim,
        HAS_NUM_TOKENS=num_tokens is not None, **cfg.launch_options(),
        **mamba2_step_constexprs(D, z, dt_bias, dt_softplus, d_state),
    )
    return out
