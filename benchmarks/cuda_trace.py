"""What the CUDA timeline tools share (``mamba2_cuda_trace.py``, ``delta_cuda_trace.py``): a copy of
a kernel's source instrumented by text, each anchor replaced once, and loaded through the op's own
launcher with the trace buffer as one pointer parameter more, so that a traced step is the op's
step, configuration and argument for argument."""

from __future__ import annotations

import contextlib
import os
import shutil

import torch

from trtllm_replayssm.kernels.nvrtc import cuda_headers, cuda_source

# Device helpers the patches call: %globaltimer (ns, one clock for every SM; 32 ns resolution on
# the H200), the same once ``dep`` is known (the read waits for it), and %clock64 (the SM's own
# cycles: exact, but only differences within one CTA mean anything).
TIMER_HELPERS = (
    '__device__ __forceinline__ u64 gtime() { u64 t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t)); return t; }\n'
    "// The time once dep is known (the read waits for it).\n"
    "__device__ __forceinline__ u64 gtime_after(unsigned dep) {\n"
    '  u64 t; asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t) : "r"(dep)); return t; }\n'
    '__device__ __forceinline__ u64 clk() { u64 t; asm volatile("mov.u64 %0, %clock64;" : "=l"(t)); return t; }\n'
)


def apply_patches(text: str, patches, who: str) -> str:
    """``text`` with every (anchor, replacement) of ``patches`` applied. Raises ValueError naming
    ``who`` and the anchor when an anchor does not occur exactly once (the kernel moved on)."""
    for anchor, replacement in patches:
        n = text.count(anchor)
        if n != 1:
            raise ValueError(f"{who}: anchor {anchor[:60]!r} found {n} times; expected once (update _PATCHES)")
        text = text.replace(anchor, replacement)
    return text


def write_traced_source(directory: str, source: str, traced_text: str, name: str) -> str:
    """Path of ``traced_text`` written as ``name`` into ``directory``, with copies of the headers
    ``source`` (the kernel file the text came from) includes: a program's headers are those beside it."""
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(traced_text)
    for header in cuda_headers(source):
        shutil.copy(header, directory)
    return path


class TracedKernel:
    """A kernel of the traced source: every launch gets the trace buffer as its last parameter."""

    def __init__(self, kernel, trace: torch.Tensor):
        self.kernel, self.trace = kernel, trace

    def ctas_per_sm(self, threads: int, smem: int) -> int:
        return self.kernel.ctas_per_sm(threads, smem)

    def launch(self, grid, block, smem, stream, args, pdl=False):
        self.kernel.launch(grid, block, smem, stream, args.ptr(self.trace), pdl)


@contextlib.contextmanager
def traced_kernels(launcher, source: str, trace: torch.Tensor):
    """Inside: ``launcher`` (a kernel module with ``load_kernel``, e.g. ``mamba2_replay_cuda``) loads
    its kernels from the traced ``source`` and passes ``trace`` to each launch."""
    real = launcher.load_kernel
    launcher.load_kernel = lambda name, entry, defines, device, smem, **kwargs: TracedKernel(
        real(source, entry, defines, device, smem, **kwargs), trace
    )
    try:
        yield
    finally:
        launcher.load_kernel = real


def percentiles(values, scale: float = 1e3) -> str:
    """min / p50 / p90 / max of ``values`` divided by ``scale`` (ns -> µs by default), or '-'."""
    v = sorted(values)
    if not v:
        return "-"
    at = lambda p: v[min(len(v) - 1, int(p * len(v)))]  # noqa: E731
    return f"{v[0] / scale:7.2f} {at(0.5) / scale:7.2f} {at(0.9) / scale:7.2f} {v[-1] / scale:7.2f}"


class Instrumented:
    """One timeline tool's kernel: ``launcher`` (a kernel module with ``SOURCE`` and
    ``load_kernel``), its trace ``patches`` ((anchor, replacement) pairs) and the traced copy's
    file ``name``."""

    def __init__(self, launcher, patches, name: str):
        self.launcher, self.patches, self.name = launcher, patches, name

    def traced_source(self, text: str) -> str:
        """The kernel source with the trace points and trace parameters added. Raises ValueError
        naming the anchor when the kernel no longer matches one of them exactly once."""
        return apply_patches(text, self.patches, "traced_source")

    def write_traced_source(self, directory: str) -> str:
        """Path of the traced copy of the kernel's source, written into ``directory`` with copies
        of the headers it includes."""
        source = self.launcher.SOURCE
        return write_traced_source(directory, source, self.traced_source(cuda_source(source)), self.name)

    def traced_kernels(self, source: str, trace: torch.Tensor):
        """Inside: the launcher loads its kernels from the traced ``source`` and passes ``trace``
        to each launch (``traced_kernels``)."""
        return traced_kernels(self.launcher, source, trace)
