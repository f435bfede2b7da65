"""ReplaySSM caches: the per-slot checkpoint, input records and cursor of one SSM layer.

A cache is a plain dataclass of tensors, indexed by physical slot (the engine's paged state
index). The ops in :mod:`trtllm_replayssm.ops` mutate it in place; nothing here launches a kernel.

A cache describes views as well as whole tensors: each field needs only a dense last dimension
(any other strides, e.g. the slot stride of a host's cache pool, go to the kernels as they are),
which the constructor checks once. So the same cache class and the same public ops serve a
cache allocated here, one layer of :class:`~trtllm_replayssm.pool.ReplayCachePool`, and
TensorRT-LLM's strided SSM state pool.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Union

import torch

from torch import Tensor

from .checks import FLOAT_DTYPES, check_dtype, check_last_dim_dense, check_positive_int, slot_index
from .reference.rounding import FP8, fp8_row_decode, fp8_row_encode

__all__ = ["Mamba2ReplayCache", "GDNReplayCache", "KDAReplayCache", "MAX_L", "FLOAT_DTYPES", "FP8", "REPLAY_CHECKPOINT_DTYPES"]

MAX_L = 64  # records per slot supported by the replay kernel (a register tile of the window)
# Checkpoint dtypes of the replay caches (fp64 on the CPU reference only; fp8 with row scales).
REPLAY_CHECKPOINT_DTYPES = FLOAT_DTYPES + (FP8,)


def _check_common_fields(cache) -> None:
    """Every field a tensor on the checkpoint's device with a dense last dimension (the optional
    ``checkpoint_scale`` when present); a 4-D checkpoint of the class's dtypes; cursor, arrivals
    and pending int32 [num_slots] (so dense; pending defaults to zeros)."""
    owner = type(cache).__name__
    if cache.pending is None and isinstance(cache.cursor, Tensor):
        cache.pending = torch.zeros_like(cache.cursor)
    for f in fields(cache):
        t = getattr(cache, f.name)
        if t is None and f.name == "checkpoint_scale":
            continue
        if not isinstance(t, Tensor):
            raise TypeError(f"{owner}: {f.name} is {type(t).__name__}; expected a torch.Tensor")
        check_last_dim_dense(owner, f.name, t)
        if t.device != cache.checkpoint.device:
            raise ValueError(
                f"{owner}: {f.name} is on {t.device}; expected {cache.checkpoint.device} (the checkpoint's device)"
            )
    if cache.checkpoint.dim() != 4:
        raise ValueError(
            f"{owner}: checkpoint has shape {tuple(cache.checkpoint.shape)}; expected 4 dimensions [num_slots, heads, rows, columns]"
        )
    check_dtype(owner, "checkpoint", cache.checkpoint.dtype, REPLAY_CHECKPOINT_DTYPES)
    ns = cache.checkpoint.shape[0]
    for name in ("cursor", "arrivals", "pending"):
        t = getattr(cache, name)
        if tuple(t.shape) != (ns,):
            raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; expected [num_slots] = ({ns},)")
        check_dtype(owner, name, t.dtype, (torch.int32,))


def _check_checkpoint_scale(owner: str, cache, dims: str) -> None:
    """An fp8 checkpoint has ``checkpoint_scale`` fp32 of the checkpoint's shape but its last
    dimension (``dims`` names them); another has none."""
    if cache.checkpoint.dtype == FP8:
        if cache.checkpoint_scale is None:
            raise ValueError(f"{owner}: checkpoint is {FP8} without checkpoint_scale; expected {dims} fp32")
        _check_shape(owner, "checkpoint_scale", cache.checkpoint_scale, dims, tuple(cache.checkpoint.shape[:3]))
        check_dtype(owner, "checkpoint_scale", cache.checkpoint_scale.dtype, (torch.float32,))
    elif cache.checkpoint_scale is not None:
        raise ValueError(
            f"{owner}: checkpoint_scale is given with a {cache.checkpoint.dtype} checkpoint; only an fp8 one takes it"
        )


def _check_shape(owner: str, name: str, t: Tensor, dims: str, want: tuple) -> None:
    if tuple(t.shape) != want:
        raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; expected {dims} = {want}")


def _check_sizes(owner: str, **sizes) -> None:
    for name, v in sizes.items():
        check_positive_int(owner, name, v)
    if sizes["L"] > MAX_L:
        raise ValueError(f"{owner}: L is {sizes['L']}; expected 1 <= L <= {MAX_L}")


def _admit(cache, slot_ids: Tensor, state: Optional[Tensor]) -> None:
    """checkpoint[slot_ids] := state (or zeros), cursor[slot_ids] := 0, after all checks."""
    owner = f"{type(cache).__name__}.admit"
    slot_ids = slot_ids if isinstance(slot_ids, Tensor) else torch.as_tensor(slot_ids)
    slots = slot_index(owner, slot_ids, cache.num_slots, cache.device, distinct=True)
    if state is not None:
        want = (slots.numel(),) + tuple(cache.checkpoint.shape[1:])
        if not isinstance(state, Tensor):
            raise TypeError(f"{owner}: state is {type(state).__name__}; expected a torch.Tensor")
        if tuple(state.shape) != want:
            raise ValueError(f"{owner}: state has shape {tuple(state.shape)}; expected [n, *checkpoint.shape[1:]] = {want}")
        if not state.is_floating_point():
            raise TypeError(f"{owner}: state is {state.dtype}; expected a floating dtype")
        if cache.checkpoint.dtype == FP8:
            codes, scale = fp8_row_encode(state.to(cache.device, torch.float32))
            cache.checkpoint[slots] = codes
            cache.checkpoint_scale[slots] = scale
        else:
            cache.checkpoint[slots] = state.to(cache.device, cache.checkpoint.dtype)
    else:
        cache.checkpoint[slots] = 0
        if cache.checkpoint.dtype == FP8:
            cache.checkpoint_scale[slots] = 1.0
    cache.cursor[slots] = 0
    cache.pending[slots] = 0


class _ReplayCache:
    """What every replay cache derives from its tensors: slots, L, dtype, device, admission."""

    _RECORDS = ""  # the name of a [num_slots, heads, L, ...] record tensor
    _GEOMETRY_DIMS: tuple = ()  # the geometry attributes allocate() takes before L, in order
    _RECORD_DTYPE = ""  # allocate()'s keyword for the activation-like records' dtype

    @classmethod
    def for_geometry(
        cls,
        geometry,
        num_slots: int,
        L: int,
        *,
        state_dtype: torch.dtype = torch.float32,
        record_dtype: torch.dtype = torch.bfloat16,
        device: Union[str, torch.device, None] = None,
    ):
        """``allocate`` for a layer geometry (:class:`~trtllm_replayssm.models.Mamba2Geometry`:
        nheads, head_dim, d_state, ngroups; :class:`~trtllm_replayssm.models.DeltaRuleGeometry`:
        k_heads, v_heads, head_k_dim, head_v_dim); ``record_dtype``: x / B or d / k records."""
        dims = [getattr(geometry, name) for name in cls._GEOMETRY_DIMS]
        kw = {cls._RECORD_DTYPE: record_dtype}
        return cls.allocate(num_slots, *dims, L, state_dtype=state_dtype, device=device, **kw)

    @property
    def num_slots(self) -> int:
        return self.checkpoint.shape[0]

    @property
    def L(self) -> int:
        return getattr(self, self._RECORDS).shape[2]

    @property
    def state_dtype(self) -> torch.dtype:
        return self.checkpoint.dtype

    def tensors(self) -> dict:
        """Every tensor of the cache by field name, in field order (an absent optional
        ``checkpoint_scale`` left out)."""
        return {f.name: t for f in fields(self) if (t := getattr(self, f.name)) is not None}

    def clone(self):
        """A copy of the cache with every tensor cloned (same class, dtypes and device)."""
        return type(self)(**{name: t.clone() for name, t in self.tensors().items()})

    def copy_(self, other) -> None:
        """Every tensor of ``other`` (a cache of the same class and shapes) copied into this one's
        in place."""
        for name, t in other.tensors().items():
            getattr(self, name).copy_(t)

    def checkpoint_values(self, slots: Tensor) -> Tensor:
        """The checkpoints of ``slots`` ([n] int64, already checked) as values: the checkpoint
        rows, or an fp8 one's codes times its row scales in fp32. Reads only."""
        if self.checkpoint.dtype == FP8:
            return fp8_row_decode(self.checkpoint[slots], self.checkpoint_scale[slots])
        return self.checkpoint[slots]

    @property
    def device(self) -> torch.device:
        return self.checkpoint.device

    def admit(self, slot_ids: Tensor, state: Optional[Tensor] = None) -> None:
        """Start sequences in ``slot_ids``: checkpoint := ``state`` (or zeros), cursor := 0.

        Args:
            slot_ids: [n] integer slot ids, each in [0, num_slots), distinct.
            state: [n, *checkpoint.shape[1:]], e.g. a prefill's final states (GDN/KDA: in the
                [head_v_dim, head_k_dim] layout; FLA-style [K, V] states must be transposed);
                any float dtype, cast to the checkpoint dtype (an fp8 checkpoint: encoded row by
                row with new scales). None admits zero states.
        """
        _admit(self, slot_ids, state)


def _counters(num_slots: int, device) -> dict:
    """cursor and arrivals of a fresh cache: int32 zeros [num_slots]."""
    return dict(
        cursor=torch.zeros(num_slots, dtype=torch.int32, device=device),
        arrivals=torch.zeros(num_slots, dtype=torch.int32, device=device),
    )


@dataclass
class Mamba2ReplayCache(_ReplayCache):
    """Checkpoint + records of one Mamba-2 layer for ``num_slots`` sequences.

    Attributes:
        checkpoint: [num_slots, nheads, head_dim, d_state], fp32 | bf16 | fp16 | fp8-e4m3 (|
            fp64 on CPU). The state after the last flush (or admission); rounded to its dtype only
            at flush. fp8: codes, each (slot, head, head_dim) row scaled by ``checkpoint_scale``.
        x_records: [num_slots, nheads, L, head_dim], activation dtype. Post-conv x of the
            tokens since the checkpoint, position j for the j-th token after it.
        dt_records: [num_slots, nheads, L] fp32 (fp64 with a fp64 cache): processed dt,
            softplus(dt + dt_bias), of those tokens.
        B_records: [num_slots, ngroups, L, d_state], activation dtype: their B.
        cursor: [num_slots] int32 in [0, L): number of records held. A decode step with cursor
            L-1 is a flush; standard decode never writes record position L-1.
        arrivals: [num_slots] int32, zero between launches: the replay kernel counts its
            programs per row here to advance the cursor without a second launch.
        pending: [num_slots] int32: window records written by a speculative verify and not
            yet committed (0 otherwise; see :mod:`trtllm_replayssm.ops.spec`). Zeros if omitted.
        checkpoint_scale: [num_slots, nheads, head_dim] fp32 with an fp8 checkpoint (a row's
            values are its codes times its scale, max |row| / 448 when it was stored: the
            ``"fp8-row"`` format of :mod:`trtllm_replayssm.reference.rounding`), rewritten with
            the row at each flush; None otherwise.

    Record positions at or past the cursor hold stale data and are never read. An fp8
    checkpoint runs the Triton replay step and verify.
    """

    checkpoint: Tensor
    x_records: Tensor
    dt_records: Tensor
    B_records: Tensor
    cursor: Tensor
    arrivals: Tensor
    pending: Optional[Tensor] = None
    checkpoint_scale: Optional[Tensor] = None

    def __post_init__(self) -> None:
        owner = "Mamba2ReplayCache"
        _check_common_fields(self)
        ns, nh, hd, ds = self.checkpoint.shape
        _check_checkpoint_scale(owner, self, "[num_slots, nheads, head_dim]")
        if self.x_records.dim() != 4:
            raise ValueError(
                f"{owner}: x_records has shape {tuple(self.x_records.shape)}; expected [num_slots, nheads, L, head_dim]"
            )
        L = self.x_records.shape[2]
        if L < 1 or tuple(self.x_records.shape) != (ns, nh, L, hd):
            raise ValueError(
                f"{owner}: x_records has shape {tuple(self.x_records.shape)}; expected [num_slots, nheads, L, head_dim] = ({ns}, {nh}, L, {hd}) with L >= 1"
            )
        if tuple(self.dt_records.shape) != (ns, nh, L):
            raise ValueError(
                f"{owner}: dt_records has shape {tuple(self.dt_records.shape)}; expected [num_slots, nheads, L] = ({ns}, {nh}, {L})"
            )
        if self.B_records.dim() != 4 or self.B_records.shape[0] != ns or self.B_records.shape[2:] != (L, ds):
            raise ValueError(
                f"{owner}: B_records has shape {tuple(self.B_records.shape)}; expected [num_slots, ngroups, L, d_state] = ({ns}, ngroups, {L}, {ds})"
            )
        ng = self.B_records.shape[1]
        if ng < 1 or nh % ng:
            raise ValueError(f"{owner}: ngroups = {ng} must divide nheads = {nh}")
        check_dtype(owner, "x_records", self.x_records.dtype, FLOAT_DTYPES)
        if self.B_records.dtype != self.x_records.dtype:
            raise TypeError(
                f"{owner}: B_records is {self.B_records.dtype}; expected {self.x_records.dtype} (the x_records dtype)"
            )
        want_dt = torch.float64 if self.checkpoint.dtype == torch.float64 else torch.float32
        check_dtype(owner, "dt_records", self.dt_records.dtype, (want_dt,))

    @classmethod
    def allocate(
        cls,
        num_slots: int,
        nheads: int,
        head_dim: int,
        d_state: int,
        ngroups: int,
        L: int,
        *,
        state_dtype: torch.dtype = torch.float32,
        act_dtype: torch.dtype = torch.bfloat16,
        device: Union[str, torch.device, None] = None,
    ) -> "Mamba2ReplayCache":
        """A zeroed cache (checkpoints zero, cursors 0) for the given geometry."""
        _check_sizes(
            "Mamba2ReplayCache.allocate",
            num_slots=num_slots,
            nheads=nheads,
            head_dim=head_dim,
            d_state=d_state,
            ngroups=ngroups,
            L=L,
        )
        dt_dtype = torch.float64 if state_dtype == torch.float64 else torch.float32
        kw = dict(device=device)
        scale = torch.zeros(num_slots, nheads, head_dim, **kw) if state_dtype == FP8 else None
        return cls(
            checkpoint=torch.zeros(num_slots, nheads, head_dim, d_state, dtype=state_dtype, **kw),
            x_records=torch.zeros(num_slots, nheads, L, head_dim, dtype=act_dtype, **kw),
            dt_records=torch.zeros(num_slots, nheads, L, dtype=dt_dtype, **kw),
            B_records=torch.zeros(num_slots, ngroups, L, d_state, dtype=act_dtype, **kw),
            **_counters(num_slots, device),
            checkpoint_scale=scale,
        )

    _RECORDS = "x_records"
    _GEOMETRY_DIMS = ("nheads", "head_dim", "d_state", "ngroups")
    _RECORD_DTYPE = "act_dtype"

    # Geometry, derived from the tensors.
    @property
    def nheads(self) -> int:
        return self.checkpoint.shape[1]

    @property
    def head_dim(self) -> int:
        return self.checkpoint.shape[2]

    @property
    def d_state(self) -> int:
        return self.checkpoint.shape[3]

    @property
    def ngroups(self) -> int:
        return self.B_records.shape[1]

    @property
    def act_dtype(self) -> torch.dtype:
        return self.x_records.dtype


@dataclass
class _DeltaRuleReplayCache(_ReplayCache):
    """Checkpoint + records of one gated delta-rule layer (GDN or KDA) for ``num_slots`` sequences.

    Attributes:
        checkpoint: [num_slots, v_heads, head_v_dim, head_k_dim], fp32 | bf16 | fp16 | fp8-e4m3
            (| fp64 on CPU). The state after the last flush (or admission); rounded to its dtype
            only at flush. fp8: codes, each (slot, head, head_v_dim) row scaled by
            ``checkpoint_scale``.
        d_records: [num_slots, v_heads, L, head_v_dim], record dtype: the corrected updates
            d_j = beta_j (v_j - S'_{j-1} k_j) of the tokens since the checkpoint (not raw v:
            with d the window is a plain decayed sum of outer products d_j k_jᵀ).
        k_records: [num_slots, k_heads, L, head_k_dim], record dtype: their keys after the
            L2 normalisation, once per key head.
        g_records: log-decays of those tokens, [num_slots, v_heads, L] (GDN, one per value
            head) or [num_slots, v_heads, L, head_k_dim] (KDA, one per key channel), in
            :meth:`g_record_dtype`: fp32 (fp64 with a fp64 checkpoint), but KDA's in fp16 beside
            16-bit d and k records.
        cursor: [num_slots] int32 in [0, L): records held. A step with cursor L-1 flushes;
            standard decode never writes record position L-1.
        arrivals: [num_slots] int32, zero between launches (the replay kernel's per-row counter
            that advances the cursor without a second launch; the verify's records launch
            counts on it before it resets a flushed row's cursor).
        pending: [num_slots] int32: window records written by a speculative verify and not
            yet committed (0 otherwise; see :mod:`trtllm_replayssm.ops.spec`). Zeros if omitted.
        checkpoint_scale: [num_slots, v_heads, head_v_dim] fp32 with an fp8 checkpoint (as
            :class:`Mamba2ReplayCache`'s); None otherwise.

    An fp8 checkpoint runs the Triton replay step and verify. The record dtype is the activation
    dtype by default; fp32 records keep d and k unrounded
    (docs/kernel-notes.md measures what that buys). Record positions at or past the cursor hold
    stale data and are never read.
    """

    checkpoint: Tensor
    d_records: Tensor
    k_records: Tensor
    g_records: Tensor
    cursor: Tensor
    arrivals: Tensor
    pending: Optional[Tensor] = None
    checkpoint_scale: Optional[Tensor] = None

    PER_CHANNEL_GATE = False  # KDA: one log-decay per key channel

    def __post_init__(self) -> None:
        owner = type(self).__name__
        _check_common_fields(self)
        ns, hv, dv, dk = self.checkpoint.shape
        _check_checkpoint_scale(owner, self, "[num_slots, v_heads, head_v_dim]")
        if self.d_records.dim() != 4:
            raise ValueError(
                f"{owner}: d_records has shape {tuple(self.d_records.shape)}; expected [num_slots, v_heads, L, head_v_dim]"
            )
        L = self.d_records.shape[2]
        _check_shape(owner, "d_records", self.d_records, "[num_slots, v_heads, L, head_v_dim]", (ns, hv, L, dv))
        if self.k_records.dim() != 4:
            raise ValueError(
                f"{owner}: k_records has shape {tuple(self.k_records.shape)}; expected [num_slots, k_heads, L, head_k_dim]"
            )
        hk = self.k_records.shape[1]
        _check_shape(owner, "k_records", self.k_records, "[num_slots, k_heads, L, head_k_dim]", (ns, hk, L, dk))
        if hk < 1 or hv % hk:
            raise ValueError(f"{owner}: k_heads = {hk} must divide v_heads = {hv}")
        if self.PER_CHANNEL_GATE:
            _check_shape(owner, "g_records", self.g_records, "[num_slots, v_heads, L, head_k_dim]", (ns, hv, L, dk))
        else:
            _check_shape(owner, "g_records", self.g_records, "[num_slots, v_heads, L]", (ns, hv, L))
        check_dtype(owner, "d_records", self.d_records.dtype, FLOAT_DTYPES)
        if self.k_records.dtype != self.d_records.dtype:
            raise TypeError(
                f"{owner}: k_records is {self.k_records.dtype}; expected {self.d_records.dtype} (the d_records dtype)"
            )
        want_g = self.g_record_dtype(self.checkpoint.dtype, self.d_records.dtype)
        check_dtype(owner, "g_records", self.g_records.dtype, (want_g,))

    @classmethod
    def g_record_dtype(cls, state_dtype: torch.dtype, record_dtype: torch.dtype) -> torch.dtype:
        """dtype of the g records: fp64 with a fp64 checkpoint; KDA's per-channel log-decays in
        fp16 beside 16-bit d and k records (half of a record's bytes otherwise; the rounding moves a
        window's decay exp(G) by at most e^-1 2^-11 of the state's scale, a tenth of a bf16
        checkpoint's own rounding: docs/kernel-notes.md, "Session 44"); fp32 otherwise."""
        if state_dtype == torch.float64:
            return torch.float64
        if cls.PER_CHANNEL_GATE and record_dtype.itemsize == 2:
            return torch.float16
        return torch.float32

    @classmethod
    def allocate(
        cls,
        num_slots: int,
        k_heads: int,
        v_heads: int,
        head_k_dim: int,
        head_v_dim: int,
        L: int,
        *,
        state_dtype: torch.dtype = torch.float32,
        record_dtype: torch.dtype = torch.bfloat16,
        device: Union[str, torch.device, None] = None,
    ) -> "_DeltaRuleReplayCache":
        """A zeroed cache (checkpoints zero, cursors 0) for the given geometry.

        ``record_dtype`` is the dtype of d_records and k_records (usually the activation
        dtype; fp32 for unrounded records).
        """
        owner = f"{cls.__name__}.allocate"
        _check_sizes(
            owner, num_slots=num_slots, k_heads=k_heads, v_heads=v_heads, head_k_dim=head_k_dim, head_v_dim=head_v_dim, L=L
        )
        if v_heads % k_heads:
            raise ValueError(f"{owner}: k_heads = {k_heads} must divide v_heads = {v_heads}")
        g_dtype = cls.g_record_dtype(state_dtype, record_dtype)
        g_shape = (num_slots, v_heads, L) + ((head_k_dim,) if cls.PER_CHANNEL_GATE else ())
        kw = dict(device=device)
        return cls(
            checkpoint=torch.zeros(num_slots, v_heads, head_v_dim, head_k_dim, dtype=state_dtype, **kw),
            d_records=torch.zeros(num_slots, v_heads, L, head_v_dim, dtype=record_dtype, **kw),
            k_records=torch.zeros(num_slots, k_heads, L, head_k_dim, dtype=record_dtype, **kw),
            g_records=torch.zeros(g_shape, dtype=g_dtype, **kw),
            **_counters(num_slots, device),
            checkpoint_scale=torch.zeros(num_slots, v_heads, head_v_dim, **kw) if state_dtype == FP8 else None,
        )

    _RECORDS = "d_records"
    _GEOMETRY_DIMS = ("k_heads", "v_heads", "head_k_dim", "head_v_dim")
    _RECORD_DTYPE = "record_dtype"

    # Geometry, derived from the tensors.
    @property
    def k_heads(self) -> int:
        return self.k_records.shape[1]

    @property
    def v_heads(self) -> int:
        return self.checkpoint.shape[1]

    @property
    def head_k_dim(self) -> int:
        return self.checkpoint.shape[3]

    @property
    def head_v_dim(self) -> int:
        return self.checkpoint.shape[2]

    @property
    def record_dtype(self) -> torch.dtype:
        return self.d_records.dtype


class GDNReplayCache(_DeltaRuleReplayCache):
    """Gated DeltaNet cache: one scalar log-decay per (token, value head); g_records [num_slots, v_heads, L]."""

    PER_CHANNEL_GATE = False


class KDAReplayCache(_DeltaRuleReplayCache):
    """Kimi Delta Attention cache: one log-decay per key channel; g_records [num_slots, v_heads, L, head_k_dim]."""

    PER_CHANNEL_GATE = True
