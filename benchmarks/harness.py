"""Shared pieces of the decode benchmarks: their table and launch-configuration sweeps. Copy bandwidth, slot-set pools, CUDA-graph timing, the cases, results files
and plots live in the package (``trtllm_replayssm.bench``, which ``trtllm-replayssm bench`` runs)
and are imported from there. Every figure is a median; ratios are taken within one run."""

from __future__ import annotations

import argparse
import contextlib
import os

from dataclasses import replace

import torch

from trtllm_replayssm.bench import (
    POOL_BYTES,
    REFCHECK_TOL,
    DecodeCase,
    copy_bandwidth,
    header,
    plot_speedups,
    results_stem,
    slot_sets,
    time_graph,
    write_json,
)
from trtllm_replayssm.kernels.common import LaunchConfig

# The package's timing pieces are re-exported: the benchmark scripts import them from here.
__all__ = [
    "POOL_BYTES",
    "REFCHECK_TOL",
    "DecodeCase",
    "copy_bandwidth",
    "header",
    "plot_speedups",
    "results_stem",
    "slot_sets",
    "time_graph",
    "write_json",
    "run_table",
    "sweep_configs",
    "add_max_registers_argument",
    "add_sweep_arguments",
    "run_sweep",
    "kernel_source",
]


def run_table(make_case, args, copy_bw: float) -> list:
    """Time the conventional and replay routes for every (state, L, batch) of ``args``; print
    a table and return its rows. ``make_case(batch, L, state)`` builds a case with
    ``refcheck()``, ``time(route)`` and ``bytes_per_step(route)``. The conventional route is
    timed once per (state, batch) and shared by the L values."""
    rows = []
    routes = ["decode_step", "replay_step"]
    print(
        f"{'state':>5} {'L':>3} {'batch':>6} {'route':>12} {'us/step':>9} {'GB/s':>7} {'%copy':>6} {'speedup':>8} {'refcheck':>9}"
    )
    for state in args.state:
        for L in args.L:
            for batch in args.batch:
                case = make_case(batch, L, state)
                err = case.refcheck()
                if err > REFCHECK_TOL:
                    print(f"# refcheck failed for state={state} L={L} batch={batch}: {err:.2e}; skipped")
                    continue
                times = {}
                for route in routes:
                    if route != "replay_step" and L != args.L[0]:
                        times[route] = next(
                            r["seconds"] for r in rows if r["route"] == route and r["state"] == state and r["batch"] == batch
                        )
                        continue
                    t, samples = case.time(route)
                    times[route] = t
                    gbs = case.bytes_per_step(route) / t / 1e9
                    rows.append(
                        dict(
                            state=state,
                            act=args.act,
                            L=L,
                            batch=batch,
                            route=route,
                            seconds=t,
                            samples_ms=samples,
                            gbps=gbs,
                            pct_copy=100 * gbs * 1e9 / copy_bw,
                            speedup=None,
                            refcheck=err,
                        )
                    )
                for r in rows:
                    if r["state"] == state and r["L"] == L and r["batch"] == batch:
                        r["speedup"] = times["decode_step"] / r["seconds"]
                        print(
                            f"{state:>5} {L:>3} {batch:>6} {r['route']:>12} {r['seconds'] * 1e6:9.2f} "
                            f"{r['gbps']:7.0f} {r['pct_copy']:6.1f} {r['speedup']:8.3f} {err:9.1e}"
                        )
                del case
                torch.cuda.empty_cache()
    return rows


def sweep_configs(head_dim: int, max_registers=(), route: str = "replay_step", min_block: int = 1) -> list:
    """Launch configurations tried by --sweep (``head_dim``: the state rows of one head; tiles
    of fewer than ``min_block`` rows left out, for kernels whose tiles are tensor-core operands).

    ``"replay_step"``: one tile per program, or one head per program in a loop pipelined 1 to 4
    deep (depth 1: no shared-memory staging, which can cap occupancy before registers do).
    ``"decode_step"`` (conventional read-modify-write): one tile per program, 4 to 32 rows, one
    to eight warps. Then each one-warp configuration again with each register cap in
    ``max_registers`` (--max-registers)."""
    if route == "decode_step":
        cfgs = [LaunchConfig(b, w) for b in (4, 8, 16, 32) for w in (1, 2, 4, 8) if b <= head_dim]
    else:
        cfgs = [LaunchConfig(b, w) for b in (8, 16, 32) for w in (1, 2, 4) if min_block <= b <= head_dim]
        for b in (b for b in (8, 16) if b >= min_block):
            chunks = -(-head_dim // b)
            cfgs += [LaunchConfig(b, w, chunks, s) for w in (1, 2, 4) for s in (1, 2, 3, 4)]
        cfgs = list(dict.fromkeys(cfgs))  # a head of one tile: its loop is the single tile
    return cfgs + [replace(c, max_registers=r) for r in max_registers for c in cfgs if c.num_warps == 1]


def launch_config_arg(text: str) -> LaunchConfig:
    """argparse type: ``block,warps,chunks,stages[,rN]`` (:meth:`LaunchConfig.label`) -> LaunchConfig."""
    parts = text.split(",")
    cap = parts.pop() if len(parts) == 5 and parts[-1][:1] == "r" else None
    if len(parts) != 4 or not all(p.isdigit() for p in parts) or (cap is not None and not cap[1:].isdigit()):
        raise argparse.ArgumentTypeError(f"launch configuration {text!r}: expected block,warps,chunks,stages[,rN]")
    block, warps, chunks, stages = (int(p) for p in parts)
    return LaunchConfig(block, warps, chunks, stages, int(cap[1:]) if cap else None)


def add_max_registers_argument(ap) -> None:
    """--max-registers, the register caps a sweep adds (``sweep_configs``)."""
    ap.add_argument(
        "--max-registers",
        type=int,
        nargs="*",
        default=[],
        help="with --sweep: also try each one-warp configuration capped at these registers per thread",
    )


def add_sweep_arguments(ap) -> None:
    """--sweep [ROUTE] and --max-registers, shared by the decode benchmarks."""
    ap.add_argument(
        "--sweep",
        nargs="?",
        const="replay_step",
        default=None,
        choices=("replay_step", "decode_step"),
        help="time every launch configuration of ROUTE (default replay_step) instead",
    )
    add_max_registers_argument(ap)


def run_sweep(make_case, args) -> None:
    """Time every launch configuration of route ``args.sweep`` for each (state, batch) at
    L = args.L[0] and print the best next to the default (``case.default_config``)."""
    route = args.sweep
    print(f"# sweep of {route}")
    print(f"{'state':>5} {'batch':>6} {'L':>3} {'best':>22} {'us':>8} {'default':>22} {'us':>8}")
    for state in args.state:
        for batch in args.batch:
            case = make_case(batch, args.L[0], state)
            res = {
                cfg: case.time(route, cfg, reps=3)[0]
                for cfg in sweep_configs(case.rows, args.max_registers, route, case.min_block(route))
            }
            d = case.default_config(route)
            d_t = res[d] if d in res else case.time(route, d, reps=3)[0]
            k = min(res, key=res.get)
            print(f"{state:>5} {batch:>6} {args.L[0]:>3} {k.label():>22} {res[k] * 1e6:8.2f} {d.label():>22} {d_t * 1e6:8.2f}")
            print(
                "   all (block,warps,chunks,stages[,r<max registers>]:us): "
                + " ".join(f"{c.label()}:{t * 1e6:.1f}" for c, t in sorted(res.items(), key=lambda kv: kv[1]))
            )
            del case
            torch.cuda.empty_cache()


def add_baseline_arguments(ap, parse_config) -> None:
    """The probes' ``--baseline CU`` (another copy of the kernel source, :func:`kernel_source`) and
    ``--baseline-configs`` (the configurations timed with it; default: all of ``--configs``)."""
    ap.add_argument("--baseline", metavar="CU", default=None, help="another kernel source: each config timed with it too")
    ap.add_argument(
        "--baseline-configs",
        type=parse_config,
        nargs="+",
        default=None,
        help="the configs timed with --baseline (default: all)",
    )


def baseline_runs(ap, args) -> list:
    """[(config, tag, source)]: every ``--configs`` entry with the working tree's kernel (tag "",
    source None), then the ``--baseline-configs`` (default: all) with ``--baseline``'s, tagged
    " @base". ``--baseline-configs`` without ``--baseline`` is refused (``ap.error``: exit 2)."""
    if args.baseline_configs is not None and args.baseline is None:
        ap.error("--baseline-configs needs --baseline")
    runs = [(c, "", None) for c in args.configs]
    if args.baseline:
        runs += [(c, " @base", args.baseline) for c in args.baseline_configs or args.configs]
    return runs


@contextlib.contextmanager
def kernel_source(launcher_module, path, loaded: dict):
    """Inside: the CUDA launcher module ``launcher_module`` (kernels.mamba2_replay_cuda or
    kernels.gated_delta_replay_cuda) loads its kernels from the source file at ``path`` (None: its
    own; e.g. a revision exported by scripts/export_variant.sh, with the same kernel parameters);
    ``loaded`` maps each entry loaded to its kernel. The source compiles with the headers beside
    it (an exported revision's own)."""
    real = launcher_module.load_kernel

    def load(name, entry, defines, device, smem, **kwargs):
        loaded[entry] = real(name if path is None else os.path.abspath(path), entry, defines, device, smem, **kwargs)
        return loaded[entry]

    launcher_module.load_kernel = load
    try:
        yield
    finally:
        launcher_module.load_kernel = real
