"""ReplayCachePool: every ReplaySSM cache of a hybrid model on one rank, in a few large buffers.

Layout (TensorRT-LLM's Mamba cache manager style): the SSM layers are grouped by kind and
geometry; each group has one buffer per cache field with a leading layer dimension,
``[n_layers_in_group, num_physical_slots, ...]``, so a layer's tensor is the contiguous slice
``buffer[j]`` and the per-layer caches the ops take are views, never copies:

- Mamba-2 (:class:`~trtllm_replayssm.cache.Mamba2ReplayCache`): checkpoint, x_records,
  dt_records, B_records, cursor, arrivals.
- GDN / KDA (:class:`~trtllm_replayssm.cache.GDNReplayCache`,
  :class:`~trtllm_replayssm.cache.KDAReplayCache`): checkpoint, d_records, k_records,
  g_records, cursor, arrivals.
- every SSM layer: ``conv_state`` [num_physical_slots, conv_dim, width] in the conv dtype, the
  last ``width`` conv inputs oldest first (TensorRT-LLM / vLLM causal_conv1d layout; channels
  x|B|C for Mamba-2, q|k|v for GDN / KDA); width = d_conv - 1, plus T - 1 in speculative mode.

Slots: ``[0, num_slots)`` hold sequences (admit, release, reset, re-anchor);
``[num_slots, num_slots + num_padding_slots)`` are padding slots, zeroed, for CUDA-graph padding
rows of engine kernels that need an in-range index (TensorRT-LLM keeps one such slot). Our replay
ops take slot id -1 for a padding row and touch nothing for it; a padding row pointed at a
padding slot only ever writes that slot, and :meth:`ReplayCachePool.reset_padding` zeroes it
again. Live slots are never written by padding rows.

Modes:
- ``replay``: standard decode, L = ``buffer_len`` records per slot.
- ``replay_spec``: speculative decoding with history B = ``buffer_len`` and window
  T = ``spec_tokens`` (tokens verified per step, drafts + 1): the same cache classes with
  L = B + T records and conv states T - 1 columns wider. This is the layout the planner counts;
  the speculative ops (issue 4) must use caches of this shape, and any per-slot field they add
  (e.g. a committed cursor or a ring origin) must be added here and in the planner.

The pool's allocation equals :func:`trtllm_replayssm.planner.pool_bytes` to the byte.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Union

import torch

from torch import Tensor

from .cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from .checks import check_positive_int
from .memory import conv_width
from .models import HybridModel
from .registry import family

__all__ = ["ReplayCachePool", "POOL_MODES", "ReplayCache", "cache_template"]

POOL_MODES = ("replay", "replay_spec")
ReplayCache = Union[Mamba2ReplayCache, GDNReplayCache, KDAReplayCache]  # or a registered family's cache


def cache_template(kind: str, g, L: int, *, state_dtype: torch.dtype, record_dtype: torch.dtype):
    """A one-slot cache of layer ``kind`` (geometry ``g``) on the meta device: each field's
    per-slot shape and dtype, as the registered family's cache class lays it out."""
    fam = family(kind)
    fam.check_geometry(f"cache_template: {kind}", g)
    return fam.cache.for_geometry(g, 1, L, state_dtype=state_dtype, record_dtype=record_dtype, device="meta")


class ReplayCachePool:
    """All ReplaySSM caches and conv states of ``model``'s SSM layers for ``num_slots``
    sequences (plus padding slots), on one rank.

    Args:
        model: the rank-local model (``HybridModel.for_tp(tp)`` for a tensor-parallel rank).
        num_slots: sequences the pool holds at once.
        mode: ``"replay"`` or ``"replay_spec"`` (see the module docstring).
        buffer_len: L (replay) or the history B (replay_spec).
        spec_tokens: T, tokens verified per step; replay_spec only, 1 <= T <= B.
        state_dtype, record_dtype, conv_dtype: of checkpoints, records (x / B / d / k; dt and g
            records are fp32, fp64 with a fp64 checkpoint) and conv states.
        num_padding_slots: zeroed slots after the live ones for CUDA-graph padding rows.
        device: where the buffers live.

    Every buffer starts at zero (checkpoints zero, cursors 0). Slot bookkeeping is host-side.
    Methods raise ValueError / TypeError before writing anything.
    """

    def __init__(
        self,
        model: HybridModel,
        num_slots: int,
        *,
        mode: str = "replay",
        buffer_len: int = 16,
        spec_tokens: Optional[int] = None,
        state_dtype: torch.dtype = torch.float32,
        record_dtype: torch.dtype = torch.bfloat16,
        conv_dtype: torch.dtype = torch.bfloat16,
        num_padding_slots: int = 1,
        device: Union[str, torch.device, None] = None,
    ) -> None:
        owner = "ReplayCachePool"
        if not isinstance(model, HybridModel):
            raise TypeError(f"{owner}: model is {type(model).__name__}; expected a HybridModel")
        if mode not in POOL_MODES:
            raise ValueError(f"{owner}: mode is {mode!r}; expected one of {', '.join(POOL_MODES)}")
        check_positive_int(owner, "num_slots", num_slots)
        check_positive_int(owner, "buffer_len", buffer_len)
        if not isinstance(num_padding_slots, int) or isinstance(num_padding_slots, bool) or num_padding_slots < 0:
            raise ValueError(f"{owner}: num_padding_slots is {num_padding_slots!r}; expected an int >= 0")
        if mode == "replay":
            if spec_tokens is not None:
                raise ValueError(
                    f"{owner}: spec_tokens is {spec_tokens!r} in mode 'replay'; expected "
                    f"None (it sets the window of mode 'replay_spec')"
                )
            T, L = 1, buffer_len
        else:
            check_positive_int(owner, "spec_tokens", spec_tokens)
            if spec_tokens > buffer_len:
                raise ValueError(f"{owner}: spec_tokens (T) = {spec_tokens} > buffer_len (B) = {buffer_len}; expected B >= T")
            T, L = spec_tokens, buffer_len + spec_tokens
        if not model.ssm_layers:
            raise ValueError(f"{owner}: {model.name} has no SSM layer; expected a hybrid model")

        self.model, self.mode, self.buffer_len, self.L = model, mode, buffer_len, L
        self.spec_tokens = spec_tokens
        self.num_slots, self.num_padding_slots = num_slots, num_padding_slots
        ns = num_slots + num_padding_slots
        self.buffers: Dict[str, Tensor] = {}
        self._caches: Dict[int, ReplayCache] = {}
        self._conv: Dict[int, Tensor] = {}

        groups: Dict[tuple, List[int]] = {}
        for layer in model.ssm_layers:
            groups.setdefault((layer.kind, layer.geometry), []).append(layer.index)
        for gi, ((kind, geom), indices) in enumerate(groups.items()):
            template = cache_template(kind, geom, L, state_dtype=state_dtype, record_dtype=record_dtype)
            names = list(template.tensors())
            bufs = {
                name: torch.zeros(
                    (len(indices), ns) + tuple(getattr(template, name).shape[1:]),
                    dtype=getattr(template, name).dtype,
                    device=device,
                )
                for name in names
            }
            bufs["conv_state"] = torch.zeros(
                len(indices), ns, geom.conv_dim, conv_width(geom.d_conv, T), dtype=conv_dtype, device=device
            )
            for name, buf in bufs.items():
                self.buffers[f"{kind}_{gi}.{name}"] = buf
            for j, index in enumerate(indices):
                self._caches[index] = type(template)(**{name: bufs[name][j] for name in names})
                self._conv[index] = bufs["conv_state"][j]
        self._live = [False] * num_slots

    # ----------------------------------------------------------------------- views

    @property
    def layer_indices(self) -> List[int]:
        """Model layer indices of the SSM layers, in order (the order of ``states`` arguments)."""
        return list(self._caches)

    def cache(self, layer_index: int) -> ReplayCache:
        """The replay cache of SSM layer ``layer_index``: views into the pool's buffers, with
        num_slots + num_padding_slots slots."""
        self._check_layer("cache", layer_index)
        return self._caches[layer_index]

    def conv_state(self, layer_index: int) -> Tensor:
        """[num_slots + num_padding_slots, conv_dim, width] conv states of SSM layer ``layer_index``."""
        self._check_layer("conv_state", layer_index)
        return self._conv[layer_index]

    @property
    def num_physical_slots(self) -> int:
        return self.num_slots + self.num_padding_slots

    @property
    def padding_slot_ids(self) -> List[int]:
        return list(range(self.num_slots, self.num_physical_slots))

    @property
    def nbytes(self) -> int:
        """Bytes the pool allocated (all buffers)."""
        return sum(b.numel() * b.element_size() for b in self.buffers.values())

    @property
    def device(self) -> torch.device:
        return next(iter(self.buffers.values())).device

    def live_slots(self) -> List[int]:
        return [s for s, live in enumerate(self._live) if live]

    def free_slots(self) -> List[int]:
        return [s for s, live in enumerate(self._live) if not live]

    # ----------------------------------------------------------------------- slots

    def admit(
        self, slot_ids, states: Optional[Sequence[Tensor]] = None, conv_states: Optional[Sequence[Tensor]] = None
    ) -> None:
        """Start sequences in free slots: checkpoints := ``states`` (or zeros), conv states :=
        ``conv_states`` (or zeros), cursors := 0; the slots become live.

        Args:
            slot_ids: [n] distinct free slot ids in [0, num_slots) (list or integer tensor).
            states: one tensor per SSM layer (order of :attr:`layer_indices`),
                [n, *checkpoint.shape[1:]], e.g. a prefill's final states; cast to the
                checkpoint dtype.
            conv_states: one tensor per SSM layer, [n, conv_dim, width].
        """
        slots = self._slots("admit", slot_ids, want_live=False)
        self._load("admit", slots, states, conv_states)
        for s in slots:
            self._live[s] = True

    def reanchor(self, slot_ids, states: Sequence[Tensor], conv_states: Sequence[Tensor]) -> None:
        """Re-anchor live sequences, e.g. after preemption and a recomputed prefill: checkpoints
        := ``states``, conv states := ``conv_states``, cursors := 0 (records are dropped).
        Arguments as for :meth:`admit`, with live slots and both state lists required."""
        if states is None or conv_states is None:
            raise ValueError("ReplayCachePool.reanchor: states and conv_states are required (one tensor per SSM layer each)")
        slots = self._slots("reanchor", slot_ids, want_live=True)
        self._load("reanchor", slots, states, conv_states)

    def release(self, slot_ids) -> None:
        """Free live slots. Their buffers are left as they are (the next admit overwrites them)."""
        for s in self._slots("release", slot_ids, want_live=True):
            self._live[s] = False

    def reset(self, slot_ids) -> None:
        """Zero every buffer row of ``slot_ids`` (any slots, padding ones included): checkpoints,
        records, conv states, cursors. Liveness is unchanged."""
        slots = self._slots("reset", slot_ids, want_live=None, allow_padding=True)
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        for buf in self.buffers.values():
            buf.index_fill_(1, index, 0)

    def reset_padding(self) -> None:
        """Zero the padding slots again (after padding rows of engine kernels wrote them)."""
        self.reset(self.padding_slot_ids)

    # ----------------------------------------------------------------------- helpers

    def _check_layer(self, owner: str, layer_index) -> None:
        if layer_index not in self._caches:
            raise ValueError(
                f"ReplayCachePool.{owner}: layer {layer_index!r} is not an SSM layer; expected one of {self.layer_indices}"
            )

    def _slots(self, owner: str, slot_ids, *, want_live: Optional[bool], allow_padding: bool = False) -> List[int]:
        owner = f"ReplayCachePool.{owner}"
        if isinstance(slot_ids, Tensor):
            if slot_ids.dim() != 1 or slot_ids.dtype not in (torch.int32, torch.int64):
                raise ValueError(
                    f"{owner}: slot_ids has shape {tuple(slot_ids.shape)} and dtype "
                    f"{slot_ids.dtype}; expected a 1-D int32/int64 tensor"
                )
            slot_ids = slot_ids.tolist()
        if not isinstance(slot_ids, (list, tuple)) or any(not isinstance(s, int) or isinstance(s, bool) for s in slot_ids):
            raise ValueError(f"{owner}: slot_ids is {slot_ids!r}; expected a list or 1-D tensor of ints")
        hi = self.num_physical_slots if allow_padding else self.num_slots
        bad = [s for s in slot_ids if not 0 <= s < hi]
        if bad:
            raise ValueError(f"{owner}: slot ids {bad} out of range; expected ids in [0, {hi})")
        if len(set(slot_ids)) != len(slot_ids):
            raise ValueError(f"{owner}: slot_ids has duplicate ids; expected distinct slots")
        if want_live is not None:
            wrong = [s for s in slot_ids if self._live[s] != want_live]
            if wrong:
                state = "free" if want_live else "live"
                raise ValueError(f"{owner}: slots {wrong} are {state}; expected {'live' if want_live else 'free'} slots")
        return list(slot_ids)

    def _state_list(self, owner: str, name: str, tensors, shapes) -> None:
        if not isinstance(tensors, (list, tuple)) or len(tensors) != len(shapes):
            raise ValueError(
                f"{owner}: {name} is {type(tensors).__name__}; expected a list of "
                f"{len(shapes)} tensors (one per SSM layer, order of layer_indices)"
            )
        for layer, t, want in zip(self.layer_indices, tensors, shapes):
            if not isinstance(t, Tensor):
                raise TypeError(f"{owner}: {name} of layer {layer} is {type(t).__name__}; expected a torch.Tensor")
            if tuple(t.shape) != want:
                raise ValueError(f"{owner}: {name} of layer {layer} has shape {tuple(t.shape)}; expected {want}")
            if not t.is_floating_point():
                raise TypeError(f"{owner}: {name} of layer {layer} is {t.dtype}; expected a floating dtype")

    def _load(self, owner: str, slots: List[int], states, conv_states) -> None:
        """Checks both state lists, then checkpoint / conv state := given (or zeros), cursor := 0."""
        owner = f"ReplayCachePool.{owner}"
        n = len(slots)
        if states is not None:
            self._state_list(owner, "states", states, [(n,) + tuple(c.checkpoint.shape[1:]) for c in self._caches.values()])
        if conv_states is not None:
            self._state_list(owner, "conv_states", conv_states, [(n,) + tuple(c.shape[1:]) for c in self._conv.values()])
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        for k, layer in enumerate(self.layer_indices):
            self._caches[layer].admit(index, None if states is None else states[k])
            conv = self._conv[layer]
            conv[index] = 0 if conv_states is None else conv_states[k].to(conv.device, conv.dtype)
