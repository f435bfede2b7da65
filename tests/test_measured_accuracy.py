"""``trtllm_replayssm.measured_accuracy``: every cell is the raw run's figure and the docs'
table's, every preset is covered, nothing is interpolated; and ``plan`` shows the cells."""

import pathlib
import re

import pytest
import torch

from trtllm_replayssm.measured_accuracy import ACCURACY, STUDY_LS, accuracy, measured_settings
from trtllm_replayssm.models import PRESETS
from trtllm_replayssm.models import load_model
from trtllm_replayssm.planner import PlanConfig, format_plan, plan

ROOT = pathlib.Path(__file__).resolve().parents[1]


_ROW = re.compile(r"(\S+)\s+(conventional|replay) (fp32|bf16|fp16|fp8)(-sr)?( \(sim\))?(?: L(\d+))?\s+4096\s+(\S+)\s+\S+$")


def _raw_rows(path: pathlib.Path) -> dict:
    """(path, dtype, L) -> (output error, simulated), from the first table of a precision.py log
    (L None: conventional; dtype with -sr: stochastic rounding); the model of every row too."""
    rows = {}
    for line in path.read_text().splitlines():
        m = _ROW.match(line)
        if m:
            model, kind, dtype, sr, sim, L, error = m.groups()
            rows[kind, dtype + (sr or ""), int(L) if L else None] = (float(error), bool(sim))
            rows.setdefault("models", set()).add(model)
    return rows


def _option(command: str, name: str) -> list:
    """The values of ``--name`` in ``command``."""
    words = command.split()
    start = words.index(f"--{name}") + 1
    end = next((i for i in range(start, len(words)) if words[i].startswith("--")), len(words))
    return words[start:end]


def _tables(block: str) -> list:
    """The markdown tables of ``block``, each a list of rows, a row a dict column -> text."""
    tables, header = [], None
    for line in block.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            tables.append([])
        elif not set(line.strip()) <= set("|-"):
            tables[-1].append(dict(zip(header, cells)))
    return tables


def _doc_figures(cell) -> tuple:
    """The conventional figures and the replay figures at ``cell.L`` that the tables of the cell's
    paragraph print for its layer and dtype: a "conventional / replay" pair where a row is one L
    (a table without an L column is at L = 16), a replay figure per L where it lists several."""
    section = _doc_section(cell.source.doc, cell.source.section)
    start = section.index(f"**{cell.source.table}**")
    end = section.find("\n**", start + 1)
    conventional, replay = set(), set()
    for table in _tables(section[start : end if end >= 0 else None]):
        for row in table:
            if row["layer"] != _LAYERS[cell.model] or cell.state_dtype not in row:
                continue
            Ls = [int(L) for L in row.get("L", "16").split(" / ")]
            value = row[cell.state_dtype]
            if len(Ls) == 1:
                conv, rep = value.split(" / ")
                conventional.add(conv)
                if Ls == [cell.L]:
                    replay.add(rep)
            else:
                every = value.removesuffix(" at every L")
                per_L = [every] * len(Ls) if every != value else value.split(" / ")
                replay.add(dict(zip(Ls, per_L))[cell.L])
    return conventional, replay


def _doc_section(doc: str, section: str) -> str:
    text = (ROOT / doc).read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


@pytest.mark.parametrize("cell", ACCURACY, ids=lambda c: f"{c.model}-{c.state_dtype}-L{c.L}-{c.record_dtype}")
def test_every_cell_is_the_raw_runs_figure_and_in_the_docs_table(cell):
    raw = ROOT / cell.source.raw
    assert raw.is_file(), raw
    rows = _raw_rows(raw)
    text = raw.read_text()
    # the run the cell cites: its command heads the log where the log has one (session 32), and
    # its model, dtypes and L are the log's rows
    if text.startswith("# "):
        assert text.startswith(f"# {cell.source.command} ("), raw
    command = cell.source.command
    assert rows.pop("models") == set(_option(command, "models")) == {cell.model}
    assert {dtype for _, dtype, _ in rows} == set(_option(command, "dtypes"))
    assert {L for _, _, L in rows if L is not None} == set(map(int, _option(command, "L")))
    records = _option(command, "record-dtype") if "--record-dtype" in command else ["bf16"]  # precision.py's default
    assert records == [cell.record_dtype] and cell.source.date in cell.source.raw
    assert rows["conventional", cell.state_dtype, None] == (cell.conventional, cell.conventional_simulated)
    assert rows["replay", cell.state_dtype, cell.L] == (cell.replay, False)
    assert rows["conventional", "fp32", None] == (cell.fp32_conventional, False)
    conventional, replay = _doc_figures(cell)
    assert conventional == {f"{cell.conventional:.2e}"}, conventional
    assert replay == {f"{cell.replay:.2e}"}, replay


_LAYERS = {
    "nemotron-3-nano-4b": "Nemotron-3-Nano Mamba-2",
    "nemotron-3-super-120b": "Nemotron-3-Super Mamba-2",
    "qwen3.5-4b": "Qwen3.5-4B GDN",
    "qwen3.5-122b-a10b": "Qwen3.5-122B GDN",
    "kimi-linear-48b": "Kimi Linear KDA",
}


def test_every_preset_has_every_checkpoint_dtype_at_every_L():
    measured = {(c.model, c.state_dtype, c.L, c.record_dtype) for c in ACCURACY}
    bf16_records = {(m, d, L, "bf16") for m in PRESETS for d in ("fp32", "bf16", "fp16", "fp8") for L in STUDY_LS}
    delta_rule = [m for m in PRESETS if load_model(m).ssm_layers[0].kind != "mamba2"]
    fp32_records = {(m, d, L, "fp32") for m in delta_rule for d in ("fp32", "bf16") for L in (16, 64)}
    assert measured == bf16_records | fp32_records
    assert len(ACCURACY) == len(measured)  # one cell a setting


def test_other_settings_are_not_measured():
    assert accuracy("nemotron-3-super-120b", "bf16", L=16, record_dtype="bf16").replay == 4.92e-03
    assert accuracy("qwen3.5-4b", "bf16", L=32, record_dtype="bf16").replay == 6.68e-03
    assert accuracy("qwen3.5-122b-a10b", "bf16", L=64, record_dtype="fp32").replay == 3.85e-03
    assert accuracy("nemotron-3-super-120b", "bf16", L=12, record_dtype="bf16") is None
    assert accuracy("nemotron-3-super-120b", "bf16", L=16, record_dtype="fp32") is None
    assert accuracy("qwen3.5-122b-a10b", "bf16", L=32, record_dtype="fp32") is None
    assert accuracy("qwen3.5-122b-a10b", "fp16", L=64, record_dtype="fp32") is None
    assert accuracy("my-model", "bf16", L=16, record_dtype="bf16") is None
    assert accuracy("nemotron-3-super-120b", "fp64", L=16, record_dtype="bf16") is None
    assert accuracy("qwen3.5-4b", "fp8", L=16, record_dtype="fp32") is None
    assert accuracy("nemotron-3-super-120b", "fp8-sr", L=16, record_dtype="bf16") is None


def test_fp8_cells_come_from_the_2026_12_05_runs_their_conventional_path_simulated():
    """GDN/KDA from session 37 (fp8 on the CUDA steps); Mamba-2 from session 38, whose rerun
    followed the Triton fp8 flush fix (session 37's Nano L 64 replay was 7.79e-02, not 6.48e-02)."""
    nano = accuracy("nemotron-3-nano-4b", "fp8", L=64, record_dtype="bf16")
    assert (nano.conventional, nano.replay, nano.fp32_conventional) == (1.13e-01, 6.48e-02, 3.78e-03)
    assert nano.source.raw == "benchmarks/results/2026-12-05-h200-s38-precision_fp8_nemotron-3-nano-4b.log"
    assert nano.source.command.endswith("--dtypes fp32 fp8 fp8-sr --markdown")
    kimi = accuracy("kimi-linear-48b", "fp8", L=16, record_dtype="bf16")
    assert (kimi.conventional, kimi.replay) == (1.80e-01, 4.58e-02)
    assert kimi.source.raw == "benchmarks/results/2026-12-05-h200-s37-precision_fp8cuda_kimi-linear-48b.log"
    assert kimi.source.table == "GPU run at 4,096 steps, every checkpoint dtype" and kimi.source.date == "2026-12-05"
    assert all(c.conventional_simulated == (c.state_dtype == "fp8") for c in ACCURACY)
    assert kimi.text() == (
        "fp8: conventional 1.80e-01 (simulated: no kernel keeps an fp8 state), replay 4.58e-02 "
        "(12.69x the fp32 conventional path's)"
    )


def test_plan_shows_the_measured_output_error_of_each_checkpoint_dtype():
    p = plan(load_model("qwen3.5-4b"), gpu_mem_bytes=141 << 30)
    text = format_plan(p)
    assert "output error after 4,096 decode steps at L 16, records bf16" in text
    assert "bf16: conventional 2.02e-02, replay 7.57e-03 (2.11x the fp32 conventional path's)" in text
    assert (
        "    fp8: conventional 3.12e-01 (simulated: no kernel keeps an fp8 state), replay 7.79e-02 "
        '(21.76x the fp32 conventional path\'s) (H200 2026-12-05, docs/benchmarks.md "Accuracy")'
    ) in text.splitlines()
    dtypes = {d["dtype"]: d["output_error"] for d in p.to_dict()["checkpoint_dtypes"]}
    assert dtypes["fp16"]["replay"] == 5.91e-03 and dtypes["fp16"]["source"]["raw"].endswith("s32_qwen3.5-4b.log")
    assert dtypes["fp8"]["conventional_simulated"] and not dtypes["fp16"]["conventional_simulated"]
    assert dtypes["fp8"]["source"]["raw"].endswith("s37-precision_fp8cuda_qwen3.5-4b.log")
    longer = format_plan(plan(load_model("qwen3.5-4b"), config=PlanConfig(buffer_len=32), gpu_mem_bytes=141 << 30))
    assert "output error after 4,096 decode steps at L 32" in longer
    assert "bf16: conventional 2.02e-02, replay 6.68e-03 (1.87x the fp32 conventional path's)" in longer
    config = PlanConfig(buffer_len=64, record_dtype=torch.float32)
    wide = format_plan(plan(load_model("qwen3.5-122b-a10b"), config=config, gpu_mem_bytes=141 << 30))
    assert "at L 64, records fp32" in wide
    assert "bf16: conventional 1.46e-02, replay 3.85e-03 (1.01x the fp32 conventional path's)" in wide
    assert "    fp8: " not in wide  # fp8 ran with bf16 records only
    other = plan(load_model("qwen3.5-4b"), config=PlanConfig(buffer_len=12), gpu_mem_bytes=141 << 30)
    assert all(cp.accuracy is None for cp in other.checkpoints)
    assert "output error: not measured for qwen3.5-4b at L 12" in format_plan(other)
    assert f"(measured: the presets' first SSM layer, {measured_settings()})" in format_plan(other)


def test_measured_settings_name_what_the_cells_cover():
    assert measured_settings() == (
        "bf16 records at L 8/16/32/64; fp32 records at L 16/64 (kimi-linear-48b, qwen3.5-122b-a10b, qwen3.5-4b)"
    )
