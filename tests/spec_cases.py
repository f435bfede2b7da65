"""Family-agnostic speculative-decoding test driver: verify + commit steps with random
acceptance against a float64 serial oracle that only ever sees the accepted stream.

A family is the one of :mod:`replay_driver` (``make_params``, ``allocate``, ``poison``,
``make_step``, ``out_key``, ``oracle_step``). A window of T tokens is T single-token steps
stacked along dimension 1: every input gets shape [batch, T, ...].

``verify(cache, win, params, slot_ids, num_tokens, out) -> out`` and
``commit(cache, slot_ids, num_accepted)`` are the implementations under test.
"""

from __future__ import annotations

from collections import Counter

import torch

from trtllm_replayssm.ops import replay_cache_state
from trtllm_replayssm.reference.spec import VERIFY_FLUSHED

from replay_driver import as_f64, rel_err

# Row policies: (tokens per verify, tokens accepted) drawn each step.
#   all: T tokens, all accepted;  bonus: T tokens, only the first (bonus) token accepted;
#   mixed: T tokens, a uniform in [1, T];  short: n uniform in [1, T], a uniform in [1, n];
#   short_all: n uniform in [1, T], all accepted (for baselines that cannot roll back).
POLICIES = ("all", "bonus", "mixed", "short", "short_all")


def make_window(family, batch: int, T: int, act_dtype, device) -> dict:
    """Inputs of a verify step: T random single-token steps stacked along dimension 1."""
    steps = [family.make_step(batch, act_dtype, device) for _ in range(T)]
    return {k: None if steps[0][k] is None else torch.stack([s[k] for s in steps], dim=1) for k in steps[0]}


def token(win: dict, s: int) -> dict:
    """The single-token step inputs of window token s."""
    return {k: None if v is None else v[:, s] for k, v in win.items()}


def draw(policy: str, T: int) -> tuple[int, int]:
    """(num_tokens, num_accepted) of one row for one step."""

    def uniform(hi):
        return int(torch.randint(1, hi + 1, ()))

    if policy == "all":
        return T, T
    if policy == "bonus":
        return T, 1
    if policy == "mixed":
        return T, uniform(T)
    if policy == "short":
        n = uniform(T)
        return n, uniform(n)
    if policy == "short_all":
        n = uniform(T)
        return n, n
    raise ValueError(policy)


def drive_spec(
    family,
    verify,
    commit,
    *,
    L: int,
    T: int,
    state_dtype,
    act_dtype,
    device,
    steps: int,
    policies,
    num_slots: int,
    n_padding: int = 1,
    corrupt=None,
) -> dict:
    """Run ``steps`` verify + commit steps from empty buffers; return the worst errors.

    Rows (one per entry of ``policies``) use random distinct slots of a pool of ``num_slots``
    whose unused slots and record positions hold garbage (checked bit-identical / never read);
    ``n_padding`` padding rows (slot -1) are shuffled in. Every step checks, per row: the
    flush decision (cursor after verify), pending, a non-flush checkpoint bit-identical, a
    flush checkpoint and the state ``replay_cache_state`` reads against the oracle's committed
    state, every window output against the
    serial float64 run from the committed state, untouched outputs of padding rows and of
    tokens past num_tokens, and the cursor after the commit. ``corrupt(cache, step)`` may
    tamper with the cache before a verify (teeth tests).
    """
    p = family.make_params(device)
    cache = family.allocate(num_slots, L, state_dtype, act_dtype, device)
    cache.checkpoint.copy_((torch.randn_like(cache.checkpoint, dtype=torch.float32) * 1e3).to(state_dtype))
    family.poison(cache)
    batch = len(policies)
    perm = torch.randperm(num_slots)[:batch]
    slots = perm.to(torch.int32).to(device)
    cache.admit(slots, torch.randn((batch,) + tuple(cache.checkpoint.shape[1:]), device=device))
    values = cache.checkpoint_values  # an fp8 checkpoint's codes times their scales
    state64 = as_f64(values(torch.arange(num_slots, device=device)), cache.checkpoint.device).clone()
    dev64 = state64.device
    untouched = torch.ones(num_slots, dtype=torch.bool)
    untouched[perm.long()] = False
    ckpt0 = cache.checkpoint[untouched.to(device)].clone()
    idx = perm.long()

    worst = {"y": 0.0, "ckpt": 0.0, "flushes": Counter()}  # flushes per slot
    for step in range(steps):
        drawn = [draw(pol, T) for pol in policies] + [(T, 1)] * n_padding
        order = torch.randperm(batch + n_padding)
        sl = torch.cat([slots.cpu(), torch.full((n_padding,), -1, dtype=torch.int32)])[order]
        n = torch.tensor([drawn[i][0] for i in order.tolist()], dtype=torch.int32)
        a = torch.tensor([drawn[i][1] for i in order.tolist()], dtype=torch.int32)
        live = sl >= 0
        win = make_window(family, batch + n_padding, T, act_dtype, device)
        out = torch.full_like(win[family.out_key], 42.0)

        w0 = cache.cursor.cpu()[idx]
        n_slot = torch.zeros(num_slots, dtype=torch.int64)
        n_slot[sl[live].long()] = n[live].long()
        flush = w0 + n_slot[idx] > L - 1
        ckpt_before = cache.checkpoint.view(torch.uint8).clone()
        if corrupt is not None:
            corrupt(cache, step)
        y = verify(cache, win, p, sl.to(device), n.to(device), out)

        cur = cache.cursor.cpu()[idx]
        flagged = w0 + VERIFY_FLUSHED if hasattr(cache, "d_records") else torch.zeros_like(w0)
        assert torch.equal(cur, torch.where(flush, flagged, w0)), (step, cur, w0, flush)
        assert torch.equal(cache.pending.cpu()[idx].long(), n_slot[idx])
        kept = idx[~flush].to(device)
        assert torch.equal(cache.checkpoint.view(torch.uint8)[kept], ckpt_before[kept]), (
            f"step {step}: a non-flush verify must leave the checkpoint bit-identical"
        )
        if bool(flush.any()):
            f = idx[flush]
            worst["flushes"].update(f.tolist())
            worst["ckpt"] = max(worst["ckpt"], rel_err(values(f.to(device)), state64[f.to(dev64)]))
        # Between verify and commit a host reading the state gets the committed one (a flushed
        # GDN/KDA row's cursor is flagged then).
        held = replay_cache_state(cache, slots, A=getattr(p, "A", None))
        worst["ckpt"] = max(worst["ckpt"], rel_err(held, state64[idx.to(dev64)]))

        # Serial oracle from the committed state over every window token; the committed state
        # then advances by the accepted tokens only.
        scratch = state64.clone()
        y_cpu = y.cpu()
        for s in range(T):
            sl_s = torch.where(s < n, sl, -1)
            ref = family.oracle_step(scratch, p, token(win, s), sl_s)
            rows = sl_s >= 0
            if bool(rows.any()):
                worst["y"] = max(worst["y"], rel_err(y_cpu[rows, s], ref[rows.to(dev64)]))
            assert torch.all(y_cpu[~rows, s] == 42.0), f"step {step} token {s}: untouched outputs changed"
            done = sl[live & (a == s + 1)].long().to(dev64)
            state64[done] = scratch[done]

        commit(cache, sl.to(device), a.to(device))
        a_slot = torch.zeros(num_slots, dtype=torch.int64)
        a_slot[sl[live].long()] = a[live].long()
        assert torch.equal(cache.cursor.cpu()[idx], torch.where(flush, 0, w0) + a_slot[idx])
        assert not cache.pending.cpu()[idx].any()
    assert torch.equal(cache.checkpoint[untouched.to(device)].view(torch.uint8), ckpt0.view(torch.uint8)), (
        "unused slots must stay bit-identical"
    )
    assert not cache.arrivals.any()
    return worst


def drive_baseline(
    family, holder, verify, commit, *, T: int, act_dtype, device, steps: int, policies, n_padding: int = 1
) -> float:
    """A conventional baseline against the same serial float64 oracle: every window output and
    the committed state after every commit. ``holder.state`` [num_slots, ...] is the committed
    state (e.g. a ``SnapshotCache``); ``verify(holder, win, params, slot_ids, num_tokens, out)``,
    ``commit(holder, slot_ids, num_accepted)``. Returns the worst relative error."""
    p = family.make_params(device)
    holder.state.copy_(torch.randn_like(holder.state, dtype=torch.float32).to(holder.state.dtype))
    num_slots = holder.state.shape[0]
    batch = len(policies)
    perm = torch.randperm(num_slots)[:batch]
    slots = perm.to(torch.int32)
    state64 = as_f64(holder.state, holder.state.device).clone()  # oracle on the holder's device
    dev64 = state64.device
    worst = 0.0
    for _ in range(steps):
        drawn = [draw(pol, T) for pol in policies] + [(T, 1)] * n_padding
        order = torch.randperm(batch + n_padding)
        sl = torch.cat([slots, torch.full((n_padding,), -1, dtype=torch.int32)])[order]
        n = torch.tensor([drawn[i][0] for i in order.tolist()], dtype=torch.int32)
        a = torch.tensor([drawn[i][1] for i in order.tolist()], dtype=torch.int32)
        win = make_window(family, batch + n_padding, T, act_dtype, device)
        y = verify(holder, win, p, sl.to(device), n.to(device), torch.full_like(win[family.out_key], 42.0)).cpu()
        scratch = state64.clone()
        for s in range(T):
            sl_s = torch.where(s < n, sl, -1)
            ref = family.oracle_step(scratch, p, token(win, s), sl_s)
            rows = sl_s >= 0
            worst = max(worst, rel_err(y[rows, s], ref[rows.to(dev64)]))
            assert torch.all(y[~rows, s] == 42.0)
            done = sl[(sl >= 0) & (a == s + 1)].long().to(dev64)
            state64[done] = scratch[done]
        commit(holder, sl.to(device), a.to(device))
        worst = max(worst, rel_err(holder.state[perm.to(device)], state64[perm.to(dev64)]))
    return worst


def drive_verify_vs_serial(
    family, verify, commit, serial_step, *, L: int, T: int, state_dtype, act_dtype, device, steps: int, rows: int, degrade=None
) -> dict:
    """Speculative verify + commit and the conventional serial path side by side, on the same
    windows and the same random acceptance ("mixed": T tokens, 1 to T accepted), both against
    the float64 serial oracle of the accepted stream.

    The serial path keeps its committed state in ``state_dtype`` (rounded after every token, as
    conventional decode does) and runs each window token by token with ``serial_step(state,
    params, inputs, slot_ids) -> out``; its committed state becomes the state after the last
    accepted token. Both start from the same admitted state. ``degrade(cache)`` (teeth tests)
    runs after every verify.

    Returns the worst errors over all steps and window tokens, each max |a - ref| / max |ref|
    over the rows: ``y_verify`` and ``y_serial`` (outputs), ``ckpt`` (each flushed checkpoint
    against the oracle's committed state) and ``state`` (the serial path's committed state),
    and ``flushes`` (flush rows counted over the run).
    """
    p = family.make_params(device)
    cache = family.allocate(rows, L, state_dtype, act_dtype, device)
    slots = torch.arange(rows, dtype=torch.int32, device=device)
    cache.admit(slots, torch.randn((rows,) + tuple(cache.checkpoint.shape[1:]), device=device))
    state = cache.checkpoint.clone()
    state64 = as_f64(cache.checkpoint, device).clone()
    worst = {"y_verify": 0.0, "y_serial": 0.0, "ckpt": 0.0, "state": 0.0, "flushes": 0}
    for _ in range(steps):
        a = torch.tensor([draw("mixed", T)[1] for _ in range(rows)], dtype=torch.int32, device=device)
        win = make_window(family, rows, T, act_dtype, device)
        w0 = cache.cursor.clone()
        y = verify(cache, win, p, slots, None, torch.zeros_like(win[family.out_key]))
        if degrade is not None:
            degrade(cache)
        # a flushed row: cursor 0 (Mamba-2) or flagged (GDN/KDA, until the commit)
        flushed = slots[((cache.cursor == 0) & (w0 > 0)) | (cache.cursor >= VERIFY_FLUSHED)].long()
        if flushed.numel():
            worst["flushes"] += flushed.numel()
            worst["ckpt"] = max(worst["ckpt"], rel_err(cache.checkpoint[flushed], state64[flushed]))
        scratch64, scratch = state64.clone(), state.clone()
        for s in range(T):
            ref = family.oracle_step(scratch64, p, token(win, s), slots)
            y_serial = serial_step(scratch, p, token(win, s), slots)
            worst["y_verify"] = max(worst["y_verify"], rel_err(y[:, s], ref))
            worst["y_serial"] = max(worst["y_serial"], rel_err(y_serial, ref))
            done = slots[a == s + 1].long()
            state64[done], state[done] = scratch64[done], scratch[done]
        commit(cache, slots, a)
        worst["state"] = max(worst["state"], rel_err(state, state64))
    return worst


# --------------------------------------------------------------------------- Mamba-2 adapters


def mamba2_verify_with_op(cache, win, p, slot_ids, num_tokens, out):
    from trtllm_replayssm.ops import mamba2_replay_verify

    return mamba2_replay_verify(
        cache,
        win["x"],
        win["dt"],
        p.A,
        win["B"],
        win["C"],
        slot_ids=slot_ids,
        num_tokens=num_tokens,
        D=p.D,
        z=win["z"],
        dt_bias=p.dt_bias,
        out=out,
    )


def mamba2_decode_with_op(state, p, inp, slot_ids):
    """One conventional Mamba-2 step on ``state`` (mutated, rounded to its dtype); the serial
    path of :func:`drive_verify_vs_serial`."""
    from trtllm_replayssm.ops import mamba2_decode_step

    return mamba2_decode_step(
        state, inp["x"], inp["dt"], p.A, inp["B"], inp["C"], slot_ids=slot_ids, D=p.D, z=inp["z"], dt_bias=p.dt_bias
    )


def mamba2_verify_with_launcher(cache, win, p, slot_ids, num_tokens, out, config=None, kernel="auto"):
    from trtllm_replayssm.kernels.mamba2_verify import launch_mamba2_replay_verify

    return launch_mamba2_replay_verify(
        cache.checkpoint,
        cache.x_records,
        cache.dt_records,
        cache.B_records,
        cache.cursor,
        cache.arrivals,
        cache.pending,
        win["x"],
        win["dt"],
        p.A,
        win["B"],
        win["C"],
        slot_ids=slot_ids,
        num_tokens=num_tokens,
        D=p.D,
        z=win["z"],
        dt_bias=p.dt_bias,
        out=out,
        config=config,
        kernel=kernel,
        checkpoint_scale=cache.checkpoint_scale,
    )


def commit_with_op(cache, slot_ids, num_accepted):
    from trtllm_replayssm.ops import replay_commit

    replay_commit(cache, slot_ids, num_accepted)


def commit_with_launcher(cache, slot_ids, num_accepted):
    from trtllm_replayssm.kernels.replay_commit import launch_replay_commit

    launch_replay_commit(cache.cursor, cache.pending, slot_ids, num_accepted)


def mamba2_snapshot_verify_with_op(holder, win, p, slot_ids, num_tokens, out):
    from trtllm_replayssm.ops import mamba2_snapshot_verify

    return mamba2_snapshot_verify(
        holder,
        win["x"],
        win["dt"],
        p.A,
        win["B"],
        win["C"],
        slot_ids=slot_ids,
        num_tokens=num_tokens,
        D=p.D,
        z=win["z"],
        dt_bias=p.dt_bias,
        out=out,
    )


def mamba2_snapshot_verify_with_launcher(holder, win, p, slot_ids, num_tokens, out):
    from trtllm_replayssm.kernels.mamba2_snapshot import launch_mamba2_snapshot_verify

    return launch_mamba2_snapshot_verify(
        holder.state,
        holder.snapshots,
        win["x"],
        win["dt"],
        p.A,
        win["B"],
        win["C"],
        slot_ids=slot_ids,
        num_tokens=num_tokens,
        D=p.D,
        z=win["z"],
        dt_bias=p.dt_bias,
        out=out,
    )


def snapshot_commit_with_op(holder, slot_ids, num_accepted):
    from trtllm_replayssm.ops import snapshot_commit

    snapshot_commit(holder, slot_ids, num_accepted)


def snapshot_commit_with_launcher(holder, slot_ids, num_accepted):
    from trtllm_replayssm.kernels.replay_commit import launch_snapshot_commit

    launch_snapshot_commit(holder.state, holder.snapshots, slot_ids, num_accepted)


def mamba2_serial_with_op(holder, win, p, slot_ids, num_tokens, out):
    """Serial decode as a baseline verify; every token is committed, so drive it with
    acceptance policies that accept all tokens ("all", or num_accepted == num_tokens)."""
    from trtllm_replayssm.ops import mamba2_serial_decode

    return mamba2_serial_decode(
        holder.state,
        win["x"],
        win["dt"],
        p.A,
        win["B"],
        win["C"],
        slot_ids=slot_ids,
        num_tokens=num_tokens,
        D=p.D,
        z=win["z"],
        dt_bias=p.dt_bias,
        out=out,
    )


def no_commit(holder, slot_ids, num_accepted):
    return None


# --------------------------------------------------------------------------- GDN / KDA adapters
# The family is told apart by g's rank: [batch, T, v_heads] GDN, [..., head_k_dim] KDA.


def delta_args(win):
    """q, k, v, g, beta of a window (``make_window``), in the verify ops' argument order."""
    return win["q"], win["k"], win["v"], win["g"], win["beta"]


def delta_verify_with_op(cache, win, p, slot_ids, num_tokens, out):
    from trtllm_replayssm.ops import gdn_replay_verify, kda_replay_verify

    verify = kda_replay_verify if win["g"].dim() == 4 else gdn_replay_verify
    return verify(cache, *delta_args(win), slot_ids=slot_ids, num_tokens=num_tokens, out=out, **p)


def delta_verify_with_launcher(
    cache,
    win,
    p,
    slot_ids,
    num_tokens,
    out,
    config=None,
    flush_config=None,
    history_product=None,
    kernel="auto",
    rounding_seed=None,
):
    from trtllm_replayssm.kernels.gated_delta_verify import launch_gated_delta_replay_verify

    return launch_gated_delta_replay_verify(
        cache.checkpoint,
        cache.d_records,
        cache.k_records,
        cache.g_records,
        cache.cursor,
        cache.pending,
        *delta_args(win),
        slot_ids=slot_ids,
        num_tokens=num_tokens,
        out=out,
        config=config,
        flush_config=flush_config,
        history_product=history_product,
        kernel=kernel,
        checkpoint_scale=cache.checkpoint_scale,
        rounding_seed=rounding_seed,
        **p,
    )


def delta_decode_with_op(state, p, inp, slot_ids):
    """One conventional GDN / KDA step on ``state`` (mutated, rounded to its dtype); the serial
    path of :func:`drive_verify_vs_serial`."""
    from trtllm_replayssm.ops import gdn_decode_step, kda_decode_step

    step = kda_decode_step if inp["g"].dim() == 3 else gdn_decode_step
    return step(state, *(inp[k] for k in ("q", "k", "v", "g", "beta")), slot_ids=slot_ids, **p)


def delta_snapshot_verify_with_op(holder, win, p, slot_ids, num_tokens, out):
    from trtllm_replayssm.ops import gdn_snapshot_verify, kda_snapshot_verify

    verify = kda_snapshot_verify if win["g"].dim() == 4 else gdn_snapshot_verify
    return verify(holder, *delta_args(win), slot_ids=slot_ids, num_tokens=num_tokens, out=out, **p)


def delta_snapshot_verify_with_launcher(holder, win, p, slot_ids, num_tokens, out):
    from trtllm_replayssm.kernels.gated_delta_snapshot import launch_gated_delta_snapshot_verify

    return launch_gated_delta_snapshot_verify(
        holder.state, holder.snapshots, *delta_args(win), slot_ids=slot_ids, num_tokens=num_tokens, out=out, **p
    )


def delta_serial_with_op(holder, win, p, slot_ids, num_tokens, out):
    """Serial decode as a baseline verify (every token committed; see mamba2_serial_with_op)."""
    from trtllm_replayssm.ops import gdn_serial_decode, kda_serial_decode

    serial = kda_serial_decode if win["g"].dim() == 4 else gdn_serial_decode
    return serial(holder.state, *delta_args(win), slot_ids=slot_ids, num_tokens=num_tokens, out=out, **p)
