"""Launch one speculative verify route a few times, eagerly, for a profiler (GPU).

The case is benchmarks/spec_verify.py's (``trtllm_replayssm.bench.make_verify_case``: slot sets
rotated over >= 512 MiB of state, replay cursors spread over [0, B), accepted counts drawn with
mean ``--accept`` T): ``--route replay`` (replay verify + commit), ``snapshot`` (snapshot verify +
commit) or ``serial`` (T conventional decode steps). First the warm-up: every slot set visited
``--visits`` times (default :func:`steady_visits`), so that the replay cursors have reached
their steady spread and the share of flush rows is what spec_verify.py times (from the initial
cursors, w < B, no row flushes: w + T <= B + T - 1). Then ``--steps`` steps between
``cudaProfilerStart`` and ``cudaProfilerStop``; profile those alone, e.g. (a replay step is its
two verify launches and the commit)

    ncu --profile-from-start off --clock-control none -k "regex:verify|commit" \\
        python benchmarks/profile_verify.py --family kda --batch 16 --T 4

scripts/device_profile_verify.sh runs a list of cases in one device call.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from spec_verify import GEOMETRIES  # noqa: E402
from trtllm_replayssm.bench import DT, VERIFY_ROUTES, make_verify_case  # noqa: E402
from trtllm_replayssm.kernels.common import KERNELS  # noqa: E402
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
    ap.add_argument("--steps", type=int, default=2, help="steps profiled, after the warm-up")
    ap.add_argument("--visits", type=int, default=None, help="warm-up visits of every slot set")
    ap.add_argument(
        "--kernel", choices=list(KERNELS), default="auto", help="the replay verify's kernel (the op's route: auto)"
    )
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("profile_verify: needs a CUDA GPU")
    case = make_verify_case(a.family, a.geometry or GEOMETRIES[a.family], a.batch, a.T, a.B, a.state, "bf16", a.accept)
    case.kernel = a.kernel
    visits = steady_visits(a.B, a.T, a.accept) if a.visits is None else a.visits
    warmup = visits * len(case.sets)
    for i in range(warmup + a.steps):
        if i == warmup:
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
        slots, accepted = case.sets[i % len(case.sets)]
        case.step(a.route, slots, accepted)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    print(f"profile_verify: {warmup} warm-up steps ({visits} visits of {len(case.sets)} slot sets), {a.steps} profiled")


def steady_visits(B: int, T: int, accept: float) -> int:
    """Warm-up visits of each slot set: twice the visits a replay row takes to go from cursor 0
    to its first flush (w + T > B + T - 1, i.e. w >= B) at ``accept`` T accepted tokens a step,
    plus one for compilation."""
    return 2 * math.ceil(B / max(accept * T, 1e-9)) + 1


if __name__ == "__main__":
    main()
