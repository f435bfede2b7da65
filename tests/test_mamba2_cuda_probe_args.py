"""``benchmarks/mamba2_cuda_probe.py``'s configuration strings, without a GPU: to launch
configurations (the two launches with and without claimed units, the small kernel) and their
refusals."""

import argparse
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import mamba2_cuda_probe  # noqa: E402
from trtllm_replayssm.kernels.mamba2_replay_cuda import CudaStepConfig  # noqa: E402


@pytest.mark.parametrize(
    "text, expected",
    [
        ("2,2,pdl,c4", CudaStepConfig(stages=2, min_ctas=2, pdl=True, coef_warps=4)),
        ("2,3,nopdl,c16", CudaStepConfig(stages=2, min_ctas=3, pdl=False, coef_warps=16)),
        ("2,2,pdl,c4,cl", CudaStepConfig(stages=2, min_ctas=2, pdl=True, coef_warps=4, claimed_units=True)),
        ("small,32,m2", CudaStepConfig(stages=2, min_ctas=2, pdl=True, small=True, small_rows=32)),
        ("small,early", CudaStepConfig(stages=2, min_ctas=1, pdl=True, small=True, early_math=True)),
    ],
)
def test_config_strings(text, expected):
    assert mamba2_cuda_probe.parse_config(text) == expected


def test_labels_name_claimed_units_only_when_asked():
    assert mamba2_cuda_probe.parse_config("2,2,pdl,c4,cl").label() == "cuda,2,2,pdl,c4,cl"
    assert mamba2_cuda_probe.parse_config("2,2,pdl,c4").label() == "cuda,2,2,pdl,c4"


@pytest.mark.parametrize("text", ["2,2,pdl", "2,2,pdl,c3", "2,2,pdl,c4,c", "2,2,pdl,c4,t8", "2,2,pdl,c4,cl,cl",
                                  "2,2,xx,c4", "small,32,cl"])  # fmt: skip
def test_malformed_config_strings_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"config {text!r}"):
        mamba2_cuda_probe.parse_config(text)
