"""The layer-family registry: what the package knows about each SSM layer family, registered once.

A family (Mamba-2, GDN, KDA, or one of yours) is one :class:`LayerFamily`: its geometry class,
its replay cache class (which also gives the byte model), its tensor-parallel shard rule and its
decode mixer with random weights (the TP layers, which call the family's ops). The caches' pool, the byte model and
planner, the TP sharding and the TP decode stack look a layer's kind up here instead of
switching on it, so a new family is its own module plus one :func:`register` call.

The built-in families live in :mod:`trtllm_replayssm.families`; the first lookup imports it
(the one place a bottom-layer module reaches up: registering needs the ops and TP layers).
"""

from __future__ import annotations

import importlib

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

__all__ = ["LayerFamily", "register", "family", "family_of_cache", "kinds", "is_ssm"]


@dataclass(frozen=True)
class LayerFamily:
    """One SSM layer family.

    Attributes:
        kind: the layer kind in :class:`~trtllm_replayssm.models.Layer` (``"mamba2"``).
        geometry: the geometry dataclass of one layer: ``state_dims`` (one state's shape, the
            checkpoint's [1:]), ``conv_dim``, ``d_conv`` and ``for_tp(tp_size)`` (a rank's share).
        cache: the replay cache class (fields: checkpoint, then the records, then cursor,
            arrivals, pending; see :mod:`trtllm_replayssm.cache`), with
            ``cache.for_geometry(geometry, num_slots, L, *, state_dtype, record_dtype, device)``
            allocating a zeroed one. The byte model reads the record layout off it
            (:func:`trtllm_replayssm.memory.record_bytes`), so there is no second description.
        shard: the shard rule: ``shard(geometry, tp_size, rank)`` (whole-layer geometry), with
            ``local`` (the rank's geometry), ``conv_rows()`` and ``shard_cache(cache)``; raises
            ValueError on an impossible split.
        random_weights: ``(geometry, hidden_size, generator)`` -> the whole layer's weights
            (name -> fp32 CPU tensor) that ``mixer`` takes.
        mixer: the decode mixer on one TP rank: ``mixer(weights, shard, group, *, dtype,
            device)`` with ``step(h, cache, conv_state, slot_ids, route)`` (route
            ``"conventional"`` or ``"replay"``).
        replay_state: ``(op, cache, slots, A)`` -> the current states [n, *state_dims] of the
            (checked, int64) ``slots``: checkpoint with the records folded in, what
            :func:`~trtllm_replayssm.ops.replay_cache_state` returns (``A``: the op's optional
            argument, checked here; ``op`` names it in errors).
    """

    kind: str
    geometry: type
    cache: type
    shard: type
    random_weights: Callable
    mixer: type
    replay_state: Callable

    def check_geometry(self, owner: str, geometry) -> None:
        """TypeError unless ``geometry`` is an instance of the family's geometry class."""
        if not isinstance(geometry, self.geometry):
            raise TypeError(
                f"{owner}: a {self.kind} layer's geometry is {type(geometry).__name__}; expected {self.geometry.__name__}"
            )


_FAMILIES: Dict[str, LayerFamily] = {}
_BUILTINS_LOADED = False


def register(layer_family: LayerFamily) -> LayerFamily:
    """Adds ``layer_family``; returns it.

    Raises:
        TypeError: not a :class:`LayerFamily`.
        ValueError: its kind is not a non-empty string, or is already registered.
    """
    if not isinstance(layer_family, LayerFamily):
        raise TypeError(f"register: layer_family is {type(layer_family).__name__}; expected a LayerFamily")
    kind = layer_family.kind
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"register: kind is {kind!r}; expected a non-empty str")
    _load_builtins()
    if kind in _FAMILIES:
        raise ValueError(f"register: kind {kind!r} is already registered (to {_FAMILIES[kind].cache.__name__})")
    _FAMILIES[kind] = layer_family
    return layer_family


def _load_builtins() -> None:
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        importlib.import_module(".families", __package__)


def family(kind: str) -> LayerFamily:
    """The family of SSM layer kind ``kind``.

    Raises:
        ValueError: no family of that kind is registered (the message lists those that are).
    """
    _load_builtins()
    if kind not in _FAMILIES:
        raise ValueError(f"no SSM layer family {kind!r}; expected one of {', '.join(_FAMILIES)}")
    return _FAMILIES[kind]


def family_of_cache(cache) -> Optional[LayerFamily]:
    """The family whose cache class is nearest in ``type(cache)``'s MRO (a subclass of a
    family's cache that registers no family of its own belongs to that family); None if none."""
    _load_builtins()
    by_cache = {f.cache: f for f in _FAMILIES.values()}
    for cls in type(cache).__mro__:
        if cls in by_cache:
            return by_cache[cls]
    return None


def kinds() -> Tuple[str, ...]:
    """The registered SSM layer kinds, built-ins first, in registration order."""
    _load_builtins()
    return tuple(_FAMILIES)


def is_ssm(kind: str) -> bool:
    """Whether ``kind`` is a registered SSM layer kind."""
    _load_builtins()
    return kind in _FAMILIES
