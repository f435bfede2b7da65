"""SlotBatch: slot ids checked once (one host read) for every layer of a step; the ops then run
only no-sync checks, give the same bits, and still refuse ids that changed or do not fit."""

import pytest
import torch

import trtllm_replayssm.checks as checks
from trtllm_replayssm.ops import (
    GDNReplayCache,
    Mamba2ReplayCache,
    SlotBatch,
    gdn_replay_step,
    mamba2_replay_step,
    mamba2_replay_verify,
)

NUM_SLOTS, L = 6, 4


def _caches():
    torch.manual_seed(0)
    m = Mamba2ReplayCache.allocate(NUM_SLOTS, 4, 8, 16, 2, L, state_dtype=torch.float32, act_dtype=torch.float32)
    g = GDNReplayCache.allocate(NUM_SLOTS, 2, 4, 8, 8, L, state_dtype=torch.float32, record_dtype=torch.float32)
    for c in (m, g):
        c.checkpoint.copy_(torch.randn(c.checkpoint.shape))
    return m, g


def _inputs(batch):
    return dict(
        mamba2=(
            torch.randn(batch, 4, 8),
            torch.randn(batch, 4),
            -torch.rand(4) - 0.5,
            torch.randn(batch, 2, 16),
            torch.randn(batch, 2, 16),
        ),
        gdn=(
            torch.randn(batch, 2, 8),
            torch.randn(batch, 2, 8),
            torch.randn(batch, 4, 8),
            -torch.rand(batch, 4),
            torch.rand(batch, 4),
        ),
    )


def _step(caches, inputs, slot_ids):
    m, g = caches
    return mamba2_replay_step(m, *inputs["mamba2"], slot_ids=slot_ids), gdn_replay_step(g, *inputs["gdn"], slot_ids=slot_ids)


def _state(caches):
    return [t.clone() for c in caches for t in c.tensors().values()]


def test_checked_once_for_all_layers_and_bit_identical(monkeypatch):
    ids = torch.tensor([3, -1, 0, 5], dtype=torch.int32)
    plain, batched = _caches(), _caches()
    reads = []
    real = checks.check_slot_values
    monkeypatch.setattr(checks, "check_slot_values", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    checked = SlotBatch(ids, NUM_SLOTS)
    assert reads == ["SlotBatch"]
    for _ in range(L + 1):  # through a flush
        inputs = _inputs(4)
        want = _step(plain, inputs, ids)
        got = _step(batched, inputs, checked)
        assert all(torch.equal(a, b) for a, b in zip(want, got))
    assert reads == ["SlotBatch"] + ["mamba2_replay_step", "gdn_replay_step"] * (L + 1)  # the plain calls only
    assert all(torch.equal(a, b) for a, b in zip(_state(plain), _state(batched)))


@pytest.mark.parametrize(
    "ids, match",
    [
        ([0, 6], "holds 6; expected ids < num_slots = 6"),
        ([2, -1, 2], "has duplicate ids"),
    ],
)
def test_bad_ids_refused_when_checked(ids, match):
    with pytest.raises(ValueError, match=f"^SlotBatch: slot_ids {match}"):
        SlotBatch(torch.tensor(ids, dtype=torch.int32), NUM_SLOTS)


def test_changed_ids_and_misfits_are_refused_before_any_write():
    caches = _caches()
    ids = torch.tensor([1, 2], dtype=torch.int32)
    checked = SlotBatch(ids, NUM_SLOTS)
    before = _state(caches)
    inputs = _inputs(2)
    ids[1] = 7  # in place, after the check
    with pytest.raises(ValueError, match="^mamba2_replay_step: slot_ids changed in place after SlotBatch checked them"):
        _step(caches, inputs, checked)
    with pytest.raises(ValueError, match="slot_ids were checked against num_slots = 9; expected at most 6"):
        _step(caches, inputs, SlotBatch(torch.tensor([1, 8], dtype=torch.int32), 9))
    with pytest.raises(ValueError, match=r"slot_ids has shape \(3,\); expected \[batch\] = \(2,\)"):
        _step(caches, inputs, SlotBatch(torch.tensor([1, 2, 3], dtype=torch.int32), NUM_SLOTS))
    assert all(torch.equal(a, b) for a, b in zip(before, _state(caches)))


def test_window_ops_check_a_slot_batch_again():
    m = Mamba2ReplayCache.allocate(NUM_SLOTS, 4, 8, 16, 2, 8, state_dtype=torch.float32, act_dtype=torch.float32)
    ids = torch.tensor([1, 2], dtype=torch.int32)
    checked = SlotBatch(ids, NUM_SLOTS)
    x, dt, B, C = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 4), torch.randn(2, 3, 2, 16), torch.randn(2, 3, 2, 16)
    y = mamba2_replay_verify(m, x, dt, -torch.rand(4) - 0.5, B, C, slot_ids=checked)
    assert y.shape == x.shape and m.pending[[1, 2]].tolist() == [3, 3]


def test_slot_batch_traces_under_torch_compile():
    """Under torch.compile the version counter is not read (valid ids are the caller's
    contract, as for tensor ids); the compiled step equals the eager one."""
    eager, compiled = _caches(), _caches()
    checked = SlotBatch(torch.tensor([1, 4], dtype=torch.int32), NUM_SLOTS)
    inputs = _inputs(2)
    want = mamba2_replay_step(eager[0], *inputs["mamba2"], slot_ids=checked)
    step = torch.compile(
        lambda: mamba2_replay_step(compiled[0], *inputs["mamba2"], slot_ids=checked), fullgraph=True, backend="aot_eager"
    )
    assert torch.equal(step(), want) and torch.equal(compiled[0].cursor, eager[0].cursor)
