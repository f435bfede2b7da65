"""``benchmarks/harness.py`` pieces that run without a GPU: the launch configurations a sweep tries."""

import argparse
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from harness import launch_config_arg, sweep_configs  # noqa: E402
from trtllm_replayssm.kernels.common import LaunchConfig  # noqa: E402


def test_sweep_configs_add_register_caps_to_one_warp_configurations_only():
    base = sweep_configs(64)
    assert len(base) == len(set(base)) == 33
    assert all(c.max_registers is None for c in base)
    capped = sweep_configs(64, [128, 168])
    assert capped[:33] == base
    extra = capped[33:]
    one_warp = [c for c in base if c.num_warps == 1]
    assert [c.max_registers for c in extra] == [128] * len(one_warp) + [168] * len(one_warp)
    assert [(c.block_head_dim, c.num_warps, c.chunks, c.num_stages) for c in extra[: len(one_warp)]] == [
        (c.block_head_dim, c.num_warps, c.chunks, c.num_stages) for c in one_warp
    ]
    assert extra[0].label().endswith(",r128")
    # Heads narrower than a tile leave that tile size out.
    assert all(c.block_head_dim <= 16 for c in sweep_configs(16) if c.chunks == 1)


def test_sweep_configs_of_the_conventional_kernel_are_single_tiles():
    cfgs = sweep_configs(128, route="decode_step")
    assert len(cfgs) == len(set(cfgs)) == 16
    assert all(c.chunks == 1 and c.num_stages == 1 for c in cfgs)
    assert {c.block_head_dim for c in cfgs} == {4, 8, 16, 32} and {c.num_warps for c in cfgs} == {1, 2, 4, 8}


def test_sweep_configs_leave_out_tiles_under_min_block():
    """Kernels whose tiles are tensor-core operands (gated delta replay and verify) take >= 16
    rows: their sweeps leave smaller tiles out instead of failing on the first one."""
    cfgs = sweep_configs(128, [168], "replay_step", min_block=16)
    assert cfgs and all(c.block_head_dim >= 16 for c in cfgs)
    assert {c.block_head_dim for c in sweep_configs(128)} == {8, 16, 32}


def test_run_sweep_times_every_configuration_of_the_route(capsys):
    """run_sweep's bookkeeping with a stand-in case (the timing itself needs a GPU)."""
    import argparse
    import harness
    from trtllm_replayssm.kernels.common import LaunchConfig

    timed = []

    class Case(harness.DecodeCase):
        rows = 64

        def time(self, route, cfg, reps):
            timed.append((route, cfg))
            return (1e-6 * (cfg.block_head_dim + cfg.num_warps),)

        def default_config(self, route):
            return LaunchConfig(8, 2)

    ap = argparse.ArgumentParser()
    harness.add_sweep_arguments(ap)
    args = ap.parse_args(["--sweep", "decode_step", "--max-registers", "64"])
    args.state, args.batch, args.L = ["f32"], [256], [16]
    harness.run_sweep(lambda batch, L, state: Case(), args)
    configs = sweep_configs(64, [64], "decode_step")
    assert timed == [("decode_step", c) for c in configs]
    out = capsys.readouterr().out
    assert "# sweep of decode_step" in out and "4,1,1,1" in out.splitlines()[2]
    assert ap.parse_args(["--sweep"]).sweep == "replay_step" and ap.parse_args([]).sweep is None


def test_launch_config_arg_reads_labels_and_refuses_others():
    for cfg in (LaunchConfig(16, 1, 4, 2), LaunchConfig(16, 1, 8, 2, max_registers=128)):
        assert launch_config_arg(cfg.label()) == cfg
    for bad in ("16,1", "16,1,4,x", "16,1,4,2,128", "16,1,4,2,rx"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected block,warps,chunks,stages"):
            launch_config_arg(bad)
