"""Argument checks shared by the caches, the ops and the hosts: one per argument kind, with
messages in dimension words (``"{op}: {name} has shape ...; expected [batch, nheads] = ..."``).

Public: the Hugging Face and TensorRT-LLM hooks and the TP layers validate with these same
functions. Every op runs all of its checks before it launches anything, so a bad call raises
``ValueError`` (shape, value, range, layout) or ``TypeError`` (type, dtype) and leaves caches
untouched. Imports only torch (the caches use it too).
"""

from __future__ import annotations

import math

from typing import Optional, Sequence, Tuple

import torch

from torch import Tensor

__all__ = [
    "FLOAT_DTYPES",
    "ROUNDED_CHECKPOINT_DTYPES",
    "float_dtypes",
    "dtype_names",
    "check_dtype",
    "check_cache_type",
    "check_tensor",
    "check_rank",
    "token_rows",
    "check_state",
    "dividing_heads",
    "check_optional",
    "check_flag",
    "check_positive_int",
    "check_last_dim_dense",
    "reads_device_values",
    "check_slot_values",
    "check_slot_ids",
    "SlotBatch",
    "slot_tensor",
    "slot_index",
    "resolve_scale",
    "is_rounding_seed",
    "check_rounding_seed",
]

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
# Checkpoint dtypes a flush rounds, so that stochastic rounding (``rounding_seed``) applies to them.
ROUNDED_CHECKPOINT_DTYPES = (torch.bfloat16, torch.float16, torch.float8_e4m3fn)


def float_dtypes(device: torch.device) -> tuple:
    """The floating dtypes the ops take on ``device``: float64 (the reference path) only on
    the CPU; the Triton kernels take fp32, bf16 and fp16."""
    return FLOAT_DTYPES if device.type == "cpu" else FLOAT_DTYPES[:3]


def dtype_names(dtypes: Sequence[torch.dtype]) -> str:
    """``"float32 | bfloat16"`` for the dtypes given."""
    return " | ".join(str(d).replace("torch.", "") for d in dtypes)


def check_dtype(op: str, name: str, dtype: torch.dtype, allowed: Sequence[torch.dtype]) -> None:
    """TypeError unless ``dtype`` is one of ``allowed``."""
    if dtype not in allowed:
        raise TypeError(f"{op}: {name} is {dtype}; expected one of {dtype_names(allowed)}")


def check_cache_type(op: str, cache, kinds: Tuple[type, ...]) -> None:
    """TypeError unless ``cache`` is an instance of one of the cache classes ``kinds``."""
    if not isinstance(cache, kinds):
        raise TypeError(f"{op}: cache is {type(cache).__name__}; expected {' | '.join(k.__name__ for k in kinds)}")


def check_last_dim_dense(op: str, name: str, t: Tensor) -> None:
    """``t`` has stride 1 in its last dimension (a size-1 last dimension counts as dense).

    The kernels take every other stride as an argument, so views into wider buffers (a host's
    cache pool, one slot of a [layers, slots, ...] buffer) work as they are."""
    if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{op}: {name} has strides {t.stride()}; expected stride 1 in its last dimension")


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
        raise TypeError(f"{op}: {name} is {t.dtype}; expected {dtype_names(dtypes)}")
    if t.device != device:
        raise ValueError(f"{op}: {name} is on {t.device}; expected {device}")
    if inner_contiguous:
        check_last_dim_dense(op, name, t)


def check_rank(op: str, name: str, t, ndim: int, dims: str) -> None:
    """``t`` is a tensor of ``ndim`` dimensions (named ``dims``): TypeError for a non-tensor,
    ValueError for another rank. For arguments whose sizes define the others' expected shapes."""
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} is {type(t).__name__}; expected a torch.Tensor")
    if t.dim() != ndim:
        raise ValueError(f"{op}: {name} has shape {tuple(t.shape)}; expected {dims}")


def token_rows(op: str, name: str, t, dims: str, sizes: Sequence[int], max_T: Optional[int]) -> Tuple[str, tuple, int]:
    """The leading dimensions of a step input: ``t`` is [batch, *dims] (one step: ``max_T``
    None) or [batch, T, *dims] (a window of 1 <= T <= ``max_T`` tokens per row), ``dims``
    naming the trailing ``sizes``. Returns (``"batch"`` or ``"batch, T"``, (batch,) or
    (batch, T), T); checks the rank and T, not the trailing sizes."""
    window = max_T is not None
    lead = "batch, T" if window else "batch"
    check_rank(op, name, t, 1 + window + len(sizes), f"[{lead}, {dims}] = ({lead}, {', '.join(map(str, sizes))})")
    rows = tuple(t.shape[: 1 + window])
    T = rows[-1] if window else 1
    if window and not 1 <= T <= max_T:
        raise ValueError(f"{op}: {name} has T = {T} window tokens; expected 1 <= T <= {max_T}")
    return lead, rows, T


def check_state(op: str, name: str, state, dims: str) -> tuple:
    """A conventional state (``dims``: ``"[num_slots, heads, rows, columns]"``): a 4-D float
    tensor with a dense last dimension; returns its shape."""
    check_rank(op, name, state, 4, dims)
    check_tensor(op, name, state, dims, tuple(state.shape), dtypes=float_dtypes(state.device), device=state.device)
    return tuple(state.shape)


def dividing_heads(op: str, name: str, t, dims: str, whole_name: str, whole: int, window: bool) -> int:
    """The head count of ``t`` [batch, (T,) heads, width] (``dims`` names ``"heads, width"``;
    T only with ``window``), which must divide ``whole`` (named ``whole_name``)."""
    rank = 3 + window
    heads = t.shape[rank - 2] if isinstance(t, Tensor) and t.dim() == rank else -1
    if heads < 1 or whole % heads:
        lead = "batch, T" if window else "batch"
        shape = tuple(t.shape) if isinstance(t, Tensor) else t
        raise ValueError(
            f"{op}: {name} has shape {shape}; expected [{lead}, {dims}] with {dims.split(',')[0]} dividing {whole_name} = {whole}"
        )
    return heads


def check_optional(op: str, name: str, t: Optional[Tensor], dims: str, shape: Sequence[int], **kw) -> None:
    """:func:`check_tensor` unless ``t`` is None."""
    if t is not None:
        check_tensor(op, name, t, dims, shape, **kw)


def check_positive_int(op: str, name: str, v) -> None:
    """``v`` is an int >= 1 (not a bool): sizes, counts, lengths."""
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{op}: {name} is {v!r}; expected a positive int")


def check_flag(op: str, name: str, v) -> None:
    if not isinstance(v, bool):
        raise TypeError(f"{op}: {name} is {type(v).__name__}; expected bool")


def reads_device_values(t: Tensor) -> bool:
    """Whether eager value checks of ``t`` may run: they read device values back to the host,
    which is not allowed while a CUDA graph is captured or torch.compile traces."""
    if torch.compiler.is_compiling():
        return False
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def check_slot_values(op: str, ids: Tensor, num_slots: int, *, padding: bool, distinct: bool) -> None:
    """The one range / distinctness check of slot ids (one host read of ``ids``).

    ``padding``: negative ids mark padding rows and are skipped; otherwise every id must be in
    [0, num_slots). ``distinct``: live ids appear at most once."""
    live = ids[ids >= 0] if padding else ids
    if live.numel() == 0:
        return
    lo, hi = int(live.min()), int(live.max())
    if padding and hi >= num_slots:
        raise ValueError(f"{op}: slot_ids holds {hi}; expected ids < num_slots = {num_slots} (negative ids mark padding rows)")
    if not padding and (lo < 0 or hi >= num_slots):
        raise ValueError(f"{op}: slot_ids span [{lo}, {hi}]; expected ids in [0, num_slots = {num_slots})")
    if distinct and torch.unique(live).numel() != live.numel():
        raise ValueError(f"{op}: slot_ids has duplicate ids; expected each slot at most once")


def check_slot_ids(op: str, slot_ids, batch: int, num_slots: int, device: torch.device) -> None:
    """The slot ids of a step: [batch] int32 on ``device``; negative ids are padding rows;
    live ids distinct and < num_slots.

    The value checks read the ids back to the host (one sync). They are skipped while a CUDA
    graph is being captured or under torch.compile tracing; there, valid ids are the caller's
    contract (the check ran on the same buffer at warm-up in any sane engine). A
    :class:`SlotBatch` was checked once for many layers: only its no-sync checks run here.
    """
    if isinstance(slot_ids, SlotBatch):
        slot_ids.check(op, batch, num_slots, device)
        return
    check_tensor(op, "slot_ids", slot_ids, "[batch]", (batch,), dtypes=(torch.int32,), device=device)
    if reads_device_values(slot_ids):
        check_slot_values(op, slot_ids, num_slots, padding=True, distinct=True)


class SlotBatch:
    """Slot ids checked once, for every layer of a step: the eager hot path's validation.

    An eager op checks its slot ids' values with a host read (a sync) on every call. A host that
    steps many layers with the same ids builds one SlotBatch per step (or per batch layout, as
    long as the ids tensor is not changed) and passes it as ``slot_ids`` to each layer's op;
    the op then checks only what costs no sync (shape, dtype, device, that the ids were checked
    against at most its cache's slots, and that the tensor was not changed in place since), so
    no unchecked id reaches a kernel.

    Args:
        slot_ids: [batch] int32; negative ids are padding rows; live ids distinct.
        num_slots: the slots the ids must index (those of the smallest cache they go to).
    Raises:
        TypeError, ValueError: as the ops' own slot-id check (one host read of the ids; skipped
        under CUDA-graph capture and torch.compile, where valid ids are the caller's contract).

    In-place changes are seen through the tensor's version counter, which counts writes by
    PyTorch ops (on the tensor or any view of it). A buffer that other kernels rewrite behind
    PyTorch's back (an engine's own CUDA kernels) needs a new SlotBatch after each rewrite.
    """

    def __init__(self, slot_ids: Tensor, num_slots: int) -> None:
        op = "SlotBatch"
        check_rank(op, "slot_ids", slot_ids, 1, "[batch]")
        if not isinstance(num_slots, int) or isinstance(num_slots, bool) or num_slots < 1:
            raise ValueError(f"{op}: num_slots is {num_slots!r}; expected a positive int")
        check_slot_ids(op, slot_ids, slot_ids.shape[0], num_slots, slot_ids.device)
        self.ids, self.num_slots, self.version = slot_ids, num_slots, slot_ids._version

    def check(self, op: str, batch: int, num_slots: int, device: torch.device) -> None:
        """The checks an op runs on a SlotBatch: no host read. Under torch.compile tracing the
        version counter cannot be read: there, as for tensor ids, valid ids are the caller's
        contract."""
        check_tensor(op, "slot_ids", self.ids, "[batch]", (batch,), dtypes=(torch.int32,), device=device)
        if self.num_slots > num_slots:
            raise ValueError(
                f"{op}: slot_ids were checked against num_slots = {self.num_slots}; expected at most {num_slots} (this op's)"
            )
        if not torch.compiler.is_compiling() and self.ids._version != self.version:
            raise ValueError(f"{op}: slot_ids changed in place after SlotBatch checked them; expected a new SlotBatch")


def slot_tensor(slot_ids) -> Tensor:
    """The ids tensor of ``slot_ids`` (a tensor or a :class:`SlotBatch`), for the kernels."""
    return slot_ids.ids if isinstance(slot_ids, SlotBatch) else slot_ids


def slot_index(op: str, slot_ids, num_slots: int, device: torch.device, *, distinct: bool) -> Tensor:
    """A host-side slot list as an int64 index on ``device``: a 1-D int32 | int64 tensor,
    every id in [0, num_slots) (no padding rows), distinct when ``distinct`` (writes) or
    repeats allowed (reads). Eager only: it reads the ids."""
    if not isinstance(slot_ids, Tensor):
        raise TypeError(f"{op}: slot_ids is {type(slot_ids).__name__}; expected a torch.Tensor")
    if slot_ids.dim() != 1 or slot_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"{op}: slot_ids has shape {tuple(slot_ids.shape)} and dtype {slot_ids.dtype}; expected a 1-D int32 | int64 tensor"
        )
    index = slot_ids.to(device=device, dtype=torch.int64)
    check_slot_values(op, index, num_slots, padding=False, distinct=distinct)
    return index


def resolve_scale(op: str, scale, head_k_dim: int) -> float:
    """The query scale of a delta-rule op: None is head_k_dim ** -0.5; else a positive finite number."""
    if scale is None:
        return head_k_dim**-0.5
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale <= 0:
        raise TypeError(f"{op}: scale is {scale!r}; expected None (head_k_dim ** -0.5) or a positive finite float")
    return float(scale)


def is_rounding_seed(value) -> bool:
    """Whether ``value`` is a seed of stochastic rounding at flush: an int (not a bool) in [0, 2^31)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def check_rounding_seed(op: str, rounding_seed, state_dtype: torch.dtype) -> None:
    """ValueError unless ``rounding_seed`` is None or an int in [0, 2^31) with a bf16, fp16 or
    fp8 checkpoint (``state_dtype``): the replay ops' stochastic rounding at flush."""
    if rounding_seed is None:
        return
    if not is_rounding_seed(rounding_seed):
        raise ValueError(f"{op}: rounding_seed is {rounding_seed!r}; expected None or an int in [0, 2^31)")
    if state_dtype not in ROUNDED_CHECKPOINT_DTYPES:
        raise ValueError(
            f"{op}: rounding_seed given with a {state_dtype} checkpoint; stochastic rounding takes a bf16, fp16 or fp8 one"
        )
