"""Measured speed ratios of the ReplaySSM routes against the conventional ones, as data.

Two kinds of cell, each copied from a table of ``docs/benchmarks.md`` and citing it
(:class:`Source`: date, GPU, command, document section and raw result file):

- ``step``: one replay decode step / one conventional decode step, by family, layer geometry,
  checkpoint dtype, L and batch (> 1: replay is faster). The conventional step keeps a state of
  the checkpoint's dtype, but for fp8: no conventional step keeps an fp8 state, so an fp8 cell
  is against the fp32 conventional step (:attr:`Measurement.conventional_dtype`) and carries
  the bf16 replay step of the same run against that same step, to set the two side by side;
- ``verify``: one speculative verify + commit step / T serial conventional steps, by family,
  layer geometry, checkpoint dtype, T and batch (history B = 16).

Every cell was timed with bf16 activations and bf16 records (Mamba-2's x / B records are its
activations' dtype; GDN / KDA's d and k records were bf16), as each source's method in
``docs/benchmarks.md`` says: :attr:`Measurement.record_dtype` and
:attr:`Measurement.activation_dtype` carry it, and the advice matches a setting's record dtype
(other records take other kernels: fp32 ones the Triton route, for one).

Nothing here is interpolated: a cell that no table holds is absent. Every ratio was timed on
one NVIDIA H200; :mod:`trtllm_replayssm.route_advice` looks cells up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

from .models import GDN, KDA, MAMBA2

__all__ = [
    "STEP",
    "VERIFY",
    "ROUTES",
    "Source",
    "MeasuredLayer",
    "Measurement",
    "MEASUREMENTS",
    "conventional_dtype_for",
]

STEP, VERIFY = "step", "verify"
ROUTES = (STEP, VERIFY)


def conventional_dtype_for(state_dtype: str) -> str:
    """The state dtype of the conventional step that a replay step with a ``state_dtype``
    checkpoint is measured against: ``state_dtype`` itself, except ``fp8`` (no conventional
    step keeps an fp8 state): ``fp32``."""
    return "fp32" if state_dtype == "fp8" else state_dtype


@dataclass(frozen=True)
class Source:
    """Where a measured ratio comes from.

    Attributes:
        date: day of the run (ISO).
        gpu: the GPU it ran on.
        command: the command that produced it.
        doc: repository path of the document whose table holds it.
        section: the heading of that document's section (``## <section>``).
        table: which table of the section, and what it timed.
        raw: repository path of the raw result file of the run.
    """

    date: str
    gpu: str
    command: str
    doc: str
    section: str
    table: str
    raw: str

    def cite(self) -> str:
        """One short citation: ``H200 2026-11-30, docs/benchmarks.md "GDN and KDA decode"``."""
        return f'{self.gpu.replace("NVIDIA ", "")} {self.date}, {self.doc} "{self.section}"'


@dataclass(frozen=True)
class MeasuredLayer:
    """A layer geometry a benchmark timed: (nheads, head_dim, d_state, ngroups) for Mamba-2,
    (k_heads, v_heads, head_k_dim, head_v_dim) for GDN and KDA, at tensor-parallel size 1."""

    name: str
    dims: Tuple[int, int, int, int]

    def __str__(self) -> str:
        return f"{self.name} {self.dims}"


@dataclass(frozen=True)
class Measurement:
    """One measured cell: ``ratio`` = conventional route time / ReplaySSM route time.

    Attributes:
        family: ``mamba2``, ``gdn`` or ``kda``.
        route: :data:`STEP` (vs the conventional step) or :data:`VERIFY` (vs T serial steps).
        layer: the geometry timed.
        state_dtype: checkpoint dtype, ``fp32``, ``bf16``, ``fp16`` or ``fp8``.
        conventional_dtype: the state dtype of the conventional step (verify: of the serial
            steps) that ``ratio`` is against: :func:`conventional_dtype_for` ``state_dtype``,
            so ``fp32`` for an ``fp8`` checkpoint and ``state_dtype`` otherwise.
        L: records per slot (step); the history B (verify).
        T: tokens per verify step; None for a step.
        batch: sequences per step.
        ratio: the speedup of the ReplaySSM route (< 1: slower).
        source: where the figure is published.
        record_dtype: the dtype of the records the replay route was timed with (Mamba-2's x and
            B, GDN / KDA's d and k; dt and g records are fp32 whatever this says): ``bf16`` in
            every cell so far. The advice matches it: other records take other kernels (fp32
            records: the Triton route), never timed for this table.
        activation_dtype: the dtype of the layer's inputs in the same run: ``bf16`` in every
            cell so far. Not matched by the advice: where the hooks keep bf16 records their
            activations are bf16 too (Mamba-2's records are its activations; GDN / KDA's are
            the activations' dtype or fp32), so the record dtype tells the settings apart.
        bf16_same_run: fp8 step cells only (None elsewhere): the bf16 replay step of the same
            run against the same fp32 conventional step, the figure to set ``ratio`` beside.
    """

    family: str
    route: str
    layer: MeasuredLayer
    state_dtype: str
    conventional_dtype: str
    L: int
    T: Optional[int]
    batch: int
    ratio: float
    source: Source
    record_dtype: str
    activation_dtype: str
    bf16_same_run: Optional[float] = None


_H200 = "NVIDIA H200"
_DOC = "docs/benchmarks.md"
_RESULTS = "benchmarks/results/"

SUPER = MeasuredLayer("Nemotron-3-Super Mamba-2", (128, 64, 128, 8))
QWEN35_4B = MeasuredLayer("Qwen3.5-4B GDN", (16, 32, 128, 128))
QWEN35_122B = MeasuredLayer("Qwen3.5-122B-A10B GDN", (16, 64, 128, 128))
KIMI = MeasuredLayer("Kimi Linear KDA", (32, 32, 128, 128))

_MAMBA2_DECODE_L = Source(
    "2026-12-02",
    _H200,
    "python benchmarks/mamba2_decode.py --batch 1 16 64 256 512 --L 8 32 --state bf16 f32",
    _DOC,
    "Mamba-2 decode",
    "2026-12-02 (session 19), L = 8 and 32 rows",
    _RESULTS + "2026-12-02-h200-mamba2_decode_L8_L32_s19.json",
)
_GDN_DECODE = Source(
    "2026-12-03",
    _H200,
    "python benchmarks/gated_delta_decode.py --family gdn --peers build/peers --L 16",
    _DOC,
    "GDN and KDA decode",
    "2026-12-03 (session 26, GDN's flush on tensor cores), GDN rows",
    _RESULTS + "2026-12-03-h200-gdn_decode_peers_s26.json",
)
_MAMBA2_VERIFY_BF16 = Source(
    "2026-12-04",
    _H200,
    "python benchmarks/spec_verify.py --family mamba2 --state bf16 --T 2 4 8 --batch 4 16 32 64 256",
    _DOC,
    "Speculative verify",
    "session 33, Mamba-2: the CUDA verify, bf16 checkpoint",
    _RESULTS + "2026-12-04-h200-s33-call4-spec_verify_bf16.json",
)
_GDN_VERIFY_BF16_S34 = Source(
    "2026-12-04",
    _H200,
    "python benchmarks/spec_verify.py --family gdn --state bf16 --T 2 4 8 --batch 4 16 32 64 256 --kernel cuda triton",
    _DOC,
    "Speculative verify",
    "session 34, GDN: the CUDA verify, bf16 checkpoint",
    _RESULTS + "2026-12-04-h200-s34-call2-spec_verify_gdn_bf16.json",
)
_KDA_VERIFY_BF16_S34_FIRST = Source(
    "2026-12-04",
    _H200,
    "python benchmarks/spec_verify.py --family kda --state bf16 --T 2 4 8 --batch 4 16 32 64 256 --kernel cuda triton",
    _DOC,
    "Speculative verify",
    "session 34, KDA: the CUDA verify",
    _RESULTS + "2026-12-04-h200-s34-call5-spec_verify_kda_bf16.json",
)
_KDA_VERIFY_BF16_S34 = Source(
    "2026-12-04",
    _H200,
    "python benchmarks/spec_verify.py --family kda --state bf16 --T 2 4 8 --batch 4 16 32 64 256 --kernel auto triton",
    _DOC,
    "Speculative verify",
    "session 34, KDA: the CUDA verify",
    _RESULTS + "2026-12-04-h200-s34-call8-spec_verify_kda_bf16.log",
)

_CHECKPOINT_SPEED = Source(
    "2026-12-04",
    _H200,
    "python benchmarks/checkpoint_speed.py --family mamba2 gdn kda --batch 1 16 64 256 512",
    _DOC,
    "Checkpoint dtypes: speed",
    "2026-12-04 (session 33)",
    _RESULTS + "2026-12-04-h200-checkpoint_speed_s33.json",
)
_CHECKPOINT_SPEED_S61 = Source(
    "2026-12-06",
    _H200,
    "python benchmarks/checkpoint_speed.py --family mamba2 gdn kda --state f32 bf16 fp8 --batch 1 16 64 256 512",
    _DOC,
    "Checkpoint dtypes: speed",
    "2026-12-06 (session 61, H200): every checkpoint dtype on the kernels of 637b6e1",
    _RESULTS + "2026-12-06-h200-s61-callP2-ckpt.log",
)
_CHECKPOINT_SPEED_S71 = Source(
    "2026-12-07",
    _H200,
    "python benchmarks/checkpoint_speed.py --family gdn kda --state f32 bf16 fp8 --batch 1 16 64 256 512",
    _DOC,
    "Checkpoint dtypes: speed",
    "2026-12-07 (session 71, H200): GDN and KDA on the routed table of 3873349",
    _RESULTS + "2026-12-07-h200-s71-callR37-ckpt.log",
)
_GDN_DECODE_L_S71 = Source(
    "2026-12-07",
    _H200,
    "python benchmarks/gated_delta_decode.py --family gdn --L 8 32 --state f32 bf16",
    _DOC,
    "GDN and KDA decode",
    "2026-12-07 (session 71, H200), L = 8 and 32 rows",
    _RESULTS + "2026-12-07-h200-s71-callR40-gdn_L8_L32.log",
)
_KDA_DECODE_L_S71 = Source(
    "2026-12-07",
    _H200,
    "python benchmarks/gated_delta_decode.py --family kda --L 8 32 --state f32 bf16",
    _DOC,
    "GDN and KDA decode",
    "2026-12-07 (session 71, H200), L = 8 and 32 rows",
    _RESULTS + "2026-12-07-h200-s71-callR41-kda_L8_L32.log",
)
_VERIFY_S61 = Source(
    "2026-12-06",
    _H200,
    "python benchmarks/spec_verify.py --family mamba2 gdn kda --T 2 4 8 --batch 1 4 16 64 256 512",
    _DOC,
    "Speculative verify",
    "2026-12-06 (session 61, H200), fp32 checkpoint",
    _RESULTS + "2026-12-06-h200-s61-callQ1-spec_f32.log",
)
_VERIFY_BF16_S61 = Source(
    "2026-12-06",
    _H200,
    "python benchmarks/spec_verify.py --family mamba2 gdn kda --T 2 4 8 --batch 4 16 256 --state bf16",
    _DOC,
    "Speculative verify",
    "2026-12-06 (session 61, H200), bf16 checkpoint",
    _RESULTS + "2026-12-06-h200-s61-callQ1-spec_bf16.log",
)

# The record and activation dtype of every table below: each source's method in docs/benchmarks.md
# says "bf16 activations and records" (checkpoint_speed.py: "bf16 activations, bf16 records").
_RECORDS = _ACTIVATIONS = "bf16"

_STEP_BATCHES = (1, 16, 64, 256, 512)
_VERIFY_BATCHES = (1, 4, 16, 64, 256, 512)

# (family, layer, checkpoint dtype, L, source) -> ratios at _STEP_BATCHES.
_STEP_TABLE: Dict[tuple, Tuple[float, ...]] = {
    (MAMBA2, SUPER, "fp32", 8, _MAMBA2_DECODE_L): (1.07, 1.35, 1.55, 1.68, 1.71),
    (MAMBA2, SUPER, "fp32", 16, _CHECKPOINT_SPEED_S61): (1.09, 1.41, 1.60, 1.73, 1.78),
    (MAMBA2, SUPER, "fp32", 32, _MAMBA2_DECODE_L): (1.03, 1.38, 1.60, 1.72, 1.76),
    (MAMBA2, SUPER, "bf16", 8, _MAMBA2_DECODE_L): (0.88, 1.16, 1.43, 1.55, 1.59),
    (MAMBA2, SUPER, "bf16", 16, _CHECKPOINT_SPEED_S61): (1.05, 1.21, 1.47, 1.58, 1.63),
    (MAMBA2, SUPER, "bf16", 32, _MAMBA2_DECODE_L): (0.83, 1.13, 1.40, 1.49, 1.54),
    # The route the op takes: the CUDA step.
    (GDN, QWEN35_4B, "fp32", 8, _GDN_DECODE_L_S71): (1.04, 1.28, 1.54, 1.66, 1.73),
    (GDN, QWEN35_4B, "fp32", 16, _GDN_DECODE): (1.10, 1.15, 1.38, 1.59, 1.67),
    (GDN, QWEN35_4B, "fp32", 32, _GDN_DECODE_L_S71): (1.06, 1.11, 1.52, 1.67, 1.75),
    (GDN, QWEN35_4B, "bf16", 8, _GDN_DECODE_L_S71): (1.17, 1.00, 1.28, 1.41, 1.35),
    (GDN, QWEN35_4B, "bf16", 16, _GDN_DECODE): (1.11, 0.93, 1.09, 1.38, 1.45),
    (GDN, QWEN35_4B, "bf16", 32, _GDN_DECODE_L_S71): (1.16, 1.07, 1.27, 1.41, 1.39),
    (GDN, QWEN35_122B, "fp32", 8, _GDN_DECODE_L_S71): (1.10, 1.43, 1.60, 1.71, 1.73),
    (GDN, QWEN35_122B, "fp32", 16, _CHECKPOINT_SPEED_S71): (1.11, 1.44, 1.64, 1.76, 1.78),
    (GDN, QWEN35_122B, "fp32", 32, _GDN_DECODE_L_S71): (1.09, 1.25, 1.61, 1.73, 1.76),
    (GDN, QWEN35_122B, "bf16", 8, _GDN_DECODE_L_S71): (1.06, 1.17, 1.35, 1.42, 1.42),
    (GDN, QWEN35_122B, "bf16", 16, _CHECKPOINT_SPEED_S71): (1.07, 1.25, 1.43, 1.50, 1.48),
    (GDN, QWEN35_122B, "bf16", 32, _GDN_DECODE_L_S71): (1.02, 1.19, 1.38, 1.48, 1.46),
    (KDA, KIMI, "fp32", 8, _KDA_DECODE_L_S71): (1.17, 1.26, 1.54, 1.64, 1.69),
    (KDA, KIMI, "fp32", 16, _CHECKPOINT_SPEED_S71): (1.24, 1.26, 1.54, 1.65, 1.70),
    (KDA, KIMI, "fp32", 32, _KDA_DECODE_L_S71): (0.93, 1.20, 1.42, 1.55, 1.61),
    (KDA, KIMI, "bf16", 8, _KDA_DECODE_L_S71): (1.02, 1.08, 1.25, 1.49, 1.52),
    (KDA, KIMI, "bf16", 16, _CHECKPOINT_SPEED_S71): (0.97, 1.06, 1.21, 1.45, 1.51),
    (KDA, KIMI, "bf16", 32, _KDA_DECODE_L_S71): (0.80, 0.86, 1.02, 1.07, 1.09),
    # fp16 checkpoints take the Triton kernels (the CUDA steps read bf16 and fp32 only).
    (MAMBA2, SUPER, "fp16", 16, _CHECKPOINT_SPEED): (0.64, 0.79, 0.96, 1.14, 1.17),
    (GDN, QWEN35_122B, "fp16", 16, _CHECKPOINT_SPEED): (0.72, 0.88, 1.03, 1.17, 1.19),
    (KDA, KIMI, "fp16", 16, _CHECKPOINT_SPEED): (0.39, 0.42, 0.68, 0.86, 0.92),
}

# fp8 (e4m3, a scale a row) checkpoints on the CUDA steps (rounding to nearest; a rounding seed
# takes the Triton kernels, not timed here): (family, layer, L) -> at _STEP_BATCHES, the fp8
# replay step's ratios against the fp32 conventional step (no conventional step keeps an fp8
# state), the same run's bf16 replay step's against that same step, and each batch's source.
_FP8_SOURCES = (_CHECKPOINT_SPEED_S61,) * 5
_FP8_SOURCES_S71 = (_CHECKPOINT_SPEED_S71,) * 5
_FP8_STEP_TABLE: Dict[tuple, Tuple[Tuple[float, ...], Tuple[float, ...], Tuple[Source, ...]]] = {
    (MAMBA2, SUPER, 16): ((1.34, 2.64, 3.87, 4.66, 4.89), (1.34, 2.23, 2.83, 3.07, 3.22), _FP8_SOURCES),
    (GDN, QWEN35_122B, 16): ((1.31, 2.21, 3.20, 3.86, 3.84), (1.27, 2.28, 2.73, 2.88, 2.88), _FP8_SOURCES_S71),
    (KDA, KIMI, 16): ((1.23, 2.01, 2.57, 3.08, 3.20), (1.23, 1.96, 2.29, 2.77, 2.89), _FP8_SOURCES_S71),
}

# (family, layer, T) -> ratios vs T serial steps at _VERIFY_BATCHES; fp32 checkpoint, B = 16.
_VERIFY_TABLE: Dict[tuple, Tuple[Optional[float], ...]] = {
    (MAMBA2, SUPER, 2): (0.82, 1.34, 2.23, 2.71, 3.00, 3.10),
    (MAMBA2, SUPER, 4): (1.34, 1.95, 3.57, 4.21, 4.71, 4.93),
    (MAMBA2, SUPER, 8): (1.74, 2.42, 4.13, 4.70, 5.17, 5.20),
    (GDN, QWEN35_122B, 2): (0.91, 1.34, 2.20, 2.70, 2.99, 3.02),
    (GDN, QWEN35_122B, 4): (1.30, 1.92, 3.60, 4.45, 4.90, 5.02),
    (GDN, QWEN35_122B, 8): (1.19, 1.81, 3.47, 5.30, 5.78, 5.99),
    (KDA, KIMI, 2): (0.76, 0.92, 1.45, 1.97, 2.31, 2.41),
    (KDA, KIMI, 4): (1.07, 1.32, 2.15, 3.31, 3.81, 4.01),
    (KDA, KIMI, 8): (1.80, 2.20, 3.07, 4.56, 4.86, 4.93),
}
# The same with a bf16 checkpoint, at _VERIFY_BF16_BATCHES.
_VERIFY_BF16_BATCHES = (4, 16, 32, 64, 256)
_VERIFY_BF16_TABLE: Dict[tuple, Tuple[Optional[float], ...]] = {
    (MAMBA2, SUPER, 2): (0.91, 1.48, 1.96, 2.18, 2.50),
    (MAMBA2, SUPER, 4): (1.36, 2.08, 3.00, 3.26, 3.63),
    (MAMBA2, SUPER, 8): (1.63, 2.18, 3.04, 3.24, 3.46),
    (GDN, QWEN35_122B, 2): (0.94, 1.58, 2.09, 2.30, 2.58),
    (GDN, QWEN35_122B, 4): (1.31, 2.29, 3.35, 3.69, 4.03),
    (GDN, QWEN35_122B, 8): (1.25, 1.92, 3.21, 3.77, 4.05),
    (KDA, KIMI, 2): (0.71, 1.00, 1.01, 1.24, 1.67),
    (KDA, KIMI, 4): (1.00, 1.41, 1.48, 1.90, 2.37),
    (KDA, KIMI, 8): (1.56, 1.75, 1.67, 2.05, 2.54),
}


def _bf16_columns(older: Source) -> Tuple[Source, ...]:
    """The source of each _VERIFY_BF16_BATCHES column: batches 4, 16 and 256 from session 61's
    run on today's kernels, 32 and 64 from ``older`` (not rerun since)."""
    return (_VERIFY_BF16_S61, _VERIFY_BF16_S61, older, older, _VERIFY_BF16_S61)


_VERIFY_BF16_SOURCES = {
    **{(MAMBA2, T): _bf16_columns(_MAMBA2_VERIFY_BF16) for T in (2, 4, 8)},
    **{(GDN, T): _bf16_columns(_GDN_VERIFY_BF16_S34) for T in (2, 4, 8)},
    (KDA, 2): _bf16_columns(_KDA_VERIFY_BF16_S34),
    (KDA, 4): _bf16_columns(_KDA_VERIFY_BF16_S34),
    # KDA T = 8 at batch 32 and 64: the first CUDA run's (call 5; call 8 was cut by its time limit there)
    (KDA, 8): _bf16_columns(_KDA_VERIFY_BF16_S34_FIRST),
}
# Every fp32 cell: session 61's one run.
_VERIFY_SOURCES = {(family, T): (_VERIFY_S61,) * len(_VERIFY_BATCHES) for family, _, T in _VERIFY_TABLE}


def _measurements() -> Tuple[Measurement, ...]:
    rows = [
        Measurement(
            family, STEP, layer, dtype, conventional_dtype_for(dtype), L, None, batch, ratio, source, _RECORDS, _ACTIVATIONS
        )
        for (family, layer, dtype, L, source), ratios in _STEP_TABLE.items()
        for batch, ratio in zip(_STEP_BATCHES, ratios)
    ]
    rows += [
        Measurement(
            family,
            STEP,
            layer,
            "fp8",
            conventional_dtype_for("fp8"),
            L,
            None,
            batch,
            ratio,
            source,
            _RECORDS,
            _ACTIVATIONS,
            bf16,
        )
        for (family, layer, L), (ratios, bf16_ratios, sources) in _FP8_STEP_TABLE.items()
        for batch, ratio, bf16, source in zip(_STEP_BATCHES, ratios, bf16_ratios, sources)
    ]
    verify = (
        ("fp32", _VERIFY_BATCHES, _VERIFY_TABLE, _VERIFY_SOURCES),
        ("bf16", _VERIFY_BF16_BATCHES, _VERIFY_BF16_TABLE, _VERIFY_BF16_SOURCES),
    )
    rows += [
        Measurement(
            family, VERIFY, layer, dtype, conventional_dtype_for(dtype), 16, T, batch, ratio, source, _RECORDS, _ACTIVATIONS
        )
        for dtype, batches, table, sources in verify
        for (family, layer, T), ratios in table.items()
        for batch, ratio, source in zip(batches, ratios, sources[family, T])
        if ratio is not None
    ]
    return tuple(rows)


MEASUREMENTS: Tuple[Measurement, ...] = _measurements()
