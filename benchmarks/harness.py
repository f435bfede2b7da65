"""Shared pieces of the decode benchmarks: copy bandwidth, slot-set pools, CUDA-graph timing,
results files and plots. Every figure is a median; ratios are taken within one run."""
from __future__ import annotations

import datetime
import json
import math
import os
import statistics
from dataclasses import replace

import torch

from trtllm_replayssm.kernels.common import LaunchConfig

POOL_BYTES = 512 << 20  # state bytes per case, several times the H200's 60 MB L2


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median)."""
    import triton.testing as tt
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = tt.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * (1 << 30) / (ms * 1e-3)


def slot_sets(batch: int, state_bytes_per_row: int, generator) -> list:
    """Disjoint random sets of ``batch`` slots, enough of them that their states fill
    POOL_BYTES: consecutive steps use different sets, so the state comes from HBM as in a real
    model (other layers run in between). The pool has len(sets) * batch slots."""
    sets = max(1, math.ceil(POOL_BYTES / (batch * state_bytes_per_row)))
    perm = torch.randperm(sets * batch, device="cuda", generator=generator).to(torch.int32)
    return [perm[i * batch:(i + 1) * batch].contiguous() for i in range(sets)]


def time_graph(step, sets: list, reps: int = 5):
    """Median per-step seconds of ``step(slot_ids)`` over a CUDA graph of one step per slot
    set (``reps`` medians of do_bench), and the samples in ms."""
    import triton.testing as tt
    for s in sets[:2]:
        step(s)  # compile + warm
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in sets:
            step(s)
    samples = [tt.do_bench(graph.replay, warmup=10, rep=60, return_mode="median") / len(sets)
               for _ in range(reps)]
    del graph
    return statistics.median(samples) * 1e-3, samples


class DecodeCase:
    """Base of a benchmark case. A subclass sets ``cache``, ``slot_sets``, ``L`` and ``out``
    and defines ``step(route, slots, config)`` (``"decode_step"`` runs in place on
    ``conv_state``, ``"replay_step"`` on the cache, output into ``out``) and
    ``conventional(state, slots, out)`` (the conventional step on a given state)."""

    def min_block(self, route) -> int:
        """Fewest state rows per tile ``route``'s kernel takes (``sweep_configs``)."""
        return 1

    def time(self, route, config=None, reps=5):
        """Median per-step seconds (and samples) of ``route`` over the slot sets."""
        return time_graph(lambda slots: self.step(route, slots, config), self.slot_sets, reps)

    def refcheck(self) -> float:
        """Replay vs conventional outputs over L+1 steps from the same state (rel. max
        error); the cache is restored afterwards."""
        c = self.cache
        slots = self.slot_sets[0]
        saved = {k: v.clone() for k, v in vars(c).items()}
        c.cursor[slots.long()] = 0
        state = c.checkpoint.clone()
        worst = 0.0
        for _ in range(self.L + 1):
            y_conv = torch.empty_like(self.out)
            self.conventional(state, slots, y_conv)
            self.step("replay_step", slots)
            worst = max(worst, float((self.out.float() - y_conv.float()).abs().max() /
                                     y_conv.float().abs().max()))
        for k, v in saved.items():
            getattr(c, k).copy_(v)
        return worst


def header(name: str, copy_bw: float) -> str:
    import triton
    return (f"# bench {name} | {datetime.date.today()} | {torch.cuda.get_device_name()} | "
            f"torch {torch.__version__} | triton {triton.__version__} | copy {copy_bw / 1e12:.2f} TB/s")


def results_stem(out_dir: str, name: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    gpu = torch.cuda.get_device_name().split()[-1].lower()
    return os.path.join(out_dir, f"{datetime.date.today()}-{gpu}-{name}")


def write_json(stem: str, copy_bw: float, rows: list, **meta) -> None:
    import triton
    with open(stem + ".json", "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), date=str(datetime.date.today()),
                       torch=torch.__version__, triton=triton.__version__,
                       copy_bytes_per_s=copy_bw, **meta, rows=rows), f, indent=1)


def plot_speedups(rows: list, path: str, panels: list, title: str) -> None:
    """One panel per (label, predicate on rows); a line per L of replay speedup vs batch."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (label, keep) in zip(axes[0], panels):
        sel = [r for r in rows if keep(r) and r["route"] == "replay_step"]
        for L in sorted({r["L"] for r in sel}):
            pts = sorted((r["batch"], r["speedup"]) for r in sel if r["L"] == L)
            ax.plot(*zip(*pts), marker="o", label=f"replay L={L}")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_title(f"{title}\n{label}", fontsize=9)
        ax.legend()
    axes[0][0].set_ylabel("speedup vs conventional kernel")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def run_table(make_case, args, copy_bw: float) -> list:
    """Time the conventional and replay routes for every (state, L, batch) of ``args``; print
    a table and return its rows. ``make_case(batch, L, state)`` builds a case with
    ``refcheck()``, ``time(route)`` and ``bytes_per_step(route)``. The conventional route is
    timed once per (state, batch) and shared by the L values."""
    rows = []
    routes = ["decode_step", "replay_step"]
    print(f"{'state':>5} {'L':>3} {'batch':>6} {'route':>12} {'us/step':>9} {'GB/s':>7} {'%copy':>6} {'speedup':>8} {'refcheck':>9}")
    for state in args.state:
        for L in args.L:
            for batch in args.batch:
                case = make_case(batch, L, state)
                err = case.refcheck()
                if err > 5e-2:
                    print(f"# refcheck failed for state={state} L={L} batch={batch}: {err:.2e}; skipped")
                    continue
                times = {}
                for route in routes:
                    if route != "replay_step" and L != args.L[0]:
                        times[route] = next(r["seconds"] for r in rows if r["route"] == route and
                                            r["state"] == state and r["batch"] == batch)
                        continue
                    t, samples = case.time(route)
                    times[route] = t
                    gbs = case.bytes_per_step(route) / t / 1e9
                    rows.append(dict(state=state, act=args.act, L=L, batch=batch, route=route,
                                     seconds=t, samples_ms=samples, gbps=gbs,
                                     pct_copy=100 * gbs * 1e9 / copy_bw,
                                     speedup=None, refcheck=err))
                for r in rows:
                    if r["state"] == state and r["L"] == L and r["batch"] == batch:
                        r["speedup"] = times["decode_step"] / r["seconds"]
                        print(f"{state:>5} {L:>3} {batch:>6} {r['route']:>12} {r['seconds']*1e6:9.2f} "
                              f"{r['gbps']:7.0f} {r['pct_copy']:6.1f} {r['speedup']:8.3f} {err:9.1e}")
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


def add_max_registers_argument(ap) -> None:
    """--max-registers, the register caps a sweep adds (``sweep_configs``)."""
    ap.add_argument("--max-registers", type=int, nargs="*", default=[],
                    help="with --sweep: also try each one-warp configuration capped at these registers per thread")


def add_sweep_arguments(ap) -> None:
    """--sweep [ROUTE] and --max-registers, shared by the decode benchmarks."""
    ap.add_argument("--sweep", nargs="?", const="replay_step", default=None, choices=("replay_step", "decode_step"),
                    help="time every launch configuration of ROUTE (default replay_step) instead")
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
            res = {cfg: case.time(route, cfg, reps=3)[0]
                   for cfg in sweep_configs(case.rows, args.max_registers, route, case.min_block(route))}
            d = case.default_config(route)
            d_t = res[d] if d in res else case.time(route, d, reps=3)[0]
            k = min(res, key=res.get)
            print(f"{state:>5} {batch:>6} {args.L[0]:>3} {k.label():>22} {res[k]*1e6:8.2f} {d.label():>22} {d_t*1e6:8.2f}")
            print("   all (block,warps,chunks,stages[,r<max registers>]:us): " +
                  " ".join(f"{c.label()}:{t*1e6:.1f}" for c, t in sorted(res.items(), key=lambda kv: kv[1])))
            del case
            torch.cuda.empty_cache()
