"""Hugging Face hook: fp8-e4m3 checkpoints (per-row scales) and stochastic rounding at flush
(``rounding_seed``), on tiny random models, CPU (the ops run the PyTorch reference).

Tolerances, measured over 4 model / prompt seeds at L = 4, 12 new tokens (max |Δ logits| /
max |logits| against the host's fp32 decode, up to the first differing token): an fp8
checkpoint on the Mamba-2 families 9e-4 to 6.4e-3 (bf16: 8e-5 to 4e-4), so FP8_RTOL = 2e-2;
the GDN / KDA tiny models amplify the fp8 rounding up to O(1) and their tokens diverge, so there
the fp8 decode is compared with an fp32 checkpoint admitted from the same fp8 codes (no flush:
the two must agree to fp32 rounding, FP32_RTOL) and its admission / write-back are checked bit
for bit.
"""

import pytest
import torch

from trtllm_replayssm.reference.rounding import fp8_row_decode, fp8_row_encode
from trtllm_replayssm_builders.hf import disable_replayssm, enable_replayssm, replayssm_hook
from trtllm_replayssm_builders.hf import hook as hook_module
from trtllm_replayssm_builders.hf import mixers
from trtllm_replayssm_builders.hf.random_models import build_random_model

from op_checks import bits
from test_hf_hooks import FP32_RTOL, ONE_PER_KIND, _generate, _prompts, _rel_err

FP8 = torch.float8_e4m3fn
FP8_RTOL = 2e-2
MAMBA2_FAMILIES = ("nemotron_h", "mamba2")


def _host_states(hook, cache):
    """Layer index -> the host's SSM state tensor of ``cache`` (host layout)."""
    return {layer.index: cache.layers[layer.index].recurrent_states[0] for layer in hook.layers}


def _checkpoint_bits(hook, cache):
    """Layer index -> (checkpoint, scale or None) copies of every store of ``cache``."""
    out = {}
    for index, store in hook.stores(cache).items():
        scale = store.checkpoint_scale
        out[index] = (store.checkpoint.clone(), None if scale is None else scale.clone())
    return out


def _same_bits(a, b):
    """Whether two _checkpoint_bits results hold the same bits (fp8 compared as bytes)."""
    assert a.keys() == b.keys()
    for index in a:
        (ca, sa), (cb, sb) = a[index], b[index]
        if not torch.equal(bits(ca), bits(cb)) or (sa is not None and not torch.equal(sa, sb)):
            return False
    return True


def _upto_divergence(tokens, ref_tokens, logits, ref_logits, prompt_len):
    """(logits, ref_logits) of the steps up to and including the first differing token."""
    differ = (tokens[:, prompt_len:] != ref_tokens[:, prompt_len:]).any(dim=0).nonzero()
    upto = logits.shape[0] if differ.numel() == 0 else int(differ[0]) + 1
    return logits[:upto], ref_logits[:upto]


# ---------------------------------------------------------------- fp8 checkpoints


@pytest.mark.parametrize("family", MAMBA2_FAMILIES)
def test_fp8_checkpoint_decode_matches_host_within_tolerance(family):
    """Three flushes of an fp8 checkpoint: within FP8_RTOL of the host's fp32 decode, and
    visibly rounded (a fp32 checkpoint is within 1e-6)."""
    model = build_random_model(family)
    ids, mask = _prompts()
    ref_tokens, ref_logits, _ = _generate(model, ids, mask, 13)
    hook = enable_replayssm(model, buffer_len=4, state_dtype=FP8)
    tokens, logits, cache = _generate(model, ids, mask, 13)
    stores = hook.stores(cache)
    assert {s.checkpoint.dtype for s in stores.values()} == {FP8}
    assert all(s.checkpoint_scale.dtype == torch.float32 and s.checkpoint_scale.gt(0).all() for s in stores.values())
    assert hook.decode_steps == {layer.index: 12 for layer in hook.layers}
    err = _rel_err(*_upto_divergence(tokens, ref_tokens, logits, ref_logits, ids.shape[1]))
    assert 1e-4 < err <= FP8_RTOL, err
    assert "fp8 checkpoint" in hook.summary()


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_fp8_admission_encodes_the_host_state_and_decode_reads_its_values(family, monkeypatch):
    """Before the first flush an fp8 checkpoint's decode equals that of an fp32 checkpoint
    admitted with the same values (codes times scales) to fp32 rounding, and its codes and
    scales are the host's prefill state encoded row by row; the fp8 rounding itself moves the
    logits far more (so the comparison has teeth)."""
    model = build_random_model(family)
    ids, mask = _prompts()
    _, host_logits, _ = _generate(model, ids, mask, 9)
    hook = enable_replayssm(model, buffer_len=16, state_dtype=FP8)  # 8 decode steps: no flush
    tokens, logits, cache = _generate(model, ids, mask, 9)
    adapters = {layer.index: layer.adapter for layer in hook.layers}
    for index, host_state in _host_states(hook, cache).items():
        store = hook.stores(cache)[index]
        codes, scale = fp8_row_encode(adapters[index].to_ours(host_state).float())
        assert torch.equal(store.checkpoint.view(torch.uint8), codes.view(torch.uint8)), index
        assert torch.equal(store.checkpoint_scale, scale), index
    disable_replayssm(model)

    admit = mixers.MixerAdapter.admit

    def admit_fp8_values(self, store, slot_ids, host_state):
        state = self.to_ours(host_state).float()
        admit(self, store, slot_ids, self.to_host(fp8_row_decode(*fp8_row_encode(state))))

    monkeypatch.setattr(mixers.MixerAdapter, "admit", admit_fp8_values)
    enable_replayssm(model, buffer_len=16, state_dtype=torch.float32)
    ref_tokens, ref_logits, _ = _generate(model, ids, mask, 9)
    assert torch.equal(tokens, ref_tokens)
    assert _rel_err(logits, ref_logits) <= FP32_RTOL
    assert _rel_err(logits, host_logits) > 10 * FP32_RTOL


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_fp8_write_back_decodes_into_the_host_state(family):
    """disable_replayssm after a flush (cursor 0) writes codes times scales into the host state,
    in the host layout; the generation goes on from there on the host's path."""
    model = build_random_model(family)
    ids, mask = _prompts()
    hook = enable_replayssm(model, buffer_len=4, state_dtype=FP8)
    first, _, cache = _generate(model, ids, mask, 5)  # 4 decode steps: one flush, cursor 0
    stores = hook.stores(cache)
    assert all(s.cursor.eq(0).all() for s in stores.values())
    adapter = hook.layers[0].adapter
    want = {i: adapter.to_host(fp8_row_decode(s.checkpoint, s.checkpoint_scale)).clone() for i, s in stores.items()}
    raw = {i: adapter.to_host(s.checkpoint.float()).clone() for i, s in stores.items()}
    assert disable_replayssm(model)
    for index, host_state in _host_states(hook, cache).items():
        assert torch.equal(host_state, want[index].to(host_state.dtype)), index
        assert not torch.allclose(host_state, raw[index]), index  # the scales were applied
    mask = torch.cat([mask, torch.ones(ids.shape[0], 5, dtype=mask.dtype)], dim=1)
    _generate(model, first, mask, 3, past_key_values=cache)


def test_fp8_multi_token_continuation_readmits_encoded():
    """A follow-up prompt on a cache with fp8 state: written back (decoded), the host's path
    runs, and its final state is admitted again as fp8 codes and row scales."""
    model = build_random_model("qwen3_5")
    ids, mask = _prompts()
    hook = enable_replayssm(model, buffer_len=4, state_dtype=FP8)
    first, _, cache = _generate(model, ids, mask, 6)
    extra = torch.randint(3, 128, (ids.shape[0], 3), generator=torch.Generator().manual_seed(7))
    more = torch.cat([mask, torch.ones(ids.shape[0], 6 + 3, dtype=mask.dtype)], dim=1)
    with torch.no_grad():  # as generate runs it (the hook is for inference)
        model(torch.cat([first, extra], dim=1), attention_mask=more, past_key_values=cache, use_cache=True)
    for index, host_state in _host_states(hook, cache).items():
        store = hook.stores(cache)[index]
        codes, scale = fp8_row_encode(hook.layers[0].adapter.to_ours(host_state).float())
        assert torch.equal(store.checkpoint.view(torch.uint8), codes.view(torch.uint8))
        assert torch.equal(store.checkpoint_scale, scale) and store.cursor.eq(0).all()


# ---------------------------------------------------------------- stochastic rounding


@pytest.mark.parametrize("state_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_rounding_seed_reproducible_and_seed_dependent(family, state_dtype):
    """The seed reaches every replay step: the same seed gives the same tokens, logits and
    checkpoint bits; another seed, or none, gives other checkpoint bits after the flushes."""
    model = build_random_model(family)
    ids, mask = _prompts()

    def run(seed):
        hook = enable_replayssm(model, buffer_len=4, state_dtype=state_dtype, rounding_seed=seed)
        tokens, logits, cache = _generate(model, ids, mask, 9)  # 8 decode steps: two flushes
        assert all(s.cursor.eq(0).all() for s in hook.stores(cache).values())
        assert hook.decode_steps == {layer.index: 8 for layer in hook.layers}
        bits = _checkpoint_bits(hook, cache)
        disable_replayssm(model)
        return tokens, logits, bits

    tokens, logits, bits = run(12345)
    again_tokens, again_logits, again_bits = run(12345)
    assert torch.equal(tokens, again_tokens) and torch.equal(logits, again_logits)
    assert _same_bits(bits, again_bits)
    assert not _same_bits(bits, run(54321)[2])
    assert not _same_bits(bits, run(None)[2])


def test_rounding_seed_summary_and_idempotence():
    model = build_random_model("mamba2")
    hook = enable_replayssm(model, buffer_len=4, state_dtype=torch.float16, rounding_seed=7)
    assert hook.summary().endswith("L = 4, route replay_step, fp16 checkpoint, stochastic rounding seed 7")
    assert enable_replayssm(model, buffer_len=4, state_dtype=torch.float16, rounding_seed=7) is hook
    with pytest.raises(ValueError, match="already enabled .* state_dtype torch.float16, rounding_seed 7; call disable"):
        enable_replayssm(model, buffer_len=4, state_dtype=torch.float16, rounding_seed=8)


# ---------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        pytest.param(
            dict(state_dtype=FP8, route="decode_step"),
            ValueError,
            r"enable_replayssm: state_dtype is torch.float8_e4m3fn with route 'decode_step'; expected route 'replay_step'",
            id="fp8-decode_step",
        ),
        pytest.param(
            dict(state_dtype=torch.float32, rounding_seed=3),
            ValueError,
            r"enable_replayssm: rounding_seed is 3 with state_dtype torch.float32; expected state_dtype one of "
            r"bfloat16, float16, float8_e4m3fn \(a flush stores an fp32 / fp64 checkpoint unrounded",
            id="seed-fp32",
        ),
        pytest.param(
            dict(state_dtype=torch.float64, rounding_seed=3),
            ValueError,
            "rounding_seed is 3 with state_dtype torch.float64; expected state_dtype one of bfloat16",
            id="seed-fp64",
        ),
        pytest.param(
            dict(state_dtype=torch.bfloat16, route="decode_step", rounding_seed=3),
            ValueError,
            r"rounding_seed is 3 with route 'decode_step'; expected route 'replay_step' \(stochastic rounding happens at a replay flush",
            id="seed-decode_step",
        ),
        pytest.param(
            dict(state_dtype=FP8, rounding_seed=-1),
            ValueError,
            r"enable_replayssm: rounding_seed is -1; expected None or an int in \[0, 2\^31\)",
            id="seed-negative",
        ),
        pytest.param(
            dict(state_dtype=FP8, rounding_seed=2**31), ValueError, "rounding_seed is 2147483648; expected", id="seed-2^31"
        ),
        pytest.param(
            dict(state_dtype=FP8, rounding_seed=1.5),
            TypeError,
            r"enable_replayssm: rounding_seed is float 1.5; expected None or an int in \[0, 2\^31\)",
            id="seed-float",
        ),
        pytest.param(dict(state_dtype=FP8, rounding_seed=True), TypeError, "rounding_seed is bool True", id="seed-bool"),
        pytest.param(dict(state_dtype=FP8, rounding_seed="7"), TypeError, "rounding_seed is str '7'", id="seed-str"),
        pytest.param(
            dict(state_dtype=torch.float8_e5m2),
            TypeError,
            "state_dtype is torch.float8_e5m2; expected None or one of float32, bfloat16, float16, float64, float8_e4m3fn",
            id="fp8-e5m2",
        ),
    ],
)
def test_bad_combinations_refused_before_anything_is_installed(kwargs, error, message):
    model = build_random_model("mamba2")
    with pytest.raises(error, match=message):
        enable_replayssm(model, buffer_len=4, **kwargs)
    assert replayssm_hook(model) is None
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_rounding_seed_with_the_host_state_dtype_refused_at_admission():
    """state_dtype=None keeps the host state's dtype, known at the first admission: an fp32 host
    state (every transformers SSM cache here) cannot take a seed; nothing is allocated."""
    model = build_random_model("nemotron_h", dtype=torch.bfloat16)
    hook = enable_replayssm(model, buffer_len=4, rounding_seed=11)
    ids, mask = _prompts()
    with pytest.raises(
        ValueError,
        match=r"enable_replayssm: rounding_seed is 11 and state_dtype=None keeps the host state's dtype, torch.float32 "
        r"\(ReplaySSM hook \(NemotronHMamba2Mixer layer 0\)\); expected a checkpoint that a flush rounds: pass state_dtype "
        r"as one of bfloat16, float16, float8_e4m3fn, or rounding_seed=None",
    ):
        _generate(model, ids, mask, 3)
    assert len(hook._sessions) == 0 and hook.decode_steps == {}


def test_fp8_route_advice_does_not_break_the_hook(monkeypatch):
    """On a CUDA device the first admission looks the fp8 setting up in the route advice
    (made to apply on this CPU): any warning names the fp8 checkpoint, and decode runs."""
    import warnings

    from trtllm_replayssm.route_advice import SlowRouteWarning

    monkeypatch.setattr(hook_module, "advice_applies", lambda device: True)
    model = build_random_model("mamba2")
    hook = enable_replayssm(model, buffer_len=16, state_dtype=FP8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _generate(model, *_prompts(lengths=(7, 7)), 3)
    assert hook.decode_steps == {layer.index: 2 for layer in hook.layers}
    assert all("fp8 checkpoint" in str(w.message) for w in caught if w.category is SlowRouteWarning)
    assert hook._advised == {(2, FP8, torch.float32)}  # (batch, checkpoint, records: the fp32 activations)
