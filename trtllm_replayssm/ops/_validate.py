"""Argument validators shared by the ops: one per argument kind, messages in dimension words.

Every op validates all of its arguments before it launches anything, so a bad call raises
``ValueError`` (shape, value, range) or ``TypeError`` (type, dtype) and leaves caches untouched.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from torch import Tensor

from ..cache import FLOAT_DTYPES


def float_dtypes(device: torch.device) -> tuple:
    """The floating dtypes the ops take on ``device``: float64 (the reference path) only on
    the CPU; the Triton kernels take fp32, bf16 and fp16."""
    return FLOAT_DTYPES if device.type == "cpu" else FLOAT_DTYPES[:3]


def _dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    return " | ".join(str(d).replace("torch.", "") for d in dtypes)


def check_tensor(
    op: str,
    name: str,
    t,
    dims: str,
    shape: Sequence[int],
    *,
    dtypes: Sequence[torch.dtype],
    device: torch.device,
    inner_contiguous: bool = True,
) -> None:
    """``t`` is a tensor of ``shape`` (named ``dims``), one of ``dtypes``, on ``device``.

    With ``inner_contiguous`` the last dimension must have stride 1 (other strides are free:
    the kernels take them as arguments, so views of wider tensors work).
    """
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} is {type(t).__name__}; expected a torch.Tensor")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected {dims} = {tuple(shape)}")
    if t.dtype not in dtypes:
        raise TypeError(f"{op}: {name} is {t.dtype}; expected {_dtype_names(dtypes)}")
    if t.device != device:
        raise ValueError(f"{op}: {name} is on {t.device}; expected {device}")
    if inner_contiguous and t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{op}: {name} has strides {t.stride()}; expected stride 1 in its last dimension")


def check_rank(op: str, name: str, t, ndim: int, dims: str) -> None:
    """``t`` is a tensor of ``ndim`` dimensions (named ``dims``): TypeError for a non-tensor,
    ValueError for another rank. For arguments whose sizes define the others' expected shapes."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} is {type(t).__name__}; expected a torch.Tensor")
    if t.dim() != ndim:
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected {dims}")


def check_optional(op: str, name: str, t: Optional[Tensor], dims: str, shape: Sequence[int], **kw) -> None:
    if t is not None:
        check_tensor(op, name, t, dims, shape, **kw)


def reads_device_values(t: Tensor) -> bool:
    """Whether eager value checks of ``t`` may run: they read device values back to the host,
    which is not allowed while a CUDA graph is captured or torch.compile traces."""
    if torch.compiler.is_compiling():
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def check_slot_ids(op: str, slot_ids, batch: int, num_slots: int, device: torch.device) -> None:
    """slot_ids: [batch] int32 on ``device``; live ids distinct and < num_slots.

    The value checks read the ids back to the host (one sync). They are skipped while a CUDA
    graph is being captured or under torch.compile tracing; there, valid ids are the caller's
    contract (the check ran on the same buffer at warm-up in any sane engine).
    """
    check_tensor(op, "slot_ids", slot_ids, "[batch]", (batch,), dtypes=(torch.int32,), device=device)
    if not reads_device_values(slot_ids):
        return
    live = slot_ids[slot_ids >= 0]
    if live.numel() == 0:
        return
    hi = int(live.max())
    if hi >= num_slots:
        raise ValueError(f"{op}: slot_ids holds {hi}; expected ids < num_slots = {num_slots} (negative ids mark padding rows)")
    if torch.unique(live).numel() != live.numel():
        raise ValueError(f"{op}: slot_ids has duplicate live ids; expected each slot at most once per step")


def check_flag(op: str, name: str, v) -> None:
    if not isinstance(v, bool):
        raise TypeError(f"{op}: {name} is {type(v).__name__}; expected bool")
