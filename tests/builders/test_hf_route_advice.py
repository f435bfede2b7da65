"""The Hugging Face hook's route advice: one SlowRouteWarning when its setting was measured
slower than the conventional step, none where it was measured faster or not at all; the route
stays replay_step either way (tiny random Mamba-2 model, CPU; the advice, which speaks for CUDA
devices only, is made to apply here except in the CPU test)."""

import warnings

import pytest

from trtllm_replayssm.route_advice import SlowRouteWarning
from trtllm_replayssm_builders.hf import disable_replayssm, enable_replayssm
from trtllm_replayssm_builders.hf import hook as hook_module
from trtllm_replayssm_builders.hf.random_models import build_random_model

from test_hf_hooks import _generate, _prompts

BATCH = 10  # nearest measured batch: 16


@pytest.fixture
def advice_on_cpu(monkeypatch):
    monkeypatch.setattr(hook_module, "advice_applies", lambda device: True)


def _advice_warnings(L, route="replay_step"):
    model = build_random_model("mamba2")
    ids, mask = _prompts(lengths=(7,) * BATCH)
    hook = enable_replayssm(model, buffer_len=L, route=route)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _generate(model, ids, mask, 3)
        _generate(model, ids, mask, 3)  # a second host cache of the same batch: no second warning
    assert hook.route == route and sum(hook.decode_steps.values()) > 0
    disable_replayssm(model)
    return [str(w.message) for w in caught if w.category is SlowRouteWarning]


def test_slow_cell_warns_once_with_the_figure(advice_on_cpu):
    # Mamba-2, fp32 checkpoint, L 32, batch 16: 0.94x the conventional step.
    (message,) = _advice_warnings(32)
    assert message.startswith("enable_replayssm on Mamba2ForCausalLM: ReplaySSM runs in a setting measured slower")
    assert "mamba2 replay step L 32, fp32 checkpoint, batch 10: nearest measured batch 16" in message
    assert "0.94x the conventional step" in message and "recommended: conventional" in message
    assert "docs/benchmarks.md" in message


@pytest.mark.parametrize("L", [8, 5], ids=["fast-1.05x", "not-measured"])
def test_fast_or_unmeasured_cell_does_not_warn(advice_on_cpu, L):
    assert _advice_warnings(L) == []


def test_conventional_route_is_not_advised(advice_on_cpu):
    assert _advice_warnings(32, route="decode_step") == []


def test_no_advice_for_a_cpu_run():
    # the slow cell of the first test, on the CPU: the H200 figures do not speak for it
    assert _advice_warnings(32) == []
