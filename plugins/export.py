"""Export a plugin kernel's PTX and launch manifest to files, without TensorRT or a GPU.

    python -m trtllm_replayssm_plugins.export mamba2 --nheads 128 --head-dim 64 --d-state 128 \\
        --ngroups 8 --L 16 --arch 90 --out-dir ptx/
    python -m trtllm_replayssm_plugins.export gdn --k-heads 16 --v-heads 32 --head-k-dim 128 \\
        --head-v-dim 128 --L 16 --arch 90 --out-dir ptx/          (kda: the same arguments)
    ... --state-dtype fp8 --rounding-seed 7    (fp8 checkpoint with row scales; stochastic rounding)
    python -m trtllm_replayssm_plugins.export mamba2 --kernel cuda --state-dtype bf16 ... --arch 90
        (the op's CUDA C++ step as its two AOT layers, sm_90a: plugins/mamba2_cuda.py)

writes ``<plugin>_sm90_<variant>.ptx`` (entry parameters exactly as TensorRT passes them) and a
``.json`` manifest beside it (``CompiledKernel.manifest()``): kernel name, arch, PTX ISA
version, compiler, parameters in launch order, scalars (constants or input dimensions),
grid, block, shared memory, constexprs (the CUDA kernels' -D constants), hidden parameters
removed. Triton must run as the compiler (TRITON_INTERPRET unset); the CUDA kernels compile
with NVRTC (no GPU either way). ``--out-dir`` is an existing directory or a new one in an
existing directory (created, and said so); a missing tree or a file is a usage error.
"""

import argparse
import json
import os
import sys
from typing import List, Optional

from trtllm_replayssm.cli import make_out_dir, out_dir, positive_int
from trtllm_replayssm.kernels.gated_delta_common import H200_MULTIPROCESSORS

from . import gated_delta, mamba2, mamba2_cuda
from .ptx import check_arch
from .spec import STATE_DTYPES

_DTYPES = ("f32", "bf16", "f16")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m trtllm_replayssm_plugins.export",
        description="Export a ReplaySSM plugin kernel (PTX + launch manifest).",
    )
    sub = p.add_subparsers(dest="family", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--L", type=positive_int, required=True, help="records per slot")
    common.add_argument(
        "--state-dtype",
        choices=STATE_DTYPES,
        default=None,
        help="checkpoint dtype (default: f32, bf16 with --kernel cuda; fp8 is e4m3 with a checkpoint_scale input)",
    )
    common.add_argument(
        "--rounding-seed",
        type=int,
        default=None,
        help="stochastic rounding at flush with this seed in [0, 2^31) (bf16, f16, fp8 checkpoints; default: off)",
    )
    common.add_argument("--act-dtype", choices=_DTYPES, default="bf16", help="activation dtype (default: bf16)")
    common.add_argument(
        "--batch-hint", type=positive_int, default=64, help="rows the launch configuration is chosen for (default: 64)"
    )
    common.add_argument(
        "--arch",
        type=positive_int,
        action="append",
        required=True,
        help="compute capability as an int (80, 90, 100); repeat for several",
    )
    common.add_argument(
        "--out-dir",
        type=out_dir,
        required=True,
        help="where the .ptx and .json files go: an existing directory, or a new one whose parent exists",
    )

    m = sub.add_parser("mamba2", parents=[common], help="replayssm::mamba2_replay_step")
    for flag in ("--nheads", "--head-dim", "--d-state", "--ngroups"):
        m.add_argument(flag, type=positive_int, required=True)
    m.add_argument("--dt-dtype", choices=_DTYPES, default=None, help="raw dt dtype (default: the act dtype)")
    m.add_argument("--param-dtype", choices=_DTYPES, default="f32", help="D and dt_bias dtype (default: f32)")
    m.add_argument("--no-D", dest="has_D", action="store_false", help="the layer has no D skip")
    m.add_argument("--D-per-dim", action="store_true", help="D is [nheads, head_dim]")
    m.add_argument("--z", dest="has_z", action="store_true", help="the layer gates y by silu(z)")
    m.add_argument("--no-dt-bias", dest="has_dt_bias", action="store_false")
    m.add_argument("--no-softplus", dest="dt_softplus", action="store_false")
    m.add_argument(
        "--kernel",
        choices=("triton", "cuda"),
        default="triton",
        help="triton: replayssm::mamba2_replay_step (one layer, every GPU); cuda: the op's CUDA step on sm_90 as "
        "replayssm::mamba2_replay_coefficients + mamba2_replay_step_cuda (bf16 activations, bf16 checkpoint "
        "within 48 KiB of shared memory; --arch 90 only) (default: triton)",
    )
    m.add_argument(
        "--multiprocessors",
        type=positive_int,
        default=H200_MULTIPROCESSORS,
        help="--kernel cuda: multiprocessors of the target GPU (the step kernel's grid; default: 132, the H200's)",
    )
    for family in ("gdn", "kda"):
        g = sub.add_parser(family, parents=[common], help=f"replayssm::gated_delta_replay_step ({family.upper()})")
        for flag in ("--k-heads", "--v-heads", "--head-k-dim", "--head-v-dim"):
            g.add_argument(flag, type=positive_int, required=True)
        g.add_argument("--record-dtype", choices=_DTYPES, default=None, help="d/k records (default: the act dtype)")
        g.add_argument("--gate-dtype", choices=_DTYPES, default="f32", help="g and beta dtype (default: f32)")
        g.add_argument("--scale", type=float, default=None, help="q scale (default: head_k_dim ** -0.5)")
        g.add_argument("--no-qk-l2norm", dest="use_qk_l2norm", action="store_false")
    return p


def _cuda_kernel(args) -> bool:
    """Whether the CUDA step is asked for (``--kernel cuda``: only the mamba2 sub-command has it)."""
    return getattr(args, "kernel", "triton") == "cuda"


def _mamba2_geometry(args) -> tuple:
    """(nheads, head_dim, d_state, ngroups, L) of the mamba2 sub-command."""
    return args.nheads, args.head_dim, args.d_state, args.ngroups, args.L


def _mamba2_layer_args(args) -> dict:
    """The ``for_layer`` keywords both Mamba-2 exports (Triton, CUDA) take from the sub-command."""
    return dict(
        state_dtype=args.state_dtype,
        has_D=args.has_D,
        has_z=args.has_z,
        has_dt_bias=args.has_dt_bias,
        dt_softplus=args.dt_softplus,
        batch_hint=args.batch_hint,
    )


def _mamba2_tensor_args(args) -> dict:
    """The ``tensor_infos`` keywords both Mamba-2 exports take from the sub-command (dt in the
    activations' dtype unless given)."""
    return dict(
        state_dtype=args.state_dtype,
        dt_dtype=args.dt_dtype or args.act_dtype,
        param_dtype=args.param_dtype,
        d_per_dim=args.D_per_dim,
    )


def _kernels(args) -> list:
    """[(plugin family or layer, spec)] to export; each has ``compile_kernel(spec, arch)``."""
    if _cuda_kernel(args):
        if args.rounding_seed is not None:
            raise ValueError("--kernel cuda: the CUDA step has no stochastic rounding; drop --rounding-seed")
        reason = mamba2_cuda.export_unsupported(
            args.head_dim, args.d_state, args.L, state_dtype=args.state_dtype, act_dtype=args.act_dtype
        )
        if reason is not None:
            raise ValueError(f"--kernel cuda: {reason}")
        attrs = mamba2_cuda.Mamba2CudaAttrs.for_layer(
            *_mamba2_geometry(args), **_mamba2_layer_args(args), multiprocessors=args.multiprocessors
        )
        out = []
        for layer in (mamba2_cuda.COEFFICIENTS, mamba2_cuda.STEP):
            infos = layer.tensor_infos(attrs, **_mamba2_tensor_args(args))
            layer.check_inputs(attrs, infos)
            out.append((layer, layer.kernel_spec(attrs, infos)))
        return out
    if args.family == "mamba2":
        attrs = mamba2.Mamba2ReplayAttrs.for_layer(
            *_mamba2_geometry(args), **_mamba2_layer_args(args), rounding_seed=args.rounding_seed
        )
        infos = mamba2.tensor_infos(attrs, act_dtype=args.act_dtype, **_mamba2_tensor_args(args))
        family = mamba2
    else:
        attrs = gated_delta.GatedDeltaReplayAttrs.for_layer(
            args.k_heads,
            args.v_heads,
            args.head_k_dim,
            args.head_v_dim,
            args.L,
            per_channel=args.family == "kda",
            state_dtype=args.state_dtype,
            use_qk_l2norm=args.use_qk_l2norm,
            scale=args.scale,
            batch_hint=args.batch_hint,
            rounding_seed=args.rounding_seed,
        )
        infos = gated_delta.tensor_infos(
            attrs,
            state_dtype=args.state_dtype,
            act_dtype=args.act_dtype,
            record_dtype=args.record_dtype,
            gate_dtype=args.gate_dtype,
        )
        family = gated_delta
    family.check_inputs(attrs, infos)
    return [(family, family.kernel_spec(attrs, infos))]


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.state_dtype is None:
        args.state_dtype = "bf16" if _cuda_kernel(args) else "f32"
    try:
        kernels = _kernels(args)
        for arch in args.arch:
            for _, spec in kernels:
                check_arch(spec, arch)
            if _cuda_kernel(args) and arch != mamba2_cuda.ARCH:
                raise ValueError(f"--kernel cuda: --arch {arch}; the CUDA step's export is for sm_{mamba2_cuda.ARCH}a only")
    except (ValueError, TypeError) as e:
        parser.error(str(e))
    if make_out_dir(args.out_dir):
        print(f"created {args.out_dir}")
    for arch in args.arch:
        for family, spec in kernels:
            compiled = family.compile_kernel(spec, arch)
            path = os.path.join(args.out_dir, compiled.file_name)
            with open(path, "w") as f:
                f.write(compiled.ptx)
            with open(path[: -len(".ptx")] + ".json", "w") as f:
                json.dump(compiled.manifest(), f, indent=1)
            print(f"{path}: {len(spec.params)} parameters, block {spec.block[0]}, shared {compiled.shared_mem} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
