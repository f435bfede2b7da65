"""``benchmarks/eager_overhead.py --dry-run``: every timed variant computes the same bits on the
CPU, and the self-check catches a variant that does not."""

import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import eager_overhead


def test_dry_run_self_check_passes(capsys):
    eager_overhead.main(["--dry-run", "--family", "mamba2", "gdn", "kda"])
    out = capsys.readouterr().out
    assert "self-check: every variant equal bit for bit" in out
    assert all(f"{family:6} batch" in out for family in ("mamba2", "gdn", "kda"))


def test_self_check_fails_on_a_variant_that_differs(monkeypatch, capsys):
    real = eager_overhead.step_fn

    def skewed(layer, variant):
        run = real(layer, variant)
        if variant != "public_slot_batch":
            return run

        def run_and_skew(outs):
            run(outs)
            outs[0].add_(torch.finfo(outs[0].dtype).eps)

        return run_and_skew

    monkeypatch.setattr(eager_overhead, "step_fn", skewed)
    with pytest.raises(SystemExit) as e:
        eager_overhead.main(["--dry-run", "--family", "gdn"])
    assert e.value.code == 1 and "SELF-CHECK FAILED: public_slot_batch" in capsys.readouterr().out
