"""Speculative Triton kernels (verify, commit, snapshot baseline) against the float64 oracle:
under TRITON_INTERPRET=1 on the CPU (small shapes, odd sizes exercise every mask), natively on
a GPU."""

from dataclasses import replace

import pytest
import torch

from triton_mode import INTERPRET
from op_checks import assert_fp8_flush_matches
from mamba2_cases import ACT_TOL, DTYPES, STATE_TOL, Geometry, Mamba2Family, make_params
from replay_driver import rel_err
from spec_cases import (
    commit_with_launcher,
    drive_baseline,
    drive_spec,
    make_window,
    mamba2_snapshot_verify_with_launcher,
    mamba2_verify_with_launcher,
    snapshot_commit_with_launcher,
)
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.kernels.common import LaunchConfig, mamba2_launch_config
from trtllm_replayssm.kernels.mamba2_verify import mamba2_verify_launch_config
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len

pytestmark = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()), reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# Long runs: two heads per group. Launch configurations: two groups, so that a flush row's last
# program writes the B records of several groups. The interpreter pays per program.
G_RUN = Geometry(2, 20, 12, 1) if INTERPRET else Geometry(8, 80, 128, 2)
G_CFG = Geometry(2, 20, 12, 2) if INTERPRET else G_RUN
# Interpreter: one program per head (the per-program cost dominates); launch configurations are
# compared separately below.
CONFIG = LaunchConfig(32, 1) if INTERPRET else None
PAIRS = (
    [("f32", "f32"), ("f32", "bf16"), ("fp8", "f32")]
    if INTERPRET
    else [(s, a) for s in ("f32", "bf16", "f16") for a in ("f32", "bf16", "f16")] + [("fp8", "bf16")]
)
ROWS = ["all", "bonus", "short", "mixed"]


def _verify(cache, win, p, slot_ids, num_tokens, out):
    return mamba2_verify_with_launcher(cache, win, p, slot_ids, num_tokens, out, config=CONFIG)


@pytest.mark.parametrize("dtypes", PAIRS, ids=lambda d: f"s{d[0]}-a{d[1]}")
def test_mamba2_replay_verify_kernel_matches_serial(dtypes):
    s, a = dtypes
    B, T = (4, 3) if INTERPRET else (16, 4)
    worst = drive_spec(
        Mamba2Family(G_RUN, with_z=True, D_per_dim=s == "f16"),
        _verify,
        commit_with_launcher,
        L=spec_buffer_len(B, T),
        T=T,
        state_dtype=DTYPES[s],
        act_dtype=DTYPES[a],
        device=DEVICE,
        steps=6 if INTERPRET else 40,
        policies=ROWS,
        num_slots=7,
        n_padding=1,
    )
    assert sum(worst["flushes"].values()) >= 3, worst
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s], worst


def test_mamba2_replay_verify_kernel_d_state_chunks():
    """A d_state that is not a multiple of the kernel's D_STATE_CHUNK: the checkpoint tiles'
    last d_state chunk is partly masked (interpreter: 40 = 32 + 8 of a 64 tile; GPU: 200 of
    256), through flushes, against the float64 serial oracle."""
    G = Geometry(2, 8, 40, 1) if INTERPRET else Geometry(4, 24, 200, 2)
    B, T = 4, 3
    worst = drive_spec(
        Mamba2Family(G, with_z=True),
        _verify,
        commit_with_launcher,
        L=spec_buffer_len(B, T),
        T=T,
        state_dtype=torch.float32,
        act_dtype=torch.float32,
        device=DEVICE,
        steps=6 if INTERPRET else 24,
        policies=ROWS,
        num_slots=5,
        n_padding=1,
    )
    assert sum(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < ACT_TOL["f32"] + STATE_TOL["f32"], worst
    assert worst["ckpt"] < STATE_TOL["f32"], worst


def test_mamba2_replay_verify_kernel_launch_config_invisible():
    """One tile per program (several programs per head: the flush row's records are written by
    its last program) and a pipelined loop over the head give the same outputs and caches (fp32
    reordering), flush rows and padding rows included."""
    G = G_CFG
    p = make_params(G, DEVICE)
    T, L = 3, 7
    cfgs = [LaunchConfig(8, 1), LaunchConfig(8, 2, chunks=3, num_stages=2)]
    caches = []
    for _ in cfgs:
        torch.manual_seed(1)
        c = Mamba2ReplayCache.allocate(
            6, G.nheads, G.head_dim, G.d_state, G.ngroups, L, state_dtype=torch.float32, act_dtype=torch.float32, device=DEVICE
        )
        c.checkpoint.normal_()
        c.x_records.normal_()
        c.B_records.normal_()
        c.dt_records.uniform_(0.01, 0.05)
        c.cursor.copy_(torch.tensor([0, 5, 2, 4, 0, 6], dtype=torch.int32))
        caches.append(c)
    slots = torch.tensor([1, -1, 3, 5, 2], dtype=torch.int32, device=DEVICE)
    n = torch.tensor([3, 3, 2, 1, 3], dtype=torch.int32, device=DEVICE)
    accepted = torch.tensor([2, 1, 1, 1, 3], dtype=torch.int32, device=DEVICE)
    win = make_window(Mamba2Family(G, with_z=True), 5, T, torch.float32, DEVICE)
    ys = [
        mamba2_verify_with_launcher(c, win, p, slots, n, torch.full_like(win["x"], 42.0), config=cfg)
        for c, cfg in zip(caches, cfgs)
    ]
    for y in ys[1:]:
        assert torch.all(y[1] == 42.0) and torch.all(y[3, 1:] == 42.0)
        assert rel_err(y, ys[0]) < 1e-6
    # Slots 1 and 5 flush (w + n > L - 1): cursor 0, then the commit.
    assert caches[0].cursor.tolist() == [0, 0, 2, 4, 0, 0]
    for c in caches:
        commit_with_launcher(c, slots, accepted)
    assert caches[0].cursor.tolist() == [0, 2, 5, 5, 0, 1]
    for c in caches[1:]:
        for name in ("x_records", "dt_records", "B_records", "cursor", "arrivals", "pending"):
            assert torch.equal(getattr(c, name), getattr(caches[0], name)), name
        assert rel_err(c.checkpoint, caches[0].checkpoint) < 1e-6


@pytest.mark.parametrize(
    "dtypes", [("f32", "bf16")] + ([] if INTERPRET else [("f32", "f32"), ("f16", "f16")]), ids=lambda d: f"s{d[0]}-a{d[1]}"
)
def test_mamba2_snapshot_kernels_match_serial(dtypes):
    s, a = dtypes
    T = 3
    holder = SnapshotCache.allocate(6, (G_RUN.nheads, G_RUN.head_dim, G_RUN.d_state), T, dtype=DTYPES[s], device=DEVICE)
    worst = drive_baseline(
        Mamba2Family(G_RUN, with_z=True),
        holder,
        mamba2_snapshot_verify_with_launcher,
        snapshot_commit_with_launcher,
        T=T,
        act_dtype=DTYPES[a],
        device=DEVICE,
        steps=3 if INTERPRET else 20,
        policies=ROWS,
    )
    # The state is rounded to its dtype once per snapshot, every token (as conventional decode).
    assert worst < ACT_TOL[a] + 4 * STATE_TOL[s], worst


def test_mamba2_verify_launch_config_caps_registers_of_pipelined_one_warp_programs():
    """The verify launch is the standard replay tiling in one-warp programs (the step's rule
    gives bf16 checkpoints two warps at batch < 8 and 32-127); programs that pipeline several
    tiles get a 128-register cap (passed to Triton as ``maxnreg``), single-tile programs none."""
    for dtype in (torch.float32, torch.bfloat16):
        for batch in (1, 16, 64, 256, 512):
            std = mamba2_launch_config("replay_step", 64, 128, batch, dtype)
            cfg = mamba2_verify_launch_config(64, 128, batch, dtype)
            pipelined = std.chunks > 1
            assert cfg == replace(std, num_warps=1, max_registers=128 if pipelined else None), (dtype, batch)
            opts = cfg.launch_options()
            assert opts == ({"num_warps": 1, "maxnreg": 128} if pipelined else {"num_warps": 1})
    assert mamba2_launch_config("replay_step", 64, 128, 64, torch.bfloat16).num_warps == 2  # what it overrides
    assert mamba2_verify_launch_config(64, 128, 256, torch.float32).label() == "8,1,8,3,r128"


def test_mamba2_verify_kernel_fp8_flush_equals_the_reference_and_rounding_seed_replays():
    """An fp8 checkpoint through the Triton verify: a flushing row's codes and scales equal the
    reference's bit for bit (on a GPU within a spacing: ``op_checks.assert_fp8_flush_matches``),
    non-flushing rows keep theirs; with a rounding seed the same seed stores the same bits and
    another seed other bits."""
    from trtllm_replayssm.reference.spec import mamba2_replay_verify_ref

    fam = Mamba2Family(G_RUN)
    p = fam.make_params(DEVICE)
    T = 2
    L = spec_buffer_len(3, T)
    cache = fam.allocate(4, L, torch.float8_e4m3fn, torch.float32, DEVICE)
    cache.admit(torch.arange(4, device=DEVICE), 3 * torch.randn(4, *cache.checkpoint.shape[1:], device=DEVICE))
    cache.x_records.normal_(), cache.B_records.normal_(), cache.dt_records.uniform_(0.01, 0.5)
    cache.cursor.copy_(torch.tensor([L - 2, 1, L - 1, 0], dtype=torch.int32))  # slots 0 and 2 flush
    win = make_window(fam, 3, T, torch.float32, DEVICE)
    slots = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    runs = {}
    for name, seed in (("nearest", None), ("reference", None), ("a", 7), ("a again", 7), ("b", 8)):
        c = cache.clone()
        out = torch.zeros_like(win["x"])
        if name == "reference":
            mamba2_replay_verify_ref(
                c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.pending, win["x"], win["dt"], p.A,
                win["B"], win["C"], slot_ids=slots, D=p.D, z=win["z"], dt_bias=p.dt_bias, out=out,
                checkpoint_scale=c.checkpoint_scale,
            )  # fmt: skip
        else:
            from trtllm_replayssm.kernels.mamba2_verify import launch_mamba2_replay_verify

            launch_mamba2_replay_verify(
                c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals, c.pending, win["x"],
                win["dt"], p.A, win["B"], win["C"], slot_ids=slots, D=p.D, z=win["z"], dt_bias=p.dt_bias, out=out,
                config=CONFIG, checkpoint_scale=c.checkpoint_scale, rounding_seed=seed,
            )  # fmt: skip
        runs[name] = (c, out)
    near, ref = runs["nearest"][0], runs["reference"][0]
    assert rel_err(runs["nearest"][1], runs["reference"][1]) < 1e-5
    assert_fp8_flush_matches(near.checkpoint, near.checkpoint_scale, ref.checkpoint, ref.checkpoint_scale,
                             exact=INTERPRET)  # fmt: skip
    assert torch.equal(near.checkpoint[[1, 3]].view(torch.uint8), cache.checkpoint[[1, 3]].view(torch.uint8))
    assert not torch.equal(near.checkpoint[[0, 2]].view(torch.uint8), cache.checkpoint[[0, 2]].view(torch.uint8))
    bits = {k: runs[k][0].checkpoint.view(torch.uint8) for k in ("a", "a again", "b")}
    assert torch.equal(bits["a"], bits["a again"]) and not torch.equal(bits["a"], bits["b"])
