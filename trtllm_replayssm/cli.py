"""``trtllm-replayssm``: command-line entry point (``python -m trtllm_replayssm`` too).

Each subcommand is one ``_add_<name>`` function that builds its parser and sets ``func``, the
handler taking the parsed arguments and returning the exit status; :data:`_SUBCOMMANDS` lists them.
"""
from __future__ import annotations

import argparse
from typing import Optional, Sequence

import torch

from . import __version__
from .demo import CPU_GEOMETRY, CUDA_GEOMETRY, DTYPES, run_mamba2_demo
from .ops import MAX_L

__all__ = ["build_parser", "main"]


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


# --------------------------------------------------------------------------- demo

def _run_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
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
    print("trtllm-replayssm demo: one Mamba-2 layer, conventional decode vs ReplaySSM")
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


def _add_demo(subparsers) -> None:
    p = subparsers.add_parser(
        "demo", help="decode one Mamba-2 layer conventionally and by ReplaySSM; compare",
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
    p.set_defaults(func=lambda args: _run_demo(args, p))


_SUBCOMMANDS = (_add_demo,)


# --------------------------------------------------------------------------- entry point

def build_parser() -> argparse.ArgumentParser:
    """The ``trtllm-replayssm`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="trtllm-replayssm",
        description="ReplaySSM decoding (checkpoint + input records) for Mamba-2 hybrid LLMs.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="subcommands", dest="command", metavar="COMMAND",
                                       required=True)
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses ``argv`` (default: ``sys.argv[1:]``) and runs the subcommand.

    Returns:
        int: the exit status (argparse exits with 2 on a usage error).
    """
    args = build_parser().parse_args(argv)
    return args.func(args)
