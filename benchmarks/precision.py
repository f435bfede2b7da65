"""Drift of narrow states and checkpoints (issue 25's study): over a long decode, the output and
state error of each path against the float64 recurrence, for the conventional step (its state
stored in the dtype, so rounded every step) and the replay step (its checkpoint stored in the
dtype, rounded once per flush; records in the activation dtype, bf16), per checkpoint dtype and
L, on the SSM geometry of each preset model (one layer, ``--batch`` sequences).

    python benchmarks/precision.py --steps 4096 --L 8 16 32 64 --dtypes fp32 bf16 fp16 fp8 --out-dir benchmarks/results
    python benchmarks/precision.py --L 16 --dtypes fp32 bf16 bf16-sr fp8 fp8-sr --rounding-seed 7 --markdown

Storage dtypes (``--dtypes``): ``fp32``, ``bf16``, ``fp16``; ``fp8``, float8-e4m3 with one fp32
scale per row (``state_dtype=torch.float8_e4m3fn``, ``checkpoint_scale``); and ``bf16-sr``,
``fp16-sr``, ``fp8-sr``, the same rounded stochastically (``rounding_seed=``, the seed
``--rounding-seed``). Every replay path runs the ops (``ops.mamba2_replay_step`` /
``gdn_replay_step`` / ``kda_replay_step``, the cache in the dtype). The conventional step has no
fp8 state and no stochastic rounding, so ``conventional fp8 / *-sr (sim)`` is simulated: the
float64 recurrence with its state rounded to the format after every step
(``trtllm_replayssm.reference.rounding.quantize``: fp8 with the caches' per-row scale, draws
from a generator seeded with ``--rounding-seed``).

Truth: the conventional recurrence in float64 (the project's reference implementation, plain
torch, on the study's device), fed the same (bf16-rounded) activations, so activation rounding
is not counted as drift. Errors: max |y - y64| / max |y64| over the batch every step (y is bf16,
as the ops return it: its rounding, ~2e-3 to 4e-3, is a floor under every path's output error);
the state's max |S - S64| / max |S64| at each horizon, the powers of two and the last step
(replay: checkpoint decoded, its records folded in, ``replay_cache_state``). A path's output
error at horizon h is its largest over the steps since the previous power of two, (h/2, h], and
over at least the last 32 (every step up to 32): each step counts at some horizon, and at an
early one no single step's output rounding decides a comparison. A path's one-line summary gives
the largest over the last 10% of the steps, as docs/benchmarks.md's tables. GDN / KDA replay
with bf16 records carries their rounding at every dtype (``--record-dtype fp32`` removes it;
docs/benchmarks.md, "Accuracy").

Issue 25's targets, checked at every horizon: (1) each replay path's output error at or below
the conventional path's at the same storage dtype (equal where both sit on the output floor);
(2) the recommended 16-bit replay setting within 2x of the fp32 conventional path's output
error. "Recommended" is the first storage dtype of :data:`PREFERENCE` (narrowest first; nearest
rounding before stochastic, bf16 before fp16) whose replay path stays within 2x of the fp32
conventional path at every horizon, with the L that do (an L of at least ``--steps`` never
rounds before the last output and is never recommended); ``--markdown`` prints that as the
README's table, per layer and per family.

Inputs are synthetic: no pretrained checkpoint is loaded. The per-head parameters are those of
the project's random-weight layers (``trtllm_replayssm.tp.layers.random_weights``: A_log =
log U(1, 16), dt_bias = softplus^-1 of U(1e-3, 1e-1), Mamba-2's D = U(0.5, 1.5)), the ranges
of the published initialisations, not trained weights; projections (raw dt, x, B, C; q, k, v,
a, b) are N(0, 1), q and k l2-normalised by the step. Drift depends on these statistics, so the
figures compare paths with one another, not with a served model.

On a GPU the steps run the project's kernels (the ops' routes: fp8 checkpoints and stochastic
rounding take the Triton ones); on the CPU, its references (slow: small ``--steps`` only).
Prints, per model, the final errors (one row a path), the output and state error at every
horizon, and the two targets' check; writes ``<date>-<gpu>-precision.{json,png}`` with
``--out-dir``.
"""

from __future__ import annotations

import argparse
import ctypes
import datetime
import importlib.util
import json
import math
import os
import sys

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch

from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

from trtllm_replayssm import ops  # noqa: E402
from trtllm_replayssm.cache import MAX_L  # noqa: E402
from trtllm_replayssm.checks import SlotBatch, is_rounding_seed  # noqa: E402
from trtllm_replayssm.models import KDA, MAMBA2, PRESETS, DeltaRuleGeometry, Mamba2Geometry, load_model  # noqa: E402
from trtllm_replayssm.reference.gated_delta import gated_delta_decode_step_ref  # noqa: E402
from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref  # noqa: E402
from trtllm_replayssm.reference.rounding import FP8, quantize  # noqa: E402
from trtllm_replayssm.tp.layers import random_weights  # noqa: E402

ACT = torch.bfloat16
RECORD_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
MAX_RATIO = 2.0  # issue 25: the recommended 16-bit setting within 2x of the fp32 conventional path
WINDOW_MIN = 32  # the fewest steps an output error at a horizon is the worst of (all, before step 32)


@dataclass(frozen=True)
class Storage:
    """A storage dtype of the study: the cache's ``state_dtype``, whether a flush rounds
    stochastically (``rounding_seed``), and the ``reference.rounding`` format that simulates the
    conventional path where no conventional op stores a state this way (None: the op runs)."""

    dtype: torch.dtype
    stochastic: bool = False
    simulated: Optional[str] = None

    @property
    def bits(self) -> int:
        return self.dtype.itemsize * 8


STORAGES = {
    "fp32": Storage(torch.float32),
    "bf16": Storage(torch.bfloat16),
    "fp16": Storage(torch.float16),
    "fp8": Storage(FP8, simulated="fp8-row"),
    "bf16-sr": Storage(torch.bfloat16, True, "bf16-sr"),
    "fp16-sr": Storage(torch.float16, True, "fp16-sr"),
    "fp8-sr": Storage(FP8, True, "fp8-row-sr"),
}
# The order a recommendation tries the dtypes in: narrowest first; at one width nearest rounding
# (every route) before stochastic (the Triton kernels), bf16 (the CUDA kernels, fp32's range)
# before fp16.
PREFERENCE = ("fp8", "fp8-sr", "bf16", "fp16", "bf16-sr", "fp16-sr", "fp32")
FAMILY_LABELS = {"mamba2": "Mamba-2", "gdn": "GDN", "kda": "KDA"}


def _layer_params(kind: str, geometry, seed: int, names: Sequence[str], device) -> dict:
    """Per-head parameters ``names`` of a random-weight layer (the project's draws), on ``device``."""
    w = random_weights(kind, geometry, 1, torch.Generator().manual_seed(seed))  # hidden 1: projections unused
    return {n: w[n].to(device) for n in names}


@dataclass
class Family:
    """One SSM family's step, on any device and dtype, for this study."""

    name: str
    dims: tuple  # state dims after the slot: Mamba-2 (nheads, head_dim, d_state), GDN/KDA (v_heads, V, K)
    make_params: Callable  # (seed, device) -> dict
    make_inputs: Callable  # (gen, batch, params, device) -> dict of step inputs
    conventional: Callable  # (state, inputs, params, slot ids or SlotBatch) -> y
    truth: Callable  # (float64 state, float64 inputs and params, slots) -> y: the reference, any device
    allocate: Callable  # (num_slots, L, state_dtype, device) -> cache
    replay: Callable  # (cache, inputs, params, slot ids or SlotBatch, rounding_seed) -> y
    cache_state: Callable  # (cache, params, slots) -> fp32 state


def mamba2_family(geometry: Mamba2Geometry) -> Family:
    """Mamba-2 of ``geometry``."""
    H, P, N, G = geometry.nheads, geometry.head_dim, geometry.d_state, geometry.ngroups

    def params(seed, device):
        p = _layer_params(MAMBA2, geometry, seed, ("A_log", "dt_bias", "D"), device)
        return dict(A=-torch.exp(p.pop("A_log")), **p)

    def inputs(gen, batch, p, device):
        r = lambda *s: torch.randn(*s, device=device, generator=gen)  # noqa: E731
        return dict(x=r(batch, H, P).to(ACT), dt=r(batch, H), B=r(batch, G, N).to(ACT), C=r(batch, G, N).to(ACT))

    def args(i, p):
        return i["x"], i["dt"], p["A"], i["B"], i["C"]

    def kw(p, slots):
        return dict(slot_ids=slots, D=p["D"], dt_bias=p["dt_bias"])

    def truth(S, i, p, s):
        return mamba2_decode_step_ref(S, *args(i, p), out=torch.empty_like(i["x"]), **kw(p, s))

    return Family(
        MAMBA2,
        geometry.state_dims,
        params,
        inputs,
        lambda S, i, p, s: ops.mamba2_decode_step(S, *args(i, p), **kw(p, s)),
        truth,
        lambda n, L, dt, dev: ops.Mamba2ReplayCache.allocate(n, H, P, N, G, L, state_dtype=dt, act_dtype=ACT, device=dev),
        lambda c, i, p, s, seed: ops.mamba2_replay_step(c, *args(i, p), rounding_seed=seed, **kw(p, s)),
        lambda c, p, s: ops.replay_cache_state(c, s, A=p["A"]),
    )


def delta_rule_family(kind: str, geometry: DeltaRuleGeometry, record_dtype=ACT) -> Family:
    """GDN or KDA of ``geometry``; d and k records in ``record_dtype``."""
    Hk, Hv, K, V = geometry.k_heads, geometry.v_heads, geometry.head_k_dim, geometry.head_v_dim
    per_channel = kind == KDA
    gate = ops.kda_gate if per_channel else ops.gdn_gate
    decode = ops.kda_decode_step if per_channel else ops.gdn_decode_step
    replay = ops.kda_replay_step if per_channel else ops.gdn_replay_step
    cache_type = ops.KDAReplayCache if per_channel else ops.GDNReplayCache
    gate_shape = (Hv, K) if per_channel else (Hv,)

    def params(seed, device):
        return _layer_params(kind, geometry, seed, ("A_log", "dt_bias"), device)

    def inputs(gen, batch, p, device):
        r = lambda *s: torch.randn(*s, device=device, generator=gen)  # noqa: E731
        g, beta = gate(r(batch, *gate_shape), r(batch, Hv), p["A_log"], p["dt_bias"])
        return dict(q=r(batch, Hk, K).to(ACT), k=r(batch, Hk, K).to(ACT), v=r(batch, Hv, V).to(ACT), g=g, beta=beta)

    def args(i):
        return i["q"], i["k"], i["v"], i["g"], i["beta"]

    def truth(S, i, p, s):  # the ops' defaults: q and k l2-normalised, scale head_k_dim^-1/2
        out = torch.empty_like(i["v"])
        return gated_delta_decode_step_ref(S, *args(i), slot_ids=s, scale=K**-0.5, use_qk_l2norm=True, out=out)

    return Family(
        kind,
        geometry.state_dims,
        params,
        inputs,
        lambda S, i, p, s: decode(S, *args(i), slot_ids=s),
        truth,
        lambda n, L, dt, dev: cache_type.allocate(n, Hk, Hv, K, V, L, state_dtype=dt, record_dtype=record_dtype, device=dev),
        lambda c, i, p, s, seed: replay(c, *args(i), slot_ids=s, rounding_seed=seed),
        lambda c, p, s: ops.replay_cache_state(c, s),
    )


def family_of(model: str, record_dtype=ACT) -> Family:
    """The study's Family for the first SSM layer of a preset model (GDN/KDA records in
    ``record_dtype``; Mamba-2's records are activations, bf16)."""
    layer = load_model(model).ssm_layers[0]
    if layer.kind == MAMBA2:
        return mamba2_family(layer.geometry)
    return delta_rule_family(layer.kind, layer.geometry, record_dtype)


def _to(d: dict, device, float_dtype=None) -> dict:
    """The inputs on ``device``; floating tensors in ``float_dtype`` when given."""
    out = {}
    for k, v in d.items():
        v = v.to(device)
        out[k] = v.to(float_dtype) if float_dtype is not None and v.is_floating_point() else v
    return out


def rel_err(a: torch.Tensor, truth: torch.Tensor) -> torch.Tensor:
    """max |a - truth| / max |truth| as a float64 scalar tensor on truth's device (no host sync)."""
    t = truth.double()
    return (a.detach().to(t.device).double() - t).abs().max() / t.abs().max().clamp_min(1e-300)


def horizons(steps: int) -> List[int]:
    """Steps (1-based) at which errors are reported: powers of two, and the last."""
    return sorted({2**i for i in range(int(math.log2(steps)) + 1)} | {steps})


def check_storages(dtypes: Sequence[str], rounding_seed: Optional[int]) -> None:
    """ValueError unless every name of ``dtypes`` is one of :data:`STORAGES`, none twice, and
    ``rounding_seed`` is None or an int in [0, 2^31) given with a stochastic one."""
    for name in dtypes:
        if name not in STORAGES:
            base = name[:-3] if name.endswith("-sr") else None
            if base in STORAGES and STORAGES[base].bits >= 32:
                raise ValueError(
                    f"{name}: stochastic rounding takes a bf16, fp16 or fp8 storage; {base} is stored as computed"
                )
            raise ValueError(f"{name!r}: expected a storage dtype, one of {', '.join(STORAGES)}")
    if len(set(dtypes)) != len(dtypes):
        raise ValueError(f"dtypes {list(dtypes)} name a dtype twice")
    if rounding_seed is not None:
        if not is_rounding_seed(rounding_seed):
            raise ValueError(f"rounding seed {rounding_seed!r}: expected an int in [0, 2^31)")
        if not any(STORAGES[n].stochastic for n in dtypes):
            raise ValueError(
                f"a rounding seed without a stochastic dtype rounds nothing: add one of "
                f"{', '.join(n for n, s in STORAGES.items() if s.stochastic)} to the dtypes"
            )


def study(family: Family, dtypes: Sequence[str], Ls: Sequence[int], steps: int, batch: int, device, seed: int = 0,
          progress: bool = False, rounding_seed: Optional[int] = None) -> Dict[str, dict]:  # fmt: skip
    """Run one layer for ``steps`` steps along every path of every storage dtype of ``dtypes``
    (:data:`STORAGES`): ``conventional <dtype>`` (the op; ``conventional <dtype> (sim)`` where
    none stores the state so) and ``replay <dtype> L<L>`` for each of ``Ls`` (the op, the cache
    in that dtype; a stochastic dtype's flushes rounded with ``rounding_seed``, 0 when None).
    Returns {path: {"y": [output error per step], "state": {horizon: state error}, "kind":
    "conventional" | "replay", "dtype": name, "L": L or None, "simulated": bool}}; every path's
    outputs are compared as the ops return them, in the activation dtype."""
    check_storages(dtypes, rounding_seed)
    rounding_seed = 0 if rounding_seed is None else rounding_seed
    gen = torch.Generator(device=device).manual_seed(seed)
    params = family.make_params(seed, device)
    slots = torch.arange(batch, dtype=torch.int32, device=device)
    # The ops' slot ids checked once: a tensor would cost each op call a host sync (15 a step
    # with three dtypes and four L).
    op_slots = SlotBatch(slots, batch)
    # Fresh sequences (zero state): the error measured is what the steps add, not the rounding
    # of a starting state that the dtypes would store differently.
    init = torch.zeros(batch, *family.dims, device=device)
    truth_state = init.double()
    truth_params = _to(params, device, torch.float64)
    paths: Dict[str, dict] = {}
    for name in dtypes:
        s = STORAGES[name]
        meta = dict(kind="conventional", dtype=name, L=None, simulated=s.simulated is not None)
        if s.simulated is None:
            paths[f"conventional {name}"] = dict(meta, state=init.to(s.dtype))
        else:  # each simulated path its own draws: its figures do not depend on the other paths
            draws = torch.Generator(device=device).manual_seed(rounding_seed) if s.stochastic else None
            paths[f"conventional {name} (sim)"] = dict(meta, state64=init.double(), fmt=s.simulated, draws=draws)
        for L in Ls:
            cache = family.allocate(batch, L, s.dtype, device)
            cache.admit(slots, init)
            seed_L = rounding_seed if s.stochastic else None
            paths[f"replay {name} L{L}"] = dict(meta, kind="replay", L=L, simulated=False, cache=cache, seed=seed_L)
    for path in paths.values():
        path.update(y=[], errors={})
    at = set(horizons(steps))
    trim_heap = heap_trimmer(device)
    for step in tqdm(range(1, steps + 1), disable=not progress, desc=family.name):
        trim_heap()
        inp = family.make_inputs(gen, batch, params, device)
        inp64 = _to(inp, device, torch.float64)
        y64 = family.truth(truth_state, inp64, truth_params, slots)
        for path in paths.values():
            if "state" in path:
                y = family.conventional(path["state"], inp, params, op_slots)
            elif "cache" in path:
                y = family.replay(path["cache"], inp, params, op_slots, path["seed"])
            else:  # the state stored in the format after every step
                y = family.truth(path["state64"], inp64, truth_params, slots).to(ACT)
                path["state64"].copy_(quantize(path["state64"], path["fmt"], path["draws"]))
            path["y"].append(rel_err(y, y64))
            if step in at:
                path["errors"][step] = rel_err(_state(family, path, params, slots), truth_state)
    # Errors stay on the device during the run: one host transfer per path at the end.
    keys = ("kind", "dtype", "L", "simulated")
    return {
        name: dict(
            y=torch.stack(p["y"]).tolist(),
            state=dict(zip(p["errors"], torch.stack(list(p["errors"].values())).tolist())),
            **{k: p[k] for k in keys},
        )
        for name, p in paths.items()
    }


def _state(family: Family, path: dict, params: dict, slots) -> torch.Tensor:
    """The state a path holds now (a replay path's: checkpoint decoded, its records folded in)."""
    if "cache" in path:
        return family.cache_state(path["cache"], params, slots)
    return path["state"] if "state" in path else path["state64"]


def window(h: int) -> range:
    """The steps (1-based) whose worst output error is a path's at horizon ``h``: (h/2, h], and
    at least the last :data:`WINDOW_MIN` (every step up to h before that)."""
    return range(max(0, min(h // 2, h - WINDOW_MIN)) + 1, h + 1)


def horizon_errors(result: Dict[str, dict]) -> Dict[str, dict]:
    """{path: {"y": {horizon: output error}, "state": {horizon: state error}}}: a path's output
    error at horizon h is its largest over the steps of ``window(h)``."""
    out = {}
    for name, r in result.items():
        y = r["y"]
        out[name] = dict(y={h: max(y[s - 1] for s in window(h)) for h in horizons(len(y))}, state=dict(r["state"]))
    return out


def last_tenth(y: Sequence[float]) -> float:
    """The largest output error of the last 10% of the steps (at least one): docs/benchmarks.md's
    figure."""
    return max(y[-max(1, len(y) // 10) :])


def summary_rows(model: str, result: Dict[str, dict]) -> List[dict]:
    """One row per path: the worst output error of the last tenth of the steps and the final
    state error."""
    rows = []
    for path, r in result.items():
        last = max(r["state"])
        rows.append(dict(model=model, path=path, steps=len(r["y"]), y_err_tail=last_tenth(r["y"]), state_err=r["state"][last]))
    return rows


def _worst_ratio(errors: Dict[int, float], reference: Dict[int, float]) -> tuple:
    """(worst errors[h] / reference[h] over the horizons, its horizon)."""
    ratios = {h: e / max(reference[h], 1e-300) for h, e in errors.items()}
    h = max(ratios, key=ratios.get)
    return ratios[h], h


def _conventional_path(result: Dict[str, dict], dtype: str) -> Optional[str]:
    return next((n for n, r in result.items() if r["kind"] == "conventional" and r["dtype"] == dtype), None)


def targets(result: Dict[str, dict], max_ratio: float = MAX_RATIO) -> dict:
    """Issue 25's two targets for one model's study (``study``'s result), on the output error at
    every horizon (:func:`horizon_errors`):

    * ``"below"``: per replay path, its worst ratio to the conventional path at the same storage
      dtype and that horizon; ``ok`` when it is at most 1 (at or below at every horizon);
    * ``"to_fp32"``: per replay path, its worst ratio to ``conventional fp32`` (empty without
      it); ``ok`` when at most ``max_ratio``;
    * ``"recommended"``: the first dtype of :data:`PREFERENCE` with a replay path ``ok`` in
      ``"to_fp32"`` and ``rounded`` (L below the steps: a flush rounded the checkpoint before the
      last output), its passing L and their worst ratio (None: none passes, or no fp32 path);
      ``"recommended_16bit"``: the same among the 16-bit dtypes, ``"best_16bit"`` the 16-bit
      cell of the lowest ratio (None without one);
    * ``"target1"``: every ``"below"`` ok; ``"target2"``: a 16-bit setting is recommended (None
      without an fp32 conventional path or a 16-bit replay path)."""
    errors = horizon_errors(result)
    fp32 = _conventional_path(result, "fp32")
    below, to_fp32 = [], []
    for name, r in result.items():
        if r["kind"] != "replay":
            continue
        conv = _conventional_path(result, r["dtype"])
        cell = dict(path=name, dtype=r["dtype"], L=r["L"], rounded=r["L"] < len(r["y"]))
        if conv is not None:
            ratio, h = _worst_ratio(errors[name]["y"], errors[conv]["y"])
            below.append(dict(cell, against=conv, ratio=ratio, horizon=h, ok=ratio <= 1.0))
        if fp32 is not None:
            ratio, h = _worst_ratio(errors[name]["y"], errors[fp32]["y"])
            to_fp32.append(dict(cell, against=fp32, ratio=ratio, horizon=h, ok=ratio <= max_ratio))
    sixteen = [n for n in PREFERENCE if STORAGES[n].bits == 16]
    recommended_16bit = recommend([to_fp32], sixteen)
    best_16bit = min((c for c in to_fp32 if c["dtype"] in sixteen), key=lambda c: c["ratio"], default=None)
    return dict(
        below=below,
        to_fp32=to_fp32,
        recommended=recommend([to_fp32]),
        recommended_16bit=recommended_16bit,
        best_16bit=best_16bit,
        target1=all(c["ok"] for c in below) if below else None,
        target2=(recommended_16bit is not None) if best_16bit is not None else None,
    )


def recommend(cells_per_model: Sequence[List[dict]], order: Sequence[str] = PREFERENCE) -> Optional[dict]:
    """The first dtype of ``order`` with an L whose replay path is ok and rounded in every
    model's ``targets(...)["to_fp32"]`` cells: {"dtype", "Ls": the L ok in all of them, "ratio":
    their worst ratio}; None if no dtype has one."""
    for dtype in order:
        ok = [
            {c["L"]: c["ratio"] for c in cells if c["dtype"] == dtype and c["ok"] and c["rounded"]}
            for cells in cells_per_model
        ]
        Ls = set.intersection(*(set(by_L) for by_L in ok)) if ok else set()
        if Ls:
            return dict(dtype=dtype, Ls=sorted(Ls), ratio=max(by_L[L] for by_L in ok for L in Ls))
    return None


def setting_text(rec: Optional[dict], Ls: Sequence[int]) -> str:
    """A recommendation as the README writes it, with its worst ratio: "bf16 (1.15×)" (every L
    studied, ``Ls``), "bf16 at L ≥ 32 (...)", "bf16 at L = 8, 32 (...)"; "none" for None."""
    if rec is None:
        return "none"
    ok, studied = rec["Ls"], sorted(Ls)
    if ok == studied:
        where = ""
    elif ok == studied[studied.index(ok[0]) :]:
        where = f" at L ≥ {ok[0]}"
    else:
        where = f" at L = {', '.join(map(str, ok))}"
    return f"{rec['dtype']}{where} ({rec['ratio']:.2f}×)"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned text columns, two spaces apart."""
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows])


def format_horizons(model: str, result: Dict[str, dict]) -> str:
    """The output and state error of every path of one model at every horizon."""
    errors = horizon_errors(result)
    hs = sorted(next(iter(errors.values()))["y"])
    out = []
    for key, what in (("y", f"output error (worst of the steps since the previous horizon, at least {WINDOW_MIN})"),
                      ("state", "state error")):  # fmt: skip
        rows = [[name] + [f"{e[key][h]:.2e}" for h in hs] for name, e in errors.items()]
        out.append(f"# {model}: {what}\n" + _table(["path"] + [str(h) for h in hs], rows))
    return "\n".join(out)


def format_targets(model: str, checks: dict, Ls: Sequence[int]) -> str:
    """The targets' check of one model (:func:`targets`): per replay dtype and L, the worst
    ratio over the horizons (at its horizon) to the conventional path at that dtype and to the
    fp32 conventional path, then the two verdicts."""
    dtypes = list(dict.fromkeys(c["dtype"] for c in checks["below"] + checks["to_fp32"]))
    verdict = {True: "ok", False: "FAIL", None: "n/a"}

    def cells(kind: str, dtype: str) -> List[str]:
        by_L = {c["L"]: c for c in checks[kind] if c["dtype"] == dtype}
        return [f"{c['ratio']:.2f}@{c['horizon']}{'' if c['ok'] else ' !'}" if (c := by_L.get(L)) else "-" for L in Ls]

    rows = [[dtype, *cells("below", dtype), *cells("to_fp32", dtype)] for dtype in dtypes]
    header = ["dtype", *(f"vs conv L{L}" for L in Ls), *(f"vs fp32 L{L}" for L in Ls)]
    missed: Dict[str, list] = {}
    for c in checks["below"]:
        if not c["ok"]:
            missed.setdefault(c["dtype"], []).append(str(c["L"]))
    missed_text = ", ".join(f"{dtype} at L = {', '.join(L)}" for dtype, L in missed.items())
    best16 = setting_text(checks["recommended_16bit"], Ls)
    if checks["recommended_16bit"] is None and (best := checks["best_16bit"]) is not None:
        best16 = f"best: {best['dtype']} L{best['L']}, {best['ratio']:.2f}@{best['horizon']}"
    return (
        f"# {model}: targets, worst output-error ratio over the horizons @ its horizon ('!': missed): "
        f"replay / conventional at the same dtype (target 1: <= 1), replay / conventional fp32 (within {MAX_RATIO:g}x)\n"
        + _table(header, rows)
        + f"\n{model}: target 1 (replay <= conventional at the same dtype, every horizon): {verdict[checks['target1']]}"
        + (f" (missed: {missed_text})" if missed else "")
        + f"\n{model}: target 2 (recommended 16-bit setting within {MAX_RATIO:g}x of conventional fp32, every horizon): "
        + f"{verdict[checks['target2']]} ({best16}); recommended: {setting_text(checks['recommended'], Ls)}"
    )


def markdown(results: Dict[str, Dict[str, dict]], families: Dict[str, str], Ls: Sequence[int]) -> str:
    """README-ready tables: per layer, each dtype's output error over the last tenth of the steps
    (conventional / replay, min-max over L) and the recommended setting; then the recommendation per family
    (a setting within 2x of the fp32 conventional path on all its layers, at every horizon)."""
    dtypes = list(dict.fromkeys(r["dtype"] for result in results.values() for r in result.values()))
    steps = max(len(r["y"]) for result in results.values() for r in result.values())
    checks = {model: targets(result) for model, result in results.items()}
    lines = [
        f"Output error after {steps} steps against the float64 recurrence (max |y − y64| / max |y64| over the last "
        f"10% of the steps; bf16 outputs), conventional / replay (L = {', '.join(map(str, Ls))}: min–max); "
        f"(sim): the conventional path simulated. Recommended: the narrowest checkpoint within {MAX_RATIO:g}× of the "
        "fp32 conventional path's error at every horizon (the worst ratio in brackets).",
        "",
        "| layer | " + " | ".join(dtypes) + " | recommended |",
        "|---" * (len(dtypes) + 2) + "|",
    ]
    for model, result in results.items():
        cells = []
        for dtype in dtypes:
            conv = _conventional_path(result, dtype)
            rep = sorted(last_tenth(r["y"]) for r in result.values() if r["kind"] == "replay" and r["dtype"] == dtype)
            left = (
                "–"
                if conv is None
                else f"{last_tenth(result[conv]['y']):.2e}" + (" (sim)" if result[conv]["simulated"] else "")
            )
            right = "–" if not rep else f"{rep[0]:.2e}" + (f"–{rep[-1]:.2e}" if rep[-1] != rep[0] else "")
            cells.append(f"{left} / {right}")
        label = f"{FAMILY_LABELS.get(families[model], families[model])}, {model}"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {setting_text(checks[model]['recommended'], Ls)} |")
    lines += ["", "| family | layers | recommended checkpoint |", "|---|---|---|"]
    for family in dict.fromkeys(families[m] for m in results):
        models = [m for m in results if families[m] == family]
        rec = recommend([checks[m]["to_fp32"] for m in models])
        lines.append(f"| {FAMILY_LABELS.get(family, family)} | {', '.join(models)} | {setting_text(rec, Ls)} |")
    return "\n".join(lines)


COLORS = {"fp32": "tab:blue", "bf16": "tab:orange", "fp16": "tab:green", "fp8": "tab:purple",
          "bf16-sr": "tab:red", "fp16-sr": "tab:olive", "fp8-sr": "tab:brown"}  # fmt: skip


def plot(results: Dict[str, Dict[str, dict]], path: str) -> None:
    """Per model, the state error and the output error of every path at every horizon."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(16, 3.6 * len(results)), squeeze=False)
    styles = {("conventional", False): "--", ("conventional", True): "-.", ("replay", False): "-"}
    for row, (model, result) in zip(axes, results.items()):
        errors = horizon_errors(result)
        for name, r in result.items():
            style = dict(label=name, color=COLORS.get(r["dtype"]), linestyle=styles[r["kind"], r["simulated"]],
                         marker="o" if r["kind"] == "conventional" else None, markersize=3)  # fmt: skip
            for ax, key in zip(row, ("state", "y")):
                xs = sorted(errors[name][key])
                ax.plot(xs, [max(errors[name][key][x], 1e-12) for x in xs], **style)
        for ax, what in zip(row, ("state error (max |S - S64| / max |S64|)", "output error (max |y - y64| / max |y64|)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{model}: {what} vs float64", fontsize=9)
            ax.set_xlabel("decode step")
        row[0].legend(fontsize=6, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def heap_trimmer(device) -> Callable[[], object]:
    """A call that gives the free memory at the top and inside the C heap back to the OS
    (glibc's ``malloc_trim(0)``) for a CPU study on Linux; a call that does nothing otherwise.
    The study calls it once a step: without it the per-step float64 temporaries fragment glibc's
    heap, and on the CPU the resident memory grew by 0.2-0.7 MiB per path and step until the
    process was killed at 24 GiB (Nemotron-3-Nano, 35 paths, ~500 steps; 2026-12-03). With it
    that case grew 141 MiB from step 30 to 90 (3 GiB without) and ran 0.74 s a step against 0.57
    (serving every allocation of 64 KiB or more by mmap instead bounded it too, at 1.3-1.9 s)."""
    if torch.device(device).type != "cpu" or not sys.platform.startswith("linux"):
        return lambda: None
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    return (lambda: trim(0)) if trim else (lambda: None)


def parse_args(argv=None) -> argparse.Namespace:
    """The CLI's arguments; exits with a message for a bad storage dtype, L, seed or combination."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=sorted(PRESETS), choices=sorted(PRESETS), metavar="MODEL",
                    help="preset model names (first SSM layer of each)")  # fmt: skip
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16", "fp16", "fp8"], metavar="DTYPE",
                    help=f"storage dtypes, from {', '.join(STORAGES)}")  # fmt: skip
    ap.add_argument("--L", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--steps", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0, help="the inputs' and parameters' draws")
    ap.add_argument("--rounding-seed", type=int, default=None,
                    help="the stochastic dtypes' rounding_seed (and the simulated paths' draws); default 0")  # fmt: skip
    ap.add_argument("--record-dtype", default="bf16", choices=sorted(RECORD_DTYPES), help="GDN/KDA d and k records")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--markdown", action="store_true", help="also print the README's table (needs fp32 in --dtypes)")
    ap.add_argument("--out-dir", default=None, help="write <date>-<gpu>-precision.{json,png} there")
    args = ap.parse_args(argv)
    try:
        check_storages(args.dtypes, args.rounding_seed)
    except ValueError as e:
        ap.error(f"--dtypes / --rounding-seed: {e}")
    if bad := [L for L in args.L if not 1 <= L <= MAX_L]:
        ap.error(f"--L: {bad} outside [1, {MAX_L}] (the records a replay cache holds)")
    if args.steps < 1 or args.batch < 1:
        ap.error(f"--steps {args.steps} / --batch {args.batch}: expected positive counts")
    if args.markdown and "fp32" not in args.dtypes:
        ap.error("--markdown: recommends against the fp32 conventional path; add fp32 to --dtypes")
    return args


def main(argv=None):
    args = parse_args(argv)
    results, families, rows = {}, {}, []
    for model in args.models:
        family = family_of(model, RECORD_DTYPES[args.record_dtype])
        results[model] = study(
            family, args.dtypes, args.L, args.steps, args.batch, args.device, args.seed, True, args.rounding_seed
        )
        families[model] = family.name
        rows += summary_rows(model, results[model])
    print(f"{'model':<22} {'path':<28} {'steps':>6} {'y err (last 10%)':>17} {'state err':>10}")
    for r in rows:
        print(f"{r['model']:<22} {r['path']:<28} {r['steps']:>6} {r['y_err_tail']:17.2e} {r['state_err']:10.2e}")
    checks = {}
    for model, result in results.items():
        checks[model] = targets(result)
        print(format_horizons(model, result))
        print(format_targets(model, checks[model], args.L))
    if few := [L for L in args.L if args.steps // L < 16]:
        print(
            f"# note: L = {', '.join(map(str, few))} flush fewer than 16 times in {args.steps} steps: few roundings "
            "behind their figures (an L of at least the steps never rounds before the last output: never recommended)"
        )
    if args.markdown:
        print(markdown(results, families, args.L))
    if args.out_dir:
        device = torch.cuda.get_device_name() if torch.device(args.device).type == "cuda" else "cpu"
        os.makedirs(args.out_dir, exist_ok=True)
        stem = os.path.join(args.out_dir, f"{datetime.date.today()}-{device.split()[-1].lower()}-precision")
        meta = dict(device=device, date=str(datetime.date.today()), torch=torch.__version__, args=vars(args))
        horizon = {model: horizon_errors(result) for model, result in results.items()}
        with open(stem + ".json", "w") as f:
            json.dump(dict(meta, rows=rows, families=families, horizons=horizon, targets=checks, results=results), f, indent=1)
        if importlib.util.find_spec("matplotlib") is None:
            print(f"# wrote {stem}.json; no plot: matplotlib is not installed (pip install -e '.[bench]')")
        else:
            plot(results, stem + ".png")
            print(f"# wrote {stem}.json/.png")
    return rows


if __name__ == "__main__":
    main()
