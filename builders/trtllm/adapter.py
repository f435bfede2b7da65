"""The TensorRT-LLM-facing part of the ReplaySSM hooks: it checks the installed API, then patches.

Nothing here computes: geometry, record layouts, bytes, slot ids, padding rows, lifecycle and
the steps are in :mod:`.layout`, :mod:`.store`, :mod:`.steps` and :mod:`.extension`. This module
only connects them to TensorRT-LLM (:mod:`.api` lists every name it touches):

- ``MambaHybridCacheManagerV2.__init__``: appends the ReplaySSM cache extension (records in the
  V2 pool, counted in its bytes per slot) for the hooked layers;
- ``register_mamba_aux_cache_estimator``: the same bytes in the KV-budget estimate;
- ``Mamba2Metadata.prepare``: flags CUDA-graph padding rows in a graph-stable buffer;
- ``Mamba2Mixer``: each instance's ``_stp_ssu_func`` (the non-speculative single-token SSM
  update) runs ``mamba2_step`` on the checkpoint (TensorRT-LLM's SSM state) and records;
- ``Qwen3NextGatedDeltaNet``: non-speculative ``forward_decode`` runs the conv update and
  ``gated_delta_step``; a batch mixing prefills and decodes first flushes its decode rows,
  which TensorRT-LLM then runs on the full state;
- ``KimiKDALinearAttention``: single-token ``forward_decode`` runs projections, short convs,
  gates, ``gated_delta_step`` and the gated output norm.

Prefill is TensorRT-LLM's own and writes the final state into the SSM state, which is the
checkpoint; the slot's cursor was reset when the request was scheduled as a context request.
Speculative decoding (a manager with a ``spec_config``) keeps TensorRT-LLM's own paths: no
records are allocated and the mixers call the original functions.

A hook that cannot engage raises instead of letting TensorRT-LLM decode on its own path (which
would leave the records stale): a manager that did not take or bind the extension, a forward
whose ``Mamba2Metadata`` was not prepared for its batch, a decode hook called outside the method
that sets its step context or without the arguments it needs, and a forward whose decode rows
did not go through the ReplaySSM op (the hooked decode function was not called). Each message
names the layer, the installed TensorRT-LLM version and what was missing.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Tuple

import torch

from trtllm_replayssm.models import GDN, KDA, MAMBA2
from trtllm_replayssm.ops import gdn_gate, kda_gate
from trtllm_replayssm.route_advice import warn_if_slower

from .api import _COMMON, _GDN, _KDA, _MAMBA2, _METADATA, _V2, PINNED_RELEASE, require_api, require_instance_attributes
from .config import ReplaySSMConfig
from .extension import EXTENSION_KEY, ReplayRecordsFeature, plan_manager_layers
from .layout import model_dtype, replay_bytes_per_rank, ssm_tp_size
from .steps import (
    PaddingRowBuffer,
    causal_conv_step,
    flush_delta_rule_records,
    gated_delta_step,
    mamba2_step,
    padding_rows,
    replay_slot_ids,
)

__all__ = ["ReplaySSMStatus", "install", "uninstall", "installed"]

_MISSING = object()
_STEP_ATTR = "_replayssm_step"
# The step context of a forward on a speculative-decoding manager: TensorRT-LLM's own paths run.
_SPECULATIVE = object()
_PADDING_ATTR = "_replayssm_padding"
_PREPARED_ATTR = "_replayssm_prepared_for"
# Keyword arguments TensorRT-LLM adds to _stp_ssu_func for stochastic rounding of an fp16 cache.
_STOCHASTIC_ROUNDING_KWARGS = frozenset(("rand_seed", "philox_rounds"))


@dataclass
class ReplaySSMStatus:
    """What :func:`install` did in this process.

    Attributes:
        config: L and families.
        trtllm_version: the installed TensorRT-LLM's version string.
        patched: ``module.Class.attribute`` of every patched name.
        layers: layer index -> family of the mixers hooked so far (filled as models are built).
    """

    config: ReplaySSMConfig
    trtllm_version: str
    patched: List[str] = field(default_factory=list)
    layers: Dict[int, str] = field(default_factory=dict)

    def summary(self) -> str:
        kinds: Dict[str, int] = {}
        for kind in self.layers.values():
            kinds[kind] = kinds.get(kind, 0) + 1
        hooked = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "no layer built yet"
        seed = self.config.rounding_seed
        rounding = "" if seed is None else f", stochastic rounding seed {seed}"
        return (
            f"ReplaySSM on TensorRT-LLM {self.trtllm_version}: L = {self.config.buffer_len}, "
            f"families {', '.join(self.config.families)}{rounding}; hooked: {hooked}"
        )


@dataclass
class _Installation:
    status: ReplaySSMStatus
    undo: List[Tuple[object, str, object]] = field(default_factory=list)


_INSTALLED: Optional[_Installation] = None
# The configuration being installed: install() imports tensorrt_llm, which can run the
# environment's after-import hook (another install) before the first one has finished.
_INSTALLING: Optional[ReplaySSMConfig] = None


def installed() -> Optional[ReplaySSMStatus]:
    """The status of the hooks in this process, or None."""
    return None if _INSTALLED is None else _INSTALLED.status


# ---------------------------------------------------------------------- step context


@dataclass
class _Step:
    """What one forward of a hooked layer needs: its records and the decode rows' padding flags.

    ``replayed`` is set by the decode hook once the ReplaySSM op has run for the decode rows;
    :func:`_require_replay` checks it when the forward returns.
    """

    layer: object
    padding: torch.Tensor
    num_prefills: int
    batch: int
    replayed: bool = False


def _hook_error(mixer, problem: str) -> RuntimeError:
    """The error of a decode step that did not (or cannot) go through the ReplaySSM op."""
    return RuntimeError(
        f"ReplaySSM: {type(mixer).__name__} layer {mixer.layer_idx} ran a decode step on "
        f"TensorRT-LLM {_INSTALLED.status.trtllm_version} without the ReplaySSM op: {problem}. "
        f"The hooks are written for {PINNED_RELEASE}; install that release, or leave this "
        f"layer's family out of ReplaySSM (families=..., TRTLLM_REPLAYSSM_FAMILIES)"
    )


def _require_context(mixer, step, hooked: str, context: str) -> None:
    """Raises when the decode hook ``hooked`` runs without a step context, i.e. TensorRT-LLM
    reached it without calling ``context``, the hooked method that sets the context."""
    if step is None:
        raise _hook_error(
            mixer, f"{hooked} was called outside {context}, which sets the layer's step context (its records and padding rows)"
        )


def _require_replay(mixer, step, hooked: str) -> None:
    """After a hooked forward: raises when the step had decode rows but the decode hook did not
    run the ReplaySSM op, i.e. TensorRT-LLM decoded them on its own path and never called
    ``hooked``. Speculative steps and prefill-only steps pass."""
    if step is _SPECULATIVE or step.replayed or step.num_prefills == step.batch:
        return
    raise _hook_error(
        mixer,
        f"{hooked} was not called for its {step.batch - step.num_prefills} "
        f"decode row(s), so TensorRT-LLM decoded them on its own path and "
        f"this layer's records no longer match its SSM state",
    )


def _require_kwargs(mixer, hooked: str, kwargs: dict, names: Tuple[str, ...]) -> None:
    """Raises when TensorRT-LLM called ``hooked`` without keyword arguments the hook reads."""
    missing = [n for n in names if n not in kwargs]
    if missing:
        raise _hook_error(
            mixer,
            f"{hooked} was called without keyword argument(s) "
            f"{', '.join(missing)} (it got: "
            f"{', '.join(sorted(kwargs)) or 'none'})",
        )


def _register(mixer, kind: str) -> None:
    require_instance_attributes(mixer, kind)
    layers = _INSTALLED.status.layers
    index = mixer.layer_idx
    if layers.get(index, kind) != kind:
        raise ValueError(f"ReplaySSM: layer {index} is built as {kind} and as {layers[index]}; expected one model per process")
    layers[index] = kind


def _request_ids(attn_metadata) -> Optional[list]:
    """The batch's request ids as a list (None when TensorRT-LLM gives none)."""
    ids = attn_metadata.request_ids
    return None if ids is None else list(ids)


def _step_context(mixer, attn_metadata, mamba_metadata):
    """:data:`_SPECULATIVE` under speculative decoding (TensorRT-LLM's own paths), else the
    layer's :class:`_Step`.

    Raises RuntimeError when the manager holds no records for the layer, or when
    ``Mamba2Metadata.prepare`` (which flags the padding rows) did not run for this batch.
    """
    manager = attn_metadata.kv_cache_manager
    if manager.is_speculative():
        return _SPECULATIVE
    version = _INSTALLED.status.trtllm_version
    find = getattr(manager, "get_aux_cache_extension", None)
    extension = None if find is None else find(EXTENSION_KEY)
    layer = None if extension is None else extension.get_layer_cache(mixer.layer_idx)
    if layer is None:
        raise RuntimeError(
            f"ReplaySSM: {type(mixer).__name__} layer {mixer.layer_idx} is hooked but its cache "
            f"manager ({type(manager).__name__}, TensorRT-LLM {version}) holds no ReplaySSM "
            f"records. ReplaySSM needs the V2 Mamba cache manager "
            f"(kv_cache_config.use_kv_cache_manager_v2=True), created after enable_replayssm() "
            f"in this process"
        )
    padding = getattr(mamba_metadata, _PADDING_ATTR, None)
    if padding is None:
        raise RuntimeError(
            f"ReplaySSM: {type(mixer).__name__} layer {mixer.layer_idx} got a "
            f"{type(mamba_metadata).__name__} on which the hooked Mamba2Metadata.prepare never "
            f"ran: ReplaySSM was enabled after the LLM was created, or TensorRT-LLM {version} "
            f"prepares it without calling Mamba2Metadata.prepare (the hooks are written for "
            f"{PINNED_RELEASE}); enable ReplaySSM before the LLM is created"
        )
    if getattr(mamba_metadata, _PREPARED_ATTR) != _request_ids(attn_metadata):
        raise RuntimeError(
            f"ReplaySSM: {type(mixer).__name__} layer {mixer.layer_idx} got a "
            f"{type(mamba_metadata).__name__} that TensorRT-LLM {version} did not prepare for "
            f"this batch (prepare last ran for other request ids), so its padding-row flags are "
            f"stale; the hooks are written for {PINNED_RELEASE}, where the model calls "
            f"Mamba2Metadata.prepare before every forward"
        )
    num_prefills = attn_metadata.num_contexts
    batch = attn_metadata.seq_lens.shape[0]
    return _Step(layer, padding.flags[num_prefills:batch], num_prefills, batch)


def _with_step(original, metadata_of: Callable, hooked: str):
    """Wraps a mixer method that receives the attention metadata: the step context is set for
    the call (read by the decode hook ``hooked``) and cleared afterwards; then
    :func:`_require_replay` checks that the decode rows went through the ReplaySSM op."""

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        attn_metadata, mamba_metadata = metadata_of(*args, **kwargs)
        step = _step_context(self, attn_metadata, mamba_metadata)
        setattr(self, _STEP_ATTR, step)
        try:
            result = original(self, *args, **kwargs)
        finally:
            setattr(self, _STEP_ATTR, None)
        _require_replay(self, step, hooked)
        return result

    return method


# ---------------------------------------------------------------------- Mamba-2


def _mamba2_ssu(
    mixer,
    original,
    state,
    x,
    dt,
    A,
    B,
    C,
    D,
    z=None,
    dt_bias=None,
    dt_softplus=False,
    state_batch_indices=None,
    out=None,
    **extra,
):
    """Stands in for ``Mamba2Mixer._stp_ssu_func`` (same call), on the replay op.

    Raises RuntimeError when TensorRT-LLM calls it outside ``Mamba2Mixer.forward``, passes the
    slots other than as ``state_batch_indices`` or adds keyword arguments the hook does not know.
    """
    step = getattr(mixer, _STEP_ATTR, None)
    if step is _SPECULATIVE or _INSTALLED is None:  # after uninstall() this instance hook stays
        return original(
            state,
            x,
            dt,
            A,
            B,
            C,
            D,
            z=z,
            dt_bias=dt_bias,
            dt_softplus=dt_softplus,
            state_batch_indices=state_batch_indices,
            out=out,
            **extra,
        )
    _require_context(mixer, step, "_stp_ssu_func", "Mamba2Mixer.forward")
    if state_batch_indices is None:
        raise _hook_error(
            mixer,
            f"_stp_ssu_func was called without state_batch_indices "
            f"(the slots of the decode rows; other keyword arguments: "
            f"{', '.join(sorted(extra)) or 'none'})",
        )
    unknown = sorted(set(extra) - _STOCHASTIC_ROUNDING_KWARGS)
    if unknown:
        raise _hook_error(
            mixer, f"_stp_ssu_func was called with keyword argument(s) {', '.join(unknown)}, which the hook does not know"
        )
    if extra:
        raise ValueError(
            f"ReplaySSM: Mamba-2 layer {mixer.layer_idx} decodes with "
            f"{', '.join(sorted(extra))} (stochastic rounding of an fp16 SSM cache), "
            f"which ReplaySSM does not support; set "
            f"kv_cache_config.mamba_ssm_stochastic_rounding=False (ReplaySSM rounds its "
            f"flushes stochastically itself with enable_replayssm(rounding_seed=...))"
        )
    if z is not None:
        raise ValueError(
            "ReplaySSM: Mamba-2 decode with z is not supported (TensorRT-LLM gates in its norm and passes z=None)"
        )
    # TensorRT-LLM passes dt and A, D, dt_bias expanded over head_dim; the op takes them per head.
    dt_heads = dt[..., 0] if dt.dim() == 3 else dt
    y = mamba2_step(
        step.layer,
        state,
        x,
        dt_heads,
        mixer.A,
        B,
        C,
        slot_ids=replay_slot_ids(state_batch_indices, step.padding),
        D=mixer.D,
        dt_bias=mixer.dt_bias,
        dt_softplus=bool(dt_softplus),
        out=out,
        rounding_seed=_INSTALLED.status.config.rounding_seed,
    )
    step.replayed = True
    return y


def _mamba2_init(original):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _register(self, MAMBA2)
        self._stp_ssu_func = functools.partial(_mamba2_ssu, self, self._stp_ssu_func)

    return __init__


# ---------------------------------------------------------------------- GDN


def _gdn_forward_core(original):
    @functools.wraps(original)
    def forward_core(self, mixed_qkv, a, b, attn_metadata, mamba_metadata, spec_metadata=None, output=None):
        step = _step_context(self, attn_metadata, mamba_metadata)
        mixed = step is not _SPECULATIVE and 0 < step.num_prefills < step.batch
        if mixed:
            # TensorRT-LLM runs decode rows of a mixed batch with the prefills on the full state
            # (forward_extend), so forward_decode is not called and is not required below.
            indices = mamba_metadata.state_indices[step.num_prefills : step.batch]
            checkpoint = attn_metadata.kv_cache_manager.mamba_layer_cache(self.layer_idx).temporal
            flush_delta_rule_records(
                step.layer,
                checkpoint,
                replay_slot_ids(indices, step.padding),
                rounding_seed=_INSTALLED.status.config.rounding_seed,
            )
        setattr(self, _STEP_ATTR, step)
        try:
            result = original(self, mixed_qkv, a, b, attn_metadata, mamba_metadata, spec_metadata=spec_metadata, output=output)
        finally:
            setattr(self, _STEP_ATTR, None)
        if not mixed:
            _require_replay(self, step, "forward_decode")
        return result

    return forward_core


def _gdn_forward_decode(original):
    @functools.wraps(original)
    def forward_decode(
        self,
        conv_states,
        ssm_states,
        query_start_loc_long,
        spec_metadata=None,
        intermediate_conv_states=None,
        intermediate_ssm_states=None,
        is_target_verify=False,
        output=None,
        **kwargs,
    ):
        step = getattr(self, _STEP_ATTR, None)
        if step is _SPECULATIVE or is_target_verify:
            return original(
                self,
                conv_states,
                ssm_states,
                query_start_loc_long,
                spec_metadata=spec_metadata,
                intermediate_conv_states=intermediate_conv_states,
                intermediate_ssm_states=intermediate_ssm_states,
                is_target_verify=is_target_verify,
                output=output,
                **kwargs,
            )
        _require_context(self, step, "forward_decode", "Qwen3NextGatedDeltaNet.forward_core")
        _require_kwargs(self, "forward_decode", kwargs, ("mixed_qkv", "a", "b", "cache_indices"))
        indices = kwargs["cache_indices"]
        host = sys.modules[type(self).__module__]
        mixed = host.causal_conv1d_update(
            kwargs["mixed_qkv"], conv_states, self.conv1d.weight, self.conv1d.bias, self.activation, conv_state_indices=indices
        )
        batch, kd = mixed.shape[0], self.key_dim_per_tp
        q = mixed[:, :kd].view(batch, self.num_k_heads_per_tp, self.head_k_dim)
        k = mixed[:, kd : 2 * kd].view(batch, self.num_k_heads_per_tp, self.head_k_dim)
        v = mixed[:, 2 * kd :].view(batch, self.num_v_heads_per_tp, self.head_v_dim)
        g, beta = gdn_gate(kwargs["a"], kwargs["b"], self.A_log, self.dt_bias)
        o = gated_delta_step(
            step.layer,
            ssm_states,
            q,
            k,
            v,
            g,
            beta,
            slot_ids=replay_slot_ids(indices, step.padding),
            out=None if output is None else output[0],
            rounding_seed=_INSTALLED.status.config.rounding_seed,
        )
        step.replayed = True
        return o.view(1, batch, self.num_v_heads_per_tp, self.head_v_dim)

    return forward_decode


# ---------------------------------------------------------------------- KDA


def _kda_forward_decode(original):
    @functools.wraps(original)
    def forward_decode(
        self,
        x2d,
        conv_pool,
        ssm_pool,
        slot_indices,
        mamba_metadata=None,
        layer_cache=None,
        ssm_state_indices=None,
        output=None,
    ):
        step = getattr(self, _STEP_ATTR, None)
        if step is _SPECULATIVE:
            return original(
                self, x2d, conv_pool, ssm_pool, slot_indices, mamba_metadata, layer_cache, ssm_state_indices, output
            )
        _require_context(self, step, "forward_decode", "KimiKDALinearAttention._forward_impl")
        if self.gate_lower_bound is not None:
            raise ValueError(
                f"ReplaySSM: KDA layer {self.layer_idx} uses gate_lower_bound (a "
                f"safe gate), which the replay ops do not implement"
            )
        batch, d = x2d.shape[0], self.proj_size
        H, K = self.num_heads, self.head_dim
        x = x2d.unsqueeze(1)
        slots = slot_indices.long()
        rows = conv_pool.index_select(0, slots)
        convolved, new_rows = [], []
        for j, (proj, conv) in enumerate(
            ((self.q_proj, self.q_conv1d), (self.k_proj, self.k_conv1d), (self.v_proj, self.v_conv1d))
        ):
            y, r = causal_conv_step(rows[:, j * d : (j + 1) * d], proj(x)[:, 0], conv.weight[:, 0, :], conv.bias)
            convolved.append(y.view(batch, H, K))
            new_rows.append(r)
        conv_pool.index_copy_(0, slots, torch.cat(new_rows, dim=1).to(conv_pool.dtype))
        g, beta = kda_gate(
            self.f_b_proj(self.f_a_proj(x))[:, 0].view(batch, H, K), self.b_proj(x)[:, 0], self.A_log, self.dt_bias
        )
        o = gated_delta_step(
            step.layer,
            ssm_pool,
            *convolved,
            g,
            beta,
            slot_ids=replay_slot_ids(slot_indices, step.padding),
            rounding_seed=_INSTALLED.status.config.rounding_seed,
        )
        step.replayed = True
        return self._store_core(self._output_gate(x, o.unsqueeze(1)), output)

    return forward_decode


def _registering_init(original, kind: str):
    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        _register(self, kind)

    return __init__


# ---------------------------------------------------------------------- cache side


def _manager_init(original, extension_class, make_role, make_buffer_config):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        mapping, kv_cache_config = a["mapping"], a["kv_cache_config"]
        status = _INSTALLED.status
        layers = plan_manager_layers(
            status.config,
            status.layers,
            mamba_layer_mask=a["mamba_layer_mask"],
            spec_config=a["spec_config"],
            is_draft=a["is_draft"],
            enable_block_reuse=bool(kv_cache_config.enable_block_reuse),
            pp_size=mapping.pp_size,
            cp_size=mapping.cp_size,
        )
        if not layers:
            original(self, *args, **kwargs)
            return
        extension = extension_class(status.config, layers, make_role=make_role, make_buffer_config=make_buffer_config)
        a["aux_cache_extensions"] = tuple(a["aux_cache_extensions"]) + (extension,)
        original(*bound.args, **bound.kwargs)
        _require_bound(self, extension, status.trtllm_version)
        warn_if_slower(
            extension.route_advice(a["max_batch_size"]),
            f"ReplaySSM ({type(self).__name__}, max_batch_size {a['max_batch_size']})",
        )

    return __init__


def _require_bound(manager, extension, version: str) -> None:
    """After the V2 manager's ``__init__``: raises when it did not keep the ReplaySSM extension
    passed in ``aux_cache_extensions`` or did not bind it (no record views in its pool)."""
    if manager.get_aux_cache_extension(EXTENSION_KEY) is not extension:
        missing = "did not keep the ReplaySSM extension passed in aux_cache_extensions"
    elif extension.store is None:
        missing = "kept the ReplaySSM extension but did not bind it to its pool"
    else:
        return
    raise RuntimeError(
        f"ReplaySSM: {type(manager).__name__}.__init__ of TensorRT-LLM {version} "
        f"{missing}, so the hooked layers would have no records; the hooks are "
        f"written for {PINNED_RELEASE}"
    )


def _metadata_prepare(original, dummy_request_id: int):
    @functools.wraps(original)
    def prepare(self, attn_metadata):
        original(self, attn_metadata)
        buffer = getattr(self, _PADDING_ATTR, None)
        if buffer is None:
            buffer = PaddingRowBuffer(self.max_batch_size, self.state_indices.device)
            setattr(self, _PADDING_ATTR, buffer)
        manager = attn_metadata.kv_cache_manager
        draft = getattr(manager, "speculative_num_draft_tokens", 0) or 0
        buffer.update(
            padding_rows(
                attn_metadata.request_ids,
                attn_metadata.seq_lens.shape[0],
                dummy_request_id=dummy_request_id,
                max_draft_len=draft,
            )
        )
        # The batch the flags are for: the mixers' step context checks it is theirs.
        setattr(self, _PREPARED_ATTR, _request_ids(attn_metadata))

    return prepare


def _estimate_replay_bytes(model_config, params, mapping, *, spec_config, use_separate_draft_kv_cache) -> int:
    """TensorRT-LLM's aux-cache estimator: ReplaySSM bytes per slot on this rank (0 when the
    hooks are off, under speculative decoding, or for a model without hooked layers)."""
    del params, use_separate_draft_kv_cache
    if _INSTALLED is None or spec_config is not None or not _INSTALLED.status.layers:
        return 0
    hf_config = model_config.pretrained_config.to_dict()
    config = _INSTALLED.status.config
    return replay_bytes_per_rank(
        hf_config,
        config.families,
        config.buffer_len,
        tp_size=ssm_tp_size(mapping.tp_size, mapping.enable_attention_dp),
        activation_dtype=model_dtype(hf_config),
        delta_rule_records=config.delta_rule_records,
    )


# ---------------------------------------------------------------------- install


def _patch(inst: _Installation, owner, name: str, new) -> None:
    inst.undo.append((owner, name, owner.__dict__.get(name, _MISSING)))
    setattr(owner, name, new)
    inst.status.patched.append(f"{owner.__module__}.{owner.__qualname__}.{name}")


def _install_patches(inst: _Installation, config: ReplaySSMConfig, import_module: Callable[[str], object]) -> None:
    common, v2 = import_module(_COMMON), import_module(_V2)
    pool = import_module("tensorrt_llm.runtime.kv_cache_manager_v2")
    metadata = import_module(_METADATA)
    extension_class = type("ReplaySSMCacheExtension", (ReplayRecordsFeature, common.MambaAuxCacheExtension), {})
    manager = v2.MambaHybridCacheManagerV2
    _patch(
        inst,
        manager,
        "__init__",
        _manager_init(
            manager.__init__, extension_class, pool.DataRole, lambda role, size: pool.BufferConfig(role=role, size=size)
        ),
    )
    meta = metadata.Mamba2Metadata
    _patch(inst, meta, "prepare", _metadata_prepare(meta.prepare, metadata.CUDA_GRAPH_DUMMY_REQUEST_ID))
    if MAMBA2 in config.families:
        mixer = import_module(_MAMBA2).Mamba2Mixer
        _patch(inst, mixer, "__init__", _mamba2_init(mixer.__init__))
        _patch(
            inst,
            mixer,
            "forward",
            _with_step(
                mixer.forward,
                lambda hidden_states, attn_metadata, mamba_metadata, *a, **k: (attn_metadata, mamba_metadata),
                "_stp_ssu_func",
            ),
        )
    if GDN in config.families:
        mixer = import_module(_GDN).Qwen3NextGatedDeltaNet
        _patch(inst, mixer, "__init__", _registering_init(mixer.__init__, GDN))
        _patch(inst, mixer, "forward_core", _gdn_forward_core(mixer.forward_core))
        _patch(inst, mixer, "forward_decode", _gdn_forward_decode(mixer.forward_decode))
    if KDA in config.families:
        mixer = import_module(_KDA).KimiKDALinearAttention
        _patch(inst, mixer, "__init__", _registering_init(mixer.__init__, KDA))
        _patch(
            inst,
            mixer,
            "_forward_impl",
            _with_step(
                mixer._forward_impl,
                lambda hidden_states, attn_metadata, output=None: (attn_metadata, attn_metadata.mamba_metadata),
                "forward_decode",
            ),
        )
        _patch(inst, mixer, "forward_decode", _kda_forward_decode(mixer.forward_decode))
    # The registry keeps one estimator per key for the process; it reads the installation.
    common.register_mamba_aux_cache_estimator(EXTENSION_KEY, _estimate_replay_bytes)


def _undo(inst: _Installation) -> None:
    for owner, name, old in reversed(inst.undo):
        if old is _MISSING:
            delattr(owner, name)
        else:
            setattr(owner, name, old)
    inst.undo.clear()


def install(config: ReplaySSMConfig, import_module: Callable[[str], object] = importlib.import_module) -> ReplaySSMStatus:
    """Checks the installed TensorRT-LLM (:func:`.api.require_api`), then patches it.

    Returns:
        The status; None for a nested call with the same settings while the first is still
        installing (the environment's hook firing on its ``import tensorrt_llm``).
    Raises:
        ImportError, IncompatibleTensorRTLLM: before anything is patched.
        ValueError: already installed (or installing) with another configuration.
    """
    global _INSTALLED, _INSTALLING
    current = _INSTALLED.status.config if _INSTALLED is not None else _INSTALLING
    if current is not None:
        if current != config:
            raise ValueError(
                f"ReplaySSM is already enabled with {current} (e.g. by "
                f"TRTLLM_REPLAYSSM); asked for {config}; call disable_replayssm() "
                f"first or make the settings agree"
            )
        return None if _INSTALLED is None else _INSTALLED.status
    _INSTALLING = config
    try:
        version = require_api(config.families, import_module)
        inst = _Installation(ReplaySSMStatus(config, version))
        try:
            _install_patches(inst, config, import_module)
        except BaseException:
            _undo(inst)
            raise
    finally:
        _INSTALLING = None
    _INSTALLED = inst
    return inst.status


def uninstall() -> bool:
    """Restores every patched name. Managers and mixers built meanwhile keep their records and
    instance hooks; with the hooks gone they run TensorRT-LLM's own paths, so a sequence that is
    mid-decode would continue from a stale checkpoint: disable only between LLM instances.

    Returns:
        True when hooks were removed, False when none were installed.
    """
    global _INSTALLED
    if _INSTALLED is None:
        return False
    _undo(_INSTALLED)
    _INSTALLED = None
    return True
