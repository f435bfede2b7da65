"""The state block: one Mamba-2 layer's whole ReplaySSM cache in the engine runtime's state buffer.

TensorRT-LLM's engine-path runtime (``RnnStateManager``) allocates one fp32 state buffer per
SSM layer, ``num_slots`` times a per-slot size taken from the model config, and its stock
``selective_scan`` plugin writes slot ``s``'s state at ``s * state_bytes`` of that buffer. This
module lays the ReplaySSM cache into such a buffer: the checkpoints stay where the stock plugin
writes its states, and the rest of each slot's cache (its *tail*) follows all the checkpoints.
The TensorRT plugin (``trtllm_replayssm_plugins.mamba2_block``) reads this layout; the
engine-flow builder (``trtllm_replayssm_builders.trtllm_engine``) sizes the runtime's buffer
from it.

One layer's buffer of ``num_slots`` slots, byte offsets:

    0                                checkpoint [num_slots, nheads, head_dim, d_state] f32
    num_slots * state_bytes          tails      [num_slots, tail_bytes]

and in each slot's tail, in this order, each field naturally aligned, no padding:

    dt_records  f32  [nheads, L]
    cursor      i32  [1]          records since the checkpoint, in [0, L)
    arrivals    i32  [1]          the kernel's per-row counter, 0 between steps
    pending     i32  [1]          unused by standard decode; kept so that the bytes per slot are
                                  the planner's replay bytes exactly
    x_records   act  [nheads, L, head_dim]
    B_records   act  [ngroups, L, d_state]

``act`` is the activation dtype (f32 | bf16 | f16). The checkpoint is fp32 because the runtime's
state buffer is. Region ``r`` of slot ``s`` starts at ``base(r) + s * stride(r)`` with stride
``state_bytes`` for the checkpoint and ``tail_bytes`` for the tail fields, so each is a strided
tensor ``[num_slots, *shape]``; ``tail_bytes`` must be a multiple of 4 (checked).

Bytes per slot, ``state_bytes + tail_bytes``, equal :func:`trtllm_replayssm.memory.ssm_layer_bytes`
in ``replay`` mode, state + records + cursors (:func:`planner_bytes`): a runtime that allocates
that much per slot and layer counts the records exactly as the planner does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

import torch

from .cache import MAX_L
from .checks import check_positive_int
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
            check_positive_int(owner, name, getattr(self, name))
        if self.L > MAX_L:
            raise ValueError(f"{owner}: L is {self.L}; expected 1 <= L <= {MAX_L}")
        if self.nheads % self.ngroups:
            raise ValueError(f"{owner}: ngroups = {self.ngroups} must divide nheads = {self.nheads}")
        if self.act_dtype not in ACT_DTYPES:
            raise TypeError(f"{owner}: act_dtype is {self.act_dtype!r}; expected {' | '.join(ACT_DTYPES)}")
        if self.tail_bytes % 4:
            raise ValueError(
                f"{owner}: a slot's tail holds {self.tail_bytes} bytes, not a multiple of 4, so its fp32 fields "
                f"have no whole-element slot stride; expected nheads*L*head_dim + ngroups*L*d_state even "
                f"(got {self.nheads}*{self.L}*{self.head_dim} + {self.ngroups}*{self.L}*{self.d_state})"
            )

    @property
    def checkpoint(self) -> Region:
        """The checkpoint of one slot, ``[nheads, head_dim, d_state]`` fp32 (offset 0)."""
        return Region("checkpoint", "f32", 0, (self.nheads, self.head_dim, self.d_state))

    @property
    def regions(self) -> Tuple[Region, ...]:
        """The tail fields of one slot; offsets within the tail."""
        nh, hd, ds, ng, L, a = self.nheads, self.head_dim, self.d_state, self.ngroups, self.L, self.act_dtype
        fields = (
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
        for r in (self.checkpoint, *self.regions):
            if r.name == name:
                return r
        names = ", ".join(r.name for r in (self.checkpoint, *self.regions))
        raise KeyError(f"Mamba2StateBlock: no region {name!r}; regions are {names}")

    @property
    def state_bytes(self) -> int:
        return self.checkpoint.nbytes

    @property
    def tail_bytes(self) -> int:
        """Bytes of one slot's tail: its fields packed without padding."""
        last = self.regions[-1]
        return last.offset + last.nbytes

    @property
    def nbytes(self) -> int:
        """Bytes per slot: checkpoint + tail."""
        return self.state_bytes + self.tail_bytes

    def layer_offset(self, name: str, num_slots: int) -> int:
        """Byte offset of slot 0's region ``name`` in a layer buffer of ``num_slots`` slots."""
        check_positive_int("Mamba2StateBlock.layer_offset", "num_slots", num_slots)
        r = self.region(name)
        return r.offset if name == "checkpoint" else num_slots * self.state_bytes + r.offset

    def slot_stride(self, name: str) -> int:
        """Slot stride of region ``name`` in its own elements."""
        r = self.region(name)
        return (self.state_bytes if name == "checkpoint" else self.tail_bytes) // r.itemsize

    def views(self, buffer: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Strided views ``[num_slots, *shape]`` of every region of one layer's buffer.

        Args:
            buffer: a contiguous tensor of any dtype holding ``num_slots * nbytes`` bytes (e.g.
                uint8 ``[num_slots, nbytes]``, or the runtime's fp32 state buffer of one layer),
                possibly a view into a larger allocation (one layer of a pooled buffer).
        Raises:
            ValueError: not contiguous, its size is not a whole number of slots, or it does not
                start 4-byte aligned in its storage.
        """
        if not buffer.is_contiguous():
            raise ValueError("Mamba2StateBlock.views: buffer is not contiguous; expected a dense layer buffer")
        total = buffer.numel() * buffer.element_size()
        if total % self.nbytes:
            raise ValueError(
                f"Mamba2StateBlock.views: buffer holds {total} bytes; expected a multiple of the {self.nbytes} bytes per slot"
            )
        raw = buffer.reshape(-1).view(torch.uint8)
        start = raw.storage_offset()  # bytes; as_strided's offset counts from the storage's start
        if start % 4:
            raise ValueError(f"Mamba2StateBlock.views: buffer starts at byte {start} of its storage; expected a multiple of 4")
        num_slots = total // self.nbytes
        out = {}
        for r in (self.checkpoint, *self.regions):
            inner, strides = 1, []
            for d in reversed(r.shape):
                strides.append(inner)
                inner *= d
            out[r.name] = raw.view(_TORCH[r.dtype]).as_strided(
                (num_slots, *r.shape),
                (self.slot_stride(r.name), *reversed(strides)),
                (start + self.layer_offset(r.name, num_slots)) // r.itemsize,
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
