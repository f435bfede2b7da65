"""Hybrid model descriptions: presets, Hugging Face config parsing, tensor-parallel geometry."""

import copy
import json

import pytest

from trtllm_replayssm.models import (
    ATTENTION,
    GDN,
    KDA,
    MAMBA2,
    MLP,
    MOE,
    PRESETS,
    AttentionGeometry,
    DeltaRuleGeometry,
    Mamba2Geometry,
    MLAGeometry,
    from_hf_config,
    load_model,
)


@pytest.mark.parametrize(
    "name, counts, ssm_geometry, attention_geometry",
    [
        pytest.param(
            "nemotron-3-nano-4b",
            {MAMBA2: 21, ATTENTION: 4, MLP: 17},
            Mamba2Geometry(nheads=96, head_dim=80, d_state=128, ngroups=8, d_conv=4),
            AttentionGeometry(kv_heads=8, head_dim=128),
            id="nemotron-nano",
        ),
        pytest.param(
            "nemotron-3-super-120b",
            {MAMBA2: 40, ATTENTION: 8, MOE: 40},
            Mamba2Geometry(nheads=128, head_dim=64, d_state=128, ngroups=8, d_conv=4),
            AttentionGeometry(kv_heads=2, head_dim=128),
            id="nemotron-super",
        ),
        pytest.param(
            "qwen3.5-4b",
            {GDN: 24, ATTENTION: 8},
            DeltaRuleGeometry(k_heads=16, v_heads=32, head_k_dim=128, head_v_dim=128, d_conv=4),
            AttentionGeometry(kv_heads=4, head_dim=256),
            id="qwen3.5-4b",
        ),
        pytest.param(
            "qwen3.5-122b-a10b",
            {GDN: 36, ATTENTION: 12},
            DeltaRuleGeometry(k_heads=16, v_heads=64, head_k_dim=128, head_v_dim=128, d_conv=4),
            AttentionGeometry(kv_heads=2, head_dim=256),
            id="qwen3.5-122b",
        ),
        pytest.param(
            "kimi-linear-48b",
            {KDA: 20, ATTENTION: 7},
            DeltaRuleGeometry(k_heads=32, v_heads=32, head_k_dim=128, head_v_dim=128, d_conv=4),
            MLAGeometry(kv_lora_rank=512, qk_rope_head_dim=64),
            id="kimi-linear",
        ),
    ],
)
def test_presets_layer_stacks(name, counts, ssm_geometry, attention_geometry):
    model = load_model(name)
    assert model.name == name and model.tp_size == 1
    assert {k: model.count(k) for k in counts} == counts
    assert len(model.layers) == sum(counts.values())
    assert [l.index for l in model.layers] == list(range(len(model.layers)))
    assert {l.geometry for l in model.ssm_layers} == {ssm_geometry}
    assert {l.geometry for l in model.attention_layers} == {attention_geometry}
    assert all(l.geometry is None for l in model.layers if l.kind in (MLP, MOE))


def test_nemotron_super_layer_ratio_is_five():
    # NVIDIA's figure assumes five SSM layers per attention layer; the published pattern has
    # 40 Mamba-2 and 8 attention layers, so the ratio is exactly 5.
    model = load_model("nemotron-3-super-120b")
    assert model.ssm_per_attention == 5.0
    assert [l.index for l in model.attention_layers] == [7, 16, 25, 36, 47, 58, 69, 78]


def test_mamba2_conv_dim_is_x_plus_B_plus_C():
    g = load_model("nemotron-3-super-120b").ssm_layers[0].geometry
    assert g.conv_dim == 128 * 64 + 2 * 8 * 128 == 10240


def test_kimi_layer_ids_are_one_based():
    model = load_model("kimi-linear-48b")
    assert [l.index for l in model.attention_layers] == [3, 7, 11, 15, 19, 23, 26]
    assert [l.kind for l in model.layers[:4]] == [KDA, KDA, KDA, ATTENTION]
    assert model.ssm_layers[0].geometry.conv_dim == 3 * 32 * 128


def test_qwen_layer_types_equal_full_attention_interval():
    by_interval = load_model("qwen3.5-4b")
    cfg = copy.deepcopy(PRESETS["qwen3.5-4b"])
    text = cfg["text_config"]
    del text["full_attention_interval"]
    text["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(32)]
    assert from_hf_config(cfg, name="qwen3.5-4b") == by_interval
    # The multimodal wrapper is optional: the text config alone describes the same stack.
    assert from_hf_config(text, name="qwen3.5-4b") == by_interval


def test_nemotron_layers_block_type_equals_pattern():
    cfg = copy.deepcopy(PRESETS["nemotron-3-nano-4b"])
    names = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    cfg["layers_block_type"] = [names[c] for c in cfg.pop("hybrid_override_pattern")]
    assert from_hf_config(cfg, name="nemotron-3-nano-4b") == load_model("nemotron-3-nano-4b")


def test_nemotron_head_dim_falls_back_to_hidden_over_heads():
    cfg = {
        "hybrid_override_pattern": "M*",
        "mamba_num_heads": 4,
        "mamba_head_dim": 8,
        "ssm_state_size": 16,
        "n_groups": 2,
        "conv_kernel": 4,
        "num_key_value_heads": 2,
        "hidden_size": 64,
        "num_attention_heads": 8,
    }
    assert from_hf_config(cfg).attention_layers[0].geometry == AttentionGeometry(2, 8)


def test_load_model_reads_a_config_file(tmp_path):
    d = tmp_path / "Kimi-Linear-48B-A3B-Instruct"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(PRESETS["kimi-linear-48b"]))
    model = load_model(str(d / "config.json"))
    assert model.name == "Kimi-Linear-48B-A3B-Instruct"
    assert model.layers == load_model("kimi-linear-48b").layers


def _broken(name, edit):
    cfg = copy.deepcopy(PRESETS[name])
    edit(cfg.get("text_config", cfg))
    return cfg


@pytest.mark.parametrize(
    "config, message",
    [
        pytest.param(
            {"model_type": "llama", "num_hidden_layers": 2},
            "unrecognised config.*NemotronH.*Qwen3.5.*Kimi Linear",
            id="unknown-family",
        ),
        pytest.param(
            _broken("nemotron-3-nano-4b", lambda c: c.update(hybrid_override_pattern="M-X")),
            "hybrid_override_pattern.*M Mamba-2",
            id="pattern-char",
        ),
        pytest.param(
            _broken("nemotron-3-nano-4b", lambda c: c.pop("mamba_num_heads")), "mamba_num_heads is missing", id="missing-key"
        ),
        pytest.param(
            _broken("nemotron-3-nano-4b", lambda c: c.update(num_hidden_layers=41)),
            "describes 42 layers; num_hidden_layers is 41",
            id="layer-count",
        ),
        pytest.param(_broken("nemotron-3-nano-4b", lambda c: c.update(n_groups=7)), "n_groups = 7 must divide", id="ngroups"),
        pytest.param(
            _broken("nemotron-3-super-120b", lambda c: c.update(head_dim=0)),
            "head_dim is 0; expected a positive int",
            id="head-dim-0",
        ),
        pytest.param(
            _broken("qwen3.5-4b", lambda c: c.update(layer_types=["linear_attention", "sliding"])),
            "layer_types",
            id="layer-types",
        ),
        pytest.param(
            _broken("qwen3.5-4b", lambda c: c.update(linear_num_key_heads=24)), "must divide linear_num_value_heads", id="gqa"
        ),
        pytest.param(
            _broken("kimi-linear-48b", lambda c: c["linear_attn_config"].update(full_attn_layers=[3, 4])),
            "without overlap",
            id="kimi-overlap",
        ),
        pytest.param(
            _broken("kimi-linear-48b", lambda c: c["linear_attn_config"]["kda_layers"].remove(26)),
            "split layers 1..27",
            id="kimi-gap",
        ),
        pytest.param(["not", "a", "dict"], "expected a dict", id="not-a-dict"),
    ],
)
def test_from_hf_config_rejects_malformed(config, message):
    with pytest.raises(ValueError, match=message):
        from_hf_config(config)


def test_load_model_unknown_preset_lists_presets():
    with pytest.raises(ValueError, match="nemotron-3-super-120b.*kimi-linear-48b"):
        load_model("nemotron-4")


def test_load_model_bad_json(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{ not json")
    with pytest.raises(ValueError, match="cannot read a JSON config"):
        load_model(str(path))


# --------------------------------------------------------------------------- tensor parallelism


def test_for_tp_splits_heads_and_groups():
    super_tp2 = load_model("nemotron-3-super-120b").for_tp(2)
    assert super_tp2.tp_size == 2
    g = super_tp2.ssm_layers[0].geometry
    assert (g.nheads, g.ngroups, g.head_dim, g.d_state) == (64, 4, 64, 128)
    assert g.conv_dim == 10240 // 2
    assert super_tp2.attention_layers[0].geometry == AttentionGeometry(kv_heads=1, head_dim=128)
    assert [l.kind for l in super_tp2.layers] == [l.kind for l in load_model("nemotron-3-super-120b").layers]


def test_for_tp_replicates_groups_and_kv_heads_beyond_their_count():
    model = load_model("nemotron-3-super-120b").for_tp(16)
    g = model.ssm_layers[0].geometry
    # Each rank keeps one group's B/C channels: conv = its x channels + 2 * d_state.
    assert (g.nheads, g.ngroups) == (8, 1)
    assert g.conv_dim == 8 * 64 + 2 * 128
    assert model.attention_layers[0].geometry.kv_heads == 1


def test_for_tp_delta_rule_and_mla():
    qwen = load_model("qwen3.5-122b-a10b").for_tp(4)
    assert qwen.ssm_layers[0].geometry == DeltaRuleGeometry(4, 16, 128, 128, 4)
    kimi = load_model("kimi-linear-48b")
    assert kimi.for_tp(8).attention_layers[0].geometry == kimi.attention_layers[0].geometry


@pytest.mark.parametrize(
    "model, tp, message",
    [
        pytest.param(
            "nemotron-3-super-120b", 3, "layer 0 \\(mamba2\\).*nheads = 128 is not divisible by tp_size = 3", id="nheads"
        ),
        pytest.param("qwen3.5-122b-a10b", 32, "k_heads = 16 is not divisible by tp_size = 32", id="k-heads"),
        pytest.param("nemotron-3-nano-4b", 0, "tp_size is 0", id="tp0"),
    ],
)
def test_for_tp_impossible_splits(model, tp, message):
    with pytest.raises(ValueError, match=message):
        load_model(model).for_tp(tp)


def test_geometry_for_tp_errors_name_the_dimension():
    with pytest.raises(ValueError, match="ngroups = 8 and tp_size = 6"):
        Mamba2Geometry(nheads=24, head_dim=4, d_state=4, ngroups=8, d_conv=4).for_tp(6)
    with pytest.raises(ValueError, match="kv_heads = 8 and tp_size = 3"):
        AttentionGeometry(kv_heads=8, head_dim=4).for_tp(3)


def test_for_tp_only_from_a_whole_model():
    with pytest.raises(ValueError, match="already split over tp_size = 2"):
        load_model("qwen3.5-4b").for_tp(2).for_tp(2)


# --------------------------------------------------------------------------- transformers 5 keys


def test_nemotron_transformers5_block_names_equal_pattern():
    # transformers 5 writes layers_block_type with linear_attention / full_attention (and drops
    # num_hidden_layers, which it derives); the stack is the published pattern's.
    cfg = copy.deepcopy(PRESETS["nemotron-3-nano-4b"])
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
    cfg["layers_block_type"] = [names[c] for c in cfg.pop("hybrid_override_pattern")]
    del cfg["num_hidden_layers"]
    cfg["hybrid_override_pattern"] = None
    assert from_hf_config(cfg, name="nemotron-3-nano-4b") == load_model("nemotron-3-nano-4b")


def test_kimi_transformers5_layer_types_equal_linear_attn_config():
    cfg = copy.deepcopy(PRESETS["kimi-linear-48b"])
    lac = cfg.pop("linear_attn_config")
    cfg.update(
        linear_num_heads=lac["num_heads"],
        linear_head_dim=lac["head_dim"],
        linear_conv_kernel_dim=lac["short_conv_kernel_size"],
        layer_types=[
            "linear_attention" if i + 1 in lac["kda_layers"] else "full_attention" for i in range(cfg["num_hidden_layers"])
        ],
    )
    assert from_hf_config(cfg, name="kimi-linear-48b") == load_model("kimi-linear-48b")


def test_pure_mamba2_config():
    cfg = {
        "model_type": "mamba2",
        "num_hidden_layers": 3,
        "num_heads": 8,
        "head_dim": 16,
        "state_size": 32,
        "n_groups": 2,
        "conv_kernel": 4,
    }
    model = from_hf_config(cfg)
    assert model.name == "mamba2" and model.family == "Mamba-2"
    assert [(l.index, l.kind) for l in model.layers] == [(0, MAMBA2), (1, MAMBA2), (2, MAMBA2)]
    assert {l.geometry for l in model.layers} == {Mamba2Geometry(8, 16, 32, 2, 4)}


@pytest.mark.parametrize(
    "config, message",
    [
        pytest.param(
            {
                "model_type": "mamba2",
                "num_hidden_layers": 2,
                "num_heads": 8,
                "head_dim": 16,
                "state_size": 32,
                "n_groups": 3,
                "conv_kernel": 4,
            },
            "n_groups = 3 must divide num_heads = 8",
            id="mamba2-groups",
        ),
        pytest.param(
            {"model_type": "mamba2", "num_hidden_layers": 2, "num_heads": 8, "head_dim": 16, "n_groups": 2, "conv_kernel": 4},
            "state_size is missing",
            id="mamba2-missing",
        ),
        pytest.param(
            {
                "linear_num_heads": 4,
                "linear_head_dim": 8,
                "linear_conv_kernel_dim": 4,
                "num_hidden_layers": 2,
                "layer_types": ["linear_attention", "sliding"],
            },
            "layer_types is",
            id="kimi-layer-types",
        ),
        pytest.param(
            {
                "linear_num_heads": 4,
                "linear_head_dim": 8,
                "linear_conv_kernel_dim": 4,
                "num_hidden_layers": 3,
                "layer_types": ["linear_attention", "full_attention"],
                "kv_lora_rank": 8,
                "qk_rope_head_dim": 4,
            },
            "describes 2 layers; num_hidden_layers is 3",
            id="kimi-layer-count",
        ),
        pytest.param(
            {"layers_block_type": ["linear_attention", "sliding_attention"]}, "layers_block_type is", id="nemotron-block-name"
        ),
    ],
)
def test_from_hf_config_rejects_malformed_transformers5_keys(config, message):
    with pytest.raises(ValueError, match=message):
        from_hf_config(config)


def _random_models():
    pytest.importorskip("transformers")
    try:
        from trtllm_replayssm_builders.hf import disable_replayssm, enable_replayssm
        from trtllm_replayssm_builders.hf.random_models import FAMILIES, build_random_model
    except ImportError as e:  # an HF model class missing from the installed transformers
        pytest.skip(f"builders.hf random models not importable: {e}")
    return FAMILIES, build_random_model, enable_replayssm, disable_replayssm


@pytest.mark.parametrize("family", ["nemotron_h", "mamba2", "qwen3_next", "qwen3_5", "kimi_linear"])
def test_in_memory_transformers_config_equals_hooked_layers(family, tmp_path):
    """from_hf_config(config.to_dict()) of the builders' random models (transformers' own
    configs) gives the SSM layers, indices and geometries the hook reads off the mixers; the
    saved config.json gives the same stack."""
    families, build_random_model, enable_replayssm, disable_replayssm = _random_models()
    assert family in families
    model = build_random_model(family)
    planned = from_hf_config(model.config.to_dict())
    assert len(planned.layers) == model.config.num_hidden_layers
    hook = enable_replayssm(model, 4)
    try:
        assert planned.ssm_layers == hook.hybrid_model().layers
    finally:
        disable_replayssm(model)
    model.config.save_pretrained(tmp_path)
    assert load_model(str(tmp_path / "config.json")).layers == planned.layers
