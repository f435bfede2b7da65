"""The engine-flow hook's plain functions (builders/trtllm_engine/hook.py) on stand-ins of
TensorRT-LLM v1.2.1's Mamba-2 model (engine_standins.py says what each stands in for): build
options, which layers, the per-layer plan, the plugin fields, the rewritten forward's calls, the
engine config entries and the API check."""

import dataclasses

import pytest

import engine_standins as S
from trtllm_replayssm.block import Mamba2StateBlock
from trtllm_replayssm_builders.trtllm_engine import hook
from trtllm_replayssm_builders.trtllm_engine.hook import EngineBuildSettings, EngineFlowError
from trtllm_replayssm_plugins.mamba2_block_launch import ARG_INPUT, ENGINE_INPUTS

E = ENGINE_INPUTS


def _settings(**kw):
    base = dict(
        max_batch_size=64,
        max_beam_width=1,
        paged_state=True,
        remove_input_padding=True,
        mamba_conv1d_plugin=True,
        speculative=False,
        tp_size=1,
        pp_size=1,
        dtype="bfloat16",
        mamba_version="Mamba2",
        buffer_len=16,
    )
    return EngineBuildSettings(**{**base, **kw})


def _mamba2_2p7b():
    """mamba2-2.7b: d_model 2560, d_inner 5120, headdim 64 (80 heads), d_state 128, 1 group."""
    return S.Mamba2(2560, 5120)


def test_settings_accept_trtllm_build_defaults_for_mamba():
    hook.check_settings(_settings())
    assert _settings(dtype="float16").act_dtype == "f16"


def test_settings_list_every_problem_with_expected_and_got():
    bad = _settings(
        paged_state=False,
        remove_input_padding=False,
        mamba_conv1d_plugin=False,
        max_beam_width=4,
        speculative=True,
        tp_size=2,
        pp_size=2,
        dtype="float8",
        mamba_version="Mamba1",
        buffer_len=65,
    )
    with pytest.raises(EngineFlowError) as e:
        hook.check_settings(bad)
    msg = str(e.value)
    assert msg.startswith("enable_replayssm_engine: the build cannot use the ReplaySSM engine flow:")
    for line in (
        "model.config.mamba_version: expected 'Mamba2', got 'Mamba1'",
        "buffer_len (--replayssm-buffer-len): expected at most 64, got 65",
        "plugin_config.paged_state (--paged_state): expected enabled",
        "plugin_config.remove_input_padding (--remove_input_padding): expected enabled",
        "plugin_config.mamba_conv1d_plugin (--mamba_conv1d_plugin): expected enabled, got disabled",
        "build_config.max_beam_width (--max_beam_width): expected 1, got 4",
        "build_config.speculative_decoding_mode: expected none",
        "model.config.mapping.tp_size: expected 1, got 2",
        "model.config.mapping.pp_size: expected 1, got 2",
        "model.config.dtype: expected bfloat16 | float16 | float32, got 'float8'",
    ):
        assert line in msg
    with pytest.raises(ValueError, match="enable_replayssm_engine: max_batch_size is 0; expected a positive int"):
        hook.check_settings(_settings(max_batch_size=0))


def test_find_mamba2_layers_takes_every_layer():
    model = S.MambaForCausalLM(num_layers=3, d_model=256, d_inner=256)
    found = hook.find_mamba2_layers(model, S.Mamba2)
    assert [i for i, _ in found] == [0, 1, 2]
    assert [m for _, m in found] == [layer.ssm for layer in model.backbone.layers]


def test_find_mamba2_layers_refuses_what_it_cannot_rewrite():
    model = S.MambaForCausalLM(num_layers=2, d_model=256, d_inner=256)
    model.backbone.layers[1].ssm = S.Mamba1()
    with pytest.raises(EngineFlowError, match=r"backbone.layers\[1\].ssm is Mamba1; expected Mamba2 in every layer \(1 of 2"):
        hook.find_mamba2_layers(model, S.Mamba2)
    with pytest.raises(EngineFlowError, match="model is object; expected MambaForCausalLM with backbone.layers"):
        hook.find_mamba2_layers(object(), S.Mamba2)
    model.backbone.layers = []
    with pytest.raises(EngineFlowError, match="backbone.layers is empty"):
        hook.find_mamba2_layers(model, S.Mamba2)


def test_layer_geometry_names_a_missing_attribute():
    layer = _mamba2_2p7b()
    del layer.headdim
    with pytest.raises(EngineFlowError, match="layer_geometry: the Mamba2 has no attribute 'headdim'"):
        hook.layer_geometry(layer)


def test_plan_of_mamba2_2p7b():
    plan = hook.plan_layer(3, _mamba2_2p7b(), _settings())
    assert plan.index == 3 and plan.rmsnorm
    assert plan.layout.block == Mamba2StateBlock(80, 64, 128, 1, 16, "bf16")
    assert plan.layout.num_slots == 64 and plan.layout.scratch_slot == 64
    assert plan.layout.runtime_state_size == 139  # tests/builders_trtllm_engine/test_state_and_views.py
    r = plan.attrs.replay
    assert plan.attrs.num_slots == 65 and plan.attrs.act_dtype == "bf16"
    assert (r.nheads, r.head_dim, r.d_state, r.ngroups, r.L) == (80, 64, 128, 1, 16)
    assert r.has_D and r.has_z and r.has_dt_bias and r.dt_softplus
    rows = dict(zip([p.name for p in plan.table.spec.params], plan.table.args))
    assert rows["x_ptr"] == (ARG_INPUT, E.index("xbc"), 0)
    assert rows["z_ptr"] == (ARG_INPUT, E.index("zxbcdt"), 0)
    assert rows["dt_ptr"] == (ARG_INPUT, E.index("zxbcdt"), 2 * 5120 + 2 * 128)
    assert rows["A_ptr"] == (ARG_INPUT, E.index("A"), 0)
    assert rows["D_ptr"] == (ARG_INPUT, E.index("D"), 0)
    assert rows["dt_bias_ptr"] == (ARG_INPUT, E.index("dt_bias"), 0)


def test_plan_keeps_an_fp32_checkpoint_rounded_to_nearest():
    """The engine flow's checkpoint lives in the runtime's fp32 state buffer: the plan rounds to
    nearest (rounding_seed -1), the block plugin refuses a seed (stochastic rounding takes a
    bf16, f16 or fp8 checkpoint), and its launch list has neither checkpoint_scale nor sr_seed:
    fp8 checkpoints and stochastic rounding belong to the replay-step plugins, not this flow."""
    from trtllm_replayssm_plugins.mamba2_block import Mamba2BlockAttrs

    plan = hook.plan_layer(0, _mamba2_2p7b(), _settings(max_batch_size=8))
    assert plan.attrs.replay.rounding_seed == -1
    names = set(plan.table.spec.fn_arg_names)
    assert not names & {"checkpoint_scale_in", "checkpoint_scale_ptr", "sr_seed", "HAS_SCALE", "SR"}
    seeded = dataclasses.replace(plan.attrs.replay, rounding_seed=5)
    with pytest.raises(ValueError, match=r"mamba2_replay_block: rounding_seed is 5 \(checkpoint: f32\); expected -1"):
        Mamba2BlockAttrs(seeded, plan.attrs.num_slots, plan.attrs.act_dtype)


def test_route_and_block_plugin_fields():
    plan = hook.plan_layer(0, _mamba2_2p7b(), _settings(max_batch_size=8))
    assert hook.route_plugin_fields(plan) == (hook.PluginFieldSpec("scratch_slot", "int32", (8,)),)
    compiled = S.Compiled(plan.table.spec, shared_mem=1024)
    fields = hook.block_plugin_fields(plan, compiled)
    assert [(f.name, f.kind) for f in fields] == [
        ("ptx", "char"),
        ("kernel_name", "char"),
        ("launch_table", "int64"),
        ("shared_mem", "int32"),
    ]
    assert fields[0].value == compiled.ptx and fields[1].value == "k"
    assert fields[2].value == plan.table.flat() and fields[3].value == (1024,)


def test_block_plugin_fields_refuse_another_kernel():
    plan = hook.plan_layer(0, _mamba2_2p7b(), _settings())
    other = hook.plan_layer(0, _mamba2_2p7b(), _settings(buffer_len=8))
    with pytest.raises(
        EngineFlowError, match=r"block_plugin_fields: compiled.spec.variant is '.*_L8_.*'; expected the plan's '.*_L16_"
    ):
        hook.block_plugin_fields(plan, S.Compiled(other.table.spec))
    with pytest.raises(EngineFlowError, match="compiled.shared_mem is 50000; expected 0 to 49152 bytes"):
        hook.block_plugin_fields(plan, S.Compiled(plan.table.spec, shared_mem=50000))


def _forward(layer, index=0, settings=None, **overrides):
    plan = hook.plan_layer(index, layer, settings or _settings())
    ins = S.engine_inputs(index + 1)
    ops = S.RecordingOps()
    kwargs = dict(
        hidden_states=S.Tensor("hidden"),
        conv_state=ins[f"conv_state_ptr_{index}"],
        ssm_state=ins[f"rnn_state_ptr_{index}"],
        host_request_types=ins["host_request_types"],
        last_token_ids=ins["last_token_ids"],
        host_context_lengths=ins["host_context_lengths"],
        slot_mapping=ins["slot_mapping"],
    )
    kwargs.update(overrides)
    out = hook.replay_forward(layer, plan, ops, **kwargs)
    return out, ops, ins, plan


def test_replay_forward_keeps_the_stock_context_path_and_adds_the_plugins():
    layer = _mamba2_2p7b()
    (out, conv_out, state_out), ops, ins, plan = _forward(layer)
    # the layer's own modules, in the stock order around the scan
    assert [name for name, _ in layer.calls] == ["in_proj", "conv1d", "norm", "out_proj"]
    assert out.name == "out_proj(norm(y))" and conv_out is None and state_out is None
    assert [name for name, _, _ in ops.calls] == ["route", "selective_scan", "replay_block"]
    zxbcdt, xbc = "in_proj(hidden)", "conv1d(in_proj(hidden))"
    # route: host_request_types and slot_mapping in; the stock scan gets its output as slots
    _, (req, slots), _ = ops.calls[0]
    assert (req, slots) == (ins["host_request_types"], ins["slot_mapping"])
    _, args, kw = ops.calls[1]
    assert [a.name if isinstance(a, S.Tensor) else a for a in args] == [
        xbc,
        "rnn_state_ptr_0",
        zxbcdt,
        "dt_bias",
        "A",
        xbc,
        "D",
        "host_request_types",
        "last_token_ids",
        5120,
        128,
    ]
    assert kw["slot_mapping"].name == "stock_slots" and kw["z"].name == zxbcdt
    assert kw["host_context_lengths"] is ins["host_context_lengths"]
    assert (kw["dt_rank"], kw["delta_softplus"], kw["dtype"], kw["mamba_version"]) == (0, True, "bfloat16", "Mamba2")
    assert (kw["nheads"], kw["ngroups"], kw["chunk_size"]) == (80, 1, 256)
    # the block plugin: its inputs in the C++ plugin's order (ENGINE_INPUTS)
    _, block_in, _ = ops.calls[2]
    assert [t.name for t in block_in] == [
        "rnn_state_ptr_0",
        "host_request_types",
        "slot_mapping",
        xbc,
        zxbcdt,
        "A",
        "D",
        "dt_bias",
        "y_stock",
    ]
    assert len(block_in) == len(E)


def test_replay_forward_without_rmsnorm_and_without_paged_inputs():
    layer = S.Mamba2(256, 256, d_state=16, ngroups=2, rmsnorm=False, dtype="float16")
    (out, _, _), _, _, plan = _forward(layer, settings=_settings(dtype="float16"))
    assert not plan.rmsnorm and out.name == "out_proj(y)"
    with pytest.raises(EngineFlowError, match="replay_forward \\(layer 0\\): slot_mapping is None; expected the engine input"):
        _forward(S.Mamba2(256, 256, d_state=16), slot_mapping=None)
    with pytest.raises(EngineFlowError, match="host_context_lengths is None"):
        _forward(S.Mamba2(256, 256, d_state=16), host_context_lengths=None)


def test_engine_config_entries_and_their_check():
    s = _settings(max_batch_size=64)
    plans = [hook.plan_layer(i, _mamba2_2p7b(), s) for i in range(3)]
    assert hook.engine_state_size(plans) == 139
    record = hook.engine_config_record(plans, 128)
    assert record == {
        "state_size": 139,
        "replayssm_engine": {
            "release": "1.2.1",
            "buffer_len": 16,
            "act_dtype": "bf16",
            "num_slots": 64,
            "scratch_slot": 64,
            "stock_state_size": 128,
            "layers": [0, 1, 2],
        },
    }
    engine = {"pretrained_config": {"state_size": 139, "replayssm_engine": dict(record["replayssm_engine"])}}
    engine["build_config"] = {"max_batch_size": 64}
    hook.check_engine_config(engine, record)
    engine["pretrained_config"]["state_size"] = 128
    engine["build_config"]["max_batch_size"] = 32
    with pytest.raises(EngineFlowError) as e:
        hook.check_engine_config(engine, record)
    assert "pretrained_config.state_size: expected 139, got 128" in str(e.value)
    assert "build_config.max_batch_size: expected 64 (the layout's slots), got 32" in str(e.value)
    with pytest.raises(EngineFlowError, match="plans is empty"):
        hook.engine_state_size([])
    with pytest.raises(EngineFlowError, match=r"slot counts \[8, 64\]"):
        hook.engine_state_size(plans + [hook.plan_layer(3, _mamba2_2p7b(), _settings(max_batch_size=8))])


def test_missing_requirements_names_each_gap():
    def full(module, name):
        for m, n, params in hook.REQUIREMENTS:
            if (m, n) == (module, name):
                return object(), list(params) + ["extra"]
        raise AssertionError((module, name))

    assert hook.missing_requirements(full) == []

    def gaps(module, name):
        if name == "MambaForCausalLM":
            return None, None
        if name == "selective_scan":
            return object(), ["input", "state_or_ptr"]
        return full(module, name)

    lines = hook.missing_requirements(gaps)
    assert lines[0] == "  tensorrt_llm.models.MambaForCausalLM: missing"
    assert lines[1].startswith("  tensorrt_llm.functional.selective_scan: expected parameters input, state_or_ptr, delta")
    assert lines[1].endswith("got input, state_or_ptr") and len(lines) == 2


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--checkpoint_dir", "c"], None),
        (["--model_config=c.json", "--workers", "1"], None),
        (["--checkpoint_dir", "c", "--workers", "2"], "--workers 2: expected 1"),
        (["--checkpoint_dir", "c", "--workers=4"], "--workers 4: expected 1"),
        (["--max_batch_size", "8"], "expected --checkpoint_dir DIR or --model_config FILE"),
    ],
)
def test_cli_argument_problems(argv, problem):
    got = hook.settings_problems_for_cli(argv)
    assert got is None if problem is None else problem in got
