"""Tensor-parallel decode step on N GPUs: per-rank SSM time, all-reduce time, scaling (NCCL).

Launch one process per GPU (NVLink multicast off):

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 \\
        mpirun -n 2 python benchmarks/tp_decode.py --family mamba2     # TP 2 (also 4, 8)
    python benchmarks/tp_decode.py --family mamba2                     # TP 1

For each batch, on every rank:
- ``ssm``: one SSM layer's decode op on the rank's shard (conventional ``decode_step`` and
  ReplaySSM ``replay_step``), captured in a CUDA graph over slot sets that rotate through
  >= 512 MiB of state (harness.py), cursors spread over [0, L); the slowest rank is reported.
  Rank 0 also times the whole layer on its GPU (``ssm_tp1``), so one run gives the scaling.
- ``allreduce``: the row-parallel out_proj all-reduce, [batch, hidden] in the activation
  dtype (and, for Mamba-2 with replicated groups, the [batch, ngroups] fp32 norm statistics),
  median over 50 back-to-back calls.
- ``step``: an eager decode step of a stack of ``--layers`` mixers (projections, conv, SSM op,
  norm, all-reduces; tp_decode's HybridDecodeStack), per layer.
Before timing, replay is checked against the conventional op over L + 1 steps on the
benchmark's inputs (``refcheck``); a failing case is skipped.

Geometry per family (preset's first SSM layer): mamba2 = Nemotron-3-Super (128, 64, 128, 8),
gdn = Qwen3.5-122B (16, 64, 128, 128), kda = Kimi Linear (32, 32, 128, 128).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import copy_bandwidth, header, results_stem, slot_sets, time_graph
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache, Mamba2ReplayCache
from trtllm_replayssm.models import GDN, KDA, MAMBA2, PRESETS, load_model
from trtllm_replayssm.ops import (
    gdn_decode_step,
    gdn_replay_step,
    kda_decode_step,
    kda_replay_step,
    mamba2_decode_step,
    mamba2_replay_step,
)
from trtllm_replayssm.tp import (
    HybridDecodeStack,
    TPGroup,
    init_ranks,
    shutdown_distributed,
    ssm_stack,
)

PRESET = {MAMBA2: "nemotron-3-super-120b", GDN: "qwen3.5-122b-a10b", KDA: "kimi-linear-48b"}
DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
ROUTES = ("decode_step", "replay_step")


class OpCase:
    """One SSM layer's decode op for ``geometry`` (one rank's or whole) at ``batch``."""

    def __init__(self, kind, geometry, batch, L, state, act, seed=0):
        g, dev = geometry, "cuda"
        gen = torch.Generator(device=dev).manual_seed(seed)
        self.kind, self.L = kind, L

        def r(*shape, dtype=act):
            return torch.randn(*shape, device=dev, generator=gen).to(dtype)

        if kind == MAMBA2:
            per_row = g.nheads * g.head_dim * g.d_state * state.itemsize
            self.sets = slot_sets(batch, per_row, gen)
            ns = len(self.sets) * batch
            self.cache = Mamba2ReplayCache.allocate(
                ns, g.nheads, g.head_dim, g.d_state, g.ngroups, L, state_dtype=state, act_dtype=act, device=dev
            )
            self.inputs = (
                r(batch, g.nheads, g.head_dim),
                r(batch, g.nheads),
                -(torch.rand(g.nheads, device=dev, generator=gen) + 1),
                r(batch, g.ngroups, g.d_state),
                r(batch, g.ngroups, g.d_state),
            )
            self.kw = dict(
                D=torch.randn(g.nheads, device=dev, generator=gen), dt_bias=torch.rand(g.nheads, device=dev, generator=gen) - 4
            )
            self.ops = {"decode_step": mamba2_decode_step, "replay_step": mamba2_replay_step}
        else:
            per_row = g.v_heads * g.head_v_dim * g.head_k_dim * state.itemsize
            self.sets = slot_sets(batch, per_row, gen)
            ns = len(self.sets) * batch
            cls = KDAReplayCache if kind == KDA else GDNReplayCache
            self.cache = cls.allocate(
                ns, g.k_heads, g.v_heads, g.head_k_dim, g.head_v_dim, L, state_dtype=state, record_dtype=act, device=dev
            )
            gshape = (batch, g.v_heads) + ((g.head_k_dim,) if kind == KDA else ())
            self.inputs = (
                r(batch, g.k_heads, g.head_k_dim),
                r(batch, g.k_heads, g.head_k_dim),
                r(batch, g.v_heads, g.head_v_dim),
                -0.01 - 0.1 * torch.rand(*gshape, device=dev, generator=gen),
                torch.rand(batch, g.v_heads, device=dev, generator=gen),
            )
            self.kw = {}
            self.ops = (
                {"decode_step": kda_decode_step, "replay_step": kda_replay_step}
                if kind == KDA
                else {"decode_step": gdn_decode_step, "replay_step": gdn_replay_step}
            )
        self.cache.checkpoint.normal_(generator=gen)
        self.cache.cursor.copy_(torch.randint(0, L, (ns,), device=dev, generator=gen, dtype=torch.int32))
        self.out = torch.empty_like(self.inputs[2] if kind != MAMBA2 else self.inputs[0])

    def step(self, route, slots, out=None):
        target = self.cache if route == "replay_step" else self.cache.checkpoint
        return self.ops[route](target, *self.inputs, slot_ids=slots, out=self.out if out is None else out, **self.kw)

    def refcheck(self) -> float:
        """Replay vs conventional outputs over L + 1 steps from one state (max rel. error)."""
        c, slots = self.cache, self.sets[0]
        saved = c.clone()
        c.cursor[slots.long()] = 0
        state = c.checkpoint.clone()
        worst = 0.0
        for _ in range(self.L + 1):
            y_conv = self.ops["decode_step"](state, *self.inputs, slot_ids=slots, **self.kw).float()
            y = self.step("replay_step", slots).float()
            worst = max(worst, float((y - y_conv).abs().max() / y_conv.abs().max()))
        c.copy_(saved)
        return worst

    def time(self, route, reps):
        return time_graph(lambda s: self.step(route, s), self.sets, reps)[0]


def time_all_reduce(t, group: TPGroup, iters: int = 50, reps: int = 5) -> float:
    """Median seconds of one in-place all-reduce of ``t`` (zeros: sums stay finite)."""
    if group.size == 1:
        return 0.0
    t.zero_()
    for _ in range(5):
        group.all_reduce_(t)
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier()
        start.record()
        for _ in range(iters):
            group.all_reduce_(t)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / iters * 1e-3)
    return statistics.median(samples)


def time_stack_step(stack: HybridDecodeStack, batch: int, L: int, state, steps: int = 20) -> float:
    """Median seconds of one eager decode step of the whole stack (all rows live)."""
    pool = stack.new_pool(batch, buffer_len=L, state_dtype=state)
    pool.admit(list(range(batch)))
    slots = torch.arange(batch, dtype=torch.int32, device=stack.device)
    h = torch.randn(batch, stack.hidden_size, device=stack.device).to(stack.dtype)
    for _ in range(3):
        stack.step(pool, h, slots, "replay")
    samples = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if stack.group.size > 1:
            dist.barrier()
        start.record()
        for _ in range(steps):
            stack.step(pool, h, slots, "replay")
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / steps * 1e-3)
    return statistics.median(samples)


def _max_over_ranks(x: float, group: TPGroup) -> float:
    t = torch.tensor([x], dtype=torch.float64, device="cuda")
    if group.size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=list(PRESET), default=MAMBA2)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--state", choices=list(DT), default="f32")
    ap.add_argument("--act", choices=list(DT), default="bf16")
    ap.add_argument("--layers", type=int, default=4, help="mixers in the timed eager stack (0: skip)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("tp_decode: needs CUDA GPUs (one per rank)")
    group, device = init_ranks("nccl")
    state, act = DT[args.state], DT[args.act]
    whole = load_model(PRESET[args.family])
    cfg = PRESETS[PRESET[args.family]]
    hidden = cfg.get("text_config", cfg)["hidden_size"]
    layer = whole.ssm_layers[0]
    local = layer.geometry.for_tp(group.size)
    copy_bw = copy_bandwidth()
    rank0 = group.rank == 0
    stack = (
        HybridDecodeStack(ssm_stack(whole, args.layers), hidden, group=group, dtype=act, device=device)
        if args.layers
        else None
    )
    if rank0:
        print(header(f"tp_decode {args.family} TP {group.size}", copy_bw))
        print(
            f"# {PRESET[args.family]} layer geometry {vars(layer.geometry)}, per rank {vars(local)}; "
            f"hidden {hidden}, L {args.L}, state {args.state}, act {args.act}"
        )
        print(
            f"{'route':>12} {'batch':>6} {'ssm_us':>9} {'tp1_us':>9} {'ssm_x':>6} {'ar_us':>8} "
            f"{'step_us/l':>10} {'refcheck':>9}"
        )
    rows = []
    for batch in args.batch:
        case = OpCase(args.family, local, batch, args.L, state, act)
        err = _max_over_ranks(case.refcheck(), group)
        ar_out = time_all_reduce(torch.empty(batch, hidden, dtype=act, device=device), group)
        ar_norm = (
            time_all_reduce(torch.empty(batch, layer.geometry.ngroups, dtype=torch.float32, device=device), group)
            if args.family == MAMBA2 and group.size > layer.geometry.ngroups
            else 0.0
        )
        step = time_stack_step(stack, batch, args.L, state) / args.layers if stack else None
        step = _max_over_ranks(step, group) if stack else None
        for route in ROUTES:
            if err > 5e-2:
                if rank0:
                    print(f"# refcheck failed for batch {batch}: {err:.2e}; timing skipped")
                break
            t = _max_over_ranks(case.time(route, args.reps), group)
            t1 = None
            if rank0 and group.size > 1:
                ref = OpCase(args.family, layer.geometry, batch, args.L, state, act)
                t1 = ref.time(route, args.reps)
                del ref
            elif group.size == 1:
                t1 = t
            if group.size > 1:
                dist.barrier()
            row = dict(
                family=args.family,
                tp=group.size,
                route=route,
                batch=batch,
                L=args.L,
                state=args.state,
                act=args.act,
                ssm_seconds=t,
                ssm_tp1_seconds=t1,
                ssm_speedup=(t1 / t) if t1 else None,
                allreduce_seconds=ar_out,
                norm_allreduce_seconds=ar_norm,
                step_seconds_per_layer=step,
                refcheck=err,
            )
            rows.append(row)
            if rank0:
                step_txt = f"{step * 1e6:10.1f}" if step else f"{'-':>10}"
                print(
                    f"{route:>12} {batch:>6} {t * 1e6:9.2f} {t1 * 1e6:9.2f} {t1 / t:6.2f} "
                    f"{(ar_out + ar_norm) * 1e6:8.2f} {step_txt} {err:9.1e}"
                )
        del case
        torch.cuda.empty_cache()
    if rank0:
        stem = results_stem(args.out_dir, f"tp_decode-{args.family}-tp{group.size}")
        with open(stem + ".json", "w") as f:
            json.dump(
                dict(
                    device=torch.cuda.get_device_name(),
                    torch=torch.__version__,
                    copy_bytes_per_s=copy_bw,
                    preset=PRESET[args.family],
                    hidden=hidden,
                    geometry=vars(layer.geometry),
                    rank_geometry=vars(local),
                    rows=rows,
                ),
                f,
                indent=1,
            )
        print(f"# wrote {stem}.json")
        print(
            "# ssm_us: slowest rank's SSM op per layer (CUDA graph); tp1_us: whole layer on one GPU; "
            "ssm_x = tp1/ssm; ar_us: out_proj (+ norm) all-reduce; step_us/l: eager stack step per layer"
        )
        print("# repro: mpirun -n " + str(group.size) + " python benchmarks/tp_decode.py " + " ".join(sys.argv[1:]))
    shutdown_distributed()


if __name__ == "__main__":
    main()
