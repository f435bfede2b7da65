"""The float64 replay reference equals the float64 conventional recurrence."""

import pytest
import torch

from mamba2_cases import Geometry, drive_replay, replay_with_op

GEOMS = [pytest.param(Geometry(4, 8, 16, 2), id="nh4-hd8-ds16-g2"), pytest.param(Geometry(6, 5, 7, 1), id="nh6-hd5-ds7-g1")]


@pytest.mark.parametrize("g", GEOMS)
@pytest.mark.parametrize("L", [1, 2, 5, 16])
def test_mamba2_replay_step_ref_matches_recurrence_f64(g, L):
    worst = drive_replay(
        replay_with_op,
        g,
        L,
        torch.float64,
        torch.float64,
        "cpu",
        steps=3 * L + 2,
        batch=5,
        num_slots=9,
        with_z=True,
        D_per_dim=L % 2 == 0,
    )
    assert worst["flushes"] >= 5
    assert worst["y"] < 1e-12, worst
    assert worst["ckpt"] < 1e-12, worst


def test_mamba2_replay_step_ref_teeth_corrupt_record():
    """Corrupting one live record must break agreement (the comparison can fail)."""

    def corrupt(cache, step):
        if step == 3:
            slot = int(torch.nonzero(cache.cursor > 0)[0])
            cache.x_records[slot, 0, 0, 0] += 1.0

    with pytest.raises(AssertionError):
        worst = drive_replay(
            replay_with_op,
            Geometry(4, 8, 16, 2),
            8,
            torch.float64,
            torch.float64,
            "cpu",
            steps=10,
            batch=4,
            num_slots=6,
            corrupt=corrupt,
        )
        assert worst["y"] < 1e-12, worst
