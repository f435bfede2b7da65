"""Speculative decoding on the GPU at Nemotron-3 geometries: long verify + commit runs with
random acceptance against the float64 serial oracle, CUDA graphs, baselines, teeth."""
import pytest
import torch

from mamba2_cases import ACT_TOL, DTYPES, STATE_TOL, Geometry, Mamba2Family, make_params
from spec_cases import (commit_with_op, draw, drive_baseline, drive_spec, make_window,
                        mamba2_serial_with_op, mamba2_snapshot_verify_with_op,
                        mamba2_verify_with_op, no_commit, snapshot_commit_with_op)
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len

pytestmark = pytest.mark.gpu

SUPER = Geometry(128, 64, 128, 8)   # Nemotron-3-Super, TP=1
NANO = Geometry(96, 80, 128, 8)     # Nemotron-3-Nano-4B
ROWS = ["all", "bonus", "mixed", "short", "mixed", "all"]


@pytest.mark.parametrize("g, T, dtypes", [
    pytest.param(SUPER, 4, ("f32", "bf16"), id="super-T4-sf32-abf16"),
    pytest.param(SUPER, 4, ("f32", "f32"), id="super-T4-sf32-af32"),
    pytest.param(SUPER, 4, ("bf16", "bf16"), id="super-T4-sbf16-abf16"),
    pytest.param(SUPER, 2, ("f32", "bf16"), id="super-T2-sf32-abf16"),
    pytest.param(SUPER, 8, ("f16", "f16"), id="super-T8-sf16-af16"),
    pytest.param(NANO, 4, ("f32", "bf16"), id="nano-T4-sf32-abf16"),
])
def test_mamba2_replay_verify_nemotron_long_run(g, T, dtypes):
    """64 verify + commit steps from empty buffers (B = 16): accepted-token outputs, draft
    outputs and every flushed checkpoint against the float64 serial recurrence; non-flush
    checkpoints bit-identical; padding rows and unused slots untouched."""
    s, a = dtypes
    worst = drive_spec(Mamba2Family(g, with_z=True), mamba2_verify_with_op, commit_with_op,
                       L=spec_buffer_len(16, T), T=T, state_dtype=DTYPES[s], act_dtype=DTYPES[a],
                       device="cuda", steps=64, policies=ROWS, num_slots=11, n_padding=2)
    print(f"{g} T={T} s{s}-a{a}: {worst}")
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s], worst


def test_mamba2_replay_verify_gpu_teeth_corrupt_record():
    def corrupt(cache, step):
        if step == 5:
            slot = int(torch.nonzero(cache.cursor > 0)[0])
            cache.x_records[slot, 0, 0, 0] += 100.0
    with pytest.raises(AssertionError):
        worst = drive_spec(Mamba2Family(SUPER), mamba2_verify_with_op, commit_with_op,
                           L=spec_buffer_len(16, 4), T=4, state_dtype=torch.float32,
                           act_dtype=torch.float32, device="cuda", steps=8,
                           policies=["mixed", "bonus"], num_slots=4, corrupt=corrupt)
        assert worst["y"] < ACT_TOL["f32"] + STATE_TOL["f32"], worst


@pytest.mark.parametrize("T", [1, 4])
def test_mamba2_spec_cuda_graph_equals_eager(T):
    """One captured verify + commit, replayed 4L times with new inputs, token counts and
    accepted counts (flush and non-flush rows mixed, a padding row), equals eager bit for bit."""
    from trtllm_replayssm.ops import mamba2_replay_verify, replay_commit
    g = SUPER
    L = spec_buffer_len(16, T)
    p = make_params(g, "cuda")
    fam = Mamba2Family(g, with_z=True)
    slots = torch.tensor([7, -1, 2, 0, 5], dtype=torch.int32, device="cuda")
    caches = []
    for _ in range(2):
        c = Mamba2ReplayCache.allocate(9, g.nheads, g.head_dim, g.d_state, g.ngroups, L,
                                       state_dtype=torch.float32, act_dtype=torch.bfloat16, device="cuda")
        torch.manual_seed(3)
        c.checkpoint.normal_()
        c.cursor.copy_(torch.arange(9, dtype=torch.int32) * 3 % L)
        caches.append(c)
    steps = []
    for _ in range(4 * L):
        drawn = [draw("short", T) for _ in range(5)]
        steps.append((make_window(fam, 5, T, torch.bfloat16, "cuda"),
                      torch.tensor([d[0] for d in drawn], dtype=torch.int32, device="cuda"),
                      torch.tensor([d[1] for d in drawn], dtype=torch.int32, device="cuda")))
    static_win = {k: v.clone() for k, v in steps[0][0].items() if v is not None}
    static_n, static_a = steps[0][1].clone(), steps[0][2].clone()
    out_g = torch.full_like(static_win["x"], 42.0)
    out_e = out_g.clone()

    def step(c, win, n, a, out):
        mamba2_replay_verify(c, win["x"], win["dt"], p.A, win["B"], win["C"], slot_ids=slots,
                             num_tokens=n, D=p.D, z=win["z"], dt_bias=p.dt_bias, out=out)
        replay_commit(c, slots, a)

    warm = Mamba2ReplayCache(**{k: v.clone() for k, v in vars(caches[0]).items()})
    step(warm, static_win, static_n, static_a, out_g.clone())  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(caches[0], static_win, static_n, static_a, out_g)
    flushes = 0
    for win, n, a in steps:
        for k, v in static_win.items():
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
    for name in ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals", "pending"):
        assert torch.equal(getattr(caches[0], name), getattr(caches[1], name)), name


@pytest.mark.parametrize("baseline", ["snapshot", "serial"])
def test_mamba2_baselines_nemotron(baseline):
    T = 4
    holder = SnapshotCache.allocate(9, (SUPER.nheads, SUPER.head_dim, SUPER.d_state), T,
                                    dtype=torch.float32, device="cuda")
    if baseline == "snapshot":
        verify, commit, rows = mamba2_snapshot_verify_with_op, snapshot_commit_with_op, ROWS
    else:
        verify, commit, rows = mamba2_serial_with_op, no_commit, ["all", "short_all", "short_all"]
    worst = drive_baseline(Mamba2Family(SUPER, with_z=True), holder, verify, commit, T=T,
                           act_dtype=torch.bfloat16, device="cuda", steps=12, policies=rows,
                           n_padding=2)
    assert worst < ACT_TOL["bf16"] + 4 * STATE_TOL["f32"], worst
