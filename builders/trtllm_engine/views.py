"""Where TensorRT-LLM v1.2.1's engine-path ``Mamba2`` layer keeps the replay step's inputs.

``tensorrt_llm/layers/ssm.py`` (``Mamba2.forward``) computes ``zxbcdt = in_proj(hidden)`` and
``xbc_conv = conv1d(zxbcdt)`` and hands both, whole, to ``selective_scan`` (input and BC from
``xbc_conv``; delta and z from ``zxbcdt``). Rows are tokens; columns (TP-local, tp_size 1):

    zxbcdt    [tokens, d_inner + conv_dim + nheads + pad_ldc]   z | xBC | dt | pad
    xbc_conv  [tokens, conv_dim]                                x | B | C
    conv_dim = d_inner + 2 * ngroups * d_state,  pad_ldc = round_up(nheads, 8) - nheads

so the ReplaySSM step reads them in place, as strided views (:func:`step_views`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict

from trtllm_replayssm_plugins.mamba2_block_launch import StepView

__all__ = ["Mamba2LayerGeometry", "step_views"]


@dataclass(frozen=True)
class Mamba2LayerGeometry:
    """The attributes of a ``tensorrt_llm.layers.ssm.Mamba2`` the rewrite reads (TP-local).

    Attributes:
        d_inner: nheads * headdim. d_state, ngroups, nheads, headdim: as the layer.
    """

    d_inner: int
    d_state: int
    ngroups: int
    nheads: int
    headdim: int

    def __post_init__(self) -> None:
        for name in ("d_inner", "d_state", "ngroups", "nheads", "headdim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Mamba2LayerGeometry: {name} is {value!r}; expected a positive int")
        if self.nheads * self.headdim != self.d_inner:
            raise ValueError(
                f"Mamba2LayerGeometry: nheads * headdim = {self.nheads * self.headdim}; expected d_inner = {self.d_inner}"
            )

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.ngroups * self.d_state

    @property
    def pad_ldc(self) -> int:
        return (self.nheads + 7) // 8 * 8 - self.nheads

    @property
    def in_proj_width(self) -> int:
        return self.d_inner + self.conv_dim + self.nheads + self.pad_ldc


def step_views(g: Mamba2LayerGeometry) -> Dict[str, StepView]:
    """x, dt, B, C, z of the replay step as views of ``xbc`` and ``zxbcdt`` (elements)."""
    gs = g.ngroups * g.d_state
    return {
        "x": StepView("xbc", 0, g.conv_dim),
        "B": StepView("xbc", g.d_inner, g.conv_dim),
        "C": StepView("xbc", g.d_inner + gs, g.conv_dim),
        "z": StepView("zxbcdt", 0, g.in_proj_width),
        "dt": StepView("zxbcdt", g.d_inner + g.conv_dim, g.in_proj_width),
    }
