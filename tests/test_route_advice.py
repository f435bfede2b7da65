"""Measured route advice: the lookup (measured, nearest batch, other layer, not measured, other
records than those timed), its argument checks, and the data's provenance (every cell cites
files and a section that exist, and its figure is printed in that section)."""

import json
import os
import re
import warnings

import pytest
import torch

from trtllm_replayssm.measured_speeds import MEASUREMENTS, STEP, VERIFY
from trtllm_replayssm.models import DeltaRuleGeometry, load_model
from trtllm_replayssm.route_advice import SlowRouteWarning, geometry_dims, model_advice, route_advice, warn_if_slower

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KIMI = (32, 32, 128, 128)


def _section(doc: str, heading: str) -> str:
    text = open(os.path.join(ROOT, doc)).read()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_every_cell_cites_an_existing_doc_section_and_raw_file():
    assert MEASUREMENTS
    for m in MEASUREMENTS:
        s = m.source
        assert os.path.isfile(os.path.join(ROOT, s.doc)), (m, s.doc)
        assert os.path.isfile(os.path.join(ROOT, s.raw)), (m, s.raw)
        assert re.fullmatch(r"20\d\d-\d\d-\d\d", s.date) and s.gpu == "NVIDIA H200" and s.command
        assert s.date in s.raw  # the raw file is of that day's run
        assert f"{m.ratio:.2f}" in _section(s.doc, s.section), (m.family, m.route, m.layer, m.L, m.T, m.batch)
        if m.bf16_same_run is not None:
            assert f"{m.bf16_same_run:.2f}" in _section(s.doc, s.section), (m.family, m.layer, m.batch)


def test_cells_are_unique_and_complete_per_key():
    keys = [
        (m.family, m.route, m.layer, m.state_dtype, m.conventional_dtype, m.record_dtype, m.L, m.T, m.batch)
        for m in MEASUREMENTS
    ]
    assert len(keys) == len(set(keys))
    assert {m.route for m in MEASUREMENTS} == {STEP, VERIFY}
    assert all(m.T is None for m in MEASUREMENTS if m.route == STEP)


@pytest.mark.parametrize("batch, ratio", [(1, 1.24), (16, 1.26), (64, 1.54), (256, 1.65), (512, 1.70)])
def test_measured_kda_fp32_step(batch, ratio):
    a = route_advice("kda", "replay", state_dtype="fp32", L=16, batch=batch, geometry=KIMI)
    assert (a.ratio, a.measured_batch) == (ratio, batch)
    assert a.recommendation == ("conventional" if ratio < 1 else "replay") and a.slower == (ratio < 1)
    assert f"{ratio:.2f}x the conventional step" in a.text
    assert 'docs/benchmarks.md "Checkpoint dtypes: speed"' in a.text and "2026-12-07" in a.text
    assert "nearest" not in a.text and "measured on" not in a.text


def test_nearest_measured_batch_is_said():
    a = route_advice("kda", "replay", state_dtype="bf16", L=32, batch=32, geometry=KIMI)
    assert (a.ratio, a.measured_batch, a.recommendation) == (0.86, 16, "conventional")
    assert "batch 32: nearest measured batch 16; 0.86x" in a.text
    # a tie takes the smaller batch (ratios grow with the batch)
    assert route_advice("kda", "replay", state_dtype="bf16", L=32, batch=40, geometry=KIMI).measured_batch == 16


def test_bf16_checkpoint_step_at_batch_16_slower_for_the_small_gdn_layer_only():
    for family, dims, ratio, route in (
        ("gdn", (16, 32, 128, 128), 0.93, "conventional"),
        ("gdn", (16, 64, 128, 128), 1.25, "replay"),
        ("kda", KIMI, 1.06, "replay"),
    ):
        a = route_advice(family, "replay", state_dtype="bf16", L=16, batch=16, geometry=dims)
        assert (a.ratio, a.recommendation) == (ratio, route)


def test_fp16_checkpoint_step_recommends_the_conventional_step_where_measured_slower():
    # fp16 checkpoints run the Triton kernels (checkpoint_speed.py, session 33).
    for family, batch, ratio, route in (
        ("mamba2", 16, 0.79, "conventional"),
        ("mamba2", 256, 1.14, "replay"),
        ("gdn", 64, 1.03, "replay"),
        ("kda", 512, 0.92, "conventional"),
    ):
        a = route_advice(family, "replay", state_dtype="fp16", L=16, batch=batch)
        assert (a.ratio, a.recommendation) == (ratio, route)
        assert "checkpoint_speed_s33" in a.text or "Checkpoint dtypes" in a.text


def test_an_unmeasured_layer_takes_the_slowest_measured_layer_and_says_so():
    a = route_advice("gdn", "replay", state_dtype="bf16", L=16, batch=16, geometry=(8, 32, 128, 128))
    assert a.ratio == 0.93  # Qwen3.5-4B, not Qwen3.5-122B's 1.25
    assert "measured on Qwen3.5-4B GDN (16, 32, 128, 128), not this layer" in a.text
    assert route_advice("gdn", "replay", state_dtype="bf16", L=16, batch=16, geometry=(16, 64, 128, 128)).ratio == 1.25


@pytest.mark.parametrize(
    "kwargs, what",
    [
        (
            dict(family="gdn", mode="replay", state_dtype="fp16", L=8, batch=16),
            "measured: fp32 at L 8/16/32, bf16 at L 8/16/32, fp16 at L 16",
        ),
        (
            dict(family="mamba2", mode="replay", state_dtype="fp16", L=32, batch=64),
            "measured: fp32 at L 8/16/32, bf16 at L 8/16/32, fp16 at L 16",
        ),
        (dict(family="kda", mode="replay", state_dtype="fp32", L=12, batch=16), "L 8/16/32"),
        (
            dict(family="mamba2", mode="replay_spec", state_dtype="fp32", L=16, T=3, batch=16),
            "measured: fp32 at B 16, T 2/4/8",
        ),
        (
            dict(family="gdn", mode="replay_spec", state_dtype="fp16", L=16, T=4, batch=16),
            "measured: fp32 at B 16, T 2/4/8, bf16 at B 16, T 2/4/8",
        ),
    ],
)
def test_unmeasured_cells_are_not_interpolated(kwargs, what):
    a = route_advice(kwargs.pop("family"), kwargs.pop("mode"), **kwargs)
    assert (a.ratio, a.recommendation, a.source, a.slower) == (None, None, None, False)
    assert "not measured" in a.text and what in a.text and "no recommendation" in a.text


def test_verify_with_a_bf16_checkpoint_has_its_own_cells():
    """A bf16 checkpoint's verify is slower than serial steps where fp32's is not (GDN T = 2, batch 4)."""
    g = (16, 64, 128, 128)
    bf16 = route_advice("gdn", "replay_spec", state_dtype="bf16", L=16, T=2, batch=4, geometry=g)
    fp32 = route_advice("gdn", "replay_spec", state_dtype="fp32", L=16, T=2, batch=4, geometry=g)
    assert (bf16.ratio, bf16.recommendation, bf16.slower) == (0.94, "serial", True)
    assert (fp32.ratio, fp32.recommendation) == (1.34, "replay")
    assert "bf16 checkpoint" in bf16.text and "0.94x 2 serial steps" in bf16.text
    assert bf16.source.raw.endswith("2026-12-06-h200-s61-callQ1-spec_bf16.log")
    # batch 32 and 64 were not rerun in session 61: their cells keep session 34's run
    assert route_advice("gdn", "replay_spec", state_dtype="bf16", L=16, T=2, batch=64).source.date == "2026-12-04"


_VERIFY_RAW = "2026-12-06-h200-s61-callQ1-spec_f32.log"


def test_verify_against_serial_steps():
    a = route_advice("kda", "replay_spec", state_dtype="fp32", L=16, T=2, batch=16, geometry=KIMI)
    assert (a.ratio, a.recommendation) == (1.45, "replay")
    assert "1.45x 2 serial steps" in a.text and '"Speculative verify"' in a.text
    k = route_advice("kda", "replay_spec", state_dtype="fp32", L=16, T=4, batch=256, geometry=KIMI)
    assert (k.ratio, k.recommendation) == (3.81, "replay")
    g = route_advice("gdn", "replay_spec", state_dtype="fp32", L=16, T=2, batch=16, geometry=(16, 64, 128, 128))
    assert (g.ratio, g.recommendation) == (2.20, "replay")
    m = route_advice("mamba2", "replay_spec", state_dtype="fp32", L=16, T=4, batch=256, geometry=(128, 64, 128, 8))
    assert (m.ratio, m.recommendation) == (4.71, "replay")
    # a batch between measured ones: the nearest measured batch, said
    m100 = route_advice("mamba2", "replay_spec", state_dtype="fp32", L=16, T=4, batch=100, geometry=(128, 64, 128, 8))
    assert (m100.ratio, m100.measured_batch) == (4.21, 64) and "nearest measured batch 64" in m100.text
    assert route_advice("kda", "replay_spec", state_dtype="fp32", L=16, T=8, batch=512).ratio == 4.93
    # every fp32 verify cell comes from one run
    assert {m.source.raw for m in MEASUREMENTS if (m.route, m.state_dtype) == (VERIFY, "fp32")} == {
        "benchmarks/results/" + _VERIFY_RAW
    }


@pytest.mark.parametrize(
    "family, T, batch, ratio, measured",
    [("mamba2", 2, 1, 0.82, 1), ("gdn", 2, 1, 0.91, 1), ("kda", 2, 1, 0.76, 1), ("kda", 2, 2, 0.76, 1),
     ("kda", 2, 3, 0.92, 4), ("kda", 2, 4, 0.92, 4)],
)  # fmt: skip
def test_verify_slower_than_serial_steps_recommends_them(family, T, batch, ratio, measured):
    """Where verify was measured slower than T serial steps (fp32 checkpoint, T = 2 at batch 1,
    and KDA at 4: session 61, H200), the advice is the serial route, with the figure."""
    a = route_advice(family, "replay_spec", state_dtype="fp32", L=16, T=T, batch=batch)
    assert (a.ratio, a.measured_batch, a.recommendation, a.slower) == (ratio, measured, "serial", True)
    assert f"{ratio:.2f}x 2 serial steps" in a.text and a.text.endswith("recommended: serial")


def test_verify_faster_than_serial_steps_from_batch_4_but_kda_t2():
    """The other side of the measured line: every other fp32 verify cell is faster than serial."""
    slower = {(m.family, m.T, m.batch) for m in MEASUREMENTS if (m.route, m.state_dtype) == (VERIFY, "fp32") and m.ratio < 1}
    assert slower == {("mamba2", 2, 1), ("gdn", 2, 1), ("kda", 2, 1), ("kda", 2, 4)}


@pytest.mark.parametrize(
    "family, batch, ratio, bf16, run",
    [("mamba2", 256, 4.66, 3.07, "2026-12-06-h200-s61-callP2"), ("gdn", 256, 3.86, 2.88, "2026-12-07-h200-s71-callR37"),
     ("kda", 256, 3.08, 2.77, "2026-12-07-h200-s71-callR37"), ("kda", 1, 1.23, 1.23, "2026-12-07-h200-s71-callR37")],
)  # fmt: skip
def test_an_fp8_checkpoint_is_measured_against_the_fp32_conventional_step(family, batch, ratio, bf16, run):
    """No conventional step keeps an fp8 state: the fp8 cells (the CUDA steps; Mamba-2 session
    61's H200 run, GDN and KDA session 71's) are against the fp32 conventional step, said in the
    text, with the same run's bf16 replay step."""
    a = route_advice(family, "replay", state_dtype="fp8", L=16, batch=batch)
    assert (a.ratio, a.bf16_same_run, a.recommendation, a.conventional_dtype) == (ratio, bf16, "replay", "fp32")
    assert a.source.raw == f"benchmarks/results/{run}-ckpt.log"
    assert (
        f"{ratio:.2f}x the fp32 conventional step (no conventional step keeps an fp8 state); "
        f"the bf16 replay step {bf16:.2f}x it in the same run "
        f'(H200 {run[:10]}, docs/benchmarks.md "Checkpoint dtypes: speed")'
    ) in a.text
    assert "at that dtype" not in a.text and "x the conventional step" not in a.text
    assert a.text.endswith("recommended: replay")


def test_an_fp8_cell_slower_than_the_fp32_step_recommends_an_fp32_state(monkeypatch):
    """No fp8 cell is slower today (session 48's KDA batch 1 was 0.96x); one that were
    recommends the conventional route with the state dtype it was measured against."""
    import dataclasses

    import trtllm_replayssm.route_advice as advice

    slow = [
        dataclasses.replace(m, ratio=0.96) if (m.family, m.state_dtype, m.batch) == ("kda", "fp8", 1) else m
        for m in MEASUREMENTS
    ]
    monkeypatch.setattr(advice, "MEASUREMENTS", tuple(slow))
    a = route_advice("kda", "replay", state_dtype="fp8", L=16, batch=1)
    assert (a.ratio, a.recommendation, a.slower) == (0.96, "conventional", True)
    assert a.text.endswith("recommended: conventional (an fp32 state)")


def test_other_dtypes_are_against_their_own_conventional_step_and_fp8_is_not_measured_elsewhere():
    bf16 = route_advice("gdn", "replay", state_dtype="bf16", L=16, batch=256, geometry=(16, 64, 128, 128))
    assert (bf16.ratio, bf16.conventional_dtype, bf16.bf16_same_run) == (1.50, "bf16", None)
    assert "1.50x the conventional step (" in bf16.text
    for kwargs in (dict(mode="replay", L=8), dict(mode="replay_spec", L=16, T=4)):
        a = route_advice("gdn", state_dtype="fp8", batch=64, **kwargs)
        assert (a.ratio, a.recommendation, a.conventional_dtype) == (None, None, None)
        assert "not measured (measured: " in a.text
    assert (
        "fp16 at L 16, fp8 at L 16 vs fp32); no recommendation"
        in route_advice("gdn", "replay", state_dtype="fp8", L=8, batch=64).text
    )


def test_every_cell_is_against_its_dtypes_conventional_step():
    assert {(m.state_dtype, m.conventional_dtype) for m in MEASUREMENTS} == {
        ("fp32", "fp32"),
        ("bf16", "bf16"),
        ("fp16", "fp16"),
        ("fp8", "fp32"),
    }
    assert all((m.bf16_same_run is not None) == (m.state_dtype == "fp8") for m in MEASUREMENTS)


_JSON_STATES = {"f32": "fp32", "f16": "fp16"}  # the benchmarks' names where they differ


def _printed_rows(path: str, key_cols: tuple, figure_cols: dict) -> dict:
    """The replay rows of a benchmark's printed table (a raw ``.log``, the family in its first
    column): {key: {name: value}}, the key from the columns ``key_cols`` and each named figure
    from its column in ``figure_cols``, as printed."""
    rows = {}
    for line in open(os.path.join(ROOT, path)):
        cols = line.split()
        if cols and cols[0] in ("mamba2", "gdn", "kda") and "replay" in cols:
            key = tuple(_JSON_STATES.get(cols[k], cols[k]) for k in key_cols)
            rows[key] = {name: cols[k] for name, k in figure_cols.items()}
    return rows


def _log_header(path: str) -> list:
    """``# bench NAME | date | GPU | ...``: the first line of a raw benchmark log, split."""
    return [f.strip() for f in open(os.path.join(ROOT, path)).readline().lstrip("# ").split("|")]


def _checkpoint_speed_run(m) -> dict:
    """{(family, state, batch): {vs_fp32_conventional, vs_same_dtype_conventional}} of the
    replay rows of a checkpoint_speed.py run, from its JSON or its printed log."""
    raw = m.source.raw
    if raw.endswith(".log"):
        assert _log_header(raw)[:3] == ["bench checkpoint_speed", m.source.date, m.source.gpu]
        assert "--L" not in m.source.command and m.L == 16  # the benchmark's default L
        # family batch route state us/step spread% "x fp32 conv" "x same conv"
        printed = _printed_rows(raw, (0, 3, 1), {"fp32": 6, "same": 7})
        return {
            (f, st, int(b)): {"vs_fp32_conventional": float(v["fp32"]), "vs_same_dtype_conventional": v["same"]}
            for (f, st, b), v in printed.items()
        }
    with open(os.path.join(ROOT, raw)) as f:
        run = json.load(f)
    assert (run["device"], run["date"], run["L"]) == (m.source.gpu, m.source.date, m.L)
    return {
        (r["family"], _JSON_STATES.get(r["state"], r["state"]), r["batch"]): r for r in run["rows"] if r["route"] == "replay"
    }


def test_checkpoint_speed_cells_are_the_raw_runs_figures():
    """Each cell from a checkpoint_speed.py run is its replay row, rounded as printed: against
    the same dtype's conventional step, or the fp32 one where the cell says so (fp8), and an fp8
    cell's bf16 figure that run's bf16 replay row against the fp32 conventional step."""
    cells = [m for m in MEASUREMENTS if m.source.command.startswith("python benchmarks/checkpoint_speed.py")]
    assert {m.state_dtype for m in cells} == {"fp32", "bf16", "fp16", "fp8"}
    runs = {}
    for m in cells:
        if m.source.raw not in runs:
            runs[m.source.raw] = _checkpoint_speed_run(m)
        row = runs[m.source.raw][m.family, m.state_dtype, m.batch]
        key = (
            "vs_same_dtype_conventional"
            if m.conventional_dtype == m.state_dtype
            else f"vs_{m.conventional_dtype}_conventional"
        )
        assert f"{float(row[key]):.2f}" == f"{m.ratio:.2f}", (m, row[key])
        if m.bf16_same_run is not None:
            bf16 = runs[m.source.raw][m.family, "bf16", m.batch]
            assert f"{bf16['vs_fp32_conventional']:.2f}" == f"{m.bf16_same_run:.2f}", (m, bf16)


def test_session_61_verify_cells_are_the_raw_runs_figures():
    """Each verify cell from session 61's spec_verify.py logs is its replay row's figure against
    T serial steps, rounded as printed; every row of those logs is a cell (none left out)."""
    for state, name in (("fp32", "spec_f32"), ("bf16", "spec_bf16")):
        raw = f"benchmarks/results/2026-12-06-h200-s61-callQ1-{name}.log"
        assert _log_header(raw)[:3] == ["bench spec_verify", "2026-12-06", "NVIDIA H200"]
        # family T batch route us/step GB/s %copy "vs snap" "vs serial" refcheck
        printed = _printed_rows(raw, (0, 1, 2), {"serial": 8})
        cells = {
            (m.family, str(m.T), str(m.batch)): m.ratio
            for m in MEASUREMENTS
            if m.route == VERIFY and m.state_dtype == state and m.source.raw == raw
        }
        assert set(cells) == set(printed) and len(cells) == (54 if state == "fp32" else 27)
        for key, ratio in cells.items():
            assert f"{float(printed[key]['serial']):.2f}" == f"{ratio:.2f}", (state, key)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        (("mamba1", "replay"), dict(state_dtype="fp32", L=16, batch=1), "family is 'mamba1'; expected a registered SSM"),
        (("gdn", "conventional"), dict(state_dtype="fp32", L=16, batch=1), "mode is 'conventional'; expected one of replay"),
        (("gdn", "replay"), dict(state_dtype="int8", L=16, batch=1), "state_dtype is 'int8'; expected one of fp32"),
        (
            ("gdn", "replay"),
            dict(state_dtype="fp32", L=16, batch=1, record_dtype="fp8"),
            "route_advice: record_dtype is 'fp8'; expected one of fp32, bf16, fp16, fp64",
        ),
        (
            ("gdn", "replay"),
            dict(state_dtype="fp32", L=16, batch=1, record_dtype=torch.float32),
            "route_advice: record_dtype is torch.float32; expected one of fp32, bf16, fp16, fp64",
        ),
        (("gdn", "replay"), dict(state_dtype="fp32", L=0, batch=1), "L is 0; expected a positive int"),
        (("gdn", "replay"), dict(state_dtype="fp32", L=16, batch=0), "batch is 0; expected a positive int"),
        (("gdn", "replay_spec"), dict(state_dtype="fp32", L=16, batch=1), "T is None; expected a positive int"),
        (("gdn", "replay"), dict(state_dtype="fp32", L=16, batch=1, T=4), "T is 4 in mode replay; expected None"),
    ],
)
def test_route_advice_rejects(args, kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        route_advice(*args, **kwargs)


def test_model_advice_one_per_layer_geometry():
    model = load_model("kimi-linear-48b")
    advice = model_advice(model, "replay", state_dtype="bf16", L=16, batch=16)
    assert [a.family for a in advice] == ["kda"] and advice[0].ratio == 1.06
    (fp32,) = model_advice(model, "replay", state_dtype="bf16", L=16, batch=16, record_dtype="fp32")
    assert (fp32.record_dtype, fp32.ratio) == ("fp32", None) and "fp32 records, batch 16: not measured" in fp32.text
    assert geometry_dims(DeltaRuleGeometry(32, 32, 128, 128, d_conv=4)) == KIMI
    assert geometry_dims(object()) is None


def test_warn_if_slower_warns_once_and_only_when_slower():
    slow = route_advice("kda", "replay", state_dtype="bf16", L=16, batch=1, geometry=KIMI)
    fast = route_advice("kda", "replay", state_dtype="bf16", L=16, batch=256, geometry=KIMI)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warn_if_slower([slow, fast, slow], "host") is True
        assert warn_if_slower([fast], "host") is False
    assert len(caught) == 1 and caught[0].category is SlowRouteWarning
    message = str(caught[0].message)
    assert message.startswith("host: ReplaySSM runs in a setting measured slower") and "route is unchanged" in message
    assert message.count("0.97x") == 2 and "1.37x" not in message


def test_every_cell_was_timed_with_bf16_activations_and_records():
    """Each source's method in docs/benchmarks.md: bf16 activations and records."""
    assert {(m.record_dtype, m.activation_dtype) for m in MEASUREMENTS} == {("bf16", "bf16")}


@pytest.mark.parametrize("records", ["fp32", "fp16", "fp64"])
@pytest.mark.parametrize(
    "family, kwargs, what",
    [
        ("gdn", dict(mode="replay", state_dtype="fp32", L=16, batch=256),
         "fp32 at L 8/16/32, bf16 at L 8/16/32, fp16 at L 16, fp8 at L 16 vs fp32"),
        ("kda", dict(mode="replay", state_dtype="bf16", L=16, batch=16),
         "fp32 at L 8/16/32, bf16 at L 8/16/32, fp16 at L 16, fp8 at L 16 vs fp32"),
        ("mamba2", dict(mode="replay_spec", state_dtype="fp32", L=16, T=4, batch=64),
         "fp32 at B 16, T 2/4/8, bf16 at B 16, T 2/4/8"),
    ],
)  # fmt: skip
def test_other_records_than_the_timed_ones_are_not_measured(family, kwargs, what, records):
    """Every cell was timed with bf16 records: a setting measured with them (a figure at the
    default) gets no figure with other records, and the text names the records measured."""
    assert route_advice(family, **kwargs).ratio is not None
    assert route_advice(family, **kwargs, record_dtype="bf16") == route_advice(family, **kwargs)
    a = route_advice(family, **kwargs, record_dtype=records)
    assert (a.ratio, a.recommendation, a.source, a.measured_batch, a.slower) == (None, None, None, None, False)
    assert a.record_dtype == records and a.to_dict()["record_dtype"] == records
    assert f"checkpoint, {records} records, batch {kwargs['batch']}: not measured" in a.text
    assert a.text.endswith(f"(measured with bf16 records only: {what}); no recommendation")


def test_a_cell_matches_only_with_its_own_records(monkeypatch):
    """Two cells of one setting that differ in their records alone: each record dtype finds its
    own, and the other's text names both record dtypes measured."""
    import dataclasses

    import trtllm_replayssm.route_advice as advice

    fp32_records = [
        dataclasses.replace(m, record_dtype="fp32", activation_dtype="bf16", ratio=0.5)
        for m in MEASUREMENTS
        if (m.family, m.route, m.state_dtype, m.L) == ("gdn", STEP, "fp32", 16)
    ]
    monkeypatch.setattr(advice, "MEASUREMENTS", MEASUREMENTS + tuple(fp32_records))
    kw = dict(state_dtype="fp32", L=16, batch=256, geometry=(16, 64, 128, 128))
    assert route_advice("gdn", "replay", **kw).ratio == 1.76
    fp32 = route_advice("gdn", "replay", record_dtype="fp32", **kw)
    assert (fp32.ratio, fp32.recommendation) == (0.5, "conventional")
    assert fp32.text.startswith("gdn replay step L 16, fp32 checkpoint, fp32 records, batch 256: 0.50x")
    fp16 = route_advice("gdn", "replay", record_dtype="fp16", **kw)
    assert "(measured with bf16 records: fp32 at L 8/16/32, bf16 at L 8/16/32" in fp16.text
    assert "; with fp32 records: fp32 at L 16); no recommendation" in fp16.text
    # fp32 records at L 8: only the fp32 records' cells are listed, as for any other miss
    assert (
        "(measured: fp32 at L 16); no recommendation"
        in route_advice("gdn", "replay", **{**kw, "L": 8}, record_dtype="fp32").text
    )
