"""One SSM layer's speculative verify on a GPU for timing: replay verify + commit against snapshot
verify + commit and serial conventional steps."""

from __future__ import annotations

import torch

from ..cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from ..kernels.gated_delta_common import multiprocessor_count
from ..kernels.gated_delta_decode import launch_gated_delta_decode_step
from ..kernels.gated_delta_snapshot import launch_gated_delta_snapshot_verify
from ..kernels.gated_delta_verify import (
    gated_delta_verify_flush_launch_config,
    gated_delta_verify_launch_config,
    launch_gated_delta_replay_verify,
)
from ..kernels.mamba2_decode import launch_mamba2_decode_step
from ..kernels.mamba2_snapshot import launch_mamba2_snapshot_verify
from ..kernels.mamba2_verify import launch_mamba2_replay_verify, mamba2_verify_launch_config
from ..kernels.replay_commit import launch_replay_commit, launch_snapshot_commit
from ..memory import ssm_layer_step_traffic
from ..models import KDA, MAMBA2, DeltaRuleGeometry, Mamba2Geometry
from ..ops import SnapshotCache, spec_buffer_len
from .timing import POOL_BYTES, slot_sets, time_graph, torch_dtype


VERIFY_ROUTES = ("replay", "snapshot", "serial")


def model_geometry(family: str, geom: tuple):
    return Mamba2Geometry(*geom, d_conv=4) if family == MAMBA2 else DeltaRuleGeometry(*geom, d_conv=4)


class VerifyCase:
    """Speculative verify of T tokens per row: inputs, caches and per-set accepted counts for
    one (family, geometry, T, batch, dtypes) point. Routes: ``"replay"`` (replay verify +
    commit), ``"snapshot"`` (conventional snapshot verify + commit) and ``"serial"`` (T
    conventional decode steps). Subclasses build the family's inputs and caches and launch its
    kernels. Accepted counts are drawn per row as 1 + Binomial(T - 1, p) with mean
    ``accept`` * T and stay fixed per slot set."""

    min_block = 1  # fewest state rows per tile the replay verify kernel takes (--sweep)
    kernel = "auto"  # the replay launcher's kernel argument: "auto", "triton" or "cuda"

    def __init__(self, family, geom, batch, T, B, state, act, accept, seed=0, device="cuda", pool_bytes=POOL_BYTES):
        self.family, self.geom, self.batch, self.T, self.B = family, geom, batch, T, B
        self.state, self.act, self.device = torch_dtype(state), torch_dtype(act), device
        torch.manual_seed(seed)  # accepted counts
        self.g = torch.Generator(device=device).manual_seed(seed)
        state_dims = self.state_dims()
        sets = slot_sets(batch, torch.Size(state_dims).numel() * self.state.itemsize, self.g, pool_bytes)
        self.num_slots = len(sets) * batch
        p = (accept * T - 1) / (T - 1) if T > 1 else 0.0
        self.sets = [
            (s, (1 + torch.binomial(torch.full((batch,), float(T - 1)), torch.full((batch,), p))).to(torch.int32).to(device))
            for s in sets
        ]
        self.mean_accepted = float(torch.cat([a for _, a in self.sets]).float().mean())
        self.make_inputs()
        self.cache = self.allocate_replay(self.num_slots)
        self.cache.checkpoint.copy_(self.randn(*self.cache.checkpoint.shape, dtype=torch.float32))
        self.fill_records()
        self.cache.cursor.copy_(torch.randint(0, B, (self.num_slots,), device=device, generator=self.g, dtype=torch.int32))
        self.snap = SnapshotCache.allocate(self.num_slots, state_dims, T, dtype=self.state, device=device)
        self.snap.state.copy_(self.cache.checkpoint)
        self.conv_state = self.snap.state  # the serial route's state (updated in place)
        self.out = torch.empty_like(self.out_like())

    def randn(self, *s, dtype=None):
        return torch.randn(*s, device=self.device, generator=self.g).to(dtype or self.act)

    def step(self, route, slots, accepted, out=None, config=None):
        out = self.out if out is None else out
        if route == "replay":
            self.replay_verify(slots, out, config)
            launch_replay_commit(self.cache.cursor, self.cache.pending, slots, accepted)
        elif route == "snapshot":
            self.snapshot_verify(slots, out)
            launch_snapshot_commit(self.snap.state, self.snap.snapshots, slots, accepted)
        elif route == "serial":
            for s in range(self.T):
                self.conventional_step(s, slots, out)
        else:
            raise ValueError(route)

    def time(self, route, reps=5, config=None):
        return time_graph(lambda sa: self.step(route, *sa, config=config), self.sets, reps)

    def refcheck(self) -> float:
        """The three routes from one state over B / T + 2 all-accepted steps (a flush
        included): worst relative difference of replay and serial outputs to the snapshot's."""
        slots, _ = self.sets[0]
        idx = slots.long()
        c, snap = self.cache, self.snap
        watched = list(c.tensors().values()) + [snap.state]
        saved = [t[idx].clone() for t in watched]
        c.cursor[idx] = 0
        snap.state[idx] = c.checkpoint[idx].to(snap.state.dtype)
        self.conv_state = snap.state.clone()
        all_in = torch.full_like(slots, self.T)
        worst = 0.0
        for _ in range(self.B // self.T + 2):
            outs = {route: torch.empty_like(self.out) for route in VERIFY_ROUTES}
            for route in VERIFY_ROUTES:
                self.step(route, slots, all_in, outs[route])
            ref = outs["snapshot"].float()
            for route in ("replay", "serial"):
                worst = max(worst, float((outs[route].float() - ref).abs().max() / ref.abs().max()))
        for t, v in zip(watched, saved):
            t[idx] = v
        self.conv_state = snap.state
        return worst

    def bytes_per_step(self, route) -> float:
        """Cache bytes moved per step for the batch (step inputs and outputs not counted)."""
        kw = dict(
            buffer_len=self.B,
            spec_tokens=self.T,
            accepted=self.mean_accepted,
            state_dtype=self.state,
            record_dtype=self.act,
            conv_dtype=self.act,
        )
        mode = {"replay": "replay_spec", "snapshot": "conventional_spec", "serial": "conventional"}[route]
        t = ssm_layer_step_traffic(self.family, model_geometry(self.family, self.geom), mode, **kw)
        ssm = t.total - t.conv_read - t.conv_written
        if route == "snapshot":
            ssm += 2 * t.state_read  # the commit copies the accepted snapshot back
        if route == "serial":
            ssm *= self.T
        return ssm * self.batch


class Mamba2VerifyCase(VerifyCase):
    def state_dims(self):
        H, P, N, G = self.geom
        return (H, P, N)

    def make_inputs(self):
        H, P, N, G = self.geom
        b, T = self.batch, self.T
        self.x, self.dt = self.randn(b, T, H, P), self.randn(b, T, H)
        self.Bm, self.C = self.randn(b, T, G, N), self.randn(b, T, G, N)
        self.A = -(torch.rand(H, device=self.device, generator=self.g) + 1)
        self.dt_bias = torch.rand(H, device=self.device, generator=self.g) - 4
        self.D = torch.randn(H, device=self.device, generator=self.g)

    def out_like(self):
        return self.x

    def allocate_replay(self, num_slots):
        H, P, N, G = self.geom
        return Mamba2ReplayCache.allocate(
            num_slots,
            H,
            P,
            N,
            G,
            spec_buffer_len(self.B, self.T),
            state_dtype=self.state,
            act_dtype=self.act,
            device=self.device,
        )

    def fill_records(self):
        self.cache.x_records.normal_(generator=self.g)
        self.cache.B_records.normal_(generator=self.g)
        self.cache.dt_records.uniform_(0.01, 0.05, generator=self.g)

    def _kw(self, slots, out):
        return dict(slot_ids=slots, D=self.D, dt_bias=self.dt_bias, out=out)

    def rows(self):
        return self.geom[1]  # head_dim: the state rows of one head

    def default_config(self):
        H, P, N, G = self.geom
        return mamba2_verify_launch_config(P, N, self.batch, self.state)

    def replay_verify(self, slots, out, config=None):
        c = self.cache
        launch_mamba2_replay_verify(
            c.checkpoint,
            c.x_records,
            c.dt_records,
            c.B_records,
            c.cursor,
            c.arrivals,
            c.pending,
            self.x,
            self.dt,
            self.A,
            self.Bm,
            self.C,
            config=config,
            kernel=self.kernel,
            **self._kw(slots, out),
        )

    def snapshot_verify(self, slots, out):
        launch_mamba2_snapshot_verify(
            self.snap.state, self.snap.snapshots, self.x, self.dt, self.A, self.Bm, self.C, **self._kw(slots, out)
        )

    def conventional_step(self, s, slots, out):
        launch_mamba2_decode_step(
            self.conv_state, self.x[:, s], self.dt[:, s], self.A, self.Bm[:, s], self.C[:, s], **self._kw(slots, out[:, s])
        )


class DeltaVerifyCase(VerifyCase):
    """GDN/KDA. ``swept_launch``: which of the two verify launches a given ``config`` (and
    :meth:`default_config`) sets, ``"non-flush"`` or ``"flush"``; the other keeps its rule.
    ``history_product``: the non-flush launch's history weights as tile products (True), a
    record at a time (False) or by the rule (None: ``gated_delta_verify_history_product``)."""

    min_block = 16  # the verify kernel's tiles are tensor-core operands
    swept_launch = "non-flush"
    history_product = None

    def state_dims(self):
        hk, hv, dk, dv = self.geom
        return (hv, dv, dk)

    def make_inputs(self):
        hk, hv, dk, dv = self.geom
        b, T = self.batch, self.T
        self.q, self.k, self.v = self.randn(b, T, hk, dk), self.randn(b, T, hk, dk), self.randn(b, T, hv, dv)
        gshape = (b, T, hv, dk) if self.family == KDA else (b, T, hv)
        self.gate = -(torch.rand(gshape, device=self.device, generator=self.g) * 0.39 + 0.01)
        self.beta = torch.sigmoid(torch.randn(b, T, hv, device=self.device, generator=self.g))
        self.scale = dk**-0.5

    def out_like(self):
        return self.v

    def allocate_replay(self, num_slots):
        cls = KDAReplayCache if self.family == KDA else GDNReplayCache
        return cls.allocate(
            num_slots,
            *self.geom,
            spec_buffer_len(self.B, self.T),
            state_dtype=self.state,
            record_dtype=self.act,
            device=self.device,
        )

    def fill_records(self):
        self.cache.d_records.normal_(generator=self.g)
        self.cache.k_records.normal_(generator=self.g)
        self.cache.g_records.uniform_(-0.4, -0.01, generator=self.g)

    def _kw(self, slots, out):
        return dict(slot_ids=slots, scale=self.scale, use_qk_l2norm=True, out=out)

    def rows(self):
        return self.geom[3]  # head_v_dim: the state rows of one value head

    def default_config(self):
        hk, hv, dk, dv = self.geom
        mps = multiprocessor_count(self.q.device)
        if self.swept_launch == "flush":
            return gated_delta_verify_flush_launch_config(
                dv, dk, self.batch * hv, self.state, multiprocessors=mps, per_channel=self.gate.dim() == 4
            )
        return gated_delta_verify_launch_config(dv, dk, self.batch * hv, self.state, multiprocessors=mps)

    def replay_verify(self, slots, out, config=None):
        c = self.cache
        launch_gated_delta_replay_verify(
            c.checkpoint,
            c.d_records,
            c.k_records,
            c.g_records,
            c.cursor,
            c.pending,
            self.q,
            self.k,
            self.v,
            self.gate,
            self.beta,
            **{"flush_config" if self.swept_launch == "flush" else "config": config},
            history_product=self.history_product,
            kernel=self.kernel,
            **self._kw(slots, out),
        )

    def snapshot_verify(self, slots, out):
        launch_gated_delta_snapshot_verify(
            self.snap.state, self.snap.snapshots, self.q, self.k, self.v, self.gate, self.beta, **self._kw(slots, out)
        )

    def conventional_step(self, s, slots, out):
        launch_gated_delta_decode_step(
            self.conv_state,
            self.q[:, s],
            self.k[:, s],
            self.v[:, s],
            self.gate[:, s],
            self.beta[:, s],
            **self._kw(slots, out[:, s]),
        )


def make_verify_case(family, *args, **kw) -> VerifyCase:
    return (Mamba2VerifyCase if family == MAMBA2 else DeltaVerifyCase)(family, *args, **kw)
