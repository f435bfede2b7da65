"""benchmarks/mamba2_cuda_trace.py's instrumented copy of the CUDA step (CPU: NVRTC to PTX): every
anchor still matches the kernel once, the copy compiles with the trace parameter
last, and a kernel edit that moves an anchor is named, not silently untraced."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks"))

import mamba2_cuda_trace as trace  # noqa: E402
from trtllm_replayssm.kernels import mamba2_replay_cuda as mc  # noqa: E402
from trtllm_replayssm.kernels.nvrtc import compile_program, cuda_source  # noqa: E402

FLAGS = dict(HAS_D=1, D_PER_DIM=0, HAS_Z=0, HAS_DT_BIAS=1, DT_SOFTPLUS=1, DT_CODE=1, DTB_CODE=0, D_CODE=0)


@pytest.mark.parametrize("claimed", [False, True], ids=["static", "claimed"])
def test_traced_copy_compiles_with_the_trace_parameter_last(tmp_path, claimed):
    path = trace.write_traced_source(str(tmp_path))
    cfg = mc.CudaStepConfig(stages=2, min_ctas=3, pdl=True, claimed_units=claimed)
    ptx = compile_program(path, "sm_90", mc.step_defines(128, 8, 64, 128, 16, cfg, FLAGS), "ptx").decode()
    assert ptx.count("%globaltimer") >= 16
    original = compile_program(mc.SOURCE, "sm_90", mc.step_defines(128, 8, 64, 128, 16, cfg, FLAGS), "ptx").decode()
    for entry in ("mamba2_replay_step", "mamba2_replay_coefficients", "mamba2_replay_small"):
        assert _params(ptx, entry) == _params(original, entry) + 1, entry


def _params(ptx: str, entry: str) -> int:
    return ptx.split(f".entry {entry}(")[1].split(")")[0].count(".param")


def test_a_moved_anchor_is_named():
    text = cuda_source(mc.SOURCE).replace("\n    mbar_wait(full, (i / STAGES) & 1);\n", "\n")
    with pytest.raises(ValueError, match="mbar_wait\\(full.*found 0 times"):
        trace.traced_source(text)


def test_traced_kernels_route_the_launcher_through_the_traced_source(monkeypatch):
    """Inside ``traced_kernels`` the launcher's ``load_kernel`` takes the traced source and each
    launch gets the trace buffer as one pointer more; outside, the launcher is as it was."""
    from trtllm_replayssm.kernels.nvrtc import KernelArgs

    loaded, launched = [], []

    class Fake:
        def ctas_per_sm(self, threads, smem):
            return 3

        def launch(self, grid, block, smem, stream, args, pdl=False):
            launched.append(list(args.kinds))

    monkeypatch.setattr(mc, "load_kernel", lambda *a: loaded.append(a) or Fake())
    real = mc.load_kernel
    buf = torch.zeros(4, dtype=torch.int64)
    with trace.traced_kernels("/tmp/traced.cu", buf):
        k = mc.load_kernel(mc.SOURCE, "mamba2_replay_step", (), "dev", 7)
        assert k.ctas_per_sm(160, 7) == 3
        k.launch((1,), 32, 7, 0, KernelArgs().i32(1))
    assert loaded == [("/tmp/traced.cu", "mamba2_replay_step", (), "dev", 7)]
    assert launched == [["i32", "ptr"]]
    assert mc.load_kernel is real


def test_step_buffers_give_each_step_of_a_sequence_its_own_buffer():
    """``--graph``'s buffers: a step's two launches (coefficients, step kernel) write one buffer,
    the next step's the next, in turn; a pointer read for any other count would mix two steps."""
    buffers = trace.StepBuffers(2, 8, "cpu")
    first, second = (b.data_ptr() for b in buffers.buffers)
    assert first != second
    assert [buffers.data_ptr() for _ in range(6)] == [first, first, second, second, first, first]


def test_report_times_every_point_from_the_origin_it_is_given(capsys):
    """Two steps printed from the first's origin: a later step's points are not re-based on its own start."""
    words = [0] * (trace.COEF_OFFSET + trace.COEF_SLOTS)
    words[0], words[52], words[53] = 5_000, 9_000, 3  # a step CTA: start, end, units
    words[trace.COEF_OFFSET] = 4_000  # a coefficient CTA's start
    trace.report(words, 3, t0=1_000)
    out = capsys.readouterr().out
    assert "step: start                     0.00" not in out
    assert "step: start                     4.00    4.00    4.00    4.00" in out
    assert "step: end                       8.00" in out
