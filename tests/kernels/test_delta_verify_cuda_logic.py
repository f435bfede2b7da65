"""The arithmetic of the CUDA gated delta verify (kernels/cuda/gated_delta_verify_step.cu) on the CPU: a
PyTorch model of its two launches, in the kernels' decomposition (raw window products and norms
from their diagonal, per value head a block of history weights hk / hq, the window's A / Q and the
checkpoint weights wk / wq; per state row the window solved by forward substitution; a flush folded
from the scratch copy of the history keys), against the float64 reference verify over many steps
with flushes. Teeth: the fold reading the k̂ records after the window overwrote them fails.
KDA's per-channel form (E0 ⊙ C_s in the u rows, per-channel weighted sums, the fold from U_j =
e_j ⊙ k̂_j) likewise. (The kernels themselves run on an sm_90 GPU:
tests/gpu/test_delta_verify_cuda_gpu.py.)"""

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


def _coefficients_kda(krec, grec, w, ks, qs, g_win, beta_win, T, scale, l2norm):
    """KDA's coefficient launch for one (row, value head): krec [L, DK], grec [L, DK] (per-channel
    log-decays), ks, qs [T, DK] raw, g_win [T, DK]. Returns the block (hk, hq, A, Q, beta; the u
    rows uk, uq [T, DK] carrying E0 ⊙ C_s; U [w, DK] the fold's key rows; E0 [DK]) and rk."""
    L, DK = krec.shape
    held = torch.zeros(L, dtype=torch.bool)
    held[:w] = True
    later = torch.zeros(DK, dtype=F64)
    U = torch.zeros(L, DK, dtype=F64)
    for j in range(L - 1, -1, -1):  # newest first, running sums
        if held[j]:
            U[j] = torch.exp(later) * krec[j]
            later = later + grec[j]
    E0 = torch.exp(later)
    C = torch.exp(torch.cumsum(g_win, 0))  # [T, DK]
    rk = torch.rsqrt((ks * ks).sum(-1) + EPS) if l2norm else torch.ones(T, dtype=F64)
    rq = (torch.rsqrt((qs * qs).sum(-1) + EPS) if l2norm else torch.ones(T, dtype=F64)) * scale
    hk = (U @ (C * ks).T) * rk[None, :]
    hq = (U @ (C * qs).T) * rq[None, :]
    A = torch.zeros(T, T, dtype=F64)
    Q = torch.zeros(T, T, dtype=F64)
    for s in range(T):
        for j in range(s + 1):
            gamma = torch.exp(g_win[j + 1 : s + 1].sum(0))
            Q[j, s] = rk[j] * rq[s] * (gamma * ks[j] * qs[s]).sum()
            if j < s:
                A[j, s] = rk[j] * rk[s] * (gamma * ks[j] * ks[s]).sum()
    e = torch.where(held[:, None], U / torch.where(held[:, None], krec, 1.0), 0.0)[:w]  # e_j, for the teeth test
    block = dict(hk=hk, hq=hq, A=A, Q=Q, beta=beta_win, E0=E0, U=U[:w], e=e,
                 uk=E0 * C * rk[:, None] * ks, uq=E0 * C * rq[:, None] * qs)  # fmt: skip
    return block, rk


def _model_kda(cache, q, k, v, g, beta, b, slot, w, n, flush, scale, l2norm, out, fold_from_records):
    """KDA's two launches for one live row (one value head per key head)."""
    ck, dr, kr, gr = (cache[n_] for n_ in ("checkpoint", "d_records", "k_records", "g_records"))
    T = v.shape[1]
    base = 0 if flush else w
    for h in range(v.shape[2]):
        c, rk = _coefficients_kda(kr[slot, h], gr[slot, h], w, k[b, :, h].to(F64), q[b, :, h].to(F64),
                                  g[b, :, h].to(F64), beta[b, :, h].to(F64), T, scale, l2norm)  # fmt: skip
        gr[slot, h, base : base + n] = g[b, :n, h].to(F64)
        kr[slot, h, base : base + n] = rk[:n, None] * k[b, :n, h].to(F64)
        S0 = ck[slot, h]
        dhist = dr[slot, h, :w].clone()
        pk = S0 @ c["uk"].T + dhist.T @ c["hk"][:w]
        pq = S0 @ c["uq"].T + dhist.T @ c["hq"][:w]
        d = torch.zeros(S0.shape[0], T, dtype=F64)
        for s in range(T):
            d[:, s] = c["beta"][s] * (v[b, s, h].to(F64) - pk[:, s] - d[:, :s] @ c["A"][:s, s])
            out[b, s, h] = pq[:, s] + d[:, : s + 1] @ c["Q"][: s + 1, s]
        dr[slot, h, base : base + n] = d[:, :n].T
        if flush:
            # The fold's key rows: U_j as launch 1 copied them, or (teeth) from the k̂ records as the
            # window left them.
            U = c["e"] * kr[slot, h, :w] if fold_from_records else c["U"]
            ck[slot, h] = S0 * c["E0"][None, :] + dhist.T @ U


def _model_gdn(cache, q, k, v, g, beta, b, slot, w, n, flush, scale, l2norm, out, fold_from_records):
    """GDN's two launches for one live row."""
    ck, dr, kr, gr = (cache[n_] for n_ in ("checkpoint", "d_records", "k_records", "g_records"))
    T, v_heads = v.shape[1], v.shape[2]
    k_heads = q.shape[2]
    vpk = v_heads // k_heads
    base = 0 if flush else w
    for kh in range(k_heads):
        # launch 1
        u = torch.cat([k[b, :, kh], q[b, :, kh]]).to(F64)
        heads = list(range(kh * vpk, (kh + 1) * vpk))
        blocks, rk = _coefficients(kr[slot, kh], gr[slot, heads], w, u, g[b, :, heads].T.to(F64),
                                   beta[b, :, heads].T.to(F64), T, scale, l2norm)  # fmt: skip
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


def model_verify(cache, q, k, v, g, beta, slot_ids, num_tokens, scale, l2norm, fold_from_records=False):
    """One verify on float64 cache tensors (a dict of the cache's fields), in place, as the two
    launches do it (GDN or KDA by g's rank); returns the outputs [batch, T, v_heads, head_v_dim]."""
    cursor, pending, L = cache["cursor"], cache["pending"], cache["d_records"].shape[2]
    T = v.shape[1]
    out = torch.zeros(v.shape, dtype=F64)
    model = _model_kda if g.dim() == 4 else _model_gdn
    for b in range(v.shape[0]):
        slot = int(slot_ids[b])
        if slot < 0:
            continue
        n = T if num_tokens is None else int(num_tokens[b])
        w = int(cursor[slot]) & (VERIFY_FLUSHED - 1)
        flush = w + n > L - 1
        model(cache, q, k, v, g, beta, b, slot, w, n, flush, scale, l2norm, out, fold_from_records)
        pending[slot] = n
        if flush:
            cursor[slot] = w + VERIFY_FLUSHED
    return out


def _cache(num_slots, k_heads, v_heads, dk, dv, L, gen, per_channel):
    def r(*s):
        return torch.randn(*s, generator=gen, dtype=F64)

    kr = r(num_slots, k_heads, L, dk)
    gshape = (num_slots, v_heads, L, dk) if per_channel else (num_slots, v_heads, L)
    return dict(
        checkpoint=r(num_slots, v_heads, dv, dk),
        d_records=r(num_slots, v_heads, L, dv),
        k_records=kr / kr.norm(dim=-1, keepdim=True),
        g_records=-torch.rand(gshape, generator=gen, dtype=F64) * 0.4,
        cursor=torch.zeros(num_slots, dtype=torch.int32),
        pending=torch.zeros(num_slots, dtype=torch.int32),
    )


def _run(steps, fold_from_records=False, l2norm=True, geometry=(2, 6, 16, 12), B=5, T=3, seed=0, per_channel=False):
    """``steps`` verify + commit steps of model and reference side by side; worst relative error
    of outputs and checkpoints, and whether any row flushed."""
    k_heads, v_heads, dk, dv = geometry
    L = B + T
    gen = torch.Generator().manual_seed(seed)
    model = _cache(7, k_heads, v_heads, dk, dv, L, gen, per_channel)
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
        gshape = (batch, T, v_heads, dk) if per_channel else (batch, T, v_heads)
        g = -torch.rand(gshape, generator=gen, dtype=F64) * 0.4
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
@pytest.mark.parametrize(
    "geometry, B, T, per_channel",
    [
        ((2, 6, 16, 12), 5, 3, False),
        ((1, 1, 8, 4), 4, 4, False),
        ((2, 4, 8, 8), 3, 1, False),
        ((3, 3, 16, 12), 5, 3, True),
        ((1, 1, 8, 4), 4, 4, True),
    ],
    ids=["gdn-gqa3", "gdn-T4", "gdn-T1", "kda", "kda-T4"],
)
def test_the_two_launches_model_tracks_the_float64_reference(geometry, B, T, per_channel, l2norm):
    worst, flushed = _run(24, geometry=geometry, B=B, T=T, l2norm=l2norm, per_channel=per_channel)
    assert flushed
    assert worst < 1e-10, worst


@pytest.mark.parametrize("per_channel", [False, True], ids=["gdn", "kda"])
def test_teeth_folding_from_the_overwritten_key_records_fails(per_channel):
    geometry = (3, 3, 16, 12) if per_channel else (2, 6, 16, 12)
    worst, flushed = _run(24, fold_from_records=True, geometry=geometry, per_channel=per_channel)
    assert flushed and worst > 1e-3, worst
