"""Peer Mamba-2 decode kernels timed beside this project's: ``mamba2_decode.py --peers DIR``.

DIR holds the peers unpacked (a copy of shared/peers in an ignored folder of the checkout, e.g.
build/peers, carried to the device). Set-up on the device, then the run:

    mkdir -p /tmp/fi && tar xJf DIR/flashinfer/flashinfer-*.tar.xz -C /tmp/fi \\
      && pip install -q --no-deps --target /tmp/fi DIR/flashinfer/apache_tvm_ffi-*.whl
    PYTHONPATH=/tmp/fi FLASHINFER_DISABLE_JIT=1 LD_PRELOAD=libcuda.so.1 \\
      python benchmarks/mamba2_decode.py --peers DIR

The benchmark puts /tmp/fi (when it exists) and DIR on sys.path itself (vllm/ is imported from
DIR; mamba_ssm/ is not timed) and sets FLASHINFER_DISABLE_JIT=1 unless it is set. Peers are optional: a
missing DIR, a peer that does not import, or a case a peer does not cover is skipped with a
one-line note. Their code is only called, never copied into the project.

Each (state, L, batch) group captures one CUDA graph per row, this project's two routes and the
peers' rows, and samples the graphs in turn (``time_interleaved``). Every row does the same
work per step: the case's batch and geometry, x, B, C [batch, ...] in the activation dtype (no
z), raw dt [batch, nheads] in the activation dtype with dt_bias and softplus, fp32 A and D per
head, the output written to the case's ``out``, states in a pool of ``case.slot_sets`` (>= 512
MiB, consecutive steps on different sets, so the state comes from HBM). vLLM's Mamba-2 layer
passes A, dt, dt_bias and D as stride-0 broadcasts over head_dim (and d_state), "tied"; the peer
rows do the same (``tied``).

Rows and the call each makes:

  vllm_conv        vllm.model_executor.layers.mamba.ops.mamba_ssm.selective_state_update(
                       state, x, dt [b,H,P] tied, A [H,P,N] tied, B, C, D=[H,P] tied,
                       dt_bias=[H,P] tied, dt_softplus=True, state_batch_indices=slots,
                       null_block_id=-1, out=out)
                   on the case's conventional state pool [slot, H, P, N], in place like
                   decode_step; launch configuration from vLLM's tuned H200 JSON (by batch*H).
                   null_block_id=-1: the stand-in's NULL_BLOCK_ID is 0, which would skip slot 0.
  official         vllm...ops.selective_state_update_replayssm_output_only(state, x, dt, A, B,
                       C, D=, dt_bias= (tied as above), dt_softplus=True,
                       x_cache=[slot,H,L,P] act, dt_cache=[slot,H,L] fp32,
                       B_cache=[slot,G,L,N] act, bc_pre=[batch,G,L] fp32 scratch,
                       write_pos=[batch] int32, is_flush=[batch] int8, max_cache_len=L,
                       state_batch_indices=slots, null_block_id=-1, out=out)
                   two launches per step (B.C precompute, main); its own state pool (a copy of
                   the case's checkpoints) and records (copies of the case's). Its cursors are
                   per batch row and the kernels never advance them: the fork's caller
                   (vllm/v1/attention/backends/mamba_attn.py at FORK_COMMIT) derives
                   write_pos = decode_step % L and is_flush = (write_pos == L - 1) on the host,
                   once per step for all layers, and copies them in. So this row's graph holds
                   L rounds over the slot sets, round r with tables of (cursor + r) % L per row
                   (``official_positions``; cursor: the case's replay cursors, spread over
                   [0, L)): every slot advances one position per step and flushes once in L
                   steps, as this project's replay rows do.
  fi_monolith      flashinfer.mamba.checkpointing_ssu(state, x_cache=[slot,H,W+1,P] ring,
  fi_two_kernel        B_cache=[slot,G,W+1,N] ring, dt_cache=[slot,H,W+1] fp32 ring,
  fi_2k_s2c4           ring_start=[slot] int32, prev_num_accepted_tokens=[slot] int32,
                       x=[b,1,H,P], dt=[b,1,H,P] tied, A tied, B=[b,1,G,N], C=[b,1,G,N],
                       out=[b,1,H,P], D=, dt_bias= (tied), dt_softplus=True,
                       state_batch_indices=slots, pad_slot_id=-1,
                       algorithm="monolith" | "two-kernel" (the latter with cb_scaled,
                       cumAdt_vec, cb_old from allocate_checkpointing_ssu_scratch(batch, H, 1,
                       W, act dtype)))
                   with W = L (1 predicted token; the ring holds W + 1 rows). Its own state pool
                   and rings. Prebuilt modules (FLASHINFER_DISABLE_JIT) exist only for head_dim
                   64, d_state 128, 16 heads per group, 8 groups, bf16 x/dt, fp32 A/D/dt_bias,
                   int32 slots: fp32 state W 16 and 8, bf16 state W 16; other cases are skipped
                   with a note (no JIT build). The kernel reads ring_start and
                   prev_num_accepted_tokens (pnat) per slot, checkpoints when pnat + 1 > W
                   (folding the pnat ring records into the state) and never writes them; the
                   host advances them once per step for all layers (vLLM's
                   update_replayssm_ring_trackers: after a flush ring_start += pnat mod W + 1 and
                   pnat = 1, else pnat += 1; ``flashinfer_advance``). This row's graph holds W
                   rounds, round r with per-slot tables of that rule (``flashinfer_cursors``),
                   starting from pnat spread over [1, W]: one checkpoint per slot in W steps.
                   fi_2k_s2c4 is the two-kernel launch with FLASHINFER_SSU_MAIN_PIPELINE_STAGES=2
                   and FLASHINFER_SSU_MAIN_CTA_PER_SM=4 (the peers README's best fp32 W=16 launch
                   at batch >= 64). The launcher reads these variables at every launch when its
                   explicit arguments are 0, as the Python API passes them (FlashInfer 0.7.2's
                   host code calls getenv per launch, no cached static), so they are set around
                   this row's check and capture only and unset around fi_monolith's and
                   fi_two_kernel's (the launcher's own choice).

W against L: both flush once in L steps; FlashInfer replays pnat in [1, W] records per step
(mean (W+1)/2), the official kernel and this project's replay write_pos / cursor in [0, L)
(mean (L-1)/2) plus the current token.

Not timed: the peers' per-step cursor bookkeeping (host work or one small launch per step,
shared by all layers). This project's replay kernel advances its cursors itself, in the timed
launch.

Before timing, each peer row runs 2L + 2 eager steps on the first slot set from the case's
checkpoints with fresh cursors (two flushes, the steps after them, FlashInfer's ring wrapping),
with different inputs at every step (``step_inputs``), and is compared with this project's
conventional kernel run from the same states on the same inputs: the ``refcheck`` column
(relative max error). Over REFCHECK_TOL prints a warning; the row is timed all the same.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

import torch

FI_DIR = "/tmp/fi"  # where the set-up above unpacks FlashInfer
NO_NULL_SLOT = -1  # null_block_id / pad_slot_id: the benchmark has no padding rows
REFCHECK_TOL = 5e-2  # as harness.run_table
OURS = ("decode_step", "replay_step", "replay_triton")  # replay_step: the op's route (CUDA or Triton)
FI_LAUNCH_ENV = ("FLASHINFER_SSU_MAIN_PIPELINE_STAGES", "FLASHINFER_SSU_MAIN_CTA_PER_SM")
FI_HEURISTIC = dict.fromkeys(FI_LAUNCH_ENV)  # unset: the launcher's own choice
FI_S2C4 = dict(zip(FI_LAUNCH_ENV, ("2", "4")))
FI_MAX_WINDOW = 16  # checkpointing_ssu asserts max_window <= 16


class Skip(Exception):
    """A peer does not cover this case (the message says why)."""


@dataclass
class Peers:
    """The peer entry points that imported (None: not available) and one note per missing one."""

    vllm_ssu: Optional[Callable] = None  # vLLM selective_state_update
    official: Optional[Callable] = None  # selective_state_update_replayssm_output_only
    flashinfer: Optional[object] = None  # FlashInfer namespace (``_flashinfer``)
    notes: list = field(default_factory=list)


@dataclass
class Route:
    """One row's captured sequence: ``steps`` in order, one decode step each, with the
    environment variables ``env`` set (None: unset) while it is checked and captured."""

    steps: list
    env: dict = field(default_factory=dict)


@dataclass
class PeerRow:
    name: str
    route: Route
    check: Callable  # reference outputs -> relative max error


def first_line(e: BaseException) -> str:
    return (f"{type(e).__name__}: {e}".splitlines() or [type(e).__name__])[0][:160]


def load_peers(peers_dir: str, extra_paths=(FI_DIR,)) -> Peers:
    """Import the peers from ``peers_dir`` (and FlashInfer from ``extra_paths``); never raises."""
    if not os.path.isdir(peers_dir):
        return Peers(notes=[f"# peers: {peers_dir} is not a folder; peer rows skipped"])
    for p in (os.path.abspath(peers_dir), *(e for e in extra_paths if os.path.isdir(e))):
        if p not in sys.path:
            sys.path.insert(0, p)  # FlashInfer's folder ends up first, then DIR
    os.environ.setdefault("FLASHINFER_DISABLE_JIT", "1")  # skip a case rather than build for minutes
    peers = Peers()

    def load(label, get):
        try:
            return get()
        except Exception as e:  # noqa: BLE001 - any failure means: no such peer in this run
            peers.notes.append(f"# peers: {label} unavailable ({first_line(e)}); its rows skipped")
            return None

    def vllm_ssu():
        from vllm.model_executor.layers.mamba.ops.mamba_ssm import selective_state_update

        return selective_state_update

    def official():
        from vllm.model_executor.layers.mamba.ops.selective_state_update_replayssm_output_only import (
            selective_state_update_replayssm_output_only,
        )

        return selective_state_update_replayssm_output_only

    peers.vllm_ssu = load("vLLM selective_state_update", vllm_ssu)
    peers.official = load("official ReplaySSM output_only", official)
    peers.flashinfer = load("FlashInfer checkpointing_ssu", _flashinfer)
    return peers


def _flashinfer():
    """checkpointing_ssu, its scratch allocator, and ``prebuilt(...)``: whether the AOT module of
    a specialization is in the package (FlashInfer's own URI and artifact look-up)."""
    from types import SimpleNamespace

    from flashinfer.jit.env import get_aot_artifacts
    from flashinfer.jit.mamba.checkpointing_ssu import get_checkpointing_ssu_uri
    from flashinfer.mamba import allocate_checkpointing_ssu_scratch, checkpointing_ssu

    def prebuilt(*uri_args):
        return bool(get_aot_artifacts(get_checkpointing_ssu_uri(*uri_args)))

    return SimpleNamespace(
        checkpointing_ssu=checkpointing_ssu,
        prebuilt=prebuilt,
        allocate_checkpointing_ssu_scratch=allocate_checkpointing_ssu_scratch,
    )


# ---- cursor tables ------------------------------------------------------------------------


def official_positions(cursor, sets, L):
    """write_pos [L, len(sets), batch] int32 and is_flush (int8) of every (round, set) step:
    round r holds each row's slot cursor advanced r steps, (cursor + r) % L, a flush at L - 1
    (the fork's caller: write_pos = decode_step % L, is_flush = write_pos == L - 1)."""
    idx = torch.stack([s.long() for s in sets])
    rounds = torch.arange(L, device=cursor.device)[:, None, None]
    write_pos = ((cursor.long()[idx][None] + rounds) % L).to(torch.int32).contiguous()
    return write_pos, (write_pos == L - 1).to(torch.int8)


def flashinfer_advance(ring_start, pnat, W):
    """FlashInfer's per-slot cursors after one decode step (vLLM's update_replayssm_ring_trackers,
    one token accepted): a checkpoint (pnat + 1 > W) folded the pnat ring records into the
    state, so the ring's start moves past them (mod W + 1) and the new token is the one record
    left; otherwise the new token is one more record."""
    flush = pnat + 1 > W
    return (torch.where(flush, (ring_start + pnat) % (W + 1), ring_start), torch.where(flush, torch.ones_like(pnat), pnat + 1))


def flashinfer_cursors(pnat, ring_start, W):
    """ring_start and pnat tables [W, num_slots] int32: round r holds the cursors after r steps
    from (``pnat`` in [1, W], ``ring_start``) under ``flashinfer_advance``."""
    rs, pn = [ring_start.to(torch.int32)], [pnat.to(torch.int32)]
    for _ in range(W - 1):
        a, b = flashinfer_advance(rs[-1], pn[-1], W)
        rs.append(a)
        pn.append(b)
    return torch.stack(rs).contiguous(), torch.stack(pn).contiguous()


# ---- rows -----------------------------------------------------------------------------------


def tied(case) -> dict:
    """A [H,P,N], D, dt_bias [H,P] and dt [batch,H,P] as the stride-0 broadcasts of the per-head
    values that vLLM's Mamba-2 layer passes (TIE_HDIM)."""
    H, P, N = case.nheads, case.head_dim, case.d_state
    return dict(
        A=case.A[:, None, None].expand(H, P, N),
        D=case.D[:, None].expand(H, P),
        dt_bias=case.dt_bias[:, None].expand(H, P),
        dt=case.dt[:, :, None].expand(-1, -1, P),
    )


@contextmanager
def step_inputs(case):
    """``set(j)``: the case's x, dt, B, C := step j's inputs (the originals plus seeded noise), so
    that the records of a check's steps differ and a misplaced record shows; restored after."""
    inputs = (case.x, case.dt, case.B, case.C)
    saved = [t.clone() for t in inputs]

    def set_step(j):
        g = torch.Generator(device=case.x.device).manual_seed(1000 + j)
        for t, s in zip(inputs, saved):
            t.copy_(s.float() + 0.5 * torch.randn(s.shape, device=s.device, generator=g))

    try:
        yield set_step
    finally:
        for t, s in zip(inputs, saved):
            t.copy_(s)


def reference_outputs(case, steps: int, inputs=None) -> list:
    """This project's conventional kernel on the first slot set for ``steps`` steps (inputs of
    ``inputs(case)``, default :func:`step_inputs`; benchmarks/peers_gated_delta.py passes its
    own) from the case's checkpoints (a copy): what the peers' checks compare with."""
    state = case.cache.checkpoint.clone()
    refs = []
    with (inputs or step_inputs)(case) as set_step:
        for j in range(steps):
            set_step(j)
            refs.append(torch.empty_like(case.out))
            case.conventional(state, case.slot_sets[0], refs[-1])
    return refs


def compare(case, refs, step) -> float:
    """Relative max error of ``step(out)`` (one decode step each, inputs of ``step_inputs``)
    against each reference output."""
    worst = 0.0
    with step_inputs(case) as set_step:
        for j, ref in enumerate(refs):
            set_step(j)
            y = torch.empty_like(ref)
            step(y)
            err = float((y.float() - ref.float()).abs().max() / ref.float().abs().max())
            worst = err if math.isnan(err) or err > worst else worst
    return worst


def _restore(state, case):
    """The first slot set's states := the case's checkpoints (the start of every check)."""
    s = case.slot_sets[0].long()
    state[s] = case.cache.checkpoint[s]


def vllm_conv_rows(case, fn) -> list:
    t = tied(case)

    def call(state, slots, out):
        fn(
            state,
            case.x,
            t["dt"],
            t["A"],
            case.B,
            case.C,
            D=t["D"],
            dt_bias=t["dt_bias"],
            dt_softplus=True,
            state_batch_indices=slots,
            null_block_id=NO_NULL_SLOT,
            out=out,
        )

    def check(refs):
        state = case.cache.checkpoint.clone()
        return compare(case, refs, lambda out: call(state, case.slot_sets[0], out))

    steps = [partial(call, case.conv_state, s, case.out) for s in case.slot_sets]
    return [PeerRow("vllm_conv", Route(steps), check)]


def official_rows(case, fn) -> list:
    c, L, t = case.cache, case.L, tied(case)
    state, x_cache, dt_cache, B_cache = (v.clone() for v in (c.checkpoint, c.x_records, c.dt_records, c.B_records))
    bc_pre = torch.empty(case.batch, case.ngroups, L, dtype=torch.float32, device=state.device)

    def call(slots, write_pos, is_flush, out):
        fn(
            state,
            case.x,
            t["dt"],
            t["A"],
            case.B,
            case.C,
            D=t["D"],
            dt_bias=t["dt_bias"],
            dt_softplus=True,
            x_cache=x_cache,
            dt_cache=dt_cache,
            B_cache=B_cache,
            bc_pre=bc_pre,
            write_pos=write_pos,
            is_flush=is_flush,
            max_cache_len=L,
            state_batch_indices=slots,
            null_block_id=NO_NULL_SLOT,
            out=out,
        )

    def check(refs):
        _restore(state, case)
        pos = [torch.zeros(case.batch, dtype=torch.int32, device=state.device)]

        def step(out):
            call(case.slot_sets[0], pos[0], (pos[0] == L - 1).to(torch.int8), out)
            pos[0] = (pos[0] + 1) % L

        return compare(case, refs, step)

    write_pos, is_flush = official_positions(c.cursor, case.slot_sets, L)
    steps = [
        partial(call, s, write_pos[r, i], is_flush[r, i], case.out) for r in range(L) for i, s in enumerate(case.slot_sets)
    ]
    return [PeerRow("official", Route(steps), check)]


def flashinfer_rows(case, fi) -> list:
    W, c, t = case.L, case.cache, tied(case)
    H, P, N, G, S = case.nheads, case.head_dim, case.d_state, case.ngroups, case.num_slots
    if W > FI_MAX_WINDOW:
        raise Skip(f"W = L = {W} > {FI_MAX_WINDOW}")
    if not fi.prebuilt(
        case.state, case.x.dtype, case.dt.dtype, case.D.dtype, case.A.dtype, torch.int32, None, P, N, 1, W, H // G, G
    ):
        raise Skip(f"no prebuilt module for state {case.state}, act {case.x.dtype}, W {W}, geometry {(H, P, N, G)}")
    dev = case.x.device
    gen = torch.Generator(device=dev).manual_seed(1)
    state = c.checkpoint.clone()
    x_cache = torch.randn(S, H, W + 1, P, device=dev, generator=gen).to(case.x.dtype)
    B_cache = torch.randn(S, G, W + 1, N, device=dev, generator=gen).to(case.x.dtype)
    dt_cache = torch.empty(S, H, W + 1, device=dev).uniform_(0.01, 0.05, generator=gen)
    ring_start0 = torch.randint(0, W + 1, (S,), device=dev, generator=gen, dtype=torch.int32)
    ring_start, pnat = flashinfer_cursors(c.cursor + 1, ring_start0, W)
    scratch = dict(
        zip(
            ("cb_scaled", "cumAdt_vec", "cb_old"),
            fi.allocate_checkpointing_ssu_scratch(case.batch, H, 1, W, case.x.dtype, dev),
        )
    )
    x, B, C = case.x.unsqueeze(1), case.B.unsqueeze(1), case.C.unsqueeze(1)
    dt = case.dt[:, None, :, None].expand(-1, 1, -1, P)

    def call(algorithm, slots, ring_start, pnat, out):
        fi.checkpointing_ssu(
            state,
            x_cache,
            B_cache,
            dt_cache,
            ring_start,
            pnat,
            x,
            dt,
            t["A"],
            B,
            C,
            out.unsqueeze(1),
            D=t["D"],
            dt_bias=t["dt_bias"],
            dt_softplus=True,
            state_batch_indices=slots,
            pad_slot_id=NO_NULL_SLOT,
            algorithm=algorithm,
            **(scratch if algorithm == "two-kernel" else {}),
        )

    def check(algorithm, refs):
        _restore(state, case)
        cur = [torch.zeros(S, dtype=torch.int32, device=dev) for _ in range(2)]  # ring_start, pnat

        def step(out):
            call(algorithm, case.slot_sets[0], cur[0], cur[1], out)
            cur[:] = flashinfer_advance(cur[0], cur[1], W)

        return compare(case, refs, step)

    rows = []
    for name, algorithm, env in (
        ("fi_monolith", "monolith", FI_HEURISTIC),
        ("fi_two_kernel", "two-kernel", FI_HEURISTIC),
        ("fi_2k_s2c4", "two-kernel", FI_S2C4),
    ):
        steps = [partial(call, algorithm, s, ring_start[r], pnat[r], case.out) for r in range(W) for s in case.slot_sets]
        rows.append(PeerRow(name, Route(steps, env), partial(check, algorithm)))
    return rows


def peer_rows(case, peers: Peers, where: str = "") -> list:
    """The peers' rows for ``case``; a peer that does not cover it is left out with a note."""
    rows = []
    for name, build, fn in (
        ("vllm_conv", vllm_conv_rows, peers.vllm_ssu),
        ("official", official_rows, peers.official),
        ("fi", flashinfer_rows, peers.flashinfer),
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


# ---- timing ---------------------------------------------------------------------------------


@contextmanager
def environment(env: dict):
    """Set (or, for None, unset) the variables of ``env``; restore them afterwards."""

    def put(k, v):
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

    saved = {k: os.environ.get(k) for k in env}
    try:
        for k, v in env.items():
            put(k, v)
        yield
    finally:
        for k, v in saved.items():
            put(k, v)


def capture(route: Route):
    """A CUDA graph of all of ``route``'s steps (two eager steps first: compile and warm)."""
    with environment(route.env):
        for f in route.steps[:2]:
            f()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for f in route.steps:
                f()
    return graph


def time_interleaved(graphs: dict, steps: dict, reps: int = 5) -> dict:
    """name -> (median seconds per step, samples in ms): ``reps`` rounds, each sampling every
    graph in turn (triton's do_bench median of graph replays / steps per graph), so that the
    rows of a group share clocks and neighbours."""
    import triton.testing as tt

    samples = {name: [] for name in graphs}
    for _ in range(reps):
        for name, graph in graphs.items():
            ms = tt.do_bench(graph.replay, warmup=10, rep=60, return_mode="median")
            samples[name].append(ms / steps[name])
    return {name: (statistics.median(s) * 1e-3, s) for name, s in samples.items()}


def round_spread(samples: list) -> float | None:
    """The spread of :func:`time_interleaved`'s rounds, max / min - 1 (None with fewer than two)."""
    return max(samples) / min(samples) - 1.0 if len(samples) > 1 else None


def _fmt(v, spec):
    return format(v, spec) if v is not None else format("-", ">" + spec.split(".")[0].lstrip(">"))


def run_table(make_case, args, copy_bw: float, peers, group=None, route_width: int = 13) -> list:
    """Like harness.run_table, with the peers' rows: per (state, L, batch) group this project's
    decode_step and replay_step and every peer row are captured and timed together
    (``group(case, err, peers, key) -> (times, checks)``, default :func:`time_group`, which
    uses ``time_interleaved``; benchmarks/peers_gated_delta.py passes its own). ``speedup``:
    this project's conventional step time / the row's; ``vs_vllm``: vLLM's conventional step
    time / the row's (same group, same state dtype). Peer rows have no GB/s (the byte model is
    this project's)."""
    group = group or time_group
    rows = []
    w = route_width
    print(
        f"{'state':>5} {'L':>3} {'batch':>6} {'route':>{w}} {'us/step':>9} {'GB/s':>7} {'%copy':>6} "
        f"{'speedup':>8} {'vs_vllm':>8} {'refcheck':>9}"
    )
    for state in args.state:
        for L in args.L:
            for batch in args.batch:
                case = make_case(batch, L, state)
                err = case.refcheck()
                if err > REFCHECK_TOL:
                    print(f"# refcheck failed for state={state} L={L} batch={batch}: {err:.2e}; skipped")
                    continue
                key = dict(state=state, act=args.act, L=L, batch=batch)
                times, checks = group(case, err, peers, key)
                conv, vllm = times["decode_step"][0], times.get("vllm_conv", (None,))[0]
                for name, (t, samples) in times.items():
                    gbps = case.bytes_per_step(name) / t / 1e9 if name in OURS else None
                    row = dict(
                        key,
                        route=name,
                        peer=name not in OURS,
                        seconds=t,
                        samples_ms=samples,
                        gbps=gbps,
                        pct_copy=None if gbps is None else 100 * gbps * 1e9 / copy_bw,
                        speedup=conv / t,
                        speedup_vs_vllm=None if vllm is None else vllm / t,
                        refcheck=checks[name],
                    )
                    rows.append(row)
                    print(
                        f"{state:>5} {L:>3} {batch:>6} {name:>{w}} {t * 1e6:9.2f} {_fmt(gbps, '7.0f')} "
                        f"{_fmt(row['pct_copy'], '6.1f')} {row['speedup']:8.3f} "
                        f"{_fmt(row['speedup_vs_vllm'], '8.3f')} {row['refcheck']:9.1e}"
                    )
                del case
                torch.cuda.empty_cache()
    return rows


def time_group(case, err: float, peers: Peers, key: dict):
    """(name -> (seconds per step, samples), name -> refcheck) of this project's routes and the
    peers' rows of one case. A peer row whose eager steps or capture fail is left out with a
    note; this project's must not fail."""
    where = " ".join(f"{k}={v}" for k, v in key.items())
    routes = {r: Route([partial(case.step, r, s) for s in case.slot_sets]) for r in OURS}
    checks = dict.fromkeys(OURS, err)
    refs = reference_outputs(case, 2 * case.L + 2)
    for p in peer_rows(case, peers, where):
        try:
            with environment(p.route.env):
                checks[p.name] = p.check(refs)
        except Exception as e:  # noqa: BLE001
            print(f"# {p.name} ({where}): eager steps failed ({first_line(e)}); skipped")
            continue
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
