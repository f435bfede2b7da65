"""The TensorRT-LLM v1.2.1 engine flow (``trtllm-build``, C++ runtime, Triton's ``tensorrtllm``
backend) for Mamba-2 models with ReplaySSM decoding. Design: docs/engine_flow.md.

Plain data and functions (no TensorRT-LLM needed): :mod:`.state` (the layer buffer the runtime
allocates), :mod:`.views` (where the stock ``Mamba2`` layer keeps the step's inputs) and
:mod:`.hook` (which layers, the plugin fields, the rewritten forward, the engine I/O and config).
:mod:`.adapter` connects them to TensorRT-LLM (import-guarded): :func:`enable_replayssm_engine`
rewrites a ``MambaForCausalLM`` before ``build``, :func:`run_trtllm_build` is
``trtllm-replayssm build``. This is the only builder package that imports
``trtllm_replayssm_plugins`` (tests/test_layering.py).
"""

from .adapter import enable_replayssm_engine, run_trtllm_build
from .hook import EngineFlowError, engine_io, plan_layer
from .state import EngineStateLayout
from .views import Mamba2LayerGeometry, step_views

__all__ = [
    "EngineFlowError",
    "EngineStateLayout",
    "Mamba2LayerGeometry",
    "enable_replayssm_engine",
    "engine_io",
    "plan_layer",
    "run_trtllm_build",
    "step_views",
]
