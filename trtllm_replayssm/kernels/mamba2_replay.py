"""ReplaySSM Mamba-2 decode step: output from checkpoint + records, state stored only at flush.

One launch per step. Grid (cdiv(head_dim, SPAN_HEAD_DIM), nheads, batch); each program owns
SPAN_HEAD_DIM rows of one head's checkpoint of one row, computes the per-(row, head) weights once,
then walks its rows in [BLOCK_HEAD_DIM, d_state] tiles (a loop software-pipelined NUM_STAGES
deep), the same loop for every row:

* y = exp(A Λ) (S0 C) + Σ_j s_j (B_j · C) x_j + dt (B · C) x (the inner-product route: the state
  is never formed); then, for w < L-1, the record (x, dt, B) is appended at w and the
  checkpoint was only read.
* w == L-1 (flush), after the loop: the program's rows of S = exp(A Λ) S0 + Σ_j s_j x_j B_jᵀ +
  dt x Bᵀ are formed in [FOLD_ROWS, FOLD_D_STATE] tiles (the record sum as one tensor-core
  product in TF32 parts, about fp32 accuracy; the checkpoint rows come from L2, the loop has
  just read them) and stored over the checkpoint (rounded to its dtype; an fp8 checkpoint's rows
  as codes with a new fp32 scale each, max |row| / 448: ``reference.rounding.fp8_row_encode``'s
  rule).

So a flush costs only the flush rows their fold: the loop, which sets the kernel's registers and
pipeline, is the non-flush one.

Weights s_j and the decay are defined in :mod:`trtllm_replayssm.reference.mamba2`.

Cursor advance without a second launch or a host sync: every program of a row reads the cursor,
does its work, then increments the row's arrival counter (an acq_rel atomic after a CTA barrier);
the last program to arrive writes the new cursor and resets the counter to zero. No program can
read a cursor that a program of the same launch has already advanced, so one captured CUDA graph
replays correctly for any number of steps and any mix of flush and non-flush rows.
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from torch import Tensor

from .common import (KERNELS, LaunchConfig, advance_cursor, mamba2_launch_config, mamba2_step_args,
                     mamba2_step_constexprs, process_dt, resolve_kernel, skip_gate_store, split_dot,
                     store_checkpoint_tile)
from .mamba2_replay_cuda import CudaStepConfig, cuda_step_unsupported, launch_mamba2_replay_step_cuda

__all__ = ["launch_mamba2_replay_step", "fold_constexprs", "replay_step_kernel", "KERNELS"]

# A 16-bit checkpoint's flush fold: tiles of FOLD_ROWS rows (the tile product's M, at least 16)
# by FOLD_D_STATE columns of d_state.
FOLD_ROWS, FOLD_D_STATE = 16, 32


def fold_constexprs(d_state: int, state_dtype: torch.dtype) -> dict:
    """How the step kernel folds a flush row, for ``d_state`` and the checkpoint dtype (the
    TensorRT plugin passes the same): in [FOLD_ROWS, FOLD_D_STATE] tiles after the loop
    (``FOLD_TILES``, 16-bit and fp8 checkpoints; fp8 in two passes over a row's tiles, the first
    for the row's largest magnitude, which sets its scale) or in the loop, one record at a time
    (fp32)."""
    return dict(FOLD_TILES=state_dtype.itemsize < 4, FOLD_ROWS=FOLD_ROWS, FOLD_D_STATE=FOLD_D_STATE,
                FOLD_CHUNKS=triton.cdiv(d_state, FOLD_D_STATE))


@triton.jit
def _fold_tile(p_c, b_sc0, p_x, p_xr, p_Br, p_B, o_f, m_f, o_d, m_d, o_l, m_f_l, b_wr, ckpt_decay, dt,
               stride_c_dim, stride_xr_pos, stride_Br_pos, HAS_SCALE: tl.constexpr, SPLIT_B: tl.constexpr):
    """A flush's folded tile of rows ``o_f`` x columns ``o_d`` (fp32): decay S0 + dt x Bᵀ +
    Σ_{j<L-1} s_j x_j B_jᵀ, the record sum one tensor-core product in TF32 parts
    (common.split_dot, about fp32 accuracy; sm_80+); an fp8 checkpoint's codes times their rows'
    scales before the flush, ``b_sc0`` [FOLD_ROWS] (HAS_SCALE; unused otherwise): values read
    once per row tile, since the tile's stores replace the scales in memory after its first
    column chunk."""
    b_s0 = tl.load(p_c + o_f[:, None] * stride_c_dim + o_d[None, :], mask=m_f[:, None] & m_d[None, :],
                   other=0.0).to(tl.float32)
    if HAS_SCALE:
        b_s0 *= b_sc0[:, None]
    b_x = tl.load(p_x + o_f, mask=m_f, other=0.0).to(tl.float32)
    b_Bd = tl.load(p_B + o_d, mask=m_d, other=0.0).to(tl.float32)
    # Records past L-2 are masked, not only weighted by 0: they may be stale (inf * 0).
    b_xw = tl.load(p_xr + o_l[None, :] * stride_xr_pos + o_f[:, None],
                   mask=m_f[:, None] & m_f_l[None, :], other=0.0).to(tl.float32) * b_wr[None, :]
    b_Brd = tl.load(p_Br + o_l[:, None] * stride_Br_pos + o_d[None, :],
                    mask=m_f_l[:, None] & m_d[None, :], other=0.0).to(tl.float32)
    b_s = ckpt_decay * b_s0 + (dt * b_x)[:, None] * b_Bd[None, :]
    return split_dot(b_xw, b_Brd, b_s, SPLIT_B)


@triton.jit
def _fold_and_store(p_c, p_sc, b_sc0, p_x, p_xr, p_Br, p_B, o_f, m_f, d0, d_state, o_l, m_f_l, b_wr, ckpt_decay,
                    dt, b_amax, sr_seed, slot, i_h, stride_c_dim, stride_xr_pos, stride_Br_pos,
                    FOLD_D_STATE: tl.constexpr, HAS_SCALE: tl.constexpr, SR: tl.constexpr, SPLIT_B: tl.constexpr):
    """The folded tile of rows ``o_f`` x columns d0 .. d0 + FOLD_D_STATE (:func:`_fold_tile`,
    ``b_sc0`` the rows' old scales) stored over the checkpoint (common.store_checkpoint_tile: an
    fp8 checkpoint's codes of the rows' largest magnitudes ``b_amax``, their new scales at
    ``p_sc``; SR's draws per element from the seed, the slot, the head and the flushing token's
    dt)."""
    o_d = d0 + tl.arange(0, FOLD_D_STATE)
    m_d = o_d < d_state
    b_s = _fold_tile(p_c, b_sc0, p_x, p_xr, p_Br, p_B, o_f, m_f, o_d, m_d, o_l, m_f_l, b_wr, ckpt_decay, dt,
                     stride_c_dim, stride_xr_pos, stride_Br_pos, HAS_SCALE, SPLIT_B)
    store_checkpoint_tile(p_c + o_f[:, None] * stride_c_dim + o_d[None, :], m_f[:, None] & m_d[None, :], p_sc + o_f, m_f,
                          b_s, b_amax, sr_seed, slot, i_h, dt, o_f[:, None] * d_state + o_d[None, :], HAS_SCALE, SR)


@triton.jit
def _record_weights(b_dtr, o_l, m_l, A, dt):
    """(s_j [BLOCK_L], checkpoint decay) of a row's records 0..w-1 (``m_l``: j < w; ``b_dtr``
    zero past w) before the step's token: s_j = dt_j exp(A (dt + later_j)) with later_j =
    Σ_{j<i<w} dt_i summed exactly (no subtraction of prefix sums), decay exp(A (Σ_j dt_j + dt))."""
    later = tl.sum(tl.where(o_l[None, :] > o_l[:, None], b_dtr[None, :], 0.0), axis=1)
    return tl.where(m_l, b_dtr * tl.exp(A * (later + dt)), 0.0), tl.exp(A * (tl.sum(b_dtr, axis=0) + dt))


@triton.jit
def _replay_output_chunk(b_s0, b_xr, b_x, b_C, coef, ckpt_decay, cur_coef, o_p, m_p, i_h,
                         D_ptr, stride_D_head, z_ptr, out_ptr,
                         HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr):
    """y rows o_p = exp(AΛ) (S0 C) + Σ_j s_j (B_j·C) x_j + dt (B·C) x, then D, z and store."""
    y = ckpt_decay * tl.sum(b_s0 * b_C[None, :], axis=1)
    y += tl.sum(coef[:, None] * b_xr, axis=0)
    y += cur_coef * b_x
    skip_gate_store(y, b_x, o_p, m_p, i_h, D_ptr, stride_D_head, z_ptr, out_ptr, HAS_D, D_PER_DIM, HAS_Z)


@triton.jit
def _mamba2_replay_step_kernel(
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
    # cursor, arrivals [slot] int32
    cursor_ptr, arrivals_ptr,
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
    sr_seed,  # with SR: the seed of the flush's stochastic rounding
    L: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_HEAD_DIM: tl.constexpr, SPAN_HEAD_DIM: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
    NUM_STAGES: tl.constexpr, FOLD_TILES: tl.constexpr, FOLD_ROWS: tl.constexpr, FOLD_D_STATE: tl.constexpr,
    FOLD_CHUNKS: tl.constexpr,
    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_SCALE: tl.constexpr, SR: tl.constexpr,
):
    i_s, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    i_b = i_b.to(tl.int64)
    i_g = i_h // heads_per_group
    w = tl.load(cursor_ptr + slot)
    o_n = tl.arange(0, BLOCK_D_STATE)
    o_l = tl.arange(0, BLOCK_L)
    m_n = o_n < d_state
    m_l = o_l < w

    # Per-(row, head) scalars and vectors, computed once for the whole span of head_dim rows.
    p_xr = xr_ptr + slot * stride_xr_slot + i_h * stride_xr_head
    p_Br = Br_ptr + slot * stride_Br_slot + i_g * stride_Br_group
    p_dtr = dtr_ptr + slot * stride_dtr_slot + i_h * stride_dtr_head
    b_dtr = tl.load(p_dtr + o_l, mask=m_l, other=0.0)
    dt = process_dt(dt_ptr + i_b * stride_dt_batch + i_h * stride_dt_head, dt_bias_ptr, i_h,
                    HAS_DT_BIAS, DT_SOFTPLUS)
    A = tl.load(A_ptr + i_h).to(tl.float32)
    p_B = B_ptr + i_b * stride_B_batch + i_g * stride_B_group
    b_B = tl.load(p_B + o_n, mask=m_n, other=0.0).to(tl.float32)
    b_C = tl.load(C_ptr + i_b * stride_C_batch + i_g * stride_C_group + o_n, mask=m_n, other=0.0).to(tl.float32)
    b_Br = tl.load(p_Br + o_l[:, None] * stride_Br_pos + o_n[None, :],
                   mask=m_l[:, None] & m_n[None, :], other=0.0).to(tl.float32)
    b_wr, ckpt_decay = _record_weights(b_dtr, o_l, m_l, A, dt)
    coef = b_wr * tl.sum(b_Br * b_C[None, :], axis=1)
    cur_coef = dt * tl.sum(b_B * b_C, axis=0)

    p_c = ckpt_ptr + slot * stride_c_slot + i_h * stride_c_head
    p_sc = scale_ptr + slot * stride_sc_slot + i_h * stride_sc_head
    p_x = x_ptr + i_b * stride_x_batch + i_h * stride_x_head
    p_z = z_ptr + i_b * stride_z_batch + i_h * stride_z_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_start = i_s * SPAN_HEAD_DIM
    if not FOLD_TILES:
        if w == L - 1:
            # fp32 checkpoint, flush: output, then the folded state tile stored over the checkpoint, in
            # the loop. Exact fp32 rank-1 updates, one record at a time.
            for c in tl.range(0, SPAN_HEAD_DIM // BLOCK_HEAD_DIM, num_stages=NUM_STAGES):
                o_p = p_start + c * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
                m_p = o_p < head_dim
                m_c = m_p[:, None] & m_n[None, :]
                b_s0 = tl.load(p_c + o_p[:, None] * stride_c_dim + o_n[None, :], mask=m_c, other=0.0).to(tl.float32)
                b_x = tl.load(p_x + o_p, mask=m_p, other=0.0).to(tl.float32)
                b_xr = tl.load(p_xr + o_l[:, None] * stride_xr_pos + o_p[None, :],
                               mask=m_l[:, None] & m_p[None, :], other=0.0).to(tl.float32)
                _replay_output_chunk(b_s0, b_xr, b_x, b_C, coef, ckpt_decay, cur_coef, o_p, m_p, i_h,
                                     D_ptr, stride_D_head, p_z, p_o, HAS_D, D_PER_DIM, HAS_Z)
                b_s = ckpt_decay * b_s0 + (dt * b_x)[:, None] * b_B[None, :]
                for j in tl.range(0, L - 1, loop_unroll_factor=1):  # a flush folds exactly L-1 records
                    wj = tl.sum(tl.where(o_l == j, b_wr, 0.0), axis=0)
                    xj = tl.load(p_xr + j * stride_xr_pos + o_p, mask=m_p, other=0.0).to(tl.float32)
                    Bj = tl.load(p_Br + j * stride_Br_pos + o_n, mask=m_n, other=0.0).to(tl.float32)
                    b_s += (wj * xj)[:, None] * Bj[None, :]
                tl.store(p_c + o_p[:, None] * stride_c_dim + o_n[None, :], b_s.to(ckpt_ptr.dtype.element_ty), mask=m_c)
            advance_cursor(cursor_ptr, arrivals_ptr, slot, w, L)
            return
    # Output from checkpoint + records (the state is never formed), and the step's x appended at
    # w (not at a flush: the fold below takes the step's token from the inputs).
    for c in tl.range(0, SPAN_HEAD_DIM // BLOCK_HEAD_DIM, num_stages=NUM_STAGES):
        o_p = p_start + c * BLOCK_HEAD_DIM + tl.arange(0, BLOCK_HEAD_DIM)
        m_p = o_p < head_dim
        b_s0 = tl.load(p_c + o_p[:, None] * stride_c_dim + o_n[None, :],
                       mask=m_p[:, None] & m_n[None, :], other=0.0).to(tl.float32)
        if HAS_SCALE:
            b_s0 *= tl.load(p_sc + o_p, mask=m_p, other=1.0)[:, None]
        b_x = tl.load(p_x + o_p, mask=m_p, other=0.0).to(tl.float32)
        b_xr = tl.load(p_xr + o_l[:, None] * stride_xr_pos + o_p[None, :],
                       mask=m_l[:, None] & m_p[None, :], other=0.0).to(tl.float32)
        _replay_output_chunk(b_s0, b_xr, b_x, b_C, coef, ckpt_decay, cur_coef, o_p, m_p, i_h,
                             D_ptr, stride_D_head, p_z, p_o, HAS_D, D_PER_DIM, HAS_Z)
        tl.store(p_xr + w * stride_xr_pos + o_p, b_x.to(xr_ptr.dtype.element_ty), mask=m_p & (w < L - 1))
    if w == L - 1:
        # Fold records 0..L-2 (weights b_wr: w = L-1) and the step's token into this program's
        # rows of the checkpoint, in [FOLD_ROWS, FOLD_D_STATE] tiles (the rows come from L2: the
        # loop above has just read them). An fp8 checkpoint folds each row tile twice: first for
        # its rows' largest magnitudes (their scales), then to store the codes (the same
        # arithmetic on the same inputs: the same values), so no tile holds whole rows. The rows'
        # old scales are read once, before either pass: the second pass stores the new ones with
        # its first column chunk, and the later chunks' old codes still need the old.
        m_f_l = o_l < L - 1
        split_b = Br_ptr.dtype.element_ty.primitive_bitwidth > 16
        n_row_tiles = (SPAN_HEAD_DIM + FOLD_ROWS - 1) // FOLD_ROWS
        if HAS_SCALE:
            for r in tl.range(0, n_row_tiles):
                o_f = p_start + r * FOLD_ROWS + tl.arange(0, FOLD_ROWS)
                m_f = (o_f < head_dim) & (o_f < p_start + SPAN_HEAD_DIM)
                b_sc0 = tl.load(p_sc + o_f, mask=m_f, other=1.0)
                b_amax = tl.zeros([FOLD_ROWS], dtype=tl.float32)
                for ch in tl.range(0, FOLD_CHUNKS):
                    o_d = ch * FOLD_D_STATE + tl.arange(0, FOLD_D_STATE)
                    b_s = _fold_tile(p_c, b_sc0, p_x, p_xr, p_Br, p_B, o_f, m_f, o_d, o_d < d_state, o_l, m_f_l, b_wr,
                                     ckpt_decay, dt, stride_c_dim, stride_xr_pos, stride_Br_pos, HAS_SCALE, split_b)
                    b_amax = tl.maximum(b_amax, tl.max(tl.abs(b_s), axis=1))
                for ch in tl.range(0, FOLD_CHUNKS):
                    _fold_and_store(p_c, p_sc, b_sc0, p_x, p_xr, p_Br, p_B, o_f, m_f, ch * FOLD_D_STATE, d_state, o_l,
                                    m_f_l, b_wr, ckpt_decay, dt, b_amax, sr_seed, slot, i_h, stride_c_dim,
                                    stride_xr_pos, stride_Br_pos, FOLD_D_STATE, HAS_SCALE, SR, split_b)
        else:
            no_rows = tl.zeros([FOLD_ROWS], dtype=tl.float32)  # no scales, no largest magnitudes: unused
            for t in tl.range(0, n_row_tiles * FOLD_CHUNKS, num_stages=2):
                o_f = p_start + (t // FOLD_CHUNKS) * FOLD_ROWS + tl.arange(0, FOLD_ROWS)
                m_f = (o_f < head_dim) & (o_f < p_start + SPAN_HEAD_DIM)
                _fold_and_store(p_c, p_sc, no_rows, p_x, p_xr, p_Br, p_B, o_f, m_f, (t % FOLD_CHUNKS) * FOLD_D_STATE,
                                d_state, o_l, m_f_l, b_wr, ckpt_decay, dt, no_rows, sr_seed, slot, i_h, stride_c_dim,
                                stride_xr_pos, stride_Br_pos, FOLD_D_STATE, HAS_SCALE, SR, split_b)
    elif i_s == 0:
        tl.store(p_dtr + w, dt)
        if i_h % heads_per_group == 0:
            tl.store(p_Br + w * stride_Br_pos + o_n, b_B.to(Br_ptr.dtype.element_ty), mask=m_n)

    advance_cursor(cursor_ptr, arrivals_ptr, slot, w, L)


def replay_step_kernel(
    checkpoint: Tensor, x_records: Tensor, B_records: Tensor, x: Tensor, checkpoint_scale: Optional[Tensor] = None
) -> str:
    """``"cuda"`` or ``"triton"``: the kernel the op runs for these tensors. CUDA where
    :func:`~.mamba2_replay_cuda.cuda_step_unsupported` finds nothing against it (sm_90, its
    sizes and alignment: bf16, fp32 or fp8 (d_state 128) checkpoints, bf16 activations), at
    every batch (measured faster on the H200 from batch 1, 2026-12-02: docs/kernel-notes.md);
    Triton otherwise (every dtype, size and GPU)."""
    if cuda_step_unsupported(checkpoint, x_records, B_records, x, checkpoint_scale) is None:
        return "cuda"
    return "triton"


def launch_mamba2_replay_step(checkpoint: Tensor, x_records: Tensor, dt_records: Tensor,
                              B_records: Tensor, cursor: Tensor, arrivals: Tensor, x: Tensor,
                              dt: Tensor, A: Tensor, B: Tensor, C: Tensor, *, slot_ids: Tensor,
                              D: Optional[Tensor] = None, z: Optional[Tensor] = None,
                              dt_bias: Optional[Tensor] = None, dt_softplus: bool = True,
                              out: Tensor, config=None, kernel: str = "auto",
                              checkpoint_scale: Optional[Tensor] = None,
                              rounding_seed: Optional[int] = None) -> Tensor:
    """Launch the replay step on the cache tensors; arguments already checked by the op
    (``checkpoint_scale``: an fp8 checkpoint's row scales; ``rounding_seed``: round a flush's
    16-bit or fp8 checkpoint stochastically, the draws a function of the seed, the slot, the head,
    the flushing token's dt and the element; both take the Triton kernel).

    ``kernel``: ``"auto"`` (:func:`replay_step_kernel` chooses), ``"triton"`` or ``"cuda"``
    (ValueError where the CUDA step does not apply). ``config``: a :class:`LaunchConfig` for the
    Triton kernel or a :class:`~.mamba2_replay_cuda.CudaStepConfig` for the CUDA one (None: the
    launch tables)."""
    kernel = resolve_kernel("launch_mamba2_replay_step", kernel, config, CudaStepConfig,
                            lambda: "triton" if rounding_seed is not None else
                            replay_step_kernel(checkpoint, x_records, B_records, x, checkpoint_scale))
    if kernel == "cuda" and rounding_seed is not None:
        raise ValueError("launch_mamba2_replay_step: rounding_seed given; the CUDA step rounds to nearest only")
    if kernel == "cuda":
        return launch_mamba2_replay_step_cuda(
            checkpoint, x_records, dt_records, B_records, cursor, arrivals, x, dt, A, B, C, slot_ids=slot_ids,
            D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus, out=out, config=config,
            checkpoint_scale=checkpoint_scale)
    if config is not None and not isinstance(config, LaunchConfig):
        raise TypeError(f"launch_mamba2_replay_step: config is {type(config).__name__}; the Triton kernel takes a LaunchConfig")
    batch, nheads, head_dim = x.shape
    d_state = B.shape[2]
    L = x_records.shape[2]
    cfg = config or mamba2_launch_config("replay_step", head_dim, d_state, batch, checkpoint.dtype)
    span = cfg.block_head_dim * cfg.chunks
    grid = (triton.cdiv(head_dim, span), nheads, batch)
    scale = checkpoint if checkpoint_scale is None else checkpoint_scale  # no scale: a pointer never read
    _mamba2_replay_step_kernel[grid](
        checkpoint, checkpoint.stride(0), checkpoint.stride(1), checkpoint.stride(2),
        scale, scale.stride(0), scale.stride(1),
        x_records, x_records.stride(0), x_records.stride(1), x_records.stride(2),
        dt_records, dt_records.stride(0), dt_records.stride(1),
        B_records, B_records.stride(0), B_records.stride(1), B_records.stride(2),
        cursor, arrivals,
        *mamba2_step_args(x, dt, A, B, C, slot_ids, D, z, dt_bias, out),
        rounding_seed or 0,
        L=L, BLOCK_L=max(16, triton.next_power_of_2(L)),  # the fold's tile product: K >= 16
        BLOCK_HEAD_DIM=cfg.block_head_dim, SPAN_HEAD_DIM=span, NUM_STAGES=cfg.num_stages,
        **fold_constexprs(d_state, checkpoint.dtype),
        **cfg.launch_options(),
        **mamba2_step_constexprs(D, z, dt_bias, dt_softplus, d_state),
        HAS_SCALE=checkpoint_scale is not None,
        SR=rounding_seed is not None,
    )
    return out
