"""The ReplaySSM records of one TensorRT-LLM rank, indexed by TensorRT-LLM's state slots.

A :class:`ReplayRecordStore` holds, per hooked layer, the record buffers
(:func:`~.layout.record_fields`) and the three int32 counters per slot (cursor, arrivals,
pending). Under TensorRT-LLM the record buffers are slot views into the V2 manager's pool
pages (so pool sizing, eviction and page moves include them); the counters are one dense
``[layers, 3, num_slots]`` tensor, because the kernels index them densely by slot. Without
TensorRT-LLM (tests, other engines) the store allocates dense records itself.

The checkpoint of a slot is the engine's own SSM state of that slot; the store never holds it.
Slot lifecycle (host side, all before the forward that uses the slot):

- fresh request or re-admitted preempted request: :meth:`reset` (cursor 0: the engine's prefill
  has written the checkpoint);
- finished request: nothing (the next :meth:`reset` of the slot starts over);
- live request moved to another slot: :meth:`relocate`;
- CUDA-graph padding rows: never written (their slot id is -1 in the step, see
  :func:`~.steps.replay_slot_ids`), so padding slots keep zero counters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from torch import Tensor

from .layout import COUNTER_FIELDS, Geometry, RecordField, record_fields

__all__ = ["LayerRecords", "ReplayRecordStore"]


@dataclass(frozen=True)
class LayerRecords:
    """One layer's records: what a replay step needs besides the checkpoint.

    Attributes:
        kind: ``mamba2``, ``gdn`` or ``kda``.
        geometry: the rank's layer geometry.
        L: records per slot.
        records: field name -> ``[num_slots, *field.shape]`` (slot stride free, each slot dense).
        cursor, arrivals, pending: ``[num_slots]`` int32, dense.
        views: the core cache over the last checkpoint view the steps saw, with its layout key
            (:func:`~.steps.replay_cache`'s memo, so a view's layout is checked once).
    """

    kind: str
    geometry: Geometry
    L: int
    records: Mapping[str, Tensor]
    cursor: Tensor
    arrivals: Tensor
    pending: Tensor
    views: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def num_slots(self) -> int:
        return self.cursor.shape[0]


def _dense_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _resolved_device(device: Union[str, torch.device, None]) -> torch.device:
    """The device tensors allocated on ``device`` report: ``cuda`` becomes ``cuda:<current>``
    (a tensor's device always carries its index, so ``cuda`` would never compare equal)."""
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def _check_view(owner: str, layer: int, field: RecordField, view, num_slots: int, device: torch.device) -> None:
    where = f"{owner}: layer {layer} {field.name}"
    if not isinstance(view, Tensor):
        raise TypeError(f"{where} is {type(view).__name__}; expected a torch.Tensor")
    want = (num_slots,) + field.shape
    if tuple(view.shape) != want:
        raise ValueError(f"{where} has shape {tuple(view.shape)}; expected [num_slots, ...] = {want}")
    if view.dtype != field.dtype:
        raise TypeError(f"{where} is {view.dtype}; expected {field.dtype}")
    if view.device != device:
        raise ValueError(f"{where} is on {view.device}; expected {device}")
    if tuple(view.stride()[1:]) != _dense_strides(field.shape):
        raise ValueError(
            f"{where} has strides {view.stride()}; expected each slot dense "
            f"(strides [*, {', '.join(map(str, _dense_strides(field.shape)))}])"
        )


class ReplayRecordStore:
    """Records and counters of the hooked layers of one rank.

    Args:
        layers: layer index -> (kind, rank geometry, record dtype), the layers this rank hooks;
            the record dtype is that of the x / B / d / k records (:func:`~.layout.record_dtype_for`).
        L: records per slot.
        num_slots: TensorRT-LLM's state slots (live and padding).
        state_dtype: dtype of the engine's SSM state (the checkpoint); with the record dtype it
            sets the gate records' (the core caches' rule: fp32; fp16 for KDA's per-channel
            g_records beside bf16 or fp16 records; fp64 with fp64).
        device: where counters (and owned records) live.
        record_views: layer index -> field name -> view, when the records live elsewhere (the V2
            pool); None allocates dense zeroed records here.
    Raises:
        ValueError, TypeError: a view of the wrong shape, dtype, device or inner layout.
    """

    def __init__(
        self,
        layers: Mapping[int, Tuple[str, Geometry, torch.dtype]],
        L: int,
        num_slots: int,
        *,
        state_dtype: torch.dtype,
        device: Union[str, torch.device, None] = None,
        record_views: Optional[Mapping[int, Mapping[str, Tensor]]] = None,
    ) -> None:
        owner = "ReplayRecordStore"
        if not layers:
            raise ValueError(f"{owner}: layers is empty; expected at least one hooked layer")
        if not isinstance(num_slots, int) or isinstance(num_slots, bool) or num_slots < 1:
            raise ValueError(f"{owner}: num_slots is {num_slots!r}; expected a positive int")
        device = _resolved_device(device)
        self.L, self.num_slots, self.device = L, num_slots, device
        self.state_dtype = state_dtype
        self.owns_records = record_views is None
        self._layer_ids: List[int] = list(layers)
        self.counters = torch.zeros(len(layers), len(COUNTER_FIELDS), num_slots, dtype=torch.int32, device=device)
        self._layers: Dict[int, LayerRecords] = {}
        for j, (layer, (kind, geometry, record_dtype)) in enumerate(layers.items()):
            specs = record_fields(kind, geometry, L, record_dtype=record_dtype, state_dtype=state_dtype)
            if record_views is None:
                records = {f.name: torch.zeros((num_slots,) + f.shape, dtype=f.dtype, device=device) for f in specs}
            else:
                if layer not in record_views:
                    raise ValueError(f"{owner}: record_views has no entry for layer {layer}")
                records = dict(record_views[layer])
                if sorted(records) != sorted(f.name for f in specs):
                    raise ValueError(
                        f"{owner}: layer {layer} record views {sorted(records)}; expected {sorted(f.name for f in specs)}"
                    )
                for f in specs:
                    _check_view(owner, layer, f, records[f.name], num_slots, device)
            cursor, arrivals, pending = self.counters[j]
            self._layers[layer] = LayerRecords(kind, geometry, L, records, cursor, arrivals, pending)

    @property
    def layer_ids(self) -> List[int]:
        return list(self._layer_ids)

    def layer(self, layer_id: int) -> Optional[LayerRecords]:
        """The records of ``layer_id``, or None when this rank does not hook it."""
        return self._layers.get(layer_id)

    def buffers(self) -> Iterator[Tensor]:
        """Every tensor the store holds or views (for diagnostics)."""
        yield self.counters
        for layer in self._layers.values():
            yield from layer.records.values()

    def _index(self, owner: str, slots) -> Tensor:
        if isinstance(slots, Tensor):
            slots = slots.tolist()
        if any(not isinstance(s, int) or isinstance(s, bool) for s in slots):
            raise ValueError(f"ReplayRecordStore.{owner}: slots is {slots!r}; expected ints")
        bad = [s for s in slots if not 0 <= s < self.num_slots]
        if bad:
            raise ValueError(f"ReplayRecordStore.{owner}: slots {bad} out of range; expected ids in [0, {self.num_slots})")
        return torch.tensor(slots, dtype=torch.int64, device=self.device)

    def reset(self, slots) -> None:
        """Slots start new sequences: counters := 0 (records need no clearing: positions at or
        past the cursor are never read)."""
        index = self._index("reset", slots)
        if index.numel():
            self.counters.index_fill_(2, index, 0)

    def relocate(self, old_slots: Sequence[int], new_slots: Sequence[int]) -> None:
        """Live sequences moved from ``old_slots`` to ``new_slots`` (pairs; an old slot < 0 is a
        fresh sequence and moves nothing). Counters move, and records when the store owns them
        (pool-resident records move with their pages). All sources are read before any write,
        so swaps and chains are safe."""
        if len(old_slots) != len(new_slots):
            raise ValueError(
                f"ReplayRecordStore.relocate: {len(old_slots)} old slots and {len(new_slots)} new slots; expected pairs"
            )
        moves = [(o, n) for o, n in zip(old_slots, new_slots) if o >= 0 and o != n]
        if not moves:
            return
        src = self._index("relocate", [o for o, _ in moves])
        dst = self._index("relocate", [n for _, n in moves])
        if torch.unique(dst).numel() != dst.numel():
            raise ValueError(f"ReplayRecordStore.relocate: new slots {dst.tolist()} repeat; expected distinct destinations")
        self.counters.index_copy_(2, dst, self.counters.index_select(2, src))
        if self.owns_records:
            for layer in self._layers.values():
                for t in layer.records.values():
                    t.index_copy_(0, dst, t.index_select(0, src))
