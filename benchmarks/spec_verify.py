"""Speculative verify step of one SSM layer (T tokens per row) for Mamba-2, GDN and KDA:
ReplaySSM verify + commit vs the conventional snapshot verify + commit, and vs T serial
conventional decode steps (GPU).

Protocol as benchmarks/mamba2_decode.py: every route's step is captured in a CUDA graph (one
step per slot set, the sets rotated over >= 512 MiB of state so that it comes from HBM), timed
as the median of 5 do_bench medians; ratios are taken within one run; a refcheck of the three
routes on the benchmark inputs (from one state, through a flush) precedes the timing. Accepted
counts are drawn per row as 1 + Binomial(T - 1, p) with mean --accept * T (default 0.7 T) and
stay fixed per slot set, so replay cursors (started spread over [0, B)) advance every replay
and rows flush at their real share. Bytes come from trtllm_replayssm.memory.

    python benchmarks/spec_verify.py                  # all families, T 2 4 8, batch 16 64 256 512, fp32 checkpoint, B 16
    python benchmarks/spec_verify.py --family gdn --T 4 --batch 256
    python benchmarks/spec_verify.py --sweep --T 4 --batch 16 256   # replay launch configurations
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import (add_max_registers_argument, copy_bandwidth, header, results_stem,  # noqa: E402
                     slot_sets, sweep_configs, time_graph, write_json)
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_decode import launch_gated_delta_decode_step  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_snapshot import launch_gated_delta_snapshot_verify  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_verify import (gated_delta_verify_launch_config,  # noqa: E402
                                                          launch_gated_delta_replay_verify)
from trtllm_replayssm.kernels.mamba2_decode import launch_mamba2_decode_step  # noqa: E402
from trtllm_replayssm.kernels.mamba2_snapshot import launch_mamba2_snapshot_verify  # noqa: E402
from trtllm_replayssm.kernels.mamba2_verify import (launch_mamba2_replay_verify,  # noqa: E402
                                                     mamba2_verify_launch_config)
from trtllm_replayssm.kernels.replay_commit import launch_replay_commit, launch_snapshot_commit  # noqa: E402
from trtllm_replayssm.memory import ssm_layer_bytes, ssm_layer_step_traffic  # noqa: E402
from trtllm_replayssm.models import GDN, KDA, MAMBA2, DeltaRuleGeometry, Mamba2Geometry  # noqa: E402
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROUTES = ("replay", "snapshot", "serial")
TARGETS = {"snapshot": 3.0, "serial": 4.0}  # issue 4, at T = 4 and batch >= 256
# Default geometries (TP=1): Mamba-2 (nheads, head_dim, d_state, ngroups) of Nemotron-3-Super;
# GDN / KDA (k_heads, v_heads, head_k_dim, head_v_dim) of Qwen3.5-122B and Kimi Linear.
GEOMETRIES = {MAMBA2: (128, 64, 128, 8), GDN: (16, 64, 128, 128), KDA: (32, 32, 128, 128)}


def model_geometry(family: str, geom: tuple):
    return (Mamba2Geometry(*geom, d_conv=4) if family == MAMBA2 else DeltaRuleGeometry(*geom, d_conv=4))


def layer_bytes(family: str, geom, B: int, T: int, state, act):
    """Per sequence per layer, SSM cache only (the conv state is the same in both schemes):
    (snapshot baseline, replay) bytes from the memory model."""
    kw = dict(buffer_len=B, spec_tokens=T, state_dtype=state, record_dtype=act, conv_dtype=act)
    snap = ssm_layer_bytes(family, model_geometry(family, geom), "conventional_spec", **kw)
    rep = ssm_layer_bytes(family, model_geometry(family, geom), "replay_spec", **kw)
    return snap.total - snap.conv, rep.total - rep.conv


class Case:
    """Inputs, caches and per-set accepted counts for one (family, geometry, T, batch, dtypes)
    point. Subclasses build the family's inputs and caches and launch its kernels."""
    min_block = 1  # fewest state rows per tile the replay verify kernel takes (--sweep)

    def __init__(self, family, geom, batch, T, B, state, act, accept, seed=0):
        self.family, self.geom, self.batch, self.T, self.B = family, geom, batch, T, B
        self.state, self.act = DT[state], DT[act]
        torch.manual_seed(seed)  # accepted counts
        self.g = torch.Generator(device="cuda").manual_seed(seed)
        state_dims = self.state_dims()
        sets = slot_sets(batch, torch.Size(state_dims).numel() * self.state.itemsize, self.g)
        self.num_slots = len(sets) * batch
        p = (accept * T - 1) / (T - 1) if T > 1 else 0.0
        self.sets = [(s, (1 + torch.binomial(torch.full((batch,), float(T - 1)), torch.full((batch,), p))
                          ).to(torch.int32).cuda()) for s in sets]
        self.mean_accepted = float(torch.cat([a for _, a in self.sets]).float().mean())
        self.make_inputs()
        self.cache = self.allocate_replay(self.num_slots)
        self.cache.checkpoint.copy_(self.randn(*self.cache.checkpoint.shape, dtype=torch.float32))
        self.fill_records()
        self.cache.cursor.copy_(torch.randint(0, B, (self.num_slots,), device="cuda", generator=self.g,
                                              dtype=torch.int32))
        self.snap = SnapshotCache.allocate(self.num_slots, state_dims, T, dtype=self.state, device="cuda")
        self.snap.state.copy_(self.cache.checkpoint)
        self.conv_state = self.snap.state  # the serial route's state (updated in place)
        self.out = torch.empty_like(self.out_like())

    def randn(self, *s, dtype=None):
        return torch.randn(*s, device="cuda", generator=self.g).to(dtype or self.act)

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
            outs = {route: torch.empty_like(self.out) for route in ROUTES}
            for route in ROUTES:
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
        kw = dict(buffer_len=self.B, spec_tokens=self.T, accepted=self.mean_accepted,
                  state_dtype=self.state, record_dtype=self.act, conv_dtype=self.act)
        mode = {"replay": "replay_spec", "snapshot": "conventional_spec", "serial": "conventional"}[route]
        t = ssm_layer_step_traffic(self.family, model_geometry(self.family, self.geom), mode, **kw)
        ssm = t.total - t.conv_read - t.conv_written
        if route == "snapshot":
            ssm += 2 * t.state_read       # the commit copies the accepted snapshot back
        if route == "serial":
            ssm *= self.T
        return ssm * self.batch


class Mamba2Case(Case):
    def state_dims(self):
        H, P, N, G = self.geom
        return (H, P, N)

    def make_inputs(self):
        H, P, N, G = self.geom
        b, T = self.batch, self.T
        self.x, self.dt = self.randn(b, T, H, P), self.randn(b, T, H)
        self.Bm, self.C = self.randn(b, T, G, N), self.randn(b, T, G, N)
        self.A = -(torch.rand(H, device="cuda", generator=self.g) + 1)
        self.dt_bias = torch.rand(H, device="cuda", generator=self.g) - 4
        self.D = torch.randn(H, device="cuda", generator=self.g)

    def out_like(self):
        return self.x

    def allocate_replay(self, num_slots):
        H, P, N, G = self.geom
        return Mamba2ReplayCache.allocate(num_slots, H, P, N, G, spec_buffer_len(self.B, self.T),
                                          state_dtype=self.state, act_dtype=self.act, device="cuda")

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
        launch_mamba2_replay_verify(c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor,
                                    c.arrivals, c.pending, self.x, self.dt, self.A, self.Bm, self.C,
                                    config=config, **self._kw(slots, out))

    def snapshot_verify(self, slots, out):
        launch_mamba2_snapshot_verify(self.snap.state, self.snap.snapshots, self.x, self.dt, self.A,
                                      self.Bm, self.C, **self._kw(slots, out))

    def conventional_step(self, s, slots, out):
        launch_mamba2_decode_step(self.conv_state, self.x[:, s], self.dt[:, s], self.A,
                                  self.Bm[:, s], self.C[:, s], **self._kw(slots, out[:, s]))


class DeltaCase(Case):
    min_block = 16  # the verify kernel's tiles are tensor-core operands

    def state_dims(self):
        hk, hv, dk, dv = self.geom
        return (hv, dv, dk)

    def make_inputs(self):
        hk, hv, dk, dv = self.geom
        b, T = self.batch, self.T
        self.q, self.k, self.v = self.randn(b, T, hk, dk), self.randn(b, T, hk, dk), self.randn(b, T, hv, dv)
        gshape = (b, T, hv, dk) if self.family == KDA else (b, T, hv)
        self.gate = -(torch.rand(gshape, device="cuda", generator=self.g) * 0.39 + 0.01)
        self.beta = torch.sigmoid(torch.randn(b, T, hv, device="cuda", generator=self.g))
        self.scale = dk ** -0.5

    def out_like(self):
        return self.v

    def allocate_replay(self, num_slots):
        cls = KDAReplayCache if self.family == KDA else GDNReplayCache
        return cls.allocate(num_slots, *self.geom, spec_buffer_len(self.B, self.T),
                            state_dtype=self.state, record_dtype=self.act, device="cuda")

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
        launch_gated_delta_replay_verify(c.checkpoint, c.d_records, c.k_records, c.g_records,
                                         c.cursor, c.arrivals, c.pending, self.q, self.k, self.v,
                                         self.gate, self.beta, config=config, **self._kw(slots, out))

    def snapshot_verify(self, slots, out):
        launch_gated_delta_snapshot_verify(self.snap.state, self.snap.snapshots, self.q, self.k,
                                           self.v, self.gate, self.beta, **self._kw(slots, out))

    def conventional_step(self, s, slots, out):
        launch_gated_delta_decode_step(self.conv_state, self.q[:, s], self.k[:, s], self.v[:, s],
                                       self.gate[:, s], self.beta[:, s], **self._kw(slots, out[:, s]))


def make_case(family, *args, **kw) -> Case:
    return (Mamba2Case if family == MAMBA2 else DeltaCase)(family, *args, **kw)


def run(args, copy_bw):
    rows = []
    print(f"{'family':>6} {'T':>2} {'batch':>6} {'route':>9} {'us/step':>9} {'GB/s':>7} {'%copy':>6} "
          f"{'vs snap':>8} {'vs serial':>9} {'refcheck':>9}")
    for family in args.family:
        geom = args.geometry or GEOMETRIES[family]
        for T in args.T:
            for batch in args.batch:
                case = make_case(family, geom, batch, T, args.B, args.state, args.act, args.accept)
                err = case.refcheck()
                if err > 5e-2:
                    print(f"# refcheck failed for {family} T={T} batch={batch}: {err:.2e}; skipped")
                    continue
                times = {route: case.time(route) for route in ROUTES}
                for route in ROUTES:
                    t, samples = times[route]
                    gbs = case.bytes_per_step(route) / t / 1e9
                    row = dict(family=family, geometry=geom, T=T, batch=batch, B=args.B,
                               state=args.state, act=args.act, accepted_mean=case.mean_accepted,
                               route=route, seconds=t, samples_ms=samples, gbps=gbs,
                               pct_copy=100 * gbs * 1e9 / copy_bw,
                               speedup_vs_snapshot=times["snapshot"][0] / t,
                               speedup_vs_serial=times["serial"][0] / t, refcheck=err)
                    rows.append(row)
                    print(f"{family:>6} {T:>2} {batch:>6} {route:>9} {t * 1e6:9.2f} {gbs:7.0f} "
                          f"{row['pct_copy']:6.1f} {row['speedup_vs_snapshot']:8.3f} "
                          f"{row['speedup_vs_serial']:9.3f} {err:9.1e}")
                del case
                torch.cuda.empty_cache()
    return rows


def run_sweep(args) -> None:
    """Time the replay verify + commit step for every launch configuration of the harness's
    sweep (and the default) per (family, T, batch); print the best next to the default."""
    print(f"{'family':>6} {'T':>2} {'batch':>6} {'best':>14} {'us':>8} {'default':>14} {'us':>8}")
    for family in args.family:
        geom = args.geometry or GEOMETRIES[family]
        for T in args.T:
            for batch in args.batch:
                case = make_case(family, geom, batch, T, args.B, args.state, args.act, args.accept)
                d = case.default_config()
                cfgs = list(dict.fromkeys(sweep_configs(case.rows(), args.max_registers, min_block=case.min_block) + [d]))
                res = {cfg: case.time("replay", reps=3, config=cfg)[0] for cfg in cfgs}
                k = min(res, key=res.get)
                print(f"{family:>6} {T:>2} {batch:>6} {k.label():>14} {res[k] * 1e6:8.2f} {d.label():>14} {res[d] * 1e6:8.2f}")
                print("   all (block,warps,chunks,stages[,r<max registers>]:us): " +
                      " ".join(f"{c.label()}:{t * 1e6:.1f}" for c, t in sorted(res.items(), key=lambda kv: kv[1])))
                del case
                torch.cuda.empty_cache()


def print_memory(args):
    print("# SSM cache per sequence per layer (conv state excluded, same in both schemes)")
    print(f"{'family':>6} {'T':>2} {'snapshot (1+T) states':>22} {'replay 1 state + (B+T) records':>31} {'ratio':>6}")
    table = []
    for family in args.family:
        geom = args.geometry or GEOMETRIES[family]
        cls = {MAMBA2: Mamba2ReplayCache, GDN: GDNReplayCache, KDA: KDAReplayCache}[family]
        dtype_kw = "act_dtype" if family == MAMBA2 else "record_dtype"
        for T in args.T:
            snap, rep = layer_bytes(family, geom, args.B, T, DT[args.state], DT[args.act])
            one = cls.allocate(1, *geom, spec_buffer_len(args.B, T), state_dtype=DT[args.state],
                               **{dtype_kw: DT[args.act]}, device="cuda")
            allocated = sum(getattr(one, f).nbytes for f in vars(one))
            if allocated != rep:
                print(f"# memory model {rep} B != allocated cache {allocated} B per slot")
            table.append(dict(family=family, geometry=geom, T=T, snapshot_bytes=snap, replay_bytes=rep))
            print(f"{family:>6} {T:>2} {snap / 2**20:18.2f} MiB {rep / 2**20:27.2f} MiB {snap / rep:6.2f}")
    return table


def check_targets(rows):
    for r in rows:
        if r["route"] == "replay" and r["T"] == 4 and r["batch"] >= 256:
            for base, want in TARGETS.items():
                got = r[f"speedup_vs_{base}"]
                print(f"# target {r['family']} T=4 batch={r['batch']} vs {base}: {got:.2f}x "
                      f"(want >= {want}x) {'met' if got >= want else 'MISSED'}")


def plot(rows, path, args):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    families = [f for f in args.family if any(r["family"] == f for r in rows)]
    fig, axes = plt.subplots(len(families), 2, figsize=(11, 4 * len(families)), sharey=True, squeeze=False)
    for ax_row, family in zip(axes, families):
        geom = args.geometry or GEOMETRIES[family]
        for ax, base in zip(ax_row, ("snapshot", "serial")):
            for T in sorted({r["T"] for r in rows}):
                pts = sorted((r["batch"], r[f"speedup_vs_{base}"]) for r in rows
                             if r["family"] == family and r["route"] == "replay" and r["T"] == T)
                if pts:
                    ax.plot(*zip(*pts), marker="o", label=f"T={T}")
            ax.axhline(TARGETS[base], color="gray", lw=0.8, ls="--")
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch")
            ax.set_title(f"{family} {geom}, {args.state} state, {args.act} act, B={args.B}\n"
                         f"replay verify+commit vs {base}", fontsize=9)
            ax.legend()
        ax_row[0].set_ylabel("speedup")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=[MAMBA2, GDN, KDA], choices=[MAMBA2, GDN, KDA])
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=None,
                    help="with one --family: Mamba-2 nheads,head_dim,d_state,ngroups or GDN/KDA "
                         "k_heads,v_heads,head_k_dim,head_v_dim (defaults: Nemotron-3-Super, "
                         "Qwen3.5-122B, Kimi Linear, TP=1)")
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 64, 256, 512])
    ap.add_argument("--T", type=int, nargs="+", default=[2, 4, 8], help="tokens verified per step (drafts + 1)")
    ap.add_argument("--B", type=int, default=16, help="history records (buffer L = B + T)")
    ap.add_argument("--state", default="f32", choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    ap.add_argument("--accept", type=float, default=0.7, help="mean accepted tokens per step / T")
    ap.add_argument("--sweep", action="store_true", help="time replay launch configurations instead")
    add_max_registers_argument(ap)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if args.geometry is not None and len(args.family) != 1:
        ap.error("--geometry needs exactly one --family")
    if not torch.cuda.is_available():
        sys.exit("spec_verify: needs a CUDA GPU")
    for T in args.T:
        spec_buffer_len(args.B, T)  # B >= T
    copy_bw = copy_bandwidth()
    print(header("spec_verify", copy_bw))
    if args.sweep:
        run_sweep(args)
        return
    memory = print_memory(args)
    rows = run(args, copy_bw)
    check_targets(rows)
    stem = results_stem(args.out_dir, "spec_verify")
    write_json(stem, copy_bw, rows, memory=memory)
    plot(rows, stem + ".png", args)
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/spec_verify.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
