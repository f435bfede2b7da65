"""The CUDA C++ GDN and KDA verify (kernels/cuda/gated_delta_verify_step.cu) on an sm_90 GPU, forced through
``kernel="cuda"``: long verify + commit runs against the float64 serial recurrence (every window
output, every flushed checkpoint, cursors, pending, padding rows, unused slots and poisoned record
positions), over geometries, T and both checkpoint dtypes; the same step as the Triton kernels';
the route; refusals. (CUDA-graph replay: tests/gpu/test_spec_gpu.py's graph cases, through the
op, which routes GDN and KDA here on sm_90.)"""

from functools import partial

import pytest
import torch

import gated_delta_cases as gd
from gated_delta_cases import DeltaFamily, DeltaGeometry
from spec_cases import (
    commit_with_launcher,
    delta_decode_with_op,
    delta_verify_with_launcher,
    draw,
    drive_spec,
    drive_verify_vs_serial,
    make_window,
)
from trtllm_replayssm.kernels import gated_delta_verify_cuda as vc
from trtllm_replayssm.kernels.gated_delta_verify import gated_delta_verify_kernel
from trtllm_replayssm.reference.spec import VERIFY_FLUSHED
from trtllm_replayssm.ops import spec_buffer_len

pytestmark = pytest.mark.gpu

BF16_PARITY = 1.25  # tests/spec/test_gated_delta_spec_reference.py says why not 1

QWEN35_4B = DeltaGeometry(16, 32, 128, 128)
QWEN35_122B = DeltaGeometry(16, 64, 128, 128)
ODD = DeltaGeometry(2, 6, 64, 48)  # 3 value heads a key head, 64-wide keys, 3 consumer warps
WIDE = DeltaGeometry(1, 2, 256, 32)  # 256-wide keys (8 a lane), 2 consumer warps
KIMI = DeltaGeometry(32, 32, 128, 128)  # Kimi Linear KDA
KDA_ODD = DeltaGeometry(3, 3, 64, 48)
ROWS = ["all", "bonus", "mixed", "short", "mixed", "all"]
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
CUDA = partial(delta_verify_with_launcher, kernel="cuda")
TRITON = partial(delta_verify_with_launcher, kernel="triton")


class UnitKeys(DeltaFamily):
    """GDN whose queries and keys arrive with unit norm, run without the kernels' L2 norm (raw
    normal keys, of norm ~sqrt(head_k_dim), make the delta rule diverge to inf)."""

    def make_step(self, batch, act_dtype, device) -> dict:
        step = super().make_step(batch, act_dtype, device)
        for name in ("q", "k"):
            x = step[name].float()
            step[name] = (x / x.norm(dim=-1, keepdim=True)).to(act_dtype)
        return step


@pytest.mark.parametrize(
    "g, T, B, state, l2norm",
    [
        pytest.param(KIMI, 4, 16, "f32", True, id="kda-kimi-T4-f32"),
        pytest.param(KIMI, 4, 16, "bf16", True, id="kda-kimi-T4-bf16"),
        pytest.param(KIMI, 1, 16, "bf16", True, id="kda-kimi-T1-bf16"),
        pytest.param(KIMI, 8, 16, "f32", True, id="kda-kimi-T8-f32"),
        pytest.param(KIMI, 8, 16, "bf16", False, id="kda-kimi-T8-bf16-nonorm"),
        pytest.param(KDA_ODD, 3, 5, "f32", True, id="kda-odd-T3-B5-f32"),
        pytest.param(QWEN35_122B, 4, 16, "f32", True, id="122b-T4-f32"),
        pytest.param(QWEN35_122B, 4, 16, "bf16", True, id="122b-T4-bf16"),
        pytest.param(QWEN35_122B, 1, 16, "f32", True, id="122b-T1-f32"),
        pytest.param(QWEN35_122B, 2, 16, "bf16", True, id="122b-T2-bf16"),
        pytest.param(QWEN35_122B, 8, 16, "f32", True, id="122b-T8-f32"),
        pytest.param(QWEN35_122B, 8, 16, "bf16", True, id="122b-T8-bf16"),
        pytest.param(QWEN35_4B, 3, 13, "f32", True, id="4b-T3-B13-f32"),
        pytest.param(QWEN35_4B, 4, 16, "bf16", False, id="4b-T4-bf16-nonorm"),
        pytest.param(ODD, 2, 5, "bf16", True, id="odd-T2-B5-bf16"),
        pytest.param(WIDE, 5, 24, "f32", True, id="wide-T5-B24-f32"),
    ],
)
def test_cuda_verify_long_run_against_float64(g, T, B, state, l2norm):
    """64 verify + commit steps from empty buffers with random acceptance, num_tokens and padding
    rows (tests/spec_cases.drive_spec checks every step), at the launch rule's configuration (8
    rows: KDA in two launches)."""
    _long_run(g, T, B, state, l2norm, CUDA)


@pytest.mark.parametrize(
    "g, T, B, state, rows",
    [
        pytest.param(KIMI, 4, 16, "f32", 128, id="kda-kimi-T4-f32"),
        pytest.param(KIMI, 2, 16, "bf16", 128, id="kda-kimi-T2-bf16"),
        pytest.param(KDA_ODD, 3, 5, "f32", 48, id="kda-odd-T3-B5-f32"),
    ],
)
def test_kda_one_launch_long_run_against_float64(g, T, B, state, rows):
    """The same long runs with KDA in one launch (the step kernel's own coefficient warps; the rule
    takes it from 6 units a multiprocessor, more rows than these runs have)."""
    _long_run(g, T, B, state, True, partial(CUDA, config=vc.DeltaVerifyCudaConfig(rows, 2, 1, fused=True)))


def _long_run(g, T, B, state, l2norm, verify):
    per_channel = g in (KIMI, KDA_ODD)
    family = DeltaFamily(g, per_channel=per_channel) if l2norm else UnitKeys(g, per_channel=per_channel, use_qk_l2norm=False)
    worst = drive_spec(
        family,
        verify,
        commit_with_launcher,
        L=spec_buffer_len(B, T),
        T=T,
        state_dtype=DTYPES[state],
        act_dtype=torch.bfloat16,
        device="cuda",
        steps=64,
        policies=ROWS,
        num_slots=11,
        n_padding=2,
    )
    print(f"{g} T={T} B={B} {state}: {worst}")
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < gd.ACT_TOL["bf16"] + gd.STATE_TOL[state], worst
    assert worst["ckpt"] < gd.STATE_TOL[state] + gd.ACT_TOL["bf16"], worst


def _two_spread_caches(fam, T, state, all_tokens):
    """Two equal caches (9 slots, L = 16 + T) with spread cursors (flush and non-flush rows),
    finite records below each cursor and poison past it, an 8-row window with a padding row and,
    unless ``all_tokens``, fewer tokens in some rows: (caches, window, params, slot_ids,
    num_tokens)."""
    L = spec_buffer_len(16, T)
    p = fam.make_params("cuda")
    slots = torch.tensor([7, -1, 2, 0, 5, 3, 8, 1], dtype=torch.int32, device="cuda")
    caches = []
    for _ in range(2):
        c = fam.allocate(9, L, DTYPES[state], torch.bfloat16, "cuda")
        torch.manual_seed(11)
        c.checkpoint.normal_()
        fam.poison(c)
        c.g_records.uniform_(-0.4, -0.01)
        c.cursor.copy_(torch.tensor([0, L - 1, L - T, L - T - 1, 3, L - 2, 1, L - 1, 2], dtype=torch.int32))
        caches.append(c)
    # Finite history where it is read (records below each cursor): the poison stays past it.
    for c in caches:
        for slot, w in enumerate(c.cursor.tolist()):
            c.d_records[slot, :, :w] = torch.randn_like(c.d_records[slot, :, :w].float()).to(c.d_records.dtype)
            k = torch.randn_like(c.k_records[slot, :, :w].float())
            c.k_records[slot, :, :w] = (k / k.norm(dim=-1, keepdim=True)).to(c.k_records.dtype)
        c.d_records.copy_(caches[0].d_records)
        c.k_records.copy_(caches[0].k_records)
    n = None if all_tokens else torch.tensor([draw("short", T)[0] for _ in range(8)], dtype=torch.int32, device="cuda")
    return caches, make_window(fam, 8, T, torch.bfloat16, "cuda"), p, slots, n


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("all_tokens", [False, True], ids=["num_tokens", "every-row-T"])
@pytest.mark.parametrize("state", ["f32", "bf16"])
@pytest.mark.parametrize("T", [2, 4, 8])
def test_cuda_verify_equals_the_triton_kernels(T, state, all_tokens, per_channel):
    """One verify on two copies of a cache with spread cursors (flush and non-flush rows, a padding
    row, fewer tokens in some rows, or num_tokens None: every row T): outputs and flushed
    checkpoints to fp32 rounding, records (k̂ and d to a bf16 rounding step), g records, cursors and
    pending equal."""
    fam = DeltaFamily(KIMI, per_channel=True) if per_channel else DeltaFamily(QWEN35_122B, per_channel=False)
    caches, win, p, slots, n = _two_spread_caches(fam, T, state, all_tokens)
    outs = [torch.full_like(win["v"], 42.0) for _ in range(2)]
    for c, out, verify in zip(caches, outs, (CUDA, TRITON)):
        verify(c, win, p, slots, n, out)
    torch.cuda.synchronize()
    a, b = caches
    assert torch.equal(a.cursor, b.cursor) and torch.equal(a.pending, b.pending)
    scale = b.checkpoint.float().abs().max()
    tol = 2e-5 if state == "f32" else 1e-2
    assert (a.checkpoint.float() - b.checkpoint.float()).abs().max() <= tol * scale
    assert torch.equal(a.g_records, b.g_records)
    for name in ("d_records", "k_records"):
        x, y = getattr(a, name).float(), getattr(b, name).float()
        finite = torch.isfinite(y)
        assert torch.equal(finite, torch.isfinite(x)), name
        assert ((x - y).abs() <= 1e-2 * y.abs() + 1e-2)[finite].all(), name
    y_scale = outs[1].float().abs().max()
    assert (outs[0].float() - outs[1].float()).abs().max() <= 2e-2 * y_scale
    assert torch.equal(outs[0] == 42.0, outs[1] == 42.0)  # the same outputs untouched


@pytest.mark.parametrize("all_tokens", [False, True], ids=["num_tokens", "every-row-T"])
@pytest.mark.parametrize(
    "T, state, two_launches",
    [
        pytest.param(4, "f32", vc.DeltaVerifyCudaConfig(128, 2, 1), id="T4-f32"),
        pytest.param(2, "f32", vc.DeltaVerifyCudaConfig(128, 2, 1), id="T2-f32"),
        pytest.param(4, "bf16", None, id="T4-bf16-64-rows"),  # the rule: two launches of 64-row units
    ],
)
def test_kda_verify_in_one_launch_equals_two_launches(T, state, two_launches, all_tokens):
    """KDA's verify with the step kernel's own coefficient warps (``fused``, the rule for Kimi
    Linear's fp32 T <= 4 from batch 25) against the coefficient launch then the step kernel, on two copies of a
    cache with spread cursors: the same arithmetic, so outputs, flushed checkpoints, records,
    cursors and pending are equal bit for bit."""
    fam = DeltaFamily(KIMI, per_channel=True)
    caches, win, p, slots, n = _two_spread_caches(fam, T, state, all_tokens)
    fused = vc.DeltaVerifyCudaConfig(128, 2, 1, fused=True)
    assert fused.fused and not (two_launches or vc.delta_verify_cuda_config(128, 128, 16 + T, T, 2, True)).fused
    outs = [torch.full_like(win["v"], 42.0) for _ in range(2)]
    for c, out, cfg in zip(caches, outs, (fused, two_launches)):
        CUDA(c, win, p, slots, n, out, config=cfg)
    torch.cuda.synchronize()
    a, b = caches
    assert torch.equal(outs[0], outs[1])
    for name in ("checkpoint", "d_records", "k_records", "g_records", "cursor", "pending"):
        x, y = getattr(a, name), getattr(b, name)
        assert torch.equal(
            x.view(torch.uint8) if x.is_floating_point() else x, y.view(torch.uint8) if y.is_floating_point() else y
        ), name
    assert (a.cursor >= VERIFY_FLUSHED).any() and (a.cursor < VERIFY_FLUSHED).any()  # flush and non-flush rows ran


@pytest.mark.parametrize(
    "per_channel, g, rows",
    [
        pytest.param(False, DeltaGeometry(2, 4, 64, 32), 3, id="gdn-small-batch3"),
        pytest.param(False, DeltaGeometry(2, 4, 64, 32), 40, id="gdn-small-batch40"),
        pytest.param(False, QWEN35_4B, 3, id="gdn-qwen3.5-4b-batch3"),
        pytest.param(True, DeltaGeometry(2, 2, 64, 32), 3, id="kda-small-batch3"),
        pytest.param(True, DeltaGeometry(2, 2, 64, 32), 40, id="kda-small-batch40"),
        pytest.param(True, KIMI, 3, id="kda-kimi-batch3"),
    ],
)  # batch 40 on the small geometries only: Kimi Linear's took over 130 s on an H200 (the float64 oracle)
def test_cuda_verify_bf16_about_as_accurate_as_serial_bf16(per_channel, g, rows):
    """On the kernels, as tests/spec/test_gated_delta_spec_reference.py on the reference: a bf16
    checkpoint, bf16 activations and records, T = 4, L = 9, 300 steps of random acceptance:
    verify's outputs and flushed checkpoints err against float64 within BF16_PARITY of
    conventional bf16 decode steps (the decode kernel) on the same inputs."""
    worst = drive_verify_vs_serial(
        DeltaFamily(g, per_channel=per_channel),
        CUDA,
        commit_with_launcher,
        delta_decode_with_op,
        L=9,
        T=4,
        state_dtype=torch.bfloat16,
        act_dtype=torch.bfloat16,
        device="cuda",
        steps=300,
        rows=rows,
    )
    print(f"{g} batch {rows}: {worst}")
    assert worst["flushes"] >= 60 * rows, worst
    assert worst["y_verify"] <= BF16_PARITY * worst["y_serial"], worst
    assert worst["ckpt"] <= BF16_PARITY * worst["state"], worst


def test_the_op_routes_gdn_and_kda_to_cuda_and_fp16_checkpoints_and_gqa_kda_to_triton():
    gdn = DeltaFamily(QWEN35_122B, per_channel=False)
    kda = DeltaFamily(DeltaGeometry(32, 32, 128, 128), per_channel=True)
    kda_gqa = DeltaFamily(DeltaGeometry(16, 32, 128, 128), per_channel=True)
    for fam, state, want in ((gdn, torch.float32, "cuda"), (gdn, torch.bfloat16, "cuda"), (gdn, torch.float16, "triton"),
                             (kda, torch.float32, "cuda"), (kda, torch.bfloat16, "cuda"), (kda_gqa, torch.float32, "triton")):  # fmt: skip
        c = fam.allocate(4, 20, state, torch.bfloat16, "cuda")
        win = make_window(fam, 2, 4, torch.bfloat16, "cuda")
        got = gated_delta_verify_kernel(c.checkpoint, c.d_records, c.k_records, c.g_records, win["q"], win["k"], win["v"],
                                        win["g"])  # fmt: skip
        assert got == want, (fam.name, state)


def test_cuda_verify_refuses_what_it_cannot_run():
    p = DeltaFamily(QWEN35_122B, per_channel=False).make_params("cuda")
    slots = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
    kda = DeltaFamily(DeltaGeometry(16, 32, 128, 128), per_channel=True)
    c = kda.allocate(4, 32, torch.float32, torch.bfloat16, "cuda")
    win = make_window(kda, 2, 4, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="kda_replay_verify \\(CUDA\\): KDA with 2 value heads per key head"):
        CUDA(c, win, p, slots, None, torch.empty_like(win["v"]))
    gdn = DeltaFamily(QWEN35_122B, per_channel=False)
    c16 = gdn.allocate(4, 32, torch.float16, torch.bfloat16, "cuda")
    win = make_window(gdn, 2, 4, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="gdn_replay_verify \\(CUDA\\): checkpoint torch.float16"):
        CUDA(c16, win, p, slots, None, torch.empty_like(win["v"]))
    c = gdn.allocate(4, 32, torch.float32, torch.bfloat16, "cuda")
    win9 = make_window(gdn, 2, 9, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="T 9; the CUDA verify takes T <= 8"):
        CUDA(c, win9, p, slots, None, torch.empty_like(win9["v"]))
