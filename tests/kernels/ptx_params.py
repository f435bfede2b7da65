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


def params_ored_before_trap(ptx: str, entry: str) -> set:
    """Indices of entry ``entry``'s 64-bit parameters ORed together before its first ``trap;`` (the
    params_zero idiom: a trap no parameter can reach, which keeps their loads before the wait)."""
    head = ptx_entry(ptx, entry)
    head = head[: head.index("trap;")]
    param_of = dict(re.findall(rf"ld\.param\.u64\s+(%rd\d+), \[{entry}_param_(\d+)\]", head))
    return {
        int(param_of[r]) for ops in re.findall(r"or\.b64\s+%rd\d+, (%rd\d+), (%rd\d+);", head) for r in ops if r in param_of
    }


def param_lines(kinds: list, indices) -> set:
    """The 64-byte lines of the parameter bank (from offset 0x210, as sm_90 lays kernel parameters
    out) that parameters ``indices`` of an entry with parameter kinds ``kinds`` (:func:`ptx_params`;
    64-bit and 32-bit scalars and pointers only, each at its natural alignment) fall in."""
    offsets, offset = [], 0x210
    for kind in kinds:
        size = {"64": 8, "i32": 4, "f32": 4}[kind]
        offset = -(-offset // size) * size
        offsets.append(offset)
        offset += size
    return {offsets[k] // 64 for k in indices}
