"""The plugin's entry kernel, launched with exactly the plugin's argument list (TensorRT's order:
inputs, scalars, outputs; aliased caches passed as both), equals the op's launcher bit for bit
over steps with flushes. Both run the same core kernel under TRITON_INTERPRET=1 on the CPU; on
the H200 the exported PTX is checked the same way (tests/gpu/test_plugin_launch_gpu.py)."""
import pytest
import torch

from plugin_cases import INTERPRET, grid_of, info_of, launch_arguments, make_layer, make_step
from trtllm_replayssm.kernels.common import LaunchConfig
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step
from trtllm_replayssm_plugins import mamba2

pytestmark = pytest.mark.skipif(not INTERPRET, reason="CPU interpreter test (the GPU runs the PTX)")

CACHE = ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals")

# (attrs, D per head_dim): every flag on with a pipelined two-chunk span and masked tails;
# every flag off with L = 1 (each step a flush; stride_dtr_head = 1 becomes a constexpr).
CASES = [
    pytest.param(mamba2.Mamba2ReplayAttrs(4, 20, 12, 2, 3, True, True, True, True, 8, 2, 2, 1), True,
                 id="nh4-hd20-ds12-g2-L3-Dzbs-8x2"),
    pytest.param(mamba2.Mamba2ReplayAttrs(2, 16, 8, 2, 1, False, False, False, False, 16, 1, 1, 2), False,
                 id="nh2-hd16-ds8-g2-L1-none"),
]


def _inputs(layer, step, slot_ids):
    tensors, _ = mamba2.plugin_inputs({**layer, **step, "slot_ids": slot_ids})
    return tensors


def _launch_entry(a, inputs, out, args=None):
    spec = mamba2.kernel_spec(a, [info_of(t) for t in inputs])
    names = [p.name for p in spec.params]
    args = launch_arguments(spec, inputs, out) if args is None else args
    mamba2.ENTRY[grid_of(spec, inputs)](**dict(zip(names, args)), **spec.constexprs,
                                         num_warps=spec.num_warps)
    return spec


def _launch_op_kernel(a, layer, step, slot_ids, out):
    cfg = LaunchConfig(a.block_head_dim, a.num_warps, a.chunks, a.num_stages)
    launch_mamba2_replay_step(*(layer[n] for n in CACHE), step["x"], step["dt"], layer["A"], step["B"],
                              step["C"], slot_ids=slot_ids, D=layer.get("D"), z=step.get("z"),
                              dt_bias=layer.get("dt_bias"), dt_softplus=a.dt_softplus, out=out,
                              config=cfg)


def _clone(layer):
    return {k: v.clone() for k, v in layer.items()}


@pytest.mark.parametrize("a,D_per_dim", CASES)
def test_mamba2_replay_step_plugin_entry_equals_launcher(a, D_per_dim):
    g = torch.Generator().manual_seed(1)
    layer = make_layer(a, num_slots=7, state_dtype=torch.float32, act_dtype=torch.float32,
                       device="cpu", D_per_dim=D_per_dim, generator=g)
    ref = _clone(layer)
    slot_ids = torch.tensor([5, -1, 0, 3], dtype=torch.int32)
    flushes = 0
    for _ in range(2 * a.L + 1):
        step = make_step(a, 4, torch.float32, "cpu", generator=g)
        out_p, out_r = torch.full_like(step["x"], 42.0), torch.full_like(step["x"], 42.0)
        flushes += int((layer["cursor"][slot_ids[slot_ids >= 0].long()] == a.L - 1).sum())
        _launch_entry(a, _inputs(layer, step, slot_ids), out_p)
        _launch_op_kernel(a, ref, step, slot_ids, out_r)
        assert torch.equal(out_p, out_r)
        assert torch.all(out_p[1] == 42.0), "padding row written"
        for name in CACHE:
            assert torch.equal(layer[name], ref[name]), name
    assert flushes >= 3
    assert torch.all(layer["arrivals"] == 0)


def test_mamba2_replay_step_plugin_entry_skips_out_of_range_rows():
    """Slot ids >= num_slots and live rows with a cursor outside [0, L) read and write nothing;
    the other rows are unaffected (equal to the launcher with those rows as padding)."""
    a = CASES[0].values[0]
    g = torch.Generator().manual_seed(2)
    layer = make_layer(a, num_slots=6, state_dtype=torch.float32, act_dtype=torch.float32,
                       device="cpu", generator=g)
    layer["cursor"][4] = a.L + 3          # corrupt: out of [0, L)
    layer["cursor"][1] = -2
    ref = _clone(layer)
    slot_ids = torch.tensor([2, 6, 4, 1, 100, 0], dtype=torch.int32)
    as_padding = torch.tensor([2, -1, -1, -1, -1, 0], dtype=torch.int32)
    step = make_step(a, 6, torch.float32, "cpu", generator=g)
    out_p, out_r = torch.full_like(step["x"], 42.0), torch.full_like(step["x"], 42.0)
    _launch_entry(a, _inputs(layer, step, slot_ids), out_p)
    _launch_op_kernel(a, ref, step, as_padding, out_r)
    assert torch.equal(out_p, out_r)
    assert torch.all(out_p[1:5] == 42.0)
    for name in CACHE:
        assert torch.equal(layer[name], ref[name]), name


def test_mamba2_replay_step_plugin_entry_teeth_misordered_scalars():
    """Swapping two scalars of the launch list (head_dim <-> d_state) must change the result."""
    a = CASES[0].values[0]
    g = torch.Generator().manual_seed(3)
    layer = make_layer(a, num_slots=4, state_dtype=torch.float32, act_dtype=torch.float32,
                       device="cpu", D_per_dim=True, generator=g)
    ref = _clone(layer)
    slot_ids = torch.tensor([1, 3], dtype=torch.int32)
    step = make_step(a, 2, torch.float32, "cpu", generator=g)
    inputs = _inputs(layer, step, slot_ids)
    spec = mamba2.kernel_spec(a, [info_of(t) for t in inputs])
    out_p, out_r = torch.zeros_like(step["x"]), torch.zeros_like(step["x"])
    args = launch_arguments(spec, inputs, out_p)
    names = [p.name for p in spec.params]
    i, j = names.index("head_dim"), names.index("d_state")
    args[i], args[j] = args[j], args[i]
    _launch_entry(a, inputs, out_p, args)
    _launch_op_kernel(a, ref, step, slot_ids, out_r)
    assert not torch.equal(out_p, out_r)
