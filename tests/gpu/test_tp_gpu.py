"""Tensor parallelism on 2 GPUs with NCCL: ``mpirun -n 2 examples/tp_decode.py --device cuda
--check`` (torchrun where no mpirun is installed). The Triton kernels decode every rank's shard;
the outputs over all steps equal the whole stack's on one GPU, each rank's caches and conv
states equal its shard of the whole ones, and each rank's pool holds the planner's bytes.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1)."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.gpu

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "tp_decode.py")
JSON_TAG = "TP_DECODE_JSON "


def _launcher(n: int) -> list:
    here = os.path.join(os.path.dirname(sys.executable), "mpirun")
    mpirun = here if os.access(here, os.X_OK) else shutil.which("mpirun")
    if importlib.util.find_spec("mpi4py") is None:
        mpirun = None
    if mpirun:
        return [mpirun, "-n", str(n), sys.executable]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(n)]


def _run(*args: str) -> dict:
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs; {torch.cuda.device_count()} visible")
    # Open MPI refuses root without the two OMPI_* variables (MPICH ignores them).
    env = {
        **os.environ,
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])),
    }
    env.pop("TRITON_INTERPRET", None)
    cmd = _launcher(2) + [EXAMPLE, "--device", "cuda", "--check", "--json", *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    print(" ".join(cmd))
    print(proc.stdout)
    lines = [l for l in proc.stdout.splitlines() if l.startswith(JSON_TAG)]
    assert lines, f"no report (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-6000:]}"
    report = json.loads(lines[0][len(JSON_TAG) :])
    assert report["tp"] == 2 and report["device"].startswith("cuda")
    assert proc.returncode == 0 and report["passed"], proc.stdout
    return report


CASES = [
    # Mixed stack: Mamba-2 with groups split (ngroups 4, 2) and replicated (ngroups 1), GDN, KDA.
    pytest.param(["--dtype", "fp32", "--steps", "48", "--L", "4"], id="tiny-mixed-fp32-L4"),
    pytest.param(["--dtype", "bf16", "--state-dtype", "fp32", "--steps", "48", "--L", "8"], id="tiny-mixed-bf16-L8"),
    # Real SSM geometries, 2 layers each, 40 steps at L 16 (two flushes per row).
    pytest.param(
        ["--model", "nemotron-3-super-120b", "--layers", "2", "--dtype", "fp32", "--steps", "40", "--L", "16", "--batch", "8"],
        id="nemotron-3-super-mamba2-fp32",
    ),
    pytest.param(
        ["--model", "qwen3.5-122b-a10b", "--layers", "2", "--dtype", "fp32", "--steps", "40", "--L", "16", "--batch", "8"],
        id="qwen3.5-122b-gdn-fp32",
    ),
    pytest.param(
        ["--model", "kimi-linear-48b", "--layers", "2", "--dtype", "fp32", "--steps", "40", "--L", "16", "--batch", "8"],
        id="kimi-linear-kda-fp32",
    ),
]


@pytest.mark.parametrize("args", CASES)
def test_tp_decode_two_gpus_nccl_equals_one_gpu(args):
    report = _run(*args)
    for route, e in report["routes"].items():
        assert e["cursors_equal"] and e["pool_bytes"] == e["plan_bytes"], (route, e)
        assert max(e["outputs"], e["caches"], e["conv_states"]) < report["tolerance"], (route, e)
