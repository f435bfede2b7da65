"""ReplaySSM Mamba-2 decode step in CUDA C++ (``kernels/cuda/mamba2_replay_step.cu``): the route
for bf16 or fp32 checkpoints and bf16 activations on sm_90, at every batch (measured faster
than the Triton kernel: docs/kernel-notes.md, "CUDA step, rebuilt" and sessions 15-19), and for
fp8-e4m3 checkpoints with d_state 128 (their row scales ``checkpoint_scale`` [slot, nheads,
head_dim] fp32, rows dense; measured faster than the Triton kernel at batch 64-512, sessions
37-39; the small kernel's batches not timed yet).

Two launches per step on the current stream: a coefficient launch per (row, group, 16 heads)
and a persistent step kernel (TMA tensor-map copies of the checkpoint, S0 . C, tensor-core
flush); at small batches (``CudaStepConfig(small=True)``, :data:`SMALL_MAX_BATCH`) one launch of
a kernel without a ring, a CTA per 16 to 32 rows of a head (:func:`small_config`).
The .cu file's header documents what each computes; the contract is the Triton kernel's
(:mod:`trtllm_replayssm.kernels.mamba2_replay`): same cache tensors, same results up to fp32
rounding, cursor advanced on the device, padding rows (slot < 0) untouched, capturable in a
CUDA graph. The coefficient launch writes the step's record at the cursor for every row, also
at a flush (w = L-1, a position the cursor then leaves behind).

:func:`cuda_step_unsupported` says why a call cannot take this route (None: it can); the
launcher raises with that reason when asked to run anyway.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional, Tuple

import torch

from torch import Tensor

from .gated_delta_common import multiprocessor_count
from .nvrtc import (DTYPE_CODE, REGISTERS_PER_SM, SMEM_PER_SM, SMEM_RESERVED_PER_CTA, KernelArgs,
                    checkpoint_tensor_maps, compile_program, copyable_rows, device_unsupported, load_kernel,
                    scale_unsupported)

__all__ = [
    "SOURCE",
    "CudaStepConfig",
    "cuda_step_config",
    "two_launch_config",
    "cuda_step_unsupported",
    "cuda_geometry_unsupported",
    "small_inputs_unsupported",
    "small_config",
    "step_defines",
    "step_shared_bytes",
    "step_threads",
    "coefficient_floats",
    "coefficient_split",
    "launch_mamba2_replay_step_cuda",
]

SOURCE = "mamba2_replay_step.cu"
CHECKPOINT_DTYPES = (torch.bfloat16, torch.float32, torch.float8_e4m3fn)  # element sizes 2, 4, 1
MAX_L_CUDA = 32  # one record per lane in the coefficient launch's scans
# From this batch on, coefficient CTAs of 4 warps (16 below): kernel notes, sessions 15 and 18
# (with the programmatic coefficient launch 16 warps are as fast or faster at 64, 4 at 256).
COEF_WARPS_4_BATCH = 128
# Up to this batch (by checkpoint element bytes: bf16, fp32; fp8 as bf16) the small one-launch kernel: kernel
# notes, sessions 18-19 (bf16: 3.57 / 5.07 / 7.39 against the two launches' 5.03 / 5.96 / 8.08 us
# at batch 1 / 2 / 3; fp32: 4.14 / 6.09 / 9.97 against 5.43 / 8.36 / 10.86 at batch 1 / 2 / 4).
SMALL_MAX_BATCH = {2: 3, 4: 4, 1: 3}  # fp8 (element bytes 1): as bf16, not timed yet
# Where its registers cannot be capped at 64 without spills (small_fits_register_cap), the small
# kernel only up to this batch: at L = 32 from batch 3 (bf16) / 4 (fp32) its uncapped grid runs
# in two waves, slower than the two launches (8.56 against 9.10 us, 11.33 against 12.90; kernel
# notes, session 19).
SMALL_MAX_BATCH_UNCAPPED = 2


# fp8 checkpoints from this batch: four stages a CTA instead of two (H200, session 39,
# Nemotron-3-Super, L = 16, three CTAs, us, two / four stages: batch 64 41.09 / 41.63, 256
# 136.45 / 129.68, 512 255.90 / 243.14; kernel notes "fp8 S0 products on tensor cores").
FP8_DEEP_RING_BATCH = 256

# At these batches the two launches' step kernel claims its units after the first stages
# (``claimed_units``): H100, session 68, Nemotron-3-Super, L = 16, us, static / claimed: fp32 32
# 59.16 / 58.60, 40 71.59 / 70.77, 64 114.30 / 111.95, 256 426.56 / 417.86, 512 838.54 / 816.85;
# bf16 32 34.01 / 33.98, 48 48.26 / 47.69, 256 237.81 / 232.83, 512 460.54 / 448.26; fp8 256
# 147.34 / 142.04; below 32 a claim a unit costs more than it evens out (fp32 16 32.49 / 32.68,
# bf16 24 26.56 / 27.08). Not from 256: on the H200 (session 71, claimed from 40) the replay step
# against the conventional one of the same run fell from session 61's static order, fp32 256
# 1.734x -> 1.702x, 512 1.782x -> 1.740x, bf16 256 1.577x -> 1.511x, 512 1.634x -> 1.552x
# (conventional steps within 0.2%; at 64 fp32 1.602x -> 1.621x, bf16 1.467x -> 1.454x), and a
# timeline at fp32 256 put the claimed step 9 us behind the static one (kernel notes "Session 71").
CLAIMED_UNITS_BATCHES = range(40, 256)


@dataclass(frozen=True)
class CudaStepConfig:
    """How the step's persistent kernel runs: ``stages`` units in flight per CTA (shared-memory
    ring), register-capped for ``min_ctas`` resident CTAs per multiprocessor, launched as a
    programmatic dependent of the coefficient launch when ``pdl``; the coefficient launch has
    ``coef_warps`` (1, 2, 4, 8 or 16; the table takes 4 or 16) warps per CTA. With ``pdl`` the
    coefficient launch is a programmatic dependent of the previous kernel in the stream too (it
    waits for that kernel before any read), so that its CTAs are scheduled while the previous
    step kernel drains (kernel notes, session 18). ``small``: one launch of
    ``mamba2_replay_small`` instead (no ring: a CTA per ``small_rows`` rows of a head and batch
    row, a multiple of 8 from 16 to 128 dividing head_dim; registers capped for ``min_ctas`` resident CTAs; ``early_math``: a thread's own
    arithmetic before the CTA's barrier instead of after it; the other fields unused), the
    fastest form at small batches (:data:`SMALL_MAX_BATCH`, :func:`small_config`). ``claimed_units``
    (the two launches): the step kernel's CTA c takes units c, c + grid, ... only for its first
    ``stages`` units, then units one at a time from a count that every CTA claims from (zeroed by
    the coefficient launch), so that CTAs that stream faster take more units and all end together
    (:data:`CLAIMED_UNITS_BATCHES`; the TensorRT AOT entries keep the static order)."""

    stages: int
    min_ctas: int
    pdl: bool
    coef_warps: int = 16
    small: bool = False
    small_rows: int = 16
    early_math: bool = False
    claimed_units: bool = False

    def label(self) -> str:
        if self.small:
            rows = "" if self.small_rows == 16 else f",{self.small_rows}"
            return f"cuda,small{rows},m{self.min_ctas}{',early' if self.early_math else ''}"
        claimed = ",cl" if self.claimed_units else ""
        return f"cuda,{self.stages},{self.min_ctas},{'pdl' if self.pdl else 'nopdl'},c{self.coef_warps}{claimed}"


def coefficient_split(heads_per_group: int) -> int:
    """Coefficient CTAs per (group, row): each takes up to 16 of the group's heads (the .cu
    file's COEF_SPLIT)."""
    return -(-heads_per_group // 16)


def coefficient_floats(L: int) -> int:
    """Floats of one (row, head) coefficient block: coef[LP], wgt[LP], decay, w, 2 pad."""
    return 2 * records_padded(L) + 4


def records_padded(L: int) -> int:
    """L rounded up to 16 (the .cu files' LP: the flush fold's tensor-core K dimension)."""
    return (L + 15) // 16 * 16


def step_shared_bytes(head_dim: int, d_state: int, L: int, stages: int, state_bytes: int = 2) -> int:
    """Dynamic shared memory of the step kernel (bytes): ``stages`` stages of 1 KiB-rounded
    (checkpoint rows of ``state_bytes`` elements, x records, padded B records, C, the
    coefficient block, an fp8 checkpoint's row scales, meta), 1 KiB of alignment slack, two
    mbarriers per stage. Mirrors the .cu file's STAGE_BYTES (a CPU test reads the compiled value)."""
    LP = records_padded(L)
    coef = coefficient_floats(L) * 4
    scales = head_dim * 4 if state_bytes == 1 else 0
    stage = head_dim * d_state * state_bytes + LP * head_dim * 2 + LP * (d_state * 2 + 16) + d_state * 2 + coef + scales + 16
    stage = (stage + 1023) // 1024 * 1024
    return stages * stage + 1024 + 16 * stages


def step_threads(head_dim: int) -> int:
    """Threads of a step-kernel CTA: a consumer warp per 16 rows and the producer warp."""
    return (head_dim // 16 + 1) * 32


def cuda_step_config(head_dim: int, d_state: int, L: int, batch: int, state_bytes: int = 2) -> CudaStepConfig:
    """The launch table (H200-measured, docs/kernel-notes.md "CUDA step, rebuilt"): two stages
    (three were no faster at any batch), as many CTAs per multiprocessor as shared memory and a
    128-register cap allow (at most 3; 80-row units at 3 CTAs spilled and ran 6% slower than
    at 2), and programmatic dependent launch: the step kernel's CTAs request their first
    checkpoint tiles while the coefficient launch runs (a gain at batch 1-64, even from 256 on).
    By batch: the small one-launch kernel up to ``SMALL_MAX_BATCH`` (batch 1-3 bf16, 1-4 fp32;
    up to ``SMALL_MAX_BATCH_UNCAPPED`` where its registers cannot be capped; :func:`small_config`),
    coefficient CTAs of 16 warps below ``COEF_WARPS_4_BATCH``, of 4 from it. fp8 checkpoints
    (``state_bytes`` 1): bf16's rules, 2 CTAs for the two launches from L = 17, four stages from
    :data:`FP8_DEEP_RING_BATCH` (:func:`two_launch_config`)."""
    fits = small_fits_register_cap(head_dim, d_state, L)
    if batch <= (SMALL_MAX_BATCH[state_bytes] if fits else SMALL_MAX_BATCH_UNCAPPED):
        return small_config(head_dim, d_state, L, batch, state_bytes)
    return two_launch_config(head_dim, d_state, L, batch, state_bytes)


def two_launch_config(head_dim: int, d_state: int, L: int, batch: int, state_bytes: int = 2) -> CudaStepConfig:
    """The table's two launches at any batch (:func:`ring_config`; fp8 at L > 16 with at most 2
    CTAs a multiprocessor: the flush's rows held in registers spill under 3 CTAs' cap, a CPU test
    compiles the table; fp8 from :data:`FP8_DEEP_RING_BATCH` four stages where they fit as many
    CTAs), with claimed units at :data:`CLAIMED_UNITS_BATCHES`. Also where the table's small
    kernel cannot read the inputs."""
    ring = ring_config(head_dim, step_shared_bytes(head_dim, d_state, L, 2, state_bytes), batch,
                       f"cuda_step_config: head_dim {head_dim}, d_state {d_state}, L {L}")
    ring = replace(ring, claimed_units=batch in CLAIMED_UNITS_BATCHES)
    if state_bytes != 1:
        return ring
    ring = replace(ring, min_ctas=min(ring.min_ctas, 2)) if L > 16 else ring
    deep = step_shared_bytes(head_dim, d_state, L, 4, state_bytes) + SMEM_RESERVED_PER_CTA
    if batch >= FP8_DEEP_RING_BATCH and SMEM_PER_SM // deep >= ring.min_ctas:
        ring = replace(ring, stages=4)
    return ring


def ring_config(head_dim: int, shared_bytes: int, batch: int, what: str) -> CudaStepConfig:
    """The two-launch rule of the persistent Mamba-2 kernels (step and verify) for two stages of
    ``shared_bytes`` dynamic shared memory a CTA: as many CTAs per multiprocessor as shared memory
    and a 128-register cap allow (at most 3), programmatic dependent launch, coefficient CTAs of 16
    warps below ``COEF_WARPS_4_BATCH`` and 4 from it.

    Raises:
        ValueError: one CTA does not fit a multiprocessor (the message starts with ``what``).
    """
    ctas = min(3, SMEM_PER_SM // (shared_bytes + SMEM_RESERVED_PER_CTA), REGISTERS_PER_SM // (step_threads(head_dim) * 128))
    if ctas < 1:
        raise ValueError(f"{what} do not fit a multiprocessor")
    return CudaStepConfig(stages=2, min_ctas=ctas, pdl=True, coef_warps=4 if batch >= COEF_WARPS_4_BATCH else 16)


# Batch 1: the small kernel's rows a CTA, at most (kernel notes, sessions 72-73: Nemotron-3-Nano's
# head_dim 80 in two CTAs of 40 rows instead of five of 16, H100, us: fp32 4.78 -> 4.60, bf16 3.81
# -> 3.78, capped for two resident CTAs; uncapped, fp32 4.49 but bf16 5.42, one CTA a multiprocessor
# at 102 registers, and at L = 32 fp32 and fp8 too, 114 / 123 registers).
SMALL_MAX_ROWS_BATCH_1 = 40


def small_config(head_dim: int, d_state: int, L: int, batch: int, state_bytes: int) -> CudaStepConfig:
    """The small kernel's launch (kernel notes, sessions 19 and 72). Batch 1: the most rows a CTA,
    a multiple of 8 from 16 to :data:`SMALL_MAX_ROWS_BATCH_1`, that tile head_dim (32 for head_dim
    64 / 96 / 128, 40 for 80: the fewest CTAs, each computing its group's coefficients once),
    registers uncapped up to 256 threads a CTA and capped for two resident CTAs above (uncapped,
    40 bf16 rows take 102 registers: one CTA a multiprocessor, Nano's 192 CTAs in two waves), a
    thread's own arithmetic before the CTA's barrier (one grid of few CTAs: latency decides;
    bf16 3.57 us against session 18's 4.33). From batch 2: 32 rows where they tile head_dim, else
    16, registers capped at 64 so that consecutive steps' grids are resident together
    (programmatic launch) where that cap holds the kernel without spills
    (:func:`small_fits_register_cap`), the arithmetic after the barrier (before it, the registers
    live across the barrier spill under the cap)."""
    if batch == 1:
        # head_dim is a multiple of 16 (cuda_shape_unsupported): 16 rows always tile it
        rows = max(r for r in range(16, SMALL_MAX_ROWS_BATCH_1 + 1, 8) if head_dim % r == 0)
        ctas = 1 if rows <= 32 else 2
        return CudaStepConfig(stages=2, min_ctas=ctas, pdl=True, small=True, small_rows=rows, early_math=True)
    rows = 32 if head_dim % 32 == 0 else 16
    ctas = REGISTERS_PER_SM // (64 * 8 * rows) if small_fits_register_cap(head_dim, d_state, L) else 1
    return CudaStepConfig(stages=2, min_ctas=ctas, pdl=True, small=True, small_rows=rows)


def small_fits_register_cap(head_dim: int, d_state: int, L: int) -> bool:
    """Whether the small kernel without the early arithmetic fits 64 registers a thread without
    spills: L <= 16, d_state <= 128 and head_dim a multiple of 32 (a CPU test compiles the launch
    table's configurations and reads their local memory and stack)."""
    return L <= 16 and d_state <= 128 and head_dim % 32 == 0


def small_inputs_unsupported(B: Tensor, C: Tensor) -> Optional[str]:
    """Why the small kernel cannot read these tensors (None: it can): it loads the step's B and
    C rows in 16-byte vectors (16-byte aligned, contiguous rows)."""
    for name, t in (("B", B), ("C", C)):
        if not copyable_rows(t):
            return f"{name} strides {t.stride()} not 16-byte aligned rows"
    return None


def cuda_step_unsupported(
    checkpoint: Tensor, x_records: Tensor, B_records: Tensor, x: Tensor, checkpoint_scale: Optional[Tensor] = None
) -> Optional[str]:
    """Why the CUDA step cannot run these tensors (None: it can). Needs an sm_90 GPU, a bf16,
    fp32 or fp8-e4m3 checkpoint (fp8: d_state 128 and its ``checkpoint_scale``), bf16
    activations, head_dim a multiple of 16 up to 128, d_state a multiple of 64 up to 256, L <=
    32, two stages fitting a multiprocessor, and the TMA / bulk-copy alignment: 16-byte aligned
    bases and slot, head and position strides of the checkpoint, the records and the scales, x
    records' positions dense."""
    return device_unsupported(checkpoint) or cuda_shape_unsupported(checkpoint, x_records, B_records, x, checkpoint_scale)


def cuda_shape_unsupported(
    checkpoint: Tensor, x_records: Tensor, B_records: Tensor, x: Tensor, checkpoint_scale: Optional[Tensor] = None
) -> Optional[str]:
    """The device-independent part of :func:`cuda_step_unsupported` (dtypes, sizes, alignment)."""
    _, _, head_dim, d_state = checkpoint.shape
    reason = cuda_geometry_unsupported(checkpoint.dtype, x.dtype, head_dim, d_state, x_records.shape[2])
    if reason is None and checkpoint.dtype == torch.float8_e4m3fn:
        reason = scale_unsupported(checkpoint, checkpoint_scale)
    if reason is not None:
        return reason
    for name, t in (("checkpoint", checkpoint), ("x_records", x_records), ("B_records", B_records)):
        if not copyable_rows(t):
            return f"{name} base or strides {t.stride()} not 16-byte aligned with a contiguous last dim"
    if x_records.stride(2) != head_dim:
        return f"x_records positions {x_records.stride(2)} elements apart; the CUDA step copies them as one range (head_dim)"
    return None


def cuda_geometry_unsupported(
    state_dtype: torch.dtype, act_dtype: torch.dtype, head_dim: int, d_state: int, L: int
) -> Optional[str]:
    """Why the CUDA step cannot take a layer of this geometry and these dtypes (None: it can):
    the checkpoint bf16, fp32 or fp8-e4m3 (fp8: d_state 128) and the activations bf16, head_dim
    a multiple of 16 up to 128, d_state a multiple of 64 up to 256, L <= 32, two stages fitting
    a multiprocessor. Also part of the TensorRT AOT export's rule (plugins/mamba2_cuda.py)."""
    if state_dtype not in CHECKPOINT_DTYPES or act_dtype != torch.bfloat16:
        return f"checkpoint {state_dtype} / activations {act_dtype}; the CUDA step takes bf16, fp32 or fp8 / bf16"
    if state_dtype == torch.float8_e4m3fn and d_state != 128:
        return f"d_state {d_state} with an fp8 checkpoint; the CUDA step takes fp8 rows of 128"
    if head_dim % 16 or head_dim > 128:
        return f"head_dim {head_dim}; the CUDA step takes multiples of 16 up to 128"
    if d_state % 64 or d_state > 256:
        return f"d_state {d_state}; the CUDA step takes multiples of 64 up to 256"
    if L > MAX_L_CUDA:
        return f"L {L}; the CUDA step takes L <= {MAX_L_CUDA}"
    state_bytes = torch.empty((), dtype=state_dtype).element_size()
    if step_shared_bytes(head_dim, d_state, L, 2, state_bytes) + SMEM_RESERVED_PER_CTA > SMEM_PER_SM:
        return f"two stages of head_dim {head_dim} x d_state {d_state} {state_dtype} rows do not fit a multiprocessor"
    return None


def step_defines(
    nheads: int, ngroups: int, head_dim: int, d_state: int, L: int, cfg: CudaStepConfig, flags: dict, state_bytes: int = 2
) -> Tuple[Tuple[str, int], ...]:
    """The .cu file's -D constants for a shape, config, checkpoint element size and the
    optional-input flags.

    Raises:
        ValueError: ``cfg.small_rows`` is not a multiple of 8 from 16 to 128 dividing head_dim, or
            ``cfg.claimed_units`` is asked of the small kernel (checked before any launch).
    """
    if cfg.small_rows % 8 or not 16 <= cfg.small_rows <= 128 or head_dim % cfg.small_rows:
        raise ValueError(
            f"mamba2_replay_step (CUDA): small_rows {cfg.small_rows}; expected a multiple of 8 from 16 to 128 dividing "
            f"head_dim {head_dim}"
        )
    if cfg.claimed_units and cfg.small:
        raise ValueError("mamba2_replay_step (CUDA): claimed_units needs the two launches' step kernel; got small=True")
    base = dict(CKPT_F32=int(state_bytes == 4), CKPT_FP8=int(state_bytes == 1), NHEADS=nheads, NGROUPS=ngroups, ROWS=head_dim, DSTATE=d_state,
                LREC=L, LP=records_padded(L), STAGES=cfg.stages, MIN_CTAS=cfg.min_ctas, COEF_WARPS=cfg.coef_warps,
                SM_ROWS=cfg.small_rows, SM_EARLY_MATH=int(cfg.early_math), CLAIMED_UNITS=int(cfg.claimed_units))
    return tuple(sorted({**base, **flags}.items()))


def mamba2_input_defines(dt: Tensor, dt_bias: Optional[Tensor], D: Optional[Tensor], z: Optional[Tensor],
                         dt_softplus: bool) -> dict:
    """The CUDA Mamba-2 kernels' -D constants for the optional inputs and the dtypes of dt, dt_bias
    and D (HAS_D, D_PER_DIM, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, DT_CODE, DTB_CODE, D_CODE)."""
    return dict(
        HAS_D=int(D is not None),
        D_PER_DIM=int(D is not None and D.dim() == 2),
        HAS_Z=int(z is not None),
        HAS_DT_BIAS=int(dt_bias is not None),
        DT_SOFTPLUS=int(bool(dt_softplus)),
        DT_CODE=DTYPE_CODE[dt.dtype],
        DTB_CODE=DTYPE_CODE[dt_bias.dtype] if dt_bias is not None else 0,
        D_CODE=DTYPE_CODE[D.dtype] if D is not None else 0,
    )


def compile_step_ptx(
    nheads: int, ngroups: int, head_dim: int, d_state: int, L: int, cfg: CudaStepConfig, flags: dict, state_bytes: int = 2
) -> str:
    """PTX of the source's entries for a shape, for sm_90 (CPU: no GPU needed), for tests."""
    defines = step_defines(nheads, ngroups, head_dim, d_state, L, cfg, flags, state_bytes)
    return compile_program(SOURCE, "sm_90", defines, "ptx").decode()


def coefficient_args(coef, c_rows, x_records, dt_records, B_records, cursor, x, dt, A, B, C, slot_ids, dt_bias) -> KernelArgs:
    """Parameters of ``mamba2_replay_coefficients``, in the .cu file's order (an absent dt_bias
    is A's pointer, never read: HAS_DT_BIAS is 0)."""
    bias = dt_bias if dt_bias is not None else A
    return (
        KernelArgs()
        .ptr(coef).ptr(c_rows)
        .tensor(x_records, 3)
        .tensor(dt_records, 2)
        .tensor(B_records, 3)
        .ptr(cursor)
        .tensor(x, 2)
        .tensor(dt, 2)
        .ptr(A).ptr(bias)
        .tensor(B, 2)
        .tensor(C, 2)
        .ptr(slot_ids)
    )  # fmt: skip


def small_args(checkpoint, scale, x_records, dt_records, B_records, cursor, arrivals, x, dt, A, B, C, slot_ids, D, z, dt_bias,
               out) -> KernelArgs:
    """Parameters of ``mamba2_replay_small``, in the .cu file's order (an absent D, z, dt_bias or
    fp8 ``scale`` is another tensor's pointer, never read)."""
    DD = D if D is not None else A
    zz = z if z is not None else x
    bias = dt_bias if dt_bias is not None else A
    sc = scale if scale is not None else x_records
    return (
        KernelArgs()
        .tensor(checkpoint, 3)
        .tensor(sc, 2)
        .tensor(x_records, 2)
        .tensor(dt_records, 2)
        .tensor(B_records, 3)
        .ptr(cursor).ptr(arrivals)
        .tensor(x, 2)
        .tensor(dt, 2)
        .ptr(A).ptr(bias)
        .tensor(B, 2)
        .tensor(C, 2)
        .tensor(DD, 1)
        .tensor(zz, 2)
        .tensor(out, 2)
        .ptr(slot_ids)
    )  # fmt: skip


def step_args(maps, coef, c_rows, scale, x_records, B_records, cursor, slot_ids, D, z, x, out) -> KernelArgs:
    """Parameters of ``mamba2_replay_step``, in the .cu file's order: the checkpoint's (load,
    store) tensor maps first (an absent D, z or fp8 ``scale`` is another tensor's pointer, never
    read)."""
    DD = D if D is not None else coef
    zz = z if z is not None else x
    sc = scale if scale is not None else x_records
    return (
        KernelArgs()
        .tensor_map(maps[0]).tensor_map(maps[1])
        .ptr(coef).ptr(c_rows)
        .tensor(sc, 2)
        .tensor(x_records, 2)
        .tensor(B_records, 3)
        .tensor(DD, 1)
        .tensor(zz, 2)
        .tensor(out, 2)
        .ptr(slot_ids).ptr(cursor).i32(x.shape[0])
    )  # fmt: skip


def launch_mamba2_replay_step_cuda(
    checkpoint: Tensor,
    x_records: Tensor,
    dt_records: Tensor,
    B_records: Tensor,
    cursor: Tensor,
    arrivals: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Tensor,
    config: Optional[CudaStepConfig] = None,
    checkpoint_scale: Optional[Tensor] = None,
) -> Tensor:
    """The CUDA replay step on the cache tensors; arguments already checked by the op, in the
    Triton launcher's order (``checkpoint_scale``: an fp8 checkpoint's row scales, read and, at a
    flush, rewritten). ``arrivals``: the small kernel counts each row's CTAs there (the
    last advances the cursor and resets it to zero); the two launches do not use it (their step
    kernel advances the cursor once the coefficient grid is complete).

    Raises:
        ValueError: when :func:`cuda_step_unsupported` names a reason, or ``config`` asks for the
            small kernel with inputs it cannot read (:func:`small_inputs_unsupported`; the launch
            table's small kernel takes the two launches then; nothing is launched).
    """
    reason = cuda_step_unsupported(checkpoint, x_records, B_records, x, checkpoint_scale)
    if reason is not None:
        raise ValueError(f"mamba2_replay_step (CUDA): {reason}")
    batch, nheads, head_dim = x.shape
    d_state, ngroups, L = B.shape[2], B.shape[1], x_records.shape[2]
    es = checkpoint.element_size()
    cfg = config or cuda_step_config(head_dim, d_state, L, batch, es)
    small_reason = small_inputs_unsupported(B, C) if cfg.small else None
    if small_reason is not None:
        if config is not None:
            raise ValueError(f"mamba2_replay_step (CUDA, small): {small_reason}")
        # The table's small kernel cannot read these inputs; the two launches can (same results).
        cfg = two_launch_config(head_dim, d_state, L, batch, es)
    defines = step_defines(nheads, ngroups, head_dim, d_state, L, cfg, mamba2_input_defines(dt, dt_bias, D, z, dt_softplus), es)
    device = x.device
    stream = torch.cuda.current_stream(device).cuda_stream
    if cfg.small:
        small = load_kernel(SOURCE, "mamba2_replay_small", defines, device, 0)
        args = small_args(
            checkpoint, checkpoint_scale, x_records, dt_records, B_records, cursor, arrivals, x, dt, A, B, C, slot_ids, D, z,
            dt_bias, out,
        )
        small.launch((nheads * head_dim // cfg.small_rows, batch), 8 * cfg.small_rows, 0, stream, args, pdl=True)
        return out
    smem = step_shared_bytes(head_dim, d_state, L, cfg.stages, es)
    step_kernel = load_kernel(SOURCE, "mamba2_replay_step", defines, device, smem)
    coef_kernel = load_kernel(SOURCE, "mamba2_replay_coefficients", defines, device, 0)
    # With claimed_units one more word: the step kernel's claim count (the coefficient launch zeroes it).
    coef = torch.empty(batch * nheads * coefficient_floats(L) + cfg.claimed_units, dtype=torch.float32, device=device)
    # C per (row, group) for the step kernel: bf16, or for fp8 checkpoints f16 times a power of two.
    c_dtype = torch.float16 if checkpoint.dtype == torch.float8_e4m3fn else torch.bfloat16
    c_rows = torch.empty(batch * ngroups * d_state, dtype=c_dtype, device=device)
    coef_args = coefficient_args(coef, c_rows, x_records, dt_records, B_records, cursor, x, dt, A, B, C, slot_ids, dt_bias)
    coef_grid = (ngroups * coefficient_split(nheads // ngroups), batch)
    # Programmatic too: its CTAs may be scheduled while the previous step kernel drains (it
    # waits for that grid before reading; the .cu file's launch 1).
    coef_kernel.launch(coef_grid, 32 * cfg.coef_warps, 0, stream, coef_args, pdl=cfg.pdl)
    load_map, store_map = checkpoint_tensor_maps(checkpoint, head_dim)
    threads = step_threads(head_dim)
    grid = min(batch * nheads, step_kernel.ctas_per_sm(threads, smem) * multiprocessor_count(device))
    args = step_args(
        (load_map, store_map), coef, c_rows, checkpoint_scale, x_records, B_records, cursor, slot_ids, D, z, x, out
    )
    step_kernel.launch((grid,), threads, smem, stream, args, pdl=cfg.pdl)
    return out
