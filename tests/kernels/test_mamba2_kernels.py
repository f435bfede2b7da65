"""Triton kernels against the references: under TRITON_INTERPRET=1 on the CPU (small shapes),
natively on a GPU. Odd sizes (head_dim 20 or 80, d_state 12) exercise every mask."""

import pytest
import torch

from triton_mode import INTERPRET
from op_checks import assert_fp8_flush_matches, e4m3_spacing
from mamba2_cases import (
    ACT_TOL,
    DTYPES,
    STATE_TOL,
    Geometry,
    Oracle,
    drive_replay,
    make_params,
    make_step,
    rel_err,
    replay_with_launcher,
)
from trtllm_replayssm.kernels.common import LaunchConfig
from trtllm_replayssm.kernels.mamba2_decode import launch_mamba2_decode_step
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step
from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref

pytestmark = pytest.mark.skipif(not (INTERPRET or torch.cuda.is_available()), reason="needs TRITON_INTERPRET=1 or a GPU")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
G = Geometry(4, 20, 12, 2) if INTERPRET else Geometry(8, 80, 128, 2)

# The interpreter converts fp32 -> bf16 by truncation (GPUs round to nearest even), which
# biases a bf16 checkpoint; bf16 checkpoints are therefore covered on the GPU only.
PAIRS = (
    [("f32", "f32"), ("f32", "bf16"), ("f16", "f16"), ("fp8", "f32")]
    if INTERPRET
    else [(s, a) for s in ("f32", "bf16", "f16") for a in ("f32", "bf16", "f16")] + [("fp8", "bf16")]
)


@pytest.mark.parametrize("dtypes", PAIRS, ids=lambda d: f"s{d[0]}-a{d[1]}")
@pytest.mark.parametrize("L", [1, 4] if INTERPRET else [1, 8, 17])
def test_mamba2_replay_step_kernel_matches_recurrence(dtypes, L):
    s, a = dtypes
    worst = drive_replay(
        replay_with_launcher,
        G,
        L,
        DTYPES[s],
        DTYPES[a],
        DEVICE,
        steps=2 * L + 2,
        batch=3,
        num_slots=7,
        n_padding=2,
        with_z=(L % 2 == 0),
        D_per_dim=(L == 1),
    )
    assert worst["flushes"] >= 3
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s], worst


@pytest.mark.parametrize(
    "dtypes", [("f32", "f32"), ("f16", "f16")] + ([] if INTERPRET else [("bf16", "bf16")]), ids=lambda d: f"s{d[0]}-a{d[1]}"
)
def test_mamba2_decode_step_kernel_matches_reference(dtypes):
    """The conventional kernel equals the reference run in the same dtypes (the state is rounded
    to its dtype every step on both sides), and the float64 oracle when everything is fp32."""
    s, a = dtypes
    p = make_params(G, DEVICE)
    state = torch.randn(6, G.nheads, G.head_dim, G.d_state, device=DEVICE).to(DTYPES[s])
    ref_state = state.clone()
    oracle = Oracle(state, p)
    spare = state[[1, 4]].clone()
    slots = torch.tensor([3, -1, 0, 5, 2], dtype=torch.int32, device=DEVICE)
    live = (slots >= 0).cpu()
    for _ in range(6):
        inp = make_step(G, 5, DTYPES[a], DEVICE, with_z=True)
        out = torch.full_like(inp["x"], 42.0)
        kw = dict(slot_ids=slots, D=p.D, z=inp["z"], dt_bias=p.dt_bias)
        launch_mamba2_decode_step(state, inp["x"], inp["dt"], p.A, inp["B"], inp["C"], out=out, **kw)
        ref = mamba2_decode_step_ref(ref_state, inp["x"], inp["dt"], p.A, inp["B"], inp["C"], out=torch.empty_like(out), **kw)
        assert torch.all(out[1] == 42.0)
        assert rel_err(out[live.to(DEVICE)], ref[live.to(DEVICE)]) < ACT_TOL[a]
        if dtypes == ("f32", "f32"):
            assert rel_err(out[live.to(DEVICE)], oracle.step(inp, slots)[live]) < ACT_TOL[a]
    assert torch.equal(state[[1, 4]], spare)
    # Same-dtype rounding on both sides; a rounding flip moves an element by one ulp.
    assert rel_err(state, ref_state) < {"f32": 1e-5, "f16": 1e-3, "bf16": 8e-3}[s]


def test_mamba2_replay_step_kernel_launch_config_invisible():
    """Launch configurations (one tile per program, or a pipelined loop over the head; spans of
    fewer rows than a fold tile) give the same outputs and caches, to fp32 reordering,
    over several flushes with padding rows."""
    from trtllm_replayssm.cache import Mamba2ReplayCache

    p = make_params(G, DEVICE)
    chunked = dict(chunks=-(-G.head_dim // 8), num_stages=3)
    cfgs = [
        LaunchConfig(4, 1),
        LaunchConfig(16, 4),
        LaunchConfig(8, 2, **chunked),
        LaunchConfig(32, 1),
    ]
    caches = []
    for _ in cfgs:
        torch.manual_seed(1)
        c = Mamba2ReplayCache.allocate(
            6, G.nheads, G.head_dim, G.d_state, G.ngroups, 4, state_dtype=torch.float32, act_dtype=torch.float32, device=DEVICE
        )
        c.checkpoint.normal_()
        c.cursor.copy_(torch.tensor([0, 1, 2, 3, 0, 1], dtype=torch.int32))
        caches.append(c)
    slots = torch.tensor([2, -1, 0, 3, 5], dtype=torch.int32, device=DEVICE)
    for _ in range(9):
        inp = make_step(G, 5, torch.float32, DEVICE, with_z=True)
        ys = [
            launch_mamba2_replay_step(
                c.checkpoint,
                c.x_records,
                c.dt_records,
                c.B_records,
                c.cursor,
                c.arrivals,
                inp["x"],
                inp["dt"],
                p.A,
                inp["B"],
                inp["C"],
                slot_ids=slots,
                D=p.D,
                z=inp["z"],
                dt_bias=p.dt_bias,
                out=torch.full_like(inp["x"], 42.0),
                config=cfg,
            )
            for c, cfg in zip(caches, cfgs)
        ]
        for y in ys[1:]:
            assert torch.all(y[1] == 42.0)
            assert rel_err(y, ys[0]) < 1e-6
    for c in caches[1:]:
        assert torch.equal(c.cursor, caches[0].cursor)
        assert torch.equal(c.arrivals, caches[0].arrivals)
        assert rel_err(c.checkpoint, caches[0].checkpoint) < 1e-6
        assert torch.equal(c.x_records, caches[0].x_records)
        assert torch.equal(c.dt_records, caches[0].dt_records)
        assert torch.equal(c.B_records, caches[0].B_records)


@pytest.mark.parametrize(
    "cfg", [LaunchConfig(16, 2), LaunchConfig(16, 1, chunks=2, num_stages=2), LaunchConfig(8, 1)], ids=lambda c: c.label()
)
def test_mamba2_replay_step_kernel_bf16_checkpoint_output_is_fp32_accurate(cfg):
    """A bf16 checkpoint read by one-tile and looped programs: with fp32 activations and no
    flush yet (the checkpoint is exactly the reference's), y matches the reference to fp32
    accuracy (a product or sum rounded through bf16 would be off by ~2^-9)."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.reference.mamba2 import mamba2_replay_step_ref

    p = make_params(G, DEVICE)
    L = 8
    c = Mamba2ReplayCache.allocate(
        5, G.nheads, G.head_dim, G.d_state, G.ngroups, L, state_dtype=torch.bfloat16, act_dtype=torch.float32, device=DEVICE
    )
    c.checkpoint.normal_()
    ref = c.clone()
    slots = torch.tensor([2, -1, 0, 3], dtype=torch.int32, device=DEVICE)
    for _ in range(L - 1):
        inp = make_step(G, 4, torch.float32, DEVICE, with_z=True)
        kw = dict(slot_ids=slots, D=p.D, z=inp["z"], dt_bias=p.dt_bias)
        y = launch_mamba2_replay_step(
            c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals,
            inp["x"], inp["dt"], p.A, inp["B"], inp["C"], out=torch.full_like(inp["x"], 42.0), config=cfg, **kw,
        )  # fmt: skip
        y_ref = mamba2_replay_step_ref(
            ref.checkpoint, ref.x_records, ref.dt_records, ref.B_records, ref.cursor,
            inp["x"], inp["dt"], p.A, inp["B"], inp["C"], out=torch.empty_like(inp["x"]), **kw,
        )  # fmt: skip
        assert torch.all(y[1] == 42.0)
        live = (slots >= 0).to(DEVICE)
        assert rel_err(y[live], y_ref[live]) < ACT_TOL["f32"]
    assert torch.equal(c.checkpoint, ref.checkpoint) and torch.equal(c.cursor, ref.cursor)


# The fp8 flush folds a row tile in column chunks of FOLD_D_STATE (32): the GPU's d_state 128 takes
# four, the interpreter's 12 one, so there d_state 40 (two chunks, the second partly masked) too.
FP8_GEOMETRIES = [G, Geometry(2, 20, 40, 1)] if INTERPRET else [G]


@pytest.mark.parametrize("g", FP8_GEOMETRIES, ids=lambda g: f"d_state{g.d_state}")
def test_mamba2_replay_step_kernel_fp8_checkpoint_codes_and_scales_equal_the_reference(g):
    """An fp8 checkpoint: the kernel's flushed codes and row scales equal the reference's (the same
    fp32 fold, the same rounding rule), step after step from the same cache; padding rows and
    unused slots keep theirs. The rounding is the kernel's own (``common.fp8_row_codes``): the
    interpreter's fp32 -> fp8 conversion alone drops carries (127.9 -> 64) and fails this. With
    d_state over several FOLD_D_STATE chunks, every chunk's old codes decode with the rows' old
    scales, which the first chunk's store has already replaced in memory. On a GPU, bit for bit
    becomes within a spacing (``op_checks.assert_fp8_flush_matches``), and the reference starts
    each step from the kernel's cache, so that a code one spacing off does not compound."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.reference.mamba2 import mamba2_replay_step_ref

    p = make_params(g, DEVICE)
    L = 4
    c = Mamba2ReplayCache.allocate(
        5, g.nheads, g.head_dim, g.d_state, g.ngroups, L, state_dtype=torch.float8_e4m3fn, act_dtype=torch.float32,
        device=DEVICE,
    )  # fmt: skip
    c.admit(torch.arange(5, device=DEVICE), 3 * torch.randn(5, g.nheads, g.head_dim, g.d_state, device=DEVICE))
    ref, admitted = c.clone(), c.checkpoint_scale.clone()
    slots = torch.tensor([2, -1, 0, 3], dtype=torch.int32, device=DEVICE)
    for _ in range(3 * L):
        inp = make_step(g, 4, torch.float32, DEVICE)
        kw = dict(slot_ids=slots, D=p.D, dt_bias=p.dt_bias)
        y = launch_mamba2_replay_step(
            c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.arrivals, inp["x"], inp["dt"], p.A,
            inp["B"], inp["C"], out=torch.full_like(inp["x"], 42.0), checkpoint_scale=c.checkpoint_scale,
            kernel="triton", **kw,
        )  # fmt: skip
        y_ref = mamba2_replay_step_ref(
            ref.checkpoint, ref.x_records, ref.dt_records, ref.B_records, ref.cursor, inp["x"], inp["dt"], p.A,
            inp["B"], inp["C"], out=torch.empty_like(inp["x"]), checkpoint_scale=ref.checkpoint_scale, **kw,
        )  # fmt: skip
        assert torch.all(y[1] == 42.0)
        live = (slots >= 0).to(DEVICE)
        assert rel_err(y[live], y_ref[live]) < 1e-5
        assert torch.equal(c.cursor, ref.cursor)
        assert_fp8_flush_matches(c.checkpoint, c.checkpoint_scale, ref.checkpoint, ref.checkpoint_scale, exact=INTERPRET)
        if not INTERPRET:
            ref.copy_(c)
    assert torch.equal(c.checkpoint_scale[[1, 4]], admitted[[1, 4]])  # unused slots
    assert (c.checkpoint_scale[[0, 2, 3]] != admitted[[0, 2, 3]]).all()  # rewritten at each row's flushes


@pytest.mark.parametrize("state", ["bf16", "f16", "fp8"])
def test_mamba2_replay_step_kernel_stochastic_rounding_is_reproducible_and_within_a_spacing(state):
    """A flush with ``rounding_seed``: the same seed stores the same bits (so a captured graph
    replays them), another seed other bits; every stored value is one of the two neighbours of
    the fold (within one spacing of the format of the round-to-nearest result), a fair share of
    them the other one; outside the flush rows nothing differs."""
    from trtllm_replayssm.cache import Mamba2ReplayCache

    p = make_params(G, DEVICE)
    L = 4
    c = Mamba2ReplayCache.allocate(
        4, G.nheads, G.head_dim, G.d_state, G.ngroups, L, state_dtype=DTYPES[state], act_dtype=torch.float32,
        device=DEVICE,
    )  # fmt: skip
    c.admit(torch.arange(4, device=DEVICE), torch.randn(4, G.nheads, G.head_dim, G.d_state, device=DEVICE))
    c.x_records.normal_(), c.B_records.normal_(), c.dt_records.uniform_(0.01, 0.5)
    c.cursor.copy_(torch.tensor([L - 1, 1, L - 1, 0], dtype=torch.int32))
    inp = make_step(G, 3, torch.float32, DEVICE)
    slots = torch.tensor([0, 1, 2], dtype=torch.int32, device=DEVICE)
    runs = {}
    for name, seed in (("nearest", None), ("a", 5), ("a again", 5), ("b", 6)):
        d = c.clone()
        launch_mamba2_replay_step(
            d.checkpoint, d.x_records, d.dt_records, d.B_records, d.cursor, d.arrivals, inp["x"], inp["dt"], p.A,
            inp["B"], inp["C"], slot_ids=slots, D=p.D, dt_bias=p.dt_bias, out=torch.empty_like(inp["x"]),
            checkpoint_scale=d.checkpoint_scale, rounding_seed=seed, kernel="triton",
        )  # fmt: skip
        runs[name] = d
    bits = {k: torch.cat([t.view(torch.uint8).flatten() for t in d.tensors().values()]) for k, d in runs.items()}
    assert torch.equal(bits["a"], bits["a again"]) and not torch.equal(bits["a"], bits["b"])
    flushed, others = torch.tensor([0, 2], device=DEVICE), torch.tensor([1, 3], device=DEVICE)
    near, sr = runs["nearest"].checkpoint_values(flushed).double(), runs["a"].checkpoint_values(flushed).double()
    assert torch.equal(runs["a"].checkpoint[others].view(torch.uint8), runs["nearest"].checkpoint[others].view(torch.uint8))
    if state == "fp8":  # spacing on the row's scaled grid
        scale = runs["nearest"].checkpoint_scale[flushed].double()[..., None]
        spacing = e4m3_spacing(near / scale).double() * scale
    else:
        mant = {"bf16": 7, "f16": 10}[state]
        spacing = 2.0 ** (torch.floor(torch.log2(near.abs().clamp(min=2.0**-14))) - mant)
    ratio = (sr - near).abs() / spacing
    far = (~(ratio <= 1.0001)).nonzero()  # NaN too
    # Where a value lands beyond a spacing, enough to tell a rounding rule from a fold that
    # differs between the two compiles (state columns by FOLD_D_STATE chunk, the two scales).
    assert len(far) == 0, (
        f"{len(far)} of {ratio.numel()} values beyond one spacing of round-to-nearest (max {float(ratio.max()):.3g} "
        f"spacings) at [row, head, dim, col] {far[:8].tolist()}; by 32-column chunk "
        f"{torch.bincount(far[:, 3] // 32, minlength=4).tolist()}; nearest {near[tuple(far[:4].T)].tolist()}, "
        f"rounded {sr[tuple(far[:4].T)].tolist()}; scales equal: "
        f"{torch.equal(runs['a'].checkpoint_scale, runs['nearest'].checkpoint_scale) if state == 'fp8' else 'n/a'}"
    )
    assert 0.1 < float((sr != near).double().mean()) < 0.9
