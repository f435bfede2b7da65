"""Pure-PyTorch speculative decoding with ReplaySSM (verify T tokens, commit the accepted ones)
and the conventional snapshot baseline.

This module is the oracle of the speculative tests and the CPU implementation of the
``replayssm::*_verify`` / ``*_commit`` ops. Dtype rules as in :mod:`.mamba2` (float64 in,
float64 throughout; otherwise fp32 compute, rounded where the kernels round).

Speculative mode uses the standard-decode cache unchanged (record position j holds the j-th
token after the checkpoint; the cursor w counts *committed* records) plus a ``pending`` count.
A verify step of a row with w committed records and n ≤ T window tokens:

* **non-flush** (``w + n ≤ L - 1``): the outputs of the n tokens come from the checkpoint, the w
  history records and the window tokens before them; the window's records are written at
  positions w .. w+n-1 (uncommitted). Checkpoint and cursor are untouched.
* **flush** (``w + n > L - 1``, decided per row on the device): the w history records are folded
  into the checkpoint (rounded to its dtype once, here); the outputs come from the new
  checkpoint (unrounded) and the window; the window's records are written at positions
  0 .. n-1. The cursor becomes 0 (Mamba-2) or is flagged, w + :data:`VERIFY_FLUSHED` (GDN/KDA:
  their verify runs in several launches and none of them before the commit may move a cursor,
  docs/kernel-notes.md, session 29).

Either way ``pending := n``. A commit with a accepted tokens (1 ≤ a ≤ n: the bonus/first token
and the accepted drafts) sets ``cursor := c + a`` and ``pending := 0``, with c the cursor, or 0
if it is flagged; rejected records lie past the cursor and are overwritten later: rollback is a
cursor move. Position L-1 is never written and between commits the cursor is in [0, L), so
standard decode (``mamba2_replay_step``: flush at
cursor == L-1) runs on the same cache between commits; T = 1 verify flushes at the same cursor.
With a buffer of L = B + T records and full windows, a row flushes exactly when its committed
history has reached B records.
"""

from __future__ import annotations

from typing import Optional

import torch

from torch import Tensor

from .gated_delta import _channels, gated_delta_replay_fold, gated_delta_replay_weights, prepare_qk
from .mamba2 import (
    _skip_and_gate,
    compute_dtype,
    expand_heads,
    held_records,
    live_rows,
    mask_records,
    mamba2_process_dt,
    mamba2_replay_fold,
    mamba2_replay_output,
    mamba2_replay_weights,
)
from .rounding import load_checkpoint_rows, store_checkpoint_rows

__all__ = [
    "spec_buffer_len",
    "verify_flushes",
    "mamba2_replay_verify_ref",
    "gated_delta_replay_verify_ref",
    "replay_commit_ref",
    "mamba2_snapshot_verify_ref",
    "gated_delta_snapshot_verify_ref",
    "snapshot_commit_ref",
]


def spec_buffer_len(history: int, window: int) -> int:
    """Records per slot for speculative decoding: history B plus window T (B ≥ T ≥ 1)."""
    for name, v in (("history", history), ("window", window)):
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ValueError(f"spec_buffer_len: {name} is {v!r}; expected a positive int")
    if history < window:
        raise ValueError(f"spec_buffer_len: history B = {history} < window T = {window}; expected B >= T")
    return history + window


VERIFY_FLUSHED = 1 << 30
"""Cursor flag of a GDN/KDA row whose verify flushed, until its commit (cursor = w + flag, w its
committed records before the verify, all folded into the checkpoint); the kernels'
``kernels.common.VERIFY_FLUSHED`` has the same value."""


def committed_cursor(cursor: Tensor) -> Tensor:
    """The committed records a cursor stands for: itself, or 0 for one a flushing verify
    flagged (its records are all in the checkpoint until the commit starts it from 0)."""
    return torch.where(cursor >= VERIFY_FLUSHED, 0, cursor)


def verify_flushes(cursor: Tensor, num_tokens: Tensor, L: int) -> Tensor:
    """The flush rule of a verify step: a row flushes when its window does not fit below
    position L-1 after its committed records (``cursor + num_tokens > L - 1``)."""
    return cursor + num_tokens > L - 1


def _live_rows(slot_ids: Tensor, num_tokens: Optional[Tensor], T: int):
    """(rows, slots int64, n int64) of the live rows (slot id ≥ 0)."""
    rows, slots = live_rows(slot_ids)
    n = torch.full_like(rows, T) if num_tokens is None else num_tokens[rows].long()
    return rows, slots, n


def mamba2_replay_verify_ref(
    checkpoint: Tensor,
    x_records: Tensor,
    dt_records: Tensor,
    B_records: Tensor,
    cursor: Tensor,
    pending: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One Mamba-2 verify step of T tokens per row; mutates the cache as the Triton kernel does
    (``checkpoint_scale``, ``rounding_seed``: an fp8 checkpoint's row scales and a flush's
    stochastic rounding, as in :func:`.mamba2.mamba2_replay_step_ref`).

    Args:
        checkpoint, x_records, dt_records, B_records, cursor: the cache tensors of
            :func:`.mamba2.mamba2_replay_step_ref`; cursor = committed records, in [0, L).
        pending: [slot] int32, set to the row's token count.
        x, z: [batch, T, nheads, head_dim].   dt: [batch, T, nheads] raw.   A: [nheads].
        B, C: [batch, T, ngroups, d_state].   D, dt_bias, dt_softplus: as in standard decode.
        slot_ids: [batch] int; < 0 marks a padding row (nothing read or written).
        num_tokens: [batch] int in [1, T], tokens of each row (None: all T).
        out: like x; written for the first num_tokens tokens of live rows only.
    Returns:
        ``out``: token s of a row is the output of the s-th window token run serially from the
        committed state (checkpoint + committed records).
    """
    batch, T, nheads, head_dim = x.shape
    rows, slots, n = _live_rows(slot_ids, num_tokens, T)
    if rows.numel() == 0:
        return out
    L = x_records.shape[2]
    cd = compute_dtype(checkpoint, x)
    w = cursor[slots].long()
    flush = verify_flushes(w, n, L)
    o_l = torch.arange(L, device=w.device)
    o_t = torch.arange(T, device=w.device)

    # History: the committed records; window: the step inputs, [rows, nheads, T, ...].
    held = o_l[None, :] < w[:, None]
    x_hist = mask_records(x_records[slots], held, cd)
    B_hist = expand_heads(mask_records(B_records[slots], held, cd), nheads)
    dt_hist = dt_records[slots].to(cd)
    x_win = x[rows].to(cd).transpose(1, 2)
    dt_win = mamba2_process_dt(dt[rows], dt_bias, dt_softplus, cd).transpose(1, 2)
    B_win = expand_heads(B[rows].to(cd).transpose(1, 2), nheads)
    C_win = expand_heads(C[rows].to(cd).transpose(1, 2), nheads)

    # Flush rows fold their history first: the base state of their window is the new checkpoint.
    base = load_checkpoint_rows(checkpoint, checkpoint_scale, slots, cd)
    if bool(flush.any()):
        f = torch.nonzero(flush).flatten()
        zero = torch.zeros(f.numel(), nheads, dtype=cd, device=base.device)
        decay, weights = mamba2_replay_weights(A, dt_hist[f], held[f], zero)
        S1 = mamba2_replay_fold(
            base[f],
            x_hist[f],
            B_hist[f],
            decay,
            weights,
            torch.zeros_like(x_win[f, :, 0]),
            zero,
            torch.zeros_like(B_win[f, :, 0]),
        )
        store_checkpoint_rows(checkpoint, checkpoint_scale, slots[f], S1, rounding_seed, dt_hist[f])
        base[f] = S1

    # Token s sees the visible history (none after a flush) and the window tokens before it.
    visible = held & ~flush[:, None]
    x_seq = torch.cat([x_hist, x_win], dim=2)
    B_seq = torch.cat([B_hist, B_win], dim=2)
    dt_seq = torch.cat([dt_hist, dt_win], dim=2)
    for s in range(T):
        valid = torch.cat([visible, (o_t[None, :] < s).expand(rows.numel(), T)], dim=1)
        decay, weights = mamba2_replay_weights(A, dt_seq, valid, dt_win[:, :, s])
        keep = valid[:, None, :, None]
        y = mamba2_replay_output(
            base,
            torch.where(keep, x_seq, 0.0),
            torch.where(keep, B_seq, 0.0),
            decay,
            weights,
            x_win[:, :, s],
            dt_win[:, :, s],
            B_win[:, :, s],
            C_win[:, :, s],
        )
        y = _skip_and_gate(y, x_win[:, :, s], D, None if z is None else z[rows, s])
        live = s < n
        out[rows[live], s] = y[live].to(out.dtype)

    # The window's records, uncommitted: after the history, or from position 0 after a flush.
    start = torch.where(flush, 0, w)
    for s in range(T):
        live = s < n
        sl, pos, r = slots[live], start[live] + s, rows[live]
        x_records[sl, :, pos] = x[r, s].to(x_records.dtype)
        dt_records[sl, :, pos] = dt_win[live, :, s].to(dt_records.dtype)
        B_records[sl, :, pos] = B[r, s].to(B_records.dtype)
    cursor[slots] = start.to(cursor.dtype)
    pending[slots] = n.to(pending.dtype)
    return out


def _gated_delta_window(
    q: Tensor, k: Tensor, g: Tensor, rows: Tensor, v_heads: int, scale: float, use_qk_l2norm: bool, cd: torch.dtype
):
    """Window inputs per value head: (q̂, k̂ [rows, v_heads, T, head_k_dim], k̂ per key head
    [rows, T, k_heads, head_k_dim], g [rows, v_heads, T, 1 | head_k_dim])."""
    qn, kn = prepare_qk(q[rows], k[rows], scale, use_qk_l2norm, cd)
    qh = expand_heads(qn.transpose(1, 2), v_heads)
    kh = expand_heads(kn.transpose(1, 2), v_heads)
    return qh, kh, kn, _channels(g[rows].to(cd), g.dim() == 4).transpose(1, 2)


def _gated_delta_serial(S: Tensor, qh: Tensor, kh: Tensor, v: Tensor, gw: Tensor, beta: Tensor):
    """The conventional recurrence over the window from states S [rows, v_heads, head_v_dim,
    head_k_dim]; yields (s, S_s, d_s, o_s) per token (compute dtype, unrounded)."""
    for s in range(qh.shape[2]):
        S = S * torch.exp(gw[:, :, s])[:, :, None, :]
        d = beta[:, s, :, None] * (v[:, s] - torch.einsum("rhvk,rhk->rhv", S, kh[:, :, s]))
        S = S + d[..., :, None] * kh[:, :, s, None, :]
        yield s, S, d, torch.einsum("rhvk,rhk->rhv", S, qh[:, :, s])


def gated_delta_replay_verify_ref(
    checkpoint: Tensor,
    d_records: Tensor,
    k_records: Tensor,
    g_records: Tensor,
    cursor: Tensor,
    pending: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One gated delta-rule (GDN, KDA) verify step of T tokens per row; mutates the cache as
    the Triton kernel does (the flush rule and record placement of the module docstring;
    ``checkpoint_scale``, ``rounding_seed``: as in :func:`mamba2_replay_verify_ref`).

    Args:
        checkpoint, d_records, k_records, g_records, cursor: the cache tensors of
            :func:`.gated_delta.gated_delta_replay_step_ref`; cursor = committed records.
        pending: [slot] int32, set to the row's token count.
        q, k: [batch, T, k_heads, head_k_dim] raw.   v: [batch, T, v_heads, head_v_dim].
        g: [batch, T, v_heads] (GDN) or [batch, T, v_heads, head_k_dim] (KDA) log-decays.
        beta: [batch, T, v_heads].   slot_ids, num_tokens: as in :func:`mamba2_replay_verify_ref`.
        scale, use_qk_l2norm: as in standard decode.   out: like v, first num_tokens written.
    Returns:
        ``out``. The committed state S_c = S0 Diag(exp(Σ g)) + Σ_j d_j (exp(Γ_j) ⊙ k_j)ᵀ is
        formed from the records, the window runs serially from it, and its (d, k̂, g) become
        the window's records.
    """
    batch, T, v_heads, head_v_dim = v.shape
    rows, slots, n = _live_rows(slot_ids, num_tokens, T)
    if rows.numel() == 0:
        return out
    L = d_records.shape[2]
    per_channel = g.dim() == 4
    cd = compute_dtype(checkpoint, v)
    w = cursor[slots].long()
    flush = verify_flushes(w, n, L)
    held = held_records(w, L)

    zero = torch.zeros(rows.numel(), v_heads, 1, dtype=cd, device=w.device)
    decay, weights = gated_delta_replay_weights(_channels(g_records[slots], per_channel), held, zero)
    d_hist = mask_records(d_records[slots], held, cd)
    k_hist = expand_heads(mask_records(k_records[slots], held, cd), v_heads)
    S_c = gated_delta_replay_fold(
        load_checkpoint_rows(checkpoint, checkpoint_scale, slots, cd),
        d_hist,
        k_hist,
        decay,
        weights,
        torch.zeros_like(d_hist[:, :, 0]),
        torch.zeros_like(k_hist[:, :, 0]),
    )
    if bool(flush.any()):
        f = torch.nonzero(flush).flatten()
        store_checkpoint_rows(checkpoint, checkpoint_scale, slots[f], S_c[f], rounding_seed, beta[rows[f]])

    qh, kh, kn, gw = _gated_delta_window(q, k, g, rows, v_heads, scale, use_qk_l2norm, cd)
    start = torch.where(flush, 0, w)
    for s, _, d, o in _gated_delta_serial(S_c, qh, kh, v[rows].to(cd), gw, beta[rows].to(cd)):
        live = s < n
        sl, pos = slots[live], start[live] + s
        out[rows[live], s] = o[live].to(out.dtype)
        d_records[sl, :, pos] = d[live].to(d_records.dtype)
        k_records[sl, :, pos] = kn[live, s].to(k_records.dtype)
        g_records[sl, :, pos] = g[rows[live], s].to(g_records.dtype)
    cursor[slots] = torch.where(flush, w + VERIFY_FLUSHED, w).to(cursor.dtype)
    pending[slots] = n.to(pending.dtype)
    return out


def replay_commit_ref(cursor: Tensor, pending: Tensor, slot_ids: Tensor, num_accepted: Tensor) -> None:
    """Commit a verify step: ``cursor := c + num_accepted`` (c the cursor, or 0 if a flushing
    verify flagged it, >= VERIFY_FLUSHED), ``pending := 0`` for live rows.

    Args:
        cursor, pending: [slot] int32 (any replay cache's).
        slot_ids: [batch] int; < 0 marks a padding row.
        num_accepted: [batch] int in [1, pending[slot]]: tokens accepted, bonus token included.
    """
    live = slot_ids >= 0
    slots = slot_ids[live].long()
    cursor[slots] = committed_cursor(cursor[slots]) + num_accepted[live].to(cursor.dtype)
    pending[slots] = 0


def mamba2_snapshot_verify_ref(
    state: Tensor,
    snapshots: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Tensor,
) -> Tensor:
    """Conventional verify (the baseline): run the window serially from ``state`` and store the
    state after every token.

    Args:
        state: [slot, nheads, head_dim, d_state], only read.
        snapshots: [slot, T, nheads, head_dim, d_state], same dtype; snapshot s of a live row
            := the state after its token s (rounded to the dtype), for s < num_tokens.
        x ... out: as in :func:`mamba2_replay_verify_ref`.
    Returns:
        ``out``.
    """
    batch, T, nheads, head_dim = x.shape
    rows, slots, n = _live_rows(slot_ids, num_tokens, T)
    if rows.numel() == 0:
        return out
    cd = compute_dtype(state, x)
    S = state[slots].to(cd)
    dtp = mamba2_process_dt(dt[rows], dt_bias, dt_softplus, cd)
    Bh = expand_heads(B[rows].to(cd).transpose(1, 2), nheads)
    Ch = expand_heads(C[rows].to(cd).transpose(1, 2), nheads)
    for s in range(T):
        xs, ds = x[rows, s].to(cd), dtp[:, s]
        S = (
            torch.exp(A.to(cd)[None, :] * ds)[..., None, None] * S
            + ds[..., None, None] * xs[..., :, None] * Bh[:, :, s, None, :]
        )
        y = _skip_and_gate(torch.einsum("rhpn,rhn->rhp", S, Ch[:, :, s]), xs, D, None if z is None else z[rows, s])
        live = s < n
        out[rows[live], s] = y[live].to(out.dtype)
        snapshots[slots[live], s] = S[live].to(snapshots.dtype)
    return out


def gated_delta_snapshot_verify_ref(
    state: Tensor,
    snapshots: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
) -> Tensor:
    """Conventional gated delta-rule verify (the baseline): the window serially from ``state``
    (read only), the state after token s stored (rounded) as snapshot s for s < num_tokens.
    Arguments as in :func:`gated_delta_replay_verify_ref` and :func:`mamba2_snapshot_verify_ref`."""
    batch, T, v_heads, head_v_dim = v.shape
    rows, slots, n = _live_rows(slot_ids, num_tokens, T)
    if rows.numel() == 0:
        return out
    cd = compute_dtype(state, v)
    qh, kh, _, gw = _gated_delta_window(q, k, g, rows, v_heads, scale, use_qk_l2norm, cd)
    for s, S, _, o in _gated_delta_serial(state[slots].to(cd), qh, kh, v[rows].to(cd), gw, beta[rows].to(cd)):
        live = s < n
        out[rows[live], s] = o[live].to(out.dtype)
        snapshots[slots[live], s] = S[live].to(snapshots.dtype)
    return out


def snapshot_commit_ref(state: Tensor, snapshots: Tensor, slot_ids: Tensor, num_accepted: Tensor) -> None:
    """Commit the baseline: ``state[slot] := snapshots[slot, num_accepted - 1]`` for live rows."""
    live = slot_ids >= 0
    slots = slot_ids[live].long()
    state[slots] = snapshots[slots, num_accepted[live].long() - 1]
