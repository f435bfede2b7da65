"""Entry kernel of the ``replayssm::mamba2_replay_step`` plugin: TensorRT's parameter order.

TensorRT launches an AOT plugin's kernel with input pointers, then scalars, then output
pointers. This entry takes them in that order and runs the core kernel
:func:`trtllm_replayssm.kernels.inline.mamba2_replay_step_kernel` (inlined, so the
numerics are the op's). The cache tensors are aliased plugin inputs/outputs: the entry reads and
writes them through the output pointers; the input pointers of the same buffers are unused.
An fp8 checkpoint's row scales are one more aliased buffer (``HAS_SCALE``); without fp8 that
pointer is a buffer like slot_ids that nothing reads or writes. With ``SR`` a flush rounds
stochastically from the runtime scalar ``sr_seed``.

Rows that the op's validation would refuse are skipped: a slot id >= num_slots, or a live row
whose cursor is outside [0, L). A skipped row reads and writes nothing, like a padding row
(slot id < 0). A TensorRT engine has no error channel, and the builder may time the layer on
buffers it never initialised, so an out-of-range index must not become an out-of-bounds access.
"""
import triton
import triton.language as tl

from trtllm_replayssm.kernels.inline import mamba2_replay_step_kernel

__all__ = ["_mamba2_replay_step_plugin_kernel"]


@triton.jit
def _mamba2_replay_step_plugin_kernel(
    # inputs: checkpoint [slot, nheads, head_dim, d_state], x_records [slot, nheads, L, head_dim],
    # dt_records [slot, nheads, L], B_records [slot, ngroups, L, d_state], cursor, arrivals
    # [slot] (unused: the aliased outputs below are the same buffers)
    checkpoint_in, x_records_in, dt_records_in, B_records_in, cursor_in, arrivals_in,
    # x [batch, nheads, head_dim], dt [batch, nheads], A [nheads], B, C [batch, ngroups, d_state],
    # slot_ids [batch], D [nheads] | [nheads, head_dim], z like x, dt_bias [nheads],
    # checkpoint_scale [slot, nheads, head_dim] f32 with an fp8 checkpoint (unused: aliased)
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, slot_ids_ptr, D_ptr, z_ptr, dt_bias_ptr, checkpoint_scale_in,
    # scalars
    num_slots,
    stride_c_slot, stride_c_head, stride_c_dim, stride_sc_slot, stride_sc_head,
    stride_xr_slot, stride_xr_head, stride_xr_pos,
    stride_dtr_slot, stride_dtr_head,
    stride_Br_slot, stride_Br_group, stride_Br_pos,
    stride_x_batch, stride_x_head, stride_z_batch, stride_z_head, stride_o_batch, stride_o_head,
    stride_dt_batch, stride_dt_head, stride_D_head,
    stride_B_batch, stride_B_group, stride_C_batch, stride_C_group,
    head_dim, d_state, heads_per_group, sr_seed,
    # outputs: y [batch, nheads, head_dim], then the cache buffers (aliased to the inputs)
    out_ptr, checkpoint_ptr, x_records_ptr, dt_records_ptr, B_records_ptr, cursor_ptr, arrivals_ptr,
    checkpoint_scale_ptr,
    L: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_HEAD_DIM: tl.constexpr, SPAN_HEAD_DIM: tl.constexpr, BLOCK_D_STATE: tl.constexpr,
    NUM_STAGES: tl.constexpr, FOLD_TILES: tl.constexpr, FOLD_ROWS: tl.constexpr, FOLD_D_STATE: tl.constexpr,
    FOLD_CHUNKS: tl.constexpr,
    HAS_D: tl.constexpr, D_PER_DIM: tl.constexpr, HAS_Z: tl.constexpr,
    HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_SCALE: tl.constexpr, SR: tl.constexpr,
):
    slot = tl.load(slot_ids_ptr + tl.program_id(2))
    if slot >= num_slots:
        return
    if slot >= 0:
        w = tl.load(cursor_ptr + slot)
        if (w < 0) | (w >= L):
            return
    mamba2_replay_step_kernel(
        checkpoint_ptr, stride_c_slot, stride_c_head, stride_c_dim,
        checkpoint_scale_ptr, stride_sc_slot, stride_sc_head,
        x_records_ptr, stride_xr_slot, stride_xr_head, stride_xr_pos,
        dt_records_ptr, stride_dtr_slot, stride_dtr_head,
        B_records_ptr, stride_Br_slot, stride_Br_group, stride_Br_pos,
        cursor_ptr, arrivals_ptr,
        x_ptr, stride_x_batch, stride_x_head,
        z_ptr, stride_z_batch, stride_z_head,
        out_ptr, stride_o_batch, stride_o_head,
        dt_ptr, stride_dt_batch, stride_dt_head,
        A_ptr, dt_bias_ptr, D_ptr, stride_D_head,
        B_ptr, stride_B_batch, stride_B_group,
        C_ptr, stride_C_batch, stride_C_group,
        slot_ids_ptr,
        head_dim, d_state, heads_per_group,
        sr_seed,
        L, BLOCK_L, BLOCK_HEAD_DIM, SPAN_HEAD_DIM, BLOCK_D_STATE, NUM_STAGES, FOLD_TILES, FOLD_ROWS, FOLD_D_STATE,
        FOLD_CHUNKS,
        HAS_D, D_PER_DIM, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, HAS_SCALE, SR,
    )
