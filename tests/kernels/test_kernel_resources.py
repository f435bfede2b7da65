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

import kernel_resources  # importing compiles nothing
from kernel_resources import GEOMETRIES, ROUTES

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


@pytest.mark.parametrize("L", [8, 16, 32])
@pytest.mark.parametrize("state_bytes", [1, 2, 4], ids=["fp8", "bf16", "fp32"])
def test_cuda_small_kernel_at_batch_1_keeps_two_nano_ctas_resident(state_bytes, L):
    """Nemotron-3-Nano (head_dim 80) at batch 1: two CTAs of 40 rows (320 threads) a head, their
    registers capped for two resident CTAs a multiprocessor without spills, so that a step's 192
    CTAs run in one wave on 132 (uncapped, bf16 takes 102 registers: one CTA, two waves)."""
    from kernel_resources import cuda_step_resources
    from trtllm_replayssm.kernels.nvrtc import REGISTERS_PER_SM

    small_1 = cuda_step_resources(L, state_bytes, (96, 80, 128, 8))[2]
    assert small_1.kernel == "mamba2_replay_small(cuda,small,40,m2,early)", small_1
    assert small_1.spill_stores == 0, small_1
    threads = 8 * 40  # eight a row
    assert -(-small_1.registers // 8) * 8 * threads * 2 <= REGISTERS_PER_SM, small_1  # allocated in eights


@pytest.mark.parametrize("T", [1, 2, 4, 8])
@pytest.mark.parametrize("batch", [16, 256])
@pytest.mark.parametrize("state_bytes", [2, 4], ids=["bf16", "fp32"])
def test_cuda_verify_stays_within_its_register_cap(state_bytes, batch, T):
    """The CUDA Mamba-2 verify at its launch rule (B = 16): the step kernel within the register cap
    of its CTAs a multiprocessor (three bf16 CTAs: 128; two fp32: 204), without spills for fp32
    rows and at most 32 bytes of stack for bf16 ones (24 at T = 4: kernel notes, session 33); the
    coefficient launch without spills."""
    from kernel_resources import cuda_verify_resources

    step, coef = sorted(cuda_verify_resources(batch, T, 16, state_bytes), key=lambda r: r.kernel, reverse=True)
    assert step.kernel.startswith("mamba2_verify_step") and coef.kernel.startswith("mamba2_verify_coefficients")
    assert step.registers <= (128 if state_bytes == 2 else 204), step
    assert step.spill_stores <= (32 if state_bytes == 2 else 0), step
    assert coef.spill_stores == 0 and coef.registers <= 128, coef


def test_sass_line_counts_attribute_each_instruction_to_its_innermost_frame_in_the_file(tmp_path):
    """An instruction goes to the innermost frame in the file of the location comments written
    since the previous instruction; the next instructions keep it; other files' frames and
    predicates do not count; a helper inlined from another file lands on its call site; the
    file is known by its last two path components (a cached kernel names another checkout)."""
    from kernel_resources import sass_line_counts

    kernel = tmp_path / "kernels" / "k.py"
    other = tmp_path / "kernels" / "helpers.py"
    via = "/elsewhere/checkout/sub/../kernels/k.py"  # the same file, compiled in another checkout
    sass = "\n".join([
        "        /*0000*/                   MOV R1, c[0x0][0x28] ;",
        f'\t//## File "{other}", line 5 inlined at "{kernel}", line 12',
        f'\t//## File "{kernel}", line 12 inlined at "{via}", line 40',
        f'\t//## File "{via}", line 40',
        "        /*0010*/                   SHFL.BFLY PT, R2, R3, 0x10, 0x1f ;",
        "        /*0020*/               @!P0 FADD R2, R2, R3 ;",
        f'\t//## File "{kernel}", line 41',
        "        /*0030*/                   SHFL.BFLY PT, R4, R3, 0x8, 0x1f ;",
        f'\t//## File "{other}", line 9',
        '\t//## File "/elsewhere/other_kernels/k.py", line 3',  # another directory: not the file
        "        /*0040*/                   EXIT ;",
    ])  # fmt: skip
    counts = sass_line_counts(sass, str(kernel))
    assert dict(counts[12]) == {"SHFL": 1, "FADD": 1, "all": 2}
    assert dict(counts[41]) == {"SHFL": 1, "all": 1}
    assert dict(counts[None]) == {"MOV": 1, "EXIT": 1, "all": 2}
    assert sum(c["all"] for c in counts.values()) == 5


def test_sass_lines_of_a_compiled_kernel():
    """``--sass-lines`` on a real compile: the kernel's static instructions add up over its lines,
    each line printed with the source text it names."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, os.path.join(ROOT, "benchmarks", "kernel_resources.py"), "--family", "mamba2",
           "--route", "replay_verify", "--batch", "16", "--T", "2", "--sass-lines", "3"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("#   ")]
    head, rows = lines[0], lines[1:]
    assert "_mamba2_replay_verify_kernel:" in head and "(mamba2_verify.py lines)" in head, proc.stdout
    total = int(head.split(":")[1].split()[0])
    counts = [int(row.split()[2]) for row in rows]
    assert len(rows) == 3 and counts == sorted(counts, reverse=True) and 0 < sum(counts) <= total, proc.stdout
    source = open(os.path.join(ROOT, "trtllm_replayssm", "kernels", "mamba2_verify.py")).read().splitlines()
    for row in rows:
        if row.split()[1] != "-":  # instructions of no line of the file
            line, code = int(row.split()[1]), row.split(None, 4)[4]
            assert source[line - 1].strip().startswith(code), row


def test_the_header_says_when_this_triton_is_not_the_devices():
    assert kernel_resources.triton_note(kernel_resources.DEVICE_TRITON) is None
    note = kernel_resources.triton_note("3.8.0")
    assert "Triton 3.8.0 here, 3.6.0 on the H200" in note and "pip install triton==3.6.0" in note
