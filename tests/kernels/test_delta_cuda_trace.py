"""benchmarks/delta_cuda_trace.py's instrumented copy of the CUDA gated delta step (CPU: NVRTC to
PTX): every anchor still matches the kernel once, the copy of a build with coefficient warps
compiles with the trace parameter last and every trace point in it, a kernel edit that moves an
anchor is named, and the report's intervals come from the right words."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"))

import delta_cuda_trace as trace  # noqa: E402
from trtllm_replayssm.kernels import gated_delta_replay_cuda as gc  # noqa: E402
from trtllm_replayssm.kernels.nvrtc import compile_program, cuda_source  # noqa: E402


def _ptx(source, cfg, state_bytes):
    defines = gc.delta_step_defines(32, 32, 128, 128, 16, cfg, state_bytes, True, torch.float32, torch.float32, True)
    return compile_program(source, "sm_90", defines, "ptx").decode()


def _params(ptx: str, entry: str) -> int:
    return ptx.split(f".entry {entry}(")[1].split(")")[0].count(".param")


@pytest.mark.parametrize("state_bytes", [1, 2])
def test_traced_copy_compiles_with_the_trace_parameter_last(tmp_path, state_bytes):
    """KDA's table at batch 256 (coefficient warps, one launch): one clock read per point (the
    producer's two words share one), the step kernel one parameter more."""
    cfg = gc.delta_cuda_config(128, 128, 16, 256, state_bytes, True)
    assert cfg.coef_warps and gc.runs_one_launch(cfg, True)
    ptx = _ptx(trace.write_traced_source(str(tmp_path)), cfg, state_bytes)
    step = ptx.split(".entry delta_replay_step(")[1]
    assert step.count("%clock64") >= len(trace.POINTS)
    assert _params(ptx, "delta_replay_step") == _params(_ptx(gc.SOURCE, cfg, state_bytes), "delta_replay_step") + 1


def test_a_moved_anchor_is_named():
    text = cuda_source(gc.SOURCE).replace("mbar_arrive(BAR_READY(st));", "mbar_arrive(BAR_READY(st)); ")
    with pytest.raises(ValueError, match=r"anchor .      mbar_arrive\(BAR_READY\(st\)\);.*found 0 times"):
        trace.traced_source(text)


def test_unit_intervals_read_each_point_from_its_word():
    """One CTA row with unit i's points at known cycles: every interval of units 3.. equals its
    definition, flush units (w = L - 1) apart, and a unit whose points are missing is left out."""
    L, row = 16, [0] * trace.SLOTS
    row[0] = 1
    at = lambda name, i, value: row.__setitem__(trace.WORD[name] + i, value)  # noqa: E731
    for i in range(trace.UNITS_TRACED - 1):  # the last unit not reached
        t = 1000 * (i + 1)
        at("issued", i, t), at("recs", i, t + 100), at("ready", i, t + 300), at("full", i, t + 150)
        at("go", i, t + 310), at("released", i, t + 320), at("done", i, t + 700)
        if i % 4 == 3:  # flush units
            at("folded", i, t + 500), at("stored", i, t + 650)
        at("w", i, (L - 1 if i % 4 == 3 else i % 4) + 1)
    out = trace.unit_intervals([row], L)
    plain, flush = out["coef"]
    assert plain and flush and set(plain) == set(flush) == {200}
    assert len(plain) + len(flush) == trace.UNITS_TRACED - 1 - 3
    assert set(out["records"][0]) == {100}
    assert set(out["coef idle"][0]) == {1000 + 100 - 300}
    assert set(out["wait full"][0]) == {1150 - 700}
    assert set(out["wait coef"][0]) == {160}
    assert set(out["consume"][0]) == {390}
    assert set(out["period"][0]) == {1000}
    assert not out["fold"][0] and set(out["fold"][1]) == {190} and set(out["store"][1]) == {150}


def test_first_unit_and_the_timeline_from_the_cta_start():
    """``first`` = 0 takes units 0.. (intervals reaching into unit -1 left out); ``since_start``
    counts each point from the CTA's word 0 and leaves out points not reached."""
    L, row = 16, [0] * trace.SLOTS
    row[0] = 500
    at = lambda name, i, value: row.__setitem__(trace.WORD[name] + i, value)  # noqa: E731
    for i in range(2):
        t = 1000 * (i + 1)
        at("issued", i, t), at("recs", i, t + 100), at("ready", i, t + 300), at("full", i, t + 150)
        at("go", i, t + 310), at("done", i, t + 700), at("w", i, i + 1)
    out = trace.unit_intervals([row], L, first=0)
    assert sorted(out["coef"][0]) == [200, 200]
    assert out["period"][0] == [1000] and out["coef idle"][0] == [2100 - 1300]  # unit 1 only
    assert trace.unit_intervals([row], L)["coef"] == ([], [])  # the default skips units 0-2
    tl = trace.since_start([row], 3)
    assert tl["issued", 0] == [500] and tl["done", 1] == [2700 - 500]
    assert tl["folded", 0] == [] and tl["issued", 2] == []
    assert tl["scanned", 0] == []  # the coefficient pass's phases: in the timeline where reached
    at("scanned", 0, 1180)
    assert trace.since_start([row], 1)["scanned", 0] == [1180 - 500]


def test_the_clock_is_measured_over_each_cta_run_and_converts_the_report(capsys):
    """Words 0 / 2 hold a CTA's first and last cycle counts, 1 / 3 the timer beside them: the
    measured clock is the summed cycles over the summed nanoseconds (rows without both left out),
    and the report converts its intervals at it unless told another clock."""
    rows = []
    for start, cycles, ns in ((100, 18_000, 10_000), (50, 36_000, 20_000), (7, 0, 0)):
        row = [0] * trace.SLOTS
        row[0], row[1], row[2], row[3] = start, 1_000, start + cycles, 1_000 + ns if ns else 0
        rows.append(row)
    assert trace.measured_clock_mhz(rows) == pytest.approx(1800.0)
    assert trace.measured_clock_mhz([[1] + [0] * (trace.SLOTS - 1)]) == 0.0
    L, row = 16, rows[0]
    for i in range(5):
        row[trace.WORD["w"] + i], row[trace.WORD["done"] + i] = 1, 10_000 + 3_600 * i
    trace.report([w for r in rows for w in r], L, 0.0)
    out = capsys.readouterr().out
    assert "measured over their runs: 1800 MHz" in out and "µs at 1800 MHz" in out
    period = next(line for line in out.splitlines() if line.strip().startswith("period"))
    assert "2.00" in period  # 3,600 cycles at 1,800 MHz
    trace.report([w for r in rows for w in r], L, 3600.0)
    assert "µs at 3600 MHz" in capsys.readouterr().out
    with pytest.raises(ValueError, match="no CTA recorded its run's clock"):
        trace.report([1] + [0] * (trace.SLOTS - 1), L, 0.0)
