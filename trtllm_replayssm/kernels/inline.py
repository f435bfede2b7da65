"""Public names of the core Triton kernels that other packages call inside their own kernels.

The TensorRT plugin entries (``trtllm_replayssm_plugins.*_entry``) take TensorRT's parameter
order and call these ``@triton.jit`` functions, which Triton inlines: the same objects as the
launchers' kernels, so a plugin's numerics are the op's.
"""

from .gated_delta_replay import _gated_delta_replay_step_kernel as gated_delta_replay_step_kernel
from .mamba2_replay import _mamba2_replay_step_kernel as mamba2_replay_step_kernel

__all__ = ["gated_delta_replay_step_kernel", "mamba2_replay_step_kernel"]
