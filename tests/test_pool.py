"""ReplayCachePool: allocation equals the planner to the byte, views the ops accept, slot lifecycle."""

import importlib.util

import pytest
import torch

from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.memory import MODES
from trtllm_replayssm.models import PRESETS, from_hf_config, load_model
from trtllm_replayssm.ops import mamba2_replay_step
from trtllm_replayssm.planner import PlanConfig, pool_bytes
from trtllm_replayssm.pool import ReplayCachePool

HAS_GATED_DELTA_OPS = importlib.util.find_spec("trtllm_replayssm.ops.gated_delta") is not None


def _tiny_mamba():
    return from_hf_config(
        {
            "hybrid_override_pattern": "M*M-",
            "mamba_num_heads": 4,
            "mamba_head_dim": 8,
            "ssm_state_size": 16,
            "n_groups": 2,
            "conv_kernel": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        },
        name="tiny-m",
    )


def _tiny_gdn():
    return from_hf_config(
        {
            "num_hidden_layers": 3,
            "full_attention_interval": 3,
            "linear_num_key_heads": 2,
            "linear_num_value_heads": 4,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        },
        name="tiny-gdn",
    )


def _tiny_kda():
    return from_hf_config(
        {
            "num_hidden_layers": 3,
            "kv_lora_rank": 16,
            "qk_rope_head_dim": 8,
            "linear_attn_config": {
                "kda_layers": [1, 2],
                "full_attn_layers": [3],
                "num_heads": 2,
                "head_dim": 8,
                "short_conv_kernel_size": 4,
            },
        },
        name="tiny-kda",
    )


def _snapshot(pool):
    return {k: v.clone() for k, v in pool.buffers.items()}


def _assert_unchanged(pool, snap):
    for k, v in pool.buffers.items():
        assert torch.equal(v, snap[k]), k


# --------------------------------------------------------------------------- bytes


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("mode", ["replay", "replay_spec"])
def test_pool_allocation_equals_planner(name, tp, mode):
    model = load_model(name).for_tp(tp)
    for state, record, conv, padding in [
        (torch.float32, torch.bfloat16, torch.bfloat16, 1),
        (torch.bfloat16, torch.float32, torch.float16, 0),
    ]:
        cfg = PlanConfig(buffer_len=16, spec_tokens=4, state_dtype=state, record_dtype=record, conv_dtype=conv)
        pool = ReplayCachePool(
            model,
            5,
            mode=mode,
            buffer_len=16,
            spec_tokens=4 if mode == "replay_spec" else None,
            state_dtype=state,
            record_dtype=record,
            conv_dtype=conv,
            num_padding_slots=padding,
            device="meta",
        )
        assert pool.nbytes == pool_bytes(model, mode, cfg, 5 + padding)


def test_pool_bytes_differ_between_modes():
    # Teeth for the test above: the modes' layouts really differ.
    model = load_model("qwen3.5-4b")
    sizes = {mode: pool_bytes(model, mode, PlanConfig(), 3) for mode in MODES}
    assert len(set(sizes.values())) == len(MODES)


# --------------------------------------------------------------------------- views


@pytest.mark.parametrize(
    "make, cache_type",
    [(_tiny_mamba, Mamba2ReplayCache), (_tiny_gdn, GDNReplayCache), (_tiny_kda, KDAReplayCache)],
    ids=["mamba2", "gdn", "kda"],
)
def test_pool_hands_out_contiguous_views(make, cache_type):
    model = make()
    pool = ReplayCachePool(model, 3, buffer_len=4, num_padding_slots=2)
    assert pool.layer_indices == [l.index for l in model.ssm_layers]
    assert len(pool.buffers) == 8  # one group: 7 cache fields + conv_state
    storages = {b.untyped_storage().data_ptr() for b in pool.buffers.values()}
    for layer in model.ssm_layers:
        cache = pool.cache(layer.index)
        assert type(cache) is cache_type
        assert cache.num_slots == 5 and cache.L == 4
        for t in cache.tensors().values():
            assert t.is_contiguous() and t.untyped_storage().data_ptr() in storages
        conv = pool.conv_state(layer.index)
        assert tuple(conv.shape) == (5, layer.geometry.conv_dim, 3) and conv.is_contiguous()
    # Views: a write through one layer's cache lands in the pool, and in no other layer.
    first, second = model.ssm_layers[0].index, model.ssm_layers[1].index
    pool.cache(first).checkpoint[1] = 7.0
    assert pool.cache(second).checkpoint.abs().sum() == 0
    assert sum(b.abs().sum() for b in pool.buffers.values()) == 7.0 * pool.cache(first).checkpoint[1].numel()


def test_pool_spec_mode_layout():
    model = _tiny_gdn()
    pool = ReplayCachePool(model, 2, mode="replay_spec", buffer_len=8, spec_tokens=3)
    cache = pool.cache(0)
    assert cache.L == 8 + 3 and pool.L == 11
    assert tuple(pool.conv_state(0).shape) == (3, model.ssm_layers[0].geometry.conv_dim, 3 + 2)


# --------------------------------------------------------------------------- the ops on pool views


def _mamba2_inputs(batch, nheads=4, head_dim=8, ngroups=2, d_state=16):
    return dict(
        x=torch.randn(batch, nheads, head_dim),
        dt=torch.randn(batch, nheads),
        A=-torch.rand(nheads) - 0.5,
        B=torch.randn(batch, ngroups, d_state),
        C=torch.randn(batch, ngroups, d_state),
    )


@pytest.mark.parametrize("state", [torch.float32, torch.float8_e4m3fn], ids=["fp32", "fp8"])
def test_mamba2_replay_step_on_pool_views_equals_standalone_cache(state):
    """An fp8 pool also holds each layer's row scales (``checkpoint_scale`` buffers)."""
    model = _tiny_mamba()
    pool = ReplayCachePool(model, 3, buffer_len=4, state_dtype=state, record_dtype=torch.float32, num_padding_slots=1)
    alone = {
        l.index: Mamba2ReplayCache.allocate(4, 4, 8, 16, 2, 4, state_dtype=state, act_dtype=torch.float32)
        for l in model.ssm_layers
    }
    assert any(k.endswith(".checkpoint_scale") for k in pool.buffers) == (state == torch.float8_e4m3fn)
    init = [torch.randn(2, 4, 8, 16) for _ in model.ssm_layers]
    pool.admit([0, 2], states=init)
    for k, l in enumerate(model.ssm_layers):
        alone[l.index].admit(torch.tensor([0, 2]), init[k])
    untouched = {k: v[:, [1, 3]].clone() for k, v in pool.buffers.items()}  # free + padding slot
    slot_ids = torch.tensor([2, -1, 0], dtype=torch.int32)  # a CUDA-graph padding row in the middle
    for _ in range(9):  # 2 flushes per row at L = 4
        inputs = _mamba2_inputs(3)
        for l in model.ssm_layers:
            y_pool = mamba2_replay_step(pool.cache(l.index), slot_ids=slot_ids, **inputs)
            y_alone = mamba2_replay_step(alone[l.index], slot_ids=slot_ids, **inputs)
            assert torch.equal(y_pool, y_alone)
    for l in model.ssm_layers:
        for name, t in alone[l.index].tensors().items():  # bits: fp8 compares through its bytes
            assert torch.equal(getattr(pool.cache(l.index), name).view(torch.uint8), t.view(torch.uint8)), name
    assert int(pool.cache(0).cursor[0]) == 9 % 4
    for k, v in pool.buffers.items():
        assert torch.equal(v[:, [1, 3]].view(torch.uint8), untouched[k].view(torch.uint8)), k


@pytest.mark.skipif(not HAS_GATED_DELTA_OPS, reason="GDN/KDA ops not in this checkout yet")
@pytest.mark.parametrize("make, op_name", [(_tiny_gdn, "gdn_replay_step"), (_tiny_kda, "kda_replay_step")], ids=["gdn", "kda"])
def test_delta_rule_replay_step_on_pool_views(make, op_name):
    from trtllm_replayssm.ops import gated_delta

    op = getattr(gated_delta, op_name)
    model = make()
    pool = ReplayCachePool(model, 2, buffer_len=4, record_dtype=torch.float32)
    layer = model.ssm_layers[0]
    g_ = layer.geometry
    alone = type(pool.cache(layer.index)).allocate(
        3, g_.k_heads, g_.v_heads, g_.head_k_dim, g_.head_v_dim, 4, record_dtype=torch.float32
    )
    pool.admit([0, 1])
    alone.admit(torch.tensor([0, 1]))
    slot_ids = torch.tensor([1, -1, 0], dtype=torch.int32)
    for _ in range(6):
        q, k = torch.randn(3, g_.k_heads, g_.head_k_dim), torch.randn(3, g_.k_heads, g_.head_k_dim)
        v = torch.randn(3, g_.v_heads, g_.head_v_dim)
        gate_shape = (3, g_.v_heads) + ((g_.head_k_dim,) if op_name == "kda_replay_step" else ())
        g, beta = -torch.rand(gate_shape), torch.rand(3, g_.v_heads)
        assert torch.equal(
            op(pool.cache(layer.index), q, k, v, g, beta, slot_ids=slot_ids), op(alone, q, k, v, g, beta, slot_ids=slot_ids)
        )
    assert torch.equal(pool.cache(layer.index).checkpoint, alone.checkpoint)
    assert pool.cache(layer.index).checkpoint[2].abs().sum() == 0  # padding slot


# --------------------------------------------------------------------------- slots


def test_admit_release_and_slot_lists():
    model = _tiny_gdn()
    pool = ReplayCachePool(model, 4, buffer_len=4)
    states = [torch.randn(2, 4, 8, 8, dtype=torch.float64) for _ in model.ssm_layers]
    convs = [torch.randn(2, l.geometry.conv_dim, 3) for l in model.ssm_layers]
    pool.cache(0).cursor[3] = 2
    pool.admit(torch.tensor([3, 1]), states=states, conv_states=convs)
    assert pool.live_slots() == [1, 3] and pool.free_slots() == [0, 2]
    for k, l in enumerate(model.ssm_layers):
        cache = pool.cache(l.index)
        assert torch.equal(cache.checkpoint[[3, 1]], states[k].float())
        assert torch.equal(pool.conv_state(l.index)[[3, 1]], convs[k].to(torch.bfloat16))
        assert cache.checkpoint[[0, 2, 4]].abs().sum() == 0
    assert int(pool.cache(0).cursor[3]) == 0
    pool.release([3])
    assert pool.live_slots() == [1]
    pool.admit([3])  # zeros this time
    assert pool.cache(0).checkpoint[3].abs().sum() == 0 and pool.conv_state(0)[3].abs().sum() == 0


@pytest.mark.parametrize(
    "call, message",
    [
        pytest.param(lambda p: p.admit([1]), "slots \\[1\\] are live; expected free", id="admit-live"),
        pytest.param(lambda p: p.admit([4]), "out of range; expected ids in \\[0, 4\\)", id="admit-padding"),
        pytest.param(lambda p: p.admit([0, 0]), "duplicate", id="admit-dup"),
        pytest.param(
            lambda p: p.admit([0], states=[torch.zeros(1, 4, 8, 8)]), "expected a list of 2 tensors", id="states-count"
        ),
        pytest.param(
            lambda p: p.admit([0], states=[torch.zeros(1, 4, 8, 8), torch.zeros(1, 4, 8, 7)]),
            "states of layer 1 has shape \\(1, 4, 8, 7\\); expected \\(1, 4, 8, 8\\)",
            id="states-shape",
        ),
        pytest.param(
            lambda p: p.admit([0], conv_states=[torch.zeros(1, 63, 3)] * 2),
            "conv_states of layer 0 has shape",
            id="conv-shape",
        ),
        pytest.param(
            lambda p: p.admit([0], states=[torch.zeros(1, 4, 8, 8, dtype=torch.int32)] * 2),
            "expected a floating dtype",
            id="states-int",
        ),
        pytest.param(lambda p: p.release([0]), "slots \\[0\\] are free; expected live", id="release-free"),
        pytest.param(
            lambda p: p.reanchor([0], [torch.zeros(1, 4, 8, 8)] * 2, [torch.zeros(1, 64, 3)] * 2),
            "are free; expected live",
            id="reanchor-free",
        ),
        pytest.param(lambda p: p.reanchor([1], None, None), "states and conv_states are required", id="reanchor-none"),
        pytest.param(lambda p: p.reset([5]), "expected ids in \\[0, 5\\)", id="reset-range"),
        pytest.param(lambda p: p.cache(2), "layer 2 is not an SSM layer; expected one of \\[0, 1\\]", id="cache-attention"),
        pytest.param(lambda p: p.admit(torch.zeros(1, 2, dtype=torch.int64)), "1-D int32/int64", id="ids-2d"),
    ],
)
def test_pool_errors_leave_it_unchanged(call, message):
    pool = ReplayCachePool(_tiny_gdn(), 4, buffer_len=4)
    pool.admit([1], states=[torch.randn(1, 4, 8, 8) for _ in range(2)])
    live, snap = pool.live_slots(), _snapshot(pool)
    with pytest.raises((ValueError, TypeError), match=message):
        call(pool)
    _assert_unchanged(pool, snap)
    assert pool.live_slots() == live


def test_reanchor_after_preemption():
    model = _tiny_mamba()
    pool = ReplayCachePool(model, 2, buffer_len=4, record_dtype=torch.float32)
    pool.admit([0, 1])
    for _ in range(2):
        for l in model.ssm_layers:
            mamba2_replay_step(pool.cache(l.index), slot_ids=torch.tensor([0, 1], dtype=torch.int32), **_mamba2_inputs(2))
    assert int(pool.cache(0).cursor[1]) == 2
    other = {k: v[:, 0].clone() for k, v in pool.buffers.items()}
    states = [torch.randn(1, 4, 8, 16) for _ in model.ssm_layers]
    convs = [torch.randn(1, 96, 3) for _ in model.ssm_layers]  # conv_dim 4 * 8 + 2 * 2 * 16
    pool.reanchor([1], states, convs)
    for k, l in enumerate(model.ssm_layers):
        assert torch.equal(pool.cache(l.index).checkpoint[1], states[k][0])
        assert torch.equal(pool.conv_state(l.index)[1], convs[k][0].to(torch.bfloat16))
        assert int(pool.cache(l.index).cursor[1]) == 0
    for k, v in pool.buffers.items():
        assert torch.equal(v[:, 0], other[k]), k
    assert pool.live_slots() == [0, 1]


def test_reset_zeroes_every_row_of_the_slots_and_only_those():
    model = _tiny_kda()
    pool = ReplayCachePool(model, 3, buffer_len=4, num_padding_slots=1)
    for buf in pool.buffers.values():
        buf.copy_(torch.randint(1, 5, buf.shape))  # every row non-zero
    keep = {k: v[:, [0, 2]].clone() for k, v in pool.buffers.items()}
    pool.reset([1, 3])
    for k, v in pool.buffers.items():
        assert v[:, [1, 3]].abs().sum() == 0, k
        assert torch.equal(v[:, [0, 2]], keep[k]), k
    # A padding row of an engine kernel pointed at the padding slot writes only that slot;
    # reset_padding restores its zeros.
    pool.conv_state(0)[3] = 1.0
    pool.reset_padding()
    assert pool.conv_state(0)[3].abs().sum() == 0 and pool.padding_slot_ids == [3]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        pytest.param(dict(mode="replay_spec", buffer_len=4, spec_tokens=8), ValueError, "expected B >= T", id="B<T"),
        pytest.param(dict(mode="replay_spec"), ValueError, "spec_tokens is None", id="T-missing"),
        pytest.param(dict(spec_tokens=4), ValueError, "in mode 'replay'", id="T-in-replay"),
        pytest.param(dict(mode="conventional"), ValueError, "expected one of replay, replay_spec", id="mode"),
        pytest.param(dict(buffer_len=65), ValueError, "L is 65", id="L65"),
        pytest.param(dict(num_padding_slots=-1), ValueError, "num_padding_slots", id="padding"),
    ],
)
def test_pool_rejects_bad_settings(kwargs, error, message):
    with pytest.raises(error, match=message):
        ReplayCachePool(_tiny_mamba(), 2, **kwargs)


def test_pool_needs_ssm_layers_and_a_model():
    with pytest.raises(ValueError, match="no SSM layer"):
        ReplayCachePool(from_hf_config({"hybrid_override_pattern": "*-", "num_key_value_heads": 1, "head_dim": 4}), 2)
    with pytest.raises(TypeError, match="expected a HybridModel"):
        ReplayCachePool("nemotron-3-super-120b", 2)
