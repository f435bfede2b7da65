"""Which route the measurements favour for a setting: ReplaySSM, or the conventional / serial one.

:func:`route_advice` looks a setting (family, mode, checkpoint dtype, record dtype, L, T, batch,
optionally the layer's geometry) up in :data:`~trtllm_replayssm.measured_speeds.MEASUREMENTS`
and answers with the measured ratio, a recommendation and one line of text naming the figure and
its source.

Advice only: nothing here switches a route. ``plan`` prints it; the hooks warn with its text
(:class:`SlowRouteWarning`) when the route they run was measured slower than the alternative.

How a setting finds its cell, each step said in the text:

- the record dtype (Mamba-2's x / B records, GDN / KDA's d / k records) must be that of a measured
  cell: bf16, so far, in every one. Other records take other kernels (fp32 ones the Triton route),
  whose speed no cell holds: the answer is "not measured", naming the record dtypes measured, and
  there is no recommendation. The setting's text names its records where they are not bf16;
- checkpoint dtype, L (the history B in ``replay_spec``) and T must match a measured cell
  exactly; otherwise the answer is "not measured" and there is no recommendation. The
  alternative is the conventional step (serial steps) at the checkpoint's dtype, but for an fp8
  checkpoint, which no conventional step keeps: there the fp32 conventional step, said in the
  text (:func:`~trtllm_replayssm.measured_speeds.conventional_dtype_for`);
- the layer: the measured layer of the same geometry when there is one, else the measured layer
  of the family with the lowest ratio at that batch ("measured on ..., not this layer");
- the batch: the measured batch itself, else the nearest measured batch (the smaller on a tie).
"""

from __future__ import annotations

import warnings

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from .checks import check_positive_int
from .measured_speeds import MEASUREMENTS, STEP, VERIFY, Measurement, Source, conventional_dtype_for
from .models import HybridModel
from .registry import is_ssm, kinds

__all__ = ["MODES", "SlowRouteWarning", "Advice", "route_advice", "model_advice", "warn_if_slower", "geometry_dims"]

# ReplaySSM modes with a measured alternative: replay vs the conventional step, replay_spec vs
# T serial conventional steps.
MODES = ("replay", "replay_spec")
_ROUTE = {"replay": STEP, "replay_spec": VERIFY}
_ALTERNATIVE = {"replay": "conventional", "replay_spec": "serial"}
_AGAINST = {"replay": "the conventional step", "replay_spec": "{T} serial steps"}
_AGAINST_DTYPE = {"replay": "the {dtype} conventional step", "replay_spec": "{T} serial {dtype} steps"}
_STATE_DTYPES = ("fp32", "bf16", "fp16", "fp64", "fp8")
_RECORD_DTYPES = ("fp32", "bf16", "fp16", "fp64")
# The records every cell was timed with and the default of route_advice (a bf16 model's records;
# the planner's default): a setting's text names its records only where they are other ones.
_BF16_RECORDS = "bf16"


class SlowRouteWarning(UserWarning):
    """A hook runs ReplaySSM in a setting measured slower than the conventional route."""


@dataclass(frozen=True)
class Advice:
    """The measured answer for one setting.

    Attributes:
        family, mode, state_dtype, L, T, batch: the setting asked about (T None for ``replay``).
        record_dtype: the records' dtype asked about (x / B, d / k records).
        ratio: the measured speedup of the ReplaySSM route (< 1: slower); None: not measured.
        recommendation: ``"replay"``, ``"conventional"`` (mode ``replay``) or ``"serial"``
            (mode ``replay_spec``); None when not measured.
        text: one line with the figure, where it was measured and what it recommends.
        measured_batch: the batch of the cell used (differs from ``batch`` when nearest).
        source: the cell's source; None when not measured.
        conventional_dtype: the state dtype of the conventional (serial) steps that ``ratio`` is
            against: ``state_dtype``, but fp32 for an fp8 checkpoint; None when not measured.
        bf16_same_run: an fp8 checkpoint's cell only: the bf16 replay step of the same run
            against the same fp32 conventional step (None elsewhere).
        measured_layer: the layer timed (``name (dims)``) where it is not the one asked about (or
            none was given); None when it is, or when not measured.
    """

    family: str
    mode: str
    state_dtype: str
    L: int
    T: Optional[int]
    batch: int
    ratio: Optional[float]
    recommendation: Optional[str]
    text: str
    measured_batch: Optional[int] = None
    source: Optional[Source] = None
    conventional_dtype: Optional[str] = None
    bf16_same_run: Optional[float] = None
    measured_layer: Optional[str] = None
    record_dtype: str = _BF16_RECORDS

    @property
    def slower(self) -> bool:
        """True when the ReplaySSM route was measured slower than the alternative."""
        return self.ratio is not None and self.ratio < 1.0

    def to_dict(self) -> dict:
        """JSON-ready: the fields, the source as a dict."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "source"}
        d["source"] = None if self.source is None else vars(self.source)
        return d


def geometry_dims(geometry) -> Optional[Tuple[int, int, int, int]]:
    """The four dims a :class:`~trtllm_replayssm.measured_speeds.MeasuredLayer` is keyed by, from
    a :class:`~trtllm_replayssm.models.Mamba2Geometry` or
    :class:`~trtllm_replayssm.models.DeltaRuleGeometry`; None for another geometry (a registered
    family's own, never measured: its advice says "not measured")."""
    for names in (("nheads", "head_dim", "d_state", "ngroups"), ("k_heads", "v_heads", "head_k_dim", "head_v_dim")):
        if all(hasattr(geometry, n) for n in names):
            return tuple(int(getattr(geometry, n)) for n in names)
    return None


def _check(family, mode, state_dtype, record_dtype, L, T, batch) -> None:
    owner = "route_advice"
    if not is_ssm(family):
        raise ValueError(f"{owner}: family is {family!r}; expected a registered SSM layer family ({', '.join(kinds())})")
    if mode not in MODES:
        raise ValueError(f"{owner}: mode is {mode!r}; expected one of {', '.join(MODES)}")
    if state_dtype not in _STATE_DTYPES:
        raise ValueError(f"{owner}: state_dtype is {state_dtype!r}; expected one of {', '.join(_STATE_DTYPES)}")
    if record_dtype not in _RECORD_DTYPES:
        raise ValueError(f"{owner}: record_dtype is {record_dtype!r}; expected one of {', '.join(_RECORD_DTYPES)}")
    for name, value in (("L", L), ("batch", batch)) + ((("T", T),) if mode == "replay_spec" else ()):
        check_positive_int(owner, name, value)
    if mode == "replay" and T is not None:
        raise ValueError(f"{owner}: T is {T!r} in mode replay; expected None (T is the verify window of replay_spec)")


def _setting(family, mode, state_dtype, record_dtype, L, T, batch) -> str:
    what = "replay step" if mode == "replay" else f"verify T {T}, B"
    records = "" if record_dtype == _BF16_RECORDS else f", {record_dtype} records"
    return f"{family} {what} {'L ' if mode == 'replay' else ''}{L}, {state_dtype} checkpoint{records}, batch {batch}"


def _measured_keys(rows: Sequence[Measurement], mode: str) -> str:
    """What was measured of a family, per checkpoint dtype: ``measured: fp32 at L 8/16/32, bf16
    at L 16`` (a dtype measured against another dtype's conventional step: ``fp8 at L 16 vs
    fp32``)."""
    return "measured: " + _dtype_keys(rows, mode)


def _measured_records(rows: Sequence[Measurement], mode: str) -> str:
    """What was measured of a family with records of another dtype than the one asked about, per
    record dtype: ``measured with bf16 records only: fp32 at L 8/16/32, ...``."""
    records = list(dict.fromkeys(r.record_dtype for r in rows))
    parts = [f"{d} records: {_dtype_keys([r for r in rows if r.record_dtype == d], mode)}" for d in records]
    return "measured with " + (
        f"{records[0]} records only: {_dtype_keys(rows, mode)}" if len(records) == 1 else "; with ".join(parts)
    )


def _dtype_keys(rows: Sequence[Measurement], mode: str) -> str:
    parts = []
    for dtype in dict.fromkeys(r.state_dtype for r in rows):
        mine = [r for r in rows if r.state_dtype == dtype]
        Ls = "/".join(str(L) for L in sorted({r.L for r in mine}))
        against = conventional_dtype_for(dtype)
        vs = "" if against == dtype else f" vs {against}"
        if mode == "replay":
            parts.append(f"{dtype} at L {Ls}{vs}")
        else:
            parts.append(f"{dtype} at B {Ls}, T {'/'.join(str(T) for T in sorted({r.T for r in mine}))}{vs}")
    return ", ".join(parts)


def _against(mode: str, T: Optional[int], state_dtype: str) -> str:
    """What a ratio is against: ``the conventional step`` / ``4 serial steps`` at the checkpoint's
    dtype, or, for a dtype that no conventional step keeps (fp8), the fp32 steps, named."""
    against = conventional_dtype_for(state_dtype)
    if against == state_dtype:
        return _AGAINST[mode].format(T=T)
    return f"{_AGAINST_DTYPE[mode].format(T=T, dtype=against)} (no conventional step keeps an {state_dtype} state)"


def route_advice(
    family: str,
    mode: str,
    *,
    state_dtype: str,
    L: int,
    batch: int,
    T: Optional[int] = None,
    geometry: Optional[Tuple[int, int, int, int]] = None,
    record_dtype: str = _BF16_RECORDS,
) -> Advice:
    """The measured advice for one setting (see the module docstring for how a cell is found).

    Args:
        family: a registered SSM layer family (``mamba2``, ``gdn``, ``kda`` were measured).
        mode: ``replay`` (vs the conventional step) or ``replay_spec`` (verify vs T serial steps).
        state_dtype: checkpoint dtype name: fp32, bf16, fp16, fp64 or fp8 (measured against the
            fp32 conventional step: no conventional step keeps an fp8 state).
        L: records per slot; the history B in ``replay_spec``.
        batch: sequences per step.
        T: tokens per verify step (``replay_spec`` only).
        geometry: the layer's four dims (:func:`geometry_dims`); None: any measured layer.
        record_dtype: the dtype of the records the route keeps (Mamba-2's x and B: the
            activations' dtype; GDN / KDA's d and k): fp32, bf16, fp16 or fp64. A cell matches
            only with the same records. Default bf16: the records of a bf16 model (and the
            planner's default), and the ones every cell was timed with; pass what you run.
    Raises:
        ValueError: an unregistered family, an unknown mode or dtype, or a non-positive L, T or batch.
    """
    _check(family, mode, state_dtype, record_dtype, L, T, batch)
    setting = _setting(family, mode, state_dtype, record_dtype, L, T, batch)
    family_rows = [r for r in MEASUREMENTS if r.family == family and r.route == _ROUTE[mode]]
    same_records = [r for r in family_rows if r.record_dtype == record_dtype]
    rows = [r for r in same_records if (r.state_dtype, r.L, r.T) == (state_dtype, L, T)]
    if not rows:
        if not family_rows:
            measured = "no cell of this family was measured"
        elif not same_records:
            measured = _measured_records(family_rows, mode)
        else:
            measured = _measured_keys(same_records, mode)
        text = f"{setting}: not measured ({measured}); no recommendation"
        return Advice(family, mode, state_dtype, L, T, batch, None, None, text, record_dtype=record_dtype)
    batches = sorted({r.batch for r in rows})
    measured_batch = min(batches, key=lambda b: (abs(b - batch), b))
    same_layer = [r for r in rows if r.layer.dims == geometry]
    cells = [r for r in (same_layer or rows) if r.batch == measured_batch]
    cell = min(cells, key=lambda r: r.ratio)
    where = [] if measured_batch == batch else [f"nearest measured batch {measured_batch}"]
    if not same_layer:
        where.append(f"measured on {cell.layer}{', not this layer' if geometry is not None else ''}")
    recommendation = _ALTERNATIVE[mode] if cell.ratio < 1.0 else "replay"
    bf16 = "" if cell.bf16_same_run is None else f"; the bf16 replay step {cell.bf16_same_run:.2f}x it in the same run"
    other_state = recommendation != "replay" and cell.conventional_dtype != state_dtype
    text = (
        f"{setting}: {'; '.join(where + [''])}{cell.ratio:.2f}x {_against(mode, T, state_dtype)}{bf16} "
        f"({cell.source.cite()}); recommended: {recommendation}"
        + (f" (an {cell.conventional_dtype} state)" if other_state else "")
    )
    return Advice(
        family,
        mode,
        state_dtype,
        L,
        T,
        batch,
        cell.ratio,
        recommendation,
        text,
        measured_batch,
        cell.source,
        cell.conventional_dtype,
        cell.bf16_same_run,
        None if same_layer else str(cell.layer),
        record_dtype,
    )


def model_advice(
    model: HybridModel,
    mode: str,
    *,
    state_dtype: str,
    L: int,
    batch: int,
    T: Optional[int] = None,
    record_dtype: str = _BF16_RECORDS,
) -> Tuple[Advice, ...]:
    """:func:`route_advice` for each distinct (family, geometry) of ``model``'s SSM layers, in
    order of first appearance (``model``'s geometry as given: one rank's under TP), every layer
    with ``record_dtype`` records (the default's reason: :func:`route_advice`)."""
    groups = dict.fromkeys((l.kind, l.geometry) for l in model.ssm_layers)
    return tuple(
        route_advice(
            kind, mode, state_dtype=state_dtype, L=L, batch=batch, T=T, geometry=geometry_dims(g), record_dtype=record_dtype
        )
        for kind, g in groups
    )


def warn_if_slower(advice: Sequence[Advice], host: str, *, stacklevel: int = 2) -> bool:
    """One :class:`SlowRouteWarning` naming every entry of ``advice`` measured slower than its
    alternative (their texts, figures and sources), or nothing; the route is left as it is.

    Returns:
        bool: True when it warned.
    """
    slower = [a for a in advice if a.slower]
    if not slower:
        return False
    warnings.warn(
        f"{host}: ReplaySSM runs in a setting measured slower than the conventional route; the "
        f"route is unchanged (advice only): " + " | ".join(a.text for a in slower),
        SlowRouteWarning,
        stacklevel=stacklevel + 1,
    )
    return True
