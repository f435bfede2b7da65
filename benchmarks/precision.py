"""Drift of narrow states and checkpoints (issue 25's study): over a long decode, the output and
state error of each path against the float64 recurrence, for the conventional step (its state
stored in the dtype, so rounded every step) and the replay step (its checkpoint stored in the
dtype, rounded once per flush; records in the activation dtype, bf16), per checkpoint dtype and
L, on the SSM geometry of each preset model (one layer, ``--batch`` sequences).

    python benchmarks/precision.py --steps 4096 --L 8 16 32 64 --dtypes fp32 bf16 fp16 --out-dir benchmarks/results
    python benchmarks/precision.py --L 16 --dtypes bf16 --simulate bf16-sr fp8-row fp8-row-sr

Truth: the conventional recurrence in float64 (the project's reference implementation, plain
torch, on the study's device), fed the same (bf16-rounded) activations, so activation rounding
is not counted as drift. Errors: max |y - y64| / max |y64|
over the batch every step (y is bf16, as the ops return it: its rounding, ~2e-3 to 4e-3, is a
floor under every path's output error); the state's max |S - S64| / max |S64| at powers of two
and the last step (replay: checkpoint with its records folded in, ``replay_cache_state``). GDN /
KDA replay with bf16 records carries their rounding at every dtype (``--record-dtype fp32``
removes it; docs/benchmarks.md, "Accuracy").

Inputs are synthetic: no pretrained checkpoint is loaded. The per-head parameters are those of
the project's random-weight layers (``trtllm_replayssm.tp.layers.random_weights``: A_log =
log U(1, 16), dt_bias = softplus^-1 of U(1e-3, 1e-1), Mamba-2's D = U(0.5, 1.5)), the ranges
of the published initialisations, not trained weights; projections (raw dt, x, B, C; q, k, v,
a, b) are N(0, 1), q and k l2-normalised by the step. Drift depends on these statistics, so the figures
compare paths with one another, not with a served model.

On a GPU the steps run the project's kernels (the ops' routes); on the CPU, its references
(slow: small ``--steps`` only).

``--simulate FORMAT ...`` adds paths for storage formats the kernels do not have yet (issue 25:
stochastic rounding, fp8 with a scale per row; ``trtllm_replayssm.reference.rounding``):
``conventional <format> (sim)``, the float64 recurrence with its state rounded to the format
after every step, and ``replay <format> L<L> (sim)``, the float64 replay reference (records as
the kernels store them) with its checkpoint rounded to the format at every flush. Their draws
come from a generator seeded with ``--seed``. Writes ``<date>-<gpu>-precision.{json,png}`` with ``--out-dir``.
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
from typing import Callable, Dict, List, Sequence

import torch

from tqdm import tqdm

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

from trtllm_replayssm import ops  # noqa: E402
from trtllm_replayssm.checks import SlotBatch  # noqa: E402
from trtllm_replayssm.models import KDA, MAMBA2, PRESETS, DeltaRuleGeometry, Mamba2Geometry, load_model  # noqa: E402
from trtllm_replayssm.reference.gated_delta import gated_delta_decode_step_ref, gated_delta_replay_step_ref  # noqa: E402
from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref, mamba2_replay_step_ref  # noqa: E402
from trtllm_replayssm.reference.rounding import format_names, quantize  # noqa: E402
from trtllm_replayssm.tp.layers import random_weights  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ACT = torch.bfloat16


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
    replay: Callable  # (cache, inputs, params, slot ids or SlotBatch) -> y
    replay_reference: Callable  # (float64 cache, inputs, float64 params, slots) -> y: the reference, any device
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

    def kw(inp, p, slots):
        return dict(slot_ids=slots, D=p["D"], dt_bias=p["dt_bias"])

    def truth(S, i, p, s):
        out = torch.empty_like(i["x"])
        return mamba2_decode_step_ref(S, i["x"], i["dt"], p["A"], i["B"], i["C"], out=out, **kw(i, p, s))

    def replay_reference(c, i, p, s):
        out = torch.empty(i["x"].shape, dtype=torch.float64, device=i["x"].device)
        records = (c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor)
        return mamba2_replay_step_ref(*records, i["x"], i["dt"], p["A"], i["B"], i["C"], out=out, **kw(i, p, s))

    return Family(
        MAMBA2,
        geometry.state_dims,
        params,
        inputs,
        lambda S, i, p, s: ops.mamba2_decode_step(S, i["x"], i["dt"], p["A"], i["B"], i["C"], **kw(i, p, s)),
        truth,
        lambda n, L, dt, dev: ops.Mamba2ReplayCache.allocate(n, H, P, N, G, L, state_dtype=dt, act_dtype=ACT, device=dev),
        lambda c, i, p, s: ops.mamba2_replay_step(c, i["x"], i["dt"], p["A"], i["B"], i["C"], **kw(i, p, s)),
        replay_reference,
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

    def replay_reference(c, i, p, s):
        out = torch.empty(i["v"].shape, dtype=torch.float64, device=i["v"].device)
        records = (c.checkpoint, c.d_records, c.k_records, c.g_records, c.cursor)
        return gated_delta_replay_step_ref(*records, *args(i), slot_ids=s, scale=K**-0.5, use_qk_l2norm=True, out=out)

    return Family(
        kind,
        geometry.state_dims,
        params,
        inputs,
        lambda S, i, p, s: decode(S, *args(i), slot_ids=s),
        truth,
        lambda n, L, dt, dev: cache_type.allocate(n, Hk, Hv, K, V, L, state_dtype=dt, record_dtype=record_dtype, device=dev),
        lambda c, i, p, s: replay(c, *args(i), slot_ids=s),
        replay_reference,
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
    """Steps (1-based) at which states are compared: powers of two, and the last."""
    return sorted({2**i for i in range(int(math.log2(steps)) + 1)} | {steps})


def study(family: Family, dtypes: Sequence[str], Ls: Sequence[int], steps: int, batch: int, device, seed: int = 0,
          progress: bool = False, formats: Sequence[str] = ()) -> Dict[str, dict]:  # fmt: skip
    """Run one layer for ``steps`` steps along every path; returns {path: {"y": [error per step],
    "state": {step: error}}} with paths ``conventional <dtype>`` and ``replay <dtype> L<L>``
    (the kernels), and for each of ``formats`` (``reference.rounding.format_names``)
    ``conventional <format> (sim)`` and ``replay <format> L<L> (sim)``. Every path's outputs
    are compared as the ops return them, in the activation dtype."""
    gen = torch.Generator(device=device).manual_seed(seed)
    draws = torch.Generator(device=device).manual_seed(seed + 1)  # the simulated formats' rounding
    params = family.make_params(seed, device)
    slots = torch.arange(batch, dtype=torch.int32, device=device)
    # The ops' slot ids checked once: a tensor would cost each op call a host sync (15 a step
    # with three dtypes and four L).
    op_slots = SlotBatch(slots, batch)
    rows = slots.long()
    # Fresh sequences (zero state): the error measured is what the steps add, not the rounding
    # of a starting state that the dtypes would store differently.
    init = torch.zeros(batch, *family.dims, device=device)
    truth_state = init.double()
    truth_params = _to(params, device, torch.float64)
    paths: Dict[str, dict] = {}
    for name in dtypes:
        dt = DTYPES[name]
        paths[f"conventional {name}"] = dict(state=init.to(dt), y=[], errors={})
        for L in Ls:
            cache = family.allocate(batch, L, dt, device)
            cache.admit(slots, init.to(dt))
            paths[f"replay {name} L{L}"] = dict(cache=cache, y=[], errors={})
    for fmt in formats:
        paths[f"conventional {fmt} (sim)"] = dict(state64=init.double(), fmt=fmt, y=[], errors={})
        for L in Ls:
            cache = family.allocate(batch, L, torch.float64, device)
            cache.admit(slots, init.double())
            paths[f"replay {fmt} L{L} (sim)"] = dict(cache64=cache, fmt=fmt, L=L, y=[], errors={})
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
                y = family.replay(path["cache"], inp, params, op_slots)
            elif "state64" in path:  # the state stored in the format after every step
                y = family.truth(path["state64"], inp64, truth_params, slots).to(ACT)
                path["state64"].copy_(quantize(path["state64"], path["fmt"], draws))
            else:  # the checkpoint stored in the format at every flush
                c = path["cache64"]
                flush = (c.cursor[rows] == path["L"] - 1).view(-1, *(1,) * len(family.dims))
                y = family.replay_reference(c, inp, truth_params, slots).to(ACT)
                ckpt = c.checkpoint[rows]
                c.checkpoint[rows] = torch.where(flush, quantize(ckpt, path["fmt"], draws), ckpt)
            path["y"].append(rel_err(y, y64))
            if step in at:
                path["errors"][step] = rel_err(_state(family, path, params, truth_params, slots), truth_state)
    # Errors stay on the device during the run: one host transfer per path at the end.
    return {
        name: dict(
            y=torch.stack(p["y"]).tolist(), state=dict(zip(p["errors"], torch.stack(list(p["errors"].values())).tolist()))
        )
        for name, p in paths.items()
    }


def _state(family: Family, path: dict, params: dict, params64: dict, slots) -> torch.Tensor:
    """The state a path holds now (a replay path's: checkpoint with its records folded in)."""
    if "state" in path or "state64" in path:
        return path.get("state", path.get("state64"))
    if "cache" in path:
        return family.cache_state(path["cache"], params, slots)
    return family.cache_state(path["cache64"], params64, slots)


def summary_rows(model: str, result: Dict[str, dict]) -> List[dict]:
    """One row per path: the final state error and the worst output error of the last tenth."""
    rows = []
    for path, r in result.items():
        tail = r["y"][-max(1, len(r["y"]) // 10) :]
        last = max(r["state"])
        rows.append(dict(model=model, path=path, steps=len(r["y"]), y_err_tail=max(tail), state_err=r["state"][last]))
    return rows


def plot(results: Dict[str, Dict[str, dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(9, 3.2 * len(results)), squeeze=False)
    colors = {"fp32": "tab:blue", "bf16": "tab:orange", "fp16": "tab:green", "bf16-sr": "tab:red",
              "fp16-sr": "tab:olive", "fp8-row": "tab:purple", "fp8-row-sr": "tab:brown"}  # fmt: skip
    styles = {("conventional", False): "--", ("replay", False): "-", ("conventional", True): "-.", ("replay", True): ":"}
    for ax, (model, result) in zip(axes[:, 0], results.items()):
        for name, r in result.items():
            kind, dtype = name.split()[:2]
            xs = sorted(r["state"])
            ax.plot(xs, [max(r["state"][x], 1e-12) for x in xs], label=name, color=colors.get(dtype),
                    linestyle=styles[kind, name.endswith("(sim)")], marker="o" if kind == "conventional" else None)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{model}: state error vs float64 (max |S - S64| / max |S64|)")
        ax.set_xlabel("decode step")
        ax.legend(fontsize=6, ncol=3)
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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=sorted(PRESETS), help="preset model names (first SSM layer of each)")
    ap.add_argument("--dtypes", nargs="+", default=["fp32", "bf16", "fp16"], choices=sorted(DTYPES))
    ap.add_argument("--L", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--steps", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--record-dtype", default="bf16", choices=["bf16", "fp32"], help="GDN/KDA d and k records")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--simulate", nargs="*", default=[], choices=format_names(), metavar="FORMAT",
                    help=f"storage formats simulated on the float64 reference, from {', '.join(format_names())}")  # fmt: skip
    ap.add_argument("--out-dir", default=None, help="write <date>-<gpu>-precision.{json,png} there")
    args = ap.parse_args(argv)
    results, rows = {}, []
    for model in args.models:
        result = study(
            family_of(model, DTYPES[args.record_dtype]),
            args.dtypes,
            args.L,
            args.steps,
            args.batch,
            args.device,
            args.seed,
            True,
            args.simulate,
        )
        results[model] = result
        rows += summary_rows(model, result)
    print(f"{'model':<22} {'path':<28} {'steps':>6} {'y err (last 10%)':>17} {'state err':>10}")
    for r in rows:
        print(f"{r['model']:<22} {r['path']:<28} {r['steps']:>6} {r['y_err_tail']:17.2e} {r['state_err']:10.2e}")
    if args.out_dir:
        device = torch.cuda.get_device_name() if torch.device(args.device).type == "cuda" else "cpu"
        os.makedirs(args.out_dir, exist_ok=True)
        stem = os.path.join(args.out_dir, f"{datetime.date.today()}-{device.split()[-1].lower()}-precision")
        meta = dict(device=device, date=str(datetime.date.today()), torch=torch.__version__, args=vars(args))
        with open(stem + ".json", "w") as f:
            json.dump(dict(meta, rows=rows, results=results), f, indent=1)
        if importlib.util.find_spec("matplotlib") is None:
            print(f"# wrote {stem}.json; no plot: matplotlib is not installed (pip install -e '.[bench]')")
        else:
            plot(results, stem + ".png")
            print(f"# wrote {stem}.json/.png")
    return rows


if __name__ == "__main__":
    main()
