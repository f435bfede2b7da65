"""The hybrid stack split over 2, 4 and 8 ranks (threads of one process) computes what the whole
stack computes, step after step, and each rank's caches are the shards of the whole caches."""

import pytest
import torch

from tp_threads import run_ranks, single_threaded_torch
from trtllm_replayssm.tp import HybridDecodeStack, run_decode, shard_errors, tiny_stack_model

HIDDEN, STEPS, BATCH, L = 24, 20, 4, 4
# Relative errors (max |Δ| / max |whole|). fp64: the TP run differs from the whole run only by
# the summation order of the all-reduce and of the split GEMMs (measured ~ 1e-15). fp32: the
# same reorderings at fp32 (measured ~ 1e-6).
TOL = {torch.float64: 1e-12, torch.float32: 2e-5}


@pytest.fixture(autouse=True)
def _one_thread():
    with single_threaded_torch():
        yield


def _run(group, route, dtype):
    stack = HybridDecodeStack(tiny_stack_model(), HIDDEN, group=group, dtype=dtype)
    return run_decode(stack, route=route, steps=STEPS, batch=BATCH, buffer_len=L, state_dtype=dtype)


_WHOLE = {}


def _whole(route, dtype):
    if (route, dtype) not in _WHOLE:
        _WHOLE[route, dtype] = _run(None, route, dtype)
    return _WHOLE[route, dtype]


def _assert_rank_matches(run, whole, tp, rank, dtype):
    assert run.outputs.shape == whole.outputs.shape
    errs = shard_errors(run, whole, tiny_stack_model(), tp, rank)
    assert errs.pop("cursors_equal"), f"TP {tp} rank {rank}: cursors differ"
    assert max(errs.values()) < TOL[dtype], f"TP {tp} rank {rank} {dtype}: {errs}"


@pytest.mark.parametrize("route", ["replay", "conventional"])
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_tp_stack_equals_whole_stack_fp64(tp, route):
    whole = _whole(route, torch.float64)
    if route == "replay":  # rows joined on different steps: cursors spread, flushes staggered
        assert len(set(whole.pool.cache(0).cursor[whole.slot_ids[-1].long()].tolist())) > 1
    runs = run_ranks(tp, lambda g: _run(g, route, torch.float64))
    for rank, run in enumerate(runs):
        _assert_rank_matches(run, whole, tp, rank, torch.float64)


def test_tp_stack_equals_whole_stack_fp32():
    whole = _whole("replay", torch.float32)
    for rank, run in enumerate(run_ranks(2, lambda g: _run(g, "replay", torch.float32))):
        _assert_rank_matches(run, whole, 2, rank, torch.float32)


def test_tp_stack_replay_equals_conventional():
    """The two routes agree (fp64), so the TP comparisons above test both decode paths."""
    torch.testing.assert_close(
        _whole("replay", torch.float64).outputs, _whole("conventional", torch.float64).outputs, rtol=0, atol=1e-12
    )


@pytest.mark.parametrize(
    "tp, skip, what",
    [
        (2, lambda t: t.shape[-1] == 1, "Mamba-2 norm statistics (ngroups 1, replicated at TP 2)"),
        (8, lambda t: t.shape[-1] == 4, "Mamba-2 norm statistics (ngroups 4, replicated at TP 8)"),
        (2, lambda t: t.shape[-1] == HIDDEN, "out_proj partial sums"),
    ],
)
def test_tp_stack_teeth_missing_all_reduce(tp, skip, what):
    """Leaving out one all-reduce kind must break the equality the tests above check."""
    whole = _whole("replay", torch.float64)
    runs = run_ranks(tp, lambda g: _run(g, "replay", torch.float64), skip=skip)
    err = max(float((r.outputs - whole.outputs).abs().max()) for r in runs)
    assert err > 1e-3, f"skipping the {what} all-reduce went unnoticed (max |Δ| {err:.1e})"


def test_tp_stack_impossible_split_is_a_clear_error():
    from trtllm_replayssm.models import MAMBA2, HybridModel, Layer, Mamba2Geometry

    with pytest.raises(ValueError, match=r"tiny-hybrid layer 0 \(mamba2\).*nheads = 8 is not divisible by tp_size = 3"):
        run_ranks(3, lambda g: HybridDecodeStack(tiny_stack_model(), HIDDEN, group=g))
    odd = HybridModel("odd-groups", "mixed", (Layer(0, MAMBA2, Mamba2Geometry(12, 4, 8, 3, 4)),))
    with pytest.raises(ValueError, match=r"odd-groups layer 0 \(mamba2\).*ngroups = 3 and tp_size = 2"):
        run_ranks(2, lambda g: HybridDecodeStack(odd, HIDDEN, group=g))


def test_tp_stack_rejects_non_ssm_layers_and_bad_routes():
    from trtllm_replayssm.models import load_model

    with pytest.raises(ValueError, match="not SSM layers"):
        HybridDecodeStack(load_model("qwen3.5-4b"), HIDDEN)
    stack = HybridDecodeStack(tiny_stack_model(), HIDDEN)
    pool = stack.new_pool(2, buffer_len=L, state_dtype=torch.float32)
    with pytest.raises(ValueError, match="route is 'fast'"):
        stack.step(pool, torch.zeros(1, HIDDEN), torch.zeros(1, dtype=torch.int32), "fast")
