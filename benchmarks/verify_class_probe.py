"""Which GDN/KDA verify row class sets a step's time: the verify launches timed with pinned
cursors (GPU).

The case is benchmarks/spec_verify.py's (slot sets rotated over >= 512 MiB of state, fp32
checkpoint, bf16 activations), but the cursors are pinned and nothing is committed, so every
step sees the same rows: a share ``--flush-share`` of each set's rows at cursor B (their window
of T tokens does not fit below L-1 = B+T-1: they flush), the others at B/2 (they do not). A
verify without its commit can run again: a flushed row's cursor is flagged, which the next
verify reads as the same w. Four timings per (family, batch), us per step (the verify launches
and the records launch, no commit):

- ``mix``: every row;
- ``non-flush only``: the flush rows' slot ids -1 (padding), so only the non-flush launch works;
- ``flush only``: the other rows' slot ids -1;
- ``all flush``: every row at cursor B.

If the side stream overlapped the two classes fully, ``mix`` would be about the larger of the
two "only" timings; if not at all, about their sum.

    python benchmarks/verify_class_probe.py --family gdn kda --batch 16 64 --T 4
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from spec_verify import GEOMETRIES  # noqa: E402
from trtllm_replayssm.bench import make_verify_case  # noqa: E402
from trtllm_replayssm.bench.timing import time_graph  # noqa: E402
from trtllm_replayssm.models import GDN, KDA  # noqa: E402


def pinned_sets(case, flush_share: float, keep: str):
    """Per slot set: (slot ids with the rows not kept as -1, the set's cursors); ``keep`` is
    ``all``, ``flush`` or ``non-flush``. The first round(share * batch) rows of a set flush."""
    n_flush = round(flush_share * case.batch)
    out = []
    for slots, _ in case.sets:
        flushes = torch.arange(case.batch, device=slots.device) < n_flush
        cursors = torch.where(flushes, case.B, case.B // 2).to(torch.int32)
        kept = {"all": torch.ones_like(flushes), "flush": flushes, "non-flush": ~flushes}[keep]
        out.append((torch.where(kept, slots, -1), slots, cursors))
    return out


def time_class(case, flush_share: float, keep: str) -> float:
    sets = pinned_sets(case, flush_share, keep)
    for _, slots, cursors in sets:
        case.cache.cursor[slots.long()] = cursors

    def verify(s):
        case.replay_verify(s[0], case.out)

    seconds, _ = time_graph(verify, sets)
    return seconds * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=[GDN, KDA], choices=[GDN, KDA])
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--T", type=int, default=4)
    ap.add_argument("--B", type=int, default=16)
    ap.add_argument("--flush-share", type=float, default=0.2, help="share of a set's rows that flush (mix)")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("verify_class_probe: needs a CUDA GPU")
    print(f"# verify_class_probe | {torch.cuda.get_device_name()} | T {a.T} B {a.B} flush share {a.flush_share}")
    print(f"{'family':>6} {'batch':>5} {'mix':>8} {'non-flush only':>15} {'flush only':>11} {'all flush':>10}  us")
    for family in a.family:
        for batch in a.batch:
            case = make_verify_case(family, GEOMETRIES[family], batch, a.T, a.B, "f32", "bf16", 0.7)
            t = [time_class(case, a.flush_share, keep) for keep in ("all", "non-flush", "flush")]
            t.append(time_class(case, 1.0, "all"))
            print(f"{family:>6} {batch:>5} {t[0]:8.2f} {t[1]:15.2f} {t[2]:11.2f} {t[3]:10.2f}")


if __name__ == "__main__":
    main()
