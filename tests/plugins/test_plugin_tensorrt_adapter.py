"""The ``tensorrt.plugin`` registration against a stand-in TensorRT (tests/plugins/fake_tensorrt.py):
import guard, version gates, schemas TensorRT checks, shape inference with aliasing, and the AOT
translation of the launch plan. TensorRT itself cannot be installed here."""

import dataclasses
import types

import pytest
import torch

import fake_tensorrt
import plugin_cases  # noqa: F401  (makes trtllm_replayssm_plugins importable)
from plugin_cases import GatedDeltaCase, Mamba2Case
from trtllm_replayssm_plugins import gated_delta, mamba2, network, tensorrt_plugin

PLUGIN_ID = "replayssm::mamba2_replay_step"
A = mamba2.Mamba2ReplayAttrs.for_layer(128, 64, 128, 8, 16, has_z=True, batch_hint=256)
DTYPES = dict(
    checkpoint="FLOAT",
    x_records="BF16",
    dt_records="FLOAT",
    B_records="BF16",
    cursor="INT32",
    arrivals="INT32",
    x="BF16",
    dt="BF16",
    A="FLOAT",
    B="BF16",
    C="BF16",
    slot_ids="INT32",
    D="FLOAT",
    z="BF16",
    dt_bias="FLOAT",
    checkpoint_scale="INT32",  # absent: slot_ids in its place
)
FP8_DTYPES = dict(DTYPES, checkpoint="FP8", checkpoint_scale="FLOAT")


def _descs(fake=False, state="f32", **dims_override):
    dims = {
        n: tuple("dyn" if d is None else d for d in i.dims)
        for n, i in zip(mamba2.INPUTS, mamba2.tensor_infos(A, state_dtype=state, act_dtype="bf16"))
    }
    dims.update(dims_override)
    dtypes = FP8_DTYPES if state == "fp8" else DTYPES
    return [fake_tensorrt.TensorDesc(dtypes[n], dims[n], fake=fake) for n in mamba2.INPUTS]


def test_register_plugins_without_tensorrt_names_the_fix(fresh):
    fresh.setitem(__import__("sys").modules, "tensorrt", None)
    with pytest.raises(ImportError, match=r"TensorRT >= 10\.9 .*pip install 'trtllm_replayssm\[tensorrt\]'"):
        tensorrt_plugin.register_plugins()
    with pytest.raises(ImportError, match=r"TensorRT >= 10\.6 \(JIT"):
        tensorrt_plugin.register_plugins(aot=False)
    with pytest.raises(ImportError, match="TensorRT >= 10.9"):
        network.add_mamba2_replay_step(None, *[None] * 11, slot_ids=None)


def test_register_plugins_version_gates(fresh):
    fake_tensorrt.install(fresh, version="10.8.0", aot=False)
    with pytest.raises(ImportError, match=r"needs TensorRT >= 10\.9 for AOT plugins; found 10\.8\.0"):
        tensorrt_plugin.register_plugins(aot=True)
    tensorrt_plugin.register_plugins(aot=False)
    _, trtp = tensorrt_plugin.import_tensorrt(aot=False)
    d = trtp.registry[PLUGIN_ID]
    assert "impl" in d and "aot_impl" not in d


def test_register_plugins_schemas(fresh):
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    tensorrt_plugin.register_plugins()  # idempotent: TensorRT refuses a second definition
    d = trtp.registry[PLUGIN_ID]
    assert d["inputs"] == list(mamba2.INPUTS)
    assert d["attrs"] == list(A.values())
    assert d["num_outputs"] == len(mamba2.OUTPUTS) == 8
    assert d["attrs"][-1] == "rounding_seed"
    assert {"register", "aot_impl", "impl"} <= set(d)
    d = trtp.registry["replayssm::gated_delta_replay_step"]
    assert d["inputs"] == list(gated_delta.INPUTS)
    assert d["attrs"] == list(gated_delta.GatedDeltaReplayAttrs.__dataclass_fields__)
    assert d["attrs"][-1] == "rounding_seed" and d["inputs"][-1] == "checkpoint_scale"
    assert d["num_outputs"] == 8 and {"register", "aot_impl", "impl"} <= set(d)


def test_register_fn_aliases_the_caches_and_checks_shapes(fresh):
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    register = trtp.registry[PLUGIN_ID]["register"]
    for fake in (True, False):  # output-dtype pass (ranks only), then shape pass
        descs = _descs(fake=fake)
        outs = register(*descs, **A.values())
        assert len(outs) == 8
        assert outs[0].like_of is descs[mamba2.INPUTS.index("x")] and outs[0].aliased_to is None
        for o, i in mamba2.ALIASED_OUTPUTS.items():
            assert outs[o].aliased_to is descs[i], mamba2.OUTPUTS[o]
        # no fp8: checkpoint_scale's place holds slot_ids; its output is a new buffer, not an alias
        assert outs[7].like_of is descs[15] and outs[7].aliased_to is None
    with pytest.raises(ValueError, match="checkpoint has shape"):
        register(*_descs(checkpoint=("dyn", 128, 80, 128)), **A.values())
    bad = _descs()
    bad[mamba2.INPUTS.index("cursor")].dtype = "INT64"
    with pytest.raises(TypeError, match="cursor is INT64; expected i32"):
        register(*bad, **A.values())
    with pytest.raises(ValueError, match="L is 99"):
        register(*_descs(), **{**A.values(), "L": 99})


def test_aot_impl_translates_the_launch_plan(fresh):
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    compiled = []

    def fake_compile(spec, arch):
        compiled.append((spec, arch))
        return types.SimpleNamespace(kernel_name="entry", ptx="PTX", shared_mem=4321)

    fresh.setattr(mamba2, "compile_kernel", fake_compile)
    fresh.setattr(tensorrt_plugin, "build_arch", lambda: 90)
    descs = _descs()
    name, ptx, launch, scalars = trtp.registry[PLUGIN_ID]["aot_impl"](*descs, *A.values().values(), (), 0)
    ((spec, arch),) = compiled
    assert (name, ptx, arch) == ("entry", "PTX", 90)
    assert (
        spec.variant
        == mamba2.kernel_spec(A, mamba2.tensor_infos(A, state_dtype="f32", act_dtype="bf16", dt_dtype="bf16")).variant
    )
    x = descs[mamba2.INPUTS.index("x")]
    assert (launch.grid_x, launch.grid_y) == (spec.grid[0], 128)
    assert launch.grid_z is x.shape_expr[0]
    assert (launch.block_x, launch.block_y, launch.block_z) == (A.num_warps * 32, 1, 1)
    assert launch.shared_mem == 4321
    assert all(isinstance(s, trtp.SymInt32) for s in scalars)
    values = [s.value for s in scalars]
    assert values[0] is descs[0].shape_expr[0]  # num_slots: the checkpoint's dynamic dim 0
    assert values[1:] == [s.value for s in spec.scalars[1:]]
    assert len(values) == sum(p.role == "scalar" for p in spec.params)


def test_register_fn_fp8_aliases_checkpoint_scale(fresh):
    """An fp8 checkpoint: checkpoint_scale (input 15, f32 [num_slots, nheads, head_dim]) is
    aliased to output 7, in place like the caches, in both of TensorRT's passes."""
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    register = trtp.registry[PLUGIN_ID]["register"]
    for fake in (True, False):
        descs = _descs(fake=fake, state="fp8")
        outs = register(*descs, **{**A.values(), "rounding_seed": 2**31 - 1})
        assert outs[7].aliased_to is descs[15] and outs[0].aliased_to is None
        assert [o for o in range(8) if outs[o].aliased_to is not None] == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    "state,change,seed,exc,words",
    [
        pytest.param(
            "fp8",
            dict(checkpoint_scale=("INT32", ("dyn",))),
            -1,
            ValueError,
            r"mamba2_replay_step: checkpoint_scale is i32 of rank 1 \(checkpoint: fp8\); "
            r"expected \[num_slots, nheads, head_dim\] f32, the fp8 checkpoint's row scales",
            id="fp8-without-scale",
        ),
        pytest.param(
            "f32",
            dict(checkpoint_scale=("FLOAT", ("dyn", 128, 64))),
            -1,
            ValueError,
            r"mamba2_replay_step: checkpoint_scale is f32 of rank 3 \(checkpoint: f32\); "
            r"expected none \(slot_ids in its place\): only an fp8 checkpoint takes checkpoint_scale",
            id="f32-with-scale",
        ),
        pytest.param(
            "fp8",
            dict(checkpoint_scale=("HALF", ("dyn", 128, 64))),
            -1,
            ValueError,
            r"checkpoint_scale is f16 of rank 3 \(checkpoint: fp8\); expected \[num_slots, nheads, head_dim\] f32",
            id="fp8-f16-scale",
        ),
        pytest.param(
            "fp8",
            dict(checkpoint_scale=("FLOAT", ("dyn", 128, 32))),
            -1,
            ValueError,
            r"checkpoint_scale has shape \(None, 128, 32\); expected \[num_slots, nheads, head_dim\] = \(num_slots, 128, 64\)",
            id="fp8-scale-shape",
        ),
        pytest.param(
            "fp8",
            dict(checkpoint_scale=("FLOAT", (9, 128, 64)), checkpoint=("FP8", (8, 128, 64, 128))),
            -1,
            ValueError,
            "checkpoint_scale has num_slots = 9",
            id="fp8-scale-slots",
        ),
        pytest.param(
            "f32",
            {},
            5,
            ValueError,
            r"mamba2_replay_step: rounding_seed is 5 \(checkpoint: f32\); expected -1 \(off\): "
            "stochastic rounding takes a bf16, f16 or fp8 checkpoint",
            id="f32-with-seed",
        ),
        pytest.param("fp8", {}, -2, ValueError, r"rounding_seed is -2; expected -1 \(round to nearest\)", id="seed-2"),
        pytest.param("fp8", {}, 2**31, ValueError, "rounding_seed is 2147483648; expected", id="seed-2^31"),
        pytest.param(
            "fp8",
            dict(checkpoint=("BF16", (None, 128, 64, 128))),
            -1,
            ValueError,
            "checkpoint_scale is f32 of rank 3",
            id="bf16",
        ),
        pytest.param(
            "fp8",
            dict(checkpoint=("INT8", ("dyn", 128, 64, 128))),
            -1,
            TypeError,
            r"checkpoint is INT8; expected f32 \| bf16 \| f16 \| fp8",
            id="int8-checkpoint",
        ),
    ],
)
def test_register_fn_refuses_bad_fp8_and_rounding_combinations(fresh, state, change, seed, exc, words):
    """Each refusal names the plugin, the argument, what was expected and what came."""
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    register = trtp.registry[PLUGIN_ID]["register"]
    descs = _descs(state=state)
    for name, (dtype, dims) in change.items():
        descs[mamba2.INPUTS.index(name)] = fake_tensorrt.TensorDesc(dtype, ["dyn" if d is None else d for d in dims])
    with pytest.raises(exc, match=words):
        register(*descs, **{**A.values(), "rounding_seed": seed})


def test_aot_impl_fp8_with_stochastic_rounding(fresh):
    """The fp8 + rounding_seed specialization: HAS_SCALE and SR constexprs, checkpoint_scale as
    the last input and output pointer (f32), the seed as the runtime scalar sr_seed."""
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    compiled = []
    fresh.setattr(
        mamba2,
        "compile_kernel",
        lambda spec, arch: compiled.append(spec) or types.SimpleNamespace(kernel_name="entry", ptx="PTX", shared_mem=0),
    )
    fresh.setattr(tensorrt_plugin, "build_arch", lambda: 90)
    attrs = {**A.values(), "rounding_seed": 12345}
    descs = _descs(state="fp8")
    _, _, _, scalars = trtp.registry[PLUGIN_ID]["aot_impl"](*descs, *attrs.values(), (), 0)
    (spec,) = compiled
    assert spec.constexprs["HAS_SCALE"] is True and spec.constexprs["SR"] is True
    assert "_sfp8_" in f"_{spec.variant}" and "_sr_" in spec.variant
    ins = [p for p in spec.params if p.role == "input"]
    outs = [p for p in spec.params if p.role == "output"]
    assert (ins[0].triton_type, ins[-1].name, ins[-1].triton_type) == ("*fp8e4nv", "checkpoint_scale_in", "*fp32")
    assert (outs[1].triton_type, outs[-1].name, outs[-1].triton_type) == ("*fp8e4nv", "checkpoint_scale_ptr", "*fp32")
    names = [p.name for p in spec.params if p.role == "scalar"]
    values = [s.value for s in scalars]
    assert values[names.index("sr_seed")] == 12345
    assert values[names.index("stride_sc_slot")] == 128 * 64 and values[names.index("stride_sc_head")] == 64
    # Without a seed and fp8 the same layer compiles neither (the seed scalar stays, unread).
    plain = mamba2.kernel_spec(A, mamba2.tensor_infos(A, state_dtype="bf16", act_dtype="bf16", dt_dtype="bf16"))
    assert plain.constexprs["HAS_SCALE"] is False and plain.constexprs["SR"] is False
    assert [s.value for s in plain.scalars if s.name == "sr_seed"] == [0]


def _itensors(family, a, state, **dtypes):
    """ITensor stand-ins of a layer (batch and num_slots dynamic), by input name."""
    names = {"f32": "FLOAT", "bf16": "BF16", "f16": "HALF", "fp8": "FP8", "i32": "INT32"}
    infos = family.tensor_infos(a, state_dtype=state, act_dtype="bf16", **dtypes)
    return {
        n: fake_tensorrt.ITensor(names[i.dtype], [-1 if d is None else d for d in i.dims])
        for n, i in zip(family.INPUTS, infos)
    }


def _add_mamba2(net, t, **kw):
    cache = [t[n] for n in mamba2.INPUTS[:6]]
    step = [t[n] for n in ("x", "dt", "A", "B", "C")]
    return network.add_mamba2_replay_step(net, *cache, *step, slot_ids=t["slot_ids"], D=t["D"], dt_bias=t["dt_bias"], **kw)


M_NET = mamba2.Mamba2ReplayAttrs.for_layer(4, 16, 16, 2, 4)


def test_network_passes_checkpoint_scale_and_rounding_seed(fresh):
    """add_mamba2_replay_step / add_gdn_replay_step: an fp8 checkpoint's checkpoint_scale goes in
    as input 15 / 12 and is aliased; the seed becomes the rounding_seed attribute; without
    them slot_ids takes the scale's place and the attribute is -1."""
    fake_tensorrt.install(fresh)
    net = fake_tensorrt.Network()
    t = _itensors(mamba2, M_NET, "fp8", dt_dtype="bf16")
    layer = _add_mamba2(net, t, checkpoint_scale=t["checkpoint_scale"], rounding_seed=9, name="ssm0")
    call = layer.call
    assert call.plugin_id == PLUGIN_ID and layer.name == "ssm0" and layer.aot is True
    assert call.tensors[15] is t["checkpoint_scale"] and call.attrs["rounding_seed"] == 9
    assert call.outputs[7].aliased_to is not None and call.outputs[7].aliased_to.dtype == "FLOAT"
    t = _itensors(mamba2, M_NET, "bf16", dt_dtype="bf16")
    call = _add_mamba2(net, t).call
    assert call.tensors[15] is t["slot_ids"] and call.attrs["rounding_seed"] == -1
    assert call.outputs[7].aliased_to is None
    g = gated_delta.GatedDeltaReplayAttrs.for_layer(2, 4, 16, 16, 4, per_channel=False)
    t = _itensors(gated_delta, g, "fp8")
    gdn = [t[n] for n in gated_delta.INPUTS[:11]]
    call = network.add_gdn_replay_step(
        net, *gdn, slot_ids=t["slot_ids"], checkpoint_scale=t["checkpoint_scale"], rounding_seed=0
    ).call
    assert call.tensors[12] is t["checkpoint_scale"] and call.attrs["rounding_seed"] == 0
    assert call.outputs[7].aliased_to is not None


@pytest.mark.parametrize(
    "state,given,seed,words",
    [
        ("fp8", False, None, r"mamba2_replay_step: checkpoint_scale is i32 of rank 1 \(checkpoint: fp8\); expected"),
        ("bf16", True, None, r"mamba2_replay_step: checkpoint_scale is f32 of rank 3 \(checkpoint: bf16\); expected none"),
        ("f32", False, 3, r"mamba2_replay_step: rounding_seed is 3 \(checkpoint: f32\); expected -1"),
        ("bf16", False, 2**31, r"rounding_seed is 2147483648; expected -1 \(round to nearest\) or an int in \[0, 2\^31\)"),
        ("bf16", False, True, "rounding_seed is True"),
    ],
    ids=["fp8-no-scale", "bf16-scale", "f32-seed", "seed-2^31", "seed-bool"],
)
def test_network_refuses_bad_combinations(fresh, state, given, seed, words):
    """Refused when the layer is added, before TensorRT sees it (``rounding_seed`` None or -1 is
    off)."""
    fake_tensorrt.install(fresh)
    net = fake_tensorrt.Network()
    t = _itensors(mamba2, M_NET, state, dt_dtype="bf16")
    scale = fake_tensorrt.ITensor("FLOAT", (-1, 4, 16)) if given else None
    with pytest.raises(ValueError, match=words):
        _add_mamba2(net, t, checkpoint_scale=scale, rounding_seed=seed)
    assert net.layers == []


@pytest.mark.parametrize(
    "per_channel,records,want",
    [(True, "bf16", "f16"), (True, "f16", "f16"), (True, "f32", "f32"), (False, "bf16", "f32")],
    ids=["kda-bf16", "kda-f16", "kda-f32", "gdn-bf16"],
)
def test_network_takes_g_records_in_the_caches_dtype(fresh, per_channel, records, want):
    """add_kda_replay_step / add_gdn_replay_step take g_records in the caches' dtype (f16 for KDA
    beside 16-bit d / k records, else f32), aliased through its output; the other dtype is refused
    when the layer is added."""
    fake_tensorrt.install(fresh)
    trt_names = {"f16": "HALF", "f32": "FLOAT"}
    net = fake_tensorrt.Network()
    a = gated_delta.GatedDeltaReplayAttrs.for_layer(2, 4, 16, 16, 4, per_channel=per_channel)
    t = _itensors(gated_delta, a, "f32", record_dtype=records)
    add = network.add_kda_replay_step if per_channel else network.add_gdn_replay_step
    tensors = [t[n] for n in gated_delta.INPUTS[:11]]
    g_in = gated_delta.INPUTS.index("g_records")
    call = add(net, *tensors, slot_ids=t["slot_ids"]).call
    g_out = call.outputs[gated_delta.OUTPUTS.index("g_records")]
    assert tensors[g_in].dtype == g_out.dtype == trt_names[want] and g_out.aliased_to is not None
    other = "f32" if want == "f16" else "f16"
    tensors[g_in] = fake_tensorrt.ITensor(trt_names[other], t["g_records"].shape)
    with pytest.raises(TypeError, match=f"gated_delta_replay_step: g_records is {other}; expected {want} "):
        add(net, *tensors, slot_ids=t["slot_ids"])
    assert len(net.layers) == 1


_M_SMALL = mamba2.Mamba2ReplayAttrs(4, 8, 6, 2, 3, True, False, True, True, 8, 1, 1, 1)
_KDA_SMALL = gated_delta.GatedDeltaReplayAttrs(1, 2, 8, 6, 3, True, True, 0.5, 16, 1, 1, 1)
_GDN_SMALL = gated_delta.GatedDeltaReplayAttrs(2, 2, 8, 6, 3, False, False, 0.5, 16, 1, 1, 1)


@pytest.mark.parametrize(
    "case,a,state,act",
    [
        (Mamba2Case, _M_SMALL, torch.float64, torch.float64),
        (GatedDeltaCase, _KDA_SMALL, torch.float64, torch.float64),
        (GatedDeltaCase, _GDN_SMALL, torch.float64, torch.float64),
        (Mamba2Case, dataclasses.replace(_M_SMALL, rounding_seed=12345), torch.float8_e4m3fn, torch.float32),
        (Mamba2Case, dataclasses.replace(_M_SMALL, rounding_seed=7), torch.bfloat16, torch.float32),
        (GatedDeltaCase, dataclasses.replace(_KDA_SMALL, rounding_seed=3), torch.float8_e4m3fn, torch.float32),
        (GatedDeltaCase, _GDN_SMALL, torch.float8_e4m3fn, torch.float32),
    ],
    ids=["mamba2", "kda", "gdn", "mamba2-fp8-sr", "mamba2-bf16-sr", "kda-fp8-sr", "gdn-fp8"],
)
def test_run_op_equals_the_public_op(case, a, state, act):
    """The JIT path's call into the custom op equals the public op (CPU reference), the fp8
    checkpoint's scales and the rounding seed passed through."""
    g = torch.Generator().manual_seed(0)
    layer = case.layer(a, num_slots=5, state_dtype=state, act_dtype=act, device="cpu", generator=g)
    ref = {k: v.clone() for k, v in layer.items()}
    slot_ids = torch.tensor([4, -1, 1, 2], dtype=torch.int32)
    for _ in range(4):
        step = {k: v.to(act) for k, v in case.step(a, 4, act, "cpu", generator=g).items()}
        out, y = torch.zeros_like(case.out_like(step)), torch.zeros_like(case.out_like(step))
        case.family().run_op(a, case.inputs(layer, step, slot_ids), out)
        case.public_op(a, ref, step, slot_ids, y)
        assert torch.equal(out, y)
        for n in ref:
            assert torch.equal(layer[n].view(torch.uint8), ref[n].view(torch.uint8)), n
    assert ("checkpoint_scale" in layer) is (state == torch.float8_e4m3fn)


def test_fake_tensorrt_has_teeth(fresh):
    """The stand-in refuses what TensorRT refuses, so the schema test above can fail."""
    _, trtp = fake_tensorrt.install(fresh)

    @trtp.register("t::p")
    def reg(x: trtp.TensorDesc, n: int) -> trtp.TensorDesc:
        return x.like()

    with pytest.raises(ValueError, match="aot_impl signature"):
        trtp.aot_impl("t::p")(lambda x, n, outputs: None)
    with pytest.raises(ValueError, match="impl signature"):
        trtp.impl("t::p")(lambda n, x, outputs, stream: None)
    with pytest.raises(ValueError, match="has no annotation"):
        trtp.register("t::q")(lambda x: None)


@pytest.mark.parametrize("argv", [[], ["--kernel", "cuda"]], ids=["triton", "cuda"])
def test_example_engine_script_skips_with_its_reason(argv):
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available():
        pytest.skip("TensorRT and a GPU are here: the example runs for real")
    proc = subprocess.run(
        [sys.executable, f"{plugin_cases.ROOT}/examples/trt_engine_mamba2.py", *argv],
        env=plugin_cases.subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("skipped: ")
