"""Measured output error of each checkpoint dtype over a long decode, as data.

One cell per (preset model, checkpoint dtype), copied from the table "CPU run at 4,096 steps,
L = 16" of ``docs/benchmarks.md`` ("Accuracy") and citing its raw result file: the first SSM
layer of the preset decoded 4,096 steps at batch 1 by the project's CPU references (the
kernels' roundings, not the GPU kernels; synthetic inputs with the published initialisations'
statistics; bf16 activations and records), against the float64 recurrence. The figure is the
output error max |y - y64| / max |y64| over the last 10% of the steps (bf16 outputs: a floor
of ~3e-3), for the conventional path (state rounded to the dtype every step) and the replay
path (checkpoint rounded once per flush). Tensor parallelism splits heads and leaves each
head's recurrence as it is, so a cell holds at any TP size.

Nothing here is interpolated: another model, L or record dtype has no cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .measured_speeds import Source

__all__ = ["AccuracyCell", "ACCURACY", "STUDY_STEPS", "STUDY_L", "STUDY_RECORD_DTYPE", "accuracy"]

STUDY_STEPS = 4096
STUDY_L = 16
STUDY_RECORD_DTYPE = "bf16"

_DOC = "docs/benchmarks.md"
_SECTION = "Accuracy"
_TABLE = "CPU run at 4,096 steps, L = 16"
_RESULTS = "benchmarks/results/"
_COMMAND = (
    "python benchmarks/precision.py --device cpu --steps 4096 --models {model} --L 16 --dtypes fp32 bf16 fp16 "
    "--batch 1 --simulate bf16-sr fp8-row fp8-row-sr"
)


@dataclass(frozen=True)
class AccuracyCell:
    """One measured cell.

    Attributes:
        model: the preset's name (``trtllm_replayssm.models.PRESETS``).
        state_dtype: the checkpoint (replay) and state (conventional) dtype: fp32, bf16 or fp16.
        conventional: output error of the conventional path in that dtype.
        replay: output error of the replay path with a checkpoint in that dtype.
        fp32_conventional: output error of the conventional path with an fp32 state (the
            reference point of issue 25's "within 2x" target).
        source: where the figures are published.
    """

    model: str
    state_dtype: str
    conventional: float
    replay: float
    fp32_conventional: float
    source: Source

    @property
    def replay_vs_fp32(self) -> float:
        """The replay error over the fp32 conventional path's (1: as accurate)."""
        return self.replay / self.fp32_conventional

    def text(self) -> str:
        return (
            f"{self.state_dtype}: conventional {self.conventional:.2e}, replay {self.replay:.2e} "
            f"({self.replay_vs_fp32:.2f}x the fp32 conventional path's)"
        )


def _source(date: str, session: int, model: str) -> Source:
    return Source(
        date,
        "CPU (references)",
        _COMMAND.format(model=model),
        _DOC,
        _SECTION,
        _TABLE,
        f"{_RESULTS}{date}-cpu-precision_4096_s{session}_{model}.log",
    )


_DTYPES = ("fp32", "bf16", "fp16")
# model, date, session, then (conventional, replay) output errors per dtype of _DTYPES.
_ROWS = (
    ("nemotron-3-nano-4b", "2026-12-04", 28, (3.72e-03, 3.72e-03), (1.39e-02, 4.63e-03), (3.72e-03, 3.72e-03)),
    ("nemotron-3-super-120b", "2026-12-04", 29, (3.82e-03, 3.82e-03), (8.95e-03, 4.66e-03), (3.90e-03, 3.82e-03)),
    ("qwen3.5-4b", "2026-12-03", 28, (3.63e-03, 5.72e-03), (2.14e-02, 8.18e-03), (4.41e-03, 5.75e-03)),
    ("qwen3.5-122b-a10b", "2026-12-04", 28, (3.78e-03, 5.78e-03), (1.45e-02, 5.85e-03), (4.12e-03, 5.78e-03)),
    ("kimi-linear-48b", "2026-12-03", 28, (3.66e-03, 5.61e-03), (1.92e-02, 6.98e-03), (4.10e-03, 5.61e-03)),
)


def _cells() -> Tuple[AccuracyCell, ...]:
    out = []
    for model, date, session, *pairs in _ROWS:
        source = _source(date, session, model)
        fp32 = pairs[0][0]
        out += [AccuracyCell(model, dtype, conv, rep, fp32, source) for dtype, (conv, rep) in zip(_DTYPES, pairs)]
    return tuple(out)


ACCURACY: Tuple[AccuracyCell, ...] = _cells()


def accuracy(model: str, state_dtype: str, *, L: int, record_dtype: str) -> Optional[AccuracyCell]:
    """The measured cell of a preset ``model`` with a ``state_dtype`` checkpoint, or None where
    none was measured (another model, L or record dtype than the study's: see the module
    docstring)."""
    if (L, record_dtype) != (STUDY_L, STUDY_RECORD_DTYPE):
        return None
    return next((c for c in ACCURACY if (c.model, c.state_dtype) == (model, state_dtype)), None)
