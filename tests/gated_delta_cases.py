"""Shared GDN / KDA test helpers: geometry, random step inputs and caches, and the float64 oracle."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from replay_driver import as_f64
from trtllm_replayssm.reference.gated_delta import gated_delta_decode_step_ref

# Tolerances relative to max |ref| (see mamba2_cases): records rounded to the activation dtype
# enter every output of the window, so the activation tolerance covers the d/k records too.
ACT_TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.5e-2}
STATE_TOL = {"f32": 2e-5, "f16": 4e-3, "bf16": 3e-2, "fp8": 0.12}


@dataclass(frozen=True)
class DeltaGeometry:
    k_heads: int
    v_heads: int
    head_k_dim: int
    head_v_dim: int


def make_step(g: DeltaGeometry, batch: int, act_dtype, device, *, per_channel: bool) -> dict:
    """Random inputs of one decode step: q, k, v in ``act_dtype``; g (log-decay, in
    [-0.4, -0.01]) and beta (in (0, 1)) in fp32, as the models' gate helpers produce them."""

    def r(*shape):
        return torch.randn(*shape, device=device).to(act_dtype)

    gshape = (batch, g.v_heads, g.head_k_dim) if per_channel else (batch, g.v_heads)
    return dict(
        q=r(batch, g.k_heads, g.head_k_dim),
        k=r(batch, g.k_heads, g.head_k_dim),
        v=r(batch, g.v_heads, g.head_v_dim),
        g=-(torch.rand(gshape, device=device) * 0.39 + 0.01),
        beta=torch.sigmoid(torch.randn(batch, g.v_heads, device=device)),
    )


def fill_randomly(cache) -> None:
    """A delta-rule cache's checkpoint N(0, 1) in its dtype (fp8: codes of N(0, 1) times row scales
    in [0.5, 2]), d records N(0, 1), k records unit rows, g records in [-0.3, -0.01]."""
    cache.checkpoint.copy_(torch.randn_like(cache.checkpoint, dtype=torch.float32).to(cache.checkpoint.dtype))
    if cache.checkpoint_scale is not None:
        cache.checkpoint_scale.uniform_(0.5, 2.0)
    torch.nn.init.normal_(cache.d_records)
    cache.k_records.copy_(torch.nn.functional.normalize(torch.randn_like(cache.k_records, dtype=torch.float32), dim=-1))
    cache.g_records.uniform_(-0.3, -0.01)


class DeltaFamily:
    """GDN (``per_channel=False``) or KDA (``per_channel=True``) for :func:`replay_driver.drive_replay`."""

    out_key = "v"

    def __init__(self, g: DeltaGeometry, *, per_channel: bool, record_dtype=None, use_qk_l2norm: bool = True):
        self.g, self.per_channel = g, per_channel
        self.record_dtype, self.use_qk_l2norm = record_dtype, use_qk_l2norm

    @property
    def name(self) -> str:
        return "kda" if self.per_channel else "gdn"

    def make_params(self, device) -> dict:
        return dict(scale=self.g.head_k_dim**-0.5, use_qk_l2norm=self.use_qk_l2norm)

    def allocate(self, num_slots, L, state_dtype, act_dtype, device):
        from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache

        cls = KDAReplayCache if self.per_channel else GDNReplayCache
        g = self.g
        return cls.allocate(
            num_slots,
            g.k_heads,
            g.v_heads,
            g.head_k_dim,
            g.head_v_dim,
            L,
            state_dtype=state_dtype,
            record_dtype=self.record_dtype or act_dtype,
            device=device,
        )

    @staticmethod
    def poison(cache) -> None:
        """Garbage in every record: large values, and NaN in every fourth key record position
        (a record past the cursor must be selected out, never multiplied by zero)."""
        cache.d_records.normal_().mul_(1e3)
        cache.k_records.normal_().mul_(1e3)
        cache.k_records[:, :, ::4] = float("nan")
        cache.g_records.uniform_(-50, 50)

    def make_step(self, batch, act_dtype, device) -> dict:
        return make_step(self.g, batch, act_dtype, device, per_channel=self.per_channel)

    @staticmethod
    def oracle_step(state64, p: dict, inp: dict, slot_ids) -> torch.Tensor:
        dev = state64.device
        out = torch.zeros(inp["v"].shape, dtype=torch.float64, device=dev)
        f = {k: as_f64(inp[k], dev) for k in ("q", "k", "v", "g", "beta")}
        gated_delta_decode_step_ref(
            state64, f["q"], f["k"], f["v"], f["g"], f["beta"], slot_ids=slot_ids.to(dev), out=out, **p
        )
        return out


def replay_with_op(cache, inp, p: dict, slot_ids, out):
    from trtllm_replayssm.ops import gdn_replay_step, kda_replay_step

    step = kda_replay_step if inp["g"].dim() == 3 else gdn_replay_step
    return step(cache, inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], slot_ids=slot_ids, out=out, **p)


def replay_with_launcher(cache, inp, p: dict, slot_ids, out, **launch):
    """The launcher on the cache tensors; ``launch``: its ``config`` / ``kernel`` arguments."""
    from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step

    return launch_gated_delta_replay_step(
        cache.checkpoint,
        cache.d_records,
        cache.k_records,
        cache.g_records,
        cache.cursor,
        cache.arrivals,
        inp["q"],
        inp["k"],
        inp["v"],
        inp["g"],
        inp["beta"],
        slot_ids=slot_ids,
        out=out,
        checkpoint_scale=cache.checkpoint_scale,
        **p,
        **launch,
    )


def replay_with_reference(cache, inp, p: dict, slot_ids, out):
    from trtllm_replayssm.reference.gated_delta import gated_delta_replay_step_ref

    return gated_delta_replay_step_ref(
        cache.checkpoint,
        cache.d_records,
        cache.k_records,
        cache.g_records,
        cache.cursor,
        inp["q"],
        inp["k"],
        inp["v"],
        inp["g"],
        inp["beta"],
        slot_ids=slot_ids,
        out=out,
        checkpoint_scale=cache.checkpoint_scale,
        **p,
    )
