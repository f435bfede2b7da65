"""Speculative verify step of one SSM layer (T tokens per row) for Mamba-2, GDN and KDA:
ReplaySSM verify + commit vs the conventional snapshot verify + commit, and vs T serial
conventional decode steps (GPU).

Protocol as benchmarks/mamba2_decode.py: every route's step is captured in a CUDA graph (one
step per slot set, the sets rotated over >= 512 MiB of state so that it comes from HBM), timed
as the median of 5 do_bench medians; ratios are taken within one run; a refcheck of the three
routes on the benchmark inputs (from one state, through a flush) precedes the timing. Accepted
counts are drawn per row as 1 + Binomial(T - 1, p) with mean --accept * T (default 0.7 T) and
stay fixed per slot set, so replay cursors (started spread over [0, B)) advance every replay
and rows flush at their real share. Bytes come from trtllm_replayssm.memory.

    python benchmarks/spec_verify.py                  # all families, T 2 4 8, batch 16 64 256 512, fp32 checkpoint, B 16
    python benchmarks/spec_verify.py --family gdn --T 4 --batch 256
    python benchmarks/spec_verify.py --sweep --T 4 --batch 16 256   # replay launch configurations
    python benchmarks/spec_verify.py --sweep --family kda --T 4 --batch 16 --configs 16,1,4,2 16,1,1,1
    python benchmarks/spec_verify.py --sweep --flush-launch --family gdn kda --T 4 --batch 16 --configs 16,1,1,1 16,1,2,1
    python benchmarks/spec_verify.py --family gdn --T 4 --batch 16 32 64 --history-product off
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import (
    add_max_registers_argument,
    launch_config_arg,
    copy_bandwidth,
    header,
    results_stem,
    sweep_configs,
    write_json,
)

# The cases (inputs, caches, the three routes, refcheck, bytes) are the package's, which
# trtllm-replayssm bench --spec-tokens T times too.
from trtllm_replayssm.bench import (
    DT,
    REFCHECK_TOL,
    VERIFY_ROUTES as ROUTES,
    make_verify_case as make_case,
    model_geometry,
)
from trtllm_replayssm.kernels.common import KERNELS
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.memory import ssm_layer_bytes
from trtllm_replayssm.models import GDN, KDA, MAMBA2
from trtllm_replayssm.ops import spec_buffer_len

# Issue 24's targets at T = 4 and batch >= 256, fp32 checkpoint: family -> speedup over each baseline.
TARGETS = {
    MAMBA2: {"snapshot": 4.0, "serial": 4.5},
    GDN: {"snapshot": 4.0, "serial": 4.5},
    KDA: {"snapshot": 3.2, "serial": 3.6},
}
# Default geometries (TP=1): Mamba-2 (nheads, head_dim, d_state, ngroups) of Nemotron-3-Super;
# GDN / KDA (k_heads, v_heads, head_k_dim, head_v_dim) of Qwen3.5-122B and Kimi Linear.
GEOMETRIES = {MAMBA2: (128, 64, 128, 8), GDN: (16, 64, 128, 128), KDA: (32, 32, 128, 128)}
HISTORY_PRODUCT = {"rule": None, "on": True, "off": False}  # --history-product -> the launcher's argument


def make_family_case(args, family: str, geom, batch: int, T: int):
    """The verify case of one (family, T, batch) point, with --kernel set and --history-product
    set for GDN/KDA."""
    case = make_case(family, geom, batch, T, args.B, args.state, args.act, args.accept)
    case.kernel = args.kernel[0]
    if family != MAMBA2:
        case.history_product = HISTORY_PRODUCT[args.history_product]
    return case


def layer_bytes(family: str, geom, B: int, T: int, state, act):
    """Per sequence per layer, SSM cache only (the conv state is the same in both schemes):
    (snapshot baseline, replay) bytes from the memory model."""
    kw = dict(buffer_len=B, spec_tokens=T, state_dtype=state, record_dtype=act, conv_dtype=act)
    snap = ssm_layer_bytes(family, model_geometry(family, geom), "conventional_spec", **kw)
    rep = ssm_layer_bytes(family, model_geometry(family, geom), "replay_spec", **kw)
    return snap.total - snap.conv, rep.total - rep.conv


def run(args, copy_bw):
    """Every (family, T, batch) case: the three routes, the replay route once per --kernel (each
    refchecked; a row's ``kernel`` says which), printed and returned as rows."""
    rows = []
    print(
        f"{'family':>6} {'T':>2} {'batch':>6} {'route':>14} {'us/step':>9} {'GB/s':>7} {'%copy':>6} "
        f"{'vs snap':>8} {'vs serial':>9} {'refcheck':>9}"
    )
    for family in args.family:
        geom = args.geometry or GEOMETRIES[family]
        for T in args.T:
            for batch in args.batch:
                case = make_family_case(args, family, geom, batch, T)
                timed = []  # (route, kernel, (seconds, samples), refcheck)
                for kernel in args.kernel:
                    case.kernel = kernel
                    err = case.refcheck()
                    if err > REFCHECK_TOL:
                        print(f"# refcheck failed for {family} T={T} batch={batch} kernel={kernel}: {err:.2e}; skipped")
                        continue
                    routes = ROUTES if not timed else ("replay",)
                    timed += [(route, kernel, case.time(route), err) for route in routes]
                times = {route: t for route, _, (t, _), _ in timed if route != "replay"}
                for route, kernel, (t, samples), err in timed if "snapshot" in times else ():
                    gbs = case.bytes_per_step(route) / t / 1e9
                    row = dict(
                        family=family,
                        geometry=geom,
                        T=T,
                        batch=batch,
                        B=args.B,
                        state=args.state,
                        act=args.act,
                        accepted_mean=case.mean_accepted,
                        route=route,
                        kernel=kernel if route == "replay" else None,
                        seconds=t,
                        samples_ms=samples,
                        gbps=gbs,
                        pct_copy=100 * gbs * 1e9 / copy_bw,
                        speedup_vs_snapshot=times["snapshot"] / t,
                        speedup_vs_serial=times["serial"] / t,
                        refcheck=err,
                    )
                    rows.append(row)
                    label = f"replay:{kernel}" if route == "replay" and len(args.kernel) > 1 else route
                    print(
                        f"{family:>6} {T:>2} {batch:>6} {label:>14} {t * 1e6:9.2f} {gbs:7.0f} "
                        f"{row['pct_copy']:6.1f} {row['speedup_vs_snapshot']:8.3f} "
                        f"{row['speedup_vs_serial']:9.3f} {err:9.1e}"
                    )
                del case
                torch.cuda.empty_cache()
    return rows


def run_sweep(args) -> None:
    """Time the replay verify + commit step for every launch configuration of the harness's
    sweep, or of --configs, and the default per (family, T, batch); print the best next to the
    default. GDN/KDA: the configuration of the non-flush launch, or with --flush-launch of the
    flush launch; the other launch keeps its rule."""
    print(f"{'family':>6} {'T':>2} {'batch':>6} {'best':>14} {'us':>8} {'default':>14} {'us':>8}")
    for family in args.family:
        geom = args.geometry or GEOMETRIES[family]
        for T in args.T:
            for batch in args.batch:
                case = make_family_case(args, family, geom, batch, T)
                if args.flush_launch:
                    case.swept_launch = "flush"
                d = case.default_config()
                tried = args.configs or sweep_configs(case.rows(), args.max_registers, min_block=case.min_block)
                cfgs = list(dict.fromkeys(tried + [d]))
                res = {cfg: case.time("replay", reps=3, config=cfg)[0] for cfg in cfgs}
                k = min(res, key=res.get)
                print(f"{family:>6} {T:>2} {batch:>6} {k.label():>14} {res[k] * 1e6:8.2f} {d.label():>14} {res[d] * 1e6:8.2f}")
                print(
                    "   all (block,warps,chunks,stages[,r<max registers>]:us): "
                    + " ".join(f"{c.label()}:{t * 1e6:.1f}" for c, t in sorted(res.items(), key=lambda kv: kv[1]))
                )
                del case
                torch.cuda.empty_cache()


def print_memory(args):
    print("# SSM cache per sequence per layer (conv state excluded, same in both schemes)")
    print(f"{'family':>6} {'T':>2} {'snapshot (1+T) states':>22} {'replay 1 state + (B+T) records':>31} {'ratio':>6}")
    table = []
    for family in args.family:
        geom = args.geometry or GEOMETRIES[family]
        cls = {MAMBA2: Mamba2ReplayCache, GDN: GDNReplayCache, KDA: KDAReplayCache}[family]
        dtype_kw = "act_dtype" if family == MAMBA2 else "record_dtype"
        for T in args.T:
            snap, rep = layer_bytes(family, geom, args.B, T, DT[args.state], DT[args.act])
            one = cls.allocate(
                1, *geom, spec_buffer_len(args.B, T), state_dtype=DT[args.state], **{dtype_kw: DT[args.act]}, device="cuda"
            )
            allocated = sum(t.nbytes for t in vars(one).values() if t is not None)  # checkpoint_scale: fp8 only
            if allocated != rep:
                print(f"# memory model {rep} B != allocated cache {allocated} B per slot")
            table.append(dict(family=family, geometry=geom, T=T, snapshot_bytes=snap, replay_bytes=rep))
            print(f"{family:>6} {T:>2} {snap / 2**20:18.2f} MiB {rep / 2**20:27.2f} MiB {snap / rep:6.2f}")
    return table


def check_targets(rows):
    for r in rows:
        if r["route"] == "replay" and r["T"] == 4 and r["batch"] >= 256:
            for base, want in TARGETS[r["family"]].items():
                got = r[f"speedup_vs_{base}"]
                print(
                    f"# target {r['family']} T=4 batch={r['batch']} kernel={r['kernel']} vs {base}: {got:.2f}x "
                    f"(want >= {want}x) {'met' if got >= want else 'MISSED'}"
                )


def plot(rows, path, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = [f for f in args.family if any(r["family"] == f for r in rows)]
    fig, axes = plt.subplots(len(families), 2, figsize=(11, 4 * len(families)), sharey=True, squeeze=False)
    for ax_row, family in zip(axes, families):
        geom = args.geometry or GEOMETRIES[family]
        for ax, base in zip(ax_row, ("snapshot", "serial")):
            for T in sorted({r["T"] for r in rows}):
                for kernel in args.kernel:
                    pts = sorted(
                        (r["batch"], r[f"speedup_vs_{base}"])
                        for r in rows
                        if r["family"] == family and r["route"] == "replay" and r["T"] == T and r["kernel"] == kernel
                    )
                    if pts:
                        ax.plot(*zip(*pts), marker="o", label=f"T={T}" + (f" {kernel}" if len(args.kernel) > 1 else ""))
            ax.axhline(TARGETS[family][base], color="gray", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.set_title(
                f"{family} {geom}, {args.state} state, {args.act} act, B={args.B}\nreplay verify+commit vs {base}", fontsize=9
            )
            ax.legend()
        ax_row[0].set_ylabel("speedup")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=[MAMBA2, GDN, KDA], choices=[MAMBA2, GDN, KDA])
    ap.add_argument(
        "--geometry",
        type=lambda s: tuple(int(v) for v in s.split(",")),
        default=None,
        help="with one --family: Mamba-2 nheads,head_dim,d_state,ngroups or GDN/KDA "
        "k_heads,v_heads,head_k_dim,head_v_dim (defaults: Nemotron-3-Super, "
        "Qwen3.5-122B, Kimi Linear, TP=1)",
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 64, 256, 512])
    ap.add_argument("--T", type=int, nargs="+", default=[2, 4, 8], help="tokens verified per step (drafts + 1)")
    ap.add_argument("--B", type=int, default=16, help="history records (buffer L = B + T)")
    ap.add_argument("--state", default="f32", choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    ap.add_argument("--accept", type=float, default=0.7, help="mean accepted tokens per step / T")
    ap.add_argument("--sweep", action="store_true", help="time replay launch configurations instead")
    ap.add_argument(
        "--configs",
        type=launch_config_arg,
        nargs="*",
        default=[],
        help="with --sweep: only these configurations (block,warps,chunks,stages[,rN]) beside the default",
    )
    ap.add_argument(
        "--flush-launch",
        action="store_true",
        help="with --sweep, GDN/KDA only: the configurations set the flush rows' launch (the other keeps its rule)",
    )
    ap.add_argument(
        "--history-product",
        choices=list(HISTORY_PRODUCT),
        default="rule",
        help="GDN/KDA: the non-flush launch's history weights as tile products (on, GDN only), a record "
        "at a time (off), or by gated_delta_verify_history_product (rule)",
    )
    ap.add_argument(
        "--kernel",
        choices=list(KERNELS),
        nargs="+",
        default=["auto"],
        help="the replay verify's kernel: the op's route (auto), the Triton kernels or the CUDA C++ ones; "
        "several: each timed in the same run (rows replay:KERNEL)",
    )
    add_max_registers_argument(ap)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if args.geometry is not None and len(args.family) != 1:
        ap.error("--geometry needs exactly one --family")
    if args.history_product == "on" and set(args.family) != {GDN}:
        ap.error("--history-product on needs --family gdn only (the history product takes GDN's scalar decays)")
    if "cuda" in args.kernel and args.history_product != "rule":
        ap.error("--kernel cuda: --history-product sets the Triton kernels")
    if args.flush_launch and (not args.sweep or MAMBA2 in args.family):
        ap.error("--flush-launch needs --sweep and GDN/KDA families only (Mamba-2 verify is one launch)")
    if not torch.cuda.is_available():
        sys.exit("spec_verify: needs a CUDA GPU")
    for T in args.T:
        spec_buffer_len(args.B, T)  # B >= T
    copy_bw = copy_bandwidth()
    print(header("spec_verify", copy_bw))
    if args.sweep:
        run_sweep(args)
        return
    memory = print_memory(args)
    rows = run(args, copy_bw)
    check_targets(rows)
    stem = results_stem(args.out_dir, "spec_verify")
    write_json(stem, copy_bw, rows, memory=memory)
    plot(rows, stem + ".png", args)
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/spec_verify.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
