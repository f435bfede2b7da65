"""TensorRT's launch of the Mamba-2 CUDA step's two AOT plugin layers (plugins/mamba2_cuda.py),
reproduced with the CUDA driver API on an sm_90 GPU.

Each layer's PTX is loaded with cuModuleLoadData and launched with cuLaunchKernel exactly as its
launch parameters say (grid, block, shared memory, one slot per plugin argument in TensorRT's
order; aliased outputs are their inputs' buffers), layer 1 then layer 2, with the template maps
that the network helper encodes. Outputs and caches must equal the op's CUDA launcher at the
same configuration bit for bit (the same code with constant strides, without programmatic
launches) over steps with flushes, a padding row, rows out of range and untouched unused
slots; every CTA's patched tensor maps must equal the maps the op encodes on the host for the
real checkpoint, byte for byte.
"""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "plugins"))
from cuda_driver import Driver
from plugin_cases import Mamba2Case, info_of

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def driver():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the CUDA step's export is for sm_90a")
    torch.zeros(1, device="cuda")
    return Driver()


def _grid(spec, inputs):
    return [g if isinstance(g, int) else inputs[g.input].shape[g.axis] for g in spec.grid]


def _args(layer, spec, tensors, outputs):
    """One argument per launch parameter: input tensors, scalar values, output tensors."""
    ins = [tensors[n] for n in layer.INPUTS]
    values = {s.name: ins[s.value.input].shape[s.value.axis] for s in spec.scalars}
    return ins + [values[p.name] for p in spec.params if p.role == "scalar"] + outputs


@pytest.mark.parametrize(
    "batch,L,flags,D_per_dim",
    [
        (16, 16, dict(has_z=True), False),
        (256, 16, dict(), False),
        (5, 8, dict(has_D=False, has_dt_bias=False), False),
        (64, 4, dict(), False),
        (64, 16, dict(), True),
        (3, 16, dict(), False),  # 384 units on 396 CTAs: 12 CTAs with none
        (2, 8, dict(has_z=True), True),
    ],
    ids=["b16-L16-z", "b256-L16", "b5-L8-noD-nobias", "b64-L4", "b64-L16-Ddim", "b3-L16", "b2-L8-z-Ddim"],
)
def test_cuda_layers_driver_launch_equal_the_op(driver, batch, L, flags, D_per_dim):
    """Rows: live slots, then (as the batch allows) a padding row, a slot id past num_slots and a
    slot whose cursor is out of range: the last two are padding rows for the plugin (the op is
    given -1 there); nothing of theirs is read or written."""
    from trtllm_replayssm.kernels.mamba2_replay_cuda import CudaStepConfig, coefficient_floats, launch_mamba2_replay_step_cuda
    from trtllm_replayssm.kernels.nvrtc import checkpoint_tensor_maps
    from trtllm_replayssm_plugins import mamba2_cuda as cu

    a = cu.Mamba2CudaAttrs.for_layer(128, 64, 128, 8, L, state_dtype="bf16", batch_hint=batch, **flags)
    g = torch.Generator().manual_seed(batch + L)
    num_slots = batch + 4
    layer = Mamba2Case.layer(a, num_slots=num_slots, state_dtype=torch.bfloat16, act_dtype=torch.bfloat16,
                             device="cuda", generator=g, D_per_dim=D_per_dim)  # fmt: skip
    bad = num_slots - 1  # its cursor out of range
    layer["cursor"][bad] = 123456
    ref = {k: v.clone() for k, v in layer.items()}
    extras = [-1, num_slots + 5, bad][: min(3, batch - 1)]
    live = torch.randperm(num_slots - 1, generator=g)[: batch - len(extras)].to(torch.int32)
    slots = torch.cat([live, torch.tensor(extras, dtype=torch.int32)]).cuda()
    op_slots = torch.cat([live, torch.full((len(extras),), -1, dtype=torch.int32)]).cuda()
    template = torch.from_numpy(cu.map_template(a, "bf16")).cuda()
    scratch = torch.zeros((a.grid, 2, cu.MAP_WORDS), dtype=torch.int32, device="cuda")
    op_cfg = CudaStepConfig(stages=2, min_ctas=a.min_ctas, pdl=True, coef_warps=a.coef_warps)
    fns, specs = {}, {}
    flushes = 0
    for step_index in range(2 * L + 2):
        step = Mamba2Case.step(a, batch, torch.bfloat16, "cuda", generator=g)
        x = step["x"]
        t = {**layer, **step, "slot_ids": slots, "tensor_maps": template}
        t.setdefault("z", x)
        t.setdefault("D", x)
        t.setdefault("dt_bias", layer["A"])
        coef = torch.full((batch, a.nheads, coefficient_floats(L)), float("nan"), device="cuda")
        c_rows = torch.zeros((batch, a.ngroups, a.d_state), dtype=torch.bfloat16, device="cuda")
        t.update(coef=coef, c_rows=c_rows)
        out_p = torch.full_like(x, 42.0)
        out_r = out_p.clone()
        scratch.zero_()
        flushes += int((layer["cursor"][live.cuda().long()] == L - 1).sum())
        launches = (
            (cu.COEFFICIENTS, [coef, c_rows, layer["x_records"], layer["dt_records"], layer["B_records"]]),
            (cu.STEP, [out_p, layer["checkpoint"], layer["cursor"], scratch]),
        )
        for plugin, outputs in launches:
            if plugin.PLUGIN not in fns:
                spec = specs[plugin.PLUGIN] = plugin.kernel_spec(a, [info_of(t[n]) for n in plugin.INPUTS])
                compiled = plugin.compile_kernel(spec, 90)
                fns[plugin.PLUGIN] = (driver.load(compiled.ptx, compiled.kernel_name), compiled.shared_mem)
                if driver.has_param_info:
                    sizes = driver.param_sizes(fns[plugin.PLUGIN][0])
                    assert sizes == [4 if p.role == "scalar" else 8 for p in spec.params], plugin.PLUGIN
            spec = specs[plugin.PLUGIN]
            fn, smem = fns[plugin.PLUGIN]
            driver.launch(fn, _grid(spec, [t[n] for n in plugin.INPUTS]), spec.block, smem,
                          _args(plugin, spec, t, outputs), spec.params)  # fmt: skip
        launch_mamba2_replay_step_cuda(
            *(ref[n] for n in ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals")),
            x, step["dt"], ref["A"], step["B"], step["C"], slot_ids=op_slots, D=ref.get("D"), z=step.get("z"),
            dt_bias=ref.get("dt_bias"), out=out_r, config=op_cfg,
        )  # fmt: skip
        torch.cuda.synchronize()
        assert torch.equal(out_p, out_r), f"step {step_index}: y differs by {(out_p.float() - out_r.float()).abs().max()}"
        assert torch.all(out_p[len(live) :] == 42.0), "a padding or out-of-range row was written"
        for name in ("checkpoint", "x_records", "dt_records", "B_records", "cursor"):
            assert torch.equal(layer[name], ref[name]), f"step {step_index}: {name}"
        load, store = checkpoint_tensor_maps(layer["checkpoint"], a.head_dim)
        assert scratch.cpu().numpy().tobytes() == (load + store) * a.grid, "a CTA's maps differ from the host's"
    assert flushes >= 2
