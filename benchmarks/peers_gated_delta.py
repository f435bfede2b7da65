"""Peer GDN decode kernels timed beside this project's: ``gated_delta_decode.py --family gdn --peers DIR``.

DIR holds the peers unpacked (a copy of shared/peers, or only its vllm/ folder, in an ignored
folder of the checkout, e.g. build/peers, carried to the device); nothing to build or set up:

    python benchmarks/gated_delta_decode.py --family gdn --peers build/peers

The benchmark puts DIR on sys.path itself (vllm/ is imported from there; the kernels are Triton,
JIT-compiled on first use). Peers are optional: a missing DIR, a peer that does not import, or
a case a peer does not cover is skipped with a one-line note. GDN only: there is no official
KDA replay kernel, so ``--family kda`` ignores --peers. The peers' code is only called, never
copied into the project. The Mamba-2 side (benchmarks/peers_mamba2.py) lends its row, capture
and timing pieces.

Each (state, L, batch) group captures one CUDA graph per row, this project's three routes and
the peers' rows, and samples the graphs in turn (``peers_mamba2.time_interleaved``). Every row
does the same work per step: the case's batch and geometry (k_heads HK, v_heads HV, head_k_dim K,
head_v_dim V), q, k [batch, HK, K] and v [batch, HV, V] in the activation dtype, the log-decay g
and beta [batch, HV] in fp32, q/k L2 normalisation and scale K^-1/2 in the kernel, the output
[batch, HV, V] written to the case's ``out``, states in a pool of ``case.slot_sets`` (>= 512 MiB,
consecutive steps on different sets, so the state comes from HBM).

The peers take vLLM's GDN layer inputs (``PeerInputs``):
  mixed_qkv  [batch, 2*HK*K + HV*V] act: q, k, v of a row side by side, heads in order
             (``pack_qkv``: a copy of the case's q, k, v);
  a, b       [batch, HV] fp32 raw gates and A_log, dt_bias [HV] fp32, from which the kernels form
             g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b). A_log and dt_bias
             are fixed per head (``gate_params``) and a, b solved so that these are the case's g
             and beta (``raw_gates``). vLLM passes a, b in the activation dtype; fp32 here keeps
             g and beta equal to ours (and the bytes read equal to our fp32 g and beta).

Slot 0: the peers take a slot index <= 0 as padding (vLLM's null block 0: zero output, nothing
read or written), this project only < 0. So every peer row has its own pools with one leading
unused slot (``padded``: slot s + 1 holds the case's slot s) and is given the case's slot ids
+ 1 (``peer_slots``; a negative id stays <= 0, padding for both).

Rows and the call each makes:

  vllm_conv          vllm.model_executor.layers.fla.ops.fused_recurrent.
                         fused_recurrent_gated_delta_rule_packed_decode(mixed_qkv, a, b, A_log,
                         dt_bias, scale, initial_state=pool [slot+1, HV, V, K] state dtype,
                         out=out[:, None] [batch, 1, HV, V], ssm_state_indices=slots + 1,
                         use_qk_l2norm_in_kernel=True)
                     vLLM's conventional GDN decode step, in place on its own copy of the case's
                     checkpoints (the conventional state), one launch per step.
  official_replay_L<L>  vllm.model_executor.layers.fla.ops.fused_recurrent_replayssm.
                         fused_recurrent_gated_delta_rule_replayssm(mixed_qkv, a, b, A_log,
                         dt_bias, scale, initial_state=checkpoints [slot+1, HV, V, K] state dtype,
                         d_cache [slot+1, HV, L, V] act, k_cache [slot+1, HK, L, K] act,
                         g_cache [slot+1, HV, L] fp32, out, ssm_state_indices=slots + 1,
                         write_pos [batch] int32, use_qk_l2norm_in_kernel=True)
                     one launch per step, the fork's launch table (block_v 64, 1 warp, 3 stages,
                     2 K tiles at every L). Its checkpoints and records are copies of the
                     case's, in this project's layouts (the same: checkpoint [slot, HV, V, K],
                     d [slot, HV, L, V], k once per key head, g per value head). write_pos is per
                     batch row and means what this project's cursor means: the records held,
                     [0, write_pos) replayed; write_pos < L - 1 appends (d, k, g) at write_pos;
                     write_pos == L - 1 folds the L - 1 records and the token into the checkpoint
                     and writes no record. The kernel never advances it: vLLM's host derives it
                     per step (decode_step % L) for all layers. So this row's graph holds L
                     rounds over the slot sets, round r with (cursor + r) % L per row
                     (``peers_mamba2.official_positions``; cursor: the case's replay cursors,
                     spread over [0, L)): every slot advances one position per step and flushes
                     once in L steps, as this project's replay rows do.

Not timed: the peer's per-step write-position bookkeeping (host work shared by all layers). This
project's replay kernel advances its cursors itself, in the timed launch.

Before timing, each peer row runs 2L + 2 eager steps on the first slot set from the case's
checkpoints with fresh write positions (two flushes and the steps after them), with different
inputs at every step (``step_inputs``), and is compared with this project's conventional kernel
run from the same states on the same inputs: the ``refcheck`` column (relative max error over the
steps; the first step's is printed too). Over REFCHECK_TOL prints a warning; the row is timed all
the same.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

import torch

import peers_mamba2

from peers_mamba2 import (
    OURS,
    REFCHECK_TOL,
    PeerRow,
    Route,
    Skip,
    first_line,
    capture,
    official_positions,
    time_interleaved,
)

__all__ = [
    "ENTRY_POINTS",
    "GDNPeers",
    "PeerInputs",
    "compare",
    "conventional_rows",
    "gate_params",
    "load_peers",
    "official_rows",
    "pack_qkv",
    "padded",
    "peer_rows",
    "peer_slots",
    "raw_gates",
    "reference_outputs",
    "run_table",
    "step_inputs",
    "time_group",
]

PAD_SLOTS = 1  # the peers' slot 0 is vLLM's null block: their pools get one leading unused slot
BETA_EPS = 1e-6  # beta is clamped to [eps, 1 - eps] before the logit (beta = 0 would need b = -inf)

# (Peers attribute, label in notes, module under DIR, function)
ENTRY_POINTS = (
    (
        "conventional",
        "vLLM fused_recurrent_gated_delta_rule_packed_decode",
        "vllm.model_executor.layers.fla.ops.fused_recurrent",
        "fused_recurrent_gated_delta_rule_packed_decode",
    ),
    (
        "official",
        "official ReplaySSM fused_recurrent_gated_delta_rule_replayssm",
        "vllm.model_executor.layers.fla.ops.fused_recurrent_replayssm",
        "fused_recurrent_gated_delta_rule_replayssm",
    ),
)


@dataclass
class GDNPeers:
    """The GDN peer entry points that imported (None: not available) and one note per missing one."""

    conventional: Optional[Callable] = None  # vLLM fused_recurrent_gated_delta_rule_packed_decode
    official: Optional[Callable] = None  # fused_recurrent_gated_delta_rule_replayssm
    notes: list = field(default_factory=list)


def load_peers(peers_dir: str) -> GDNPeers:
    """Import the GDN peers (``ENTRY_POINTS``) from ``peers_dir``, which is put first on sys.path;
    never raises: a missing folder or a failed import is a note. (peers_mamba2.load_peers imports
    the Mamba-2 entry points and FlashInfer, none of which a GDN row needs.)"""
    if not os.path.isdir(peers_dir):
        return GDNPeers(notes=[f"# peers: {peers_dir} is not a folder; peer rows skipped"])
    path = os.path.abspath(peers_dir)
    if path not in sys.path:
        sys.path.insert(0, path)
    peers = GDNPeers()
    for attr, label, module, name in ENTRY_POINTS:
        try:
            setattr(peers, attr, getattr(importlib.import_module(module), name))
        except Exception as e:  # noqa: BLE001 - any failure means: no such peer in this run
            peers.notes.append(f"# peers: {label} unavailable ({first_line(e)}); its rows skipped")
    return peers


# ---- the peers' inputs ------------------------------------------------------------------------


def pack_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """vLLM's packed projection [batch, 2*HK*K + HV*V] (q's dtype, contiguous) from q, k
    [batch, HK, K] and v [batch, HV, V]: row n holds q (key head h at h*K), then k (at HK*K + h*K),
    then v (value head h at 2*HK*K + h*V)."""
    if q.shape != k.shape or q.dim() != 3 or v.dim() != 3 or v.shape[0] != q.shape[0]:
        raise ValueError(
            f"pack_qkv: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}; "
            "expected q, k [batch, k_heads, head_k_dim] and v [batch, v_heads, head_v_dim]"
        )
    return torch.cat([q.flatten(1), k.flatten(1), v.flatten(1).to(q.dtype)], dim=1).contiguous()


def gate_params(v_heads: int, device=None) -> tuple:
    """(A_log, dt_bias) [v_heads] fp32: fixed, distinct per head (not 0, so that a call that
    swaps or drops them shows in the check)."""
    A_log = torch.linspace(-0.5, 0.5, v_heads, device=device)
    dt_bias = torch.linspace(-1.0, 1.0, v_heads, device=device)
    return A_log, dt_bias


def raw_gates(g: torch.Tensor, beta: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor) -> tuple:
    """The raw gates (a, b) [batch, v_heads] fp32 (contiguous) under which the peers' gate,
    g = -exp(A_log) * softplus(a + dt_bias) (threshold 20) and beta = sigmoid(b), gives back
    ``g`` (< 0) and ``beta`` (in [0, 1], clamped to BETA_EPS from the ends) [batch, v_heads] for
    A_log, dt_bias [v_heads]. Solved in fp64: softplus^-1(y) = y + log(-expm1(-y)) (= y above the
    threshold, as the kernels' softplus)."""
    if g.dim() != 2 or beta.shape != g.shape or A_log.shape != (g.shape[1],) or dt_bias.shape != (g.shape[1],):
        raise ValueError(
            f"raw_gates: g {tuple(g.shape)}, beta {tuple(beta.shape)}, A_log {tuple(A_log.shape)}, "
            f"dt_bias {tuple(dt_bias.shape)}; expected g, beta [batch, v_heads] and A_log, dt_bias [v_heads] (GDN)"
        )
    if not bool((g < 0).all()):
        raise ValueError(f"raw_gates: g must be < 0 (a decay below 1) for softplus to reach it; max g = {float(g.max())}")
    y = -g.double() / A_log.double().exp()
    a = y + torch.log(-torch.expm1(-y)) - dt_bias.double()
    b = torch.logit(beta.double(), eps=BETA_EPS)
    return a.float().contiguous(), b.float().contiguous()


@dataclass
class PeerInputs:
    """One peer row's input buffers (fixed addresses, captured in its graphs): mixed_qkv
    [batch, 2*HK*K + HV*V] act, a, b [batch, HV] fp32, A_log, dt_bias [HV] fp32."""

    mixed_qkv: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    A_log: torch.Tensor
    dt_bias: torch.Tensor

    @classmethod
    def of(cls, case) -> "PeerInputs":
        """The buffers for ``case``, holding its current q, k, v, g and beta."""
        A_log, dt_bias = gate_params(case.v_heads, case.q.device)
        a, b = raw_gates(case.g, case.beta, A_log, dt_bias)
        return cls(pack_qkv(case.q, case.k, case.v), a, b, A_log, dt_bias)

    def load(self, case) -> None:
        """Copy ``case``'s current q, k, v, g and beta into the buffers (in place)."""
        self.mixed_qkv.copy_(pack_qkv(case.q, case.k, case.v))
        for dst, src in zip((self.a, self.b), raw_gates(case.g, case.beta, self.A_log, self.dt_bias)):
            dst.copy_(src)

    def kwargs(self, case) -> dict:
        """The keyword arguments both peers share."""
        return dict(
            mixed_qkv=self.mixed_qkv,
            a=self.a,
            b=self.b,
            A_log=self.A_log,
            dt_bias=self.dt_bias,
            scale=case.kw["scale"],
            use_qk_l2norm_in_kernel=case.kw["use_qk_l2norm"],
        )


def padded(t: torch.Tensor) -> torch.Tensor:
    """A copy of a per-slot pool ``t`` [num_slots, ...] as [PAD_SLOTS + num_slots, ...] (same
    dtype, contiguous): slot s + PAD_SLOTS holds t[s]; the leading slot (the peers' null block)
    is zero and never touched."""
    out = torch.zeros((t.shape[0] + PAD_SLOTS, *t.shape[1:]), dtype=t.dtype, device=t.device)
    out[PAD_SLOTS:] = t
    return out


def peer_slots(slots: torch.Tensor) -> torch.Tensor:
    """The peers' slot indices [batch] int32 (contiguous) into ``padded`` pools for this
    project's ``slots`` [batch]: slots + PAD_SLOTS (a padding id < 0 stays <= 0, padding there)."""
    return (slots.to(torch.int32) + PAD_SLOTS).contiguous()


def _restore(pool: torch.Tensor, case) -> None:
    """The first slot set's states in a ``padded`` pool := the case's checkpoints."""
    s = case.slot_sets[0].long()
    pool[s + PAD_SLOTS] = case.cache.checkpoint[s]


# ---- checks -----------------------------------------------------------------------------------


@contextmanager
def step_inputs(case):
    """``set(j)``: the case's q, k, v := the originals plus seeded noise, g := fresh log-decays in
    [-0.101, -0.001), beta := fresh in [0, 1) (step j's inputs), so that the records of a check's
    steps differ and a misplaced record shows; restored after."""
    inputs = (case.q, case.k, case.v, case.g, case.beta)
    saved = [t.clone() for t in inputs]

    def set_step(j):
        gen = torch.Generator(device=case.q.device).manual_seed(1000 + j)
        for t, s in zip(inputs[:3], saved):
            t.copy_(s.float() + 0.5 * torch.randn(s.shape, device=s.device, generator=gen))
        case.g.copy_(-(torch.rand(case.g.shape, device=case.g.device, generator=gen) * 0.1 + 0.001))
        case.beta.copy_(torch.rand(case.beta.shape, device=case.beta.device, generator=gen))

    try:
        yield set_step
    finally:
        for t, s in zip(inputs, saved):
            t.copy_(s)


def reference_outputs(case, steps: int) -> list:
    """``peers_mamba2.reference_outputs`` with this module's :func:`step_inputs`: our conventional
    kernel's outputs over ``steps`` steps on the first slot set, what the peers' checks compare
    with."""
    return peers_mamba2.reference_outputs(case, steps, inputs=step_inputs)


def compare(case, refs, step) -> list:
    """Relative max error of ``step(out)`` (one decode step each, inputs of ``step_inputs``)
    against each reference output: one float per step (NaN where the step gave NaN)."""
    errs = []
    with step_inputs(case) as set_step:
        for j, ref in enumerate(refs):
            set_step(j)
            y = torch.empty_like(ref)
            step(y)
            errs.append(float((y.float() - ref.float()).abs().max() / ref.float().abs().max()))
    return errs


def _worst(errs: list) -> float:
    return next((e for e in errs if math.isnan(e)), max(errs, default=0.0))


# ---- rows -------------------------------------------------------------------------------------


def _require_gdn(case) -> None:
    family = getattr(case, "family", "gdn")
    if family != "gdn" or getattr(case, "per_channel", False):
        raise Skip(f"GDN only (family {family}: no peer kernel for it here)")


def conventional_rows(case, fn) -> list:
    """vLLM's conventional GDN decode step (``fn``: fused_recurrent_gated_delta_rule_packed_decode)
    on its own ``padded`` copy of the case's checkpoints, one step per slot set."""
    _require_gdn(case)
    pool, inputs = padded(case.cache.checkpoint), PeerInputs.of(case)
    sets = [peer_slots(s) for s in case.slot_sets]

    def call(slots, out):
        fn(**inputs.kwargs(case), initial_state=pool, out=out.unsqueeze(1), ssm_state_indices=slots)

    def check(refs):
        _restore(pool, case)

        def step(out):
            inputs.load(case)
            call(sets[0], out)

        try:
            return compare(case, refs, step)
        finally:
            inputs.load(case)  # the timed steps' inputs: the case's own

    return [PeerRow("vllm_conv", Route([partial(call, s, case.out) for s in sets]), check)]


def official_rows(case, fn) -> list:
    """The official ReplaySSM GDN step (``fn``: fused_recurrent_gated_delta_rule_replayssm) on its
    own ``padded`` copies of the case's checkpoints and records: L rounds over the slot sets,
    round r with write positions (cursor + r) % L per row."""
    _require_gdn(case)
    c, L = case.cache, case.L
    state, d_cache, k_cache, g_cache = (padded(t) for t in (c.checkpoint, c.d_records, c.k_records, c.g_records))
    inputs = PeerInputs.of(case)
    sets = [peer_slots(s) for s in case.slot_sets]

    def call(slots, write_pos, out):
        fn(
            **inputs.kwargs(case),
            initial_state=state,
            d_cache=d_cache,
            k_cache=k_cache,
            g_cache=g_cache,
            out=out,
            ssm_state_indices=slots,
            write_pos=write_pos,
        )

    def check(refs):
        _restore(state, case)
        pos = [torch.zeros(case.batch, dtype=torch.int32, device=state.device)]  # no records held

        def step(out):
            inputs.load(case)
            call(sets[0], pos[0], out)
            pos[0] = (pos[0] + 1) % L

        try:
            return compare(case, refs, step)
        finally:
            inputs.load(case)

    write_pos = official_positions(c.cursor, case.slot_sets, L)[0]  # [L, sets, batch] int32
    steps = [partial(call, s, write_pos[r, i], case.out) for r in range(L) for i, s in enumerate(sets)]
    return [PeerRow(f"official_replay_L{L}", Route(steps), check)]


def peer_rows(case, peers: GDNPeers, where: str = "") -> list:
    """The peers' rows for ``case``; a peer that does not cover it is left out with a note."""
    rows = []
    for name, build, fn in (
        ("vllm_conv", conventional_rows, peers.conventional),
        ("official_replay", official_rows, peers.official),
    ):
        if fn is None:
            continue
        try:
            rows += build(case, fn)
        except Skip as e:
            print(f"# {name} ({where}): {e}; skipped")
        except Exception as e:  # noqa: BLE001 - a peer's set-up failure must not end the run
            print(f"# {name} ({where}): set-up failed ({first_line(e)}); skipped")
    return rows


# ---- timing -----------------------------------------------------------------------------------


def time_group(case, err: float, peers: GDNPeers, key: dict):
    """(name -> (seconds per step, samples), name -> refcheck) of this project's routes and the
    peers' rows of one case. A peer row whose eager steps or capture fail is left out with a
    note; this project's must not fail."""
    where = " ".join(f"{k}={v}" for k, v in key.items())
    routes = {r: Route([partial(case.step, r, s) for s in case.slot_sets]) for r in OURS}
    checks = dict.fromkeys(OURS, err)
    refs = reference_outputs(case, 2 * case.L + 2)
    for p in peer_rows(case, peers, where):
        try:
            errs = p.check(refs)
        except Exception as e:  # noqa: BLE001
            print(f"# {p.name} ({where}): eager steps failed ({first_line(e)}); skipped")
            continue
        checks[p.name] = _worst(errs)
        print(
            f"# {p.name} ({where}): max relative difference to our conventional step {checks[p.name]:.2e} "
            f"over {len(errs)} steps (first step {errs[0]:.2e})"
        )
        if not checks[p.name] <= REFCHECK_TOL:
            print(f"# {p.name} ({where}): refcheck {checks[p.name]:.2e} > {REFCHECK_TOL}; timed all the same")
        routes[p.name] = p.route
    graphs = {}
    for name, route in routes.items():
        try:
            graphs[name] = capture(route)
        except Exception as e:  # noqa: BLE001
            if name in OURS:
                raise
            print(f"# {name} ({where}): capture failed ({first_line(e)}); skipped")
    return time_interleaved(graphs, {n: len(routes[n].steps) for n in graphs}), checks


def run_table(make_case, args, copy_bw: float, peers: GDNPeers) -> list:
    """``peers_mamba2.run_table`` with this module's :func:`time_group`: per (state, L, batch)
    group this project's decode_step, replay_step and replay_triton and every peer row are
    captured and timed together; ``speedup`` against this project's conventional step,
    ``vs_vllm`` against vLLM's (same group)."""
    return peers_mamba2.run_table(make_case, args, copy_bw, peers, group=time_group, route_width=20)
