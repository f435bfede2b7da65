"""Public gated delta-rule decode ops for Gated DeltaNet (GDN: Qwen3-Next, Qwen3.5) and Kimi
Delta Attention (KDA: Kimi Linear): validate, allocate ``out``, dispatch to ``replayssm::`` ops.

GDN and KDA share two custom ops; the log-decay's rank tells them apart (g [batch, v_heads]
for GDN, [batch, v_heads, head_k_dim] for KDA). CUDA tensors run the Triton kernels; CPU
tensors run the PyTorch reference (any float dtype, float64 included).
"""

from __future__ import annotations

import math

from typing import NamedTuple, Optional, Union

import torch

from torch import Tensor

from ..cache import MAX_L, GDNReplayCache, KDAReplayCache
from ..checks import (
    check_cache_type,
    check_rounding_seed,
    check_flag,
    check_optional,
    check_slot_ids,
    check_state,
    check_tensor,
    dividing_heads,
    float_dtypes,
    resolve_scale,
    SlotBatch,
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
    "DeltaRuleInputs",
    "DeltaRuleDims",
    "check_gated_delta_inputs",
    "cache_fields",
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


# The cache tensors the replay custom ops take first, in order (all of them written).
CACHE_FIELDS = ("checkpoint", "d_records", "k_records", "g_records", "cursor", "arrivals")


@define_op(
    "gated_delta_replay_step",
    mutates_args=CACHE_FIELDS + ("out", "checkpoint_scale"),
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
    checkpoint_scale: Optional[Tensor] = None,
    rounding_seed: Optional[int] = None,
) -> None:
    """Schema of ``replayssm::gated_delta_replay_step`` (``checkpoint_scale``, ``rounding_seed``:
    as in ``replayssm::mamba2_replay_step``)."""


# --------------------------------------------------------------------------- validation


class DeltaRuleInputs(NamedTuple):
    """One GDN / KDA step's inputs besides the cache, in the custom ops' order: one token per
    row (``[batch, ...]``) or a window of T tokens (``[batch, T, ...]``).

    q, k: [batch, (T,) k_heads, head_k_dim] raw. v: [batch, (T,) v_heads, head_v_dim], q's
    dtype. g: log-decays, [batch, (T,) v_heads] (GDN) or [batch, (T,) v_heads, head_k_dim]
    (KDA). beta: [batch, (T,) v_heads]. slot_ids: [batch] int32 or a
    :class:`~trtllm_replayssm.checks.SlotBatch`. scale: float | None (head_k_dim ** -0.5).
    use_qk_l2norm: bool. out: like v | None.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    g: Tensor
    beta: Tensor
    slot_ids: Union[Tensor, SlotBatch]
    scale: Optional[float]
    use_qk_l2norm: bool
    out: Optional[Tensor]

    def for_launch(self, op: str, head_k_dim: int) -> "DeltaRuleInputs":
        """The custom op's arguments: the slot ids as a tensor, the scale resolved (a bad one
        raises TypeError), ``out`` a fresh zeroed tensor when None."""
        return self._replace(
            slot_ids=slot_tensor(self.slot_ids), scale=resolve_scale(op, self.scale, head_k_dim), out=new_out(self.v, self.out)
        )

    def token(self, s: int, rows: Tensor) -> "DeltaRuleInputs":
        """Token ``s`` of a window (launch form), for slot ids ``rows``."""
        q, k, v, g, beta = (t[:, s] for t in (self.q, self.k, self.v, self.g, self.beta))
        return self._replace(q=q, k=k, v=v, g=g, beta=beta, slot_ids=rows, out=self.out[:, s])


class DeltaRuleDims(NamedTuple):
    """What GDN / KDA inputs are checked against: the layer geometry, the gate's layout
    (``per_channel``: KDA), the slots of the cache or state and the device."""

    k_heads: int
    v_heads: int
    head_k_dim: int
    head_v_dim: int
    per_channel: bool
    num_slots: int
    device: torch.device

    @classmethod
    def of_cache(cls, cache) -> "DeltaRuleDims":
        c = cache
        return cls(c.k_heads, c.v_heads, c.head_k_dim, c.head_v_dim, c.PER_CHANNEL_GATE, c.num_slots, c.device)

    @classmethod
    def of_state(cls, op: str, name: str, state, q, per_channel: bool, window: bool) -> "DeltaRuleDims":
        """Checks a conventional state [num_slots, v_heads, head_v_dim, head_k_dim] (``name``)
        and takes k_heads from q [batch, (T,) k_heads, head_k_dim]."""
        num_slots, v_heads, head_v_dim, head_k_dim = check_state(
            op, name, state, "[num_slots, v_heads, head_v_dim, head_k_dim]"
        )
        k_heads = dividing_heads(op, "q", q, "k_heads, head_k_dim", "v_heads", v_heads, window)
        return cls(k_heads, v_heads, head_k_dim, head_v_dim, per_channel, num_slots, state.device)


def check_gated_delta_inputs(op: str, inputs: DeltaRuleInputs, dims: DeltaRuleDims, max_T: Optional[int] = None) -> int:
    """Checks a GDN / KDA step's inputs against ``dims``; returns the tokens per row: 1 for one
    step (``max_T`` None), T for a window of 1 <= T <= ``max_T`` tokens."""
    q, k, v, g, beta, slot_ids, _, use_qk_l2norm, out = inputs
    k_heads, v_heads, head_k_dim, head_v_dim, per_channel, num_slots, device = dims
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


def cache_fields(cache) -> tuple:
    """The cache tensors the replay custom ops take first, in order (:data:`CACHE_FIELDS`)."""
    return tuple(getattr(cache, name) for name in CACHE_FIELDS)


def _decode_step(op: str, per_channel: bool, state, inputs: DeltaRuleInputs) -> Tensor:
    dims = DeltaRuleDims.of_state(op, "state", state, inputs.q, per_channel, window=False)
    check_gated_delta_inputs(op, inputs, dims)
    run = inputs.for_launch(op, dims.head_k_dim)
    torch.ops.replayssm.gated_delta_decode_step(state, *run)
    return run.out


def _replay_step(op: str, cache_type: type, cache, inputs: DeltaRuleInputs, rounding_seed: Optional[int]) -> Tensor:
    check_cache_type(op, cache, (cache_type,))
    if not 1 <= cache.L <= MAX_L:
        raise ValueError(f"{op}: cache has L = {cache.L}; expected 1 <= L <= {MAX_L}")
    device = cache.device
    if device.type != "cpu" and torch.float64 in (cache.state_dtype, cache.record_dtype):
        raise TypeError(f"{op}: cache holds float64 on {device}; float64 runs on the CPU reference only")
    check_gated_delta_inputs(op, inputs, DeltaRuleDims.of_cache(cache))
    check_rounding_seed(op, rounding_seed, cache.state_dtype)
    run = inputs.for_launch(op, cache.head_k_dim)
    torch.ops.replayssm.gated_delta_replay_step(*cache_fields(cache), *run, cache.checkpoint_scale, rounding_seed)
    return run.out


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
    return _decode_step(
        "gdn_decode_step", False, state, DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)
    )


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
    return _decode_step("kda_decode_step", True, state, DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out))


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
    rounding_seed: Optional[int] = None,
) -> Tensor:
    inputs = DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)
    return _replay_step("gdn_replay_step", GDNReplayCache, cache, inputs, rounding_seed)


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
    rounding_seed: Optional[int] = None,
) -> Tensor:
    inputs = DeltaRuleInputs(q, k, v, g, beta, slot_ids, scale, use_qk_l2norm, out)
    return _replay_step("kda_replay_step", KDAReplayCache, cache, inputs, rounding_seed)


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
            checkpoint dtype once, here; an fp8 checkpoint's rows with new scales; with
            ``rounding_seed`` stochastically, as in
            :func:`~trtllm_replayssm.ops.mamba2_replay_step`) and sets the cursor to 0. Decided
            and advanced on the device: no host sync, and one captured CUDA graph serves every
            step."""
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
