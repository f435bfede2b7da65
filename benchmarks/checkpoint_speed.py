"""Every checkpoint dtype's decode step, against the fp32 conventional step and against the
conventional step at the same dtype, in the same run (GPU).

Per (family, batch): one case per checkpoint dtype (the package's decode cases: a >= 512 MiB slot
pool rotated across steps, replay cursors spread over [0, L) and advancing), the conventional
and the replay step of each captured in CUDA graphs and timed in interleaved rounds
(benchmarks/peers_mamba2.py's ``time_interleaved``), so every ratio of a row is same-run; each row
also gives its rounds' spread (max / min - 1).
bf16 activations; GDN/KDA bf16 records. The states also take ``fp8`` (replay only: there is no
conventional fp8 step) and ``bf16-sr``, ``f16-sr``, ``fp8-sr`` (the replay step rounding its
flushes stochastically; "same conv" is the conventional step of the dtype without ``-sr``).

    python benchmarks/checkpoint_speed.py --family mamba2 gdn kda --batch 1 16 64 256 512
    python benchmarks/checkpoint_speed.py --state f32 bf16 fp8 bf16-sr fp8-sr --batch 256 512
"""

from __future__ import annotations

import argparse
import os
import sys

from functools import partial

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import copy_bandwidth, header, results_stem, write_json  # noqa: E402
from peers_mamba2 import Route, capture, round_spread, time_interleaved  # noqa: E402
from trtllm_replayssm.bench import GatedDeltaDecodeCase, Mamba2DecodeCase  # noqa: E402

# The preset geometries at TP = 1: Nemotron-3-Super (Mamba-2), Qwen3.5-122B-A10B (GDN), Kimi Linear (KDA).
CASES = {
    "mamba2": lambda batch, L, state: Mamba2DecodeCase((128, 64, 128, 8), batch, L, dtype_of(state), "bf16", **_sr(state)),
    "gdn": lambda batch, L, state: GatedDeltaDecodeCase(
        "gdn", (16, 64, 128, 128), batch, L, dtype_of(state), "bf16", **_sr(state)
    ),
    "kda": lambda batch, L, state: GatedDeltaDecodeCase(
        "kda", (32, 32, 128, 128), batch, L, dtype_of(state), "bf16", **_sr(state)
    ),
}
ROUTES = {"conventional": "decode_step", "replay": "replay_step"}
STATES = ("f32", "bf16", "f16")  # with a conventional step of their own
OTHER_STATES = ("fp8", "bf16-sr", "f16-sr", "fp8-sr")  # the replay steps' besides


def _sr(state: str) -> dict:
    """The decode case's rounding seed for a state name (``-sr``: stochastic rounding)."""
    return dict(rounding_seed=1 if state.endswith("-sr") else None)


def dtype_of(state: str) -> str:
    """The checkpoint dtype of a state name (``"bf16-sr"`` -> ``"bf16"``)."""
    return state[: -len("-sr")] if state.endswith("-sr") else state


def has_conventional(state: str) -> bool:
    """Whether a state name times its own conventional step (not fp8, none exists; not the
    ``-sr`` ones, whose conventional step is their dtype's)."""
    return state in STATES


def group_routes(cases: dict) -> dict:
    """``"<route> <state>"`` -> Route of that case's steps over its slot sets."""
    return {
        f"{name} {state}": Route([partial(case.step, step, s) for s in case.slot_sets])
        for state, case in cases.items()
        for name, step in ROUTES.items()
        if name == "replay" or has_conventional(state)
    }


def ratio_rows(times: dict, key: dict) -> list:
    """One row per timed route: seconds, the rounds' spread (:func:`round_spread`), and the speedup
    over the fp32 conventional step and over the conventional step of the same checkpoint dtype
    (both from ``times``: same run; None where not timed)."""
    rows = []
    for name, (seconds, samples) in times.items():
        route, state = name.split()
        same = times.get(f"conventional {dtype_of(state)}", (None,))[0]
        fp32 = times.get("conventional f32", (None,))[0]
        rows.append(
            dict(
                key,
                route=route,
                state=state,
                seconds=seconds,
                samples_ms=samples,
                spread=round_spread(samples),
                vs_fp32_conventional=None if fp32 is None else fp32 / seconds,
                vs_same_dtype_conventional=None if same is None else same / seconds,
            )
        )
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--state", nargs="+", default=list(STATES), choices=list(STATES + OTHER_STATES))
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("checkpoint_speed: needs a CUDA GPU")
    copy_bw = copy_bandwidth()
    print(header("checkpoint_speed", copy_bw))
    print(
        f"{'family':>7} {'batch':>6} {'route':>13} {'state':>7} {'us/step':>9} {'spread%':>7} {'x fp32 conv':>11} "
        f"{'x same conv':>11}"
    )
    rows = []
    for family in args.family:
        for batch in args.batch:
            cases = {state: CASES[family](batch, args.L, state) for state in args.state}
            routes = group_routes(cases)
            graphs = {name: capture(r) for name, r in routes.items()}
            times = time_interleaved(graphs, {n: len(routes[n].steps) for n in graphs})
            for r in ratio_rows(times, dict(family=family, batch=batch, L=args.L)):
                rows.append(r)
                fp32, same = (
                    "-" if r[k] is None else f"{r[k]:.3f}" for k in ("vs_fp32_conventional", "vs_same_dtype_conventional")
                )
                spread = "-" if r["spread"] is None else f"{100 * r['spread']:.2f}"
                print(
                    f"{family:>7} {batch:>6} {r['route']:>13} {r['state']:>7} {r['seconds'] * 1e6:9.2f} {spread:>7} "
                    f"{fp32:>11} {same:>11}"
                )
            del cases, graphs
            torch.cuda.empty_cache()
    stem = results_stem(args.out_dir, "checkpoint_speed")
    write_json(stem, copy_bw, rows, L=args.L)
    print(f"# wrote {stem}.json")
    print("# repro: python benchmarks/checkpoint_speed.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
