"""The built-in layer families, one registration each (:mod:`trtllm_replayssm.registry`).

A new family follows the same pattern from its own module: a geometry dataclass (or a built-in
one), a replay cache class with ``for_geometry``, a shard rule, a decode mixer and its random
weights, its ``replay_state``, then ``register(LayerFamily(...))``. ``tests/test_registry.py`` adds one that reuses the
GDN kernels with another gate.
"""

from __future__ import annotations

from .cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from .ops.state import gated_delta_cache_state, mamba2_cache_state
from .models import GDN, KDA, MAMBA2, DeltaRuleGeometry, Mamba2Geometry
from .registry import LayerFamily, register
from .tp.layers import GDNMixer, KDAMixer, Mamba2Mixer, gdn_random_weights, kda_random_weights, mamba2_random_weights
from .tp.shard import DeltaRuleShard, Mamba2Shard

__all__ = ["MAMBA2_FAMILY", "GDN_FAMILY", "KDA_FAMILY"]

MAMBA2_FAMILY = register(
    LayerFamily(
        kind=MAMBA2,
        geometry=Mamba2Geometry,
        cache=Mamba2ReplayCache,
        shard=Mamba2Shard,
        random_weights=mamba2_random_weights,
        mixer=Mamba2Mixer,
        replay_state=mamba2_cache_state,
    )
)
GDN_FAMILY = register(
    LayerFamily(
        kind=GDN,
        geometry=DeltaRuleGeometry,
        cache=GDNReplayCache,
        shard=DeltaRuleShard,
        random_weights=gdn_random_weights,
        mixer=GDNMixer,
        replay_state=gated_delta_cache_state,
    )
)
KDA_FAMILY = register(
    LayerFamily(
        kind=KDA,
        geometry=DeltaRuleGeometry,
        cache=KDAReplayCache,
        shard=DeltaRuleShard,
        random_weights=kda_random_weights,
        mixer=KDAMixer,
        replay_state=gated_delta_cache_state,
    )
)
