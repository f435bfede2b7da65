"""``benchmarks/kernel_resources.py``: offline sm_90a compiles of the launchers (no GPU), so the
register budgets that launch configurations rely on are checked in CI. The compiles run in a
subprocess without TRITON_INTERPRET (under the interpreter nothing is compiled)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from kernel_resources import GEOMETRIES, ROUTES  # importing compiles nothing

FAMILIES = tuple(GEOMETRIES)
CAP = 40

SCRIPT = f"""
import dataclasses, json, sys
sys.path[:0] = [{os.path.join(ROOT, "benchmarks")!r}, {ROOT!r}]
from kernel_resources import kernel_resources
from trtllm_replayssm.kernels.common import LaunchConfig
out = {{"default": [dataclasses.asdict(r) for r in kernel_resources("mamba2", "replay_verify", batch=256, T=4)]}}
for family in {FAMILIES!r}:
    for route in {ROUTES!r}:
        replay = route.startswith("replay")
        # 16 rows: a valid tile for every kernel (the gated delta replay kernels need >= 16)
        cfg = LaunchConfig(16, 1, chunks=2 if replay else 1, num_stages=2 if replay else 1, max_registers={CAP})
        out[family + "/" + route] = [dataclasses.asdict(r) for r in
                                     kernel_resources(family, route, batch=4, T=2, L=4, config=cfg)]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def resources():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_mamba2_verify_default_fits_its_register_cap_without_spills(resources):
    """The verify launch caps pipelined one-warp programs at 128 registers (NOTES: 12 -> 16
    resident warps, measured faster); at T = 4 ptxas must fit it without spilling."""
    (r,) = resources["default"]
    assert r["kernel"] == "_mamba2_replay_verify_kernel"
    assert r["registers"] == 128 and r["spill_stores"] == 0, r


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("route", ROUTES)
def test_every_launcher_passes_max_registers_to_ptxas(resources, family, route):
    """A config's ``max_registers`` reaches the compiler through every launcher (a launcher that
    dropped ``launch_options()`` would compile above the cap: every kernel needs more than 40)."""
    kernels = resources[f"{family}/{route}"]
    assert kernels and all(r["registers"] <= CAP for r in kernels), kernels


@pytest.mark.parametrize("L", [8, 16, 32])
@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "fp32"])
def test_cuda_step_launch_table_compiles_without_local_memory(L, state_bytes):
    """The CUDA Mamba-2 step at the launch table's register cap (128 a thread for three CTAs of
    bf16 stages, 2 CTAs for fp32), its coefficient launch, and the small one-launch kernel at its
    batch-1 (uncapped) and batch-2 configurations (capped at 64 up to L = 16): no local memory
    or stack, so no spills (cuobjdump on NVRTC's cubin)."""
    from kernel_resources import cuda_step_resources

    kernels = cuda_step_resources(L, state_bytes)
    names = [r.kernel.split("(")[0] for r in kernels]
    assert names == ["mamba2_replay_step", "mamba2_replay_coefficients", "mamba2_replay_small", "mamba2_replay_small"]
    assert all(r.spill_stores == 0 for r in kernels), kernels
    step, coef, small_1, small_2 = kernels
    assert step.registers <= (128 if state_bytes == 2 else 170), kernels
    assert coef.registers <= 64, kernels
    assert small_1.registers <= 255 and small_2.registers <= (64 if L <= 16 else 255), kernels
