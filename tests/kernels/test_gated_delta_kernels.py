"""GDN / KDA Triton kernels against the references: under TRITON_INTERPRET=1 on the CPU (small
odd shapes that exercise every mask, GQA), natively on a GPU."""

import pytest
import torch

from triton_mode import INTERPRET
from op_checks import assert_fp8_flush_matches
from gated_delta_cases import ACT_TOL, STATE_TOL, DeltaFamily, DeltaGeometry, make_step, replay_with_launcher
from mamba2_cases import DTYPES
from replay_driver import as_f64, drive_replay, rel_err
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache
from trtllm_replayssm.kernels.common import LaunchConfig
from trtllm_replayssm.kernels.gated_delta_decode import launch_gated_delta_decode_step
from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step
from trtllm_replayssm.reference.gated_delta import gated_delta_decode_step_ref

pytestmark = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()), reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
G = DeltaGeometry(2, 4, 12, 20) if INTERPRET else DeltaGeometry(2, 6, 80, 96)
# bf16 checkpoints are GPU-only (the interpreter truncates fp32 -> bf16; see the Mamba-2 tests).
PAIRS = (
    [("f32", "f32"), ("f32", "bf16"), ("f16", "f16"), ("fp8", "f32")]
    if INTERPRET
    else [(s, a) for s in ("f32", "bf16", "f16") for a in ("f32", "bf16", "f16")] + [("fp8", "bf16")]
)
FAMILY_IDS = {False: "gdn", True: "kda"}


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
@pytest.mark.parametrize("dtypes", PAIRS, ids=lambda d: f"s{d[0]}-a{d[1]}")
@pytest.mark.parametrize("L", [1, 4] if INTERPRET else [1, 8, 17])
def test_gated_delta_replay_step_kernel_matches_recurrence(per_channel, dtypes, L):
    s, a = dtypes
    fam = DeltaFamily(G, per_channel=per_channel, use_qk_l2norm=L != 1)
    worst = drive_replay(
        fam, replay_with_launcher, L, DTYPES[s], DTYPES[a], DEVICE, steps=2 * L + 2, batch=3, num_slots=7, n_padding=2
    )
    assert worst["flushes"] >= 3
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s] + (ACT_TOL[a] if L > 1 else 0.0), worst


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_fp32_records_with_bf16_activations(per_channel):
    """fp32 records keep d and k̂ unrounded: the window adds no activation rounding."""
    fam = DeltaFamily(G, per_channel=per_channel, record_dtype=torch.float32)
    worst = drive_replay(fam, replay_with_launcher, 4, torch.float32, torch.bfloat16, DEVICE, steps=8, batch=3, num_slots=5)
    assert worst["y"] < ACT_TOL["bf16"] and worst["ckpt"] < 2e-5, worst


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
@pytest.mark.parametrize(
    "dtypes", [("f32", "f32"), ("f16", "f16")] + ([] if INTERPRET else [("bf16", "bf16")]), ids=lambda d: f"s{d[0]}-a{d[1]}"
)
def test_gated_delta_decode_step_kernel_matches_reference(per_channel, dtypes):
    s, a = dtypes
    state = torch.randn(6, G.v_heads, G.head_v_dim, G.head_k_dim, device=DEVICE).to(DTYPES[s])
    ref_state = state.clone()
    state64 = as_f64(state).clone()
    spare = state[[1, 4]].clone()
    slots = torch.tensor([3, -1, 0, 5, 2], dtype=torch.int32, device=DEVICE)
    live = (slots >= 0).cpu()
    for _ in range(6):
        inp = make_step(G, 5, DTYPES[a], DEVICE, per_channel=per_channel)
        kw = dict(slot_ids=slots, scale=0.2, use_qk_l2norm=True)
        out = torch.full_like(inp["v"], 42.0)
        launch_gated_delta_decode_step(state, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], out=out, **kw)
        ref = gated_delta_decode_step_ref(
            ref_state, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], out=torch.empty_like(out), **kw
        )
        assert torch.all(out[1] == 42.0)
        assert rel_err(out[live.to(DEVICE)], ref[live.to(DEVICE)]) < ACT_TOL[a]
        if dtypes == ("f32", "f32"):
            o64 = DeltaFamily.oracle_step(state64, dict(scale=0.2, use_qk_l2norm=True), inp, slots)
            assert rel_err(out[live.to(DEVICE)], o64[live]) < ACT_TOL[a]
    assert torch.equal(state[[1, 4]], spare)
    assert rel_err(state, ref_state) < {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[s]


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_step_kernel_launch_config_invisible(per_channel):
    """One tile per program or a pipelined loop over the head: the same outputs and caches."""
    cls = KDAReplayCache if per_channel else GDNReplayCache
    cfgs = [LaunchConfig(16, 1), LaunchConfig(32, 4), LaunchConfig(16, 2, chunks=-(-G.head_v_dim // 16), num_stages=3)]
    caches = []
    for _ in cfgs:
        torch.manual_seed(1)
        c = cls.allocate(6, G.k_heads, G.v_heads, G.head_k_dim, G.head_v_dim, 4, record_dtype=torch.float32, device=DEVICE)
        c.checkpoint.normal_()
        c.cursor.copy_(torch.tensor([0, 1, 2, 3, 0, 1], dtype=torch.int32))
        caches.append(c)
    slots = torch.tensor([2, -1, 0, 3, 5], dtype=torch.int32, device=DEVICE)
    for _ in range(5):  # every live row appends and flushes
        inp = make_step(G, 5, torch.float32, DEVICE, per_channel=per_channel)
        ys = [
            launch_gated_delta_replay_step(
                c.checkpoint,
                c.d_records,
                c.k_records,
                c.g_records,
                c.cursor,
                c.arrivals,
                inp["q"],
                inp["k"],
                inp["v"],
                inp["g"],
                inp["beta"],
                slot_ids=slots,
                scale=0.3,
                use_qk_l2norm=True,
                out=torch.full_like(inp["v"], 42.0),
                config=cfg,
            )
            for c, cfg in zip(caches, cfgs)
        ]
        for y in ys[1:]:
            assert torch.all(y[1] == 42.0)
            assert rel_err(y, ys[0]) < 1e-6
    for c in caches[1:]:
        for name in ("cursor", "arrivals", "g_records"):
            assert torch.equal(getattr(c, name), getattr(caches[0], name)), name
        # k̂ and d depend on the order of fp32 reductions (the warps per program).
        for name in ("checkpoint", "d_records", "k_records"):
            assert rel_err(getattr(c, name), getattr(caches[0], name)) < 1e-6, name


def test_replay_launch_config_follows_the_devices_multiprocessors():
    """Programs per head follow the multiprocessor count (8 one-warp programs per multiprocessor
    wanted): 132 (H200) keeps 64 heads in one span of 8 tiles; 4 (a CPU) walks them in 8 chunks."""
    from trtllm_replayssm.kernels.gated_delta_common import (
        CPU_MULTIPROCESSORS,
        gated_delta_launch_config,
        multiprocessor_count,
    )

    assert multiprocessor_count(torch.device("cpu")) == CPU_MULTIPROCESSORS
    h200 = gated_delta_launch_config("replay_step", 128, 128, 64, torch.float32, multiprocessors=132)
    cpu = gated_delta_launch_config("replay_step", 128, 128, 64, torch.float32, multiprocessors=4)
    assert (h200.chunks, h200.num_stages) == (1, 1) and (cpu.chunks, cpu.num_stages) == (8, 3)


@pytest.mark.parametrize("per_channel", [False, True], ids=FAMILY_IDS.get)
def test_gated_delta_replay_kernel_fp8_codes_equal_the_reference_and_rounding_seed_replays(per_channel):
    """An fp8 checkpoint: the kernel's flushed codes and row scales equal the reference's bit for
    bit over steps with flushes (unused slots keep theirs); a rounding seed stores the same bits
    for the same seed and other bits for another (bf16 here too). On a GPU, bit for bit becomes
    within a spacing (``op_checks.assert_fp8_flush_matches``), and the reference starts each step
    from the kernel's cache (its d records too), so that a code one spacing off does not
    compound."""
    from gated_delta_cases import replay_with_reference

    fam = DeltaFamily(G, per_channel=per_channel)
    p = fam.make_params(DEVICE)
    c = fam.allocate(5, 4, torch.float8_e4m3fn, torch.float32, DEVICE)
    c.admit(torch.arange(5, device=DEVICE), 3 * torch.randn(5, *c.checkpoint.shape[1:], device=DEVICE))
    ref, admitted = c.clone(), c.checkpoint_scale.clone()
    slots = torch.tensor([2, -1, 0, 3], dtype=torch.int32, device=DEVICE)
    for _ in range(9):
        inp = fam.make_step(4, torch.float32, DEVICE)
        y = replay_with_launcher(c, inp, p, slots, torch.full_like(inp["v"], 42.0), kernel="triton")
        y_ref = replay_with_reference(ref, inp, p, slots, torch.zeros_like(inp["v"]))
        live = (slots >= 0).to(DEVICE)
        assert torch.all(y[1] == 42.0) and rel_err(y[live], y_ref[live]) < 1e-5
        assert_fp8_flush_matches(c.checkpoint, c.checkpoint_scale, ref.checkpoint, ref.checkpoint_scale,
                                 exact=INTERPRET, signed_zeros=False)  # fmt: skip
        if not INTERPRET:
            ref.copy_(c)
    assert torch.equal(c.checkpoint_scale[[1, 4]], admitted[[1, 4]])
    assert (c.checkpoint_scale[[0, 2, 3]] != admitted[[0, 2, 3]]).all()
    for state in (torch.float8_e4m3fn, torch.bfloat16):
        base = fam.allocate(3, 4, state, torch.float32, DEVICE)
        base.admit(torch.arange(3, device=DEVICE), torch.randn(3, *base.checkpoint.shape[1:], device=DEVICE))
        base.cursor.fill_(3)
        inp = fam.make_step(3, torch.float32, DEVICE)
        bits = []
        for seed in (5, 5, 6):
            run = base.clone()
            replay_with_launcher(run, inp, p, torch.arange(3, dtype=torch.int32, device=DEVICE),
                                 torch.empty_like(inp["v"]), kernel="triton", rounding_seed=seed)  # fmt: skip
            bits.append(run.checkpoint.view(torch.uint8).clone())
        assert torch.equal(bits[0], bits[1]) and not torch.equal(bits[0], bits[2])
