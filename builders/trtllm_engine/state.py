"""How one Mamba-2 layer's ReplaySSM cache fits TensorRT-LLM v1.2.1's engine-runtime state buffer.

The runtime (C++ ``RnnStateManager``, Python ``GenerationSession``) allocates, per SSM layer,
``num_slots`` fp32 states of ``[rnn_hidden_size // rnn_head_size, state_size, rnn_head_size]``,
all read from the engine's ``config.json`` (``pretrained_config``). The engine flow writes a
larger ``state_size`` there (:attr:`EngineStateLayout.runtime_state_size`) so that each layer
buffer holds the block layout of :mod:`trtllm_replayssm.block` for ``num_slots + 1`` slots:

    slots 0 .. num_slots-1   the runtime's sequence slots (``slot_mapping`` values)
    slot  num_slots          scratch: in a generation step the stock ``selective_scan`` plugin,
                             which the engine keeps for context steps, is pointed at it, so its
                             update lands nowhere the replay step reads

The runtime then allocates, per layer, ``num_slots * 4 * rnn_hidden_size * runtime_state_size``
bytes: the planner's replay bytes (:func:`trtllm_replayssm.block.planner_bytes`) for every slot,
plus :attr:`EngineStateLayout.overhead_bytes` (the scratch slot and the rounding up to a whole
``state_size`` row), all allocated before the KV-cache memory estimate reads the free memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from trtllm_replayssm.block import Mamba2StateBlock
from trtllm_replayssm.checks import check_positive_int

__all__ = ["EngineStateLayout"]

_F32 = 4


@dataclass(frozen=True)
class EngineStateLayout:
    """One layer's block in the engine runtime's fp32 state buffer.

    Attributes:
        block: the per-slot layout (TP-local geometry, L, activation dtype).
        num_slots: the runtime's slots per layer: ``max_batch_size`` (C++ runtime, pipeline
            parallelism 1) or the batch size given to ``GenerationSession.setup``.
    """

    block: Mamba2StateBlock
    num_slots: int

    def __post_init__(self) -> None:
        owner = "EngineStateLayout"
        if not isinstance(self.block, Mamba2StateBlock):
            raise TypeError(f"{owner}: block is {type(self.block).__name__}; expected Mamba2StateBlock")
        check_positive_int(owner, "num_slots", self.num_slots)

    @property
    def rnn_hidden_size(self) -> int:
        """``pretrained_config.rnn_hidden_size``: nheads * head_dim (unchanged)."""
        return self.block.nheads * self.block.head_dim

    @property
    def plugin_slots(self) -> int:
        """Slots the plugin addresses: the runtime's plus the scratch slot."""
        return self.num_slots + 1

    @property
    def scratch_slot(self) -> int:
        return self.num_slots

    @property
    def needed_bytes(self) -> int:
        """Bytes of one layer buffer the plugin reads or writes."""
        return self.plugin_slots * self.block.nbytes

    @property
    def runtime_state_size(self) -> int:
        """``pretrained_config.state_size`` to write into the engine's config.json: the
        smallest whose buffer holds :attr:`needed_bytes`."""
        row = self.num_slots * _F32 * self.rnn_hidden_size
        return max(self.block.d_state, -(-self.needed_bytes // row))

    @property
    def runtime_layer_bytes(self) -> int:
        """What the runtime allocates per layer with :attr:`runtime_state_size`."""
        return self.num_slots * _F32 * self.rnn_hidden_size * self.runtime_state_size

    @property
    def overhead_bytes(self) -> int:
        """Runtime bytes per layer beyond the planner's ``num_slots * block.nbytes``."""
        return self.runtime_layer_bytes - self.num_slots * self.block.nbytes
