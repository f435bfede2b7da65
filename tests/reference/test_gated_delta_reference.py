"""The float64 GDN / KDA replay reference equals the float64 conventional recurrence, and the
conventional reference follows FLA's conventions (when ``fla`` is importable)."""

import pytest
import torch

from gated_delta_cases import DeltaFamily, DeltaGeometry, make_step, replay_with_reference
from replay_driver import drive_replay, rel_err
from trtllm_replayssm.reference.gated_delta import delta_rule_gate, gated_delta_decode_step_ref, prepare_qk

GEOMS = [
    pytest.param(DeltaGeometry(2, 4, 8, 6), id="hk2-hv4-dk8-dv6"),
    pytest.param(DeltaGeometry(1, 3, 5, 7), id="hk1-hv3-dk5-dv7"),
]


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
@pytest.mark.parametrize("g", GEOMS)
@pytest.mark.parametrize("L", [1, 2, 5, 16])
def test_gated_delta_replay_step_ref_matches_recurrence_f64(per_channel, g, L):
    fam = DeltaFamily(g, per_channel=per_channel, use_qk_l2norm=L != 2)
    worst = drive_replay(
        fam, replay_with_reference, L, torch.float64, torch.float64, "cpu", steps=3 * L + 2, batch=5, num_slots=9
    )
    assert worst["flushes"] >= 5
    assert worst["y"] < 1e-12, worst
    assert worst["ckpt"] < 1e-12, worst


@pytest.mark.parametrize("field", ["d_records", "k_records", "g_records"])
def test_gated_delta_replay_step_ref_teeth_corrupt_record(field):
    """Corrupting one live record of any kind must break agreement."""

    def corrupt(cache, step):
        if step == 3:
            slot = int(torch.nonzero(cache.cursor > 0)[0])
            getattr(cache, field)[slot, 0, 0] += 0.5

    fam = DeltaFamily(DeltaGeometry(2, 4, 8, 6), per_channel=True)
    worst = drive_replay(
        fam, replay_with_reference, 8, torch.float64, torch.float64, "cpu", steps=10, batch=4, num_slots=6, corrupt=corrupt
    )
    assert worst["y"] > 1e-6


def test_kda_reference_with_scalar_channels_equals_gdn():
    """A KDA step whose per-channel decay is constant over the channels is the GDN step."""
    g = DeltaGeometry(2, 4, 8, 6)
    inp = make_step(g, 3, torch.float64, "cpu", per_channel=False)
    slots = torch.tensor([0, 2, -1], dtype=torch.int32)
    s1 = torch.randn(3, 4, 6, 8, dtype=torch.float64)
    s2 = s1.clone()
    kw = dict(slot_ids=slots, scale=0.3, use_qk_l2norm=True)
    o1 = gated_delta_decode_step_ref(
        s1, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], out=torch.zeros(3, 4, 6, dtype=torch.float64), **kw
    )
    o2 = gated_delta_decode_step_ref(
        s2,
        inp["q"],
        inp["k"],
        inp["v"],
        inp["g"][..., None].expand(3, 4, 8),
        inp["beta"],
        out=torch.zeros(3, 4, 6, dtype=torch.float64),
        **kw,
    )
    assert torch.allclose(o1, o2, rtol=0, atol=1e-14) and torch.allclose(s1, s2, rtol=0, atol=1e-14)


def test_delta_rule_gate_formula():
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    A_log, bias = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    g, beta = delta_rule_gate(a, b, A_log, bias)
    assert torch.allclose(g, -A_log.exp() * torch.log1p(torch.exp(a + bias)))
    assert torch.allclose(beta, 1 / (1 + torch.exp(-b)))
    ak = torch.randn(3, 4, 5, dtype=torch.float64)
    gk, _ = delta_rule_gate(ak, b, A_log, torch.zeros(20, dtype=torch.float64))
    assert torch.allclose(gk, -A_log.exp()[:, None] * torch.log1p(torch.exp(ak)))
    assert bool((gk <= 0).all())


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_gated_delta_decode_ref_matches_fla_naive_recurrence(per_channel):
    """FLA's pure-PyTorch recurrences (state [K, V]) agree with ours (state [V, K])."""
    fla = pytest.importorskip("fla.ops.kda.naive" if per_channel else "fla.ops.gated_delta_rule.naive")
    g = DeltaGeometry(2, 2, 8, 6) if not per_channel else DeltaGeometry(2, 4, 8, 6)
    T, batch = 7, 2
    steps = [make_step(g, batch, torch.float64, "cpu", per_channel=per_channel) for _ in range(T)]
    S0 = torch.randn(batch, g.v_heads, g.head_v_dim, g.head_k_dim, dtype=torch.float64)
    state = S0.clone()
    scale = 0.37
    outs = []
    for inp in steps:
        out = torch.zeros(batch, g.v_heads, g.head_v_dim, dtype=torch.float64)
        gated_delta_decode_step_ref(
            state,
            inp["q"],
            inp["k"],
            inp["v"],
            inp["g"],
            inp["beta"],
            slot_ids=torch.arange(batch, dtype=torch.int32),
            scale=scale,
            use_qk_l2norm=True,
            out=out,
        )
        outs.append(out)
    stack = {key: torch.stack([s[key] for s in steps], 1) for key in steps[0]}
    q, k = prepare_qk(stack["q"], stack["k"], 1.0, True, torch.float64)  # FLA's naive ops take normalised q, k
    if per_channel:
        o, ST = fla.naive_recurrent_kda(
            q,
            k,
            stack["v"],
            stack["g"],
            stack["beta"],
            scale=scale,
            initial_state=S0.transpose(-1, -2),
            output_final_state=True,
        )
    else:
        o, ST = fla.naive_recurrent_gated_delta_rule(
            q,
            k,
            stack["v"],
            stack["beta"],
            stack["g"],
            scale=scale,
            initial_state=S0.transpose(-1, -2),
            output_final_state=True,
        )
    assert rel_err(o, torch.stack(outs, 1)) < 1e-6
    assert rel_err(ST.transpose(-1, -2), state) < 1e-6
