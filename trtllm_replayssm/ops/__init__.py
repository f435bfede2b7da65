"""Public ops of trtllm_replayssm (registered as ``torch.ops.replayssm.*``)."""
from ..cache import Mamba2ReplayCache
from .mamba2 import MAX_L, mamba2_decode_step, mamba2_replay_step

__all__ = ["Mamba2ReplayCache", "mamba2_decode_step", "mamba2_replay_step", "MAX_L"]
