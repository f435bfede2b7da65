"""Memory / traffic planner: exact bytes, NVIDIA's published figures, concurrency, traffic."""

import json
import math

import pytest
import torch

from trtllm_replayssm.memory import (
    CURSOR_BYTES,
    MODES,
    conv_state_bytes,
    kv_bytes_per_token,
    mamba2_step_bytes,
    record_bytes,
    ssm_layer_bytes,
    ssm_layer_step_traffic,
    state_bytes,
)
from trtllm_replayssm.models import GDN, KDA, MAMBA2, from_hf_config, load_model
from trtllm_replayssm.planner import (
    CHECKPOINT_DTYPES,
    DTYPE_NAMES,
    Budget,
    format_plan,
    PlanConfig,
    kv_token_equivalent,
    max_concurrency,
    plan,
    sequence_kv_bytes_per_token,
    sequence_ssm_bytes,
    step_traffic,
)

FP8 = torch.float8_e4m3fn
MiB, KiB, GiB = 1 << 20, 1 << 10, 1 << 30


# --------------------------------------------------------------------------- NVIDIA's figures


def test_nvidia_figures_nemotron_super():
    model = load_model("nemotron-3-super-120b")
    mamba, attn = model.ssm_layers[0], model.attention_layers[0]
    # One Mamba-2 layer's fp32 state: 4 MiB per sequence.
    state = state_bytes(MAMBA2, mamba.geometry, torch.float32)
    assert state == 4 * MiB
    # An FP8 KV entry of its attention layers: 0.5 KiB per token (K and V, 2 heads of 128).
    kv = kv_bytes_per_token(attn.geometry, FP8)
    assert kv == KiB // 2
    # One SSM layer's state = 8,192 tokens of KV (of one attention layer).
    assert state // kv == 8192
    # The real config has 40 Mamba-2 and 8 attention layers: five per attention layer, so the
    # SSM states of a sequence equal 40,960 tokens of the model's KV cache...
    assert model.ssm_per_attention == 5
    states = len(model.ssm_layers) * state
    assert kv_token_equivalent(states, model, FP8) == 40960
    # ...and their load and store per decode step equal the KV reads of 81,920 tokens.
    t = step_traffic(model, "conventional", PlanConfig(kv_dtype=FP8))
    assert t.state_read == t.state_written == states
    assert kv_token_equivalent(t.state_read + t.state_written, model, FP8) == 81920


def test_plan_reports_the_nvidia_equivalents_with_conv_states_on_top():
    p = plan(load_model("nemotron-3-super-120b"), config=PlanConfig(kv_dtype=FP8), gpu_mem_bytes=141 * GiB)
    conv = p.modes["conventional"]
    conv_bytes = 40 * 10240 * 3 * 2  # bf16 conv states [conv_dim, d_conv - 1] of 40 layers
    assert p.kv_bytes_per_token == 8 * 512
    assert conv.ssm_bytes == 40 * 4 * MiB + conv_bytes
    assert conv.memory_kv_tokens == (40 * 4 * MiB + conv_bytes) / 4096
    assert conv.traffic_kv_tokens == (80 * 4 * MiB + 2 * conv_bytes) / 4096


# --------------------------------------------------------------------------- bytes


@pytest.mark.parametrize(
    "name, ring",
    [
        # replayssm_brief §6.3 (vLLM's formulas, bf16 records, L = 16): Nano 278 KiB, Super 296 KiB,
        # Qwen3.5-4B 194 KiB, Qwen3.5-122B 324 KiB per sequence per layer.
        pytest.param("nemotron-3-nano-4b", 278 * KiB, id="nemotron-nano"),
        pytest.param("nemotron-3-super-120b", 296 * KiB, id="nemotron-super"),
        pytest.param("qwen3.5-4b", 194 * KiB, id="qwen3.5-4b"),
        pytest.param("qwen3.5-122b-a10b", 324 * KiB, id="qwen3.5-122b"),
    ],
)
def test_record_ring_matches_published_formula(name, ring):
    layer = load_model(name).ssm_layers[0]
    b = ssm_layer_bytes(
        layer.kind,
        layer.geometry,
        "replay",
        buffer_len=16,
        spec_tokens=4,
        state_dtype=torch.float32,
        record_dtype=torch.bfloat16,
        conv_dtype=torch.bfloat16,
    )
    assert b.records == ring


def test_record_bytes_by_family():
    m = load_model("nemotron-3-super-120b").ssm_layers[0].geometry
    assert record_bytes(MAMBA2, m, torch.bfloat16, torch.float32) == 128 * 64 * 2 + 8 * 128 * 2 + 128 * 4
    g = load_model("qwen3.5-4b").ssm_layers[0].geometry
    gdn = record_bytes(GDN, g, torch.bfloat16, torch.float32)
    assert gdn == 32 * 128 * 2 + 16 * 128 * 2 + 32 * 4
    # KDA keeps one log-decay per key channel: g [v_heads, head_k_dim], fp16 beside 16-bit records,
    # fp32 beside fp32 ones.
    assert record_bytes(KDA, g, torch.bfloat16, torch.float32) == gdn - 32 * 4 + 32 * 128 * 2
    assert record_bytes(KDA, g, torch.float32, torch.float32) == (32 * 128 + 16 * 128 + 32 * 128) * 4
    # fp64 checkpoints keep fp64 gates, as the caches do.
    assert record_bytes(GDN, g, torch.float64, torch.float64) == (32 * 128 + 16 * 128 + 32) * 8


def test_layer_bytes_per_mode():
    layer = load_model("qwen3.5-122b-a10b").ssm_layers[0]
    kw = dict(buffer_len=16, spec_tokens=4, state_dtype=torch.float32, record_dtype=torch.bfloat16, conv_dtype=torch.bfloat16)
    b = {mode: ssm_layer_bytes(layer.kind, layer.geometry, mode, **kw) for mode in MODES}
    state, rec = 64 * 128 * 128 * 4, record_bytes(GDN, layer.geometry, torch.bfloat16, torch.float32)
    conv1, conv4 = 12288 * 3 * 2, 12288 * 6 * 2
    assert conv_state_bytes(layer.geometry, torch.bfloat16) == conv1
    assert (b["conventional"].state, b["conventional"].records, b["conventional"].conv) == (state, 0, conv1)
    assert (b["conventional_spec"].state, b["conventional_spec"].conv) == (5 * state, conv4)
    assert (b["replay"].state, b["replay"].records, b["replay"].cursors) == (state, 16 * rec, CURSOR_BYTES)
    assert (b["replay_spec"].records, b["replay_spec"].conv) == (20 * rec, conv4)
    assert b["replay"].total == conv1 + state + 16 * rec + CURSOR_BYTES


def test_tp_split_divides_ssm_and_kv_bytes():
    # Super at TP 2: heads and groups split evenly, so every per-slot buffer halves except the
    # per-layer cursors; KV heads 2 -> 1 per rank.
    model = load_model("nemotron-3-super-120b")
    whole, half = model.ssm_layers[0], model.for_tp(2).ssm_layers[0]
    for mode in MODES:
        kw = dict(
            buffer_len=16, spec_tokens=4, state_dtype=torch.float32, record_dtype=torch.bfloat16, conv_dtype=torch.bfloat16
        )
        w = ssm_layer_bytes(MAMBA2, whole.geometry, mode, **kw)
        h = ssm_layer_bytes(MAMBA2, half.geometry, mode, **kw)
        assert (w.conv, w.state, w.records, w.cursors) == (2 * h.conv, 2 * h.state, 2 * h.records, h.cursors)
    assert sequence_kv_bytes_per_token(model.for_tp(2), FP8) == 8 * 256


# --------------------------------------------------------------------------- traffic


def test_replay_traffic_matches_the_benchmark_model():
    layer = load_model("nemotron-3-super-120b").ssm_layers[0]
    g = layer.geometry
    t = ssm_layer_step_traffic(
        MAMBA2,
        g,
        "replay",
        buffer_len=16,
        spec_tokens=4,
        accepted=4,
        state_dtype=torch.float32,
        record_dtype=torch.bfloat16,
        conv_dtype=torch.bfloat16,
    )
    b = mamba2_step_bytes(
        "replay_step",
        nheads=g.nheads,
        head_dim=g.head_dim,
        d_state=g.d_state,
        ngroups=g.ngroups,
        L=16,
        state_dtype=torch.float32,
        act_dtype=torch.bfloat16,
    )
    assert (t.state_read, t.state_written, t.records_read, t.records_written) == (
        b.state_read,
        b.state_written,
        b.records_read,
        b.records_written,
    )
    assert t.state_written == 4 * MiB / 16
    assert t.conv_read == t.conv_written == 10240 * 3 * 2
    # an fp8 checkpoint's traffic counts its row scales (4 bytes a row) with its codes
    dims = dict(nheads=g.nheads, head_dim=g.head_dim, d_state=g.d_state, ngroups=g.ngroups, L=16, act_dtype=torch.bfloat16)
    fp8 = mamba2_step_bytes("replay_step", state_dtype=torch.float8_e4m3fn, **dims)
    assert fp8.state_read == MiB + g.nheads * g.head_dim * 4
    with pytest.raises(TypeError, match="mamba2_step_bytes: state_dtype is float8_e4m3fn in mode conventional"):
        mamba2_step_bytes("decode_step", state_dtype=torch.float8_e4m3fn, **dims)


def test_traffic_per_mode_ordering_and_spec_formulas():
    layer = load_model("qwen3.5-4b").ssm_layers[0]
    kw = dict(buffer_len=16, spec_tokens=4, state_dtype=torch.float32, record_dtype=torch.bfloat16, conv_dtype=torch.bfloat16)
    t = {mode: ssm_layer_step_traffic(layer.kind, layer.geometry, mode, accepted=2, **kw) for mode in MODES}
    S, rec = 2 * MiB, record_bytes(GDN, layer.geometry, torch.bfloat16, torch.float32)
    assert (t["conventional_spec"].state_read, t["conventional_spec"].state_written) == (S, 4 * S)
    assert (t["replay_spec"].state_written, t["replay_spec"].records_read, t["replay_spec"].records_written) == (
        S * 2 / 16,
        8 * rec,
        4 * rec,
    )
    totals = {mode: x.total for mode, x in t.items()}
    assert totals["replay"] < totals["replay_spec"] < totals["conventional"] < totals["conventional_spec"]
    # Fewer accepted tokens per step: fewer flushes.
    fewer = ssm_layer_step_traffic(layer.kind, layer.geometry, "replay_spec", accepted=1, **kw)
    assert fewer.state_written == t["replay_spec"].state_written / 2


def test_replay_roughly_halves_super_state_traffic():
    # replayssm_brief §6.4: replay moves about 0.56x the baseline's bytes for Super at L = 16.
    model, cfg = load_model("nemotron-3-super-120b"), PlanConfig()
    ratio = step_traffic(model, "replay", cfg).total / step_traffic(model, "conventional", cfg).total
    assert ratio == pytest.approx(0.56, abs=0.01)


# --------------------------------------------------------------------------- concurrency


def _tiny():
    return from_hf_config(
        {
            "hybrid_override_pattern": "MM*-",
            "mamba_num_heads": 4,
            "mamba_head_dim": 8,
            "ssm_state_size": 16,
            "n_groups": 2,
            "conv_kernel": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
        },
        name="tiny",
    )


def test_max_concurrency_is_the_largest_fitting_count():
    model, cfg = _tiny(), PlanConfig(kv_dtype=torch.bfloat16)
    ssm = sequence_ssm_bytes(model, "replay", cfg)
    kv = sequence_kv_bytes_per_token(model, torch.bfloat16)
    assert kv == 2 * 2 * 16 * 2
    per_seq = ssm + 100 * kv
    for n in (0, 1, 7):
        exact = 2 * ssm + n * per_seq  # two padding slots + n sequences
        assert max_concurrency(model, "replay", cfg, cache_bytes=exact, max_seq_len=100, num_padding_slots=2) == n
        assert max_concurrency(model, "replay", cfg, cache_bytes=exact - 1, max_seq_len=100, num_padding_slots=2) == max(
            n - 1, 0
        )


def test_plan_budget_and_concurrency():
    model = load_model("nemotron-3-super-120b")
    p = plan(
        model,
        tp_size=2,
        config=PlanConfig(kv_dtype=FP8),
        gpu_mem_bytes=141 * GiB,
        free_fraction=0.5,
        weights_bytes=120 * GiB,
        max_seq_len=2048,
        num_padding_slots=1,
    )
    assert p.budget.weights_per_rank == 60 * GiB
    assert p.budget.cache_bytes == int(81 * GiB * 0.5)
    rank = model.for_tp(2)
    for mode, mp in p.modes.items():
        ssm = sequence_ssm_bytes(rank, mode, p.config)
        per_seq = ssm + 2048 * 8 * 256
        assert mp.max_concurrency == (p.budget.cache_bytes - ssm) // per_seq
    c = {mode: mp.max_concurrency for mode, mp in p.modes.items()}
    assert c["conventional_spec"] < c["replay_spec"] < c["replay"] < c["conventional"]
    # ReplaySSM speculative holds ~4x the sequences of 1 + T state snapshots (T = 4).
    assert c["replay_spec"] / c["conventional_spec"] == pytest.approx(4.0, rel=0.1)


def test_plan_to_dict_is_json():
    p = plan(load_model("kimi-linear-48b"), config=PlanConfig(kv_dtype=FP8), gpu_mem_bytes=80 * GiB)
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert d["model"]["layer_counts"] == {"kda": 20, "attention": 7}
    assert d["config"]["kv_dtype"] == "fp8" and d["config"]["accepted"] == 4.0
    assert d["attention_layers"][0]["kv_bytes_per_token"] == 576
    assert d["ssm_layers"][0]["bytes_per_sequence"]["replay"]["total"] == sequence_ssm_bytes(p.model, "replay", p.config) // 20
    assert set(d["modes"]) == set(MODES)
    assert d["modes"]["conventional"]["traffic_vs_conventional"] == 1.0


def test_plan_without_attention_has_no_kv_equivalent():
    model = from_hf_config(
        {
            "hybrid_override_pattern": "M-",
            "mamba_num_heads": 2,
            "mamba_head_dim": 4,
            "ssm_state_size": 4,
            "n_groups": 1,
            "conv_kernel": 4,
        }
    )
    p = plan(model, gpu_mem_bytes=GiB)
    assert math.isinf(p.modes["replay"].memory_kv_tokens)
    assert json.loads(json.dumps(p.to_dict(), allow_nan=False))["modes"]["replay"]["memory_kv_tokens"] is None


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        pytest.param(dict(buffer_len=4, spec_tokens=8), ValueError, "expected B >= T", id="B<T"),
        pytest.param(dict(accepted=5.0), ValueError, "accepted is 5.0", id="accepted"),
        pytest.param(dict(buffer_len=0), ValueError, "buffer_len is 0", id="L0"),
        pytest.param(dict(state_dtype=torch.int8), TypeError, "state_dtype", id="state-int8"),
    ],
)
def test_plan_config_rejects(kwargs, error, message):
    with pytest.raises(error, match=message):
        PlanConfig(**kwargs)


def test_a_buffer_too_long_for_speculative_records_plans_replay_without_it():
    """B + T > 64 leaves replay mode (L = B) planned and says why replay spec is not."""
    config = PlanConfig(buffer_len=64, spec_tokens=4)
    assert "68 records per slot" in config.replay_spec_unavailable
    p = plan(load_model("kimi-linear-48b"), config=config, gpu_mem_bytes=141 << 30)
    assert tuple(p.modes) == ("conventional", "conventional_spec", "replay")
    assert all(a.mode != "replay_spec" for a in p.advice)
    text = format_plan(p)
    assert "replay spec not planned: history B 64 + window T 4 = 68 records per slot" in text
    assert "output error after 4,096 decode steps at L 64" in text
    d = p.to_dict()
    assert "replay_spec" not in d["modes"] and d["replay_spec_unavailable"] == config.replay_spec_unavailable
    assert PlanConfig(buffer_len=60, spec_tokens=4).replay_spec_unavailable is None


def test_plan_rejects_a_model_without_caches():
    with pytest.raises(ValueError, match="no SSM or attention layer"):
        plan(from_hf_config({"hybrid_override_pattern": "-E"}, name="ffn-only"), gpu_mem_bytes=GiB)


def test_budget_rejects_weights_beyond_memory():
    with pytest.raises(ValueError, match="leave nothing"):
        Budget(gpu_mem_bytes=80 * GiB, weights_bytes=240 * GiB, tp_size=2)
    with pytest.raises(ValueError, match="free_fraction"):
        Budget(gpu_mem_bytes=80 * GiB, free_fraction=0)


def test_plan_route_advice_at_max_concurrency_and_at_a_batch():
    model = load_model("kimi-linear-48b")
    p = plan(model, gpu_mem_bytes=141 * 2**30, weights_bytes=90 * 2**30)
    assert p.batch is None
    assert [(a.family, a.mode, a.batch) for a in p.advice] == [
        ("kda", "replay", p.modes["replay"].max_concurrency),
        ("kda", "replay_spec", p.modes["replay_spec"].max_concurrency),
    ]
    at16 = plan(model, gpu_mem_bytes=141 * 2**30, batch=16)
    replay, spec = at16.advice
    assert (replay.ratio, replay.recommendation, spec.ratio, spec.recommendation) == (1.26, "replay", 2.15, "replay")
    text = format_plan(at16)
    assert "Measured speed of the ReplaySSM routes at batch 16 (advice only: nothing is switched)" in text
    assert f"  {replay.text}" in text and f"  {spec.text}" in text
    d = json.loads(json.dumps(at16.to_dict()))
    assert d["advice_batch"] == 16 and d["route_advice"][0]["ratio"] == 1.26
    assert d["route_advice"][0]["source"]["doc"] == "docs/benchmarks.md"


@pytest.mark.parametrize("records", [torch.float32, torch.float16])
def test_plan_with_other_records_than_those_timed_says_not_measured(records):
    """Every cell was timed with bf16 records: a plan with fp32 (the Triton kernels) or fp16
    records gets no figure, neither in its advice (which names the records measured) nor in the
    checkpoint table, where the bf16 records' plan has one in each."""
    model = load_model("qwen3.5-122b-a10b")
    bf16 = plan(model, gpu_mem_bytes=141 * GiB)
    p = plan(model, config=PlanConfig(record_dtype=records), gpu_mem_bytes=141 * GiB)
    name = DTYPE_NAMES[records]
    assert all(a.ratio is not None for a in bf16.advice) and all(cp.advice[0].ratio for cp in bf16.checkpoints)
    replay, spec = p.advice
    for a in (replay, spec, *(a for cp in p.checkpoints for a in cp.advice)):
        assert (a.record_dtype, a.ratio, a.recommendation) == (name, None, None)
    batch = p.modes["replay"].max_concurrency
    assert replay.text == (
        f"gdn replay step L 16, fp32 checkpoint, {name} records, batch {batch}: not measured (measured with bf16 "
        "records only: fp32 at L 8/16/32, bf16 at L 8/16/32, fp16 at L 16, fp8 at L 16 vs fp32); no recommendation"
    )
    assert spec.text.endswith(
        f"{name} records, batch {p.modes['replay_spec'].max_concurrency}: not measured (measured with bf16 records "
        "only: fp32 at B 16, T 2/4/8, bf16 at B 16, T 2/4/8); no recommendation"
    )
    text = format_plan(p)
    assert f"  {replay.text}" in text and f"  {spec.text}" in text
    assert all(row.endswith("  gdn not measured") for row in _checkpoint_rows(text))
    assert "fp8: no conventional step" not in text  # the fp8 note is of bf16 records' figures
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))
    assert [(a["record_dtype"], a["ratio"]) for a in d["route_advice"]] == [(name, None), (name, None)]


def test_plan_route_advice_rejects_a_bad_batch():
    with pytest.raises(ValueError, match="plan: batch is 0; expected None or a positive int"):
        plan(load_model("qwen3.5-4b"), gpu_mem_bytes=2**30, batch=0)


def test_plan_sets_the_checkpoint_dtypes_side_by_side():
    model = load_model("nemotron-3-super-120b")
    p = plan(model, config=PlanConfig(buffer_len=8), gpu_mem_bytes=141 * GiB, batch=16)
    assert [cp.dtype for cp in p.checkpoints] == list(CHECKPOINT_DTYPES)
    fp32, bf16, fp16, fp8 = p.checkpoints
    # fp32: the replay mode above; a 16-bit checkpoint halves the state, not the records
    assert (fp32.ssm_bytes, fp32.max_concurrency) == (p.modes["replay"].ssm_bytes, p.modes["replay"].max_concurrency)
    assert fp32.traffic == p.modes["replay"].traffic
    half = PlanConfig(buffer_len=8, state_dtype=torch.bfloat16)
    assert bf16.ssm_bytes == sequence_ssm_bytes(model, "replay", half) == fp16.ssm_bytes
    assert bf16.ssm_bytes < fp32.ssm_bytes and bf16.max_concurrency > fp32.max_concurrency
    assert bf16.traffic.state_read * 2 == fp32.traffic.state_read and bf16.traffic.records_read == fp32.traffic.records_read
    # fp8: a byte per element plus an fp32 scale per (head, head_dim) row, in the state and its traffic
    nh, hd, ds = model.ssm_layers[0].geometry.state_dims
    per_layer = nh * hd * ds + nh * hd * 4
    assert fp8.ssm_bytes == bf16.ssm_bytes - len(model.ssm_layers) * (2 * nh * hd * ds - per_layer)
    assert fp8.traffic.state_read == len(model.ssm_layers) * per_layer  # read every step
    assert fp8.traffic.state_written == len(model.ssm_layers) * per_layer / 8  # written once per L = 8 steps
    assert fp8.max_concurrency > bf16.max_concurrency and fp8.advice[0].ratio is None
    # the measured replay step at the plan's batch, per dtype: fp16 was not measured
    assert [(a.family, a.state_dtype, a.L, a.batch) for a in bf16.advice] == [("mamba2", "bf16", 8, 16)]
    assert bf16.advice[0].ratio == 1.16 and fp16.advice[0].ratio is None
    text = format_plan(p)
    assert "Replay checkpoint dtypes (L 8, records bf16; vs conv: the conventional mode above, state fp32)" in text
    assert "mamba2 1.16x at batch 16" in text and "mamba2 not measured" in text
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))["checkpoint_dtypes"]
    assert [c["dtype"] for c in d] == ["fp32", "bf16", "fp16", "fp8"]
    assert d[1]["ssm_bytes_per_sequence"] == bf16.ssm_bytes and d[1]["route_advice"][0]["ratio"] == 1.16
    assert d[0]["traffic_vs_conventional"] == pytest.approx(fp32.traffic.total / p.modes["conventional"].traffic.total)


def _fp8_note(date: str) -> str:
    return (
        "  fp8: no conventional step keeps an fp8 state, so its replay step is measured against the fp32 conventional "
        f'step (H200 {date}, docs/benchmarks.md "Checkpoint dtypes: speed")'
    )


@pytest.mark.parametrize(
    "model, family, ratio, verdict, bf16, date",
    [("nemotron-3-super-120b", "mamba2", 4.66, "faster", 3.07, "2026-12-06"),
     ("qwen3.5-122b-a10b", "gdn", 3.86, "faster", 2.88, "2026-12-07"),
     ("kimi-linear-48b", "kda", 3.08, "faster", 2.77, "2026-12-07")],
)  # fmt: skip
def test_plan_sets_an_fp8_checkpoint_against_the_fp32_conventional_step_and_the_bf16_replay_step(
    model, family, ratio, verdict, bf16, date
):
    """No conventional step keeps an fp8 state: the fp8 row's figure is against the fp32
    conventional step, said in the row and the note under it, with the bf16 replay step of the
    same run (H200, Mamba-2 session 61's run, GDN and KDA session 71's: fp8 faster on all three
    at batch 256)."""
    p = plan(load_model(model), gpu_mem_bytes=141 * GiB, batch=256)
    lines = format_plan(p).splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Replay checkpoint dtypes"))
    assert lines[header + 1].endswith("measured replay step vs the conventional step at that dtype (fp8: at fp32)")
    assert lines[header + 5].startswith("  fp8 ")
    assert lines[header + 5].endswith(f"  {family} {ratio:.2f}x the fp32 conventional step at batch 256")
    assert lines[header + 6] == (
        f"{_fp8_note(date)}; {family} {verdict} than the bf16 replay step of the same run ({ratio:.2f}x against {bf16:.2f}x at batch 256)"
    )
    (fp8,) = [a for cp in p.checkpoints if cp.dtype == FP8 for a in cp.advice]
    assert (fp8.ratio, fp8.conventional_dtype, fp8.bf16_same_run) == (ratio, "fp32", bf16)
    d = json.loads(json.dumps(p.to_dict(), allow_nan=False))["checkpoint_dtypes"][3]["route_advice"][0]
    assert (d["state_dtype"], d["conventional_dtype"], d["ratio"], d["bf16_same_run"]) == ("fp8", "fp32", ratio, bf16)


def test_plan_of_another_state_dtype_says_fp8_is_not_measured_against_it():
    config = PlanConfig(state_dtype=torch.bfloat16)
    text = format_plan(plan(load_model("qwen3.5-122b-a10b"), config=config, gpu_mem_bytes=141 * GiB, batch=16))
    assert (
        f"{_fp8_note('2026-12-07')}, not the plan's bf16 one (not measured against it); gdn slower than the bf16 "
        "replay step of the same run (2.21x against 2.28x at batch 16)"
    ) in text.splitlines()
    one = format_plan(plan(load_model("nemotron-3-super-120b"), gpu_mem_bytes=141 * GiB, batch=1))
    assert "; mamba2 as fast as the bf16 replay step of the same run (1.34x against 1.34x at batch 1)" in one
    # fp8 was timed at L 16 only: elsewhere "not measured", and no note
    other = format_plan(plan(load_model("qwen3.5-122b-a10b"), config=PlanConfig(buffer_len=8), gpu_mem_bytes=141 * GiB))
    assert "gdn not measured" in other and "fp8: no conventional step" not in other


def test_plan_checkpoint_rows_name_the_layer_timed_when_it_is_another():
    """A checkpoint dtype timed only on another layer of the family (fp16 and fp8: Qwen3.5-122B's
    GDN layer) says so in its row, where the model's own layer was timed (fp32, bf16) it does not;
    the advice carries the layer."""
    p = plan(load_model("qwen3.5-4b"), gpu_mem_bytes=141 * GiB, batch=256)
    rows = {cp.dtype: line for cp, line in zip(p.checkpoints, _checkpoint_rows(format_plan(p)))}
    other = ", measured on Qwen3.5-122B-A10B GDN (16, 64, 128, 128)"
    assert rows[torch.float16].endswith(other) and rows[FP8].endswith(other)
    assert "measured on" not in rows[torch.float32] and "measured on" not in rows[torch.bfloat16]
    by_dtype = {cp.dtype: cp.advice[0] for cp in p.checkpoints}
    assert by_dtype[FP8].measured_layer == "Qwen3.5-122B-A10B GDN (16, 64, 128, 128)"
    assert by_dtype[torch.float32].measured_layer is None
    own = plan(load_model("qwen3.5-122b-a10b"), gpu_mem_bytes=141 * GiB, batch=256)
    assert "measured on" not in "".join(_checkpoint_rows(format_plan(own)))


def _checkpoint_rows(text: str) -> list:
    """The four dtype rows of a plan's "Replay checkpoint dtypes" table (fp32, bf16, fp16, fp8)."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("Replay checkpoint dtypes"))
    return lines[header + 2 : header + 6]


def test_plan_checkpoint_advice_at_each_dtypes_max_concurrency():
    p = plan(load_model("kimi-linear-48b"), gpu_mem_bytes=141 * GiB, weights_bytes=90 * GiB)
    for cp in p.checkpoints:
        assert [a.batch for a in cp.advice] == [cp.max_concurrency]
    tight = plan(load_model("kimi-linear-48b"), gpu_mem_bytes=GiB // 1024, max_seq_len=1)
    assert all(cp.max_concurrency == 0 and cp.advice == () for cp in tight.checkpoints)
    rows = [line for line in format_plan(tight).splitlines() if line.startswith(("  fp32 ", "  bf16 ", "  fp16 ", "  fp8 "))]
    assert len(rows) == 4 and all(row.endswith("  -") for row in rows)


def test_an_fp8_state_is_a_replay_checkpoint_only():
    """The replay modes' figures take an fp8 checkpoint; the conventional modes, and so plan's
    own config, refuse it (no conventional kernel keeps an fp8 state)."""
    model = load_model("nemotron-3-nano-4b")
    fp8 = PlanConfig(state_dtype=torch.float8_e4m3fn)
    assert sequence_ssm_bytes(model, "replay_spec", fp8) < sequence_ssm_bytes(model, "replay_spec", PlanConfig())
    with pytest.raises(TypeError, match="state_dtype is float8_e4m3fn in mode conventional; expected a replay mode"):
        sequence_ssm_bytes(model, "conventional", fp8)
    with pytest.raises(TypeError, match="plan: config.state_dtype is fp8; expected fp32, bf16, fp16 or fp64"):
        plan(model, config=fp8, gpu_mem_bytes=GiB)
    with pytest.raises(TypeError, match="PlanConfig: state_dtype is torch.int8; expected fp32, bf16, fp16, fp64 or fp8"):
        PlanConfig(state_dtype=torch.int8)


def test_an_fp8_state_counts_its_row_scales():
    """fp8-e4m3 checkpoints keep one fp32 scale per row beside the codes (Mamba-2 replay caches)."""
    g = load_model("nemotron-3-nano-4b").ssm_layers[0].geometry
    nh, hd, ds = g.state_dims
    assert state_bytes(MAMBA2, g, torch.float8_e4m3fn) == nh * hd * ds + nh * hd * 4
    assert state_bytes(MAMBA2, g, torch.bfloat16) == nh * hd * ds * 2
