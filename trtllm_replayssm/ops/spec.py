"""Speculative decoding with ReplaySSM for Mamba-2, GDN and KDA: verify T tokens per row in one
launch, commit by a cursor move; and the conventional baselines (serial steps, per-token state
snapshots).

Design, the same for the three families (same cache as standard decode; the float64 reference
in :mod:`trtllm_replayssm.reference.spec` states it per row):

* **Buffer.** A replay cache with L = B + T records (:func:`spec_buffer_len`), history B ≥ T.
  Records are not circular: position j holds the j-th token after the checkpoint, as in standard
  decode. ``cursor`` counts the *committed* records; ``pending`` the records a verify wrote
  past them and not yet committed.
* **Verify** (``mamba2_replay_verify``, ``gdn_replay_verify``, ``kda_replay_verify``): a row with
  w committed records and n ≤ T tokens computes all n outputs from checkpoint + records + the
  window, as if the tokens ran serially from the committed state. If the window fits below position L-1 (``w + n ≤ L - 1``) nothing but the
  n window records (at w .. w+n-1) is written. Otherwise the row **flushes early**, in the same
  launch and decided on the device: its w history records are folded into the checkpoint, the
  outputs come from the new checkpoint, the window goes to positions 0 .. n-1 and the cursor to
  0 (Mamba-2) or w + ``VERIFY_FLUSHED`` (GDN/KDA: a flag the commit resolves, so that none of
  their verify launches moves a cursor another one reads). With full windows a row flushes
  exactly when its history has reached B records, so a window never overflows the buffer.
  ``pending := n``.
* **Commit** (``replay_commit``): ``cursor += accepted`` (from 0 if flagged; 1 ≤ accepted ≤ n,
  bonus token included), ``pending := 0``. Rejected records lie past the cursor and are
  overwritten later: rollback is a cursor move; no state is copied.
* **Standard decode on the same cache.** Between commits the cursor is in [0, L) and position
  L-1 is never written, which is exactly the standard-decode invariant, so ``*_replay_step`` can run
  between commits (e.g. for rows without drafts); a T = 1 verify flushes at the same cursor
  (L-1) as a standard step. Between a verify and its commit nothing else may touch the slot.
  ``replay_commit`` serves every family (it moves cursors only).
* **CUDA graphs.** Verify and commit read cursors, token and accepted counts on the device and
  never sync. Eagerly, the ops check device values too (slot ids, token counts in [1, T],
  accepted in [1, pending], no pending window before a verify), with one host read each; during
  CUDA-graph capture and under torch.compile those checks are skipped and valid values are the
  caller's contract.

Baselines (for tests and benchmarks, same argument conventions): ``*_serial_decode`` runs the
window as T conventional steps (every token committed: the cost of decoding T tokens without
speculation); ``*_snapshot_verify`` reads the state once and writes T state snapshots into a
:class:`SnapshotCache`, and ``snapshot_commit`` copies the accepted one back (the conventional
speculative scheme: 1 + T states per sequence).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch

from torch import Tensor

from ..cache import MAX_L, GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from ..checks import (
    check_cache_type,
    check_rounding_seed,
    check_rank,
    check_slot_ids,
    check_tensor,
    reads_device_values,
    slot_tensor,
)
from ..reference.spec import (
    gated_delta_replay_verify_ref,
    gated_delta_snapshot_verify_ref,
    mamba2_replay_verify_ref,
    mamba2_snapshot_verify_ref,
    replay_commit_ref,
    snapshot_commit_ref,
    spec_buffer_len,
)
from .gated_delta import DeltaRuleDims, DeltaRuleInputs, check_gated_delta_inputs
from .library import define_op
from .mamba2 import Mamba2Dims, Mamba2Inputs, check_mamba2_inputs
from .mamba2 import CACHE_FIELDS as MAMBA2_CACHE_FIELDS
from .mamba2 import cache_fields as mamba2_cache_fields

__all__ = [
    "MAX_T",
    "spec_buffer_len",
    "SnapshotCache",
    "mamba2_replay_verify",
    "gdn_replay_verify",
    "kda_replay_verify",
    "replay_commit",
    "mamba2_serial_decode",
    "gdn_serial_decode",
    "kda_serial_decode",
    "mamba2_snapshot_verify",
    "gdn_snapshot_verify",
    "kda_snapshot_verify",
    "snapshot_commit",
]

MAX_T = 16  # window tokens per verify (the kernels unroll over the window)

_REPLAY_CACHES = (Mamba2ReplayCache, GDNReplayCache, KDAReplayCache)


@dataclass
class SnapshotCache:
    """The conventional speculative baseline's storage for one layer: the committed state and
    one state snapshot per window position.

    Attributes:
        state: [num_slots, *state_dims] (Mamba-2: nheads, head_dim, d_state).
        snapshots: [num_slots, T, *state_dims], the state's dtype.
    """

    state: Tensor
    snapshots: Tensor

    def __post_init__(self) -> None:
        owner = "SnapshotCache"
        for name in ("state", "snapshots"):
            t = getattr(self, name)
            if not isinstance(t, Tensor):
                raise TypeError(f"{owner}: {name} is {type(t).__name__}; expected a torch.Tensor")
            if not t.is_contiguous():
                raise ValueError(f"{owner}: {name} must be contiguous")
        s, p = self.state, self.snapshots
        if p.dim() != s.dim() + 1 or p.shape[0] != s.shape[0] or p.shape[2:] != s.shape[1:] or p.shape[1] < 1:
            raise ValueError(
                f"{owner}: snapshots has shape {tuple(p.shape)}; expected [num_slots, T, *state_dims] with state {tuple(s.shape)}"
            )
        if p.dtype != s.dtype or p.device != s.device:
            raise TypeError(f"{owner}: snapshots is {p.dtype} on {p.device}; expected the state's {s.dtype} on {s.device}")

    @classmethod
    def allocate(
        cls,
        num_slots: int,
        state_dims: tuple,
        T: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: Union[str, torch.device, None] = None,
    ) -> "SnapshotCache":
        """Zero state and snapshots: [num_slots, *state_dims] and [num_slots, T, *state_dims]."""
        return cls(
            torch.zeros(num_slots, *state_dims, dtype=dtype, device=device),
            torch.zeros(num_slots, T, *state_dims, dtype=dtype, device=device),
        )

    @property
    def num_slots(self) -> int:
        return self.state.shape[0]

    @property
    def T(self) -> int:
        return self.snapshots.shape[1]


# --------------------------------------------------------------------------- custom ops
# Same argument names and order as the public functions (:func:`define_op`).


@define_op(
    "mamba2_replay_verify",
    mutates_args=MAMBA2_CACHE_FIELDS + ("pending", "out", "checkpoint_scale"),
    reference=mamba2_replay_verify_ref,
    launcher="mamba2_verify:launch_mamba2_replay_verify",
)
def _mamba2_replay_verify_op(
    checkpoint: Tensor,
    x_records: Tensor,
    dt_records: Tensor,
    B_records: Tensor,
    cursor: Tensor,
    arrivals: Tensor,
    pending: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor],
    D: Optional[Tensor],
    z: Optional[Tensor],
    dt_bias: Optional[Tensor],
    dt_softplus: bool,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> None:
    """Schema of ``replayssm::mamba2_replay_verify`` (``checkpoint_scale``, ``rounding_seed``:
    as in ``replayssm::mamba2_replay_step``)."""


@define_op(
    "gated_delta_replay_verify",
    mutates_args=("checkpoint", "d_records", "k_records", "g_records", "cursor", "pending", "out", "checkpoint_scale"),
    reference=gated_delta_replay_verify_ref,
    launcher="gated_delta_verify:launch_gated_delta_replay_verify",
)
def _gated_delta_replay_verify_op(
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
    slot_ids: Tensor,
    num_tokens: Optional[Tensor],
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> None:
    """Schema of ``replayssm::gated_delta_replay_verify`` (``checkpoint_scale``, ``rounding_seed``:
    as in ``replayssm::mamba2_replay_step``)."""


@define_op(
    "replay_commit",
    mutates_args=("cursor", "pending"),
    reference=replay_commit_ref,
    launcher="replay_commit:launch_replay_commit",
)
def _replay_commit_op(cursor: Tensor, pending: Tensor, slot_ids: Tensor, num_accepted: Tensor) -> None:
    """Schema of ``replayssm::replay_commit``."""


@define_op(
    "mamba2_snapshot_verify",
    mutates_args=("snapshots", "out"),
    reference=mamba2_snapshot_verify_ref,
    launcher="mamba2_snapshot:launch_mamba2_snapshot_verify",
)
def _mamba2_snapshot_verify_op(
    state: Tensor,
    snapshots: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor],
    D: Optional[Tensor],
    z: Optional[Tensor],
    dt_bias: Optional[Tensor],
    dt_softplus: bool,
    out: Tensor,
) -> None:
    """Schema of ``replayssm::mamba2_snapshot_verify``."""


@define_op(
    "gated_delta_snapshot_verify",
    mutates_args=("snapshots", "out"),
    reference=gated_delta_snapshot_verify_ref,
    launcher="gated_delta_snapshot:launch_gated_delta_snapshot_verify",
)
def _gated_delta_snapshot_verify_op(
    state: Tensor,
    snapshots: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor],
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
) -> None:
    """Schema of ``replayssm::gated_delta_snapshot_verify``."""


@define_op(
    "snapshot_commit",
    mutates_args=("state",),
    reference=snapshot_commit_ref,
    launcher="replay_commit:launch_snapshot_commit",
)
def _snapshot_commit_op(state: Tensor, snapshots: Tensor, slot_ids: Tensor, num_accepted: Tensor) -> None:
    """Schema of ``replayssm::snapshot_commit``."""


# --------------------------------------------------------------------------- validation


def _check_counts(op: str, name: str, counts, slot_ids: Tensor, batch: int, device, upper, upper_words: str) -> None:
    """counts: [batch] int32; eagerly, each live row's count in [1, upper()[row]]."""
    check_tensor(op, name, counts, "[batch]", (batch,), dtypes=(torch.int32,), device=device)
    if not reads_device_values(counts):
        return
    live = (slot_ids >= 0).cpu()
    c, h = counts.cpu()[live].long(), upper()[live].long()
    bad = torch.nonzero((c < 1) | (c > h)).flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(
            f"{op}: {name} holds {int(c[i])} for a row whose {upper_words} is {int(h[i])}; "
            f"expected 1 <= {name} <= {upper_words} on live rows"
        )


def _check_num_tokens(op: str, num_tokens, slot_ids: Tensor, T: int) -> None:
    """num_tokens None, or [batch] int32 with each live row's count in [1, T] (eagerly)."""
    if num_tokens is not None:
        batch = slot_ids.shape[0]
        _check_counts(op, "num_tokens", num_tokens, slot_ids, batch, slot_ids.device, lambda: torch.full((batch,), T), "T")


# --------------------------------------------------------------------------- public API


def mamba2_replay_verify(
    cache: Mamba2ReplayCache,
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
    out: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """Verify a window of T tokens per row with ReplaySSM (module docstring: the design).

    Args:
        cache (Mamba2ReplayCache): L ≥ 2T records (history B = L - T ≥ T). Mutated: each live
            row writes its window's records past its committed records (or, when they would
            not fit below position L-1, first folds its history into the checkpoint on the
            device and writes them from position 0, cursor -> 0); ``pending`` := num_tokens.
            Follow with :func:`replay_commit` before any other call on these slots.
        x (Tensor): [batch, T, nheads, head_dim], the cache's activation dtype; token 0 is the
            last sampled (bonus) token, tokens 1 .. T-1 the drafts.
        dt (Tensor): [batch, T, nheads] raw (before dt_bias and softplus); any float dtype.
        A (Tensor): [nheads] fp32, negative.
        B, C (Tensor): [batch, T, ngroups, d_state], the cache's activation dtype.
        slot_ids (Tensor): [batch] int32 physical slots; < 0 marks a padding row (nothing read
            or written). Live ids are distinct.
        num_tokens (Tensor, optional): [batch] int32 in [1, T]: rows with fewer tokens in the
            same launch; None: every row has T.
        D, dt_bias, dt_softplus, rounding_seed: as in :func:`~trtllm_replayssm.ops.mamba2_replay_step`
            (a flushing row's fold rounded stochastically; an fp8 checkpoint's rows with new scales).
        z (Tensor, optional): like x.
        out (Tensor, optional): like x; padding rows and tokens past num_tokens keep their values.
    Returns:
        Tensor: y [batch, T, nheads, head_dim]: token s of a row equals the conventional
        recurrence run serially over that row's tokens 0 .. s from its committed state.
    Raises:
        ValueError, TypeError: before anything is written (T > B, mismatched shapes, token
        counts out of range, a window still pending on a live slot ...).
    """
    op = "mamba2_replay_verify"
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    check_cache_type(op, cache, (Mamba2ReplayCache,))
    if not 2 <= cache.L <= MAX_L:
        raise ValueError(f"{op}: cache has L = {cache.L}; expected 2 <= L <= {MAX_L}")
    device = cache.device
    if device.type != "cpu" and torch.float64 in (cache.state_dtype, cache.act_dtype):
        raise TypeError(f"{op}: cache holds float64 on {device}; float64 runs on the CPU reference only")
    inputs = Mamba2Inputs(x, dt, A, B, C, slot_ids, D, z, dt_bias, dt_softplus, out)
    T = check_mamba2_inputs(op, inputs, Mamba2Dims.of_cache(cache), max_T=MAX_T)
    _check_num_tokens(op, num_tokens, slot_ids, T)
    if 2 * T > cache.L:
        raise ValueError(
            f"{op}: x has T = {T} window tokens; expected T <= history B = L - T, "
            f"i.e. L >= 2T = {2 * T} (cache has L = {cache.L}; see spec_buffer_len)"
        )
    _check_nothing_pending(op, cache, slot_ids)
    check_rounding_seed(op, rounding_seed, cache.state_dtype)
    run = inputs.for_launch()
    torch.ops.replayssm.mamba2_replay_verify(
        *mamba2_cache_fields(cache), cache.pending, *run[:6], num_tokens, *run[6:], cache.checkpoint_scale, rounding_seed
    )
    return run.out


def _delta_replay_verify(
    op: str, cache_type: type, cache, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out, rounding_seed
) -> Tensor:
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    check_cache_type(op, cache, (cache_type,))
    if not 2 <= cache.L <= MAX_L:
        raise ValueError(f"{op}: cache has L = {cache.L}; expected 2 <= L <= {MAX_L}")
    device = cache.device
    if device.type != "cpu" and torch.float64 in (cache.state_dtype, cache.record_dtype):
        raise TypeError(f"{op}: cache holds float64 on {device}; float64 runs on the CPU reference only")
    inputs = DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)
    T = check_gated_delta_inputs(op, inputs, DeltaRuleDims.of_cache(cache), max_T=MAX_T)
    _check_num_tokens(op, num_tokens, slot_ids, T)
    if 2 * T > cache.L:
        raise ValueError(
            f"{op}: q has T = {T} window tokens; expected T <= history B = L - T, "
            f"i.e. L >= 2T = {2 * T} (cache has L = {cache.L}; see spec_buffer_len)"
        )
    check_rounding_seed(op, rounding_seed, cache.state_dtype)
    run = inputs.for_launch(op, cache.head_k_dim)
    _check_nothing_pending(op, cache, slot_ids)
    fields = (cache.checkpoint, cache.d_records, cache.k_records, cache.g_records, cache.cursor, cache.pending)
    torch.ops.replayssm.gated_delta_replay_verify(
        *fields, *run[:6], num_tokens, *run[6:], cache.checkpoint_scale, rounding_seed
    )
    return run.out


def gdn_replay_verify(
    cache: GDNReplayCache,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    window = (q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out, rounding_seed)
    return _delta_replay_verify("gdn_replay_verify", GDNReplayCache, cache, *window)


def kda_replay_verify(
    cache: KDAReplayCache,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    window = (q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out, rounding_seed)
    return _delta_replay_verify("kda_replay_verify", KDAReplayCache, cache, *window)


_DELTA_WINDOW_ARGS = """
        q, k (Tensor): [batch, T, k_heads, head_k_dim] raw (normalised in the kernel when
            ``use_qk_l2norm``); token 0 is the bonus token, tokens 1 .. T-1 the drafts.
        v (Tensor): [batch, T, v_heads, head_v_dim], dtype of q.
        g (Tensor): log-decays, any float dtype: {g_layout}.
        beta (Tensor): [batch, T, v_heads], any float dtype, any strides.
        slot_ids (Tensor): [batch] int32; < 0 marks a padding row. Live ids are distinct.
        num_tokens (Tensor, optional): [batch] int32 in [1, T]; None: every row has T.
        scale, use_qk_l2norm: as in standard decode.
        out (Tensor, optional): like v; padding rows and tokens past num_tokens keep their values.
        rounding_seed (int, optional): as in :func:`~trtllm_replayssm.ops.mamba2_replay_step` (a
            flushing row's fold rounded stochastically; an fp8 checkpoint's rows with new scales).
    Returns:
        Tensor: o [batch, T, v_heads, head_v_dim]: token s of a row equals the conventional
        recurrence run serially over that row's tokens 0 .. s from its committed state.
    Raises:
        ValueError, TypeError: before anything is written."""
_DELTA_VERIFY_DOC = (
    """Verify a window of T tokens per row with ReplaySSM ({family}); the design
    is the Mamba-2 one (:func:`mamba2_replay_verify`, module docstring).

    Args:
        cache ({cache}): L >= 2T records. Mutated: each live row writes its window's records
            (d, k̂, g) past its committed records, or, when they would not fit below position
            L-1, first folds its history into the checkpoint on the device and writes them from
            position 0 (cursor -> w + ``VERIFY_FLUSHED``, a flag :func:`replay_commit`
            resolves to 0); ``pending`` := num_tokens. Follow with :func:`replay_commit`."""
    + _DELTA_WINDOW_ARGS
)
_GDN_G = "[batch, T, v_heads], one per value head"
_KDA_G = "[batch, T, v_heads, head_k_dim], one per key channel"
gdn_replay_verify.__doc__ = _DELTA_VERIFY_DOC.format(family="Gated DeltaNet", cache="GDNReplayCache", g_layout=_GDN_G)
kda_replay_verify.__doc__ = _DELTA_VERIFY_DOC.format(family="Kimi Delta Attention", cache="KDAReplayCache", g_layout=_KDA_G)


def _check_nothing_pending(op: str, cache, slot_ids: Tensor) -> None:
    if not reads_device_values(slot_ids):
        return
    live = slot_ids[slot_ids >= 0].long()
    if live.numel() and bool(cache.pending[live].any()):
        s = int(live[cache.pending[live] != 0][0])
        raise ValueError(
            f"{op}: slot_ids holds slot {s}, whose last verify window "
            f"({int(cache.pending[s])} records) is not committed; call replay_commit first"
        )


def replay_commit(cache, slot_ids: Tensor, num_accepted: Tensor) -> None:
    """Commit the last verify of each live row: ``cursor += num_accepted``, ``pending := 0``.

    Args:
        cache (Mamba2ReplayCache | GDNReplayCache | KDAReplayCache): mutated (cursor, pending).
        slot_ids (Tensor): [batch] int32, the verify's rows; < 0 marks a padding row.
        num_accepted (Tensor): [batch] int32 in [1, num_tokens of the verify]: tokens accepted,
            the bonus (first) token included. Rejected records are dropped by not committing them.
    Raises:
        ValueError, TypeError: before anything is written (eagerly also when a count is out of
        range or a slot has no pending window).
    """
    op = "replay_commit"
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    check_cache_type(op, cache, _REPLAY_CACHES)
    device = cache.device
    check_rank(op, "slot_ids", slot_ids, 1, "[batch]")
    batch = slot_ids.shape[0]
    check_slot_ids(op, slot_ids, batch, cache.num_slots, device)
    _check_counts(
        op,
        "num_accepted",
        num_accepted,
        slot_ids,
        batch,
        device,
        lambda: cache.pending[slot_ids.clamp_min(0).long()].cpu(),
        "pending window (num_tokens of its verify; 0: no verify to commit)",
    )
    torch.ops.replayssm.replay_commit(cache.cursor, cache.pending, slot_ids, num_accepted)


def mamba2_serial_decode(
    state: Tensor,
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
    out: Optional[Tensor] = None,
) -> Tensor:
    """Baseline: the window as num_tokens conventional decode steps (one launch per token).

    Every token is committed (no rollback): this is what decoding the T tokens without
    speculation costs. Arguments as in :func:`mamba2_replay_verify`, with ``state``
    [num_slots, nheads, head_dim, d_state] (mutated) in place of the cache.
    """
    op = "mamba2_serial_decode"
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    inputs = Mamba2Inputs(x, dt, A, B, C, slot_ids, D, z, dt_bias, dt_softplus, out)
    T = check_mamba2_inputs(op, inputs, Mamba2Dims.of_state(op, "state", state, B, window=True), max_T=MAX_T)
    _check_num_tokens(op, num_tokens, slot_ids, T)
    run = inputs.for_launch()
    for s in range(T):
        rows = slot_ids if num_tokens is None else torch.where(num_tokens > s, slot_ids, -1)
        torch.ops.replayssm.mamba2_decode_step(state, *run.token(s, rows))
    return run.out


def mamba2_snapshot_verify(
    cache: SnapshotCache,
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
    out: Optional[Tensor] = None,
) -> Tensor:
    """Baseline: verify by reading the state once and writing the state after every token.

    Args:
        cache (SnapshotCache): state [num_slots, nheads, head_dim, d_state] (read) and
            snapshots [num_slots, T_max, ...] (mutated: snapshot s := the state after token s,
            rounded to the state dtype, for s < num_tokens); x's T ≤ T_max.
        x ... out: as in :func:`mamba2_replay_verify`.
    Returns:
        Tensor: y [batch, T, nheads, head_dim].
    """
    op = "mamba2_snapshot_verify"
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    check_cache_type(op, cache, (SnapshotCache,))
    inputs = Mamba2Inputs(x, dt, A, B, C, slot_ids, D, z, dt_bias, dt_softplus, out)
    dims = Mamba2Dims.of_state(op, "cache.state", cache.state, B, window=True)
    T = check_mamba2_inputs(op, inputs, dims, max_T=cache.T)
    _check_num_tokens(op, num_tokens, slot_ids, T)
    run = inputs.for_launch()
    torch.ops.replayssm.mamba2_snapshot_verify(cache.state, cache.snapshots, *run[:6], num_tokens, *run[6:])
    return run.out


def _delta_serial_decode(
    op: str, per_channel: bool, state, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out
) -> Tensor:
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    inputs = DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)
    dims = DeltaRuleDims.of_state(op, "state", state, q, per_channel, window=True)
    T = check_gated_delta_inputs(op, inputs, dims, max_T=MAX_T)
    _check_num_tokens(op, num_tokens, slot_ids, T)
    run = inputs.for_launch(op, dims.head_k_dim)
    for s in range(T):
        rows = slot_ids if num_tokens is None else torch.where(num_tokens > s, slot_ids, -1)
        torch.ops.replayssm.gated_delta_decode_step(state, *run.token(s, rows))
    return run.out


def gdn_serial_decode(
    state: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Baseline: the window as num_tokens conventional GDN decode steps (every token committed).
    Arguments as :func:`gdn_replay_verify`, with ``state`` [num_slots, v_heads, head_v_dim,
    head_k_dim] (mutated) in place of the cache."""
    return _delta_serial_decode(
        "gdn_serial_decode", False, state, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out
    )


def kda_serial_decode(
    state: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Baseline: the window as num_tokens conventional KDA decode steps (see :func:`gdn_serial_decode`)."""
    return _delta_serial_decode(
        "kda_serial_decode", True, state, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out
    )


def _delta_snapshot_verify(
    op: str, per_channel: bool, cache, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out
) -> Tensor:
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    check_cache_type(op, cache, (SnapshotCache,))
    inputs = DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)
    dims = DeltaRuleDims.of_state(op, "cache.state", cache.state, q, per_channel, window=True)
    T = check_gated_delta_inputs(op, inputs, dims, max_T=cache.T)
    _check_num_tokens(op, num_tokens, slot_ids, T)
    run = inputs.for_launch(op, dims.head_k_dim)
    torch.ops.replayssm.gated_delta_snapshot_verify(cache.state, cache.snapshots, *run[:6], num_tokens, *run[6:])
    return run.out


def gdn_snapshot_verify(
    cache: SnapshotCache,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Baseline: GDN verify that reads the state once and writes the state after every token
    (:func:`mamba2_snapshot_verify`; state [num_slots, v_heads, head_v_dim, head_k_dim])."""
    return _delta_snapshot_verify(
        "gdn_snapshot_verify", False, cache, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out
    )


def kda_snapshot_verify(
    cache: SnapshotCache,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Baseline: KDA verify with per-token state snapshots (see :func:`gdn_snapshot_verify`)."""
    return _delta_snapshot_verify(
        "kda_snapshot_verify", True, cache, q, k, v, g, beta, slot_ids, num_tokens, scale, use_qk_l2norm, out
    )


def snapshot_commit(cache: SnapshotCache, slot_ids: Tensor, num_accepted: Tensor) -> None:
    """Baseline commit: ``state[slot] := snapshots[slot, num_accepted - 1]`` for live rows.

    ``num_accepted`` [batch] int32 in [1, T_max] (checked eagerly); accepting more tokens than
    the verify had is the caller's error (the baseline keeps no pending count).
    """
    op = "snapshot_commit"
    slot_ids = slot_tensor(slot_ids)  # a SlotBatch is checked again: the window checks read the ids
    check_cache_type(op, cache, (SnapshotCache,))
    device = cache.state.device
    check_rank(op, "slot_ids", slot_ids, 1, "[batch]")
    batch = slot_ids.shape[0]
    check_slot_ids(op, slot_ids, batch, cache.num_slots, device)
    _check_counts(
        op, "num_accepted", num_accepted, slot_ids, batch, device, lambda: torch.full((batch,), cache.T), "snapshot count T"
    )
    torch.ops.replayssm.snapshot_commit(cache.state, cache.snapshots, slot_ids, num_accepted)
