"""Speculative decoding on the GPU at the models' geometries (Mamba-2: Nemotron-3; GDN:
Qwen3.5; KDA: Kimi Linear): long verify + commit runs with random acceptance against the
float64 serial oracle, CUDA graphs, baselines, teeth."""

from functools import partial

import pytest
import torch

import gated_delta_cases as gd
from gated_delta_cases import DeltaFamily, DeltaGeometry
from mamba2_cases import ACT_TOL, DTYPES, STATE_TOL, Geometry, Mamba2Family
from spec_cases import (
    commit_with_op,
    delta_serial_with_op,
    delta_snapshot_verify_with_op,
    delta_verify_with_launcher,
    delta_verify_with_op,
    draw,
    drive_baseline,
    drive_spec,
    drive_verify_vs_serial,
    make_window,
    mamba2_decode_with_op,
    mamba2_serial_with_op,
    mamba2_snapshot_verify_with_op,
    mamba2_verify_with_op,
    no_commit,
    snapshot_commit_with_op,
)
from trtllm_replayssm.kernels.gated_delta_verify_cuda import DeltaVerifyCudaConfig
from trtllm_replayssm.ops import SnapshotCache, replay_commit, spec_buffer_len

pytestmark = pytest.mark.gpu

SUPER = Geometry(128, 64, 128, 8)  # Nemotron-3-Super, TP=1
NANO = Geometry(96, 80, 128, 8)  # Nemotron-3-Nano-4B
QWEN35_4B = DeltaGeometry(16, 32, 128, 128)
QWEN35_122B = DeltaGeometry(16, 64, 128, 128)
KIMI_LINEAR = DeltaGeometry(32, 32, 128, 128)
ROWS = ["all", "bonus", "mixed", "short", "mixed", "all"]


@pytest.mark.parametrize(
    "g, T, dtypes",
    [
        pytest.param(SUPER, 4, ("f32", "bf16"), id="super-T4-sf32-abf16"),
        pytest.param(SUPER, 4, ("f32", "f32"), id="super-T4-sf32-af32"),
        pytest.param(SUPER, 4, ("bf16", "bf16"), id="super-T4-sbf16-abf16"),
        pytest.param(SUPER, 2, ("f32", "bf16"), id="super-T2-sf32-abf16"),
        pytest.param(SUPER, 8, ("f16", "f16"), id="super-T8-sf16-af16"),
        pytest.param(NANO, 4, ("f32", "bf16"), id="nano-T4-sf32-abf16"),
    ],
)
def test_mamba2_replay_verify_nemotron_long_run(g, T, dtypes):
    """64 verify + commit steps from empty buffers (B = 16): accepted-token outputs, draft
    outputs and every flushed checkpoint against the float64 serial recurrence; non-flush
    checkpoints bit-identical; padding rows and unused slots untouched."""
    s, a = dtypes
    worst = drive_spec(
        Mamba2Family(g, with_z=True),
        mamba2_verify_with_op,
        commit_with_op,
        L=spec_buffer_len(16, T),
        T=T,
        state_dtype=DTYPES[s],
        act_dtype=DTYPES[a],
        device="cuda",
        steps=64,
        policies=ROWS,
        num_slots=11,
        n_padding=2,
    )
    print(f"{g} T={T} s{s}-a{a}: {worst}")
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s], worst


@pytest.mark.parametrize(
    "per_channel, g, T, dtypes",
    [
        pytest.param(False, QWEN35_122B, 4, ("f32", "bf16"), id="gdn-qwen3.5-122b-T4-sf32-abf16"),
        pytest.param(False, QWEN35_122B, 4, ("bf16", "bf16"), id="gdn-qwen3.5-122b-T4-sbf16-abf16"),
        pytest.param(False, QWEN35_4B, 2, ("f32", "f32"), id="gdn-qwen3.5-4b-T2-sf32-af32"),
        pytest.param(True, KIMI_LINEAR, 4, ("f32", "bf16"), id="kda-kimi-linear-T4-sf32-abf16"),
        pytest.param(True, KIMI_LINEAR, 8, ("f16", "f16"), id="kda-kimi-linear-T8-sf16-af16"),
    ],
)
def test_gated_delta_replay_verify_long_run(per_channel, g, T, dtypes):
    """As the Mamba-2 long run; the records (d, k̂) are in the activation dtype, so a flushed
    checkpoint carries the activation tolerance too (as in standard decode)."""
    s, a = dtypes
    worst = drive_spec(
        DeltaFamily(g, per_channel=per_channel),
        delta_verify_with_op,
        commit_with_op,
        L=spec_buffer_len(16, T),
        T=T,
        state_dtype=DTYPES[s],
        act_dtype=DTYPES[a],
        device="cuda",
        steps=64,
        policies=ROWS,
        num_slots=11,
        n_padding=2,
    )
    print(f"{g} T={T} s{s}-a{a}: {worst}")
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < gd.ACT_TOL[a] + gd.STATE_TOL[s], worst
    assert worst["ckpt"] < gd.STATE_TOL[s] + gd.ACT_TOL[a], worst


def test_mamba2_replay_verify_gpu_teeth_corrupt_record():
    def corrupt(cache, step):
        if step == 5:
            slot = int(torch.nonzero(cache.cursor > 0)[0])
            cache.x_records[slot, 0, 0, 0] += 100.0

    with pytest.raises(AssertionError):
        worst = drive_spec(
            Mamba2Family(SUPER),
            mamba2_verify_with_op,
            commit_with_op,
            L=spec_buffer_len(16, 4),
            T=4,
            state_dtype=torch.float32,
            act_dtype=torch.float32,
            device="cuda",
            steps=8,
            policies=["mixed", "bonus"],
            num_slots=4,
            corrupt=corrupt,
        )
        assert worst["y"] < ACT_TOL["f32"] + STATE_TOL["f32"], worst


GRAPH_CASES = [
    pytest.param(Mamba2Family(SUPER, with_z=True), mamba2_verify_with_op, 1, id="mamba2-super-T1"),
    pytest.param(Mamba2Family(SUPER, with_z=True), mamba2_verify_with_op, 4, id="mamba2-super-T4"),
    pytest.param(DeltaFamily(QWEN35_122B, per_channel=False), delta_verify_with_op, 4, id="gdn-qwen3.5-122b-T4"),
    pytest.param(DeltaFamily(KIMI_LINEAR, per_channel=True), delta_verify_with_op, 4, id="kda-kimi-linear-T4"),
    pytest.param(  # KDA in one launch (the op's rule takes it only from 6 units a multiprocessor)
        DeltaFamily(KIMI_LINEAR, per_channel=True),
        partial(delta_verify_with_launcher, kernel="cuda", config=DeltaVerifyCudaConfig(128, 2, 1, fused=True)),
        4,
        id="kda-kimi-linear-T4-one-launch",
    ),
]


@pytest.mark.parametrize("fam, verify, T", GRAPH_CASES)
def test_spec_cuda_graph_equals_eager(fam, verify, T):
    """One captured verify + commit, replayed 4L times with new inputs, token counts and
    accepted counts (flush and non-flush rows mixed, a padding row), equals eager bit for bit."""
    L = spec_buffer_len(16, T)
    p = fam.make_params("cuda")
    slots = torch.tensor([7, -1, 2, 0, 5], dtype=torch.int32, device="cuda")
    caches = []
    for _ in range(2):
        c = fam.allocate(9, L, torch.float32, torch.bfloat16, "cuda")
        torch.manual_seed(3)
        c.checkpoint.normal_()
        c.cursor.copy_(torch.arange(9, dtype=torch.int32) * 3 % L)
        caches.append(c)
    steps = []
    for _ in range(4 * L):
        drawn = [draw("short", T) for _ in range(5)]
        steps.append(
            (
                make_window(fam, 5, T, torch.bfloat16, "cuda"),
                torch.tensor([d[0] for d in drawn], dtype=torch.int32, device="cuda"),
                torch.tensor([d[1] for d in drawn], dtype=torch.int32, device="cuda"),
            )
        )
    static_win = {k: None if v is None else v.clone() for k, v in steps[0][0].items()}
    static_n, static_a = steps[0][1].clone(), steps[0][2].clone()
    out_g = torch.full_like(static_win[fam.out_key], 42.0)
    out_e = out_g.clone()

    def step(c, win, n, a, out):
        verify(c, win, p, slots, n, out)
        replay_commit(c, slots, a)

    warm = caches[0].clone()
    step(warm, static_win, static_n, static_a, out_g.clone())  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(caches[0], static_win, static_n, static_a, out_g)
    flushes = 0
    for win, n, a in steps:
        for k, v in static_win.items():
            if v is not None:
                v.copy_(win[k])
        static_n.copy_(n)
        static_a.copy_(a)
        before = caches[1].cursor.clone()
        graph.replay()
        step(caches[1], win, n, a, out_e)
        torch.cuda.synchronize()
        live = slots >= 0
        flushes += int((before[slots[live].long()] + n[live] > L - 1).sum())
        assert torch.equal(out_g, out_e)
    assert flushes >= 3
    for name, t in caches[0].tensors().items():
        assert torch.equal(t, getattr(caches[1], name)), name


@pytest.mark.parametrize("baseline", ["snapshot", "serial"])
def test_mamba2_baselines_nemotron(baseline):
    T = 4
    holder = SnapshotCache.allocate(9, (SUPER.nheads, SUPER.head_dim, SUPER.d_state), T, dtype=torch.float32, device="cuda")
    if baseline == "snapshot":
        verify, commit, rows = mamba2_snapshot_verify_with_op, snapshot_commit_with_op, ROWS
    else:
        verify, commit, rows = mamba2_serial_with_op, no_commit, ["all", "short_all", "short_all"]
    worst = drive_baseline(
        Mamba2Family(SUPER, with_z=True),
        holder,
        verify,
        commit,
        T=T,
        act_dtype=torch.bfloat16,
        device="cuda",
        steps=12,
        policies=rows,
        n_padding=2,
    )
    assert worst < ACT_TOL["bf16"] + 4 * STATE_TOL["f32"], worst


@pytest.mark.parametrize(
    "per_channel, g",
    [pytest.param(False, QWEN35_122B, id="gdn-qwen3.5-122b"), pytest.param(True, KIMI_LINEAR, id="kda-kimi-linear")],
)
@pytest.mark.parametrize("baseline", ["snapshot", "serial"])
def test_gated_delta_baselines(per_channel, g, baseline):
    T = 4
    holder = SnapshotCache.allocate(9, (g.v_heads, g.head_v_dim, g.head_k_dim), T, dtype=torch.float32, device="cuda")
    if baseline == "snapshot":
        verify, commit, rows = delta_snapshot_verify_with_op, snapshot_commit_with_op, ROWS
    else:
        verify, commit, rows = delta_serial_with_op, no_commit, ["all", "short_all", "short_all"]
    worst = drive_baseline(
        DeltaFamily(g, per_channel=per_channel),
        holder,
        verify,
        commit,
        T=T,
        act_dtype=torch.bfloat16,
        device="cuda",
        steps=12,
        policies=rows,
        n_padding=2,
    )
    assert worst < gd.ACT_TOL["bf16"] + 4 * gd.STATE_TOL["f32"], worst


@pytest.mark.parametrize("state", ["bf16", "f16"])
@pytest.mark.parametrize(
    "g",
    [
        pytest.param(Geometry(8, 32, 16, 1), id="nh8-hd32-ds16-g1"),
        pytest.param(Geometry(24, 48, 64, 2), id="nh24-hd48-ds64-g2"),
        pytest.param(Geometry(8, 80, 128, 4), id="nh8-hd80-ds128-g4"),
        pytest.param(Geometry(6, 40, 48, 3), id="nh6-hd40-ds48-g3"),
        pytest.param(NANO, id="nano"),
    ],
)
@pytest.mark.parametrize("rows", [3, 40], ids=["batch3", "batch40"])
def test_mamba2_replay_verify_16bit_no_less_accurate_than_serial(g, state, rows):
    """On the kernels: a 16-bit checkpoint and activations, T = 4, L = 9, 500 steps of
    random acceptance: verify's worst output error against float64 is no larger than that of
    conventional decode steps (the decode kernel, state in the same dtype) on the same inputs,
    and its flushed checkpoints err no more than the conventional state. Batch 3 and 40 take
    different launch configurations (one tile per program; pipelined tiles). CPU reference
    (tests/spec/test_mamba2_spec_reference.py): verify 0.36-0.49 of the serial error."""
    dt = DTYPES[state]
    worst = drive_verify_vs_serial(
        Mamba2Family(g),
        mamba2_verify_with_op,
        commit_with_op,
        mamba2_decode_with_op,
        L=9,
        T=4,
        state_dtype=dt,
        act_dtype=dt,
        device="cuda",
        steps=500,
        rows=rows,
    )
    print(f"{g} s{state}-a{state} batch {rows}: {worst}")
    assert worst["flushes"] >= 100 * rows, worst
    assert worst["y_verify"] <= worst["y_serial"], worst
    assert worst["ckpt"] <= worst["state"], worst
