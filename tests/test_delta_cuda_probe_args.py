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
        ("table,ff", "table,ff"),
        ("table,fmma,ff", "table,fmma,ff"),
        ("table,ff,rw", "table,ff,rw"),
        ("table,rw", "table,rw"),
        ("table,fmma,ff,rw", "table,fmma,ff,rw"),
        ("table,cs", "table,cs"),
        ("table,ff,cs", "table,ff,cs"),
        ("table,fmma,qg", "table,fmma,qg"),
        ("table,ff,h2", "table,ff,h2"),
        ("table,eg", "table,eg"),
        ("table,du", "table,du"),
        (
            "64,2,2,one,cr,du",
            DeltaCudaConfig(rows=64, stages=2, min_ctas=2, one_launch=True, coalesce_recs=True, dealt_units=True),
        ),
        (
            "128,2,1,one,cw4,cr,dc,ff,rw,eg",
            DeltaCudaConfig(
                rows=128,
                stages=2,
                min_ctas=1,
                one_launch=True,
                coef_warps=4,
                coalesce_recs=True,
                defer_count=True,
                flush_first=True,
                rec_warps=True,
                even_grid=True,
            ),
        ),
        (
            "128,3,2,one,cw4,cr,dc,h2",
            DeltaCudaConfig(
                rows=128,
                stages=3,
                min_ctas=2,
                one_launch=True,
                coef_warps=4,
                coalesce_recs=True,
                defer_count=True,
                s0_hfma2=True,
            ),
        ),
        (
            "128,3,2,one,cw4,qg",
            DeltaCudaConfig(rows=128, stages=3, min_ctas=2, one_launch=True, coef_warps=4, s0_qgmma=True),
        ),
        (
            "128,3,1,one,cw4,cr,dc,cs",
            DeltaCudaConfig(
                rows=128,
                stages=3,
                min_ctas=1,
                one_launch=True,
                coef_warps=4,
                coalesce_recs=True,
                defer_count=True,
                consumer_sums=True,
            ),
        ),
        ("64,2,3,one,rw", DeltaCudaConfig(rows=64, stages=2, min_ctas=3, one_launch=True, rec_warps=True)),
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
            "128,4,1,one,cw4,cr,dc,ff",
            DeltaCudaConfig(
                rows=128,
                stages=4,
                min_ctas=1,
                one_launch=True,
                coef_warps=4,
                coalesce_recs=True,
                defer_count=True,
                flush_first=True,
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
        "table,et",
        "table,ff,fmma",
        "table,rw,ff",
        "table,rw,rw",
        "table,cs,ff",
        "table,cs,cs",
        "128,3,1,one,cw4,cs,cs",
        "64,2,3,dc,dc",
        "64,2,4,one,rw,rw",
        "table,smma",
        "64,2,4,ff,ff",
        "64,2,4,ar",
        "64,2,4,xx",
        "64,2,4,cw4,cw2",
        "64,2,4,cr,cr",
        "small,32",
        "small,32,3",
        "small,32,m1,rw",
        "small,32,m1,wl",  # the small kernel's parameter lines are always warmed (session 57)
        "table,wl",
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


@pytest.mark.parametrize("batch", [1, 8, 16, 256])
def test_table_ff_takes_flushing_units_first_only_in_one_launch(batch):
    """``table,ff`` takes each block's flushing units first, with the deferred count in place of
    the table's dealt units (GDN bf16 at 256), where the table runs the step kernel in one launch
    (GDN bf16 from 3, KDA always); elsewhere (the small kernel, the two launches) it is the table."""
    table = delta_cuda_config(128, 128, 16, batch, 2)
    got = delta_cuda_probe.case_config("table,ff", QWEN_122B, 16, batch, 2, per_channel=False)
    one = table.one_launch and not table.small
    ff = dataclasses.replace(table, flush_first=True, dealt_units=False, dealt_spread=False, defer_count=True)
    assert got == (ff if one else table)
    assert table.dealt_units == (batch == 256)
    assert one == (batch in (8, 16, 256))
    kda = delta_cuda_probe.case_config("table,ff", QWEN_122B, 16, batch, 2, per_channel=True)
    assert kda.flush_first and kda.one_launch


@pytest.mark.parametrize("batch", [1, 8, 16, 64, 256])
def test_table_rw_splits_the_records_only_in_gdn_one_launch(batch):
    """``table,rw`` is GDN's table with its coefficient warps splitting the records where the table
    runs the step kernel in one launch (GDN bf16 from batch 3, where the table takes it but at
    batch 4 and 8); elsewhere, and for KDA, it is the table."""
    table = delta_cuda_config(128, 128, 16, batch, 2)
    got = delta_cuda_probe.case_config("table,rw", QWEN_122B, 16, batch, 2, per_channel=False)
    one = table.one_launch and not table.small
    assert got == (dataclasses.replace(table, rec_warps=True) if one else table)
    assert one == (batch in (8, 16, 64, 256)) and table.rec_warps == (batch in (16, 64, 256))
    kda = delta_cuda_probe.case_config("table,rw", QWEN_122B, 16, batch, 2, per_channel=True)
    assert not kda.rec_warps


@pytest.mark.parametrize("state_bytes, batch", [(2, 1), (2, 64), (2, 256), (1, 1), (1, 256), (4, 16), (4, 256)])
def test_table_cs_sums_in_the_consumers_only_for_kda_with_coefficient_warps(state_bytes, batch):
    """``table,cs`` is KDA's table with its consumers summing the coefficient warps' partials where
    the table has coefficient warps (every bf16 and fp8 build, fp8 then with exact S0 products;
    fp32 at L = 16 only at batch 1-2); elsewhere, and for GDN, it is the table."""
    table = delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel=True)
    got = delta_cuda_probe.case_config("table,cs", (32, 32, 128, 128), 16, batch, state_bytes, per_channel=True)
    cs = table.coef_warps > 0
    assert got == dataclasses.replace(table, one_launch=True, consumer_sums=cs, s0_hfma2=table.s0_hfma2 and not cs)
    assert (table.coef_warps > 0) == (state_bytes != 4)
    gdn = delta_cuda_probe.case_config("table,cs", QWEN_122B, 16, batch, state_bytes, per_channel=False)
    assert not gdn.consumer_sums


@pytest.mark.parametrize("token, field", [("qg", "s0_qgmma"), ("h2", "s0_hfma2")])
@pytest.mark.parametrize("state_bytes, batch", [(1, 1), (1, 16), (1, 64), (1, 256), (2, 256), (4, 256)])
def test_table_s0_forms_only_for_fp8(token, field, state_bytes, batch):
    """``table,qg`` / ``table,h2`` is KDA's fp8 table with its S0 products as fp8 wgmma products
    (where the table's units are 64 or 128 rows: from batch 16) / f16x2 FMAs (every batch), and
    ``table,h2`` GDN's fp8 table with them where it runs two launches (from batch 24); elsewhere
    (16- and 32-bit checkpoints, GDN's qg, GDN's one launch and small kernel, qg's narrow units at
    batch 1) it is the table."""
    table = delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel=True)
    got = delta_cuda_probe.case_config(f"table,{token}", (32, 32, 128, 128), 16, batch, state_bytes, per_channel=True)
    takes = state_bytes == 1 and (token == "h2" or table.rows % 64 == 0)
    h2 = table.s0_hfma2 and not (token == "qg" and takes)  # the table's f16x2 products give way to qg
    assert got == dataclasses.replace(dataclasses.replace(table, one_launch=True, s0_hfma2=h2), **{field: takes})
    gdn = delta_cuda_probe.case_config(f"table,{token}", QWEN_122B, 16, batch, state_bytes, per_channel=False)
    assert getattr(gdn, field) == (token == "h2" and state_bytes == 1 and batch >= 24)


@pytest.mark.parametrize("family, state_bytes, batch", [("gdn", 4, 64), ("gdn", 4, 1), ("kda", 1, 256), ("kda", 2, 64)])
def test_table_eg_takes_the_even_grid_where_the_table_runs_the_step_kernel(family, state_bytes, batch):
    """``table,eg`` is the table with the step kernel's even grid; the small kernel (GDN at batch 1)
    has no persistent grid, so there it is the table."""
    per_channel = family == "kda"
    geometry = (32, 32, 128, 128) if per_channel else QWEN_122B
    table = delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel)
    got = delta_cuda_probe.case_config("table,eg", geometry, 16, batch, state_bytes, per_channel)
    expected = dataclasses.replace(table, one_launch=True) if per_channel else table
    assert got == dataclasses.replace(expected, even_grid=not table.small)


@pytest.mark.parametrize(
    "family, state_bytes, batch", [("gdn", 4, 64), ("gdn", 4, 1), ("gdn", 1, 64), ("kda", 1, 64), ("kda", 2, 16)]
)
def test_table_du_deals_the_units_where_the_table_runs_the_step_kernel_in_one_launch(family, state_bytes, batch):
    """``table,du`` is the table with dealt units in place of its flushing units first, deferred
    count or claimed units where it runs the step kernel in one launch (KDA always; GDN fp32 at 64, not at 1, the
    small kernel; GDN fp8 at 64 runs two launches); elsewhere it is the table."""
    per_channel = family == "kda"
    geometry = (32, 32, 128, 128) if per_channel else QWEN_122B
    table = delta_cuda_config(128, 128, 16, batch, state_bytes, per_channel)
    got = delta_cuda_probe.case_config("table,du", geometry, 16, batch, state_bytes, per_channel)
    expected = dataclasses.replace(table, one_launch=True) if per_channel else table
    one = per_channel or (table.one_launch and not table.small)
    assert one == (per_channel or (state_bytes, batch) == (4, 64))
    if one:
        expected = dataclasses.replace(
            expected, flush_first=False, defer_count=False, dealt_units=True, dealt_spread=False, claimed_units=False
        )
    assert got == expected
    spread = delta_cuda_probe.case_config("table,ds", geometry, 16, batch, state_bytes, per_channel)
    assert spread == (dataclasses.replace(expected, dealt_spread=True) if one else expected)


@pytest.mark.parametrize("family", ["gdn", "kda"])
@pytest.mark.parametrize("state_bytes", [1, 2, 4])
@pytest.mark.parametrize("batch", [1, 16, 64, 256, 512])
def test_every_table_form_is_one_the_launcher_takes(family, state_bytes, batch):
    """Each ``table`` modifier, alone and with the others it combines with, names a configuration
    the launcher's checks accept (``delta_step_defines``) wherever the table routes dealt or
    claimed units: a form that inherits the table's order and adds one that excludes it would be
    refused on the GPU."""
    import torch

    from trtllm_replayssm.kernels.gated_delta_replay_cuda import delta_step_defines

    per_channel = family == "kda"
    geometry = (32, 32, 128, 128) if per_channel else QWEN_122B
    k_heads, v_heads, head_k_dim, head_v_dim = geometry
    for text in ("table", "table,ff", "table,du", "table,ds", "table,cl", "table,ff,rw", "table,fmma,ff", "table,ff,cs"):
        cfg = delta_cuda_probe.case_config(text, geometry, 16, batch, state_bytes, per_channel)
        delta_step_defines(k_heads, v_heads, head_k_dim, head_v_dim, 16, cfg, state_bytes, True, torch.float32,
                           torch.float32, per_channel)  # fmt: skip


def test_baseline_configs_need_a_baseline(capsys):
    with pytest.raises(SystemExit) as e:
        delta_cuda_probe.main(["--configs", "table", "table,fmma", "--baseline-configs", "table"])
    assert e.value.code == 2
    assert "--baseline-configs needs --baseline" in capsys.readouterr().err
