"""The C++ engine plugin's launch table (plugins/mamba2_block_launch.py): one row per runtime
parameter of the ``mamba2_replay_block`` entry, in its order, with fused-tensor views."""

import pytest

from trtllm_replayssm_plugins import mamba2, mamba2_block
from trtllm_replayssm_plugins import mamba2_block_launch as L
from trtllm_replayssm_plugins.mamba2_block_launch import StepView

E = L.ENGINE_INPUTS


def _attrs(**kw):
    r = mamba2.Mamba2ReplayAttrs.for_layer(80, 64, 128, 1, 16, has_z=True)
    return mamba2_block.Mamba2BlockAttrs(r, kw.get("num_slots", 65), kw.get("act_dtype", "bf16"))


def _views(conv_dim=5376, width=10576):
    return {
        "x": StepView("xbc", 0, conv_dim),
        "B": StepView("xbc", 5120, conv_dim),
        "C": StepView("xbc", 5248, conv_dim),
        "z": StepView("zxbcdt", 0, width),
        "dt": StepView("zxbcdt", 10496, width),
    }


def test_rows_follow_the_entry_parameters():
    a = _attrs()
    t = L.launch_table(a, _views())
    names = [p.name for p in t.spec.params]
    rows = dict(zip(names, t.args))
    assert len(t.args) == len(t.spec.params)
    assert rows["state_ptr"] == (L.ARG_STATE, 0, 0)
    assert rows["x_ptr"] == (L.ARG_INPUT, E.index("xbc"), 0)
    assert rows["C_ptr"] == (L.ARG_INPUT, E.index("xbc"), 5248)
    assert rows["dt_ptr"] == (L.ARG_INPUT, E.index("zxbcdt"), 10496)
    assert rows["slot_ids_ptr"] == (L.ARG_INPUT, E.index("slot_mapping"), 0)
    assert rows["num_tokens"] == (L.ARG_PHASE, 0, 0) and rows["batch"] == (L.ARG_ROWS, 0, 0)
    assert rows["num_slots"] == (L.ARG_CONST, 65, 0)
    assert rows["stride_x_batch"] == (L.ARG_CONST, 5376, 0) and rows["stride_dt_batch"] == (L.ARG_CONST, 10576, 0)
    assert rows["out_ptr"] == (L.ARG_OUTPUT, 0, 0)
    assert (t.grid_x, t.grid_y) == (1, 80)
    flat = t.flat()
    assert flat[0] == len(t.args) and flat[-3:] == (t.grid_x, t.grid_y, t.spec.num_warps * 32)
    assert len(flat) == 1 + 3 * len(t.args) + 3


def test_absent_D_reads_A_like_the_op():
    r = mamba2.Mamba2ReplayAttrs.for_layer(80, 64, 128, 1, 16, has_z=True, has_D=False)
    t = L.launch_table(mamba2_block.Mamba2BlockAttrs(r, 9, "bf16"), _views())
    rows = dict(zip([p.name for p in t.spec.params], t.args))
    assert rows["D_ptr"] == (L.ARG_INPUT, E.index("A"), 0)


def test_bad_views_are_refused():
    a = _attrs()
    bad = _views()
    bad["B"] = StepView("xbc", 5121, 5376)
    with pytest.raises(ValueError, match=r"views\['B'\] starts 5121 elements \(10242 bytes\)"):
        L.launch_table(a, bad)
    with pytest.raises(ValueError, match="views names"):
        L.launch_table(a, {k: v for k, v in _views().items() if k != "z"})
    bad = _views()
    bad["z"] = StepView("hidden", 0, 1)
    with pytest.raises(ValueError, match="source is 'hidden'"):
        L.launch_table(a, bad)
    with pytest.raises(ValueError, match="row_strides names"):
        mamba2_block._scalars(a, False, {"stride_y": 3})
