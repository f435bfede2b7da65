"""Kernel parameters and entries read from PTX, for the CUDA kernels' CPU tests."""

import re

# An fp8 kernel's conversions: codes to f16 pairs, values to codes (nearest even, saturating), a
# row scale's division, and the reciprocal behind the flush's quotients (Markstein's division).
FP8_PTX = ("cvt.rn.f16x2.e4m3x2", "cvt.rn.satfinite.e4m3x2.f32", "div.rn.f32", "rcp.rn.f32")


def ptx_params(ptx: str, entry: str) -> list:
    """Parameter kinds of entry ``entry`` in order: "map" (a 128-byte tensor map), "64", "i32", "f32"."""
    body = ptx[ptx.index(f".entry {entry}(") :]
    body = body[: body.index(")")]
    kinds = []
    for decl in re.findall(r"\.param ([^\n,]+)", body):
        if "[128]" in decl:
            kinds.append("map")
        elif ".u64" in decl or ".s64" in decl:
            kinds.append("64")
        elif ".u32" in decl or ".s32" in decl:
            kinds.append("i32")
        elif ".f32" in decl:
            kinds.append("f32")
        else:
            raise AssertionError(decl)
    return kinds


def ptx_entry(ptx: str, name: str) -> str:
    """The PTX of entry ``name``, up to the next entry."""
    body = ptx[ptx.index(f".entry {name}(") :]
    end = body.find(".entry ", 1)
    return body if end < 0 else body[:end]
