"""The current recurrent state a ReplaySSM cache holds: checkpoint with its records folded in.

For handing a sequence's state back to a host that runs its own way (a prefill continuation,
a conventional step, disabling the extension). Reads only: the cache is not modified.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from torch import Tensor

from ..cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from ..reference.gated_delta import gated_delta_records_state
from ..reference.mamba2 import mamba2_records_state
from ..reference.spec import committed_cursor
from ..checks import check_tensor, slot_index
from ..registry import family, family_of_cache, kinds

__all__ = ["replay_cache_state", "mamba2_cache_state", "gated_delta_cache_state"]

ReplayCache = Union[Mamba2ReplayCache, GDNReplayCache, KDAReplayCache]


def replay_cache_state(cache: ReplayCache, slot_ids: Tensor, *, A: Optional[Tensor] = None) -> Tensor:
    """The state after the last recorded token of each given slot: S0 decayed + the records.

    Equal (up to rounding) to the state a conventional recurrence would hold after the same
    tokens; a slot with cursor 0 gives its checkpoint. Between a speculative verify and its
    commit: the committed state (the window's records are not counted).

    Args:
        cache: a :class:`Mamba2ReplayCache`, :class:`GDNReplayCache` or :class:`KDAReplayCache`
            (or a registered family's cache: its ``replay_state`` folds the records in).
        slot_ids: [n] int32 | int64, ids in [0, num_slots) (no padding rows; repeats allowed).
        A: Mamba-2 only, required there: [nheads] fp32 | fp64, negative (-exp(A_log)), as
            passed to ``mamba2_replay_step``. Must be None for the delta-rule caches.
    Returns:
        [n, *cache.checkpoint.shape[1:]] in fp32 (fp64 for a fp64 cache), on the cache's
        device; our state layout (Mamba-2 [n, nheads, head_dim, d_state], GDN/KDA
        [n, v_heads, head_v_dim, head_k_dim]).
    Raises:
        TypeError: ``cache`` is not a replay cache; ``slot_ids`` or ``A`` of the wrong type.
        ValueError: slot ids out of range or of the wrong shape; ``A`` missing, superfluous or
            of the wrong shape.
    """
    op = "replay_cache_state"
    layer_family = family_of_cache(cache)
    if layer_family is None:
        expected = ", ".join(family(kind).cache.__name__ for kind in kinds())
        raise TypeError(f"{op}: cache is {type(cache).__name__}; expected one of {expected}")
    slots = slot_index(op, slot_ids, cache.num_slots, cache.device, distinct=False)
    return layer_family.replay_state(op, cache, slots, A)


def mamba2_cache_state(op: str, cache: Mamba2ReplayCache, slots: Tensor, A: Optional[Tensor]) -> Tensor:
    """:func:`replay_cache_state` of a Mamba-2 cache (the family's ``replay_state``): the
    slots already checked; ``A`` required."""
    if A is None:
        raise ValueError(f"{op}: A is None; a Mamba2ReplayCache needs A [nheads] (-exp(A_log)) to decay its records")
    check_tensor(op, "A", A, "[nheads]", (cache.nheads,), dtypes=(torch.float32, torch.float64), device=cache.device)
    return mamba2_records_state(
        checkpoint=cache.checkpoint_values(slots),
        cursor=cache.cursor[slots],
        x_records=cache.x_records[slots],
        dt_records=cache.dt_records[slots],
        B_records=cache.B_records[slots],
        A=A,
    )


def gated_delta_cache_state(op: str, cache: GDNReplayCache, slots: Tensor, A: Optional[Tensor]) -> Tensor:
    """:func:`replay_cache_state` of a GDN / KDA cache (the families' ``replay_state``): the
    slots already checked; ``A`` must be None (the records carry their log-decays)."""
    if A is not None:
        raise ValueError(f"{op}: A is given for a {type(cache).__name__}; expected None (its log-decays are in g_records)")
    return gated_delta_records_state(
        checkpoint=cache.checkpoint_values(slots),
        cursor=committed_cursor(cache.cursor[slots]),  # a flushed verify may not be committed yet
        d_records=cache.d_records[slots],
        k_records=cache.k_records[slots],
        g_records=cache.g_records[slots],
    )
