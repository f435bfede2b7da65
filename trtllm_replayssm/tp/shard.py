"""Which rows of a layer's weights, caches and conv states one tensor-parallel rank holds.

TensorRT-LLM's layout (PyTorch backend), so that per-rank buffers drop into its caches:

- **Mamba-2** (``Mamba2TpShard``): rank r of tp holds heads [r*nheads/tp, (r+1)*nheads/tp).
  B and C: ngroups/tp whole groups when tp divides ngroups; when tp is a multiple of ngroups,
  a replica of group ``r // (tp / ngroups)`` (the group its heads belong to). Column-parallel
  ``in_proj`` rows ``[z | x | B | C | dt]`` become ``[z_r | x_r | B_r | C_r | dt_r]`` and
  ``conv1d`` rows ``[x | B | C]`` become ``[x_r | B_r | C_r]``: the rank's conv state is
  [slot, conv_dim_r, d_conv - 1] with conv_dim_r = nheads_r * head_dim + 2 * ngroups_r * d_state.
  With replicated groups a norm group (d_inner / ngroups channels) spans several ranks, so
  the gated RMSNorm all-reduces its per-token sum of squares (``replication > 1``).
- **GDN** (Qwen3-Next / Qwen3.5): key heads and value heads split. The checkpoint's
  ``in_proj_qkvz`` rows are grouped per key head ``[q_g | k_g | v_g | z_g]`` and ``in_proj_ba``
  rows ``[b_g | a_g]``; a rank takes ``[Q_r | K_r | V_r | Z_r]`` and ``[b_r | a_r]`` (TensorRT-LLM's
  dense per-rank order). ``conv1d`` rows ``[Q | K | V]`` become ``[Q_r | K_r | V_r]``.
- **KDA** (Kimi Linear): heads split; q/k/v, f_b, g_b and b projections by head, f_a and g_a
  replicated; conv rows ``[q | k | v]`` become ``[q_r | k_r | v_r]``.

Every family: ``out_proj`` is row-parallel (the columns of the rank's heads), followed by an
all-reduce. Caches: state / checkpoint and per-head records by head, Mamba-2 B records by the
rank's group(s), cursors whole. An impossible split raises ``ValueError`` naming the dimension.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import torch

from torch import Tensor

from ..cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from ..models import DeltaRuleGeometry, Layer, Mamba2Geometry
from ..registry import family, is_ssm, kinds

__all__ = ["Mamba2Shard", "DeltaRuleShard", "layer_shard", "rank_major_rows"]


def _check_rank(owner: str, rank, tp_size: int) -> None:
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < tp_size:
        raise ValueError(f"{owner}: rank is {rank!r}; expected an int in [0, tp_size = {tp_size})")


def _rows(first: int, count: int, width: int, offset: int = 0) -> Tensor:
    """Rows of items first .. first+count-1 of ``width`` rows each, after ``offset`` rows."""
    return torch.arange(offset + first * width, offset + (first + count) * width)


@dataclass(frozen=True)
class Mamba2Shard:
    """Rank ``rank``'s share of a Mamba-2 layer of ``geometry`` (whole) over ``tp_size`` ranks.

    Raises:
        ValueError: nheads not divisible by tp_size, ngroups and tp_size not dividing one
            another, or rank out of range.
    """

    geometry: Mamba2Geometry
    tp_size: int
    rank: int

    def __post_init__(self) -> None:
        self.geometry.for_tp(self.tp_size)
        _check_rank("Mamba2Shard", self.rank, self.tp_size)

    @property
    def local(self) -> Mamba2Geometry:
        """The geometry this rank holds (its cache and kernels see only this)."""
        return self.geometry.for_tp(self.tp_size)

    @property
    def replication(self) -> int:
        """Ranks sharing one group: tp_size / ngroups when tp_size > ngroups, else 1."""
        return max(1, self.tp_size // self.geometry.ngroups)

    @property
    def first_head(self) -> int:
        return self.rank * self.local.nheads

    @property
    def first_group(self) -> int:
        """The first whole-layer group whose B / C this rank holds."""
        if self.replication > 1:
            return self.rank // self.replication
        return self.rank * self.local.ngroups

    @property
    def norm_group_size(self) -> int:
        """Channels of one gated-RMSNorm group of the whole layer: nheads * head_dim / ngroups."""
        g = self.geometry
        return g.nheads * g.head_dim // g.ngroups

    def head_rows(self, width: int = 1, offset: int = 0) -> Tensor:
        """Rows of the rank's heads in a head-major tensor of ``width`` rows per head."""
        return _rows(self.first_head, self.local.nheads, width, offset)

    def group_rows(self, offset: int = 0) -> Tensor:
        """Rows of the rank's groups in a [ngroups * d_state] block at ``offset``."""
        return _rows(self.first_group, self.local.ngroups, self.geometry.d_state, offset)

    def in_proj_rows(self) -> Tensor:
        """Rows of ``in_proj`` [z | x | B | C | dt] the rank holds, as [z_r | x_r | B_r | C_r | dt_r]."""
        g = self.geometry
        d_inner, grouped = g.nheads * g.head_dim, g.ngroups * g.d_state
        return torch.cat(
            [
                self.head_rows(g.head_dim),
                self.head_rows(g.head_dim, d_inner),
                self.group_rows(2 * d_inner),
                self.group_rows(2 * d_inner + grouped),
                self.head_rows(1, 2 * d_inner + 2 * grouped),
            ]
        )

    def conv_rows(self) -> Tensor:
        """Rows of ``conv1d`` (and conv-state channels) [x | B | C] as [x_r | B_r | C_r]."""
        g = self.geometry
        d_inner = g.nheads * g.head_dim
        return torch.cat(
            [self.head_rows(g.head_dim), self.group_rows(d_inner), self.group_rows(d_inner + g.ngroups * g.d_state)]
        )

    def shard_cache(self, cache: Mamba2ReplayCache) -> Mamba2ReplayCache:
        """A copy of the rank's part of a whole-layer cache: checkpoint (and an fp8 one's scales),
        x and dt records by head, B records by group, cursors whole."""
        heads = self.head_rows()
        groups = torch.arange(self.first_group, self.first_group + self.local.ngroups)
        return Mamba2ReplayCache(
            checkpoint=cache.checkpoint[:, heads].contiguous(),
            x_records=cache.x_records[:, heads].contiguous(),
            dt_records=cache.dt_records[:, heads].contiguous(),
            B_records=cache.B_records[:, groups].contiguous(),
            cursor=cache.cursor.clone(),
            arrivals=cache.arrivals.clone(),
            pending=cache.pending.clone(),
            checkpoint_scale=None if cache.checkpoint_scale is None else cache.checkpoint_scale[:, heads].contiguous(),
        )


@dataclass(frozen=True)
class DeltaRuleShard:
    """Rank ``rank``'s share of a GDN or KDA layer of ``geometry`` (whole) over ``tp_size`` ranks.

    Raises:
        ValueError: k_heads or v_heads not divisible by tp_size, or rank out of range.
    """

    geometry: DeltaRuleGeometry
    tp_size: int
    rank: int

    def __post_init__(self) -> None:
        self.geometry.for_tp(self.tp_size)
        _check_rank("DeltaRuleShard", self.rank, self.tp_size)

    @property
    def local(self) -> DeltaRuleGeometry:
        return self.geometry.for_tp(self.tp_size)

    @property
    def heads_per_key_head(self) -> int:
        return self.geometry.v_heads // self.geometry.k_heads

    def key_rows(self, width: int, offset: int = 0) -> Tensor:
        """Rows of the rank's key heads in a key-head-major tensor of ``width`` rows per head."""
        return _rows(self.rank * self.local.k_heads, self.local.k_heads, width, offset)

    def value_rows(self, width: int, offset: int = 0) -> Tensor:
        """Rows of the rank's value heads in a value-head-major tensor of ``width`` rows per head."""
        return _rows(self.rank * self.local.v_heads, self.local.v_heads, width, offset)

    def conv_rows(self) -> Tensor:
        """Rows of the conv weight (and conv-state channels) [Q | K | V] as [Q_r | K_r | V_r]."""
        g = self.geometry
        key_dim = g.k_heads * g.head_k_dim
        return torch.cat(
            [self.key_rows(g.head_k_dim), self.key_rows(g.head_k_dim, key_dim), self.value_rows(g.head_v_dim, 2 * key_dim)]
        )

    def gdn_in_proj_qkvz_rows(self) -> Tensor:
        """Rows of a GDN checkpoint's ``in_proj_qkvz``, grouped per key head as
        [q_g | k_g | v_g | z_g] (v_g, z_g: the key head's value heads), as [Q_r | K_r | V_r | Z_r]."""
        g = self.geometry
        dk, rdv = g.head_k_dim, self.heads_per_key_head * g.head_v_dim
        starts = self.key_rows(2 * dk + 2 * rdv)[:: 2 * dk + 2 * rdv, None]
        parts = [(0, dk), (dk, dk), (2 * dk, rdv), (2 * dk + rdv, rdv)]
        return torch.cat([(starts + at + torch.arange(n)).flatten() for at, n in parts])

    def gdn_in_proj_ba_rows(self) -> Tensor:
        """Rows of a GDN checkpoint's ``in_proj_ba``, grouped per key head as [b_g | a_g], as [b_r | a_r]."""
        r = self.heads_per_key_head
        starts = self.key_rows(2 * r)[:: 2 * r, None]
        return torch.cat([(starts + at + torch.arange(r)).flatten() for at in (0, r)])

    def shard_cache(self, cache: Union[GDNReplayCache, KDAReplayCache]):
        """A copy of the rank's part of a whole-layer cache: checkpoint (and an fp8 one's scales), d
        and g records by value head, k records by key head, cursors whole."""
        v, k = self.value_rows(1), self.key_rows(1)
        return type(cache)(
            checkpoint=cache.checkpoint[:, v].contiguous(),
            d_records=cache.d_records[:, v].contiguous(),
            k_records=cache.k_records[:, k].contiguous(),
            g_records=cache.g_records[:, v].contiguous(),
            cursor=cache.cursor.clone(),
            arrivals=cache.arrivals.clone(),
            pending=cache.pending.clone(),
            checkpoint_scale=None if cache.checkpoint_scale is None else cache.checkpoint_scale[:, v].contiguous(),
        )


Shard = Union[Mamba2Shard, DeltaRuleShard]


def layer_shard(layer: Layer, tp_size: int, rank: int) -> Shard:
    """The shard of an SSM layer (whole-model geometry) for ``rank`` of ``tp_size``: the shard
    rule of the layer's registered family (:mod:`trtllm_replayssm.registry`).

    Raises:
        ValueError: not an SSM layer, or an impossible split (naming the layer).
    """
    if not is_ssm(layer.kind):
        raise ValueError(f"layer_shard: layer {layer.index} is {layer.kind!r}; expected one of {', '.join(kinds())}")
    fam = family(layer.kind)
    fam.check_geometry(f"layer_shard: layer {layer.index}", layer.geometry)
    try:
        return fam.shard(layer.geometry, tp_size, rank)
    except ValueError as e:
        raise ValueError(f"layer {layer.index} ({layer.kind}): {e}") from None


def rank_major_rows(layer: Layer, tp_size: int, rows: str) -> Tensor:
    """Every rank's ``rows`` (a row method name, e.g. ``"in_proj_rows"``) concatenated in rank
    order: the row permutation of a whole weight after which a plain contiguous ``tp_size``-way
    split (TensorRT-LLM's column-parallel ``Linear``) hands each rank its rows. With replicated
    Mamba-2 groups the result has more rows than the weight (B / C rows repeat)."""
    return torch.cat([getattr(layer_shard(layer, tp_size, r), rows)() for r in range(tp_size)])
