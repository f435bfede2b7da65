"""trtllm_replayssm: ReplaySSM decoding for hybrid LLMs (Mamba-2, Gated DeltaNet, KDA).

The core package: PyTorch reference, Triton kernels, ``replayssm::*`` custom ops and caches.
It imports neither the TensorRT plugin (``trtllm_replayssm_plugins``) nor the model-builder
hooks (``trtllm_replayssm_builders``).
"""
from .cache import Mamba2ReplayCache
from .ops import mamba2_decode_step, mamba2_replay_step

__version__ = "0.1.0"

__all__ = ["Mamba2ReplayCache", "mamba2_decode_step", "mamba2_replay_step", "__version__"]
