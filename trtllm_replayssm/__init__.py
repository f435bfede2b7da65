"""trtllm_replayssm: ReplaySSM decoding for hybrid LLMs (Mamba-2, Gated DeltaNet, KDA).

The core package: PyTorch reference, Triton kernels, ``replayssm::*`` custom ops and caches.
It imports neither the TensorRT plugin (``trtllm_replayssm_plugins``) nor the model-builder
hooks (``trtllm_replayssm_builders``).

The names below load on first use (importing :mod:`trtllm_replayssm.ops` registers the
``torch.ops.replayssm.*`` ops), so that ``import trtllm_replayssm`` and the command line's
``--help`` do not import torch and Triton.
"""

import importlib

__version__ = "0.1.0"

__all__ = ["Mamba2ReplayCache", "mamba2_decode_step", "mamba2_replay_step", "__version__"]

_LAZY = {"Mamba2ReplayCache": ".cache", "mamba2_decode_step": ".ops", "mamba2_replay_step": ".ops"}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
