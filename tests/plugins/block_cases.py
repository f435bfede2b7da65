"""The ``replayssm::mamba2_replay_block`` plugin against the public op, over a layer buffer laid
out as TensorRT-LLM's engine runtime hands it (shared by the CPU interpreter test and the GPU
driver-API test, tests/gpu/test_block_plugin_launch_gpu.py).

One pooled allocation ``[layers, num_slots, nbytes]`` (``RnnStateManager``'s ``pagedRnnStates``:
one fp32 buffer per layer, each layer's address in its own ``rnn_state_ptr_<i>``), uninitialised:
random bytes everywhere, NaN and inf patterns included; the plugin's ``state_ptr`` input holds
layer 1's address. A context step first writes each admitted slot's stock state
``[nheads, d_state, head_dim]`` at ``slot * state_bytes`` (what the stock ``selective_scan``
leaves) and launches the plugin with more tokens than rows; then 3L + 2 generation steps with
padding rows run the plugin and the public op side by side. The op runs on an ordinary cache
holding the same bits as the layer (every slot, stale records included), and after the context
step and every generation step every region of every slot of the layer must equal that cache
bit for bit: the regions tile the layer, so this is the whole layer buffer (unused slots and
never-read record positions untouched). Layer 0 must stay untouched.
"""

from __future__ import annotations

import torch

from trtllm_replayssm.block import ACT_DTYPES
from trtllm_replayssm.cache import Mamba2ReplayCache
from trtllm_replayssm.ops import mamba2_replay_step

LAYERS, LAYER = 2, 1  # the pool holds two layers; the plugin runs on layer 1
SLOTS = (3, 0, 5)  # admitted slots, in this (nontrivial) row order
CONTEXT_ROWS = (SLOTS[0], -1, SLOTS[1], SLOTS[2])
ROWS = (SLOTS[0], -1, SLOTS[1], -1, SLOTS[2])  # a generation step: padding rows between live rows
_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t):
    """``t`` viewed as integers of its element size: NaN-safe bitwise comparison."""
    return t.view(_INT[t.element_size()])


def op_cache_of(block, views, device):
    """An ordinary (dense) ``Mamba2ReplayCache`` holding the block's values bit for bit."""
    cache = Mamba2ReplayCache.allocate(
        views["checkpoint"].shape[0],
        block.nheads,
        block.head_dim,
        block.d_state,
        block.ngroups,
        block.L,
        state_dtype=torch.float32,
        act_dtype=ACT_DTYPES[block.act_dtype],
        device=device,
    )
    for name, v in views.items():
        field = getattr(cache, name)
        bits(field).copy_(bits(v).reshape(field.shape))
    return cache


# Rounding-level agreement for the computed values (outputs, live checkpoints) on a GPU: relative
# tolerance by dtype (fp32 about 80 units in the last place, 16-bit about two), see close_to(). The
# block's regions are only 4-byte aligned (a packed tail; the runtime's buffer), so the entry's compiled
# kernel loads them element by element where the op, on dense 16-byte aligned tensors, loads
# vectors; Triton then lays the [rows, d_state] tiles out differently and sums over d_state in
# another order. Under the CPU interpreter both sum alike and the comparison is bit for bit.
GPU_CLOSE = {"f32": 1e-5, "bf16": 2**-7, "f16": 2**-10}


def close_to(got, want, rtol):
    """``|got - want| <= rtol (|want| + max |want| / 16)`` elementwise: relative, with an absolute
    floor at the tensor's scale for values that cancel to near zero."""
    got, want = got.double(), want.double()
    return bool(((got - want).abs() <= rtol * (want.abs() + want.abs().max() / 16)).all())


def twin_cache_of(block, views, device):
    """A ``Mamba2ReplayCache`` whose checkpoints and records are strided views into a copy of the
    layer (the same block layout, the same bytes), placed so that no float region starts 16-byte
    aligned; its cursor, arrivals and pending are dense copies.

    The block entry loads the layer's address at run time, so the compiler knows no alignment of
    the regions and lays the tiles out for element loads; Triton's JIT specializes the public
    op's pointers by their actual alignment. With none aligned, both compile the same tile
    layouts and sum in the same order: on a GPU, the op on this cache is the bit-exact oracle."""
    num_slots = views["checkpoint"].shape[0]
    nbytes = num_slots * block.nbytes
    store = torch.empty(nbytes + 16, dtype=torch.uint8, device=device)
    floats = ("checkpoint", "dt_records", "x_records", "B_records")
    for shift in (4, 8, 12):
        if all((store.data_ptr() + shift + block.layer_offset(n, num_slots)) % 16 for n in floats):
            break
    else:
        raise AssertionError("no 4-byte shift leaves every float region unaligned")
    twin = block.views(store[shift : shift + nbytes])
    for name, v in views.items():
        bits(twin[name]).copy_(bits(v))
    # the counters are dense (the cache indexes them by slot); they take no part in the sums
    fields = {n: (t[:, 0].contiguous() if n in ("cursor", "arrivals", "pending") else t) for n, t in twin.items()}
    return Mamba2ReplayCache(**fields)


def regions_differing(views, cache, tolerate=None):
    """Names of the block regions that differ from the op cache's (every slot): bit for bit,
    except in the slots of ``tolerate = (slot index, rtol)`` (another kernel's cache, e.g. the
    CUDA step's): there the checkpoints need only agree to ``rtol`` (:func:`close_to`), and the
    records only at the positions before the cursor, the processed dt records to ``rtol`` (the
    CUDA step's softplus differs from the Triton kernel's in the last bits). Positions from the
    cursor on hold anything (the CUDA step writes the step's record at a flush too, the Triton
    kernel does not). Other slots still bit for bit."""
    differing = []
    for n, v in views.items():
        got, want = v.reshape(getattr(cache, n).shape), getattr(cache, n)
        if tolerate is not None and n in ("checkpoint", "x_records", "B_records", "dt_records"):
            idx, rtol = tolerate
            live = torch.zeros(got.shape[0], dtype=torch.bool, device=got.device)
            live[idx] = True
            g, w = got[live], want[live]
            if n != "checkpoint":  # [slot, head or group, position, ...]: positions before the cursor
                before = torch.arange(g.shape[2], device=g.device) < cache.cursor[live].view(-1, 1, 1).long()
                before = before.view(*before.shape, *(1,) * (g.dim() - 3)).expand_as(g)
                g, w = g[before], w[before]
            near = n in ("checkpoint", "dt_records")
            if g.numel() and not (close_to(g, w, rtol) if near else torch.equal(bits(g), bits(w))):
                differing.append(n)
            got, want = got[~live], want[~live]
        if not torch.equal(bits(got), bits(want)):
            differing.append(n)
    return differing


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


def run_case(family, a, launch, *, device, op=public_op, op_cache=op_cache_of, seed=0, exact=True):
    """Run the context step and 3L+2 generation steps; assert outputs and the whole layer buffer
    equal to ``op`` (the public op by default) on ``op_cache(block, views, device)`` (an ordinary
    dense cache by default; :func:`twin_cache_of`: the same layout): bit for bit, or with
    ``exact=False`` outputs and live checkpoints to :data:`GPU_CLOSE` and everything else (records,
    cursors, arrivals, pending, unused slots) still bit for bit. ``launch(spec, inputs, out)``
    launches the plugin's kernel."""
    r, block = a.replay, a.block
    act = ACT_DTYPES[a.act_dtype]
    g = torch.Generator().manual_seed(seed)

    def randn(*shape, dtype=act):
        return torch.randn(shape, generator=g).to(dtype).to(device)

    pool = torch.randint(0, 256, (LAYERS, a.num_slots, block.nbytes), generator=g, dtype=torch.uint8).to(device)
    layer = pool[LAYER]
    views = block.views(layer)
    assert sum(v.numel() * v.element_size() for v in views.values()) == layer.numel(), "the regions tile the layer"
    state_ptr = torch.tensor([layer.data_ptr()], dtype=torch.int64, device=device)
    params = dict(A=-(torch.rand(r.nheads, generator=g) + 1.0).to(device))
    if r.has_D:
        params["D"] = torch.randn(r.nheads, generator=g).to(device)
    if r.has_dt_bias:
        params["dt_bias"] = (torch.rand(r.nheads, generator=g) - 4.0).to(device)

    # context step: the stock plugin's final states, then the plugin admits them
    slots = torch.tensor(SLOTS, dtype=torch.int32, device=device)
    idx = slots.long()
    stock = torch.randn(len(SLOTS), r.nheads, r.d_state, r.head_dim, generator=g).to(device)
    views["checkpoint"].view(a.num_slots, -1)[idx] = stock.reshape(len(SLOTS), -1)
    # the op's cache: the same bits, then admitted with the same checkpoints (its arrivals are
    # zero between launches; the plugin zeroes the runtime buffer's, and its pending)
    cache = op_cache(block, views, device)
    cache.admit(slots, stock.transpose(-1, -2).contiguous())
    cache.arrivals[idx] = 0
    ctx_slots = torch.tensor(CONTEXT_ROWS, dtype=torch.int32, device=device)
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
    out = torch.full_like(ctx_step["x"], 7.0)
    before = pool.clone()
    launch(spec_for(family, a, inputs), inputs, out)
    assert torch.equal(out, torch.full_like(out, 7.0)), "a context step writes no output"
    assert not regions_differing(views, cache), f"context step: {regions_differing(views, cache)} differ from the op's cache"
    assert torch.equal(views["checkpoint"][idx], stock.transpose(-1, -2).contiguous())
    for name in ("cursor", "arrivals", "pending"):
        assert torch.equal(views[name][idx], torch.zeros_like(views[name][idx])), name
    assert torch.equal(pool[0], before[0]), "layer 0 untouched"

    slot_ids = torch.tensor(ROWS, dtype=torch.int32, device=device)
    live = slot_ids >= 0
    rtol = GPU_CLOSE[a.act_dtype]
    for i in range(3 * r.L + 2):
        n = len(ROWS)
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
        same = torch.equal(out[live], y[live]) if exact else close_to(out[live], y[live], rtol)
        assert same, f"step {i}: output differs by {(out[live].float() - y[live].float()).abs().max()}"
        assert torch.equal(out[~live], torch.full_like(out[~live], 7.0)), "padding rows are not written"
        differing = regions_differing(views, cache, None if exact else (idx, GPU_CLOSE["f32"]))
        assert not differing, f"step {i}: {differing} differ from the op's cache"
        assert torch.equal(views["cursor"][idx, 0], torch.full_like(idx, (i + 1) % r.L, dtype=torch.int32)), f"step {i}"
        assert torch.equal(views["arrivals"][idx], torch.zeros_like(views["arrivals"][idx])), f"step {i}"
    assert torch.equal(pool[0], before[0]), "layer 0 untouched"


def spec_for(family, a, inputs):
    from plugin_cases import info_of

    return family.kernel_spec(a, [info_of(t) for t in inputs])
