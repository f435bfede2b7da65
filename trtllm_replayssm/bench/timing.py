"""The timing method of :mod:`trtllm_replayssm.bench`: slot sets rotated over
:data:`POOL_BYTES` of state, CUDA-graph medians, copy bandwidth."""

from __future__ import annotations

import math
import statistics
from typing import Union

import torch


POOL_BYTES = 512 << 20  # state bytes per case, several times the H200's 60 MB L2
REFCHECK_TOL = 5e-2  # replay vs conventional outputs (relative max error) before timing
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "fp8": torch.float8_e4m3fn}


def torch_dtype(d: Union[str, torch.dtype]) -> torch.dtype:
    """A dtype from its short name (``"f32"``, ``"bf16"``, ``"f16"``, ``"fp8"``) or as given."""
    return DT[d] if isinstance(d, str) else d


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median)."""
    import triton.testing as tt

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = tt.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * (1 << 30) / (ms * 1e-3)


def slot_sets(batch: int, state_bytes_per_row: int, generator, pool_bytes: int = POOL_BYTES) -> list:
    """Disjoint random sets of ``batch`` slots, enough of them that their states fill
    ``pool_bytes``: consecutive steps use different sets, so the state comes from HBM as in a
    real model (other layers run in between). The pool has len(sets) * batch slots, on the
    generator's device."""
    sets = max(1, math.ceil(pool_bytes / (batch * state_bytes_per_row)))
    perm = torch.randperm(sets * batch, device=generator.device, generator=generator).to(torch.int32)
    return [perm[i * batch : (i + 1) * batch].contiguous() for i in range(sets)]


def time_graph(step, sets: list, reps: int = 5):
    """Median per-step seconds of ``step(slot_ids)`` over a CUDA graph of one step per slot
    set (``reps`` medians of do_bench), and the samples in ms."""
    import triton.testing as tt

    for s in sets[:2]:
        step(s)  # compile + warm
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in sets:
            step(s)
    samples = [tt.do_bench(graph.replay, warmup=10, rep=60, return_mode="median") / len(sets) for _ in range(reps)]
    del graph
    return statistics.median(samples) * 1e-3, samples
