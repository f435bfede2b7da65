"""benchmarks/checkpoint_speed.py on the CPU: its routes per checkpoint dtype and its same-run
ratios, with stand-in cases and times (the timing itself needs a GPU)."""

import os
import sys

from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import checkpoint_speed as cs  # noqa: E402


def test_group_routes_time_both_steps_of_every_dtype_on_its_own_slot_sets():
    calls = []
    cases = {
        state: SimpleNamespace(slot_sets=[f"{state}-a", f"{state}-b"], step=lambda route, s: calls.append((route, s)))
        for state in ("f32", "bf16")
    }
    routes = cs.group_routes(cases)
    assert list(routes) == ["conventional f32", "replay f32", "conventional bf16", "replay bf16"]
    for f in routes["replay bf16"].steps:
        f()
    assert calls == [("replay_step", "bf16-a"), ("replay_step", "bf16-b")]


def test_ratio_rows_are_against_fp32_and_the_same_dtype_conventional_step():
    us = {"conventional f32": 500.0, "replay f32": 330.0, "conventional bf16": 270.0, "replay bf16": 176.0}
    rows = cs.ratio_rows({k: (v * 1e-6, [v * 1e-3]) for k, v in us.items()}, dict(family="mamba2", batch=256, L=16))
    by = {(r["route"], r["state"]): r for r in rows}
    assert by[("replay", "bf16")]["vs_fp32_conventional"] == pytest.approx(500 / 176)
    assert by[("replay", "bf16")]["vs_same_dtype_conventional"] == pytest.approx(270 / 176)
    assert by[("conventional", "f32")]["vs_same_dtype_conventional"] == pytest.approx(1.0)
    assert all(r["family"] == "mamba2" and r["batch"] == 256 and r["L"] == 16 for r in rows)


def test_each_row_carries_its_rounds_spread():
    rows = cs.ratio_rows({"replay bf16": (1e-4, [0.100, 0.105, 0.101]), "conventional bf16": (2e-4, [0.2])}, {})
    by = {r["route"]: r for r in rows}
    assert by["replay"]["spread"] == pytest.approx(0.05)
    assert by["conventional"]["spread"] is None  # one round: no spread
    assert cs.round_spread([0.2, 0.2]) == 0.0


def test_without_an_fp32_case_the_fp32_ratio_is_absent():
    rows = cs.ratio_rows({"conventional bf16": (2e-4, []), "replay bf16": (1e-4, [])}, {})
    assert all(r["vs_fp32_conventional"] is None for r in rows)


def test_fp8_and_stochastic_states_time_replay_only_against_their_dtypes_conventional_step():
    cases = {state: SimpleNamespace(slot_sets=["s"], step=lambda route, s: None) for state in ("bf16", "fp8", "bf16-sr")}
    assert list(cs.group_routes(cases)) == ["conventional bf16", "replay bf16", "replay fp8", "replay bf16-sr"]
    us = {"conventional f32": 500.0, "conventional bf16": 270.0, "replay fp8": 110.0, "replay bf16-sr": 180.0}
    by = {r["state"]: r for r in cs.ratio_rows({k: (v * 1e-6, []) for k, v in us.items()}, {}) if r["route"] == "replay"}
    assert by["fp8"]["vs_same_dtype_conventional"] is None and by["fp8"]["vs_fp32_conventional"] == pytest.approx(500 / 110)
    assert by["bf16-sr"]["vs_same_dtype_conventional"] == pytest.approx(270 / 180)
    assert cs.dtype_of("fp8-sr") == "fp8" and cs.has_conventional("f16") and not cs.has_conventional("f16-sr")
