"""benchmarks/mamba2_cuda_trace.py's instrumented copy of the CUDA step (CPU: NVRTC to PTX): every
anchor still matches the kernel once, the copy compiles for both forms with the trace parameter
last, and a kernel edit that moves an anchor is named, not silently untraced."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"))

import mamba2_cuda_trace as trace  # noqa: E402
from trtllm_replayssm.kernels import mamba2_replay_cuda as mc  # noqa: E402
from trtllm_replayssm.kernels.nvrtc import compile_program, cuda_source  # noqa: E402

FLAGS = dict(HAS_D=1, D_PER_DIM=0, HAS_Z=0, HAS_DT_BIAS=1, DT_SOFTPLUS=1, DT_CODE=1, DTB_CODE=0, D_CODE=0)


@pytest.mark.parametrize("fused", [False, True], ids=["two-launches", "fused"])
def test_traced_copy_compiles_with_the_trace_parameter_last(tmp_path, fused):
    path = trace.write_traced_source(str(tmp_path))
    cfg = mc.CudaStepConfig(stages=2, min_ctas=3, pdl=not fused, fused=fused)
    ptx = compile_program(path, "sm_90", mc.step_defines(128, 8, 64, 128, 16, cfg, FLAGS), "ptx").decode()
    assert ptx.count("%globaltimer") >= 8
    original = compile_program(mc.SOURCE, "sm_90", mc.step_defines(128, 8, 64, 128, 16, cfg, FLAGS), "ptx").decode()
    for entry in ("mamba2_replay_step", "mamba2_replay_coefficients"):
        assert _params(ptx, entry) == _params(original, entry) + 1, entry


def _params(ptx: str, entry: str) -> int:
    return ptx.split(f".entry {entry}(")[1].split(")")[0].count(".param")


def test_a_moved_anchor_is_named():
    text = cuda_source(mc.SOURCE).replace("    mbar_wait(full, (i / STAGES) & 1);\n", "")
    with pytest.raises(ValueError, match="mbar_wait\\(full.*found 0 times"):
        trace.traced_source(text)
