"""Eager per-layer overhead of a replay step: the public op against a bare kernel launch (GPU).

A model's eager decode step (the Hugging Face hooks) calls one op per SSM layer. Each call pays
for validation, a host sync to check slot ids, and custom-op dispatch before the launch. This
script times, per layer per step, one family's replay step over ``--layers`` layers (each its
own cache, as in a model), eagerly, in five ways:

- ``launch``: the kernel launcher alone (``kernels.*.launch_*``): the floor.
- ``custom_op``: the launcher through a ``torch.library.custom_op`` (how the ops were registered
  before ``ops/library.py``), no validation.
- ``torch_ops``: ``torch.ops.replayssm.*`` (``Library.define`` / ``impl``), no validation.
- ``public``: the public op with slot ids as a tensor: validation, one host sync per layer.
- ``public_slot_batch``: the public op with a ``SlotBatch`` built once per step (its host sync
  counted once per step, shared by the layers).

``previous`` estimates what the op cost before this change: validation (public - torch_ops)
plus custom_op dispatch. Columns: ``enqueue`` µs per layer per step (host time to issue the
calls) and ``wall`` µs (after a device sync: the kernels' time where they are the longer).

Before timing, every variant runs the same steps (through a flush) on its own copy of the
caches, and outputs and caches must be equal bit for bit; a mismatch exits with status 1.
``--dry-run`` does that check on the CPU with tiny shapes (the reference path; its timings do
not mean anything) and needs no GPU.

    python benchmarks/eager_overhead.py --family mamba2 gdn --batch 1 16 64
    python benchmarks/eager_overhead.py --dry-run
"""

import argparse
import copy
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..")]

import torch

from trtllm_replayssm.kernels.gated_delta_replay import launch_gated_delta_replay_step
from trtllm_replayssm.kernels.mamba2_replay import launch_mamba2_replay_step
from trtllm_replayssm.ops import (
    GDNReplayCache,
    KDAReplayCache,
    Mamba2ReplayCache,
    SlotBatch,
    gdn_replay_step,
    kda_replay_step,
    mamba2_replay_step,
)
from trtllm_replayssm.reference.gated_delta import gated_delta_replay_step_ref
from trtllm_replayssm.reference.mamba2 import mamba2_replay_step_ref

VARIANTS = ("launch", "custom_op", "torch_ops", "public", "public_slot_batch")

# One layer per family, TP 1: Nemotron-3-Super Mamba-2, Qwen3.5-122B GDN, Kimi Linear KDA.
GEOMETRY = {"mamba2": (128, 64, 128, 8), "gdn": (16, 64, 128, 128), "kda": (32, 32, 128, 128)}
TINY = {"mamba2": (4, 8, 16, 2), "gdn": (2, 4, 16, 8), "kda": (2, 2, 16, 8)}


class Layer:
    """One family's step on ``layers`` caches: inputs, caches, and each variant's call."""

    def __init__(self, family, geometry, batch, layers, L, device, act):
        self.family, self.device = family, device
        g = torch.Generator(device="cpu").manual_seed(0)

        def randn(*shape, dtype=act):
            return torch.randn(*shape, generator=g).to(device, dtype)

        num_slots = 2 * batch + 1
        self.ids = torch.tensor([2 * i + 1 for i in range(batch)], dtype=torch.int32, device=device)  # slots 1, 3, ...
        if family == "mamba2":
            nh, hd, ds, ng = geometry
            self.caches = [
                Mamba2ReplayCache.allocate(num_slots, nh, hd, ds, ng, L, act_dtype=act, device=device) for _ in range(layers)
            ]
            self.inputs = (randn(batch, nh, hd), randn(batch, nh), -torch.rand(nh, generator=g).to(device) - 0.5)
            self.inputs += (randn(batch, ng, ds), randn(batch, ng, ds))
            self.params = dict(D=randn(nh, dtype=torch.float32), dt_bias=randn(nh, dtype=torch.float32))
        else:
            hk, hv, dk, dv = geometry
            cls = GDNReplayCache if family == "gdn" else KDAReplayCache
            self.caches = [cls.allocate(num_slots, hk, hv, dk, dv, L, record_dtype=act, device=device) for _ in range(layers)]
            gate = (batch, hv, dk) if family == "kda" else (batch, hv)
            self.inputs = (randn(batch, hk, dk), randn(batch, hk, dk), randn(batch, hv, dv))
            self.inputs += (-torch.rand(gate, generator=g).to(device), torch.rand(batch, hv, generator=g).to(device))
            self.params = dict(scale=dk**-0.5, use_qk_l2norm=True)
        for c in self.caches:
            c.checkpoint.copy_(torch.randn(c.checkpoint.shape, generator=g))

    def fields(self, cache):
        if self.family == "mamba2":
            return (cache.checkpoint, cache.x_records, cache.dt_records, cache.B_records, cache.cursor, cache.arrivals)
        return (cache.checkpoint, cache.d_records, cache.k_records, cache.g_records, cache.cursor, cache.arrivals)

    def flat(self, cache, ids, out):
        """The custom op's positional arguments."""
        p = self.params
        if self.family == "mamba2":
            tail = (ids, p["D"], None, p["dt_bias"], True, out)
        else:
            tail = (ids, p["scale"], p["use_qk_l2norm"], out)
        return self.fields(cache) + self.inputs + tail

    def impl(self):
        """What the op runs on this device: the launcher on CUDA, the reference on the CPU."""
        cuda = self.device.type == "cuda"
        if self.family == "mamba2":
            fn = launch_mamba2_replay_step if cuda else mamba2_replay_step_ref
            names = ("D", "z", "dt_bias", "dt_softplus", "out")
        else:
            fn = launch_gated_delta_replay_step if cuda else gated_delta_replay_step_ref
            names = ("scale", "use_qk_l2norm", "out")
        n_pos = 11  # the cache's six fields and the five step inputs

        def call(*args):
            pos, ids, kw = args[:n_pos], args[n_pos], dict(zip(names, args[n_pos + 1 :]))
            if not cuda:
                pos = pos[:5] + pos[6:]  # the references keep no arrivals counter
            fn(*pos, slot_ids=ids, **kw)

        return call

    def public(self, cache, ids, out):
        p = self.params
        if self.family == "mamba2":
            return mamba2_replay_step(cache, *self.inputs, slot_ids=ids, out=out, **p)
        step = gdn_replay_step if self.family == "gdn" else kda_replay_step
        return step(cache, *self.inputs, slot_ids=ids, out=out, **p)


def _custom_op(layer: Layer, op):
    """``impl`` behind a torch.library.custom_op with ``op``'s schema, registered the way the
    ops were before ``ops/library.py`` (once per family and device)."""
    name = f"{layer.family}_{layer.device.type}_replay_step"
    if not hasattr(torch.ops.replayssm_bench, name):
        schema = op.default._schema
        mutates = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        impl = layer.impl()
        wrapped = torch.library.custom_op(
            f"replayssm_bench::{name}", lambda *args: impl(*args), mutates_args=mutates, schema=str(schema)[len(schema.name) :]
        )
        wrapped.register_fake(lambda *args: None)
    return getattr(torch.ops.replayssm_bench, name)


def step_fn(layer: Layer, variant: str):
    """One decode step of every layer by ``variant``: a function of the list of outputs."""
    ops = {"mamba2": torch.ops.replayssm.mamba2_replay_step, "gdn": torch.ops.replayssm.gated_delta_replay_step}
    ops["kda"] = ops["gdn"]
    direct = {"launch": layer.impl(), "torch_ops": ops[layer.family]}
    if variant == "custom_op":
        direct["custom_op"] = _custom_op(layer, ops[layer.family])
    if variant in direct:
        fn = direct[variant]

        def run(outs):
            for cache, out in zip(layer.caches, outs):
                fn(*layer.flat(cache, layer.ids, out))

    elif variant == "public":

        def run(outs):
            for cache, out in zip(layer.caches, outs):
                layer.public(cache, layer.ids, out)

    else:

        def run(outs):
            checked = SlotBatch(layer.ids, layer.caches[0].num_slots)
            for cache, out in zip(layer.caches, outs):
                layer.public(cache, checked, out)

    return run


def _like_out(layer: Layer):
    return [torch.zeros_like(layer.inputs[0] if layer.family == "mamba2" else layer.inputs[2]) for _ in layer.caches]


def self_check(layer: Layer, steps: int) -> None:
    """Every variant from the same caches and inputs: equal outputs and caches, bit for bit."""
    results = {}
    for variant in VARIANTS:
        fresh = copy.copy(layer)
        fresh.caches = [copy.deepcopy(c) for c in layer.caches]
        outs, run = _like_out(fresh), step_fn(fresh, variant)
        history = []
        for _ in range(steps):
            run(outs)
            history += [o.clone() for o in outs]
        results[variant] = history + [t.clone() for c in fresh.caches for t in c.tensors().values()]
    base = results[VARIANTS[0]]
    for variant, got in results.items():
        if len(got) != len(base) or not all(torch.equal(a, b) for a, b in zip(got, base)):
            print(f"SELF-CHECK FAILED: {variant} differs from {VARIANTS[0]} ({layer.family})")
            sys.exit(1)


def time_variant(layer: Layer, variant: str, steps: int, warmup: int) -> dict:
    """µs per layer per step: host time to issue the calls, and wall time after a device sync."""
    outs, run = _like_out(layer), step_fn(layer, variant)
    sync = torch.cuda.synchronize if layer.device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        run(outs)
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        run(outs)
    t1 = time.perf_counter()
    sync()
    t2 = time.perf_counter()
    n = steps * len(layer.caches)
    return {"enqueue_us": (t1 - t0) / n * 1e6, "wall_us": (t2 - t0) / n * 1e6}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=["mamba2", "gdn"], choices=sorted(GEOMETRY))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--layers", type=int, default=8, help="SSM layers per step, each its own cache (default 8)")
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--steps", type=int, default=50, help="timed steps per variant")
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes: the self-check only (no GPU)")
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "benchmarks/results"))
    args = ap.parse_args(argv)
    if args.dry_run:
        device, geometry, batches, layers, L, steps, act = torch.device("cpu"), TINY, [2], 2, 3, 2, torch.float32
    else:
        if not torch.cuda.is_available():
            ap.error("needs a CUDA GPU (or --dry-run)")
        device, geometry, batches, layers, L, steps, act = (
            torch.device("cuda"), GEOMETRY, args.batch, args.layers, args.L, args.steps, torch.bfloat16,
        )  # fmt: skip
    rows = []
    for family in args.family:
        for batch in batches:
            layer = Layer(family, geometry[family], batch, layers, L, device, act)
            self_check(layer, L + 1)
            times = {v: time_variant(layer, v, steps, warmup=2 if args.dry_run else 10) for v in VARIANTS}
            e = {v: t["enqueue_us"] for v, t in times.items()}
            previous = e["public"] - e["torch_ops"] + e["custom_op"]
            rows.append(dict(family=family, batch=batch, layers=layers, times=times, previous_public_enqueue_us=previous))
            cols = "  ".join(f"{v} {t['enqueue_us']:.1f}/{t['wall_us']:.1f}" for v, t in times.items())
            print(f"{family:6} batch {batch:4}: µs per layer-step (enqueue/wall): {cols}; previous ≈ {previous:.1f}")
    print("self-check: every variant equal bit for bit" + (" (CPU dry run: timings meaningless)" if args.dry_run else ""))
    if not args.dry_run:
        os.makedirs(args.out_dir, exist_ok=True)
        name = torch.cuda.get_device_name().replace(" ", "_")
        path = os.path.join(args.out_dir, f"{time.strftime('%Y-%m-%d')}-{name}-eager_overhead.json")
        with open(path, "w") as f:
            json.dump(dict(device=name, torch=torch.__version__, rows=rows), f, indent=1)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
