"""Commit of a speculative verify step, for every family: ReplaySSM (a cursor move) and the
conventional snapshot baseline (copy the accepted snapshot back).

Both read the per-row accepted counts on the device: no host sync, CUDA-graph capturable.
"""
from __future__ import annotations

import triton
import triton.language as tl

from torch import Tensor

from .common import VERIFY_FLUSHED

__all__ = ["launch_replay_commit", "launch_snapshot_commit"]

_COMMIT_ROWS = 128      # rows per program of the replay commit
_COPY_BLOCK = 2048      # state elements per program of the snapshot copy


@triton.jit
def _replay_commit_kernel(cursor_ptr, pending_ptr, slot_ids_ptr, num_accepted_ptr, batch,
                          BLOCK: tl.constexpr):
    """cursor[slot] += num_accepted, pending[slot] := 0 for the live rows of a block of rows."""
    o_b = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot = tl.load(slot_ids_ptr + o_b, mask=o_b < batch, other=-1)
    live = slot >= 0
    slot = tl.where(live, slot, 0).to(tl.int64)
    accepted = tl.load(num_accepted_ptr + o_b, mask=live, other=0)
    w = tl.load(cursor_ptr + slot, mask=live, other=0)
    w = tl.where(w >= VERIFY_FLUSHED, 0, w)  # a flushed GDN/KDA verify row starts from 0
    tl.store(cursor_ptr + slot, w + accepted, mask=live)
    tl.store(pending_ptr + slot, tl.zeros_like(w), mask=live)


def launch_replay_commit(cursor: Tensor, pending: Tensor, slot_ids: Tensor,
                         num_accepted: Tensor) -> None:
    """Advance the cursors of the live rows by their accepted counts (checked by the op)."""
    batch = slot_ids.shape[0]
    _replay_commit_kernel[(triton.cdiv(batch, _COMMIT_ROWS),)](
        cursor, pending, slot_ids, num_accepted, batch, BLOCK=_COMMIT_ROWS, num_warps=4)


@triton.jit
def _snapshot_commit_kernel(state_ptr, stride_state_slot, snap_ptr, stride_snap_slot,
                            stride_snap_tok, slot_ids_ptr, num_accepted_ptr, numel,
                            BLOCK: tl.constexpr):
    """state[slot] := snapshots[slot, num_accepted - 1], BLOCK elements per program."""
    i_c, i_b = tl.program_id(0), tl.program_id(1)
    slot = tl.load(slot_ids_ptr + i_b).to(tl.int64)
    if slot < 0:
        return
    s = tl.load(num_accepted_ptr + i_b).to(tl.int64) - 1
    o = i_c * BLOCK + tl.arange(0, BLOCK)
    m = o < numel
    v = tl.load(snap_ptr + slot * stride_snap_slot + s * stride_snap_tok + o, mask=m)
    tl.store(state_ptr + slot * stride_state_slot + o, v, mask=m)


def launch_snapshot_commit(state: Tensor, snapshots: Tensor, slot_ids: Tensor,
                           num_accepted: Tensor) -> None:
    """Copy each live row's accepted snapshot over its state. state [slot, ...] and
    snapshots [slot, T, ...] are contiguous past their leading dimensions (checked by the op)."""
    numel = state[0].numel()
    grid = (triton.cdiv(numel, _COPY_BLOCK), slot_ids.shape[0])
    _snapshot_commit_kernel[grid](state, state.stride(0), snapshots, snapshots.stride(0),
                                  snapshots.stride(1), slot_ids, num_accepted, numel,
                                  BLOCK=_COPY_BLOCK, num_warps=4)
