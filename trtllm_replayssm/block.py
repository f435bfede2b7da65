"""The per-slot state block: one Mamba-2 layer's whole ReplaySSM cache in one byte range.

An engine runtime that allocates one opaque state buffer per layer, ``[num_slots, nbytes]``
(TensorRT-LLM's engine-path ``RnnStateManager`` does, sized from the model config), can hold
the ReplaySSM cache if each slot's ``nbytes`` are laid out as below. The TensorRT plugin
(``trtllm_replayssm_plugins.mamba2_block``) reads this layout; the engine-flow builder
(``trtllm_replayssm_builders.trtllm_engine``) sizes the runtime's buffer from it.

Layout of one slot (byte offsets in this order, each region naturally aligned, no padding):

    checkpoint  f32  [nheads, head_dim, d_state]   the state S0 (d_state contiguous)
    dt_records  f32  [nheads, L]
    cursor      i32  [1]                           records since the checkpoint, in [0, L)
    arrivals    i32  [1]                           the kernel's per-row counter, 0 between steps
    pending     i32  [1]                           unused by standard decode; kept so that the
                                                   block is the planner's replay bytes exactly
    x_records   act  [nheads, L, head_dim]
    B_records   act  [ngroups, L, d_state]

``act`` is the activation dtype (f32 | bf16 | f16). The checkpoint is fp32 because the engine
runtime's state buffer is fp32. Slot ``s`` of a region starts at ``s * nbytes + offset``, so each
region is a strided tensor ``[num_slots, *shape]`` whose slot stride is ``nbytes`` in its own
elements; ``nbytes`` must therefore be a multiple of 4 (checked).

The byte count equals :func:`trtllm_replayssm.memory.ssm_layer_bytes` in ``replay`` mode,
state + records + cursors (:func:`planner_bytes`), so a runtime that allocates ``nbytes`` per slot
and layer counts the records exactly as the planner does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from .cache import MAX_L
from .memory import ssm_layer_bytes
from .models import MAMBA2, Mamba2Geometry

__all__ = ["ACT_DTYPES", "Region", "Mamba2StateBlock", "planner_bytes"]

ACT_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
_SIZES = {"f32": 4, "bf16": 2, "f16": 2, "i32": 4}
_TORCH = {**ACT_DTYPES, "i32": torch.int32}


@dataclass(frozen=True)
class Region:
    """One field of the block: dtype name, byte offset in the slot, per-slot shape."""

    name: str
    dtype: str
    offset: int
    shape: Tuple[int, ...]

    @property
    def itemsize(self) -> int:
        return _SIZES[self.dtype]

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n


def _positive(owner: str, name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: {name} is {value!r}; expected a positive int")


@dataclass(frozen=True)
class Mamba2StateBlock:
    """Per-slot block layout of one Mamba-2 layer (see the module docstring).

    Attributes:
        nheads, head_dim, d_state, ngroups: the layer's TP-local geometry.
        L: records per slot (the replay buffer length), 1 <= L <= MAX_L.
        act_dtype: "f32" | "bf16" | "f16", the dtype of x and B (records and step inputs).
    """

    nheads: int
    head_dim: int
    d_state: int
    ngroups: int
    L: int
    act_dtype: str

    def __post_init__(self) -> None:
        owner = "Mamba2StateBlock"
        for name in ("nheads", "head_dim", "d_state", "ngroups", "L"):
            _positive(owner, name, getattr(self, name))
        if self.L > MAX_L:
            raise ValueError(f"{owner}: L is {self.L}; expected 1 <= L <= {MAX_L}")
        if self.nheads % self.ngroups:
            raise ValueError(f"{owner}: ngroups = {self.ngroups} must divide nheads = {self.nheads}")
        if self.act_dtype not in ACT_DTYPES:
            raise TypeError(f"{owner}: act_dtype is {self.act_dtype!r}; expected {' | '.join(ACT_DTYPES)}")
        if self.nbytes % 4:
            raise ValueError(
                f"{owner}: a slot holds {self.nbytes} bytes, not a multiple of 4, so the fp32 regions "
                f"have no whole-element slot stride; expected nheads*L*head_dim + ngroups*L*d_state even "
                f"(got {self.nheads}*{self.L}*{self.head_dim} + {self.ngroups}*{self.L}*{self.d_state})"
            )

    @property
    def regions(self) -> Tuple[Region, ...]:
        nh, hd, ds, ng, L, a = self.nheads, self.head_dim, self.d_state, self.ngroups, self.L, self.act_dtype
        fields = (
            ("checkpoint", "f32", (nh, hd, ds)),
            ("dt_records", "f32", (nh, L)),
            ("cursor", "i32", (1,)),
            ("arrivals", "i32", (1,)),
            ("pending", "i32", (1,)),
            ("x_records", a, (nh, L, hd)),
            ("B_records", a, (ng, L, ds)),
        )
        out, offset = [], 0
        for name, dtype, shape in fields:
            region = Region(name, dtype, offset, shape)
            out.append(region)
            offset += region.nbytes
        return tuple(out)

    def region(self, name: str) -> Region:
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"Mamba2StateBlock: no region {name!r}; regions are {', '.join(r.name for r in self.regions)}")

    @property
    def nbytes(self) -> int:
        """Bytes per slot: the sum of the regions (they are packed without padding)."""
        last = self.regions[-1]
        return last.offset + last.nbytes

    def slot_stride(self, name: str) -> int:
        """Slot stride of region ``name`` in its own elements (``nbytes / itemsize``)."""
        return self.nbytes // self.region(name).itemsize

    def views(self, buffer: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Strided views ``[num_slots, *shape]`` of every region of a block buffer.

        Args:
            buffer: a contiguous tensor of any dtype whose bytes are ``num_slots * nbytes``
                (e.g. uint8 ``[num_slots, nbytes]``, or the runtime's fp32 state buffer).
        Raises:
            ValueError: not contiguous, or its size is not a whole number of slots.
        """
        if not buffer.is_contiguous():
            raise ValueError("Mamba2StateBlock.views: buffer is not contiguous; expected a dense block buffer")
        total = buffer.numel() * buffer.element_size()
        if total % self.nbytes:
            raise ValueError(
                f"Mamba2StateBlock.views: buffer holds {total} bytes; expected a multiple of the block's {self.nbytes}"
            )
        raw = buffer.reshape(-1).view(torch.uint8)
        num_slots = total // self.nbytes
        out = {}
        for r in self.regions:
            typed = raw.view(_TORCH[r.dtype])
            inner, strides = 1, []
            for d in reversed(r.shape):
                strides.append(inner)
                inner *= d
            out[r.name] = typed.as_strided(
                (num_slots, *r.shape), (self.nbytes // r.itemsize, *reversed(strides)), r.offset // r.itemsize
            )
        return out

    def geometry(self, d_conv: int) -> Mamba2Geometry:
        return Mamba2Geometry(self.nheads, self.head_dim, self.d_state, self.ngroups, d_conv)


def planner_bytes(block: Mamba2StateBlock) -> int:
    """The planner's ``replay`` bytes per slot for this layer without the conv state (which the
    runtime allocates apart): state (fp32) + L records + cursors."""
    act = ACT_DTYPES[block.act_dtype]
    b = ssm_layer_bytes(
        MAMBA2,
        block.geometry(d_conv=2),
        "replay",
        buffer_len=block.L,
        spec_tokens=1,
        state_dtype=torch.float32,
        record_dtype=act,
        conv_dtype=act,
    )
    return b.state + b.records + b.cursors
