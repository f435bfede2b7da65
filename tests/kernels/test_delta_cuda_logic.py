"""The CUDA C++ gated delta-rule (GDN, KDA) step's arithmetic on the CPU, at the kernel's decomposition: a PyTorch model of
its two launches (kernels/cuda/gated_delta_replay_step.cu; KDA forms the first one's blocks per unit
inside the second, with the same arithmetic) driven against the float64 oracle over
many steps and flushes, with padding rows and poisoned unused slots and record positions.

What the model shares with the kernel, and the GPU tests (tests/gpu/test_delta_cuda_gpu.py) then
hold the kernel to: the coefficient block (scores e_j k̂_j.q̂ and e_j k̂_j.k̂ for j < w, decays
e_j and e0 from exact suffix sums of the g records, kq, beta, w), q̂ and k̂ normalised once per
(row, key head), the k̂ and g appends only below L-1, records 0..w-1 read, hq and hk as
e0 (S0 q̂) + sum_j score_j d_j, the flush as e0 S0 + sum_{j<w} (e_j d_j) k̂_jᵀ + d k̂ᵀ in fp32
with k̂ unrounded (KDA: decays per channel, S0 (e0 ⊙ q̂) and S0 Diag(e0) + sum_j d_j (e_j ⊙ k̂_j)ᵀ), one rounding of the checkpoint, of o and of d, the cursor advanced once.
"""

import pytest
import torch

from gated_delta_cases import ACT_TOL, STATE_TOL, DeltaFamily, DeltaGeometry
from replay_driver import drive_replay
from trtllm_replayssm.reference.rounding import fp8_row_encode

BF16 = torch.bfloat16


def coefficient_launch(cache, inp, p, slot_ids):
    """Launch 1: per (row, value head) (sq, sk, e, e0, kq, beta, w) and per (row, key head) (q̂, k̂);
    appends k̂ and g at w below L-1. KDA (g per channel): e_j and e0 are vectors, the scores
    (e_j ⊙ k̂_j) . q̂, and the step takes e0 ⊙ q̂, e0 ⊙ k̂ (the kernel's qk block per value head)."""
    k_heads = inp["q"].shape[1]
    v_heads = inp["v"].shape[1]
    vpk = v_heads // k_heads
    L = cache.d_records.shape[2]
    blocks, qk = {}, {}
    for b, slot in enumerate(slot_ids.tolist()):
        if slot < 0:
            continue
        w = int(cache.cursor[slot])
        for kh in range(k_heads):
            q, k = inp["q"][b, kh].float(), inp["k"][b, kh].float()
            if p["use_qk_l2norm"]:
                q = q * torch.rsqrt((q * q).sum() + 1e-6)
                k = k * torch.rsqrt((k * k).sum() + 1e-6)
            q = q * p["scale"]
            qk[b, kh] = (q, k)
            krec = cache.k_records[slot, kh, :w].float()
            for h in range(kh * vpk, (kh + 1) * vpk):
                gr = cache.g_records[slot, h, :w].float()
                later = torch.stack([gr[j + 1 :].sum(0) for j in range(w)]) if w else gr
                g = inp["g"][b, h].float()
                e = torch.exp(later + g)  # [w] (GDN) or [w, head_k_dim] (KDA)
                e0 = torch.exp(gr.sum(0) + g)
                u = krec * (e[:, None] if g.dim() == 0 else e)  # e_j ⊙ k̂_j
                blocks[b, h] = dict(sq=u @ q, sk=u @ k, e=e, u=u, e0=e0, kq=(q * k).sum(),
                                    beta=inp["beta"][b, h].float(), w=w)  # fmt: skip
                if w < L - 1:
                    cache.g_records[slot, h, w] = g
            if w < L - 1:
                cache.k_records[slot, kh, w] = k.to(cache.k_records.dtype)
    return blocks, qk


def step_launch(cache, inp, slot_ids, blocks, qk, out, flush_k_term=True):
    """Launch 2: outputs, d appends, flushes; the cursor advanced once per row."""
    v_heads = inp["v"].shape[1]
    vpk = v_heads // inp["q"].shape[1]
    L = cache.d_records.shape[2]
    for b, slot in enumerate(slot_ids.tolist()):
        if slot < 0:
            continue
        for h in range(v_heads):
            blk = blocks[b, h]
            q, k = qk[b, h // vpk]
            w = blk["w"]
            S0 = cache.checkpoint[slot, h].float()
            drec = cache.d_records[slot, h, :w].float()
            if cache.checkpoint_scale is not None:  # fp8: the codes' products, times the row scale
                row_scale = cache.checkpoint_scale[slot, h]
                hq = (S0 @ (blk["e0"] * q)) * row_scale + blk["sq"] @ drec
                hk = (S0 @ (blk["e0"] * k)) * row_scale + blk["sk"] @ drec
                S0 = S0 * row_scale[:, None]
            else:
                hq = S0 @ (blk["e0"] * q) + blk["sq"] @ drec
                hk = S0 @ (blk["e0"] * k) + blk["sk"] @ drec
            d = blk["beta"] * (inp["v"][b, h].float() - hk)
            out[b, h] = (hq + d * blk["kq"]).to(out.dtype)
            if w < L - 1:
                cache.d_records[slot, h, w] = d.to(cache.d_records.dtype)
            else:
                S = S0 * blk["e0"] + drec.T @ blk["u"]
                if flush_k_term:
                    S = S + d[:, None] * k[None, :]
                if cache.checkpoint_scale is not None:  # fp8: each row's new scale, codes to nearest even
                    cache.checkpoint[slot, h], cache.checkpoint_scale[slot, h] = fp8_row_encode(S)
                else:
                    cache.checkpoint[slot, h] = S.to(cache.checkpoint.dtype)
        w = blocks[b, 0]["w"]
        cache.cursor[slot] = 0 if w == L - 1 else w + 1
    return out


def cuda_model_step(cache, inp, p, slot_ids, out, **kw):
    blocks, qk = coefficient_launch(cache, inp, p, slot_ids)
    return step_launch(cache, inp, slot_ids, blocks, qk, out, **kw)


CASES = [
    pytest.param(DeltaGeometry(2, 4, 64, 32), 4, False, id="gdn-vpk2-L4"),
    pytest.param(DeltaGeometry(1, 3, 64, 48), 1, False, id="gdn-vpk3-L1"),
    pytest.param(DeltaGeometry(2, 2, 64, 16), 7, False, id="gdn-vpk1-L7"),
    pytest.param(DeltaGeometry(2, 2, 64, 32), 5, True, id="kda-L5"),
    pytest.param(DeltaGeometry(1, 2, 64, 16), 1, True, id="kda-vpk2-L1"),
]


# Raw q and k only with an fp32 checkpoint: unnormalised keys (|k|² ~ head_k_dim) make the delta
# rule's state grow without bound, past what a bf16 checkpoint's rounding can track.
FORMS = [(torch.float32, True), (BF16, True), (torch.float8_e4m3fn, True), (torch.float32, False)]
STATE_NAMES = {torch.float32: "f32", BF16: "bf16", torch.float8_e4m3fn: "fp8"}


@pytest.mark.parametrize("g,L,per_channel", CASES)
@pytest.mark.parametrize("state,l2norm", FORMS, ids=["f32-l2norm", "bf16-l2norm", "fp8-l2norm", "f32-raw"])
def test_model_of_the_two_launches_tracks_the_float64_oracle(g, L, per_channel, state, l2norm):
    fam = DeltaFamily(g, per_channel=per_channel, use_qk_l2norm=l2norm)
    worst = drive_replay(fam, cuda_model_step, L, state, BF16, "cpu", steps=3 * L + 4, batch=3, num_slots=6, n_padding=1)
    assert worst["flushes"] >= 3
    s = STATE_NAMES[state]
    assert worst["y"] < ACT_TOL["bf16"] + STATE_TOL[s], worst
    assert worst["ckpt"] < STATE_TOL[s] + ACT_TOL["bf16"], worst


def test_a_flush_without_the_current_token_fails():
    """Teeth: the flush's d k̂ᵀ term left out drifts the checkpoint far past the tolerance."""
    fam = DeltaFamily(DeltaGeometry(2, 4, 64, 32), per_channel=False)

    def without(cache, inp, p, slot_ids, out):
        return cuda_model_step(cache, inp, p, slot_ids, out, flush_k_term=False)

    worst = drive_replay(fam, without, 4, torch.float32, BF16, "cpu", steps=16, batch=3, num_slots=6, n_padding=1)
    assert worst["ckpt"] > 10 * (STATE_TOL["f32"] + ACT_TOL["bf16"]), worst


def _u_index(c: int, dk: int) -> int:
    """The kernel's u_index: float index of column c in a flush's U_j over slot j."""
    return (dk // 2 if c & 16 else 0) + (c >> 5) * 16 + (c & 15)


def _scan_overwrites(dk: int, lp: int, w: int, cwarps: int, g_rec, scan_block: int = 4):
    """KDA's flush scan (scan_column) over the stage's g area, byte by byte, a warp at a time:
    blocks of ``scan_block`` records from the last one that holds a record below w down, each
    block's g read by the warp's columns (fp16 at ``g_rec(j)`` DK halves), then its U_j (fp32 at
    u_index) written. Returns the (warp, record) pairs whose g bytes a warp overwrote before it or
    another warp read them (empty: the in-place U is safe with that g layout)."""
    owner = {}  # byte -> (record, column) of the g held there
    for j in range(w):
        for c in range(dk):
            for b in range(2):
                owner[2 * (g_rec(j) * dk + c) + b] = (j, c)
    read = set()  # (record, column) pairs read
    written = {}  # g byte -> warp that wrote U over it
    bad = set()
    warps = [[c for c in range(dk) if (c // 32) % cwarps == wp] for wp in range(cwarps)]
    for wp, cols in enumerate(warps):
        for j0 in range(lp - scan_block, -1, -scan_block):
            if j0 >= w:
                continue
            for j in range(j0, min(j0 + scan_block, w)):
                for c in cols:
                    if any(written.get(2 * (g_rec(j) * dk + c) + b) is not None for b in range(2)):
                        bad.add((wp, j))
                    read.add((j, c))
            for j in range(j0, min(j0 + scan_block, w)):
                for c in cols:
                    for b in range(4):
                        byte = 4 * (j * dk + _u_index(c, dk)) + b
                        if byte in owner and owner[byte] not in read:
                            bad.add((wp, owner[byte][0]))
                        if byte in owner and owner[byte][1] not in cols:
                            bad.add((wp, owner[byte][0]))  # another warp's column: a race
                        written[byte] = wp
    return bad


@pytest.mark.parametrize("dk", [64, 128, 256])
@pytest.mark.parametrize("lp, w", [(16, 15), (32, 31), (8, 4), (32, 17)])
@pytest.mark.parametrize("cwarps", [2, 4, 8])
@pytest.mark.parametrize("coalesced", [False, True], ids=["slots", "coalesced"])
def test_kda_flush_scan_writes_u_only_over_g_already_read(dk, lp, w, cwarps, coalesced):
    """Both g layouts of the stage (each record's g in the upper half of its slot; with
    COALESCE_RECS all records contiguous, slot j over records 2j and 2j + 1): a flush's U_j,
    written in place, lies only over g of the writing warp's own columns that it has read."""
    g_rec = (lambda j: j) if coalesced else (lambda j: 2 * j + 1)
    assert not _scan_overwrites(dk, lp, w, cwarps, g_rec)


def test_kda_flush_scan_check_has_teeth():
    """The check above flags a layout whose U lands over g not yet read: the records contiguous in
    the upper half of the area (record j at half LP + j) put U_j over records 2j - LP, 2j + 1 - LP,
    below j, which the scan reads later."""
    assert _scan_overwrites(128, 16, 15, 4, lambda j: 16 + j)
