"""Checkpoint dtypes under TensorRT-LLM (CPU stand-ins): stochastic rounding at flush
(``rounding_seed``) reaches every replay step and the mixed-batch GDN flush; an fp8 SSM state,
which cannot carry ReplaySSM's row scales, and a seed with an unrounded (fp32 / fp64) state are
refused with the reason and what to set, before any pool is built."""

import contextlib
import re
import types

import pytest
import torch

import fake_trtllm as ft
from standins import importer
from test_extension import context_for, feature
from test_steps import NUM_SLOTS, Family, pooled_layer
from trtllm_replayssm.ops import replay_cache_state
from trtllm_replayssm_builders import trtllm
from trtllm_replayssm_builders.trtllm import adapter
from trtllm_replayssm_builders.trtllm.config import ENV_ROUNDING_SEED, ReplaySSMConfig, config_from_env
from trtllm_replayssm_builders.trtllm.extension import ReplayRecordsFeature
from trtllm_replayssm_builders.trtllm.steps import flush_delta_rule_records, gated_delta_step, mamba2_step, replay_cache

FP8 = torch.float8_e4m3fn
L = 3
MAPPING = types.SimpleNamespace(tp_size=1, pp_size=1, cp_size=1, enable_attention_dp=False)
KV = types.SimpleNamespace(enable_block_reuse=False)
LIVE = {101: 1, 102: 3}
IDS = [101, 102, ft.DUMMY_REQUEST_ID]
GEOMETRY = {"mamba2": (4, 8, 16, 2, "x_b_c"), "gdn": (4, 8, 8, 2, "q_k_v"), "kda": (2, 8, 8, 2, "q_k_v")}

FP8_REFUSED = re.escape(
    "TensorRT-LLM's SSM state (the ReplaySSM checkpoint) is torch.float8_e4m3fn, but an fp8 ReplaySSM "
    "checkpoint needs one fp32 scale per (head, head_dim) row beside the codes, which TensorRT-LLM's SSM "
    "state pool does not hold and its prefill does not write, so an fp8 checkpoint cannot engage under "
    "TensorRT-LLM (1.3.0rc26 (tag v1.3.0rc26, commit c295dd9) takes kv_cache_config.mamba_ssm_cache_dtype "
    "auto, float16, bfloat16 or float32). Set mamba_ssm_cache_dtype='bfloat16' and "
    "enable_replayssm(rounding_seed=...) (stochastic rounding at each flush; TRTLLM_REPLAYSSM_ROUNDING_SEED), "
    "or disable ReplaySSM"
)


def seed_refused(seed, dtype):
    return re.escape(
        f"ReplaySSM: rounding_seed is {seed}, but TensorRT-LLM's SSM state (the ReplaySSM checkpoint, "
        f"kv_cache_config.mamba_ssm_cache_dtype) is {dtype}, which a flush stores unrounded; set "
        f"mamba_ssm_cache_dtype='bfloat16' or 'float16' to round it stochastically, or leave rounding_seed "
        f"unset (TRTLLM_REPLAYSSM_ROUNDING_SEED)"
    )


@contextlib.contextmanager
def hooks(**config):
    """Hooks with ``ReplaySSMConfig(buffer_len=L, **config)`` on fresh stand-in modules."""
    status = adapter.install(ReplaySSMConfig(buffer_len=L, **config), importer(ft.modules()))
    try:
        yield status
    finally:
        adapter.uninstall()


def build_manager(kind, state_dtype, act_dtype=torch.float64):
    nheads, head_dim, d_state, n_groups, layout = GEOMETRY[kind]
    return ft.MambaHybridCacheManagerV2(
        d_state,
        4,
        nheads,
        n_groups,
        head_dim,
        1,
        [True],
        act_dtype,
        state_dtype,
        KV,
        None,
        max_batch_size=4,
        mapping=MAPPING,
        conv_state_layout=layout,
    )


# ---------------------------------------------------------------- the setting


@pytest.mark.parametrize("seed", [0, 7, 2**31 - 1])
def test_config_takes_a_seed_in_range(seed):
    assert ReplaySSMConfig(rounding_seed=seed).rounding_seed == seed
    assert ReplaySSMConfig().rounding_seed is None


@pytest.mark.parametrize("seed", [-1, 2**31, True, 1.5, "7"])
def test_config_refuses_a_bad_seed(seed):
    with pytest.raises(
        ValueError, match=re.escape(f"ReplaySSMConfig: rounding_seed is {seed!r}; expected None or an int in [0, 2^31)")
    ):
        ReplaySSMConfig(rounding_seed=seed)


def test_config_from_env_reads_the_seed():
    assert config_from_env({ENV_ROUNDING_SEED: " 42 "}).rounding_seed == 42
    assert config_from_env({ENV_ROUNDING_SEED: ""}).rounding_seed is None
    with pytest.raises(ValueError, match=r"TRTLLM_REPLAYSSM_ROUNDING_SEED is '-3'; expected an int in \[0, 2\^31\)"):
        config_from_env({ENV_ROUNDING_SEED: "-3"})
    with pytest.raises(
        ValueError, match=r"TRTLLM_REPLAYSSM_ROUNDING_SEED='2147483648'\): ReplaySSMConfig: rounding_seed is 2147483648"
    ):
        config_from_env({ENV_ROUNDING_SEED: "2147483648"})


def test_enable_replayssm_passes_the_seed(monkeypatch):
    got = []
    monkeypatch.setattr(adapter, "install", lambda config: got.append(config) or "status")
    assert trtllm.enable_replayssm(buffer_len=8, rounding_seed=5) == "status"
    assert got == [ReplaySSMConfig(buffer_len=8, rounding_seed=5)]
    with pytest.raises(ValueError, match="rounding_seed is -5"):
        trtllm.enable_replayssm(rounding_seed=-5)


def test_status_summary_names_the_seed():
    with hooks(rounding_seed=9) as status:
        assert status.summary().startswith(
            "ReplaySSM on TensorRT-LLM 1.3.0rc26: L = 3, families mamba2, gdn, kda, stochastic rounding seed 9; hooked:"
        )
    with hooks() as status:
        assert "rounding" not in status.summary()


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize("seed", [None, 3])
def test_fp8_engine_state_refused_by_the_extension(seed):
    model, ctx = context_for("nemotron-3-super-120b", ssm_state_dtype=FP8)
    f = ReplayRecordsFeature(
        ReplaySSMConfig(rounding_seed=seed),
        {l.index: l.kind for l in model.ssm_layers},
        make_role=lambda n: n,
        make_buffer_config=lambda role, size: (role, size),
    )
    with pytest.raises(ValueError, match="^ReplaySSM: " + FP8_REFUSED + "$"):
        f.validate(ctx)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_seed_with_an_unrounded_engine_state_refused_by_the_extension(dtype):
    model, ctx = context_for("qwen3.5-122b-a10b", ssm_state_dtype=dtype)
    layers = {l.index: l.kind for l in model.ssm_layers}
    f = ReplayRecordsFeature(
        ReplaySSMConfig(rounding_seed=3), layers, make_role=lambda n: n, make_buffer_config=lambda r, s: (r, s)
    )
    with pytest.raises(ValueError, match="^" + seed_refused(3, dtype) + "$"):
        f.validate(ctx)
    feature(layers).validate(ctx)  # without a seed: accepted


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_seed_with_a_rounded_engine_state_accepted(dtype):
    model, ctx = context_for("kimi-linear-48b", ssm_state_dtype=dtype)
    f = ReplayRecordsFeature(
        ReplaySSMConfig(rounding_seed=3),
        {l.index: l.kind for l in model.ssm_layers},
        make_role=lambda n: n,
        make_buffer_config=lambda r, s: (r, s),
    )
    f.validate(ctx)


def test_manager_without_hooked_local_layers_is_not_refused():
    model, ctx = context_for("nemotron-3-super-120b", ssm_state_dtype=FP8)
    f = ReplayRecordsFeature(ReplaySSMConfig(rounding_seed=3), {999: "mamba2"}, make_role=str, make_buffer_config=tuple)
    f.validate(ctx)  # layer 999 is not this manager's: nothing ReplaySSM checks


@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_manager_with_an_fp8_state_refused_at_construction(kind):
    """The stand-in V2 manager validates its extensions before it allocates its pool, as
    TensorRT-LLM's does: an fp8 SSM state stops LLM construction with the reason."""
    with hooks():
        mixers_of(kind)
        with pytest.raises(ValueError, match=FP8_REFUSED):
            build_manager(kind, FP8)


def test_manager_with_an_fp32_state_and_a_seed_refused_at_construction():
    with hooks(rounding_seed=1):
        mixers_of("mamba2")
        with pytest.raises(ValueError, match=seed_refused(1, torch.float32)):
            build_manager("mamba2", torch.float32)
        build_manager("mamba2", torch.bfloat16)


def test_steps_refuse_an_fp8_checkpoint_handed_to_them():
    """Behind the extension's check, an fp8 state reaching a step directly is refused the same
    way (not the cache constructor's 'without checkpoint_scale')."""
    fam = Family("mamba2", torch.float32, torch.float32)
    layer, _, _ = pooled_layer(fam, torch.float32)
    checkpoint = torch.zeros((NUM_SLOTS,) + (4, 8, 16), dtype=FP8)
    x, dt, B, C = fam.inputs(1)
    with pytest.raises(ValueError, match="^trtllm mamba2_step: " + FP8_REFUSED):
        mamba2_step(layer, checkpoint, x, dt, fam.params["A"], B, C, slot_ids=torch.tensor([0], dtype=torch.int32))
    gfam = Family("gdn", torch.float32, torch.float32)
    glayer, gcheckpoint, _ = pooled_layer(gfam, torch.float32)
    with pytest.raises(ValueError, match="^trtllm flush_delta_rule_records: " + FP8_REFUSED):
        flush_delta_rule_records(glayer, gcheckpoint.to(FP8), torch.tensor([0], dtype=torch.int32))


def test_steps_refuse_a_seed_with_an_fp32_checkpoint():
    fam = Family("gdn", torch.float32, torch.float32)
    layer, checkpoint, _ = pooled_layer(fam, torch.float32, cursors=[0] * NUM_SLOTS)
    with pytest.raises(ValueError, match=r"gdn_replay_step: rounding_seed given with a torch.float32 checkpoint"):
        gated_delta_step(layer, checkpoint, *fam.inputs(1), slot_ids=torch.tensor([2], dtype=torch.int32), rounding_seed=4)
    with pytest.raises(ValueError, match=r"flush_delta_rule_records: rounding_seed given with a torch.float32 checkpoint"):
        flush_delta_rule_records(layer, checkpoint, torch.tensor([2], dtype=torch.int32), rounding_seed=4)


# ---------------------------------------------------------------- the seed reaches the steps


def mixers_of(kind):
    if kind == "mamba2":
        return ft.Mamba2Mixer(nheads=4, head_dim=8, d_state=16, n_groups=2, layer_idx=0)
    if kind == "gdn":
        mixer = ft.Qwen3NextGatedDeltaNet(None, None, layer_idx=0)
        mixer.conv1d.weight.data.normal_()
        return mixer
    return ft.KimiKDALinearAttention(None, layer_idx=0)


def forward(kind, mixer, attn, meta):
    n, f64 = attn.seq_lens.shape[0] - attn.num_contexts, torch.float64
    if kind == "mamba2":
        inputs = tuple(torch.randn(shape, dtype=f64) for shape in ((n, 4, 8), (n, 4), (n, 2, 16), (n, 2, 16)))
        return mixer(inputs, attn, meta)
    if kind == "gdn":
        mixed = torch.randn(n, mixer.conv1d.weight.shape[0], dtype=f64)
        return mixer.forward_core(mixed, torch.randn(n, 4, dtype=f64), torch.randn(n, 4, dtype=f64), attn, meta)
    attn.mamba_metadata = meta
    return mixer._forward_impl(torch.randn(n, 16, dtype=f64), attn)


def decode_run(kind, state_dtype, seed, *, steps=L, mixed_last=False):
    """Hooked decode of two requests (+ a padding row) on a ``state_dtype`` SSM state from the
    same random weights, states and inputs (torch seed 0) with ``rounding_seed=seed``; returns
    (the live slots' checkpoint bits, the padding slot's state, the store's cursors). With
    ``mixed_last`` the last step is a GDN batch with a prefill (its decode rows are flushed)."""
    torch.manual_seed(0)
    with hooks(rounding_seed=seed):
        mixer = mixers_of(kind)
        mgr = build_manager(kind, state_dtype)
        meta = ft.Mamba2Metadata(max_batch_size=4)
        mgr.schedule(dict(LIVE), {})
        mgr._request_slots[ft.DUMMY_REQUEST_ID] = 4
        cache = mgr.mamba_layer_cache(0)
        cache.temporal.copy_(torch.randn(cache.temporal.shape, dtype=torch.float64))
        cache.conv.copy_(torch.randn(cache.conv.shape, dtype=torch.float64))
        padding = cache.temporal[4].clone()
        for step in range(steps):
            mixed = mixed_last and step == steps - 1
            if mixed:
                mgr._request_slots[301] = 0
            attn = ft.attn_metadata_for(mgr, ([301] if mixed else []) + IDS[: 2 if mixed else 3], num_contexts=int(mixed))
            meta.prepare(attn)
            forward(kind, mixer, attn, meta)
        live = list(LIVE.values())
        cursor = mgr.get_aux_cache_extension("replayssm_records").store.layer(0).cursor.clone()
        return cache.temporal[live].view(torch.int16).clone(), (padding, cache.temporal[4].clone()), cursor


@pytest.mark.parametrize("state_dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("kind", ["mamba2", "gdn", "kda"])
def test_rounding_seed_reaches_every_family_step(kind, state_dtype):
    """L decode steps (one flush): the same seed gives the same checkpoint bits, another seed or
    none other bits; the padding slot stays untouched."""
    bits, (pad_before, pad_after), cursor = decode_run(kind, state_dtype, 11)
    assert cursor[list(LIVE.values())].eq(0).all()  # the last step flushed
    assert torch.equal(pad_before, pad_after)
    assert torch.equal(bits, decode_run(kind, state_dtype, 11)[0])
    assert not torch.equal(bits, decode_run(kind, state_dtype, 12)[0])
    assert not torch.equal(bits, decode_run(kind, state_dtype, None)[0])


def test_rounding_seed_reaches_the_mixed_batch_flush():
    """A GDN batch with a prefill folds its decode rows' records first: seeded, reproducible."""
    bits, _, cursor = decode_run("gdn", torch.bfloat16, 11, steps=2, mixed_last=True)
    assert cursor[list(LIVE.values())].eq(0).all()
    assert torch.equal(bits, decode_run("gdn", torch.bfloat16, 11, steps=2, mixed_last=True)[0])
    assert not torch.equal(bits, decode_run("gdn", torch.bfloat16, 12, steps=2, mixed_last=True)[0])
    assert not torch.equal(bits, decode_run("gdn", torch.bfloat16, None, steps=2, mixed_last=True)[0])


# ---------------------------------------------------------------- the seeded flush itself


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_seeded_flush_rounds_stochastically_between_neighbours(kind):
    """flush_delta_rule_records with a seed: every value one of the two bf16 neighbours of the
    exact state, unbiased (the mean over 64 seeds is 4x closer to the exact state than round to
    nearest), reproducible, and cursor-0 rows keep their bits."""
    fam = Family(kind, torch.float32, torch.float32)
    layer, checkpoint, _ = pooled_layer(fam, torch.bfloat16, cursors=[0, 2, 0, 1, 0])
    slots = torch.tensor([1, 3, 0, -1], dtype=torch.int32)
    start = [checkpoint.clone(), layer.cursor.clone()]
    exact = replay_cache_state(replay_cache("test", layer, checkpoint), torch.tensor([1, 3, 0]))
    nearest = exact.to(torch.bfloat16).float()
    results = []
    for seed in range(64):
        checkpoint.copy_(start[0])
        layer.cursor.copy_(start[1])
        flush_delta_rule_records(layer, checkpoint, slots, rounding_seed=seed)
        results.append(checkpoint[[1, 3, 0]].float())
        assert layer.cursor[[1, 3, 0]].eq(0).all()
        assert torch.equal(checkpoint[0].view(torch.int16), start[0][0].view(torch.int16))  # cursor 0
        assert torch.equal(checkpoint[[2, 4]], start[0][[2, 4]])  # not flushed
    got = torch.stack(results)
    down = torch.minimum(got, nearest[None]).amin(0)
    up = torch.maximum(got, nearest[None]).amax(0)
    spacing = (exact.abs() * 2**-7).clamp(min=1e-30)
    assert ((up - down) <= 1.01 * spacing).all()  # at most the two neighbours of each value
    assert not torch.equal(results[0], results[1])
    bias_sr = (got.mean(0) - exact)[:2].abs().mean()
    bias_nearest = (nearest - exact)[:2].abs().mean()
    assert bias_sr < bias_nearest / 3, (bias_sr, bias_nearest)
    # the same seed, the same bits
    checkpoint.copy_(start[0])
    layer.cursor.copy_(start[1])
    flush_delta_rule_records(layer, checkpoint, slots, rounding_seed=5)
    again = checkpoint.clone()
    checkpoint.copy_(start[0])
    layer.cursor.copy_(start[1])
    flush_delta_rule_records(layer, checkpoint, slots, rounding_seed=5)
    assert torch.equal(checkpoint.view(torch.int16), again.view(torch.int16))
    # no seed: round to nearest
    checkpoint.copy_(start[0])
    layer.cursor.copy_(start[1])
    flush_delta_rule_records(layer, checkpoint, slots)
    assert torch.equal(checkpoint[[1, 3, 0]].float(), nearest)
