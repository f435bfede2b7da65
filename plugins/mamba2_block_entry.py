"""Entry kernel of the ``replayssm::mamba2_replay_block`` plugin: the replay step on a layer's
state block (:mod:`trtllm_replayssm.block`) that an engine runtime hands over as one pointer.

TensorRT launches it with input pointers, scalars, output pointers (TensorRT's AOT order). The
first input holds the device address of the layer's buffer (int64 ``[1]``); the entry loads it
and derives every cache pointer from the block layout (offsets are constexprs, the tails start
after ``num_slots`` checkpoints). Then:

- **context step** (``num_tokens != batch``: some row has more than one token): TensorRT-LLM's
  stock ``selective_scan`` has just written each row's final state at its slot, in its layout
  ``[nheads, d_state, head_dim]``. The program ``(0, h, row)`` transposes head ``h`` of that
  state in place to the replay checkpoint layout ``[nheads, head_dim, d_state]``; program
  ``(0, 0, row)`` also zeroes the slot's cursor, arrivals and pending. Nothing else is read.
- **generation step** (one token per row): the core replay kernel
  :func:`trtllm_replayssm.kernels.inline.mamba2_replay_step_kernel`, inlined, on the
  block's strided views, so the numerics are the op's. The core kernel addresses the cursor and
  arrivals as ``ptr + slot`` (dense); the entry hands it pointers shifted by
  ``slot * (tail stride - 1)`` so that ``ptr + slot`` lands in the slot's tail.

Padding rows (slot id < 0), slot ids >= num_slots and live rows with a cursor outside [0, L)
are skipped, as in :mod:`.mamba2_entry`. The kernel bodies of the core package are unchanged.
"""
import triton
import triton.language as tl

from trtllm_replayssm.kernels.inline import mamba2_replay_step_kernel

__all__ = ["_mamba2_replay_block_plugin_kernel"]


@triton.jit
def _admit_stock_state(ckpt, head, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr, head_dim, d_state):
    """Transpose one head's state [d_state, head_dim] (stock) to [head_dim, d_state] in place."""
    p = ckpt + head * head_dim * d_state
    o_n = tl.arange(0, BLOCK_N)
    o_p = tl.arange(0, BLOCK_P)
    m = (o_n[:, None] < d_state) & (o_p[None, :] < head_dim)
    tile = tl.load(p + o_n[:, None] * head_dim + o_p[None, :], mask=m, other=0.0)
    tl.debug_barrier()  # every thread has loaded before any thread overwrites
    tl.store(p + o_p[None, :] * d_state + o_n[:, None], tile, mask=m)


@triton.jit
def _mamba2_replay_block_plugin_kernel(
    # inputs: state_ptr [1] int64 (device address of the layer buffer), x [tokens, nheads,
    # head_dim], dt [tokens, nheads], A [nheads], B, C [tokens, ngroups, d_state], slot_ids
    # [batch], D [nheads] | [nheads, head_dim], z like x, dt_bias [nheads]
    state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, slot_ids_ptr, D_ptr, z_ptr, dt_bias_ptr,
    # scalars
    num_tokens, batch, num_slots,
    stride_c_slot, stride_c_head, stride_c_dim,
    stride_xr_slot, stride_xr_head, stride_xr_pos,
    stride_dtr_slot, stride_dtr_head,
    stride_Br_slot, stride_Br_group, stride_Br_pos,
    stride_x_batch, stride_x_head, stride_z_batch, stride_z_head, stride_o_batch, stride_o_head,
    stride_dt_batch, stride_dt_head, stride_D_head,
    stride_B_batch, stride_B_group, stride_C_batch, stride_C_group,
    head_dim, d_state, heads_per_group,
    # output: y [tokens, nheads, head_dim] (generation steps only)
    out_ptr,
    STATE_BYTES: tl.constexpr, TAIL_I32: tl.constexpr,
    OFF_DTR: tl.constexpr, OFF_CUR: tl.constexpr, OFF_ARR: tl.constexpr, OFF_PEND: tl.constexpr,
    OFF_XR: tl.constexpr, OFF_BR: tl.constexpr, BLOCK_HEAD_DIM_ALL: tl.constexpr,
    L: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_HEAD_DIM: tl.constexpr, SPAN_HEAD_DIM: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
    NUM_STAGES: tl.constexpr, FOLD_TILES: tl.constexpr, FOLD_ROWS: tl.constexpr, FOLD_D_STATE: tl.constexpr,
    FOLD_CHUNKS: tl.constexpr,
    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
):
    slot = tl.load(slot_ids_ptr + tl.program_id(2))
    if slot >= num_slots:
        return
    base = tl.load(state_ptr).to(tl.pointer_type(tl.int8))
    ckpt = base.to(tl.pointer_type(tl.float32))
    tails = base + num_slots.to(tl.int64) * STATE_BYTES
    # cursor / arrivals as the core kernel indexes them (ptr + slot), landing in the slot's tail
    shift = slot.to(tl.int64) * (TAIL_I32 - 1)
    cursor = (tails + OFF_CUR).to(tl.pointer_type(tl.int32)) + shift
    arrivals = (tails + OFF_ARR).to(tl.pointer_type(tl.int32)) + shift
    if num_tokens != batch:
        if (slot >= 0) & (tl.program_id(0) == 0):
            _admit_stock_state(ckpt + slot.to(tl.int64) * stride_c_slot, tl.program_id(1),
                               BLOCK_D_STATE, BLOCK_HEAD_DIM_ALL, head_dim, d_state)
            if tl.program_id(1) == 0:
                tl.store(cursor + slot, 0)
                tl.store(arrivals + slot, 0)
                tl.store((tails + OFF_PEND).to(tl.pointer_type(tl.int32)) + shift + slot, 0)
        return
    if slot >= 0:
        w = tl.load(cursor + slot)
        if (w < 0) | (w >= L):
            return
    mamba2_replay_step_kernel(
        ckpt, stride_c_slot, stride_c_head, stride_c_dim,
        ckpt, 0, 0,  # no row scales: the block plugin takes fp32 checkpoints
        (tails + OFF_XR).to(x_ptr.dtype), stride_xr_slot, stride_xr_head, stride_xr_pos,
        (tails + OFF_DTR).to(tl.pointer_type(tl.float32)), stride_dtr_slot, stride_dtr_head,
        (tails + OFF_BR).to(x_ptr.dtype), stride_Br_slot, stride_Br_group, stride_Br_pos,
        cursor, arrivals,
        x_ptr, stride_x_batch, stride_x_head,
        z_ptr, stride_z_batch, stride_z_head,
        out_ptr, stride_o_batch, stride_o_head,
        dt_ptr, stride_dt_batch, stride_dt_head,
        A_ptr, dt_bias_ptr, D_ptr, stride_D_head,
        B_ptr, stride_B_batch, stride_B_group,
        C_ptr, stride_C_batch, stride_C_group,
        slot_ids_ptr,
        head_dim, d_state, heads_per_group,
        0,  # no stochastic rounding
        L, BLOCK_L, BLOCK_HEAD_DIM, SPAN_HEAD_DIM, BLOCK_D_STATE, NUM_STAGES, FOLD_TILES, FOLD_ROWS, FOLD_D_STATE,
        FOLD_CHUNKS,
        HAS_D, D_PER_DIM, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, False, False,
    )
