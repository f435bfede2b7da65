"""Pure-PyTorch Mamba-2 decode: the conventional recurrence and the ReplaySSM step.

This module is the oracle of every test and the CPU implementation of the ``replayssm::mamba2_*``
ops. It runs in any floating dtype: with float64 tensors everything is computed in float64; with
fp32/bf16/fp16 tensors it computes in fp32 and rounds to the storage dtype exactly where the
Triton kernels do (the state after every conventional step, the checkpoint at a flush).

Notation (per sequence, per head h of group g = h // (nheads / ngroups)):

    dt_t  = softplus(dt_raw_t + dt_bias)                  processed step size, scalar per head
    S_t   = exp(A * dt_t) * S_{t-1} + dt_t * x_t B_tᵀ     state [head_dim, d_state]
    y_t   = S_t C_t + D * x_t,  then y_t * silu(z_t) when z is given

ReplaySSM keeps a checkpoint S0 and the records (x_j, dt_j, B_j), j < w, of the tokens since
S0 (w = cursor). With the current token at position w, the suffix sums
``Λ_j = Σ_{j<i≤w} dt_i`` (what decays record j after it was written) give

    S_w = exp(A Λ_{-1}) S0 + Σ_{j≤w} dt_j exp(A Λ_j) x_j B_jᵀ
    y_w = exp(A Λ_{-1}) (S0 C_w) + Σ_{j≤w} dt_j exp(A Λ_j) (B_j · C_w) x_j

where Λ_{-1} = Σ_{i≤w} dt_i decays the checkpoint and Λ_w = 0. The output never forms S_w; a
flush (cursor == L-1) forms it, stores it as the new checkpoint and resets the cursor to 0.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from torch import Tensor

from .rounding import load_checkpoint_rows, store_checkpoint_rows

__all__ = [
    "compute_dtype",
    "expand_heads",
    "live_rows",
    "held_records",
    "mamba2_process_dt",
    "mamba2_decode_step_ref",
    "mamba2_replay_weights",
    "mamba2_replay_output",
    "mamba2_replay_fold",
    "mamba2_records_state",
    "mamba2_replay_step_ref",
]


def compute_dtype(*tensors: Optional[Tensor]) -> torch.dtype:
    """float64 when any given tensor is float64, else float32 (the kernels' accumulator)."""
    if any(t is not None and t.dtype == torch.float64 for t in tensors):
        return torch.float64
    return torch.float32


def live_rows(slot_ids: Tensor):
    """(rows, slots): the batch rows whose slot id is >= 0 and their slots as int64 (a slot id
    < 0 marks a padding row, which reads and writes nothing)."""
    rows = torch.nonzero(slot_ids >= 0).flatten()
    return rows, slot_ids[rows].long()


def held_records(w: Tensor, L: int) -> Tensor:
    """[rows, L] bool: record position j is held by a row with cursor w when j < w."""
    return torch.arange(L, device=w.device)[None, :] < w[:, None]


def mask_records(records: Tensor, held: Tensor, dtype: torch.dtype) -> Tensor:
    """``records`` [rows, heads, L, dim] in ``dtype``, zero at the positions a row does not
    hold (``held`` [rows, L], from :func:`held_records`)."""
    return torch.where(held[:, None, :, None], records.to(dtype), 0.0)


def mamba2_process_dt(dt: Tensor, dt_bias: Optional[Tensor], dt_softplus: bool, dtype: torch.dtype) -> Tensor:
    """dt [batch, nheads] raw -> processed step size [batch, nheads] in ``dtype``.

    softplus uses threshold 20 (identity above), as mamba_ssm and the Triton kernels do.
    """
    dt = dt.to(dtype)
    if dt_bias is not None:
        dt = dt + dt_bias.to(dtype)
    if dt_softplus:
        dt = F.softplus(dt, beta=1.0, threshold=20.0)
    return dt


def expand_heads(t: Tensor, heads: int) -> Tensor:
    """[rows, groups, ...] -> [rows, heads, ...]: head h reads group h // (heads / groups)
    (Mamba-2 B/C groups; GDN/KDA key heads shared by value heads)."""
    return t.repeat_interleave(heads // t.shape[1], dim=1)


def _skip_and_gate(y: Tensor, x: Tensor, D: Optional[Tensor], z: Optional[Tensor]) -> Tensor:
    """y, x [rows, nheads, head_dim] -> y + D x, times silu(z) when z is given."""
    if D is not None:
        D = D.to(y.dtype)
        y = y + (D[:, None] if D.dim() == 1 else D) * x
    if z is not None:
        y = y * F.silu(z.to(y.dtype))
    return y


def mamba2_decode_step_ref(
    state: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Tensor,
) -> Tensor:
    """Conventional Mamba-2 decode step: read, update and store the whole state.

    Args:
        state: [slot, nheads, head_dim, d_state], mutated in place (rounded to its dtype).
        x: [batch, nheads, head_dim].   dt: [batch, nheads] raw.   A: [nheads], negative.
        B, C: [batch, ngroups, d_state].   D: [nheads] or [nheads, head_dim].   z: like x.
        dt_bias: [nheads].   slot_ids: [batch] int; < 0 marks a padding row.
        out: [batch, nheads, head_dim], written for live rows only.
    Returns:
        ``out``.
    """
    rows, slots = live_rows(slot_ids)
    if rows.numel() == 0:
        return out
    cd = compute_dtype(state, x)
    nheads = x.shape[1]
    xr = x[rows].to(cd)
    dtp = mamba2_process_dt(dt[rows], dt_bias, dt_softplus, cd)
    decay = torch.exp(A.to(cd)[None, :] * dtp)
    Bh = expand_heads(B[rows].to(cd), nheads)
    Ch = expand_heads(C[rows].to(cd), nheads)
    s = state[slots].to(cd) * decay[..., None, None] + dtp[..., None, None] * xr[..., :, None] * Bh[..., None, :]
    y = torch.einsum("rhpn,rhn->rhp", s, Ch)
    y = _skip_and_gate(y, xr, D, None if z is None else z[rows])
    state[slots] = s.to(state.dtype)
    out[rows] = y.to(out.dtype)
    return out


def mamba2_replay_weights(A: Tensor, dt_records: Tensor, valid: Tensor, dt_cur: Tensor) -> tuple[Tensor, Tensor]:
    """Decay of the checkpoint and weight of each record for the token after the records.

    Args:
        A: [nheads].   dt_records: [rows, nheads, L] processed dt of the records.
        valid: [rows, L] bool, True for positions holding a record (j < cursor).
        dt_cur: [rows, nheads] processed dt of the current token.
    Returns:
        (ckpt_decay [rows, nheads], weights [rows, nheads, L]) with
        ckpt_decay = exp(A Σ_{valid i} dt_i + A dt_cur) and
        weights_j = dt_j exp(A (Σ_{valid i>j} dt_i + dt_cur)), zero where not valid.
    """
    A = A.to(dt_cur.dtype)[None, :, None]
    dtr = torch.where(valid[:, None, :], dt_records.to(dt_cur.dtype), 0.0)
    # later_j = Σ_{i>j} dt_i: an exclusive reverse cumsum, summed exactly rather than by
    # subtraction so that no cancellation enters the exponent.
    L = dtr.shape[-1]
    later = torch.einsum("rhi,ji->rhj", dtr, torch.triu(torch.ones(L, L, dtype=dtr.dtype, device=dtr.device), 1))
    weights = torch.where(valid[:, None, :], dtr * torch.exp(A * (later + dt_cur[..., None])), 0.0)
    ckpt_decay = torch.exp(A[..., 0] * (dtr.sum(-1) + dt_cur))
    return ckpt_decay, weights


def mamba2_replay_output(
    S0: Tensor,
    x_rec: Tensor,
    B_rec: Tensor,
    ckpt_decay: Tensor,
    weights: Tensor,
    x_cur: Tensor,
    dt_cur: Tensor,
    B_cur: Tensor,
    C_cur: Tensor,
) -> Tensor:
    """SSM output of the current token from checkpoint + records, without forming the state.

    Shapes: S0 [rows, nheads, head_dim, d_state]; x_rec [rows, nheads, L, head_dim];
    B_rec [rows, nheads, L, d_state] (already expanded per head, zero where invalid);
    ckpt_decay [rows, nheads]; weights [rows, nheads, L]; x_cur [rows, nheads, head_dim];
    dt_cur [rows, nheads]; B_cur, C_cur [rows, nheads, d_state]. Returns [rows, nheads, head_dim].
    """
    bc = torch.einsum("rhln,rhn->rhl", B_rec, C_cur)
    bc_cur = (B_cur * C_cur).sum(-1)
    y = ckpt_decay[..., None] * torch.einsum("rhpn,rhn->rhp", S0, C_cur)
    y = y + torch.einsum("rhl,rhlp->rhp", weights * bc, x_rec)
    return y + (dt_cur * bc_cur)[..., None] * x_cur


def mamba2_replay_fold(
    S0: Tensor, x_rec: Tensor, B_rec: Tensor, ckpt_decay: Tensor, weights: Tensor, x_cur: Tensor, dt_cur: Tensor, B_cur: Tensor
) -> Tensor:
    """The state after the current token: checkpoint and records folded (shapes as above).

    Returns [rows, nheads, head_dim, d_state] in the compute dtype (not yet rounded).
    """
    S = ckpt_decay[..., None, None] * S0
    S = S + torch.einsum("rhl,rhlp,rhln->rhpn", weights, x_rec, B_rec)
    return S + dt_cur[..., None, None] * x_cur[..., :, None] * B_cur[..., None, :]


def mamba2_records_state(
    checkpoint: Tensor, x_records: Tensor, dt_records: Tensor, B_records: Tensor, cursor: Tensor, A: Tensor
) -> Tensor:
    """The state after the last recorded token: checkpoint decayed plus the held records.

    S = exp(A Σ_{j<w} dt_j) S0 + Σ_{j<w} dt_j exp(A Σ_{j<i<w} dt_i) x_j B_jᵀ, w = cursor (no
    current token; cursor 0 gives S0). Reads only.

    Args (the rows of the slots wanted, already gathered):
        checkpoint: [rows, nheads, head_dim, d_state].   x_records: [rows, nheads, L, head_dim].
        dt_records: [rows, nheads, L] processed dt.   B_records: [rows, ngroups, L, d_state].
        cursor: [rows] int, records held per row.   A: [nheads], negative.
    Returns:
        [rows, nheads, head_dim, d_state] in fp32 (fp64 for a fp64 checkpoint).
    """
    cd = compute_dtype(checkpoint)
    rows, nheads, head_dim, d_state = checkpoint.shape
    L = x_records.shape[2]
    valid = held_records(cursor.long(), L)
    no_dt = torch.zeros(rows, nheads, dtype=cd, device=checkpoint.device)
    ckpt_decay, weights = mamba2_replay_weights(A, dt_records, valid, no_dt)
    x_rec = mask_records(x_records, valid, cd)
    B_rec = expand_heads(mask_records(B_records, valid, cd), nheads)
    no_x = torch.zeros(rows, nheads, head_dim, dtype=cd, device=checkpoint.device)
    no_B = torch.zeros(rows, nheads, d_state, dtype=cd, device=checkpoint.device)
    return mamba2_replay_fold(checkpoint.to(cd), x_rec, B_rec, ckpt_decay, weights, no_x, no_dt, no_B)


def mamba2_replay_step_ref(
    checkpoint: Tensor,
    x_records: Tensor,
    dt_records: Tensor,
    B_records: Tensor,
    cursor: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One ReplaySSM decode step; mutates the cache tensors exactly as the Triton kernel does
    (with ``rounding_seed``, a flush's stochastic rounding as the kernel's, with other draws:
    a generator seeded from the seed and the flushing rows' dt).

    Args:
        checkpoint: [slot, nheads, head_dim, d_state]; written only for flush rows. fp8-e4m3:
            codes, with ``checkpoint_scale`` [slot, nheads, head_dim] fp32 (values = codes times
            the row's scale; a flush stores new codes and scales: ``reference.rounding``'s
            ``fp8_row_encode``).
        x_records: [slot, nheads, L, head_dim].   dt_records: [slot, nheads, L] (processed dt).
        B_records: [slot, ngroups, L, d_state].   cursor: [slot] int32 in [0, L).
        x, dt, A, B, C, D, z, dt_bias, slot_ids, out: as in :func:`mamba2_decode_step_ref`.
    Effect per live row with cursor w: w < L-1 appends (x, dt, B) at position w and sets the
    cursor to w+1; w == L-1 stores the folded state as the checkpoint and sets the cursor to 0.
    Padding rows (slot id < 0) read and write nothing; their ``out`` rows are left as they were.
    Returns:
        ``out``.
    """
    rows, slots = live_rows(slot_ids)
    if rows.numel() == 0:
        return out
    L = x_records.shape[2]
    nheads = x.shape[1]
    cd = compute_dtype(checkpoint, x)
    w = cursor[slots].long()
    valid = held_records(w, L)
    xr = x[rows].to(cd)
    dt_cur = mamba2_process_dt(dt[rows], dt_bias, dt_softplus, cd)
    ckpt_decay, weights = mamba2_replay_weights(A, dt_records[slots], valid, dt_cur)
    x_rec = mask_records(x_records[slots], valid, cd)
    B_rec = expand_heads(mask_records(B_records[slots], valid, cd), nheads)
    Bh = expand_heads(B[rows].to(cd), nheads)
    Ch = expand_heads(C[rows].to(cd), nheads)
    S0 = load_checkpoint_rows(checkpoint, checkpoint_scale, slots, cd)
    y = mamba2_replay_output(S0, x_rec, B_rec, ckpt_decay, weights, xr, dt_cur, Bh, Ch)
    y = _skip_and_gate(y, xr, D, None if z is None else z[rows])
    out[rows] = y.to(out.dtype)

    flush = w == L - 1
    if bool(flush.any()):
        f = torch.nonzero(flush).flatten()
        S = mamba2_replay_fold(S0[f], x_rec[f], B_rec[f], ckpt_decay[f], weights[f], xr[f], dt_cur[f], Bh[f])
        store_checkpoint_rows(checkpoint, checkpoint_scale, slots[f], S, rounding_seed, dt_cur[f])
    keep = torch.nonzero(~flush).flatten()
    if keep.numel():
        s, pos = slots[keep], w[keep]
        x_records[s, :, pos] = x[rows[keep]].to(x_records.dtype)
        dt_records[s, :, pos] = dt_cur[keep].to(dt_records.dtype)
        B_records[s, :, pos] = B[rows[keep]].to(B_records.dtype)
    cursor[slots] = torch.where(flush, 0, w + 1).to(cursor.dtype)
    return out
