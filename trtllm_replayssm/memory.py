"""Byte model of the decode step: pure functions, shared by the benchmark, the demo and the pool.

All figures are per sequence (one decode row) per layer per step, TP-local geometry.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Mamba2StepBytes", "mamba2_step_bytes"]


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Mamba2StepBytes:
    """HBM bytes one row moves in one decode step, averaged over a window of L steps.

    ``state_read``/``state_written``: checkpoint (or state) bytes; ``records_read``/
    ``records_written``: record bytes; ``io``: step inputs and output (x, dt, B, C, z, y).
    """

    state_read: float
    state_written: float
    records_read: float
    records_written: float
    io: float

    @property
    def total(self) -> float:
        return self.state_read + self.state_written + self.records_read + self.records_written + self.io


def mamba2_step_bytes(route: str, *, nheads: int, head_dim: int, d_state: int, ngroups: int,
                      L: int, state_dtype: torch.dtype, act_dtype: torch.dtype,
                      has_z: bool = False) -> Mamba2StepBytes:
    """Bytes per row per step of the conventional (``"decode_step"``) or replay route.

    Replay, over one window of L steps with cursors 0 .. L-1: every step reads the checkpoint;
    step w reads w records (x per head, fp32 dt per head, B per group); steps 0 .. L-2 append one
    record; step L-1 (the flush) writes the checkpoint. Averages over the window are returned,
    which is what a batch with cursors spread over [0, L) moves per row.
    """
    state = nheads * head_dim * d_state * _size(state_dtype)
    a = _size(act_dtype)
    io = nheads * head_dim * a * (3 if has_z else 2) + nheads * a + 2 * ngroups * d_state * a
    if route == "decode_step":
        return Mamba2StepBytes(state, state, 0.0, 0.0, io)
    if route != "replay_step":
        raise ValueError(f"mamba2_step_bytes: route is {route!r}; expected 'decode_step' or 'replay_step'")
    dt_bytes = 8 if state_dtype == torch.float64 else 4   # dt records follow the cache (fp32 | fp64)
    record = nheads * head_dim * a + nheads * dt_bytes + ngroups * d_state * a
    mean_held = (L - 1) / 2.0                       # records read per step, averaged over w
    return Mamba2StepBytes(state_read=state, state_written=state / L,
                           records_read=mean_held * record,
                           records_written=record * (L - 1) / L, io=io)
