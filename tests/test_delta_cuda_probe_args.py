"""``benchmarks/delta_cuda_probe.py``'s arguments, without a GPU: configuration strings to launch
configurations (and their refusals), the table's configuration with the flush on tensor cores, and
``--baseline-configs`` refused without ``--baseline`` before anything runs."""

import argparse
import dataclasses
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import delta_cuda_probe  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_replay_cuda import DeltaCudaConfig, delta_cuda_config  # noqa: E402

QWEN_122B = (16, 64, 128, 128)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("table", "table"),
        ("table,fmma", "table,fmma"),
        ("table,et", "table,et"),
        ("table,fmma,et", "table,fmma,et"),
        ("table,ff", "table,ff"),
        ("table,fmma,ff", "table,fmma,ff"),
        ("table,et,ar", "table,et,ar"),
        ("table,fmma,ar", "table,fmma,ar"),
        (
            "64,2,4,one,et,ar",
            DeltaCudaConfig(rows=64, stages=2, min_ctas=4, one_launch=True, early_tiles=True, all_records=True),
        ),
        ("64,2,4,one,ff", DeltaCudaConfig(rows=64, stages=2, min_ctas=4, one_launch=True, flush_first=True)),
        ("64,2,4,fmma", DeltaCudaConfig(rows=64, stages=2, min_ctas=4, flush_mma=True)),
        (
            "128,3,1,one,cw4,fmma",
            DeltaCudaConfig(rows=128, stages=3, min_ctas=1, one_launch=True, coef_warps=4, flush_mma=True),
        ),
        ("64,2,3,mma", DeltaCudaConfig(rows=64, stages=2, min_ctas=3, s0_mma=True)),
        ("small,32,m3", DeltaCudaConfig(rows=64, stages=2, min_ctas=3, small=True, small_rows=32)),
        (
            "128,4,1,one,cw4,dc",
            DeltaCudaConfig(rows=128, stages=4, min_ctas=1, one_launch=True, coef_warps=4, defer_count=True),
        ),
        (
            "128,4,1,one,cw4,cr,dc,et",
            DeltaCudaConfig(
                rows=128,
                stages=4,
                min_ctas=1,
                one_launch=True,
                coef_warps=4,
                coalesce_recs=True,
                defer_count=True,
                early_tiles=True,
            ),
        ),
        (
            "128,4,1,one,cw4,cr",
            DeltaCudaConfig(rows=128, stages=4, min_ctas=1, one_launch=True, coef_warps=4, coalesce_recs=True),
        ),
    ],
)
def test_config_strings_name_their_launch(text, expected):
    assert delta_cuda_probe.parse_config(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "64,2",
        "table,mma",
        "table,cr",
        "table,dc",
        "table,fmma,fmma",
        "table,et,fmma",
        "64,2,4,et,et",
        "table,et,ff",
        "table,ff,fmma",
        "64,2,4,ff,ff",
        "table,ff,ar",
        "table,ar,et",
        "table,fmma,et,ff",
        "64,2,4,xx",
        "64,2,4,cw4,cw2",
        "64,2,4,cr,cr",
        "small,32",
        "small,32,3",
    ],
)
def test_malformed_config_strings_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"config {text!r}"):
        delta_cuda_probe.parse_config(text)


@pytest.mark.parametrize("state_bytes", [1, 2, 4])
def test_table_fmma_is_the_table_with_the_flush_on_tensor_cores(state_bytes):
    table = delta_cuda_config(128, 128, 16, 256, state_bytes)
    got = delta_cuda_probe.case_config("table,fmma", QWEN_122B, 16, 256, state_bytes, per_channel=False)
    assert got == dataclasses.replace(table, flush_mma=True)
    assert delta_cuda_probe.case_config("table", QWEN_122B, 16, 256, state_bytes, per_channel=False) == table


@pytest.mark.parametrize("token, field", [("et", "early_tiles"), ("ff", "flush_first"), ("ar", "all_records")])
@pytest.mark.parametrize("batch", [1, 8, 16, 256])
def test_table_one_launch_modifiers_apply_only_in_one_launch(batch, token, field):
    """``table,et`` (early checkpoint tiles), ``table,ff`` (flushing units first) and ``table,ar``
    (all records copied) change the table where it runs the step kernel in one launch (GDN bf16 at 3-64, KDA always); elsewhere (the
    small kernel, the two launches) they are the table."""
    table = delta_cuda_config(128, 128, 16, batch, 2)
    got = delta_cuda_probe.case_config(f"table,{token}", QWEN_122B, 16, batch, 2, per_channel=False)
    one = table.one_launch and not table.small
    assert got == (dataclasses.replace(table, **{field: True}) if one else table)
    assert one == (batch in (8, 16))
    kda = delta_cuda_probe.case_config(f"table,{token}", QWEN_122B, 16, batch, 2, per_channel=True)
    assert getattr(kda, field) and kda.one_launch


def test_baseline_configs_need_a_baseline(capsys):
    with pytest.raises(SystemExit) as e:
        delta_cuda_probe.main(["--configs", "table", "table,fmma", "--baseline-configs", "table"])
    assert e.value.code == 2
    assert "--baseline-configs needs --baseline" in capsys.readouterr().err
