"""The Hugging Face SSM mixers the hook supports, and their single-token decode with our ops.

One adapter per mixer family, registered by mixer class name with :func:`register_adapter`
(a new layer family adds its adapter the same way, from its own module). ``decode`` follows its mixer's own single-token path (input mask,
projections, causal-conv update of the host's conv state, gates, gated norm, output projection),
calling the mixer's own submodules and its modelling module's helpers; only the recurrent step
is replaced by a ``trtllm_replayssm`` op. The adapters also convert between the host's
recurrent-state layout and ours, and give back the state a cache holds (checkpoint with its
records folded in) when the host needs it again.

The step runs on a *store*: a ReplaySSM cache (route ``replay_step``) or, for the conventional
route ``decode_step``, a plain state tensor in our layout that the conventional op updates in
place. Rows of a decode batch map to store slots through ``slot_ids`` [batch] int32.
"""

from __future__ import annotations

import sys

from typing import Optional, Union

import torch

from torch import Tensor, nn

from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.models import GDN, KDA, MAMBA2, DeltaRuleGeometry, Mamba2Geometry
from trtllm_replayssm.registry import is_ssm, kinds
from trtllm_replayssm.ops import (
    SlotBatch,
    gdn_decode_step,
    gdn_replay_step,
    kda_decode_step,
    kda_replay_step,
    mamba2_decode_step,
    mamba2_replay_step,
    replay_cache_state,
)
from trtllm_replayssm.reference.mamba2 import compute_dtype

__all__ = ["MixerAdapter", "GDNAdapter", "ADAPTERS", "register_adapter", "supported_mixers_text"]

ReplayCache = Union[Mamba2ReplayCache, GDNReplayCache, KDAReplayCache]
Store = Union[ReplayCache, Tensor]


def _host_module(mixer: nn.Module):
    """The mixer's modelling module: its helpers (causal_conv1d_update, apply_mask_to_padding_states)
    are looked up there so the hooked decode uses whatever implementation the host resolved."""
    return sys.modules[type(mixer).__module__]


class MixerAdapter:
    """How the hook drives one family of mixers (subclasses fill in the family's parts).

    Attributes:
        family: ``"mamba2"``, ``"gdn"`` or ``"kda"`` (the op family; the layer kind of
            :mod:`trtllm_replayssm.models`).
        label: the layer kind in words, for reports.
        classes: mixer class name -> the host model family, in words.
    """

    family = ""
    label = ""
    classes: dict = {}

    def check(self, mixer: nn.Module) -> None:
        """Raises ValueError when this mixer's configuration cannot run on our ops."""

    def geometry(self, mixer: nn.Module):
        """The layer's geometry for the planner (:mod:`trtllm_replayssm.models`)."""
        raise NotImplementedError

    def state_shape(self, mixer: nn.Module) -> tuple:
        """One sequence's recurrent state in our layout (the ops' per-slot state shape)."""
        raise NotImplementedError

    def to_ours(self, host_state: Tensor) -> Tensor:
        """Host recurrent state [batch, ...] -> our state layout (a view)."""
        return host_state

    def to_host(self, state: Tensor) -> Tensor:
        """Our state layout -> the host's (a view)."""
        return state

    def admit(self, store: Store, slot_ids: Tensor, host_state: Tensor) -> None:
        """Rows' slots start from the host's recurrent states [batch, ...] (cursor 0)."""
        state = self.to_ours(host_state)
        if isinstance(store, Tensor):
            store[slot_ids.long()] = state.to(store.dtype)
        else:
            store.admit(slot_ids, state)

    def state(self, mixer: nn.Module, store: Store, slot_ids: Tensor) -> Tensor:
        """The current states of ``slot_ids`` in our layout: checkpoint with the records folded in."""
        if isinstance(store, Tensor):
            return store[slot_ids.long()]
        return replay_cache_state(store, slot_ids, A=self.records_A(mixer, store))

    def records_A(self, mixer: nn.Module, cache: ReplayCache) -> Optional[Tensor]:
        """The A that :func:`replay_cache_state` needs to decay this family's records (None:
        the records carry their decays)."""
        return None

    def decode(
        self,
        mixer: nn.Module,
        hidden_states: Tensor,
        attention_mask: Optional[Tensor],
        conv_state: Tensor,
        store: Store,
        slot_ids: Union[Tensor, SlotBatch],
        *,
        rounding_seed: Optional[int] = None,
    ) -> Tensor:
        """The mixer's output [batch, 1, hidden_size] for one new token per row.

        ``conv_state`` (the host's) is updated in place by the host's causal-conv update; the
        recurrent step reads and writes ``store`` only. ``slot_ids`` go to the op as they are
        (the hook passes a :class:`~trtllm_replayssm.ops.SlotBatch` checked once per session).
        ``rounding_seed`` goes to the replay op (stochastic rounding at flush); the hook passes
        it only when one was given, and never with a conventional store.
        """
        raise NotImplementedError


class Mamba2Adapter(MixerAdapter):
    """Mamba-2 mixers: state [batch, nheads, head_dim, d_state] in the host and here."""

    family = MAMBA2
    label = "Mamba-2"
    classes = {"Mamba2Mixer": "Mamba2", "NemotronHMamba2Mixer": "NemotronH (Nemotron 3)"}

    def check(self, mixer):
        if mixer.num_heads % mixer.n_groups:
            raise ValueError(
                f"{type(mixer).__name__} layer {mixer.layer_idx}: n_groups = {mixer.n_groups} must divide num_heads = {mixer.num_heads}"
            )
        if mixer.D.shape != (mixer.num_heads,):
            raise ValueError(
                f"{type(mixer).__name__} layer {mixer.layer_idx}: D has shape {tuple(mixer.D.shape)}; expected [nheads] = ({mixer.num_heads},)"
            )

    def geometry(self, mixer):
        return Mamba2Geometry(
            nheads=mixer.num_heads,
            head_dim=mixer.head_dim,
            d_state=mixer.ssm_state_size,
            ngroups=mixer.n_groups,
            d_conv=mixer.conv_kernel_size,
        )

    def state_shape(self, mixer):
        return (mixer.num_heads, mixer.head_dim, mixer.ssm_state_size)

    def records_A(self, mixer, cache):
        return -torch.exp(mixer.A_log.detach().to(compute_dtype(cache.checkpoint)))

    def decode(self, mixer, hidden_states, attention_mask, conv_state, store, slot_ids, *, rounding_seed=None):
        host = _host_module(mixer)
        batch, dtype = hidden_states.shape[0], hidden_states.dtype
        nheads, head_dim, ngroups, d_state = (mixer.num_heads, mixer.head_dim, mixer.n_groups, mixer.ssm_state_size)
        hidden_states = host.apply_mask_to_padding_states(hidden_states, attention_mask)
        gate, xBC, dt = mixer.in_proj(hidden_states).split([mixer.intermediate_size, mixer.conv_dim, nheads], dim=-1)
        xBC = host.causal_conv1d_update(
            xBC.transpose(1, 2), conv_state, mixer.conv1d.weight.squeeze(1), mixer.conv1d.bias, activation=mixer.activation
        )
        xBC = host.apply_mask_to_padding_states(xBC.transpose(1, 2), attention_mask)
        x, B, C = torch.split(xBC, [mixer.intermediate_size, ngroups * d_state, ngroups * d_state], dim=-1)
        args = (
            x.reshape(batch, nheads, head_dim),
            dt.reshape(batch, nheads),
            -torch.exp(mixer.A_log.float()),
            B.reshape(batch, ngroups, d_state),
            C.reshape(batch, ngroups, d_state),
        )
        kw = dict(slot_ids=slot_ids, D=mixer.D, dt_bias=mixer.dt_bias, dt_softplus=True)
        if isinstance(store, Tensor):
            y = mamba2_decode_step(store, *args, **kw)
        else:
            y = mamba2_replay_step(store, *args, **kw, rounding_seed=rounding_seed)
        y = mixer.norm(y.reshape(batch, 1, -1), gate)
        return mixer.out_proj(y.to(dtype))


class _DeltaRuleAdapter(MixerAdapter):
    """GDN and KDA mixers: host state [batch, v_heads, head_k_dim, head_v_dim] (FLA layout),
    ours [.., v_heads, head_v_dim, head_k_dim]."""

    def to_ours(self, host_state):
        return host_state.transpose(-1, -2)

    def to_host(self, state):
        return state.transpose(-1, -2)

    def _heads(self, mixer) -> tuple[int, int, int, int]:
        """(k_heads, v_heads, head_k_dim, head_v_dim)."""
        raise NotImplementedError

    def check(self, mixer):
        k_heads, v_heads, _, _ = self._heads(mixer)
        if v_heads % k_heads:
            raise ValueError(
                f"{type(mixer).__name__} layer {mixer.layer_idx}: key heads = {k_heads} must divide value heads = {v_heads}"
            )

    def geometry(self, mixer):
        k_heads, v_heads, head_k_dim, head_v_dim = self._heads(mixer)
        return DeltaRuleGeometry(
            k_heads=k_heads, v_heads=v_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim, d_conv=mixer.conv_kernel_size
        )

    def state_shape(self, mixer):
        _, v_heads, head_k_dim, head_v_dim = self._heads(mixer)
        return (v_heads, head_v_dim, head_k_dim)

    def _step(self, store, q, k, v, g, beta, slot_ids, rounding_seed=None):
        """The recurrent step on one token: o [batch, v_heads, head_v_dim]."""
        raise NotImplementedError


class GDNAdapter(_DeltaRuleAdapter):
    """Gated DeltaNet mixers of Qwen3-Next and Qwen3.5 (they differ only in the input projections)."""

    family = GDN
    label = "Gated DeltaNet"
    classes = {"Qwen3NextGatedDeltaNet": "Qwen3-Next", "Qwen3_5GatedDeltaNet": "Qwen3.5"}

    def _heads(self, mixer):
        return mixer.num_k_heads, mixer.num_v_heads, mixer.head_k_dim, mixer.head_v_dim

    @staticmethod
    def _project(mixer, hidden_states):
        """(mixed q|k|v [batch, 1, conv_dim], z [batch, 1, v_heads, head_v_dim],
        b, a [batch, 1, v_heads]) as the host mixer projects them."""
        batch, seq = hidden_states.shape[:2]
        if hasattr(mixer, "in_proj_qkvz"):  # Qwen3-Next: fused, head-interleaved projections
            q, k, v, z, b, a = mixer.fix_query_key_value_ordering(
                mixer.in_proj_qkvz(hidden_states), mixer.in_proj_ba(hidden_states)
            )
            mixed = torch.cat([t.reshape(batch, seq, -1) for t in (q, k, v)], dim=-1)
            return mixed, z, b, a
        z = mixer.in_proj_z(hidden_states).reshape(batch, seq, -1, mixer.head_v_dim)
        return (mixer.in_proj_qkv(hidden_states), z, mixer.in_proj_b(hidden_states), mixer.in_proj_a(hidden_states))

    @staticmethod
    def log_decay(mixer, a):
        """The log-decay g (fp32, a's shape) from the raw decay projection a, as the host computes it."""
        return -mixer.A_log.float().exp() * nn.functional.softplus(a.float() + mixer.dt_bias)

    def decode(self, mixer, hidden_states, attention_mask, conv_state, store, slot_ids, *, rounding_seed=None):
        host = _host_module(mixer)
        batch = hidden_states.shape[0]
        k_heads, v_heads, head_k_dim, head_v_dim = self._heads(mixer)
        hidden_states = host.apply_mask_to_padding_states(hidden_states, attention_mask)
        mixed, z, b, a = self._project(mixer, hidden_states)
        mixed = host.causal_conv1d_update(
            mixed.transpose(1, 2), conv_state, mixer.conv1d.weight.squeeze(1), mixer.conv1d.bias, mixer.activation
        ).transpose(1, 2)
        q, k, v = torch.split(mixed, [mixer.key_dim, mixer.key_dim, mixer.value_dim], dim=-1)
        # The host's gate expressions: β in the activation dtype, g in fp32.
        beta = b.sigmoid().reshape(batch, v_heads)
        g = self.log_decay(mixer, a)
        o = self._step(
            store,
            q.reshape(batch, k_heads, head_k_dim),
            k.reshape(batch, k_heads, head_k_dim),
            v.reshape(batch, v_heads, head_v_dim),
            g.reshape(batch, v_heads),
            beta,
            slot_ids,
            rounding_seed,
        )
        o = mixer.norm(o.reshape(-1, head_v_dim), z.reshape(-1, head_v_dim))
        return mixer.out_proj(o.reshape(batch, 1, -1))

    def _step(self, store, q, k, v, g, beta, slot_ids, rounding_seed=None):
        if isinstance(store, Tensor):
            return gdn_decode_step(store, q, k, v, g, beta, slot_ids=slot_ids, use_qk_l2norm=True)
        return gdn_replay_step(store, q, k, v, g, beta, slot_ids=slot_ids, use_qk_l2norm=True, rounding_seed=rounding_seed)


class KDAAdapter(_DeltaRuleAdapter):
    """Kimi Delta Attention mixers of Kimi Linear: per-channel log-decay, as many key as value heads."""

    family = KDA
    label = "Kimi Delta Attention"
    classes = {"KimiLinearDeltaAttention": "Kimi Linear"}

    def _heads(self, mixer):
        return mixer.num_heads, mixer.num_heads, mixer.head_dim, mixer.head_dim

    def decode(self, mixer, hidden_states, attention_mask, conv_state, store, slot_ids, *, rounding_seed=None):
        host = _host_module(mixer)
        batch, heads, head_dim = hidden_states.shape[0], mixer.num_heads, mixer.head_dim
        hidden_states = host.apply_mask_to_padding_states(hidden_states, attention_mask)
        mixed = torch.cat([mixer.q_proj(hidden_states), mixer.k_proj(hidden_states), mixer.v_proj(hidden_states)], dim=-1)
        mixed = host.causal_conv1d_update(
            mixed.transpose(1, 2),
            conv_state,
            weight=mixer.conv1d.weight.squeeze(1),
            bias=mixer.conv1d.bias,
            activation=mixer.activation,
        )
        q, k, v = (t.reshape(batch, heads, head_dim) for t in torch.split(mixed.transpose(1, 2), [mixer.qkv_dim] * 3, dim=-1))
        g = mixer.forget_gate(hidden_states).reshape(batch, heads, head_dim)
        beta = torch.sigmoid(mixer.b_proj(hidden_states)).reshape(batch, heads)
        o = self._step(store, q, k, v, g, beta, slot_ids, rounding_seed)
        gate = mixer.g_b_proj(mixer.g_a_proj(hidden_states)).reshape(batch, 1, heads, head_dim)
        o = mixer.o_norm(o.reshape(batch, 1, heads, head_dim), gate).reshape(batch, 1, -1)
        return mixer.o_proj(o)

    def _step(self, store, q, k, v, g, beta, slot_ids, rounding_seed=None):
        if isinstance(store, Tensor):
            return kda_decode_step(store, q, k, v, g, beta, slot_ids=slot_ids, use_qk_l2norm=True)
        return kda_replay_step(store, q, k, v, g, beta, slot_ids=slot_ids, use_qk_l2norm=True, rounding_seed=rounding_seed)


ADAPTERS: dict[str, MixerAdapter] = {}
"""Mixer class name -> its adapter: what the hook looks a module up in (:func:`register_adapter`)."""


def register_adapter(adapter: MixerAdapter) -> MixerAdapter:
    """Adds ``adapter`` for each of its mixer ``classes``; returns it. A new layer family's HF
    host adapter is this one call (its family registered in :mod:`trtllm_replayssm.registry`).

    Raises:
        TypeError: not a :class:`MixerAdapter`.
        ValueError: its family is not a registered SSM layer kind, it names no mixer class, or
            one of its classes already has an adapter.
    """
    if not isinstance(adapter, MixerAdapter):
        raise TypeError(f"register_adapter: adapter is {type(adapter).__name__}; expected a MixerAdapter")
    if not is_ssm(adapter.family):
        raise ValueError(
            f"register_adapter: family {adapter.family!r} is not a registered SSM layer kind; expected one of {', '.join(kinds())}"
        )
    if not adapter.classes:
        raise ValueError(f"register_adapter: {type(adapter).__name__} names no mixer class")
    taken = [cls for cls in adapter.classes if cls in ADAPTERS]
    if taken:
        raise ValueError(f"register_adapter: {', '.join(taken)} already {'has' if len(taken) == 1 else 'have'} an adapter")
    ADAPTERS.update(dict.fromkeys(adapter.classes, adapter))
    return adapter


for _adapter in (Mamba2Adapter(), GDNAdapter(), KDAAdapter()):
    register_adapter(_adapter)


def supported_mixers_text() -> str:
    """One line naming every supported mixer class and its model family."""
    return ", ".join(
        f"{cls} ({model}, {adapter.label})"
        for adapter in dict.fromkeys(ADAPTERS.values())
        for cls, model in adapter.classes.items()
    )
