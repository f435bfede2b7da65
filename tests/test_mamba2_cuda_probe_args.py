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


def test_baseline_configs_need_a_baseline(capsys):
    with pytest.raises(SystemExit) as e:
        mamba2_cuda_probe.main(["--configs", "2,2,pdl,c4", "--baseline-configs", "2,2,pdl,c4"])
    assert e.value.code == 2
    assert "--baseline-configs needs --baseline" in capsys.readouterr().err


def test_baseline_runs_time_only_the_named_configs_with_the_baseline():
    from harness import add_baseline_arguments, baseline_runs

    ap = argparse.ArgumentParser()
    ap.add_argument("--configs", type=mamba2_cuda_probe.parse_config, nargs="*", default=[])
    add_baseline_arguments(ap, mamba2_cuda_probe.parse_config)
    static, claimed = (mamba2_cuda_probe.parse_config(t) for t in ("2,2,pdl,c4", "2,2,pdl,c4,cl"))
    configs = ["--configs", "2,2,pdl,c4", "2,2,pdl,c4,cl"]
    assert baseline_runs(ap, ap.parse_args(configs)) == [(static, "", None), (claimed, "", None)]
    every = baseline_runs(ap, ap.parse_args(configs + ["--baseline", "b.cu"]))
    assert every[2:] == [(static, " @base", "b.cu"), (claimed, " @base", "b.cu")]
    named = baseline_runs(ap, ap.parse_args(configs + ["--baseline", "b.cu", "--baseline-configs", "2,2,pdl,c4,cl"]))
    assert named[2:] == [(claimed, " @base", "b.cu")]
