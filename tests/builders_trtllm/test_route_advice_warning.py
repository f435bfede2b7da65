"""The TensorRT-LLM hook's route advice: a V2 Mamba cache manager whose hooked layers' replay
step was measured slower than the conventional step at its max_batch_size warns once
(SlowRouteWarning, with the figure); a faster or unmeasured setting does not, fp32 activations
(so fp32 Mamba-2 records, never timed) among them; the records are bound either way
(behavioural stand-in of TensorRT-LLM, CPU)."""

import types
import warnings

import pytest
import torch

import fake_trtllm as ft
from standins import importer
from trtllm_replayssm.measured_speeds import MEASUREMENTS, STEP
from trtllm_replayssm.route_advice import SlowRouteWarning
from trtllm_replayssm_builders.trtllm import adapter
from trtllm_replayssm_builders.trtllm.config import ReplaySSMConfig

# L = 8: the record length whose bf16 replay step is measured slower at batch 1 (L = 16 is
# faster since session 61's run).
L = 8
MAPPING = types.SimpleNamespace(tp_size=1, pp_size=1, cp_size=1, enable_attention_dp=False)
KV = types.SimpleNamespace(enable_block_reuse=False)


@pytest.fixture
def hooks():
    adapter.install(ReplaySSMConfig(buffer_len=L), importer(ft.modules()))
    yield
    assert adapter.uninstall()


def _manager_warnings(max_batch_size, state_dtype, conv_dtype=torch.bfloat16):
    """SlowRouteWarning messages of a manager whose conv states (the activations, so the Mamba-2
    records) are ``conv_dtype``."""
    ft.Mamba2Mixer(nheads=4, head_dim=8, d_state=16, n_groups=2, layer_idx=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mgr = ft.MambaHybridCacheManagerV2(
            16, 4, 4, 2, 8, 1, [True], conv_dtype, state_dtype, KV, None, max_batch_size=max_batch_size, mapping=MAPPING
        )
    assert mgr.get_aux_cache_extension("replayssm_records").store is not None
    return [str(w.message) for w in caught if w.category is SlowRouteWarning]


def test_slow_setting_warns_once_with_the_figure(hooks):
    # Mamba-2, bf16 checkpoint, L 8, batch 1: slower (the stand-in's layer was not measured).
    (ratio,) = [m.ratio for m in MEASUREMENTS if m.family == "mamba2" and m.route == STEP and m.state_dtype == "bf16"
                and m.L == L and m.batch == 1]  # fmt: skip
    assert ratio < 1.0
    (message,) = _manager_warnings(2, torch.bfloat16)
    assert message.startswith("ReplaySSM (MambaHybridCacheManagerV2, max_batch_size 2): ReplaySSM runs in a setting")
    assert "mamba2 replay step L 8, bf16 checkpoint, batch 2: nearest measured batch 1" in message
    assert f"{ratio:.2f}x the conventional step" in message and "recommended: conventional" in message


@pytest.mark.parametrize(
    "batch, dtype, conv_dtype",
    [(64, torch.float32, torch.bfloat16), (4, torch.float64, torch.bfloat16), (2, torch.bfloat16, torch.float32)],
    ids=["fast", "not-measured", "fp32-records"],
)
def test_fast_or_unmeasured_setting_does_not_warn(hooks, batch, dtype, conv_dtype):
    # fp32-records: the slow setting above, but with fp32 activations, whose records were never timed
    assert _manager_warnings(batch, dtype, conv_dtype) == []
