"""The layer-family registry: a new family plugs into the cache pool, the byte model and
planner, TP sharding and the TP decode stack (a host) by its own module and one registration
(tests/toy_family.py: GDN's kernels with another gate), with no edit anywhere else."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tp"))

from toy_family import TOY, ToyReplayCache, register_toy, toy_gate
from tp_threads import run_ranks, single_threaded_torch
from trtllm_replayssm import registry
from trtllm_replayssm.memory import CURSOR_BYTES, record_bytes
from trtllm_replayssm.models import ATTENTION, GDN, AttentionGeometry, DeltaRuleGeometry, HybridModel, Layer
from trtllm_replayssm.planner import PlanConfig, format_plan, plan, pool_bytes, sequence_ssm_bytes
from trtllm_replayssm.pool import ReplayCachePool
from trtllm_replayssm.tp import HybridDecodeStack, layer_shard, run_decode, shard_errors
from trtllm_replayssm.tp.shard import DeltaRuleShard

G = DeltaRuleGeometry(k_heads=2, v_heads=4, head_k_dim=8, head_v_dim=8, d_conv=4)
HIDDEN, L = 16, 4


@pytest.fixture(autouse=True)
def toy(monkeypatch):
    """The toy family registered for one test (the registry restored afterwards)."""
    registry.kinds()  # the built-ins, registered before the copy
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    return register_toy()


def _hybrid(kind=TOY):
    attention = Layer(1, ATTENTION, AttentionGeometry(kv_heads=2, head_dim=8))
    return HybridModel("toy-hybrid", "toy", (Layer(0, kind, G), attention, Layer(2, kind, G)))


def _ssm_only(kind=TOY):
    return HybridModel("toy-stack", "toy", (Layer(0, kind, G), Layer(1, kind, G)))


def test_registration_is_one_call_and_refused_twice(toy):
    assert registry.kinds() == ("mamba2", "gdn", "kda", TOY) and registry.family(TOY) is toy
    with pytest.raises(ValueError, match=f"kind '{TOY}' is already registered"):
        register_toy()
    with pytest.raises(ValueError, match="no SSM layer family 'rwkv'; expected one of mamba2, gdn, kda, toy_gdn"):
        registry.family("rwkv")


def test_pool_allocates_the_toy_cache_and_the_planner_counts_it():
    model = _hybrid()
    assert [l.index for l in model.ssm_layers] == [0, 2]
    pool = ReplayCachePool(model, 3, buffer_len=L, state_dtype=torch.float32, record_dtype=torch.bfloat16)
    cache = pool.cache(2)
    assert isinstance(cache, ToyReplayCache) and cache.L == L and tuple(cache.checkpoint.shape) == (4, 4, 8, 8)
    pool.admit([1], states=[torch.ones(1, 4, 8, 8), torch.full((1, 4, 8, 8), 2.0)])
    assert cache.checkpoint[1].eq(2).all() and cache.checkpoint[0].eq(0).all()
    cfg = PlanConfig(buffer_len=L, spec_tokens=2)
    assert pool.nbytes == pool_bytes(model, "replay", cfg, pool.num_physical_slots)
    # by hand: state 4*8*8 fp32; a record d [4, 8] + k [2, 8] bf16 and g [4] fp32; conv [64, 3] bf16
    assert record_bytes(TOY, G, torch.bfloat16, torch.float32) == 4 * 8 * 2 + 2 * 8 * 2 + 4 * 4
    per_layer = 4 * 8 * 8 * 4 + L * 112 + CURSOR_BYTES + 64 * 3 * 2
    assert sequence_ssm_bytes(model, "replay", cfg) == 2 * per_layer
    text = format_plan(plan(model, config=cfg, gpu_mem_bytes=1 << 30))
    assert "2 toy_gdn, 1 attention" in text and "toy_gdn x2: k_heads 2, v_heads 4" in text


def test_tp_sharding_uses_the_families_shard_rule():
    shard = layer_shard(Layer(0, TOY, G), 2, 1)
    assert isinstance(shard, DeltaRuleShard) and shard.local.v_heads == 2 and shard.local.k_heads == 1
    whole = ToyReplayCache.for_geometry(G, 3, L)
    whole.checkpoint.copy_(torch.randn(whole.checkpoint.shape))
    part = shard.shard_cache(whole)
    assert isinstance(part, ToyReplayCache) and torch.equal(part.checkpoint, whole.checkpoint[:, 2:])
    with pytest.raises(ValueError, match=r"layer 0 \(toy_gdn\): .*k_heads = 2 is not divisible by tp_size = 4"):
        layer_shard(Layer(0, TOY, G), 4, 0)
    with pytest.raises(TypeError, match="a toy_gdn layer's geometry is AttentionGeometry; expected DeltaRuleGeometry"):
        layer_shard(Layer(0, TOY, AttentionGeometry(2, 8)), 2, 0)


def _run(group, route, kind=TOY):
    stack = HybridDecodeStack(_ssm_only(kind), HIDDEN, group=group, dtype=torch.float64)
    return run_decode(stack, route=route, steps=3 * L, batch=3, buffer_len=L, state_dtype=torch.float64)


def test_decode_stack_runs_the_toy_family_replay_equals_conventional():
    replay, conventional = _run(None, "replay"), _run(None, "conventional")
    torch.testing.assert_close(replay.outputs, conventional.outputs, rtol=0, atol=1e-10)
    assert isinstance(replay.pool.cache(0), ToyReplayCache)
    # teeth: the toy's gate is in use (GDN's gate on the same weights decodes differently)
    assert (replay.outputs - _run(None, "replay", GDN).outputs).abs().max() > 1e-3
    a, b, A_log, dt_bias = torch.randn(2, 4), torch.randn(2, 4), torch.randn(4), torch.randn(4)
    g, beta = toy_gate(a, b, A_log, dt_bias)
    assert (g < 0).all() and (g > -torch.exp(A_log)).all() and torch.equal(beta, torch.sigmoid(b))


def test_decode_stack_split_over_two_ranks_equals_whole():
    with single_threaded_torch():
        whole = _run(None, "replay")
        for rank, run in enumerate(run_ranks(2, lambda g: _run(g, "replay"))):
            errs = shard_errors(run, whole, _ssm_only(), 2, rank)
            assert errs.pop("cursors_equal") and max(errs.values()) < 1e-12, (rank, errs)
