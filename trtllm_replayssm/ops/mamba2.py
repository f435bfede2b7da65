"""Public Mamba-2 decode ops: validate, allocate ``out``, dispatch to ``replayssm::`` custom ops.

CUDA tensors run the Triton kernels; CPU tensors run the PyTorch reference (any float dtype,
float64 included). Both ops are ``torch.library`` custom ops with fake implementations, so they
trace under ``torch.compile`` and record into CUDA graphs.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Union

import torch

from torch import Tensor

from ..cache import MAX_L, Mamba2ReplayCache
from ..checks import (
    check_cache_type,
    check_rounding_seed,
    check_flag,
    check_optional,
    check_slot_ids,
    check_state,
    check_tensor,
    dividing_heads,
    float_dtypes,
    SlotBatch,
    slot_tensor,
    token_rows,
)
from ..reference.mamba2 import mamba2_decode_step_ref, mamba2_replay_step_ref
from .library import define_op, new_out

__all__ = [
    "mamba2_decode_step",
    "mamba2_replay_step",
    "Mamba2Inputs",
    "Mamba2Dims",
    "check_mamba2_inputs",
    "cache_fields",
    "MAX_L",
]


# --------------------------------------------------------------------------- custom ops
# Same argument names and order as the public functions (:func:`define_op`).


@define_op(
    "mamba2_decode_step",
    mutates_args=("state", "out"),
    reference=mamba2_decode_step_ref,
    launcher="mamba2_decode:launch_mamba2_decode_step",
)
def _mamba2_decode_step_op(
    state: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    slot_ids: Tensor,
    D: Optional[Tensor],
    z: Optional[Tensor],
    dt_bias: Optional[Tensor],
    dt_softplus: bool,
    out: Tensor,
) -> None:
    """Schema of ``replayssm::mamba2_decode_step``."""


# The cache tensors the replay custom ops take first, in order (all of them written).
CACHE_FIELDS = ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals")


@define_op(
    "mamba2_replay_step",
    mutates_args=CACHE_FIELDS + ("out", "checkpoint_scale"),
    reference=mamba2_replay_step_ref,
    launcher="mamba2_replay:launch_mamba2_replay_step",
)
def _mamba2_replay_step_op(
    checkpoint: Tensor,
    x_records: Tensor,
    dt_records: Tensor,
    B_records: Tensor,
    cursor: Tensor,
    arrivals: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    slot_ids: Tensor,
    D: Optional[Tensor],
    z: Optional[Tensor],
    dt_bias: Optional[Tensor],
    dt_softplus: bool,
    out: Tensor,
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> None:
    """Schema of ``replayssm::mamba2_replay_step`` (``checkpoint_scale``: an fp8 checkpoint's;
    ``rounding_seed``: a flush's stochastic rounding)."""


# --------------------------------------------------------------------------- validation


class Mamba2Inputs(NamedTuple):
    """One Mamba-2 step's inputs besides the cache, in the custom ops' order: one token per row
    (``[batch, ...]``) or a window of T tokens (``[batch, T, ...]``).

    x: [batch, (T,) nheads, head_dim]. dt: [batch, (T,) nheads] raw (before dt_bias and
    softplus), any float dtype and strides. A: [nheads] fp32 (fp64 on the CPU). B, C:
    [batch, (T,) ngroups, d_state], x's dtype. slot_ids: [batch] int32 or a
    :class:`~trtllm_replayssm.checks.SlotBatch`. D: [nheads] | [nheads, head_dim] | None.
    z: like x | None. dt_bias: [nheads] | None. dt_softplus: bool. out: like x | None.
    """

    x: Tensor
    dt: Tensor
    A: Tensor
    B: Tensor
    C: Tensor
    slot_ids: Union[Tensor, SlotBatch]
    D: Optional[Tensor]
    z: Optional[Tensor]
    dt_bias: Optional[Tensor]
    dt_softplus: bool
    out: Optional[Tensor]

    def for_launch(self) -> "Mamba2Inputs":
        """The custom op's arguments: the slot ids as a tensor, ``out`` a fresh zeroed tensor
        when None."""
        return self._replace(slot_ids=slot_tensor(self.slot_ids), out=new_out(self.x, self.out))

    def token(self, s: int, rows: Tensor) -> "Mamba2Inputs":
        """Token ``s`` of a window (launch form), for slot ids ``rows``."""
        return self._replace(
            x=self.x[:, s],
            dt=self.dt[:, s],
            B=self.B[:, s],
            C=self.C[:, s],
            slot_ids=rows,
            z=None if self.z is None else self.z[:, s],
            out=self.out[:, s],
        )


class Mamba2Dims(NamedTuple):
    """What Mamba-2 inputs are checked against: the layer geometry, the slots of the cache or
    state, the activation dtype (None: any float dtype) and the device."""

    nheads: int
    head_dim: int
    d_state: int
    ngroups: int
    num_slots: int
    act_dtype: Optional[torch.dtype]
    device: torch.device

    @classmethod
    def of_cache(cls, cache: Mamba2ReplayCache) -> "Mamba2Dims":
        return cls(cache.nheads, cache.head_dim, cache.d_state, cache.ngroups, cache.num_slots, cache.act_dtype, cache.device)

    @classmethod
    def of_state(cls, op: str, name: str, state, B, window: bool) -> "Mamba2Dims":
        """Checks a conventional state [num_slots, nheads, head_dim, d_state] (``name``) and
        takes ngroups from B [batch, (T,) ngroups, d_state]."""
        num_slots, nheads, head_dim, d_state = check_state(op, name, state, "[num_slots, nheads, head_dim, d_state]")
        ngroups = dividing_heads(op, "B", B, "ngroups, d_state", "nheads", nheads, window)
        return cls(nheads, head_dim, d_state, ngroups, num_slots, None, state.device)


def check_mamba2_inputs(op: str, inputs: Mamba2Inputs, dims: Mamba2Dims, max_T: Optional[int] = None) -> int:
    """Checks a Mamba-2 step's inputs against ``dims``; returns the tokens per row: 1 for one
    step (``max_T`` None), T for a window of 1 <= T <= ``max_T`` tokens (verify, serial,
    snapshot)."""
    x, dt, A, B, C, slot_ids, D, z, dt_bias, dt_softplus, out = inputs
    nheads, head_dim, d_state, ngroups, num_slots, act_dtype, device = dims
    lead, rows, T = token_rows(op, "x", x, "nheads, head_dim", (nheads, head_dim), max_T)
    floats = float_dtypes(device)
    act = (act_dtype,) if act_dtype is not None else floats
    shape_x = rows + (nheads, head_dim)
    check_tensor(op, "x", x, f"[{lead}, nheads, head_dim]", shape_x, dtypes=act, device=device)
    act = (x.dtype,)
    check_tensor(op, "dt", dt, f"[{lead}, nheads]", rows + (nheads,), dtypes=floats, device=device, inner_contiguous=False)
    a_dtypes = (torch.float32, torch.float64) if device.type == "cpu" else (torch.float32,)
    check_tensor(op, "A", A, "[nheads]", (nheads,), dtypes=a_dtypes, device=device)
    for name, t in (("B", B), ("C", C)):
        check_tensor(op, name, t, f"[{lead}, ngroups, d_state]", rows + (ngroups, d_state), dtypes=act, device=device)
    param = tuple(dict.fromkeys(a_dtypes + act))
    if isinstance(D, Tensor) and D.dim() == 2:
        check_tensor(op, "D", D, "[nheads, head_dim]", (nheads, head_dim), dtypes=param, device=device)
    else:
        check_optional(op, "D", D, "[nheads]", (nheads,), dtypes=param, device=device)
    check_optional(op, "z", z, f"[{lead}, nheads, head_dim]", shape_x, dtypes=act, device=device)
    check_optional(op, "dt_bias", dt_bias, "[nheads]", (nheads,), dtypes=param, device=device)
    check_flag(op, "dt_softplus", dt_softplus)
    check_optional(op, "out", out, f"[{lead}, nheads, head_dim]", shape_x, dtypes=act, device=device)
    check_slot_ids(op, slot_ids, rows[0], num_slots, device)
    return T


def cache_fields(cache: Mamba2ReplayCache) -> tuple:
    """The cache tensors the replay custom ops take first, in order (:data:`CACHE_FIELDS`)."""
    return tuple(getattr(cache, name) for name in CACHE_FIELDS)


# --------------------------------------------------------------------------- public API


def mamba2_decode_step(
    state: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    """Conventional Mamba-2 decode step: reads, updates and stores the whole state.

    Args:
        state (Tensor): [num_slots, nheads, head_dim, d_state], fp32 | bf16 | fp16 (fp64 on
            CPU), d_state contiguous. Mutated: rows' slots get S = exp(A dt) S + dt x Bᵀ.
        x (Tensor): [batch, nheads, head_dim], fp32 | bf16 | fp16 (fp64 on CPU).
        dt (Tensor): [batch, nheads] raw (before dt_bias and softplus); any float dtype, any strides.
        A (Tensor): [nheads] fp32, negative (-exp(A_log)).
        B, C (Tensor): [batch, ngroups, d_state], dtype of x; ngroups divides nheads.
        slot_ids (Tensor): [batch] int32; < 0 marks a padding row: nothing read or written.
        D (Tensor, optional): [nheads] or [nheads, head_dim], fp32 or dtype of x.
        z (Tensor, optional): like x; gates y by silu(z).
        dt_bias (Tensor, optional): [nheads], fp32 or dtype of x.
        dt_softplus (bool): apply softplus (threshold 20) to dt + dt_bias.
        out (Tensor, optional): like x; padding rows are left as they were.
    Returns:
        Tensor: y [batch, nheads, head_dim], dtype of x (``out`` when given).
    Raises:
        ValueError, TypeError: before anything is written. Live slot ids are checked against
        the state (one host sync) except during CUDA-graph capture.
    """
    op = "mamba2_decode_step"
    inputs = Mamba2Inputs(x, dt, A, B, C, slot_ids, D, z, dt_bias, dt_softplus, out)
    check_mamba2_inputs(op, inputs, Mamba2Dims.of_state(op, "state", state, B, window=False))
    run = inputs.for_launch()
    torch.ops.replayssm.mamba2_decode_step(state, *run)
    return run.out


def mamba2_replay_step(
    cache: Mamba2ReplayCache,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One Mamba-2 ReplaySSM decode step from checkpoint + records.

    Args:
        cache (Mamba2ReplayCache): mutated. Each live row with cursor w < L-1 appends its
            record (x, processed dt, B) at position w and sets the cursor to w+1, storing no
            state; a row with cursor L-1 folds its L-1 records and the current token into the
            checkpoint (rounded to the checkpoint dtype once, here; an fp8 checkpoint's rows
            with new scales) and sets the cursor to 0.
            The decision and the cursor advance happen on the device: no host sync, and one
            captured CUDA graph serves every step.
        x (Tensor): [batch, nheads, head_dim], the cache's activation dtype.
        dt (Tensor): [batch, nheads] raw (before dt_bias and softplus); any float dtype, any strides.
        A (Tensor): [nheads] fp32, negative (-exp(A_log)).
        B, C (Tensor): [batch, ngroups, d_state], the cache's activation dtype.
        slot_ids (Tensor): [batch] int32 physical slots; < 0 marks a padding row: nothing is
            read or written for it, its ``out`` row is left as it was. Live ids are distinct.
        D, z, dt_bias, dt_softplus, out: as in :func:`mamba2_decode_step`.
        rounding_seed (int, optional): in [0, 2^31): a flush rounds a bf16, fp16 or fp8 checkpoint
            stochastically (each value to one of its two neighbours, the upper with probability
            its distance from the lower over the spacing: unbiased), the draws a function of the
            seed, the slot, the head, the flushing token's dt and the element, so a captured graph
            replays them. Runs the Triton kernel. None: round to nearest even.
    Returns:
        Tensor: y [batch, nheads, head_dim], dtype of x (``out`` when given), equal to the
        conventional recurrence's output up to fp32 rounding.
    Raises:
        ValueError, TypeError: before anything is written. Live slot ids are checked against
        the cache (one host sync) except during CUDA-graph capture.
    """
    op = "mamba2_replay_step"
    check_cache_type(op, cache, (Mamba2ReplayCache,))
    if not 1 <= cache.L <= MAX_L:
        raise ValueError(f"{op}: cache has L = {cache.L}; expected 1 <= L <= {MAX_L}")
    device = cache.device
    if device.type != "cpu" and torch.float64 in (cache.state_dtype, cache.act_dtype):
        raise TypeError(f"{op}: cache holds float64 on {device}; float64 runs on the CPU reference only")
    inputs = Mamba2Inputs(x, dt, A, B, C, slot_ids, D, z, dt_bias, dt_softplus, out)
    check_mamba2_inputs(op, inputs, Mamba2Dims.of_cache(cache))
    check_rounding_seed(op, rounding_seed, cache.state_dtype)
    run = inputs.for_launch()
    torch.ops.replayssm.mamba2_replay_step(*cache_fields(cache), *run, cache.checkpoint_scale, rounding_seed)
    return run.out
