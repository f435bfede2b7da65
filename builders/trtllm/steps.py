"""One decode step of a hooked layer on TensorRT-LLM's buffers: pure functions, no TensorRT-LLM.

TensorRT-LLM's SSM states (our checkpoints) are slot views into its cache pool whose slot stride
is not the state size. The core caches describe such views (each field needs only a dense last
dimension), so :func:`replay_cache` wraps the engine's states and the layer's records in the
core cache class, and the steps call the public ops on it: the same validation and the same
kernels as every other host. Everything is checked before anything is written.

Padding rows: TensorRT-LLM pads CUDA-graph batches with dummy requests that share one slot.
:func:`replay_slot_ids` turns their rows into slot id -1, which the ops skip entirely, so padding
rows neither collide on a slot nor write any record, counter or checkpoint.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from torch import Tensor

from trtllm_replayssm.checks import ROUNDED_CHECKPOINT_DTYPES, check_rank, check_rounding_seed, check_slot_values
from trtllm_replayssm.models import GDN, KDA, MAMBA2
from trtllm_replayssm.ops import gdn_replay_step, kda_replay_step, mamba2_replay_step, replay_cache_state
from trtllm_replayssm.pool import ReplayCache
from trtllm_replayssm.reference.mamba2 import compute_dtype
from trtllm_replayssm.reference.rounding import FP8, store_checkpoint_rows
from trtllm_replayssm.registry import family

from .api import PINNED_RELEASE
from .store import LayerRecords

__all__ = [
    "padding_rows",
    "PaddingRowBuffer",
    "replay_slot_ids",
    "check_engine_state_dtype",
    "replay_cache",
    "mamba2_step",
    "gated_delta_step",
    "flush_delta_rule_records",
    "causal_conv_step",
]


def padding_rows(
    request_ids: Optional[Sequence[int]], batch_size: int, *, dummy_request_id: int, max_draft_len: int = 0
) -> List[bool]:
    """[batch_size] bool: which rows are CUDA-graph padding (request ids in
    ``[dummy_request_id - max_draft_len, dummy_request_id]``, TensorRT-LLM's sentinel range).

    ``request_ids`` None (no ids known) marks no row.
    """
    if request_ids is None:
        return [False] * batch_size
    if len(request_ids) < batch_size:
        raise ValueError(
            f"padding_rows: {len(request_ids)} request ids for a batch of {batch_size}; expected at least one per row"
        )
    lo = dummy_request_id - max_draft_len
    return [lo <= int(r) <= dummy_request_id for r in request_ids[:batch_size]]


class PaddingRowBuffer:
    """A graph-stable device buffer of padding-row flags, refilled before each forward.

    CUDA graphs capture the buffer's address; :meth:`update` rewrites its contents with one
    synchronous host-to-device copy from a pageable host tensor (no staging buffer that a later
    update could overwrite while a copy is in flight).

    Args:
        max_batch_size: rows the buffer holds.
        device: where the flags live.
    """

    def __init__(self, max_batch_size: int, device) -> None:
        if not isinstance(max_batch_size, int) or isinstance(max_batch_size, bool) or max_batch_size < 1:
            raise ValueError(f"PaddingRowBuffer: max_batch_size is {max_batch_size!r}; expected a positive int")
        self.flags = torch.zeros(max_batch_size, dtype=torch.bool, device=device)

    def update(self, rows: Sequence[bool]) -> Tensor:
        """flags[:len(rows)] := rows, later rows False; returns the whole device buffer."""
        n = len(rows)
        if n > self.flags.shape[0]:
            raise ValueError(f"PaddingRowBuffer.update: {n} rows; the buffer holds {self.flags.shape[0]} (max_batch_size)")
        host = torch.zeros(self.flags.shape[0], dtype=torch.bool)
        host[:n] = torch.tensor(list(rows), dtype=torch.bool)
        self.flags.copy_(host)
        return self.flags


def replay_slot_ids(state_indices: Tensor, padding: Tensor) -> Tensor:
    """[batch] int32 slot ids for the replay ops: ``state_indices`` with padding rows set to -1.

    Both arguments are device tensors (``padding`` bool), so the selection is captured in a CUDA
    graph and follows the buffers' contents at replay.
    """
    if state_indices.shape != padding.shape:
        raise ValueError(
            f"replay_slot_ids: state_indices has shape {tuple(state_indices.shape)} "
            f"and padding {tuple(padding.shape)}; expected equal [batch]"
        )
    return torch.where(padding, -1, state_indices.to(torch.int32))


def check_engine_state_dtype(owner: str, state_dtype: torch.dtype, rounding_seed: Optional[int]) -> None:
    """Whether the engine's SSM state (``state_dtype``) can be ReplaySSM's checkpoint with
    ``rounding_seed``: ValueError, saying why and what to set, for an fp8 state (ReplaySSM's fp8
    checkpoint needs a row scale beside each state row, which TensorRT-LLM neither allocates nor
    writes at prefill) and for a seed with an fp32 / fp64 state (a flush stores it unrounded).

    TensorRT-LLM's ``kv_cache_config.mamba_ssm_cache_dtype`` takes auto, float16, bfloat16 and
    float32, all checkpoint dtypes of the replay kernels; float64 (the CPU reference, which the
    tests' stand-ins use) is not refused here."""
    if state_dtype == FP8:
        raise ValueError(
            f"{owner}: TensorRT-LLM's SSM state (the ReplaySSM checkpoint) is {FP8}, but an fp8 ReplaySSM checkpoint needs one fp32 scale per (head, head_dim) row beside the codes, which TensorRT-LLM's SSM state pool does not hold and its prefill does not write, so an fp8 checkpoint cannot engage under TensorRT-LLM ({PINNED_RELEASE} takes kv_cache_config.mamba_ssm_cache_dtype auto, float16, bfloat16 or float32). Set mamba_ssm_cache_dtype='bfloat16' and enable_replayssm(rounding_seed=...) (stochastic rounding at each flush; TRTLLM_REPLAYSSM_ROUNDING_SEED), or disable ReplaySSM"
        )
    if rounding_seed is not None and state_dtype not in ROUNDED_CHECKPOINT_DTYPES:
        raise ValueError(
            f"{owner}: rounding_seed is {rounding_seed}, but TensorRT-LLM's SSM state (the ReplaySSM checkpoint, kv_cache_config.mamba_ssm_cache_dtype) is {state_dtype}, which a flush stores unrounded; set mamba_ssm_cache_dtype='bfloat16' or 'float16' to round it stochastically, or leave rounding_seed unset (TRTLLM_REPLAYSSM_ROUNDING_SEED)"
        )


def replay_cache(op: str, layer: LayerRecords, checkpoint: Tensor) -> ReplayCache:
    """The core replay cache of ``layer`` over the engine's SSM states ``checkpoint``.

    Args:
        op: the calling step's name, for error messages.
        layer: the layer's records and counters (views into the engine's pool).
        checkpoint: [num_slots, *state_dims] the engine's SSM states of the layer (any slot
            stride, last dimension dense; Mamba-2 [nheads, head_dim, d_state], GDN/KDA
            [v_heads, head_v_dim, head_k_dim]).
    Returns:
        A :class:`~trtllm_replayssm.cache.Mamba2ReplayCache`, ``GDNReplayCache`` or
        ``KDAReplayCache`` whose fields are these views (nothing is copied). The layer keeps
        the last one: a later call with a view of the same memory and layout (pointer,
        strides, dtype, device) gets it back without the constructor's checks again.
    Raises:
        TypeError, ValueError: ``checkpoint`` of the wrong type, shape, dtype, device or inner
        layout; the cache constructor's message, prefixed with ``op``. An fp8 checkpoint:
        :func:`check_engine_state_dtype`'s refusal.
    """
    if not isinstance(checkpoint, Tensor):
        raise TypeError(f"{op}: checkpoint is {type(checkpoint).__name__}; expected a torch.Tensor")
    check_engine_state_dtype(op, checkpoint.dtype, None)
    want = (layer.num_slots,) + layer.geometry.state_dims
    if tuple(checkpoint.shape) != want:
        raise ValueError(
            f"{op}: checkpoint has shape {tuple(checkpoint.shape)}; expected "
            f"[num_slots, ...] = {want} (the engine's SSM states)"
        )
    key = (checkpoint.data_ptr(), checkpoint.stride(), checkpoint.dtype, checkpoint.device)
    if layer.views.get("key") != key:
        try:
            cache = family(layer.kind).cache(
                checkpoint=checkpoint, **layer.records, cursor=layer.cursor, arrivals=layer.arrivals, pending=layer.pending
            )
        except (TypeError, ValueError) as e:
            raise type(e)(f"{op}: {e}") from None
        layer.views.update(key=key, cache=cache)
    return layer.views["cache"]


def mamba2_step(
    layer: LayerRecords,
    checkpoint: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    D: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One Mamba-2 ReplaySSM decode step on an engine's SSM states: the public
    :func:`~trtllm_replayssm.ops.mamba2_replay_step` on :func:`replay_cache`.

    Args:
        layer: the layer's records (kind ``mamba2``); counters mutated as in
            :func:`trtllm_replayssm.ops.mamba2_replay_step`.
        checkpoint: [num_slots, nheads, head_dim, d_state] the engine's SSM states (any slot
            stride, last dimension dense); written only at flushes.
        x, dt, A, B, C, D, dt_bias, dt_softplus, out, rounding_seed: as for
            ``mamba2_replay_step``; x, B, C in the records' dtype; ``rounding_seed`` (stochastic
            rounding at flush) needs a bf16 or fp16 checkpoint.
        slot_ids: [batch] int32, -1 for padding rows (:func:`replay_slot_ids`).
    Returns:
        y [batch, nheads, head_dim] (``out`` when given).
    Raises:
        ValueError, TypeError: before anything is written.
    """
    op = "trtllm mamba2_step"
    if layer.kind != MAMBA2:
        raise ValueError(f"{op}: layer holds {layer.kind} records; expected mamba2")
    cache = replay_cache(op, layer, checkpoint)
    return mamba2_replay_step(
        cache,
        x,
        dt,
        A,
        B,
        C,
        slot_ids=slot_ids,
        D=D,
        dt_bias=dt_bias,
        dt_softplus=dt_softplus,
        out=out,
        rounding_seed=rounding_seed,
    )


def gated_delta_step(
    layer: LayerRecords,
    checkpoint: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> Tensor:
    """One GDN or KDA ReplaySSM decode step on an engine's SSM states: the public
    :func:`~trtllm_replayssm.ops.gdn_replay_step` / ``kda_replay_step`` on :func:`replay_cache`.

    Args:
        layer: the layer's records (kind ``gdn`` or ``kda``).
        checkpoint: [num_slots, v_heads, head_v_dim, head_k_dim] the engine's recurrent states
            (any slot stride, last dimension dense); written only at flushes.
        q, k, v, g, beta, scale, use_qk_l2norm, out, rounding_seed: as for ``gdn_replay_step``
            / ``kda_replay_step`` (g [batch, v_heads] for GDN, [batch, v_heads, head_k_dim] for
            KDA; ``rounding_seed`` needs a bf16 or fp16 checkpoint).
        slot_ids: [batch] int32, -1 for padding rows.
    Returns:
        o [batch, v_heads, head_v_dim] (``out`` when given).
    Raises:
        ValueError, TypeError: before anything is written.
    """
    op = f"trtllm {layer.kind}_step"
    if layer.kind not in (GDN, KDA):
        raise ValueError(f"{op}: layer holds {layer.kind} records; expected gdn or kda")
    cache = replay_cache(op, layer, checkpoint)
    step = gdn_replay_step if layer.kind == GDN else kda_replay_step
    return step(
        cache,
        q,
        k,
        v,
        g,
        beta,
        slot_ids=slot_ids,
        scale=scale,
        use_qk_l2norm=use_qk_l2norm,
        out=out,
        rounding_seed=rounding_seed,
    )


def flush_delta_rule_records(
    layer: LayerRecords, checkpoint: Tensor, slot_ids: Tensor, *, rounding_seed: Optional[int] = None
) -> None:
    """Fold the records of the live rows' slots into their checkpoints; cursors := 0.

    For steps the engine runs its own way on the full state (a GDN decode row inside a batch
    with prefills): afterwards each slot's checkpoint is its current state
    (:func:`~trtllm_replayssm.ops.replay_cache_state`), rounded to the checkpoint dtype once: to
    nearest, or with ``rounding_seed`` (a bf16 or fp16 checkpoint) stochastically, as the replay
    step's flush, with draws seeded by the seed and the log-decays of each slot's last held
    token (so the same seed and inputs give the same bits). Rows with cursor 0 keep their
    checkpoint bit for bit; padding rows (slot id < 0) are skipped; a slot may repeat. Eager
    only (it gathers the live rows on the host).
    """
    op = "trtllm flush_delta_rule_records"
    if layer.kind not in (GDN, KDA):
        raise ValueError(f"{op}: layer holds {layer.kind} records; expected gdn or kda")
    cache = replay_cache(op, layer, checkpoint)
    check_rounding_seed(op, rounding_seed, checkpoint.dtype)
    check_rank(op, "slot_ids", slot_ids, 1, "[batch]")
    check_slot_values(op, slot_ids, layer.num_slots, padding=True, distinct=False)
    slots = torch.unique(slot_ids[slot_ids >= 0]).long()
    if slots.numel() == 0:
        return
    state = replay_cache_state(cache, slots)
    if rounding_seed is None:
        checkpoint[slots] = state.to(checkpoint.dtype)
    else:
        last = (layer.cursor[slots].long() - 1).clamp(min=0)
        g = layer.records["g_records"]
        salt = g[slots[:, None], torch.arange(g.shape[1], device=g.device)[None, :], last[:, None]]
        store_checkpoint_rows(checkpoint, None, slots, state, rounding_seed, salt)
    layer.cursor[slots] = 0


def causal_conv_step(conv_rows: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """One token of a depthwise causal convolution with SiLU (Kimi Linear's short convs).

    Args:
        conv_rows: [batch, dim, width - 1] the last width - 1 inputs, oldest first.
        x: [batch, dim] the new input.
        weight: [dim, width]; column width - 1 multiplies the newest input.
        bias: [dim] or None.
    Returns:
        (y [batch, dim] in x's dtype, computed in fp32 (fp64 for fp64 input);
         new rows [batch, dim, width - 1] in conv_rows' dtype).
    """
    op = "causal_conv_step"
    if x.dim() != 2 or conv_rows.dim() != 3 or conv_rows.shape[:2] != x.shape:
        raise ValueError(
            f"{op}: conv_rows {tuple(conv_rows.shape)} and x {tuple(x.shape)}; "
            f"expected [batch, dim, width - 1] and [batch, dim]"
        )
    width = conv_rows.shape[2] + 1
    if tuple(weight.shape) != (x.shape[1], width):
        raise ValueError(f"{op}: weight has shape {tuple(weight.shape)}; expected [dim, width] = {(x.shape[1], width)}")
    cd = compute_dtype(x, conv_rows, weight)
    window = torch.cat([conv_rows.to(cd), x.to(cd)[:, :, None]], dim=2)
    y = (window * weight.to(cd)).sum(-1)
    if bias is not None:
        y = y + bias.to(cd)
    return F.silu(y).to(x.dtype), window[:, :, 1:].to(conv_rows.dtype)
