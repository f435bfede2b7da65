"""benchmarks/precision.py (issue 25's drift study) on the CPU references, tiny geometries: the
float64 truth is fed the same inputs (fp32 paths agree with it to fp32 rounding), narrow paths
show their rounding, a bf16 replay checkpoint drifts less than a bf16 state, the fp8 and
stochastic replay paths run the ops with an fp8 cache and the seed, the simulated conventional
paths add their format and nothing else, the targets' check flags what misses, and the CLI
refuses bad combinations and writes its tables, JSON and plot."""

import importlib.util
import json
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import precision  # noqa: E402
from trtllm_replayssm.models import DeltaRuleGeometry, Mamba2Geometry  # noqa: E402

FP32 = torch.float32
TINY = {
    "mamba2": lambda: precision.mamba2_family(Mamba2Geometry(4, 16, 32, 2, 4)),
    "gdn": lambda: precision.delta_rule_family("gdn", DeltaRuleGeometry(2, 4, 16, 16, 4), record_dtype=FP32),
    "kda": lambda: precision.delta_rule_family("kda", DeltaRuleGeometry(2, 2, 16, 16, 4), record_dtype=FP32),
}
REPLAY_OPS = {"mamba2": "mamba2_replay_step", "gdn": "gdn_replay_step", "kda": "kda_replay_step"}


def test_horizons_are_powers_of_two_and_the_last_step_their_windows_cover_every_step():
    assert precision.horizons(40) == [1, 2, 4, 8, 16, 32, 40] and precision.horizons(64)[-1] == 64
    assert precision.window(1) == range(1, 2) and precision.window(32) == range(1, 33)
    assert precision.window(64) == range(33, 65) and precision.window(4096) == range(2049, 4097)
    assert precision.window(40) == range(9, 41)  # the last step: at least 32 steps
    for steps in (40, 100, 4096):
        assert set().union(*(precision.window(h) for h in precision.horizons(steps))) == set(range(1, steps + 1))
    ys = [1.0] * 16 + [3.0] + [1.0] * 30 + [2.0] + [1.0] * 16  # steps 17 and 48
    errors = precision.horizon_errors({"p": dict(y=ys, state={})})["p"]["y"]
    assert errors == {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0, 32: 3.0, 64: 2.0}
    assert precision.last_tenth(ys) == 1.0 and precision.last_tenth(ys[:50]) == 2.0


@pytest.mark.parametrize("family", sorted(TINY))
def test_fp32_paths_match_the_float64_truth_and_bf16_paths_do_not(family):
    r = precision.study(TINY[family](), ["fp32", "bf16"], [4], 24, 2, "cpu")
    assert set(r) == {"conventional fp32", "replay fp32 L4", "conventional bf16", "replay bf16 L4"}
    assert r["replay bf16 L4"]["kind"] == "replay" and r["replay bf16 L4"]["L"] == 4
    assert r["conventional bf16"]["L"] is None and not r["conventional bf16"]["simulated"]
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


@pytest.mark.parametrize("family", sorted(TINY))
def test_fp8_and_stochastic_replay_paths_run_the_op_with_their_cache_and_seed(family, monkeypatch):
    """Every replay path calls the family's replay op, with a cache in its storage dtype (fp8:
    float8_e4m3fn codes with row scales) and the rounding seed exactly when it rounds
    stochastically; the fp8 state is decoded (an error of fp8's size, not of raw codes), and
    the fp8 replay checkpoint drifts less than the simulated fp8 state (worst over the horizons)."""
    real, seen = getattr(precision.ops, REPLAY_OPS[family]), set()

    def spy(cache, *args, rounding_seed=None, **kw):
        scale = cache.checkpoint_scale
        seen.add((cache.state_dtype, None if scale is None else tuple(scale.shape), rounding_seed))
        return real(cache, *args, rounding_seed=rounding_seed, **kw)

    monkeypatch.setattr(precision.ops, REPLAY_OPS[family], spy)
    f = TINY[family]()
    r = precision.study(f, ["bf16", "fp8", "fp8-sr"], [4], 48, 2, "cpu", rounding_seed=11)
    scale_shape = (2,) + tuple(f.dims[:2])  # [num_slots, heads, rows]
    assert seen == {(torch.bfloat16, None, None), (precision.FP8, scale_shape, None), (precision.FP8, scale_shape, 11)}
    assert {p for p, v in r.items() if v["simulated"]} == {"conventional fp8 (sim)", "conventional fp8-sr (sim)"}
    fp8 = r["replay fp8 L4"]["state"]
    assert 2e-3 < fp8[48] < 0.2, fp8  # fp8-e4m3's 2^-4 relative spacing, decoded with its scales
    assert fp8[48] > 2 * r["replay bf16 L4"]["state"][48]
    assert max(fp8.values()) < max(r["conventional fp8 (sim)"]["state"].values())


@pytest.mark.parametrize("family", sorted(TINY))
def test_stochastic_paths_reproduce_with_their_seed_and_differ_with_another(family):
    f = TINY[family]()
    run = lambda dtypes, seed: precision.study(f, dtypes, [4], 32, 2, "cpu", rounding_seed=seed)  # noqa: E731
    both = run(["bf16-sr", "fp8-sr"], 5)
    assert run(["bf16-sr", "fp8-sr"], 5) == both
    alone = run(["bf16-sr"], 5)  # each path its own draws: the other dtype's paths change nothing
    assert alone == {p: v for p, v in both.items() if "bf16-sr" in p}
    other = run(["bf16-sr", "fp8-sr"], 6)
    for path in both:
        assert other[path]["state"] != both[path]["state"], path
    nearest = precision.study(f, ["bf16"], [4], 32, 2, "cpu")
    assert nearest["replay bf16 L4"]["state"] != both["replay bf16-sr L4"]["state"]


@pytest.mark.parametrize("family", sorted(TINY))
def test_simulated_nearest_bf16_conventional_path_reproduces_the_ops(family, monkeypatch):
    """The simulated conventional path (float64 reference, the state rounded to the format after
    every step) with nearest bf16 matches the op's bf16 state: the simulation adds the format and
    nothing else."""
    real = precision.study(TINY[family](), ["bf16"], [4], 40, 2, "cpu")["conventional bf16"]
    monkeypatch.setitem(precision.STORAGES, "bf16", precision.Storage(torch.bfloat16, simulated="bf16"))
    sim = precision.study(TINY[family](), ["bf16"], [4], 40, 2, "cpu")["conventional bf16 (sim)"]
    for step, err in real["state"].items():
        assert sim["state"][step] == pytest.approx(err, rel=0.05, abs=1e-6), step


def _path(kind, dtype, L, ys, simulated=False):
    return dict(y=list(ys), state={h: ys[h - 1] for h in precision.horizons(len(ys))}, kind=kind, dtype=dtype, L=L,
                simulated=simulated)  # fmt: skip


def _result(**replays):
    """A study's result over 64 steps: conventional fp32 at 1e-3, bf16 at 4e-3, fp8 (sim) at
    4e-2, and replay paths ``<dtype>_L<L>=errors``."""
    r = {"conventional fp32": _path("conventional", "fp32", None, [1e-3] * 64)}
    r["conventional bf16"] = _path("conventional", "bf16", None, [4e-3] * 64)
    r["conventional fp8 (sim)"] = _path("conventional", "fp8", None, [4e-2] * 64, simulated=True)
    for key, ys in replays.items():
        dtype, L = key.rsplit("_L", 1)
        r[f"replay {dtype} L{L}"] = _path("replay", dtype, int(L), ys)
    return r


def test_targets_flag_a_replay_path_above_its_conventional_one_and_16bit_beyond_2x():
    spike = [1.5e-3] * 64
    spike[30] = 5e-3  # above the conventional bf16 state at step 31: the horizon 32 misses
    checks = precision.targets(_result(bf16_L8=spike, bf16_L16=[2.5e-3] * 64))
    below = {c["path"]: c for c in checks["below"]}
    assert below["replay bf16 L8"]["ok"] is False and below["replay bf16 L8"]["horizon"] == 32
    assert below["replay bf16 L8"]["ratio"] == pytest.approx(1.25)
    assert below["replay bf16 L16"]["ok"] is True and checks["target1"] is False
    to_fp32 = {c["path"]: c for c in checks["to_fp32"]}
    assert to_fp32["replay bf16 L8"]["ratio"] == pytest.approx(5.0) and not to_fp32["replay bf16 L8"]["ok"]
    assert to_fp32["replay bf16 L16"]["ratio"] == pytest.approx(2.5) and not to_fp32["replay bf16 L16"]["ok"]
    assert checks["recommended_16bit"] is None and checks["recommended"] is None and checks["target2"] is False
    text = precision.format_targets("m", checks, [8, 16])
    assert "target 1 (replay <= conventional at the same dtype, every horizon): FAIL (missed: bf16 at L = 8)" in text
    assert "1.25@32 !" in text and "every horizon): FAIL (best: bf16 L16, 2.50@1); recommended: none" in text


def test_targets_pass_and_recommend_the_narrowest_dtype_within_2x_with_its_L():
    checks = precision.targets(
        _result(bf16_L8=[2.1e-3] * 64, bf16_L16=[1.9e-3] * 64, bf16_L32=[1.2e-3] * 64, fp8_L8=[3e-2] * 64, fp8_L16=[3e-2] * 64)
    )
    assert checks["target1"] is True and checks["target2"] is True
    assert checks["recommended_16bit"] == dict(dtype="bf16", Ls=[16, 32], ratio=pytest.approx(1.9))
    assert checks["recommended"] == checks["recommended_16bit"]  # fp8 (30x) is not within 2x
    assert precision.setting_text(checks["recommended"], [8, 16, 32]) == "bf16 at L ≥ 16 (1.90×)"
    assert precision.setting_text(dict(dtype="fp8", Ls=[8, 32], ratio=1.5), [8, 16, 32]) == "fp8 at L = 8, 32 (1.50×)"
    assert precision.setting_text(dict(dtype="fp16", Ls=[8, 16], ratio=1.0), [8, 16]) == "fp16 (1.00×)"
    narrow = precision.targets(_result(bf16_L8=[1.2e-3] * 64, fp8_L8=[1.9e-3] * 64))
    assert narrow["recommended"]["dtype"] == "fp8" and narrow["recommended_16bit"]["dtype"] == "bf16"
    unrounded = precision.targets(_result(bf16_L8=[1.2e-3] * 64, fp8_L64=[1e-3] * 64))  # L64 in 64 steps: no flush
    (fp8,) = [c for c in unrounded["to_fp32"] if c["dtype"] == "fp8"]
    assert fp8["ok"] and not fp8["rounded"] and unrounded["recommended"]["dtype"] == "bf16"
    no_fp32 = precision.targets({k: v for k, v in _result(bf16_L8=[1e-3] * 64).items() if "fp32" not in k})
    assert no_fp32["to_fp32"] == [] and no_fp32["target2"] is None and no_fp32["target1"] is True


def test_markdown_recommends_per_family_the_L_every_layer_passes():
    results = {
        "a": _result(bf16_L8=[3e-3] * 64, bf16_L16=[1.5e-3] * 64, bf16_L32=[1.5e-3] * 64),
        "b": _result(bf16_L8=[3e-3] * 64, bf16_L16=[1.8e-3] * 64, bf16_L32=[3e-3] * 64),
        "c": _result(bf16_L8=[3e-3] * 64, bf16_L16=[3e-3] * 64, bf16_L32=[3e-3] * 64),
    }
    text = precision.markdown(results, {"a": "gdn", "b": "gdn", "c": "kda"}, [8, 16, 32])
    lines = text.splitlines()
    assert "over the last 10% of the steps; bf16 outputs), conventional / replay (L = 8, 16, 32: min–max)" in lines[0]
    assert "| layer | fp32 | bf16 | fp8 | recommended |" in lines
    assert "| GDN, a | 1.00e-03 / – | 4.00e-03 / 1.50e-03–3.00e-03 | 4.00e-02 (sim) / – | bf16 at L ≥ 16 (1.50×) |" in lines
    assert "| GDN, b | 1.00e-03 / – | 4.00e-03 / 1.80e-03–3.00e-03 | 4.00e-02 (sim) / – | bf16 at L = 16 (1.80×) |" in lines
    assert "| GDN | a, b | bf16 at L = 16 (1.80×) |" in lines
    assert "| KDA | c | none |" in lines


def test_cli_writes_tables_json_and_plot(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(precision, "family_of", lambda model, record_dtype: TINY["mamba2"]())
    rows = precision.main(
        ["--models", "nemotron-3-super-120b", "--dtypes", "fp32", "bf16", "fp8", "--L", "4", "--steps", "8",
         "--device", "cpu", "--markdown", "--out-dir", str(tmp_path)]
    )  # fmt: skip
    assert [r["path"] for r in rows] == [
        "conventional fp32", "replay fp32 L4", "conventional bf16", "replay bf16 L4", "conventional fp8 (sim)", "replay fp8 L4"
    ]  # fmt: skip
    (js,) = tmp_path.glob("*-cpu-precision.json")
    data = json.loads(js.read_text())
    assert data["rows"] == rows and set(data["results"]) == {"nemotron-3-super-120b"}
    assert set(data["horizons"]["nemotron-3-super-120b"]["replay fp8 L4"]["y"]) == {"1", "2", "4", "8"}
    assert data["targets"]["nemotron-3-super-120b"]["target1"] in (True, False)
    out = capsys.readouterr().out
    assert "replay fp8 L4" in out and "# nemotron-3-super-120b: state error" in out
    assert "nemotron-3-super-120b: target 2 (recommended 16-bit setting" in out
    assert "| Mamba-2, nemotron-3-super-120b |" in out and "| Mamba-2 | nemotron-3-super-120b |" in out
    if importlib.util.find_spec("matplotlib"):
        assert js.with_suffix(".png").stat().st_size > 0
    else:
        assert "no plot: matplotlib is not installed" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--dtypes", "fp32-sr"],
            "fp32-sr: stochastic rounding takes a bf16, fp16 or fp8 storage; fp32 is stored as computed",
        ),
        (["--dtypes", "int4"], "'int4': expected a storage dtype, one of fp32, bf16, fp16, fp8, bf16-sr, fp16-sr, fp8-sr"),
        (["--dtypes", "bf16", "bf16"], "name a dtype twice"),
        (["--dtypes", "bf16", "--rounding-seed", "3"], "a rounding seed without a stochastic dtype rounds nothing"),
        (["--dtypes", "bf16-sr", "--rounding-seed", str(2**31)], "expected an int in [0, 2^31)"),
        (["--L", "16", "65"], "--L: [65] outside [1, 64]"),
        (["--dtypes", "bf16", "fp8", "--markdown"], "--markdown: recommends against the fp32 conventional path"),
        (["--models", "my-model"], "invalid choice: 'my-model'"),
    ],
)
def test_cli_refuses_bad_combinations_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        precision.main(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_study_refuses_stochastic_rounding_of_fp32():
    with pytest.raises(ValueError, match="fp32-sr: stochastic rounding takes"):
        precision.study(TINY["mamba2"](), ["fp32-sr"], [4], 2, 1, "cpu")


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
