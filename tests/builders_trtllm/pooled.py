"""Test helpers: TensorRT-LLM V2-style pool views and small layer geometries.

TensorRT-LLM's V2 manager coalesces same-sized per-layer buffers inside each slot, so one
layer's state is a view ``[num_slots, *shape]`` whose slot stride is ``scale`` times the state
size (``_get_state_buffer``). :func:`pool_view` builds such a view over a poisoned buffer, so a
test can check that nothing outside the view is written.
"""

import math

import torch

from trtllm_replayssm.models import DeltaRuleGeometry, Mamba2Geometry

POISON = 1e30  # finite in fp32/bf16/fp64; fp16 buffers use its largest finite value

# Small geometries (ngroups / k_heads < heads, as in Nemotron-3 and Qwen3.5).
MAMBA2_GEOMETRY = Mamba2Geometry(nheads=4, head_dim=8, d_state=16, ngroups=2, d_conv=4)
GDN_GEOMETRY = DeltaRuleGeometry(k_heads=2, v_heads=4, head_k_dim=16, head_v_dim=8, d_conv=4)
KDA_GEOMETRY = DeltaRuleGeometry(k_heads=3, v_heads=3, head_k_dim=16, head_v_dim=16, d_conv=4)


def pool_view(num_slots, shape, dtype, *, scale=3, position=1, fill=0.0):
    """(view [num_slots, *shape] with slot stride scale * prod(shape), the backing buffer).

    The view holds ``fill``; the rest of the buffer holds POISON (or -7 for integer dtypes)."""
    n = math.prod(shape)
    if dtype == torch.float16:
        poison = torch.finfo(torch.float16).max
    else:
        poison = POISON if dtype.is_floating_point else -7
    raw = torch.full((num_slots * scale * n,), poison, dtype=dtype)
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    view = raw.as_strided((num_slots,) + tuple(shape), (scale * n,) + tuple(reversed(strides)), position * n)
    view.fill_(fill)
    return view, raw


def outside(view, raw):
    """The backing buffer's elements outside ``view``, as a flat tensor (a copy)."""
    mask = torch.ones(raw.numel(), dtype=torch.bool)
    index = torch.arange(raw.numel()).as_strided(view.shape, view.stride(), view.storage_offset())
    mask[index.flatten()] = False
    return raw[mask].clone()


def state_shape(kind, g):
    if kind == "mamba2":
        return (g.nheads, g.head_dim, g.d_state)
    return (g.v_heads, g.head_v_dim, g.head_k_dim)


def trtllm_cache_description(kind, g, tp):
    """What TensorRT-LLM's V2 Mamba cache manager computes for one rank (its formulas, as read in
    mamba_cache_manager_v2.py): Mamba-2 directly; GDN / KDA with nheads = v_heads,
    head_dim = head_v_dim, d_state = head_k_dim, n_groups = k_heads, layout q_k_v."""
    if kind == "mamba2":
        nheads, head_dim, d_state, n_groups, layout = g.nheads, g.head_dim, g.d_state, g.ngroups, "x_b_c"
    else:
        nheads, head_dim, d_state, n_groups, layout = (g.v_heads, g.head_v_dim, g.head_k_dim, g.k_heads, "q_k_v")
    d_inner, grouped = nheads * head_dim, n_groups * d_state
    sections = (
        (d_inner // tp, grouped // tp, grouped // tp) if layout == "x_b_c" else (grouped // tp, grouped // tp, d_inner // tp)
    )
    return dict(
        ssm_state_shape=(nheads // tp, head_dim, d_state),
        conv_state_shape=((d_inner + 2 * grouped) // tp, g.d_conv - 1),
        conv_section_dims=sections,
        conv_state_layout=layout,
    )
