"""``trtllm-replayssm``: command-line entry point (``python -m trtllm_replayssm`` too).

Each subcommand is one ``_add_<name>`` function that builds its parser and sets ``func``, the
handler taking the parsed arguments and returning the exit status; :data:`_SUBCOMMANDS` lists them.
Installed packages add subcommands the same way through the entry-point group
:data:`EXTENSION_GROUP` (each entry point is such an ``add`` function): the model demo ``demo``
comes from ``trtllm_replayssm_builders``, which this package never imports.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
from typing import Optional, Sequence

import torch

from . import __version__
from .demo import CPU_GEOMETRY, CUDA_GEOMETRY, DTYPES, run_mamba2_demo
from .models import PRESETS, load_model
from .ops import MAX_L
from .planner import DTYPE_NAMES, PlanConfig, format_plan, plan

__all__ = ["EXTENSION_GROUP", "build_parser", "main"]

EXTENSION_GROUP = "trtllm_replayssm.cli"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


# --------------------------------------------------------------------------- layer-demo

def _run_layer_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: CUDA is not available")
    defaults = CUDA_GEOMETRY if device.type == "cuda" else CPU_GEOMETRY
    nheads, head_dim, d_state, ngroups = (v if v is not None else d for v, d in zip(
        (args.nheads, args.head_dim, args.d_state, args.ngroups), defaults))
    if nheads % ngroups:
        parser.error(f"--ngroups {ngroups} must divide --nheads {nheads}")
    if args.L > MAX_L:
        parser.error(f"--L {args.L}: expected at most {MAX_L}")

    fig = run_mamba2_demo(nheads=nheads, head_dim=head_dim, d_state=d_state, ngroups=ngroups,
                          L=args.L, batch=args.batch, steps=args.steps,
                          state_dtype=DTYPES[args.state_dtype], act_dtype=DTYPES[args.act_dtype],
                          device=device, seed=args.seed)
    conv, replay, model = (fig["conventional_written"], fig["replay_written"],
                           fig["model_replay_written"])
    print("trtllm-replayssm layer-demo: one Mamba-2 layer, conventional decode vs ReplaySSM")
    print(f"  {device} | nheads {nheads}, head_dim {head_dim}, d_state {d_state}, ngroups {ngroups}"
          f" | L {args.L} | batch {args.batch} | state {args.state_dtype}, act {args.act_dtype}"
          f" | seed {args.seed}")
    print(f"  steps: {fig['steps']} batched (+ {fig['warmup_steps']} single-row steps spreading"
          f" the cursors), flushes: {fig['flushes']}")
    print(f"  max relative error, replay vs conventional y: {fig['rel_err']:.2e}"
          f"  (worst step's max|Δ| / max|ref|)")
    print("  state bytes written per step per sequence:")
    print(f"    conventional      {conv:12,.0f} B  (whole state every step)")
    print(f"    replay, measured  {replay:12,.0f} B  (= conventional / {conv / replay:.1f}: checkpoint"
          f" at flushes, a {fig['record_bytes']:,} B record otherwise)")
    print(f"    replay, model     {model:12,.0f} B  (memory.mamba2_step_bytes: state_written"
          f" + records_written)")
    return 0


def _add_layer_demo(subparsers) -> None:
    p = subparsers.add_parser(
        "layer-demo", help="decode one Mamba-2 layer conventionally and by ReplaySSM; compare",
        description="Runs Mamba-2 decode steps of one layer with the conventional op "
                    "(mamba2_decode_step) and the replay op (mamba2_replay_step) from the same "
                    "state and inputs; prints their output error, the flushes and the state "
                    "bytes each writes per step per sequence.")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    for name, cpu, cuda in zip(("nheads", "head-dim", "d-state", "ngroups"), CPU_GEOMETRY,
                               CUDA_GEOMETRY):
        p.add_argument(f"--{name}", type=_positive_int,
                       help=f"layer geometry (default: {cpu} on cpu, {cuda} on cuda)")
    p.add_argument("--L", type=_positive_int, default=16,
                   help=f"records per slot, at most {MAX_L} (default: 16)")
    p.add_argument("--batch", type=_positive_int, default=4, help="sequences (default: 4)")
    p.add_argument("--steps", type=_positive_int, default=300,
                   help="batched decode steps (default: 300)")
    p.add_argument("--state-dtype", choices=list(DTYPES), default="f32",
                   help="state / checkpoint dtype (default: f32)")
    p.add_argument("--act-dtype", choices=list(DTYPES), default="f32",
                   help="activation / record dtype (default: f32)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.set_defaults(func=lambda args: _run_layer_demo(args, p))


# --------------------------------------------------------------------------- plan

_PLAN_DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items() if name != "fp64"}
_SIZE_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
               "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _byte_size(text: str) -> int:
    """'141GiB', '80GB', '1.5TiB' or a plain number of bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; expected a positive number with an optional unit "
            f"(B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 141GiB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def _run_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        model = load_model(args.model)
        config = PlanConfig(buffer_len=args.buffer_len, spec_tokens=args.spec_tokens,
                            accepted=args.accepted, state_dtype=_PLAN_DTYPES[args.state_dtype],
                            record_dtype=_PLAN_DTYPES[args.record_dtype],
                            conv_dtype=_PLAN_DTYPES[args.conv_dtype],
                            kv_dtype=_PLAN_DTYPES[args.kv_dtype])
        result = plan(model, tp_size=args.tp, config=config, gpu_mem_bytes=args.gpu_mem,
                      free_fraction=args.free_fraction,
                      weights_bytes=int(args.weights_gib * 2**30), max_seq_len=args.max_seq_len,
                      num_padding_slots=args.padding_slots)
    except (ValueError, TypeError) as e:
        parser.error(str(e))
    print(json.dumps(result.to_dict(), indent=2, allow_nan=False) if args.json else format_plan(result))
    return 0


def _add_plan(subparsers) -> None:
    p = subparsers.add_parser(
        "plan", help="memory and HBM-traffic plan of a hybrid model's decode caches",
        description="Exact bytes per SSM layer and per sequence, KV bytes per token, the most "
                    "concurrent sequences a GPU holds, and the SSM layers' HBM traffic per "
                    "decode step, for conventional decode, conventional speculative decode "
                    "(1 + T state snapshots), ReplaySSM and ReplaySSM speculative (history B, "
                    "window T). Figures are per tensor-parallel rank.")
    p.add_argument("--model", required=True,
                   help=f"a preset ({', '.join(PRESETS)}) or the path of a Hugging Face config.json")
    p.add_argument("--tp", type=_positive_int, default=1, help="tensor-parallel size (default: 1)")
    p.add_argument("--gpu-mem", type=_byte_size, default=_byte_size("141GiB"),
                   help="memory of one GPU, e.g. 141GiB or 80GB (default: 141GiB)")
    p.add_argument("--free-fraction", type=float, default=0.9,
                   help="share of the memory left after the weights that the caches may use, as "
                        "TensorRT-LLM's free_gpu_memory_fraction (default: 0.9)")
    p.add_argument("--weights-gib", type=float, default=0.0,
                   help="weights of the whole model in GiB, split over the TP ranks (default: 0)")
    p.add_argument("--max-seq-len", type=_positive_int, default=8192,
                   help="KV tokens each sequence reserves (default: 8192)")
    p.add_argument("--buffer-len", type=_positive_int, default=16,
                   help="replay records L; the history B in speculative mode (default: 16)")
    p.add_argument("--spec-tokens", type=_positive_int, default=4,
                   help="T, tokens verified per speculative step: drafts + 1 (default: 4)")
    p.add_argument("--accepted", type=float,
                   help="mean tokens accepted per verify step, for the speculative traffic "
                        "(default: T)")
    p.add_argument("--state-dtype", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="SSM state / checkpoint dtype (default: fp32)")
    p.add_argument("--record-dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                   help="record dtype (x, B, d, k; dt and g records are fp32) (default: bf16)")
    p.add_argument("--conv-dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                   help="conv state dtype (default: bf16)")
    p.add_argument("--kv-dtype", choices=["fp8", "bf16", "fp16", "fp32"], default="bf16",
                   help="attention KV cache dtype (default: bf16)")
    p.add_argument("--padding-slots", type=int, default=1,
                   help="SSM slots kept for CUDA-graph padding rows (default: 1)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    p.set_defaults(func=lambda args: _run_plan(args, p))


_SUBCOMMANDS = (_add_layer_demo, _add_plan)


def _extension_subcommands() -> list:
    """The ``add`` functions installed packages register under :data:`EXTENSION_GROUP`, by name."""
    return [ep.load() for ep in sorted(importlib.metadata.entry_points(group=EXTENSION_GROUP),
                                       key=lambda ep: ep.name)]


# --------------------------------------------------------------------------- entry point

def build_parser() -> argparse.ArgumentParser:
    """The ``trtllm-replayssm`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="trtllm-replayssm",
        description="ReplaySSM decoding (checkpoint + input records) for Mamba-2 hybrid LLMs.",
        epilog=f"Installed packages add subcommands (entry-point group {EXTENSION_GROUP}); the "
               f"model demo 'demo' comes with the installed package: pip install -e '.[hf]'.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="subcommands", dest="command", metavar="COMMAND",
                                       required=True)
    for add in _SUBCOMMANDS + tuple(_extension_subcommands()):
        add(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses ``argv`` (default: ``sys.argv[1:]``) and runs the subcommand.

    Returns:
        int: the exit status (argparse exits with 2 on a usage error).
    """
    args = build_parser().parse_args(argv)
    return args.func(args)
