"""enable_replayssm / disable_replayssm: Hugging Face hybrids decode their SSM layers by ReplaySSM.

The hook replaces the ``forward`` of each supported SSM mixer instance (the weights stay where
they are). Per call of a hooked mixer:

* no cache (``use_cache=False``): the host's own forward.
* prefill (the host cache has no previous state for the layer): the host's own forward, which
  leaves the final SSM state in the host cache; that state is then admitted into a ReplaySSM
  cache (checkpoint := state, cursor := 0). The host's state tensor is not written again.
* single-token decode: the mixer's decode with the recurrent step replaced by the replay op on
  the ReplaySSM cache; the host's conv state is updated as usual, attention KV is untouched.
* multi-token continuation from a cache: the current states (checkpoint with the records folded
  in) are written back to the host's state tensor, the host runs its own forward, and its final
  state is admitted again.

ReplaySSM caches belong to the host cache object (``past_key_values``) they were admitted from
and are freed with it: one :class:`~trtllm_replayssm.pool.ReplayCachePool` per host cache, with
a slot per row of its batch, allocated when its first SSM layer is admitted (the planner's
``pool_bytes``; the pool's conv-state buffers stay unused, the host keeps its own conv states).
"""

from __future__ import annotations

import types
import weakref

from dataclasses import dataclass, field
from typing import Optional

import torch

from torch import Tensor, nn

from trtllm_replayssm.cache import FP8, MAX_L, REPLAY_CHECKPOINT_DTYPES
from trtllm_replayssm.checks import ROUNDED_CHECKPOINT_DTYPES, is_rounding_seed
from trtllm_replayssm.models import HybridModel, Layer
from trtllm_replayssm.ops import SlotBatch
from trtllm_replayssm.planner import DTYPE_NAMES
from trtllm_replayssm.pool import ReplayCachePool
from trtllm_replayssm.route_advice import model_advice, warn_if_slower

from .compat import (
    CACHE_ARGUMENTS,
    TESTED_TRANSFORMERS,
    count_decoded_token,
    cache_argument,
    check_transformers_version,
    transformers_version,
    unknown_cache_arguments,
)
from .mixers import ADAPTERS, MixerAdapter, supported_mixers_text

__all__ = [
    "ROUTES",
    "STATE_DTYPES",
    "ROUNDED_STATE_DTYPES",
    "HookedLayer",
    "ReplaySSMHook",
    "enable_replayssm",
    "disable_replayssm",
    "replayssm_hook",
]

ROUTES = ("replay_step", "decode_step")
# Checkpoint dtypes the hook takes: the conventional ones (fp64 runs on the CPU reference only)
# and fp8-e4m3 with one fp32 scale per (head, head_dim) row, which only the replay route stores.
STATE_DTYPES = REPLAY_CHECKPOINT_DTYPES
# Checkpoint dtypes a flush rounds, so that stochastic rounding (rounding_seed) applies.
ROUNDED_STATE_DTYPES = ROUNDED_CHECKPOINT_DTYPES
_HOOK_ATTR = "_replayssm_hook"


def _dtype_list(dtypes) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def advice_applies(device: torch.device) -> bool:
    """Whether the route advice (:mod:`trtllm_replayssm.route_advice`) speaks for a run on
    ``device``: on CUDA devices only, since its figures are the GPU kernels' (H200); a CPU run
    uses the PyTorch reference."""
    return device.type == "cuda"


@dataclass(frozen=True)
class HookedLayer:
    """One SSM mixer the hook drives: its module path, index in the host cache, adapter, and the
    keyword its ``forward`` takes the host cache by (``cache`` or ``cache_params``)."""

    name: str
    index: int
    mixer: nn.Module
    adapter: MixerAdapter
    cache_argument: str


@dataclass
class _Session:
    """The ReplaySSM side of one host cache object: a store per hooked layer, slot r for row r.

    ``host_states`` keeps, per admitted layer, the host state tensor the store was admitted
    from: the host replaces that tensor when it reorders or selects rows (beam search,
    ``reorder_cache``, offloading), after which the store's slots no longer match its rows.
    """

    batch: int
    slot_ids: Tensor
    stores: dict
    host_states: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The session's slot ids never change: checked once here for every layer and step.
        self.checked = SlotBatch(self.slot_ids, self.batch)


class ReplaySSMHook:
    """What :func:`enable_replayssm` installed on a model (``replayssm_hook(model)`` returns it).

    Attributes:
        layers (tuple[HookedLayer]): the hooked SSM mixers, in module order.
        buffer_len (int): L, records per slot.
        route (str): ``"replay_step"`` (ReplaySSM) or ``"decode_step"`` (the conventional op on
            a state held here; a baseline for benchmarks).
        state_dtype (torch.dtype | None): checkpoint dtype; None keeps the host state's dtype.
        rounding_seed (int | None): the seed of stochastic rounding at flush, passed to every
            replay step; None rounds to nearest.
        decode_steps (dict[int, int]): single-token decode calls each hooked layer ran through
            the route's op, by layer index (a run that decoded on the host path shows none).
    """

    def __init__(
        self,
        model: nn.Module,
        layers: tuple,
        *,
        buffer_len: int,
        route: str,
        state_dtype: Optional[torch.dtype],
        rounding_seed: Optional[int] = None,
    ):
        self.model_name = type(model).__name__
        self.layers = layers
        self.buffer_len = buffer_len
        self.route = route
        self.state_dtype = state_dtype
        self.rounding_seed = rounding_seed
        self.decode_steps: dict = {}
        self._advised: set = set()
        self._sessions: "weakref.WeakKeyDictionary[object, _Session]" = weakref.WeakKeyDictionary()

    # ------------------------------------------------------------------ reporting

    def summary(self) -> str:
        """One line: what was replaced."""
        kinds: dict = {}
        for layer in self.layers:
            kinds.setdefault(layer.adapter.label, []).append(layer.index)
        parts = "; ".join(f"{len(idx)} {label} layer{'s' if len(idx) > 1 else ''} {idx}" for label, idx in kinds.items())
        settings = f"L = {self.buffer_len}, route {self.route}"
        if self.state_dtype is not None:
            settings += f", {DTYPE_NAMES[self.state_dtype]} checkpoint"
        if self.rounding_seed is not None:
            settings += f", stochastic rounding seed {self.rounding_seed}"
        return f"ReplaySSM on {self.model_name}: {parts}; {settings}"

    def __repr__(self) -> str:
        return f"<ReplaySSMHook {self.summary()}>"

    def hybrid_model(self) -> HybridModel:
        """The hooked SSM layers, with the geometry their caches use, as the planner's
        :class:`~trtllm_replayssm.models.HybridModel` (attention and MLP layers left out)."""
        layers = tuple(Layer(l.index, l.adapter.family, l.adapter.geometry(l.mixer)) for l in self.layers)
        return HybridModel(name=f"{self.model_name} (SSM layers)", family=self.model_name, layers=layers)

    def stores(self, past_key_values) -> dict:
        """The stores (ReplaySSM caches, views into one pool; state tensors for
        ``decode_step``) of one host cache object, by layer index; empty when nothing was
        admitted from it."""
        session = self._sessions.get(past_key_values)
        return dict(session.stores) if session is not None else {}

    def _allocate(self, batch: int, *, state_dtype: torch.dtype, act_dtype: torch.dtype, device: torch.device) -> _Session:
        """The one place the hook allocates cache memory: every hooked layer's store for
        ``batch`` rows. ``replay_step``: the caches of a ReplayCachePool (one buffer per field
        and layer geometry; each layer's admission sets its checkpoints and cursors);
        ``decode_step``: a state tensor per layer."""
        slot_ids = torch.arange(batch, dtype=torch.int32, device=device)
        if self.route == "decode_step":
            stores = {
                l.index: torch.zeros(batch, *l.adapter.state_shape(l.mixer), dtype=state_dtype, device=device)
                for l in self.layers
            }
            return _Session(batch, slot_ids, stores)
        if advice_applies(device):
            self._advise(batch, state_dtype, act_dtype)
        pool = ReplayCachePool(
            self.hybrid_model(),
            batch,
            buffer_len=self.buffer_len,
            state_dtype=state_dtype,
            record_dtype=act_dtype,
            conv_dtype=act_dtype,
            num_padding_slots=0,
            device=device,
        )
        return _Session(batch, slot_ids, {l.index: pool.cache(l.index) for l in self.layers})

    def _advise(self, batch: int, state_dtype: torch.dtype, record_dtype: torch.dtype) -> None:
        """Once per (batch, checkpoint dtype, record dtype), on a CUDA device: a SlowRouteWarning
        when the hooked layers' replay step was measured (H200) slower than the conventional step
        there (the route stays). ``record_dtype``: the records' dtype, which :meth:`_allocate`
        makes the activations' (an fp32 or fp16 model's records were never timed: no warning).
        A CPU run (the PyTorch reference) gets none: the figures are the GPU kernels'."""
        if (batch, state_dtype, record_dtype) in self._advised:
            return
        self._advised.add((batch, state_dtype, record_dtype))
        advice = model_advice(
            self.hybrid_model(),
            "replay",
            state_dtype=DTYPE_NAMES[state_dtype],
            L=self.buffer_len,
            batch=batch,
            record_dtype=DTYPE_NAMES[record_dtype],
        )
        warn_if_slower(advice, f"enable_replayssm on {self.model_name}", stacklevel=4)

    # ------------------------------------------------------------------ install

    def _install(self) -> None:
        for layer in self.layers:
            original = type(layer.mixer).forward

            # The mixers' forward is (hidden_states, cache, attention_mask, **kwargs) in every
            # supported release; the cache's keyword is ``cache_params`` up to 5.23.
            def forward(mixer, hidden_states, cache=None, attention_mask=None, *, _layer=layer, _original=original, **kwargs):
                return self._forward(_layer, _original, hidden_states, cache, attention_mask, kwargs)

            layer.mixer.forward = types.MethodType(forward, layer.mixer)

    def _uninstall(self) -> None:
        """Writes every live state back to its host cache, then restores the mixers' forward."""
        for cache_params, session in list(self._sessions.items()):
            for layer in self.layers:
                if self._host_state(cache_params, layer) is session.host_states.get(layer.index):
                    self._write_back(cache_params, session, layer)
        self._sessions.clear()
        for layer in self.layers:
            del layer.mixer.forward

    # ------------------------------------------------------------------ per call

    @staticmethod
    def _host_state(cache_params, layer: HookedLayer) -> Optional[Tensor]:
        return cache_params.layers[layer.index].recurrent_states[0]

    @staticmethod
    def _where(layer: HookedLayer) -> str:
        return f"ReplaySSM hook ({type(layer.mixer).__name__} layer {layer.index})"

    def _host_cache(self, layer: HookedLayer, cache, kwargs: dict):
        """The host cache of one mixer call, given as ``cache`` (positionally or by keyword) or
        ``cache_params``; the alias is taken out of ``kwargs``. Raises when the cache came under
        two names, or under an unknown one (the layer would decode on the host path)."""
        given = [c for c in (cache, kwargs.pop("cache_params", None)) if c is not None]
        if len(given) > 1:
            raise TypeError(f"{self._where(layer)}: the host cache came both as cache and as cache_params; expected one")
        if given:
            return given[0]
        unknown = unknown_cache_arguments(kwargs)
        if unknown:
            raise RuntimeError(
                f"{self._where(layer)}: transformers {transformers_version()} "
                f"passed the host cache as {unknown[0]}=, which the hook does not "
                f"know (it takes {' or '.join(CACHE_ARGUMENTS)}), so this layer would "
                f"decode without ReplaySSM; tested transformers: "
                f"{' to '.join(TESTED_TRANSFORMERS)}"
            )
        return None

    def _host_layer(self, cache, layer: HookedLayer):
        """The host cache's layer ``layer.index``, checked for what the hook reads of it."""
        try:
            host_layer = cache.layers[layer.index]
            _ = (host_layer.recurrent_states[0], host_layer.conv_states[0], host_layer.record_past, cache.has_previous_state)
        except (AttributeError, IndexError, KeyError, TypeError) as e:
            raise RuntimeError(
                f"{self._where(layer)}: the host cache ({type(cache).__name__}, "
                f"transformers {transformers_version()}) lacks what the hook reads "
                f"(layers[{layer.index}].recurrent_states[0] / conv_states[0] / "
                f"record_past, has_previous_state): {e!r}; tested transformers: "
                f"{' to '.join(TESTED_TRANSFORMERS)}"
            ) from e
        return host_layer

    def _forward(
        self, layer: HookedLayer, original, hidden_states: Tensor, cache, attention_mask: Optional[Tensor], kwargs: dict
    ) -> Tensor:
        mixer = layer.mixer
        cache_params = self._host_cache(layer, cache, kwargs)

        def host_forward() -> Tensor:
            return original(
                mixer, hidden_states, attention_mask=attention_mask, **{layer.cache_argument: cache_params}, **kwargs
            )

        if cache_params is None:
            return host_forward()
        host_layer = self._host_layer(cache_params, layer)
        if host_layer.record_past:
            raise ValueError(
                f"{self._where(layer)}: the host cache records past states (assisted / speculative decoding); the Hugging Face hook supports greedy and sampled decoding only"
            )
        batch, seq_len = hidden_states.shape[:2]
        if not cache_params.has_previous_state(layer.index):
            out = host_forward()
            self._admit(cache_params, layer, batch, hidden_states.dtype)
            return out
        session = self._session(cache_params, layer, batch, hidden_states.dtype)
        if seq_len > 1:
            self._write_back(cache_params, session, layer)
            out = host_forward()
            self._admit(cache_params, layer, batch, hidden_states.dtype)
            return out
        # The seed goes only where it was given: an adapter registered by another package may
        # predate the keyword.
        seed = {} if self.rounding_seed is None else {"rounding_seed": self.rounding_seed}
        out = layer.adapter.decode(
            mixer,
            hidden_states,
            attention_mask,
            host_layer.conv_states[0],
            session.stores[layer.index],
            session.checked,
            **seed,
        )
        count_decoded_token(cache_params, layer.index)  # the conv state advanced in place, as the host's decode does
        self.decode_steps[layer.index] = self.decode_steps.get(layer.index, 0) + 1
        return out

    def _admit(self, cache_params, layer: HookedLayer, batch: int, act_dtype: torch.dtype) -> None:
        """Hands the host's current state of ``layer`` (all rows) to the layer's store."""
        host_state = self._host_state(cache_params, layer)
        session = self._sessions.get(cache_params)
        if session is None or session.batch != batch:
            state_dtype = self.state_dtype or host_state.dtype
            if self.rounding_seed is not None and state_dtype not in ROUNDED_STATE_DTYPES:
                # Only reachable with state_dtype=None: enable_replayssm checked an explicit one.
                raise ValueError(
                    f"enable_replayssm: rounding_seed is {self.rounding_seed} and state_dtype=None keeps the host state's dtype, {state_dtype} ({self._where(layer)}); expected a checkpoint that a flush rounds: pass state_dtype as one of {_dtype_list(ROUNDED_STATE_DTYPES)}, or rounding_seed=None"
                )
            session = self._sessions[cache_params] = self._allocate(
                batch, state_dtype=state_dtype, act_dtype=act_dtype, device=host_state.device
            )
        layer.adapter.admit(session.stores[layer.index], session.slot_ids, host_state)
        session.host_states[layer.index] = host_state

    def _session(self, cache_params, layer: HookedLayer, batch: int, act_dtype: torch.dtype) -> _Session:
        """The session holding ``layer``'s store for a decode call, checked against the host."""
        session = self._sessions.get(cache_params)
        if session is None or layer.index not in session.host_states:
            # The host prefilled before the hook was enabled: its state is current, adopt it.
            self._admit(cache_params, layer, batch, act_dtype)
            session = self._sessions[cache_params]
        where = self._where(layer)
        if self._host_state(cache_params, layer) is not session.host_states[layer.index]:
            raise ValueError(
                f"{where}: the host cache replaced its SSM state tensor since admission (beam search, reorder_cache, batch selection or offloading), so its rows no longer match the ReplaySSM slots; these are not supported with the hook"
            )
        if batch != session.batch:
            raise ValueError(f"{where}: decode batch has {batch} rows; the host cache was admitted with {session.batch}")
        return session

    def _write_back(self, cache_params, session: _Session, layer: HookedLayer) -> None:
        """The host's state tensor := the store's current states (checkpoint + folded records)."""
        host_state = session.host_states[layer.index]
        state = layer.adapter.state(layer.mixer, session.stores[layer.index], session.slot_ids)
        host_state.copy_(layer.adapter.to_host(state).to(host_state.dtype))


# ---------------------------------------------------------------------- public API


def _find_layers(model: nn.Module) -> tuple:
    """The supported SSM mixers of ``model``; ValueError naming what is unsupported."""
    found, unsupported = [], []
    for name, module in model.named_modules():
        if any(name.startswith(f"{h.name}.") for h in found):
            continue  # inside a supported mixer (e.g. a gate)
        cls = type(module).__name__
        adapter = ADAPTERS.get(cls)
        if adapter is not None:
            index = getattr(module, "layer_idx", None)
            if not isinstance(index, int):
                raise ValueError(
                    f"enable_replayssm: {name} ({cls}) has layer_idx {index!r}; expected the int index of its layer in the host cache"
                )
            if getattr(module, "_hf_hook", None) is not None or getattr(module.conv1d, "_hf_hook", None) is not None:
                raise ValueError(
                    f"enable_replayssm: {name} ({cls}) carries accelerate hooks (device_map offloading); the ReplaySSM hook needs the mixer's weights resident on one device"
                )
            adapter.check(module)
            found.append(HookedLayer(name, index, module, adapter, cache_argument(module)))
        elif isinstance(getattr(module, "A_log", None), torch.Tensor):
            unsupported.append(f"{name} ({cls})")
    supported = f"supported SSM mixers: {supported_mixers_text()}"
    if unsupported:
        raise ValueError(
            f"enable_replayssm: {type(model).__name__} has SSM layers ReplaySSM does not support: {', '.join(unsupported)} (Mamba-1 and other variants are not supported); {supported}"
        )
    if not found:
        raise ValueError(f"enable_replayssm: {type(model).__name__} has no SSM layer ReplaySSM supports; {supported}")
    return tuple(found)


def replayssm_hook(model: nn.Module) -> Optional[ReplaySSMHook]:
    """The hook installed on ``model``, or None."""
    return getattr(model, _HOOK_ATTR, None)


def _check_rounding_seed(rounding_seed, state_dtype: Optional[torch.dtype], route: str) -> None:
    """enable_replayssm's checks of ``rounding_seed`` against the other settings (a checkpoint
    dtype of None is checked when the host state's dtype is known, at the first admission)."""
    if rounding_seed is None:
        return
    if not isinstance(rounding_seed, int) or isinstance(rounding_seed, bool):
        raise TypeError(
            f"enable_replayssm: rounding_seed is {type(rounding_seed).__name__} {rounding_seed!r}; expected None or an int in [0, 2^31)"
        )
    if not is_rounding_seed(rounding_seed):
        raise ValueError(f"enable_replayssm: rounding_seed is {rounding_seed}; expected None or an int in [0, 2^31)")
    if route != "replay_step":
        raise ValueError(
            f"enable_replayssm: rounding_seed is {rounding_seed} with route {route!r}; expected route 'replay_step' (stochastic rounding happens at a replay flush; the conventional step rounds its state to nearest every step) or rounding_seed=None"
        )
    if state_dtype is not None and state_dtype not in ROUNDED_STATE_DTYPES:
        raise ValueError(
            f"enable_replayssm: rounding_seed is {rounding_seed} with state_dtype {state_dtype}; expected state_dtype one of {_dtype_list(ROUNDED_STATE_DTYPES)} (a flush stores an fp32 / fp64 checkpoint unrounded, so there is nothing to round stochastically) or rounding_seed=None"
        )


def enable_replayssm(
    model: nn.Module,
    buffer_len: int = 16,
    *,
    state_dtype: Optional[torch.dtype] = None,
    route: str = "replay_step",
    rounding_seed: Optional[int] = None,
) -> ReplaySSMHook:
    """Routes the single-token decode of ``model``'s SSM layers through ReplaySSM.

    Supported mixers: Mamba-2 (``Mamba2``, ``NemotronH``), Gated DeltaNet (``Qwen3Next``,
    ``Qwen3.5``) and Kimi Delta Attention (``KimiLinear``). Every SSM layer of the model must be
    supported. Prefill keeps the host's path and its final SSM states are admitted into one
    ReplaySSM cache per layer, sized for the batch of the host cache (``past_key_values``) they
    came from; decode steps then run the replay op (CPU: the PyTorch reference; CUDA: the Triton
    kernels). Conv states and attention KV stay in the host cache. Inference only (no autograd
    through the ops); not for beam search or assisted decoding (a clear error says so).

    Idempotent: a second call with the same settings returns the installed hook.

    No silent fallback: a decode step that would bypass the op (the host passing its cache under
    a name the hook does not know, or a cache without the fields it reads) raises. A transformers
    release outside :data:`~.compat.TESTED_TRANSFORMERS` warns (UserWarning). When the first host
    cache of a batch size is admitted (the batch, checkpoint dtype and activation dtype are known
    then), a setting whose replay step was measured slower than the conventional step on the H200
    (:func:`trtllm_replayssm.route_advice.route_advice`, with records of the activations' dtype,
    as the hook keeps them; every figure is of bf16 records, so an fp32 or fp16 model gets none)
    warns once (``SlowRouteWarning``, with the figure and its source); the route is never changed.

    Args:
        model (nn.Module): a ``transformers`` model (e.g. ``NemotronHForCausalLM``); modified in
            place (instance ``forward`` of each SSM mixer), weights untouched.
        buffer_len (int): L, records per slot, 1 <= L <= 64; a flush every L decode steps.
        state_dtype (torch.dtype, optional): checkpoint dtype: fp32 | bf16 | fp16 (fp64 on CPU),
            or ``torch.float8_e4m3fn`` (route ``replay_step`` only): fp8 codes with one fp32
            scale per (head, head_dim) row, max |row| / 448; admission encodes the host's
            state, a write-back to the host decodes it. Default: the host state's dtype.
        route (str): ``"replay_step"`` (default) or ``"decode_step"``: the conventional op on a
            state tensor held by the hook (the same surrounding code; a baseline for benchmarks).
        rounding_seed (int, optional): in [0, 2^31): each flush rounds the checkpoint
            stochastically (unbiased), the draws a function of the seed, the slot, the head and
            the flushing token, so the same seed and inputs give the same bits. Needs a checkpoint
            a flush rounds (bf16, fp16 or fp8; with ``state_dtype=None`` the host state's dtype,
            checked at the first admission) and route ``replay_step``. None: round to nearest.
    Returns:
        ReplaySSMHook: the installed hook (``.summary()`` says which layers it replaced).
    Raises:
        ValueError: unsupported model or configuration, bad ``buffer_len`` or ``route``, an fp8
            ``state_dtype`` with route ``decode_step``, a ``rounding_seed`` out of range or with
            an fp32 / fp64 checkpoint or route ``decode_step``, or the hook already installed
            with other settings. TypeError: bad ``state_dtype``, non-int ``rounding_seed``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"enable_replayssm: model is {type(model).__name__}; expected a torch.nn.Module (a transformers model)"
        )
    if not isinstance(buffer_len, int) or isinstance(buffer_len, bool) or not 1 <= buffer_len <= MAX_L:
        raise ValueError(f"enable_replayssm: buffer_len is {buffer_len!r}; expected an int in [1, {MAX_L}]")
    if route not in ROUTES:
        raise ValueError(f"enable_replayssm: route is {route!r}; expected one of {', '.join(ROUTES)}")
    if state_dtype is not None and state_dtype not in STATE_DTYPES:
        raise TypeError(
            f"enable_replayssm: state_dtype is {state_dtype!r}; expected None or one of {_dtype_list(STATE_DTYPES)}"
        )
    if state_dtype == FP8 and route != "replay_step":
        raise ValueError(
            f"enable_replayssm: state_dtype is {FP8} with route {route!r}; expected route 'replay_step' (an fp8 checkpoint with row scales is stored by the replay step's flush; the conventional step takes a float32, bfloat16, float16 or float64 state) or another state_dtype"
        )
    _check_rounding_seed(rounding_seed, state_dtype, route)
    hook = replayssm_hook(model)
    if hook is not None:
        settings = (hook.buffer_len, hook.route, hook.state_dtype, hook.rounding_seed)
        if settings == (buffer_len, route, state_dtype, rounding_seed):
            return hook
        raise ValueError(
            f"enable_replayssm: already enabled on {type(model).__name__} with buffer_len {hook.buffer_len}, route {hook.route}, state_dtype {hook.state_dtype}, rounding_seed {hook.rounding_seed}; call disable_replayssm(model) first"
        )
    layers = _find_layers(model)
    check_transformers_version()
    hook = ReplaySSMHook(
        model, layers, buffer_len=buffer_len, route=route, state_dtype=state_dtype, rounding_seed=rounding_seed
    )
    hook._install()
    setattr(model, _HOOK_ATTR, hook)
    return hook


def disable_replayssm(model: nn.Module) -> bool:
    """Undoes :func:`enable_replayssm`: the mixers get their own ``forward`` back.

    States of sequences still alive in a host cache (checkpoint with the records folded in) are
    written back to that cache first, so its generation can go on with the host's own path.

    Returns:
        bool: True when a hook was removed, False when none was installed.
    """
    hook = replayssm_hook(model)
    if hook is None:
        return False
    hook._uninstall()
    delattr(model, _HOOK_ATTR)
    return True
