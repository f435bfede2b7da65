"""Decode forms of the Mamba-2, GDN and KDA mixers, whole or as one tensor-parallel rank.

Each mixer is built from a layer's whole weights in the checkpoint layout
(:func:`random_weights`) and a shard (:mod:`.shard`); it keeps only the rank's rows. One decode
step maps hidden states [batch, hidden] to [batch, hidden]:

- Mamba-2 (NemotronH): in_proj -> [z | xBC | dt]; causal conv + silu on xBC; the SSM step
  (``mamba2_decode_step`` / ``mamba2_replay_step``, D and dt_bias, no z); gated RMSNorm
  ``rmsnorm(y * silu(z))`` over groups of nheads*head_dim/ngroups channels (all-reduce of the
  per-token sum of squares when groups are replicated); out_proj.
- GDN (Qwen3-Next): in_proj_qkvz -> [q | k | v | z], in_proj_ba -> [b | a]; conv + silu on
  qkv; ``gdn_gate``; the delta-rule step (q, k L2-normalised); per-head RMSNorm times silu(z);
  out_proj.
- KDA (Kimi Linear): q/k/v projections, conv + silu; a = f_b(f_a(h)), b; ``kda_gate``; the
  step; per-head RMSNorm times sigmoid(g_b(g_a(h))); o_proj.

out_proj is row-parallel: each rank multiplies its heads' columns and the group all-reduces
the [batch, hidden] partial sums. Routes: ``"conventional"`` updates the cache's checkpoint as
the state every step; ``"replay"`` runs the ReplaySSM step on the whole cache.
"""

from __future__ import annotations

import math
from typing import Dict

import torch
import torch.nn.functional as F

from torch import Tensor

from ..checks import slot_tensor
from ..models import GDN, KDA, MAMBA2
from ..reference.mamba2 import live_rows
from ..registry import family
from ..ops import (
    gdn_decode_step,
    gdn_gate,
    gdn_replay_step,
    kda_decode_step,
    kda_gate,
    kda_replay_step,
    mamba2_decode_step,
    mamba2_replay_step,
)
from .comm import TPGroup
from .shard import DeltaRuleShard, Mamba2Shard

__all__ = [
    "ROUTES",
    "random_weights",
    "mamba2_random_weights",
    "gdn_random_weights",
    "kda_random_weights",
    "causal_conv1d_update",
    "rms_norm",
    "Mamba2Mixer",
    "GDNMixer",
    "KDAMixer",
]

ROUTES = ("conventional", "replay")
MAMBA2_NORM_EPS = 1e-5  # NemotronH layer_norm_epsilon
DELTA_NORM_EPS = 1e-6  # Qwen3-Next rms_norm_eps, Kimi Linear


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_route(owner: str, route: str) -> None:
    if route not in ROUTES:
        raise ValueError(f"{owner}: route is {route!r}; expected one of {', '.join(ROUTES)}")


# --------------------------------------------------------------------------- weights


def _inv_softplus(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))


class _Draws:
    """Random weight tensors from one generator, scaled to keep activations O(1)."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def randn(self, *shape, fan_in):
        return torch.randn(*shape, generator=self.generator) / math.sqrt(fan_in)

    def uniform(self, n, lo, hi):
        return torch.rand(n, generator=self.generator) * (hi - lo) + lo

    def norm(self, n):
        return 1 + 0.1 * torch.randn(n, generator=self.generator)


def random_weights(kind: str, geometry, hidden_size: int, generator: torch.Generator) -> Dict[str, Tensor]:
    """A layer's whole weights in its Hugging Face checkpoint layout, fp32 on the CPU, drawn from
    ``generator`` (the same on every rank): the registered family's ``random_weights``
    (:func:`mamba2_random_weights`, :func:`gdn_random_weights`, :func:`kda_random_weights`)."""
    return family(kind).random_weights(geometry, hidden_size, generator)


def mamba2_random_weights(g, hidden_size: int, generator: torch.Generator) -> Dict[str, Tensor]:
    """in_proj [2*d_inner + 2*ngroups*d_state + nheads, hidden] rows [z | x | B | C | dt],
    conv1d_weight [conv_dim, d_conv] / conv1d_bias [conv_dim] rows [x | B | C], A_log, D,
    dt_bias [nheads], norm [d_inner], out_proj [hidden, d_inner]."""
    r = _Draws(generator)
    d_inner = g.nheads * g.head_dim
    return {
        "in_proj": r.randn(2 * d_inner + 2 * g.ngroups * g.d_state + g.nheads, hidden_size, fan_in=hidden_size),
        "conv1d_weight": r.randn(g.conv_dim, g.d_conv, fan_in=g.d_conv),
        "conv1d_bias": 0.1 * torch.randn(g.conv_dim, generator=generator),
        "A_log": torch.log(r.uniform(g.nheads, 1, 16)),
        "D": r.uniform(g.nheads, 0.5, 1.5),
        "dt_bias": _inv_softplus(r.uniform(g.nheads, 1e-3, 1e-1)),
        "norm": r.norm(d_inner),
        "out_proj": r.randn(hidden_size, d_inner, fan_in=d_inner),
    }


def _delta_rule_weights(r: _Draws, g) -> Dict[str, Tensor]:
    """conv1d_weight [key_dim*2 + value_dim, d_conv] rows [Q | K | V], A_log [v_heads], norm [head_v_dim]."""
    return {
        "conv1d_weight": r.randn(2 * g.k_heads * g.head_k_dim + g.v_heads * g.head_v_dim, g.d_conv, fan_in=g.d_conv),
        "A_log": torch.log(r.uniform(g.v_heads, 1, 16)),
        "norm": r.norm(g.head_v_dim),
    }


def gdn_random_weights(g, hidden_size: int, generator: torch.Generator) -> Dict[str, Tensor]:
    """in_proj_qkvz rows grouped per key head [q_g | k_g | v_g | z_g], in_proj_ba [b_g | a_g],
    conv1d_weight [key_dim*2 + value_dim, d_conv] rows [Q | K | V], A_log, dt_bias [v_heads],
    norm [head_v_dim], out_proj [hidden, value_dim]."""
    r = _Draws(generator)
    key_dim, value_dim = g.k_heads * g.head_k_dim, g.v_heads * g.head_v_dim
    return {
        **_delta_rule_weights(r, g),
        "in_proj_qkvz": r.randn(2 * key_dim + 2 * value_dim, hidden_size, fan_in=hidden_size),
        "in_proj_ba": r.randn(2 * g.v_heads, hidden_size, fan_in=hidden_size),
        "dt_bias": _inv_softplus(r.uniform(g.v_heads, 1e-3, 1e-1)),
        "out_proj": r.randn(hidden_size, value_dim, fan_in=value_dim),
    }


def kda_random_weights(g, hidden_size: int, generator: torch.Generator) -> Dict[str, Tensor]:
    """q_proj, k_proj [k_heads*head_k_dim, hidden], v_proj [v_heads*head_v_dim, hidden],
    conv1d_weight rows [q | k | v] (the three HF convs stacked), f_a [head_k_dim, hidden],
    f_b [v_heads*head_k_dim, head_k_dim], b_proj [v_heads, hidden], g_a [head_v_dim, hidden],
    g_b [v_heads*head_v_dim, head_v_dim], A_log [v_heads], dt_bias [v_heads*head_k_dim],
    norm [head_v_dim], o_proj [hidden, v_heads*head_v_dim]."""
    r = _Draws(generator)
    key_dim, value_dim = g.k_heads * g.head_k_dim, g.v_heads * g.head_v_dim
    return {
        **_delta_rule_weights(r, g),
        "q_proj": r.randn(key_dim, hidden_size, fan_in=hidden_size),
        "k_proj": r.randn(key_dim, hidden_size, fan_in=hidden_size),
        "v_proj": r.randn(value_dim, hidden_size, fan_in=hidden_size),
        "f_a": r.randn(g.head_k_dim, hidden_size, fan_in=hidden_size),
        "f_b": r.randn(g.v_heads * g.head_k_dim, g.head_k_dim, fan_in=g.head_k_dim),
        "b_proj": r.randn(g.v_heads, hidden_size, fan_in=hidden_size),
        "g_a": r.randn(g.head_v_dim, hidden_size, fan_in=hidden_size),
        "g_b": r.randn(value_dim, g.head_v_dim, fan_in=g.head_v_dim),
        "dt_bias": _inv_softplus(r.uniform(g.v_heads * g.head_k_dim, 1e-3, 1e-1)),
        "o_proj": r.randn(hidden_size, value_dim, fan_in=value_dim),
    }


# --------------------------------------------------------------------------- shared pieces


def causal_conv1d_update(x: Tensor, conv_state: Tensor, weight: Tensor, bias, slot_ids: Tensor) -> Tensor:
    """One decode step of a depthwise causal conv followed by silu.

    Args:
        x: [batch, channels], this token's conv input.
        conv_state: [num_slots, channels, d_conv - 1], the previous inputs, oldest first.
            Mutated for live rows: shifted left by one, x appended (in its dtype).
        weight: [channels, d_conv].   bias: [channels] or None.
        slot_ids: [batch] int; < 0 marks a padding row (its output is 0, no state touched).
    Returns:
        [batch, channels], dtype of x.
    """
    cd = _compute_dtype(x.dtype)
    out = torch.zeros_like(x)
    rows, slots = live_rows(slot_ids)
    if rows.numel() == 0:
        return out
    window = torch.cat([conv_state[slots].to(cd), x[rows, :, None].to(cd)], dim=-1)
    y = (window * weight.to(cd)).sum(-1)
    if bias is not None:
        y = y + bias.to(cd)
    conv_state[slots] = window[..., 1:].to(conv_state.dtype)
    out[rows] = F.silu(y).to(x.dtype)
    return out


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dimension, computed in fp32 (fp64 for fp64 x), dtype of x."""
    cd = _compute_dtype(x.dtype)
    xf = x.to(cd)
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * weight.to(cd)).to(x.dtype)


def _head_norm_gate(o: Tensor, gate: Tensor, weight: Tensor, eps: float, activation) -> Tensor:
    """[batch, heads, head_v_dim] -> rmsnorm over each head, times activation(gate), flattened."""
    cd = _compute_dtype(o.dtype)
    y = rms_norm(o.to(cd), weight, eps) * activation(gate.to(cd))
    return y.reshape(o.shape[0], -1).to(o.dtype)


class _Mixer:
    """Weights of one rank on ``device`` in ``dtype`` (A_log, D, dt_bias in fp32, fp64 for fp64)."""

    def __init__(self, shard, group: TPGroup, dtype: torch.dtype, device) -> None:
        if group.size != shard.tp_size or group.rank != shard.rank:
            raise ValueError(
                f"{type(self).__name__}: shard is rank {shard.rank} of {shard.tp_size}; "
                f"group is rank {group.rank} of {group.size}"
            )
        self.shard, self.group, self.dtype, self.device = shard, group, dtype, device
        self.param_dtype = _compute_dtype(dtype)

    def _act(self, t: Tensor) -> Tensor:
        return t.to(device=self.device, dtype=self.dtype).contiguous()

    def _param(self, t: Tensor) -> Tensor:
        return t.to(device=self.device, dtype=self.param_dtype).contiguous()

    def _out(self, y: Tensor, out_proj: Tensor) -> Tensor:
        """Row-parallel out_proj: this rank's partial product, summed over the group."""
        return self.group.all_reduce_(y @ out_proj.T)


# --------------------------------------------------------------------------- mixers


class Mamba2Mixer(_Mixer):
    """Mamba-2 mixer decode step on one rank (see the module docstring)."""

    kind = MAMBA2

    def __init__(self, weights: Dict[str, Tensor], shard: Mamba2Shard, group: TPGroup, *, dtype: torch.dtype, device) -> None:
        super().__init__(shard, group, dtype, device)
        heads, inner = shard.head_rows(), shard.head_rows(shard.geometry.head_dim)
        conv = shard.conv_rows()
        self.in_proj = self._act(weights["in_proj"][shard.in_proj_rows()])
        self.conv_weight = self._act(weights["conv1d_weight"][conv])
        self.conv_bias = self._act(weights["conv1d_bias"][conv])
        self.A = self._param(-torch.exp(weights["A_log"][heads]))
        self.D = self._param(weights["D"][heads])
        self.dt_bias = self._param(weights["dt_bias"][heads])
        self.norm = self._act(weights["norm"][inner])
        self.out_proj = self._act(weights["out_proj"][:, inner])

    def gated_norm(self, y: Tensor, z: Tensor) -> Tensor:
        """rmsnorm(y * silu(z)) per group of norm_group_size channels; y, z [batch, d_inner_r].

        A rank holds whole groups (split) or 1/replication of one group (replicated); in the
        latter case the per-token sums of squares are all-reduced through a [batch, ngroups]
        buffer in which each rank fills its group's column."""
        s = self.shard
        cd = _compute_dtype(y.dtype)
        yz = y.to(cd) * F.silu(z.to(cd))
        width = min(s.norm_group_size, yz.shape[1])
        parts = yz.view(yz.shape[0], -1, width)
        sum_sq = parts.square().sum(-1)
        if s.replication > 1:
            buf = sum_sq.new_zeros(yz.shape[0], s.geometry.ngroups)
            buf[:, s.first_group] = sum_sq[:, 0]
            sum_sq = self.group.all_reduce_(buf)[:, s.first_group, None]
        normed = parts * torch.rsqrt(sum_sq / s.norm_group_size + MAMBA2_NORM_EPS)[..., None]
        return (normed.reshape_as(yz) * self.norm.to(cd)).to(y.dtype)

    def step(self, h: Tensor, cache, conv_state: Tensor, slot_ids: Tensor, route: str) -> Tensor:
        """h [batch, hidden] -> [batch, hidden] (summed over the group); mutates cache, conv_state.
        slot_ids: [batch] int32 (< 0: padding row), or a :class:`~trtllm_replayssm.checks.SlotBatch`."""
        _check_route("Mamba2Mixer.step", route)
        g = self.shard.local
        batch, d_inner, grouped = h.shape[0], g.nheads * g.head_dim, g.ngroups * g.d_state
        z, xbc, dt = torch.split(h @ self.in_proj.T, [d_inner, d_inner + 2 * grouped, g.nheads], dim=-1)
        xbc = causal_conv1d_update(xbc, conv_state, self.conv_weight, self.conv_bias, slot_tensor(slot_ids))
        x, B, C = torch.split(xbc, [d_inner, grouped, grouped], dim=-1)
        args = (
            x.reshape(batch, g.nheads, g.head_dim),
            dt,
            self.A,
            B.reshape(batch, g.ngroups, g.d_state).contiguous(),
            C.reshape(batch, g.ngroups, g.d_state).contiguous(),
        )
        kw = dict(slot_ids=slot_ids, D=self.D, dt_bias=self.dt_bias, dt_softplus=True)
        if route == "replay":
            y = mamba2_replay_step(cache, *args, **kw)
        else:
            y = mamba2_decode_step(cache.checkpoint, *args, **kw)
        return self._out(self.gated_norm(y.reshape(batch, d_inner), z), self.out_proj)


class _DeltaRuleMixer(_Mixer):
    """Shared parts of the GDN and KDA mixers: conv over [q | k | v], the step, the head norm."""

    def __init__(
        self, weights: Dict[str, Tensor], shard: DeltaRuleShard, group: TPGroup, *, dtype: torch.dtype, device
    ) -> None:
        super().__init__(shard, group, dtype, device)
        self.conv_weight = self._act(weights["conv1d_weight"][shard.conv_rows()])
        self.A_log = self._param(weights["A_log"][shard.value_rows(1)])
        self.norm = self._act(weights["norm"])

    def _core(self, qkv: Tensor, a: Tensor, b: Tensor, cache, conv_state, slot_ids, route) -> Tensor:
        """Conv + silu on qkv [batch, conv_dim_r], gate, step -> o [batch, v_heads_r, head_v_dim]."""
        _check_route(f"{type(self).__name__}.step", route)
        g = self.shard.local
        batch, key_dim = qkv.shape[0], g.k_heads * g.head_k_dim
        qkv = causal_conv1d_update(qkv, conv_state, self.conv_weight, None, slot_tensor(slot_ids))
        q, k, v = torch.split(qkv, [key_dim, key_dim, g.v_heads * g.head_v_dim], dim=-1)
        gk, beta = self.gate(a, b, self.A_log, self.dt_bias)
        args = (
            q.reshape(batch, g.k_heads, g.head_k_dim),
            k.reshape(batch, g.k_heads, g.head_k_dim),
            v.reshape(batch, g.v_heads, g.head_v_dim),
            gk,
            beta,
        )
        if route == "replay":
            return self.replay_step(cache, *args, slot_ids=slot_ids, use_qk_l2norm=True)
        return self.decode_step(cache.checkpoint, *args, slot_ids=slot_ids, use_qk_l2norm=True)


class GDNMixer(_DeltaRuleMixer):
    """Gated DeltaNet mixer decode step on one rank (see the module docstring)."""

    kind = GDN
    gate = staticmethod(gdn_gate)
    decode_step = staticmethod(gdn_decode_step)
    replay_step = staticmethod(gdn_replay_step)

    def __init__(self, weights, shard: DeltaRuleShard, group: TPGroup, *, dtype, device) -> None:
        super().__init__(weights, shard, group, dtype=dtype, device=device)
        self.in_proj_qkvz = self._act(weights["in_proj_qkvz"][shard.gdn_in_proj_qkvz_rows()])
        self.in_proj_ba = self._act(weights["in_proj_ba"][shard.gdn_in_proj_ba_rows()])
        self.dt_bias = self._param(weights["dt_bias"][shard.value_rows(1)])
        self.out_proj = self._act(weights["out_proj"][:, shard.value_rows(shard.geometry.head_v_dim)])

    def step(self, h: Tensor, cache, conv_state: Tensor, slot_ids: Tensor, route: str) -> Tensor:
        """h [batch, hidden] -> [batch, hidden] (summed over the group); mutates cache, conv_state.
        slot_ids: [batch] int32 (< 0: padding row), or a :class:`~trtllm_replayssm.checks.SlotBatch`."""
        g = self.shard.local
        conv_dim = 2 * g.k_heads * g.head_k_dim + g.v_heads * g.head_v_dim
        qkv, z = torch.split(h @ self.in_proj_qkvz.T, [conv_dim, g.v_heads * g.head_v_dim], dim=-1)
        b, a = torch.split(h @ self.in_proj_ba.T, [g.v_heads, g.v_heads], dim=-1)
        o = self._core(qkv, a, b, cache, conv_state, slot_ids, route)
        y = _head_norm_gate(o, z.reshape(o.shape), self.norm, DELTA_NORM_EPS, F.silu)
        return self._out(y, self.out_proj)


class KDAMixer(_DeltaRuleMixer):
    """Kimi Delta Attention mixer decode step on one rank (see the module docstring)."""

    kind = KDA
    gate = staticmethod(kda_gate)
    decode_step = staticmethod(kda_decode_step)
    replay_step = staticmethod(kda_replay_step)

    def __init__(self, weights, shard: DeltaRuleShard, group: TPGroup, *, dtype, device) -> None:
        super().__init__(weights, shard, group, dtype=dtype, device=device)
        geo = shard.geometry
        self.qkv_proj = self._act(
            torch.cat(
                [
                    weights["q_proj"][shard.key_rows(geo.head_k_dim)],
                    weights["k_proj"][shard.key_rows(geo.head_k_dim)],
                    weights["v_proj"][shard.value_rows(geo.head_v_dim)],
                ]
            )
        )
        self.f_a, self.g_a = self._act(weights["f_a"]), self._act(weights["g_a"])
        self.f_b = self._act(weights["f_b"][shard.value_rows(geo.head_k_dim)])
        self.g_b = self._act(weights["g_b"][shard.value_rows(geo.head_v_dim)])
        self.b_proj = self._act(weights["b_proj"][shard.value_rows(1)])
        self.dt_bias = self._param(weights["dt_bias"][shard.value_rows(geo.head_k_dim)])
        self.o_proj = self._act(weights["o_proj"][:, shard.value_rows(geo.head_v_dim)])

    def step(self, h: Tensor, cache, conv_state: Tensor, slot_ids: Tensor, route: str) -> Tensor:
        """h [batch, hidden] -> [batch, hidden] (summed over the group); mutates cache, conv_state.
        slot_ids: [batch] int32 (< 0: padding row), or a :class:`~trtllm_replayssm.checks.SlotBatch`."""
        g = self.shard.local
        a = ((h @ self.f_a.T) @ self.f_b.T).reshape(h.shape[0], g.v_heads, g.head_k_dim)
        o = self._core(h @ self.qkv_proj.T, a, h @ self.b_proj.T, cache, conv_state, slot_ids, route)
        gate = ((h @ self.g_a.T) @ self.g_b.T).reshape(o.shape)
        y = _head_norm_gate(o, gate, self.norm, DELTA_NORM_EPS, torch.sigmoid)
        return self._out(y, self.o_proj)
