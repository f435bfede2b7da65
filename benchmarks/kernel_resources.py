"""Registers per thread, spill bytes and shared memory of each Triton kernel at its default
launch configuration, compiled for an NVIDIA architecture on a machine without a GPU; for the
Mamba-2 replay step and verify at sm_90 also the CUDA C++ kernels the op routes there (bf16 and
fp32 checkpoints, NVRTC, ``cuda_step_resources``, ``cuda_verify_resources``,
``cuda_delta_verify_resources``).

    python benchmarks/kernel_resources.py                        # every kernel, sm_90a, batch 256, T 4, L 16
    python benchmarks/kernel_resources.py --family gdn kda --T 2 4 8
    python benchmarks/kernel_resources.py --route replay_verify --batch 16 256 --arch 100
    python benchmarks/kernel_resources.py --family mamba2 --route replay_verify --batch 16 --sass-lines 10

Each launcher is called on CPU tensors of the model geometry (Nemotron-3-Super Mamba-2,
Qwen3.5-122B GDN, Kimi Linear KDA; bf16 activations and records, fp32 state) while a stand-in
CUDA driver reports the target and every launch is compiled, not run, through the JIT's own
argument specialization (alignment and divisibility hints as on the GPU: the register counts
agree with ncu on the H200). Triton's bundled ptxas -v then reads the PTX. The stand-in patches
two Triton internals for the duration of a call (the active driver and ``JITFunction.run``);
it is written against the pinned Triton 3.6.

Another Triton compiles other code: Triton 3.8 lays the Mamba-2 verify tile's lanes out
differently from the H200's Triton 3.6 (:data:`DEVICE_TRITON`), with other shuffle counts,
registers and spills (docs/kernel-notes.md, "Verify in session 32"). The header says so when
the versions differ; for the device's code, run this from an environment with that Triton.

Registers per thread R bound the resident warps per multiprocessor (65536 / (32 R) on Hopper),
which is what the latency-bound kernels are limited by (docs/kernel-notes.md).

``--sass-lines N`` adds, per kernel, the N source lines of the kernel's own file with the most
machine instructions (Triton's bundled ``nvdisasm`` on the cubin, each instruction attributed
through its inlined-at chain to the innermost frame in that file) and their shuffles. The
counts are static: a loop body counts once, a ``static_range`` body once per iteration.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, Optional

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, "..")]

from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.kernels.common import LaunchConfig
from trtllm_replayssm.kernels.nvrtc import compile_program
from trtllm_replayssm.kernels.gated_delta_decode import launch_gated_delta_decode_step
from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step
from trtllm_replayssm.kernels.gated_delta_snapshot import launch_gated_delta_snapshot_verify
from trtllm_replayssm.kernels.gated_delta_verify import launch_gated_delta_replay_verify
from trtllm_replayssm.kernels.gated_delta_verify_cuda import SOURCE as DELTA_VERIFY_SOURCE
from trtllm_replayssm.kernels.gated_delta_verify_cuda import (
    delta_verify_coef_shared_bytes,
    delta_verify_cuda_config,
    delta_verify_defines,
    delta_verify_shared_bytes,
)
from trtllm_replayssm.kernels.mamba2_decode import launch_mamba2_decode_step
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step
from trtllm_replayssm.kernels.mamba2_replay_cuda import SOURCE, cuda_step_config, step_defines, step_shared_bytes
from trtllm_replayssm.kernels.mamba2_verify_cuda import SOURCE as VERIFY_SOURCE
from trtllm_replayssm.kernels.mamba2_verify_cuda import cuda_verify_config, verify_defines, verify_shared_bytes
from trtllm_replayssm.kernels.mamba2_snapshot import launch_mamba2_snapshot_verify
from trtllm_replayssm.kernels.mamba2_verify import launch_mamba2_replay_verify
from trtllm_replayssm.models import GDN, KDA, MAMBA2
from trtllm_replayssm.ops import spec_buffer_len

ROUTES = ("decode_step", "replay_step", "replay_verify", "snapshot_verify")
# (nheads, head_dim, d_state, ngroups) and (k_heads, v_heads, head_k_dim, head_v_dim), TP = 1.
GEOMETRIES = {MAMBA2: (128, 64, 128, 8), GDN: (16, 64, 128, 128), KDA: (32, 32, 128, 128)}
# The CUDA kernels' optional inputs: D per head, dt_bias, softplus, bf16 dt (the Mamba-2 layers' own).
_CUDA_FLAGS = dict(HAS_D=1, D_PER_DIM=0, HAS_Z=0, HAS_DT_BIAS=1, DT_SOFTPLUS=1, DT_CODE=1, DTB_CODE=0, D_CODE=0)
BF16 = torch.bfloat16


@dataclass(frozen=True)
class KernelResources:
    """One compiled kernel: its name, registers per thread, spill store / load bytes (ptxas -v)
    and shared memory per program in bytes (Triton's, dynamic)."""

    kernel: str
    registers: int
    spill_stores: int
    spill_loads: int
    shared: int


class _TargetOnlyDriver:
    """Stands in for Triton's CUDA driver: reports a target and device 0, launches nothing."""

    def __init__(self, arch: int):
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


@contextlib.contextmanager
def compile_only(arch: int):
    """Within the block, every Triton launch is compiled for ``arch`` and not run; yields the
    list that collects (kernel name, compiled kernel, its source file) in launch order."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise RuntimeError(
            "kernel_resources: TRITON_INTERPRET=1 makes every kernel an interpreted "
            "function, which nothing compiles; run without it"
        )
    compiled = []
    run = JITFunction.run

    def compile_launch(self, *args, grid, warmup, **kwargs):
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        # A kernel launched once per row class (FLUSH_ROWS) is listed once per launch.
        rows = f"(FLUSH_ROWS={kwargs['FLUSH_ROWS']})" if "FLUSH_ROWS" in kwargs else ""
        compiled.append((self.__name__ + rows, kernel, self.fn.__code__.co_filename))
        return kernel

    active = driver._active  # None until first use; reading .active would create a CUDA driver
    driver.set_active(_TargetOnlyDriver(arch))
    JITFunction.run = compile_launch
    try:
        yield compiled
    finally:
        JITFunction.run = run
        driver.set_active(active)


# The Triton the device's image carries (docs/kernel-notes.md: torch 2.11.0+cu130 there).
DEVICE_TRITON = "3.6.0"


def triton_note(version: str = triton.__version__) -> Optional[str]:
    """A header line saying that this Triton is not the device's, or None where it is."""
    if version == DEVICE_TRITON:
        return None
    return (
        f"# note: Triton {version} here, {DEVICE_TRITON} on the H200: layouts, registers, spills and SASS "
        f"can differ (pip install triton=={DEVICE_TRITON} in another environment for the device's code)"
    )


_TRITON_BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")  # ptxas, nvdisasm, cuobjdump


def ptxas_resources(name: str, kernel, arch: int) -> KernelResources:
    """Assemble ``kernel``'s PTX with Triton's bundled ptxas -v for sm_<arch>a."""
    # Triton ships a separate ptxas for Blackwell (sm_100 and later).
    tool = "ptxas-blackwell" if arch >= 100 else "ptxas"
    ptxas = os.path.join(_TRITON_BIN, tool)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "kernel.ptx")
        with open(src, "w") as f:
            f.write(kernel.asm["ptx"])
        report = subprocess.run(
            [ptxas, "-v", f"-arch=sm_{arch}a", src, "-o", os.path.join(tmp, "kernel.cubin")],
            capture_output=True,
            text=True,
            check=True,
        ).stderr
    regs = re.search(r"Used (\d+) registers", report)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    if regs is None or spills is None:
        raise RuntimeError(f"kernel_resources: unexpected ptxas report for {name}:\n{report}")
    return KernelResources(name, int(regs.group(1)), int(spills.group(1)), int(spills.group(2)), int(kernel.metadata.shared))


_LOCATION = re.compile(r'"([^"]+)", line (\d+)')
_INSTRUCTION = re.compile(r"/\*[0-9a-f]+\*/\s+(?:@!?\w+\s+)?([A-Z][A-Z0-9]*)")


def disassemble(kernel) -> str:
    """A compiled Triton kernel's SASS with inlined line information (Triton's bundled nvdisasm,
    ``--print-line-info-inline``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernel.cubin")
        with open(path, "wb") as f:
            f.write(kernel.asm["cubin"])
        nvdisasm = os.path.join(_TRITON_BIN, "nvdisasm")
        return subprocess.run(
            [nvdisasm, "--print-line-info-inline", "-c", path], capture_output=True, text=True, check=True
        ).stdout


def _path_tail(path: str) -> tuple:
    return tuple(os.path.normpath(path).split(os.sep)[-2:])


def sass_line_counts(sass: str, source: str) -> Dict[Optional[int], Counter]:
    """Static machine instructions of ``sass`` (nvdisasm ``--print-line-info-inline`` output) by
    line of the file ``source``: {line: Counter of opcodes (``SHFL`` for ``SHFL.BFLY``) with
    ``"all"`` their total}. An instruction belongs to the innermost frame in ``source`` of the
    location comments (``//## File "...", line N [inlined at "...", line M]``) written since the
    previous instruction, or of the last location before them; None where no frame is in
    ``source`` (other files' helpers called from nowhere in it, or no location yet). Paths are
    compared by their normalised last two components (``kernels/mamba2_verify.py``): a kernel
    that Triton takes from its cache names the checkout that first compiled it."""
    counts: Dict[Optional[int], Counter] = defaultdict(Counter)
    target = _path_tail(source)
    same: Dict[str, bool] = {}  # path as written -> whether it is ``source``
    frames: list = []
    line = None
    fresh = False
    for text in sass.splitlines():
        if text.lstrip().startswith("//##"):
            if not fresh:
                frames = []
            frames += _LOCATION.findall(text)
            fresh = True
            continue
        m = _INSTRUCTION.search(text)
        if m is None:
            continue
        if fresh:
            inside = [int(n) for f, n in frames if same.setdefault(f, _path_tail(f) == target)]
            line = inside[0] if inside else None
            fresh = False
        counts[line][m.group(1)] += 1
        counts[line]["all"] += 1
    return counts


def _cubin_resources(cubin: bytes) -> list:
    """(name, registers, stack, static shared, local) of every kernel of a cubin, read with Triton's
    bundled cuobjdump."""
    tool = os.path.join(_TRITON_BIN, "cuobjdump")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "kernels.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        report = subprocess.run([tool, "--dump-resource-usage", path], capture_output=True, text=True, check=True).stdout
    found = re.findall(r"Function (\w+):\s+REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)", report)
    if not found:
        raise RuntimeError(f"kernel_resources: unexpected cuobjdump report:\n{report}")
    return [(name, int(regs), int(stack), int(static), int(local)) for name, regs, stack, static, local in found]


def cuda_step_resources(L: int = 16, state_bytes: int = 2, geometry: tuple = GEOMETRIES[MAMBA2]) -> list:
    """[KernelResources] of the CUDA Mamba-2 step's kernels (kernels/cuda/mamba2_replay_step.cu: the
    step and the coefficient launch at the launch table's configuration at batch 256, the small
    one-launch kernel at its batch-1 and batch-2 configurations) for ``geometry`` (nheads,
    head_dim, d_state, ngroups; default Nemotron-3-Super), a bf16
    (``state_bytes`` 2) or fp32 (4) checkpoint, compiled by NVRTC for sm_90 and read with
    Triton's bundled cuobjdump (``shared``: the step kernel's dynamic shared memory, the others'
    static; ``spill_stores`` / ``spill_loads``: both the kernel's local memory and stack bytes,
    where ptxas puts spills)."""
    H, P, N, G = geometry
    out = []
    for batch, entries in ((256, ("mamba2_replay_step", "mamba2_replay_coefficients")), (1, ("mamba2_replay_small",)),
                           (2, ("mamba2_replay_small",))):  # fmt: skip
        cfg = cuda_step_config(P, N, L, batch, state_bytes)
        found = _cubin_resources(compile_program(SOURCE, "sm_90", step_defines(H, G, P, N, L, cfg, _CUDA_FLAGS, state_bytes)))
        for name, regs, stack, static, local in found:
            if name not in entries:
                continue
            shared = step_shared_bytes(P, N, L, cfg.stages, state_bytes) if name == "mamba2_replay_step" else static
            # cuobjdump reports local memory and stack, not stores and loads apart: both columns show them
            out.append(KernelResources(f"{name}({cfg.label()})", regs, stack + local, stack + local, shared))
    return out


def cuda_verify_resources(batch: int, T: int, L: int = 16, state_bytes: int = 2) -> list:
    """[KernelResources] of the CUDA Mamba-2 verify's two kernels (kernels/cuda/mamba2_verify_step.cu)
    at their launch rule's configuration for ``batch`` and ``T`` window tokens, history B = ``L``
    (records L + T), for the Mamba-2 geometry; columns as :func:`cuda_step_resources`."""
    H, P, N, G = GEOMETRIES[MAMBA2]
    records = L + T
    cfg = cuda_verify_config(P, N, records, T, batch, state_bytes)
    defines = verify_defines(H, G, P, N, records, T, cfg, _CUDA_FLAGS, state_bytes, True)
    out = []
    for name, regs, stack, static, local in _cubin_resources(compile_program(VERIFY_SOURCE, "sm_90", defines)):
        shared = verify_shared_bytes(P, N, records, T, cfg.stages, state_bytes) if name == "mamba2_verify_step" else static
        out.append(KernelResources(f"{name}({cfg.label()})", regs, stack + local, stack + local, shared))
    return out


def cuda_delta_verify_resources(family: str, T: int, L: int = 16, state_bytes: int = 2) -> list:
    """[KernelResources] of the CUDA gated delta verify's kernels
    (kernels/cuda/gated_delta_verify_step.cu; KDA in one launch where the rule fuses them) at its
    launch rule's configuration for ``T`` window tokens, history B = ``L`` (records L + T), for the
    family's geometry (GDN: Qwen3.5-122B; KDA: Kimi Linear); columns as
    :func:`cuda_step_resources` (the coefficient kernel's shared memory: static plus KDA's dynamic;
    the fused step kernel's: its dynamic plus static)."""
    hk, hv, dk, dv = GEOMETRIES[family]
    per_channel = family == KDA
    records = L + T
    cfg = delta_verify_cuda_config(dk, dv, records, T, state_bytes, per_channel)
    defines = delta_verify_defines(hk, hv, dk, dv, records, T, cfg, state_bytes, True, torch.float32, BF16, True,
                                   per_channel)  # fmt: skip
    out = []
    for name, regs, stack, static, local in _cubin_resources(compile_program(DELTA_VERIFY_SOURCE, "sm_90", defines)):
        if name == "delta_verify_step":  # dynamic (with cfg.fused: the coefficient scratch too) plus static
            dynamic = delta_verify_shared_bytes(dk, cfg.rows, records, T, cfg.stages, state_bytes, per_channel, cfg.fused)
            shared = dynamic + (static if cfg.fused else 0)
        else:
            shared = static + delta_verify_coef_shared_bytes(dk, records, T, per_channel)
        out.append(KernelResources(f"{name}({cfg.label()})", regs, stack + local, stack + local, shared))
    return out


def _mamba2_launch(route: str, batch: int, T: int, L: int, config) -> None:
    H, P, N, G = GEOMETRIES[MAMBA2]
    slots = torch.zeros(batch, dtype=torch.int32)
    kw = dict(slot_ids=slots, D=torch.zeros(H), dt_bias=torch.zeros(H), config=config)
    A = torch.zeros(H)
    if route in ("decode_step", "replay_step"):
        x, dt = torch.zeros(batch, H, P, dtype=BF16), torch.zeros(batch, H, dtype=BF16)
        B = C = torch.zeros(batch, G, N, dtype=BF16)
        if route == "decode_step":
            launch_mamba2_decode_step(torch.zeros(1, H, P, N), x, dt, A, B, C, out=torch.empty_like(x), **kw)
        else:
            c = Mamba2ReplayCache.allocate(1, H, P, N, G, L)
            launch_mamba2_replay_step(
                c.checkpoint,
                c.x_records,
                c.dt_records,
                c.B_records,
                c.cursor,
                c.arrivals,
                x,
                dt,
                A,
                B,
                C,
                out=torch.empty_like(x),
                **kw,
            )
        return
    x, dt = torch.zeros(batch, T, H, P, dtype=BF16), torch.zeros(batch, T, H, dtype=BF16)
    B = C = torch.zeros(batch, T, G, N, dtype=BF16)
    if route == "replay_verify":
        c = Mamba2ReplayCache.allocate(1, H, P, N, G, spec_buffer_len(L, T))
        launch_mamba2_replay_verify(
            c.checkpoint,
            c.x_records,
            c.dt_records,
            c.B_records,
            c.cursor,
            c.arrivals,
            c.pending,
            x,
            dt,
            A,
            B,
            C,
            out=torch.empty_like(x),
            kernel="triton",
            **kw,
        )
    else:
        launch_mamba2_snapshot_verify(
            torch.zeros(1, H, P, N), torch.zeros(1, T, H, P, N), x, dt, A, B, C, out=torch.empty_like(x), **kw
        )


def _gated_delta_launch(family: str, route: str, batch: int, T: int, L: int, config) -> None:
    kh, vh, K, V = GEOMETRIES[family]
    cache_cls = GDNReplayCache if family == GDN else KDAReplayCache
    slots = torch.zeros(batch, dtype=torch.int32)
    tok = () if route in ("decode_step", "replay_step") else (T,)
    q = torch.zeros(batch, *tok, kh, K, dtype=BF16)
    v = torch.zeros(batch, *tok, vh, V, dtype=BF16)
    g = torch.zeros(batch, *tok, vh, *((K,) if family == KDA else ()))
    beta = torch.zeros(batch, *tok, vh)
    kw = dict(slot_ids=slots, scale=K**-0.5, use_qk_l2norm=True, out=torch.empty_like(v), config=config)
    if route == "decode_step":
        launch_gated_delta_decode_step(torch.zeros(1, vh, V, K), q, q, v, g, beta, **kw)
    elif route == "snapshot_verify":
        launch_gated_delta_snapshot_verify(torch.zeros(1, vh, V, K), torch.zeros(1, T, vh, V, K), q, q, v, g, beta, **kw)
    else:
        c = cache_cls.allocate(1, kh, vh, K, V, L if route == "replay_step" else spec_buffer_len(L, T))
        caches = (c.checkpoint, c.d_records, c.k_records, c.g_records, c.cursor, c.arrivals)
        if route == "replay_step":
            launch_gated_delta_replay_step(*caches, q, q, v, g, beta, **kw)
        else:
            # a given configuration for both verify launches (None: each launch's rule); no arrivals
            launch_gated_delta_replay_verify(
                *caches[:-1], c.pending, q, q, v, g, beta, flush_config=config, kernel="triton", **kw
            )


def kernel_resources(family: str, route: str, *, arch: int = 90, **step) -> list:
    """[KernelResources] of the kernels one step of ``route`` launches for ``family``, compiled
    for sm_<arch>a; ``step``: ``batch``, ``T`` (verify tokens), ``L`` (records, the history B
    for verify) and ``config`` (None: the route's default launch configuration) as
    :func:`compile_step` takes them. The commit kernels of speculative steps are not included."""
    compiled = compile_step(family, route, arch=arch, **step)
    return [ptxas_resources(name, kernel, arch) for name, kernel, _ in compiled]


def compile_step(
    family: str,
    route: str,
    *,
    batch: int = 256,
    T: int = 4,
    L: int = 16,
    arch: int = 90,
    config: Optional[LaunchConfig] = None,
) -> list:
    """[(kernel name, compiled kernel, source file)] of the kernels one step of ``route``
    launches for ``family`` at ``batch`` (``T``: verify tokens; ``L``: records, the history B
    for verify), at ``config`` or the route's default launch configuration, compiled for
    sm_<arch>a and not run."""
    if route not in ROUTES:
        raise ValueError(f"kernel_resources: route is {route!r}; expected one of {ROUTES}")
    if family not in GEOMETRIES:
        raise ValueError(f"kernel_resources: family is {family!r}; expected one of {tuple(GEOMETRIES)}")
    with compile_only(arch) as compiled:
        if family == MAMBA2:
            _mamba2_launch(route, batch, T, L, config)
        else:
            _gated_delta_launch(family, route, batch, T, L, config)
    return compiled


def print_sass_lines(name: str, kernel, source: str, top: int) -> None:
    """The ``top`` lines of ``source`` with the most static instructions of ``kernel``, with their
    shuffles (:func:`sass_line_counts`)."""
    counts = sass_line_counts(disassemble(kernel), source)
    total = sum(c["all"] for c in counts.values())
    shuffles = sum(c["SHFL"] for c in counts.values())
    print(f"#   {name}: {total} static instructions, {shuffles} SHFL ({os.path.basename(source)} lines)")
    with open(source) as f:
        text = f.read().splitlines()
    for line, c in sorted(counts.items(), key=lambda kv: -kv[1]["all"])[:top]:
        code = text[line - 1].strip()[:90] if line else "(no line of this file)"
        print(f"#   {line if line else '-':>5} {c['all']:>6} {c['SHFL']:>5}  {code}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=list(GEOMETRIES), choices=list(GEOMETRIES))
    ap.add_argument("--route", nargs="+", default=list(ROUTES), choices=ROUTES)
    ap.add_argument("--batch", type=int, nargs="+", default=[256])
    ap.add_argument("--T", type=int, nargs="+", default=[4], help="verify tokens (verify routes)")
    ap.add_argument("--L", type=int, default=16, help="records (replay_step) or history B (verify)")
    ap.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 (sm_90a) or 100")
    ap.add_argument(
        "--sass-lines",
        type=int,
        default=0,
        metavar="N",
        help="also print each Triton kernel's N source lines with the most static instructions",
    )
    args = ap.parse_args(argv)
    print(f"# kernel_resources | sm_{args.arch}a | triton {triton.__version__} | L {args.L}")
    note = triton_note()
    if note:
        print(note)
    print(f"{'family':>6} {'route':>15} {'batch':>5} {'T':>2} {'regs':>5} {'spill st/ld':>12} {'smem B':>7}  kernel")
    for family in args.family:
        for route in args.route:
            for batch in args.batch:
                for T in args.T if route.endswith("verify") else [1]:
                    compiled = compile_step(family, route, batch=batch, T=T, L=args.L, arch=args.arch)
                    rows = [ptxas_resources(name, kernel, args.arch) for name, kernel, _ in compiled]
                    if (family, route, args.arch) == (MAMBA2, "replay_step", 90):
                        # the op's route for bf16 and fp32 checkpoints with bf16 activations
                        rows += cuda_step_resources(args.L, 2) + cuda_step_resources(args.L, 4)
                    if (family, route, args.arch) == (MAMBA2, "replay_verify", 90):
                        # the op's route for bf16 and fp32 checkpoints with bf16 activations, T <= 8
                        rows += cuda_verify_resources(batch, T, 16, 2) + cuda_verify_resources(batch, T, 16, 4)
                    if family != MAMBA2 and (route, args.arch) == ("replay_verify", 90):
                        # the op's route likewise (KDA: one value head per key head)
                        rows += cuda_delta_verify_resources(family, T, 16, 2) + cuda_delta_verify_resources(family, T, 16, 4)
                    for r in rows:
                        print(
                            f"{family:>6} {route:>15} {batch:>5} {T:>2} {r.registers:>5} "
                            f"{f'{r.spill_stores}/{r.spill_loads}':>12} {r.shared:>7}  {r.kernel}"
                        )
                    for name, kernel, source in compiled if args.sass_lines else ():
                        print_sass_lines(name, kernel, source, args.sass_lines)


if __name__ == "__main__":
    main()
