"""The CUDA Mamba-2 replay step's launch configurations beside the Triton kernel (GPU, sm_90).

Per (L, batch): each CUDA configuration is first checked against the Triton kernel over 2L + 2
steps from the same cache (outputs, checkpoints and cursors), then the conventional step, the
Triton replay, the op's route and every configuration are captured in CUDA graphs and timed
in interleaved rounds (benchmarks/peers_mamba2.py's ``time_interleaved``), as
benchmarks/mamba2_decode.py times them.

    python benchmarks/mamba2_cuda_probe.py --batch 1 4 16 64 256 --configs 3,3,pdl,c16 3,3,nopdl,c4 2,2,nopdl,c4

A configuration is ``stages,min_ctas,pdl|nopdl,cW[,cl]`` (``CudaStepConfig``; W: the coefficient
launch's warps per CTA, 1, 2, 4, 8 or 16; ``cl``: ``claimed_units``, each CTA's units after its
first stages claimed) or ``small[,ROWS][,mN][,early]`` (the one-launch
kernel without a ring, 16 rows a CTA unless given, registers capped for N resident CTAs a
multiprocessor, the arithmetic before the barrier).

``--baseline CU`` times every configuration with another copy of the kernel source too (e.g. a
revision exported by scripts/export_variant.sh: ``variants/main/trtllm_replayssm/kernels/cuda/
mamba2_replay_step.cu``; same kernel parameters), in the same interleaved rounds, labelled
``@base``: a kernel change measured side by side with the kernel it replaces.
``--baseline-configs`` names the configurations timed with it instead of all of them.

``--state fp8``: an fp8-e4m3 checkpoint with its row scales. No conventional step keeps one, so
the speedup column is against the fp32 conventional step (a second case of the same shape,
timed in the same rounds), and the check compares the checkpoints' values (codes x scales).

``--pads 0 64 128`` builds each case again after allocating that many MiB first, so that its
state pool lands elsewhere (kernel notes, session 20: our conventional bf16 step at batch 1 runs
~0.35 µs faster in a process's first case, whatever the pad).
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

from functools import partial

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import add_baseline_arguments, baseline_runs, kernel_source  # noqa: E402
from peers_mamba2 import Route, capture, time_interleaved  # noqa: E402
from trtllm_replayssm.bench import Mamba2DecodeCase  # noqa: E402
from trtllm_replayssm.kernels.mamba2_replay import replay_step_kernel  # noqa: E402
from trtllm_replayssm.kernels import mamba2_replay_cuda as mc  # noqa: E402
from trtllm_replayssm.kernels.mamba2_replay_cuda import CudaStepConfig, cuda_step_config  # noqa: E402
from trtllm_replayssm.kernels.nvrtc import nvrtc_version  # noqa: E402


def parse_config(text: str) -> CudaStepConfig:
    parts = text.split(",")
    if parts[0] == "small":
        rows = next((int(q) for q in parts[1:] if q.isdigit()), 16)
        ctas = next((int(q[1:]) for q in parts[1:] if q[:1] == "m" and q[1:].isdigit()), 1)
        if len(parts) - 1 != sum(q.isdigit() or q == "early" or q[:1] == "m" for q in parts[1:]):
            raise argparse.ArgumentTypeError(f"config {text!r}: expected small[,ROWS][,mN][,early]")
        return CudaStepConfig(stages=2, min_ctas=ctas, pdl=True, small=True, small_rows=rows, early_math="early" in parts)
    if (
        len(parts) not in (4, 5)
        or parts[2] not in ("pdl", "nopdl")
        or parts[3] not in ("c1", "c2", "c4", "c8", "c16")
        or parts[4:] not in ([], ["cl"])
    ):
        raise argparse.ArgumentTypeError(
            f"config {text!r}: expected stages,min_ctas,pdl|nopdl,c1|c2|c4|c8|c16[,cl] or small[,ROWS][,mN][,early]"
        )
    stages, min_ctas, pdl, coef = parts[:4]
    return CudaStepConfig(
        stages=int(stages), min_ctas=int(min_ctas), pdl=pdl == "pdl", coef_warps=int(coef[1:]), claimed_units=len(parts) == 5
    )


def check_against_triton(case, cfg: CudaStepConfig) -> float:
    """Relative max error of ``cfg``'s outputs and checkpoints against the Triton kernel over
    2L + 2 steps on the first slot set; the cache is restored afterwards. Cursors must agree."""
    c = case.cache
    saved = c.clone()
    slots = case.slot_sets[0]
    all_slots = torch.arange(c.checkpoint.shape[0], device=c.checkpoint.device)
    runs = {}
    for name, kw in (("triton", dict(route="replay_triton")), ("cuda", dict(route="replay_step", config=cfg))):
        c.copy_(saved)
        outs = []
        for _ in range(2 * case.L + 2):
            case.step(kw["route"], slots, kw.get("config"))
            outs.append(case.out.clone())
        runs[name] = (outs, c.checkpoint_values(all_slots).clone(), c.cursor.clone())
    c.copy_(saved)
    (yt, ct, wt), (yc, cc, wc) = runs["triton"], runs["cuda"]
    if not torch.equal(wt, wc):
        return float("inf")
    rel = lambda a, b: float((a.float() - b.float()).abs().max() / b.float().abs().max())  # noqa: E731
    return max(max(rel(a, b) for a, b in zip(yc, yt)), rel(cc, ct))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=(128, 64, 128, 8))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--L", type=int, nargs="+", default=[16])
    ap.add_argument("--configs", type=parse_config, nargs="*", default=[])
    ap.add_argument(
        "--state",
        default="bf16",
        choices=["bf16", "f32", "fp8"],
        help="checkpoint dtype (f32: the CUDA step only with --configs; fp8: against the fp32 conventional step)",
    )
    add_baseline_arguments(ap, parse_config)
    ap.add_argument(
        "--pads",
        type=int,
        nargs="+",
        default=[0],
        metavar="MIB",
        help="each case again after allocating this many MiB first (the state pool placed elsewhere)",
    )
    args = ap.parse_args(argv)
    runs = baseline_runs(ap, args)
    if not torch.cuda.is_available():
        sys.exit("mamba2_cuda_probe: needs a CUDA GPU")
    print(
        f"# mamba2_cuda_probe | {torch.cuda.get_device_name()} | geometry {args.geometry} | {args.state} checkpoint, bf16 act"
        f" | NVRTC {nvrtc_version()}"
    )
    print(f"{'L':>3} {'batch':>6} {'route':>22} {'us/step':>9} {'speedup':>8} {'check':>9}")
    for L, batch, pad_mib in itertools.product(args.L, args.batch, args.pads):
        pad = torch.empty(pad_mib << 20, dtype=torch.uint8, device="cuda")
        if len(args.pads) > 1:
            print(f"# {pad_mib} MiB allocated before the case")
        case = Mamba2DecodeCase(args.geometry, batch, L, args.state, "bf16")
        cache = case.cache
        kernel = replay_step_kernel(cache.checkpoint, cache.x_records, cache.B_records, case.x, cache.checkpoint_scale)
        if kernel == "cuda":
            kernel += " " + cuda_step_config(args.geometry[1], args.geometry[2], L, batch, case.state.itemsize).label()
        configs = {f"cuda {c.label()}{tag}": (c, src) for c, tag, src in runs}
        checks, kernels = {}, {}
        for name, (c, src) in configs.items():
            with kernel_source(mc, src, kernels.setdefault(name, {})):
                checks[name] = check_against_triton(case, c)
        # fp8: no conventional step keeps one; the fp32 one of the same shape is the reference.
        conv_case = Mamba2DecodeCase(args.geometry, batch, L, "f32", "bf16") if args.state == "fp8" else case
        routes = {"decode_step": Route([partial(conv_case.step, "decode_step", s) for s in conv_case.slot_sets])}
        routes.update({r: Route([partial(case.step, r, s) for s in case.slot_sets]) for r in ("replay_triton", "replay_step")})
        graphs = {name: capture(r) for name, r in routes.items()}
        for name, (c, src) in configs.items():
            with kernel_source(mc, src, {}):
                graphs[name] = capture(Route([partial(case.step, "replay_step", s, c) for s in case.slot_sets]))
        sets = {n: len((conv_case if n == "decode_step" else case).slot_sets) for n in graphs}
        times = time_interleaved(graphs, sets)
        conv = times["decode_step"][0]
        for name, (t, _) in times.items():
            conv_label = "decode_step" if conv_case is case else "decode_step (f32)"
            label = {"replay_step": f"replay_step ({kernel})", "decode_step": conv_label}.get(name, name)
            check = checks.get(name)
            print(
                f"{L:>3} {batch:>6} {label:>22} {t * 1e6:9.2f} {conv / t:8.3f} {'-' if check is None else f'{check:9.1e}':>9}"
            )
        for name, loaded in kernels.items():
            c = configs[name][0]
            threads = 8 * c.small_rows if c.small else mc.step_threads(args.geometry[1])
            entry = "mamba2_replay_small" if c.small else "mamba2_replay_step"
            regs, local = loaded[entry].resources()
            smem = 0 if c.small else mc.step_shared_bytes(args.geometry[1], args.geometry[2], L, c.stages, case.state.itemsize)
            ctas = loaded[entry].ctas_per_sm(threads, smem)
            print(f"#   {name}: {regs} registers, {local} local bytes, {ctas} CTAs a multiprocessor")
        del case, conv_case, graphs, pad
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
