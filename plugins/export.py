"""Export a plugin kernel's PTX and launch manifest to files, without TensorRT or a GPU.

    python -m trtllm_replayssm_plugins.export --nheads 128 --head-dim 64 --d-state 128 \\
        --ngroups 8 --L 16 --state-dtype f32 --act-dtype bf16 --arch 90 --out-dir ptx/

writes ``mamba2_replay_step_sm90_<variant>.ptx`` (entry parameters exactly as TensorRT passes
them) and a ``.json`` manifest beside it: kernel name, parameters in launch order, scalars
(constants or input dimensions), grid, block, shared memory, Triton version. Triton must run as
the compiler (TRITON_INTERPRET unset).
"""
import argparse
import json
import os
import sys
from typing import List, Optional

from . import mamba2
from .ptx import compile_ptx

_DTYPES = ("f32", "bf16", "f16")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m trtllm_replayssm_plugins.export",
                                description="Export the replayssm::mamba2_replay_step plugin kernel (PTX + manifest).")
    g = p.add_argument_group("layer")
    for flag in ("--nheads", "--head-dim", "--d-state", "--ngroups", "--L"):
        g.add_argument(flag, type=int, required=True)
    g.add_argument("--state-dtype", choices=_DTYPES, default="f32", help="checkpoint dtype (default: f32)")
    g.add_argument("--act-dtype", choices=_DTYPES, default="bf16", help="x / B / C / records dtype (default: bf16)")
    g.add_argument("--dt-dtype", choices=_DTYPES, default=None, help="raw dt dtype (default: the act dtype)")
    g.add_argument("--param-dtype", choices=_DTYPES, default="f32", help="D and dt_bias dtype (default: f32)")
    g.add_argument("--no-D", dest="has_D", action="store_false", help="the layer has no D skip")
    g.add_argument("--D-per-dim", action="store_true", help="D is [nheads, head_dim]")
    g.add_argument("--z", dest="has_z", action="store_true", help="the layer gates y by silu(z)")
    g.add_argument("--no-dt-bias", dest="has_dt_bias", action="store_false")
    g.add_argument("--no-softplus", dest="dt_softplus", action="store_false")
    g.add_argument("--batch-hint", type=int, default=64, help="rows the launch configuration is chosen for (default: 64)")
    p.add_argument("--arch", type=int, action="append", required=True,
                   help="compute capability as an int (80, 90, 100); repeat for several")
    p.add_argument("--out-dir", required=True)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    attrs = mamba2.Mamba2ReplayAttrs.for_layer(
        args.nheads, args.head_dim, args.d_state, args.ngroups, args.L, state_dtype=args.state_dtype,
        has_D=args.has_D, has_z=args.has_z, has_dt_bias=args.has_dt_bias,
        dt_softplus=args.dt_softplus, batch_hint=args.batch_hint)
    infos = mamba2.tensor_infos(attrs, state_dtype=args.state_dtype, act_dtype=args.act_dtype,
                                dt_dtype=args.dt_dtype or args.act_dtype,
                                param_dtype=args.param_dtype, d_per_dim=args.D_per_dim)
    mamba2.check_inputs(attrs, infos)
    spec = mamba2.kernel_spec(attrs, infos)
    os.makedirs(args.out_dir, exist_ok=True)
    for arch in args.arch:
        compiled = compile_ptx(spec, mamba2.ENTRY, arch)
        path = os.path.join(args.out_dir, compiled.file_name)
        with open(path, "w") as f:
            f.write(compiled.ptx)
        with open(path[:-len(".ptx")] + ".json", "w") as f:
            json.dump(compiled.manifest(), f, indent=1)
        print(f"{path}: {len(spec.params)} parameters, block {spec.block[0]}, shared {compiled.shared_mem} B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
