"""Rank geometry from TensorRT-LLM's cache description, record layouts and bytes per slot."""

import itertools

import pytest
import torch

from pooled import trtllm_cache_description
from trtllm_replayssm.memory import ssm_layer_bytes
from trtllm_replayssm.models import GDN, KDA, MAMBA2, PRESETS, load_model
from trtllm_replayssm_builders.trtllm.layout import (
    bytes_per_slot,
    model_dtype,
    rank_geometry,
    record_dtype_for,
    record_fields,
    replay_bytes_per_rank,
    ssm_tp_size,
)


CASES = [(name, tp) for name, tp in itertools.product(PRESETS, (1, 2, 4, 8))]


@pytest.mark.parametrize("name, tp", CASES, ids=[f"{n}-tp{t}" for n, t in CASES])
def test_rank_geometry_equals_model_geometry_for_tp(name, tp):
    model = load_model(name)
    rank = model.for_tp(tp)
    for whole, local in zip(model.ssm_layers, rank.ssm_layers):
        desc = trtllm_cache_description(whole.kind, whole.geometry, tp)
        assert rank_geometry(whole.kind, **desc) == local.geometry


@pytest.mark.parametrize(
    "kind, desc, match",
    [
        (
            MAMBA2,
            dict(
                ssm_state_shape=(128, 64, 128),
                conv_state_shape=(10240, 3),
                conv_section_dims=(8192, 1024, 1024),
                conv_state_layout="q_k_v",
            ),
            "a mamba2 layer has conv_state_layout 'q_k_v'; expected 'x_b_c'",
        ),
        (
            MAMBA2,
            dict(
                ssm_state_shape=(128, 64, 128),
                conv_state_shape=(10000, 3),
                conv_section_dims=(8192, 1024, 1024),
                conv_state_layout="x_b_c",
            ),
            "sum to 10240; expected conv_dim = 10000",
        ),
        (
            MAMBA2,
            dict(
                ssm_state_shape=(128, 64, 128),
                conv_state_shape=(10240, 3),
                conv_section_dims=(8192, 1536, 512),
                conv_state_layout="x_b_c",
            ),
            "mamba2 conv sections",
        ),
        (
            GDN,
            dict(
                ssm_state_shape=(32, 128, 128),
                conv_state_shape=(8192, 3),
                conv_section_dims=(2048, 2048, 4096),
                conv_state_layout="q_k_v",
            ),
            None,
        ),
        (
            KDA,
            dict(
                ssm_state_shape=(32, 128, 128),
                conv_state_shape=(8192, 3),
                conv_section_dims=(2048, 2048, 4096),
                conv_state_layout="q_k_v",
            ),
            "kda with k_heads 16 and v_heads 32",
        ),
        (
            GDN,
            dict(
                ssm_state_shape=(32, 128),
                conv_state_shape=(8192, 3),
                conv_section_dims=(2048, 2048, 4096),
                conv_state_layout="q_k_v",
            ),
            "ssm_state_shape is \\(32, 128\\); expected 3 entries",
        ),
        (
            "mamba1",
            dict(ssm_state_shape=(1, 1, 1), conv_state_shape=(3, 3), conv_section_dims=(1, 1, 1), conv_state_layout="x_b_c"),
            "kind is 'mamba1'",
        ),
    ],
)
def test_rank_geometry_rejects_inconsistent_descriptions(kind, desc, match):
    if match is None:
        assert rank_geometry(kind, **desc).k_heads == 16
        return
    with pytest.raises(ValueError, match=match):
        rank_geometry(kind, **desc)


def test_record_fields_mamba2_layout():
    g = load_model("nemotron-3-super-120b").ssm_layers[0].geometry
    got = {
        f.name: (f.role, f.shape, f.dtype)
        for f in record_fields(MAMBA2, g, 16, record_dtype=torch.bfloat16, state_dtype=torch.float32)
    }
    assert got == {
        "x_records": ("replayssm_x_records", (128, 16, 64), torch.bfloat16),
        "dt_records": ("replayssm_dt_records", (128, 16), torch.float32),
        "B_records": ("replayssm_B_records", (8, 16, 128), torch.bfloat16),
    }


def test_record_fields_kda_gate_per_channel():
    g = load_model("kimi-linear-48b").ssm_layers[0].geometry
    got = {f.name: f.shape for f in record_fields(KDA, g, 16, record_dtype=torch.bfloat16, state_dtype=torch.float32)}
    assert got == {"d_records": (32, 16, 128), "k_records": (32, 16, 128), "g_records": (32, 16, 128)}


@pytest.mark.parametrize(
    "kind,record_dtype,state_dtype,g_dtype",
    [
        (KDA, torch.bfloat16, torch.float32, torch.float16),
        (KDA, torch.float16, torch.bfloat16, torch.float16),
        (KDA, torch.float32, torch.float32, torch.float32),
        (GDN, torch.bfloat16, torch.float32, torch.float32),
        (GDN, torch.float16, torch.bfloat16, torch.float32),
    ],
    ids=["kda-bf16", "kda-f16", "kda-f32", "gdn-bf16", "gdn-f16"],
)
def test_record_fields_g_records_dtype_follows_the_caches(kind, record_dtype, state_dtype, g_dtype):
    """KDA's per-channel g records are fp16 beside 16-bit d / k records and fp32 beside fp32 ones;
    GDN's are fp32 always; d and k records stay in the record dtype."""
    g = load_model("kimi-linear-48b" if kind == KDA else "qwen3.5-122b-a10b").ssm_layers[0].geometry
    got = {f.name: f.dtype for f in record_fields(kind, g, 16, record_dtype=record_dtype, state_dtype=state_dtype)}
    assert got == {"d_records": record_dtype, "k_records": record_dtype, "g_records": g_dtype}


@pytest.mark.parametrize("name", list(PRESETS))
@pytest.mark.parametrize("L", [1, 16, 64])
@pytest.mark.parametrize(
    "record_dtype, state_dtype",
    [(torch.bfloat16, torch.float32), (torch.float16, torch.bfloat16), (torch.float32, torch.float32)],
)
def test_bytes_per_slot_equals_planner_replay_records_plus_cursors(name, L, record_dtype, state_dtype):
    for layer in load_model(name).for_tp(2).ssm_layers:
        lb = ssm_layer_bytes(
            layer.kind,
            layer.geometry,
            "replay",
            buffer_len=L,
            spec_tokens=1,
            state_dtype=state_dtype,
            record_dtype=record_dtype,
            conv_dtype=record_dtype,
        )
        assert (
            bytes_per_slot(layer.kind, layer.geometry, L, record_dtype=record_dtype, state_dtype=state_dtype)
            == lb.records + lb.cursors
        )


def test_replay_bytes_per_rank_nemotron_super_matches_plan_table():
    # README plan table: 303,104 record bytes + 12 cursor bytes per Mamba-2 layer, 40 layers.
    config = PRESETS["nemotron-3-super-120b"]
    assert replay_bytes_per_rank(config, ("mamba2",), 16, tp_size=1, activation_dtype=torch.bfloat16) == 40 * (303_104 + 12)
    assert replay_bytes_per_rank(config, ("gdn", "kda"), 16, tp_size=1, activation_dtype=torch.bfloat16) == 0
    per_rank_tp4 = replay_bytes_per_rank(config, ("mamba2",), 16, tp_size=4, activation_dtype=torch.bfloat16)
    assert per_rank_tp4 == 40 * (303_104 // 4 + 12)


def test_ssm_tp_size_attention_dp_replicates():
    assert ssm_tp_size(8, False) == 8
    assert ssm_tp_size(8, True) == 1
    with pytest.raises(ValueError, match="tp_size is 0"):
        ssm_tp_size(0, False)


def test_model_dtype_reads_dtype_torch_dtype_and_text_config():
    assert model_dtype({"torch_dtype": "bfloat16"}) == torch.bfloat16
    assert model_dtype({"dtype": "float16", "torch_dtype": "bfloat16"}) == torch.float16
    assert model_dtype({"text_config": {"dtype": "float32"}, "torch_dtype": "bfloat16"}) == torch.float32
    assert model_dtype({"torch_dtype": torch.bfloat16}) == torch.bfloat16
    with pytest.raises(ValueError, match="no dtype / torch_dtype"):
        model_dtype({})
    with pytest.raises(ValueError, match="torch_dtype is 'int8'"):
        model_dtype({"torch_dtype": "int8"})


def test_record_dtype_for_delta_rule_float32_records():
    assert record_dtype_for(GDN, torch.bfloat16, "float32") == torch.float32
    assert record_dtype_for(KDA, torch.bfloat16, "activation") == torch.bfloat16
    assert record_dtype_for(MAMBA2, torch.bfloat16, "float32") == torch.bfloat16
    with pytest.raises(ValueError, match="delta_rule_records is 'half'"):
        record_dtype_for(GDN, torch.bfloat16, "half")


def test_replay_bytes_per_rank_float32_delta_rule_records_match_planner():
    model = load_model("qwen3.5-122b-a10b")
    layer = model.ssm_layers[0]
    lb = ssm_layer_bytes(
        GDN,
        layer.geometry,
        "replay",
        buffer_len=16,
        spec_tokens=1,
        state_dtype=torch.float32,
        record_dtype=torch.float32,
        conv_dtype=torch.bfloat16,
    )
    got = replay_bytes_per_rank(
        PRESETS["qwen3.5-122b-a10b"], ("gdn",), 16, tp_size=1, activation_dtype=torch.bfloat16, delta_rule_records="float32"
    )
    assert got == len(model.ssm_layers) * (lb.records + lb.cursors) == 36 * (659_456 + 12)
