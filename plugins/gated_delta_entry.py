"""Entry kernel of the ``replayssm::gated_delta_replay_step`` plugin (GDN and KDA):
TensorRT's parameter order around the core kernel
:func:`trtllm_replayssm.kernels.inline.gated_delta_replay_step_kernel` (inlined).

As for Mamba-2 (:mod:`.mamba2_entry`): the aliased cache buffers are used through the output
pointers; rows with a slot id >= num_slots or a cursor outside [0, L) are skipped. ``SCALE`` is
a constexpr: TensorRT passes only int32 scalars, so the plugin bakes the float in. An fp8
checkpoint's row scales are one more aliased buffer (``HAS_SCALE``; otherwise a buffer like
slot_ids that nothing touches); with ``SR`` a flush rounds stochastically from ``sr_seed``.
"""
import triton
import triton.language as tl

from trtllm_replayssm.kernels.inline import gated_delta_replay_step_kernel

__all__ = ["_gated_delta_replay_step_plugin_kernel"]


@triton.jit
def _gated_delta_replay_step_plugin_kernel(
    # inputs: checkpoint [slot, v_heads, head_v_dim, head_k_dim], d_records [slot, v_heads, L,
    # head_v_dim], k_records [slot, k_heads, L, head_k_dim], g_records [slot, v_heads, L(,
    # head_k_dim)], cursor, arrivals [slot] (unused: the aliased outputs are the same buffers)
    checkpoint_in, d_records_in, k_records_in, g_records_in, cursor_in, arrivals_in,
    # q, k [batch, k_heads, head_k_dim], v [batch, v_heads, head_v_dim], g [batch, v_heads(,
    # head_k_dim)], beta [batch, v_heads], slot_ids [batch], checkpoint_scale [slot, v_heads,
    # head_v_dim] f32 with an fp8 checkpoint (unused: aliased)
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, slot_ids_ptr, checkpoint_scale_in,
    # scalars
    num_slots,
    stride_c_slot, stride_c_head, stride_c_row, stride_sc_slot, stride_sc_head,
    stride_dr_slot, stride_dr_head, stride_dr_pos,
    stride_kr_slot, stride_kr_head, stride_kr_pos,
    stride_gr_slot, stride_gr_head, stride_gr_pos,
    stride_q_batch, stride_q_head, stride_k_batch, stride_k_head, stride_v_batch, stride_v_head,
    stride_g_batch, stride_g_head, stride_beta_batch, stride_beta_head, stride_o_batch, stride_o_head,
    head_v_dim, head_k_dim, v_per_k, sr_seed,
    # outputs: o [batch, v_heads, head_v_dim], then the cache buffers (aliased to the inputs)
    out_ptr, checkpoint_ptr, d_records_ptr, k_records_ptr, g_records_ptr, cursor_ptr, arrivals_ptr,
    checkpoint_scale_ptr,
    SCALE: tl.constexpr,
    L: tl.constexpr, BLOCK_L: tl.constexpr,
    BLOCK_V: tl.constexpr, SPAN_V: tl.constexpr, BLOCK_K: tl.constexpr, NUM_STAGES: tl.constexpr,
    PER_CHANNEL: tl.constexpr, USE_QK_L2NORM: tl.constexpr, HAS_SCALE: tl.constexpr, SR: tl.constexpr,
):
    slot = tl.load(slot_ids_ptr + tl.program_id(2))
    if slot >= num_slots:
        return
    if slot >= 0:
        w = tl.load(cursor_ptr + slot)
        if (w < 0) | (w >= L):
            return
    gated_delta_replay_step_kernel(
        checkpoint_ptr, stride_c_slot, stride_c_head, stride_c_row,
        checkpoint_scale_ptr, stride_sc_slot, stride_sc_head,
        d_records_ptr, stride_dr_slot, stride_dr_head, stride_dr_pos,
        k_records_ptr, stride_kr_slot, stride_kr_head, stride_kr_pos,
        g_records_ptr, stride_gr_slot, stride_gr_head, stride_gr_pos,
        cursor_ptr, arrivals_ptr,
        q_ptr, stride_q_batch, stride_q_head,
        k_ptr, stride_k_batch, stride_k_head,
        v_ptr, stride_v_batch, stride_v_head,
        g_ptr, stride_g_batch, stride_g_head,
        beta_ptr, stride_beta_batch, stride_beta_head,
        out_ptr, stride_o_batch, stride_o_head,
        slot_ids_ptr, SCALE,
        head_v_dim, head_k_dim, v_per_k,
        sr_seed,
        L, BLOCK_L, BLOCK_V, SPAN_V, BLOCK_K, NUM_STAGES, PER_CHANNEL, USE_QK_L2NORM, HAS_SCALE, SR,
    )
