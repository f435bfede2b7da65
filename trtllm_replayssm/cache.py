"""ReplaySSM caches: the per-slot checkpoint, input records and cursor of one SSM layer.

A cache is a plain dataclass of tensors, indexed by physical slot (the engine's paged state
index). The ops in :mod:`trtllm_replayssm.ops` mutate it in place; nothing here launches a kernel.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional, Union

import torch

from torch import Tensor

__all__ = ["Mamba2ReplayCache", "MAX_L"]

MAX_L = 64  # records per slot supported by the replay kernel (a register tile of the window)

_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)


def _check_dtype(owner: str, name: str, dtype: torch.dtype, allowed) -> None:
    if dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise TypeError(f"{owner}: {name} is {dtype}; expected one of {names}")


@dataclass
class Mamba2ReplayCache:
    """Checkpoint + records of one Mamba-2 layer for ``num_slots`` sequences.

    Attributes:
        checkpoint: [num_slots, nheads, head_dim, d_state], fp32 | bf16 | fp16 (| fp64 on CPU).
            The state after the last flush (or admission); rounded to its dtype only at flush.
        x_records: [num_slots, nheads, L, head_dim], activation dtype. Post-conv x of the
            tokens since the checkpoint, position j for the j-th token after it.
        dt_records: [num_slots, nheads, L] fp32 (fp64 with a fp64 cache): processed dt,
            softplus(dt + dt_bias), of those tokens.
        B_records: [num_slots, ngroups, L, d_state], activation dtype: their B.
        cursor: [num_slots] int32 in [0, L): number of records held. A decode step with cursor
            L-1 is a flush; standard decode never writes record position L-1.
        arrivals: [num_slots] int32, zero between launches: the replay kernel counts its
            programs per row here to advance the cursor without a second launch.

    Record positions at or past the cursor hold stale data and are never read.
    """

    checkpoint: Tensor
    x_records: Tensor
    dt_records: Tensor
    B_records: Tensor
    cursor: Tensor
    arrivals: Tensor

    def __post_init__(self) -> None:
        owner = "Mamba2ReplayCache"
        for f in fields(self):
            t = getattr(self, f.name)
            if not isinstance(t, Tensor):
                raise TypeError(f"{owner}: {f.name} is {type(t).__name__}; expected a torch.Tensor")
            if not t.is_contiguous():
                raise ValueError(f"{owner}: {f.name} must be contiguous")
            if t.device != self.checkpoint.device:
                raise ValueError(f"{owner}: {f.name} is on {t.device}; expected {self.checkpoint.device} (the checkpoint's device)")
        if self.checkpoint.dim() != 4:
            raise ValueError(f"{owner}: checkpoint has shape {tuple(self.checkpoint.shape)}; expected [num_slots, nheads, head_dim, d_state]")
        ns, nh, hd, ds = self.checkpoint.shape
        if self.x_records.dim() != 4:
            raise ValueError(f"{owner}: x_records has shape {tuple(self.x_records.shape)}; expected [num_slots, nheads, L, head_dim]")
        L = self.x_records.shape[2]
        if L < 1 or tuple(self.x_records.shape) != (ns, nh, L, hd):
            raise ValueError(f"{owner}: x_records has shape {tuple(self.x_records.shape)}; expected [num_slots, nheads, L, head_dim] = ({ns}, {nh}, L, {hd}) with L >= 1")
        if tuple(self.dt_records.shape) != (ns, nh, L):
            raise ValueError(f"{owner}: dt_records has shape {tuple(self.dt_records.shape)}; expected [num_slots, nheads, L] = ({ns}, {nh}, {L})")
        if self.B_records.dim() != 4 or self.B_records.shape[0] != ns or self.B_records.shape[2:] != (L, ds):
            raise ValueError(f"{owner}: B_records has shape {tuple(self.B_records.shape)}; expected [num_slots, ngroups, L, d_state] = ({ns}, ngroups, {L}, {ds})")
        ng = self.B_records.shape[1]
        if ng < 1 or nh % ng:
            raise ValueError(f"{owner}: ngroups = {ng} must divide nheads = {nh}")
        for name in ("cursor", "arrivals"):
            t = getattr(self, name)
            if tuple(t.shape) != (ns,):
                raise ValueError(f"{owner}: {name} has shape {tuple(t.shape)}; expected [num_slots] = ({ns},)")
            _check_dtype(owner, name, t.dtype, (torch.int32,))
        _check_dtype(owner, "checkpoint", self.checkpoint.dtype, _FLOAT_DTYPES)
        _check_dtype(owner, "x_records", self.x_records.dtype, _FLOAT_DTYPES)
        if self.B_records.dtype != self.x_records.dtype:
            raise TypeError(f"{owner}: B_records is {self.B_records.dtype}; expected {self.x_records.dtype} (the x_records dtype)")
        want_dt = torch.float64 if self.checkpoint.dtype == torch.float64 else torch.float32
        _check_dtype(owner, "dt_records", self.dt_records.dtype, (want_dt,))

    @classmethod
    def allocate(cls, num_slots: int, nheads: int, head_dim: int, d_state: int, ngroups: int,
                 L: int, *, state_dtype: torch.dtype = torch.float32,
                 act_dtype: torch.dtype = torch.bfloat16,
                 device: Union[str, torch.device, None] = None) -> "Mamba2ReplayCache":
        """A zeroed cache (checkpoints zero, cursors 0) for the given geometry."""
        for name, v in (("num_slots", num_slots), ("nheads", nheads), ("head_dim", head_dim),
                        ("d_state", d_state), ("ngroups", ngroups), ("L", L)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Mamba2ReplayCache.allocate: {name} is {v!r}; expected a positive int")
        if L > MAX_L:
            raise ValueError(f"Mamba2ReplayCache.allocate: L is {L}; expected 1 <= L <= {MAX_L}")
        dt_dtype = torch.float64 if state_dtype == torch.float64 else torch.float32
        kw = dict(device=device)
        return cls(
            checkpoint=torch.zeros(num_slots, nheads, head_dim, d_state, dtype=state_dtype, **kw),
            x_records=torch.zeros(num_slots, nheads, L, head_dim, dtype=act_dtype, **kw),
            dt_records=torch.zeros(num_slots, nheads, L, dtype=dt_dtype, **kw),
            B_records=torch.zeros(num_slots, ngroups, L, d_state, dtype=act_dtype, **kw),
            cursor=torch.zeros(num_slots, dtype=torch.int32, **kw),
            arrivals=torch.zeros(num_slots, dtype=torch.int32, **kw),
        )

    # Geometry, derived from the tensors.
    @property
    def num_slots(self) -> int:
        return self.checkpoint.shape[0]

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
    def L(self) -> int:
        return self.x_records.shape[2]

    @property
    def state_dtype(self) -> torch.dtype:
        return self.checkpoint.dtype

    @property
    def act_dtype(self) -> torch.dtype:
        return self.x_records.dtype

    @property
    def device(self) -> torch.device:
        return self.checkpoint.device

    def admit(self, slot_ids: Tensor, state: Optional[Tensor] = None) -> None:
        """Start sequences in ``slot_ids``: checkpoint := ``state`` (or zeros), cursor := 0.

        Args:
            slot_ids: [n] integer slot ids, each in [0, num_slots), distinct.
            state: [n, nheads, head_dim, d_state], e.g. a prefill's final SSM states; any float
                dtype, cast to the checkpoint dtype. None admits zero states.
        """
        slots = _check_slot_list("Mamba2ReplayCache.admit", slot_ids, self.num_slots, self.device)
        if state is not None:
            want = (slots.numel(), self.nheads, self.head_dim, self.d_state)
            if not isinstance(state, Tensor):
                raise TypeError(f"Mamba2ReplayCache.admit: state is {type(state).__name__}; expected a torch.Tensor")
            if tuple(state.shape) != want:
                raise ValueError(f"Mamba2ReplayCache.admit: state has shape {tuple(state.shape)}; expected [n, nheads, head_dim, d_state] = {want}")
            if not state.is_floating_point():
                raise TypeError(f"Mamba2ReplayCache.admit: state is {state.dtype}; expected a floating dtype")
            self.checkpoint[slots] = state.to(self.device, self.checkpoint.dtype)
        else:
            self.checkpoint[slots] = 0
        self.cursor[slots] = 0


def _check_slot_list(owner: str, slot_ids: Tensor, num_slots: int, device: torch.device) -> Tensor:
    """Validated int64 index tensor on ``device`` from a 1-D tensor of distinct slot ids."""
    if not isinstance(slot_ids, Tensor):
        slot_ids = torch.as_tensor(slot_ids)
    if slot_ids.dim() != 1 or slot_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{owner}: slot_ids has shape {tuple(slot_ids.shape)} and dtype {slot_ids.dtype}; expected a 1-D int32/int64 tensor")
    s = slot_ids.to(device=device, dtype=torch.int64)
    if s.numel():
        lo, hi = int(s.min()), int(s.max())
        if lo < 0 or hi >= num_slots:
            raise ValueError(f"{owner}: slot_ids span [{lo}, {hi}]; expected ids in [0, {num_slots})")
        if torch.unique(s).numel() != s.numel():
            raise ValueError(f"{owner}: slot_ids has duplicate ids; expected distinct slots")
    return s
