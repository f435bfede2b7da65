"""Steady-state GDN / KDA decode step: ReplaySSM vs the conventional kernel (and FLA's fused
recurrent kernel when ``fla`` is importable), on the GPU.

Same protocol as benchmarks/mamba2_decode.py (harness.py): one layer's step per slot set in a
CUDA graph, a >= 512 MiB slot pool so that the state comes from HBM, replay cursors spread over
[0, L) and advancing (flushes at their real share), copy bandwidth measured in the same run.
Bytes moved come from trtllm_replayssm.memory (the planner's model) plus the step's inputs and
output.

    python benchmarks/gated_delta_decode.py --family gdn          # Qwen3.5 geometries
    python benchmarks/gated_delta_decode.py --family kda          # Kimi Linear
    python benchmarks/gated_delta_decode.py --family gdn --sweep  # replay launch configurations
    python benchmarks/gated_delta_decode.py --family kda --sweep decode_step --state bf16  # conventional
"""
from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import (DecodeCase, add_sweep_arguments, copy_bandwidth, header, plot_speedups,  # noqa: E402
                     results_stem, run_sweep, run_table, slot_sets, time_graph, write_json)
from trtllm_replayssm.cache import GDNReplayCache, KDAReplayCache  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_common import gated_delta_launch_config  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_decode import launch_gated_delta_decode_step  # noqa: E402
from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step  # noqa: E402
from trtllm_replayssm.memory import ssm_layer_step_traffic  # noqa: E402
from trtllm_replayssm.models import GDN, KDA, DeltaRuleGeometry  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
# (k_heads, v_heads, head_k_dim, head_v_dim), TP=1: Qwen3.5-4B and -122B-A10B (GDN), Kimi Linear (KDA)
GEOMETRIES = {"gdn": [(16, 32, 128, 128), (16, 64, 128, 128)], "kda": [(32, 32, 128, 128)]}


class Case(DecodeCase):
    """Inputs, caches and launches for one (family, geometry, batch, L, dtypes) point."""

    def __init__(self, family, geom, batch, L, state, act, seed=0):
        self.family, self.per_channel = family, family == "kda"
        self.k_heads, self.v_heads, self.head_k_dim, self.head_v_dim = geom
        self.rows = self.head_v_dim  # state rows per head, for the launch-configuration sweep
        self.batch, self.L, self.state, self.act = batch, L, DT[state], DT[act]
        g = torch.Generator(device="cuda").manual_seed(seed)
        HK, HV, K, V = geom
        self.slot_sets = slot_sets(batch, HV * V * K * self.state.itemsize, g)
        self.num_slots = len(self.slot_sets) * batch

        def r(*s, dtype=self.act):
            return torch.randn(*s, device="cuda", generator=g).to(dtype)
        self.q, self.k, self.v = r(batch, HK, K), r(batch, HK, K), r(batch, HV, V)
        gshape = (batch, HV, K) if self.per_channel else (batch, HV)
        self.g = -(torch.rand(gshape, device="cuda", generator=g) * 0.1 + 0.001)
        self.beta = torch.rand(batch, HV, device="cuda", generator=g)
        self.out = torch.empty_like(self.v)
        cls = KDAReplayCache if self.per_channel else GDNReplayCache
        self.cache = cls.allocate(self.num_slots, HK, HV, K, V, L, state_dtype=self.state,
                                  record_dtype=self.act, device="cuda")
        c = self.cache
        c.checkpoint.copy_(r(*c.checkpoint.shape, dtype=torch.float32) * 0.1)
        c.d_records.normal_(generator=g)
        c.k_records.copy_(torch.nn.functional.normalize(r(*c.k_records.shape, dtype=torch.float32), dim=-1))
        c.g_records.uniform_(-0.1, -0.001, generator=g)
        c.cursor.copy_(torch.randint(0, L, (self.num_slots,), device="cuda", generator=g, dtype=torch.int32))
        self.conv_state = c.checkpoint  # the conventional kernel updates it in place
        self.kw = dict(scale=K ** -0.5, use_qk_l2norm=True, out=self.out)

    def step(self, route, slots, config=None):
        c = self.cache
        args = (self.q, self.k, self.v, self.g, self.beta)
        if route == "decode_step":
            launch_gated_delta_decode_step(self.conv_state, *args, slot_ids=slots, config=config, **self.kw)
        elif route == "replay_step":
            launch_gated_delta_replay_step(c.checkpoint, c.d_records, c.k_records, c.g_records,
                                           c.cursor, c.arrivals, *args, slot_ids=slots,
                                           config=config, **self.kw)
        else:
            raise ValueError(route)

    def conventional(self, state, slots, out):
        launch_gated_delta_decode_step(state, self.q, self.k, self.v, self.g, self.beta,
                                       slot_ids=slots, **{**self.kw, "out": out})

    def min_block(self, route):
        return 16 if route == "replay_step" else 1  # the replay flush's tile product (replay_constexprs)

    def default_config(self, route):
        return gated_delta_launch_config(route, self.head_v_dim, self.head_k_dim, self.batch * self.v_heads,
                                         self.state)

    def bytes_per_step(self, route):
        geom = DeltaRuleGeometry(k_heads=self.k_heads, v_heads=self.v_heads,
                                 head_k_dim=self.head_k_dim, head_v_dim=self.head_v_dim, d_conv=4)
        t = ssm_layer_step_traffic(KDA if self.per_channel else GDN, geom,
                                   "conventional" if route == "decode_step" else "replay",
                                   buffer_len=self.L, spec_tokens=1, accepted=1.0,
                                   state_dtype=self.state, record_dtype=self.act, conv_dtype=self.act)
        io = sum(t.numel() * t.element_size() for t in (self.q, self.k, self.v, self.g, self.beta, self.out))
        return (t.total - t.conv_read - t.conv_written + io / self.batch) * self.batch


def fla_baseline(case) -> float:
    """FLA's fused recurrent kernel on the same batch: gathered per-row states (its layout
    [N, HV, K, V]) in, final states out; the per-step time in seconds, or None without fla."""
    try:
        if case.per_channel:
            from fla.ops.kda import fused_recurrent_kda as fn
        else:
            from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fn
    except ImportError:
        return None
    B = case.batch
    h0s = [torch.randn(B, case.v_heads, case.head_k_dim, case.head_v_dim, device="cuda", dtype=case.state)
           for _ in case.slot_sets]
    q, k, v = (t.unsqueeze(1) for t in (case.q, case.k, case.v))
    g, beta = case.g.unsqueeze(1), case.beta.unsqueeze(1)
    it = itertools.count()  # one initial-state buffer per slot set, in capture order

    def step(_slots):
        h0 = h0s[next(it) % len(h0s)]
        fn(q, k, v, g=g, beta=beta, scale=case.head_k_dim ** -0.5, initial_state=h0,
           output_final_state=True, use_qk_l2norm_in_kernel=True)
    return time_graph(step, case.slot_sets)[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=["gdn", "kda"], default="gdn")
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), nargs="+",
                    help="k_heads,v_heads,head_k_dim,head_v_dim (default: the family's real geometries)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, nargs="+", default=[16, 8, 32])
    ap.add_argument("--state", nargs="+", default=["f32", "bf16"], choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    add_sweep_arguments(ap)
    ap.add_argument("--fla", action="store_true", help="also time FLA's fused recurrent kernel (needs fla)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gated_delta_decode: needs a CUDA GPU")
    copy_bw = copy_bandwidth()
    name = f"{args.family}_decode"
    print(header(name, copy_bw))
    all_rows = []
    for geom in args.geometry or GEOMETRIES[args.family]:
        print(f"## {args.family} (k_heads, v_heads, head_k_dim, head_v_dim) = {geom}")
        make_case = lambda batch, L, state: Case(args.family, geom, batch, L, state, args.act)  # noqa: E731
        if args.sweep:
            run_sweep(make_case, args)
            continue
        rows = run_table(make_case, args, copy_bw)
        if args.fla:
            for state in args.state:
                for batch in args.batch:
                    case = make_case(batch, args.L[0], state)
                    try:
                        t = fla_baseline(case)
                    except Exception as e:  # a baseline that fails to run is reported, not fatal
                        print(f"# fla fused_recurrent state={state} batch={batch}: failed: {e!r}")
                        continue
                    ours = next(r["seconds"] for r in rows if r["route"] == "decode_step"
                                and r["state"] == state and r["batch"] == batch)
                    print(f"# fla fused_recurrent state={state} batch={batch}: "
                          + ("not importable" if t is None else f"{t * 1e6:.2f} us/step, "
                             f"our conventional kernel {ours / t:.3f}x its time"))
                    if t is not None:
                        rows.append(dict(state=state, act=args.act, L=None, batch=batch,
                                         route="fla_fused_recurrent", seconds=t))
                    del case
        all_rows += [dict(r, geometry=geom) for r in rows]
    if args.sweep:
        return
    stem = results_stem(args.out_dir, name)
    write_json(stem, copy_bw, all_rows, family=args.family)
    panels = [(f"{g}, {st} checkpoint", lambda r, g=g, st=st: r["geometry"] == g and r["state"] == st)
              for g in (args.geometry or GEOMETRIES[args.family]) for st in args.state]
    plot_speedups(all_rows, stem + ".png", panels, f"{args.family.upper()} decode, {args.act} act")
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/gated_delta_decode.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
