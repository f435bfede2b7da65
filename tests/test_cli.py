"""trtllm-replayssm CLI: the layer demo's figures, ``plan``, extension subcommands,
``python -m trtllm_replayssm`` and ``--help``."""
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from trtllm_replayssm import cli
from trtllm_replayssm.cli import main
from trtllm_replayssm.demo import CPU_GEOMETRY, run_mamba2_demo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_run_mamba2_demo_figures_f32():
    nheads, head_dim, d_state, ngroups = CPU_GEOMETRY
    fig = run_mamba2_demo(nheads=nheads, head_dim=head_dim, d_state=d_state, ngroups=ngroups,
                          L=4, batch=4, steps=40, device="cpu", progress=False)
    assert fig["rel_err"] < 1e-5, fig
    assert fig["warmup_steps"] == 0 + 1 + 2 + 3
    # Cursors spread over all of [0, 4): each row flushes once every 4 steps.
    assert fig["flushes"] == 40 * 4 // 4
    assert fig["replay_written"] < fig["conventional_written"]
    assert fig["conventional_written"] == fig["state_bytes"] == nheads * head_dim * d_state * 4
    # With the cursors spread evenly, the measured writes are the model's figures exactly.
    assert fig["replay_written"] == pytest.approx(fig["model_replay_written"])
    assert fig["conventional_written"] == pytest.approx(fig["model_conventional_written"])


def test_run_mamba2_demo_rejects_zero_steps():
    with pytest.raises(ValueError, match="steps"):
        run_mamba2_demo(nheads=2, head_dim=4, d_state=4, ngroups=1, steps=0, progress=False)


def test_main_module_layer_demo_runs():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "trtllm_replayssm", "layer-demo", "--steps", "20",
                           "--L", "4"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "max relative error" in proc.stdout
    assert "flushes" in proc.stdout


@pytest.mark.parametrize("argv", [["--help"], ["layer-demo", "--help"]], ids=["top", "layer-demo"])
def test_main_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trtllm-replayssm")
    assert "layer-demo" in out


def test_main_runs_subcommands_of_installed_extensions(monkeypatch, capsys):
    """An entry point of group trtllm_replayssm.cli adds a subcommand; the core names none."""
    def add_hello(subparsers):
        p = subparsers.add_parser("hello", help="an extension's subcommand")
        p.add_argument("--name", default="world")
        p.set_defaults(func=lambda args: print(f"hello {args.name}") or 0)

    class EntryPoint:
        name = "hello"

        @staticmethod
        def load():
            return add_hello

    def entry_points(group):
        assert group == cli.EXTENSION_GROUP == "trtllm_replayssm.cli"
        return [EntryPoint()]

    monkeypatch.setattr(cli.importlib.metadata, "entry_points", entry_points)
    assert main(["hello", "--name", "ReplaySSM"]) == 0
    assert capsys.readouterr().out == "hello ReplaySSM\n"


@pytest.mark.parametrize("argv, message", [
    pytest.param(["layer-demo", "--nheads", "8", "--ngroups", "3"], "must divide", id="ngroups"),
    pytest.param(["layer-demo", "--L", "65"], "at most 64", id="L65"),
    pytest.param(["layer-demo", "--steps", "0"], "not a positive integer", id="steps0"),
    pytest.param(["layer-demo", "--state-dtype", "f64"], "invalid choice", id="dtype"),
    pytest.param([], "required", id="no-subcommand"),
])
def test_main_usage_error_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_main_layer_demo_cuda_unavailable_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["layer-demo", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "CUDA is not available" in capsys.readouterr().err


# --------------------------------------------------------------------------- plan

def _plan_json(argv, capsys):
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_json_nemotron_super_figures(capsys):
    d = _plan_json(["--model", "nemotron-3-super-120b", "--kv-dtype", "fp8"], capsys)
    assert d["model"]["layer_counts"] == {"mamba2": 40, "moe": 40, "attention": 8}
    assert d["model"]["ssm_per_attention"] == 5.0
    layer = d["ssm_layers"][0]["bytes_per_sequence"]
    assert layer["conventional"]["state"] == 4 * 2**20
    assert layer["conventional_spec"]["state"] == 5 * 4 * 2**20  # 1 + T snapshots, T = 4
    assert d["attention_layers"][0]["kv_bytes_per_token"] == 512
    assert d["kv_bytes_per_token"] == 8 * 512
    modes = d["modes"]
    assert modes["conventional"]["traffic_per_step"]["state_read"] == 40 * 4 * 2**20
    assert modes["replay_spec"]["max_concurrency"] > 3 * modes["conventional_spec"]["max_concurrency"]
    assert d["budget"]["cache_bytes"] == int(141 * 2**30 * 0.9)


def test_plan_options_reach_the_planner(capsys):
    d = _plan_json(["--model", "qwen3.5-122b-a10b", "--tp", "4", "--gpu-mem", "80GB",
                    "--free-fraction", "0.5", "--weights-gib", "40", "--max-seq-len", "1024",
                    "--buffer-len", "8", "--spec-tokens", "2", "--accepted", "1.5",
                    "--state-dtype", "bf16", "--record-dtype", "fp32", "--conv-dtype", "fp16",
                    "--padding-slots", "0"], capsys)
    assert d["model"]["tp_size"] == 4
    assert d["ssm_layers"][0]["geometry"]["v_heads"] == 16
    assert d["config"] == {"buffer_len": 8, "spec_tokens": 2, "accepted": 1.5,
                           "state_dtype": "bf16", "record_dtype": "fp32", "conv_dtype": "fp16",
                           "kv_dtype": "bf16"}
    assert d["budget"]["gpu_mem_bytes"] == 80 * 10**9
    assert d["budget"]["weights_per_rank"] == 10 * 2**30
    assert d["budget"]["cache_bytes"] == int((80 * 10**9 - 10 * 2**30) * 0.5)
    # 12 attention layers, K and V of 1 KV head per rank (2 / 4, replicated), bf16.
    assert d["modes"]["replay"]["kv_bytes_per_sequence"] == 1024 * 12 * 2 * 1 * 256 * 2
    assert d["ssm_layers"][0]["bytes_per_sequence"]["replay"]["state"] == 16 * 128 * 128 * 2


def test_plan_reads_a_config_file(tmp_path, capsys):
    from trtllm_replayssm.models import PRESETS
    path = tmp_path / "config.json"
    path.write_text(json.dumps(PRESETS["kimi-linear-48b"]))
    from_file = _plan_json(["--model", str(path)], capsys)
    preset = _plan_json(["--model", "kimi-linear-48b"], capsys)
    assert from_file["modes"] == preset["modes"]


def test_plan_help(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trtllm-replayssm plan") and "--kv-dtype" in out


def test_plan_table(capsys):
    assert main(["plan", "--model", "nemotron-3-nano-4b"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trtllm-replayssm plan: nemotron-3-nano-4b (NemotronH), TP 1")
    for label in ("conventional spec", "replay spec", "max seqs", "= KV tokens", "mamba2 x21"):
        assert label in out


def test_main_module_plan_runs():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "trtllm_replayssm", "plan", "--model",
                           "qwen3.5-4b", "--json"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["model"]["family"] == "Qwen3-Next/Qwen3.5"


@pytest.mark.parametrize("argv, message", [
    pytest.param(["--model", "nemotron-4"], "neither a preset nor a file; expected a preset \\(nemotron-3-nano-4b", id="unknown-preset"),
    pytest.param(["--model", "nemotron-3-super-120b", "--tp", "3"], "nheads = 128 is not divisible by tp_size = 3", id="tp3"),
    pytest.param(["--model", "qwen3.5-4b", "--gpu-mem", "12XB"], "is not a size", id="gpu-mem"),
    pytest.param(["--model", "qwen3.5-4b", "--spec-tokens", "32"], "expected B >= T", id="B<T"),
    pytest.param(["--model", "qwen3.5-4b", "--weights-gib", "200"], "leave nothing", id="weights"),
    pytest.param(["--model", "qwen3.5-4b", "--kv-dtype", "int4"], "invalid choice", id="kv-dtype"),
    pytest.param([], "--model", id="no-model"),
])
def test_plan_usage_error_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", *argv])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_plan_malformed_config_exits_2(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--model", str(path)])
    assert exit_info.value.code == 2
    assert "expected one of: NemotronH" in capsys.readouterr().err
