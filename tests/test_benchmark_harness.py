"""``benchmarks/harness.py`` pieces that run without a GPU: the launch configurations a sweep tries."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from harness import sweep_configs  # noqa: E402


def test_sweep_configs_add_register_caps_to_one_warp_configurations_only():
    base = sweep_configs(64)
    assert len(base) == len(set(base)) == 27
    assert all(c.max_registers is None for c in base)
    capped = sweep_configs(64, [128, 168])
    assert capped[:27] == base
    extra = capped[27:]
    one_warp = [c for c in base if c.num_warps == 1]
    assert [c.max_registers for c in extra] == [128] * len(one_warp) + [168] * len(one_warp)
    assert [(c.block_head_dim, c.num_warps, c.chunks, c.num_stages) for c in extra[:len(one_warp)]] == \
        [(c.block_head_dim, c.num_warps, c.chunks, c.num_stages) for c in one_warp]
    assert extra[0].label().endswith(",r128")
    # Heads narrower than a tile leave that tile size out.
    assert all(c.block_head_dim <= 16 for c in sweep_configs(16) if c.chunks == 1)
