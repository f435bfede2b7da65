"""One SSM layer's decode step on a GPU, conventional and replay, for timing: Mamba-2 and GDN / KDA."""

from __future__ import annotations

import torch

from ..cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from ..kernels.common import mamba2_launch_config
from ..kernels.gated_delta_common import gated_delta_launch_config, multiprocessor_count
from ..kernels.gated_delta_decode import launch_gated_delta_decode_step
from ..kernels.gated_delta_replay import launch_gated_delta_replay_step
from ..kernels.mamba2_decode import launch_mamba2_decode_step
from ..kernels.mamba2_replay import launch_mamba2_replay_step
from ..memory import mamba2_step_bytes, ssm_layer_step_traffic
from ..models import GDN, KDA, DeltaRuleGeometry
from .timing import POOL_BYTES, slot_sets, time_graph, torch_dtype


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
        saved = c.clone()
        c.cursor[slots.long()] = 0
        state = c.checkpoint.clone()
        worst = 0.0
        for _ in range(self.L + 1):
            y_conv = torch.empty_like(self.out)
            self.conventional(state, slots, y_conv)
            self.step("replay_step", slots)
            worst = max(worst, float((self.out.float() - y_conv.float()).abs().max() / y_conv.float().abs().max()))
        c.copy_(saved)
        return worst


class Mamba2DecodeCase(DecodeCase):
    """Inputs, caches and launches for one Mamba-2 (geometry, batch, L, dtypes) point;
    ``geom`` is (nheads, head_dim, d_state, ngroups). ``rounding_seed``: the replay step's
    flushes round stochastically (a 16-bit or fp8 checkpoint). An fp8 checkpoint has no
    conventional step."""

    def __init__(self, geom, batch, L, state, act, seed=0, device="cuda", pool_bytes=POOL_BYTES, rounding_seed=None):
        self.rounding_seed = rounding_seed
        self.nheads, self.head_dim, self.d_state, self.ngroups = geom
        self.rows = self.head_dim  # state rows per head, for the launch-configuration sweep
        self.batch, self.L, self.state, self.act = batch, L, torch_dtype(state), torch_dtype(act)
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
        self.cache.admit(torch.arange(self.num_slots, device=device), r(*self.cache.checkpoint.shape, dtype=torch.float32))
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
            if c.checkpoint_scale is not None:
                raise ValueError("Mamba2DecodeCase.step: decode_step with an fp8 checkpoint; the conventional step has none")
            launch_mamba2_decode_step(
                self.conv_state, self.x, self.dt, self.A, self.B, self.C, config=config, **self._common(slots)
            )
        elif route in ("replay_step", "replay_triton"):
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
                kernel="triton" if route == "replay_triton" else "auto",
                checkpoint_scale=c.checkpoint_scale,
                rounding_seed=self.rounding_seed,
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
            "replay_step" if route == "replay_triton" else route,
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
    ``geom`` is (k_heads, v_heads, head_k_dim, head_v_dim). ``rounding_seed``: as in
    :class:`Mamba2DecodeCase` (and an fp8 checkpoint has no conventional step either)."""

    def __init__(self, family, geom, batch, L, state, act, seed=0, device="cuda", pool_bytes=POOL_BYTES, rounding_seed=None):
        self.family, self.per_channel = family, family == KDA
        self.rounding_seed = rounding_seed
        self.k_heads, self.v_heads, self.head_k_dim, self.head_v_dim = geom
        self.rows = self.head_v_dim  # state rows per head, for the launch-configuration sweep
        self.batch, self.L, self.state, self.act = batch, L, torch_dtype(state), torch_dtype(act)
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
        c.admit(torch.arange(self.num_slots, device=device), r(*c.checkpoint.shape, dtype=torch.float32) * 0.1)
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
            if c.checkpoint_scale is not None:
                raise ValueError(
                    "GatedDeltaDecodeCase.step: decode_step with an fp8 checkpoint; the conventional step has none"
                )
            launch_gated_delta_decode_step(self.conv_state, *args, slot_ids=slots, config=config, **self.kw)
        elif route in ("replay_step", "replay_triton"):
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
                kernel="triton" if route == "replay_triton" else "auto",
                checkpoint_scale=c.checkpoint_scale,
                rounding_seed=self.rounding_seed,
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
        heads = self.batch * self.v_heads
        mps = multiprocessor_count(self.q.device)
        return gated_delta_launch_config(route, self.head_v_dim, self.head_k_dim, heads, self.state, multiprocessors=mps)

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
