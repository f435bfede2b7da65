"""TensorRT's launch of the AOT plugin, reproduced with the CUDA driver API on the GPU.

The PTX that ``aot_impl`` hands TensorRT is loaded with cuModuleLoadData and launched with
cuLaunchKernel exactly as the plugin's launch parameters say: grid and block from the launch
plan, its shared memory, and one kernel-parameter slot per plugin argument in TensorRT's order
(input pointers, int32 scalars, output pointers; the aliased cache outputs are the input
buffers). Outputs and cache updates must equal the op's launcher at the plugin's launch
configuration bit for bit (the op and the plugin both run one launch per step) over steps with
flushes, padding rows and an out-of-range slot id: Mamba-2 (``replayssm::mamba2_replay_step``),
GDN and KDA (``replayssm::gated_delta_replay_step``).

The driver API is reached through ctypes on libcuda (no extra package; ``cuda_driver.Driver``,
shared with test_block_plugin_launch_gpu.py): that is the call TensorRT makes, with an explicit
``void**`` argument array, and cuFuncGetParamInfo (CUDA >= 12.4) confirms the loaded entry has
exactly the plugin's parameter count and sizes.
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins"))
from cuda_driver import Driver
from op_checks import bits
from plugin_cases import GatedDeltaCase, Mamba2Case, grid_of, info_of, launch_arguments
# (importing plugin_cases makes trtllm_replayssm_plugins importable from a checkout)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def driver():
    torch.zeros(1, device="cuda")  # make torch's primary context current
    return Driver()


# Mamba-2: Nemotron-3-Super geometry (TP=1) at the three launch regimes of the op's heuristic
# (the batch picks the configuration, so the op runs the same one); a Nemotron-3-Nano-4B-like
# head_dim 80 with per-dim D and z; every flag off at L = 1 (each step a flush).
# GDN: Qwen3.5-like (16 key, 32 value heads, 128 x 128, TP=1); KDA: Kimi-Linear-like (32 x 32
# heads, 128 x 128) with fp32 records.
CASES = [
    pytest.param(
        Mamba2Case, (128, 64, 128, 8, 16), dict(has_z=True), 4, "f32", "bf16", dict(), id="mamba2-nh128-hd64-L16-b4-f32-bf16"
    ),
    pytest.param(Mamba2Case, (128, 64, 128, 8, 16), {}, 16, "f32", "bf16", dict(), id="mamba2-nh128-hd64-L16-b16-f32-bf16"),
    pytest.param(
        Mamba2Case,
        (128, 64, 128, 8, 16),
        dict(has_z=True),
        64,
        "bf16",
        "bf16",
        dict(),
        id="mamba2-nh128-hd64-L16-b64-bf16-bf16",
    ),
    pytest.param(
        Mamba2Case,
        (96, 80, 128, 8, 8),
        dict(has_z=True),
        40,
        "f32",
        "f16",
        dict(D_per_dim=True),
        id="mamba2-nh96-hd80-L8-b40-f32-f16-Pz",
    ),
    pytest.param(
        Mamba2Case,
        (8, 64, 64, 8, 1),
        dict(has_D=False, has_dt_bias=False, dt_softplus=False),
        8,
        "f32",
        "f32",
        dict(),
        id="mamba2-nh8-hd64-L1-b8-none",
    ),
    pytest.param(
        GatedDeltaCase,
        (16, 32, 128, 128, 16),
        dict(per_channel=False),
        6,
        "f32",
        "bf16",
        dict(),
        id="gdn-hk16-hv32-L16-b6-f32-bf16",
    ),
    pytest.param(
        GatedDeltaCase,
        (16, 32, 128, 128, 16),
        dict(per_channel=False),
        48,
        "bf16",
        "bf16",
        dict(),
        id="gdn-hk16-hv32-L16-b48-bf16-bf16",
    ),
    pytest.param(
        GatedDeltaCase,
        (32, 32, 128, 128, 8),
        dict(per_channel=True),
        24,
        "f32",
        "bf16",
        dict(),
        id="kda-hk32-hv32-L8-b24-f32-bf16",
    ),
    # fp8 checkpoints (their row scales an input and an aliased output) and stochastic rounding.
    pytest.param(Mamba2Case, (128, 64, 128, 8, 16), dict(has_z=True), 16, "fp8", "bf16", dict(), id="mamba2-L16-b16-fp8-bf16"),
    pytest.param(
        Mamba2Case,
        (128, 64, 128, 8, 8),
        dict(has_z=True, rounding_seed=7),
        16,
        "fp8",
        "bf16",
        dict(),
        id="mamba2-L8-b16-fp8-bf16-sr",
    ),
    pytest.param(
        Mamba2Case, (128, 64, 128, 8, 8), dict(rounding_seed=11), 12, "bf16", "bf16", dict(), id="mamba2-L8-b12-bf16-sr"
    ),
    pytest.param(
        GatedDeltaCase,
        (16, 32, 128, 128, 8),
        dict(per_channel=False, rounding_seed=5),
        6,
        "fp8",
        "bf16",
        dict(),
        id="gdn-L8-b6-fp8-bf16-sr",
    ),
    pytest.param(
        GatedDeltaCase, (32, 32, 128, 128, 8), dict(per_channel=True), 8, "fp8", "bf16", dict(), id="kda-L8-b8-fp8-bf16"
    ),
]
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "fp8": torch.float8_e4m3fn}


@pytest.mark.parametrize("case,geometry,flags,batch,state,act,layer_kw", CASES)
def test_replay_step_ptx_driver_launch_equals_op(driver, case, geometry, flags, batch, state, act, layer_kw):
    from trtllm_replayssm_plugins import compile_ptx

    family = case.family()
    a = family.ATTRS.for_layer(*geometry, state_dtype=state, batch_hint=batch, **flags)
    g = torch.Generator().manual_seed(batch)
    num_slots = batch + 7
    layer = case.layer(
        a, num_slots=num_slots, state_dtype=DT[state], act_dtype=DT[act], device="cuda", generator=g, **layer_kw
    )
    ref = {k: v.clone() for k, v in layer.items()}
    cache_names = family.INPUTS[:6] + (("checkpoint_scale",) if state == "fp8" else ())
    live = torch.randperm(num_slots, generator=g)[: batch - 2].to(torch.int32)
    # Rows: live slots, a padding row, and an out-of-range slot id (the op's validation would
    # refuse it, so the op sees a padding row there).
    plugin_slots = torch.cat([live, torch.tensor([-1, num_slots + 5], dtype=torch.int32)]).cuda()
    op_slots = torch.cat([live, torch.tensor([-1, -1], dtype=torch.int32)]).cuda()

    major, minor = torch.cuda.get_device_capability()
    fn = compiled = spec = None
    flushes = 0
    for step_index in range(2 * a.L + 2):
        step = case.step(a, batch, DT[act], "cuda", generator=g)
        inputs = case.inputs(layer, step, plugin_slots)
        if fn is None:
            spec = family.kernel_spec(a, [info_of(t) for t in inputs])
            compiled = compile_ptx(spec, family.ENTRY, 10 * major + minor)
            fn = driver.load(compiled.ptx, compiled.kernel_name)
            if driver.has_param_info:
                sizes = driver.param_sizes(fn)
                assert sizes == [4 if p.role == "scalar" else 8 for p in spec.params], compiled.file_name
        out_p = torch.full_like(case.out_like(step), 42.0)
        out_r = out_p.clone()
        flushes += int((layer["cursor"][live.cuda().long()] == a.L - 1).sum())
        driver.launch(
            fn,
            grid_of(spec, inputs),
            spec.block,
            compiled.shared_mem,
            launch_arguments(family, spec, inputs, out_p),
            spec.params,
        )
        case.launch_kernel(a, ref, step, op_slots, out_r)
        torch.cuda.synchronize()
        assert torch.equal(out_p, out_r), f"step {step_index}: output differs by {(out_p.float() - out_r.float()).abs().max()}"
        assert torch.all(out_p[-2:] == 42.0), "padding / out-of-range rows written"
        for name in cache_names:
            assert torch.equal(bits(layer[name]), bits(ref[name])), f"step {step_index}: {name}"
    assert flushes >= 2
    assert torch.all(layer["arrivals"] == 0)
