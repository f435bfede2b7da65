"""Launch one GDN / KDA decode route a few times, eagerly, for a profiler (GPU).

The case is the benchmark's (benchmarks/gated_delta_decode.py: slot sets rotated over >= 512
MiB of state, cursors spread over [0, L)); ``--cursors`` pins every replay cursor instead (``0``:
the non-flush path alone, ``L-1``: every unit flushes). The replay route is the op's (the CUDA
step on sm_90: two launches, or the small kernel); ``--config`` takes another CUDA launch
(``rows,stages,min_ctas`` or ``small,ROWS,mN``, as benchmarks/delta_cuda_probe.py). Launches
3 + ``--steps`` steps; profile the last ones, e.g. (two launches a step)

    ncu --clock-control none --launch-skip 6 --launch-count 2 -k regex:delta_replay \\
        python benchmarks/profile_delta.py --family gdn --batch 64 --state f32

scripts/device_profile_delta.sh runs a list of cases in one device call.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from delta_cuda_probe import GEOMETRY, case_config, parse_config  # noqa: E402
from trtllm_replayssm.bench import DT, GatedDeltaDecodeCase  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=sorted(GEOMETRY), default="gdn")
    ap.add_argument("--route", default="replay_step", choices=["replay_step", "replay_triton", "decode_step"])
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--state", default="f32", choices=list(DT))
    ap.add_argument("--cursors", type=int, default=None, help="pin every replay cursor to this value")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--config", type=parse_config, default=None, help="a CUDA launch (default: the launch table's)")
    a = ap.parse_args(argv)
    geometry = a.geometry or GEOMETRY[a.family]
    case = GatedDeltaDecodeCase(a.family, geometry, a.batch, a.L, a.state, "bf16")
    if a.config is not None:
        a.config = case_config(a.config, geometry, a.L, a.batch, case.state.itemsize, a.family == "kda")
    for i in range(3 + a.steps):
        if a.cursors is not None:
            case.cache.cursor.fill_(a.cursors)
        case.step(a.route, case.slot_sets[i % len(case.slot_sets)], a.config)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
