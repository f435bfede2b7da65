"""Tensor-parallel ReplaySSM decoding of a hybrid stack, one process per rank, launched by MPI.

Each rank builds its share of a stack of Mamba-2 / GDN / KDA mixers (random weights, the same
seed everywhere), allocates a ReplayCachePool of its geometry and decodes; the row-parallel
out_proj partial sums (and the Mamba-2 norm statistics of replicated groups) are all-reduced
with torch.distributed: gloo on CPU ranks, NCCL with one GPU per rank. mpi4py only finds the
ranks and hands out the rendezvous port (``torchrun --nproc-per-node N`` works too, for hosts
without an MPI launcher).

    mpirun -n 2 python examples/tp_decode.py --check                       # CPU ranks, gloo
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
        mpirun -n 2 python examples/tp_decode.py --device cuda --model nemotron-3-super-120b \\
        --layers 4 --dtype fp32 --check                                       # 2 GPUs, NCCL

``--check``: every rank also runs the whole stack (TP 1) itself and compares, for each route,
its outputs over all steps, its caches against its shard of the whole caches (checkpoint and
records) and its conv states; and compares its pool's bytes with the planner's
(``trtllm-replayssm plan --tp N``). Exit status 1 when a figure is over tolerance. With NCCL
keep NVLink multicast off (``NCCL_NVLS_ENABLE=0``, ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``; set
here when unset). Open MPI needs ``-x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST``
to forward them; MPICH forwards the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtllm_replayssm.cli import positive_int
from trtllm_replayssm.models import PRESETS, load_model
from trtllm_replayssm.planner import PlanConfig, plan
from trtllm_replayssm.tp import (
    ROUTES,
    HybridDecodeStack,
    TPGroup,
    init_ranks,
    run_decode,
    shard_errors,
    shutdown_distributed,
    ssm_stack,
    tiny_stack_model,
)

DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "bf16": torch.bfloat16}
# Relative tolerance (max |Δ| / max |whole|) of a TP run against the whole run: they differ by
# the summation order of the all-reduce and the split GEMMs, rounded at the activation dtype.
# Measured on 2 CPU ranks, tiny stack, 24-48 steps: fp64 ~4e-15, fp32 ~2e-6, bf16 ~5e-2 (bf16
# roundings of the partial sums, carried by the recurrent states).
TOLERANCE = {"fp64": 1e-12, "fp32": 1e-4, "bf16": 1e-1}
JSON_TAG = "TP_DECODE_JSON "


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--model",
        help="a preset or config.json whose first --layers SSM layers form "
        "the stack (default: a tiny mixed Mamba-2/GDN/KDA stack)",
    )
    p.add_argument("--layers", type=positive_int, help="the first N SSM layers of --model or of the tiny stack (default: all)")
    p.add_argument(
        "--hidden", type=int, help="hidden size (default: 24 for the tiny stack, the config's hidden_size for --model)"
    )
    p.add_argument("--route", choices=ROUTES + ("both",), default="both")
    p.add_argument("--steps", type=positive_int, default=24, help="decode steps (default: 24)")
    p.add_argument("--batch", type=positive_int, default=4, help="sequences (default: 4)")
    p.add_argument("--L", type=positive_int, default=4, help="replay records per slot (default: 4)")
    p.add_argument(
        "--dtype", choices=list(DTYPES), default="fp64", help="activations, weights, records and conv states (default: fp64)"
    )
    p.add_argument(
        "--state-dtype", choices=list(DTYPES), help="checkpoint / state dtype (default: fp64 with --dtype fp64, else fp32)"
    )
    p.add_argument(
        "--device", choices=["cpu", "cuda"], default="cpu", help="cpu ranks (gloo) or one GPU per rank (nccl) (default: cpu)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--check", action="store_true", help="compare with the whole stack and the planner on every rank")
    p.add_argument("--json", action="store_true", help=f"rank 0 prints one '{JSON_TAG}{{...}}' line")
    return p


def _model_and_hidden(args, parser):
    """The SSM stack (the first --layers SSM layers of --model or of the tiny stack) and the
    hidden size; a usage error for a model that cannot be read or too few SSM layers."""
    try:
        if args.model is None:
            whole, hidden = tiny_stack_model(), args.hidden or 24
        else:
            whole = load_model(args.model)
            cfg = PRESETS.get(args.model) or json.load(open(args.model))
            cfg = cfg.get("text_config", cfg)
            hidden = args.hidden or cfg["hidden_size"]
    except ValueError as e:
        parser.error(str(e))
    except KeyError:
        parser.error(f"--model {args.model}: the config has no hidden_size; expected --hidden")
    have = len(whole.ssm_layers)
    if args.layers is not None and args.layers > have:
        parser.error(f"--layers {args.layers}: {whole.name} has {have} SSM layers; expected at most {have}")
    if args.model is None and args.layers in (None, have):
        return whole, hidden
    return ssm_stack(whole, args.layers), hidden


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    model, hidden = _model_and_hidden(args, parser)
    if args.device == "cpu":
        torch.set_num_threads(1)  # N ranks share the host's cores
    group, device = init_ranks("nccl" if args.device == "cuda" else "gloo")
    dtype = DTYPES[args.dtype]
    state_dtype = DTYPES[args.state_dtype or ("fp64" if args.dtype == "fp64" else "fp32")]
    stack = HybridDecodeStack(model, hidden, group=group, seed=args.seed, dtype=dtype, device=device)
    whole = (
        HybridDecodeStack(model, hidden, group=TPGroup(), seed=args.seed, dtype=dtype, device=device) if args.check else None
    )
    kw = dict(steps=args.steps, batch=args.batch, buffer_len=args.L, state_dtype=state_dtype, seed=args.seed + 1)
    report = {
        "tp": group.size,
        "model": model.name,
        "hidden": hidden,
        "dtype": args.dtype,
        "device": str(device),
        "steps": args.steps,
        "batch": args.batch,
        "L": args.L,
        "tolerance": TOLERANCE[args.dtype],
        "routes": {},
    }
    ok = True
    for route in ROUTES if args.route == "both" else (args.route,):
        t0 = time.perf_counter()
        run = run_decode(stack, route=route, **kw)
        seconds = time.perf_counter() - t0
        entry = {"seconds": seconds}
        if args.check:
            errs = shard_errors(run, run_decode(whole, route=route, **kw), model, group.size, group.rank)
            cfg = PlanConfig(buffer_len=args.L, spec_tokens=1, state_dtype=state_dtype, record_dtype=dtype, conv_dtype=dtype)
            planned = plan(model, tp_size=group.size, config=cfg, gpu_mem_bytes=1 << 40)
            plan_bytes = planned.modes["replay"].ssm_bytes * run.pool.num_physical_slots
            # Worst figure over the ranks: all-reduce MAX of [errors..., mismatch flags].
            flags = torch.tensor(
                [
                    errs["outputs"],
                    errs["caches"],
                    errs["conv_states"],
                    float(not errs["cursors_equal"]),
                    float(plan_bytes != run.pool.nbytes),
                ],
                dtype=torch.float64,
            )
            if group.size > 1:
                import torch.distributed as dist

                flags = flags.to(device)
                dist.all_reduce(flags, op=dist.ReduceOp.MAX)
                flags = flags.cpu()
            entry.update(
                outputs=flags[0].item(),
                caches=flags[1].item(),
                conv_states=flags[2].item(),
                cursors_equal=flags[3].item() == 0,
                pool_bytes_equal_plan=flags[4].item() == 0,
                pool_bytes=run.pool.nbytes,
                plan_bytes=plan_bytes,
            )
            ok &= max(flags[:3].tolist()) < TOLERANCE[args.dtype] and entry["cursors_equal"] and entry["pool_bytes_equal_plan"]
        report["routes"][route] = entry
    if group.rank == 0:
        print(
            f"tp_decode: {model.name}, {len(model.layers)} SSM layers, hidden {hidden}, TP {group.size} "
            f"on {device.type} | {args.dtype} | batch {args.batch}, L {args.L}, {args.steps} steps"
        )
        for route, e in report["routes"].items():
            line = f"  {route:<12} {e['seconds']:.2f} s"
            if args.check:
                line += (
                    f" | vs whole stack (max rel. error over ranks): outputs {e['outputs']:.1e},"
                    f" caches {e['caches']:.1e}, conv {e['conv_states']:.1e}; cursors "
                    f"{'equal' if e['cursors_equal'] else 'DIFFER'}; pool {e['pool_bytes']:,} B "
                    f"{'==' if e['pool_bytes_equal_plan'] else '!='} plan {e['plan_bytes']:,} B"
                )
            print(line)
        if args.check:
            print(f"  check: {'passed' if ok else 'FAILED'} (tolerance {TOLERANCE[args.dtype]:.0e})")
        if args.json:
            print(JSON_TAG + json.dumps({**report, "passed": ok}), flush=True)
    shutdown_distributed()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
