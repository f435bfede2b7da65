"""The real launch path on CPU: ``mpirun -n 2 python examples/tp_decode.py --check`` (mpi4py finds
the ranks, torch.distributed with gloo sums). Both routes, every family of the tiny stack
(Mamba-2 with groups split and replicated, GDN, KDA): outputs over all steps equal the whole
stack's, each rank's caches and conv states equal its shard of the whole ones, and each rank's
pool holds the bytes the planner gives for TP 2. .ci/run installs mpich and mpi4py."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "tp_decode.py")
JSON_TAG = "TP_DECODE_JSON "


def _mpirun() -> str:
    """mpirun next to this Python (pip's mpich wheel installs it there), else on PATH. Missing:
    a failure in CI (CI=true, .ci/run installs it), a skip elsewhere."""
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    found = here if os.access(here, os.X_OK) else shutil.which("mpirun")
    if importlib.util.find_spec("mpi4py") is None:
        found = None
    if found is None:
        message = "needs mpirun and mpi4py: pip install mpich mpi4py"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (.ci/run installs them)")
        pytest.skip(message)
    return found


def run_tp_decode(n: int, *args: str, timeout: int = 240) -> dict:
    """``mpirun -n n python examples/tp_decode.py --check --json *args``; rank 0's report."""
    # Open MPI refuses root without the two OMPI_* variables (MPICH ignores them).
    env = {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [_mpirun(), "-n", str(n), sys.executable, EXAMPLE, "--check", "--json", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith(JSON_TAG)]
    assert lines, f"no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-4000:]}"
    report = json.loads(lines[0][len(JSON_TAG) :])
    report["returncode"] = proc.returncode
    report["output"] = proc.stdout + "\n--- stderr (tail) ---\n" + proc.stderr[-4000:]
    return report


def test_tp_decode_mpirun_two_cpu_ranks_equals_whole_stack():
    r = run_tp_decode(2, "--steps", "24", "--L", "4", "--dtype", "fp64")
    assert r["tp"] == 2 and r["returncode"] == 0 and r["passed"], r["output"]
    assert set(r["routes"]) == {"replay", "conventional"}
    for route, e in r["routes"].items():
        assert max(e["outputs"], e["caches"], e["conv_states"]) < 1e-12, (route, e)
        assert e["cursors_equal"], route
        assert e["pool_bytes"] == e["plan_bytes"], (route, e)
