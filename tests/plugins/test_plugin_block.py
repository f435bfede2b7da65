"""``replayssm::mamba2_replay_block``: attributes, shape checks, the launch plan, and (under
TRITON_INTERPRET=1) its entry kernel on a pooled layer buffer equal to the public op's launcher
bit for bit (block_cases; the GPU runs the exported PTX the same way)."""

import pytest
import torch

from block_cases import bits, close_to, launcher_op, op_cache_of, regions_differing, run_case, twin_cache_of
from plugin_cases import INTERPRET, info_of
from trtllm_replayssm_plugins import mamba2, mamba2_block
from trtllm_replayssm_plugins.spec import TensorInfo

M = mamba2.Mamba2ReplayAttrs


def _attrs(**kw):
    replay = dict(
        nheads=2,
        head_dim=16,
        d_state=8,
        ngroups=1,
        L=3,
        has_D=True,
        has_z=True,
        has_dt_bias=True,
        dt_softplus=True,
        block_head_dim=8,
        chunks=2,
        num_stages=2,
        num_warps=1,
    )
    replay.update(kw.pop("replay", {}))
    return mamba2_block.Mamba2BlockAttrs(M(**replay), kw.pop("num_slots", 6), kw.pop("act_dtype", "f32"))


def _infos(a, tokens=5, batch=3):
    r = a.replay
    act = a.act_dtype
    return [
        TensorInfo("i64", 1, (1,)),
        TensorInfo(act, 3, (tokens, r.nheads, r.head_dim)),
        TensorInfo(act, 2, (tokens, r.nheads)),
        TensorInfo("f32", 1, (r.nheads,)),
        TensorInfo(act, 3, (tokens, r.ngroups, r.d_state)),
        TensorInfo(act, 3, (tokens, r.ngroups, r.d_state)),
        TensorInfo("i32", 1, (batch,)),
        TensorInfo("f32", 1, (r.nheads,)),
        TensorInfo(act, 3, (tokens, r.nheads, r.head_dim)),
        TensorInfo("f32", 1, (r.nheads,)),
    ]


def test_launch_plan_reads_the_block_layout():
    a = _attrs(act_dtype="bf16")
    spec = mamba2_block.kernel_spec(a, _infos(a))
    b = a.block
    assert spec.constexprs["STATE_BYTES"] == b.state_bytes and spec.constexprs["TAIL_I32"] * 4 == b.tail_bytes
    assert spec.constexprs["OFF_XR"] == b.region("x_records").offset
    assert [(p.role, p.index) for p in spec.params[:10]] == [("input", i) for i in range(10)]
    assert spec.params[0].triton_type == "*i64"
    scal = {s.name: s.value for s in spec.scalars}
    assert scal["num_slots"] == 6 and scal["stride_xr_slot"] == b.tail_bytes // 2
    assert scal["stride_c_slot"] == 2 * 16 * 8
    assert spec.grid[2] == mamba2_block.InputDim(6, 0)  # rows = slot_ids' length
    assert spec.params[-1].role == "output" and len([p for p in spec.params if p.role == "output"]) == 1


def test_bad_inputs_are_refused():
    a = _attrs()
    infos = _infos(a)
    with pytest.raises(TypeError, match="mamba2_replay_block: state_ptr is i32"):
        mamba2_block.check_inputs(a, [TensorInfo("i32", 1, (1,))] + infos[1:])
    bad = list(infos)
    bad[4] = TensorInfo("f32", 3, (4, 1, 8))
    with pytest.raises(ValueError, match="tokens = 4"):
        mamba2_block.check_inputs(a, bad)
    with pytest.raises(ValueError, match="got 9 inputs"):
        mamba2_block.check_inputs(a, infos[:9])
    with pytest.raises(ValueError, match="num_slots is 0"):
        _attrs(num_slots=0)
    with pytest.raises(TypeError, match="act_dtype is 'i32'"):
        _attrs(act_dtype="i32")


@pytest.mark.skipif(not INTERPRET, reason="CPU interpreter test (the GPU runs the PTX)")
@pytest.mark.parametrize(
    "kw",
    [
        dict(act_dtype="f32"),
        dict(act_dtype="bf16", replay=dict(has_z=False, has_D=False, L=1, block_head_dim=16, chunks=1)),
    ],
    ids=["f32-all-flags-L3", "bf16-no-z-no-D-L1"],
)
@pytest.mark.parametrize("op_cache", ["dense", "twin"])
def test_entry_on_a_pooled_layer_buffer_equals_the_op(kw, op_cache):
    """Against the op's launcher on a dense copy of the layer, and on strided views of an
    unaligned twin of it (the GPU test's bit-exact oracle, block_cases.twin_cache_of)."""
    a = _attrs(**kw)
    family = mamba2_block

    def launch(spec, inputs, out):
        args = {"input": inputs, "scalar": spec.scalar_values([tuple(t.shape) for t in inputs]), "output": [out]}
        family.ENTRY[tuple(spec.grid_values([tuple(t.shape) for t in inputs]))](
            **{p.name: args[p.role][p.index] for p in spec.params}, **spec.constexprs, num_warps=spec.num_warps
        )

    run_case(family, a, launch, device="cpu", op=launcher_op, op_cache=dict(dense=op_cache_of, twin=twin_cache_of)[op_cache])


def test_info_of_names_int64():
    assert info_of(torch.zeros(1, dtype=torch.int64)).dtype == "i64"


def test_gpu_tolerance_keeps_teeth():
    """The GPU comparison's tolerance (block_cases.regions_differing with ``tolerate``) lets live
    checkpoints and dt records before the cursor differ by rounding only, records from the cursor
    on (dead positions) by anything, and never an unused slot's bits or a record before the
    cursor."""
    a = _attrs(num_slots=4, act_dtype="bf16")
    layer = torch.randint(0, 256, (4, a.block.nbytes), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    views = a.block.views(layer)
    views["checkpoint"].copy_(torch.randn(views["checkpoint"].shape))
    cache = op_cache_of(a.block, views, "cpu")
    live = torch.tensor([2, 0])
    for slot, w in ((2, 2), (0, 0)):  # live slots' cursors: records before them are compared
        cache.cursor[slot] = views["cursor"].reshape(cache.cursor.shape)[slot] = w
    assert regions_differing(views, cache) == []

    cache.checkpoint[live] *= 1 + 2**-20  # rounding-level, live slots
    assert regions_differing(views, cache) == ["checkpoint"]
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == []
    cache.checkpoint[0, 0, 0, 0] += 1.0  # a real error in a live slot
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == ["checkpoint"]
    cache.checkpoint[0, 0, 0, 0] -= 1.0
    cache.checkpoint[1] *= 1 + 2**-20  # an unused slot: bit for bit even with the tolerance
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == ["checkpoint"]
    cache.checkpoint[1] = views["checkpoint"][1]
    bits(cache.x_records)[2, 0, 0, 0] ^= 1  # copied regions stay exact (one bit of random bytes)
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == ["x_records"]
    bits(cache.x_records)[2, 0, 0, 0] ^= 1
    # records of live slots: compared before the cursor only, dt records there by rounding
    dt_view = views["dt_records"].reshape(cache.dt_records.shape)  # a view: writes reach the layer
    cache.dt_records[2] = dt_view[2] = 0.25
    cache.dt_records[2, 0, 1] *= 1 + 2**-20
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == []
    cache.dt_records[2, 0, 1] = 0.5
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == ["dt_records"]
    cache.dt_records[2, 0, 1] = 0.25
    bits(cache.x_records)[2, 0, 1, 0] ^= 1  # before the cursor: exact
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == ["x_records"]
    bits(cache.x_records)[2, 0, 1, 0] ^= 1
    bits(cache.x_records)[2, 0, 2, 0] ^= 1  # from the cursor on: anything
    bits(cache.B_records)[0, 0, 0, 0] ^= 1  # slot 0's cursor is 0
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == []
    bits(cache.B_records)[1, 0, 0, 0] ^= 1  # an unused slot: exact
    assert regions_differing(views, cache, tolerate=(live, 1e-5)) == ["B_records"]

    y = torch.randn(5, 4, 8)
    assert close_to(y * (1 + 2**-9), y, 2**-7)
    assert not close_to(y + 0.1 * y.abs().max(), y, 2**-7)
