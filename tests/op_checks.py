"""Helpers of the op tests: snapshots, strided views and the raises-before-writing check."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch


def snapshot(tensors) -> list:
    return [t.clone() for t in tensors]


def assert_unchanged(tensors, before) -> None:
    """Bit for bit (NaN garbage in never-written records compares equal to itself)."""
    for i, (t, b) in enumerate(zip(tensors, before)):
        bits = [x.contiguous().view(-1).view(torch.uint8) for x in (t, b)]
        assert t.shape == b.shape and torch.equal(*bits), f"tensor {i} changed"


def bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` for a bit-for-bit ``torch.equal``: fp8 codes as their bytes (torch.equal takes no
    fp8), any other dtype as it is."""
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def e4m3_spacing(codes: torch.Tensor) -> torch.Tensor:
    """The float8-e4m3 grid's spacing at each code's magnitude (fp32, as the codes' shape):
    2^(e-3) in the binade [2^e, 2^(e+1)), 2^-9 among the subnormals."""
    v = codes.float()
    return torch.ldexp(torch.ones_like(v), torch.frexp(v.abs().clamp(min=2.0**-6))[1] - 4)


# An fp8 flush against the torch reference (assert_fp8_flush_matches). The row scales are
# max |row| / 448 of folds that sum in another order than the reference's, so their last bits can
# differ anywhere: within 1e-6 under the interpreter (4.4e-7 seen), 1e-5 on a GPU (TF32-split
# tile products, its own exp). On a GPU, codes within one e4m3 spacing of the reference's and
# at most FP8_CODES_DIFFERENT_SHARE of them other than its: a last-bit difference of the fold
# moves a code only where it lies next to a rounding boundary, which is rare, while a rounding
# rule one step off (truncation, say) moves about half of them.
FP8_SCALE_RTOL = {True: 1e-6, False: 1e-5}
FP8_CODES_DIFFERENT_SHARE = 0.01


def assert_fp8_flush_matches(codes, scales, ref_codes, ref_scales, *, exact: bool, signed_zeros: bool = True) -> None:
    """An fp8 checkpoint's codes [..., n] and row scales [...] against the reference's.

    ``exact`` (under TRITON_INTERPRET=1, whose fp32 folds agree with the reference's to an ulp or
    so, too little to move a code at the tests' small sizes): codes bit for bit (as values where
    not ``signed_zeros``: a -0 code equals +0). Otherwise (a GPU, whose TF32-split tile products
    and exp differ from torch's in the last bits, which can move a code across a rounding
    boundary): every code within one e4m3 spacing of the reference's, and few of them other than
    its. Scales within FP8_SCALE_RTOL[exact]."""
    torch.testing.assert_close(scales, ref_scales, rtol=FP8_SCALE_RTOL[exact], atol=0.0)
    if exact:
        if signed_zeros:
            assert torch.equal(bits(codes), bits(ref_codes)), "fp8 codes differ from the reference's"
        else:
            assert torch.equal(codes.float(), ref_codes.float()), "fp8 codes differ from the reference's"
        return
    got, want = codes.float(), ref_codes.float()
    off = (got - want).abs()
    worst = float((off / e4m3_spacing(ref_codes)).max())
    assert worst <= 1.0, f"an fp8 code is {worst} e4m3 spacings from the reference's"
    share = float((off > 0).double().mean())
    assert share <= FP8_CODES_DIFFERENT_SHARE, f"{share:.2%} of the fp8 codes differ from the reference's"


def strided(t: torch.Tensor) -> torch.Tensor:
    """Same values and shape as ``t``, stride 2 in the last dimension."""
    wide = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype)
    wide[..., ::2] = t
    return wide[..., ::2]


def ids(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def cache_tensors(cache) -> list:
    """Every tensor field of a replay cache (empty for anything that is not a cache)."""
    if not dataclasses.is_dataclass(cache) or isinstance(cache, type):
        return []
    return [v for v in (getattr(cache, f.name) for f in dataclasses.fields(cache)) if isinstance(v, torch.Tensor)]


def assert_raises_untouched(fn, kw: dict, override, exc, name: str, op: str) -> None:
    """fn(**kw with override) raises ``exc`` whose message starts with "{op}: {name}"; no tensor
    it could write (out, every tensor argument, every cache field) changed."""
    bad = {**kw, **override(kw)}
    watched = [kw["out"]] + [v for v in bad.values() if isinstance(v, torch.Tensor)]
    for c in (kw.get("cache"), bad.get("cache")):
        watched += cache_tensors(c)
    before = snapshot(watched)
    with pytest.raises(exc, match=rf"^{op}: {re.escape(name)}\b"):
        fn(**bad)
    assert_unchanged(watched, before)
