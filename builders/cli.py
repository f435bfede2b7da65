"""``trtllm-replayssm demo`` and ``trtllm-replayssm build``: subcommands this package adds to
the core CLI.

The core CLI (:mod:`trtllm_replayssm.cli`) imports no builder: it loads the subcommands that
installed packages register under the entry-point group ``trtllm_replayssm.cli`` (setup.py
registers :func:`add_demo` as ``demo`` and :func:`add_build` as ``build``), each a function that
adds its parser to the core's subparsers, as the core's own subcommands do. Adding the parsers
imports neither torch, transformers nor TensorRT-LLM; the handlers do.

- ``demo``: a small random hybrid model generates with and without ReplaySSM (:mod:`.hf.demo`).
- ``build``: ``trtllm-build`` with the engine-flow hook (:mod:`.trtllm_engine`): every argument
  it does not define goes to ``trtllm-build`` unchanged (``--checkpoint_dir``,
  ``--max_batch_size``, ...); it adds ``--replayssm-buffer-len`` and ``--replayssm-plugin-lib``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from trtllm_replayssm.cli import (
    MAX_L,
    PASS_THROUGH,
    add_device_argument,
    add_json_argument,
    dtype_arg,
    dtype_metavar,
    positive_int,
    print_figures,
    resolve_device,
)

__all__ = ["add_demo", "add_build", "DEMO_MODELS", "DEMO_ALIASES", "PLUGIN_LIBRARY_ENV"]

# demo --model: the presets of ``plan`` and ``bench`` (the demo builds a small model of the
# preset's family with random weights, :mod:`.hf.random_models`) and, for the families without
# a preset, the family. Names as ``plan`` spells them; DEMO_ALIASES keeps the family names the
# demo took before (random_models.FAMILIES) working.
DEMO_MODELS = {
    "nemotron-3-nano-4b": "nemotron_h",
    "nemotron-3-super-120b": "nemotron_h",
    "qwen3.5-4b": "qwen3_5",
    "qwen3.5-122b-a10b": "qwen3_5",  # the dense Qwen3.5 text stack: the same GDN layers
    "kimi-linear-48b": "kimi_linear",
    "mamba2": "mamba2",
    "qwen3-next": "qwen3_next",
}
DEMO_ALIASES = {
    "nemotron_h": "nemotron-3-super-120b",
    "qwen3_5": "qwen3.5-4b",
    "kimi_linear": "kimi-linear-48b",
    "qwen3_next": "qwen3-next",
}
_DEFAULT_MODEL = "nemotron-3-super-120b"
_FAMILY_NAMES = {
    "nemotron_h": "NemotronH",
    "mamba2": "Mamba2",
    "qwen3_next": "Qwen3-Next",
    "qwen3_5": "Qwen3.5",
    "kimi_linear": "Kimi Linear",
}
_SIZES = ("small", "tiny")  # random_models.SIZES
_DTYPES = ("f32", "bf16", "f16")  # trtllm_replayssm.demo.DTYPE_NAMES


def _demo_model(text: str) -> str:
    return DEMO_ALIASES.get(text, text)


def _size(nbytes: float) -> str:
    for unit, scale in (("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,.0f} B"


def format_demo(config: dict, fig: dict) -> str:
    """The ``demo`` text: ``config`` (model, family, device, dtype, seed, L) and ``fig``
    (:func:`~trtllm_replayssm_builders.hf.demo.run_model_demo`'s figures)."""
    c = config
    batch, steps, plan = fig["batch"], fig["decode_steps"], fig["plan"]
    agree = "identical" if fig["first_divergence"] is None else f"first differ at step {fig['first_divergence']}"
    of = "" if c["model"] == c["family"] else f"; the family of {c['model']}, at demo size"
    out = [
        f"trtllm-replayssm demo: {_FAMILY_NAMES[c['family']]} with random weights "
        f"({fig['parameters'] / 1e6:.1f} M parameters{of}), {c['device']}, {c['dtype']}, "
        f"seed {c['seed']}",
        f"  {fig['summary']}",
        f"  greedy generate, batch {batch} (prompts of {fig['prompt_lengths']} tokens, left-padded), "
        f"{fig['new_tokens']} new tokens: {steps} decode steps, {fig['flushes']} flushes per sequence",
        f"  agreement: {fig['tokens_equal']}/{fig['tokens_total']} tokens equal ({agree}); "
        f"max |Δ logits| / max |logits| = {fig['logits_rel_err']:.1e}",
        "  state bytes written per decode step (all SSM layers, whole batch):",
        f"    host decode  {_size(fig['host_written']):>12}  (every state, every step)",
        f"    ReplaySSM    {_size(fig['replay_written']):>12}  ({fig['host_written'] / fig['replay_written']:.1f}x less: "
        f"the checkpoint at a flush, one record otherwise)",
    ]
    if fig["host_step_ms"] is None:
        out.append(
            "  decode time per step: not shown on a CPU, where the host decodes with "
            "transformers' pure-PyTorch path and ReplaySSM with its PyTorch reference: "
            "such times say nothing about ReplaySSM's kernels (on a GPU: this demo with "
            "--device cuda, or 'trtllm-replayssm bench')"
        )
    else:
        out.append(
            f"  decode time per step (median): host {fig['host_step_ms']:.2f} ms, "
            f"ReplaySSM {fig['replay_step_ms']:.2f} ms (the whole small model's step; "
            f"'trtllm-replayssm bench' times a real model's SSM layers)"
        )
    out.append(
        f"  planner (trtllm_replayssm.planner, these SSM layers, L {c['L']}): per sequence, caches "
        f"{_size(plan['conventional_bytes'])} conventional / {_size(plan['replay_bytes'])} ReplaySSM; "
        f"state bytes written per step {_size(plan['conventional_written'])} / "
        f"{_size(plan['replay_written'])} (measured: {_size(fig['host_written'] / batch)} / "
        f"{_size(fig['replay_written'] / batch)})"
    )
    return "\n".join(out)


def _run_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    device = resolve_device(args.device, parser)
    if args.L > MAX_L:
        parser.error(f"--L {args.L}: expected at most {MAX_L}")
    if args.new_tokens is not None and args.new_tokens < 2:
        parser.error(f"--new-tokens {args.new_tokens}: expected at least 2 (one decode step)")
    if importlib.util.find_spec("transformers") is None:
        parser.error(
            "the demo runs Hugging Face transformers models: pip install 'trtllm_replayssm[hf]' (transformers >= 5.17)"
        )
    from trtllm_replayssm.demo import torch_dtype

    from .hf.demo import run_model_demo

    family = DEMO_MODELS[args.model]
    fig = run_model_demo(
        family,
        size=args.size,
        buffer_len=args.L,
        batch=args.batch,
        new_tokens=args.new_tokens,
        dtype=torch_dtype(args.dtype),
        device=device,
        seed=args.seed,
    )
    if device.type == "cpu":
        fig["host_step_ms"] = fig["replay_step_ms"] = None
    config = dict(
        model=args.model, family=family, size=args.size, device=str(device), dtype=args.dtype, seed=args.seed, L=args.L
    )
    print_figures(args, {"config": config, **fig}, lambda: format_demo(config, fig))
    return 0


def add_demo(subparsers) -> None:
    """Adds ``demo`` to the ``trtllm-replayssm`` subparsers (entry point ``trtllm_replayssm.cli``)."""
    p = subparsers.add_parser(
        "demo",
        help="a small random hybrid model generates with and without ReplaySSM",
        description="Builds a small Hugging Face hybrid model with random weights (no download), "
        "generates greedily with the host's own decode and with ReplaySSM "
        "(trtllm_replayssm_builders.hf.enable_replayssm), and prints how the two "
        "agree, the state bytes each writes per decode step, the decode time per "
        "step (on a GPU) and the planner's figures for the same SSM layers.",
    )
    p.add_argument(
        "--model",
        type=_demo_model,
        choices=list(DEMO_MODELS),
        default=_DEFAULT_MODEL,
        metavar="MODEL",
        help=f"{', '.join(DEMO_MODELS)}: a preset of plan and bench, whose family "
        f"(NemotronH, Qwen3.5, Kimi Linear) the demo builds at demo size with random "
        f"weights, or a family without a preset (default: {_DEFAULT_MODEL}; the "
        f"family names {', '.join(DEMO_ALIASES)} work too)",
    )
    p.add_argument("--size", choices=_SIZES, default="small", help="model size: small (demo) or tiny (tests) (default: small)")
    add_device_argument(p)
    p.add_argument(
        "--dtype",
        type=dtype_arg(*_DTYPES),
        default="f32",
        metavar=dtype_metavar(*_DTYPES),
        help="model dtype; SSM states stay fp32 (default: f32)",
    )
    p.add_argument("--L", type=positive_int, default=16, help=f"ReplaySSM records per sequence, at most {MAX_L} (default: 16)")
    p.add_argument("--batch", type=positive_int, default=4, help="prompts (default: 4)")
    p.add_argument("--new-tokens", type=positive_int, help="tokens generated per prompt (default: 4 L + 1, four flushes)")
    p.add_argument("--seed", type=int, default=0, help="weights and prompts (default: 0)")
    add_json_argument(p)
    p.set_defaults(func=lambda args: _run_demo(args, p))


# --------------------------------------------------------------------------- build

PLUGIN_LIBRARY_ENV = "TRTLLM_REPLAYSSM_PLUGIN_LIB"  # trtllm_engine.adapter.PLUGIN_LIBRARY_ENV (a test checks)


def _run_build(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Checks what needs no TensorRT-LLM, then runs trtllm-build with the hook."""
    if args.replayssm_buffer_len > MAX_L:
        parser.error(f"--replayssm-buffer-len {args.replayssm_buffer_len}: expected at most {MAX_L}")
    from .trtllm_engine.hook import EngineFlowError, settings_problems_for_cli

    passed = getattr(args, PASS_THROUGH)
    problem = settings_problems_for_cli(passed)
    if problem:
        parser.error(f"trtllm-build arguments: {problem}")
    if importlib.util.find_spec("tensorrt_llm") is None:
        parser.error(
            "build: tensorrt_llm is not importable; expected TensorRT-LLM 1.2.1, the last release with "
            "trtllm-build engines (pip install tensorrt_llm==1.2.1, on a machine with a CUDA GPU)"
        )
    from .trtllm_engine.adapter import run_trtllm_build

    try:
        return run_trtllm_build(passed, buffer_len=args.replayssm_buffer_len, plugin_lib=args.replayssm_plugin_lib)
    except ImportError as e:
        parser.error(str(e))
    except EngineFlowError as e:
        print(f"trtllm-replayssm build: error: {e}", file=sys.stderr)
        return 1


def add_build(subparsers) -> None:
    """Adds ``build`` to the ``trtllm-replayssm`` subparsers (entry point ``trtllm_replayssm.cli``)."""
    p = subparsers.add_parser(
        "build",
        help="trtllm-build a Mamba-2 engine whose decode steps run ReplaySSM (TensorRT-LLM 1.2.1)",
        description="Runs TensorRT-LLM 1.2.1's trtllm-build with every argument this command does not "
        "define (--checkpoint_dir, --output_dir, --max_batch_size, ...), after rewriting each Mamba2 "
        "layer of the MambaForCausalLM it builds: the context phase keeps the stock selective_scan, "
        "generation steps run the ReplaySSM plugin, and the engine's config.json sizes the runtime's "
        "state buffers for the records (docs/engine_flow.md). Needs paged state, packed input, "
        "the mamba_conv1d plugin (trtllm-build's defaults for Mamba), beam width 1, tp = pp = 1, "
        "--workers 1. The runtime must then use the engine's max_batch_size as its slot count.",
        allow_abbrev=False,  # a trtllm-build flag must never be taken for an abbreviation of ours
        epilog="Example: trtllm-replayssm build --replayssm-buffer-len 16 --checkpoint_dir ckpt "
        "--output_dir engine --max_batch_size 64 --gemm_plugin auto",
    )
    p.add_argument(
        "--replayssm-buffer-len",
        type=positive_int,
        default=16,
        metavar="L",
        help=f"ReplaySSM records per sequence, at most {MAX_L} (default: 16)",
    )
    p.add_argument(
        "--replayssm-plugin-lib",
        default=os.environ.get(PLUGIN_LIBRARY_ENV),
        metavar="PATH",
        help=f"the engine plugin library built from plugins/cpp (default: ${PLUGIN_LIBRARY_ENV})",
    )
    p.set_defaults(func=lambda args: _run_build(args, p), **{PASS_THROUGH: []})
