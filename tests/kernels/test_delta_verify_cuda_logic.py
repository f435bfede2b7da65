"""The arithmetic of the CUDA GDN verify (kernels/cuda/gated_delta_verify_step.cu) on the CPU: a
PyTorch model of its two launches, in the kernels' decomposition (raw window products and norms
from their diagonal, per value head a block of history weights hk / hq, the window's A / Q and the
checkpoint weights wk / wq; per state row the window solved by forward substitution; a flush folded
from the scratch copy of the history keys), against the float64 reference verify over many steps
with flushes. Teeth: the fold reading the k̂ records after the window overwrote them fails.
(The kernels themselves run on an sm_90 GPU: tests/gpu/test_delta_verify_cuda_gpu.py.)"""

import pytest
import torch

from trtllm_replayssm.reference.spec import VERIFY_FLUSHED, gated_delta_replay_verify_ref, replay_commit_ref

F64 = torch.float64
EPS = 1e-6


def _coefficients(krec, grec, w, u, g_win, beta_win, T, scale, l2norm):
    """The coefficient launch for one (row, key head): krec [L, DK] the key head's k̂ records, grec
    [VPK, L] its value heads' g records, u [2T, DK] the raw window vectors (k then q), g_win /
    beta_win [VPK, T]. Returns per value head the block as a dict, and rk (the window keys' norms)."""
    gram = u @ u.T
    hraw = torch.zeros(krec.shape[0], 2 * T, dtype=F64)
    hraw[:w] = krec[:w] @ u.T
    diag = torch.diagonal(gram)
    rk = torch.rsqrt(diag[:T] + EPS) if l2norm else torch.ones(T, dtype=F64)
    rq = (torch.rsqrt(diag[T:] + EPS) if l2norm else torch.ones(T, dtype=F64)) * scale
    blocks = []
    for h in range(grec.shape[0]):
        gr = grec[h, :w]
        later = torch.stack([gr[j + 1 :].sum() for j in range(w)]) if w else torch.zeros(0, dtype=F64)
        total = gr.sum()
        cum = torch.cumsum(g_win[h], 0)
        dec_h = torch.exp(later[:, None] + cum[None, :])  # [w, T]
        hk = torch.zeros(krec.shape[0], T, dtype=F64)
        hq = torch.zeros(krec.shape[0], T, dtype=F64)
        hk[:w] = dec_h * rk[None, :] * hraw[:w, :T]
        hq[:w] = dec_h * rq[None, :] * hraw[:w, T:]
        A = torch.zeros(T, T, dtype=F64)
        Q = torch.zeros(T, T, dtype=F64)
        for s in range(T):
            for j in range(s + 1):
                between = torch.exp(g_win[h, j + 1 : s + 1].sum())
                Q[j, s] = between * rk[j] * rq[s] * gram[j, T + s]
                if j < s:
                    A[j, s] = between * rk[j] * rk[s] * gram[j, s]
        blocks.append(
            dict(
                hk=hk,
                hq=hq,
                A=A,
                Q=Q,
                wk=torch.exp(total + cum) * rk,
                wq=torch.exp(total + cum) * rq,
                beta=beta_win[h],
                wgt=torch.exp(later),
                fold=torch.exp(total),
            )
        )
    return blocks, rk


def model_verify(cache, q, k, v, g, beta, slot_ids, num_tokens, scale, l2norm, fold_from_records=False):
    """One verify on float64 cache tensors (a dict of the GDN cache's fields), in place, as the two
    launches do it; returns the outputs [batch, T, v_heads, head_v_dim]."""
    ck, dr, kr, gr, cursor, pending = (
        cache[n] for n in ("checkpoint", "d_records", "k_records", "g_records", "cursor", "pending")
    )
    batch, T, v_heads, _ = v.shape
    k_heads, L = q.shape[2], dr.shape[2]
    vpk = v_heads // k_heads
    out = torch.zeros(v.shape, dtype=F64)
    for b in range(batch):
        slot = int(slot_ids[b])
        if slot < 0:
            continue
        n = T if num_tokens is None else int(num_tokens[b])
        w = int(cursor[slot]) & (VERIFY_FLUSHED - 1)
        flush = w + n > L - 1
        base = 0 if flush else w
        for kh in range(k_heads):
            # launch 1
            u = torch.cat([k[b, :, kh], q[b, :, kh]]).to(F64)
            heads = range(kh * vpk, (kh + 1) * vpk)
            blocks, rk = _coefficients(kr[slot, kh], gr[slot, list(heads)], w, u, g[b, :, list(heads)].T.to(F64),
                                       beta[b, :, list(heads)].T.to(F64), T, scale, l2norm)  # fmt: skip
            khist = kr[slot, kh, :w].clone()
            for h in heads:
                gr[slot, h, base : base + n] = g[b, :n, h].to(F64)
            kr[slot, kh, base : base + n] = rk[:n, None] * u[:n]
            # launch 2, every value row of the key head's value heads
            for i, h in enumerate(heads):
                c = blocks[i]
                S0 = ck[slot, h]
                dhist = dr[slot, h, :w].clone()  # [w, DV]
                pk = c["wk"][None, :] * (S0 @ u[:T].T) + dhist.T @ c["hk"][:w]  # [DV, T]
                pq = c["wq"][None, :] * (S0 @ u[T:].T) + dhist.T @ c["hq"][:w]
                d = torch.zeros(S0.shape[0], T, dtype=F64)
                for s in range(T):
                    r = v[b, s, h].to(F64) - pk[:, s] - d[:, :s] @ c["A"][:s, s]
                    d[:, s] = c["beta"][s] * r
                    out[b, s, h] = pq[:, s] + d[:, : s + 1] @ c["Q"][: s + 1, s]
                dr[slot, h, base : base + n] = d[:, :n].T
                if flush:
                    keys = kr[slot, kh, :w] if fold_from_records else khist
                    ck[slot, h] = c["fold"] * S0 + (dhist.T * c["wgt"][None, :]) @ keys
        pending[slot] = n
        if flush:
            cursor[slot] = w + VERIFY_FLUSHED
    return out


def _cache(num_slots, k_heads, v_heads, dk, dv, L, gen):
    def r(*s):
        return torch.randn(*s, generator=gen, dtype=F64)

    kr = r(num_slots, k_heads, L, dk)
    return dict(
        checkpoint=r(num_slots, v_heads, dv, dk),
        d_records=r(num_slots, v_heads, L, dv),
        k_records=kr / kr.norm(dim=-1, keepdim=True),
        g_records=-torch.rand(num_slots, v_heads, L, generator=gen, dtype=F64) * 0.4,
        cursor=torch.zeros(num_slots, dtype=torch.int32),
        pending=torch.zeros(num_slots, dtype=torch.int32),
    )


def _run(steps, fold_from_records=False, l2norm=True, geometry=(2, 6, 16, 12), B=5, T=3, seed=0):
    """``steps`` verify + commit steps of model and reference side by side; worst relative error
    of outputs and checkpoints, and whether any row flushed."""
    k_heads, v_heads, dk, dv = geometry
    L = B + T
    gen = torch.Generator().manual_seed(seed)
    model = _cache(7, k_heads, v_heads, dk, dv, L, gen)
    ref = {n: t.clone() for n, t in model.items()}
    slots = torch.tensor([4, -1, 0, 2, 6], dtype=torch.int32)
    worst, flushed = 0.0, False
    scale = dk**-0.5
    for _ in range(steps):
        batch = slots.shape[0]
        q = torch.randn(batch, T, k_heads, dk, generator=gen, dtype=F64)
        k = torch.randn(batch, T, k_heads, dk, generator=gen, dtype=F64)
        if not l2norm:
            q, k = q / q.norm(dim=-1, keepdim=True), k / k.norm(dim=-1, keepdim=True)
        v = torch.randn(batch, T, v_heads, dv, generator=gen, dtype=F64)
        g = -torch.rand(batch, T, v_heads, generator=gen, dtype=F64) * 0.4
        beta = torch.rand(batch, T, v_heads, generator=gen, dtype=F64)
        n = torch.randint(1, T + 1, (batch,), generator=gen, dtype=torch.int32)
        accepted = torch.stack([torch.randint(1, int(x) + 1, (), generator=gen) for x in n]).to(torch.int32)
        flushed |= bool(((ref["cursor"][slots.clamp(min=0).long()] + n > L - 1) & (slots >= 0)).any())
        y = model_verify(model, q, k, v, g, beta, slots, n, scale, l2norm, fold_from_records)
        y_ref = torch.zeros_like(v)
        gated_delta_replay_verify_ref(*ref.values(), q, k, v, g, beta, slot_ids=slots, num_tokens=n, scale=scale,
                                      use_qk_l2norm=l2norm, out=y_ref)  # fmt: skip
        live = slots >= 0
        for s in range(T):
            rows = live & (s < n)
            if not rows.any():
                continue
            worst = max(worst, float((y[rows, s] - y_ref[rows, s]).abs().max() / y_ref[rows, s].abs().max()))
        worst = max(worst, float((model["checkpoint"] - ref["checkpoint"]).abs().max() / ref["checkpoint"].abs().max()))
        assert torch.equal(model["cursor"], ref["cursor"]) and torch.equal(model["pending"], ref["pending"])
        for c in (model, ref):
            replay_commit_ref(c["cursor"], c["pending"], slots, accepted)
    return worst, flushed


@pytest.mark.parametrize("l2norm", [True, False])
@pytest.mark.parametrize("geometry, B, T", [((2, 6, 16, 12), 5, 3), ((1, 1, 8, 4), 4, 4), ((2, 4, 8, 8), 3, 1)])
def test_the_two_launches_model_tracks_the_float64_reference(geometry, B, T, l2norm):
    worst, flushed = _run(24, geometry=geometry, B=B, T=T, l2norm=l2norm)
    assert flushed
    assert worst < 1e-10, worst


def test_teeth_folding_from_the_overwritten_key_records_fails():
    worst, flushed = _run(24, fold_from_records=True)
    assert flushed and worst > 1e-3, worst
