"""Hugging Face ``transformers`` hook: hybrid models decode their SSM layers by ReplaySSM.

    from trtllm_replayssm_builders.hf import enable_replayssm, disable_replayssm
    hook = enable_replayssm(model, buffer_len=16)     # Mamba2, NemotronH, Qwen3Next, Qwen3.5, KimiLinear
    model.generate(input_ids, max_new_tokens=64)      # prefill: host path + admission; decode: replay op
    disable_replayssm(model)

This package imports no ``transformers`` module itself: it recognises mixers by class name, and
``tiny`` imports ``transformers`` when it builds a model.
"""

from .hook import HookedLayer, ReplaySSMHook, disable_replayssm, enable_replayssm, replayssm_hook
from .mixers import register_adapter, supported_mixers_text

__all__ = [
    "HookedLayer",
    "ReplaySSMHook",
    "enable_replayssm",
    "disable_replayssm",
    "replayssm_hook",
    "register_adapter",
    "supported_mixers_text",
]
