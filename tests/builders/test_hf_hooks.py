"""Hugging Face hook: greedy ``generate`` with and without ReplaySSM on tiny random hybrids of
every supported family (fp32, CPU: the ops run the PyTorch reference).

Tolerance (issue 6): per-step logits within 1e-4 of the logits' scale (max |Δ| / max |logits|
over all steps) and identical greedy tokens, over 3·L + 5 new tokens, left-padded prompts of
different lengths. Measured over 8 model / prompt seeds at L = 16: Mamba-2 families <= 9e-7,
GDN / KDA families <= 8e-6, tokens always identical; admitting zero states instead moved the
logits by >= 2e-2 (the teeth test below). The random models' settings that keep fp32 rounding
from being amplified are in trtllm_replayssm_builders.hf.random_models.
"""

import pytest
import torch

from trtllm_replayssm_builders.hf import (
    disable_replayssm,
    enable_replayssm,
    replayssm_hook,
    supported_mixers_text,
)
from trtllm_replayssm_builders.hf import mixers
from trtllm_replayssm_builders.hf.random_models import FAMILIES, build_random_model

FP32_RTOL = 1e-4
HYBRIDS = tuple(f for f in FAMILIES if f != "mamba2")  # those with attention layers
ONE_PER_KIND = ("nemotron_h", "qwen3_next", "kimi_linear")  # Mamba-2, GDN, KDA


def _prompts(lengths=(9, 6, 8), seed=0):
    """Left-padded prompts: input_ids [batch, max(lengths)] (pad id 0), attention_mask."""
    width = max(lengths)
    ids = torch.randint(3, 128, (len(lengths), width), generator=torch.Generator().manual_seed(seed))
    mask = (torch.arange(width)[None, :] >= width - torch.tensor(lengths)[:, None]).long()
    return ids * mask, mask


def _generate(model, ids, mask, new_tokens, **kw):
    """Greedy generation of exactly ``new_tokens``:
    (all tokens [batch, prompt + new], logits [new, batch, vocab], the host cache)."""
    out = model.generate(
        ids,
        attention_mask=mask,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        **kw,
    )
    return out.sequences, torch.stack(out.logits), out.past_key_values


def _rel_err(a, ref):
    return float((a.double() - ref.double()).abs().max() / ref.double().abs().max())


def _assert_agree(tokens, logits, ref_tokens, ref_logits, what):
    assert torch.equal(tokens, ref_tokens), f"{what}: greedy tokens differ"
    err = _rel_err(logits, ref_logits)
    assert err <= FP32_RTOL, f"{what}: max |Δ logits| / max |logits| = {err:.2e} > {FP32_RTOL}"


@pytest.mark.parametrize("L", [4, 16], ids=["L4", "L16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_enable_replayssm_generate_matches_host(family, L):
    model = build_random_model(family)
    ids, mask = _prompts()
    new_tokens = 3 * L + 5
    ref_tokens, ref_logits, _ = _generate(model, ids, mask, new_tokens)
    hook = enable_replayssm(model, buffer_len=L)
    tokens, logits, cache = _generate(model, ids, mask, new_tokens)

    _assert_agree(tokens, logits, ref_tokens, ref_logits, f"{family} L={L}")
    # The decode ran on the replay caches: each layer's cursor is at (decode steps) mod L.
    stores = hook.stores(cache)
    assert sorted(stores) == [layer.index for layer in hook.layers]
    for index, store in stores.items():
        assert (store.num_slots, store.L) == (ids.shape[0], L)
        assert torch.all(store.cursor == (new_tokens - 1) % L), (index, store.cursor)
    # Every decode step of every layer ran the replay op (none fell back to the host path).
    assert hook.decode_steps == {layer.index: new_tokens - 1 for layer in hook.layers}


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_enable_replayssm_decode_step_route_matches_host(family):
    """The conventional op on a state the hook holds, same surrounding code (a benchmark baseline)."""
    model = build_random_model(family)
    ids, mask = _prompts()
    ref_tokens, ref_logits, _ = _generate(model, ids, mask, 9)
    hook = enable_replayssm(model, buffer_len=4, route="decode_step")
    tokens, logits, cache = _generate(model, ids, mask, 9)
    _assert_agree(tokens, logits, ref_tokens, ref_logits, f"{family} decode_step")
    assert all(isinstance(s, torch.Tensor) for s in hook.stores(cache).values())


@pytest.mark.parametrize("family", FAMILIES)
def test_enable_replayssm_teeth_wrong_checkpoint_changes_logits(family, monkeypatch):
    """Admitting zero states instead of the prefill's moves the logits 100x beyond the
    tolerance: the agreement above is not a model that ignores its SSM states."""
    model = build_random_model(family)
    ids, mask = _prompts()
    _, ref_logits, _ = _generate(model, ids, mask, 6)
    enable_replayssm(model, buffer_len=4)
    admit = mixers.MixerAdapter.admit
    monkeypatch.setattr(
        mixers.MixerAdapter, "admit", lambda self, store, slot_ids, host_state: admit(self, store, slot_ids, 0 * host_state)
    )
    _, logits, _ = _generate(model, ids, mask, 6)
    assert _rel_err(logits, ref_logits) > 100 * FP32_RTOL


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_enable_replayssm_leaves_host_state_and_advances_host_conv_state(family):
    """The host's SSM state stays what the prefill left (decode never writes it); its conv state
    and attention KV advance exactly as without the hook."""
    model = build_random_model(family)
    ids, mask = _prompts()
    _, _, prefilled = _generate(model, ids, mask, 1)
    _, _, ref = _generate(model, ids, mask, 9)
    hook = enable_replayssm(model, buffer_len=4)
    _, _, cache = _generate(model, ids, mask, 9)
    for layer in hook.layers:
        host, want = cache.layers[layer.index], ref.layers[layer.index]
        assert torch.equal(host.recurrent_states[0], prefilled.layers[layer.index].recurrent_states[0])
        assert not torch.equal(host.recurrent_states[0], want.recurrent_states[0])
        assert _rel_err(host.conv_states[0], want.conv_states[0]) <= FP32_RTOL
    assert cache.get_seq_length() == ref.get_seq_length() > 0


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_disable_replayssm_mid_generation_hands_states_back(family):
    """Generation started with the hook goes on without it from the same host cache: the
    disable writes checkpoint + records back into the host's state tensors."""
    model = build_random_model(family)
    ids, mask = _prompts()
    ref_tokens, ref_logits, _ = _generate(model, ids, mask, 16)
    enable_replayssm(model, buffer_len=4)
    first, first_logits, cache = _generate(model, ids, mask, 7)  # 6 decode steps: cursor 2
    assert disable_replayssm(model)
    mask = torch.cat([mask, torch.ones(ids.shape[0], 7, dtype=mask.dtype)], dim=1)
    tokens, logits, _ = _generate(model, first, mask, 9, past_key_values=cache)
    _assert_agree(tokens, torch.cat([first_logits, logits]), ref_tokens, ref_logits, f"{family} disabled after 7 tokens")


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_enable_replayssm_multi_token_continuation(family):
    """A multi-token forward on a cache with state (a follow-up prompt) runs the host's path from
    the replay state written back, then admits its final state again."""
    model = build_random_model(family)
    ids, mask = _prompts()
    extra = torch.randint(3, 128, (ids.shape[0], 3), generator=torch.Generator().manual_seed(7))
    more_mask = torch.ones(ids.shape[0], 6 + 3, dtype=mask.dtype)

    def run():
        first, _, cache = _generate(model, ids, mask, 6)
        return _generate(
            model, torch.cat([first, extra], dim=1), torch.cat([mask, more_mask], dim=1), 10, past_key_values=cache
        )

    ref_tokens, ref_logits, _ = run()
    enable_replayssm(model, buffer_len=4)
    tokens, logits, _ = run()
    _assert_agree(tokens, logits, ref_tokens, ref_logits, f"{family} continuation")


def test_enable_replayssm_adopts_a_prefill_made_without_it():
    """Enabled between prefill and decode: the host's current state is admitted at the first
    decode step."""
    model = build_random_model("nemotron_h")
    ids, mask = _prompts()
    ref_tokens, ref_logits, _ = _generate(model, ids, mask, 12)
    first, first_logits, cache = _generate(model, ids, mask, 1)
    enable_replayssm(model, buffer_len=4)
    mask = torch.cat([mask, torch.ones(ids.shape[0], 1, dtype=mask.dtype)], dim=1)
    tokens, logits, _ = _generate(model, first, mask, 11, past_key_values=cache)
    _assert_agree(tokens, torch.cat([first_logits, logits]), ref_tokens, ref_logits, "adopted")


def test_enable_replayssm_idempotent_and_disable_restores_forward():
    model = build_random_model("qwen3_next")
    ids, mask = _prompts()
    _, ref_logits, _ = _generate(model, ids, mask, 5)
    hook = enable_replayssm(model, buffer_len=8)
    assert enable_replayssm(model, buffer_len=8) is hook is replayssm_hook(model)
    assert [layer.index for layer in hook.layers] == [0, 1, 2, 4, 5, 6]
    assert hook.summary() == (
        "ReplaySSM on Qwen3NextForCausalLM: 6 Gated DeltaNet layers [0, 1, 2, 4, 5, 6]; L = 8, route replay_step"
    )
    with pytest.raises(ValueError, match="already enabled .* buffer_len 8"):
        enable_replayssm(model, buffer_len=16)
    assert all("forward" in layer.mixer.__dict__ for layer in hook.layers)

    assert disable_replayssm(model) is True
    assert disable_replayssm(model) is False
    assert replayssm_hook(model) is None
    assert not any("forward" in layer.mixer.__dict__ for layer in hook.layers)
    _, logits, _ = _generate(model, ids, mask, 5)
    assert torch.equal(logits, ref_logits)


def test_enable_replayssm_state_dtype_bf16_checkpoint():
    model = build_random_model("mamba2")
    ids, mask = _prompts()
    _, ref_logits, _ = _generate(model, ids, mask, 9)
    hook = enable_replayssm(model, buffer_len=4, state_dtype=torch.bfloat16)
    _, logits, cache = _generate(model, ids, mask, 9)
    assert {s.checkpoint.dtype for s in hook.stores(cache).values()} == {torch.bfloat16}
    assert {s.x_records.dtype for s in hook.stores(cache).values()} == {torch.float32}
    # bf16 checkpoint, rounded at admission and at the flushes of 8 decode steps.
    assert 1e-6 < _rel_err(logits, ref_logits) < 2e-2


@pytest.mark.parametrize("family", ("nemotron_h", "qwen3_5"))
def test_enable_replayssm_beam_search_raises(family):
    model = build_random_model(family)
    ids, mask = _prompts()
    enable_replayssm(model, buffer_len=4)
    with pytest.raises(ValueError, match="beam search"):
        model.generate(ids, attention_mask=mask, max_new_tokens=4, num_beams=2, do_sample=False)


def test_enable_replayssm_rejects_mamba1_and_models_without_ssm():
    import transformers as hf

    mamba1 = hf.MambaForCausalLM(hf.MambaConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, state_size=4))
    with pytest.raises(
        ValueError,
        match=r"does not support: backbone\.layers\.0\.mixer \(MambaMixer\).*Mamba-1.*supported SSM mixers: Mamba2Mixer",
    ):
        enable_replayssm(mamba1)
    llama = hf.LlamaForCausalLM(
        hf.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    )
    with pytest.raises(ValueError, match="LlamaForCausalLM has no SSM layer ReplaySSM supports"):
        enable_replayssm(llama)
    assert replayssm_hook(mamba1) is None and replayssm_hook(llama) is None
    for name in (
        "NemotronHMamba2Mixer",
        "Qwen3NextGatedDeltaNet",
        "Qwen3_5GatedDeltaNet",
        "KimiLinearDeltaAttention",
        "Mamba2Mixer",
    ):
        assert name in supported_mixers_text()


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        pytest.param(dict(buffer_len=0), ValueError, r"buffer_len is 0; expected an int in \[1, 64\]", id="L0"),
        pytest.param(dict(buffer_len=65), ValueError, "buffer_len is 65", id="L65"),
        pytest.param(dict(buffer_len=True), ValueError, "buffer_len is True", id="Lbool"),
        pytest.param(dict(buffer_len=4.0), ValueError, "buffer_len is 4.0", id="Lfloat"),
        pytest.param(dict(route="fast"), ValueError, "route is 'fast'; expected one of replay_step, decode_step", id="route"),
        pytest.param(dict(state_dtype=torch.int32), TypeError, "state_dtype is torch.int32", id="state_dtype"),
    ],
)
def test_enable_replayssm_bad_arguments(kwargs, error, message):
    model = build_random_model("mamba2")
    with pytest.raises(error, match=message):
        enable_replayssm(model, **kwargs)
    assert replayssm_hook(model) is None
    assert not any("forward" in m.__dict__ for m in model.modules())


def test_enable_replayssm_rejects_non_module():
    with pytest.raises(TypeError, match="model is str; expected a torch.nn.Module"):
        enable_replayssm("nemotron_h")


# ---------------------------------------------------------------- no silent fallback


def _decode_inputs(family):
    """A hooked tiny model after a 3-token prefill, its first hooked mixer, one decode token's
    hidden states and the host cache (so a test can call the mixer as the host would)."""
    model = build_random_model(family)
    hook = enable_replayssm(model, buffer_len=4)
    ids, mask = _prompts(lengths=(3, 3))
    _, _, cache = _generate(model, ids, mask, 2)
    layer = hook.layers[0]
    hidden = torch.randn(2, 1, model.config.hidden_size)
    return hook, layer, hidden, cache


@pytest.mark.parametrize("family", FAMILIES)
def test_hook_takes_the_cache_under_both_transformers_names(family):
    hook, layer, hidden, cache = _decode_inputs(family)
    before = hook.decode_steps[layer.index]
    layer.mixer(hidden, cache=cache)
    layer.mixer(hidden, cache_params=cache)
    layer.mixer(hidden, cache)
    assert hook.decode_steps[layer.index] == before + 3
    with pytest.raises(TypeError, match="both as cache and as cache_params"):
        layer.mixer(hidden, cache=cache, cache_params=cache)


@pytest.mark.parametrize("family", FAMILIES)
def test_hook_raises_when_the_host_renames_its_cache(family):
    """A cache under a name the hook does not know would decode on the host path: it raises,
    naming the layer, the argument and the transformers version."""
    import transformers

    hook, layer, hidden, cache = _decode_inputs(family)
    before = dict(hook.decode_steps)
    with pytest.raises(
        RuntimeError,
        match=rf"layer {layer.index}\): transformers {transformers.__version__} passed the host cache as linear_cache=",
    ):
        layer.mixer(hidden, linear_cache=cache)
    assert hook.decode_steps == before


@pytest.mark.parametrize("family", ONE_PER_KIND)
def test_hook_raises_on_a_cache_without_the_fields_it_reads(family):
    hook, layer, hidden, cache = _decode_inputs(family)

    class _OtherCache:  # a cache object of another shape, under the known name
        layers = [object()] * (layer.index + 1)

        def has_previous_state(self, index):
            return True

    with pytest.raises(
        RuntimeError, match=rf"layer {layer.index}\): the host cache \(_OtherCache, transformers .*lacks what the hook reads"
    ):
        layer.mixer(hidden, cache=_OtherCache())


def test_cache_argument_of_each_release_and_of_an_unknown_one():
    from trtllm_replayssm_builders.hf.compat import cache_argument

    class New(torch.nn.Module):
        def forward(self, hidden_states, cache=None, attention_mask=None, **kwargs): ...

    class Old(torch.nn.Module):
        def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs): ...

    class Unknown(torch.nn.Module):
        def forward(self, hidden_states, state=None, **kwargs): ...

    assert cache_argument(New()) == "cache" and cache_argument(Old()) == "cache_params"
    with pytest.raises(
        ValueError, match=r"Unknown.forward\(self, hidden_states, state=None.*takes none of cache, cache_params"
    ):
        cache_argument(Unknown())


@pytest.mark.parametrize(
    "version, inside",
    [
        ("5.17.0", True),
        ("5.25.0", True),
        ("5.20.2", True),
        ("5.25.0rc1", True),
        ("5.16.1", False),
        ("5.25.1", False),
        ("6.0.0", False),
    ],
)
def test_transformers_outside_the_tested_range_warns(version, inside, recwarn):
    from trtllm_replayssm_builders.hf.compat import TESTED_TRANSFORMERS, check_transformers_version

    assert check_transformers_version(version) is inside
    messages = [str(w.message) for w in recwarn.list]
    if inside:
        assert not messages
    else:
        assert messages == [
            f"enable_replayssm: transformers {version} is outside the tested range {TESTED_TRANSFORMERS[0]} to {TESTED_TRANSFORMERS[1]}; the hook checks every decode step and raises if it cannot engage, but this release was not tested"
        ]


def test_count_decoded_token_advances_a_token_count_where_the_cache_keeps_one():
    from trtllm_replayssm_builders.hf.compat import count_decoded_token

    class Counting:  # transformers >= 5.25: Cache.increase_count(layer_idx, state_idx)
        def __init__(self):
            self.calls = []

        def increase_count(self, layer_idx, state_idx):
            self.calls.append((layer_idx, state_idx))

    cache = Counting()
    count_decoded_token(cache, 3)
    assert cache.calls == [(3, 0)]
    count_decoded_token(object(), 3)  # earlier releases keep no count: nothing to advance


def test_installed_transformers_is_inside_the_tested_range():
    """CI installs the range's two ends; a newer release fails here until it is tested."""
    from trtllm_replayssm_builders.hf.compat import check_transformers_version

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_transformers_version()


def test_bind_torch_paths_refuses_a_module_bound_to_fla(monkeypatch):
    """A modelling module imported while fla was importable runs fla's GPU kernels: a CPU model
    of it must be refused, not die inside Triton."""
    import importlib.util
    import sys
    import types

    from trtllm_replayssm_builders.hf import compat

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object() if name == "fla" else None)

    def fla_kernel(): ...

    fla_kernel.__module__ = "fla.ops.gated_delta_rule"

    def bound(*args):  # how transformers' decorator keeps what it bound
        return fla_kernel(*args)

    module = types.ModuleType("modeling_qwen3_5")
    module.fused_recurrent_gated_delta_rule = bound
    monkeypatch.setitem(sys.modules, "transformers.models.qwen3_5.modeling_qwen3_5", module)
    with pytest.raises(RuntimeError, match="run fla's Triton kernels, which need a GPU"):
        compat.bind_torch_paths("qwen3_5")
    compat.bind_torch_paths("nemotron_h")  # no fla kernels: nothing to do
