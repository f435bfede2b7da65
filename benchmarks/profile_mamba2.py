"""Launch one Mamba-2 decode route a few times, eagerly, for a profiler (GPU).

The case is the benchmark's (benchmarks/mamba2_decode.py: slot sets rotated over >= 512 MiB of
state, cursors spread over [0, L)). ``--cursors`` pins every replay cursor instead, to profile
the non-flush (``0``) or flush (``L-1``) path alone. Launches 3 + ``--steps`` times; profile the
last ones, e.g.

    ncu --clock-control none --launch-skip 3 --launch-count 1 -k regex:replay \\
        python benchmarks/profile_mamba2.py --route replay_step --batch 256
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from mamba2_decode import DT, Case
from trtllm_replayssm.kernels.common import LaunchConfig


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--route", default="replay_step", choices=["replay_step", "decode_step"])
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=(128, 64, 128, 8))
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--state", default="f32", choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    ap.add_argument("--cursors", type=int, default=None, help="pin every replay cursor to this value")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument(
        "--config",
        default=None,
        help="launch configuration block_head_dim,num_warps,chunks,num_stages (default: the launch table's)",
    )
    a = ap.parse_args(argv)
    case = Case(a.geometry, a.batch, a.L, a.state, a.act)
    config = LaunchConfig(*(int(v) for v in a.config.split(","))) if a.config else None
    for i in range(3 + a.steps):
        if a.cursors is not None:
            case.cache.cursor.fill_(a.cursors)
        case.step(a.route, case.slot_sets[i % len(case.slot_sets)], config)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
