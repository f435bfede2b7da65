"""The TensorRT-LLM v1.2.1 engine flow (``trtllm-build``, C++ runtime, Triton's ``tensorrtllm``
backend) for Mamba-2 models with ReplaySSM decoding. Design: docs/engine_flow.md.

Plain data (no TensorRT-LLM needed): :mod:`.state` (the layer buffer the runtime allocates) and
:mod:`.views` (where the stock ``Mamba2`` layer keeps the step's inputs). This is the only
builder package that imports ``trtllm_replayssm_plugins`` (tests/test_layering.py).
"""

from .state import EngineStateLayout
from .views import Mamba2LayerGeometry, step_views

__all__ = ["EngineStateLayout", "Mamba2LayerGeometry", "step_views"]
