"""The plugins' entry kernels, launched with exactly the plugin's argument list (TensorRT's order:
inputs, scalars, outputs; aliased caches passed as both), equal the ops' launchers bit for bit
over steps with flushes, also with fp8 checkpoints (their row scales in place) and stochastic
rounding. Both run the same core kernel under TRITON_INTERPRET=1 on the CPU; on the H200 the
exported PTX is checked the same way (tests/gpu/test_plugin_launch_gpu.py; fp32 / bf16 / f16
checkpoints, round to nearest, only)."""

import dataclasses

import pytest
import torch

from plugin_cases import (
    FP8,
    INTERPRET,
    GatedDeltaCase,
    Mamba2Case,
    grid_of,
    info_of,
    launch_arguments,
    output_buffers,
)
from trtllm_replayssm_plugins import gated_delta, mamba2

pytestmark = pytest.mark.skipif(not INTERPRET, reason="CPU interpreter test (the GPU runs the PTX)")

M = mamba2.Mamba2ReplayAttrs
G = gated_delta.GatedDeltaReplayAttrs
# (case, attrs, layer options): Mamba-2 with every flag on, a pipelined two-chunk span and
# masked tails; every flag off with L = 1 (each step a flush, stride_dtr_head = 1 a constexpr);
# GDN and KDA with k_heads < v_heads and a masked head_v_dim tail.
CASES = [
    pytest.param(
        Mamba2Case,
        M(2, 20, 12, 1, 3, True, True, True, True, 8, 2, 2, 1),
        dict(D_per_dim=True),
        id="mamba2-nh2-hd20-ds12-g1-L3-DPzbs-8x2",
    ),
    pytest.param(
        Mamba2Case, M(2, 16, 8, 2, 1, False, False, False, False, 16, 1, 1, 2), {}, id="mamba2-nh2-hd16-ds8-g2-L1-none"
    ),
    pytest.param(GatedDeltaCase, G(1, 2, 16, 20, 3, False, True, 0.25, 16, 2, 2, 1), {}, id="gdn-hk1-hv2-dk16-dv20-L3"),
    pytest.param(GatedDeltaCase, G(1, 2, 12, 16, 3, True, False, 0.3, 16, 1, 1, 2), {}, id="kda-hk1-hv2-dk12-dv16-L3"),
]
# The same layers with an fp8 checkpoint (row scales) and / or stochastic rounding at flush
# (rounding_seed): fp8 + SR, fp8 alone (L = 1: every step a flush), a 16-bit checkpoint + SR.
FP8_SR_CASES = [
    pytest.param(
        Mamba2Case,
        dataclasses.replace(CASES[0].values[1], rounding_seed=11),
        dict(D_per_dim=True, state=FP8),
        id="mamba2-fp8-sr",
    ),
    pytest.param(Mamba2Case, CASES[1].values[1], dict(state=FP8), id="mamba2-fp8-L1"),
    pytest.param(
        Mamba2Case, dataclasses.replace(CASES[1].values[1], rounding_seed=1), dict(state=torch.bfloat16), id="mamba2-bf16-sr1"
    ),
    pytest.param(GatedDeltaCase, dataclasses.replace(CASES[2].values[1], rounding_seed=7), dict(state=FP8), id="gdn-fp8-sr"),
    pytest.param(GatedDeltaCase, CASES[3].values[1], dict(state=FP8), id="kda-fp8"),
    pytest.param(
        GatedDeltaCase,
        dataclasses.replace(CASES[3].values[1], rounding_seed=2**31 - 1),
        dict(state=torch.float16),
        id="kda-f16-sr",
    ),
]
# KDA with bf16 d / k records: its per-channel g records are f16 (the caches' g_record_dtype), and
# the entry kernel reads and writes them through f16 pointers.
RECORD_CASES = [
    pytest.param(GatedDeltaCase, CASES[3].values[1], dict(records=torch.bfloat16), id="kda-bf16-records"),
]


def _launch_entry(case, a, inputs, out, args=None, outputs=None):
    family = case.family()
    spec = family.kernel_spec(a, [info_of(t) for t in inputs])
    args = launch_arguments(family, spec, inputs, out, outputs) if args is None else args
    family.ENTRY[grid_of(spec, inputs)](
        **dict(zip([p.name for p in spec.params], args)), **spec.constexprs, num_warps=spec.num_warps
    )
    return spec


def _layer(case, a, num_slots, seed, state=torch.float32, records=torch.float32, **kw):
    """A layer's cache (records in ``records``: the cases' act_dtype) and its clone."""
    g = torch.Generator().manual_seed(seed)
    layer = case.layer(a, num_slots=num_slots, state_dtype=state, act_dtype=records, device="cpu", generator=g, **kw)
    return layer, {k: v.clone() for k, v in layer.items()}, g


def _bits(t):
    return t.view(torch.uint8) if t.dtype == FP8 else t


@pytest.mark.parametrize("case,a,kw", CASES + FP8_SR_CASES + RECORD_CASES)
def test_replay_step_plugin_entry_equals_launcher(case, a, kw):
    layer, ref, g = _layer(case, a, 7, 1, **kw)
    slot_ids = torch.tensor([5, -1, 0, 3], dtype=torch.int32)
    fp8 = layer["checkpoint"].dtype == FP8
    assert ("checkpoint_scale" in layer) is fp8
    flushes = 0
    for _ in range(2 * a.L + 1):
        step = case.step(a, 4, torch.float32, "cpu", generator=g)
        out_p = torch.full_like(case.out_like(step), 42.0)
        out_r = out_p.clone()
        flushes += int((layer["cursor"][slot_ids[slot_ids >= 0].long()] == a.L - 1).sum())
        inputs = case.inputs(layer, step, slot_ids)
        case.family().check_inputs(a, [info_of(t) for t in inputs])  # the plugin takes the core's caches
        outputs = output_buffers(case.family(), inputs, out_p)
        spec = _launch_entry(case, a, inputs, out_p, outputs=outputs)
        case.launch_kernel(a, ref, step, slot_ids, out_r)
        assert torch.equal(out_p, out_r)
        assert torch.all(out_p[1] == 42.0), "padding row written"
        for name in ref:  # the caches, and an fp8 checkpoint's scales
            assert torch.equal(_bits(layer[name]), _bits(ref[name])), name
        # checkpoint_scale's output: the scales themselves with fp8, else a buffer nothing writes
        assert (outputs[7] is layer.get("checkpoint_scale")) if fp8 else torch.all(outputs[7] == 7)
        assert (spec.constexprs["HAS_SCALE"], spec.constexprs["SR"]) == (fp8, a.rounding_seed >= 0)
    assert flushes >= 3
    assert torch.all(layer["arrivals"] == 0)


@pytest.mark.parametrize("case,a,kw", [CASES[0], CASES[3]])
def test_replay_step_plugin_entry_skips_out_of_range_rows(case, a, kw):
    """Slot ids >= num_slots and live rows with a cursor outside [0, L) read and write nothing;
    the other rows are unaffected (equal to the launcher with those rows as padding)."""
    layer, _, g = _layer(case, a, 6, 2, **kw)
    layer["cursor"][4] = a.L + 3
    layer["cursor"][1] = -2
    ref = {k: v.clone() for k, v in layer.items()}
    slot_ids = torch.tensor([2, 6, 4, 1, 100, 0], dtype=torch.int32)
    as_padding = torch.tensor([2, -1, -1, -1, -1, 0], dtype=torch.int32)
    step = case.step(a, 6, torch.float32, "cpu", generator=g)
    out_p = torch.full_like(case.out_like(step), 42.0)
    out_r = out_p.clone()
    _launch_entry(case, a, case.inputs(layer, step, slot_ids), out_p)
    case.launch_kernel(a, ref, step, as_padding, out_r)
    assert torch.equal(out_p, out_r)
    assert torch.all(out_p[1:5] == 42.0)
    for name in case.family().INPUTS[:6]:
        assert torch.equal(layer[name], ref[name]), name


@pytest.mark.parametrize(
    "case,a,kw,swap",
    [
        (Mamba2Case, CASES[0].values[1], CASES[0].values[2], ("head_dim", "d_state")),
        (GatedDeltaCase, CASES[2].values[1], {}, ("head_v_dim", "head_k_dim")),
        (Mamba2Case, FP8_SR_CASES[0].values[1], FP8_SR_CASES[0].values[2], ("stride_sc_slot", "stride_sc_head")),
        (GatedDeltaCase, FP8_SR_CASES[4].values[1], FP8_SR_CASES[4].values[2], ("stride_sc_slot", "stride_sc_head")),
    ],
)
def test_replay_step_plugin_entry_teeth_misordered_scalars(case, a, kw, swap):
    """Swapping two scalars of the launch list must change the result."""
    layer, ref, g = _layer(case, a, 4, 3, **kw)
    slot_ids = torch.tensor([1, 3], dtype=torch.int32)
    step = case.step(a, 2, torch.float32, "cpu", generator=g)
    inputs = case.inputs(layer, step, slot_ids)
    family = case.family()
    spec = family.kernel_spec(a, [info_of(t) for t in inputs])
    out_p = torch.zeros_like(case.out_like(step))
    out_r = out_p.clone()
    args = launch_arguments(family, spec, inputs, out_p)
    names = [p.name for p in spec.params]
    i, j = names.index(swap[0]), names.index(swap[1])
    args[i], args[j] = args[j], args[i]
    _launch_entry(case, a, inputs, out_p, args)
    case.launch_kernel(a, ref, step, slot_ids, out_r)
    assert not torch.equal(out_p, out_r)


@pytest.mark.parametrize("case,a,kw", [FP8_SR_CASES[0], FP8_SR_CASES[3], FP8_SR_CASES[5]])
def test_replay_step_plugin_entry_teeth_rounding_seed(case, a, kw):
    """A flush with another sr_seed in the launch list stores other checkpoint bits than the
    launcher with the attribute's seed, and the launcher without a seed others again: the seed
    reaches the kernel, and SR is on. Outputs do not depend on the flush's rounding."""
    layer, ref, g = _layer(case, a, 6, 4, **kw)
    nearest = {k: v.clone() for k, v in layer.items()}
    slot_ids = torch.tensor([a.L - 1, 2 * a.L - 1], dtype=torch.int32)  # cursor L-1: both flush
    assert torch.all(layer["cursor"][slot_ids.long()] == a.L - 1)
    step = case.step(a, 2, torch.float32, "cpu", generator=g)
    inputs = case.inputs(layer, step, slot_ids)
    family = case.family()
    spec = family.kernel_spec(a, [info_of(t) for t in inputs])
    out_p = torch.zeros_like(case.out_like(step))
    out_r, out_n = out_p.clone(), out_p.clone()
    args = launch_arguments(family, spec, inputs, out_p)
    args[[p.name for p in spec.params].index("sr_seed")] += 1
    _launch_entry(case, a, inputs, out_p, args)
    case.launch_kernel(a, ref, step, slot_ids, out_r)
    case.launch_kernel(dataclasses.replace(a, rounding_seed=-1), nearest, step, slot_ids, out_n)
    assert torch.equal(out_p, out_r) and torch.equal(out_r, out_n)
    rows = slot_ids.long()
    assert not torch.equal(_bits(layer["checkpoint"][rows]), _bits(ref["checkpoint"][rows]))
    assert not torch.equal(_bits(nearest["checkpoint"][rows]), _bits(ref["checkpoint"][rows]))
