"""Speculative verify step of one Mamba-2 layer (T tokens per row): ReplaySSM verify + commit
vs the conventional snapshot verify + commit, and vs T serial conventional decode steps (GPU).

Protocol as benchmarks/mamba2_decode.py: every route's step is captured in a CUDA graph (one
step per slot set, the sets rotated over >= 512 MiB of state so that it comes from HBM), timed
as the median of 5 do_bench medians; ratios are taken within one run; a refcheck of the three
routes on the benchmark inputs (from one state, through a flush) precedes the timing. Accepted
counts are drawn per row as 1 + Binomial(T - 1, p) with mean --accept * T (default 0.7 T) and
stay fixed per slot set, so replay cursors (started spread over [0, B)) advance every replay
and rows flush at their real share. Bytes come from trtllm_replayssm.memory.

    python benchmarks/spec_verify.py                 # T 2 4 8, batch 16 64 256 512, fp32 checkpoint, B 16
    python benchmarks/spec_verify.py --T 4 --batch 256 --state bf16
"""
from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import copy_bandwidth, header, results_stem, slot_sets, time_graph, write_json  # noqa: E402
from trtllm_replayssm.cache import Mamba2ReplayCache  # noqa: E402
from trtllm_replayssm.kernels.mamba2_decode import launch_mamba2_decode_step  # noqa: E402
from trtllm_replayssm.kernels.mamba2_snapshot import launch_mamba2_snapshot_verify  # noqa: E402
from trtllm_replayssm.kernels.mamba2_verify import launch_mamba2_replay_verify  # noqa: E402
from trtllm_replayssm.kernels.replay_commit import launch_replay_commit, launch_snapshot_commit  # noqa: E402
from trtllm_replayssm.memory import ssm_layer_bytes, ssm_layer_step_traffic  # noqa: E402
from trtllm_replayssm.models import MAMBA2, Mamba2Geometry  # noqa: E402
from trtllm_replayssm.ops import SnapshotCache, spec_buffer_len  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROUTES = ("replay", "snapshot", "serial")
TARGETS = {"snapshot": 3.0, "serial": 4.0}  # issue 4, at T = 4 and batch >= 256


def layer_bytes(geom, B: int, T: int, state, act):
    """Per sequence per layer, SSM cache only (the conv state is the same in both schemes):
    (snapshot baseline, replay) bytes from the memory model."""
    g = Mamba2Geometry(*geom, d_conv=4)
    kw = dict(buffer_len=B, spec_tokens=T, state_dtype=state, record_dtype=act, conv_dtype=act)
    snap = ssm_layer_bytes(MAMBA2, g, "conventional_spec", **kw)
    rep = ssm_layer_bytes(MAMBA2, g, "replay_spec", **kw)
    return snap.total - snap.conv, rep.total - rep.conv


class Case:
    """Inputs, caches and per-set accepted counts for one (geometry, T, batch, dtypes) point."""

    def __init__(self, geom, batch, T, B, state, act, accept, seed=0):
        self.geom, self.batch, self.T, self.B = geom, batch, T, B
        self.state, self.act = DT[state], DT[act]
        H, P, N, G = geom
        torch.manual_seed(seed)  # accepted counts
        g = torch.Generator(device="cuda").manual_seed(seed)
        sets = slot_sets(batch, H * P * N * self.state.itemsize, g)
        self.num_slots = len(sets) * batch
        p = (accept * T - 1) / (T - 1) if T > 1 else 0.0
        self.sets = [(s, (1 + torch.binomial(torch.full((batch,), float(T - 1)), torch.full((batch,), p))
                          ).to(torch.int32).cuda()) for s in sets]
        self.mean_accepted = float(torch.cat([a for _, a in self.sets]).float().mean())

        def r(*s, dtype=self.act):
            return torch.randn(*s, device="cuda", generator=g).to(dtype)
        self.x, self.dt, self.Bm, self.C = r(batch, T, H, P), r(batch, T, H), r(batch, T, G, N), r(batch, T, G, N)
        self.A = -(torch.rand(H, device="cuda", generator=g) + 1)
        self.dt_bias = torch.rand(H, device="cuda", generator=g) - 4
        self.D = torch.randn(H, device="cuda", generator=g)
        self.out = torch.empty_like(self.x)
        L = spec_buffer_len(B, T)
        self.cache = Mamba2ReplayCache.allocate(self.num_slots, H, P, N, G, L, state_dtype=self.state,
                                                act_dtype=self.act, device="cuda")
        self.cache.checkpoint.copy_(r(*self.cache.checkpoint.shape, dtype=torch.float32))
        self.cache.x_records.normal_(generator=g)
        self.cache.B_records.normal_(generator=g)
        self.cache.dt_records.uniform_(0.01, 0.05, generator=g)
        self.cache.cursor.copy_(torch.randint(0, B, (self.num_slots,), device="cuda", generator=g,
                                              dtype=torch.int32))
        self.snap = SnapshotCache.allocate(self.num_slots, (H, P, N), T, dtype=self.state, device="cuda")
        self.snap.state.copy_(self.cache.checkpoint)
        self.conv_state = self.snap.state  # the serial route's state (updated in place)

    def _kw(self, slots, out=None):
        return dict(slot_ids=slots, D=self.D, dt_bias=self.dt_bias, out=self.out if out is None else out)

    def step(self, route, slots, accepted, out=None):
        if route == "replay":
            c = self.cache
            launch_mamba2_replay_verify(c.checkpoint, c.x_records, c.dt_records, c.B_records,
                                        c.cursor, c.arrivals, c.pending, self.x, self.dt, self.A,
                                        self.Bm, self.C, **self._kw(slots, out))
            launch_replay_commit(c.cursor, c.pending, slots, accepted)
        elif route == "snapshot":
            launch_mamba2_snapshot_verify(self.snap.state, self.snap.snapshots, self.x, self.dt,
                                          self.A, self.Bm, self.C, **self._kw(slots, out))
            launch_snapshot_commit(self.snap.state, self.snap.snapshots, slots, accepted)
        elif route == "serial":
            o = self.out if out is None else out
            for s in range(self.T):
                launch_mamba2_decode_step(self.conv_state, self.x[:, s], self.dt[:, s], self.A,
                                          self.Bm[:, s], self.C[:, s], slot_ids=slots, D=self.D,
                                          dt_bias=self.dt_bias, out=o[:, s])
        else:
            raise ValueError(route)

    def time(self, route, reps=5):
        return time_graph(lambda sa: self.step(route, *sa), self.sets, reps)

    def refcheck(self) -> float:
        """The three routes from one state over B / T + 2 all-accepted steps (a flush
        included): worst relative difference of replay and serial outputs to the snapshot's."""
        slots, _ = self.sets[0]
        idx = slots.long()
        c, snap = self.cache, self.snap
        saved = [t[idx].clone() for t in (c.checkpoint, c.x_records, c.dt_records, c.B_records,
                                          c.cursor, c.pending, snap.state)]
        c.cursor[idx] = 0
        snap.state[idx] = c.checkpoint[idx].to(snap.state.dtype)
        self.conv_state = snap.state.clone()
        all_in = torch.full_like(slots, self.T)
        worst = 0.0
        for _ in range(self.B // self.T + 2):
            outs = {route: torch.empty_like(self.out) for route in ROUTES}
            self.step("replay", slots, all_in, outs["replay"])
            self.step("snapshot", slots, all_in, outs["snapshot"])
            self.step("serial", slots, all_in, outs["serial"])
            ref = outs["snapshot"].float()
            for route in ("replay", "serial"):
                worst = max(worst, float((outs[route].float() - ref).abs().max() / ref.abs().max()))
        for t, v in zip((c.checkpoint, c.x_records, c.dt_records, c.B_records, c.cursor, c.pending,
                         snap.state), saved):
            t[idx] = v
        self.conv_state = snap.state
        return worst

    def bytes_per_step(self, route) -> float:
        """Cache bytes moved per step for the batch (step inputs and outputs not counted)."""
        g = Mamba2Geometry(*self.geom, d_conv=4)
        kw = dict(buffer_len=self.B, spec_tokens=self.T, accepted=self.mean_accepted,
                  state_dtype=self.state, record_dtype=self.act, conv_dtype=self.act)
        mode = {"replay": "replay_spec", "snapshot": "conventional_spec", "serial": "conventional"}[route]
        t = ssm_layer_step_traffic(MAMBA2, g, mode, **kw)
        ssm = t.total - t.conv_read - t.conv_written
        if route == "snapshot":
            ssm += 2 * t.state_read       # the commit copies the accepted snapshot back
        if route == "serial":
            ssm *= self.T
        return ssm * self.batch


def run(args, copy_bw):
    rows = []
    print(f"{'T':>2} {'batch':>6} {'route':>9} {'us/step':>9} {'GB/s':>7} {'%copy':>6} "
          f"{'vs snap':>8} {'vs serial':>9} {'refcheck':>9}")
    for T in args.T:
        for batch in args.batch:
            case = Case(args.geometry, batch, T, args.B, args.state, args.act, args.accept)
            err = case.refcheck()
            if err > 5e-2:
                print(f"# refcheck failed for T={T} batch={batch}: {err:.2e}; skipped")
                continue
            times = {route: case.time(route) for route in ROUTES}
            for route in ROUTES:
                t, samples = times[route]
                gbs = case.bytes_per_step(route) / t / 1e9
                row = dict(T=T, batch=batch, B=args.B, state=args.state, act=args.act,
                           accepted_mean=case.mean_accepted, route=route, seconds=t,
                           samples_ms=samples, gbps=gbs, pct_copy=100 * gbs * 1e9 / copy_bw,
                           speedup_vs_snapshot=times["snapshot"][0] / t,
                           speedup_vs_serial=times["serial"][0] / t, refcheck=err)
                rows.append(row)
                print(f"{T:>2} {batch:>6} {route:>9} {t * 1e6:9.2f} {gbs:7.0f} {row['pct_copy']:6.1f} "
                      f"{row['speedup_vs_snapshot']:8.3f} {row['speedup_vs_serial']:9.3f} {err:9.1e}")
            del case
            torch.cuda.empty_cache()
    return rows


def print_memory(args):
    print("# SSM cache per sequence per layer (conv state excluded, same in both schemes)")
    print(f"{'T':>2} {'snapshot (1+T) states':>22} {'replay 1 state + (B+T) records':>31} {'ratio':>6}")
    H, P, N, G = args.geometry
    table = []
    for T in args.T:
        snap, rep = layer_bytes(args.geometry, args.B, T, DT[args.state], DT[args.act])
        one = Mamba2ReplayCache.allocate(1, H, P, N, G, spec_buffer_len(args.B, T),
                                         state_dtype=DT[args.state], act_dtype=DT[args.act], device="cuda")
        allocated = sum(getattr(one, f).nbytes for f in vars(one))
        if allocated != rep:
            print(f"# memory model {rep} B != allocated cache {allocated} B per slot")
        table.append(dict(T=T, snapshot_bytes=snap, replay_bytes=rep))
        print(f"{T:>2} {snap / 2**20:18.2f} MiB {rep / 2**20:27.2f} MiB {snap / rep:6.2f}")
    return table


def check_targets(rows):
    for r in rows:
        if r["route"] == "replay" and r["T"] == 4 and r["batch"] >= 256:
            for base, want in TARGETS.items():
                got = r[f"speedup_vs_{base}"]
                print(f"# target T=4 batch={r['batch']} vs {base}: {got:.2f}x (want >= {want}x) "
                      f"{'met' if got >= want else 'MISSED'}")


def plot(rows, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, base in zip(axes, ("snapshot", "serial")):
        for T in sorted({r["T"] for r in rows}):
            pts = sorted((r["batch"], r[f"speedup_vs_{base}"]) for r in rows
                         if r["route"] == "replay" and r["T"] == T)
            ax.plot(*zip(*pts), marker="o", label=f"T={T}")
        ax.axhline(TARGETS[base], color="gray", lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_title(f"{title}\nreplay verify+commit vs {base}", fontsize=9)
        ax.legend()
    axes[0].set_ylabel("speedup")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=(128, 64, 128, 8),
                    help="nheads,head_dim,d_state,ngroups (default: Nemotron-3-Super, TP=1)")
    ap.add_argument("--batch", type=int, nargs="+", default=[16, 64, 256, 512])
    ap.add_argument("--T", type=int, nargs="+", default=[2, 4, 8], help="tokens verified per step (drafts + 1)")
    ap.add_argument("--B", type=int, default=16, help="history records (buffer L = B + T)")
    ap.add_argument("--state", default="f32", choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    ap.add_argument("--accept", type=float, default=0.7, help="mean accepted tokens per step / T")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("spec_verify: needs a CUDA GPU")
    for T in args.T:
        spec_buffer_len(args.B, T)  # B >= T
    copy_bw = copy_bandwidth()
    print(header("spec_verify", copy_bw))
    memory = print_memory(args)
    rows = run(args, copy_bw)
    check_targets(rows)
    stem = results_stem(args.out_dir, "spec_verify")
    write_json(stem, copy_bw, rows, geometry=args.geometry, memory=memory)
    plot(rows, stem + ".png", f"Mamba-2 {args.geometry}, {args.state} checkpoint, {args.act} act, B={args.B}")
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/spec_verify.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
