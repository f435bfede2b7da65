"""``trtllm-replayssm bench`` and :mod:`trtllm_replayssm.bench` without a GPU.

The timing itself (CUDA graphs, copy bandwidth) needs a GPU. Everything around it runs here: the
benchmark cases under the Triton interpreter with a stand-in timer (their refcheck launches the
real kernels), the bookkeeping with stand-in cases (failed refchecks, cases that do not fit,
whole-model sums), the table, the plot, and the command's GPU path with torch.cuda stood in for:
its arguments, JSON, the files of --out, the exit statuses; and on a CPU, its one-line refusal.
"""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import torch
import triton

from triton_mode import INTERPRET
from trtllm_replayssm import bench, cli
from trtllm_replayssm.cli import main
from trtllm_replayssm.models import load_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Triton 3.9's interpreter rejects a mask the GDN / KDA kernels and the verify kernels build
# (setup.py pins triton < 3.9 for it); the Mamba-2 decode kernels run under any.
TRITON_39_INTERPRETER = INTERPRET and tuple(int(v) for v in triton.__version__.split(".")[:2]) >= (3, 9)
needs_interpreter = pytest.mark.skipif(not INTERPRET, reason="runs the cases on the CPU under TRITON_INTERPRET=1")

TINY_MAMBA2 = ("mamba2", (4, 16, 8, 2))
TINY_GDN = ("gdn", (2, 4, 16, 16))
TINY_KDA = ("kda", (2, 2, 16, 16))


def stepping_timer(calls):
    """A timer that runs ``route`` once on every slot set (the kernels launch, under the
    interpreter) and reports a fixed time: 3 us conventional, 2 us replay."""

    def timer(case, route):
        for s in getattr(case, "slot_sets", None) or case.sets:
            case.step(route, *s) if isinstance(s, tuple) else case.step(route, s)
        calls.append((type(case).__name__, route))
        return (2e-6 if route.startswith("replay") else 3e-6), [1.0, 2.0]

    return timer


def cpu_bench(model, **kw):
    kw = {
        "batches": (1, 3),
        "L": 4,
        "state_dtype": torch.float32,
        "act_dtype": torch.float32,
        "device": "cpu",
        "pool_bytes": 4096,
        "copy_bw": 1e12,
        "progress": False,
        **kw,
    }
    return bench.run_bench(model, **kw)


# --------------------------------------------------------------------------- what is timed


def test_bench_plan_times_each_ssm_layer_group_of_a_preset():
    plan = bench.bench_plan(load_model("nemotron-3-super-120b"), [1, 16])
    assert [(g.kind, len(g.indices), step, b) for g, step, b in plan] == [
        ("mamba2", 40, "decode", 1),
        ("mamba2", 40, "decode", 16),
    ]
    assert bench.case_geometry("mamba2", plan[0][0].geometry) == (128, 64, 128, 8)
    plan = bench.bench_plan(load_model("kimi-linear-48b").for_tp(2), [4], spec_tokens=4)
    assert [(g.kind, len(g.indices), step) for g, step, _ in plan] == [("kda", 20, "decode"), ("kda", 20, "verify")]
    assert bench.case_geometry("kda", plan[0][0].geometry) == (16, 16, 128, 128)


# --------------------------------------------------------------------------- the cases, under the interpreter


@needs_interpreter
def test_run_bench_mamba2_cases_refcheck_and_time_on_cpu():
    calls = []
    model = cli._geometry_model([TINY_MAMBA2, TINY_MAMBA2])  # two layers, one group
    r = cpu_bench(model, timer=stepping_timer(calls))
    assert r["copy_bytes_per_s"] == 1e12
    assert [(row["kind"], row["count"], row["step"], row["batch"], row["status"]) for row in r["rows"]] == [
        ("mamba2", 2, "decode", 1, "ok"),
        ("mamba2", 2, "decode", 3, "ok"),
    ]
    assert calls == [("Mamba2DecodeCase", "decode_step"), ("Mamba2DecodeCase", "replay_step")] * 2
    for row in r["rows"]:
        assert row["refcheck"] < 1e-5
        assert row["speedup"] == pytest.approx(1.5)
        assert row["conventional_samples_ms"] == [1.0, 2.0]
        # Modelled bytes: the conventional step reads and writes every state; replay less.
        state = 4 * 16 * 8 * 4
        assert row["conventional_bytes"] > 2 * state * row["batch"] > row["replay_bytes"]
        assert row["replay_pct_copy"] == pytest.approx(100 * row["replay_bytes"] / 2e-6 / 1e12)
    assert [(t["step"], t["batch"], t["layers"]) for t in r["totals"]] == [("decode", 1, 2), ("decode", 3, 2)]
    assert r["totals"][0]["conventional_s"] == pytest.approx(2 * 3e-6)
    assert r["totals"][0]["speedup"] == pytest.approx(1.5)


@needs_interpreter
@pytest.mark.skipif(TRITON_39_INTERPRETER, reason="Triton 3.9's interpreter rejects the GDN/KDA and verify kernels' masks")
def test_run_bench_every_family_and_the_verify_route_on_cpu():
    calls = []
    model = cli._geometry_model([TINY_MAMBA2, TINY_GDN, TINY_KDA])
    r = cpu_bench(model, batches=(2,), spec_tokens=2, timer=stepping_timer(calls))
    assert [(row["kind"], row["step"], row["status"]) for row in r["rows"]] == [
        (k, s, "ok") for k in ("mamba2", "gdn", "kda") for s in ("decode", "verify")
    ]
    assert {route for _, route in calls} == {"decode_step", "replay_step", "snapshot", "replay"}
    assert all(row["refcheck"] < 1e-5 for row in r["rows"])
    verify = [row for row in r["rows"] if row["step"] == "verify"]
    assert all(1 <= row["accepted_mean"] <= 2 for row in verify)
    # Verify: snapshot writes T states, replay one record per token: fewer bytes.
    assert all(row["replay_bytes"] < row["conventional_bytes"] for row in verify)
    assert [(t["step"], t["layers"]) for t in r["totals"]] == [("decode", 3), ("verify", 3)]


# --------------------------------------------------------------------------- bookkeeping, stand-in cases


class _StandInCase:
    """What run_bench needs of a case: refcheck, bytes_per_step, and a timer's time."""

    def __init__(self, err=0.0, seconds=None, mean_accepted=None):
        self.err, self.seconds, self.mean_accepted = err, seconds or {}, mean_accepted

    def refcheck(self):
        return self.err

    def bytes_per_step(self, route):
        return 1e6

    def time(self, route):
        return self.seconds[route], [self.seconds[route] * 1e3]


def test_run_bench_reports_failed_refchecks_and_cases_that_do_not_fit(monkeypatch):
    """A batch with a failed refcheck or an error is reported, not timed, and left out of the
    whole-model sums; the other batches are summed over the layer groups (count x time)."""

    def mamba2_case(geom, batch, L, *a):
        if batch == 2:
            return _StandInCase(err=0.5)
        return _StandInCase(seconds={"decode_step": 4e-6, "replay_step": 2e-6})

    def delta_case(family, geom, batch, L, *a):
        if batch == 3:
            raise ValueError("GDNReplayCache.allocate: head_v_dim 7\nsecond line")
        return _StandInCase(seconds={"decode_step": 6e-6, "replay_step": 3e-6})

    # run_bench looks the cases up in its own module.
    monkeypatch.setattr(bench.command, "Mamba2DecodeCase", mamba2_case)
    monkeypatch.setattr(bench.command, "GatedDeltaDecodeCase", delta_case)
    monkeypatch.setattr(
        bench.command,
        "make_verify_case",
        lambda family, *a, **kw: _StandInCase(seconds={"snapshot": 8e-6, "replay": 2e-6}, mean_accepted=1.75),
    )
    model = cli._geometry_model([TINY_MAMBA2, TINY_MAMBA2, TINY_GDN])
    r = bench.run_bench(model, batches=(1, 2, 3), spec_tokens=2, L=4, copy_bw=1e12, device="cpu", progress=False)
    status = {(row["kind"], row["step"], row["batch"]): row["status"] for row in r["rows"]}
    assert status[("mamba2", "decode", 2)] == "refcheck failed: 5.00e-01 > 0.05"
    assert status[("gdn", "decode", 3)] == "ValueError: GDNReplayCache.allocate: head_v_dim 7"
    assert sum(s == "ok" for s in status.values()) == 12 - 2
    failed = next(row for row in r["rows"] if row["status"].startswith("refcheck"))
    assert "conventional_s" not in failed and "speedup" not in failed
    assert [(t["step"], t["batch"]) for t in r["totals"]] == [("decode", 1), ("verify", 1), ("verify", 2), ("verify", 3)]
    decode1 = r["totals"][0]
    assert decode1["layers"] == 3
    assert decode1["conventional_s"] == pytest.approx(2 * 4e-6 + 6e-6)
    assert decode1["replay_s"] == pytest.approx(2 * 2e-6 + 3e-6)
    assert r["totals"][1]["speedup"] == pytest.approx(4.0)
    assert all(row["accepted_mean"] == 1.75 for row in r["rows"] if row["step"] == "verify")


# --------------------------------------------------------------------------- table and plot


def _result(rows, totals=()):
    return {"rows": rows, "totals": list(totals), "copy_bytes_per_s": 4.1e12}


def _row(kind="mamba2", count=40, step="decode", batch=1, conv=5e-6, rep=4e-6, **kw):
    return dict(
        kind=kind,
        count=count,
        geometry=[128, 64, 128, 8],
        step=step,
        batch=batch,
        status="ok",
        conventional_s=conv,
        replay_s=rep,
        speedup=conv / rep,
        conventional_pct_copy=91.5,
        replay_pct_copy=70.25,
        refcheck=3e-7,
        **kw,
    )


def test_format_bench_table():
    model = load_model("nemotron-3-super-120b")
    rows = [_row(), _row(batch=256, conv=0.12345, rep=0.06), dict(_row(batch=512), status="refcheck failed: 1.00e-01 > 0.05")]
    totals = [dict(step="decode", batch=1, layers=40, conventional_s=2e-4, replay_s=1.6e-4, speedup=1.25)]
    text = bench.format_bench(
        model,
        _result(rows, totals),
        device_name="NVIDIA H200",
        L=16,
        state_dtype=torch.float32,
        act_dtype=torch.bfloat16,
        spec_tokens=4,
    )
    lines = text.splitlines()
    assert lines[0] == "trtllm-replayssm bench: nemotron-3-super-120b (NemotronH), TP 1, NVIDIA H200, copy 4.10 TB/s"
    assert lines[1] == (
        "  state fp32, activations and records bf16, replay L 16; speculative: window T 4, "
        "history B 16, 0.7 T accepted on average"
    )
    assert lines[2] == "  mamba2 x40: nheads 128, head_dim 64, d_state 128, ngroups 8"
    assert re.search(r"^  mamba2 x40  decode +1 +5\.00 +4\.00 +1\.25x +91\.5 +70\.2 +3\.0e-07$", text, re.M)
    # Large figures keep their columns apart.
    assert re.search(r"^  mamba2 x40  decode +256 +123,450\.00 +60,000\.00 +2\.06x ", text, re.M)
    assert re.search(r"^  mamba2 x40  decode +512  not timed: refcheck failed: 1\.00e-01 > 0\.05$", text, re.M)
    assert "Whole model: all 40 SSM layers, per step" in text
    assert re.search(r"^  decode +1 +0\.200 +0\.160 +1\.25x$", text, re.M)


def test_plot_bench_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    model = cli._geometry_model([TINY_MAMBA2, TINY_GDN])
    rows = [dict(_row(batch=b, step=s), geometry=[4, 16, 8, 2], count=1) for b in (1, 4) for s in ("decode", "verify")]
    rows += [dict(_row(kind="gdn", batch=b), geometry=[2, 4, 16, 16], count=1) for b in (1, 4)]
    totals = [dict(step="decode", batch=b, layers=2, conventional_s=1e-5, replay_s=8e-6, speedup=1.25) for b in (1, 4)]
    path = tmp_path / "b.png"
    bench.plot_bench(model, _result(rows, totals), str(path), device_name="CPU")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- the command


def _bench_exit(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", *argv])
    return exit_info.value.code, capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        pytest.param([], "one of the arguments --model --geometry is required", id="no-model"),
        pytest.param(["--model", "qwen3.5-4b", "--geometry", "mamba2:8,16,16,2"], "not allowed with argument", id="both"),
        pytest.param(["--model", "llama-3"], "'llama-3' is neither a preset nor a file", id="unknown-model"),
        pytest.param(
            ["--geometry", "mamba2:8,16,16"],
            "argument --geometry: expected mamba2:nheads,head_dim,d_state,ngroups "
            "or gdn|kda:k_heads,v_heads,head_k_dim,head_v_dim (positive integers), got 'mamba2:8,16,16'",
            id="geometry-3",
        ),
        pytest.param(["--geometry", "rwkv:1,2,3,4"], "argument --geometry: expected mamba2:", id="geometry-kind"),
        pytest.param(
            ["--geometry", "mamba2:8,16,16,3"], "--geometry mamba2:8,16,16,3: ngroups 3 must divide nheads 8", id="ngroups"
        ),
        pytest.param(["--geometry", "gdn:3,8,16,16"], "k_heads 3 must divide v_heads 8", id="gdn-heads"),
        pytest.param(
            ["--model", "nemotron-3-super-120b", "--tp", "3"], "nheads = 128 is not divisible by tp_size = 3", id="tp3"
        ),
        pytest.param(
            ["--model", "qwen3.5-4b", "--batch", "16", "abc"],
            "argument --batch: expected a positive integer, got 'abc'",
            id="batch",
        ),
        pytest.param(["--model", "qwen3.5-4b", "--L", "65"], "--L 65: expected at most 64", id="L65"),
        pytest.param(["--model", "qwen3.5-4b", "--spec-tokens", "17"], "--spec-tokens 17: expected at most --L 16", id="T>L"),
        pytest.param(["--model", "qwen3.5-4b", "--L", "48", "--spec-tokens", "20"], "L + T at most 64", id="L+T"),
        pytest.param(
            ["--model", "qwen3.5-4b", "--spec-tokens", "4", "--accept", "0.1"],
            "--accept 0.1: expected 1/T (0.25) to 1",
            id="accept",
        ),
        pytest.param(
            ["--model", "qwen3.5-4b", "--state-dtype", "fp8"],
            "argument --state-dtype: expected one of fp32, bf16, fp16, got 'fp8'",
            id="dtype",
        ),
        pytest.param(
            ["--model", "qwen3.5-4b", "--device", "tpu"],
            "argument --device: expected cpu, cuda or cuda:N, got 'tpu'",
            id="device",
        ),
    ],
)
def test_bench_usage_errors_exit_2_before_anything_runs(argv, message, capsys):
    code, err = _bench_exit(argv, capsys)
    assert code == 2 and message in err, err


def test_bench_out_must_be_a_directory_or_a_new_one(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code, err = _bench_exit(["--model", "qwen3.5-4b", "--out", str(tmp_path / "file")], capsys)
    assert code == 2 and "argument --out: " in err and "is a file; expected a directory" in err
    code, err = _bench_exit(["--model", "qwen3.5-4b", "--out", str(tmp_path / "a" / "b")], capsys)
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "a").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal without a GPU")
def test_bench_without_a_gpu_says_so_in_one_line_and_exits_2(capsys):
    assert main(["bench", "--model", "nemotron-3-super-120b"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert captured.err.startswith("trtllm-replayssm bench: needs a CUDA GPU, and torch sees none (torch ")
    assert "'trtllm-replayssm plan' gives the bytes" in captured.err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal without a GPU")
def test_bench_without_a_gpu_from_the_shell():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-m", "trtllm_replayssm", "bench", "--model", "qwen3.5-4b", "--spec-tokens", "4"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("trtllm-replayssm bench: needs a CUDA GPU") and "Traceback" not in proc.stderr


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch.cuda as a GPU machine shows it to the command; run_bench on the CPU with the
    stepping timer (the cases' kernels run under the interpreter)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Stand-in GPU")
    calls, real = [], bench.run_bench
    seen = {}

    def set_device(device):
        # As torch.cuda.set_device: a torch.device needs its index (torch 2.11 raises without).
        if isinstance(device, torch.device) and device.index is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{device}")
        seen["set_device"] = device

    def run_bench(model, **kw):
        seen.update(kw)
        kw.pop("device")
        return real(model, device="cpu", pool_bytes=4096, copy_bw=2e12, progress=False, timer=stepping_timer(calls), **kw)

    monkeypatch.setattr(torch.cuda, "set_device", set_device)

    monkeypatch.setattr(bench, "run_bench", run_bench)
    return seen


@needs_interpreter
def test_bench_command_table_json_and_plot(fake_gpu, tmp_path, capsys):
    out = tmp_path / "results"
    assert (
        main(
            [
                "bench",
                "--geometry",
                "mamba2:4,16,8,2",
                "--batch",
                "1",
                "2",
                "--L",
                "4",
                "--state-dtype",
                "f32",
                "--act-dtype",
                "float32",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    cuda0 = torch.device("cuda", 0)  # the default --device, given the index set_device needs
    assert fake_gpu == dict(
        batches=[1, 2],
        L=4,
        state_dtype=torch.float32,
        act_dtype=torch.float32,
        spec_tokens=None,
        accept=0.7,
        device=cuda0,
        set_device=cuda0,
    )
    text = capsys.readouterr().out
    assert text.startswith("trtllm-replayssm bench: mamba2:4,16,8,2 (geometry), TP 1, Stand-in GPU, copy 2.00 TB/s")
    assert re.search(r"^  mamba2 x1   decode +2 +3\.00 +2\.00 +1\.50x", text, re.M)
    stem = out / "bench-mamba2_4_16_8_2"
    assert f"wrote {stem}.json" in text
    report = json.loads((stem.parent / (stem.name + ".json")).read_text())
    assert report["device"] == "Stand-in GPU" and report["model"]["name"] == "mamba2:4,16,8,2"
    assert report["config"]["state_dtype"] == "fp32" and report["config"]["batches"] == [1, 2]
    assert [r["batch"] for r in report["rows"]] == [1, 2] and len(report["totals"]) == 2
    if importlib.util.find_spec("matplotlib"):
        assert (stem.parent / (stem.name + ".png")).read_bytes()[:4] == b"\x89PNG"


@needs_interpreter
def test_bench_command_json_to_stdout(fake_gpu, capsys):
    assert main(["bench", "--geometry", "mamba2:4,16,8,2", "--batch", "2", "--L", "4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["rows"][0]["status"] == "ok" and d["rows"][0]["speedup"] == pytest.approx(1.5)
    assert d["config"] == {
        "L": 4,
        "state_dtype": "fp32",
        "act_dtype": "bf16",
        "spec_tokens": None,
        "history": None,
        "accept": None,
        "batches": [2],
    }


def test_bench_command_without_matplotlib_writes_the_json_and_says_why(fake_gpu, monkeypatch, tmp_path, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else find_spec(name, *a))
    monkeypatch.setattr(
        bench,
        "run_bench",
        lambda model, **kw: {"rows": [dict(_row(count=1), geometry=[4, 16, 8, 2])], "totals": [], "copy_bytes_per_s": 1e12},
    )
    assert main(["bench", "--geometry", "mamba2:4,16,8,2", "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "matplotlib is not installed, so --out writes the JSON only" in captured.err
    assert sorted(os.listdir(tmp_path)) == ["bench-mamba2_4_16_8_2.json"]


def test_bench_command_exits_1_when_a_case_failed(fake_gpu, monkeypatch, capsys):
    monkeypatch.setattr(
        bench,
        "run_bench",
        lambda model, **kw: {
            "rows": [dict(_row(count=1), status="refcheck failed: 1.00e-01 > 0.05")],
            "totals": [],
            "copy_bytes_per_s": 1e12,
        },
    )
    assert main(["bench", "--geometry", "mamba2:4,16,8,2"]) == 1
    assert "not timed: refcheck failed" in capsys.readouterr().out
