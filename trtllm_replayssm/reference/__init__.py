"""Pure-PyTorch references (any float dtype, float64 included): the oracle and the CPU path."""

from .mamba2 import mamba2_decode_step_ref, mamba2_replay_step_ref

__all__ = ["mamba2_decode_step_ref", "mamba2_replay_step_ref"]
