"""Memory and traffic planner for a hybrid model on one tensor-parallel rank.

For the four modes of :mod:`trtllm_replayssm.memory` (conventional, conventional speculative,
replay, replay speculative) the planner gives exact bytes per SSM layer, per sequence and per
pool, KV bytes per token of the attention layers, the maximum number of concurrent sequences
under a GPU memory budget, the HBM traffic of the SSM layers per decode step and per sequence,
and two KV-token equivalents: the SSM bytes of a sequence, and its SSM traffic per step, each
divided by the KV bytes one token takes in all attention layers (the context length whose KV
cache the SSM layers weigh as much as, or whose attention reads move as many bytes as). For
replay mode it also sets the checkpoint dtypes side by side (:data:`CHECKPOINT_DTYPES`): bytes,
concurrency, traffic, and the measured speed and output error of each (fp8's speed against the
fp32 conventional step, since no conventional step keeps an fp8 state).

:class:`~trtllm_replayssm.pool.ReplayCachePool` allocates exactly :func:`pool_bytes`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import Dict, Optional, Tuple

import torch

from .cache import FLOAT_DTYPES, MAX_L, REPLAY_CHECKPOINT_DTYPES
from .measured_accuracy import STUDY_STEPS, AccuracyCell, accuracy, measured_settings
from .memory import MODES, LayerBytes, StepTraffic, kv_bytes_per_token, ssm_layer_bytes, ssm_layer_step_traffic
from .models import HybridModel, Layer
from .registry import is_ssm
from .route_advice import MODES as ADVICE_MODES
from .route_advice import Advice, model_advice

__all__ = [
    "PlanConfig",
    "layer_groups",
    "Budget",
    "layer_bytes",
    "sequence_ssm_bytes",
    "sequence_kv_bytes_per_token",
    "step_traffic",
    "pool_bytes",
    "kv_token_equivalent",
    "max_concurrency",
    "Plan",
    "plan",
    "format_plan",
    "plan_advice",
    "CheckpointPlan",
    "CHECKPOINT_DTYPES",
    "DTYPE_NAMES",
]

DTYPE_NAMES = {
    torch.float32: "fp32",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float64: "fp64",
    torch.float8_e4m3fn: "fp8",
}
# Checkpoint dtypes the replay kernels store, in the order ``plan`` sets them side by side (fp8:
# e4m3 codes with one fp32 scale per (head, row); a replay checkpoint only, no conventional state).
CHECKPOINT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn)


@dataclass(frozen=True)
class PlanConfig:
    """Cache settings the figures depend on.

    Attributes:
        buffer_len: L in replay mode, the history B in replay speculative mode.
        spec_tokens: T, tokens verified per speculative step (drafts + 1); B >= T.
        accepted: mean tokens accepted per verify step (replay_spec traffic); None: T.
        state_dtype, record_dtype, conv_dtype: of the state / checkpoint, the d/k/x/B records
            (dt and g records are fp32), the conv states. An fp8 (e4m3) state is a replay
            checkpoint only: the replay modes' figures take it, :func:`plan` does not (its
            conventional modes have none; it sets fp8 beside the other checkpoint dtypes).
        kv_dtype: of the attention layers' KV cache (fp8 = float8_e4m3fn).
    """

    buffer_len: int = 16
    spec_tokens: int = 4
    accepted: Optional[float] = None
    state_dtype: torch.dtype = torch.float32
    record_dtype: torch.dtype = torch.bfloat16
    conv_dtype: torch.dtype = torch.bfloat16
    kv_dtype: torch.dtype = torch.bfloat16

    def __post_init__(self) -> None:
        owner = "PlanConfig"
        for name in ("buffer_len", "spec_tokens"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{owner}: {name} is {v!r}; expected a positive int")
        if self.spec_tokens > self.buffer_len:
            raise ValueError(
                f"{owner}: spec_tokens (T) = {self.spec_tokens} > buffer_len (B) = {self.buffer_len}; expected B >= T"
            )
        if self.accepted is not None and not 1 <= self.accepted <= self.spec_tokens:
            raise ValueError(
                f"{owner}: accepted is {self.accepted!r}; expected 1 <= accepted <= spec_tokens = {self.spec_tokens}"
            )
        if self.state_dtype not in REPLAY_CHECKPOINT_DTYPES:
            raise TypeError(f"{owner}: state_dtype is {self.state_dtype}; expected fp32, bf16, fp16, fp64 or fp8")
        for name in ("record_dtype", "conv_dtype"):
            if getattr(self, name) not in FLOAT_DTYPES:
                raise TypeError(f"{owner}: {name} is {getattr(self, name)}; expected fp32, bf16, fp16 or fp64")
        if self.kv_dtype not in DTYPE_NAMES:
            raise TypeError(f"{owner}: kv_dtype is {self.kv_dtype}; expected one of {', '.join(DTYPE_NAMES.values())}")

    @property
    def replay_spec_unavailable(self) -> Optional[str]:
        """Why replay speculative mode cannot take this config (None: it can): its B + T
        records per slot exceed what the replay kernels hold. Replay mode needs only L =
        buffer_len <= MAX_L (checked where the records are sized)."""
        records = self.buffer_len + self.spec_tokens
        if records > MAX_L:
            return (
                f"history B {self.buffer_len} + window T {self.spec_tokens} = {records} records per slot, "
                f"more than the {MAX_L} the replay kernels hold (lower --buffer-len or --spec-tokens)"
            )
        return None

    def planned_modes(self) -> Tuple[str, ...]:
        """The cache modes this config is planned in: every mode of MODES, less replay_spec
        where :attr:`replay_spec_unavailable`."""
        return tuple(m for m in MODES if not (m == "replay_spec" and self.replay_spec_unavailable))

    @property
    def mean_accepted(self) -> float:
        return float(self.spec_tokens if self.accepted is None else self.accepted)

    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["accepted"] = self.mean_accepted
        return {k: DTYPE_NAMES.get(v, v) if isinstance(v, torch.dtype) else v for k, v in d.items()}


def _ssm_kwargs(config: PlanConfig) -> dict:
    return dict(
        buffer_len=config.buffer_len,
        spec_tokens=config.spec_tokens,
        state_dtype=config.state_dtype,
        record_dtype=config.record_dtype,
        conv_dtype=config.conv_dtype,
    )


def layer_bytes(layer: Layer, mode: str, config: PlanConfig) -> LayerBytes:
    """Bytes per sequence of one SSM layer."""
    return ssm_layer_bytes(layer.kind, layer.geometry, mode, **_ssm_kwargs(config))


def sequence_ssm_bytes(model: HybridModel, mode: str, config: PlanConfig) -> int:
    """Bytes one sequence holds in all SSM layers of ``model`` (rank-local geometry)."""
    return sum(layer_bytes(l, mode, config).total for l in model.ssm_layers)


def sequence_kv_bytes_per_token(model: HybridModel, kv_dtype: torch.dtype) -> int:
    """KV bytes one token takes in all attention layers of ``model``."""
    return sum(kv_bytes_per_token(l.geometry, kv_dtype) for l in model.attention_layers)


def step_traffic(model: HybridModel, mode: str, config: PlanConfig) -> StepTraffic:
    """HBM bytes per sequence per decode step of all SSM layers of ``model``."""
    total = StepTraffic(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    for l in model.ssm_layers:
        total = total + ssm_layer_step_traffic(l.kind, l.geometry, mode, accepted=config.mean_accepted, **_ssm_kwargs(config))
    return total


def pool_bytes(model: HybridModel, mode: str, config: PlanConfig, num_slots: int) -> int:
    """What a :class:`~trtllm_replayssm.pool.ReplayCachePool` of ``num_slots`` physical slots
    (padding slots included) allocates for ``model`` (rank-local) in ``mode``."""
    return num_slots * sequence_ssm_bytes(model, mode, config)


def kv_token_equivalent(nbytes: float, model: HybridModel, kv_dtype: torch.dtype) -> float:
    """``nbytes`` in tokens of KV cache (all attention layers of ``model``); inf without attention."""
    per_token = sequence_kv_bytes_per_token(model, kv_dtype)
    return nbytes / per_token if per_token else math.inf


@dataclass(frozen=True)
class Budget:
    """GPU memory one rank gives to decode caches: (gpu_mem - weights / tp) * free_fraction,
    TensorRT-LLM's free_gpu_memory_fraction applied to the memory left after the weights."""

    gpu_mem_bytes: int
    free_fraction: float = 0.9
    weights_bytes: int = 0
    tp_size: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.gpu_mem_bytes, int) or self.gpu_mem_bytes < 1:
            raise ValueError(f"Budget: gpu_mem_bytes is {self.gpu_mem_bytes!r}; expected a positive int")
        if not 0 < self.free_fraction <= 1:
            raise ValueError(f"Budget: free_fraction is {self.free_fraction!r}; expected 0 < f <= 1")
        if not isinstance(self.weights_bytes, int) or self.weights_bytes < 0:
            raise ValueError(f"Budget: weights_bytes is {self.weights_bytes!r}; expected an int >= 0")
        if self.weights_per_rank >= self.gpu_mem_bytes:
            raise ValueError(
                f"Budget: weights per rank ({self.weights_per_rank:,} B) leave nothing "
                f"of gpu_mem ({self.gpu_mem_bytes:,} B); expected fewer weights or more TP"
            )

    @property
    def weights_per_rank(self) -> int:
        return -(-self.weights_bytes // self.tp_size)

    @property
    def cache_bytes(self) -> int:
        return int((self.gpu_mem_bytes - self.weights_per_rank) * self.free_fraction)


def max_concurrency(
    model: HybridModel, mode: str, config: PlanConfig, *, cache_bytes: int, max_seq_len: int, num_padding_slots: int = 1
) -> int:
    """Most sequences of ``max_seq_len`` tokens whose SSM caches (plus ``num_padding_slots``
    padding slots, SSM caches only) and KV caches fit in ``cache_bytes`` on one rank."""
    ssm = sequence_ssm_bytes(model, mode, config)
    per_seq = ssm + max_seq_len * sequence_kv_bytes_per_token(model, config.kv_dtype)
    if per_seq == 0:
        raise ValueError(
            f"max_concurrency: {model.name} has no SSM or attention layer; expected a model with per-sequence caches"
        )
    return max(0, (cache_bytes - num_padding_slots * ssm) // per_seq)


@dataclass(frozen=True)
class LayerGroup:
    """Layers of one kind with one (rank-local) geometry."""

    kind: str
    geometry: object
    indices: Tuple[int, ...]


def layer_groups(layers) -> Tuple[LayerGroup, ...]:
    """``layers`` grouped by (kind, geometry), in order of first appearance."""
    groups: Dict[tuple, list] = {}
    for l in layers:
        groups.setdefault((l.kind, l.geometry), []).append(l.index)
    return tuple(LayerGroup(k, g, tuple(ix)) for (k, g), ix in groups.items())


@dataclass(frozen=True)
class ModePlan:
    """Per-sequence figures of one mode (one rank)."""

    ssm_bytes: int
    kv_bytes: int
    max_concurrency: int
    traffic: StepTraffic
    memory_kv_tokens: float
    traffic_kv_tokens: float

    @property
    def total_bytes(self) -> int:
        return self.ssm_bytes + self.kv_bytes


@dataclass(frozen=True)
class CheckpointPlan:
    """Replay-mode figures of one checkpoint dtype (one rank), every other setting the plan's.

    Attributes:
        dtype: the checkpoint dtype.
        ssm_bytes: SSM bytes per sequence, all layers.
        max_concurrency: the most sequences that fit (KV included, as in the modes).
        traffic: SSM HBM traffic per decode step per sequence.
        advice: the measured replay-step advice, with the plan's record dtype, at the plan's
            batch or, when None, at ``max_concurrency`` (none when no sequence fits).
        accuracy: the measured output error over a long decode of this model's first SSM layer
            (:mod:`~trtllm_replayssm.measured_accuracy`), or None where none was measured.
    """

    dtype: torch.dtype
    ssm_bytes: int
    max_concurrency: int
    traffic: StepTraffic
    advice: Tuple[Advice, ...]
    accuracy: Optional[AccuracyCell] = None


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one model on one rank (see :func:`plan`)."""

    model: HybridModel
    config: PlanConfig
    budget: Budget
    max_seq_len: int
    num_padding_slots: int
    kv_bytes_per_token: int
    modes: Dict[str, ModePlan] = field(default_factory=dict)
    batch: Optional[int] = None
    advice: Tuple[Advice, ...] = ()
    checkpoints: Tuple[CheckpointPlan, ...] = ()

    @property
    def ssm_groups(self) -> Tuple[LayerGroup, ...]:
        return layer_groups(self.model.ssm_layers)

    @property
    def attention_groups(self) -> Tuple[LayerGroup, ...]:
        return layer_groups(self.model.attention_layers)

    def to_dict(self) -> dict:
        """JSON-ready figures (bytes as ints, traffic as floats)."""
        m, c = self.model, self.config
        conv = self.modes["conventional"]
        return {
            "model": {
                "name": m.name,
                "family": m.family,
                "tp_size": m.tp_size,
                "layers": len(m.layers),
                "layer_counts": {k: m.count(k) for k in dict.fromkeys(l.kind for l in m.layers)},
                "ssm_per_attention": _finite(m.ssm_per_attention),
            },
            "config": c.to_dict(),
            "replay_spec_unavailable": c.replay_spec_unavailable,
            "budget": {
                "gpu_mem_bytes": self.budget.gpu_mem_bytes,
                "free_fraction": self.budget.free_fraction,
                "weights_bytes": self.budget.weights_bytes,
                "weights_per_rank": self.budget.weights_per_rank,
                "cache_bytes": self.budget.cache_bytes,
                "max_seq_len": self.max_seq_len,
                "num_padding_slots": self.num_padding_slots,
            },
            "ssm_layers": [
                {
                    "kind": g.kind,
                    "count": len(g.indices),
                    "indices": list(g.indices),
                    "geometry": vars(g.geometry),
                    "conv_dim": g.geometry.conv_dim,
                    "bytes_per_sequence": {
                        mode: {**vars(layer_bytes(_first(m, g), mode, c)), "total": layer_bytes(_first(m, g), mode, c).total}
                        for mode in self.modes
                    },
                }
                for g in self.ssm_groups
            ],
            "attention_layers": [
                {
                    "kind": g.kind,
                    "count": len(g.indices),
                    "indices": list(g.indices),
                    "geometry": vars(g.geometry),
                    "kv_bytes_per_token": kv_bytes_per_token(g.geometry, c.kv_dtype),
                }
                for g in self.attention_groups
            ],
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "modes": {
                mode: {
                    "ssm_bytes_per_sequence": p.ssm_bytes,
                    "kv_bytes_per_sequence": p.kv_bytes,
                    "bytes_per_sequence": p.total_bytes,
                    "max_concurrency": p.max_concurrency,
                    "concurrency_vs_conventional": _ratio(p.max_concurrency, conv.max_concurrency),
                    "traffic_per_step": {**vars(p.traffic), "total": p.traffic.total},
                    "traffic_vs_conventional": _ratio(p.traffic.total, conv.traffic.total),
                    "memory_kv_tokens": _finite(p.memory_kv_tokens),
                    "traffic_kv_tokens": _finite(p.traffic_kv_tokens),
                }
                for mode, p in self.modes.items()
            },
            "advice_batch": self.batch,
            "route_advice": [a.to_dict() for a in self.advice],
            "checkpoint_dtypes": [
                {
                    "dtype": DTYPE_NAMES[cp.dtype],
                    "ssm_bytes_per_sequence": cp.ssm_bytes,
                    "max_concurrency": cp.max_concurrency,
                    "concurrency_vs_conventional": _ratio(cp.max_concurrency, conv.max_concurrency),
                    "traffic_per_step": cp.traffic.total,
                    "traffic_vs_conventional": _ratio(cp.traffic.total, conv.traffic.total),
                    "route_advice": [a.to_dict() for a in cp.advice],
                    "output_error": _accuracy_dict(cp.accuracy),
                }
                for cp in self.checkpoints
            ],
        }


def _accuracy_dict(cell: Optional[AccuracyCell]) -> Optional[dict]:
    if cell is None:
        return None
    return {
        "steps": STUDY_STEPS,
        "L": cell.L,
        "record_dtype": cell.record_dtype,
        "conventional": cell.conventional,
        "conventional_simulated": cell.conventional_simulated,
        "replay": cell.replay,
        "replay_vs_fp32_conventional": cell.replay_vs_fp32,
        "source": vars(cell.source),
    }


def _first(model: HybridModel, group: LayerGroup) -> Layer:
    return model.layers[group.indices[0]]


def _finite(x: float) -> Optional[float]:
    """None for inf (no attention layer), so that the JSON stays standard."""
    return x if math.isfinite(x) else None


def _ratio(a: float, b: float) -> Optional[float]:
    return a / b if b else None


def plan(
    model: HybridModel,
    *,
    tp_size: int = 1,
    config: PlanConfig = PlanConfig(),
    gpu_mem_bytes: int,
    free_fraction: float = 0.9,
    weights_bytes: int = 0,
    max_seq_len: int = 8192,
    num_padding_slots: int = 1,
    batch: Optional[int] = None,
) -> Plan:
    """Plan ``model`` (a whole model, tp_size 1) on one of ``tp_size`` ranks.

    Args:
        gpu_mem_bytes: memory of one GPU.
        free_fraction: share of the memory left after the weights that caches may use.
        weights_bytes: weights of the whole model (each rank holds 1 / tp_size of them).
        max_seq_len: tokens of KV cache each sequence reserves.
        num_padding_slots: SSM slots kept for CUDA-graph padding rows (see the pool).
        batch: sequences per step the measured route advice is looked up at (see
            :func:`plan_advice`); None: each mode's max concurrency.

    Raises:
        ValueError: an impossible tensor-parallel split or bad budget, naming what is wrong.
        TypeError: an fp8 ``config.state_dtype``.
    """
    if not isinstance(max_seq_len, int) or max_seq_len < 1:
        raise ValueError(f"plan: max_seq_len is {max_seq_len!r}; expected a positive int")
    if not isinstance(num_padding_slots, int) or num_padding_slots < 0:
        raise ValueError(f"plan: num_padding_slots is {num_padding_slots!r}; expected an int >= 0")
    if batch is not None and (not isinstance(batch, int) or isinstance(batch, bool) or batch < 1):
        raise ValueError(f"plan: batch is {batch!r}; expected None or a positive int")
    if config.state_dtype == torch.float8_e4m3fn:
        raise TypeError(
            "plan: config.state_dtype is fp8; expected fp32, bf16, fp16 or fp64 (the conventional modes "
            "have no fp8 state; the plan's 'Replay checkpoint dtypes' table sets an fp8 checkpoint beside the others)"
        )
    rank = model.for_tp(tp_size)
    budget = Budget(gpu_mem_bytes=gpu_mem_bytes, free_fraction=free_fraction, weights_bytes=weights_bytes, tp_size=tp_size)
    kv_per_token = sequence_kv_bytes_per_token(rank, config.kv_dtype)
    modes = {}
    for mode in config.planned_modes():
        ssm = sequence_ssm_bytes(rank, mode, config)
        traffic = step_traffic(rank, mode, config)
        modes[mode] = ModePlan(
            ssm_bytes=ssm,
            kv_bytes=max_seq_len * kv_per_token,
            max_concurrency=max_concurrency(
                rank,
                mode,
                config,
                cache_bytes=budget.cache_bytes,
                max_seq_len=max_seq_len,
                num_padding_slots=num_padding_slots,
            ),
            traffic=traffic,
            memory_kv_tokens=kv_token_equivalent(ssm, rank, config.kv_dtype),
            traffic_kv_tokens=kv_token_equivalent(traffic.total, rank, config.kv_dtype),
        )
    checkpoints = []
    for dtype in CHECKPOINT_DTYPES:
        c = replace(config, state_dtype=dtype)
        fits = max_concurrency(
            rank, "replay", c, cache_bytes=budget.cache_bytes, max_seq_len=max_seq_len, num_padding_slots=num_padding_slots
        )
        at = batch if batch is not None else fits
        records = DTYPE_NAMES[c.record_dtype]
        advice = (
            model_advice(rank, "replay", state_dtype=DTYPE_NAMES[dtype], L=c.buffer_len, batch=at, record_dtype=records)
            if at >= 1
            else ()
        )
        measured = accuracy(model.name, DTYPE_NAMES[dtype], L=c.buffer_len, record_dtype=records)
        checkpoints.append(
            CheckpointPlan(
                dtype, sequence_ssm_bytes(rank, "replay", c), fits, step_traffic(rank, "replay", c), advice, measured
            )
        )
    return Plan(
        model=rank,
        config=config,
        budget=budget,
        max_seq_len=max_seq_len,
        num_padding_slots=num_padding_slots,
        kv_bytes_per_token=kv_per_token,
        modes=modes,
        batch=batch,
        advice=plan_advice(rank, config, modes, batch),
        checkpoints=tuple(checkpoints),
    )


def plan_advice(
    model: HybridModel, config: PlanConfig, modes: Dict[str, ModePlan], batch: Optional[int]
) -> Tuple[Advice, ...]:
    """The measured route advice (:func:`~trtllm_replayssm.route_advice.model_advice`) of
    ``model`` (rank-local) in modes replay, then replay_spec, with ``config``'s checkpoint and
    record dtypes, at ``batch`` or, when None, at that mode's max concurrency; a mode in which no
    sequence fits gets none."""
    out = []
    for mode in (m for m in ADVICE_MODES if m in modes):
        at = batch if batch is not None else modes[mode].max_concurrency
        if at >= 1:
            T = config.spec_tokens if mode == "replay_spec" else None
            out += model_advice(
                model,
                mode,
                state_dtype=DTYPE_NAMES[config.state_dtype],
                L=config.buffer_len,
                batch=at,
                T=T,
                record_dtype=DTYPE_NAMES[config.record_dtype],
            )
    return tuple(out)


# --------------------------------------------------------------------------- table


def _size(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


def _geometry_text(kind: str, g) -> str:
    if is_ssm(kind):
        dims = ", ".join(f"{k} {v}" for k, v in vars(g).items() if k != "d_conv")
        return f"{dims}; conv {g.conv_dim} x {g.d_conv - 1}"
    return ", ".join(f"{k} {v}" for k, v in vars(g).items())


_MODE_LABELS = {
    "conventional": "conventional",
    "conventional_spec": "conventional spec",
    "replay": "replay",
    "replay_spec": "replay spec",
}


def format_plan(p: Plan) -> str:
    """A readable table of :func:`plan`'s figures."""
    m, c, b = p.model, p.config, p.budget
    names = DTYPE_NAMES
    counts = ", ".join(f"{m.count(k)} {k}" for k in dict.fromkeys(l.kind for l in m.layers))
    conv = p.modes["conventional"]
    out = [
        f"trtllm-replayssm plan: {m.name} ({m.family}), TP {m.tp_size}, figures per rank",
        f"  {len(m.layers)} layers: {counts}; SSM layers per attention layer: {m.ssm_per_attention:.2f}",
    ]
    for g in p.ssm_groups + p.attention_groups:
        out.append(f"  {g.kind} x{len(g.indices)}: {_geometry_text(g.kind, g.geometry)}")
    out += [
        f"  dtypes: state {names[c.state_dtype]}, records {names[c.record_dtype]}, conv "
        f"{names[c.conv_dtype]}, KV {names[c.kv_dtype]} ({_size(p.kv_bytes_per_token)} per token, "
        f"all attention layers)",
        f"  replay L {c.buffer_len}; speculative: history B {c.buffer_len}, window T "
        f"{c.spec_tokens} (records B+T = {c.buffer_len + c.spec_tokens}), "
        f"{c.mean_accepted:g} accepted per step"
        + (f"\n  replay spec not planned: {c.replay_spec_unavailable}" if c.replay_spec_unavailable else ""),
        f"  budget: ({_size(b.gpu_mem_bytes)} - {_size(b.weights_per_rank)} weights) x "
        f"{b.free_fraction:g} = {_size(b.cache_bytes)} for caches; max_seq_len "
        f"{p.max_seq_len}; {p.num_padding_slots} padding slot(s)",
        "",
        "Bytes per sequence, one SSM layer",
        f"  {'layer':<12}{'mode':<19}{'conv':>12}{'state':>14}{'records':>12}{'cursors':>9}{'total':>14}",
    ]
    for g in p.ssm_groups:
        for mode in p.modes:
            lb = layer_bytes(_first(m, g), mode, c)
            out.append(
                f"  {g.kind + ' x' + str(len(g.indices)):<12}{_MODE_LABELS[mode]:<19}"
                f"{lb.conv:>12,}{lb.state:>14,}{lb.records:>12,}{lb.cursors:>9,}{lb.total:>14,}"
            )
    out += [
        "",
        f"Per sequence, all layers (KV at max_seq_len {p.max_seq_len})",
        f"  {'mode':<19}{'SSM':>12}{'KV':>12}{'total':>12}{'max seqs':>10}{'vs conv':>9}{'SSM = KV tokens':>17}",
    ]
    for mode, mp in p.modes.items():
        out.append(
            f"  {_MODE_LABELS[mode]:<19}{_size(mp.ssm_bytes):>12}{_size(mp.kv_bytes):>12}"
            f"{_size(mp.total_bytes):>12}{mp.max_concurrency:>10,}"
            f"{_fmt_ratio(mp.max_concurrency, conv.max_concurrency):>9}"
            f"{mp.memory_kv_tokens:>17,.0f}"
        )
    out += [
        "",
        "HBM traffic per decode step per sequence, SSM layers (speculative: per verify step)",
        f"  {'mode':<19}{'state r':>11}{'state w':>11}{'rec r':>11}{'rec w':>11}{'conv r+w':>11}"
        f"{'total':>11}{'vs conv':>9}{'= KV tokens':>13}",
    ]
    for mode, mp in p.modes.items():
        t = mp.traffic
        out.append(
            f"  {_MODE_LABELS[mode]:<19}{_size(t.state_read):>11}{_size(t.state_written):>11}"
            f"{_size(t.records_read):>11}{_size(t.records_written):>11}"
            f"{_size(t.conv_read + t.conv_written):>11}{_size(t.total):>11}"
            f"{_fmt_ratio(t.total, conv.traffic.total):>9}{mp.traffic_kv_tokens:>13,.0f}"
        )
    out.append("  (= KV tokens: the context length whose KV read moves as many bytes)")
    out += [
        "",
        f"Replay checkpoint dtypes (L {c.buffer_len}, records {names[c.record_dtype]}; vs conv: the conventional "
        f"mode above, state {names[c.state_dtype]})",
        f"  {'checkpoint':<12}{'SSM':>12}{'max seqs':>10}{'vs conv':>9}{'traffic':>12}{'vs conv':>9}  "
        "measured replay step vs the conventional step at that dtype (fp8: at fp32)",
    ]
    for cp in p.checkpoints:
        out.append(
            f"  {names[cp.dtype]:<12}{_size(cp.ssm_bytes):>12}{cp.max_concurrency:>10,}"
            f"{_fmt_ratio(cp.max_concurrency, conv.max_concurrency):>9}{_size(cp.traffic.total):>12}"
            f"{_fmt_ratio(cp.traffic.total, conv.traffic.total):>9}  {_speed_text(cp.advice)}"
        )
    out += _fp8_speed_lines(p)
    out.append(
        "  bf16, fp16 and fp8 checkpoints take stochastic rounding at flush (rounding_seed): the same bytes; "
        "fp8 keeps one fp32 scale per row beside its codes (counted above)"
    )
    out += _accuracy_lines(p)
    at = f"batch {p.batch}" if p.batch is not None else "each mode's max seqs"
    out += ["", f"Measured speed of the ReplaySSM routes at {at} (advice only: nothing is switched)"]
    out += [f"  {a.text}" for a in p.advice]
    if p.batch is None:
        out += [
            f"  {mode}: no advice, no sequence fits"
            for mode in ADVICE_MODES
            if mode in p.modes and p.modes[mode].max_concurrency < 1
        ]
    return "\n".join(out)


def _accuracy_lines(p: Plan) -> list:
    """The measured output error of each checkpoint dtype, or why there is none."""
    cells = [cp.accuracy for cp in p.checkpoints if cp.accuracy is not None]
    if not cells:
        return [
            f"  output error: not measured for {p.model.name} at L {p.config.buffer_len}, records "
            f"{DTYPE_NAMES[p.config.record_dtype]} (measured: the presets' first SSM layer, {measured_settings()})"
        ]
    cite = cells[0].source.cite()
    head = (
        f"  output error after {STUDY_STEPS:,} decode steps at L {cells[0].L}, records {cells[0].record_dtype}, "
        f"first SSM layer ({cite}):"
    )
    return [head] + [f"    {c.text()}" + ("" if c.source.cite() == cite else f" ({c.source.cite()})") for c in cells]


def _fp8_speed_lines(p: Plan) -> list:
    """The note under the checkpoint table where the fp8 replay step was measured (none where it
    was not): its figure is against the fp32 conventional step, since no conventional step keeps
    an fp8 state, and per layer family it was faster or slower than the bf16 replay step of the
    same run."""
    fp8 = next(cp for cp in p.checkpoints if cp.dtype == torch.float8_e4m3fn)
    measured = [a for a in fp8.advice if a.ratio is not None]
    if not measured:
        return []
    state = DTYPE_NAMES[p.config.state_dtype]
    line = (
        f"  fp8: no conventional step keeps an fp8 state, so its replay step is measured against the fp32 "
        f"conventional step ({measured[0].source.cite()})"
        + ("" if state == "fp32" else f", not the plan's {state} one (not measured against it)")
    )
    verdicts = [
        f"{a.family} {_compared(a.ratio, a.bf16_same_run)} the bf16 replay step of the same run "
        f"({a.ratio:.2f}x against {a.bf16_same_run:.2f}x at batch {a.measured_batch})"
        for a in measured
    ]
    return [line + "".join(f"; {v}" for v in verdicts)]


def _compared(ratio: float, other: float) -> str:
    """``faster than``, ``slower than`` or ``as fast as``: a speedup ``ratio`` beside ``other``
    (both against the same step)."""
    return "faster than" if ratio > other else "slower than" if ratio < other else "as fast as"


def _fmt_ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _speed_text(advice: Tuple[Advice, ...]) -> str:
    """Each advice's family and ratio at its measured batch, naming the conventional step's
    dtype where it is not the checkpoint's (fp8), or 'not measured'; '-' for none."""
    if not advice:
        return "-"
    return "; ".join(_ratio_text(a) for a in advice)


def _ratio_text(a: Advice) -> str:
    """``mamba2 1.78x at batch 512``, ``mamba2 3.49x the fp32 conventional step at batch 256`` (a
    ratio against another dtype's conventional step), either with ``, measured on LAYER`` where
    the layer timed is not this one, or ``mamba2 not measured``."""
    if a.ratio is None:
        return f"{a.family} not measured"
    against = "" if a.conventional_dtype == a.state_dtype else f" the {a.conventional_dtype} conventional step"
    on = "" if a.measured_layer is None else f", measured on {a.measured_layer}"
    return f"{a.family} {a.ratio:.2f}x{against} at batch {a.measured_batch}{on}"
