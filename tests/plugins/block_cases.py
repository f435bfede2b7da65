"""The ``replayssm::mamba2_replay_block`` plugin against the public op, over a layer buffer laid
out as TensorRT-LLM's engine runtime hands it (shared by the CPU interpreter test and the GPU
driver-API test).

One pooled allocation ``[layers, num_slots, nbytes]`` (``RnnStateManager``'s ``pagedRnnStates``:
one fp32 buffer per layer, each layer's address in its own ``rnn_state_ptr_<i>``); the plugin's
``state_ptr`` input holds layer 1's address. A context step first writes each admitted slot's
stock state ``[nheads, d_state, head_dim]`` at ``slot * state_bytes`` (what the stock
``selective_scan`` leaves) and launches the plugin with more tokens than rows; then 3L + 2
generation steps with padding rows run the plugin and the public op side by side.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.block import ACT_DTYPES
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.ops import mamba2_replay_step

LAYERS, LAYER = 2, 1  # the pool holds two layers; the plugin runs on layer 1
SLOTS = (3, 0, 5)  # admitted slots; rows of a step: these plus padding rows (-1)


def plugin_inputs(family, a, *, state_ptr, step, params, slot_ids):
    """The plugin's inputs in :data:`INPUTS` order (absent optionals replaced, as the op does)."""
    t = {"state_ptr": state_ptr, **step, **params, "slot_ids": slot_ids}
    subst = {"D": "A", "z": "x", "dt_bias": "A"}
    return [t[n] if t.get(n) is not None else t[subst[n]] for n in family.INPUTS]


def public_op(a, cache, step, params, slot_ids):
    """The public op (on a GPU: validation, then the Triton kernel at the op's own launch
    configuration)."""
    return mamba2_replay_step(
        cache,
        step["x"],
        step["dt"],
        params["A"],
        step["B"],
        step["C"],
        slot_ids=slot_ids,
        D=params.get("D"),
        z=step.get("z"),
        dt_bias=params.get("dt_bias"),
        dt_softplus=a.replay.dt_softplus,
    )


def launcher_op(a, cache, step, params, slot_ids):
    """The op's launcher at the plugin's launch configuration (the CPU interpreter's oracle: on
    the CPU the public op runs the float64 reference)."""
    from trtllm_replayssm.kernels.common import LaunchConfig
    from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step

    r = a.replay
    out = torch.empty_like(step["x"])
    launch_mamba2_replay_step(
        cache.checkpoint,
        cache.x_records,
        cache.dt_records,
        cache.B_records,
        cache.cursor,
        cache.arrivals,
        step["x"],
        step["dt"],
        params["A"],
        step["B"],
        step["C"],
        slot_ids=slot_ids,
        D=params.get("D"),
        z=step.get("z"),
        dt_bias=params.get("dt_bias"),
        dt_softplus=r.dt_softplus,
        out=out,
        config=LaunchConfig(r.block_head_dim, r.num_warps, r.chunks, r.num_stages),
    )
    return out


def run_case(family, a, launch, *, device, op=public_op, seed=0):
    """Run the context step and 3L+2 generation steps; assert outputs and caches bit-identical
    to ``op`` (the public op by default). ``launch(spec, inputs, out)`` launches the plugin's
    kernel."""
    from plugin_cases import info_of

    r, block = a.replay, a.block
    act = ACT_DTYPES[a.act_dtype]
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, dtype=act):
        return torch.randn(shape, generator=g).to(dtype).to(device)

    pool = torch.zeros(LAYERS, a.num_slots, block.nbytes, dtype=torch.uint8, device=device)
    pool[LAYER].copy_(torch.randint(0, 256, (a.num_slots, block.nbytes), generator=g, dtype=torch.uint8))
    layer = pool[LAYER]
    views = block.views(layer)
    views["checkpoint"].zero_()  # garbage bytes elsewhere; no NaN can reach a compared row
    for name in ("x_records", "B_records", "dt_records"):
        views[name].zero_()
    state_ptr = torch.tensor([layer.data_ptr()], dtype=torch.int64, device=device)
    params = dict(A=-(torch.rand(r.nheads, generator=g) + 1.0).to(device))
    if r.has_D:
        params["D"] = torch.randn(r.nheads, generator=g).to(device)
    if r.has_dt_bias:
        params["dt_bias"] = (torch.rand(r.nheads, generator=g) - 4.0).to(device)

    # context step: the stock plugin's final states, then the plugin admits them
    slots = torch.tensor(SLOTS, dtype=torch.int32, device=device)
    stock = torch.randn(len(SLOTS), r.nheads, r.d_state, r.head_dim, generator=g).to(device)
    views["checkpoint"].view(a.num_slots, -1)[slots.long()] = stock.reshape(len(SLOTS), -1)
    ctx_slots = torch.tensor([SLOTS[0], -1, SLOTS[1], SLOTS[2]], dtype=torch.int32, device=device)
    tokens = 7  # > rows: a context step
    ctx_step = dict(
        x=randn(tokens, r.nheads, r.head_dim),
        dt=randn(tokens, r.nheads),
        B=randn(tokens, r.ngroups, r.d_state),
        C=randn(tokens, r.ngroups, r.d_state),
    )
    if r.has_z:
        ctx_step["z"] = randn(tokens, r.nheads, r.head_dim)
    inputs = plugin_inputs(family, a, state_ptr=state_ptr, step=ctx_step, params=params, slot_ids=ctx_slots)
    spec = family.kernel_spec(a, [info_of(t) for t in inputs])
    out = torch.full_like(ctx_step["x"], 7.0)
    before = pool.clone()
    launch(spec, inputs, out)
    assert torch.equal(out, torch.full_like(out, 7.0)), "a context step writes no output"
    assert torch.equal(views["checkpoint"][slots.long()], stock.transpose(-1, -2).contiguous())
    for name in ("cursor", "arrivals", "pending"):
        assert torch.equal(views[name][slots.long()], torch.zeros_like(views[name][slots.long()]))
    assert torch.equal(pool[0], before[0]), "layer 0 untouched"

    # the public op's cache, admitted with the same checkpoints
    cache = Mamba2ReplayCache.allocate(
        a.num_slots,
        r.nheads,
        r.head_dim,
        r.d_state,
        r.ngroups,
        r.L,
        state_dtype=torch.float32,
        act_dtype=act,
        device=device,
    )
    cache.admit(slots, stock.transpose(-1, -2).contiguous())
    rows = [SLOTS[0], -1, SLOTS[1], -1, SLOTS[2]]  # padding rows between live rows
    slot_ids = torch.tensor(rows, dtype=torch.int32, device=device)
    live = slot_ids >= 0
    for _ in range(3 * r.L + 2):
        n = len(rows)
        step = dict(
            x=randn(n, r.nheads, r.head_dim),
            dt=randn(n, r.nheads),
            B=randn(n, r.ngroups, r.d_state),
            C=randn(n, r.ngroups, r.d_state),
        )
        if r.has_z:
            step["z"] = randn(n, r.nheads, r.head_dim)
        inputs = plugin_inputs(family, a, state_ptr=state_ptr, step=step, params=params, slot_ids=slot_ids)
        out = torch.full_like(step["x"], 7.0)
        launch(spec_for(family, a, inputs), inputs, out)
        y = op(a, cache, step, params, slot_ids)
        assert torch.equal(out[live], y[live])
        assert torch.equal(out[~live], torch.full_like(out[~live], 7.0)), "padding rows are not written"
        idx = slots.long()
        for name in ("checkpoint", "x_records", "dt_records", "B_records"):
            assert torch.equal(views[name][idx], getattr(cache, name)[idx]), name
        assert torch.equal(views["cursor"][idx, 0], cache.cursor[idx])
    assert torch.equal(pool[0], before[0]), "layer 0 untouched"


def spec_for(family, a, inputs):
    from plugin_cases import info_of

    return family.kernel_spec(a, [info_of(t) for t in inputs])
