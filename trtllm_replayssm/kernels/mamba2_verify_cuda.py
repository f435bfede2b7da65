"""ReplaySSM Mamba-2 speculative verify in CUDA C++ (``kernels/cuda/mamba2_verify_step.cu``): bf16
or fp32 checkpoints, bf16 activations, up to 8 window tokens, on sm_90.

Two launches on the current stream, the structure of the CUDA replay step
(:mod:`~trtllm_replayssm.kernels.mamba2_replay_cuda`): a coefficient launch per (row, group, 16
heads) forms each (row, head)'s history and window weights times B·C once, and a persistent kernel
streams each head's checkpoint rows through a shared-memory ring (TMA) with the window's T tokens
as the columns of one tensor-core product (bf16 rows) or T exact fp32 sums (fp32 rows). The .cu
file's header documents what each computes; the contract is the Triton kernel's
(:mod:`trtllm_replayssm.kernels.mamba2_verify`): same cache tensors, same results up to fp32
rounding, no host sync, padding rows (slot < 0) untouched, capturable in a CUDA graph.

:func:`cuda_verify_unsupported` says why a call cannot take this route (None: it can); the launcher
raises with that reason when asked to run anyway.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from torch import Tensor

from .gated_delta_common import multiprocessor_count
from .mamba2_replay_cuda import (
    CudaStepConfig,
    coefficient_split,
    cuda_step_unsupported,
    mamba2_input_defines,
    records_padded,
    ring_config,
    step_threads,
)
from .nvrtc import (SMEM_PER_SM, SMEM_RESERVED_PER_CTA, KernelArgs, checkpoint_tensor_maps, copyable_rows,
                    load_kernel)

__all__ = [
    "SOURCE",
    "MAX_T_CUDA",
    "cuda_verify_config",
    "cuda_verify_unsupported",
    "verify_coefficient_floats",
    "verify_defines",
    "verify_shared_bytes",
    "launch_mamba2_replay_verify_cuda",
]

SOURCE = "mamba2_verify_step.cu"
MAX_T_CUDA = 8  # window tokens: the columns of one m16n8k16 product


def _tokens_padded(T: int) -> int:
    return 4 if T <= 4 else 8


def verify_coefficient_floats(L: int, T: int) -> int:
    """Floats of one (row, head) coefficient block: hist[LP][TP], win[TP][TP], decay[TP], wgt[LP],
    fold decay, w, n, rounded up to 4 (the .cu file's COEF_FLOATS; a CPU test reads the compiled
    value)."""
    LP, TP = records_padded(L), _tokens_padded(T)
    return (LP * TP + TP * TP + TP + LP + 3 + 3) // 4 * 4


def verify_shared_bytes(head_dim: int, d_state: int, L: int, T: int, stages: int, state_bytes: int) -> int:
    """Dynamic shared memory of the verify kernel (bytes): ``stages`` stages of 1 KiB-rounded
    (checkpoint rows of ``state_bytes`` elements, the history's x records, padded B records, the
    window's C rows in the checkpoint's dtype, the coefficient block, meta), 1 KiB of alignment slack, two mbarriers per
    stage. Mirrors the .cu file's STAGE_BYTES (a CPU test reads the compiled value)."""
    LP = records_padded(L)
    stage = (head_dim * d_state * state_bytes + LP * head_dim * 2 + LP * (d_state * 2 + 16) + T * d_state * state_bytes
             + verify_coefficient_floats(L, T) * 4 + 16)
    stage = (stage + 1023) // 1024 * 1024
    return stages * stage + 1024 + 16 * stages


def cuda_verify_config(head_dim: int, d_state: int, L: int, T: int, batch: int, state_bytes: int) -> CudaStepConfig:
    """The replay step's two-launch rule (:func:`~.mamba2_replay_cuda.ring_config`; no small kernel)
    at the verify kernel's stage size."""
    return ring_config(head_dim, verify_shared_bytes(head_dim, d_state, L, T, 2, state_bytes), batch,
                       f"cuda_verify_config: head_dim {head_dim}, d_state {d_state}, L {L}, T {T}")


def cuda_verify_unsupported(checkpoint: Tensor, x_records: Tensor, B_records: Tensor, x: Tensor, B: Tensor,
                            C: Tensor) -> Optional[str]:
    """Why the CUDA verify cannot run these tensors (None: it can): the replay step's conditions
    (:func:`~.mamba2_replay_cuda.cuda_step_unsupported`: sm_90, bf16 or fp32 checkpoint, bf16
    activations, sizes, alignment), B and C rows 16-byte aligned (copied in 16-byte chunks), at most
    :data:`MAX_T_CUDA` window tokens, and two stages of the verify kernel fitting a multiprocessor.
    x: [batch, T, nheads, head_dim]; B, C: [batch, T, ngroups, d_state]."""
    if checkpoint.dtype == torch.float8_e4m3fn:
        return "fp8 checkpoint; the CUDA verify reads bf16 or fp32 ones"
    reason = cuda_step_unsupported(checkpoint, x_records, B_records, x[:, 0])
    if reason is not None:
        return reason
    for name, t in (("B", B), ("C", C)):
        if not copyable_rows(t):
            return f"{name} base or strides {t.stride()} not 16-byte aligned with a contiguous last dim"
    T = x.shape[1]
    if T > MAX_T_CUDA:
        return f"T {T}; the CUDA verify takes T <= {MAX_T_CUDA}"
    _, _, head_dim, d_state = checkpoint.shape
    smem = verify_shared_bytes(head_dim, d_state, x_records.shape[2], T, 2, checkpoint.element_size())
    if smem + SMEM_RESERVED_PER_CTA > SMEM_PER_SM:
        return f"two stages of head_dim {head_dim} x d_state {d_state} {checkpoint.dtype} rows and T {T} do not fit a multiprocessor"
    return None


def verify_defines(nheads: int, ngroups: int, head_dim: int, d_state: int, L: int, T: int, cfg: CudaStepConfig,
                   flags: dict, state_bytes: int, has_num_tokens: bool) -> Tuple[Tuple[str, int], ...]:
    """The .cu file's -D constants for a shape, T, config, checkpoint element size and the
    optional inputs."""
    base = dict(CKPT_F32=int(state_bytes == 4), NHEADS=nheads, NGROUPS=ngroups, ROWS=head_dim, DSTATE=d_state,
                LREC=L, LP=records_padded(L), VT=T, STAGES=cfg.stages, MIN_CTAS=cfg.min_ctas,
                COEF_WARPS=cfg.coef_warps, HAS_NUM_TOKENS=int(has_num_tokens))
    return tuple(sorted({**base, **flags}.items()))


def coefficient_args(coef, c_rows, dt_records, B_records, cursor, pending, dt, A, dt_bias, B, C, slot_ids,
                     num_tokens) -> KernelArgs:
    """Parameters of ``mamba2_verify_coefficients``, in the .cu file's order (an absent dt_bias is
    A's pointer and an absent num_tokens slot_ids', never read)."""
    return (
        KernelArgs()
        .ptr(coef).ptr(c_rows)
        .tensor(dt_records, 2)
        .tensor(B_records, 3)
        .ptr(cursor).ptr(pending)
        .tensor(dt, 3)
        .ptr(A).ptr(dt_bias if dt_bias is not None else A)
        .tensor(B, 3)
        .tensor(C, 3)
        .ptr(slot_ids).ptr(num_tokens if num_tokens is not None else slot_ids)
    )  # fmt: skip


def step_args(maps, coef, c_rows, x_records, B_records, x, B, D, z, out, slot_ids, num_tokens, cursor,
              arrivals) -> KernelArgs:
    """Parameters of ``mamba2_verify_step``, in the .cu file's order: the checkpoint's (load, store)
    tensor maps first (an absent D, z or num_tokens is another tensor's pointer, never read)."""
    return (
        KernelArgs()
        .tensor_map(maps[0]).tensor_map(maps[1])
        .ptr(coef).ptr(c_rows)
        .tensor(x_records, 2)
        .tensor(B_records, 3)
        .tensor(x, 3)
        .tensor(B, 3)
        .tensor(D if D is not None else coef, 1)
        .tensor(z if z is not None else x, 3)
        .tensor(out, 3)
        .ptr(slot_ids).ptr(num_tokens if num_tokens is not None else slot_ids).ptr(cursor).ptr(arrivals)
        .i32(x.shape[0])
    )  # fmt: skip


def launch_mamba2_replay_verify_cuda(
    checkpoint: Tensor,
    x_records: Tensor,
    dt_records: Tensor,
    B_records: Tensor,
    cursor: Tensor,
    arrivals: Tensor,
    pending: Tensor,
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    *,
    slot_ids: Tensor,
    num_tokens: Optional[Tensor] = None,
    D: Optional[Tensor] = None,
    z: Optional[Tensor] = None,
    dt_bias: Optional[Tensor] = None,
    dt_softplus: bool = True,
    out: Tensor,
    config: Optional[CudaStepConfig] = None,
) -> Tensor:
    """The CUDA verify on the cache tensors; arguments already checked by the op, in the Triton
    launcher's order. ``arrivals``: a flush row's units count themselves there (the last writes the
    window's B records, resets the cursor to 0 and the count).

    Raises:
        ValueError: when :func:`cuda_verify_unsupported` names a reason, or ``config`` asks for the
            replay step's small kernel (nothing is launched).
    """
    reason = cuda_verify_unsupported(checkpoint, x_records, B_records, x, B, C)
    if reason is not None:
        raise ValueError(f"mamba2_replay_verify (CUDA): {reason}")
    batch, T, nheads, head_dim = x.shape
    ngroups, d_state, L = B.shape[2], B.shape[3], x_records.shape[2]
    es = checkpoint.element_size()
    cfg = config or cuda_verify_config(head_dim, d_state, L, T, batch, es)
    if cfg.small:
        raise ValueError("mamba2_replay_verify (CUDA): config asks for the small kernel; the verify has two launches only")
    defines = verify_defines(nheads, ngroups, head_dim, d_state, L, T, cfg, mamba2_input_defines(dt, dt_bias, D, z, dt_softplus), es,
                             num_tokens is not None)
    device = x.device
    stream = torch.cuda.current_stream(device).cuda_stream
    smem = verify_shared_bytes(head_dim, d_state, L, T, cfg.stages, es)
    step_kernel = load_kernel(SOURCE, "mamba2_verify_step", defines, device, smem)
    coef_kernel = load_kernel(SOURCE, "mamba2_verify_coefficients", defines, device, 0)
    coef = torch.empty(batch * nheads * verify_coefficient_floats(L, T), dtype=torch.float32, device=device)
    c_rows = torch.empty(batch * ngroups * T * d_state, dtype=checkpoint.dtype, device=device)  # C in the checkpoint's dtype
    coef_args = coefficient_args(coef, c_rows, dt_records, B_records, cursor, pending, dt, A, dt_bias, B, C, slot_ids,
                                 num_tokens)
    coef_kernel.launch((ngroups * coefficient_split(nheads // ngroups), batch), 32 * cfg.coef_warps, 0, stream,
                       coef_args, pdl=cfg.pdl)
    maps = checkpoint_tensor_maps(checkpoint, head_dim)
    threads = step_threads(head_dim)
    grid = min(batch * nheads, step_kernel.ctas_per_sm(threads, smem) * multiprocessor_count(device))
    args = step_args(maps, coef, c_rows, x_records, B_records, x, B, D, z, out, slot_ids, num_tokens, cursor, arrivals)
    step_kernel.launch((grid,), threads, smem, stream, args, pdl=cfg.pdl)
    return out
