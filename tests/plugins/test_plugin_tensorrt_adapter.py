"""The ``tensorrt.plugin`` registration against a stand-in TensorRT (tests/plugins/fake_tensorrt.py):
import guard, version gates, schemas TensorRT checks, shape inference with aliasing, and the AOT
translation of the launch plan. TensorRT itself cannot be installed here."""

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
)


@pytest.fixture
def fresh(monkeypatch):
    monkeypatch.setattr(tensorrt_plugin, "_REGISTERED", False)
    return monkeypatch


def _descs(fake=False, **dims_override):
    dims = {
        n: tuple("dyn" if d is None else d for d in i.dims)
        for n, i in zip(mamba2.INPUTS, mamba2.tensor_infos(A, state_dtype="f32", act_dtype="bf16"))
    }
    dims.update(dims_override)
    return [fake_tensorrt.TensorDesc(DTYPES[n], dims[n], fake=fake) for n in mamba2.INPUTS]


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
    assert d["num_outputs"] == len(mamba2.OUTPUTS) == 7
    assert {"register", "aot_impl", "impl"} <= set(d)
    d = trtp.registry["replayssm::gated_delta_replay_step"]
    assert d["inputs"] == list(gated_delta.INPUTS)
    assert d["attrs"] == list(gated_delta.GatedDeltaReplayAttrs.__dataclass_fields__)
    assert d["num_outputs"] == 7 and {"register", "aot_impl", "impl"} <= set(d)


def test_register_fn_aliases_the_caches_and_checks_shapes(fresh):
    _, trtp = fake_tensorrt.install(fresh)
    tensorrt_plugin.register_plugins()
    register = trtp.registry[PLUGIN_ID]["register"]
    for fake in (True, False):  # output-dtype pass (ranks only), then shape pass
        descs = _descs(fake=fake)
        outs = register(*descs, **A.values())
        assert len(outs) == 7
        assert outs[0].like_of is descs[mamba2.INPUTS.index("x")] and outs[0].aliased_to is None
        for o, i in mamba2.ALIASED_OUTPUTS.items():
            assert outs[o].aliased_to is descs[i], mamba2.OUTPUTS[o]
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

    def fake_compile(spec, fn, arch):
        compiled.append((spec, fn, arch))
        return types.SimpleNamespace(kernel_name="entry", ptx="PTX", shared_mem=4321)

    fresh.setattr(tensorrt_plugin, "compile_ptx", fake_compile)
    fresh.setattr(tensorrt_plugin, "build_arch", lambda: 90)
    descs = _descs()
    name, ptx, launch, scalars = trtp.registry[PLUGIN_ID]["aot_impl"](*descs, *A.values().values(), (), 0)
    ((spec, fn, arch),) = compiled
    assert (name, ptx, fn, arch) == ("entry", "PTX", mamba2.ENTRY, 90)
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


@pytest.mark.parametrize(
    "case,a",
    [
        (Mamba2Case, mamba2.Mamba2ReplayAttrs(4, 8, 6, 2, 3, True, False, True, True, 8, 1, 1, 1)),
        (GatedDeltaCase, gated_delta.GatedDeltaReplayAttrs(1, 2, 8, 6, 3, True, True, 0.5, 16, 1, 1, 1)),
        (GatedDeltaCase, gated_delta.GatedDeltaReplayAttrs(2, 2, 8, 6, 3, False, False, 0.5, 16, 1, 1, 1)),
    ],
    ids=["mamba2", "kda", "gdn"],
)
def test_run_op_equals_the_public_op(case, a):
    """The JIT path's call into the custom op equals the public op (CPU reference, float64)."""
    g = torch.Generator().manual_seed(0)
    layer = case.layer(a, num_slots=5, state_dtype=torch.float64, act_dtype=torch.float64, device="cpu", generator=g)
    ref = {k: v.clone() for k, v in layer.items()}
    slot_ids = torch.tensor([4, -1, 1], dtype=torch.int32)
    for _ in range(4):
        step = {k: v.double() for k, v in case.step(a, 3, torch.float64, "cpu", generator=g).items()}
        out, y = torch.zeros_like(case.out_like(step)), torch.zeros_like(case.out_like(step))
        case.family().run_op(a, case.inputs(layer, step, slot_ids), out)
        case.public_op(a, ref, step, slot_ids, y)
        assert torch.equal(out, y)
        for n in case.family().INPUTS[:6]:
            assert torch.equal(layer[n], ref[n]), n


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


def test_example_engine_script_skips_with_its_reason():
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available():
        pytest.skip("TensorRT and a GPU are here: the example runs for real")
    proc = subprocess.run(
        [sys.executable, f"{plugin_cases.ROOT}/examples/trt_engine_mamba2.py"],
        env=plugin_cases.subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("skipped: ")
