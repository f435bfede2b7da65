"""The ReplaySSM cache feature of a TensorRT-LLM V2 Mamba cache manager, without TensorRT-LLM.

:class:`ReplayRecordsFeature` implements the methods of TensorRT-LLM's
``MambaAuxCacheExtension`` (lifecycle-coupled state beside the recurrent state); the adapter
mixes it with that base class. What it does:

- ``buffer_configs`` / ``bytes_per_slot``: declares each hooked layer's record buffers to the V2
  pool (they live in the layer's pool pages, so pool sizing, ``max_batch_size`` checks and the
  KV budget count them) and adds the 12 bytes of dense counters per slot and layer;
- ``bind``: takes the pool's slot views of those buffers, allocates the counters, and observes
  the manager's state-update strategy so that fresh generation slots reset and relocated live
  slots carry their counters;
- ``reset_slots`` (context requests), ``on_state_transfer_complete`` (disaggregated
  transfers): cursors := 0, since the engine's prefill or transfer wrote the checkpoint.

Which layers are hooked comes from the mixers the hooks registered (layer index -> family).
"""

from __future__ import annotations

from typing import Callable, Dict, Iterable, Mapping, Optional, Sequence, Tuple

import torch

from trtllm_replayssm.memory import CURSOR_BYTES
from trtllm_replayssm.planner import DTYPE_NAMES
from trtllm_replayssm.route_advice import Advice, geometry_dims
from trtllm_replayssm.route_advice import route_advice as measured_advice

from .config import ReplaySSMConfig
from .layout import RecordField, rank_geometry, record_dtype_for, record_field_names, record_fields
from .steps import check_engine_state_dtype
from .store import LayerRecords, ReplayRecordStore

__all__ = ["EXTENSION_KEY", "ReplayRecordsFeature", "plan_manager_layers"]

EXTENSION_KEY = "replayssm_records"


def plan_manager_layers(
    config: ReplaySSMConfig,
    registered: Mapping[int, str],
    *,
    mamba_layer_mask: Sequence[bool],
    spec_config,
    is_draft: bool,
    enable_block_reuse: bool,
    pp_size: int,
    cp_size: int,
) -> Optional[Dict[int, str]]:
    """The layers a new V2 Mamba cache manager gets ReplaySSM records for, or None.

    None: a draft-model manager, a speculative-decoding manager (TensorRT-LLM's own speculative
    path, its replay included, stays in charge), or no hooked recurrent layer.

    Raises:
        ValueError: a configuration ReplaySSM cannot serve correctly, naming the setting.
    """
    if is_draft or spec_config is not None:
        return None
    layers = {
        i: registered[i] for i, is_mamba in enumerate(mamba_layer_mask) if is_mamba and registered.get(i) in config.families
    }
    if not layers:
        return None
    if enable_block_reuse:
        raise ValueError(
            "ReplaySSM: kv_cache_config.enable_block_reuse=True is not supported: a "
            "prefix-cache snapshot of a decoding sequence would store its checkpoint "
            "without its records. Set enable_block_reuse=False, or disable ReplaySSM"
        )
    if pp_size != 1:
        raise ValueError(
            f"ReplaySSM: pipeline parallelism (pp_size {pp_size}) is not supported; use tensor parallelism or pp_size 1"
        )
    if cp_size != 1:
        raise ValueError(f"ReplaySSM: context parallelism (cp_size {cp_size}) is not supported")
    return layers


class ReplayRecordsFeature:
    """ReplaySSM records as a V2 cache-manager extension (TensorRT-LLM-free logic).

    Args:
        config: L and families.
        layers: global layer index -> family of the hooked recurrent layers this manager serves.
        make_role: name -> a V2 ``DataRole``.
        make_buffer_config: (role, size) -> a V2 ``BufferConfig``.
    """

    def __init__(
        self,
        config: ReplaySSMConfig,
        layers: Mapping[int, str],
        *,
        make_role: Callable[[str], object],
        make_buffer_config: Callable[[object, int], object],
    ) -> None:
        self.config = config
        self.layers = dict(layers)
        self._make_buffer_config = make_buffer_config
        names = sorted({f"replayssm_{name}" for kind in set(self.layers.values()) for name in record_field_names(kind)})
        self._roles = {name: make_role(name) for name in names}
        self.store: Optional[ReplayRecordStore] = None
        self._record_dtypes: Dict[int, torch.dtype] = {}
        self._observed = None

    # ------------------------------------------------------------------ description

    @property
    def key(self) -> str:
        return EXTENSION_KEY

    @property
    def data_roles(self) -> tuple:
        return tuple(self._roles.values())

    def _fields(self, context, layer_id: int) -> Sequence[RecordField]:
        kind = self.layers[layer_id]
        geometry = rank_geometry(
            kind, context.ssm_state_shape, context.conv_state_shape, context.conv_section_dims, context.conv_state_layout
        )
        return record_fields(
            kind,
            geometry,
            self.config.buffer_len,
            record_dtype=self._record_dtype(context, kind),
            state_dtype=context.ssm_state_dtype,
        )

    def _record_dtype(self, context, kind: str) -> torch.dtype:
        # The conv state holds the mixer's inputs: its dtype is the activation dtype.
        return record_dtype_for(kind, context.conv_state_dtype, self.config.delta_rule_records)

    def _local_layers(self, context) -> list:
        return [i for i in context.mamba_pp_layers if i in self.layers]

    def validate(self, context) -> None:
        """Checks the manager's geometry and SSM state dtype before its pool is created
        (ValueError naming what): an fp8 state cannot be ReplaySSM's checkpoint, and a
        ``rounding_seed`` needs a bf16 or fp16 one (:func:`~.steps.check_engine_state_dtype`)."""
        if context.backend != "v2":
            raise ValueError(f"ReplaySSM records need the V2 Mamba cache manager; got backend {context.backend!r}")
        if context.spec_config is not None:
            raise ValueError("ReplaySSM records are for non-speculative decoding; this manager has a spec_config")
        if self._local_layers(context):
            check_engine_state_dtype("ReplaySSM", context.ssm_state_dtype, self.config.rounding_seed)
        for layer_id in self._local_layers(context):
            try:
                self._fields(context, layer_id)
            except ValueError as e:
                raise ValueError(f"ReplaySSM layer {layer_id} ({self.layers[layer_id]}): {e}") from None

    def buffer_configs(self, context, layer_id: int) -> tuple:
        if layer_id not in self.layers:
            return ()
        return tuple(self._make_buffer_config(self._roles[f.role], f.nbytes) for f in self._fields(context, layer_id))

    def bytes_per_slot(self, context, layer_id: int) -> int:
        """Record bytes in the pool plus the dense counters (cursor, arrivals, pending)."""
        if layer_id not in self.layers:
            return 0
        return sum(f.nbytes for f in self._fields(context, layer_id)) + CURSOR_BYTES

    # ------------------------------------------------------------------ binding

    def bind(self, context, manager) -> None:
        """Takes the pool's record views of every local hooked layer and allocates counters."""
        local = self._local_layers(context)
        if not local:
            return
        slots = context.slot_capacity
        if slots is None:
            raise RuntimeError("ReplaySSM records: the manager bound without a slot capacity")
        views, geometries = {}, {}
        for layer_id in local:
            kind = self.layers[layer_id]
            geometries[layer_id] = (
                kind,
                rank_geometry(
                    kind,
                    context.ssm_state_shape,
                    context.conv_state_shape,
                    context.conv_section_dims,
                    context.conv_state_layout,
                ),
                self._record_dtype(context, kind),
            )
            local_idx = manager.layer_offsets[layer_id]
            views[layer_id] = {
                f.name: manager._get_state_buffer(local_idx, self._roles[f.role], f.dtype, list(f.shape))
                for f in self._fields(context, layer_id)
            }
        device = next(iter(views[local[0]].values())).device
        self.store = ReplayRecordStore(
            geometries, self.config.buffer_len, slots, state_dtype=context.ssm_state_dtype, device=device, record_views=views
        )
        self._record_dtypes = {layer_id: record_dtype for layer_id, (_, _, record_dtype) in geometries.items()}
        self._observe(manager.get_state_update_strategy())

    def route_advice(self, batch: int) -> Tuple[Advice, ...]:
        """The measured speed of the bound layers' replay step against the conventional step at
        ``batch`` sequences (:func:`trtllm_replayssm.route_advice.route_advice`), one per distinct
        (family, geometry, record dtype) in layer order; empty when this manager bound no hooked
        layer. Each layer is looked up with the records it was bound with
        (:func:`~.layout.record_dtype_for`: the conv state's dtype, i.e. the activations', or
        fp32 for GDN / KDA with ``delta_rule_records="float32"``), so fp32 or fp16 records get
        "not measured" rather than the bf16 records' figures. Advice only: the route stays
        ReplaySSM."""
        if self.store is None:
            return ()
        groups = dict.fromkeys(
            (self.store.layer(i).kind, self.store.layer(i).geometry, self._record_dtypes[i]) for i in self.store.layer_ids
        )
        return tuple(
            measured_advice(
                kind,
                "replay",
                state_dtype=DTYPE_NAMES[self.store.state_dtype],
                L=self.config.buffer_len,
                batch=batch,
                geometry=geometry_dims(geometry),
                record_dtype=DTYPE_NAMES[record_dtype],
            )
            for kind, geometry, record_dtype in groups
        )

    def _observe(self, strategy) -> None:
        """Fresh generation slots reset, relocated live slots move their counters: both go
        through the manager's state-update strategy, so its two methods are wrapped on this
        instance (the class is untouched; :meth:`shutdown` removes the wrappers)."""
        if strategy is None:
            raise RuntimeError(
                "ReplaySSM records: the manager has no state-update strategy to observe slot resets and relocations"
            )
        store = self.store
        reset, relocate = strategy.reset_slots, strategy.relocate_slots

        def reset_slots(slots, host_slots):
            reset(slots, host_slots)
            store.reset(list(host_slots))

        def relocate_slots(old_slots, new_slots):
            relocate(old_slots, new_slots)
            store.relocate(list(old_slots), list(new_slots))

        strategy.reset_slots, strategy.relocate_slots = reset_slots, relocate_slots
        self._observed = strategy

    # ------------------------------------------------------------------ lifecycle

    def get_layer_cache(self, layer_idx: int) -> Optional[LayerRecords]:
        return None if self.store is None else self.store.layer(layer_idx)

    def reset_slots(self, slots: torch.Tensor, host_slots: Sequence[int]) -> None:
        if self.store is not None:
            self.store.reset(list(host_slots))

    def on_state_transfer_complete(self, request_ids: Sequence[int], manager) -> None:
        if self.store is None or not request_ids:
            return
        slots = manager.get_state_indices(list(request_ids), [False] * len(request_ids))
        self.store.reset([int(s) for s in slots])

    def iter_buffers(self) -> Iterable[torch.Tensor]:
        return () if self.store is None else tuple(self.store.buffers())

    def shutdown(self) -> None:
        if self._observed is not None:
            for name in ("reset_slots", "relocate_slots"):
                self._observed.__dict__.pop(name, None)
            self._observed = None
        self.store = None
        self._record_dtypes = {}
