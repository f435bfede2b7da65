"""Timing of one SSM layer's decode and speculative verify steps on a GPU, and the logic behind
``trtllm-replayssm bench``.

The method, shared with the benchmarks in ``benchmarks/`` (they import these pieces):

- every route's step is captured in a CUDA graph of one step per *slot set*: disjoint random
  sets of ``batch`` slots whose states fill :data:`POOL_BYTES` (several times a GPU's L2), so
  consecutive steps read their state from HBM, as in a model where other layers run in between;
- replay cursors start spread over [0, L) and advance every step, so flushes come at their
  real share;
- each figure is the median of 5 medians of ``triton.testing.do_bench``; ratios are taken
  within one run, and bandwidth is compared with a device-to-device copy timed in the same run;
- a refcheck of the replay outputs against the conventional ones precedes the timing.

Bytes moved come from :mod:`trtllm_replayssm.memory` (the planner's model).
"""

from __future__ import annotations

import datetime
import itertools
import json
import math
import os
import statistics
from typing import Callable, Optional, Sequence, Union

import torch

from .cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from .kernels.common import mamba2_launch_config
from .kernels.gated_delta_common import gated_delta_launch_config
from .kernels.gated_delta_decode import launch_gated_delta_decode_step
from .kernels.gated_delta_replay import launch_gated_delta_replay_step
from .kernels.gated_delta_snapshot import launch_gated_delta_snapshot_verify
from .kernels.gated_delta_verify import gated_delta_verify_launch_config, launch_gated_delta_replay_verify
from .kernels.mamba2_decode import launch_mamba2_decode_step
from .kernels.mamba2_replay import launch_mamba2_replay_step
from .kernels.mamba2_snapshot import launch_mamba2_snapshot_verify
from .kernels.mamba2_verify import launch_mamba2_replay_verify, mamba2_verify_launch_config
from .kernels.replay_commit import launch_replay_commit, launch_snapshot_commit
from .memory import mamba2_step_bytes, ssm_layer_step_traffic
from .models import GDN, KDA, MAMBA2, DeltaRuleGeometry, HybridModel, Mamba2Geometry
from .ops import SnapshotCache, spec_buffer_len
from .planner import DTYPE_NAMES, _groups

__all__ = [
    "POOL_BYTES",
    "REFCHECK_TOL",
    "DT",
    "copy_bandwidth",
    "slot_sets",
    "time_graph",
    "header",
    "results_stem",
    "write_json",
    "plot_speedups",
    "DecodeCase",
    "Mamba2DecodeCase",
    "GatedDeltaDecodeCase",
    "VERIFY_ROUTES",
    "model_geometry",
    "VerifyCase",
    "Mamba2VerifyCase",
    "DeltaVerifyCase",
    "make_verify_case",
    "case_geometry",
    "bench_plan",
    "run_bench",
    "format_bench",
    "plot_bench",
]

POOL_BYTES = 512 << 20  # state bytes per case, several times the H200's 60 MB L2
REFCHECK_TOL = 5e-2  # replay vs conventional outputs (relative max error) before timing
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def _dtype(d: Union[str, torch.dtype]) -> torch.dtype:
    return DT[d] if isinstance(d, str) else d


# --------------------------------------------------------------------------- timing


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median)."""
    import triton.testing as tt

    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = tt.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    return 2 * (1 << 30) / (ms * 1e-3)


def slot_sets(batch: int, state_bytes_per_row: int, generator, pool_bytes: int = POOL_BYTES) -> list:
    """Disjoint random sets of ``batch`` slots, enough of them that their states fill
    ``pool_bytes``: consecutive steps use different sets, so the state comes from HBM as in a
    real model (other layers run in between). The pool has len(sets) * batch slots, on the
    generator's device."""
    sets = max(1, math.ceil(pool_bytes / (batch * state_bytes_per_row)))
    perm = torch.randperm(sets * batch, device=generator.device, generator=generator).to(torch.int32)
    return [perm[i * batch : (i + 1) * batch].contiguous() for i in range(sets)]


def time_graph(step, sets: list, reps: int = 5):
    """Median per-step seconds of ``step(slot_ids)`` over a CUDA graph of one step per slot
    set (``reps`` medians of do_bench), and the samples in ms."""
    import triton.testing as tt

    for s in sets[:2]:
        step(s)  # compile + warm
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for s in sets:
            step(s)
    samples = [tt.do_bench(graph.replay, warmup=10, rep=60, return_mode="median") / len(sets) for _ in range(reps)]
    del graph
    return statistics.median(samples) * 1e-3, samples


# --------------------------------------------------------------------------- results files


def header(name: str, copy_bw: float) -> str:
    import triton

    return (
        f"# bench {name} | {datetime.date.today()} | {torch.cuda.get_device_name()} | "
        f"torch {torch.__version__} | triton {triton.__version__} | copy {copy_bw / 1e12:.2f} TB/s"
    )


def results_stem(out_dir: str, name: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    gpu = torch.cuda.get_device_name().split()[-1].lower()
    return os.path.join(out_dir, f"{datetime.date.today()}-{gpu}-{name}")


def write_json(stem: str, copy_bw: float, rows: list, **meta) -> None:
    import triton

    with open(stem + ".json", "w") as f:
        json.dump(
            dict(
                device=torch.cuda.get_device_name(),
                date=str(datetime.date.today()),
                torch=torch.__version__,
                triton=triton.__version__,
                copy_bytes_per_s=copy_bw,
                **meta,
                rows=rows,
            ),
            f,
            indent=1,
        )


def _replay_line(r: dict) -> Optional[str]:
    return f"replay L={r['L']}" if r["route"] == "replay_step" else None


def plot_speedups(
    rows: list,
    path: str,
    panels: list,
    title: str,
    *,
    series: Callable[[dict], Optional[str]] = _replay_line,
    ylabel: str = "speedup vs conventional kernel",
) -> None:
    """One panel per (label, predicate on rows); a line of speedup vs batch per ``series(row)``
    (rows it maps to None are left out; default: a line per L of the replay rows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), sharey=True, squeeze=False)
    for ax, (label, keep) in zip(axes[0], panels):
        sel = [r for r in rows if keep(r) and series(r) is not None]
        for line in dict.fromkeys(series(r) for r in sel):
            pts = sorted((r["batch"], r["speedup"]) for r in sel if series(r) == line)
            ax.plot(*zip(*pts), marker="o", label=line)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_title(f"{title}\n{label}", fontsize=9)
        ax.legend()
    axes[0][0].set_ylabel(ylabel)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- decode cases


class DecodeCase:
    """Base of a decode benchmark case. A subclass sets ``cache``, ``slot_sets``, ``L`` and
    ``out`` and defines ``step(route, slots, config)`` (``"decode_step"`` runs in place on
    ``conv_state``, ``"replay_step"`` on the cache, output into ``out``) and
    ``conventional(state, slots, out)`` (the conventional step on a given state)."""

    def min_block(self, route) -> int:
        """Fewest state rows per tile ``route``'s kernel takes (``sweep_configs``)."""
        return 1

    def time(self, route, config=None, reps=5):
        """Median per-step seconds (and samples) of ``route`` over the slot sets."""
        return time_graph(lambda slots: self.step(route, slots, config), self.slot_sets, reps)

    def refcheck(self) -> float:
        """Replay vs conventional outputs over L+1 steps from the same state (rel. max
        error); the cache is restored afterwards."""
        c = self.cache
        slots = self.slot_sets[0]
        saved = {k: v.clone() for k, v in vars(c).items()}
        c.cursor[slots.long()] = 0
        state = c.checkpoint.clone()
        worst = 0.0
        for _ in range(self.L + 1):
            y_conv = torch.empty_like(self.out)
            self.conventional(state, slots, y_conv)
            self.step("replay_step", slots)
            worst = max(worst, float((self.out.float() - y_conv.float()).abs().max() / y_conv.float().abs().max()))
        for k, v in saved.items():
            getattr(c, k).copy_(v)
        return worst


class Mamba2DecodeCase(DecodeCase):
    """Inputs, caches and launches for one Mamba-2 (geometry, batch, L, dtypes) point;
    ``geom`` is (nheads, head_dim, d_state, ngroups)."""

    def __init__(self, geom, batch, L, state, act, seed=0, device="cuda", pool_bytes=POOL_BYTES):
        self.nheads, self.head_dim, self.d_state, self.ngroups = geom
        self.rows = self.head_dim  # state rows per head, for the launch-configuration sweep
        self.batch, self.L, self.state, self.act = batch, L, _dtype(state), _dtype(act)
        g = torch.Generator(device=device).manual_seed(seed)
        self.slot_sets = slot_sets(batch, self.nheads * self.head_dim * self.d_state * self.state.itemsize, g, pool_bytes)
        self.num_slots = len(self.slot_sets) * batch
        H, P, N, G = self.nheads, self.head_dim, self.d_state, self.ngroups

        def r(*s, dtype=self.act):
            return torch.randn(*s, device=device, generator=g).to(dtype)

        self.x, self.dt, self.B, self.C = r(batch, H, P), r(batch, H), r(batch, G, N), r(batch, G, N)
        self.A = -(torch.rand(H, device=device, generator=g) + 1)
        self.dt_bias = torch.rand(H, device=device, generator=g) - 4
        self.D = torch.randn(H, device=device, generator=g)
        self.out = torch.empty_like(self.x)
        self.cache = Mamba2ReplayCache.allocate(
            self.num_slots, H, P, N, G, L, state_dtype=self.state, act_dtype=self.act, device=device
        )
        self.cache.checkpoint.copy_(r(*self.cache.checkpoint.shape, dtype=torch.float32))
        self.cache.x_records.normal_(generator=g)
        self.cache.B_records.normal_(generator=g)
        self.cache.dt_records.uniform_(0.01, 0.05, generator=g)
        self.cache.cursor.copy_(torch.randint(0, L, (self.num_slots,), device=device, generator=g, dtype=torch.int32))
        self.conv_state = self.cache.checkpoint  # the conventional kernel updates it in place

    def _common(self, slots):
        return dict(slot_ids=slots, D=self.D, dt_bias=self.dt_bias, out=self.out)

    def step(self, route, slots, config=None):
        c = self.cache
        if route == "decode_step":
            launch_mamba2_decode_step(
                self.conv_state, self.x, self.dt, self.A, self.B, self.C, config=config, **self._common(slots)
            )
        elif route == "replay_step":
            launch_mamba2_replay_step(
                c.checkpoint,
                c.x_records,
                c.dt_records,
                c.B_records,
                c.cursor,
                c.arrivals,
                self.x,
                self.dt,
                self.A,
                self.B,
                self.C,
                config=config,
                **self._common(slots),
            )
        else:
            raise ValueError(route)

    def conventional(self, state, slots, out):
        launch_mamba2_decode_step(
            state, self.x, self.dt, self.A, self.B, self.C, slot_ids=slots, D=self.D, dt_bias=self.dt_bias, out=out
        )

    def default_config(self, route):
        return mamba2_launch_config(route, self.head_dim, self.d_state, self.batch, self.state)

    def bytes_per_step(self, route):
        b = mamba2_step_bytes(
            route,
            nheads=self.nheads,
            head_dim=self.head_dim,
            d_state=self.d_state,
            ngroups=self.ngroups,
            L=self.L,
            state_dtype=self.state,
            act_dtype=self.act,
        )
        return b.total * self.batch


class GatedDeltaDecodeCase(DecodeCase):
    """Inputs, caches and launches for one GDN or KDA (geometry, batch, L, dtypes) point;
    ``geom`` is (k_heads, v_heads, head_k_dim, head_v_dim)."""

    def __init__(self, family, geom, batch, L, state, act, seed=0, device="cuda", pool_bytes=POOL_BYTES):
        self.family, self.per_channel = family, family == KDA
        self.k_heads, self.v_heads, self.head_k_dim, self.head_v_dim = geom
        self.rows = self.head_v_dim  # state rows per head, for the launch-configuration sweep
        self.batch, self.L, self.state, self.act = batch, L, _dtype(state), _dtype(act)
        g = torch.Generator(device=device).manual_seed(seed)
        HK, HV, K, V = geom
        self.slot_sets = slot_sets(batch, HV * V * K * self.state.itemsize, g, pool_bytes)
        self.num_slots = len(self.slot_sets) * batch

        def r(*s, dtype=self.act):
            return torch.randn(*s, device=device, generator=g).to(dtype)

        self.q, self.k, self.v = r(batch, HK, K), r(batch, HK, K), r(batch, HV, V)
        gshape = (batch, HV, K) if self.per_channel else (batch, HV)
        self.g = -(torch.rand(gshape, device=device, generator=g) * 0.1 + 0.001)
        self.beta = torch.rand(batch, HV, device=device, generator=g)
        self.out = torch.empty_like(self.v)
        cls = KDAReplayCache if self.per_channel else GDNReplayCache
        self.cache = cls.allocate(
            self.num_slots, HK, HV, K, V, L, state_dtype=self.state, record_dtype=self.act, device=device
        )
        c = self.cache
        c.checkpoint.copy_(r(*c.checkpoint.shape, dtype=torch.float32) * 0.1)
        c.d_records.normal_(generator=g)
        c.k_records.copy_(torch.nn.functional.normalize(r(*c.k_records.shape, dtype=torch.float32), dim=-1))
        c.g_records.uniform_(-0.1, -0.001, generator=g)
        c.cursor.copy_(torch.randint(0, L, (self.num_slots,), device=device, generator=g, dtype=torch.int32))
        self.conv_state = c.checkpoint  # the conventional kernel updates it in place
        self.kw = dict(scale=K**-0.5, use_qk_l2norm=True, out=self.out)

    def step(self, route, slots, config=None):
        c = self.cache
        args = (self.q, self.k, self.v, self.g, self.beta)
        if route == "decode_step":
            launch_gated_delta_decode_step(self.conv_state, *args, slot_ids=slots, config=config, **self.kw)
        elif route == "replay_step":
            launch_gated_delta_replay_step(
                c.checkpoint,
                c.d_records,
                c.k_records,
                c.g_records,
                c.cursor,
                c.arrivals,
                *args,
                slot_ids=slots,
                config=config,
                **self.kw,
            )
        else:
            raise ValueError(route)

    def conventional(self, state, slots, out):
        launch_gated_delta_decode_step(
            state, self.q, self.k, self.v, self.g, self.beta, slot_ids=slots, **{**self.kw, "out": out}
        )

    def min_block(self, route):
        return 16 if route == "replay_step" else 1  # the replay flush's tile product (replay_constexprs)

    def default_config(self, route):
        return gated_delta_launch_config(route, self.head_v_dim, self.head_k_dim, self.batch * self.v_heads, self.state)

    def bytes_per_step(self, route):
        geom = DeltaRuleGeometry(
            k_heads=self.k_heads, v_heads=self.v_heads, head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim, d_conv=4
        )
        t = ssm_layer_step_traffic(
            KDA if self.per_channel else GDN,
            geom,
            "conventional" if route == "decode_step" else "replay",
            buffer_len=self.L,
            spec_tokens=1,
            accepted=1.0,
            state_dtype=self.state,
            record_dtype=self.act,
            conv_dtype=self.act,
        )
        io = sum(t.numel() * t.element_size() for t in (self.q, self.k, self.v, self.g, self.beta, self.out))
        return (t.total - t.conv_read - t.conv_written + io / self.batch) * self.batch


# --------------------------------------------------------------------------- verify cases

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

    def __init__(self, family, geom, batch, T, B, state, act, accept, seed=0, device="cuda", pool_bytes=POOL_BYTES):
        self.family, self.geom, self.batch, self.T, self.B = family, geom, batch, T, B
        self.state, self.act, self.device = _dtype(state), _dtype(act), device
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
        watched = [getattr(c, f) for f in vars(c)] + [snap.state]
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
    min_block = 16  # the verify kernel's tiles are tensor-core operands

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
        return gated_delta_verify_launch_config(dv, dk, self.batch * hv, self.state)

    def replay_verify(self, slots, out, config=None):
        c = self.cache
        launch_gated_delta_replay_verify(
            c.checkpoint,
            c.d_records,
            c.k_records,
            c.g_records,
            c.cursor,
            c.arrivals,
            c.pending,
            self.q,
            self.k,
            self.v,
            self.gate,
            self.beta,
            config=config,
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


# --------------------------------------------------------------------------- trtllm-replayssm bench

# step -> (conventional route, replay route); what the table calls them.
STEPS = {"decode": ("decode_step", "replay_step"), "verify": ("snapshot", "replay")}
_BASELINE_LABEL = {"decode": "conventional step", "verify": "snapshot verify"}


def case_geometry(kind: str, geometry) -> tuple:
    """The cases' geometry tuple of a layer: Mamba-2 (nheads, head_dim, d_state, ngroups), GDN /
    KDA (k_heads, v_heads, head_k_dim, head_v_dim)."""
    if kind == MAMBA2:
        return (geometry.nheads, geometry.head_dim, geometry.d_state, geometry.ngroups)
    return (geometry.k_heads, geometry.v_heads, geometry.head_k_dim, geometry.head_v_dim)


def bench_plan(model: HybridModel, batches: Sequence[int], spec_tokens: Optional[int] = None) -> list:
    """What :func:`run_bench` times, in order: (layer group, step, batch) for each SSM layer
    group of ``model`` (one kind and geometry), ``"decode"`` and, with ``spec_tokens``,
    ``"verify"``."""
    steps = ("decode", "verify") if spec_tokens else ("decode",)
    return [(g, step, b) for g in _groups(model.ssm_layers) for step in steps for b in batches]


def _timed(case, route, timer):
    seconds, samples = timer(case, route)
    return seconds, [float(s) for s in samples]


def run_bench(
    model: HybridModel,
    *,
    batches: Sequence[int] = (1, 16, 64, 256),
    L: int = 16,
    state_dtype: torch.dtype = torch.float32,
    act_dtype: torch.dtype = torch.bfloat16,
    spec_tokens: Optional[int] = None,
    accept: float = 0.7,
    device="cuda",
    pool_bytes: int = POOL_BYTES,
    copy_bw: Optional[float] = None,
    timer: Optional[Callable] = None,
    progress: bool = True,
    seed: int = 0,
) -> dict:
    """Times the conventional and replay steps of every SSM layer group of ``model`` (one rank's
    geometry) at each batch, and with ``spec_tokens`` T the speculative verify (replay verify +
    commit against snapshot verify + commit; history B = L, window T, accepted tokens drawn with
    mean ``accept`` * T).

    Each case is refchecked first (replay against conventional outputs from one state, through a
    flush); a case over :data:`REFCHECK_TOL` is reported and not timed.

    Args:
        timer: ``timer(case, route) -> (seconds, samples_ms)``; default ``case.time(route)``
            (CUDA graphs: needs a GPU). Tests pass a stand-in to run the rest on a CPU.
        copy_bw: device copy bandwidth, bytes read + written per second (default: measured).
        device, pool_bytes: where the cases live and the state bytes their slot sets fill.

    Returns:
        dict: ``rows`` (one per layer group, step and batch: ``kind``, ``count`` (layers of that
        group), ``geometry``, ``step``, ``batch``, ``conventional_s`` / ``replay_s`` (median
        seconds per step of one layer), ``conventional_samples_ms`` / ``replay_samples_ms``,
        ``conventional_bytes`` / ``replay_bytes`` (modelled bytes per step, the batch),
        ``conventional_pct_copy`` / ``replay_pct_copy``, ``speedup``, ``refcheck``, ``status``
        ("ok", "refcheck failed" or the error that stopped the case), ``accepted_mean`` (verify));
        ``totals`` (per step and batch, all SSM layers: ``conventional_s``, ``replay_s``,
        ``speedup``, for the batches whose every group was timed); ``copy_bytes_per_s``.
    """
    from tqdm import tqdm

    timer = timer or (lambda case, route: case.time(route))
    copy_bw = copy_bandwidth() if copy_bw is None else copy_bw
    plan = bench_plan(model, batches, spec_tokens)
    rows = []
    bar = tqdm(plan, desc="bench", unit="case", disable=not progress, leave=False)
    for group, step, batch in bar:
        geom = case_geometry(group.kind, group.geometry)
        bar.set_postfix_str(f"{group.kind} {step} batch {batch}")
        row = dict(kind=group.kind, count=len(group.indices), geometry=list(geom), step=step, batch=batch, status="ok")
        try:
            if step == "decode":
                case = (
                    Mamba2DecodeCase(geom, batch, L, state_dtype, act_dtype, seed, device, pool_bytes)
                    if group.kind == MAMBA2
                    else GatedDeltaDecodeCase(group.kind, geom, batch, L, state_dtype, act_dtype, seed, device, pool_bytes)
                )
            else:
                case = make_verify_case(
                    group.kind,
                    geom,
                    batch,
                    spec_tokens,
                    L,
                    state_dtype,
                    act_dtype,
                    accept,
                    seed,
                    device=device,
                    pool_bytes=pool_bytes,
                )
                row["accepted_mean"] = case.mean_accepted
            row["refcheck"] = err = case.refcheck()
            if not err <= REFCHECK_TOL:
                row["status"] = f"refcheck failed: {err:.2e} > {REFCHECK_TOL:g}"
            else:
                for name, route in zip(("conventional", "replay"), STEPS[step]):
                    seconds, samples = _timed(case, route, timer)
                    nbytes = case.bytes_per_step(route)
                    row.update(
                        {
                            f"{name}_s": seconds,
                            f"{name}_samples_ms": samples,
                            f"{name}_bytes": nbytes,
                            f"{name}_pct_copy": 100 * nbytes / seconds / copy_bw,
                        }
                    )
                row["speedup"] = row["conventional_s"] / row["replay_s"]
        except (torch.cuda.OutOfMemoryError, ValueError) as e:  # too big for this GPU; a shape the kernels refuse
            row["status"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        rows.append(row)
        case = None
        if device != "cpu" and torch.cuda.is_available():
            torch.cuda.empty_cache()
    bar.close()
    return {"rows": rows, "totals": _totals(rows), "copy_bytes_per_s": copy_bw}


def _totals(rows: list) -> list:
    """Per (step, batch): the sum over layer groups of count x per-layer time, both routes."""
    totals = []
    for (step, batch), group in itertools.groupby(
        sorted(rows, key=lambda r: (r["step"], r["batch"])), key=lambda r: (r["step"], r["batch"])
    ):
        group = list(group)
        if any(r["status"] != "ok" for r in group):
            continue
        conv = sum(r["count"] * r["conventional_s"] for r in group)
        rep = sum(r["count"] * r["replay_s"] for r in group)
        totals.append(
            dict(
                step=step,
                batch=batch,
                layers=sum(r["count"] for r in group),
                conventional_s=conv,
                replay_s=rep,
                speedup=conv / rep,
            )
        )
    return sorted(totals, key=lambda t: (list(STEPS).index(t["step"]), t["batch"]))


def _geometry_label(kind: str, geom) -> str:
    names = (
        ("nheads", "head_dim", "d_state", "ngroups") if kind == MAMBA2 else ("k_heads", "v_heads", "head_k_dim", "head_v_dim")
    )
    return ", ".join(f"{n} {v}" for n, v in zip(names, geom))


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f}"


def format_bench(
    model: HybridModel,
    result: dict,
    *,
    device_name: str,
    L: int,
    state_dtype: torch.dtype,
    act_dtype: torch.dtype,
    spec_tokens: Optional[int] = None,
    accept: float = 0.7,
) -> str:
    """A readable table of :func:`run_bench`'s figures."""
    rows, totals = result["rows"], result["totals"]
    out = [
        f"trtllm-replayssm bench: {model.name} ({model.family}), TP {model.tp_size}, "
        f"{device_name}, copy {result['copy_bytes_per_s'] / 1e12:.2f} TB/s",
        f"  state {DTYPE_NAMES[state_dtype]}, activations and records {DTYPE_NAMES[act_dtype]}, "
        f"replay L {L}"
        + (f"; speculative: window T {spec_tokens}, history B {L}, {accept:g} T accepted on average" if spec_tokens else ""),
    ]
    for g in _groups(model.ssm_layers):
        out.append(f"  {g.kind} x{len(g.indices)}: {_geometry_label(g.kind, case_geometry(g.kind, g.geometry))}")
    out += [
        "",
        "One layer, one step for the batch (CUDA graph, states rotated over >= 512 MiB so that they come from HBM)",
        f"  {'layer':<12}{'step':<8}{'batch':>6}{'conventional us':>17}{'replay us':>12}"
        f"{'speedup':>9}{'%copy conv':>12}{'%copy replay':>14}{'refcheck':>10}",
    ]
    for r in rows:
        head = f"  {r['kind'] + ' x' + str(r['count']):<12}{r['step']:<8}{r['batch']:>6}"
        if r["status"] != "ok":
            out.append(f"{head}  not timed: {r['status']}")
            continue
        out.append(
            f"{head}{_us(r['conventional_s']):>17}{_us(r['replay_s']):>12}"
            f"{r['speedup']:>8.2f}x{r['conventional_pct_copy']:>12.1f}"
            f"{r['replay_pct_copy']:>14.1f}{r['refcheck']:>10.1e}"
        )
    out.append(
        "  (decode: conventional step vs replay step; verify: snapshot verify + commit vs "
        "replay verify + commit, T tokens per row; %copy: modelled bytes / time / copy "
        "bandwidth)"
    )
    if totals:
        n = totals[0]["layers"]
        out += [
            "",
            f"Whole model: all {n} SSM layers, per step (sum of the layers' times; attention and MLP layers not included)",
            f"  {'step':<8}{'batch':>6}{'conventional ms':>17}{'replay ms':>12}{'speedup':>9}",
        ]
        for t in totals:
            out.append(
                f"  {t['step']:<8}{t['batch']:>6}{t['conventional_s'] * 1e3:>17,.3f}"
                f"{t['replay_s'] * 1e3:>12,.3f}{t['speedup']:>8.2f}x"
            )
    return "\n".join(out)


def plot_bench(model: HybridModel, result: dict, path: str, *, device_name: str) -> None:
    """Replay speedup vs batch: a panel per SSM layer group and, with several, one for the whole
    model; a line per step (decode; verify with --spec-tokens)."""
    groups = _groups(model.ssm_layers)
    panels = [
        (
            f"{g.kind} x{len(g.indices)} {case_geometry(g.kind, g.geometry)}",
            lambda r, g=g: r.get("kind") == g.kind and r.get("geometry") == list(case_geometry(g.kind, g.geometry)),
        )
        for g in groups
    ]
    rows = [r for r in result["rows"] if r["status"] == "ok"]
    if result["totals"] and len(groups) > 1:
        panels.append(("whole model, all SSM layers", lambda r: "kind" not in r))
        rows += result["totals"]
    plot_speedups(
        rows,
        path,
        panels,
        f"{model.name}, {device_name}",
        series=lambda r: f"{r['step']}: replay vs {_BASELINE_LABEL[r['step']]}",
        ylabel="replay speedup",
    )
