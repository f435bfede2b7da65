"""Shared Mamba-2 test helpers: random step inputs, a float64 oracle and error metrics."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}

# Tolerances relative to max |ref|, from the dtypes involved:
# activation dtype: y is rounded to it once (fp32 reordering only for f32, measured ~1e-6).
# checkpoint dtype: rounded at each flush (2^-11 f16, 2^-9 bf16 relative), a random walk over
# the flushes damped by the decay. y sees both.
ACT_TOL = {"f32": 2e-5, "f16": 1e-3, "bf16": 8e-3}
STATE_TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2}


@dataclass(frozen=True)
class Geometry:
    nheads: int
    head_dim: int
    d_state: int
    ngroups: int


@dataclass
class Params:
    """Per-layer parameters (fixed across steps)."""
    A: torch.Tensor
    dt_bias: torch.Tensor
    D: Optional[torch.Tensor]


def make_params(g: Geometry, device, *, D_per_dim: bool = False, has_D: bool = True) -> Params:
    A = -(torch.rand(g.nheads, device=device) + 1.0)          # A in [-2, -1]
    dt_bias = torch.rand(g.nheads, device=device) - 4.0         # softplus(.) ~ 0.02 - 0.05
    if not has_D:
        D = None
    elif D_per_dim:
        D = torch.randn(g.nheads, g.head_dim, device=device)
    else:
        D = torch.randn(g.nheads, device=device)
    return Params(A, dt_bias, D)


def make_step(g: Geometry, batch: int, act_dtype, device, *, with_z: bool = False) -> dict:
    """Random inputs of one decode step (activations in ``act_dtype``)."""
    def r(*shape):
        return torch.randn(*shape, device=device).to(act_dtype)
    return dict(x=r(batch, g.nheads, g.head_dim), dt=r(batch, g.nheads),
                B=r(batch, g.ngroups, g.d_state), C=r(batch, g.ngroups, g.d_state),
                z=r(batch, g.nheads, g.head_dim) if with_z else None)


def as_f64(t):
    return None if t is None else t.detach().to("cpu", torch.float64)


class Oracle:
    """Float64 conventional recurrence on the CPU over the same (already rounded) inputs."""

    def __init__(self, state: torch.Tensor, params: Params):
        self.state = as_f64(state).clone()
        self.p = Params(as_f64(params.A), as_f64(params.dt_bias), as_f64(params.D))

    def step(self, inp: dict, slot_ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(inp["x"].shape, dtype=torch.float64)
        mamba2_decode_step_ref(self.state, as_f64(inp["x"]), as_f64(inp["dt"]), self.p.A,
                               as_f64(inp["B"]), as_f64(inp["C"]), slot_ids=slot_ids.cpu(),
                               D=self.p.D, z=as_f64(inp["z"]), dt_bias=self.p.dt_bias, out=out)
        return out


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max |ref| (float64): scale-aware and NaN-propagating."""
    a = a.detach().to("cpu", torch.float64)
    ref = ref.detach().to("cpu", torch.float64)
    err = (a - ref).abs().max()
    if torch.isnan(err):
        return float("inf")
    return float(err / ref.abs().max().clamp_min(1e-30))


def replay_with_op(cache, inp, p: Params, slot_ids, out):
    from trtllm_replayssm.ops import mamba2_replay_step
    return mamba2_replay_step(cache, inp["x"], inp["dt"], p.A, inp["B"], inp["C"],
                              slot_ids=slot_ids, D=p.D, z=inp["z"], dt_bias=p.dt_bias, out=out)


def replay_with_launcher(cache, inp, p: Params, slot_ids, out):
    from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step
    return launch_mamba2_replay_step(
        cache.checkpoint, cache.x_records, cache.dt_records, cache.B_records, cache.cursor,
        cache.arrivals, inp["x"], inp["dt"], p.A, inp["B"], inp["C"], slot_ids=slot_ids,
        D=p.D, z=inp["z"], dt_bias=p.dt_bias, out=out)


def drive_replay(replay, g: Geometry, L: int, state_dtype, act_dtype, device, *, steps: int,
                 batch: int, num_slots: int, with_z: bool = False, D_per_dim: bool = False,
                 n_padding: int = 1, corrupt=None) -> dict:
    """Run ``steps`` replay steps against the float64 oracle; return the worst errors.

    Rows use random distinct slots of a pool of ``num_slots`` (unused slots are checked to stay
    bit-identical), ``n_padding`` extra padding rows (slot -1) whose output must keep its
    sentinel, and cursors spread over [0, L): row r is first stepped alone r mod L times.
    ``corrupt(cache, step)`` may tamper with the cache (teeth tests).
    """
    from trtllm_replayssm.cache import Mamba2ReplayCache
    p = make_params(g, device, D_per_dim=D_per_dim)
    cache = Mamba2ReplayCache.allocate(num_slots, g.nheads, g.head_dim, g.d_state, g.ngroups, L,
                                       state_dtype=state_dtype, act_dtype=act_dtype, device=device)
    # Unused slots and unused record positions hold garbage that must never be read or touched.
    cache.checkpoint.copy_(torch.randn_like(cache.checkpoint, dtype=torch.float32).to(state_dtype) * 1e3)
    cache.x_records.normal_().mul_(1e3)
    cache.B_records.normal_().mul_(1e3)
    cache.dt_records.uniform_(0, 50)
    perm = torch.randperm(num_slots)[:batch]
    slots = perm.to(torch.int32).to(device)
    init = torch.randn(batch, g.nheads, g.head_dim, g.d_state, device=device)
    cache.admit(slots, init)
    oracle = Oracle(cache.checkpoint, p)
    untouched = torch.ones(num_slots, dtype=torch.bool)
    untouched[perm.long()] = False
    ckpt0 = cache.checkpoint[untouched.to(device)].clone()

    worst = {"y": 0.0, "ckpt": 0.0, "flushes": 0}
    # Spread the cursors: row r alone for r mod L steps.
    for r in range(batch):
        for _ in range(r % L):
            sl = slots[r:r + 1]
            inp = make_step(g, 1, act_dtype, device, with_z=with_z)
            y = replay(cache, inp, p, sl, torch.empty_like(inp["x"]))
            worst["y"] = max(worst["y"], rel_err(y, oracle.step(inp, sl)))
    assert sorted(cache.cursor[slots.long()].tolist()) == sorted(r % L for r in range(batch))

    pad = torch.full((n_padding,), -1, dtype=torch.int32, device=device)
    for step in range(steps):
        order = torch.randperm(batch + n_padding, device=device)
        sl = torch.cat([slots, pad])[order]
        inp = make_step(g, batch + n_padding, act_dtype, device, with_z=with_z)
        out = torch.full_like(inp["x"], 42.0)
        if corrupt is not None:
            corrupt(cache, step)
        y = replay(cache, inp, p, sl, out)
        ref = oracle.step(inp, sl)
        live = (sl >= 0).cpu()
        assert torch.all(y[~live.to(device)] == 42.0), "padding rows must keep their output"
        worst["y"] = max(worst["y"], rel_err(y[live.to(device)], ref[live]))
        cur = cache.cursor[slots.long()].cpu()
        flushed = slots[(cur == 0).to(device)].long()
        if flushed.numel():
            worst["flushes"] += flushed.numel()
            worst["ckpt"] = max(worst["ckpt"], rel_err(cache.checkpoint[flushed], oracle.state[flushed.cpu()]))
    assert torch.equal(cache.checkpoint[untouched.to(device)], ckpt0), "unused slots must stay bit-identical"
    assert torch.all(cache.arrivals == 0)
    return worst
