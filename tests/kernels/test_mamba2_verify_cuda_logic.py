"""The CUDA C++ Mamba-2 verify's arithmetic on the CPU, at the kernel's decomposition: a PyTorch model
of its two launches (kernels/cuda/mamba2_verify_step.cu) driven against the float64 serial oracle
over many verify + commit steps and flushes (tests/spec_cases.drive_spec: outputs, flushed
checkpoints, cursors, pending, padding rows, poisoned unused slots and record positions).

What the model shares with the kernel, and the GPU tests (tests/gpu/test_mamba2_verify_cuda_gpu.py)
then hold the kernel to: the coefficient block (history weights dt_k exp(A (λ_k + c_s)) B_k.C_s
from exact suffix sums, window weights dt_j exp(A c_{j,s}) B_j.C_s with c_{j,s} summed term by
term, decays exp(A (Λ + c_s)), fold weights dt_k exp(A λ_k)); a flush row's outputs from S0 + the
history + the window (not from the folded, rounded checkpoint); the fold in three bf16 parts over
fp32 accumulators; the records each launch writes and where; a flush row's window B records written
only after every unit of the row has read the history (the kernel's arrival count).
"""

import pytest
import torch

from mamba2_cases import ACT_TOL, STATE_TOL, Geometry, Mamba2Family
from spec_cases import commit_with_op, drive_spec
from test_mamba2_cuda_logic import split3
from trtllm_replayssm.ops import spec_buffer_len

BF16 = torch.bfloat16
ROWS = ["all", "bonus", "mixed", "short", "mixed"]


def _softplus(v):
    return torch.where(v <= 20, torch.log1p(torch.exp(v)), v)


def coefficient_launch(cache, win, p, slot_ids, num_tokens):
    """Launch 1: per (row, head) the coefficient block; the window's dt records, a non-flush row's
    window B records, pending."""
    batch, T, nheads, _ = win["x"].shape
    ngroups = win["B"].shape[2]
    hpg, L = nheads // ngroups, cache.x_records.shape[2]
    blocks = {}
    for b, slot in enumerate(slot_ids.tolist()):
        if slot < 0:
            continue
        n = T if num_tokens is None else int(num_tokens[b])
        w = int(cache.cursor[slot])
        flush = w + n > L - 1
        for g in range(ngroups):
            C = win["C"][b, :, g].float()  # [T, d_state]
            Bw = win["B"][b, :, g].float()
            bc_h = cache.B_records[slot, g, :w].float() @ C.T  # [w, T]
            bc_w = torch.triu(Bw @ C.T)  # [j, s], j <= s
            for h in range(g * hpg, (g + 1) * hpg):
                a = p.A[h].float()
                dtw = _softplus(win["dt"][b, :, h].float() + p.dt_bias[h].float())
                dtk = cache.dt_records[slot, h, :w].float()
                suffix = torch.flip(torch.cumsum(torch.flip(dtk, [0]), 0), [0])  # Σ_{i >= k}
                later = torch.cat([suffix[1:], torch.zeros(1)])[:w]  # λ_k = Σ_{k<i<w}
                total = dtk.sum()
                cum = torch.cumsum(dtw, 0)
                between = torch.zeros(T, T)  # c_{j,s} = Σ_{j<i<=s} dt_i, term by term
                for j in range(T):
                    for s in range(j + 1, T):
                        between[j, s] = between[j, s - 1] + dtw[s]
                blocks[(b, h)] = dict(
                    w=w,
                    n=n,
                    flush=flush,
                    hist=dtk[:, None] * torch.exp(a * (later[:, None] + cum[None, :])) * bc_h,
                    win=dtw[:, None] * torch.exp(a * between) * bc_w,
                    decay=torch.exp(a * (total + cum)),
                    wgt=dtk * torch.exp(a * later),
                    fold=torch.exp(a * total),
                )
                pos = torch.arange(n) + (0 if flush else w)
                cache.dt_records[slot, h, pos] = dtw[:n]
            if not flush:
                cache.B_records[slot, g, w : w + n] = win["B"][b, :n, g]
        cache.pending[slot] = n
    return blocks


def step_launch(cache, win, p, slot_ids, blocks, out, window_B_before_fold=False):
    """Launch 2: every unit's outputs and window x records, a flush unit's fold; then (after every
    unit of a flush row has read its history: the arrival count) the row's window B records and
    cursor. ``window_B_before_fold``: write them first instead (the race the count prevents)."""
    ngroups = win["B"].shape[2]
    hpg = win["x"].shape[2] // ngroups
    flush_rows = {(b, int(slot_ids[b])): blk["n"] for (b, h), blk in blocks.items() if blk["flush"]}
    if window_B_before_fold:
        _window_B(cache, win, flush_rows)
    for (b, h), blk in blocks.items():
        slot, g, w, n = int(slot_ids[b]), h // hpg, blk["w"], blk["n"]
        S0 = cache.checkpoint[slot, h].float()
        xh = cache.x_records[slot, h, :w].float()  # [w, head_dim]
        xw = win["x"][b, :, h].float()  # [T, head_dim]
        C = win["C"][b, :, g].float()
        y = blk["decay"][:, None] * (C @ S0.T) + blk["hist"].T @ xh + blk["win"].T @ xw
        y = y + p.D[h].float() * xw
        if win["z"] is not None:
            zz = win["z"][b, :, h].float()
            y = y * zz * torch.sigmoid(zz)
        out[b, :n, h] = y[:n].to(out.dtype)
        if blk["flush"]:
            Bk = cache.B_records[slot, g, :w].float()
            acc = blk["fold"] * S0
            for part in split3(blk["wgt"][:, None] * xh):
                acc = acc + part.T @ Bk
            cache.checkpoint[slot, h] = acc.to(cache.checkpoint.dtype)
        pos = torch.arange(n) + (0 if blk["flush"] else w)
        cache.x_records[slot, h, pos] = win["x"][b, :n, h]
    if not window_B_before_fold:
        _window_B(cache, win, flush_rows)
    for _, slot in flush_rows:
        cache.cursor[slot] = 0


def _window_B(cache, win, flush_rows):
    for (b, slot), n in flush_rows.items():
        cache.B_records[slot, :, :n] = win["B"][b, :n].transpose(0, 1)


def cuda_verify_model(cache, win, p, slot_ids, num_tokens, out, **step_options):
    """Both launches on CPU tensors, in order (``verify`` for drive_spec)."""
    blocks = coefficient_launch(cache, win, p, slot_ids, num_tokens)
    step_launch(cache, win, p, slot_ids, blocks, out, **step_options)
    return out


def _drive(model, g, T, state, steps=40):
    return drive_spec(
        Mamba2Family(g, with_z=True),
        model,
        commit_with_op,
        L=spec_buffer_len(2 * T if T > 1 else 2, T),
        T=T,
        state_dtype={"bf16": BF16, "f32": torch.float32}[state],
        act_dtype=BF16,
        device="cpu",
        steps=steps,
        policies=ROWS,
        num_slots=8,
        n_padding=1,
    )


@pytest.mark.parametrize(
    "g,T",
    [
        pytest.param(Geometry(4, 16, 64, 2), 4, id="T4"),
        pytest.param(Geometry(3, 32, 64, 1), 1, id="T1"),
        pytest.param(Geometry(6, 16, 128, 3), 3, id="T3"),
        pytest.param(Geometry(2, 16, 64, 1), 8, id="T8"),
    ],
)
@pytest.mark.parametrize("state", ["bf16", "f32"])
def test_model_of_the_two_launches_tracks_the_float64_oracle(g, T, state):
    worst = _drive(cuda_verify_model, g, T, state)
    assert len(worst["flushes"]) == len(ROWS) and min(worst["flushes"].values()) >= 2, worst
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL[state], worst
    assert worst["ckpt"] < STATE_TOL[state], worst


def test_window_B_written_before_the_folds_fails():
    """A flush row's window B records overwrite history the row's folds read: written before them
    (no arrival count), the flushed checkpoints are wrong."""

    def racy(cache, win, p, slot_ids, num_tokens, out):
        return cuda_verify_model(cache, win, p, slot_ids, num_tokens, out, window_B_before_fold=True)

    with pytest.raises(AssertionError):
        worst = _drive(racy, Geometry(4, 16, 64, 2), 4, "f32", steps=12)
        assert worst["ckpt"] < STATE_TOL["f32"], worst
