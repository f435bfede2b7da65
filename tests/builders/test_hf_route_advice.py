"""The Hugging Face hook's route advice: one SlowRouteWarning when its setting was measured
slower than the conventional step, none where it was measured faster or not at all (an fp32
model's records among them: every cell was timed with bf16 records); the route stays
replay_step either way (tiny random Mamba-2 model, bf16 unless said, CPU; the advice, which
speaks for CUDA devices only, is made to apply here except in the CPU test)."""

import warnings

import pytest
import torch

from trtllm_replayssm.measured_speeds import MEASUREMENTS, STEP
from trtllm_replayssm.route_advice import SlowRouteWarning, warn_if_slower
from trtllm_replayssm_builders.hf import disable_replayssm, enable_replayssm
from trtllm_replayssm_builders.hf import hook as hook_module
from trtllm_replayssm_builders.hf.random_models import build_random_model

from test_hf_hooks import _generate, _prompts

BATCH = 10  # nearest measured batch: 16 (every Mamba-2 cell faster than the conventional step)
SLOW_BATCH = 2  # nearest measured batch: 1 (a bf16 checkpoint's replay step is slower there at L = 8)
SLOW_L = 8  # L = 16 is faster there since session 61's run


def _measured(L, batch, dtype="fp32"):
    """The Mamba-2 Super step ratio at (L, batch) for a ``dtype`` checkpoint, as the advice cites it."""
    (m,) = [m for m in MEASUREMENTS if m.family == "mamba2" and m.route == STEP and m.state_dtype == dtype
            and m.L == L and m.batch == batch]  # fmt: skip
    return m.ratio


@pytest.fixture
def advice_on_cpu(monkeypatch):
    monkeypatch.setattr(hook_module, "advice_applies", lambda device: True)


def _advice_warnings(L, route="replay_step", batch=BATCH, state_dtype=None, model_dtype=torch.bfloat16):
    model = build_random_model("mamba2", dtype=model_dtype)
    ids, mask = _prompts(lengths=(7,) * batch)
    hook = enable_replayssm(model, buffer_len=L, route=route, state_dtype=state_dtype)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _generate(model, ids, mask, 3)
        _generate(model, ids, mask, 3)  # a second host cache of the same batch: no second warning
    assert hook.route == route and sum(hook.decode_steps.values()) > 0
    disable_replayssm(model)
    return [str(w.message) for w in caught if w.category is SlowRouteWarning]


def test_slow_cell_warns_once_with_the_figure(advice_on_cpu):
    # Mamba-2, bf16 checkpoint, L 8, batch 1: slower than the conventional step.
    assert _measured(SLOW_L, 1, "bf16") < 1.0
    (message,) = _advice_warnings(SLOW_L, batch=SLOW_BATCH, state_dtype=torch.bfloat16)
    assert message.startswith("enable_replayssm on Mamba2ForCausalLM: ReplaySSM runs in a setting measured slower")
    assert "mamba2 replay step L 8, bf16 checkpoint, batch 2: nearest measured batch 1" in message
    assert f"{_measured(SLOW_L, 1, 'bf16'):.2f}x the conventional step" in message and "recommended: conventional" in message
    assert "docs/benchmarks.md" in message


@pytest.mark.parametrize("L", [8, 5], ids=["fast", "not-measured"])
def test_fast_or_unmeasured_cell_does_not_warn(advice_on_cpu, L):
    assert L != 8 or _measured(8, 16) > 1.0
    assert _advice_warnings(L) == []


def test_conventional_route_is_not_advised(advice_on_cpu):
    assert _advice_warnings(SLOW_L, route="decode_step", batch=SLOW_BATCH) == []


def test_no_advice_for_a_cpu_run():
    # the slow cell of the first test, on the CPU: the H200 figures do not speak for it
    assert _advice_warnings(SLOW_L, batch=SLOW_BATCH, state_dtype=torch.bfloat16) == []


def test_fp32_activations_get_no_figure_of_bf16_records(advice_on_cpu, monkeypatch):
    """An fp32 model keeps fp32 records (the activations' dtype), never timed: the advice for the
    slow cell of the first test is "not measured", names the bf16 records measured, and warns
    nothing (were records ignored, the bf16 records' figure, below 1.0x, would warn)."""
    seen = []

    def capture(advice, host, **kw):
        seen.extend(advice)
        return warn_if_slower(advice, host, **kw)

    monkeypatch.setattr(hook_module, "warn_if_slower", capture)
    assert _advice_warnings(SLOW_L, batch=SLOW_BATCH, state_dtype=torch.bfloat16, model_dtype=torch.float32) == []
    (a,) = seen
    assert (a.record_dtype, a.ratio, a.recommendation, a.source) == ("fp32", None, None, None)
    assert "mamba2 replay step L 8, bf16 checkpoint, fp32 records, batch 2: not measured" in a.text
    assert "(measured with bf16 records only: " in a.text and a.text.endswith("no recommendation")
