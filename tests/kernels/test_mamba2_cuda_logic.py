"""The CUDA C++ Mamba-2 step's arithmetic on the CPU, at the kernel's decomposition: a PyTorch model
of its two launches (kernels/cuda/mamba2_replay_step.cu) driven against the float64 oracle over
many steps and flushes, with padding rows and poisoned unused slots and record positions.

What the model shares with the kernel, and the GPU tests (tests/gpu/test_mamba2_cuda_gpu.py)
then hold the kernel to: the coefficient block (coef_j = s_j B_j.C for j < w, dt B.C at j = w;
weights s_j from exact suffix sums; decay), the step's record written at w by the coefficient
launch for every w (the flush reads it as record L-1), records 0..w read uniformly, the flush
as decay S0 + sum_j s_j x_j B_jᵀ with s_j x_j in three bf16 parts over fp32 accumulators (B rows
past w clamped to w under a zero A), one bf16 rounding of the checkpoint and of y, the cursor
advanced once per row after both launches' reads.
"""

import pytest
import torch

from mamba2_cases import ACT_TOL, STATE_TOL, Geometry, drive_replay
from trtllm_replayssm.reference.rounding import fp8_row_encode

BF16 = torch.bfloat16


def split3(v: torch.Tensor):
    """v (fp32) as hi + mid + lo, each a bf16 value (the kernel's split3)."""
    hi = v.to(BF16).float()
    mid = (v - hi).to(BF16).float()
    lo = ((v - hi) - mid).to(BF16).float()
    return hi, mid, lo


def tf32(v: torch.Tensor) -> torch.Tensor:
    """fp32 values as the TF32 tensor-core inputs read them: the low 13 mantissa bits dropped."""
    return (v.contiguous().view(torch.int32) & -8192).view(torch.float32)


def s0_dot_c(S0: torch.Tensor, C: torch.Tensor, scale=None) -> torch.Tensor:
    """S0 . C as the step kernel forms it: bf16 rows exactly (bf16 products, fp32 sums); fp8 rows
    as their codes' products, times each row's ``scale``; fp32 rows as TF32 products of their hi
    and lo parts (C, bf16, is exact in TF32)."""
    if S0.dtype == torch.float8_e4m3fn:
        return (S0.float() @ C) * scale
    if S0.dtype == BF16:
        return S0.float() @ C
    hi = tf32(S0)
    return hi @ C + tf32(S0 - hi) @ C


def coefficient_launch(cache, inp, p, slot_ids, LP):
    """Launch 1: per (row, head) (coef[LP], wgt[LP], decay, w); appends the step's record at w."""
    x_rec, dt_rec, B_rec = cache.x_records, cache.dt_records, cache.B_records
    batch, nheads, _ = inp["x"].shape
    ngroups = inp["B"].shape[1]
    hpg = nheads // ngroups
    blocks = {}
    for b, slot in enumerate(slot_ids.tolist()):
        if slot < 0:
            continue
        w = int(cache.cursor[slot])
        for g in range(ngroups):
            C, B_now = inp["C"][b, g].float(), inp["B"][b, g].float()
            rows = torch.zeros(LP, C.numel())
            rows[:w] = B_rec[slot, g, :w].float()
            rows[w] = B_now
            bc = rows @ C  # B_j . C, the step's B at j == w, zero after
            for h in range(g * hpg, (g + 1) * hpg):
                dt = inp["dt"][b, h].float() + p.dt_bias[h].float()
                dt = torch.where(dt <= 20, torch.log1p(torch.exp(dt)), dt)
                dtj = dt_rec[slot, h, :w].float()
                suffix = torch.flip(torch.cumsum(torch.flip(dtj, [0]), 0), [0])  # sum_{i >= j} dt_i
                later = torch.cat([suffix[1:], torch.zeros(1)])[:w]  # sum_{j < i < w} dt_i, exact suffixes
                s = torch.zeros(LP)
                s[:w] = dtj * torch.exp(p.A[h] * (later + dt))
                s[w] = dt
                blocks[(b, h)] = (s * bc, s, torch.exp(p.A[h] * (dtj.sum() + dt)), w)
                dt_rec[slot, h, w] = dt
                x_rec[slot, h, w] = inp["x"][b, h]
            B_rec[slot, g, w] = inp["B"][b, g]
    return blocks


def step_launch(cache, inp, p, slot_ids, blocks, L, parts=3):
    """Launch 2: y from checkpoint + records 0..w; a flush unit's checkpoint; the cursor."""
    ngroups = inp["B"].shape[1]
    hpg = inp["x"].shape[1] // ngroups
    for (b, h), (coef, wgt, decay, w) in blocks.items():
        slot, g = int(slot_ids[b]), h // hpg
        scale = cache.checkpoint_scale[slot, h] if cache.checkpoint_scale is not None else None
        S0 = cache.checkpoint[slot, h].float() * (scale[:, None] if scale is not None else 1.0)  # fp8: codes x row scale
        X = cache.x_records[slot, h, : w + 1].float()  # [w+1, head_dim]: record w is the step's x
        y = decay * s0_dot_c(cache.checkpoint[slot, h], inp["C"][b, g].float(), scale) + coef[: w + 1] @ X
        D = p.D[h].float()
        y = y + D * X[w]
        if inp["z"] is not None:
            zz = inp["z"][b, h].float()
            y = y * zz * torch.sigmoid(zz)
        cache.out_rows.append((b, h, y.to(BF16)))
        if w == L - 1:
            LP = coef.numel()
            a = torch.zeros(LP, X.shape[1])
            a[: w + 1] = wgt[: w + 1, None] * X
            Bk = cache.B_records[slot, g, torch.clamp(torch.arange(LP), max=w)].float()  # rows past w clamped
            acc = decay * S0
            for part in split3(a)[:parts]:
                acc = acc + part.T @ Bk
            if scale is not None:  # fp8: each row's new scale max |row| / 448, codes to nearest even
                cache.checkpoint[slot, h], cache.checkpoint_scale[slot, h] = fp8_row_encode(acc)
            else:
                cache.checkpoint[slot, h] = acc.to(cache.checkpoint.dtype)
        if h == 0:
            cache.cursor[slot] = 0 if w == L - 1 else w + 1


def cuda_model_step(cache, inp, p, slot_ids, out, parts=3):
    """Both launches on CPU tensors, in order (``replay`` for drive_replay)."""
    L = cache.x_records.shape[2]
    LP = (L + 15) // 16 * 16
    blocks = coefficient_launch(cache, inp, p, slot_ids, LP)
    cache.out_rows = []
    step_launch(cache, inp, p, slot_ids, blocks, L, parts)
    for b, h, y in cache.out_rows:
        out[b, h] = y.to(out.dtype)
    del cache.out_rows
    return out


@pytest.mark.parametrize(
    "g,L",
    [
        pytest.param(Geometry(4, 16, 64, 2), 16, id="L16"),
        pytest.param(Geometry(3, 32, 64, 1), 5, id="L5-padded-records"),
        pytest.param(Geometry(4, 16, 128, 4), 1, id="L1-every-step-a-flush"),
        pytest.param(Geometry(2, 16, 64, 1), 17, id="L17-two-k-steps"),
    ],
)
@pytest.mark.parametrize("state", ["bf16", "f32", "fp8"])
def test_model_of_the_two_launches_tracks_the_float64_oracle(g, L, state):
    state_dtype = {"bf16": BF16, "f32": torch.float32, "fp8": torch.float8_e4m3fn}[state]
    worst = drive_replay(
        cuda_model_step, g, L, state_dtype, BF16, "cpu", steps=2 * L + 3, batch=3, num_slots=6, n_padding=1, with_z=True
    )
    assert worst["flushes"] >= 3
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL[state], worst
    assert worst["ckpt"] < STATE_TOL[state], worst


def test_three_bf16_parts_carry_fp32_and_one_does_not():
    """The flush's A operand: three bf16 parts reproduce s_j x_j to fp32's precision, over the
    whole fp32 exponent range a product can take; one part (bf16 alone) loses 2^-9."""
    torch.manual_seed(0)
    v = torch.randn(4096) * torch.exp2(torch.randint(-60, 60, (4096,)).float())
    hi, mid, lo = split3(v)
    rel = lambda a: ((a - v.double()).abs() / v.double().abs()).max().item()  # noqa: E731
    assert rel(hi.double() + mid.double() + lo.double()) < 2.0**-23
    assert rel(hi.double()) > 2.0**-12


def test_tf32_hi_and_lo_parts_carry_an_fp32_row_and_hi_alone_does_not():
    """S0 . C of an fp32 checkpoint: two TF32 products (hi, lo) come within ~2^-20 of the exact
    dot product; the hi part alone (plain TF32) is off by ~2^-11."""
    torch.manual_seed(1)
    S0 = torch.randn(64, 128)
    C = torch.randn(128).to(BF16).float()
    exact = S0.double() @ C.double()
    err = lambda y: ((y.double() - exact).abs().max() / exact.abs().max()).item()  # noqa: E731
    assert err(s0_dot_c(S0, C)) < 2.0**-19
    assert err(tf32(S0) @ C) > 2.0**-14


def test_a_flush_without_the_step_record_at_w_fails():
    """Teeth: a flush that folds a wrong record L-1 (here: the position overwritten after the
    coefficient launch, as a kernel that skipped the append at w = L-1 would leave it stale)
    must fail the oracle comparison."""

    def poisoned(cache, inp, p, slot_ids, out):
        L = cache.x_records.shape[2]
        LP = (L + 15) // 16 * 16
        blocks = coefficient_launch(cache, inp, p, slot_ids, LP)
        for (b, h), (_, _, _, w) in blocks.items():
            if w == L - 1:
                cache.x_records[int(slot_ids[b]), h, w] = 1e3  # the record the flush must not see stale
        cache.out_rows = []
        step_launch(cache, inp, p, slot_ids, blocks, L)
        for b, h, y in cache.out_rows:
            out[b, h] = y.to(out.dtype)
        del cache.out_rows
        return out

    worst = drive_replay(poisoned, Geometry(2, 16, 64, 1), 4, BF16, BF16, "cpu", steps=9, batch=2, num_slots=4)
    assert worst["flushes"] >= 2
    assert worst["ckpt"] > 10 * STATE_TOL["bf16"] and worst["y"] > 10 * ACT_TOL["bf16"], worst


def test_fp32_checkpoint_needs_the_three_part_flush():
    """With an fp32 checkpoint the flush's records term must keep fp32's precision: three bf16
    parts stay at fp32 rounding (~2e-7 here); one part (s_j x_j rounded to bf16) misses the
    fp32 tolerance by two orders."""
    run = lambda parts: drive_replay(  # noqa: E731
        lambda *a: cuda_model_step(*a, parts=parts), Geometry(4, 16, 64, 2), 16, torch.float32, BF16, "cpu",
        steps=35, batch=3, num_slots=6, n_padding=1,
    )  # fmt: skip
    assert run(3)["ckpt"] < 1e-6
    assert run(1)["ckpt"] > 10 * STATE_TOL["f32"]


def test_fp8_rows_need_their_scale_in_s0_dot_c():
    """Teeth for the fp8 model: S0 . C from the codes without the row scale (as a kernel that
    skipped the scale copy would form it) fails the oracle comparison."""

    scaled = s0_dot_c

    def unscaled(S0, C, scale=None):
        return S0.float() @ C if S0.dtype == torch.float8_e4m3fn else scaled(S0, C, scale)

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(globals(), "s0_dot_c", unscaled)
        worst = drive_replay(
            cuda_model_step, Geometry(2, 16, 64, 1), 4, torch.float8_e4m3fn, BF16, "cpu", steps=9, batch=2, num_slots=4
        )
    assert worst["y"] > 10 * (ACT_TOL["bf16"] + STATE_TOL["fp8"]), worst
