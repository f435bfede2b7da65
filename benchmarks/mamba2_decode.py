"""Steady-state Mamba-2 decode step: ReplaySSM vs the conventional kernel (GPU).

Each case times one layer's decode step for a batch, captured in a CUDA graph. The slot pool
holds several sets of `batch` sequences (>= 512 MiB of state in all) and consecutive steps use
different sets, so the state comes from HBM as in a real model (other layers run in between).
Replay cursors start spread over [0, L) and advance every step: flushes are included at their
real share. Bytes moved come from trtllm_replayssm.memory (the planner's model).

    python benchmarks/mamba2_decode.py                       # the README table
    python benchmarks/mamba2_decode.py --sweep               # replay launch-configuration sweep
    python benchmarks/mamba2_decode.py --sweep decode_step   # the conventional kernel's
    python benchmarks/mamba2_decode.py --peers DIR           # + vLLM, official ReplaySSM, FlashInfer

--peers DIR: the peer kernels (a copy of shared/peers) timed in the same run, in the same
interleaved CUDA-graph groups as this project's two routes; set-up, rows and calls in
benchmarks/peers_mamba2.py. Without the flag, or for a peer that is missing, those rows are
skipped with a one-line note.
"""

from __future__ import annotations

import argparse
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
    write_json,
)
from trtllm_replayssm.bench import DT, Mamba2DecodeCase  # noqa: F401 - DT: profile_mamba2.py

# The case (inputs, caches, launches, bytes) is the package's, which trtllm-replayssm bench times.
Case = Mamba2DecodeCase


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--geometry",
        type=lambda s: tuple(int(v) for v in s.split(",")),
        default=(128, 64, 128, 8),
        help="nheads,head_dim,d_state,ngroups (default: Nemotron-3-Super, TP=1)",
    )
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, nargs="+", default=[16, 8, 32])
    ap.add_argument("--state", nargs="+", default=["f32", "bf16"], choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    add_sweep_arguments(ap)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument(
        "--peers",
        metavar="DIR",
        help="also time the peer kernels unpacked in DIR (benchmarks/peers_mamba2.py); not with --sweep",
    )
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("mamba2_decode: needs a CUDA GPU")
    copy_bw = copy_bandwidth()
    print(header("mamba2_decode", copy_bw))
    make_case = lambda batch, L, state: Case(args.geometry, batch, L, state, args.act)  # noqa: E731
    if args.sweep:
        if args.peers:
            print("# peers: not timed with --sweep")
        run_sweep(make_case, args)
        return
    if args.peers:
        import peers_mamba2

        peers = peers_mamba2.load_peers(args.peers)
        print("\n".join(peers.notes or [f"# peers: loaded from {args.peers}"]))
        rows = peers_mamba2.run_table(make_case, args, copy_bw, peers)
        stem = results_stem(args.out_dir, "mamba2_decode_peers")
        write_json(stem, copy_bw, rows, geometry=args.geometry, peers=args.peers, peer_notes=peers.notes)
    else:
        print("# peers: not timed (--peers DIR adds vLLM, official ReplaySSM and FlashInfer rows)")
        rows = run_table(make_case, args, copy_bw)
        stem = results_stem(args.out_dir, "mamba2_decode")
        write_json(stem, copy_bw, rows, geometry=args.geometry)
    plot_speedups(
        rows,
        stem + ".png",
        [(f"{st} checkpoint, {args.act} act", lambda r, st=st: r["state"] == st) for st in args.state],
        f"Mamba-2 {args.geometry}",
    )
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/mamba2_decode.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
