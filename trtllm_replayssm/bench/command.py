"""The logic of ``trtllm-replayssm bench``: which layers and batches to time, the run, its table
and plot."""

from __future__ import annotations

import itertools
from typing import Callable, Optional, Sequence

import torch

from ..models import MAMBA2, HybridModel
from ..planner import DTYPE_NAMES, layer_groups
from .decode_cases import GatedDeltaDecodeCase, Mamba2DecodeCase
from .results import plot_speedups
from .timing import POOL_BYTES, REFCHECK_TOL, copy_bandwidth
from .verify_cases import make_verify_case


# step -> (conventional route, replay route); what the table calls them.
STEPS = {"decode": ("decode_step", "replay_step"), "verify": ("snapshot", "replay")}
_BASELINE_LABEL = {"decode": "conventional step", "verify": "snapshot verify"}


def case_geometry(kind: str, geometry) -> tuple:
    """The cases' geometry tuple of a layer: Mamba-2 (nheads, head_dim, d_state, ngroups), GDN /
    KDA (k_heads, v_heads, head_k_dim, head_v_dim)."""
    if kind == MAMBA2:
        return (geometry.nheads, geometry.head_dim, geometry.d_state, geometry.ngroups)
    return (geometry.k_heads, geometry.v_heads, geometry.head_k_dim, geometry.head_v_dim)


def bench_plan(model: HybridModel, batches: Sequence[int], spec_tokens: Optional[int] = None) -> list:
    """What :func:`run_bench` times, in order: (layer group, step, batch) for each SSM layer
    group of ``model`` (one kind and geometry), ``"decode"`` and, with ``spec_tokens``,
    ``"verify"``."""
    steps = ("decode", "verify") if spec_tokens else ("decode",)
    return [(g, step, b) for g in layer_groups(model.ssm_layers) for step in steps for b in batches]


def _timed(case, route, timer):
    seconds, samples = timer(case, route)
    return seconds, [float(s) for s in samples]


def run_bench(
    model: HybridModel,
    *,
    batches: Sequence[int] = (1, 16, 64, 256),
    L: int = 16,
    state_dtype: torch.dtype = torch.float32,
    act_dtype: torch.dtype = torch.bfloat16,
    spec_tokens: Optional[int] = None,
    accept: float = 0.7,
    device="cuda",
    pool_bytes: int = POOL_BYTES,
    copy_bw: Optional[float] = None,
    timer: Optional[Callable] = None,
    progress: bool = True,
    seed: int = 0,
) -> dict:
    """Times the conventional and replay steps of every SSM layer group of ``model`` (one rank's
    geometry) at each batch, and with ``spec_tokens`` T the speculative verify (replay verify +
    commit against snapshot verify + commit; history B = L, window T, accepted tokens drawn with
    mean ``accept`` * T).

    Each case is refchecked first (replay against conventional outputs from one state, through a
    flush); a case over :data:`REFCHECK_TOL` is reported and not timed.

    Args:
        timer: ``timer(case, route) -> (seconds, samples_ms)``; default ``case.time(route)``
            (CUDA graphs: needs a GPU). Tests pass a stand-in to run the rest on a CPU.
        copy_bw: device copy bandwidth, bytes read + written per second (default: measured).
        device, pool_bytes: where the cases live and the state bytes their slot sets fill.

    Returns:
        dict: ``rows`` (one per layer group, step and batch: ``kind``, ``count`` (layers of that
        group), ``geometry``, ``step``, ``batch``, ``conventional_s`` / ``replay_s`` (median
        seconds per step of one layer), ``conventional_samples_ms`` / ``replay_samples_ms``,
        ``conventional_bytes`` / ``replay_bytes`` (modelled bytes per step, the batch),
        ``conventional_pct_copy`` / ``replay_pct_copy``, ``speedup``, ``refcheck``, ``status``
        ("ok", "refcheck failed" or the error that stopped the case), ``accepted_mean`` (verify));
        ``totals`` (per step and batch, all SSM layers: ``conventional_s``, ``replay_s``,
        ``speedup``, for the batches whose every group was timed); ``copy_bytes_per_s``.
    """
    from tqdm import tqdm

    timer = timer or (lambda case, route: case.time(route))
    copy_bw = copy_bandwidth() if copy_bw is None else copy_bw
    plan = bench_plan(model, batches, spec_tokens)
    rows = []
    bar = tqdm(plan, desc="bench", unit="case", disable=not progress, leave=False)
    for group, step, batch in bar:
        geom = case_geometry(group.kind, group.geometry)
        bar.set_postfix_str(f"{group.kind} {step} batch {batch}")
        row = dict(kind=group.kind, count=len(group.indices), geometry=list(geom), step=step, batch=batch, status="ok")
        try:
            if step == "decode":
                case = (
                    Mamba2DecodeCase(geom, batch, L, state_dtype, act_dtype, seed, device, pool_bytes)
                    if group.kind == MAMBA2
                    else GatedDeltaDecodeCase(group.kind, geom, batch, L, state_dtype, act_dtype, seed, device, pool_bytes)
                )
            else:
                case = make_verify_case(
                    group.kind,
                    geom,
                    batch,
                    spec_tokens,
                    L,
                    state_dtype,
                    act_dtype,
                    accept,
                    seed,
                    device=device,
                    pool_bytes=pool_bytes,
                )
                row["accepted_mean"] = case.mean_accepted
            row["refcheck"] = err = case.refcheck()
            if not err <= REFCHECK_TOL:
                row["status"] = f"refcheck failed: {err:.2e} > {REFCHECK_TOL:g}"
            else:
                for name, route in zip(("conventional", "replay"), STEPS[step]):
                    seconds, samples = _timed(case, route, timer)
                    nbytes = case.bytes_per_step(route)
                    row.update(
                        {
                            f"{name}_s": seconds,
                            f"{name}_samples_ms": samples,
                            f"{name}_bytes": nbytes,
                            f"{name}_pct_copy": 100 * nbytes / seconds / copy_bw,
                        }
                    )
                row["speedup"] = row["conventional_s"] / row["replay_s"]
        except (torch.cuda.OutOfMemoryError, ValueError) as e:  # too big for this GPU; a shape the kernels refuse
            row["status"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rows.append(row)
        case = None
        if device != "cpu" and torch.cuda.is_available():
            torch.cuda.empty_cache()
    bar.close()
    return {"rows": rows, "totals": _totals(rows), "copy_bytes_per_s": copy_bw}


def _totals(rows: list) -> list:
    """Per (step, batch): the sum over layer groups of count x per-layer time, both routes."""
    totals = []
    for (step, batch), group in itertools.groupby(
        sorted(rows, key=lambda r: (r["step"], r["batch"])), key=lambda r: (r["step"], r["batch"])
    ):
        group = list(group)
        if any(r["status"] != "ok" for r in group):
            continue
        conv = sum(r["count"] * r["conventional_s"] for r in group)
        rep = sum(r["count"] * r["replay_s"] for r in group)
        totals.append(
            dict(
                step=step,
                batch=batch,
                layers=sum(r["count"] for r in group),
                conventional_s=conv,
                replay_s=rep,
                speedup=conv / rep,
            )
        )
    return sorted(totals, key=lambda t: (list(STEPS).index(t["step"]), t["batch"]))


def _geometry_label(kind: str, geom) -> str:
    names = (
        ("nheads", "head_dim", "d_state", "ngroups") if kind == MAMBA2 else ("k_heads", "v_heads", "head_k_dim", "head_v_dim")
    )
    return ", ".join(f"{n} {v}" for n, v in zip(names, geom))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f}"


def format_bench(
    model: HybridModel,
    result: dict,
    *,
    device_name: str,
    L: int,
    state_dtype: torch.dtype,
    act_dtype: torch.dtype,
    spec_tokens: Optional[int] = None,
    accept: float = 0.7,
) -> str:
    """A readable table of :func:`run_bench`'s figures."""
    rows, totals = result["rows"], result["totals"]
    out = [
        f"trtllm-replayssm bench: {model.name} ({model.family}), TP {model.tp_size}, "
        f"{device_name}, copy {result['copy_bytes_per_s'] / 1e12:.2f} TB/s",
        f"  state {DTYPE_NAMES[state_dtype]}, activations and records {DTYPE_NAMES[act_dtype]}, "
        f"replay L {L}"
        + (f"; speculative: window T {spec_tokens}, history B {L}, {accept:g} T accepted on average" if spec_tokens else ""),
    ]
    for g in layer_groups(model.ssm_layers):
        out.append(f"  {g.kind} x{len(g.indices)}: {_geometry_label(g.kind, case_geometry(g.kind, g.geometry))}")
    out += [
        "",
        "One layer, one step for the batch (CUDA graph, states rotated over >= 512 MiB so that they come from HBM)",
        f"  {'layer':<12}{'step':<8}{'batch':>6}{'conventional us':>17}{'replay us':>12}"
        f"{'speedup':>9}{'%copy conv':>12}{'%copy replay':>14}{'refcheck':>10}",
    ]
    for r in rows:
        head = f"  {r['kind'] + ' x' + str(r['count']):<12}{r['step']:<8}{r['batch']:>6}"
        if r["status"] != "ok":
            out.append(f"{head}  not timed: {r['status']}")
            continue
        out.append(
            f"{head}{_us(r['conventional_s']):>17}{_us(r['replay_s']):>12}"
            f"{r['speedup']:>8.2f}x{r['conventional_pct_copy']:>12.1f}"
            f"{r['replay_pct_copy']:>14.1f}{r['refcheck']:>10.1e}"
        )
    out.append(
        "  (decode: conventional step vs replay step; verify: snapshot verify + commit vs "
        "replay verify + commit, T tokens per row; %copy: modelled bytes / time / copy "
        "bandwidth)"
    )
    if totals:
        n = totals[0]["layers"]
        out += [
            "",
            f"Whole model: all {n} SSM layers, per step (sum of the layers' times; attention and MLP layers not included)",
            f"  {'step':<8}{'batch':>6}{'conventional ms':>17}{'replay ms':>12}{'speedup':>9}",
        ]
        for t in totals:
            out.append(
                f"  {t['step']:<8}{t['batch']:>6}{t['conventional_s'] * 1e3:>17,.3f}"
                f"{t['replay_s'] * 1e3:>12,.3f}{t['speedup']:>8.2f}x"
            )
    return "\n".join(out)


def plot_bench(model: HybridModel, result: dict, path: str, *, device_name: str) -> None:
    """Replay speedup vs batch: a panel per SSM layer group and, with several, one for the whole
    model; a line per step (decode; verify with --spec-tokens)."""
    groups = layer_groups(model.ssm_layers)
    panels = [
        (
            f"{g.kind} x{len(g.indices)} {case_geometry(g.kind, g.geometry)}",
            lambda r, g=g: r.get("kind") == g.kind and r.get("geometry") == list(case_geometry(g.kind, g.geometry)),
        )
        for g in groups
    ]
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    if result["totals"] and len(groups) > 1:
        panels.append(("whole model, all SSM layers", lambda r: "kind" not in r))
        rows += result["totals"]
    plot_speedups(
        rows,
        path,
        panels,
        f"{model.name}, {device_name}",
        series=lambda r: f"{r['step']}: replay vs {_BASELINE_LABEL[r['step']]}",
        ylabel="replay speedup",
    )
