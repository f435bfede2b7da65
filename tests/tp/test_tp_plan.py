"""``trtllm-replayssm plan --tp N`` agrees with what each rank allocates, and each rank's buffers
have TensorRT-LLM's per-rank cache shapes (conv_dim and heads divided as its cache manager does)."""

import json

import pytest

from trtllm_replayssm.cli import main
from trtllm_replayssm.models import GDN, KDA, MAMBA2, PRESETS, load_model
from trtllm_replayssm.pool import ReplayCachePool

SLOTS, PADDING = 7, 1
CASES = [(name, tp) for name in PRESETS for tp in (1, 2, 4, 8)]


def _plan_json(capsys, *args):
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _trtllm_rank_shapes(kind, g, tp):
    """Per-rank (state, conv state) shapes [.., width omitted] as TensorRT-LLM's cache manager sizes them."""
    if kind == MAMBA2:
        tp_ngroups = 1 if tp > g.ngroups else g.ngroups // tp
        return ((g.nheads // tp, g.head_dim, g.d_state), (g.nheads * g.head_dim // tp + 2 * tp_ngroups * g.d_state,))
    key_dim, value_dim = g.k_heads * g.head_k_dim, g.v_heads * g.head_v_dim
    return (g.v_heads // tp, g.head_v_dim, g.head_k_dim), (2 * key_dim // tp + value_dim // tp,)


@pytest.mark.parametrize("name, tp", CASES, ids=[f"{n}-tp{t}" for n, t in CASES])
def test_plan_tp_bytes_equal_each_rank_pool(capsys, name, tp):
    whole = load_model(name)
    figures = _plan_json(
        capsys, "--model", name, "--tp", str(tp), "--buffer-len", "16", "--spec-tokens", "4", "--padding-slots", str(PADDING)
    )
    assert figures["model"]["tp_size"] == tp
    for mode, spec in (("replay", None), ("replay_spec", 4)):
        pool = ReplayCachePool(
            whole.for_tp(tp), SLOTS, mode=mode, buffer_len=16, spec_tokens=spec, num_padding_slots=PADDING, device="meta"
        )
        assert pool.nbytes == figures["modes"][mode]["ssm_bytes_per_sequence"] * (SLOTS + PADDING), mode
        for layer in whole.ssm_layers:
            state, conv = _trtllm_rank_shapes(layer.kind, layer.geometry, tp)
            assert tuple(pool.cache(layer.index).checkpoint.shape[1:]) == state
            assert tuple(pool.conv_state(layer.index).shape[1:2]) == conv
            if layer.kind in (GDN, KDA):
                assert pool.cache(layer.index).k_heads == layer.geometry.k_heads // tp


def test_plan_tp_replicated_groups_figures():
    """Nemotron-3-Super (ngroups 8) at TP 16: groups replicated, one per rank."""
    rank = load_model("nemotron-3-super-120b").for_tp(16)
    g = rank.ssm_layers[0].geometry
    assert (g.nheads, g.ngroups, g.conv_dim) == (8, 1, 8 * 64 + 2 * 128)


def test_plan_impossible_tp_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plan", "--model", "nemotron-3-super-120b", "--tp", "3"])
    assert e.value.code == 2
    assert "layer 0 (mamba2): Mamba2Geometry.for_tp: nheads = 128 is not divisible by tp_size = 3" in capsys.readouterr().err
