"""Pure-PyTorch gated delta-rule decode (GDN and KDA): the conventional recurrence and the
ReplaySSM step.

This module is the oracle of every test and the CPU implementation of the
``replayssm::gated_delta_*`` ops. It runs in any floating dtype: with float64 tensors everything
is computed in float64; otherwise it computes in fp32 and rounds to the storage dtype exactly
where the Triton kernels do (the state after every conventional step, the records when they are
appended, the checkpoint at a flush).

Notation (per sequence, per value head h reading key head h // (v_heads / k_heads)); the state
S is [head_v_dim, head_k_dim] and matrices act on the right:

    q, k     <- q / sqrt(Σq² + 1e-6), k / sqrt(Σk² + 1e-6)    when use_qk_l2norm
    q        <- scale * q                                     (scale defaults to head_k_dim^-½)
    S'_{t-1} = S_{t-1} Diag(exp(g_t))                         decay: g_t ≤ 0, a scalar per value
                                                              head (GDN) or a vector over the
                                                              key channels (KDA)
    d_t      = β_t (v_t - S'_{t-1} k_t)                       the corrected update
    S_t      = S'_{t-1} + d_t k_tᵀ
    o_t      = S_t q_t = S'_{t-1} q_t + d_t (k_t · q_t)

ReplaySSM keeps a checkpoint S0 and the records (d_j, k_j, g_j), j < w, of the tokens since S0
(w = cursor). Because d (not v) is recorded, the decayed history is a plain sum. With the
current token's decay g_w and the exclusive suffix sums ``Γ_j = Σ_{j<i≤w} g_i`` (Γ_{-1} decays
the checkpoint), per key channel for KDA:

    S'_{w-1} = S0 Diag(exp(Γ_{-1})) + Σ_{j<w} d_j (exp(Γ_j) ⊙ k_j)ᵀ
    S'_{w-1} q = S0 (exp(Γ_{-1}) ⊙ q) + Σ_{j<w} ((exp(Γ_j) ⊙ k_j) · q) d_j      (same for k)

so a non-flush step reads S0 once, forms no state, and appends (d_w, k_w, g_w). A flush
(cursor == L-1) forms S_w = S'_{w-1} + d_w k_wᵀ, stores it as the checkpoint and resets the
cursor to 0.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from torch import Tensor

from .mamba2 import compute_dtype, expand_heads, held_records, live_rows, mask_records
from .rounding import load_checkpoint_rows, store_checkpoint_rows

__all__ = [
    "L2NORM_EPS",
    "delta_rule_gate",
    "prepare_qk",
    "gated_delta_decode_step_ref",
    "gated_delta_replay_weights",
    "gated_delta_replay_project",
    "gated_delta_replay_fold",
    "gated_delta_records_state",
    "gated_delta_replay_step_ref",
]

L2NORM_EPS = 1e-6


def delta_rule_gate(a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Log-decay g and β from a layer's raw gate projections (Qwen3-Next GDN, Kimi Linear KDA).

    g = -exp(A_log) * softplus(a + dt_bias) (softplus threshold 20), β = sigmoid(b), in fp32
    (fp64 for fp64 inputs).

    Args:
        a: [batch, v_heads] (GDN) or [batch, v_heads, head_k_dim] (KDA) raw decay projection.
        b: [batch, v_heads] raw β projection.
        A_log: [v_heads].
        dt_bias: [v_heads] (GDN); [v_heads, head_k_dim] or [v_heads * head_k_dim] (KDA).
    Returns:
        (g like ``a``, beta [batch, v_heads]).
    """
    cd = compute_dtype(a, A_log)
    a = a.to(cd)
    if dt_bias is not None:
        a = a + dt_bias.to(cd).reshape(a.shape[1:])
    A = torch.exp(A_log.to(cd))
    A = A[:, None] if a.dim() == 3 else A
    return -A * F.softplus(a, beta=1.0, threshold=20.0), torch.sigmoid(b.to(cd))


def prepare_qk(q: Tensor, k: Tensor, scale: float, use_qk_l2norm: bool, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """q, k [rows, k_heads, head_k_dim] -> (scale * normalised q, normalised k) in ``dtype``."""
    q, k = q.to(dtype), k.to(dtype)
    if use_qk_l2norm:
        q = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + L2NORM_EPS)
        k = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + L2NORM_EPS)
    return q * scale, k


def _channels(g: Tensor, per_channel: bool) -> Tensor:
    """Log-decays with a trailing channel axis: size 1 for GDN (broadcast over head_k_dim)."""
    return g if per_channel else g[..., None]


def gated_delta_decode_step_ref(
    state: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
) -> Tensor:
    """Conventional gated delta-rule decode step: read, update and store the whole state.

    Args:
        state: [slot, v_heads, head_v_dim, head_k_dim], mutated in place (rounded to its dtype).
        q, k: [batch, k_heads, head_k_dim].   v: [batch, v_heads, head_v_dim].
        g: [batch, v_heads] (GDN) or [batch, v_heads, head_k_dim] (KDA) log-decay.
        beta: [batch, v_heads].   slot_ids: [batch] int; < 0 marks a padding row.
        scale: applied to q after the normalisation.   out: like v, live rows written.
    Returns:
        ``out``.
    """
    rows, slots = live_rows(slot_ids)
    if rows.numel() == 0:
        return out
    cd = compute_dtype(state, v)
    hv = v.shape[1]
    qn, kn = prepare_qk(q[rows], k[rows], scale, use_qk_l2norm, cd)
    qh, kh = expand_heads(qn, hv), expand_heads(kn, hv)
    decay = torch.exp(_channels(g[rows].to(cd), g.dim() == 3))  # [rows, hv, 1|K]
    S = state[slots].to(cd) * decay[:, :, None, :]
    d = beta[rows].to(cd)[..., None] * (v[rows].to(cd) - torch.einsum("rhvk,rhk->rhv", S, kh))
    S = S + d[..., :, None] * kh[..., None, :]
    state[slots] = S.to(state.dtype)
    out[rows] = torch.einsum("rhvk,rhk->rhv", S, qh).to(out.dtype)
    return out


def gated_delta_replay_weights(g_records: Tensor, valid: Tensor, g_cur: Tensor) -> tuple[Tensor, Tensor]:
    """Decay of the checkpoint and of each record for the token after the records.

    Args:
        g_records: [rows, v_heads, L, C] log-decays of the records (C = 1 for GDN, head_k_dim
            for KDA).   valid: [rows, L] bool, True where a record is held (j < cursor).
        g_cur: [rows, v_heads, C] log-decay of the current token.
    Returns:
        (ckpt_decay [rows, v_heads, C] = exp(Σ_{valid i} g_i + g_cur),
         weights [rows, v_heads, L, C] = exp(Σ_{valid i>j} g_i + g_cur), zero where not valid).
    """
    gr = torch.where(valid[:, None, :, None], g_records.to(g_cur.dtype), 0.0)
    # An exclusive reverse cumsum summed exactly (no subtraction of prefix sums).
    L = gr.shape[2]
    later = torch.einsum("rhic,ji->rhjc", gr, torch.triu(torch.ones(L, L, dtype=gr.dtype, device=gr.device), 1))
    weights = torch.where(valid[:, None, :, None], torch.exp(later + g_cur[:, :, None, :]), 0.0)
    return torch.exp(gr.sum(2) + g_cur), weights


def gated_delta_replay_project(
    S0: Tensor, d_rec: Tensor, k_rec: Tensor, ckpt_decay: Tensor, weights: Tensor, u: Tensor
) -> Tensor:
    """S'_{w-1} u, the decayed history state applied to a key-space vector, without forming it.

    Shapes: S0 [rows, v_heads, head_v_dim, head_k_dim]; d_rec [rows, v_heads, L, head_v_dim];
    k_rec [rows, v_heads, L, head_k_dim] (per value head, zero where invalid); ckpt_decay
    [rows, v_heads, C]; weights [rows, v_heads, L, C]; u [rows, v_heads, head_k_dim].
    Returns [rows, v_heads, head_v_dim].
    """
    hist = torch.einsum("rhvk,rhk->rhv", S0, ckpt_decay * u)
    scores = torch.einsum("rhlk,rhk->rhl", weights * k_rec, u)
    return hist + torch.einsum("rhl,rhlv->rhv", scores, d_rec)


def gated_delta_replay_fold(
    S0: Tensor, d_rec: Tensor, k_rec: Tensor, ckpt_decay: Tensor, weights: Tensor, d_cur: Tensor, k_cur: Tensor
) -> Tensor:
    """The state after the current token, S'_{w-1} + d_w k_wᵀ (shapes as above; d_cur
    [rows, v_heads, head_v_dim], k_cur [rows, v_heads, head_k_dim]). Compute dtype, not rounded."""
    S = S0 * ckpt_decay[:, :, None, :]
    S = S + torch.einsum("rhlv,rhlk->rhvk", d_rec, weights * k_rec)
    return S + d_cur[..., :, None] * k_cur[..., None, :]


def gated_delta_records_state(
    checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor, cursor: Tensor
) -> Tensor:
    """The state after the last recorded token: checkpoint decayed plus the held records.

    S = S0 Diag(exp(Σ_{j<w} g_j)) + Σ_{j<w} d_j (exp(Σ_{j<i<w} g_i) ⊙ k_j)ᵀ, w = cursor (no
    current token; cursor 0 gives S0). Reads only.

    Args (the rows of the slots wanted, already gathered):
        checkpoint: [rows, v_heads, head_v_dim, head_k_dim].
        d_records: [rows, v_heads, L, head_v_dim].   k_records: [rows, k_heads, L, head_k_dim].
        g_records: [rows, v_heads, L] (GDN) or [rows, v_heads, L, head_k_dim] (KDA) log-decays.
        cursor: [rows] int, records held per row.
    Returns:
        [rows, v_heads, head_v_dim, head_k_dim] in fp32 (fp64 for a fp64 checkpoint).
    """
    cd = compute_dtype(checkpoint)
    rows, v_heads, head_v_dim, head_k_dim = checkpoint.shape
    L = d_records.shape[2]
    valid = held_records(cursor.long(), L)
    g_rec = _channels(g_records, g_records.dim() == 4)
    no_g = torch.zeros(rows, v_heads, g_rec.shape[-1], dtype=cd, device=checkpoint.device)
    ckpt_decay, weights = gated_delta_replay_weights(g_rec, valid, no_g)
    d_rec = mask_records(d_records, valid, cd)
    k_rec = expand_heads(mask_records(k_records, valid, cd), v_heads)
    no_d = torch.zeros(rows, v_heads, head_v_dim, dtype=cd, device=checkpoint.device)
    no_k = torch.zeros(rows, v_heads, head_k_dim, dtype=cd, device=checkpoint.device)
    return gated_delta_replay_fold(checkpoint.to(cd), d_rec, k_rec, ckpt_decay, weights, no_d, no_k)


def gated_delta_replay_step_ref(
    checkpoint: Tensor,
    d_records: Tensor,
    k_records: Tensor,
    g_records: Tensor,
    cursor: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One ReplaySSM decode step; mutates the cache tensors exactly as the Triton kernel does.

    Args:
        checkpoint: [slot, v_heads, head_v_dim, head_k_dim]; written only for flush rows.
        checkpoint_scale, rounding_seed: an fp8 checkpoint's row scales [slot, v_heads,
            head_v_dim] and a flush's stochastic rounding, as in
            :func:`.mamba2.mamba2_replay_step_ref` (the draws seeded from the current token's g).
        d_records: [slot, v_heads, L, head_v_dim].   k_records: [slot, k_heads, L, head_k_dim].
        g_records: [slot, v_heads, L] (GDN) or [slot, v_heads, L, head_k_dim] (KDA).
        cursor: [slot] int32 in [0, L).
        q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out: as in
        :func:`gated_delta_decode_step_ref`.
    Effect per live row with cursor w: w < L-1 appends (d, k, g) at position w and sets the
    cursor to w+1; w == L-1 stores the folded state as the checkpoint and sets the cursor to 0.
    Padding rows (slot id < 0) read and write nothing; their ``out`` rows are left as they were.
    Returns:
        ``out``.
    """
    rows, slots = live_rows(slot_ids)
    if rows.numel() == 0:
        return out
    L = d_records.shape[2]
    hv = v.shape[1]
    per_channel = g.dim() == 3
    cd = compute_dtype(checkpoint, v)
    w = cursor[slots].long()
    valid = held_records(w, L)
    qn, kn = prepare_qk(q[rows], k[rows], scale, use_qk_l2norm, cd)
    qh, kh = expand_heads(qn, hv), expand_heads(kn, hv)
    g_cur = _channels(g[rows].to(cd), per_channel)
    ckpt_decay, weights = gated_delta_replay_weights(_channels(g_records[slots], per_channel), valid, g_cur)
    d_rec = mask_records(d_records[slots], valid, cd)
    k_rec = expand_heads(mask_records(k_records[slots], valid, cd), hv)
    S0 = load_checkpoint_rows(checkpoint, checkpoint_scale, slots, cd)
    hist_k = gated_delta_replay_project(S0, d_rec, k_rec, ckpt_decay, weights, kh)
    hist_q = gated_delta_replay_project(S0, d_rec, k_rec, ckpt_decay, weights, qh)
    d_cur = beta[rows].to(cd)[..., None] * (v[rows].to(cd) - hist_k)
    o = hist_q + d_cur * (kh * qh).sum(-1, keepdim=True)
    out[rows] = o.to(out.dtype)

    flush = w == L - 1
    if bool(flush.any()):
        f = torch.nonzero(flush).flatten()
        S = gated_delta_replay_fold(S0[f], d_rec[f], k_rec[f], ckpt_decay[f], weights[f], d_cur[f], kh[f])
        store_checkpoint_rows(checkpoint, checkpoint_scale, slots[f], S, rounding_seed, g_cur[f])
    keep = torch.nonzero(~flush).flatten()
    if keep.numel():
        s, pos = slots[keep], w[keep]
        d_records[s, :, pos] = d_cur[keep].to(d_records.dtype)
        k_records[s, :, pos] = kn[keep].to(k_records.dtype)
        g_records[s, :, pos] = g[rows[keep]].to(g_records.dtype)
    cursor[slots] = torch.where(flush, 0, w + 1).to(cursor.dtype)
    return out
