"""A small hybrid decode stack with random weights, whole or as one tensor-parallel rank.

Layer l: ``h = h + mixer_l(rmsnorm(h))``; the output is ``rmsnorm(h)`` [batch, hidden]. Every
rank draws the same whole weights from one seed and keeps its shard, so the stack over
``TPGroup()`` (one process) and over N ranks compute the same function. Caches and conv states
live in a :class:`~trtllm_replayssm.pool.ReplayCachePool` of the rank's geometry, the one
the planner sizes (``trtllm-replayssm plan --tp N``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Union

import torch

from torch import Tensor

from ..checks import SlotBatch
from ..models import GDN, KDA, MAMBA2, DeltaRuleGeometry, HybridModel, Layer, Mamba2Geometry
from ..registry import family, is_ssm, kinds
from ..pool import ReplayCachePool
from .comm import TPGroup
from .layers import ROUTES, rms_norm
from .shard import layer_shard

__all__ = ["HybridDecodeStack", "DecodeRun", "run_decode", "tiny_stack_model", "ssm_stack", "shard_errors", "NORM_EPS"]

NORM_EPS = 1e-5


def tiny_stack_model() -> HybridModel:
    """A small mixed stack for CPU runs and tests, splittable over 1, 2, 4 and 8 ranks:
    Mamba-2 with ngroups 4 (groups split up to TP 4, replicated at 8), GDN (2 value heads per
    key head), Mamba-2 with ngroups 1 (replicated from TP 2), KDA, Mamba-2 with ngroups 2."""

    def m2(ngroups):
        return Mamba2Geometry(nheads=8, head_dim=4, d_state=8, ngroups=ngroups, d_conv=4)

    geoms = [
        (MAMBA2, m2(4)),
        (GDN, DeltaRuleGeometry(8, 16, 8, 4, 4)),
        (MAMBA2, m2(1)),
        (KDA, DeltaRuleGeometry(8, 8, 4, 4, 3)),
        (MAMBA2, m2(2)),
    ]
    return HybridModel(name="tiny-hybrid", family="mixed", layers=tuple(Layer(i, k, g) for i, (k, g) in enumerate(geoms)))


def ssm_stack(model: HybridModel, num_layers: Optional[int] = None) -> HybridModel:
    """The first ``num_layers`` (default: all) SSM layers of a whole ``model``, renumbered from 0:
    the SSM part of a real model (e.g. a preset) as a stack :class:`HybridDecodeStack` runs."""
    layers = model.ssm_layers[:num_layers]
    if not layers:
        raise ValueError(f"ssm_stack: {model.name} has no SSM layer (num_layers {num_layers!r})")
    return HybridModel(
        name=f"{model.name}-ssm{len(layers)}",
        family=model.family,
        layers=tuple(Layer(i, l.kind, l.geometry) for i, l in enumerate(layers)),
    )


class HybridDecodeStack:
    """The SSM layers of ``model`` (whole geometry) as ``group.rank`` of ``group.size`` holds them.

    Args:
        model: a whole model (tp_size 1) whose layers are all SSM layers of registered families
            (:mod:`trtllm_replayssm.registry`: mamba2, gdn, kda and any you register).
        hidden_size: width of the residual stream.
        group: the TP group (default: one process).
        seed: weights are drawn from ``torch.Generator().manual_seed(seed)``, identical on
            every rank.
        dtype: activations and projection weights (A_log, D, dt_bias: fp32, fp64 for fp64).
        device: where weights and activations live.
    Raises:
        ValueError: a non-SSM layer, or an impossible split (naming the layer and dimension).
    """

    def __init__(
        self,
        model: HybridModel,
        hidden_size: int,
        *,
        group: Optional[TPGroup] = None,
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        device: Union[str, torch.device] = "cpu",
    ) -> None:
        owner = "HybridDecodeStack"
        group = group or TPGroup()
        if not isinstance(model, HybridModel):
            raise TypeError(f"{owner}: model is {type(model).__name__}; expected a HybridModel")
        other = [f"{l.index} ({l.kind})" for l in model.layers if not is_ssm(l.kind)]
        if other:
            raise ValueError(f"{owner}: layers {', '.join(other)} are not SSM layers; expected only {', '.join(kinds())}")
        if not isinstance(hidden_size, int) or hidden_size < 1:
            raise ValueError(f"{owner}: hidden_size is {hidden_size!r}; expected a positive int")
        self.rank_model = model.for_tp(group.size)  # raises on an impossible split
        self.model, self.group, self.hidden_size = model, group, hidden_size
        self.dtype, self.device = dtype, torch.device(device)
        gen = torch.Generator().manual_seed(seed)
        self.mixers, self.norms = [], []
        for layer in model.layers:
            fam = family(layer.kind)
            weights = fam.random_weights(layer.geometry, hidden_size, gen)
            self.norms.append((1 + 0.1 * torch.randn(hidden_size, generator=gen)).to(self.device, dtype))
            self.mixers.append(
                fam.mixer(weights, layer_shard(layer, group.size, group.rank), group, dtype=dtype, device=self.device)
            )
        self.final_norm = (1 + 0.1 * torch.randn(hidden_size, generator=gen)).to(self.device, dtype)

    def new_pool(
        self,
        num_slots: int,
        *,
        buffer_len: int,
        state_dtype: torch.dtype,
        record_dtype: Optional[torch.dtype] = None,
        conv_dtype: Optional[torch.dtype] = None,
        num_padding_slots: int = 1,
    ) -> ReplayCachePool:
        """A zeroed replay pool of the rank's geometry on the stack's device; records and conv
        states default to the activation dtype (the replay ops read records in it)."""
        return ReplayCachePool(
            self.rank_model,
            num_slots,
            mode="replay",
            buffer_len=buffer_len,
            state_dtype=state_dtype,
            record_dtype=record_dtype or self.dtype,
            conv_dtype=conv_dtype or self.dtype,
            num_padding_slots=num_padding_slots,
            device=self.device,
        )

    def step(self, pool: ReplayCachePool, h: Tensor, slot_ids: Tensor, route: str) -> Tensor:
        """One decode step of every layer: h [batch, hidden] -> [batch, hidden].

        ``route`` ``"replay"`` runs the ReplaySSM ops on the pool's caches; ``"conventional"``
        runs the conventional ops with each cache's checkpoint as the state. Every rank must call
        it with the same h and slot_ids (the layers all-reduce). The slot ids are checked once
        for all layers (:class:`~trtllm_replayssm.checks.SlotBatch`)."""
        if route not in ROUTES:
            raise ValueError(f"HybridDecodeStack.step: route is {route!r}; expected one of {', '.join(ROUTES)}")
        checked = SlotBatch(slot_ids, pool.num_physical_slots)
        for layer, mixer, norm in zip(self.model.layers, self.mixers, self.norms):
            h = h + mixer.step(
                rms_norm(h, norm, NORM_EPS), pool.cache(layer.index), pool.conv_state(layer.index), checked, route
            )
        return rms_norm(h, self.final_norm, NORM_EPS)


@dataclass
class DecodeRun:
    """What :func:`run_decode` returns: outputs [steps, batch, hidden] and the pool after them."""

    outputs: Tensor
    pool: ReplayCachePool
    slot_ids: List[Tensor]


def run_decode(
    stack: HybridDecodeStack,
    *,
    route: str,
    steps: int,
    batch: int,
    buffer_len: int,
    state_dtype: torch.dtype,
    num_slots: Optional[int] = None,
    seed: int = 1,
) -> DecodeRun:
    """``steps`` decode steps of ``batch`` rows from zero states, inputs drawn from ``seed``
    (identical on every rank). Row i joins at step 2i (a padding row, slot -1, before), so
    cursors are spread over the window and flushes fall on different steps; slots are random
    distinct ids of a pool of ``num_slots`` (default 2 * batch) plus one padding slot."""
    gen = torch.Generator().manual_seed(seed)
    num_slots = num_slots or 2 * batch
    pool = stack.new_pool(num_slots, buffer_len=buffer_len, state_dtype=state_dtype)
    slots = torch.randperm(num_slots, generator=gen)[:batch].to(torch.int32)
    pool.admit(slots.tolist())
    outputs, slot_ids = [], []
    for t in range(steps):
        ids = torch.where(torch.arange(batch) * 2 <= t, slots, torch.full_like(slots, -1))
        ids = ids.to(stack.device)
        h = torch.randn(batch, stack.hidden_size, generator=gen).to(stack.device, stack.dtype)
        outputs.append(stack.step(pool, h, ids, route))
        slot_ids.append(ids)
    return DecodeRun(torch.stack(outputs), pool, slot_ids)


def _rel(a: Tensor, b: Tensor) -> float:
    """max |a - b| / max |b| in float64 (max |a - b| where b is all zero)."""
    if b.numel() == 0:
        return 0.0
    a, b = a.double(), b.double()
    diff, scale = float((a - b).abs().max()), float(b.abs().max())
    return diff / scale if scale else diff


def shard_errors(run: DecodeRun, whole: DecodeRun, model: HybridModel, tp_size: int, rank: int) -> dict:
    """How far rank ``rank``'s run is from the whole run: relative errors (max |Δ| / max |whole|)
    of the outputs, of every cache field against the rank's shard of the whole cache
    (checkpoint and records), and of the conv states against their channels; ``cursors_equal``.

    ``run`` and ``whole``: the same :func:`run_decode` on ``model`` split over ``tp_size``
    ranks and whole (tp 1).
    """
    errs = {"outputs": _rel(run.outputs, whole.outputs), "caches": 0.0, "conv_states": 0.0, "cursors_equal": True}
    for layer in model.layers:
        shard = layer_shard(layer, tp_size, rank)
        got, want = run.pool.cache(layer.index), shard.shard_cache(whole.pool.cache(layer.index))
        for name, t in got.tensors().items():
            if name in ("cursor", "arrivals", "pending"):
                errs["cursors_equal"] &= bool(torch.equal(t, getattr(want, name).to(t.device)))
            else:
                errs["caches"] = max(errs["caches"], _rel(t, getattr(want, name).to(t.device)))
        conv = whole.pool.conv_state(layer.index)[:, shard.conv_rows().to(whole.pool.device)]
        errs["conv_states"] = max(errs["conv_states"], _rel(run.pool.conv_state(layer.index), conv.to(run.pool.device)))
    return errs
