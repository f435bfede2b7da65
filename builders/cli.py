"""``trtllm-replayssm demo``: the model demo, a subcommand this package adds to the core CLI.

The core CLI (:mod:`trtllm_replayssm.cli`) imports no builder: it loads the subcommands that
installed packages register under the entry-point group ``trtllm_replayssm.cli`` (setup.py
registers :func:`add_demo` as ``demo``), each a function that adds its parser to the core's
subparsers, as the core's own subcommands do.
"""
from __future__ import annotations

import argparse
import importlib.util

import torch

__all__ = ["add_demo"]

_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
_FAMILY_NAMES = {"nemotron_h": "NemotronH", "mamba2": "Mamba2", "qwen3_next": "Qwen3-Next",
                 "qwen3_5": "Qwen3.5", "kimi_linear": "Kimi Linear"}


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _size(nbytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def _run_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from trtllm_replayssm.cache import MAX_L

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error(f"--device {device}: CUDA is not available")
    if args.L > MAX_L:
        parser.error(f"--L {args.L}: expected at most {MAX_L}")
    if args.new_tokens is not None and args.new_tokens < 2:
        parser.error(f"--new-tokens {args.new_tokens}: expected at least 2 (one decode step)")
    if importlib.util.find_spec("transformers") is None:
        parser.error("the demo runs Hugging Face transformers models: pip install 'trtllm_replayssm[hf]' (transformers >= 5.17)")
    from .hf.demo import run_model_demo

    fig = run_model_demo(args.model, size=args.size, buffer_len=args.L, batch=args.batch,
                         new_tokens=args.new_tokens, dtype=_DTYPES[args.dtype], device=device,
                         seed=args.seed)
    batch, steps, plan = fig["batch"], fig["decode_steps"], fig["plan"]
    agree = ("identical" if fig["first_divergence"] is None else
             f"first differ at step {fig['first_divergence']}")
    print(f"trtllm-replayssm demo: {_FAMILY_NAMES[args.model]} with random weights "
          f"({fig['parameters'] / 1e6:.1f} M parameters), {device}, {args.dtype}, seed {args.seed}")
    print(f"  {fig['summary']}")
    print(f"  greedy generate, batch {batch} (prompts of {fig['prompt_lengths']} tokens, left-padded), "
          f"{fig['new_tokens']} new tokens: {steps} decode steps, {fig['flushes']} flushes per sequence")
    print(f"  agreement: {fig['tokens_equal']}/{fig['tokens_total']} tokens equal ({agree}); "
          f"max |Δ logits| / max |logits| = {fig['logits_rel_err']:.1e}")
    print("  state bytes written per decode step (all SSM layers, whole batch):")
    print(f"    host decode  {_size(fig['host_written']):>12}  (every state, every step)")
    print(f"    ReplaySSM    {_size(fig['replay_written']):>12}  ({fig['host_written'] / fig['replay_written']:.1f}x less: "
          f"the checkpoint at a flush, one record otherwise)")
    note = "; on a CPU the replay op is the PyTorch reference" if device.type == "cpu" else ""
    print(f"  decode time per step (median): host {fig['host_step_ms']:.2f} ms, "
          f"ReplaySSM {fig['replay_step_ms']:.2f} ms{note}")
    print(f"  planner (trtllm_replayssm.planner, these SSM layers, L {args.L}): per sequence, caches "
          f"{_size(plan['conventional_bytes'])} conventional / {_size(plan['replay_bytes'])} ReplaySSM; "
          f"state bytes written per step {_size(plan['conventional_written'])} / "
          f"{_size(plan['replay_written'])} (measured: {_size(fig['host_written'] / batch)} / "
          f"{_size(fig['replay_written'] / batch)})")
    return 0


def add_demo(subparsers) -> None:
    """Adds ``demo`` to the ``trtllm-replayssm`` subparsers (entry point ``trtllm_replayssm.cli``)."""
    from .hf.random_models import FAMILIES, SIZES

    p = subparsers.add_parser(
        "demo", help="a small random hybrid model generates with and without ReplaySSM",
        description="Builds a small Hugging Face hybrid model with random weights (no download), "
                    "generates greedily with the host's own decode and with ReplaySSM "
                    "(trtllm_replayssm_builders.hf.enable_replayssm), and prints how the two "
                    "agree, the state bytes each writes per decode step, the decode time per "
                    "step and the planner's figures for the same SSM layers.")
    p.add_argument("--model", choices=FAMILIES, default="nemotron_h",
                   help="model family (default: nemotron_h)")
    p.add_argument("--size", choices=list(SIZES), default="small",
                   help="model size: small (demo) or tiny (tests) (default: small)")
    p.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    p.add_argument("--dtype", choices=list(_DTYPES), default="f32",
                   help="model dtype; SSM states stay fp32 (default: f32)")
    p.add_argument("--L", type=_positive_int, default=16,
                   help="ReplaySSM records per sequence, at most 64 (default: 16)")
    p.add_argument("--batch", type=_positive_int, default=4, help="prompts (default: 4)")
    p.add_argument("--new-tokens", type=_positive_int,
                   help="tokens generated per prompt (default: 4 L + 1, four flushes)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompts (default: 0)")
    p.set_defaults(func=lambda args: _run_demo(args, p))
