"""ReplaySSM Mamba-2 speculative verify: the outputs of T window tokens per row from checkpoint +
committed records, in one launch; no state is stored except at a flush. On sm_90 with bf16 or fp32
checkpoints, bf16 activations and T <= 8 the launcher runs the CUDA C++ verify instead
(:mod:`.mamba2_verify_cuda`, same contract; :func:`replay_verify_kernel`).

Contract (the float64 reference is :func:`trtllm_replayssm.reference.spec.mamba2_replay_verify_ref`):
a row with w committed records and n window tokens flushes when ``w + n > L - 1``.

* Non-flush: y_s = exp(A (Λ + c_s)) (S0 C_s) + Σ_{k<w} dt_k exp(A (λ_k + c_s)) (B_k · C_s) x_k
  + Σ_{j≤s} dt_j exp(A c_{j,s}) (B_j · C_s) x_j, with Λ the history's dt sum, λ_k = Σ_{k<i<w} dt_i,
  c_s = Σ_{i≤s} dt_i and c_{j,s} = Σ_{j<i≤s} dt_i over the window (all sums exact: no prefix-sum
  subtraction enters an exponent). The state is never formed; the window's records are appended
  at w .. w+n-1 (uncommitted); checkpoint and cursor are untouched.
* Flush: S1 = exp(A Λ) S0 + Σ_{k<w} dt_k exp(A λ_k) x_k B_kᵀ is formed tile by tile in exact
  fp32, stored over the checkpoint (rounded to its dtype) and used unrounded as the base of the
  window: y_s = exp(A c_s) (S1 C_s) + the window sum. The window's records go to 0 .. n-1 and the
  cursor to 0.

Grid (cdiv(head_dim, SPAN_HEAD_DIM), nheads, batch) as in the standard replay kernel (same launch
configurations): a program owns SPAN_HEAD_DIM rows of one head of one row, computes the per-head
coefficients once ([BLOCK_L, BLOCK_T] history and [BLOCK_T, BLOCK_T] window weights times B·C),
then streams its checkpoint rows in tiles of BLOCK_HEAD_DIM rows (d_state split in chunks:
``D_STATE_CHUNK``).

Races a flush row must avoid, since its window overwrites history that other programs of the
row read in the same launch: x records are per (head, head_dim row), so each program rewrites
only its own, after a barrier; dt records (per head) and B records (per group) are written by
the last program of the row to arrive on its arrival counter (acq_rel atomic after a CTA
barrier), which also resets the cursor to 0 and the counter. Non-flush rows write past the
history only, so they need no counter. ``pending`` := n is written by one program of the row.
No host sync: one captured CUDA graph serves every step.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch
import triton
import triton.language as tl

from torch import Tensor

from .common import (LaunchConfig, last_arrival, resolve_kernel, mamba2_launch_config, mamba2_optional_inputs,
                     mamba2_step_constexprs, process_dt, store_checkpoint_tile, verify_flushes, window_tokens)
from .mamba2_replay_cuda import CudaStepConfig
from .mamba2_verify_cuda import cuda_verify_unsupported, launch_mamba2_replay_verify_cuda

__all__ = ["launch_mamba2_replay_verify", "mamba2_verify_launch_config", "replay_verify_kernel"]


# Checkpoint tiles are walked as [rows, d_state / D_STATE_CHUNK, D_STATE_CHUNK]: Triton spreads a
# warp's lanes over the innermost dimension first (four fp32 per lane), so with a 2-D [rows,
# d_state] tile all 32 lanes share every row and each per-token reduction over d_state costs
# five shuffle rounds for each row of the tile. With 32-wide chunks 8 lanes share a chunk and
# Triton 3.6 (the H200's) gives the other 4 lane groups the rows (threadsPerWarp [4, 1, 8],
# order [2, 0, 1]); Triton 3.8 gives them the chunks, 160 shuffles a token for a 32-row tile
# (docs/kernel-notes.md, "Verify in sessions 31 and 32"). Same loads, same 16-byte vectors.
# H200, T = 4, batch 256 (verify v1.2): 781 -> 690 us against the 2-D tile; chunks of 16 and 8
# measured 726 and 774 us.
D_STATE_CHUNK = 32


def mamba2_verify_launch_config(head_dim: int, d_state: int, batch: int,
                                state_dtype: torch.dtype) -> LaunchConfig:
    """The standard replay step's tiling (``mamba2_launch_config``) in one-warp programs, and for
    programs that pipeline several tiles (batch >= 32) a cap of 128 registers per thread.

    Timed on an H200 (Nemotron-3-Super, fp32 checkpoint, ``spec_verify.py --sweep``;
    docs/kernel-notes.md): one warp and eight-row tiles took 721 us at T = 4, batch 256, where
    four warps (chosen earlier from ptxas register counts alone) took 1849 us: the per-token
    reductions over d_state stay inside one warp. The kernel is latency-bound (ncu: 17%
    occupancy, 40% issue-slot use); ptxas allocates it 164-168 registers, 12 resident warps per
    multiprocessor, and fits T <= 4 into 128 without spills in 8-row tiles (batch >= 128; T = 8:
    112 bytes), which gives 16: 690 -> 622 us at T = 4 and 1535 -> 1406 us at T = 8, 215 ->
    198 us at T = 4, batch 64, where the 16-row tiles spill 200 bytes (Triton 3.6, the H200's;
    Triton 3.8 shows none: docs/kernel-notes.md, session 32).
    Single-tile programs (batch < 32) hold a 32-row tile and are left uncapped. With a bf16
    checkpoint the step's rule takes two warps at batch < 8 and 32-127; one warp there (session
    31, Mamba-2 verify, T = 2 / 4 / 8): batch 64 188.18 -> 101.94, 226.30 -> 151.24, 460.98 ->
    335.16 us; batch 4 21.35 -> 14.35 us at T = 2."""
    cfg = replace(mamba2_launch_config("replay_step", head_dim, d_state, batch, state_dtype), num_warps=1)
    if cfg.chunks > 1:
        cfg = replace(cfg, max_registers=128)
    return cfg


@triton.jit
def _as_rows(t, ROWS: tl.constexpr, COLS: tl.constexpr):
    """A [ROWS, chunks, chunk] checkpoint tile as [ROWS, COLS] (COLS = chunks x chunk). The shape
    is written out here, not held in a variable: Triton 3.6 (the H200's) turns a list assigned
    in a kernel into a tuple of tensors, which ``tl.reshape`` refuses ("Shape element 0 must have
    type constexpr[int]")."""
    return tl.reshape(t, [ROWS, COLS])


@triton.jit
def _verify_outputs(b_base, ckpt_decay, b_xh, coef_h, b_xw, coef_w, o_t, o_p, m_p, o_n, m_n, n,
                    i_h, p_C, stride_C_tok, p_z, stride_z_tok, p_o, stride_o_tok,
                    D_ptr, stride_D_head, WITH_HISTORY: tl.constexpr, BLOCK_T: tl.constexpr,
                    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr):
    """Rows o_p of every window token's output, a [BLOCK_T, BLOCK_HEAD_DIM] tile, from the base
    tile [BLOCK_HEAD_DIM, chunks, D_STATE_CHUNK] (d_state index o_n, mask m_n: [chunks,
    D_STATE_CHUNK]):
    y[s] = ckpt_decay[s] (base C_s) + Σ_k coef_h[k, s] xh_k (if WITH_HISTORY)
    + Σ_j coef_w[j, s] xw_j; then, per token as in ``common.skip_gate_store``, y += D x and
    y *= silu(z); tokens s < n are stored."""
    y = tl.zeros_like(b_xw)
    # Token by token (a [BLOCK_L, BLOCK_T, BLOCK_HEAD_DIM] product would cost registers).
    for s in tl.static_range(BLOCK_T):
        sel = o_t == s
        b_C = tl.load(p_C + s * stride_C_tok + o_n, mask=m_n & (s < n), other=0.0).to(tl.float32)
        y_s = tl.sum(tl.where(sel, ckpt_decay, 0.0), axis=0) * tl.sum(tl.sum(b_base * b_C[None, :, :], axis=2), axis=1)
        if WITH_HISTORY:
            y_s += tl.sum(tl.sum(tl.where(sel[None, :], coef_h, 0.0), axis=1)[:, None] * b_xh, axis=0)
        y += tl.where(sel[:, None], y_s[None, :], 0.0)
    y += tl.sum(coef_w[:, :, None] * b_xw[:, None, :], axis=0)
    if HAS_D:
        if D_PER_DIM:
            d = tl.load(D_ptr + i_h * stride_D_head + o_p, mask=m_p, other=0.0).to(tl.float32)
            y += d[None, :] * b_xw
        else:
            y += tl.load(D_ptr + i_h * stride_D_head).to(tl.float32) * b_xw
    m_tp = (o_t < n)[:, None] & m_p[None, :]
    if HAS_Z:
        z = tl.load(p_z + o_t[:, None] * stride_z_tok + o_p[None, :], mask=m_tp, other=0.0).to(tl.float32)
        y *= z * tl.sigmoid(z)
    tl.store(p_o + o_t[:, None] * stride_o_tok + o_p[None, :], y.to(p_o.dtype.element_ty), mask=m_tp)


@triton.jit
def _store_window_dt_B(p_dtr, stride_dtr_head, p_Br, stride_Br_group, stride_Br_pos,
                       p_dt, stride_dt_tok, stride_dt_head, dt_bias_ptr,
                       p_B, stride_B_tok, stride_B_group, n, nheads, ngroups, d_state,
                       BLOCK_T: tl.constexpr, BLOCK_NHEADS: tl.constexpr,
                       BLOCK_NGROUPS: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
                       HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr):
    """The window's dt records of every head and B records of every group at positions 0 .. n-1
    of one row (the flush row's last program)."""
    o_h = tl.arange(0, BLOCK_NHEADS)
    m_h = o_h < nheads
    i_hs = tl.minimum(o_h, nheads - 1)  # in-bounds addresses for the masked lanes
    o_g = tl.arange(0, BLOCK_NGROUPS)
    o_n = tl.arange(0, BLOCK_D_STATE)
    m_gn = (o_g < ngroups)[:, None] & (o_n < d_state)[None, :]
    for s in tl.static_range(BLOCK_T):
        if s < n:
            dt = process_dt(p_dt + s * stride_dt_tok + i_hs * stride_dt_head, dt_bias_ptr, i_hs,
                            HAS_DT_BIAS, DT_SOFTPLUS)
            tl.store(p_dtr + o_h * stride_dtr_head + s, dt, mask=m_h)
            b_B = tl.load(p_B + s * stride_B_tok + o_g[:, None] * stride_B_group + o_n[None, :],
                          mask=m_gn, other=0.0)
            tl.store(p_Br + o_g[:, None] * stride_Br_group + s * stride_Br_pos + o_n[None, :],
                     b_B.to(p_Br.dtype.element_ty), mask=m_gn)


@triton.jit
def _mamba2_replay_verify_kernel(
    # checkpoint [slot, nheads, head_dim, d_state], d_state contiguous; with HAS_SCALE (fp8) its
    # row scales [slot, nheads, head_dim] fp32, head_dim contiguous
    ckpt_ptr, stride_c_slot, stride_c_head, stride_c_dim,
    scale_ptr, stride_sc_slot, stride_sc_head,
    # x_records [slot, nheads, L, head_dim], head_dim contiguous
    xr_ptr, stride_xr_slot, stride_xr_head, stride_xr_pos,
    # dt_records [slot, nheads, L] fp32, L contiguous
    dtr_ptr, stride_dtr_slot, stride_dtr_head,
    # B_records [slot, ngroups, L, d_state], d_state contiguous
    Br_ptr, stride_Br_slot, stride_Br_group, stride_Br_pos,
    # cursor, arrivals, pending [slot] int32
    cursor_ptr, arrivals_ptr, pending_ptr,
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
    T, nheads, head_dim, d_state, ngroups, heads_per_group,
    sr_seed,  # with SR: the seed of the flush's stochastic rounding
    L: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_NHEADS: tl.constexpr,
    BLOCK_NGROUPS: tl.constexpr,
    BLOCK_HEAD_DIM: tl.constexpr, SPAN_HEAD_DIM: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
    D_STATE_CHUNK: tl.constexpr,
    NUM_STAGES: tl.constexpr, HAS_NUM_TOKENS: tl.constexpr,
    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_SCALE: tl.constexpr, SR: tl.constexpr,
):
    i_s, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    n = window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS)
    i_b = i_b.to(tl.int64)
    i_g = i_h // heads_per_group
    w = tl.load(cursor_ptr + slot)
    o_t = tl.arange(0, BLOCK_T)
    o_l = tl.arange(0, BLOCK_L)
    o_n = tl.arange(0, BLOCK_D_STATE)
    m_t = o_t < n
    m_l = o_l < w
    m_n = o_n < d_state
    m_tn = m_t[:, None] & m_n[None, :]
    # Checkpoint tiles are 3-D, [BLOCK_HEAD_DIM, BLOCK_D_STATE // D_STATE_CHUNK, D_STATE_CHUNK]
    # (o_n2: the d_state index of each [chunk, position]; the module's D_STATE_CHUNK says why).
    o_n2 = (tl.arange(0, BLOCK_D_STATE // D_STATE_CHUNK)[:, None] * D_STATE_CHUNK
            + tl.arange(0, D_STATE_CHUNK)[None, :])
    m_n2 = o_n2 < d_state
    A = tl.load(A_ptr + i_h).to(tl.float32)

    # Window, per (row, head): processed dt, its inclusive sums cum[s] = Σ_{i≤s} dt_i and
    # between[j, s] = Σ_{j<i≤s} dt_i, B_j · C_s, and the weights of window token j in output s.
    p_dt = dt_ptr + i_b * stride_dt_batch
    dt_w = process_dt(p_dt + tl.minimum(o_t, T - 1) * stride_dt_tok + i_h * stride_dt_head,
                      dt_bias_ptr, i_h, HAS_DT_BIAS, DT_SOFTPLUS)
    dt_w = tl.where(m_t, dt_w, 0.0)
    cum = tl.sum(tl.where(o_t[None, :] <= o_t[:, None], dt_w[None, :], 0.0), axis=1)
    o_i = o_t[None, None, :]
    between = tl.sum(tl.where((o_t[:, None, None] < o_i) & (o_i <= o_t[None, :, None]),
                              dt_w[None, None, :], 0.0), axis=2)
    p_B = B_ptr + i_b * stride_B_batch + i_g * stride_B_group
    p_C = C_ptr + i_b * stride_C_batch + i_g * stride_C_group
    b_Bw = tl.load(p_B + o_t[:, None] * stride_B_tok + o_n[None, :], mask=m_tn, other=0.0).to(tl.float32)
    b_Cw = tl.load(p_C + o_t[:, None] * stride_C_tok + o_n[None, :], mask=m_tn, other=0.0).to(tl.float32)
    bc_w = tl.zeros([BLOCK_T, BLOCK_T], dtype=tl.float32)
    for s in tl.static_range(BLOCK_T):
        C_s = tl.load(p_C + s * stride_C_tok + o_n, mask=m_n & (s < n), other=0.0).to(tl.float32)
        bc_w += tl.where(o_t[None, :] == s, tl.sum(b_Bw * C_s[None, :], axis=1)[:, None], 0.0)
    coef_w = tl.where((o_t[:, None] <= o_t[None, :]) & m_t[None, :],
                      dt_w[:, None] * tl.exp(A * between) * bc_w, 0.0)

    # History: the w committed records. later[k] = Σ_{k<i<w} dt_i, total = Σ_{i<w} dt_i.
    p_xr = xr_ptr + slot * stride_xr_slot + i_h * stride_xr_head
    p_Br = Br_ptr + slot * stride_Br_slot + i_g * stride_Br_group
    p_dtr = dtr_ptr + slot * stride_dtr_slot + i_h * stride_dtr_head
    dt_h = tl.load(p_dtr + o_l, mask=m_l, other=0.0)
    later = tl.sum(tl.where(o_l[None, :] > o_l[:, None], dt_h[None, :], 0.0), axis=1)
    total = tl.sum(dt_h, axis=0)

    p_c = ckpt_ptr + slot * stride_c_slot + i_h * stride_c_head
    p_sc = scale_ptr + slot * stride_sc_slot + i_h * stride_sc_head
    p_x = x_ptr + i_b * stride_x_batch + i_h * stride_x_head
    p_z = z_ptr + i_b * stride_z_batch + i_h * stride_z_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_start = i_s * SPAN_HEAD_DIM
    if verify_flushes(w, n, L):
        # Flush: fold the history into the checkpoint (exact fp32 rank-1 updates), then the
        # window's outputs from the folded tile.
        fold_decay = tl.exp(A * total)
        ckpt_decay = tl.exp(A * cum)
        for c in tl.range(0, SPAN_HEAD_DIM // BLOCK_HEAD_DIM, num_stages=NUM_STAGES):
            o_p = p_start + c * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
            m_p = o_p < head_dim
            m_c = m_p[:, None, None] & m_n2[None, :, :]
            p_tile = p_c + o_p[:, None, None] * stride_c_dim + o_n2[None, :, :]
            b_s = fold_decay * tl.load(p_tile, mask=m_c, other=0.0).to(tl.float32)
            if HAS_SCALE:
                b_s *= tl.load(p_sc + o_p, mask=m_p, other=1.0)[:, None, None]
            # Records newest first, with the running sum of the dt after each record (its
            # decay). Loops over records run to the constant bound L-1 with a uniform guard:
            # a loop bounded by a loaded value does not run under the interpreter.
            after = tl.full([], 0.0, tl.float32)
            for j in tl.range(0, L - 1, loop_unroll_factor=1):
                k = w - 1 - j
                if k >= 0:
                    dt_k = tl.load(p_dtr + k)
                    xk = tl.load(p_xr + k * stride_xr_pos + o_p, mask=m_p, other=0.0).to(tl.float32)
                    Bk = tl.load(p_Br + k * stride_Br_pos + o_n2, mask=m_n2, other=0.0).to(tl.float32)
                    b_s += (dt_k * tl.exp(A * after) * xk)[:, None, None] * Bk[None, :, :]
                    after += dt_k
            if HAS_SCALE or SR:  # as 2-D tiles of whole rows; SR's draws also from the history's dt
                b_rows = _as_rows(b_s, BLOCK_HEAD_DIM, BLOCK_D_STATE)
                store_checkpoint_tile(_as_rows(p_tile, BLOCK_HEAD_DIM, BLOCK_D_STATE),
                                      _as_rows(m_c, BLOCK_HEAD_DIM, BLOCK_D_STATE), p_sc + o_p, m_p,
                                      b_rows, tl.max(tl.abs(b_rows), axis=1), sr_seed, slot, i_h, total,
                                      _as_rows(o_p[:, None, None] * d_state + o_n2[None, :, :], BLOCK_HEAD_DIM,
                                               BLOCK_D_STATE), HAS_SCALE, SR)
            else:
                tl.store(p_tile, b_s.to(ckpt_ptr.dtype.element_ty), mask=m_c)
            b_xw = tl.load(p_x + o_t[:, None] * stride_x_tok + o_p[None, :],
                           mask=m_t[:, None] & m_p[None, :], other=0.0).to(tl.float32)
            _verify_outputs(b_s, ckpt_decay, b_xw, coef_w, b_xw, coef_w, o_t, o_p, m_p, o_n2, m_n2, n,
                            i_h, p_C, stride_C_tok, p_z, stride_z_tok, p_o, stride_o_tok,
                            D_ptr, stride_D_head, False, BLOCK_T, HAS_D, D_PER_DIM, HAS_Z)
        # The window's x records overwrite history this program has read: after a barrier.
        tl.debug_barrier()
        for c in tl.range(0, SPAN_HEAD_DIM // BLOCK_HEAD_DIM):
            o_p = p_start + c * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
            m_tp = m_t[:, None] & (o_p < head_dim)[None, :]
            b_xw = tl.load(p_x + o_t[:, None] * stride_x_tok + o_p[None, :], mask=m_tp, other=0.0)
            tl.store(p_xr + o_t[:, None] * stride_xr_pos + o_p[None, :], b_xw.to(xr_ptr.dtype.element_ty), mask=m_tp)
        # dt and B records are read by other programs of the row: the last one writes them.
        if last_arrival(arrivals_ptr, slot, tl.num_programs(0) * tl.num_programs(1)):
            _store_window_dt_B(dtr_ptr + slot * stride_dtr_slot, stride_dtr_head,
                               Br_ptr + slot * stride_Br_slot, stride_Br_group, stride_Br_pos,
                               p_dt, stride_dt_tok, stride_dt_head, dt_bias_ptr,
                               B_ptr + i_b * stride_B_batch, stride_B_tok, stride_B_group,
                               n, nheads, ngroups, d_state, BLOCK_T, BLOCK_NHEADS,
                               BLOCK_NGROUPS, BLOCK_D_STATE, HAS_DT_BIAS, DT_SOFTPLUS)
            tl.store(cursor_ptr + slot, 0)
    else:
        # Non-flush: history weights times B_k · C_s (one record at a time), then the outputs
        # from the checkpoint, history and window; the window is appended after the history.
        bc_h = tl.zeros([BLOCK_L, BLOCK_T], dtype=tl.float32)
        for k in tl.range(0, L - 1, loop_unroll_factor=1):
            if k < w:
                Bk = tl.load(p_Br + k * stride_Br_pos + o_n, mask=m_n, other=0.0).to(tl.float32)
                bc_h += tl.where(o_l[:, None] == k, tl.sum(b_Cw * Bk[None, :], axis=1)[None, :], 0.0)
        coef_h = tl.where(m_l[:, None] & m_t[None, :],
                          dt_h[:, None] * tl.exp(A * (later[:, None] + cum[None, :])) * bc_h, 0.0)
        ckpt_decay = tl.exp(A * (total + cum))
        for c in tl.range(0, SPAN_HEAD_DIM // BLOCK_HEAD_DIM, num_stages=NUM_STAGES):
            o_p = p_start + c * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
            m_p = o_p < head_dim
            m_tp = m_t[:, None] & m_p[None, :]
            b_s0 = tl.load(p_c + o_p[:, None, None] * stride_c_dim + o_n2[None, :, :],
                           mask=m_p[:, None, None] & m_n2[None, :, :], other=0.0).to(tl.float32)
            if HAS_SCALE:
                b_s0 *= tl.load(p_sc + o_p, mask=m_p, other=1.0)[:, None, None]
            b_xh = tl.load(p_xr + o_l[:, None] * stride_xr_pos + o_p[None, :],
                           mask=m_l[:, None] & m_p[None, :], other=0.0).to(tl.float32)
            b_xw = tl.load(p_x + o_t[:, None] * stride_x_tok + o_p[None, :], mask=m_tp, other=0.0).to(tl.float32)
            _verify_outputs(b_s0, ckpt_decay, b_xh, coef_h, b_xw, coef_w, o_t, o_p, m_p, o_n2, m_n2, n,
                            i_h, p_C, stride_C_tok, p_z, stride_z_tok, p_o, stride_o_tok,
                            D_ptr, stride_D_head, True, BLOCK_T, HAS_D, D_PER_DIM, HAS_Z)
            tl.store(p_xr + (w + o_t)[:, None] * stride_xr_pos + o_p[None, :],
                     b_xw.to(xr_ptr.dtype.element_ty), mask=m_tp)
        if i_s == 0:
            tl.store(p_dtr + w + o_t, dt_w, mask=m_t)
            if i_h % heads_per_group == 0:
                tl.store(p_Br + (w + o_t)[:, None] * stride_Br_pos + o_n[None, :],
                         b_Bw.to(Br_ptr.dtype.element_ty), mask=m_tn)
    if i_s == 0:
        if i_h == 0:
            tl.store(pending_ptr + slot, n)


def replay_verify_kernel(checkpoint: Tensor, x_records: Tensor, B_records: Tensor, x: Tensor, B: Tensor,
                         C: Tensor) -> str:
    """``"cuda"`` or ``"triton"``: the kernel the op runs for these tensors. CUDA where
    :func:`~.mamba2_verify_cuda.cuda_verify_unsupported` finds nothing against it (sm_90, bf16 or
    fp32 checkpoints, bf16 activations, T <= 8, the CUDA step's sizes and alignment); Triton
    otherwise (every dtype, size and GPU)."""
    return "cuda" if cuda_verify_unsupported(checkpoint, x_records, B_records, x, B, C) is None else "triton"


def launch_mamba2_replay_verify(checkpoint: Tensor, x_records: Tensor, dt_records: Tensor,
                                B_records: Tensor, cursor: Tensor, arrivals: Tensor,
                                pending: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor,
                                C: Tensor, *, slot_ids: Tensor, num_tokens: Optional[Tensor] = None,
                                D: Optional[Tensor] = None, z: Optional[Tensor] = None,
                                dt_bias: Optional[Tensor] = None, dt_softplus: bool = True,
                                out: Tensor, config=None, kernel: str = "auto",
                                checkpoint_scale: Optional[Tensor] = None,
                                rounding_seed: Optional[int] = None) -> Tensor:
    """Launch the verify step on the cache tensors; arguments already checked by the op
    (``checkpoint_scale``, ``rounding_seed``: as for
    :func:`~.mamba2_replay.launch_mamba2_replay_step`; both take the Triton kernel).

    ``kernel``: ``"auto"`` (:func:`replay_verify_kernel` chooses), ``"triton"`` or ``"cuda"``
    (ValueError where the CUDA verify does not apply). ``config``: a :class:`LaunchConfig` for the
    Triton kernel or a :class:`~.mamba2_replay_cuda.CudaStepConfig` for the CUDA one (None: the
    launch rules)."""
    kernel = resolve_kernel("launch_mamba2_replay_verify", kernel, config, CudaStepConfig,
                            lambda: "triton" if rounding_seed is not None else
                            replay_verify_kernel(checkpoint, x_records, B_records, x, B, C))
    if kernel == "cuda" and rounding_seed is not None:
        raise ValueError("launch_mamba2_replay_verify: rounding_seed given; the CUDA verify rounds to nearest only")
    if kernel == "cuda":
        return launch_mamba2_replay_verify_cuda(
            checkpoint, x_records, dt_records, B_records, cursor, arrivals, pending, x, dt, A, B, C,
            slot_ids=slot_ids, num_tokens=num_tokens, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
            out=out, config=config)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"launch_mamba2_replay_verify: config is {type(config).__name__}; the Triton kernel takes a LaunchConfig")
    batch, T, nheads, head_dim = x.shape
    ngroups, d_state = B.shape[2], B.shape[3]
    L = x_records.shape[2]
    cfg = config or mamba2_verify_launch_config(head_dim, d_state, batch, checkpoint.dtype)
    span = cfg.block_head_dim * cfg.chunks
    grid = (triton.cdiv(head_dim, span), nheads, batch)
    zz, DD, bias = mamba2_optional_inputs(x, A, D, z, dt_bias)
    scale = checkpoint if checkpoint_scale is None else checkpoint_scale  # no scale: a pointer never read
    _mamba2_replay_verify_kernel[grid](
        checkpoint, checkpoint.stride(0), checkpoint.stride(1), checkpoint.stride(2),
        scale, scale.stride(0), scale.stride(1),
        x_records, x_records.stride(0), x_records.stride(1), x_records.stride(2),
        dt_records, dt_records.stride(0), dt_records.stride(1),
        B_records, B_records.stride(0), B_records.stride(1), B_records.stride(2),
        cursor, arrivals, pending,
        x, x.stride(0), x.stride(1), x.stride(2),
        zz, zz.stride(0), zz.stride(1), zz.stride(2),
        out, out.stride(0), out.stride(1), out.stride(2),
        dt, dt.stride(0), dt.stride(1), dt.stride(2),
        A, bias, DD, DD.stride(0),
        B, B.stride(0), B.stride(1), B.stride(2),
        C, C.stride(0), C.stride(1), C.stride(2),
        slot_ids, num_tokens if num_tokens is not None else slot_ids,
        T, nheads, head_dim, d_state, ngroups, nheads // ngroups,
        rounding_seed or 0,
        L=L, BLOCK_L=max(2, triton.next_power_of_2(L)), BLOCK_T=max(2, triton.next_power_of_2(T)),
        BLOCK_NHEADS=triton.next_power_of_2(nheads), BLOCK_NGROUPS=triton.next_power_of_2(ngroups),
        BLOCK_HEAD_DIM=cfg.block_head_dim, SPAN_HEAD_DIM=span, NUM_STAGES=cfg.num_stages,
        D_STATE_CHUNK=min(D_STATE_CHUNK, triton.next_power_of_2(d_state)),
        HAS_NUM_TOKENS=num_tokens is not None, **cfg.launch_options(),
        **mamba2_step_constexprs(D, z, dt_bias, dt_softplus, d_state),
        HAS_SCALE=checkpoint_scale is not None,
        SR=rounding_seed is not None,
    )
    return out
