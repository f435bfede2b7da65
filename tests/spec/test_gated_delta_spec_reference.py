"""GDN / KDA speculative decoding in float64 on the CPU, through the public ops (which run the
reference): verify + commit against the serial float64 oracle that only sees the accepted
stream, the baselines, standard decode on the same cache, and a teeth test."""

import pytest
import torch

from gated_delta_cases import DeltaFamily, DeltaGeometry, replay_with_op
from replay_driver import rel_err
from spec_cases import (
    commit_with_op,
    delta_serial_with_op,
    delta_snapshot_verify_with_op,
    delta_verify_with_op,
    draw,
    drive_baseline,
    drive_spec,
    make_window,
    no_commit,
    snapshot_commit_with_op,
    token,
)
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len

F64 = torch.float64
FAMILY_IDS = {False: "gdn", True: "kda"}
G = DeltaGeometry(2, 4, 8, 6)  # GQA: two value heads per key head
ROWS = ["all", "bonus", "mixed", "short", "mixed"]


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
@pytest.mark.parametrize(
    "B, T, steps", [pytest.param(8, 4, 60, id="B8-T4"), pytest.param(3, 3, 24, id="B3-T3"), pytest.param(3, 1, 24, id="B3-T1")]
)
def test_gated_delta_replay_verify_random_acceptance_matches_serial_f64(per_channel, B, T, steps):
    worst = drive_spec(
        DeltaFamily(G, per_channel=per_channel, use_qk_l2norm=T != 3),
        delta_verify_with_op,
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


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_verify_teeth_corrupt_record(per_channel):
    def corrupt(cache, step):
        if step == 4:
            slot = int(torch.nonzero(cache.cursor > 0)[0])
            cache.g_records[slot, 0, 0] -= 0.5

    with pytest.raises(AssertionError):
        worst = drive_spec(
            DeltaFamily(G, per_channel=per_channel),
            delta_verify_with_op,
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


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_standard_decode_and_verify_share_one_cache(per_channel):
    from trtllm_replayssm.ops import replay_commit

    fam = DeltaFamily(G, per_channel=per_channel)
    p = fam.make_params("cpu")
    L = 8
    cache = fam.allocate(5, L, F64, F64, "cpu")
    slots = torch.tensor([3, 0, 4], dtype=torch.int32)
    cache.admit(slots, torch.randn(3, G.v_heads, G.head_v_dim, G.head_k_dim))
    state64 = cache.checkpoint.clone()
    worst = 0.0
    for step in range(30):
        T = step % 5
        if T == 0:
            inp = fam.make_step(3, F64, "cpu")
            y = replay_with_op(cache, inp, p, slots, torch.empty_like(inp["v"]))
            worst = max(worst, rel_err(y, fam.oracle_step(state64, p, inp, slots)))
        else:
            win = make_window(fam, 3, T, F64, "cpu")
            a = torch.tensor([draw("mixed", T)[1] for _ in range(3)], dtype=torch.int32)
            y = delta_verify_with_op(cache, win, p, slots, None, None)
            scratch = state64.clone()
            for s in range(T):
                worst = max(worst, rel_err(y[:, s], fam.oracle_step(scratch, p, token(win, s), slots)))
                done = slots[a == s + 1].long()
                state64[done] = scratch[done]
            replay_commit(cache, slots, a)
        assert bool(((cache.cursor >= 0) & (cache.cursor < L)).all())
    assert worst < 1e-12


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
@pytest.mark.parametrize("baseline", ["snapshot", "serial"])
def test_gated_delta_baselines_match_serial_f64(per_channel, baseline):
    T = 4
    holder = SnapshotCache.allocate(7, (G.v_heads, G.head_v_dim, G.head_k_dim), T, dtype=F64)
    if baseline == "snapshot":
        verify, commit, rows = delta_snapshot_verify_with_op, snapshot_commit_with_op, ROWS
    else:
        verify, commit, rows = delta_serial_with_op, no_commit, ["all", "short_all", "short_all"]
    worst = drive_baseline(
        DeltaFamily(G, per_channel=per_channel),
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
