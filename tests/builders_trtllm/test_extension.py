"""The V2 cache-manager extension's logic against stand-in contexts, managers and strategies."""

from dataclasses import dataclass, field
from typing import Optional

import pytest
import torch

from pooled import pool_view, trtllm_cache_description
from trtllm_replayssm.models import PRESETS, load_model
from trtllm_replayssm_builders.trtllm.config import ReplaySSMConfig
from trtllm_replayssm_builders.trtllm.extension import ReplayRecordsFeature, plan_manager_layers
from trtllm_replayssm_builders.trtllm.layout import bytes_per_slot, replay_bytes_per_rank


@dataclass
class Context:
    """The MambaCacheBuildContext fields the extension reads."""

    mamba_pp_layers: tuple
    ssm_state_shape: tuple
    conv_state_shape: tuple
    conv_section_dims: tuple
    conv_state_layout: str
    conv_state_dtype: torch.dtype = torch.bfloat16
    ssm_state_dtype: torch.dtype = torch.float32
    slot_capacity: Optional[int] = None
    spec_config: object = None
    backend: str = "v2"


def context_for(name, tp=1, **kw):
    model = load_model(name)
    layer = model.ssm_layers[0]
    return model, Context(
        mamba_pp_layers=tuple(l.index for l in model.ssm_layers),
        **trtllm_cache_description(layer.kind, layer.geometry, tp),
        **kw,
    )


class Strategy:
    def __init__(self):
        self.calls = []

    def reset_slots(self, slots, host_slots):
        self.calls.append(("reset", list(host_slots)))

    def relocate_slots(self, old_slots, new_slots):
        self.calls.append(("relocate", list(old_slots), list(new_slots)))


@dataclass
class Manager:
    """What bind() reads from MambaHybridCacheManagerV2: layer offsets, pool views, strategy."""

    layer_offsets: dict
    num_slots: int
    strategy: Strategy = field(default_factory=Strategy)
    views: dict = field(default_factory=dict)

    def _get_state_buffer(self, local_layer_idx, role, dtype, state_shape):
        view, _ = pool_view(self.num_slots, tuple(state_shape), dtype, scale=2, position=0)
        self.views[(local_layer_idx, role)] = view
        return view

    def get_state_update_strategy(self):
        return self.strategy

    def get_state_indices(self, request_ids, is_padding):
        return [{11: 2, 12: 5}[r] for r in request_ids]


def feature(layers, L=16, delta_rule_records="activation"):
    return ReplayRecordsFeature(
        ReplaySSMConfig(buffer_len=L, delta_rule_records=delta_rule_records),
        layers,
        make_role=lambda n: f"role:{n}",
        make_buffer_config=lambda role, size: (role, size),
    )


def test_roles_are_the_record_fields_of_the_hooked_families():
    f = feature({0: "mamba2", 2: "mamba2"})
    assert f.key == "replayssm_records"
    assert f.data_roles == ("role:replayssm_B_records", "role:replayssm_dt_records", "role:replayssm_x_records")
    assert len(feature({1: "gdn"}).data_roles) == 3


def test_buffer_configs_and_bytes_per_slot_nemotron_super():
    model, ctx = context_for("nemotron-3-super-120b")
    f = feature({l.index: l.kind for l in model.ssm_layers})
    f.validate(ctx)
    first = model.ssm_layers[0].index
    assert f.buffer_configs(ctx, first) == (
        ("role:replayssm_x_records", 128 * 16 * 64 * 2),
        ("role:replayssm_dt_records", 128 * 16 * 4),
        ("role:replayssm_B_records", 8 * 16 * 128 * 2),
    )
    assert f.bytes_per_slot(ctx, first) == 303_104 + 12
    attention = model.attention_layers[0].index
    assert f.buffer_configs(ctx, attention) == () and f.bytes_per_slot(ctx, attention) == 0


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("records", ["activation", "float32"])
def test_manager_bytes_equal_estimator_bytes(name, tp, records):
    """What the manager counts per slot (sum over its layers) equals the KV-budget estimate."""
    model, ctx = context_for(name, tp)
    f = feature({l.index: l.kind for l in model.ssm_layers}, delta_rule_records=records)
    manager_bytes = sum(f.bytes_per_slot(ctx, i) for i in ctx.mamba_pp_layers)
    assert manager_bytes == replay_bytes_per_rank(
        PRESETS[name], ("mamba2", "gdn", "kda"), 16, tp_size=tp, activation_dtype=torch.bfloat16, delta_rule_records=records
    )
    g = model.for_tp(tp).ssm_layers[0]
    record_dtype = torch.float32 if records == "float32" and g.kind != "mamba2" else torch.bfloat16
    assert f.bytes_per_slot(ctx, g.index) == bytes_per_slot(
        g.kind, g.geometry, 16, record_dtype=record_dtype, state_dtype=torch.float32
    )


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(backend="cpp"), "need the V2 Mamba cache manager; got backend 'cpp'"),
        (dict(spec_config=object()), "non-speculative decoding; this manager has a spec_config"),
        (dict(conv_section_dims=(8192, 1000, 1048)), "ReplaySSM layer 0 \\(mamba2\\): rank_geometry"),
    ],
)
def test_validate_refuses_with_reason(change, match):
    model, ctx = context_for("nemotron-3-super-120b")
    for k, v in change.items():
        setattr(ctx, k, v)
    with pytest.raises(ValueError, match=match):
        feature({l.index: l.kind for l in model.ssm_layers}).validate(ctx)


def test_bind_takes_pool_views_and_observes_strategy():
    model, ctx = context_for("qwen3.5-4b", slot_capacity=6)
    layers = {l.index: l.kind for l in model.ssm_layers}
    local = ctx.mamba_pp_layers[:3]
    ctx.mamba_pp_layers = local
    manager = Manager({i: 10 + i for i in local}, 6)
    f = feature(layers, L=4)
    f.bind(ctx, manager)
    assert f.store.layer_ids == list(local)
    layer = f.get_layer_cache(local[1])
    assert layer.records["d_records"] is manager.views[(10 + local[1], "role:replayssm_d_records")]
    assert f.get_layer_cache(local[2] + 1) is None
    # Fresh generation slots reset through the strategy, after its own reset.
    f.store.counters.fill_(3)
    manager.strategy.reset_slots(torch.tensor([1]), [1])
    assert manager.strategy.calls == [("reset", [1])]
    assert f.store.counters[:, :, 1].eq(0).all() and f.store.counters[:, :, 0].eq(3).all()
    # Relocation carries counters.
    f.store.counters[:, 0, 0] = 9
    manager.strategy.relocate_slots([0, -1], [4, 1])
    assert f.store.counters[:, 0, 4].eq(9).all()
    # Context requests and disaggregated transfers reset.
    f.reset_slots(torch.tensor([4]), [4])
    assert f.store.counters[:, :, 4].eq(0).all()
    f.store.counters[:, :, 5] = 7
    f.on_state_transfer_complete([12], manager)
    assert f.store.counters[:, :, 5].eq(0).all()
    assert len(list(f.iter_buffers())) == 1 + 3 * len(local)
    # Shutdown removes the per-instance wrappers.
    f.shutdown()
    assert "reset_slots" not in vars(manager.strategy) and f.store is None
    manager.strategy.reset_slots(torch.tensor([0]), [0])
    assert manager.strategy.calls[-1] == ("reset", [0])


@pytest.mark.parametrize(
    "conv_dtype, records, record_dtype",
    [
        (torch.bfloat16, "activation", "bf16"),
        (torch.bfloat16, "float32", "fp32"),
        (torch.float32, "activation", "fp32"),
        (torch.float16, "activation", "fp16"),
    ],
)
def test_route_advice_takes_the_bound_layers_records(conv_dtype, records, record_dtype):
    """route_advice looks the bound layers up with their records' dtype (the activations', or
    fp32 with delta_rule_records="float32"): only bf16 records, the ones timed, get a figure."""
    model, ctx = context_for("qwen3.5-122b-a10b", slot_capacity=4, conv_state_dtype=conv_dtype)
    ctx.mamba_pp_layers = ctx.mamba_pp_layers[:2]
    f = feature({l.index: l.kind for l in model.ssm_layers}, delta_rule_records=records)
    f.bind(ctx, Manager({i: 10 + i for i in ctx.mamba_pp_layers}, 4))
    (a,) = f.route_advice(16)
    assert (a.family, a.state_dtype, a.record_dtype, a.L, a.batch) == ("gdn", "fp32", record_dtype, 16, 16)
    if record_dtype == "bf16":
        assert a.ratio == 1.44 and a.text.startswith("gdn replay step L 16, fp32 checkpoint, batch 16: 1.44x")
    else:
        assert (a.ratio, a.recommendation) == (None, None)
        assert a.text.startswith(
            f"gdn replay step L 16, fp32 checkpoint, {record_dtype} records, batch 16: not measured "
            "(measured with bf16 records only: fp32 at L 8/16/32"
        )
    f.shutdown()
    assert f.route_advice(16) == ()


def test_bind_without_local_hooked_layers_and_without_capacity():
    model, ctx = context_for("nemotron-3-nano-4b", slot_capacity=4)
    ctx.mamba_pp_layers = ()
    f = feature({l.index: l.kind for l in model.ssm_layers})
    f.bind(ctx, Manager({}, 4))
    assert f.store is None and f.get_layer_cache(0) is None and list(f.iter_buffers()) == []
    model, ctx = context_for("nemotron-3-nano-4b")
    with pytest.raises(RuntimeError, match="without a slot capacity"):
        feature({l.index: l.kind for l in model.ssm_layers}).bind(ctx, Manager({}, 4))


def _plan(**kw):
    args = dict(
        mamba_layer_mask=[True, False, True, True],
        spec_config=None,
        is_draft=False,
        enable_block_reuse=False,
        pp_size=1,
        cp_size=1,
    )
    args.update(kw)
    return plan_manager_layers(ReplaySSMConfig(families=("mamba2", "gdn")), {0: "mamba2", 2: "mamba2", 3: "kda"}, **args)


def test_plan_manager_layers():
    assert _plan() == {0: "mamba2", 2: "mamba2"}  # kda not enabled, 1 not recurrent
    assert _plan(spec_config=object()) is None  # TensorRT-LLM's speculative path
    assert _plan(is_draft=True) is None
    assert _plan(mamba_layer_mask=[False] * 4) is None
    with pytest.raises(ValueError, match="enable_block_reuse=True is not supported"):
        _plan(enable_block_reuse=True)
    with pytest.raises(ValueError, match="pipeline parallelism \\(pp_size 2\\)"):
        _plan(pp_size=2)
    with pytest.raises(ValueError, match="context parallelism \\(cp_size 2\\)"):
        _plan(cp_size=2)
