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
    python benchmarks/gated_delta_decode.py --family gdn --peers DIR  # + vLLM, official ReplaySSM

--peers DIR (GDN only): vLLM's conventional GDN decode kernel and the official ReplaySSM GDN
kernel (a copy of shared/peers) timed in the same run, in the same interleaved CUDA-graph groups
as this project's routes; rows and calls in benchmarks/peers_gated_delta.py. Without the flag
nothing changes; a peer that is missing is skipped with a one-line note.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

from harness import (
    add_sweep_arguments,
    copy_bandwidth,
    header,
    plot_speedups,
    results_stem,
    run_sweep,
    run_table,
    time_graph,
    write_json,
)
from trtllm_replayssm.bench import DT, GatedDeltaDecodeCase

# (k_heads, v_heads, head_k_dim, head_v_dim), TP=1: Qwen3.5-4B and -122B-A10B (GDN), Kimi Linear (KDA)
GEOMETRIES = {"gdn": [(16, 32, 128, 128), (16, 64, 128, 128)], "kda": [(32, 32, 128, 128)]}


# One (family, geometry, batch, L, dtypes) point: the package's case, which trtllm-replayssm
# bench times too.
Case = GatedDeltaDecodeCase


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
    h0s = [
        torch.randn(B, case.v_heads, case.head_k_dim, case.head_v_dim, device="cuda", dtype=case.state) for _ in case.slot_sets
    ]
    q, k, v = (t.unsqueeze(1) for t in (case.q, case.k, case.v))
    g, beta = case.g.unsqueeze(1), case.beta.unsqueeze(1)
    it = itertools.count()  # one initial-state buffer per slot set, in capture order

    def step(_slots):
        h0 = h0s[next(it) % len(h0s)]
        fn(
            q,
            k,
            v,
            g=g,
            beta=beta,
            scale=case.head_k_dim**-0.5,
            initial_state=h0,
            output_final_state=True,
            use_qk_l2norm_in_kernel=True,
        )

    return time_graph(step, case.slot_sets)[0]


def load_peers(args):
    """The GDN peers of ``--peers DIR`` (peers_gated_delta.GDNPeers, its notes printed), or None:
    no --peers, --sweep (not timed there) or --family kda (no peer kernel)."""
    if not args.peers:
        return None
    if args.sweep:
        print("# peers: not timed with --sweep")
        return None
    if args.family != "gdn":
        print(f"# peers: GDN only (no official {args.family.upper()} replay kernel); --peers ignored")
        return None
    import peers_gated_delta

    peers = peers_gated_delta.load_peers(args.peers)
    print("\n".join(peers.notes or [f"# peers: loaded from {args.peers}"]))
    return peers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=["gdn", "kda"], default="gdn")
    ap.add_argument(
        "--geometry",
        type=lambda s: tuple(int(v) for v in s.split(",")),
        nargs="+",
        help="k_heads,v_heads,head_k_dim,head_v_dim (default: the family's real geometries)",
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, nargs="+", default=[16, 8, 32])
    ap.add_argument("--state", nargs="+", default=["f32", "bf16"], choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    add_sweep_arguments(ap)
    ap.add_argument("--fla", action="store_true", help="also time FLA's fused recurrent kernel (needs fla)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument(
        "--peers",
        metavar="DIR",
        help="also time the GDN peer kernels unpacked in DIR (benchmarks/peers_gated_delta.py); GDN only, not with --sweep",
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("gated_delta_decode: needs a CUDA GPU")
    copy_bw = copy_bandwidth()
    name = f"{args.family}_decode"
    print(header(name, copy_bw))
    peers = load_peers(args)
    all_rows = []
    for geom in args.geometry or GEOMETRIES[args.family]:
        print(f"## {args.family} (k_heads, v_heads, head_k_dim, head_v_dim) = {geom}")
        make_case = lambda batch, L, state, geom=geom: Case(args.family, geom, batch, L, state, args.act)  # noqa: E731
        if args.sweep:
            run_sweep(make_case, args)
            continue
        if peers is None:
            rows = run_table(make_case, args, copy_bw)
        else:
            import peers_gated_delta

            rows = peers_gated_delta.run_table(make_case, args, copy_bw, peers)
        if args.fla:
            for state in args.state:
                for batch in args.batch:
                    case = make_case(batch, args.L[0], state)
                    try:
                        t = fla_baseline(case)
                    except Exception as e:  # a baseline that fails to run is reported, not fatal
                        print(f"# fla fused_recurrent state={state} batch={batch}: failed: {e!r}")
                        continue
                    ours = next(
                        r["seconds"]
                        for r in rows
                        if r["route"] == "decode_step" and r["state"] == state and r["batch"] == batch
                    )
                    print(
                        f"# fla fused_recurrent state={state} batch={batch}: "
                        + (
                            "not importable"
                            if t is None
                            else f"{t * 1e6:.2f} us/step, our conventional kernel {ours / t:.3f}x its time"
                        )
                    )
                    if t is not None:
                        rows.append(
                            dict(state=state, act=args.act, L=None, batch=batch, route="fla_fused_recurrent", seconds=t)
                        )
                    del case
        all_rows += [dict(r, geometry=geom) for r in rows]
    if args.sweep:
        return
    if peers is None:
        stem = results_stem(args.out_dir, name)
        write_json(stem, copy_bw, all_rows, family=args.family)
    else:
        stem = results_stem(args.out_dir, name + "_peers")
        write_json(stem, copy_bw, all_rows, family=args.family, peers=args.peers, peer_notes=peers.notes)
    panels = [
        (f"{g}, {st} checkpoint", lambda r, g=g, st=st: r["geometry"] == g and r["state"] == st)
        for g in (args.geometry or GEOMETRIES[args.family])
        for st in args.state
    ]
    plot_speedups(all_rows, stem + ".png", panels, f"{args.family.upper()} decode, {args.act} act")
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/gated_delta_decode.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
