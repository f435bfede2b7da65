"""Steady-state Mamba-2 decode step: ReplaySSM vs the conventional kernel (GPU).

Each case times one layer's decode step for a batch, captured in a CUDA graph. The slot pool
holds several sets of `batch` sequences (>= 512 MiB of state in all) and consecutive steps use
different sets, so the state comes from HBM as in a real model (other layers run in between).
Replay cursors start spread over [0, L) and advance every step: flushes are included at their
real share. Bytes moved come from trtllm_replayssm.memory (the planner's model).

    python benchmarks/mamba2_decode.py                       # the README table
    python benchmarks/mamba2_decode.py --sweep               # launch-configuration sweep
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from trtllm_replayssm.cache import Mamba2ReplayCache  # noqa: E402
from trtllm_replayssm.kernels.common import LaunchConfig, mamba2_launch_config  # noqa: E402
from trtllm_replayssm.kernels.mamba2_decode import launch_mamba2_decode_step  # noqa: E402
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step  # noqa: E402
from trtllm_replayssm.memory import mamba2_step_bytes  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
POOL_BYTES = 512 << 20


def copy_bandwidth() -> float:
    """Device-to-device copy, bytes read + written per second (median of 20)."""
    import triton.testing as tt
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    ms = tt.do_bench(lambda: dst.copy_(src), warmup=50, rep=300, return_mode="median")
    del src, dst
    return 2 * (1 << 30) / (ms * 1e-3)


class Case:
    """Inputs, caches and CUDA graphs for one (geometry, batch, L, dtypes) point."""

    def __init__(self, geom, batch, L, state, act, seed=0):
        self.nheads, self.head_dim, self.d_state, self.ngroups = geom
        self.batch, self.L, self.state, self.act = batch, L, DT[state], DT[act]
        g = torch.Generator(device="cuda").manual_seed(seed)
        state_bytes = self.nheads * self.head_dim * self.d_state * self.state.itemsize
        self.sets = max(1, math.ceil(POOL_BYTES / (batch * state_bytes)))
        self.num_slots = self.sets * batch
        perm = torch.randperm(self.num_slots, device="cuda", generator=g).to(torch.int32)
        self.slot_sets = [perm[i * batch:(i + 1) * batch].contiguous() for i in range(self.sets)]
        H, P, N, G = self.nheads, self.head_dim, self.d_state, self.ngroups

        def r(*s, dtype=self.act):
            return torch.randn(*s, device="cuda", generator=g).to(dtype)
        self.x, self.dt, self.B, self.C = r(batch, H, P), r(batch, H), r(batch, G, N), r(batch, G, N)
        self.A = -(torch.rand(H, device="cuda", generator=g) + 1)
        self.dt_bias = torch.rand(H, device="cuda", generator=g) - 4
        self.D = torch.randn(H, device="cuda", generator=g)
        self.out = torch.empty_like(self.x)
        self.cache = Mamba2ReplayCache.allocate(self.num_slots, H, P, N, G, L, state_dtype=self.state,
                                                act_dtype=self.act, device="cuda")
        self.cache.checkpoint.copy_(r(*self.cache.checkpoint.shape, dtype=torch.float32))
        self.cache.x_records.normal_(generator=g)
        self.cache.B_records.normal_(generator=g)
        self.cache.dt_records.uniform_(0.01, 0.05, generator=g)
        self.cache.cursor.copy_(torch.randint(0, L, (self.num_slots,), device="cuda", generator=g,
                                              dtype=torch.int32))
        self.conv_state = self.cache.checkpoint  # the conventional kernel updates it in place

    def _common(self, slots):
        return dict(slot_ids=slots, D=self.D, dt_bias=self.dt_bias, out=self.out)

    def step(self, route, slots, config=None):
        c = self.cache
        if route == "decode_step":
            launch_mamba2_decode_step(self.conv_state, self.x, self.dt, self.A, self.B, self.C,
                                      config=config, **self._common(slots))
        elif route == "replay_step":
            launch_mamba2_replay_step(c.checkpoint, c.x_records, c.dt_records, c.B_records,
                                      c.cursor, c.arrivals, self.x, self.dt, self.A, self.B,
                                      self.C, config=config, **self._common(slots))
        else:
            raise ValueError(route)

    def time(self, route, config=None, reps=5):
        """Median over `reps` runs of the per-step time (seconds) of a graph of all slot sets."""
        import triton.testing as tt
        for s in self.slot_sets[:2]:
            self.step(route, s, config)          # compile + warm
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for s in self.slot_sets:
                self.step(route, s, config)
        samples = [tt.do_bench(graph.replay, warmup=10, rep=60, return_mode="median") / self.sets
                   for _ in range(reps)]
        del graph
        return statistics.median(samples) * 1e-3, samples

    def refcheck(self) -> float:
        """Replay vs conventional outputs over L+1 steps from the same state (rel. max error)."""
        c = self.cache
        slots = self.slot_sets[0]
        saved = {k: v.clone() for k, v in vars(c).items()}
        c.cursor[slots.long()] = 0
        state = c.checkpoint.clone()
        worst = 0.0
        for _ in range(self.L + 1):
            y_conv = torch.empty_like(self.out)
            launch_mamba2_decode_step(state, self.x, self.dt, self.A, self.B, self.C, slot_ids=slots,
                                      D=self.D, dt_bias=self.dt_bias, out=y_conv)
            self.step("replay_step", slots)
            worst = max(worst, float((self.out.float() - y_conv.float()).abs().max() /
                                     y_conv.float().abs().max()))
        for k, v in saved.items():
            getattr(c, k).copy_(v)
        return worst

    def bytes_per_step(self, route):
        b = mamba2_step_bytes(route, nheads=self.nheads, head_dim=self.head_dim, d_state=self.d_state,
                              ngroups=self.ngroups, L=self.L, state_dtype=self.state, act_dtype=self.act)
        return b.total * self.batch


def run_table(args, copy_bw):
    rows = []
    routes = ["decode_step", "replay_step"]
    print(f"{'state':>5} {'L':>3} {'batch':>6} {'route':>12} {'us/step':>9} {'GB/s':>7} {'%copy':>6} {'speedup':>8} {'refcheck':>9}")
    for state in args.state:
        for L in args.L:
            for batch in args.batch:
                case = Case(args.geometry, batch, L, state, args.act)
                err = case.refcheck()
                if err > 5e-2:
                    print(f"# refcheck failed for state={state} L={L} batch={batch}: {err:.2e}; skipped")
                    continue
                times = {}
                for route in routes:
                    if route != "replay_step" and L != args.L[0]:
                        times[route] = next(r["seconds"] for r in rows if r["route"] == route and
                                            r["state"] == state and r["batch"] == batch)
                        continue
                    t, samples = case.time(route)
                    times[route] = t
                    gbs = case.bytes_per_step(route) / t / 1e9
                    rows.append(dict(state=state, act=args.act, L=L, batch=batch, route=route,
                                     seconds=t, samples_ms=samples, gbps=gbs,
                                     pct_copy=100 * gbs * 1e9 / copy_bw,
                                     speedup=None, refcheck=err))
                for r in rows:
                    if r["state"] == state and r["L"] == L and r["batch"] == batch:
                        r["speedup"] = times["decode_step"] / r["seconds"]
                        print(f"{state:>5} {L:>3} {batch:>6} {r['route']:>12} {r['seconds']*1e6:9.2f} "
                              f"{r['gbps']:7.0f} {r['pct_copy']:6.1f} {r['speedup']:8.3f} {err:9.1e}")
                del case
                torch.cuda.empty_cache()
    return rows


def sweep_configs(head_dim):
    """Replay launch configurations tried by --sweep: one tile per program, or one head per
    program in a pipelined loop."""
    cfgs = [LaunchConfig(b, w) for b in (8, 16, 32) for w in (1, 2, 4) if b <= head_dim]
    for b in (8, 16):
        chunks = -(-head_dim // b)
        cfgs += [LaunchConfig(b, w, chunks, s) for w in (1, 2, 4) for s in (2, 3, 4)]
    return cfgs


def run_sweep(args):
    print(f"{'state':>5} {'batch':>6} {'L':>3} {'best':>22} {'us':>8} {'default':>22} {'us':>8}")
    for state in args.state:
        for batch in args.batch:
            case = Case(args.geometry, batch, args.L[0], state, args.act)
            res = {cfg: case.time("replay_step", cfg, reps=3)[0] for cfg in sweep_configs(case.head_dim)}
            d = mamba2_launch_config("replay_step", case.head_dim, case.d_state, batch, case.state)
            d_t = res[d] if d in res else case.time("replay_step", d, reps=3)[0]
            k = min(res, key=res.get)
            fmt = lambda c: f"{c.block_head_dim},{c.num_warps},{c.chunks},{c.num_stages}"  # noqa: E731
            print(f"{state:>5} {batch:>6} {args.L[0]:>3} {fmt(k):>22} {res[k]*1e6:8.2f} {fmt(d):>22} {d_t*1e6:8.2f}")
            print("   all (block,warps,chunks,stages:us): " +
                  " ".join(f"{fmt(c)}:{t*1e6:.1f}" for c, t in sorted(res.items(), key=lambda kv: kv[1])))
            del case
            torch.cuda.empty_cache()


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, state in zip(axes, ["f32", "bf16"]):
        for L in sorted({r["L"] for r in rows}):
            pts = [(r["batch"], r["speedup"]) for r in rows if r["state"] == state and r["L"] == L
                   and r["route"] == "replay_step"]
            if pts:
                ax.plot(*zip(*sorted(pts)), marker="o", label=f"replay L={L}")
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch")
        ax.set_title(f"Mamba-2 (128,64,128,8), {state} checkpoint, bf16 act")
        ax.legend()
    axes[0].set_ylabel("speedup vs conventional kernel")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=(128, 64, 128, 8),
                    help="nheads,head_dim,d_state,ngroups (default: Nemotron-3-Super, TP=1)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, nargs="+", default=[16, 8, 32])
    ap.add_argument("--state", nargs="+", default=["f32", "bf16"], choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    ap.add_argument("--sweep", action="store_true", help="time every launch configuration instead")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("mamba2_decode: needs a CUDA GPU")
    import triton
    name = torch.cuda.get_device_name()
    copy_bw = copy_bandwidth()
    print(f"# bench mamba2_decode | {datetime.date.today()} | {name} | torch {torch.__version__} | "
          f"triton {triton.__version__} | copy {copy_bw / 1e12:.2f} TB/s")
    if args.sweep:
        run_sweep(args)
        return
    rows = run_table(args, copy_bw)
    os.makedirs(args.out_dir, exist_ok=True)
    stem = os.path.join(args.out_dir, f"{datetime.date.today()}-{name.split()[-1].lower()}-mamba2_decode")
    with open(stem + ".json", "w") as f:
        json.dump(dict(device=name, date=str(datetime.date.today()), torch=torch.__version__,
                       triton=triton.__version__, copy_bytes_per_s=copy_bw,
                       geometry=args.geometry, rows=rows), f, indent=1)
    plot(rows, stem + ".png")
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/mamba2_decode.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
