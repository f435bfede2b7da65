"""ReplaySSM gated delta-rule (GDN, KDA) decode step: output from checkpoint + records, state
stored only at flush.

:func:`launch_gated_delta_replay_step` first picks its kernel (:func:`replay_step_kernel`): on
sm_90 with a bf16 or fp32 checkpoint, bf16 activations and bf16 records the CUDA C++ step
(:mod:`~.gated_delta_replay_cuda`), the Triton kernel below otherwise.

The Triton kernel: one launch per step. Grid (cdiv(head_v_dim, SPAN_V), v_heads, batch); each program owns SPAN_V
rows of one value head's [head_v_dim, head_k_dim] checkpoint of one row and walks them in
[BLOCK_V, head_k_dim] tiles (a loop software-pipelined NUM_STAGES deep). From the row's cursor w
it decides on the device what the row does (notation of
:mod:`trtllm_replayssm.reference.gated_delta`):

* w < L-1 (non-flush), the inner-product route: per program, once, the decays
  e_j = exp(Γ_j) of the records (per key channel for KDA, scalars for GDN) and e_0 of the
  checkpoint, and the scores s^q_j = (e_j ⊙ k_j) · q̂, s^k_j = (e_j ⊙ k_j) · k̂. Per tile, S'k̂ = S0 (e_0 ⊙ k̂) + Σ_j s^k_j d_j and likewise S'q̂,
  then d = β (v - S'k̂), o = S'q̂ + d (k̂·q̂). The checkpoint is only read; (d, k̂, g) is
  appended at position w (k̂ once per key head).
* w == L-1 (flush): per tile, S' = S0 Diag(e_0) + Dᵀ U with D the tile's d records and
  U_j = e_j ⊙ k_j, a [BLOCK_V, L] x [L, head_k_dim] product: for GDN (scalar e_j, which
  scales D's columns, so that the k̂ records enter as stored) on tensor cores in TF32 parts
  (:func:`~.common.split_dot`, about fp32 accuracy); for KDA in exact fp32 FMAs. Then d, o as above
  from S', and S' + d k̂ᵀ stored over the checkpoint (rounded to its dtype). The TF32 product
  made the GDN step 1-9% faster on the H200 and KDA's 1.5-5.5% slower at batch 256-512
  (docs/kernel-notes.md, gated delta "replay v4"). The records come in as one tile per program (U)
  and per tile (D): a loop over the records with one dependent load per record and tile made
  flush rows ~4x slower than the others and the whole step wait for them (docs/kernel-notes.md,
  gated delta v2).

Γ_j = Σ_{j<i≤w} g_i is summed directly (a reverse cumsum of the records shifted by one), never
as a difference of prefix sums. The cursor advances in the same launch
(:func:`trtllm_replayssm.kernels.common.advance_cursor`).
"""
from __future__ import annotations

import triton
import triton.language as tl

from typing import Optional

from torch import Tensor

from .common import LaunchConfig, advance_cursor, resolve_kernel, store_checkpoint_tile
from .gated_delta_replay_cuda import (DeltaCudaConfig, delta_cuda_unsupported,
                                      launch_delta_replay_step_cuda)
from .gated_delta_common import (fold_records, gated_delta_launch_config, gated_delta_step_args,
                                 load_log_decay, load_qk, multiprocessor_count, record_decays)

__all__ = ["launch_gated_delta_replay_step", "replay_constexprs", "replay_step_kernel"]


@triton.jit
def _output_from_history(b_hq, b_hk, b_v, beta, kq, o_v, m_v, p_o):
    """d = β (v - S'k̂); o = S'q̂ + d (k̂·q̂) stored at ``p_o`` + o_v; returns d (fp32 [BLOCK_V])."""
    b_d = beta * (b_v - b_hk)
    tl.store(p_o + o_v, (b_hq + b_d * kq).to(p_o.dtype.element_ty), mask=m_v)
    return b_d


@triton.jit
def _gated_delta_replay_step_kernel(
    # checkpoint [slot, v_heads, head_v_dim, head_k_dim], head_k_dim contiguous; with HAS_SCALE
    # (fp8) its row scales [slot, v_heads, head_v_dim] fp32, head_v_dim contiguous
    ckpt_ptr, stride_c_slot, stride_c_head, stride_c_row,
    scale_ptr, stride_sc_slot, stride_sc_head,
    # d_records [slot, v_heads, L, head_v_dim]; k_records [slot, k_heads, L, head_k_dim]
    dr_ptr, stride_dr_slot, stride_dr_head, stride_dr_pos,
    kr_ptr, stride_kr_slot, stride_kr_head, stride_kr_pos,
    # g_records [slot, v_heads, L] (GDN, fp32) or [slot, v_heads, L, head_k_dim] (KDA, fp16 or fp32)
    gr_ptr, stride_gr_slot, stride_gr_head, stride_gr_pos,
    # cursor, arrivals [slot] int32
    cursor_ptr, arrivals_ptr,
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
    sr_seed,  # with SR: the seed of the flush's stochastic rounding
    L: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_V: tl.constexpr, SPAN_V: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
    PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr, HAS_SCALE: tl.constexpr, SR: tl.constexpr,
):
    i_s, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    i_b = i_b.to(tl.int64)
    i_hk = i_h // v_per_k
    w = tl.load(cursor_ptr + slot)
    o_k = tl.arange(0, BLOCK_K)
    m_k = o_k < head_k_dim

    b_q, b_k = load_qk(q_ptr + i_b * stride_q_batch + i_hk * stride_q_head,
                       k_ptr + i_b * stride_k_batch + i_hk * stride_k_head, o_k, m_k, scale, USE_QK_L2NORM)
    g = load_log_decay(g_ptr + i_b * stride_g_batch + i_h * stride_g_head, o_k, m_k, PER_CHANNEL)
    beta = tl.load(beta_ptr + i_b * stride_beta_batch + i_h * stride_beta_head).to(tl.float32)
    kq = tl.sum(b_k * b_q, axis=0)

    p_c = ckpt_ptr + slot * stride_c_slot + i_h * stride_c_head
    p_sc = scale_ptr + slot * stride_sc_slot + i_h * stride_sc_head
    p_dr = dr_ptr + slot * stride_dr_slot + i_h * stride_dr_head
    p_kr = kr_ptr + slot * stride_kr_slot + i_hk * stride_kr_head
    p_gr = gr_ptr + slot * stride_gr_slot + i_h * stride_gr_head
    p_v = v_ptr + i_b * stride_v_batch + i_h * stride_v_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_start = i_s * SPAN_V
    # Once per program: the records' decays to the current token e_j = exp(Γ_j) (KDA: per key
    # channel, held as the decayed keys U_j = e_j ⊙ k_j [BLOCK_L, BLOCK_K]; GDN: scalars
    # [BLOCK_L]; zero at j >= w) and the checkpoint's decay e0 = exp(Γ_{-1}).
    o_l = tl.arange(0, BLOCK_L)
    m_l = o_l < w
    b_kr = tl.load(p_kr + o_l[:, None] * stride_kr_pos + o_k[None, :],
                   mask=m_l[:, None] & m_k[None, :], other=0.0).to(tl.float32)
    b_e, e0 = record_decays(p_gr, stride_gr_pos, o_l, o_k, m_k, w, g, PER_CHANNEL)
    if PER_CHANNEL:
        b_u = b_e * b_kr
    # GDN: U_j = e_j k_j is never formed (the flush scales the d records instead, so that its
    # product takes k̂ as stored).

    if w == L - 1:
        # Flush: per tile, S' = S0 Diag(e0) + Dᵀ U (D: the tile's d records, [BLOCK_L,
        # BLOCK_V]); then d, o from S' and S' + d k̂ᵀ stored over the checkpoint. KDA: U held,
        # an exact-fp32 product. GDN: (D Diag(e))ᵀ K̂ in TF32 parts, the k̂ records loaded in
        # each tile as stored (16-bit values are exact in TF32 and not split).
        # Not software-pipelined: flush rows are 1/L of the rows, and the buffers would cost
        # every program shared memory.
        for c in tl.range(0, SPAN_V // BLOCK_V, num_stages=1):
            o_v = p_start + c * BLOCK_V + tl.arange(0, BLOCK_V)
            m_v = o_v < head_v_dim
            m_c = m_v[:, None] & m_k[None, :]
            b_s = tl.load(p_c + o_v[:, None] * stride_c_row + o_k[None, :], mask=m_c, other=0.0).to(tl.float32)
            if HAS_SCALE:
                b_s *= tl.load(p_sc + o_v, mask=m_v, other=1.0)[:, None]
            b_dt = tl.load(p_dr + o_l[None, :] * stride_dr_pos + o_v[:, None],
                           mask=m_v[:, None] & m_l[None, :], other=0.0).to(tl.float32)
            if PER_CHANNEL:
                b_s = fold_records(b_s, e0, b_dt, b_u, b_e, PER_CHANNEL, False)
            else:
                b_kt = tl.load(p_kr + o_l[:, None] * stride_kr_pos + o_k[None, :],
                               mask=m_l[:, None] & m_k[None, :], other=0.0).to(tl.float32)
                b_s = fold_records(b_s, e0, b_dt, b_kt, b_e, PER_CHANNEL,
                                   kr_ptr.dtype.element_ty.primitive_bitwidth > 16)
            b_v = tl.load(p_v + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_d = _output_from_history(tl.sum(b_s * b_q[None, :], axis=1), tl.sum(b_s * b_k[None, :], axis=1),
                                       b_v, beta, kq, o_v, m_v, p_o)
            b_s += b_d[:, None] * b_k[None, :]
            # Whole rows (BLOCK_K covers head_k_dim); SR: draws from the seed, the slot, the head
            # and the token's beta.
            store_checkpoint_tile(p_c + o_v[:, None] * stride_c_row + o_k[None, :], m_c, p_sc + o_v, m_v, b_s,
                                  tl.max(tl.abs(b_s), axis=1), sr_seed, slot, i_h, beta,
                                  o_v[:, None] * head_k_dim + o_k[None, :], HAS_SCALE, SR)
    else:
        # Non-flush: the records' scores once per program, then the tiles (state never formed).
        if PER_CHANNEL:
            s_q = tl.sum(b_u * b_q[None, :], axis=1)
            s_k = tl.sum(b_u * b_k[None, :], axis=1)
        else:
            s_q = b_e * tl.sum(b_kr * b_q[None, :], axis=1)
            s_k = b_e * tl.sum(b_kr * b_k[None, :], axis=1)
        b_q0 = e0 * b_q
        b_k0 = e0 * b_k
        for c in tl.range(0, SPAN_V // BLOCK_V, num_stages=NUM_STAGES):
            o_v = p_start + c * BLOCK_V + tl.arange(0, BLOCK_V)
            m_v = o_v < head_v_dim
            b_s0 = tl.load(p_c + o_v[:, None] * stride_c_row + o_k[None, :],
                           mask=m_v[:, None] & m_k[None, :], other=0.0).to(tl.float32)
            if HAS_SCALE:
                b_s0 *= tl.load(p_sc + o_v, mask=m_v, other=1.0)[:, None]
            b_dr = tl.load(p_dr + o_l[:, None] * stride_dr_pos + o_v[None, :],
                           mask=m_l[:, None] & m_v[None, :], other=0.0).to(tl.float32)
            b_hq = tl.sum(b_s0 * b_q0[None, :], axis=1) + tl.sum(s_q[:, None] * b_dr, axis=0)
            b_hk = tl.sum(b_s0 * b_k0[None, :], axis=1) + tl.sum(s_k[:, None] * b_dr, axis=0)
            b_v = tl.load(p_v + o_v, mask=m_v, other=0.0).to(tl.float32)
            b_d = _output_from_history(b_hq, b_hk, b_v, beta, kq, o_v, m_v, p_o)
            tl.store(p_dr + w * stride_dr_pos + o_v, b_d.to(dr_ptr.dtype.element_ty), mask=m_v)
        if i_s == 0:
            if PER_CHANNEL:
                tl.store(p_gr + w * stride_gr_pos + o_k, g, mask=m_k)
            else:
                tl.store(p_gr + w * stride_gr_pos, g)
            if i_h % v_per_k == 0:
                tl.store(p_kr + w * stride_kr_pos + o_k, b_k.to(kr_ptr.dtype.element_ty), mask=m_k)

    advance_cursor(cursor_ptr, arrivals_ptr, slot, w, L)


def replay_constexprs(L: int, head_k_dim: int, per_channel: bool, use_qk_l2norm: bool,
                      config: LaunchConfig) -> dict:
    """The replay kernel's constexprs (the launcher's and the TensorRT plugin's single source).

    The flush's tile product (tl.dot) needs every dimension >= 16: BLOCK_L and BLOCK_K are
    padded to it (masked), and ``config.block_head_dim`` must be >= 16.
    """
    if config.block_head_dim < 16:
        raise ValueError(f"gated delta replay: block_head_dim is {config.block_head_dim}; expected >= 16")
    return dict(L=L, BLOCK_L=max(16, triton.next_power_of_2(L)), BLOCK_V=config.block_head_dim,
                SPAN_V=config.block_head_dim * config.chunks,
                BLOCK_K=max(16, triton.next_power_of_2(head_k_dim)), NUM_STAGES=config.num_stages,
                PER_CHANNEL=per_channel, USE_QK_L2NORM=use_qk_l2norm)


def replay_step_kernel(checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor,
                       q: Tensor, k: Tensor, v: Tensor, g: Tensor, checkpoint_scale: Optional[Tensor] = None) -> str:
    """``"cuda"`` or ``"triton"``: the kernel the op runs for these tensors. CUDA where
    :func:`~.gated_delta_replay_cuda.delta_cuda_unsupported` finds nothing against it (sm_90, a
    bf16, fp32 or fp8 (head_k_dim 128, with ``checkpoint_scale``) checkpoint, bf16 activations
    and records, its sizes and alignment), Triton
    otherwise (every dtype, size and GPU). Measured on the H200, 2026-12-03: docs/kernel-notes.md
    "CUDA gated delta step" and "Session 23" (since GDN's one-launch form at batch 3-16, the CUDA
    step is ahead of the Triton kernel at every measured batch)."""
    if delta_cuda_unsupported(checkpoint, d_records, k_records, g_records, q, k, v, g, checkpoint_scale) is not None:
        return "triton"
    return "cuda"


def launch_gated_delta_replay_step(checkpoint: Tensor, d_records: Tensor, k_records: Tensor,
                                   g_records: Tensor, cursor: Tensor, arrivals: Tensor, q: Tensor,
                                   k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *,
                                   slot_ids: Tensor, scale: float, use_qk_l2norm: bool,
                                   out: Tensor, config=None, kernel: str = "auto",
                                   checkpoint_scale: Optional[Tensor] = None,
                                   rounding_seed: Optional[int] = None) -> Tensor:
    """Launch the replay step on the cache tensors; arguments already checked by the op
    (``checkpoint_scale``, ``rounding_seed``: as for
    :func:`~.mamba2_replay.launch_mamba2_replay_step`; a seed takes the Triton kernel).

    ``kernel``: ``"auto"`` (:func:`replay_step_kernel` chooses; a ``config`` of either kind
    chooses its kernel), ``"triton"`` or ``"cuda"`` (ValueError where the CUDA step does not
    apply). ``config``: a :class:`LaunchConfig` for the Triton kernel or a
    :class:`~.gated_delta_replay_cuda.DeltaCudaConfig` for the CUDA one (None: the launch tables)."""
    kernel = resolve_kernel("launch_gated_delta_replay_step", kernel, config, DeltaCudaConfig,
                            lambda: "triton" if rounding_seed is not None else
                            replay_step_kernel(checkpoint, d_records, k_records, g_records, q, k, v, g,
                                               checkpoint_scale))
    if kernel == "cuda" and rounding_seed is not None:
        raise ValueError("launch_gated_delta_replay_step: rounding_seed given; the CUDA step rounds to nearest only")
    if kernel == "cuda":
        return launch_delta_replay_step_cuda(checkpoint, d_records, k_records, g_records, cursor, arrivals, q, k, v, g,
                                             beta, slot_ids=slot_ids, scale=scale, use_qk_l2norm=use_qk_l2norm,
                                             out=out, config=config, checkpoint_scale=checkpoint_scale)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"launch_gated_delta_replay_step: config is {type(config).__name__}; the Triton kernel takes a LaunchConfig")
    batch, v_heads, head_v_dim = v.shape
    head_k_dim = q.shape[2]
    cfg = config or gated_delta_launch_config("replay_step", head_v_dim, head_k_dim, batch * v_heads,
                                              checkpoint.dtype, multiprocessors=multiprocessor_count(v.device))
    const = replay_constexprs(d_records.shape[2], head_k_dim, g.dim() == 3, use_qk_l2norm, cfg)
    grid = (triton.cdiv(head_v_dim, const["SPAN_V"]), v_heads, batch)
    rows = checkpoint if checkpoint_scale is None else checkpoint_scale  # no scale: a pointer never read
    _gated_delta_replay_step_kernel[grid](
        checkpoint, checkpoint.stride(0), checkpoint.stride(1), checkpoint.stride(2),
        rows, rows.stride(0), rows.stride(1),
        d_records, d_records.stride(0), d_records.stride(1), d_records.stride(2),
        k_records, k_records.stride(0), k_records.stride(1), k_records.stride(2),
        g_records, g_records.stride(0), g_records.stride(1), g_records.stride(2),
        cursor, arrivals,
        *gated_delta_step_args(q, k, v, g, beta, out, slot_ids, scale),
        rounding_seed or 0,
        **cfg.launch_options(), **const, HAS_SCALE=checkpoint_scale is not None, SR=rounding_seed is not None,
    )
    return out
