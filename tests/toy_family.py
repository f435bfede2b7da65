"""A toy SSM layer family for tests/test_registry.py: what a new family provides, in one module.

It is Gated DeltaNet with another gate: the log-decay is g = -exp(A_log) * sigmoid(a + dt_bias)
(GDN: softplus instead of sigmoid), so it reuses the GDN kernels, ops, geometry, shard rule and
weights layout, and adds its own cache class, gate and mixer. Registering it is one call
(:func:`register_toy`); nothing else in the package changes.
"""

import torch

from torch import Tensor

from trtllm_replayssm.cache import GDNReplayCache
from trtllm_replayssm.models import DeltaRuleGeometry
from trtllm_replayssm.ops.state import gated_delta_cache_state
from trtllm_replayssm.registry import LayerFamily, register
from trtllm_replayssm.tp.layers import GDNMixer, gdn_random_weights
from trtllm_replayssm.tp.shard import DeltaRuleShard

TOY = "toy_gdn"


class ToyReplayCache(GDNReplayCache):
    """The toy layer's replay cache: the GDN layout (g_records [num_slots, v_heads, L])."""


def toy_gate(a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Tensor) -> tuple:
    """(g, beta) [batch, v_heads] fp32 from a, b [batch, v_heads]; A_log, dt_bias [v_heads]:
    g = -exp(A_log) * sigmoid(a + dt_bias) (a bounded decay rate), beta = sigmoid(b)."""
    cd = torch.float64 if a.dtype == torch.float64 else torch.float32
    g = -torch.exp(A_log.to(cd)) * torch.sigmoid(a.to(cd) + dt_bias.to(cd))
    return g, torch.sigmoid(b.to(cd))


class ToyMixer(GDNMixer):
    """The toy layer's decode mixer on one TP rank: GDN's, with :func:`toy_gate`."""

    kind = TOY
    gate = staticmethod(toy_gate)


TOY_FAMILY = LayerFamily(
    kind=TOY,
    geometry=DeltaRuleGeometry,
    cache=ToyReplayCache,
    shard=DeltaRuleShard,
    random_weights=gdn_random_weights,
    mixer=ToyMixer,
    replay_state=gated_delta_cache_state,
)


def register_toy() -> LayerFamily:
    """The toy family's one registration."""
    return register(TOY_FAMILY)


def toy_hf_adapter():
    """The toy family's Hugging Face host adapter: GDN's, for mixers of class
    ``ToyGatedDeltaNet`` (a Qwen3-Next layer with the toy gate), with :func:`toy_gate`'s decay.
    Registering it is one :func:`~trtllm_replayssm_builders.hf.register_adapter` call."""
    from trtllm_replayssm_builders.hf.mixers import GDNAdapter

    class ToyHFAdapter(GDNAdapter):
        family = TOY
        label = "toy Gated DeltaNet"
        classes = {"ToyGatedDeltaNet": "toy Qwen3-Next"}

        @staticmethod
        def log_decay(mixer, a):
            return -mixer.A_log.float().exp() * torch.sigmoid(a.float() + mixer.dt_bias)

    return ToyHFAdapter()
