"""benchmarks/precision.py (issue 25's drift study) on the CPU references, tiny geometries: the
float64 truth is fed the same inputs (fp32 paths agree with it to fp32 rounding), narrow paths
show their rounding, a bf16 replay checkpoint drifts less than a bf16 state, and the CLI writes
its table, JSON and plot."""

import importlib.util
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import precision  # noqa: E402
from trtllm_replayssm.models import DeltaRuleGeometry, Mamba2Geometry  # noqa: E402

FP32 = precision.DTYPES["fp32"]
TINY = {
    "mamba2": lambda: precision.mamba2_family(Mamba2Geometry(4, 16, 32, 2, 4)),
    "gdn": lambda: precision.delta_rule_family("gdn", DeltaRuleGeometry(2, 4, 16, 16, 4), record_dtype=FP32),
    "kda": lambda: precision.delta_rule_family("kda", DeltaRuleGeometry(2, 2, 16, 16, 4), record_dtype=FP32),
}


def test_horizons_are_powers_of_two_and_the_last_step():
    assert precision.horizons(40) == [1, 2, 4, 8, 16, 32, 40] and precision.horizons(64)[-1] == 64


@pytest.mark.parametrize("family", sorted(TINY))
def test_fp32_paths_match_the_float64_truth_and_bf16_paths_do_not(family):
    r = precision.study(TINY[family](), ["fp32", "bf16"], [4], 24, 2, "cpu")
    assert set(r) == {"conventional fp32", "replay fp32 L4", "conventional bf16", "replay bf16 L4"}
    for path, v in r.items():
        assert len(v["y"]) == 24 and sorted(v["state"]) == precision.horizons(24)
        worst = max(v["state"].values())
        if "fp32" in path:
            assert worst < 2e-6, (path, worst)  # the truth saw the same inputs
        else:
            assert 1e-4 < worst < 5e-2, (path, worst)  # bf16 rounding, and no blow-up


def test_bf16_replay_checkpoint_drifts_less_than_a_bf16_state():
    r = precision.study(TINY["mamba2"](), ["bf16"], [8], 64, 2, "cpu")
    assert r["replay bf16 L8"]["state"][64] < r["conventional bf16"]["state"][64]


def test_cli_writes_table_json_and_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision, "family_of", lambda model, record_dtype: TINY["mamba2"]())
    rows = precision.main(
        ["--models", "nemotron-3-super-120b", "--dtypes", "fp32", "--L", "4", "--steps", "8", "--device", "cpu",
         "--out-dir", str(tmp_path)]
    )  # fmt: skip
    assert [r["path"] for r in rows] == ["conventional fp32", "replay fp32 L4"]
    (js,) = tmp_path.glob("*-cpu-precision.json")
    data = json.loads(js.read_text())
    assert data["rows"] == rows and set(data["results"]) == {"nemotron-3-super-120b"}
    out = capsys.readouterr().out
    assert "replay fp32 L4" in out
    if importlib.util.find_spec("matplotlib"):
        assert js.with_suffix(".png").stat().st_size > 0
    else:
        assert "no plot: matplotlib is not installed" in out


@pytest.mark.parametrize("model", sorted(precision.PRESETS))
def test_every_preset_model_gives_a_family_with_its_layers_parameters(model):
    family = precision.family_of(model, FP32)
    params = family.make_params(0, "cpu")
    assert family.name in ("mamba2", "gdn", "kda") and len(family.dims) == 3
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in params.values())
    if family.name == "mamba2":
        assert set(params) == {"A", "dt_bias", "D"} and (params["A"] < 0).all()
    else:
        assert set(params) == {"A_log", "dt_bias"}


@pytest.mark.parametrize("family", sorted(TINY))
def test_truth_is_the_ops_float64_step(family):
    """The study's truth (the reference called directly, so that it runs on the GPU too) is the
    op's CPU float64 step: same outputs and state, bit for bit."""
    f = TINY[family]()
    gen = torch.Generator().manual_seed(3)
    params = precision._to(f.make_params(0, "cpu"), "cpu", torch.float64)
    slots = torch.tensor([1, -1, 0], dtype=torch.int32)
    s_ref, s_op = (torch.randn(2, *f.dims, generator=torch.Generator().manual_seed(5), dtype=torch.float64) for _ in "ab")
    for _ in range(3):
        inp = precision._to(f.make_inputs(gen, 3, f.make_params(0, "cpu"), "cpu"), "cpu", torch.float64)
        y_ref = f.truth(s_ref, inp, params, slots)
        y_op = f.conventional(s_op, inp, params, slots)
        assert torch.equal(y_ref[[0, 2]], y_op[[0, 2]]) and torch.equal(s_ref, s_op)


@pytest.mark.parametrize("family", sorted(TINY))
def test_simulated_nearest_bf16_reproduces_the_bf16_paths(family):
    """The simulated paths (float64 reference, state or checkpoint rounded by the format) with
    nearest bf16 match the real bf16 paths: the simulation adds the format and nothing else."""
    r = precision.study(TINY[family](), ["bf16"], [4], 40, 2, "cpu", formats=["bf16"])
    for real, sim in (("conventional bf16", "conventional bf16 (sim)"), ("replay bf16 L4", "replay bf16 L4 (sim)")):
        for step, err in r[real]["state"].items():
            assert r[sim]["state"][step] == pytest.approx(err, rel=0.05, abs=1e-6), (real, step)


def test_simulated_formats_order_by_precision_and_are_seeded():
    fmts = ["fp16", "bf16", "fp8-row", "bf16-sr"]
    r = precision.study(TINY["mamba2"](), [], [8], 64, 2, "cpu", formats=fmts)
    last = {f: r[f"replay {f} L8 (sim)"]["state"][64] for f in fmts}
    assert 1e-6 < last["fp16"] < last["bf16"] < last["fp8-row"] < 0.5, last
    again = precision.study(TINY["mamba2"](), [], [8], 64, 2, "cpu", formats=["bf16-sr"])
    assert again["replay bf16-sr L8 (sim)"] == r["replay bf16-sr L8 (sim)"]
    other = precision.study(TINY["mamba2"](), [], [8], 64, 2, "cpu", seed=1, formats=["bf16-sr"])
    assert other["replay bf16-sr L8 (sim)"] != r["replay bf16-sr L8 (sim)"]


def test_cli_simulate_adds_the_formats_paths(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "family_of", lambda model, record_dtype: TINY["mamba2"]())
    rows = precision.main(
        ["--models", "nemotron-3-super-120b", "--dtypes", "bf16", "--L", "4", "--steps", "8", "--device", "cpu",
         "--simulate", "fp8-row", "bf16-sr"]
    )  # fmt: skip
    assert [r["path"] for r in rows] == [
        "conventional bf16", "replay bf16 L4", "conventional fp8-row (sim)", "replay fp8-row L4 (sim)",
        "conventional bf16-sr (sim)", "replay bf16-sr L4 (sim)",
    ]  # fmt: skip
    with pytest.raises(SystemExit):
        precision.main(["--simulate", "int4"])
