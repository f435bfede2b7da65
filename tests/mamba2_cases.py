"""Shared Mamba-2 test helpers: random step inputs, a float64 oracle and error metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from replay_driver import as_f64, rel_err  # noqa: F401  (rel_err re-exported to the tests)
from replay_driver import drive_replay as drive
from trtllm_replayssm.reference.mamba2 import mamba2_decode_step_ref

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64, "fp8": torch.float8_e4m3fn}

# Tolerances relative to max |ref|, from the dtypes involved:
# activation dtype: y is rounded to it once (fp32 reordering only for f32, measured ~1e-6).
# checkpoint dtype: rounded at each flush (2^-11 f16, 2^-9 bf16, fp8-e4m3 with a row scale 2^-4
# relative), a random walk over the flushes damped by the decay. y sees both.
ACT_TOL = {"f32": 2e-5, "f16": 1e-3, "bf16": 8e-3}
STATE_TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2, "fp8": 0.12}


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
    A = -(torch.rand(g.nheads, device=device) + 1.0)  # A in [-2, -1]
    dt_bias = torch.rand(g.nheads, device=device) - 4.0  # softplus(.) ~ 0.02 - 0.05
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

    return dict(
        x=r(batch, g.nheads, g.head_dim),
        dt=r(batch, g.nheads),
        B=r(batch, g.ngroups, g.d_state),
        C=r(batch, g.ngroups, g.d_state),
        z=r(batch, g.nheads, g.head_dim) if with_z else None,
    )


def replay_with_op(cache, inp, p: Params, slot_ids, out):
    from trtllm_replayssm.ops import mamba2_replay_step

    return mamba2_replay_step(
        cache, inp["x"], inp["dt"], p.A, inp["B"], inp["C"], slot_ids=slot_ids, D=p.D, z=inp["z"], dt_bias=p.dt_bias, out=out
    )


def replay_with_launcher(cache, inp, p: Params, slot_ids, out, **launch):
    """The replay step through the launcher; ``launch``: its ``config`` / ``kernel`` keywords."""
    from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step

    return launch_mamba2_replay_step(
        cache.checkpoint,
        cache.x_records,
        cache.dt_records,
        cache.B_records,
        cache.cursor,
        cache.arrivals,
        inp["x"],
        inp["dt"],
        p.A,
        inp["B"],
        inp["C"],
        slot_ids=slot_ids,
        D=p.D,
        z=inp["z"],
        dt_bias=p.dt_bias,
        out=out,
        checkpoint_scale=cache.checkpoint_scale,
        **launch,
    )


class Mamba2Family:
    """The Mamba-2 family for :func:`replay_driver.drive_replay`."""

    out_key = "x"

    def __init__(self, g: Geometry, *, with_z: bool = False, D_per_dim: bool = False):
        self.g, self.with_z, self.D_per_dim = g, with_z, D_per_dim

    def make_params(self, device) -> Params:
        return make_params(self.g, device, D_per_dim=self.D_per_dim)

    def allocate(self, num_slots, L, state_dtype, act_dtype, device):
        from trtllm_replayssm.cache import Mamba2ReplayCache

        g = self.g
        return Mamba2ReplayCache.allocate(
            num_slots,
            g.nheads,
            g.head_dim,
            g.d_state,
            g.ngroups,
            L,
            state_dtype=state_dtype,
            act_dtype=act_dtype,
            device=device,
        )

    @staticmethod
    def poison(cache) -> None:
        cache.x_records.normal_().mul_(1e3)
        cache.B_records.normal_().mul_(1e3)
        cache.dt_records.uniform_(0, 50)

    def make_step(self, batch, act_dtype, device) -> dict:
        return make_step(self.g, batch, act_dtype, device, with_z=self.with_z)

    @staticmethod
    def oracle_step(state64, p: Params, inp: dict, slot_ids) -> torch.Tensor:
        dev = state64.device
        out = torch.zeros(inp["x"].shape, dtype=torch.float64, device=dev)
        f = lambda t: as_f64(t, dev)  # noqa: E731
        mamba2_decode_step_ref(
            state64,
            f(inp["x"]),
            f(inp["dt"]),
            f(p.A),
            f(inp["B"]),
            f(inp["C"]),
            slot_ids=slot_ids.to(dev),
            D=f(p.D),
            z=f(inp["z"]),
            dt_bias=f(p.dt_bias),
            out=out,
        )
        return out


class Oracle:
    """Float64 conventional recurrence on ``device`` (the CPU by default) over the same (already
    rounded) inputs."""

    def __init__(self, state: torch.Tensor, params: Params, device="cpu"):
        self.state = as_f64(state, device).clone()
        self.p = params

    def step(self, inp: dict, slot_ids: torch.Tensor) -> torch.Tensor:
        return Mamba2Family.oracle_step(self.state, self.p, inp, slot_ids)


def drive_replay(
    replay,
    g: Geometry,
    L: int,
    state_dtype,
    act_dtype,
    device,
    *,
    steps: int,
    batch: int,
    num_slots: int,
    with_z: bool = False,
    D_per_dim: bool = False,
    n_padding: int = 1,
    corrupt=None,
) -> dict:
    """:func:`replay_driver.drive_replay` for Mamba-2 (z and per-dim D as options)."""
    return drive(
        Mamba2Family(g, with_z=with_z, D_per_dim=D_per_dim),
        replay,
        L,
        state_dtype,
        act_dtype,
        device,
        steps=steps,
        batch=batch,
        num_slots=num_slots,
        n_padding=n_padding,
        corrupt=corrupt,
    )
