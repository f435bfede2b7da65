"""Family-agnostic replay test driver: many steps against a float64 oracle with spread cursors,
padding rows, poisoned unused slots and records, and an optional corruption hook.

A *family* (see ``mamba2_cases.Mamba2Family``, ``gated_delta_cases.DeltaFamily``) supplies:
``make_params(device)``, ``allocate(num_slots, L, state_dtype, act_dtype, device)``,
``poison(cache)`` (garbage in every record), ``make_step(batch, act_dtype, device)`` -> dict of
step inputs, ``out_key`` (the input whose shape/dtype the output has) and
``oracle_step(state64, params, inp, slot_ids)`` -> float64 output (mutates ``state64``; runs
on ``state64``'s device).

The oracle lives on the cache's device: float64 on the GPU for the GPU long runs (the CPU
recurrence at real model geometries dominated their time), on the CPU otherwise.
"""

from __future__ import annotations

import torch


def as_f64(t, device="cpu"):
    """``t`` as float64 on ``device`` (the CPU by default); None stays None."""
    return None if t is None else t.detach().to(device, torch.float64)


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max |ref| (float64): scale-aware and NaN-propagating. Computed on
    ``ref``'s device (``a`` is moved there): a GPU long run's oracle state stays on the GPU.
    Copying both to the CPU cost the 500-step verify test at Nemotron-3-Nano, batch 40, ~1.2 s
    a step on two CPU threads (315 MB of float64 state a call): over ten minutes in all."""
    a = a.detach().to(ref.device).to(torch.float64)
    ref = ref.detach().to(torch.float64)
    err = (a - ref).abs().max()
    if torch.isnan(err):
        return float("inf")
    return float(err / ref.abs().max().clamp_min(1e-30))


def drive_replay(
    family,
    replay,
    L: int,
    state_dtype,
    act_dtype,
    device,
    *,
    steps: int,
    batch: int,
    num_slots: int,
    n_padding: int = 1,
    corrupt=None,
) -> dict:
    """Run ``steps`` replay steps against the float64 oracle; return the worst errors.

    ``replay(cache, inp, params, slot_ids, out) -> out`` is the implementation under test.
    Rows use random distinct slots of a pool of ``num_slots`` (unused slots are checked to stay
    bit-identical), ``n_padding`` extra padding rows (slot -1) whose output must keep its
    sentinel, and cursors spread over [0, L): row r is first stepped alone r mod L times.
    ``corrupt(cache, step)`` may tamper with the cache (teeth tests).
    """
    p = family.make_params(device)
    cache = family.allocate(num_slots, L, state_dtype, act_dtype, device)
    # Unused slots and unused record positions hold garbage that must never be read or touched.
    cache.checkpoint.copy_((torch.randn_like(cache.checkpoint, dtype=torch.float32) * 1e3).to(state_dtype))
    scale = getattr(cache, "checkpoint_scale", None)  # an fp8 checkpoint's row scales
    if scale is not None:
        scale.uniform_(1e2, 1e3)
    family.poison(cache)
    perm = torch.randperm(num_slots)[:batch]
    slots = perm.to(torch.int32).to(device)
    cache.admit(slots, torch.randn((batch,) + tuple(cache.checkpoint.shape[1:]), device=device))
    everyone = torch.arange(num_slots, device=device)
    state64 = as_f64(cache.checkpoint_values(everyone), cache.checkpoint.device).clone()
    untouched = torch.ones(num_slots, dtype=torch.bool)
    untouched[perm.long()] = False
    ckpt0 = cache.checkpoint[untouched.to(device)].clone()
    scale0 = None if scale is None else scale[untouched.to(device)].clone()

    def run(inp, sl, fill):
        out = torch.full_like(inp[family.out_key], fill)
        return replay(cache, inp, p, sl, out), family.oracle_step(state64, p, inp, sl)

    worst = {"y": 0.0, "ckpt": 0.0, "flushes": 0}
    for r in range(batch):
        for _ in range(r % L):
            y, ref = run(family.make_step(1, act_dtype, device), slots[r : r + 1], 0.0)
            worst["y"] = max(worst["y"], rel_err(y, ref))
    assert sorted(cache.cursor[slots.long()].tolist()) == sorted(r % L for r in range(batch))

    pad = torch.full((n_padding,), -1, dtype=torch.int32, device=device)
    for step in range(steps):
        sl = torch.cat([slots, pad])[torch.randperm(batch + n_padding, device=device)]
        inp = family.make_step(batch + n_padding, act_dtype, device)
        if corrupt is not None:
            corrupt(cache, step)
        y, ref = run(inp, sl, 42.0)
        live = sl >= 0
        assert torch.all(y[~live] == 42.0), "padding rows must keep their output"
        worst["y"] = max(worst["y"], rel_err(y[live], ref[live.to(ref.device)]))
        cur = cache.cursor[slots.long()].cpu()
        flushed = slots[(cur == 0).to(device)].long()
        if flushed.numel():
            worst["flushes"] += flushed.numel()
            worst["ckpt"] = max(worst["ckpt"], rel_err(cache.checkpoint_values(flushed), state64[flushed.to(state64.device)]))
    same = cache.checkpoint[untouched.to(device)].view(torch.uint8).equal(ckpt0.view(torch.uint8))  # NaN codes too
    assert same, "unused slots must stay bit-identical"
    assert scale is None or torch.equal(scale[untouched.to(device)], scale0), "unused slots' scales must stay"
    assert torch.all(cache.arrivals == 0)
    return worst
