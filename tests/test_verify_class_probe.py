"""``benchmarks/verify_class_probe.py`` pieces that run without a GPU: the pinned row classes."""

import os
import sys
from types import SimpleNamespace

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from verify_class_probe import pinned_sets  # noqa: E402
from trtllm_replayssm.reference.spec import verify_flushes  # noqa: E402


def _case(batch=10, B=16):
    sets = [(torch.arange(batch, dtype=torch.int32) + 100 * i, None) for i in range(3)]
    return SimpleNamespace(sets=sets, batch=batch, B=B)


@pytest.mark.parametrize("keep", ["all", "flush", "non-flush"])
def test_pinned_sets_flush_the_share_of_rows_asked_for_and_pad_the_others(keep):
    case, T = _case(), 4
    L = case.B + T
    for i, (kept, slots, cursors) in enumerate(pinned_sets(case, 0.2, keep)):
        assert torch.equal(slots, case.sets[i][0])
        flushes = verify_flushes(cursors, torch.full_like(cursors, T), L)
        assert flushes.tolist() == [True] * 2 + [False] * 8  # round(0.2 * 10) rows, first in the set
        want = {"all": torch.ones(10, dtype=torch.bool), "flush": flushes, "non-flush": ~flushes}[keep]
        assert torch.equal(kept >= 0, want) and torch.equal(kept[want], slots[want])


def test_pinned_sets_every_row_flushing():
    kept, slots, cursors = pinned_sets(_case(), 1.0, "all")[0]
    assert torch.equal(kept, slots) and bool(verify_flushes(cursors, torch.full_like(cursors, 1), 17).all())
