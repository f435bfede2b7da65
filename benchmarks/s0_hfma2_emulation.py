"""KDA fp8's S0 products as the CUDA step's f16x2 FMAs (``s0_hfma2``), emulated bit for bit on the
CPU inside the float64-capable reference replay step, against the exact products.

The CUDA kernel (``s0_dots_hfma2`` in kernels/cuda/gated_delta_replay_step.cu) forms S0 (e0 ⊙ q̂)
and S0 (e0 ⊙ k̂) of each checkpoint row from its e4m3 codes and the vectors X = fq (e0 ⊙ q̂), 2 (e0
⊙ k̂) rounded to f16 (fq = 2^-e for scale in [2^e, 2^(e+1))): each half row of 64 columns in two
f16x2 accumulators (chunks of 16 columns 0, 2 and 1, 3; a pair's even column in the low half),
every product added with one f16 rounding (``fma.rn.f16x2``), the two accumulators added in f16,
then the four f16 sums in fp32, times 1 / fq (1 / 2) and the row's scale. :func:`f16x2_chains`
does exactly that in float64 (the products of two f16 values are exact there); the reference step
(``reference.gated_delta.gated_delta_replay_step_ref``) then runs with its S0 term replaced.

Two scenarios, each the same replay with exact and with emulated products:

- ``repeated``: the GPU graph test's (tests/gpu/test_delta_cuda_gpu.py): Qwen-like KDA (16 key
  heads, 64 value heads, 128 / 128), L = 8, batch 6, one input repeated 2L + 3 steps from a random
  cache. Prints how far the emulated step's codes, row scales, d records and outputs end from the
  exact one's.
- ``fresh``: fresh random inputs every step from an empty state, L = 16, the outputs of both
  against the float64 conventional recurrence, over ``--steps`` steps.

    python benchmarks/s0_hfma2_emulation.py --scenario repeated --seeds 5
    python benchmarks/s0_hfma2_emulation.py --scenario fresh --seeds 2 --steps 200

CPU only; plain torch. Session 66's figures are in docs/kernel-notes.md ("Session 66").
"""

import argparse
import contextlib
import math
import os
import sys

import torch

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "tests"), os.path.join(os.path.dirname(__file__), "..")]

import trtllm_replayssm.reference.gated_delta as gated_delta_ref  # noqa: E402
from gated_delta_cases import DeltaFamily, DeltaGeometry, fill_randomly, make_step, replay_with_reference  # noqa: E402


def f16(x: torch.Tensor) -> torch.Tensor:
    """float64 values rounded to f16 (to nearest even) and back."""
    return x.to(torch.float16).to(torch.float64)


def f16x2_chains(codes: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """codes [..., 128] (e4m3 values, float64) and x [..., 128] (f16 values, float64, broadcast
    against codes) -> the kernel's sum over the 128 columns (float64 holding its fp32 result)."""
    total = torch.zeros(torch.broadcast_shapes(codes.shape, x.shape)[:-1], dtype=torch.float64)
    for half in (0, 1):
        acc = [torch.zeros(total.shape + (2,), dtype=torch.float64) for _ in range(2)]
        for chunk in range(4):
            for pair in range(8):
                col = half * 64 + chunk * 16 + 2 * pair
                acc[chunk & 1] = f16(acc[chunk & 1] + codes[..., col : col + 2] * x[..., col : col + 2])
        h = f16(acc[0] + acc[1])
        total = total + (h[..., 0].float() + h[..., 1].float()).double()
    return total


@contextlib.contextmanager
def emulated_s0(scale: float):
    """The reference replay step with its S0 (e0 ⊙ u) term as :func:`f16x2_chains` (an fp8
    checkpoint, L2-normalised q and k: u is q̂ when its norm is ``scale``, k̂ when it is 1)."""
    load, project = gated_delta_ref.load_checkpoint_rows, gated_delta_ref.gated_delta_replay_project
    rows = {}

    def load_rows(checkpoint, checkpoint_scale, slots, cd):
        rows["codes"] = checkpoint[slots].to(torch.float64)
        rows["scales"] = checkpoint_scale[slots].to(torch.float64)
        return load(checkpoint, checkpoint_scale, slots, cd)

    def project_rows(S0, d_rec, k_rec, ckpt_decay, weights, u):
        is_k = abs(float(u.norm(dim=-1).mean()) - 1.0) < 1e-3
        factor = 2.0 if is_k else 2.0 ** -math.floor(math.log2(scale))
        x = f16(factor * ckpt_decay.double() * u.double())
        hist = f16x2_chains(rows["codes"], x[:, :, None, :]) / factor * rows["scales"]
        scores = torch.einsum("rhlk,rhk->rhl", weights * k_rec, u)
        return hist.to(S0.dtype) + torch.einsum("rhl,rhlv->rhv", scores, d_rec)

    gated_delta_ref.load_checkpoint_rows, gated_delta_ref.gated_delta_replay_project = load_rows, project_rows
    try:
        yield
    finally:
        gated_delta_ref.load_checkpoint_rows, gated_delta_ref.gated_delta_replay_project = load, project


def random_cache(fam: DeltaFamily, slots: int, L: int):
    """The graph test's cache (``fill_randomly``), cursors anywhere."""
    cache = fam.allocate(slots, L, torch.float8_e4m3fn, torch.bfloat16, "cpu")
    fill_randomly(cache)
    cache.cursor.copy_(torch.randint(0, L, (slots,), dtype=torch.int32))
    return cache


def repeated(seed: int) -> str:
    torch.manual_seed(seed)
    g, L, slots, batch = DeltaGeometry(16, 64, 128, 128), 8, 9, 6
    fam = DeltaFamily(g, per_channel=True)
    p = fam.make_params("cpu")
    start = random_cache(fam, slots, L)
    slot_ids = torch.tensor([3, -1, 0, 7, 5, 1][:batch], dtype=torch.int32)
    inp = make_step(g, batch, torch.bfloat16, "cpu", per_channel=True)
    ends = {}
    for emulate in (False, True):
        cache = start.clone()
        out = torch.zeros_like(inp["v"])
        with emulated_s0(p["scale"]) if emulate else contextlib.nullcontext():
            for _ in range(2 * L + 3):
                replay_with_reference(cache, inp, p, slot_ids, out)
        ends[emulate] = (cache.checkpoint.double(), cache.checkpoint_scale.double(), cache.d_records.double(), out.double())
    (c, s, d, y), (c0, s0, d0, y0) = ends[True], ends[False]
    rel = lambda a, b: float((a - b).abs().max() / b.abs().max())  # noqa: E731
    return (
        f"seed {seed}: codes {rel(c, c0):.4f} of the largest ({int(((c - c0).abs() > 32).sum())} more than one top "
        f"step apart), row scales {rel(s, s0):.2e} (per row {float(((s - s0).abs() / s0).max()):.2e}), d records "
        f"{rel(d, d0):.2e}, outputs {rel(y, y0):.2e}"
    )


def fresh(seed: int, steps: int) -> str:
    g, L, slots = DeltaGeometry(4, 16, 128, 128), 16, 3
    fam = DeltaFamily(g, per_channel=True)
    p = fam.make_params("cpu")
    torch.manual_seed(seed)
    inputs = [make_step(g, 2, torch.bfloat16, "cpu", per_channel=True) for _ in range(steps)]
    slot_ids = torch.tensor([0, 2], dtype=torch.int32)
    worst = {}
    for emulate in (False, True):
        cache = fam.allocate(slots, L, torch.float8_e4m3fn, torch.bfloat16, "cpu")
        state64 = torch.zeros(slots, g.v_heads, g.head_v_dim, g.head_k_dim, dtype=torch.float64)
        errs = []
        with emulated_s0(p["scale"]) if emulate else contextlib.nullcontext():
            for inp in inputs:
                out = torch.zeros_like(inp["v"])
                replay_with_reference(cache, inp, p, slot_ids, out)
                y64 = fam.oracle_step(state64, p, inp, slot_ids)
                errs.append(float((out.double() - y64).abs().max() / y64.abs().max()))
        worst[emulate] = max(errs[steps // 2 :])
    return (
        f"seed {seed}: output error against float64 over steps {steps // 2}-{steps}: exact {worst[False]:.3e}, "
        f"f16x2 {worst[True]:.3e}"
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=["repeated", "fresh"], default="repeated")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200, help="fresh: steps of the replay")
    args = ap.parse_args(argv)
    for seed in range(args.seeds):
        print(repeated(seed) if args.scenario == "repeated" else fresh(seed, args.steps), flush=True)


if __name__ == "__main__":
    main()
