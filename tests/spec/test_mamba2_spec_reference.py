"""Speculative decoding in float64 on the CPU, through the public ops (which run the reference):
verify + commit against a serial float64 oracle that only ever sees the accepted stream, the
conventional baselines, standard decode on the same cache, and a teeth test; with a bf16
checkpoint, verify's error against float64 next to conventional bf16 decode's."""

import pytest
import torch

from mamba2_cases import Geometry, Mamba2Family, Oracle, make_params, make_step, replay_with_op
from replay_driver import rel_err
from spec_cases import (
    commit_with_op,
    draw,
    drive_baseline,
    drive_spec,
    drive_verify_vs_serial,
    make_window,
    mamba2_decode_with_op,
    mamba2_serial_with_op,
    mamba2_snapshot_verify_with_op,
    mamba2_verify_with_op,
    no_commit,
    snapshot_commit_with_op,
    token,
)
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len

F64 = torch.float64
# One row per policy (all accepted, only the bonus token, mixed, fewer tokens), plus padding.
ROWS = ["all", "bonus", "mixed", "short", "mixed"]


@pytest.mark.parametrize(
    "g, B, T, steps",
    [
        pytest.param(Geometry(4, 8, 16, 2), 8, 4, 60, id="nh4-hd8-ds16-g2-B8-T4"),
        pytest.param(Geometry(6, 5, 7, 1), 3, 3, 24, id="nh6-hd5-ds7-g1-B3-T3"),
        pytest.param(Geometry(4, 8, 16, 2), 3, 1, 24, id="nh4-hd8-ds16-g2-B3-T1"),
    ],
)
def test_mamba2_replay_verify_random_acceptance_matches_serial_f64(g, B, T, steps):
    """From empty buffers, every window output equals the serial recurrence from the committed
    state, every flush leaves the oracle's committed state in the checkpoint, and a non-flush
    verify leaves the checkpoint bit-identical (checked inside drive_spec every step)."""
    worst = drive_spec(
        Mamba2Family(g, with_z=True, D_per_dim=T == 3),
        mamba2_verify_with_op,
        commit_with_op,
        L=spec_buffer_len(B, T),
        T=T,
        state_dtype=F64,
        act_dtype=F64,
        device="cpu",
        steps=steps,
        policies=ROWS,
        num_slots=9,
        n_padding=2,
    )
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < 1e-12, worst
    assert worst["ckpt"] < 1e-12, worst


def test_mamba2_replay_verify_teeth_corrupt_record():
    """Corrupting one committed record must break agreement (the comparison can fail)."""

    def corrupt(cache, step):
        if step == 4:
            slot = int(torch.nonzero(cache.cursor > 0)[0])
            cache.x_records[slot, 0, 0, 0] += 1.0

    with pytest.raises(AssertionError):
        worst = drive_spec(
            Mamba2Family(Geometry(4, 8, 16, 2)),
            mamba2_verify_with_op,
            commit_with_op,
            L=8,
            T=4,
            state_dtype=F64,
            act_dtype=F64,
            device="cpu",
            steps=8,
            policies=["mixed", "bonus", "all"],
            num_slots=5,
            corrupt=corrupt,
        )
        assert worst["y"] < 1e-12, worst


def test_mamba2_standard_decode_and_verify_share_one_cache():
    """Standard steps and verify + commit of any T (1 included) interleave on one cache; the
    cursor stays in [0, L) and every output matches the serial recurrence."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.ops import mamba2_replay_verify, replay_commit

    g, L = Geometry(4, 8, 16, 2), 8
    p = make_params(g, "cpu")
    cache = Mamba2ReplayCache.allocate(5, g.nheads, g.head_dim, g.d_state, g.ngroups, L, state_dtype=F64, act_dtype=F64)
    slots = torch.tensor([3, 0, 4], dtype=torch.int32)
    cache.admit(slots, torch.randn(3, g.nheads, g.head_dim, g.d_state))
    oracle = Oracle(cache.checkpoint, p)
    fam = Mamba2Family(g)
    worst, modes = 0.0, []
    for step in range(36):
        T = step % 5  # 0: a standard step; else a verify of T tokens
        modes.append(T)
        if T == 0:
            inp = make_step(g, 3, F64, "cpu")
            y = replay_with_op(cache, inp, p, slots, torch.empty_like(inp["x"]))
            worst = max(worst, rel_err(y, oracle.step(inp, slots)))
        else:
            win = make_window(fam, 3, T, F64, "cpu")
            a = torch.tensor([draw("mixed", T)[1] for _ in range(3)], dtype=torch.int32)
            y = mamba2_replay_verify(
                cache, win["x"], win["dt"], p.A, win["B"], win["C"], slot_ids=slots, D=p.D, dt_bias=p.dt_bias
            )
            scratch = Oracle(torch.zeros(1), p)
            scratch.state = oracle.state.clone()
            for s in range(T):
                worst = max(worst, rel_err(y[:, s], scratch.step(token(win, s), slots)))
                done = slots[a == s + 1].long()
                oracle.state[done] = scratch.state[done]
            replay_commit(cache, slots, a)
        assert bool(((cache.cursor >= 0) & (cache.cursor < L)).all())
    assert worst < 1e-12


@pytest.mark.parametrize("baseline", ["snapshot", "serial"])
def test_mamba2_baselines_match_serial_f64(baseline):
    """The snapshot baseline rolls back to any accepted prefix; serial decode commits all."""
    g, T = Geometry(4, 8, 16, 2), 4
    holder = SnapshotCache.allocate(7, (g.nheads, g.head_dim, g.d_state), T, dtype=F64)
    if baseline == "snapshot":
        verify, commit, rows = mamba2_snapshot_verify_with_op, snapshot_commit_with_op, ROWS
    else:
        verify, commit, rows = mamba2_serial_with_op, no_commit, ["all", "short_all", "short_all"]
    worst = drive_baseline(
        Mamba2Family(g, with_z=True),
        holder,
        verify,
        commit,
        T=T,
        act_dtype=F64,
        device="cpu",
        steps=10,
        policies=rows,
        n_padding=2,
    )
    assert worst < 1e-12


# Geometries outside the float64 tests above (odd head_dim / d_state ratios, 1 to 4 groups).
PRECISION_GEOMETRIES = [
    pytest.param(Geometry(8, 32, 16, 1), id="nh8-hd32-ds16-g1"),
    pytest.param(Geometry(6, 40, 48, 3), id="nh6-hd40-ds48-g3"),
    pytest.param(Geometry(8, 48, 64, 4), id="nh8-hd48-ds64-g4"),
]


def _verify_vs_serial_bf16(g: Geometry, steps: int, degrade=None) -> dict:
    return drive_verify_vs_serial(
        Mamba2Family(g),
        mamba2_verify_with_op,
        commit_with_op,
        mamba2_decode_with_op,
        L=9,
        T=4,
        state_dtype=torch.bfloat16,
        act_dtype=torch.bfloat16,
        device="cpu",
        steps=steps,
        rows=3,
        degrade=degrade,
    )


@pytest.mark.parametrize("g", PRECISION_GEOMETRIES)
def test_mamba2_replay_verify_bf16_no_less_accurate_than_serial_bf16(g):
    """With a bf16 checkpoint and bf16 activations (T = 4, L = 9, random acceptance),
    verify's outputs err against float64 no more than conventional bf16 decode's on the same
    inputs, and its flushed checkpoints no more than the conventional state. The checkpoint is
    rounded once per flush (about every 6 tokens here), the conventional state every token:
    measured over 150 steps, verify's worst output error is 0.36-0.49 of the serial path's."""
    worst = _verify_vs_serial_bf16(g, steps=60)
    assert worst["flushes"] >= 40, worst
    assert worst["y_verify"] <= worst["y_serial"], worst
    assert worst["ckpt"] <= worst["state"], worst


def test_mamba2_replay_verify_bf16_precision_teeth_biased_checkpoint():
    """A checkpoint rounded toward zero at each flush, as the Triton interpreter converts fp32
    to bf16 (half an ulp lower than rounding to nearest on average: here, half of the elements
    one ulp toward zero), must fail the comparison above."""

    def shrink(cache):
        flushed = cache.cursor == 0
        c = cache.checkpoint[flushed].float()
        lower = ((c - c * 2.0**-8).view(torch.int32) & -(1 << 16)).view(torch.float32)
        cache.checkpoint[flushed] = torch.where(torch.rand_like(c) < 0.5, lower, c).to(torch.bfloat16)

    worst = _verify_vs_serial_bf16(Geometry(8, 32, 16, 1), steps=60, degrade=shrink)
    assert worst["y_verify"] > worst["y_serial"], worst
