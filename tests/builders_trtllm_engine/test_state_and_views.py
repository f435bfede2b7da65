"""The engine runtime's layer buffer sized for the block (state.py) and the stock Mamba2 layer's
fused tensors as step views (views.py), against TensorRT-LLM v1.2.1's arithmetic:
RnnStateManager's ``[layers, slots, rnn_hidden_size / rnn_head_size, state_size, rnn_head_size]``
fp32 and ``Mamba2.__init__``'s ``d_in_proj``, ``conv_dim``, ``pad_ldc``."""

import pytest

from trtllm_replayssm.block import Mamba2StateBlock, planner_bytes
from trtllm_replayssm_builders.trtllm_engine import EngineStateLayout, Mamba2LayerGeometry, step_views


def _runtime_layer_bytes(num_slots, rnn_hidden_size, rnn_head_size, state_size):
    """RnnStateManager (engine path): per layer num_slots * (hidden / head) * state * head fp32."""
    return num_slots * (rnn_hidden_size // rnn_head_size) * state_size * rnn_head_size * 4


@pytest.mark.parametrize("num_slots", [1, 8, 64])
@pytest.mark.parametrize("geom", [(80, 64, 128, 1, 16, "bf16"), (128, 64, 128, 8, 4, "f16"), (4, 16, 8, 2, 3, "f32")])
def test_runtime_state_size_holds_every_slot_and_the_scratch_slot(geom, num_slots):
    block = Mamba2StateBlock(*geom)
    lay = EngineStateLayout(block, num_slots)
    got = _runtime_layer_bytes(num_slots, block.nheads * block.head_dim, block.head_dim, lay.runtime_state_size)
    assert got == lay.runtime_layer_bytes >= (num_slots + 1) * block.nbytes == lay.needed_bytes
    # the smallest such state_size: one less would not hold the plugin's bytes
    assert _runtime_layer_bytes(num_slots, block.nheads * block.head_dim, block.head_dim, lay.runtime_state_size - 1) < (
        lay.needed_bytes
    )
    # the runtime counts the planner's replay bytes of every slot, plus the named overhead
    assert lay.runtime_layer_bytes == num_slots * planner_bytes(block) + lay.overhead_bytes
    assert block.nbytes <= lay.overhead_bytes < block.nbytes + 4 * num_slots * block.nheads * block.head_dim
    assert lay.scratch_slot == num_slots and lay.plugin_slots == num_slots + 1


def test_mamba2_2p7b_numbers():
    """mamba2-2.7b: d_inner 5120, headdim 64 (80 heads), d_state 128, 1 group; L = 16, bf16."""
    block = Mamba2StateBlock(80, 64, 128, 1, 16, "bf16")
    lay = EngineStateLayout(block, 64)
    assert block.state_bytes == 2_621_440 and block.nbytes == 2_621_440 + 80 * 16 * 4 + 12 + 80 * 16 * 64 * 2 + 16 * 128 * 2
    # 65 blocks (64 slots + scratch) of 2,794,508 bytes over rows of 64 * 4 * 5120 bytes: 138.6 -> 139
    assert lay.runtime_state_size == 139  # stock 128
    assert lay.runtime_layer_bytes == 64 * 80 * 139 * 64 * 4


def test_bad_layout_arguments():
    with pytest.raises(ValueError, match="EngineStateLayout: num_slots is 0"):
        EngineStateLayout(Mamba2StateBlock(4, 16, 8, 2, 3, "f32"), 0)
    with pytest.raises(TypeError, match="block is dict"):
        EngineStateLayout({}, 4)


def test_step_views_follow_the_stock_layer_columns():
    g = Mamba2LayerGeometry(d_inner=5120, d_state=128, ngroups=1, nheads=80, headdim=64)
    # Mamba2.__init__: d_in_proj = 2 d_inner + 2 ngroups d_state + nheads, padded to 8 heads
    assert g.pad_ldc == 0 and g.in_proj_width == 2 * 5120 + 2 * 128 + 80
    assert g.conv_dim == 5120 + 2 * 128
    v = step_views(g)
    assert (v["x"].source, v["x"].offset, v["x"].row_stride) == ("xbc", 0, g.conv_dim)
    assert (v["B"].offset, v["C"].offset) == (5120, 5120 + 128)
    assert (v["z"].source, v["z"].offset) == ("zxbcdt", 0)
    assert (v["dt"].source, v["dt"].offset, v["dt"].row_stride) == ("zxbcdt", 2 * 5120 + 2 * 128, g.in_proj_width)
    odd = Mamba2LayerGeometry(d_inner=6 * 16, d_state=16, ngroups=2, nheads=6, headdim=16)
    assert odd.pad_ldc == 2 and odd.in_proj_width == 96 + (96 + 64) + 6 + 2


def test_bad_geometry():
    with pytest.raises(ValueError, match="nheads \\* headdim = 120; expected d_inner = 128"):
        Mamba2LayerGeometry(d_inner=128, d_state=16, ngroups=1, nheads=2, headdim=60)
    with pytest.raises(ValueError, match="ngroups is 0"):
        Mamba2LayerGeometry(d_inner=128, d_state=16, ngroups=0, nheads=2, headdim=64)
