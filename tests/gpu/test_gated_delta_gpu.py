"""GDN / KDA replay on the GPU at Qwen3.5 and Kimi Linear geometries: long runs, dtype pairs,
CUDA graphs, and what a low-precision checkpoint or record dtype costs."""

import pytest
import torch

from gated_delta_cases import ACT_TOL, STATE_TOL, DeltaFamily, DeltaGeometry, make_step, replay_with_op
from mamba2_cases import DTYPES
from replay_driver import as_f64, drive_replay, rel_err

pytestmark = pytest.mark.gpu

QWEN35_4B = DeltaGeometry(16, 32, 128, 128)
QWEN35_122B = DeltaGeometry(16, 64, 128, 128)
KIMI_LINEAR = DeltaGeometry(32, 32, 128, 128)
ALL_PAIRS = [(s, a) for s in ("f32", "bf16", "f16") for a in ("f32", "bf16", "f16")]
CASES = (
    [pytest.param(False, QWEN35_4B, p, id=f"gdn-qwen3.5-4b-s{p[0]}-a{p[1]}") for p in ALL_PAIRS]
    + [
        pytest.param(False, QWEN35_122B, p, id=f"gdn-qwen3.5-122b-s{p[0]}-a{p[1]}")
        for p in [("f32", "bf16"), ("bf16", "bf16")]
    ]
    + [pytest.param(True, KIMI_LINEAR, p, id=f"kda-kimi-linear-s{p[0]}-a{p[1]}") for p in ALL_PAIRS]
)


@pytest.mark.parametrize("per_channel, g, dtypes", CASES)
def test_gated_delta_replay_step_long_run(per_channel, g, dtypes):
    s, a = dtypes
    worst = drive_replay(
        DeltaFamily(g, per_channel=per_channel),
        replay_with_op,
        16,
        DTYPES[s],
        DTYPES[a],
        "cuda",
        steps=200,
        batch=4,
        num_slots=9,
        n_padding=2,
    )
    assert worst["flushes"] >= 40
    assert worst["y"] < ACT_TOL[a] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s] + ACT_TOL[a], worst


@pytest.mark.parametrize("L", [1, 4, 16, 64])
@pytest.mark.parametrize(
    "per_channel, g",
    [
        pytest.param(False, QWEN35_122B, id="gdn-qwen3.5-122b"),
        pytest.param(True, KIMI_LINEAR, id="kda-kimi-linear"),
        pytest.param(False, DeltaGeometry(2, 6, 80, 96), id="gdn-dk80-dv96"),
    ],
)
def test_gated_delta_replay_step_cuda_graph_equals_eager(per_channel, g, L):
    """One captured step replayed 3L times equals 3L eager steps, bit for bit."""
    fam = DeltaFamily(g, per_channel=per_channel)
    p = fam.make_params("cuda")
    batch, num_slots = 5, 9
    slots = torch.tensor([7, -1, 2, 0, 5], dtype=torch.int32, device="cuda")
    caches = []
    for _ in range(2):
        c = fam.allocate(num_slots, L, torch.float32, torch.bfloat16, "cuda")
        torch.manual_seed(3)
        c.checkpoint.normal_()
        c.cursor.copy_(torch.arange(num_slots, dtype=torch.int32) % L)
        caches.append(c)
    inputs = [make_step(g, batch, torch.bfloat16, "cuda", per_channel=per_channel) for _ in range(3 * L)]
    static = {k: v.clone() for k, v in inputs[0].items()}
    out_g = torch.full_like(static["v"], 42.0)
    out_e = out_g.clone()
    warm = caches[0].clone()
    replay_with_op(warm, static, p, slots, out_g.clone())  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        replay_with_op(caches[0], static, p, slots, out_g)
    for inp in inputs:
        for k, v in inp.items():
            static[k].copy_(v)
        graph.replay()
        replay_with_op(caches[1], inp, p, slots, out_e)
        torch.cuda.synchronize()
        assert torch.equal(out_g, out_e)
    for name in ("checkpoint", "d_records", "k_records", "g_records", "cursor", "arrivals"):
        assert torch.equal(getattr(caches[0], name), getattr(caches[1], name)), name


@pytest.mark.parametrize(
    "per_channel, g",
    [pytest.param(False, QWEN35_4B, id="gdn-qwen3.5-4b"), pytest.param(True, KIMI_LINEAR, id="kda-kimi-linear")],
)
def test_gated_delta_precision_report(per_channel, g, capsys):
    """After 20 windows from the same inputs, error vs the float64 recurrence of: a bf16 state
    rounded every step (conventional), a bf16 checkpoint rounded per flush (replay), and an fp32
    checkpoint with bf16 vs fp32 records. Printed for the README; the bf16 checkpoint must beat
    the bf16 state, and fp32 records must not be worse than bf16 records."""
    from trtllm_replayssm.ops import gdn_decode_step, kda_decode_step

    n, L = 8, 16
    fam = DeltaFamily(g, per_channel=per_channel)
    p = fam.make_params("cuda")
    slots = torch.arange(n, dtype=torch.int32, device="cuda")
    init = (torch.randn(n, g.v_heads, g.head_v_dim, g.head_k_dim, device="cuda") * 0.1).to(torch.bfloat16)
    arms = {}
    for name, state, record in [
        ("replay bf16 ckpt, bf16 rec", torch.bfloat16, torch.bfloat16),
        ("replay fp32 ckpt, bf16 rec", torch.float32, torch.bfloat16),
        ("replay fp32 ckpt, fp32 rec", torch.float32, torch.float32),
    ]:
        c = DeltaFamily(g, per_channel=per_channel, record_dtype=record).allocate(n, L, state, torch.bfloat16, "cuda")
        c.admit(slots, init)
        arms[name] = c
    conv = init.clone()
    state64 = as_f64(init, init.device).clone()  # the float64 oracle on the GPU
    decode = kda_decode_step if per_channel else gdn_decode_step
    for _ in range(20 * L):
        inp = make_step(g, n, torch.bfloat16, "cuda", per_channel=per_channel)
        for c in arms.values():
            replay_with_op(c, inp, p, slots, torch.empty_like(inp["v"]))
        decode(conv, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], slot_ids=slots, **p)
        fam.oracle_step(state64, p, inp, slots)
    errs = {name: rel_err(c.checkpoint, state64) for name, c in arms.items()}
    errs["conventional bf16 state"] = rel_err(conv, state64)
    with capsys.disabled():
        print(
            f"\n{fam.name} {g} after {20 * L} steps, state error vs float64: "
            + ", ".join(f"{k}: {v:.2e}" for k, v in errs.items())
        )
    assert errs["replay bf16 ckpt, bf16 rec"] < errs["conventional bf16 state"]
    assert errs["replay fp32 ckpt, fp32 rec"] <= errs["replay fp32 ckpt, bf16 rec"] * 1.01
