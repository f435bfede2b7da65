"""The Mamba-2 CUDA step as two TensorRT AOT plugin layers (plugins/mamba2_cuda.py), on the CPU:
what the export takes and refuses, the launch lists in TensorRT's order, the PTX that NVRTC
writes for them (entries, parameter types, the tensor-map patch, shared memory, registers
against the op's entries), the TensorRT adapter and the network helper on the fake TensorRT.
The driver-API launch against the op runs on the GPU (tests/gpu/test_plugin_cuda_launch_gpu.py)."""

import re

import numpy as np
import pytest

import fake_tensorrt
import plugin_cases  # noqa: F401  (makes trtllm_replayssm_plugins importable)
from trtllm_replayssm.kernels import mamba2_replay_cuda as mc
from trtllm_replayssm.kernels.nvrtc import compile_program
from trtllm_replayssm_plugins import mamba2_cuda as cu
from trtllm_replayssm_plugins import network, tensorrt_plugin
from trtllm_replayssm_plugins.ptx import MAX_SHARED_MEM, parse_ptx_entries
from trtllm_replayssm_plugins.spec import InputDim, TensorInfo

SUPER = (128, 64, 128, 8, 16)  # Nemotron-3-Super: nheads, head_dim, d_state, ngroups, L


def _attrs(batch_hint=64, **kw):
    return cu.Mamba2CudaAttrs.for_layer(*SUPER, batch_hint=batch_hint, **kw)


def _infos(layer, a, **kw):
    return layer.tensor_infos(a, state_dtype="bf16", **kw)


@pytest.mark.parametrize(
    "geometry,state,words",
    [
        ((64, 128, 16), "f32", "needs 80928 bytes of shared memory"),
        ((80, 128, 16), "bf16", "needs 58400 bytes of shared memory"),
        ((64, 128, 32), "bf16", "needs 62496 bytes of shared memory"),
        ((64, 128, 16), "f16", "checkpoint torch.float16"),
        ((72, 128, 8), "bf16", "head_dim 72"),
        ((64, 96, 8), "bf16", "d_state 96"),
    ],
)
def test_export_refusals_name_their_reason(geometry, state, words):
    assert words in cu.export_unsupported(*geometry, state_dtype=state)
    with pytest.raises(ValueError, match="mamba2_replay_step_cuda: .*" + re.escape(words)):
        cu.Mamba2CudaAttrs.for_layer(128, *geometry[:2], 8, geometry[2], state_dtype=state)


@pytest.mark.parametrize("geometry", [(64, 128, 16), (64, 128, 8), (64, 64, 32), (32, 128, 16), (128, 64, 8)])
def test_export_takes_two_stages_within_48_kib(geometry):
    assert cu.export_unsupported(*geometry, state_dtype="bf16") is None
    assert mc.step_shared_bytes(*geometry, 2, 2) <= MAX_SHARED_MEM
    assert cu.export_unsupported(*geometry, state_dtype="bf16", act_dtype="f32") is not None


def test_attrs_take_the_op_launch_table():
    """coef_warps and min_ctas are the op's ring_config at the batch hint; the grid is min_ctas a
    multiprocessor of the target GPU."""
    for batch, warps in ((64, 16), (256, 4)):
        a = _attrs(batch)
        cfg = mc.cuda_step_config(64, 128, 16, batch, 2)
        assert (a.coef_warps, a.min_ctas) == (cfg.coef_warps, cfg.min_ctas) == (warps, 3)
        assert a.grid == 3 * 132
    assert _attrs(multiprocessors=114).grid == 3 * 114
    with pytest.raises(ValueError, match="coef_warps is 3"):
        cu.Mamba2CudaAttrs(*SUPER, True, False, True, True, 3, 3, 132)
    with pytest.raises(ValueError, match="ngroups = 3 must divide nheads = 128"):
        cu.Mamba2CudaAttrs(128, 64, 128, 3, 16, True, False, True, True, 4, 3, 132)


def test_launch_lists_are_inputs_scalars_outputs():
    a = _attrs(256)
    coef = cu.COEFFICIENTS.kernel_spec(a, _infos(cu.COEFFICIENTS, a, dt_dtype="bf16"))
    step = cu.STEP.kernel_spec(a, _infos(cu.STEP, a))
    assert [(p.role, p.name, p.triton_type) for p in coef.params] == [
        ("input", "x_records", "*bf16"), ("input", "dt_records", "*fp32"), ("input", "B_records", "*bf16"),
        ("input", "cursor", "*i32"), ("input", "x", "*bf16"), ("input", "dt", "*bf16"), ("input", "A", "*fp32"),
        ("input", "B", "*bf16"), ("input", "C", "*bf16"), ("input", "slot_ids", "*i32"), ("input", "dt_bias", "*fp32"),
        ("scalar", "num_slots", "i32"), ("output", "coef", "*fp32"), ("output", "c_rows", "*bf16"), ("output", "x_records", "*bf16"),
        ("output", "dt_records", "*fp32"), ("output", "B_records", "*bf16"),
    ]  # fmt: skip
    assert [(p.role, p.name, p.triton_type) for p in step.params] == [
        ("input", "checkpoint", "*bf16"), ("input", "coef", "*fp32"), ("input", "c_rows", "*bf16"),
        ("input", "x_records", "*bf16"), ("input", "B_records", "*bf16"), ("input", "cursor", "*i32"),
        ("input", "slot_ids", "*i32"), ("input", "D", "*fp32"), ("input", "z", "*bf16"), ("input", "x", "*bf16"),
        ("input", "tensor_maps", "*i32"), ("scalar", "batch", "i32"), ("scalar", "num_slots", "i32"),
        ("output", "out", "*bf16"), ("output", "checkpoint", "*bf16"), ("output", "cursor", "*i32"),
        ("output", "map_scratch", "*i32"),
    ]  # fmt: skip
    assert [s.value for s in step.scalars] == [InputDim(9, 0), InputDim(0, 0)]
    assert [s.value for s in coef.scalars] == [InputDim(0, 0)]  # num_slots: x_records' dim 0
    assert coef.grid == (8, InputDim(4, 0), 1) and coef.block == (128, 1, 1)
    assert step.grid == (396, 1, 1) and step.block == (160, 1, 1)
    assert cu.COEFFICIENTS.NEW_OUTPUTS(a) == {0: ((InputDim(4, 0), 128, mc.coefficient_floats(16)), "f32")}
    assert cu.STEP.NEW_OUTPUTS(a) == {3: ((396, 2, cu.MAP_WORDS), "i32")}
    assert (coef.constexprs["AOT_ENTRIES"], step.constexprs["AOT_ENTRIES"]) == (1, 2) and coef.constexprs["DT_CODE"] == 1
    assert coef.variant != cu.COEFFICIENTS.kernel_spec(a, _infos(cu.COEFFICIENTS, a, dt_dtype="f32")).variant


def _entries(layer, a, **kw):
    spec = layer.kernel_spec(a, _infos(layer, a, **kw))
    compiled = layer.compile_kernel(spec, 90)
    return spec, compiled, parse_ptx_entries(compiled.ptx)


@pytest.mark.parametrize("batch_hint", [16, 256])
def test_ptx_entries_match_the_launch_lists(batch_hint):
    """NVRTC's PTX (sm_90a) of each layer has its AOT entry and nothing else; the entry takes
    exactly its launch list (.u64 pointers, .u32 scalars); the step entry patches both maps
    (address and slot count) and acquires them; its shared memory is what the kernel indexes."""
    a = _attrs(batch_hint)
    for layer in (cu.COEFFICIENTS, cu.STEP):
        spec, compiled, entries = _entries(layer, a, dt_dtype="bf16")
        assert list(entries) == [layer.ENTRY_NAME] == [compiled.kernel_name]
        entry = entries[compiled.kernel_name]
        assert entry.target == "sm_90a" and compiled.arch == 90 and compiled.compiler.startswith("nvrtc ")
        assert [t for t, _ in entry.params] == ["u32" if p.role == "scalar" else "u64" for p in spec.params]
        assert compiled.hidden_params_removed == 0
    step_body = compiled.ptx[compiled.ptx.index(".entry mamba2_replay_step_aot") :]
    assert step_body.count("tensormap.replace.tile.global_address.global.b1024.b64") == 2  # both maps
    assert step_body.count("tensormap.replace.tile.global_dim.global.b1024.b32") == 2
    assert step_body.count("fence.proxy.tensormap::generic.release.gpu") == 1
    assert step_body.count("fence.proxy.tensormap::generic.acquire.gpu") == 2
    declared = int(re.search(r"mamba2_step_shared_bytes = (\d+);", compiled.ptx).group(1))
    assert compiled.shared_mem == declared == mc.step_shared_bytes(64, 128, 16, 2, 2) <= MAX_SHARED_MEM
    with pytest.raises(ValueError, match="arch is 100; the CUDA step's export is for sm_90a only"):
        cu.STEP.compile_kernel(cu.STEP.kernel_spec(a, _infos(cu.STEP, a)), 100)


def _resources(ptx_defines, arch):
    import os
    import subprocess
    import tempfile

    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "k.cubin")
        with open(path, "wb") as f:
            f.write(compile_program(mc.SOURCE, arch, ptx_defines, "cubin"))
        report = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True).stdout
    return {
        n: (int(r), int(s) + int(loc))
        for n, r, s, loc in re.findall(r"Function (\w+):\s+REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+)", report)
    }


def test_aot_entries_have_the_op_entries_registers():
    """The AOT entries run the op's code with constant strides: no spills, and no more registers
    than the op's entries at the same configuration (Super, bf16, the batch-256 table)."""
    a = _attrs(256)
    for layer, name in ((cu.COEFFICIENTS, "mamba2_replay_coefficients"), (cu.STEP, "mamba2_replay_step")):
        spec = layer.kernel_spec(a, _infos(layer, a))
        aot = _resources(tuple(sorted(spec.constexprs.items())), "sm_90a")
        op = _resources(tuple(sorted((k, v) for k, v in spec.constexprs.items() if k != "AOT_ENTRIES")), "sm_90")
        regs, local = aot[name + "_aot"]
        # the row-range checks may cost a register or two
        assert local == 0 and regs <= op[name][0] + 8, (name, aot, op)


def test_check_inputs_refuse_what_the_kernels_cannot_read():
    a = _attrs()
    infos = list(_infos(cu.STEP, a))
    cu.STEP.check_inputs(a, infos)
    bad = list(infos)
    bad[0] = TensorInfo("f32", 4, (None, 128, 64, 128))
    with pytest.raises(ValueError, match="needs 80928 bytes"):
        cu.STEP.check_inputs(a, bad)
    bad = list(infos)
    bad[9] = TensorInfo("f16", 3, (None, 128, 64))
    with pytest.raises(TypeError, match="mamba2_replay_step_cuda: x is f16; expected bf16"):
        cu.STEP.check_inputs(a, bad)
    bad = list(infos)
    bad[1] = TensorInfo("f32", 3, (None, 128, 40))
    with pytest.raises(ValueError, match=r"coef has shape \(None, 128, 40\); expected \[batch, nheads, 36\]"):
        cu.STEP.check_inputs(a, bad)
    bad = list(infos)
    bad[6] = TensorInfo("i32", 1, (5,))
    bad[9] = TensorInfo("bf16", 3, (6, 128, 64))
    with pytest.raises(ValueError, match="x has batch = 6"):
        cu.STEP.check_inputs(a, bad)
    with pytest.raises(ValueError, match="got 10 inputs; expected 11"):
        cu.STEP.check_inputs(a, infos[:10])
    c = list(_infos(cu.COEFFICIENTS, a))
    cu.COEFFICIENTS.check_inputs(a, c)
    c[cu.COEFFICIENTS.INPUTS.index("dt_records")] = TensorInfo("bf16", 3, (None, 128, 16))
    with pytest.raises(TypeError, match="mamba2_replay_coefficients: dt_records is bf16; expected f32"):
        cu.COEFFICIENTS.check_inputs(a, c)


def _itensor(info):
    names = {"f32": "FLOAT", "bf16": "BF16", "i32": "INT32"}
    return fake_tensorrt.ITensor(names[info.dtype], [-1 if d is None else d for d in info.dims])


def test_register_and_aot_impl_on_the_fake_tensorrt(fresh):
    """Both layers register with AOT only (none without aot_impl); shape inference gives the
    coefficient block [batch, nheads, CF] f32, c_rows like B, map_scratch [grid, 2, 32] i32 and
    the in-place outputs aliased; aot_impl hands TensorRT the entry, the PTX, grid, block,
    shared memory and the scalars (batch, num_slots: the inputs' dynamic dimensions)."""
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    fresh.setattr(tensorrt_plugin, "build_arch", lambda: 90)
    a = _attrs(256)
    for layer in (cu.COEFFICIENTS, cu.STEP):
        reg = trtp.registry[f"replayssm::{layer.PLUGIN}"]
        assert "impl" not in reg and "aot_impl" in reg
        descs = [fake_tensorrt.TensorDesc(_itensor(i).dtype, ["dyn" if d < 0 else d for d in _itensor(i).shape])
                 for i in _infos(layer, a)]  # fmt: skip
        outs = reg["register"](*descs, **a.values())
        for o, i in layer.ALIASED_OUTPUTS.items():
            assert outs[o].aliased_to is descs[i]
        name, ptx, launch, scalars = reg["aot_impl"](*descs, *a.values().values(), (), 0)
        assert name.endswith("_aot") and f".entry {name}" in ptx
        if layer is cu.STEP:
            assert [e.value for e in outs[3].shape_expr] == [396, 2, 32] and outs[3].dtype == "INT32"
            assert (launch.grid_x, launch.block_x, launch.shared_mem) == (396, 160, mc.step_shared_bytes(64, 128, 16, 2, 2))
            assert [s.value for s in scalars] == [descs[9].shape_expr[0], descs[0].shape_expr[0]]
        else:
            assert outs[0].shape_expr[0] is descs[4].shape_expr[0] and outs[0].dtype == "FLOAT"
            assert [e.value for e in outs[0].shape_expr[1:]] == [128, 36]
            assert outs[1].like_of is descs[7]
            assert (launch.grid_x, launch.grid_y, launch.block_x, launch.shared_mem) == (8, descs[4].shape_expr[0], 128, 0)
            assert [s.value for s in scalars] == [descs[0].shape_expr[0]]
    _, trtp = fake_tensorrt.install(fresh, version="10.8.0", aot=False)
    fresh.setattr(tensorrt_plugin, "_REGISTERED", False)
    tensorrt_plugin.register_plugins(aot=False)
    assert "replayssm::mamba2_replay_step_cuda" not in trtp.registry


def test_network_adds_both_layers_and_the_template(fresh):
    """add_mamba2_replay_step_cuda: a [2, 32] i32 constant (the template), layer 1 on the caches
    and step inputs, layer 2 on layer 1's outputs; absent z and D take x's place; the result's
    outputs in the single-layer plugin's order, without arrivals (not used); refused off sm_90."""
    fake_tensorrt.install(fresh)
    fresh.setattr(tensorrt_plugin, "build_arch", lambda: 90)
    fresh.setattr(cu, "map_template", lambda a, state: np.arange(64, dtype=np.int32).reshape(2, 32))
    net = fake_tensorrt.Network()
    a = _attrs()
    t = {}
    for layer in (cu.COEFFICIENTS, cu.STEP):
        t.update({n: _itensor(i) for n, i in zip(layer.INPUTS, _infos(layer, a))})
    r = network.add_mamba2_replay_step_cuda(
        net, t["checkpoint"], t["x_records"], t["dt_records"], t["B_records"], t["cursor"], None, t["x"],
        t["dt"], t["A"], t["B"], t["C"], slot_ids=t["slot_ids"], D=t["D"], dt_bias=t["dt_bias"], name="ssm3",
    )  # fmt: skip
    const, l1, l2 = net.layers
    assert const.shape == (2, 32) and const.weights.dtype == np.int32
    assert (l1.name, l2.name) == ("ssm3/coefficients", "ssm3/step") and l1.aot and l2.aot
    assert l1.call.plugin_id == "replayssm::mamba2_replay_coefficients"
    assert l2.call.plugin_id == "replayssm::mamba2_replay_step_cuda"
    s = dict(zip(cu.STEP.INPUTS, l2.call.tensors))
    assert s["z"] is t["x"] and s["D"] is t["D"] and s["tensor_maps"] is const.get_output(0)
    assert s["coef"] is l1.get_output(0) and s["x_records"] is l1.get_output(2) and s["B_records"] is l1.get_output(4)
    assert l2.call.attrs["has_z"] is False and l2.call.attrs["has_D"] is True
    assert r.layers == (l1, l2) and r.num_outputs == 6
    assert r.get_output(0) is l2.get_output(0) and r.get_output(1) is l2.get_output(1)
    assert r.get_output(3) is l1.get_output(3) and r.get_output(5) is l2.get_output(2)
    f32 = fake_tensorrt.ITensor("FLOAT", t["checkpoint"].shape)
    rest = [t[n] for n in ("x_records", "dt_records", "B_records", "cursor")] + [None]
    rest += [t[n] for n in ("x", "dt", "A", "B", "C")]
    with pytest.raises(ValueError, match="needs 80928 bytes of shared memory"):
        network.add_mamba2_replay_step_cuda(net, f32, *rest, slot_ids=t["slot_ids"])
    fresh.setattr(tensorrt_plugin, "build_arch", lambda: 100)
    with pytest.raises(ValueError, match="the build GPU is sm_100; the CUDA step's export is for sm_90a"):
        network.add_mamba2_replay_step_cuda(net, t["checkpoint"], *rest, slot_ids=t["slot_ids"])
