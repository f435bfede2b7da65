"""The plugin's launch plan as plain data: attribute and shape checks, argument order, scalars,
grid, block, specialization (no TensorRT, no compilation)."""

import dataclasses

import pytest
import torch

import plugin_cases  # noqa: F401  (makes trtllm_replayssm_plugins importable)
from plugin_cases import TORCH_NAMES
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache
from trtllm_replayssm.kernels.common import mamba2_launch_config
from trtllm_replayssm_plugins import gated_delta, mamba2
from trtllm_replayssm_plugins.spec import DTYPE_NAMES, TORCH_DTYPES, InputDim, TensorInfo, specialize_scalar
from trtllm_replayssm_plugins.spec import aliased_outputs as spec_aliases

NEMOTRON = mamba2.Mamba2ReplayAttrs.for_layer(128, 64, 128, 8, 16, batch_hint=256)  # Nemotron-3-Super, TP=1


def _infos(a=NEMOTRON, **kw):
    return list(mamba2.tensor_infos(a, state_dtype=kw.pop("state_dtype", "f32"), act_dtype=kw.pop("act_dtype", "bf16"), **kw))


def _replace(infos, name, **changes):
    i = mamba2.INPUTS.index(name)
    old = infos[i]
    infos[i] = TensorInfo(changes.get("dtype", old.dtype), changes.get("rank", old.rank), changes.get("dims", old.dims))
    return infos


# --------------------------------------------------------------------------- attributes


def test_mamba2_replay_attrs_for_layer_uses_the_op_launch_config():
    for batch in (1, 16, 64, 256):
        a = mamba2.Mamba2ReplayAttrs.for_layer(128, 64, 128, 8, 16, batch_hint=batch)
        cfg = mamba2_launch_config("replay_step", 64, 128, batch, torch.float32)
        assert (a.block_head_dim, a.chunks, a.num_stages, a.num_warps) == (
            cfg.block_head_dim,
            cfg.chunks,
            cfg.num_stages,
            cfg.num_warps,
        )
    assert list(NEMOTRON.values()) == [f for f in mamba2.Mamba2ReplayAttrs.__dataclass_fields__]


@pytest.mark.parametrize(
    "change,exc,words",
    [
        (dict(L=65), ValueError, "L is 65"),
        (dict(L=0), ValueError, "L is 0"),
        (dict(ngroups=3), ValueError, "ngroups = 3 must divide"),
        (dict(block_head_dim=12), ValueError, "power of 2"),
        (dict(num_warps=3), ValueError, "num_warps is 3"),
        (dict(head_dim=True), ValueError, "head_dim is True"),
        (dict(has_z=1), TypeError, "has_z is 1"),
        (dict(nheads=4096, head_dim=1024, d_state=1024, ngroups=1), ValueError, "int32 strides"),
    ],
)
def test_mamba2_replay_attrs_refuse_bad_values(change, exc, words):
    values = {**NEMOTRON.values(), **change}
    with pytest.raises(exc, match=words):
        mamba2.Mamba2ReplayAttrs(**values)


def test_mamba2_replay_layer_attrs_from_cache_shapes():
    a = mamba2.layer_attrs(
        (-1, 128, 64, 128),
        (-1, 128, 16, 64),
        (-1, 8, 16, 128),
        state_dtype="bf16",
        has_D=True,
        has_z=True,
        has_dt_bias=False,
        dt_softplus=True,
        batch_hint=8,
    )
    assert (a.nheads, a.head_dim, a.d_state, a.ngroups, a.L, a.has_z, a.has_dt_bias) == (128, 64, 128, 8, 16, True, False)
    with pytest.raises(ValueError, match="x_records has shape .* static geometry"):
        mamba2.layer_attrs(
            (-1, 128, 64, 128),
            (-1, 128, -1, 64),
            (-1, 8, 16, 128),
            state_dtype="f32",
            has_D=True,
            has_z=True,
            has_dt_bias=True,
            dt_softplus=True,
            batch_hint=8,
        )
    with pytest.raises(TypeError, match="state_dtype"):
        mamba2.layer_attrs(
            (-1, 128, 64, 128),
            (-1, 128, 16, 64),
            (-1, 8, 16, 128),
            state_dtype="f64",
            has_D=True,
            has_z=True,
            has_dt_bias=True,
            dt_softplus=True,
            batch_hint=8,
        )


def test_mamba2_replay_plugin_inputs_substitute_absent_optionals_like_the_launcher():
    t = {n: n for n in mamba2.INPUTS if n not in ("D", "z", "dt_bias")}
    inputs, flags = mamba2.plugin_inputs({**t, "z": None})
    assert flags == dict(has_D=False, has_z=False, has_dt_bias=False)
    assert inputs[mamba2.INPUTS.index("z")] == "x"
    assert inputs[mamba2.INPUTS.index("D")] == inputs[mamba2.INPUTS.index("dt_bias")] == "A"
    inputs, flags = mamba2.plugin_inputs({**t, "D": "D", "z": "z", "dt_bias": "dt_bias"})
    assert inputs == list(mamba2.INPUTS) and all(flags.values())
    with pytest.raises(ValueError, match=r"missing inputs \['slot_ids'\]"):
        mamba2.plugin_inputs({k: v for k, v in t.items() if k != "slot_ids"})
    with pytest.raises(ValueError, match=r"unknown inputs \['w'\]"):
        mamba2.plugin_inputs({**t, "w": 1})


# --------------------------------------------------------------------------- shape inference


def test_mamba2_replay_check_inputs_accepts_the_layer_and_dtype_only_pass():
    mamba2.check_inputs(NEMOTRON, _infos())
    mamba2.check_inputs(NEMOTRON, [TensorInfo(i.dtype, i.rank) for i in _infos()])  # dims unknown yet


@pytest.mark.parametrize(
    "name,change,exc,words",
    [
        (
            "checkpoint",
            dict(dims=(None, 128, 80, 128)),
            ValueError,
            r"checkpoint has shape \(None, 128, 80, 128\); expected \[num_slots, nheads, head_dim, d_state\] = \(num_slots, 128, 64, 128\)",
        ),
        ("x_records", dict(rank=3, dims=(None, 128, 16)), ValueError, "x_records has rank 3"),
        ("B_records", dict(dims=(None, None, 16, 128)), ValueError, "B_records has a dynamic dimension 1"),
        ("x", dict(dims=(4, 128, 64)), ValueError, "batch = "),  # B etc. have batch None: fine; slot_ids below
        ("cursor", dict(dtype="int64"), TypeError, "cursor is int64; expected i32"),
        ("x", dict(dtype="f16"), TypeError, "x is f16; expected bf16"),
        ("A", dict(dtype="bf16"), TypeError, "A is bf16; expected f32"),
        ("D", dict(dtype="f16"), TypeError, "D is f16; expected f32 | bf16"),
        ("checkpoint", dict(dtype="f64"), TypeError, "checkpoint is f64"),
    ],
)
def test_mamba2_replay_check_inputs_refuses(name, change, exc, words):
    infos = _replace(_infos(), name, **change)
    if words == "batch = ":
        infos = _replace(infos, "slot_ids", dims=(5,))
    with pytest.raises(exc, match=words):
        mamba2.check_inputs(NEMOTRON, infos)


def test_mamba2_replay_check_inputs_num_slots_must_agree():
    infos = _replace(_replace(_infos(), "checkpoint", dims=(9, 128, 64, 128)), "cursor", dims=(8,))
    with pytest.raises(ValueError, match="cursor has num_slots = 8"):
        mamba2.check_inputs(NEMOTRON, infos)


def test_mamba2_replay_check_inputs_count():
    with pytest.raises(ValueError, match="got 15 inputs; expected 16"):
        mamba2.check_inputs(NEMOTRON, _infos()[:-1])


# --------------------------------------------------------------------------- launch plan


def test_mamba2_replay_kernel_spec_launch_order_inputs_scalars_outputs():
    spec = mamba2.kernel_spec(NEMOTRON, _infos())
    roles = [p.role for p in spec.params]
    n_in, n_out = len(mamba2.INPUTS), len(mamba2.OUTPUTS)
    n_sc = len(spec.scalars)
    assert roles == ["input"] * n_in + ["scalar"] * n_sc + ["output"] * n_out
    assert [p.index for p in spec.params] == list(range(n_in)) + list(range(n_sc)) + list(range(n_out))
    assert [p.triton_type for p in spec.params if p.role == "scalar"] == ["i32"] * n_sc
    assert spec.params[0].triton_type == "*fp32" and spec.params[1].triton_type == "*bf16"
    out_types = [p.triton_type for p in spec.params if p.role == "output"]
    # the last: checkpoint_scale's output, without fp8 a buffer like its substitute slot_ids
    assert out_types == ["*bf16", "*fp32", "*bf16", "*fp32", "*bf16", "*i32", "*i32", "*i32"]
    # The runtime parameters are the entry's non-constexpr parameters, in declaration order.
    runtime = [n for n in spec.fn_arg_names if spec.signature[n] != "constexpr"]
    assert [p.name for p in spec.params] == runtime
    assert [s.name for s in spec.scalars] == [p.name for p in spec.params if p.role == "scalar"]


def test_mamba2_replay_kernel_spec_scalars_grid_block():
    a = NEMOTRON
    spec = mamba2.kernel_spec(a, _infos())
    # num_slots 9 for the cache inputs (the first six), batch 5 for the step inputs.
    shapes = [tuple((9 if k < 6 else 5) if d is None else d for d in i.dims) for k, i in enumerate(_infos())]
    values = dict(zip([s.name for s in spec.scalars], spec.scalar_values(shapes)))
    assert values["num_slots"] == 9
    assert spec.scalars[0].value == InputDim(0, 0)
    # Dense strides of the caches and the step tensors, as the launcher passes them.
    ckpt = torch.empty(9, 128, 64, 128)
    x_rec = torch.empty(9, 128, 16, 64, dtype=torch.bfloat16)
    B = torch.empty(5, 8, 128)
    assert (values["stride_c_slot"], values["stride_c_head"], values["stride_c_dim"]) == ckpt.stride()[:3]
    assert (values["stride_xr_slot"], values["stride_xr_head"], values["stride_xr_pos"]) == x_rec.stride()[:3]
    assert (values["stride_B_batch"], values["stride_B_group"]) == B.stride()[:2]
    assert (values["head_dim"], values["d_state"], values["heads_per_group"]) == (64, 128, 16)
    # stride_dt_head and stride_D_head are 1: constexprs, as Triton's JIT makes them.
    assert spec.constexprs["stride_dt_head"] == 1 and spec.constexprs["stride_D_head"] == 1
    assert "stride_dt_head" not in values
    span = a.block_head_dim * a.chunks
    assert spec.grid == (-(-64 // span), 128, InputDim(mamba2.INPUTS.index("x"), 0))
    assert spec.grid_values(shapes) == [-(-64 // span), 128, 5]
    assert spec.block == (a.num_warps * 32, 1, 1)
    assert spec.constexprs["L"] == 16 and spec.constexprs["BLOCK_D_STATE"] == 128


def test_mamba2_replay_kernel_spec_specializes_like_the_jit():
    """L = 1, ngroups == nheads and D per head_dim move scalars in and out of the launch list."""
    a = mamba2.Mamba2ReplayAttrs(6, 20, 12, 6, 1, True, False, True, True, 8, 1, 1, 1)
    spec = mamba2.kernel_spec(a, _infos(a, act_dtype="f32", d_per_dim=True))
    names = [p.name for p in spec.params]
    assert spec.constexprs["stride_dtr_head"] == 1 and spec.constexprs["heads_per_group"] == 1
    assert "stride_dtr_head" not in names and "heads_per_group" not in names
    assert "stride_D_head" in names and spec.constexprs["D_PER_DIM"] is True
    assert "stride_c_dim" not in spec.divisible and "stride_c_head" in spec.divisible  # 12, 240
    assert all(p.name in spec.divisible for p in spec.params if p.role != "scalar")
    assert "num_slots" not in spec.divisible


@pytest.mark.parametrize("value", [1, 2, 3, 15, 16, 17, 32, 48, 80, 96, 128, 8192, 2**20, 2**31 - 1])
def test_specialize_scalar_matches_triton_jit(value):
    """The bit-identity of PTX and op rests on specializing as Triton's JIT does."""
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import native_specialize_impl

    kind, attr = native_specialize_impl(CUDABackend, value, False, True, True)
    mine = specialize_scalar(value)
    assert mine == ("constexpr", False) if kind == "constexpr" else mine == (kind, attr == "D")


def test_mamba2_replay_kernel_spec_variants_are_distinct():
    specs = [
        mamba2.kernel_spec(NEMOTRON, _infos()),
        mamba2.kernel_spec(NEMOTRON, _infos(dt_dtype="bf16")),
        mamba2.kernel_spec(NEMOTRON, _infos(state_dtype="bf16")),
        mamba2.kernel_spec(mamba2.Mamba2ReplayAttrs.for_layer(128, 64, 128, 8, 16, batch_hint=1), _infos()),
    ]
    assert len({s.variant for s in specs}) == len(specs)
    assert specs[0].variant.startswith("sf32_abf16_nh128_hd64_ds128_g8_L16_Dbs_")


# --------------------------------------------------------------------------- gated delta (GDN, KDA)
QWEN = dict(k_heads=16, v_heads=32, head_k_dim=128, head_v_dim=128, L=16)  # Qwen3.5 GDN-like, TP=1


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_gated_delta_kernel_spec_scalars_match_dense_strides(per_channel):
    a = gated_delta.GatedDeltaReplayAttrs.for_layer(**QWEN, per_channel=per_channel, batch_hint=64)
    assert a.scale == 128**-0.5
    infos = list(gated_delta.tensor_infos(a, state_dtype="f32", act_dtype="bf16"))
    gated_delta.check_inputs(a, infos)
    spec = gated_delta.kernel_spec(a, infos)
    roles = [p.role for p in spec.params]
    assert roles == ["input"] * 13 + ["scalar"] * len(spec.scalars) + ["output"] * 8
    shapes = [tuple((9 if k < 6 else 5) if d is None else d for d in i.dims) for k, i in enumerate(infos)]
    v = dict(zip([s.name for s in spec.scalars], spec.scalar_values(shapes)))
    v.update({k: c for k, c in spec.constexprs.items() if k.startswith("stride")})
    g_rec = torch.empty(shapes[3])
    g = torch.empty(shapes[9])
    assert (v["stride_gr_slot"], v["stride_gr_head"], v["stride_gr_pos"]) == g_rec.stride()[:3]
    assert (v["stride_g_batch"], v["stride_g_head"]) == g.stride()[:2]
    assert (v["stride_c_slot"], v["stride_c_head"], v["stride_c_row"]) == torch.empty(shapes[0]).stride()[:3]
    assert (v["stride_kr_slot"], v["stride_kr_head"], v["stride_kr_pos"]) == torch.empty(shapes[2]).stride()[:3]
    assert v["v_per_k"] == 2 and v["num_slots"] == 9
    assert spec.constexprs["SCALE"] == a.scale and spec.constexprs["PER_CHANNEL"] is per_channel
    # GDN's g / g_records have unit trailing strides: constexprs, as in the op's JIT launch.
    assert ("stride_gr_pos" in spec.constexprs) is (not per_channel)
    assert spec.grid_values(shapes) == [-(-128 // (a.block_head_dim * a.chunks)), 32, 5]


@pytest.mark.parametrize(
    "name,change,exc,words",
    [
        ("g", dict(rank=3, dims=(None, 32, 128)), ValueError, "g has rank 3"),
        ("k_records", dict(dtype="f32"), TypeError, "k_records is f32; expected bf16"),
        ("v", dict(dtype="f16"), TypeError, "v is f16; expected bf16"),
        ("g_records", dict(dtype="bf16"), TypeError, "g_records is bf16; expected f32"),
        ("q", dict(dims=(None, 8, 128)), ValueError, r"q has shape \(None, 8, 128\)"),
    ],
)
def test_gated_delta_check_inputs_refuses(name, change, exc, words):
    a = gated_delta.GatedDeltaReplayAttrs.for_layer(**QWEN, per_channel=False)
    infos = list(gated_delta.tensor_infos(a, state_dtype="f32", act_dtype="bf16"))
    i = gated_delta.INPUTS.index(name)
    infos[i] = TensorInfo(
        change.get("dtype", infos[i].dtype), change.get("rank", infos[i].rank), change.get("dims", infos[i].dims)
    )
    with pytest.raises(exc, match=words):
        gated_delta.check_inputs(a, infos)


@pytest.mark.parametrize(
    "per_channel,state,records,want",
    [
        (False, "f32", "bf16", "f32"),
        (False, "bf16", "f16", "f32"),
        (False, "f32", "f32", "f32"),
        (True, "f32", "bf16", "f16"),
        (True, "fp8", "f16", "f16"),
        (True, "bf16", "f32", "f32"),
    ],
    ids=["gdn-bf16", "gdn-f16", "gdn-f32", "kda-bf16", "kda-fp8-f16", "kda-f32"],
)
def test_gated_delta_g_records_dtype_follows_the_caches(per_channel, state, records, want):
    """g_records is f16 for KDA's per-channel log-decays beside bf16 / f16 d and k records, f32
    otherwise (GDN always, KDA with f32 records): the dtype the core caches allocate, which
    tensor_infos declares, the entry kernel's pointers take and check_inputs accepts, alone."""
    cache_cls = KDAReplayCache if per_channel else GDNReplayCache
    cache = cache_cls.allocate(1, 1, 1, 16, 16, 2, state_dtype=TORCH_DTYPES[state], record_dtype=TORCH_DTYPES[records])
    assert TORCH_NAMES[cache.g_records.dtype] == want
    assert gated_delta.g_records_dtype(per_channel, state_dtype=state, record_dtype=records) == want
    a = gated_delta.GatedDeltaReplayAttrs.for_layer(**QWEN, per_channel=per_channel, state_dtype=state)
    infos = list(gated_delta.tensor_infos(a, state_dtype=state, act_dtype="bf16", record_dtype=records))
    i = gated_delta.INPUTS.index("g_records")
    assert infos[i].dtype == want
    gated_delta.check_inputs(a, infos)
    gated_delta.check_inputs(a, [TensorInfo(x.dtype, x.rank) for x in infos])  # dtype pass
    spec = gated_delta.kernel_spec(a, infos)
    assert spec.signature["g_records_in"] == spec.signature["g_records_ptr"] == "*" + DTYPE_NAMES[want]
    other = "f32" if want == "f16" else "f16"
    infos[i] = dataclasses.replace(infos[i], dtype=other)
    words = (
        rf"^gated_delta_replay_step: g_records is {other}; expected {want} "
        rf"\(the caches' g record dtype for {'KDA' if per_channel else 'GDN'} with {records} records\)$"
    )
    with pytest.raises(TypeError, match=words):
        gated_delta.check_inputs(a, infos)


@pytest.mark.parametrize(
    "change,exc,words",
    [
        (dict(scale=0.0), TypeError, "scale is 0.0"),
        (dict(scale=1), TypeError, "scale is 1"),
        (dict(k_heads=3), ValueError, "k_heads = 3 must divide"),
        (dict(per_channel=0), TypeError, "per_channel is 0"),
    ],
)
def test_gated_delta_attrs_refuse_bad_values(change, exc, words):
    values = {**gated_delta.GatedDeltaReplayAttrs.for_layer(**QWEN, per_channel=True).values(), **change}
    with pytest.raises(exc, match=words):
        gated_delta.GatedDeltaReplayAttrs(**values)


# --------------------------------------------------------------------------- fp8 checkpoints, stochastic rounding


@pytest.mark.parametrize("family", [mamba2, gated_delta], ids=["mamba2", "gated_delta"])
def test_fp8_checkpoint_takes_its_row_scales_in_place(family):
    """An fp8 checkpoint: checkpoint_scale is the last input, f32 [num_slots, heads, rows] with
    num_slots shared with the caches; its strides are the dense ones the cache allocates; the
    kernel compiles with HAS_SCALE and writes it through the last output (aliased)."""
    if family is mamba2:
        a = mamba2.Mamba2ReplayAttrs.for_layer(128, 64, 128, 8, 16, state_dtype="fp8", batch_hint=256)
        scale_shape = (9, 128, 64)
    else:
        a = gated_delta.GatedDeltaReplayAttrs.for_layer(**QWEN, per_channel=True, state_dtype="fp8")
        scale_shape = (9, 32, 128)
    infos = list(family.tensor_infos(a, state_dtype="fp8", act_dtype="bf16"))
    assert family.INPUTS[-1] == family.OUTPUTS[-1] == "checkpoint_scale"
    assert infos[-1] == TensorInfo("f32", 3, (None,) + scale_shape[1:]) and infos[0].dtype == "fp8"
    family.check_inputs(a, infos)
    family.check_inputs(a, [TensorInfo(i.dtype, i.rank) for i in infos])  # dtype pass
    spec = family.kernel_spec(a, infos)
    assert spec.constexprs["HAS_SCALE"] is True and spec.constexprs["SR"] is False
    assert spec.signature["checkpoint_in"] == spec.signature["checkpoint_ptr"] == "*fp8e4nv"
    assert spec.signature["checkpoint_scale_in"] == spec.signature["checkpoint_scale_ptr"] == "*fp32"
    shapes = [
        tuple((9 if k < 6 or k == len(infos) - 1 else 5) if d is None else d for d in i.dims) for k, i in enumerate(infos)
    ]
    v = dict(zip([s.name for s in spec.scalars], spec.scalar_values(shapes)))
    v.update(spec.constexprs)
    assert (v["stride_sc_slot"], v["stride_sc_head"]) == torch.empty(scale_shape).stride()[:2]
    assert spec.variant.startswith(("sfp8_", "kda_sfp8_"))
    assert spec_aliases(family, "fp8") == {**family.ALIASED_OUTPUTS, 7: len(family.INPUTS) - 1}
    assert spec_aliases(family, "bf16") == family.ALIASED_OUTPUTS


@pytest.mark.parametrize(
    "state,scale,words",
    [
        ("fp8", TensorInfo("i32", 1, (None,)), r"checkpoint_scale is i32 of rank 1 \(checkpoint: fp8\); expected \[num_slots"),
        ("fp8", TensorInfo("bf16", 3, (None, 32, 128)), r"checkpoint_scale is bf16 of rank 3 \(checkpoint: fp8\)"),
        ("bf16", TensorInfo("f32", 3, (None, 32, 128)), r"\(checkpoint: bf16\); expected none \(slot_ids in its place\)"),
        ("f32", TensorInfo("i32", 1, (7,)), r"checkpoint_scale has batch = 7 \(shape \(7,\)\); another input has batch = 5"),
    ],
)
def test_gated_delta_checkpoint_scale_refusals(state, scale, words):
    a = gated_delta.GatedDeltaReplayAttrs.for_layer(**QWEN, per_channel=False, state_dtype=state)
    infos = list(gated_delta.tensor_infos(a, state_dtype=state, act_dtype="bf16"))
    infos = [TensorInfo(i.dtype, i.rank, tuple(5 if d is None and k >= 6 else d for d in i.dims)) for k, i in enumerate(infos)]
    infos[-1] = scale
    with pytest.raises(ValueError, match=words):
        gated_delta.check_inputs(a, infos)


@pytest.mark.parametrize("family", [mamba2, gated_delta], ids=["mamba2", "gated_delta"])
def test_rounding_seed_attribute(family):
    """-1 (absent) is round to nearest; a seed in [0, 2^31) needs a bf16, f16 or fp8
    checkpoint; anything else is refused, naming the plugin, the value and the range."""
    geometry = (128, 64, 128, 8, 16) if family is mamba2 else tuple(QWEN.values())
    kw = {} if family is mamba2 else dict(per_channel=False)
    a = family.ATTRS.for_layer(*geometry, **kw)
    assert a.rounding_seed == -1 and list(a.values())[-1] == "rounding_seed"
    for state in ("bf16", "f16", "fp8"):
        b = family.ATTRS.for_layer(*geometry, state_dtype=state, rounding_seed=2**31 - 1, **kw)
        infos = family.tensor_infos(b, state_dtype=state, act_dtype="bf16")
        family.check_inputs(b, infos)
        spec = family.kernel_spec(b, infos)
        assert spec.constexprs["SR"] is True and "_sr_" in spec.variant
        assert [s.value for s in spec.scalars if s.name == "sr_seed"] == [2**31 - 1]
    with pytest.raises(ValueError, match=rf"{family.PLUGIN}: rounding_seed is 0 \(checkpoint: f32\); expected -1 \(off\)"):
        family.ATTRS.for_layer(*geometry, rounding_seed=0, **kw)
    seeded = dataclasses.replace(a, rounding_seed=4)
    with pytest.raises(ValueError, match=rf"{family.PLUGIN}: rounding_seed is 4 \(checkpoint: f32\)"):
        family.check_inputs(seeded, family.tensor_infos(seeded, state_dtype="f32", act_dtype="bf16"))
    for bad in (-2, 2**31, True, 1.0):
        with pytest.raises(ValueError, match=rf"rounding_seed is {bad!r}; expected -1 \(round to nearest\) or an int in"):
            dataclasses.replace(a, rounding_seed=bad)
    with pytest.raises(TypeError, match=r"state_dtype is 'f64'; expected f32 \| bf16 \| f16 \| fp8"):
        family.ATTRS.for_layer(*geometry, state_dtype="f64", **kw)


def test_rounding_seed_specializes_like_the_jit():
    """One PTX serves seeds of one specialization (5 and 7); 1 is a constexpr and multiples of
    16 (and 0) get the divisibility hint, as Triton's JIT specializes the op's launch."""

    def spec(seed):
        a = mamba2.Mamba2ReplayAttrs.for_layer(128, 64, 128, 8, 16, state_dtype="bf16", rounding_seed=seed)
        return mamba2.kernel_spec(a, _infos(a, state_dtype="bf16"))

    assert spec(5).variant == spec(7).variant
    assert len({spec(s).variant for s in (5, 1, 32, None)}) == 4
    assert spec(1).constexprs["sr_seed"] == 1 and "sr_seed" not in [p.name for p in spec(1).params]
    assert "sr_seed" in spec(32).divisible and "sr_seed" not in spec(5).divisible


def test_plugin_inputs_substitute_slot_ids_for_an_absent_checkpoint_scale():
    t = {n: n for n in mamba2.INPUTS if n not in ("D", "z", "dt_bias", "checkpoint_scale")}
    inputs, flags = mamba2.plugin_inputs(t)
    assert inputs[-1] == "slot_ids" and set(flags) == {"has_D", "has_z", "has_dt_bias"}
    assert mamba2.plugin_inputs({**t, "checkpoint_scale": "s"})[0][-1] == "s"
    g = {n: n for n in gated_delta.INPUTS if n != "checkpoint_scale"}
    assert gated_delta.plugin_inputs(g)[-1] == "slot_ids"
    assert gated_delta.plugin_inputs({**g, "checkpoint_scale": None})[-1] == "slot_ids"
    assert gated_delta.plugin_inputs({**g, "checkpoint_scale": "s"})[-1] == "s"
    with pytest.raises(ValueError, match=r"missing inputs \['beta'\]"):
        gated_delta.plugin_inputs({k: v for k, v in g.items() if k != "beta"})


def test_block_plugin_refuses_a_rounding_seed():
    """The engine flow's layer buffer holds an fp32 checkpoint: no stochastic rounding there."""
    from trtllm_replayssm_plugins import mamba2_block

    replay = mamba2.Mamba2ReplayAttrs(2, 16, 8, 1, 3, True, True, True, True, 8, 2, 2, 1, rounding_seed=3)
    with pytest.raises(ValueError, match=r"mamba2_replay_block: rounding_seed is 3 \(checkpoint: f32\); expected -1"):
        mamba2_block.Mamba2BlockAttrs(replay, 6, "bf16")
    mamba2_block.Mamba2BlockAttrs(dataclasses.replace(replay, rounding_seed=-1), 6, "bf16")


def test_check_arch_refuses_fp8_below_sm89():
    from trtllm_replayssm_plugins.ptx import check_arch

    a = mamba2.Mamba2ReplayAttrs.for_layer(8, 16, 16, 2, 4, state_dtype="fp8")
    spec = mamba2.kernel_spec(a, mamba2.tensor_infos(a, state_dtype="fp8", act_dtype="bf16"))
    with pytest.raises(ValueError, match=r"mamba2_replay_step: arch is 80 with an fp8 \(e4m3\) checkpoint; expected 89"):
        check_arch(spec, 80)
    check_arch(spec, 89)
    check_arch(mamba2.kernel_spec(a, mamba2.tensor_infos(a, state_dtype="bf16", act_dtype="bf16")), 80)


def test_compile_ptx_cache_returns_the_callers_spec(monkeypatch):
    """Specs of one variant share the PTX but each keeps its own scalars (the export manifest
    of seed 7 must not say seed 5)."""
    from trtllm_replayssm_plugins import ptx

    def spec(seed):
        a = mamba2.Mamba2ReplayAttrs.for_layer(8, 16, 16, 2, 4, state_dtype="bf16", rounding_seed=seed)
        return mamba2.kernel_spec(a, mamba2.tensor_infos(a, state_dtype="bf16", act_dtype="bf16"))

    s5, s7 = spec(5), spec(7)
    cached = ptx.CompiledKernel(s5, 90, "k", "PTX", 0, 2, "x")
    monkeypatch.setitem(ptx._CACHE, (s5.name, s5.variant, 90), cached)
    got = ptx.compile_ptx(s7, mamba2.ENTRY, 90)
    assert got.ptx == "PTX" and got.spec is s7
    assert {s["name"]: s["value"] for s in got.manifest()["scalars"]}["sr_seed"] == 7
