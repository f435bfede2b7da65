"""scripts/device_check.sh's switches, run on the CPU with a stand-in ``nvidia-smi`` that names the
GPU: BENCH_GPU skips the benchmarks on another GPU (the tests still run), BENCH=delta runs the
delta probe with DELTA_PROBE_ARGS, and ARGS_<benchmark> reaches that benchmark."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(tmp_path, gpu: str, **env) -> tuple[subprocess.CompletedProcess, Path]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    smi = fake / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\necho "name, driver_version"\necho "{gpu}, 580.159.04"\n')
    smi.chmod(0o755)
    out = tmp_path / "out"
    full_env = {
        **os.environ,
        "PATH": os.pathsep.join([str(fake), str(Path(sys.executable).parent), os.environ["PATH"]]),
        "OUT": str(out),
        **env,
    }
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_check.sh")], env=full_env, capture_output=True, text=True, timeout=300
    )
    return done, out


def test_bench_gpu_skips_the_benchmarks_on_another_gpu(tmp_path):
    done, out = run_script(tmp_path, "NVIDIA H100 80GB HBM3", TESTS="none", BENCH="delta", BENCH_GPU="H200")
    assert done.returncode == 0, done.stderr
    assert "benchmarks skipped: the GPU is not an H200" in done.stdout
    assert not list(out.glob("bench_*.log"))


def test_delta_probe_and_benchmark_args_reach_the_benchmarks(tmp_path):
    done, out = run_script(
        tmp_path,
        "NVIDIA H200",
        TESTS="none",
        BENCH="delta kda",
        BENCH_GPU="H200",
        DELTA_PROBE_ARGS="--help",
        ARGS_kda="--help",
    )
    assert done.returncode == 0, done.stderr
    assert "usage: delta_cuda_probe.py" in (out / "bench_delta.log").read_text()
    assert "usage: gated_delta_decode.py" in (out / "bench_kda.log").read_text()


def test_unknown_benchmark_fails(tmp_path):
    done, _ = run_script(tmp_path, "NVIDIA H200", TESTS="none", BENCH="nonesuch")
    assert done.returncode == 1
    assert "unknown benchmark nonesuch" in done.stdout
