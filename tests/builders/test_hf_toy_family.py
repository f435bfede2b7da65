"""The toy layer family (tests/toy_family.py) plugs into the Hugging Face hook with one
registration of its own adapter: the hook finds its mixers, the pool gives them the toy cache,
and the decode runs the toy gate on the GDN ops. Nothing outside the toy's module changes."""

import pytest
import torch

from test_hf_hooks import _generate, _prompts
from toy_family import TOY, ToyReplayCache, register_toy, toy_hf_adapter
from trtllm_replayssm import registry
from trtllm_replayssm_builders.hf import disable_replayssm, enable_replayssm, register_adapter, supported_mixers_text
from trtllm_replayssm_builders.hf import mixers
from trtllm_replayssm_builders.hf.random_models import build_random_model


@pytest.fixture
def toy_hf(monkeypatch):
    """The toy family and its HF adapter registered for one test (both registries restored)."""
    registry.kinds()
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    saved = dict(mixers.ADAPTERS)  # the hook holds this dict: restored in place
    register_toy()
    yield register_adapter(toy_hf_adapter())
    mixers.ADAPTERS.clear()
    mixers.ADAPTERS.update(saved)


def _toy_model():
    """A random Qwen3-Next whose Gated DeltaNet layers are re-classed as ToyGatedDeltaNet."""
    model = build_random_model("qwen3_next")
    for module in list(model.modules()):
        if type(module).__name__ == "Qwen3NextGatedDeltaNet":
            host = type(module)  # the toy class lives in the host's modelling module, like a real one
            module.__class__ = type("ToyGatedDeltaNet", (host,), {"__module__": host.__module__})
    return model


def _greedy(model, new_tokens=9):
    """(tokens, logits, host cache) of greedy generation, as the hook tests run it."""
    return _generate(model, *_prompts(), new_tokens)


def test_register_adapter_refuses_unknown_family_and_taken_class(toy_hf):
    assert mixers.ADAPTERS["ToyGatedDeltaNet"] is toy_hf
    assert "ToyGatedDeltaNet (toy Qwen3-Next, toy Gated DeltaNet)" in supported_mixers_text()
    with pytest.raises(ValueError, match="ToyGatedDeltaNet already has an adapter"):
        register_adapter(toy_hf_adapter())
    stray = toy_hf_adapter()
    stray.family = "rwkv"
    with pytest.raises(ValueError, match="family 'rwkv' is not a registered SSM layer kind"):
        register_adapter(stray)
    with pytest.raises(TypeError, match="expected a MixerAdapter"):
        register_adapter(object())


def test_hf_hook_runs_the_toy_family_replay_equals_conventional(toy_hf):
    model = _toy_model()
    ref_tokens, ref_logits, _ = _greedy(model)  # the host's own (softplus) gate
    hook = enable_replayssm(model, buffer_len=4, route="decode_step")
    conv_tokens, conv_logits, _ = _greedy(model)
    disable_replayssm(model)
    hook = enable_replayssm(model, buffer_len=4)
    assert {layer.kind for layer in hook.hybrid_model().layers} == {TOY}
    tokens, logits, cache = _greedy(model)
    stores = hook.stores(cache)
    assert stores and all(type(s) is ToyReplayCache for s in stores.values())
    assert hook.decode_steps == {layer.index: 8 for layer in hook.layers}
    # Replay equals the conventional op through the same toy adapter...
    assert torch.equal(tokens, conv_tokens)
    err = float((logits - conv_logits).abs().max() / conv_logits.abs().max())
    assert err <= 1e-4, err
    # ...and the toy gate is what ran: the host's GDN gate gives other logits.
    assert not torch.allclose(conv_logits[1:], ref_logits[1:], rtol=1e-3, atol=1e-3)
    disable_replayssm(model)  # hands the toy caches' states back through the family's replay_state
