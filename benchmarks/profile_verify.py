"""Launch one speculative verify route a few times, eagerly, for a profiler (GPU).

The case is benchmarks/spec_verify.py's (``trtllm_replayssm.bench.make_verify_case``: slot sets
rotated over >= 512 MiB of state, replay cursors spread over [0, B), accepted counts drawn with
mean ``--accept`` T): ``--route replay`` (replay verify + commit), ``snapshot`` (snapshot verify +
commit) or ``serial`` (T conventional decode steps). Runs 3 + ``--steps`` steps; profile the
last ones, e.g. (a replay step is its verify launches and the commit)

    ncu --clock-control none --launch-skip 3 --launch-count 1 -k regex:replay_verify \\
        python benchmarks/profile_verify.py --family kda --batch 16 --T 4

scripts/device_profile_verify.sh runs a list of cases in one device call.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from spec_verify import GEOMETRIES  # noqa: E402
from trtllm_replayssm.bench import DT, VERIFY_ROUTES, make_verify_case  # noqa: E402
from trtllm_replayssm.models import GDN, KDA, MAMBA2  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=[MAMBA2, GDN, KDA], default=KDA)
    ap.add_argument("--route", choices=list(VERIFY_ROUTES), default="replay")
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=None)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--T", type=int, default=4)
    ap.add_argument("--B", type=int, default=16, help="history length (records)")
    ap.add_argument("--state", default="f32", choices=list(DT))
    ap.add_argument("--accept", type=float, default=0.7, help="mean accepted fraction of the T tokens")
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("profile_verify: needs a CUDA GPU")
    case = make_verify_case(a.family, a.geometry or GEOMETRIES[a.family], a.batch, a.T, a.B, a.state, "bf16", a.accept)
    for i in range(3 + a.steps):
        slots, accepted = case.sets[i % len(case.sets)]
        case.step(a.route, slots, accepted)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
