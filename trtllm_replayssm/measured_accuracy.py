"""Measured output error of each checkpoint dtype over a long decode, as data.

One cell per (preset model, checkpoint dtype, L), copied from the tables "CPU run at 4,096
steps, L = 16" and "CPU run at 4,096 steps, L = 8 / 32 / 64" of ``docs/benchmarks.md``
("Accuracy") and citing its raw result file: the first SSM
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

__all__ = ["AccuracyCell", "ACCURACY", "STUDY_STEPS", "STUDY_LS", "STUDY_RECORD_DTYPE", "accuracy"]

STUDY_STEPS = 4096
STUDY_LS = (8, 16, 32, 64)
STUDY_RECORD_DTYPE = "bf16"

_DOC = "docs/benchmarks.md"
_SECTION = "Accuracy"
_RESULTS = "benchmarks/results/"
_COMMAND = (
    "python benchmarks/precision.py --device cpu --steps 4096 --models {model} --L {L} --dtypes fp32 bf16 fp16 "
    "--batch 1 --simulate bf16-sr fp8-row fp8-row-sr"
)


@dataclass(frozen=True)
class AccuracyCell:
    """One measured cell.

    Attributes:
        model: the preset's name (``trtllm_replayssm.models.PRESETS``).
        state_dtype: the checkpoint (replay) and state (conventional) dtype: fp32, bf16 or fp16.
        L: records per slot of the replay path (the conventional path has none).
        conventional: output error of the conventional path in that dtype.
        replay: output error of the replay path with a checkpoint in that dtype.
        fp32_conventional: output error of the conventional path with an fp32 state (the
            reference point of issue 25's "within 2x" target).
        source: where the figures are published.
    """

    model: str
    state_dtype: str
    L: int
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


def _source(date: str, session: int, model: str, Ls: Tuple[int, ...]) -> Source:
    """The run of ``model`` at the replay lengths ``Ls``: (16,) or (8, 32, 64)."""
    table = "CPU run at 4,096 steps, L = " + " / ".join(map(str, Ls))
    tag = "" if Ls == (16,) else "_L" + "_".join(map(str, Ls))
    return Source(
        date,
        "CPU (references)",
        _COMMAND.format(model=model, L=" ".join(map(str, Ls))),
        _DOC,
        _SECTION,
        table,
        f"{_RESULTS}{date}-cpu-precision_4096{tag}_s{session}_{model}.log",
    )


_DTYPES = ("fp32", "bf16", "fp16")
# One run a model and set of L: model, date, session, the conventional output errors per dtype of
# _DTYPES, then per L the replay output errors per dtype.
_RUNS = (
    ("nemotron-3-nano-4b", "2026-12-04", 28, (3.72e-03, 1.39e-02, 3.72e-03), {16: (3.72e-03, 4.63e-03, 3.72e-03)}),
    ("nemotron-3-super-120b", "2026-12-04", 29, (3.82e-03, 8.95e-03, 3.90e-03), {16: (3.82e-03, 4.66e-03, 3.82e-03)}),
    ("qwen3.5-4b", "2026-12-03", 28, (3.63e-03, 2.14e-02, 4.41e-03), {16: (5.72e-03, 8.18e-03, 5.75e-03)}),
    ("qwen3.5-122b-a10b", "2026-12-04", 28, (3.78e-03, 1.45e-02, 4.12e-03), {16: (5.78e-03, 5.85e-03, 5.78e-03)}),
    ("kimi-linear-48b", "2026-12-03", 28, (3.66e-03, 1.92e-02, 4.10e-03), {16: (5.61e-03, 6.98e-03, 5.61e-03)}),
    ("nemotron-3-nano-4b", "2026-12-04", 30, (3.72e-03, 1.39e-02, 3.72e-03),
     {8: (3.72e-03, 5.23e-03, 3.72e-03), 32: (3.72e-03, 4.26e-03, 3.72e-03), 64: (3.72e-03, 4.26e-03, 3.72e-03)}),
    ("qwen3.5-4b", "2026-12-04", 30, (3.63e-03, 2.14e-02, 4.41e-03),
     {8: (5.65e-03, 9.42e-03, 5.65e-03), 32: (5.72e-03, 6.28e-03, 5.65e-03), 64: (5.72e-03, 6.56e-03, 5.72e-03)}),
    ("nemotron-3-super-120b", "2026-12-04", 31, (3.82e-03, 8.95e-03, 3.90e-03),
     {8: (3.82e-03, 5.31e-03, 3.82e-03), 32: (3.82e-03, 4.37e-03, 3.82e-03), 64: (3.82e-03, 4.37e-03, 3.82e-03)}),
    ("qwen3.5-122b-a10b", "2026-12-04", 31, (3.78e-03, 1.45e-02, 4.12e-03),
     {8: (5.47e-03, 8.45e-03, 5.47e-03), 32: (5.47e-03, 5.82e-03, 5.78e-03), 64: (5.78e-03, 5.47e-03, 5.47e-03)}),
    ("kimi-linear-48b", "2026-12-04", 31, (3.66e-03, 1.92e-02, 4.10e-03),
     {8: (6.98e-03, 7.44e-03, 5.61e-03), 32: (5.61e-03, 7.65e-03, 5.61e-03), 64: (5.61e-03, 6.98e-03, 5.61e-03)}),
)  # fmt: skip


def _cells() -> Tuple[AccuracyCell, ...]:
    out = []
    for model, date, session, conventional, replays in _RUNS:
        source = _source(date, session, model, tuple(replays))
        for L, replay in replays.items():
            out += [
                AccuracyCell(model, dtype, L, conv, rep, conventional[0], source)
                for dtype, conv, rep in zip(_DTYPES, conventional, replay)
            ]
    return tuple(out)


ACCURACY: Tuple[AccuracyCell, ...] = _cells()


def accuracy(model: str, state_dtype: str, *, L: int, record_dtype: str) -> Optional[AccuracyCell]:
    """The measured cell of a preset ``model`` with a ``state_dtype`` checkpoint, or None where
    none was measured (another model, L or record dtype than the study's: see the module
    docstring)."""
    if record_dtype != STUDY_RECORD_DTYPE:
        return None
    return next((c for c in ACCURACY if (c.model, c.state_dtype, c.L) == (model, state_dtype, L)), None)
