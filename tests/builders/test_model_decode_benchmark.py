"""``benchmarks/model_decode.py`` on a tiny NemotronH stack (CPU: eager steps): every route passes
its float32 refcheck and is timed, so the script the README's model-level figures come from runs."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_model_decode_tiny_runs_every_route():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(ROOT, "benchmarks", "model_decode.py"),
            "--geometry",
            "tiny",
            "--batch",
            "2",
            "--steps",
            "4",
            "--L",
            "2",
            "4",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "refcheck failed" not in proc.stdout, proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.strip().startswith("2 ")]
    assert [(r[1], r[2]) for r in rows] == [("host", "-"), ("decode_step", "-"), ("replay_step", "2"), ("replay_step", "4")], (
        proc.stdout
    )
    for r in rows[1:]:
        assert float(r[8]) <= 1e-4, r  # refcheck column: float32 logits vs the host's
