"""replay_cache_state: the state a replay cache holds (checkpoint + records, no current token)
equals the float64 conventional recurrence's state after the same tokens; reads only; bad
arguments raise."""

import pytest
import torch

from gated_delta_cases import DeltaFamily, DeltaGeometry
from gated_delta_cases import replay_with_op as delta_replay_with_op
from mamba2_cases import Geometry, Mamba2Family
from mamba2_cases import replay_with_op as mamba2_replay_with_op
from op_checks import assert_unchanged, cache_tensors, snapshot
from replay_driver import as_f64, rel_err
from trtllm_replayssm.ops import replay_cache_state

L = 4
NUM_SLOTS = 5
STEPS = 9  # slot s joins at step s: 9, 8, 7, 6 and 0 tokens -> cursors 1, 0, 3, 2 and 0
FAMILIES = {
    "mamba2": (lambda: Mamba2Family(Geometry(4, 3, 5, 2)), mamba2_replay_with_op),
    "gdn": (lambda: DeltaFamily(DeltaGeometry(2, 4, 5, 3), per_channel=False), delta_replay_with_op),
    "kda": (lambda: DeltaFamily(DeltaGeometry(3, 3, 4, 5), per_channel=True), delta_replay_with_op),
}


def _run(name: str, state_dtype=torch.float64, act_dtype=torch.float64):
    """(cache, params, float64 oracle states) after STEPS replay steps from a random admitted state."""
    torch.manual_seed(0)
    make_family, replay = FAMILIES[name]
    family = make_family()
    p = family.make_params("cpu")
    cache = family.allocate(NUM_SLOTS, L, state_dtype, act_dtype, "cpu")
    family.poison(cache)  # positions never written hold garbage
    start = torch.randn(NUM_SLOTS, *cache.checkpoint.shape[1:], dtype=torch.float64)
    cache.admit(torch.arange(NUM_SLOTS, dtype=torch.int32), start.to(state_dtype))
    oracle = as_f64(cache.checkpoint_values(torch.arange(NUM_SLOTS))).clone()
    for t in range(STEPS):
        slot_ids = torch.tensor([s if t >= s else -1 for s in range(NUM_SLOTS - 1)], dtype=torch.int32)
        inp = family.make_step(slot_ids.numel(), act_dtype, "cpu")
        out = torch.zeros_like(inp[family.out_key])
        replay(cache, inp, p, slot_ids, out)
        family.oracle_step(oracle, p, inp, slot_ids)
    assert cache.cursor.tolist() == [1, 0, 3, 2, 0]
    return cache, p, oracle


def _state(name: str, cache, p, slot_ids):
    return replay_cache_state(cache, slot_ids, A=p.A if name == "mamba2" else None)


@pytest.mark.parametrize("name", FAMILIES)
def test_equals_float64_recurrence(name):
    cache, p, oracle = _run(name)
    slot_ids = torch.tensor([3, 0, 4, 2, 1, 0])
    before = snapshot(cache_tensors(cache))
    state = _state(name, cache, p, slot_ids)
    assert_unchanged(cache_tensors(cache), before)
    assert state.dtype == torch.float64 and state.shape == (6, *cache.checkpoint.shape[1:])
    assert (state - oracle[slot_ids]).abs().max() <= 1e-12 * oracle.abs().max()


def test_fp8_mamba2_cache_gives_its_decoded_checkpoint_plus_records():
    """An fp8 checkpoint's codes are scaled by their rows' scales (the state would be off by the
    scales' orders of magnitude otherwise); the error is the flushes' fp8 rounding."""
    cache, p, oracle = _run("mamba2", torch.float8_e4m3fn, torch.float32)
    state = _state("mamba2", cache, p, torch.arange(NUM_SLOTS, dtype=torch.int32))
    assert state.dtype == torch.float32
    assert rel_err(state, oracle) < 0.12


@pytest.mark.parametrize("name", FAMILIES)
def test_fp32_cache_gives_fp32_close_to_recurrence(name):
    cache, p, oracle = _run(name, torch.float32, torch.float32)
    state = _state(name, cache, p, torch.arange(NUM_SLOTS, dtype=torch.int32))
    assert state.dtype == torch.float32
    assert rel_err(state, oracle) < 2e-5


@pytest.mark.parametrize("name", FAMILIES)
def test_teeth_one_corrupted_record_is_seen_stale_ones_are_not(name):
    cache, p, oracle = _run(name)
    records = cache.x_records if name == "mamba2" else cache.d_records
    slot = 2  # cursor 3: positions 0-2 held, 3 stale
    records[slot, 0, L - 1] += 1.0  # a stale position: never read
    state = _state(name, cache, p, torch.tensor([slot]))
    assert (state[0] - oracle[slot]).abs().max() <= 1e-12 * oracle.abs().max()
    records[slot, 0, 1] += 1e-3  # a held record
    state = _state(name, cache, p, torch.tensor([slot]))
    assert (state[0] - oracle[slot]).abs().max() > 1e-6


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize(
    "slot_ids, exc, match",
    [
        (torch.tensor([0, NUM_SLOTS]), ValueError, "slot_ids span"),
        (torch.tensor([-1, 0]), ValueError, "slot_ids span"),
        (torch.tensor([[0, 1]]), ValueError, "slot_ids has shape"),
        (torch.tensor([0.0, 1.0]), ValueError, "slot_ids has shape"),
        ([0, 1], TypeError, "slot_ids is list"),
    ],
)
def test_bad_slot_ids_raise(name, slot_ids, exc, match):
    cache, p, _ = _run(name)
    with pytest.raises(exc, match=rf"^replay_cache_state: {match}"):
        _state(name, cache, p, slot_ids)


def test_A_required_for_mamba2_only_and_checked():
    cache, p, _ = _run("mamba2")
    ids = torch.tensor([0])
    with pytest.raises(ValueError, match=r"^replay_cache_state: A is None"):
        replay_cache_state(cache, ids)
    with pytest.raises(ValueError, match=r"^replay_cache_state: A has shape"):
        replay_cache_state(cache, ids, A=p.A[:-1])
    gdn, _, _ = _run("gdn")
    with pytest.raises(ValueError, match=r"^replay_cache_state: A is given"):
        replay_cache_state(gdn, ids, A=p.A)
    with pytest.raises(TypeError, match=r"^replay_cache_state: cache is Tensor"):
        replay_cache_state(gdn.checkpoint, ids)
