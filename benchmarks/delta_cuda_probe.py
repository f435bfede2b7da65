"""The CUDA gated delta-rule (GDN, KDA) replay step's launch configurations beside the Triton
kernel (GPU, sm_90).

Per (state, L, batch): each CUDA configuration is first checked against the Triton kernel over
2L + 2 steps from the same cache (outputs, checkpoints and cursors), then the conventional step,
the Triton replay, the op's route and every configuration are captured in CUDA graphs and timed
in interleaved rounds (benchmarks/peers_mamba2.py's ``time_interleaved``), as
benchmarks/gated_delta_decode.py times them (state pool out of L2, cursors spread and advancing);
each row prints the median and the rounds' spread (max / min - 1).

    python benchmarks/delta_cuda_probe.py --state f32 bf16 --batch 1 16 64 256 512 --configs table 64,2,2
    python benchmarks/delta_cuda_probe.py --family kda          # Kimi Linear (32, 32, 128, 128)
    python benchmarks/delta_cuda_probe.py --state fp8 --batch 64 256 --configs table 64,4,2

``--state fp8``: an fp8-e4m3 checkpoint with its row scales (head_k_dim 128). No conventional step
keeps one, so its speedup column is against the fp32 conventional step (a second case of the same
shape, timed in the same rounds); the check compares checkpoint values (codes x scales).

A configuration is ``table`` (the launch table's for each case; ``table,fmma``: with the flush's
fold on tensor cores; ``table,ff``: with flushing units first where the table runs one launch;
``table,rw``: with GDN's records split over its coefficient warps there; ``table,cs``: with KDA's
consumers summing the coefficient warps' partials where the table has coefficient warps;
``table,qg`` / ``table,h2``: KDA fp8's S0 products as fp8 wgmma products / f16x2 FMAs;
``table,eg``: the step kernel on the even grid), or
``rows,stages,min_ctas[,one][,cwN][,mma][,fmma][,cr][,dc][,ff][,rw][,cs][,qg][,h2][,eg]`` (``DeltaCudaConfig``;
``one``: GDN in one launch; ``cwN``: N coefficient warps, one launch only; ``mma``: S0 products
on tensor cores, bf16 checkpoints in one launch only; ``fmma``: the flush's fold on tensor cores;
``cr``: a unit's records in one bulk copy each; ``dc``: the cursor reads counted after the first
stages' units; ``ff``: each block of 32 units taken with its flushing units first, one launch
only; ``rw``: GDN's records split over the warps forming the coefficients, one launch only;
``cs``: KDA's consumers summing the coefficient warps' partial scores and norms, coefficient
warps only; ``qg``, ``h2``: KDA fp8's S0 products as fp8 wgmma products (64- or 128-row units) or
as f16x2 FMAs, L2-normalised q and k; ``eg``: the fewest CTAs that take the units in as many
rounds as the most that fit), or
``small,ROWS,mN`` (the one-launch kernel, ROWS value rows a CTA, registers capped for N
resident CTAs a multiprocessor).

``--baseline CU`` times every configuration with another copy of the kernel source too (e.g. a
revision exported by scripts/export_variant.sh: ``variants/base/trtllm_replayssm/kernels/cuda/
gated_delta_replay_step.cu``; same kernel parameters), in the same interleaved rounds, labelled
``@base``: a kernel change measured side by side with the kernel it replaces.
``--baseline-configs`` names the configurations timed with it instead of all of them (those the
older source can build):

    python benchmarks/delta_cuda_probe.py --state fp8 --configs table table,fmma --baseline-configs table \
        --baseline variants/main/trtllm_replayssm/kernels/cuda/gated_delta_replay_step.cu
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import os
import sys

from functools import partial

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import add_baseline_arguments, baseline_runs, kernel_source  # noqa: E402
from mamba2_cuda_probe import check_against_triton  # noqa: E402
from peers_mamba2 import Route, capture, round_spread, time_interleaved  # noqa: E402
from trtllm_replayssm.bench import GatedDeltaDecodeCase  # noqa: E402
from trtllm_replayssm.kernels import gated_delta_replay_cuda as gc  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_replay_cuda import DeltaCudaConfig, delta_cuda_config  # noqa: E402
from trtllm_replayssm.kernels.nvrtc import nvrtc_version  # noqa: E402


# Each family's default layer: Qwen3.5-122B (GDN), Kimi Linear (KDA).
GEOMETRY = {"gdn": (16, 64, 128, 128), "kda": (32, 32, 128, 128)}


TABLE_MODS = ("fmma", "ff", "du", "ds", "rw", "cs", "qg", "h2", "eg", "cl")


def parse_config(text: str):
    """``table[,fmma][,ff][,du|,ds][,rw][,cs][,qg][,h2][,eg][,cl]`` -> that string (the launch table's configuration of
    each case, with ``fmma`` its flush fold on tensor cores, ``ff`` its flushing units first, ``du`` its
    units dealt from one order of the rows (in place of ``ff`` and the deferred count; ``ds``: their
    flush units spread, none first), ``rw`` GDN's
    coefficient warps splitting the records, ``cs`` KDA's consumers summing the coefficient warps'
    partials, ``qg`` KDA fp8's S0 products as fp8 wgmma products, ``h2`` as f16x2 FMAs, ``eg`` the
    even grid, ``cl`` its units claimed after the first stages, in place of ``ff``, ``du`` and the
    deferred count);
    ``rows,stages,min_ctas[,one][,cwN][,mma][,fmma][,cr][,dc][,ff][,du|,ds][,rw][,cs][,qg][,h2][,eg][,cl]``
    or ``small,ROWS,mN`` -> DeltaCudaConfig (``one``: GDN in one launch; ``cwN``:
    N coefficient warps; ``mma``: S0 products on tensor cores; ``fmma``: the flush's fold on tensor
    cores; ``cr``: a unit's records in one bulk copy each; ``dc``: the cursor reads counted after
    the first stages' units; ``ff``: flushing units first; ``du``: dealt units; ``ds``: dealt units, their
    flush units spread; ``rw``: GDN's coefficient warps
    splitting the records; ``cs``: KDA's consumers summing the coefficient warps' partials; ``qg``:
    KDA fp8's S0 products as fp8 wgmma products; ``h2``: as f16x2 FMAs; ``eg``: the fewest CTAs
    that take the units in as many rounds; ``cl``: units claimed after the first stages)."""
    parts = text.split(",")
    if parts[0] == "small":
        if len(parts) != 3 or not parts[1].isdigit() or parts[2][:1] != "m" or not parts[2][1:].isdigit():
            raise argparse.ArgumentTypeError(f"config {text!r}: expected small,ROWS,mN")
        return DeltaCudaConfig(rows=64, stages=2, min_ctas=int(parts[2][1:]), small=True, small_rows=int(parts[1]))
    if parts[0] == "table":
        if parts[1:] != [m for m in TABLE_MODS if m in parts[1:]] or {"du", "ds"} <= set(parts):
            raise argparse.ArgumentTypeError(
                f"config {text!r}: expected table[,fmma][,ff][,du|,ds][,rw][,cs][,qg][,h2][,eg][,cl]"
            )
        return text
    one, mma, fmma, cr, dc, ff, du, ds, rw, cs, qg, h2, eg, cl = (
        t in parts[3:] for t in ("one", "mma", "fmma", "cr", "dc", "ff", "du", "ds", "rw", "cs", "qg", "h2", "eg", "cl")
    )
    cw = [p for p in parts[3:] if p[:2] == "cw" and p[2:].isdigit()]
    if (
        len(parts) != 3 + one + mma + fmma + cr + dc + ff + du + ds + rw + cs + qg + h2 + eg + cl + len(cw)
        or du + ds > 1
        or len(cw) > 1
        or not all(p.isdigit() for p in parts[:3])
    ):
        raise argparse.ArgumentTypeError(
            f"config {text!r}: expected table[,fmma][,ff][,du|,ds][,rw][,cs][,qg][,h2][,eg][,cl], "
            "rows,stages,min_ctas[,one][,cwN][,mma][,fmma][,cr][,dc][,ff][,du|,ds][,rw][,cs][,qg][,h2][,eg][,cl] "
            "or small,ROWS,mN"
        )
    rows, stages, min_ctas = (int(p) for p in parts[:3])
    cw_n = int(cw[0][2:]) if cw else 0
    return DeltaCudaConfig(
        rows=rows,
        stages=stages,
        min_ctas=min_ctas,
        one_launch=one,
        coef_warps=cw_n,
        s0_mma=mma,
        flush_mma=fmma,
        coalesce_recs=cr,
        defer_count=dc,
        flush_first=ff,
        dealt_units=du or ds,
        dealt_spread=ds,
        rec_warps=rw,
        consumer_sums=cs,
        s0_qgmma=qg,
        s0_hfma2=h2,
        even_grid=eg,
        claimed_units=cl,
    )


def case_config(c, geometry, L: int, batch: int, state_bytes: int, per_channel: bool) -> DeltaCudaConfig:
    """A :func:`parse_config` result as the DeltaCudaConfig it names for one case
    (``table[,fmma][,ff][,du|,ds][,rw][,cs][,qg][,h2][,eg][,cl]``: the launch table's for this batch, L and checkpoint,
    with the flush's fold on tensor cores where asked and the table runs the step kernel, and the flushing units
    first (clearing the table's dealt or claimed units), the dealt units (clearing the flushing
    units first, the deferred count and the claimed units) and GDN's
    records split over its coefficient warps where asked and the table runs the step
    kernel in one launch, and KDA's consumers summing the partials where asked and the table has
    coefficient warps, and KDA fp8's S0 products as fp8 wgmma products where asked and the table's
    units are 64 or 128 rows, or as f16x2 FMAs where asked (the table's own since session 65; ``cs``
    and ``qg`` replace them), and the even grid where asked and the table runs the step kernel, and
    the units claimed (clearing the flushing units first, the dealt units and the deferred count)
    where asked and the table runs the step kernel in one launch; KDA always in one launch, labelled
    so)."""
    if isinstance(c, str):
        _, _, head_k_dim, head_v_dim = geometry
        table = delta_cuda_config(head_k_dim, head_v_dim, L, batch, state_bytes, per_channel)
        mods = c.split(",")[1:]
        one = gc.step_kernel_in_one_launch(table, per_channel)
        ff = "ff" in mods and one
        rw = "rw" in mods and one and not per_channel
        cs = "cs" in mods and per_channel and table.coef_warps > 0 and not table.s0_mma
        qg = "qg" in mods and gc.s0_qgmma_fits(table, state_bytes, per_channel)
        c = dataclasses.replace(
            table,
            flush_mma=table.flush_mma or ("fmma" in mods and not table.small),
            flush_first=table.flush_first or ff,
            rec_warps=table.rec_warps or rw,
            consumer_sums=table.consumer_sums or cs,
            s0_qgmma=table.s0_qgmma or qg,
            s0_hfma2=table.s0_hfma2 and not (cs or qg),  # the table's f16x2 S0 products give way to cs, qg
        )
        if "h2" in mods and gc.s0_hfma2_fits(c, state_bytes, per_channel):
            c = dataclasses.replace(c, s0_hfma2=True)
        if ff and (c.dealt_units or c.claimed_units):  # in place of the table's order, with the deferred count
            c = dataclasses.replace(c, dealt_units=False, dealt_spread=False, claimed_units=False, defer_count=True)
        if ("du" in mods or "ds" in mods) and one:
            c = dataclasses.replace(
                c, flush_first=False, defer_count=False, dealt_units=True, dealt_spread="ds" in mods, claimed_units=False
            )
        if "eg" in mods and not c.small:
            c = dataclasses.replace(c, even_grid=True)
        if "cl" in mods and one:
            c = dataclasses.replace(
                c, flush_first=False, defer_count=False, dealt_units=False, dealt_spread=False, claimed_units=True
            )
    return dataclasses.replace(c, one_launch=True) if per_channel else c


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=["gdn", "kda"], default="gdn")
    ap.add_argument(
        "--geometry",
        type=lambda s: tuple(int(v) for v in s.split(",")),
        default=None,
        help="k_heads,v_heads,head_k_dim,head_v_dim (default: Qwen3.5-122B for gdn, Kimi Linear for kda)",
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, nargs="+", default=[16])
    ap.add_argument("--state", nargs="+", default=["f32", "bf16"], choices=["bf16", "f32", "fp8"])
    ap.add_argument("--configs", type=parse_config, nargs="*", default=["table"])
    add_baseline_arguments(ap, parse_config)
    args = ap.parse_args(argv)
    runs = baseline_runs(ap, args)
    if not torch.cuda.is_available():
        sys.exit("delta_cuda_probe: needs a CUDA GPU")
    geometry = args.geometry or GEOMETRY[args.family]
    per_channel = args.family == "kda"
    print(
        f"# delta_cuda_probe | {torch.cuda.get_device_name()} | {args.family} {geometry} | bf16 act | NVRTC {nvrtc_version()}"
    )
    print(f"{'state':>5} {'L':>3} {'batch':>6} {'route':>30} {'us/step':>9} {'spread%':>7} {'speedup':>8} {'check':>9}")
    for state, L, batch in itertools.product(args.state, args.L, args.batch):
        case = GatedDeltaDecodeCase(args.family, geometry, batch, L, state, "bf16")
        configs = {}
        for c, tag, src in runs:
            cfg = case_config(c, geometry, L, batch, case.state.itemsize, per_channel)
            configs[f"cuda {cfg.label()}{tag}"] = (cfg, src)
        checks = {}
        for name, (cfg, src) in configs.items():
            with kernel_source(gc, src, {}):
                checks[name] = check_against_triton(case, cfg)
        # fp8: no conventional step keeps one; the fp32 one of the same shape is the reference.
        conv_case = GatedDeltaDecodeCase(args.family, geometry, batch, L, "f32", "bf16") if state == "fp8" else case
        routes = {
            "decode_step": Route([partial(conv_case.step, "decode_step", s) for s in conv_case.slot_sets]),
            "replay_triton": Route([partial(case.step, "replay_triton", s) for s in case.slot_sets]),
        }
        graphs = {name: capture(r) for name, r in routes.items()}
        for name, (cfg, src) in configs.items():
            with kernel_source(gc, src, {}):
                graphs[name] = capture(Route([partial(case.step, "replay_step", s, cfg) for s in case.slot_sets]))
        times = time_interleaved(graphs, {n: len((conv_case if n == "decode_step" else case).slot_sets) for n in graphs})
        conv = times["decode_step"][0]
        for name, (t, samples) in times.items():
            check = checks.get(name)
            label = "decode_step (f32)" if name == "decode_step" and conv_case is not case else name
            spread = round_spread(samples)
            print(
                f"{state:>5} {L:>3} {batch:>6} {label:>30} {t * 1e6:9.2f} {'-' if spread is None else f'{100 * spread:.2f}':>7} "
                f"{conv / t:8.3f} {'-' if check is None else f'{check:9.1e}':>9}"
            )
        del case, conv_case, graphs
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
