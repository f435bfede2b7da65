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
