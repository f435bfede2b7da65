"""trtllm-replayssm CLI: the demo's figures, ``python -m trtllm_replayssm`` and ``--help``."""
import os
import subprocess
import sys

import pytest
import torch

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


def test_main_module_demo_runs():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "trtllm_replayssm", "demo", "--steps", "20",
                           "--L", "4"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "max relative error" in proc.stdout
    assert "flushes" in proc.stdout


@pytest.mark.parametrize("argv", [["--help"], ["demo", "--help"]], ids=["top", "demo"])
def test_main_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: trtllm-replayssm")
    assert "demo" in out


@pytest.mark.parametrize("argv, message", [
    pytest.param(["demo", "--nheads", "8", "--ngroups", "3"], "must divide", id="ngroups"),
    pytest.param(["demo", "--L", "65"], "at most 64", id="L65"),
    pytest.param(["demo", "--steps", "0"], "not a positive integer", id="steps0"),
    pytest.param(["demo", "--state-dtype", "f64"], "invalid choice", id="dtype"),
    pytest.param([], "required", id="no-subcommand"),
])
def test_main_usage_error_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_main_demo_cuda_unavailable_exits_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--device", "cuda"])
    assert exit_info.value.code == 2
    assert "CUDA is not available" in capsys.readouterr().err
