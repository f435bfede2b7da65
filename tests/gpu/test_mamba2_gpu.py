"""Mamba-2 replay on the GPU at Nemotron-3 geometries: long runs, every dtype pair, CUDA graphs."""

import pytest
import torch

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
    replay_with_op,
)

pytestmark = pytest.mark.gpu

NEMOTRON = [
    pytest.param(Geometry(128, 64, 128, 8), id="nh128-hd64-ds128-g8"),  # Nemotron-3-Super, TP=1
    pytest.param(Geometry(96, 80, 128, 8), id="nh96-hd80-ds128-g8"),
]  # Nemotron-3-Nano-4B
PAIRS = [(s, a) for s in ("f32", "bf16", "f16") for a in ("f32", "bf16", "f16")]


@pytest.mark.parametrize("g", NEMOTRON)
@pytest.mark.parametrize("dtypes", PAIRS, ids=lambda d: f"s{d[0]}-a{d[1]}")
def test_mamba2_replay_step_nemotron_long_run(g, dtypes):
    s, a = dtypes
    worst = drive_replay(
        replay_with_op, g, 16, DTYPES[s], DTYPES[a], "cuda", steps=200, batch=6, num_slots=11, n_padding=2, with_z=True
    )
    assert worst["flushes"] >= 60
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s], worst


@pytest.mark.parametrize("g", NEMOTRON)
@pytest.mark.parametrize("batch", [12, 40])
@pytest.mark.parametrize("dtypes", [("f32", "bf16"), ("bf16", "bf16"), ("f16", "f16")], ids=lambda d: f"s{d[0]}-a{d[1]}")
def test_mamba2_replay_step_long_run_wider_programs(g, batch, dtypes):
    """The launch table's other program shapes (``mamba2_launch_config``): from batch 8 one
    tile of 32 rows, from batch 32 a whole head in a pipelined loop."""
    s, a = dtypes
    worst = drive_replay(
        replay_with_op,
        g,
        16,
        DTYPES[s],
        DTYPES[a],
        "cuda",
        steps=200,
        batch=batch,
        num_slots=batch + 7,
        n_padding=3,
        with_z=True,
    )
    assert worst["flushes"] >= 10 * (batch - 3)
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s], worst


# Rows and checkpoint dtype: batch 5 (fp32) and batch 12 (bf16 checkpoint), two launch-table rows.
GRAPH_ROWS = {5: ([7, -1, 2, 0, 5], torch.float32), 12: ([7, -1, 2, 0, 5, 16, 11, -1, 3, 9, 14, 1], torch.bfloat16)}


@pytest.mark.parametrize("batch", sorted(GRAPH_ROWS))
@pytest.mark.parametrize("L", [1, 4, 16, 64])
@pytest.mark.parametrize(
    "g",
    [
        pytest.param(Geometry(128, 64, 128, 8), id="nh128-hd64-ds128-g8"),
        pytest.param(Geometry(6, 96, 96, 3), id="nh6-hd96-ds96-g3"),
    ],
)
def test_mamba2_replay_step_cuda_graph_equals_eager(g, L, batch):
    """One captured step replayed 3L times equals 3L eager steps, bit for bit."""
    from trtllm_replayssm.cache import Mamba2ReplayCache

    p = make_params(g, "cuda")
    num_slots = 17
    rows, state_dtype = GRAPH_ROWS[batch]
    slots = torch.tensor(rows, dtype=torch.int32, device="cuda")
    caches = []
    for _ in range(2):
        c = Mamba2ReplayCache.allocate(
            num_slots,
            g.nheads,
            g.head_dim,
            g.d_state,
            g.ngroups,
            L,
            state_dtype=state_dtype,
            act_dtype=torch.bfloat16,
            device="cuda",
        )
        torch.manual_seed(3)
        c.checkpoint.normal_()
        c.cursor.copy_(torch.arange(num_slots, dtype=torch.int32) % L)
        caches.append(c)
    inputs = [make_step(g, batch, torch.bfloat16, "cuda", with_z=True) for _ in range(3 * L)]
    static = {k: v.clone() for k, v in inputs[0].items()}
    out_g = torch.full_like(static["x"], 42.0)
    out_e = out_g.clone()

    def step(c, inp, out):
        return replay_with_op(c, inp, p, slots, out)

    # Warm-up compiles the kernel outside the capture, on a throwaway copy of the cache.
    warm = caches[0].clone()
    step(warm, static, out_g.clone())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(caches[0], static, out_g)
    for inp in inputs:
        for k, v in inp.items():
            if v is not None:
                static[k].copy_(v)
        graph.replay()
        step(caches[1], inp, out_e)
        torch.cuda.synchronize()
        assert torch.equal(out_g, out_e)
    for name in ("checkpoint", "x_records", "dt_records", "B_records", "cursor", "arrivals"):
        assert torch.equal(getattr(caches[0], name), getattr(caches[1], name)), name


def test_mamba2_bf16_checkpoint_more_accurate_than_bf16_state():
    """A bf16 checkpoint rounded once per flush drifts less than a bf16 state rounded every step
    (same inputs, same float64 oracle). Reported figures go to the README."""
    from trtllm_replayssm.cache import Mamba2ReplayCache
    from trtllm_replayssm.ops import mamba2_decode_step

    g = Geometry(128, 64, 128, 8)
    p = make_params(g, "cuda")
    n, L = 8, 16
    slots = torch.arange(n, dtype=torch.int32, device="cuda")
    init = torch.randn(n, g.nheads, g.head_dim, g.d_state, device="cuda").to(torch.bfloat16)
    cache = Mamba2ReplayCache.allocate(
        n, g.nheads, g.head_dim, g.d_state, g.ngroups, L, state_dtype=torch.bfloat16, act_dtype=torch.bfloat16, device="cuda"
    )
    cache.admit(slots, init)
    state = init.clone()
    oracle = Oracle(init, p, device="cuda")
    for _ in range(20 * L):
        inp = make_step(g, n, torch.bfloat16, "cuda")
        kw = dict(slot_ids=slots, D=p.D, dt_bias=p.dt_bias)
        replay_with_op(cache, inp, p, slots, torch.empty_like(inp["x"]))
        mamba2_decode_step(state, inp["x"], inp["dt"], p.A, inp["B"], inp["C"], **kw)
        oracle.step(inp, slots)
    e_replay = rel_err(cache.checkpoint, oracle.state)
    e_conv = rel_err(state, oracle.state)
    print(f"bf16 state after {20 * L} steps: replay checkpoint err {e_replay:.3e}, conventional {e_conv:.3e}")
    assert e_replay < e_conv
