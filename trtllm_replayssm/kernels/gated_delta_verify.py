"""ReplaySSM gated delta-rule (GDN, KDA) speculative verify: the outputs of T window tokens per
row from checkpoint + committed records; no state is stored except at a flush.

Contract: :func:`trtllm_replayssm.reference.spec.gated_delta_replay_verify_ref` (a row with w
committed records and n tokens flushes when ``w + n > L - 1``). Notation per value head: α_s =
exp(g_s) (a scalar for GDN, a [head_k_dim] vector for KDA), q̂, k̂ the normalised window
queries and keys, S_c the committed state, c_s = Π_{i≤s} α_i.

Per program, once (the window solve folded into the tile products' operands):

* Window: A[j, s] = (Π_{j<i≤s} α_i ⊙ k̂_j) · k̂_s (j < s), Q[j, s] likewise with q̂_s (j ≤ s),
  from a running product of decayed keys (no differences of cumulative sums); W =
  (I + diag(β) Aᵀ)^{-1} by forward substitution. With P^k_s = S_c (c_s ⊙ k̂_s), P^q_s =
  S_c (c_s ⊙ q̂_s), the window's d = W diag(β) (v - P^k) and o = P^q + Qᵀ d, i.e.
  Z = [d; o] = M2 (v - P^k) + [0; P^q] with M2 = [W diag(β); Qᵀ W diag(β)].
* P is linear in S_c, so with U the [2T, head_k_dim] stack of the decayed keys and queries,
  Z = U1 S_cᵀ + M2 v where U1 = [0; U_q] - M2 U_k. Non-flush rows never form S_c:
  S_c u = S0 (e^G ⊙ u) + Σ_j d_j ((e^{Γ_j} ⊙ k_j) · u) over the history, so
  Z = (U1 ⊙ e^G) S0ᵀ + G E with E the history d records followed by the window's v, and G's
  columns U1 · (e^{Γ_j} ⊙ k_j) (records newest first, decays as running products; for GDN
  where the launch fits two waves, ``gated_delta_verify_history_product``, as tile products of
  16-record chunks) and M2.

Per [BLOCK_V, head_k_dim] tile, Zᵀ = tile Uᵀ + Eᵀ Gᵀ: tensor-core products of TF32 parts
(``_window_products``, about fp32 accuracy), instead of 2T reductions over head_k_dim on
the CUDA cores. Zᵀ's columns go to the d records (w .. w+n-1) and the outputs.

* Flush rows: S_c is formed tile by tile (GDN: the committed records folded in as one tile
  product in TF32 parts, S_c = S0 Diag(e0) + (Dᵀ Diag(e)) K, the decays once per program; KDA:
  the records folded oldest first, the recurrence in fp32), stored over the checkpoint
  (rounded) and used unrounded as the tile (E then holds only the window's v); the records go
  to 0 .. n-1 and the cursor to w + VERIFY_FLUSHED (the commit starts the row from 0).

Three launches. The verify kernel twice (``FLUSH_ROWS``): each row class then has its own
register budget (the flush class needs ~60 more registers per thread) and its own tiling
(``gated_delta_verify_launch_config``, ``gated_delta_verify_flush_launch_config``: the latter
chosen for the rows expected to flush); grid (cdiv(head_v_dim, SPAN_V), v_heads, batch), tiles
of >= 16 rows (tensor-core operands). Neither launch moves a cursor, so both decide each row's
class alike whatever their order, and on a GPU the flush launch runs on a side stream beside
the non-flush one. (A flush row's programs flag its cursor, w + VERIFY_FLUSHED, each storing
the same value; a program of either launch reading the cursor takes the flag off first.) A
flush row's window overwrites history other programs of the row read in the same launch: d records are per (value head, head_v_dim row), so each program rewrites its
own after folding them. ``pending`` := n. Then the window's g (per value head) and k̂ (per key
head) records of every row at position 0 of a row that flushed (flagged), w of one that did
not, one program per (head, row) (``_window_key_gate_records_kernel``), on the side stream
after the flush launch (it reads the flags), beside the non-flush launch (which reads no k̂ or
g record at or past w). (The records were written by the flush row's last verify program, one
head after another: a chain of one load round trip per head, 45-66 µs of a batch-16 step,
session 27; then by a launch after both verify launches, whose last program of a flushed row
reset its cursor, session 28.)
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from torch import Tensor

from .common import (VERIFY_FLUSHED, LaunchConfig, resolve_kernel, store_checkpoint_tile, tf32_split, verify_flushes,
                     window_tokens)
from .gated_delta_common import (PROGRAMS_PER_SM, decay_columns, fold_records, gated_delta_launch_config,
                                 multiprocessor_count, record_decays)
from .gated_delta_verify_cuda import DeltaVerifyCudaConfig, delta_verify_cuda_unsupported, launch_delta_replay_verify_cuda

__all__ = ["launch_gated_delta_replay_verify", "gated_delta_verify_kernel", "gated_delta_verify_launch_config",
           "gated_delta_verify_flush_launch_config", "gated_delta_verify_history_product"]

_FOLD_UNROLL = tl.constexpr(4)  # records per unrolled step of the loops over the history


def gated_delta_verify_launch_config(head_v_dim: int, head_k_dim: int, heads: int,
                                     state_dtype: torch.dtype, *, multiprocessors: int) -> LaunchConfig:
    """The non-flush launch's configuration for ``heads`` = batch * v_heads: 16-row tiles, one
    warp, a program walking ``chunks`` tiles of its head in a loop pipelined 2 deep (one tile:
    not pipelined). A head's tiles are split over as many programs (spans, a power of two) as
    fit one wave of ~8 programs an SM, never more: every program pays the per-head work (the
    window solve, the history scores, ~2.7k of ~7.6k instructions at KDA T = 4), so programs
    past one wave cost more than the parallelism they add. ``head_k_dim`` and ``state_dtype``
    are not read (the launch rules share one signature). Timed on an H200 (T = 4, fp32
    checkpoint, ``benchmarks/spec_verify.py --sweep``, docs/kernel-notes.md, session 28): batch 16
    Kimi Linear KDA 2 spans 54.2 us against 4 spans (the standard replay rule's, which rounds
    up) 63.3 and one 59.6; Qwen3.5-122B GDN one span 67.0 against 2 spans 74.8; from batch 64
    one span for both, as before; depth 3 lost 6-7% at batch 256 (verify v3)."""
    tiles = triton.cdiv(head_v_dim, 16)
    one_wave = max(1, PROGRAMS_PER_SM * multiprocessors // heads)
    spans = min(tiles, 1 << (one_wave.bit_length() - 1))
    return LaunchConfig(block_head_dim=16, num_warps=1, chunks=triton.cdiv(tiles, spans),
                        num_stages=2 if spans < tiles else 1)


def gated_delta_verify_history_product(heads: int, T: int, *, multiprocessors: int, per_channel: bool) -> bool:
    """Whether the non-flush launch forms a row's history weights as tile products of 16-record
    chunks (``_history_weights``) instead of a loop a record at a time: for GDN (``per_channel``
    False) with T <= 4 where the launch's ``heads`` = batch * v_heads fit two waves of ~8
    programs an SM, so that the launch is a chain or two of dependent loads per program and the
    chunks' single loads shorten it. Timed on an H200 side by side with the loop (fp32
    checkpoint, ``spec_verify.py``, docs/kernel-notes.md, sessions 30 and 31), Qwen3.5-122B, µs,
    product against loop: T = 4 batch 8 / 16 / 32 (0.5 / 1 / 2 waves) 33.08 / 50.41 / 89.14
    against 37.00 / 54.01 / 93.40, batch 64 (4 waves) 160.17 against 157.26, batch 256 539.55
    against 522.40; T = 2 batch 32 73.78 against 74.06, batch 64 132.78 against 122.40. Kimi
    Linear KDA (the per-channel decays a second [16, head_k_dim] operand a chunk) 68.42 against
    45.32 at batch 16. T = 8: not timed; offline (Triton 3.8, sm_90a) the product spills there
    (264 B)."""
    return not per_channel and T <= 4 and heads <= 2 * PROGRAMS_PER_SM * multiprocessors


_FLUSH_ROW_SHARE = 4  # launch-time estimate of rows per flushing row (about 1 in 5 flush at T = 4, B = 16)


def gated_delta_verify_flush_launch_config(head_v_dim: int, head_k_dim: int, heads: int,
                                           state_dtype: torch.dtype, *, multiprocessors: int,
                                           per_channel: bool) -> LaunchConfig:
    """The flush launch's configuration: the standard replay rule for the heads of the rows
    expected to flush (``heads // _FLUSH_ROW_SHARE``; which rows flush is known only on the
    device), one warp a program. A KDA flush program folds its records into each of its tiles in
    turn, one dependent chain per tile, so fewer tiles a program shorten the launch while the
    GPU is not full. A GDN flush program folds them as one tile product a tile, with the decays
    and key records loaded once per program, so its tiles are short next to the per-head work
    every program repeats (the window solve): where one tile a program would take more than a
    wave of ~8 programs an SM, a program walks two, and from batch ~256 (where the replay rule
    gives a program all of a head's tiles) at most four. Timed on an H200 (T = 4, fp32
    checkpoint, ``spec_verify.py --sweep --flush-launch``, docs/kernel-notes.md, sessions 29
    and 30): Qwen3.5-122B batch 16 two tiles 54.9 us against one 56.4, batch 256 four tiles
    538.5 against two 587.0; Kimi Linear KDA batch 16 / 32 one tile 45.22 / 68.97 against two
    49.7 / 70.7; otherwise the standard rule was best or within 1%."""
    flush_heads = max(1, heads // _FLUSH_ROW_SHARE)
    cfg = gated_delta_launch_config("replay_step", head_v_dim, head_k_dim, flush_heads,
                                    state_dtype, multiprocessors=multiprocessors)
    tiles = triton.cdiv(head_v_dim, cfg.block_head_dim)
    chunks = cfg.chunks
    if not per_channel:
        if chunks == 1 and tiles > 1 and flush_heads * tiles > PROGRAMS_PER_SM * multiprocessors:
            chunks = 2
    # One warp (two lost 20-90%, session 30); the flush tile loop is not pipelined.
    return dataclasses.replace(cfg, chunks=chunks, num_warps=1, num_stages=1)


_FLUSH_STREAMS: dict = {}


def _flush_stream(device: torch.device) -> Optional["torch.cuda.Stream"]:
    """The side stream of ``device`` for the flush launch (None off CUDA, where the launches run
    one after the other). Made at the first call on the device, which is eager as every Triton
    kernel's first call must be (it compiles); a CUDA graph then captures the fork and join."""
    if device.type != "cuda":
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _FLUSH_STREAMS:
        _FLUSH_STREAMS[index] = torch.cuda.Stream(index)
    return _FLUSH_STREAMS[index]


@triton.jit
def _l2norm_rows(x):
    """Each row of a fp32 [rows, BLOCK_K] tile scaled to unit L2 norm (eps 1e-6): the window's
    q̂ and k̂, the same arithmetic in the verify kernel and the records launch."""
    return x * tl.rsqrt(tl.sum(x * x, axis=1) + 1e-6)[:, None]


@triton.jit
def _row(tile, sel):
    """Row ``sel`` (a one-hot mask over the first dimension) of a 2-D tile held in registers."""
    return tl.sum(tl.where(sel[:, None], tile, 0.0), axis=0)


@triton.jit
def _other_row_class(w, n, L: tl.constexpr, FLUSH_ROWS: tl.constexpr):
    """Whether a verify row (w committed records, n window tokens) belongs to the other launch:
    the kernel runs twice, for flush rows (w + n > L - 1) and for the others, in either order."""
    if FLUSH_ROWS:
        other = not verify_flushes(w, n, L)
    else:
        other = verify_flushes(w, n, L)
    return other


@triton.jit
def _window_base(w, FLUSH_ROWS: tl.constexpr):
    """Position of a verify row's first window record: 0 in a flush row (its history is folded
    into the checkpoint first), else after its w committed records."""
    if FLUSH_ROWS:
        base = 0
    else:
        base = w
    return base


@triton.jit
def _window_weights(rows, o_t, o_l, base, BLOCK_T: tl.constexpr):
    """[BLOCK_L, N] weights of ``_window_operand``'s columns: row base + t is row t of ``rows``
    ([BLOCK_T, N]: window token t's weights), every other row zero (history rows are added by
    the caller)."""
    out = tl.zeros([o_l.shape[0], rows.shape[1]], dtype=tl.float32)
    for t in tl.static_range(BLOCK_T):
        out += tl.where((o_l == base + t)[:, None], _row(rows, o_t == t)[None, :], 0.0)
    return out


@triton.jit
def _window_operand(p_rec, stride_rec_pos, p_win, stride_win_tok, o_l, o_r, m_r, base, n):
    """The per-row inputs of a speculative window's tile product, fp32 [BLOCK_R, BLOCK_L]
    (transposed): column j < base the history record at position j, columns base .. base+n-1
    the window's own inputs (the positions their records will take), zeros else. ``p_rec`` +
    j * stride_rec_pos + r addresses record j of row r (the d records); ``p_win`` +
    s * stride_win_tok + r the window token s (v)."""
    m_h = m_r[:, None] & (o_l < base)[None, :]
    m_w = m_r[:, None] & ((o_l >= base) & (o_l < base + n))[None, :]
    b_e = tl.load(p_rec + o_r[:, None] + o_l[None, :] * stride_rec_pos, mask=m_h, other=0.0).to(tl.float32)
    return b_e + tl.load(p_win + o_r[:, None] + (o_l - base)[None, :] * stride_win_tok, mask=m_w,
                         other=0.0).to(tl.float32)


@triton.jit
def _window_products(b_base, A_hi, A_lo, b_e, G_hi, G_lo, SPLIT_E: tl.constexpr):
    """base Aᵀ + E G, fp32 [rows, N], a speculative verify tile's outputs: the state tile
    ``b_base`` [rows, K] against the per-token vectors A [N, K], and the records and window
    inputs E [rows, BLOCK_L] (``_window_operand``) against their weights G [BLOCK_L, N].
    Tensor-core products of TF32 parts (``tf32_split``; A and G come split, once per program),
    about fp32 accuracy; E is split only when SPLIT_E (16-bit values are exact in TF32)."""
    s_hi, s_lo = tf32_split(b_base)
    z = tl.dot(s_hi, tl.trans(A_hi), input_precision="tf32")
    z = tl.dot(s_hi, tl.trans(A_lo), acc=z, input_precision="tf32")
    z = tl.dot(s_lo, tl.trans(A_hi), acc=z, input_precision="tf32")
    if SPLIT_E:
        e_hi, e_lo = tf32_split(b_e)
        z = tl.dot(e_lo, G_hi, acc=z, input_precision="tf32")
    else:
        e_hi = b_e
    z = tl.dot(e_hi, G_hi, acc=z, input_precision="tf32")
    return tl.dot(e_hi, G_lo, acc=z, input_precision="tf32")


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


_HISTORY_CHUNK = tl.constexpr(16)  # record positions per tile product of _history_weights


@triton.jit
def _history_weights(U1, p_kr, stride_kr_pos, p_gr, stride_gr_pos, o_k, m_k, w, BLOCK_L: tl.constexpr):
    """A non-flush GDN verify row's history weights and checkpoint decay, for U1 (fp32
    [BLOCK_U, BLOCK_K]): H [BLOCK_L, BLOCK_U] with H[j] = e_j (U1 · k̂_j) for the committed
    records j < w (zero rows from w), e_j = exp(Σ_{j<i<w} g_i), and e0 = exp(Σ_{i<w} g_i).

    The records go in chunks of 16 positions, newest first: one load of a chunk's keys and
    gates and one tile product (3xTF32, about fp32 accuracy) a chunk, where the loop form
    (``HISTORY_PRODUCT`` off) waits for a load round trip every four records. The decays are
    reverse cumulative sums within a chunk plus the sum of the later chunks (never a
    difference of prefix sums)."""
    u_hi, u_lo = tf32_split(U1)
    o_r = tl.arange(0, _HISTORY_CHUNK)
    o_c = tl.arange(0, BLOCK_L // _HISTORY_CHUNK)
    hist = tl.zeros([BLOCK_L // _HISTORY_CHUNK, _HISTORY_CHUNK, U1.shape[0]], dtype=tl.float32)
    later = tl.zeros([], dtype=tl.float32)  # Σ g over the positions after this chunk's (shifted by one)
    for i in tl.static_range(BLOCK_L // _HISTORY_CHUNK):
        c = BLOCK_L // _HISTORY_CHUNK - 1 - i
        o_j = c * _HISTORY_CHUNK + o_r
        m_j = o_j < w
        b_gn = tl.load(p_gr + (o_j + 1) * stride_gr_pos, mask=(o_j + 1) < w, other=0.0).to(tl.float32)
        b_k = tl.load(p_kr + o_j[:, None] * stride_kr_pos + o_k[None, :],
                      mask=m_j[:, None] & m_k[None, :], other=0.0).to(tl.float32)
        b_k = b_k * tl.exp(tl.cumsum(b_gn, axis=0, reverse=True) + later)[:, None]
        later += tl.sum(b_gn, axis=0)
        k_hi, k_lo = tf32_split(b_k)
        h = tl.dot(k_hi, tl.trans(u_lo), input_precision="tf32")
        h = tl.dot(k_lo, tl.trans(u_hi), acc=h, input_precision="tf32")
        h = tl.dot(k_hi, tl.trans(u_hi), acc=h, input_precision="tf32")
        hist = tl.where((o_c == c)[:, None, None], h[None, :, :], hist)
    g0 = tl.load(p_gr, mask=w > 0, other=0.0).to(tl.float32)
    return tl.reshape(hist, [BLOCK_L, U1.shape[0]]), tl.exp(later + g0)


@triton.jit
def _store_window_tile(z, p_dr, stride_dr_pos, p_o, stride_o_tok, o_u, o_v, m_v, base, n,
                       BLOCK_T: tl.constexpr, FLUSH: tl.constexpr):
    """Zᵀ's d columns to records base .. base+n-1, its o columns to out[:n]. A flush row's d
    records overwrite history rows this program has just read: FLUSH puts a barrier first."""
    s_o = o_u - BLOCK_T
    m_o = m_v[:, None] & ((s_o >= 0) & (s_o < n))[None, :]
    tl.store(p_o + o_v[:, None] + s_o[None, :] * stride_o_tok, z.to(p_o.dtype.element_ty), mask=m_o)
    if FLUSH:
        tl.debug_barrier()
    tl.store(p_dr + o_v[:, None] + (base + o_u)[None, :] * stride_dr_pos, z.to(p_dr.dtype.element_ty),
             mask=m_v[:, None] & (o_u < n)[None, :])


@triton.jit
def _window_key_gate_records_kernel(
    # k_records [slot, k_heads, L, head_k_dim]; g_records [slot, v_heads, L(, head_k_dim)]: fp32, KDA's fp16 beside 16-bit records
    kr_ptr, stride_kr_slot, stride_kr_head, stride_kr_pos,
    gr_ptr, stride_gr_slot, stride_gr_head, stride_gr_pos,
    # cursor [slot] int32
    cursor_ptr,
    # k [batch, T, k_heads, head_k_dim]; g [batch, T, v_heads(, head_k_dim)]
    k_ptr, stride_k_batch, stride_k_tok, stride_k_head,
    g_ptr, stride_g_batch, stride_g_tok, stride_g_head,
    slot_ids_ptr, num_tokens_ptr,
    T, k_heads, v_heads, head_k_dim,
    BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_NUM_TOKENS: tl.constexpr, PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr,
):
    """The third verify launch, grid (max(k_heads, v_heads), batch), after the flush launch:
    program (h, row) writes the window's k̂ records of key head h and g records of value head h
    at positions c .. c+n-1 (c = 0 for a row that flushed, its cursor flagged, >=
    VERIFY_FLUSHED; else c = w, its cursor). Moves no cursor. k̂ is normalised as the verify
    kernel normalises it (fp32, then the record dtype)."""
    h, i_b = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    n = window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS)
    w = tl.load(cursor_ptr + slot)
    flush = w >= VERIFY_FLUSHED
    pos = tl.where(flush, 0, w) + tl.arange(0, BLOCK_T)
    o_t = tl.arange(0, BLOCK_T)
    o_k = tl.arange(0, BLOCK_K)
    m_t = o_t < n
    m_tk = m_t[:, None] & (o_k < head_k_dim)[None, :]
    i_b = i_b.to(tl.int64)
    if h < k_heads:
        b_k = tl.load(k_ptr + i_b * stride_k_batch + h * stride_k_head + o_t[:, None] * stride_k_tok + o_k[None, :],
                      mask=m_tk, other=0.0).to(tl.float32)
        if USE_QK_L2NORM:
            b_k = _l2norm_rows(b_k)
        tl.store(kr_ptr + slot * stride_kr_slot + h * stride_kr_head + pos[:, None] * stride_kr_pos + o_k[None, :],
                 b_k.to(kr_ptr.dtype.element_ty), mask=m_tk)
    if h < v_heads:
        p_g = g_ptr + i_b * stride_g_batch + h * stride_g_head
        p_gr = gr_ptr + slot * stride_gr_slot + h * stride_gr_head
        if PER_CHANNEL:
            b_g = tl.load(p_g + o_t[:, None] * stride_g_tok + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
            tl.store(p_gr + pos[:, None] * stride_gr_pos + o_k[None, :], b_g, mask=m_tk)
        else:
            b_g = tl.load(p_g + o_t * stride_g_tok, mask=m_t, other=0.0).to(tl.float32)
            tl.store(p_gr + pos * stride_gr_pos, b_g, mask=m_t)


@triton.jit
def _gated_delta_replay_verify_kernel(
    # checkpoint [slot, v_heads, head_v_dim, head_k_dim], head_k_dim contiguous; with HAS_SCALE
    # (fp8) its row scales [slot, v_heads, head_v_dim] fp32, head_v_dim contiguous
    ckpt_ptr, stride_c_slot, stride_c_head, stride_c_row,
    scale_ptr, stride_sc_slot, stride_sc_head,
    # d_records [slot, v_heads, L, head_v_dim]; k_records [slot, k_heads, L, head_k_dim]
    dr_ptr, stride_dr_slot, stride_dr_head, stride_dr_pos,
    kr_ptr, stride_kr_slot, stride_kr_head, stride_kr_pos,
    # g_records [slot, v_heads, L] (GDN, fp32) or [slot, v_heads, L, head_k_dim] (KDA, fp16 or fp32)
    gr_ptr, stride_gr_slot, stride_gr_head, stride_gr_pos,
    # cursor, pending [slot] int32
    cursor_ptr, pending_ptr,
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
    T, head_v_dim, head_k_dim, v_per_k,
    sr_seed,  # with SR: the seed of the flush's stochastic rounding
    L: tl.constexpr, BLOCK_L: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_U: tl.constexpr,
    BLOCK_V: tl.constexpr, SPAN_V: tl.constexpr, BLOCK_K: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    HAS_NUM_TOKENS: tl.constexpr, PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr,
    SPLIT_E: tl.constexpr, FLUSH_ROWS: tl.constexpr, HISTORY_PRODUCT: tl.constexpr,
    HAS_SCALE: tl.constexpr, SR: tl.constexpr,
):
    i_s, i_h, i_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    n = window_tokens(num_tokens_ptr, i_b, T, HAS_NUM_TOKENS)
    w = tl.load(cursor_ptr + slot)
    w = tl.where(w >= VERIFY_FLUSHED, w - VERIFY_FLUSHED, w)  # flagged by a flush program of this verify
    if _other_row_class(w, n, L, FLUSH_ROWS):
        return
    if FLUSH_ROWS:
        tl.store(cursor_ptr + slot, w + VERIFY_FLUSHED)  # every program of the row: the same value
    i_b = i_b.to(tl.int64)
    i_hk = i_h // v_per_k
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
        b_q = _l2norm_rows(b_q)
        b_k = _l2norm_rows(b_k)
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

    # One pass over the window, in the stacked row space u of Z (rows u < BLOCK_T: token u's
    # key, rows BLOCK_T + s: token s's query; padding rows zero): kdec holds
    # (Π_{j<i≤s} α_i) ⊙ k̂_j in row j ≤ s; U row u the key or query of its token decayed by c_s;
    # AQ[j, u] the score of window key j with row u (A[j, s] or Q[j, s]).
    o_u = tl.arange(0, BLOCK_U)
    s_u = tl.where(o_u < BLOCK_T, o_u, o_u - BLOCK_T)
    kdec = tl.zeros([BLOCK_T, BLOCK_K], dtype=tl.float32)
    U = tl.zeros([BLOCK_U, BLOCK_K], dtype=tl.float32)
    AQ = tl.zeros([BLOCK_T, BLOCK_U], dtype=tl.float32)
    for s in tl.static_range(BLOCK_T):
        sel = o_t == s
        a_s = _gate_row(b_alpha, sel, PER_CHANNEL)
        k_s = _row(b_k, sel)
        q_s = _row(b_q, sel)
        kdec = tl.where(sel[:, None], k_s[None, :], decay_columns(kdec, a_s, PER_CHANNEL))
        cdec = cdec * a_s
        is_k, is_q = o_u == s, o_u == BLOCK_T + s
        AQ += tl.where(is_k[None, :], tl.sum(kdec * k_s[None, :], axis=1)[:, None], 0.0)
        AQ += tl.where(is_q[None, :], tl.sum(kdec * q_s[None, :], axis=1)[:, None], 0.0)
        U += tl.where(is_k[:, None], (cdec * k_s)[None, :], 0.0) + tl.where(is_q[:, None], (cdec * q_s)[None, :], 0.0)
    causal = tl.where((o_u < BLOCK_T)[None, :], o_t[:, None] < s_u[None, :],
                      (o_t[:, None] <= s_u[None, :]) & (s_u < n)[None, :])
    AQ = tl.where(causal & (o_u < 2 * BLOCK_T)[None, :], AQ, 0.0)
    # d = W R, R_s = β_s (v_s - P^k_s), with d_s = R_s - β_s Σ_{j<s} A[j, s] d_j: W by forward
    # substitution. Then o = P^q + Qᵀ d, so that Z = [d; o] = M2 (v - P^k) + [0; P^q] with
    # M2 = [W diag(β); Qᵀ W diag(β)], i.e. M2ᵀ = (W diag(β))ᵀ [I | Q] ([BLOCK_T, BLOCK_U]).
    W = tl.zeros([BLOCK_T, BLOCK_T], dtype=tl.float32)
    for s in tl.static_range(BLOCK_T):
        sel = o_t == s
        a_col = _col(AQ, o_u == s)
        beta_s = tl.sum(tl.where(sel, b_beta, 0.0), axis=0)
        W = tl.where(sel[:, None], (tl.where(sel, 1.0, 0.0) - beta_s * tl.sum(a_col[:, None] * W, axis=0))[None, :], W)
    IQ = tl.where((o_u < BLOCK_T)[None, :], tl.where(o_t[:, None] == o_u[None, :], 1.0, 0.0), AQ)
    M2T = tl.sum((W * b_beta[None, :])[:, :, None] * IQ[:, None, :], axis=0)
    # P = U S_cᵀ is linear in the state, so M2 folds into the operands once per program:
    # Z = U1 S_cᵀ + M2 v with U1 = [0; U_q] - M2 U_k.
    U1 = tl.where(((o_u >= BLOCK_T) & (o_u < 2 * BLOCK_T))[:, None], U, 0.0)
    for t in tl.static_range(BLOCK_T):
        U1 -= _row(M2T, o_t == t)[:, None] * _row(U, o_u == t)[None, :]

    p_c = ckpt_ptr + slot * stride_c_slot + i_h * stride_c_head
    p_sc = scale_ptr + slot * stride_sc_slot + i_h * stride_sc_head
    p_dr = dr_ptr + slot * stride_dr_slot + i_h * stride_dr_head
    p_kr = kr_ptr + slot * stride_kr_slot + i_hk * stride_kr_head
    p_gr = gr_ptr + slot * stride_gr_slot + i_h * stride_gr_head
    p_v = v_ptr + i_b * stride_v_batch + i_h * stride_v_head
    p_o = out_ptr + i_b * stride_o_batch + i_h * stride_o_head
    p_start = i_s * SPAN_V
    # Gᵀ [BLOCK_L, BLOCK_U] multiplies Eᵀ (_window_operand): the window's v at the positions
    # its d records take (base .. base+n-1: 0 at a flush, w otherwise) carry M2's columns.
    base = _window_base(w, FLUSH_ROWS)
    GT = _window_weights(M2T, o_t, o_l, base, BLOCK_T)
    if FLUSH_ROWS:
        U_hi, U_lo = tf32_split(U1)
        GT_hi, GT_lo = tf32_split(GT)
        # Flush: S_c tile by tile, stored; the window's outputs from it. Not software-pipelined:
        # the loop holds a barrier, and flush rows are the minority.
        if not PER_CHANNEL:
            # GDN: the w committed records fold into each tile as one tile product
            # (fold_records: S_c = S0 Diag(e0) + (Dᵀ Diag(e)) K in TF32 parts), the scalar
            # decays and the k̂ records once per program.
            m_l = o_l < w
            rec_dec, e0 = record_decays(p_gr, stride_gr_pos, o_l, o_k, m_k, w, 0.0, PER_CHANNEL)
            b_kr = tl.load(p_kr + o_l[:, None] * stride_kr_pos + o_k[None, :],
                           mask=m_l[:, None] & m_k[None, :], other=0.0).to(tl.float32)
        for c in tl.range(0, SPAN_V // BLOCK_V):
            o_v = p_start + c * BLOCK_V + tl.arange(0, BLOCK_V)
            m_v = o_v < head_v_dim
            m_c = m_v[:, None] & m_k[None, :]
            b_s = tl.load(p_c + o_v[:, None] * stride_c_row + o_k[None, :], mask=m_c, other=0.0).to(tl.float32)
            if HAS_SCALE:
                b_s *= tl.load(p_sc + o_v, mask=m_v, other=1.0)[:, None]
            if PER_CHANNEL:
                # KDA: the records one at a time, oldest first (the recurrence itself in fp32;
                # as a tile product, exact fp32 on U = e ⊙ K, it lost 35-70%: session 30).
                # Branch-free (records past w load as d = k = 0, g = 0: the update is the
                # identity) and unrolled, so that several records' loads are in flight at once.
                for j in tl.range(0, L - 1, loop_unroll_factor=_FOLD_UNROLL):
                    held = j < w
                    b_dj = tl.load(p_dr + j * stride_dr_pos + o_v, mask=m_v & held, other=0.0).to(tl.float32)
                    b_kj = tl.load(p_kr + j * stride_kr_pos + o_k, mask=m_k & held, other=0.0).to(tl.float32)
                    b_gj = tl.load(p_gr + j * stride_gr_pos + o_k, mask=m_k & held, other=0.0).to(tl.float32)
                    b_s = b_s * tl.exp(b_gj)[None, :] + b_dj[:, None] * b_kj[None, :]
            else:
                b_dt = tl.load(p_dr + o_l[None, :] * stride_dr_pos + o_v[:, None],
                               mask=m_v[:, None] & m_l[None, :], other=0.0).to(tl.float32)
                b_s = fold_records(b_s, e0, b_dt, b_kr, rec_dec, PER_CHANNEL,
                                   kr_ptr.dtype.element_ty.primitive_bitwidth > 16)
            # Whole rows (BLOCK_K covers head_k_dim); SR: draws from the seed, the slot, the head
            # and the window's beta.
            store_checkpoint_tile(p_c + o_v[:, None] * stride_c_row + o_k[None, :], m_c, p_sc + o_v, m_v, b_s,
                                  tl.max(tl.abs(b_s), axis=1), sr_seed, slot, i_h, tl.sum(b_beta, axis=0),
                                  o_v[:, None] * head_k_dim + o_k[None, :], HAS_SCALE, SR)
            b_e = _window_operand(p_dr, stride_dr_pos, p_v, stride_v_tok, o_l, o_v, m_v, base, n)
            z = _window_products(b_s, U_hi, U_lo, b_e, GT_hi, GT_lo, SPLIT_E)  # Zᵀ: d and o columns
            _store_window_tile(z, p_dr, stride_dr_pos, p_o, stride_o_tok, o_u, o_v, m_v, base, n, BLOCK_T, True)
    else:
        # Non-flush: G's history columns once (U1 against each record's key, decayed to the
        # window's start; hdec ends as the checkpoint's decay e^G, which moves onto U1's
        # columns), then the tiles.
        if HISTORY_PRODUCT:
            hist, hdec = _history_weights(U1, p_kr, stride_kr_pos, p_gr, stride_gr_pos, o_k, m_k, w, BLOCK_L)
            GT += hist
        else:
            # Records newest first, decays as running products.
            if PER_CHANNEL:
                hdec = tl.full([BLOCK_K], 1.0, tl.float32)
            else:
                hdec = tl.full([], 1.0, tl.float32)
            # Branch-free (positions j < 0 load as k = 0, g = 0: no score, decay 1) and
            # unrolled, so that several records' loads are in flight at once.
            for i in tl.range(0, L - 1, loop_unroll_factor=_FOLD_UNROLL):
                j = w - 1 - i
                held = j >= 0
                e_j = hdec * tl.load(p_kr + j * stride_kr_pos + o_k, mask=m_k & held, other=0.0).to(tl.float32)
                GT += tl.where((o_l == j)[:, None], tl.sum(U1 * e_j[None, :], axis=1)[None, :], 0.0)
                if PER_CHANNEL:
                    hdec = hdec * tl.exp(tl.load(p_gr + j * stride_gr_pos + o_k, mask=m_k & held, other=0.0).to(tl.float32))
                else:
                    hdec = hdec * tl.exp(tl.load(p_gr + j * stride_gr_pos, mask=held, other=0.0).to(tl.float32))
        U_hi, U_lo = tf32_split(decay_columns(U1, hdec, PER_CHANNEL))
        GT_hi, GT_lo = tf32_split(GT)
        for c in tl.range(0, SPAN_V // BLOCK_V, num_stages=NUM_STAGES):
            o_v = p_start + c * BLOCK_V + tl.arange(0, BLOCK_V)
            m_v = o_v < head_v_dim
            b_s0 = tl.load(p_c + o_v[:, None] * stride_c_row + o_k[None, :],
                           mask=m_v[:, None] & m_k[None, :], other=0.0).to(tl.float32)
            if HAS_SCALE:
                b_s0 *= tl.load(p_sc + o_v, mask=m_v, other=1.0)[:, None]
            b_e = _window_operand(p_dr, stride_dr_pos, p_v, stride_v_tok, o_l, o_v, m_v, base, n)
            z = _window_products(b_s0, U_hi, U_lo, b_e, GT_hi, GT_lo, SPLIT_E)
            _store_window_tile(z, p_dr, stride_dr_pos, p_o, stride_o_tok, o_u, o_v, m_v, base, n, BLOCK_T, False)
    if i_s == 0:
        if i_h == 0:
            tl.store(pending_ptr + slot, n)


def gated_delta_verify_kernel(checkpoint: Tensor, d_records: Tensor, k_records: Tensor, g_records: Tensor,
                              q: Tensor, k: Tensor, v: Tensor, g: Tensor) -> str:
    """``"cuda"`` or ``"triton"``: the kernel the op runs for these tensors. CUDA where
    :func:`~.gated_delta_verify_cuda.delta_verify_cuda_unsupported` finds nothing against it (GDN,
    or KDA with one value head per key head; sm_90, bf16 or fp32 checkpoints, bf16 activations and
    records, T <= 8, the CUDA step's sizes and alignment): on an H200 it was faster than the Triton
    kernels in every cell timed (T 2-8, batch 4-512, both checkpoint dtypes, Qwen3.5-122B and Kimi
    Linear; docs/benchmarks.md "Speculative verify", session 34); Triton otherwise (every dtype,
    size and GPU)."""
    return "cuda" if delta_verify_cuda_unsupported(checkpoint, d_records, k_records, g_records, q, k, v, g) is None else "triton"


def launch_gated_delta_replay_verify(checkpoint: Tensor, d_records: Tensor, k_records: Tensor,
                                     g_records: Tensor, cursor: Tensor, pending: Tensor,
                                     q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, *, slot_ids: Tensor,
                                     num_tokens: Optional[Tensor] = None, scale: float,
                                     use_qk_l2norm: bool, out: Tensor,
                                     config: Optional[LaunchConfig] = None,
                                     flush_config: Optional[LaunchConfig] = None,
                                     history_product: Optional[bool] = None, kernel: str = "auto",
                                     checkpoint_scale: Optional[Tensor] = None,
                                     rounding_seed: Optional[int] = None) -> Tensor:
    """Launch the verify step on the cache tensors; arguments already checked by the op.
    g's rank selects the family: [batch, T, v_heads] GDN, [batch, T, v_heads, head_k_dim] KDA.
    ``config`` / ``flush_config``: the non-flush / flush launch's configuration (None: its rule,
    :func:`gated_delta_verify_launch_config` / :func:`gated_delta_verify_flush_launch_config`);
    tiles of >= 16 rows. ``history_product``: the non-flush launch's history weights as tile
    products (None: :func:`gated_delta_verify_history_product`; GDN only). ``kernel``:
    ``"auto"`` (:func:`gated_delta_verify_kernel` chooses; a ``config`` of either kind, or a
    ``flush_config`` or ``history_product``, which set the Triton kernels, chooses for it),
    ``"triton"`` or ``"cuda"`` (the CUDA verify, :mod:`~.gated_delta_verify_cuda`; ValueError where
    it does not apply). ``checkpoint_scale``, ``rounding_seed``: as for
    :func:`~.mamba2_replay.launch_mamba2_replay_step` (the Triton kernels)."""
    triton_knobs = flush_config is not None or history_product is not None or rounding_seed is not None

    def route() -> str:
        if triton_knobs:
            return "triton"
        return gated_delta_verify_kernel(checkpoint, d_records, k_records, g_records, q, k, v, g)

    kernel = resolve_kernel("launch_gated_delta_replay_verify", kernel, config, DeltaVerifyCudaConfig, route)
    if kernel == "cuda":
        if triton_knobs:
            raise ValueError("launch_gated_delta_replay_verify: flush_config, history_product and rounding_seed "
                             "set the Triton kernels; the CUDA verify takes config only")
        return launch_delta_replay_verify_cuda(checkpoint, d_records, k_records, g_records, cursor, pending, q, k, v, g,
                                             beta, slot_ids=slot_ids, num_tokens=num_tokens, scale=scale,
                                             use_qk_l2norm=use_qk_l2norm, out=out, config=config)
    for name, given in (("config", config), ("flush_config", flush_config)):
        if given is not None and not isinstance(given, LaunchConfig):
            raise TypeError(f"launch_gated_delta_replay_verify: {name} is {type(given).__name__}; the Triton kernels "
                            "take a LaunchConfig")
    batch, T, v_heads, head_v_dim = v.shape
    k_heads, head_k_dim = q.shape[2], q.shape[3]
    L = d_records.shape[2]
    sms = multiprocessor_count(v.device)
    for given in (config, flush_config):
        if given is not None and given.block_head_dim < 16:
            raise ValueError(f"gated delta verify: block_head_dim is {given.block_head_dim}; expected >= 16 "
                             "(the tiles are tensor-core operands)")
    heads = batch * v_heads
    if history_product is None:
        history_product = gated_delta_verify_history_product(heads, T, multiprocessors=sms, per_channel=g.dim() == 4)
    elif history_product and g.dim() == 4:
        raise ValueError("gated delta verify: history_product is True for KDA; expected False or None "
                         "(the history product takes GDN's scalar decays)")
    cfgs = {
        False: config or gated_delta_verify_launch_config(head_v_dim, head_k_dim, heads, checkpoint.dtype,
                                                          multiprocessors=sms),
        True: flush_config or gated_delta_verify_flush_launch_config(head_v_dim, head_k_dim, heads, checkpoint.dtype,
                                                                     multiprocessors=sms, per_channel=g.dim() == 4),
    }
    block_t = max(2, triton.next_power_of_2(T))
    rows = checkpoint if checkpoint_scale is None else checkpoint_scale  # no scale: a pointer never read
    args = (
        checkpoint, checkpoint.stride(0), checkpoint.stride(1), checkpoint.stride(2),
        rows, rows.stride(0), rows.stride(1),
        d_records, d_records.stride(0), d_records.stride(1), d_records.stride(2),
        k_records, k_records.stride(0), k_records.stride(1), k_records.stride(2),
        g_records, g_records.stride(0), g_records.stride(1), g_records.stride(2),
        cursor, pending,
        q, q.stride(0), q.stride(1), q.stride(2),
        k, k.stride(0), k.stride(1), k.stride(2),
        v, v.stride(0), v.stride(1), v.stride(2),
        out, out.stride(0), out.stride(1), out.stride(2),
        g, g.stride(0), g.stride(1), g.stride(2),
        beta, beta.stride(0), beta.stride(1), beta.stride(2),
        slot_ids, num_tokens if num_tokens is not None else slot_ids, scale,
        T, head_v_dim, head_k_dim, v_heads // k_heads,
        rounding_seed or 0,
    )
    const = dict(HAS_SCALE=checkpoint_scale is not None, SR=rounding_seed is not None,
        L=L, BLOCK_L=max(16, triton.next_power_of_2(L)), BLOCK_T=block_t, BLOCK_U=2 * block_t,
        BLOCK_K=max(16, triton.next_power_of_2(head_k_dim)),
        HAS_NUM_TOKENS=num_tokens is not None, PER_CHANNEL=g.dim() == 4, USE_QK_L2NORM=use_qk_l2norm,
        SPLIT_E=max(d_records.element_size(), v.element_size()) > 2,  # 16-bit values are exact in TF32
    )
    # Both verify launches decide each row's class from its unflagged cursor, alike in any order:
    # on a GPU the flush launch runs on a side stream beside the non-flush one (at small batches
    # neither fills the GPU, and the flush rows' longer programs start first), the records
    # launch after it there (it reads the flags); the main stream joins the side stream.
    side = _flush_stream(v.device)
    if side is not None:
        side.wait_stream(torch.cuda.current_stream(v.device))
    for flush_rows in (True, False):
        cfg = cfgs[flush_rows]
        span = cfg.block_head_dim * cfg.chunks
        with torch.cuda.stream(side) if flush_rows and side is not None else contextlib.nullcontext():
            _gated_delta_replay_verify_kernel[(triton.cdiv(head_v_dim, span), v_heads, batch)](
                *args, **const, BLOCK_V=cfg.block_head_dim, SPAN_V=span, NUM_STAGES=cfg.num_stages,
                FLUSH_ROWS=flush_rows, HISTORY_PRODUCT=history_product and not flush_rows, **cfg.launch_options())
    with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
        _window_key_gate_records_kernel[(max(k_heads, v_heads), batch)](
            k_records, k_records.stride(0), k_records.stride(1), k_records.stride(2),
            g_records, g_records.stride(0), g_records.stride(1), g_records.stride(2),
            cursor,
            k, k.stride(0), k.stride(1), k.stride(2),
            g, g.stride(0), g.stride(1), g.stride(2),
            slot_ids, num_tokens if num_tokens is not None else slot_ids,
            T, k_heads, v_heads, head_k_dim,
            BLOCK_T=block_t, BLOCK_K=const["BLOCK_K"], HAS_NUM_TOKENS=const["HAS_NUM_TOKENS"],
            PER_CHANNEL=const["PER_CHANNEL"], USE_QK_L2NORM=use_qk_l2norm, num_warps=1,
        )
    if side is not None:
        torch.cuda.current_stream(v.device).wait_stream(side)
    return out
