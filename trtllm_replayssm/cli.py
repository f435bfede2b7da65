"""``trtllm-replayssm``: command-line entry point (``python -m trtllm_replayssm`` too).

Each subcommand is one ``_add_<name>`` function that builds its parser and sets ``func``, the
handler taking the parsed arguments and returning the exit status; :data:`_SUBCOMMANDS` lists them.
Installed packages add subcommands the same way through the entry-point group
:data:`EXTENSION_GROUP` (each entry point is such an ``add`` function): the model demo ``demo``
comes from ``trtllm_replayssm_builders``, which this package never imports. A subcommand that
sets the default :data:`PASS_THROUGH` receives the arguments it does not define instead of a
usage error (``build`` hands them to ``trtllm-build``).

Building the parsers imports neither torch nor Triton (``--help`` answers at once); a handler
imports what it runs. The argument types here (:func:`positive_int`, :func:`device_arg`,
:func:`dtype_arg`, :func:`out_dir`) are shared with the extensions, so every subcommand names the
option and what it expects in the same words.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import sys
from typing import Callable, Optional, Sequence

from . import __version__
from .models import GDN, KDA, MAMBA2, DeltaRuleGeometry, HybridModel, Layer, Mamba2Geometry, PRESETS, load_model

__all__ = [
    "EXTENSION_GROUP",
    "PASS_THROUGH",
    "MAX_L",
    "build_parser",
    "main",
    "positive_int",
    "device_arg",
    "resolve_device",
    "dtype_arg",
    "dtype_metavar",
    "out_dir",
    "make_out_dir",
    "print_json",
    "print_figures",
    "add_device_argument",
    "add_json_argument",
]

EXTENSION_GROUP = "trtllm_replayssm.cli"
# A subcommand whose parser sets this default gets the arguments it does not define, in order
# (``trtllm-replayssm build`` passes them to trtllm-build); other subcommands refuse them.
PASS_THROUGH = "pass_through_args"
MAX_L = 64  # records per slot the replay kernels hold: trtllm_replayssm.cache.MAX_L (a test checks)


# --------------------------------------------------------------------------- argument types


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1 (the error names what was given)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def device_arg(text: str) -> str:
    """An argparse type: ``cpu``, ``cuda`` or ``cuda:N`` (checked against the machine by
    :func:`resolve_device` when the command runs)."""
    if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", text.strip()):
        raise argparse.ArgumentTypeError(f"expected cpu, cuda or cuda:N, got {text!r}")
    return text.strip()


def resolve_device(text: Optional[str], parser: argparse.ArgumentParser):
    """The torch device of a ``--device`` value (default: cuda when available, else cpu); a
    usage error when that CUDA device is not there."""
    import torch

    device = torch.device(text or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda":
        if not torch.cuda.is_available():
            parser.error(
                f"--device {device}: CUDA is not available (torch {torch.__version__}, "
                f"{'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU build'})"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            parser.error(
                f"--device {device}: this machine has {torch.cuda.device_count()} CUDA "
                f"device(s); expected cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    return device


# Spellings of a dtype on the command line; each option answers with its own (plan: fp32, the
# demos: f32), and accepts the others.
_DTYPE_SPELLINGS = {
    "fp32": "fp32",
    "f32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "f16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "float8_e4m3fn": "fp8",
}


def dtype_arg(*names: str):
    """An argparse type for a dtype option whose values are ``names`` (e.g. "f32", "bf16"):
    accepts any spelling of those dtypes (f32, fp32, float32, ...) and returns the one in
    ``names``. Use with ``metavar=dtype_metavar(*names)``."""
    by_kind = {_DTYPE_SPELLINGS[n]: n for n in names}

    def dtype(text: str) -> str:
        kind = _DTYPE_SPELLINGS.get(text.strip().lower())
        if kind not in by_kind:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(names)}, got {text!r}")
        return by_kind[kind]

    return dtype


def dtype_metavar(*names: str) -> str:
    return "{" + ",".join(names) + "}"


def out_dir(text: str) -> str:
    """An argparse type for an output directory: an existing directory, or a new one whose
    parent exists (created when the command writes; a missing tree is a usage error, not
    created silently)."""
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.exists(path) and not os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{text!r} is a file; expected a directory")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(
            f"{text!r}: its parent {parent!r} does not exist; expected "
            f"an existing directory or a new one in an existing "
            f"directory (mkdir -p it first)"
        )
    return text


def make_out_dir(path: str) -> bool:
    """Creates ``path`` (one level, see :func:`out_dir`); True when it was created."""
    if os.path.isdir(path):
        return False
    os.mkdir(path)
    return True


def print_json(data) -> None:
    print(json.dumps(data, indent=2, allow_nan=False))


def print_figures(args: argparse.Namespace, data: dict, text: Callable[[], str]) -> None:
    """With ``--json`` (:func:`add_json_argument`), ``data`` as JSON; else ``text()``."""
    if args.json:
        print_json(data)
    else:
        print(text())


def add_device_argument(p: argparse.ArgumentParser) -> None:
    """``--device`` (cpu, cuda, cuda:N; default: cuda if available); see :func:`resolve_device`."""
    p.add_argument(
        "--device", type=device_arg, metavar="{cpu,cuda,cuda:N}", help="where to run (default: cuda if available, else cpu)"
    )


def add_json_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print the figures as JSON instead of the text")


# --------------------------------------------------------------------------- layer-demo

_LAYER_DTYPES = ("f32", "bf16", "f16")  # trtllm_replayssm.demo.DTYPE_NAMES


def _run_layer_demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .demo import CPU_GEOMETRY, CUDA_GEOMETRY, format_layer_demo, run_mamba2_demo, torch_dtype

    device = resolve_device(args.device, parser)
    defaults = CUDA_GEOMETRY if device.type == "cuda" else CPU_GEOMETRY
    nheads, head_dim, d_state, ngroups = (
        v if v is not None else d for v, d in zip((args.nheads, args.head_dim, args.d_state, args.ngroups), defaults)
    )
    if nheads % ngroups:
        parser.error(f"--ngroups {ngroups} must divide --nheads {nheads}")
    if args.L > MAX_L:
        parser.error(f"--L {args.L}: expected at most {MAX_L}")

    config = dict(
        device=str(device),
        nheads=nheads,
        head_dim=head_dim,
        d_state=d_state,
        ngroups=ngroups,
        L=args.L,
        batch=args.batch,
        steps=args.steps,
        state_dtype=args.state_dtype,
        act_dtype=args.act_dtype,
        seed=args.seed,
    )
    fig = run_mamba2_demo(
        nheads=nheads,
        head_dim=head_dim,
        d_state=d_state,
        ngroups=ngroups,
        L=args.L,
        batch=args.batch,
        steps=args.steps,
        state_dtype=torch_dtype(args.state_dtype),
        act_dtype=torch_dtype(args.act_dtype),
        device=device,
        seed=args.seed,
    )
    print_figures(args, {"config": config, **fig}, lambda: format_layer_demo(config, fig))
    return 0


def _add_layer_demo(subparsers) -> None:
    p = subparsers.add_parser(
        "layer-demo",
        help="decode one Mamba-2 layer conventionally and by ReplaySSM; compare",
        description="Runs Mamba-2 decode steps of one layer with the conventional op "
        "(mamba2_decode_step) and the replay op (mamba2_replay_step) from the same "
        "state and inputs; prints their output error, the flushes and the state "
        "bytes each writes per step per sequence. No transformers needed.",
    )
    add_device_argument(p)
    from .demo import CPU_GEOMETRY, CUDA_GEOMETRY  # constants only: demo imports torch lazily

    for name, cpu, cuda in zip(("nheads", "head-dim", "d-state", "ngroups"), CPU_GEOMETRY, CUDA_GEOMETRY):
        p.add_argument(f"--{name}", type=positive_int, help=f"layer geometry (default: {cpu} on cpu, {cuda} on cuda)")
    p.add_argument("--L", type=positive_int, default=16, help=f"records per slot, at most {MAX_L} (default: 16)")
    p.add_argument("--batch", type=positive_int, default=4, help="sequences (default: 4)")
    p.add_argument("--steps", type=positive_int, default=300, help="batched decode steps (default: 300)")
    p.add_argument(
        "--state-dtype",
        type=dtype_arg(*_LAYER_DTYPES),
        default="f32",
        metavar=dtype_metavar(*_LAYER_DTYPES),
        help="state / checkpoint dtype (default: f32)",
    )
    p.add_argument(
        "--act-dtype",
        type=dtype_arg(*_LAYER_DTYPES),
        default="f32",
        metavar=dtype_metavar(*_LAYER_DTYPES),
        help="activation / record dtype (default: f32)",
    )
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    add_json_argument(p)
    p.set_defaults(func=lambda args: _run_layer_demo(args, p))


# --------------------------------------------------------------------------- plan

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def _byte_size(text: str) -> int:
    """'141GiB', '80GB', '1.5TiB' or a plain number of bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _SIZE_UNITS or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; expected a positive number with an optional unit "
            f"(B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 141GiB"
        )
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


def _size(n: float) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:,.2f} {unit}"
    return f"{n:,.0f} B"


def _plan_checks(result, args, parser) -> list:
    """Usage errors and warnings of a plan: a sequence whose KV cache alone exceeds the GPU is an
    error (nothing would fit); a mode in which no sequence fits the caches' budget, a warning."""
    kv_seq = result.max_seq_len * result.kv_bytes_per_token
    if kv_seq > result.budget.gpu_mem_bytes:
        most = result.budget.gpu_mem_bytes // result.kv_bytes_per_token
        parser.error(
            f"no sequence can fit: one sequence's KV cache, {result.max_seq_len:,} tokens "
            f"(--max-seq-len) x {_size(result.kv_bytes_per_token)}, takes "
            f"{_size(kv_seq)}, more than the whole GPU ({_size(result.budget.gpu_mem_bytes)}, "
            f"--gpu-mem); expected --max-seq-len at most {most:,} or a larger --gpu-mem"
        )
    empty = [m for m, mp in result.modes.items() if mp.max_concurrency == 0]
    if not empty:
        return []
    need = result.modes[empty[0]]
    return [
        f"no sequence fits in mode{'s' if len(empty) > 1 else ''} {', '.join(empty)} "
        f"(max seqs 0): one sequence takes {_size(need.total_bytes)} in {empty[0]} (SSM "
        f"{_size(need.ssm_bytes)} + KV {_size(need.kv_bytes)} at max_seq_len "
        f"{result.max_seq_len:,}), plus {result.num_padding_slots} padding slot(s) of SSM "
        f"caches, and the caches get {_size(result.budget.cache_bytes)} ((--gpu-mem - "
        f"--weights-gib / --tp) x --free-fraction); give them more memory or a shorter "
        f"--max-seq-len"
    ]


_PLAN_DTYPES = ("fp32", "bf16", "fp16")


def _run_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from .planner import DTYPE_NAMES, PlanConfig, format_plan, plan

    dtypes = {name: dtype for dtype, name in DTYPE_NAMES.items()}
    try:
        model = load_model(args.model)
        config = PlanConfig(
            buffer_len=args.buffer_len,
            spec_tokens=args.spec_tokens,
            accepted=args.accepted,
            state_dtype=dtypes[args.state_dtype],
            record_dtype=dtypes[args.record_dtype],
            conv_dtype=dtypes[args.conv_dtype],
            kv_dtype=dtypes[args.kv_dtype],
        )
        result = plan(
            model,
            tp_size=args.tp,
            config=config,
            gpu_mem_bytes=args.gpu_mem,
            free_fraction=args.free_fraction,
            weights_bytes=int(args.weights_gib * 2**30),
            max_seq_len=args.max_seq_len,
            num_padding_slots=args.padding_slots,
            batch=args.batch,
        )
    except (ValueError, TypeError) as e:
        parser.error(str(e))
    warnings = _plan_checks(result, args, parser)
    print_figures(args, {**result.to_dict(), "warnings": warnings}, lambda: format_plan(result))
    sys.stdout.flush()
    for w in warnings:
        print(f"trtllm-replayssm plan: warning: {w}", file=sys.stderr)
    return 0


def _add_plan(subparsers) -> None:
    p = subparsers.add_parser(
        "plan",
        help="memory and HBM-traffic plan of a hybrid model's decode caches",
        description="Exact bytes per SSM layer and per sequence, KV bytes per token, the most "
        "concurrent sequences a GPU holds, and the SSM layers' HBM traffic per "
        "decode step, for conventional decode, conventional speculative decode "
        "(1 + T state snapshots), ReplaySSM and ReplaySSM speculative (history B, "
        "window T). Figures are per tensor-parallel rank. No GPU needed.",
    )
    p.add_argument("--model", required=True, help=f"a preset ({', '.join(PRESETS)}) or the path of a Hugging Face config.json")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size (default: 1)")
    p.add_argument(
        "--gpu-mem",
        type=_byte_size,
        default=_byte_size("141GiB"),
        help="memory of one GPU, e.g. 141GiB or 80GB (default: 141GiB)",
    )
    p.add_argument(
        "--free-fraction",
        type=float,
        default=0.9,
        help="share of the memory left after the weights that the caches may use, as "
        "TensorRT-LLM's free_gpu_memory_fraction (default: 0.9)",
    )
    p.add_argument(
        "--weights-gib",
        type=float,
        default=0.0,
        help="weights of the whole model in GiB, split over the TP ranks (default: 0)",
    )
    p.add_argument("--max-seq-len", type=positive_int, default=8192, help="KV tokens each sequence reserves (default: 8192)")
    p.add_argument(
        "--buffer-len", type=positive_int, default=16, help="replay records L; the history B in speculative mode (default: 16)"
    )
    p.add_argument(
        "--spec-tokens", type=positive_int, default=4, help="T, tokens verified per speculative step: drafts + 1 (default: 4)"
    )
    p.add_argument(
        "--accepted", type=float, help="mean tokens accepted per verify step, for the speculative traffic (default: T)"
    )
    for name, what, names, default in (
        ("state", "SSM state / checkpoint dtype (an fp8 checkpoint: a row of the checkpoint table)", _PLAN_DTYPES, "fp32"),
        ("record", "record dtype (x, B, d, k; dt and g records are fp32)", ("bf16", "fp16", "fp32"), "bf16"),
        ("conv", "conv state dtype", ("bf16", "fp16", "fp32"), "bf16"),
        ("kv", "attention KV cache dtype", ("fp8", "bf16", "fp16", "fp32"), "bf16"),
    ):
        p.add_argument(
            f"--{name}-dtype",
            type=dtype_arg(*names),
            default=default,
            metavar=dtype_metavar(*names),
            help=f"{what} (default: {default})",
        )
    p.add_argument("--padding-slots", type=int, default=1, help="SSM slots kept for CUDA-graph padding rows (default: 1)")
    p.add_argument(
        "--batch",
        type=positive_int,
        help="sequences per step at which the measured speed of replay and verify is looked up "
        "(H200 figures of docs/benchmarks.md; advice only) (default: each mode's max seqs)",
    )
    add_json_argument(p)
    p.set_defaults(func=lambda args: _run_plan(args, p))


# --------------------------------------------------------------------------- bench

MAMBA2_DIMS = ("nheads", "head_dim", "d_state", "ngroups")
DELTA_RULE_DIMS = ("k_heads", "v_heads", "head_k_dim", "head_v_dim")
_KIND_DIMS = {MAMBA2: MAMBA2_DIMS, GDN: DELTA_RULE_DIMS, KDA: DELTA_RULE_DIMS}


def _geometry(text: str):
    """An argparse type: KIND:D1,D2,D3,D4, e.g. mamba2:128,64,128,8 -> (kind, dims)."""
    kind, _, dims = text.partition(":")
    kind = kind.strip().lower()
    values = [positive_int(d) if re.fullmatch(r"\s*[0-9]+\s*", d) else None for d in dims.split(",")]
    if kind not in _KIND_DIMS or len(values) != 4 or None in values:
        raise argparse.ArgumentTypeError(
            f"expected mamba2:{','.join(MAMBA2_DIMS)} or gdn|kda:{','.join(DELTA_RULE_DIMS)} (positive integers), got {text!r}"
        )
    return kind, tuple(values)


def _geometry_model(specs) -> HybridModel:
    """A stack of one layer per ``(kind, dims)`` of ``--geometry`` (conv kernel 4)."""
    layers = []
    for i, (kind, dims) in enumerate(specs):
        # Mamba-2: ngroups divides nheads; GDN / KDA: k_heads divides v_heads.
        part, whole = (3, 0) if kind == MAMBA2 else (0, 1)
        if dims[whole] % dims[part]:
            names = _KIND_DIMS[kind]
            raise ValueError(
                f"--geometry {kind}:{','.join(map(str, dims))}: {names[part]} "
                f"{dims[part]} must divide {names[whole]} {dims[whole]}"
            )
        geom = (Mamba2Geometry if kind == MAMBA2 else DeltaRuleGeometry)(*dims, d_conv=4)
        layers.append(Layer(i, kind, geom))
    name = " + ".join(f"{kind}:{','.join(map(str, dims))}" for kind, dims in specs)
    return HybridModel(name=name, family="geometry", layers=tuple(layers))


def _bench_model(args, parser):
    """The model (whole, then one rank's share) that ``bench`` times."""
    try:
        model = load_model(args.model) if args.model else _geometry_model(args.geometry)
        model = model.for_tp(args.tp)
    except ValueError as e:
        parser.error(str(e))
    if not model.ssm_layers:
        parser.error(f"--model {args.model}: no Mamba-2, GDN or KDA layer to time")
    return model


def _run_bench(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    model = _bench_model(args, parser)
    if args.L > MAX_L:
        parser.error(f"--L {args.L}: expected at most {MAX_L}")
    if args.spec_tokens is not None:
        if args.spec_tokens > args.L or args.L + args.spec_tokens > MAX_L:
            parser.error(
                f"--spec-tokens {args.spec_tokens}: expected at most --L {args.L} (the "
                f"history B is L) and L + T at most {MAX_L}"
            )
        if not 1 / args.spec_tokens <= args.accept <= 1:
            parser.error(f"--accept {args.accept:g}: expected 1/T ({1 / args.spec_tokens:.3g}) to 1")
    import torch

    if not torch.cuda.is_available():
        print(
            f"trtllm-replayssm bench: needs a CUDA GPU, and torch sees none (torch "
            f"{torch.__version__}, {'CUDA ' + torch.version.cuda if torch.version.cuda else 'a CPU build'}). "
            f"Without one: 'trtllm-replayssm plan' gives the bytes and HBM traffic per step, "
            f"'trtllm-replayssm layer-demo' checks replay against conventional decode.",
            file=sys.stderr,
        )
        return 2
    device = resolve_device(args.device or "cuda", parser)
    if device.type != "cuda":
        parser.error(f"--device {args.device}: bench times CUDA graphs; expected cuda or cuda:N")
    if device.index is None:  # torch.cuda.set_device needs an index
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    plot = args.out is not None
    if plot:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            plot = False
            print(
                "trtllm-replayssm bench: note: matplotlib is not installed, so --out writes the "
                "JSON only (pip install matplotlib, or 'trtllm_replayssm[bench]', for the PNG)",
                file=sys.stderr,
            )

    from . import bench
    from .planner import DTYPE_NAMES

    dtypes = {name: dtype for dtype, name in DTYPE_NAMES.items()}
    state, act = dtypes[args.state_dtype], dtypes[args.act_dtype]
    result = bench.run_bench(
        model,
        batches=args.batch,
        L=args.L,
        state_dtype=state,
        act_dtype=act,
        spec_tokens=args.spec_tokens,
        accept=args.accept,
        device=device,
    )
    import datetime

    import triton

    gpu = torch.cuda.get_device_name(device)
    report = {
        "model": {"name": model.name, "family": model.family, "tp_size": model.tp_size},
        "device": gpu,
        "date": str(datetime.date.today()),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "config": {
            "L": args.L,
            "state_dtype": args.state_dtype,
            "act_dtype": args.act_dtype,
            "spec_tokens": args.spec_tokens,
            "history": args.L if args.spec_tokens else None,
            "accept": args.accept if args.spec_tokens else None,
            "batches": args.batch,
        },
        **result,
    }
    print_figures(
        args,
        report,
        lambda: bench.format_bench(
            model,
            result,
            device_name=gpu,
            L=args.L,
            state_dtype=state,
            act_dtype=act,
            spec_tokens=args.spec_tokens,
            accept=args.accept,
        ),
    )
    if args.out is not None:
        make_out_dir(args.out)
        stem = os.path.join(args.out, "bench-" + re.sub(r"[^A-Za-z0-9._-]+", "_", model.name))
        with open(stem + ".json", "w") as f:
            json.dump(report, f, indent=1)
        written = [stem + ".json"]
        if plot:
            bench.plot_bench(model, result, stem + ".png", device_name=gpu)
            written.append(stem + ".png")
        print(f"wrote {' and '.join(written)}", file=sys.stderr if args.json else sys.stdout)
    return 0 if all(r["status"] == "ok" for r in result["rows"]) else 1


def _add_bench(subparsers) -> None:
    p = subparsers.add_parser(
        "bench",
        help="time conventional vs ReplaySSM steps of a model's SSM layers on this GPU",
        description="Times one decode step of each SSM layer kind of a model (its Mamba-2, GDN "
        "and KDA layers, one rank's geometry with --tp) on this GPU, conventional "
        "and ReplaySSM, at each batch; with --spec-tokens T also the speculative "
        "verify (replay verify + commit vs snapshot verify + commit). Each step runs "
        "in a CUDA graph with the states rotated over >= 512 MiB so that they come "
        "from HBM, replay cursors spread over [0, L); figures are medians, checked "
        "against the conventional outputs first. Prints a table per layer and for "
        "the whole model's SSM layers; --out DIR also writes JSON and a PNG plot. "
        "Needs a CUDA GPU (on a CPU it says so and exits with status 2).",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help=f"a preset ({', '.join(PRESETS)}) or the path of a Hugging Face config.json")
    src.add_argument(
        "--geometry",
        type=_geometry,
        action="append",
        metavar="KIND:DIMS",
        help=f"instead of --model, a layer to time: mamba2:{','.join(MAMBA2_DIMS)} or "
        f"gdn|kda:{','.join(DELTA_RULE_DIMS)}, e.g. mamba2:128,64,128,8; "
        f"repeat for several",
    )
    p.add_argument(
        "--tp", type=positive_int, default=1, help="tensor-parallel size: time one rank's share of each layer (default: 1)"
    )
    p.add_argument(
        "--batch", type=positive_int, nargs="+", default=[1, 16, 64, 256], help="batch sizes (default: 1 16 64 256)"
    )
    p.add_argument(
        "--L",
        type=positive_int,
        default=16,
        help=f"replay records per slot, at most {MAX_L}; the history B with --spec-tokens (default: 16)",
    )
    p.add_argument(
        "--state-dtype",
        type=dtype_arg(*_PLAN_DTYPES),
        default="fp32",
        metavar=dtype_metavar(*_PLAN_DTYPES),
        help="state / checkpoint dtype (default: fp32)",
    )
    p.add_argument(
        "--act-dtype",
        type=dtype_arg("bf16", "fp16", "fp32"),
        default="bf16",
        metavar=dtype_metavar("bf16", "fp16", "fp32"),
        help="activation and record dtype (default: bf16)",
    )
    p.add_argument(
        "--spec-tokens",
        type=positive_int,
        metavar="T",
        help="also time the speculative verify of T tokens per row (drafts + 1; T <= L) (default: not timed)",
    )
    p.add_argument(
        "--accept", type=float, default=0.7, help="with --spec-tokens: mean accepted tokens per verify / T (default: 0.7)"
    )
    p.add_argument("--device", type=device_arg, metavar="cuda[:N]", help="the GPU (default: cuda)")
    p.add_argument(
        "--out",
        type=out_dir,
        metavar="DIR",
        help="also write DIR/bench-<model>.json and .png (matplotlib) (DIR is created if its parent exists)",
    )
    add_json_argument(p)
    p.set_defaults(func=lambda args: _run_bench(args, p))


_SUBCOMMANDS = (_add_layer_demo, _add_plan, _add_bench)


def _extension_subcommands() -> list:
    """The ``add`` functions installed packages register under :data:`EXTENSION_GROUP`, by name."""
    return [ep.load() for ep in sorted(importlib.metadata.entry_points(group=EXTENSION_GROUP), key=lambda ep: ep.name)]


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    """The ``trtllm-replayssm`` parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="trtllm-replayssm",
        description="ReplaySSM decoding (a checkpoint + the last L input records instead of "
        "rewriting the recurrent state every step) for hybrid LLMs with Mamba-2, "
        "Gated DeltaNet and Kimi Delta Attention layers: Nemotron 3, Qwen3.5, "
        "Qwen3-Next, Kimi Linear. Start with 'demo' (a small model, CPU or GPU), "
        "'plan' (memory and traffic of a real model, no GPU) or 'bench' (speed of "
        "a real model's SSM layers on this GPU).",
        epilog=f"Installed packages add subcommands (entry-point group {EXTENSION_GROUP}); the "
        f"model demo 'demo' comes with the installed package: pip install -e '.[hf]'.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(title="subcommands", dest="command", metavar="COMMAND", required=True)
    for add in _SUBCOMMANDS + tuple(_extension_subcommands()):
        add(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Parses ``argv`` (default: ``sys.argv[1:]``) and runs the subcommand.

    Returns:
        int: the exit status (argparse exits with 2 on a usage error).
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # Only a subcommand that sets the default ``pass_through_args`` takes arguments it does
        # not know (``build`` hands them to trtllm-build); anywhere else argparse's own error.
        if not hasattr(args, PASS_THROUGH):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        setattr(args, PASS_THROUGH, list(extra))
    try:
        return args.func(args)
    except BrokenPipeError:
        # The reader left early (`trtllm-replayssm plan ... | head`): stop without a traceback,
        # and point stdout at /dev/null so that the interpreter's flush at exit does not fail too.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):
            pass  # a stdout without a file descriptor has nothing left to flush
        return 1
