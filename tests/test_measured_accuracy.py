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


def _raw_errors(path: pathlib.Path) -> dict:
    """(path, dtype, L) -> output error, from a precision.py log's rows (L None: conventional)."""
    rows = {}
    for line in path.read_text().splitlines():
        m = re.match(r"\S+\s+(conventional|replay) (fp32|bf16|fp16)(?: L(\d+))?\s+4096\s+(\S+)\s+\S+$", line)
        if m:
            L = int(m.group(3)) if m.group(3) else None
            rows[m.group(1), m.group(2), L] = float(m.group(4))
    return rows


def _doc_section(doc: str, section: str) -> str:
    text = (ROOT / doc).read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


@pytest.mark.parametrize("cell", ACCURACY, ids=lambda c: f"{c.model}-{c.state_dtype}-L{c.L}")
def test_every_cell_is_the_raw_runs_figure_and_in_the_docs_table(cell):
    raw = ROOT / cell.source.raw
    assert raw.is_file(), raw
    errors = _raw_errors(raw)
    assert raw.read_text().startswith(f"# {cell.source.command} ("), raw  # the run the cell cites
    assert errors["conventional", cell.state_dtype, None] == cell.conventional
    assert errors["replay", cell.state_dtype, cell.L] == cell.replay
    assert errors["conventional", "fp32", None] == cell.fp32_conventional
    section = _doc_section(cell.source.doc, cell.source.section)
    table = section[section.index(f"**{cell.source.table}**") :]
    row = next(line for line in table.splitlines() if line.startswith(f"| {_LAYERS[cell.model]} | {cell.L} |"))
    assert f"{cell.conventional:.2e} / {cell.replay:.2e}" in row, row


_LAYERS = {
    "nemotron-3-nano-4b": "Nemotron-3-Nano Mamba-2",
    "nemotron-3-super-120b": "Nemotron-3-Super Mamba-2",
    "qwen3.5-4b": "Qwen3.5-4B GDN",
    "qwen3.5-122b-a10b": "Qwen3.5-122B GDN",
    "kimi-linear-48b": "Kimi Linear KDA",
}


def test_every_preset_has_every_checkpoint_dtype_at_every_L():
    measured = {(c.model, c.state_dtype, c.L, c.record_dtype) for c in ACCURACY}
    bf16_records = {(m, d, L, "bf16") for m in PRESETS for d in ("fp32", "bf16", "fp16") for L in STUDY_LS}
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


def test_plan_shows_the_measured_output_error_of_each_checkpoint_dtype():
    p = plan(load_model("qwen3.5-4b"), gpu_mem_bytes=141 << 30)
    text = format_plan(p)
    assert "output error after 4,096 decode steps at L 16, records bf16" in text
    assert "bf16: conventional 2.02e-02, replay 7.57e-03 (2.11x the fp32 conventional path's)" in text
    dtypes = {d["dtype"]: d["output_error"] for d in p.to_dict()["checkpoint_dtypes"]}
    assert dtypes["fp16"]["replay"] == 5.91e-03 and dtypes["fp16"]["source"]["raw"].endswith("s32_qwen3.5-4b.log")
    longer = format_plan(plan(load_model("qwen3.5-4b"), config=PlanConfig(buffer_len=32), gpu_mem_bytes=141 << 30))
    assert "output error after 4,096 decode steps at L 32" in longer
    assert "bf16: conventional 2.02e-02, replay 6.68e-03 (1.87x the fp32 conventional path's)" in longer
    config = PlanConfig(buffer_len=64, record_dtype=torch.float32)
    wide = format_plan(plan(load_model("qwen3.5-122b-a10b"), config=config, gpu_mem_bytes=141 << 30))
    assert "at L 64, records fp32" in wide
    assert "bf16: conventional 1.46e-02, replay 3.85e-03 (1.01x the fp32 conventional path's)" in wide
    other = plan(load_model("qwen3.5-4b"), config=PlanConfig(buffer_len=12), gpu_mem_bytes=141 << 30)
    assert all(cp.accuracy is None for cp in other.checkpoints)
    assert "output error: not measured for qwen3.5-4b at L 12" in format_plan(other)
    assert f"(measured: the presets' first SSM layer, {measured_settings()})" in format_plan(other)


def test_measured_settings_name_what_the_cells_cover():
    assert measured_settings() == (
        "bf16 records at L 8/16/32/64; fp32 records at L 16/64 (kimi-linear-48b, qwen3.5-122b-a10b, qwen3.5-4b)"
    )
