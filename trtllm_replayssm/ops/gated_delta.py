"""Public gated delta-rule decode ops for Gated DeltaNet (GDN: Qwen3-Next, Qwen3.5) and Kimi
Delta Attention (KDA: Kimi Linear): validate, allocate ``out``, dispatch to ``replayssm::`` ops.

GDN and KDA share two custom ops; the log-decay's rank tells them apart (g [batch, v_heads]
for GDN, [batch, v_heads, head_k_dim] for KDA). CUDA tensors run the Triton kernels; CPU
tensors run the PyTorch reference (any float dtype, float64 included).
"""

from __future__ import annotations

import math

from typing import Optional

import torch

from torch import Tensor

from ..cache import MAX_L, GDNReplayCache, KDAReplayCache
from ..checks import (
    check_flag,
    check_optional,
    check_rank,
    check_slot_ids,
    check_tensor,
    float_dtypes,
    resolve_scale,
    slot_tensor,
    token_rows,
)
from ..reference.gated_delta import delta_rule_gate, gated_delta_decode_step_ref, gated_delta_replay_step_ref
from .library import define_op, new_out

__all__ = [
    "gdn_decode_step",
    "gdn_replay_step",
    "kda_decode_step",
    "kda_replay_step",
    "gdn_gate",
    "kda_gate",
    "check_gated_delta_inputs",
]

# --------------------------------------------------------------------------- custom ops
# Same argument names and order as the public functions (:func:`define_op`); scale resolved.


@define_op(
    "gated_delta_decode_step",
    mutates_args=("state", "out"),
    reference=gated_delta_decode_step_ref,
    launcher="gated_delta_decode:launch_gated_delta_decode_step",
)
def _gated_delta_decode_step_op(
    state: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    slot_ids: Tensor,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
) -> None:
    """Schema of ``replayssm::gated_delta_decode_step``."""


@define_op(
    "gated_delta_replay_step",
    mutates_args=("checkpoint", "d_records", "k_records", "g_records", "cursor", "arrivals", "out"),
    reference=gated_delta_replay_step_ref,
    launcher="gated_delta_replay:launch_gated_delta_replay_step",
)
def _gated_delta_replay_step_op(
    checkpoint: Tensor,
    d_records: Tensor,
    k_records: Tensor,
    g_records: Tensor,
    cursor: Tensor,
    arrivals: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    slot_ids: Tensor,
    scale: float,
    use_qk_l2norm: bool,
    out: Tensor,
) -> None:
    """Schema of ``replayssm::gated_delta_replay_step``."""


# --------------------------------------------------------------------------- validation


def check_gated_delta_inputs(
    op: str,
    q,
    k,
    v,
    g,
    beta,
    slot_ids,
    use_qk_l2norm,
    out,
    *,
    per_channel: bool,
    k_heads: int,
    v_heads: int,
    head_k_dim: int,
    head_v_dim: int,
    num_slots: int,
    device: torch.device,
    max_T: Optional[int] = None,
) -> int:
    """Checks a GDN (``per_channel`` False) or KDA step's inputs against the layer geometry;
    returns the tokens per row.

    One step (``max_T`` None): q, k [batch, k_heads, head_k_dim], v [batch, v_heads,
    head_v_dim], g [batch, v_heads] (KDA [batch, v_heads, head_k_dim]), beta [batch,
    v_heads]; returns 1. A window of T tokens (1 <= T <= ``max_T``): [batch, T, ...]; returns T.
    """
    lead, rows, T = token_rows(op, "q", q, "k_heads, head_k_dim", (k_heads, head_k_dim), max_T)
    floats = float_dtypes(device)
    shape_q, shape_v = rows + (k_heads, head_k_dim), rows + (v_heads, head_v_dim)
    check_tensor(op, "q", q, f"[{lead}, k_heads, head_k_dim]", shape_q, dtypes=floats, device=device)
    act = (q.dtype,)
    check_tensor(op, "k", k, f"[{lead}, k_heads, head_k_dim]", shape_q, dtypes=act, device=device)
    check_tensor(op, "v", v, f"[{lead}, v_heads, head_v_dim]", shape_v, dtypes=act, device=device)
    if per_channel:
        check_tensor(op, "g", g, f"[{lead}, v_heads, head_k_dim]", rows + (v_heads, head_k_dim), dtypes=floats, device=device)
    else:
        check_tensor(op, "g", g, f"[{lead}, v_heads]", rows + (v_heads,), dtypes=floats, device=device, inner_contiguous=False)
    check_tensor(
        op, "beta", beta, f"[{lead}, v_heads]", rows + (v_heads,), dtypes=floats, device=device, inner_contiguous=False
    )
    check_flag(op, "use_qk_l2norm", use_qk_l2norm)
    check_optional(op, "out", out, f"[{lead}, v_heads, head_v_dim]", shape_v, dtypes=act, device=device)
    check_slot_ids(op, slot_ids, rows[0], num_slots, device)
    return T


def _decode_step(op: str, per_channel: bool, state, q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out) -> Tensor:
    check_rank(op, "state", state, 4, "[num_slots, v_heads, head_v_dim, head_k_dim]")
    num_slots, v_heads, head_v_dim, head_k_dim = state.shape
    k_heads = q.shape[1] if isinstance(q, Tensor) and q.dim() == 3 else -1
    if k_heads < 1 or v_heads % k_heads:
        raise ValueError(
            f"{op}: q has shape {tuple(q.shape) if isinstance(q, Tensor) else q}; expected [batch, k_heads, head_k_dim] with k_heads dividing v_heads = {v_heads}"
        )
    floats = float_dtypes(state.device)
    check_tensor(
        op,
        "state",
        state,
        "[num_slots, v_heads, head_v_dim, head_k_dim]",
        tuple(state.shape),
        dtypes=floats,
        device=state.device,
    )
    check_gated_delta_inputs(
        op,
        q,
        k,
        v,
        g,
        beta,
        slot_ids,
        use_qk_l2norm,
        out,
        per_channel=per_channel,
        k_heads=k_heads,
        v_heads=v_heads,
        head_k_dim=head_k_dim,
        head_v_dim=head_v_dim,
        num_slots=num_slots,
        device=state.device,
    )
    scale = resolve_scale(op, scale, head_k_dim)
    out = new_out(v, out)
    torch.ops.replayssm.gated_delta_decode_step(state, q, k, v, g, beta, slot_tensor(slot_ids), scale, use_qk_l2norm, out)
    return out


def _replay_step(op: str, cache_type: type, cache, q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out) -> Tensor:
    if not isinstance(cache, cache_type):
        raise TypeError(f"{op}: cache is {type(cache).__name__}; expected {cache_type.__name__}")
    if not 1 <= cache.L <= MAX_L:
        raise ValueError(f"{op}: cache has L = {cache.L}; expected 1 <= L <= {MAX_L}")
    device = cache.device
    if device.type != "cpu" and torch.float64 in (cache.state_dtype, cache.record_dtype):
        raise TypeError(f"{op}: cache holds float64 on {device}; float64 runs on the CPU reference only")
    check_gated_delta_inputs(
        op,
        q,
        k,
        v,
        g,
        beta,
        slot_ids,
        use_qk_l2norm,
        out,
        per_channel=cache_type.PER_CHANNEL_GATE,
        k_heads=cache.k_heads,
        v_heads=cache.v_heads,
        head_k_dim=cache.head_k_dim,
        head_v_dim=cache.head_v_dim,
        num_slots=cache.num_slots,
        device=device,
    )
    scale = resolve_scale(op, scale, cache.head_k_dim)
    out = new_out(v, out)
    torch.ops.replayssm.gated_delta_replay_step(
        cache.checkpoint,
        cache.d_records,
        cache.k_records,
        cache.g_records,
        cache.cursor,
        cache.arrivals,
        q,
        k,
        v,
        g,
        beta,
        slot_tensor(slot_ids),
        scale,
        use_qk_l2norm,
        out,
    )
    return out


# --------------------------------------------------------------------------- public API

_STEP_ARGS = """
        q, k (Tensor): [batch, k_heads, head_k_dim], fp32 | bf16 | fp16 (fp64 on CPU), raw
            (normalised in the kernel when ``use_qk_l2norm``). Value head h reads key head
            h // (v_heads / k_heads).
        v (Tensor): [batch, v_heads, head_v_dim], dtype of q.
        g (Tensor): log-decay (<= 0), any float dtype: {g_layout}.
        beta (Tensor): [batch, v_heads] in (0, 1), any float dtype, any strides.
        slot_ids (Tensor): [batch] int32 physical slots; < 0 marks a padding row: nothing is
            read or written for it, its ``out`` row is left as it was. Live ids are distinct.
        scale (float, optional): multiplies q after the normalisation; None is head_k_dim^-½.
        use_qk_l2norm (bool): L2-normalise q and k (x / sqrt(Σx² + 1e-6)) in the kernel.
        out (Tensor, optional): like v; a fresh zeroed tensor when None.
    Returns:
        Tensor: o [batch, v_heads, head_v_dim], dtype of v (``out`` when given).
    Raises:
        ValueError, TypeError: before anything is written. Live slot ids are checked (one
        host sync) except during CUDA-graph capture and torch.compile tracing."""
_GDN_G = "[batch, v_heads], one per value head, any strides"
_KDA_G = "[batch, v_heads, head_k_dim], one per key channel"


def gdn_decode_step(
    state: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    return _decode_step("gdn_decode_step", False, state, q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)


def kda_decode_step(
    state: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    return _decode_step("kda_decode_step", True, state, q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)


def gdn_replay_step(
    cache: GDNReplayCache,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    return _replay_step("gdn_replay_step", GDNReplayCache, cache, q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)


def kda_replay_step(
    cache: KDAReplayCache,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    g: Tensor,
    beta: Tensor,
    *,
    slot_ids: Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    out: Optional[Tensor] = None,
) -> Tensor:
    return _replay_step("kda_replay_step", KDAReplayCache, cache, q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)


_DECODE_DOC = (
    """Conventional {family} decode step: reads, updates and stores the whole state.

    Args:
        state (Tensor): [num_slots, v_heads, head_v_dim, head_k_dim], fp32 | bf16 | fp16 (fp64
            on CPU), head_k_dim contiguous. Mutated: S = S Diag(exp(g)) + d k̂ᵀ with
            d = β (v - S Diag(exp(g)) k̂), rounded to its dtype every step."""
    + _STEP_ARGS
)
_REPLAY_DOC = (
    """One {family} ReplaySSM decode step from checkpoint + records.

    Args:
        cache ({cache}): mutated. A live row with cursor w < L-1 appends its record (d, k̂, g)
            at position w and sets the cursor to w+1, storing no state; a row with cursor L-1
            folds its L-1 records and the current token into the checkpoint (rounded to the
            checkpoint dtype once, here) and sets the cursor to 0. Decided and advanced on the
            device: no host sync, and one captured CUDA graph serves every step."""
    + _STEP_ARGS
)
gdn_decode_step.__doc__ = _DECODE_DOC.format(family="Gated DeltaNet", g_layout=_GDN_G)
kda_decode_step.__doc__ = _DECODE_DOC.format(family="Kimi Delta Attention", g_layout=_KDA_G)
gdn_replay_step.__doc__ = _REPLAY_DOC.format(family="Gated DeltaNet", cache="GDNReplayCache", g_layout=_GDN_G)
kda_replay_step.__doc__ = _REPLAY_DOC.format(family="Kimi Delta Attention", cache="KDAReplayCache", g_layout=_KDA_G)


def _gate(op: str, per_channel: bool, a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Optional[Tensor]) -> tuple[Tensor, Tensor]:
    want = 3 if per_channel else 2
    dims = "[batch, v_heads, head_k_dim]" if per_channel else "[batch, v_heads]"
    for name, t in (("a", a), ("b", b), ("A_log", A_log)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"{op}: {name} must be a floating-point torch.Tensor")
    if a.dim() != want:
        raise ValueError(f"{op}: a has shape {tuple(a.shape)}; expected {dims}")
    batch, v_heads = a.shape[:2]
    if tuple(b.shape) != (batch, v_heads):
        raise ValueError(f"{op}: b has shape {tuple(b.shape)}; expected [batch, v_heads] = {(batch, v_heads)}")
    if tuple(A_log.shape) != (v_heads,):
        raise ValueError(f"{op}: A_log has shape {tuple(A_log.shape)}; expected [v_heads] = ({v_heads},)")
    if dt_bias is not None and (not isinstance(dt_bias, Tensor) or dt_bias.numel() != math.prod(a.shape[1:])):
        raise ValueError(f"{op}: dt_bias must be a tensor of {math.prod(a.shape[1:])} elements (the shape of a without batch)")
    return delta_rule_gate(a, b, A_log, dt_bias)


def gdn_gate(a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Gated DeltaNet (Qwen3-Next / Qwen3.5) g and β from the raw projections.

    g = -exp(A_log) * softplus(a + dt_bias), β = sigmoid(b), both fp32 (fp64 for fp64 input).
    Args: a, b [batch, v_heads]; A_log, dt_bias [v_heads]. Returns (g [batch, v_heads], beta).
    """
    return _gate("gdn_gate", False, a, b, A_log, dt_bias)


def kda_gate(a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
    """Kimi Delta Attention (Kimi Linear) g and β from the raw projections.

    g = -exp(A_log)[h] * softplus(a + dt_bias) per key channel, β = sigmoid(b), fp32.
    Args: a [batch, v_heads, head_k_dim]; b [batch, v_heads]; A_log [v_heads];
    dt_bias [v_heads * head_k_dim] or [v_heads, head_k_dim]. Returns (g like a, beta).
    """
    return _gate("kda_gate", True, a, b, A_log, dt_bias)
