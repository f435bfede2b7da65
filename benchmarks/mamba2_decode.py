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

from harness import (DecodeCase, add_sweep_arguments, copy_bandwidth, header, plot_speedups,  # noqa: E402
                     results_stem, run_sweep, run_table, slot_sets, write_json)
from trtllm_replayssm.cache import Mamba2ReplayCache  # noqa: E402
from trtllm_replayssm.kernels.common import mamba2_launch_config  # noqa: E402
from trtllm_replayssm.kernels.mamba2_decode import launch_mamba2_decode_step  # noqa: E402
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step  # noqa: E402
from trtllm_replayssm.memory import mamba2_step_bytes  # noqa: E402

DT = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


class Case(DecodeCase):
    """Inputs, caches and CUDA graphs for one (geometry, batch, L, dtypes) point."""

    def __init__(self, geom, batch, L, state, act, seed=0):
        self.nheads, self.head_dim, self.d_state, self.ngroups = geom
        self.rows = self.head_dim  # state rows per head, for the launch-configuration sweep
        self.batch, self.L, self.state, self.act = batch, L, DT[state], DT[act]
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.slot_sets = slot_sets(batch, self.nheads * self.head_dim * self.d_state * self.state.itemsize, g)
        self.num_slots = len(self.slot_sets) * batch
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

    def conventional(self, state, slots, out):
        launch_mamba2_decode_step(state, self.x, self.dt, self.A, self.B, self.C, slot_ids=slots,
                                  D=self.D, dt_bias=self.dt_bias, out=out)

    def default_config(self, route):
        return mamba2_launch_config(route, self.head_dim, self.d_state, self.batch, self.state)

    def bytes_per_step(self, route):
        b = mamba2_step_bytes(route, nheads=self.nheads, head_dim=self.head_dim, d_state=self.d_state,
                              ngroups=self.ngroups, L=self.L, state_dtype=self.state, act_dtype=self.act)
        return b.total * self.batch


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--geometry", type=lambda s: tuple(int(v) for v in s.split(",")), default=(128, 64, 128, 8),
                    help="nheads,head_dim,d_state,ngroups (default: Nemotron-3-Super, TP=1)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512])
    ap.add_argument("--L", type=int, nargs="+", default=[16, 8, 32])
    ap.add_argument("--state", nargs="+", default=["f32", "bf16"], choices=list(DT))
    ap.add_argument("--act", default="bf16", choices=list(DT))
    add_sweep_arguments(ap)
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    ap.add_argument("--peers", metavar="DIR", help="also time the peer kernels unpacked in DIR "
                    "(benchmarks/peers_mamba2.py); not with --sweep")
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
    plot_speedups(rows, stem + ".png", [(f"{st} checkpoint, {args.act} act", lambda r, st=st: r["state"] == st)
                                        for st in args.state], f"Mamba-2 {args.geometry}")
    print(f"# wrote {stem}.json/.png")
    print("# repro: python benchmarks/mamba2_decode.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
