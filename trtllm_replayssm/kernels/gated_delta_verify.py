"""ReplaySSM gated delta-rule (GDN, KDA) speculative verify: the outputs of T window tokens per
row from checkpoint + committed records in one launch; no state is stored except at a flush.

Contract: :func:`trtllm_replayssm.reference.spec.gated_delta_replay_verify_ref` (a row with w
committed records and n tokens flushes when ``w + n > L - 1``). Notation per value head: α_s =
exp(g_s) (a scalar for GDN, a [head_k_dim] vector for KDA), q̂, k̂ the normalised window
queries and keys, S_c the committed state, c_s = Π_{i≤s} α_i.

* Window, once per program: the decayed keys of the earlier window tokens (a running product,
  no differences of cumulative sums), A[j, s] = (Π_{j<i≤s} α_i ⊙ k̂_j) · k̂_s for j < s and
  Q[j, s] = (...) · q̂_s for j ≤ s, and W = (I + diag(β) Aᵀ)^{-1} by forward substitution
  (the delta rule's triangular system, in closed form).
* Non-flush, the inner-product route (the state is never formed): with S_c u = S0 (e^G ⊙ u) +
  Σ_k d_k ((e^{Γ_k} ⊙ k_k) · u) over the history (scores per record once per program, the
  decays as running products from the newest record), per [BLOCK_V, head_k_dim] tile:
  P^k_s = S_c (c_s ⊙ k̂_s), P^q_s = S_c (c_s ⊙ q̂_s), R_s = β_s (v_s - P^k_s), d = W R,
  o_s = P^q_s + Σ_{j≤s} Q[j, s] d_j. The window's (d, k̂, g) records go to w .. w+n-1.
* Flush: S_c is formed tile by tile in exact fp32 rank-1 updates, stored over the checkpoint
  (rounded) and used unrounded as the base (no history term); the records go to 0 .. n-1 and
  the cursor to 0.

Grid and launch configurations as the standard replay kernel: (cdiv(head_v_dim, SPAN_V),
v_heads, batch). A flush row's window overwrites history other programs of the row read in the
same launch: d records are per (value head, head_v_dim row), so each program rewrites its own
after a barrier; g (per value head) and k̂ (per key head) records are written by the row's last
program on its arrival counter, which also resets the cursor to 0. ``pending`` := n.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from torch import Tensor

from .common import LaunchConfig, window_tokens
from .gated_delta_common import decay_columns, gated_delta_launch_config

__all__ = ["launch_gated_delta_replay_verify", "gated_delta_verify_launch_config"]


def gated_delta_verify_launch_config(head_v_dim: int, head_k_dim: int, heads: int,
                                     state_dtype: torch.dtype) -> LaunchConfig:
    """The standard replay step's configuration (``gated_delta_launch_config``, ``heads`` =
    batch * v_heads): 16-row tiles, one warp. Timed on an H200 (Qwen3.5-122B, T = 4, batch 256,
    fp32 checkpoint, ``benchmarks/spec_verify.py --sweep``; benchmarks/NOTES.md): one warp took
    1018 us where four warps (chosen earlier from ptxas register counts alone: one warp needs
    up to 255 registers per thread) took 2451 us, because the per-token reductions over
    head_k_dim then cross warps through shared memory, as for Mamba-2."""
    return gated_delta_launch_config("replay_step", head_v_dim, head_k_dim, heads, state_dtype)


@triton.jit
def _row(tile, sel):
    """Row ``sel`` (a one-hot mask over the first dimension) of a 2-D tile."""
    return tl.sum(tl.where(sel[:, None], tile, 0.0), axis=0)


@triton.jit
def _col(tile, sel):
    """Column ``sel`` (a one-hot mask over the second dimension) of a 2-D tile."""
    return tl.sum(tl.where(sel[None, :], tile, 0.0), axis=1)


@triton.jit
def _gate_row(b_gate, sel, PER_CHANNEL: tl.constexpr):
    """A window token's gate: a [BLOCK_K] row (KDA) or a scalar (GDN)."""
    if PER_CHANNEL:
        a = _row(b_gate, sel)
    else:
        a = tl.sum(tl.where(sel, b_gate, 0.0), axis=0)
    return a


@triton.jit
def _window_outputs(b_base, U_k, U_q, b_dh, H_k, H_q, W, Q, b_v, b_beta, o_t,
                    WITH_HISTORY: tl.constexpr, BLOCK_T: tl.constexpr):
    """d and o, [BLOCK_T, BLOCK_V] tiles, of the window tokens from the base tile [BLOCK_V,
    head_k_dim] (the checkpoint, or the folded state), the history d tile [BLOCK_L, BLOCK_V]
    and its scores H_k, H_q [BLOCK_L, BLOCK_T] (if WITH_HISTORY)."""
    P_k = tl.zeros_like(b_v)
    P_q = tl.zeros_like(b_v)
    # Token by token (a [BLOCK_L, BLOCK_T, BLOCK_V] product would cost registers).
    for s in tl.static_range(BLOCK_T):
        sel = o_t == s
        p_k = tl.sum(b_base * _row(U_k, sel)[None, :], axis=1)
        p_q = tl.sum(b_base * _row(U_q, sel)[None, :], axis=1)
        if WITH_HISTORY:
            p_k += tl.sum(_col(H_k, sel)[:, None] * b_dh, axis=0)
            p_q += tl.sum(_col(H_q, sel)[:, None] * b_dh, axis=0)
        P_k += tl.where(sel[:, None], p_k[None, :], 0.0)
        P_q += tl.where(sel[:, None], p_q[None, :], 0.0)
    b_d = tl.sum(W[:, :, None] * (b_beta[:, None] * (b_v - P_k))[None, :, :], axis=1)
    b_o = P_q + tl.sum(Q[:, :, None] * b_d[:, None, :], axis=0)
    return b_d, b_o


@triton.jit
def _store_window_k_g(p_kr, stride_kr_head, stride_kr_pos, p_gr, stride_gr_head, stride_gr_pos,
                      p_k, stride_k_tok, stride_k_head, p_g, stride_g_tok, stride_g_head,
                      n, k_heads, v_heads, head_k_dim,
                      BLOCK_T: tl.constexpr, BLOCK_KHEADS: tl.constexpr, BLOCK_VHEADS: tl.constexpr,
                      BLOCK_K: tl.constexpr, PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr):
    """The window's k̂ records of every key head and g records of every value head at positions
    0 .. n-1 of one row (the flush row's last program)."""
    o_hk = tl.arange(0, BLOCK_KHEADS)
    o_hv = tl.arange(0, BLOCK_VHEADS)
    o_k = tl.arange(0, BLOCK_K)
    m_kk = (o_hk < k_heads)[:, None] & (o_k < head_k_dim)[None, :]
    m_hv = o_hv < v_heads
    m_vk = m_hv[:, None] & (o_k < head_k_dim)[None, :]
    for s in tl.static_range(BLOCK_T):
        if s < n:
            b_k = tl.load(p_k + s * stride_k_tok + o_hk[:, None] * stride_k_head + o_k[None, :],
                          mask=m_kk, other=0.0).to(tl.float32)
            if USE_QK_L2NORM:
                b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=1) + 1e-6)[:, None]
            tl.store(p_kr + o_hk[:, None] * stride_kr_head + s * stride_kr_pos + o_k[None, :],
                     b_k.to(p_kr.dtype.element_ty), mask=m_kk)
            if PER_CHANNEL:
                b_g = tl.load(p_g + s * stride_g_tok + o_hv[:, None] * stride_g_head + o_k[None, :],
                              mask=m_vk, other=0.0)
                tl.store(p_gr + o_hv[:, None] * stride_gr_head + s * stride_gr_pos + o_k[None, :],
                         b_g.to(p_gr.dtype.element_ty), mask=m_vk)
            else:
                b_g = tl.load(p_g + s * stride_g_tok + o_hv * stride_g_head, mask=m_hv, other=0.0)
                tl.store(p_gr + o_hv * stride_gr_head + s * stride_gr_pos, b_g.to(p_gr.dtype.element_ty), mask=m_hv)


@triton.jit
def _gated_delta_replay_verify_kernel(
    # checkpoint [slot, v_heads, head_v_dim, head_k_dim], head_k_dim contiguous
    ckpt_ptr, stride_c_slot, stride_c_head, stride_c_row,
    # d_records [slot, v_heads, L, head_v_dim]; k_records [slot, k_heads, L, head_k_dim]
    dr_ptr, stride_dr_slot, stride_dr_head, stride_dr_pos,
    kr_ptr, stride_kr_slot, stride_kr_head, stride_kr_pos,
    # g_records fp32 [slot, v_heads, L] (GDN) or [slot, v_heads, L, head_k_dim] (KDA)
    gr_ptr, stride_gr_slot, stride_gr_head, stride_gr_pos,
    # cursor, arrivals, pending [slot] int32
    cursor_ptr, arrivals_ptr, pending_ptr,
    # q, k [batch, T, k_heads, head_k_dim]; v, out [batch, T, v_heads, head_v_dim]
    q_ptr, stride_q_batch, stride_q_tok, stride_q_head,
    k_ptr, stride_k_batch, stride_k_tok, stride_k_head,
    v_ptr, stride_v_batch, stride_v_tok, stride_v_head,
    out_ptr, stride_o_batch, stride_o_tok, stride_o_head,
    # g [batch, T, v_heads] (GDN) or [batch, T, v_heads, head_k_dim] (KDA); beta [batch, T, v_heads]
    g_ptr, stride_g_batch, stride_g_tok, stride_g_head,
    beta_ptr, stride_beta_batch, stride_beta_tok, stride_beta_head,
    # slot_ids, num_tokens [batch] int32
    slot_ids_ptr, num_tokens_ptr, scale,
    T, k_heads, v_heads, head_v_dim, head_k_dim, v_per_k,
    L: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_KHEADS: tl.constexpr, BLOCK_VHEADS: tl.constexpr,
    BLOCK_V: tl.constexpr, SPAN_V: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
    HAS_NUM_TOKENS: tl.constexpr, PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr,
):
    i_s, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    n = window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS)
    i_b = i_b.to(tl.int64)
    i_hk = i_h // v_per_k
    w = tl.load(cursor_ptr + slot)
    o_t = tl.arange(0, BLOCK_T)
    o_k = tl.arange(0, BLOCK_K)
    o_l = tl.arange(0, BLOCK_L)
    m_t = o_t < n
    m_k = o_k < head_k_dim
    m_tk = m_t[:, None] & m_k[None, :]

    # Window inputs; tokens past n read as zeros (α = 1, β = 0): finite, and never stored.
    p_k = k_ptr + i_b * stride_k_batch
    p_g = g_ptr + i_b * stride_g_batch
    b_q = tl.load(q_ptr + i_b * stride_q_batch + i_hk * stride_q_head + o_t[:, None] * stride_q_tok + o_k[None, :],
                  mask=m_tk, other=0.0).to(tl.float32)
    b_k = tl.load(p_k + i_hk * stride_k_head + o_t[:, None] * stride_k_tok + o_k[None, :],
                  mask=m_tk, other=0.0).to(tl.float32)
    if USE_QK_L2NORM:
        b_q = b_q * tl.rsqrt(tl.sum(b_q * b_q, axis=1) + 1e-6)[:, None]
        b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=1) + 1e-6)[:, None]
    b_q = b_q * scale
    if PER_CHANNEL:
        b_g = tl.load(p_g + i_h * stride_g_head + o_t[:, None] * stride_g_tok + o_k[None, :],
                      mask=m_tk, other=0.0).to(tl.float32)
        cdec = tl.full([BLOCK_K], 1.0, tl.float32)
    else:
        b_g = tl.load(p_g + i_h * stride_g_head + o_t * stride_g_tok, mask=m_t, other=0.0).to(tl.float32)
        cdec = tl.full([], 1.0, tl.float32)
    b_alpha = tl.exp(b_g)
    b_beta = tl.load(beta_ptr + i_b * stride_beta_batch + i_h * stride_beta_head + o_t * stride_beta_tok,
                     mask=m_t, other=0.0).to(tl.float32)

    # One pass over the window: kdec holds (Π_{j<i≤s} α_i) ⊙ k̂_j in row j ≤ s; U_k, U_q the
    # keys and queries decayed by c_s; A, Q the window scores.
    kdec = tl.zeros([BLOCK_T, BLOCK_K], dtype=tl.float32)
    U_k = tl.zeros([BLOCK_T, BLOCK_K], dtype=tl.float32)
    U_q = tl.zeros([BLOCK_T, BLOCK_K], dtype=tl.float32)
    A = tl.zeros([BLOCK_T, BLOCK_T], dtype=tl.float32)
    Q = tl.zeros([BLOCK_T, BLOCK_T], dtype=tl.float32)
    for s in tl.static_range(BLOCK_T):
        sel = o_t == s
        a_s = _gate_row(b_alpha, sel, PER_CHANNEL)
        k_s = _row(b_k, sel)
        q_s = _row(b_q, sel)
        kdec = tl.where(sel[:, None], k_s[None, :], decay_columns(kdec, a_s, PER_CHANNEL))
        A += tl.where(sel[None, :], tl.sum(kdec * k_s[None, :], axis=1)[:, None], 0.0)
        Q += tl.where(sel[None, :], tl.sum(kdec * q_s[None, :], axis=1)[:, None], 0.0)
        cdec = cdec * a_s
        U_k += tl.where(sel[:, None], (cdec * k_s)[None, :], 0.0)
        U_q += tl.where(sel[:, None], (cdec * q_s)[None, :], 0.0)
    A = tl.where(o_t[:, None] < o_t[None, :], A, 0.0)
    Q = tl.where((o_t[:, None] <= o_t[None, :]) & m_t[None, :], Q, 0.0)
    # d = W R with d_s = R_s - β_s Σ_{j<s} A[j, s] d_j: W by forward substitution.
    W = tl.zeros([BLOCK_T, BLOCK_T], dtype=tl.float32)
    for s in tl.static_range(BLOCK_T):
        sel = o_t == s
        a_col = tl.sum(tl.where(sel[None, :], A, 0.0), axis=1)
        beta_s = tl.sum(tl.where(sel, b_beta, 0.0), axis=0)
        W = tl.where(sel[:, None], (tl.where(sel, 1.0, 0.0) - beta_s * tl.sum(a_col[:, None] * W, axis=0))[None, :], W)

    p_c = ckpt_ptr + slot * stride_c_slot + i_h * stride_c_head
    p_dr = dr_ptr + slot * stride_dr_slot + i_h * stride_dr_head
    p_kr = kr_ptr + slot * stride_kr_slot + i_hk * stride_kr_head
    p_gr = gr_ptr + slot * stride_gr_slot + i_h * stride_gr_head
    p_v = v_ptr + i_b * stride_v_batch + i_h * stride_v_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_start = i_s * SPAN_V
    if w + n > L - 1:
        # Flush: S_c tile by tile (records newest first, decays as running products), stored;
        # the window's outputs from it. Not software-pipelined: the loop holds a barrier, and
        # flush rows are the minority.
        for c in tl.range(0, SPAN_V // BLOCK_V):
            o_v = p_start + c * BLOCK_V + tl.arange(0, BLOCK_V)
            m_v = o_v < head_v_dim
            m_c = m_v[:, None] & m_k[None, :]
            m_tv = m_t[:, None] & m_v[None, :]
            b_h = tl.zeros([BLOCK_V, BLOCK_K], dtype=tl.float32)
            if PER_CHANNEL:
                hdec = tl.full([BLOCK_K], 1.0, tl.float32)
            else:
                hdec = tl.full([], 1.0, tl.float32)
            for i in tl.range(0, L - 1, loop_unroll_factor=1):
                j = w - 1 - i
                if j >= 0:
                    b_dj = tl.load(p_dr + j * stride_dr_pos + o_v, mask=m_v, other=0.0).to(tl.float32)
                    b_kj = tl.load(p_kr + j * stride_kr_pos + o_k, mask=m_k, other=0.0).to(tl.float32)
                    b_h += b_dj[:, None] * (hdec * b_kj)[None, :]
                    if PER_CHANNEL:
                        hdec = hdec * tl.exp(tl.load(p_gr + j * stride_gr_pos + o_k, mask=m_k, other=0.0))
                    else:
                        hdec = hdec * tl.exp(tl.load(p_gr + j * stride_gr_pos))
            b_s = decay_columns(tl.load(p_c + o_v[:, None] * stride_c_row + o_k[None, :], mask=m_c,
                                        other=0.0).to(tl.float32), hdec, PER_CHANNEL) + b_h
            tl.store(p_c + o_v[:, None] * stride_c_row + o_k[None, :], b_s.to(ckpt_ptr.dtype.element_ty), mask=m_c)
            b_v = tl.load(p_v + o_t[:, None] * stride_v_tok + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
            b_d, b_o = _window_outputs(b_s, U_k, U_q, b_v, A, A, W, Q, b_v, b_beta, o_t, False, BLOCK_T)
            tl.store(p_o + o_t[:, None] * stride_o_tok + o_v[None, :], b_o.to(out_ptr.dtype.element_ty), mask=m_tv)
            # The window's d records overwrite history rows this program has just read.
            tl.debug_barrier()
            tl.store(p_dr + o_t[:, None] * stride_dr_pos + o_v[None, :], b_d.to(dr_ptr.dtype.element_ty), mask=m_tv)
        # k̂ and g records are read by other programs of the row: the last one writes them.
        tl.debug_barrier()
        arrived = tl.atomic_add(arrivals_ptr + slot, 1, sem="acq_rel", scope="gpu")
        if arrived == tl.num_programs(0) * tl.num_programs(1) - 1:
            _store_window_k_g(kr_ptr + slot * stride_kr_slot, stride_kr_head, stride_kr_pos,
                              gr_ptr + slot * stride_gr_slot, stride_gr_head, stride_gr_pos,
                              p_k, stride_k_tok, stride_k_head, p_g, stride_g_tok, stride_g_head,
                              n, k_heads, v_heads, head_k_dim, BLOCK_T, BLOCK_KHEADS, BLOCK_VHEADS,
                              BLOCK_K, PER_CHANNEL, USE_QK_L2NORM)
            tl.store(cursor_ptr + slot, 0)
            tl.store(arrivals_ptr + slot, 0)
    else:
        # Non-flush: the window's g and k̂ records (past the history: read by no program of this
        # launch), then the history scores once (records newest first, decays as running
        # products; hdec ends as the checkpoint's decay e^G), then the tiles.
        if i_s == 0:
            if PER_CHANNEL:
                tl.store(p_gr + (w + o_t)[:, None] * stride_gr_pos + o_k[None, :], b_g, mask=m_tk)
            else:
                tl.store(p_gr + (w + o_t) * stride_gr_pos, b_g, mask=m_t)
            if i_h % v_per_k == 0:
                tl.store(p_kr + (w + o_t)[:, None] * stride_kr_pos + o_k[None, :],
                         b_k.to(kr_ptr.dtype.element_ty), mask=m_tk)
        H_k = tl.zeros([BLOCK_L, BLOCK_T], dtype=tl.float32)
        H_q = tl.zeros([BLOCK_L, BLOCK_T], dtype=tl.float32)
        if PER_CHANNEL:
            hdec = tl.full([BLOCK_K], 1.0, tl.float32)
        else:
            hdec = tl.full([], 1.0, tl.float32)
        for i in tl.range(0, L - 1, loop_unroll_factor=1):
            j = w - 1 - i
            if j >= 0:
                e_j = hdec * tl.load(p_kr + j * stride_kr_pos + o_k, mask=m_k, other=0.0).to(tl.float32)
                H_k += tl.where(o_l[:, None] == j, tl.sum(U_k * e_j[None, :], axis=1)[None, :], 0.0)
                H_q += tl.where(o_l[:, None] == j, tl.sum(U_q * e_j[None, :], axis=1)[None, :], 0.0)
                if PER_CHANNEL:
                    hdec = hdec * tl.exp(tl.load(p_gr + j * stride_gr_pos + o_k, mask=m_k, other=0.0))
                else:
                    hdec = hdec * tl.exp(tl.load(p_gr + j * stride_gr_pos))
        U0_k = decay_columns(U_k, hdec, PER_CHANNEL)
        U0_q = decay_columns(U_q, hdec, PER_CHANNEL)
        m_l = o_l < w
        for c in tl.range(0, SPAN_V // BLOCK_V, num_stages=NUM_STAGES):
            o_v = p_start + c * BLOCK_V + tl.arange(0, BLOCK_V)
            m_v = o_v < head_v_dim
            m_tv = m_t[:, None] & m_v[None, :]
            b_s0 = tl.load(p_c + o_v[:, None] * stride_c_row + o_k[None, :],
                           mask=m_v[:, None] & m_k[None, :], other=0.0).to(tl.float32)
            b_dh = tl.load(p_dr + o_l[:, None] * stride_dr_pos + o_v[None, :],
                           mask=m_l[:, None] & m_v[None, :], other=0.0).to(tl.float32)
            b_v = tl.load(p_v + o_t[:, None] * stride_v_tok + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
            b_d, b_o = _window_outputs(b_s0, U0_k, U0_q, b_dh, H_k, H_q, W, Q, b_v, b_beta, o_t, True, BLOCK_T)
            tl.store(p_o + o_t[:, None] * stride_o_tok + o_v[None, :], b_o.to(out_ptr.dtype.element_ty), mask=m_tv)
            tl.store(p_dr + (w + o_t)[:, None] * stride_dr_pos + o_v[None, :], b_d.to(dr_ptr.dtype.element_ty), mask=m_tv)
    if i_s == 0:
        if i_h == 0:
            tl.store(pending_ptr + slot, n)


def launch_gated_delta_replay_verify(checkpoint: Tensor, d_records: Tensor, k_records: Tensor,
                                     g_records: Tensor, cursor: Tensor, arrivals: Tensor,
                                     pending: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor,
                                     beta: Tensor, *, slot_ids: Tensor,
                                     num_tokens: Optional[Tensor] = None, scale: float,
                                     use_qk_l2norm: bool, out: Tensor,
                                     config: Optional[LaunchConfig] = None) -> Tensor:
    """Launch the verify step on the cache tensors; arguments already checked by the op.
    g's rank selects the family: [batch, T, v_heads] GDN, [batch, T, v_heads, head_k_dim] KDA."""
    batch, T, v_heads, head_v_dim = v.shape
    k_heads, head_k_dim = q.shape[2], q.shape[3]
    L = d_records.shape[2]
    cfg = config or gated_delta_verify_launch_config(head_v_dim, head_k_dim, batch * v_heads,
                                                     checkpoint.dtype)
    span = cfg.block_head_dim * cfg.chunks
    grid = (triton.cdiv(head_v_dim, span), v_heads, batch)
    _gated_delta_replay_verify_kernel[grid](
        checkpoint, checkpoint.stride(0), checkpoint.stride(1), checkpoint.stride(2),
        d_records, d_records.stride(0), d_records.stride(1), d_records.stride(2),
        k_records, k_records.stride(0), k_records.stride(1), k_records.stride(2),
        g_records, g_records.stride(0), g_records.stride(1), g_records.stride(2),
        cursor, arrivals, pending,
        q, q.stride(0), q.stride(1), q.stride(2),
        k, k.stride(0), k.stride(1), k.stride(2),
        v, v.stride(0), v.stride(1), v.stride(2),
        out, out.stride(0), out.stride(1), out.stride(2),
        g, g.stride(0), g.stride(1), g.stride(2),
        beta, beta.stride(0), beta.stride(1), beta.stride(2),
        slot_ids, num_tokens if num_tokens is not None else slot_ids, scale,
        T, k_heads, v_heads, head_v_dim, head_k_dim, v_heads // k_heads,
        L=L, BLOCK_L=max(2, triton.next_power_of_2(L)), BLOCK_T=max(2, triton.next_power_of_2(T)),
        BLOCK_KHEADS=triton.next_power_of_2(k_heads), BLOCK_VHEADS=triton.next_power_of_2(v_heads),
        BLOCK_V=cfg.block_head_dim, SPAN_V=span, BLOCK_K=triton.next_power_of_2(head_k_dim),
        NUM_STAGES=cfg.num_stages, HAS_NUM_TOKENS=num_tokens is not None,
        PER_CHANNEL=g.dim() == 4, USE_QK_L2NORM=use_qk_l2norm, **cfg.launch_options(),
    )
    return out
