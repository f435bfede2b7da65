"""Measured output error of each checkpoint dtype over a long decode, as data.

One cell per (preset model, checkpoint dtype, L, record dtype), copied from the tables "GPU run
at 4,096 steps", "GPU run at 4,096 steps, fp32 records" (session 32, 2026-12-04: fp32, bf16 and
fp16) and "GPU run at 4,096 steps, every checkpoint dtype" (sessions 37 and 38, 2026-12-05: fp8)
of ``docs/benchmarks.md`` ("Accuracy") and citing its raw result file: the first SSM layer of
the preset decoded 4,096 steps at batch 1 by the project's kernels on an H200 (the ops' routes;
synthetic inputs with the published initialisations' statistics; bf16 activations), against
the float64 recurrence. The figure is the output error max |y - y64| / max |y64| over the last
10% of the steps (bf16 outputs: a floor of ~3e-3), for the conventional path (state rounded to
the dtype every step) and the replay path (checkpoint rounded once per flush). No kernel keeps
an fp8 state, so the conventional fp8 path is a simulation
(:attr:`AccuracyCell.conventional_simulated`); the fp8 replay path is the kernels' (e4m3 codes,
one fp32 scale a row). Records are bf16
(Mamba-2's are activations); GDN and KDA were also run with fp32 d and k records at L = 16 and
64, fp32 and bf16 checkpoints. Tensor parallelism splits heads and leaves each head's recurrence
as it is, so a cell holds at any TP size. Stochastic rounding at flush (the runs' -sr rows) is
not in these cells.

Nothing here is interpolated: another model, L, dtype or record dtype has no cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

from .measured_speeds import Source

__all__ = [
    "AccuracyCell",
    "ACCURACY",
    "STUDY_STEPS",
    "STUDY_LS",
    "SIMULATED_CONVENTIONAL",
    "accuracy",
    "measured_settings",
]

STUDY_STEPS = 4096
STUDY_LS = (8, 16, 32, 64)

_DOC = "docs/benchmarks.md"
_SECTION = "Accuracy"
_RESULTS = "benchmarks/results/"
_DATE = "2026-12-04"
_GPU = "NVIDIA H200"
# Checkpoint dtypes that no conventional kernel keeps as a state: the conventional path's figure
# of these is a simulation (the run's "(sim)" rows).
SIMULATED_CONVENTIONAL = ("fp8",)


@dataclass(frozen=True)
class AccuracyCell:
    """One measured cell.

    Attributes:
        model: the preset's name (``trtllm_replayssm.models.PRESETS``).
        state_dtype: the checkpoint (replay) and state (conventional) dtype: fp32, bf16, fp16 or
            fp8 (e4m3 codes with one fp32 scale a row).
        L: records per slot of the replay path (the conventional path has none).
        record_dtype: the replay path's GDN/KDA d and k records (Mamba-2: bf16, its activations).
        conventional: output error of the conventional path in that dtype (simulated for fp8,
            see :attr:`conventional_simulated`).
        replay: output error of the replay path with a checkpoint in that dtype.
        fp32_conventional: output error of the conventional path with an fp32 state (the
            reference point of issue 25's "within 2x" target).
        source: where the figures are published.
    """

    model: str
    state_dtype: str
    L: int
    record_dtype: str
    conventional: float
    replay: float
    fp32_conventional: float
    source: Source

    @property
    def replay_vs_fp32(self) -> float:
        """The replay error over the fp32 conventional path's (1: as accurate)."""
        return self.replay / self.fp32_conventional

    @property
    def conventional_simulated(self) -> bool:
        """True where no kernel keeps a state of this dtype (fp8), so that :attr:`conventional`
        is the figure of a simulated conventional path."""
        return self.state_dtype in SIMULATED_CONVENTIONAL

    def text(self) -> str:
        """One line: ``bf16: conventional 1.11e-02, replay 4.92e-03 (1.35x the fp32 conventional
        path's)``, the conventional figure marked where it is simulated."""
        simulated = f" (simulated: no kernel keeps an {self.state_dtype} state)" if self.conventional_simulated else ""
        return (
            f"{self.state_dtype}: conventional {self.conventional:.2e}{simulated}, replay {self.replay:.2e} "
            f"({self.replay_vs_fp32:.2f}x the fp32 conventional path's)"
        )


def _source(model: str, record_dtype: str, Ls: Tuple[int, ...], dtypes: Tuple[str, ...]) -> Source:
    """The session-32 GPU run of ``model`` with ``record_dtype`` records."""
    fp32_records = record_dtype == "fp32"
    command = (
        f"python benchmarks/precision.py --device cuda --steps {STUDY_STEPS} --models {model} "
        f"--L {' '.join(map(str, Ls))} --dtypes {' '.join(dtypes)} --batch 1"
        + (" --record-dtype fp32" if fp32_records else "")
    )
    return Source(
        _DATE,
        _GPU,
        command,
        _DOC,
        _SECTION,
        "GPU run at 4,096 steps" + (", fp32 records" if fp32_records else ""),
        f"{_RESULTS}{_DATE}-h200-precision_4096_{'f32rec_' if fp32_records else ''}s32_{model}.log",
    )


# One run a model and record dtype: model, record dtype, the checkpoint dtypes run, the
# conventional output errors per dtype, then per L the replay output errors per dtype.
_RUNS = (
    ("nemotron-3-nano-4b", "bf16", ("fp32", "bf16", "fp16"), (3.78e-03, 9.32e-03, 3.83e-03),
     {8: (3.78e-03, 4.34e-03, 3.83e-03), 16: (3.78e-03, 4.34e-03, 3.83e-03),
      32: (3.78e-03, 4.34e-03, 3.83e-03), 64: (3.78e-03, 4.34e-03, 3.78e-03)}),
    ("nemotron-3-super-120b", "bf16", ("fp32", "bf16", "fp16"), (3.65e-03, 1.11e-02, 3.65e-03),
     {8: (3.65e-03, 4.92e-03, 3.65e-03), 16: (3.65e-03, 4.92e-03, 3.65e-03),
      32: (3.65e-03, 4.92e-03, 3.65e-03), 64: (3.65e-03, 4.85e-03, 3.65e-03)}),
    ("qwen3.5-4b", "bf16", ("fp32", "bf16", "fp16"), (3.58e-03, 2.02e-02, 4.50e-03),
     {8: (5.91e-03, 8.48e-03, 5.91e-03), 16: (5.91e-03, 7.57e-03, 5.91e-03),
      32: (5.91e-03, 6.68e-03, 5.91e-03), 64: (5.91e-03, 6.68e-03, 5.91e-03)}),
    ("qwen3.5-122b-a10b", "bf16", ("fp32", "bf16", "fp16"), (3.81e-03, 1.46e-02, 4.28e-03),
     {8: (6.59e-03, 8.19e-03, 6.59e-03), 16: (6.59e-03, 6.59e-03, 6.59e-03),
      32: (6.59e-03, 6.59e-03, 6.59e-03), 64: (6.59e-03, 6.59e-03, 6.59e-03)}),
    ("kimi-linear-48b", "bf16", ("fp32", "bf16", "fp16"), (3.61e-03, 1.72e-02, 4.19e-03),
     {8: (7.07e-03, 7.70e-03, 7.07e-03), 16: (7.07e-03, 7.64e-03, 7.07e-03),
      32: (7.07e-03, 7.07e-03, 7.07e-03), 64: (7.07e-03, 7.07e-03, 7.07e-03)}),
    ("qwen3.5-4b", "fp32", ("fp32", "bf16"), (3.58e-03, 2.02e-02),
     {16: (3.58e-03, 6.06e-03), 64: (3.58e-03, 4.85e-03)}),
    ("qwen3.5-122b-a10b", "fp32", ("fp32", "bf16"), (3.81e-03, 1.46e-02),
     {16: (3.81e-03, 4.57e-03), 64: (3.81e-03, 3.85e-03)}),
    ("kimi-linear-48b", "fp32", ("fp32", "bf16"), (3.61e-03, 1.72e-02),
     {16: (3.61e-03, 4.92e-03), 64: (3.61e-03, 4.08e-03)}),
)  # fmt: skip


_FP8_DATE = "2026-12-05"
# The fp8 runs by session: the checkpoint dtypes run, the raw log's name. Session 37 ran every
# dtype (branch fp8-cuda, merged since); its Mamba-2 fp8-sr rows are void (a Triton fp8 flush
# bug, fixed since), so session 38 reran the Mamba-2 layers' fp32, fp8 and fp8-sr paths.
_FP8_SESSIONS = {
    37: ("fp32 bf16 fp16 fp8 bf16-sr fp16-sr fp8-sr", "s37-precision_fp8cuda"),
    38: ("fp32 fp8 fp8-sr", "s38-precision_fp8"),
}


def _fp8_source(model: str, session: int) -> Source:
    """The 2026-12-05 GPU run (``scripts/device_precision.sh``) of ``model`` in ``session``."""
    dtypes, name = _FP8_SESSIONS[session]
    command = (
        f"python benchmarks/precision.py --device cuda --steps {STUDY_STEPS} --models {model} --batch 1 "
        f"--L {' '.join(map(str, STUDY_LS))} --dtypes {dtypes} --markdown"
    )
    return Source(
        _FP8_DATE,
        _GPU,
        command,
        _DOC,
        _SECTION,
        "GPU run at 4,096 steps, every checkpoint dtype",
        f"{_RESULTS}{_FP8_DATE}-h200-{name}_{model}.log",
    )


# fp8 checkpoints, bf16 records: model, session, the conventional fp8 path's output error
# (simulated), the same run's fp32 conventional path's, the replay fp8 path's at STUDY_LS.
_FP8_RUNS = (
    ("nemotron-3-nano-4b", 38, 1.13e-01, 3.78e-03, (6.48e-02, 6.48e-02, 6.48e-02, 6.48e-02)),
    ("nemotron-3-super-120b", 38, 1.12e-01, 3.65e-03, (6.69e-02, 6.32e-02, 5.73e-02, 4.58e-02)),
    ("qwen3.5-4b", 37, 3.12e-01, 3.58e-03, (1.09e-01, 7.79e-02, 7.59e-02, 4.20e-02)),
    ("qwen3.5-122b-a10b", 37, 2.29e-01, 3.81e-03, (7.47e-02, 5.32e-02, 4.33e-02, 4.13e-02)),
    ("kimi-linear-48b", 37, 1.80e-01, 3.61e-03, (8.11e-02, 4.58e-02, 3.89e-02, 3.47e-02)),
)  # fmt: skip


def _cells() -> Tuple[AccuracyCell, ...]:
    out = []
    for model, record_dtype, dtypes, conventional, replays in _RUNS:
        source = _source(model, record_dtype, tuple(replays), dtypes)
        for L, replay in replays.items():
            out += [
                AccuracyCell(model, dtype, L, record_dtype, conv, rep, conventional[0], source)
                for dtype, conv, rep in zip(dtypes, conventional, replay)
            ]
    for model, session, conventional, fp32_conventional, replays in _FP8_RUNS:
        source = _fp8_source(model, session)
        out += [
            AccuracyCell(model, "fp8", L, "bf16", conventional, replay, fp32_conventional, source)
            for L, replay in zip(STUDY_LS, replays)
        ]
    return tuple(out)


ACCURACY: Tuple[AccuracyCell, ...] = _cells()


def accuracy(model: str, state_dtype: str, *, L: int, record_dtype: str) -> Optional[AccuracyCell]:
    """The measured cell of a preset ``model`` with a ``state_dtype`` checkpoint, L records of
    ``record_dtype``, or None where none was measured (see the module docstring)."""
    key = (model, state_dtype, L, record_dtype)
    return next((c for c in ACCURACY if (c.model, c.state_dtype, c.L, c.record_dtype) == key), None)


def measured_settings() -> str:
    """What :data:`ACCURACY` covers, per record dtype: its L values and, where not every preset
    has them, the models (for messages that say why a setting has no cell)."""
    by_records: dict = {}
    for c in ACCURACY:
        Ls, models = by_records.setdefault(c.record_dtype, (set(), set()))
        Ls.add(c.L)
        models.add(c.model)
    every = set.union(*(models for _, models in by_records.values()))
    return "; ".join(
        f"{dtype} records at L {'/'.join(map(str, sorted(Ls)))}"
        + ("" if models == every else f" ({', '.join(sorted(models))})")
        for dtype, (Ls, models) in by_records.items()
    )
