"""Checkpoint storage formats as quantize-dequantize functions, for studying their drift.

``quantize(x, fmt)`` returns ``x`` rounded to the storage format ``fmt`` and back, in ``x``'s
dtype (float64 in the drift study). Formats:

* ``"bf16"``, ``"fp16"``: the value in that dtype.
* ``"fp8-row"``: float8-e4m3 (``torch.float8_e4m3fn``, max 448) with one fp32 scale per row
  (every index but the last: per (head, head_dim) row of a Mamba-2 checkpoint, per (head,
  head_v_dim) row of a GDN/KDA one), scale = max |row| / 448 (1 for a zero row), so that each
  row's largest magnitude is stored exactly.

Each with ``"-sr"`` appended rounds stochastically: each value goes to one of its two
neighbours in the format, the upper with probability (x - lower) / (upper - lower), so the
rounding error has mean zero; ``generator`` makes the draws reproducible. Without it, round to
nearest even. Magnitudes stop at the format's largest finite value (no overflow to inf or NaN).

The drift study (``benchmarks/precision.py``) simulates through ``quantize`` the conventional
paths no kernel has (an fp8 state, stochastic rounding every step). The replay caches of all
three families store ``"fp8-row"`` for real: :func:`fp8_row_encode` gives the codes and scales
they keep, :func:`fp8_row_decode` the values they stand for (the kernels use the same rule). The
replay steps and verifies round a flush stochastically when given a seed: the references with
:func:`stochastic_round` and ``fp8_row_encode``'s ``generator``, the kernels with their own draws
(the same distribution, not the same numbers). Any device; no state.
"""

from __future__ import annotations

from typing import Optional

import torch

from torch import Tensor

__all__ = [
    "FORMATS",
    "FP8",
    "FP8_MAX",
    "quantize",
    "format_names",
    "fp8_row_encode",
    "fp8_row_decode",
    "stochastic_round",
    "load_checkpoint_rows",
    "store_checkpoint_rows",
]

FORMATS = ("bf16", "fp16", "fp8-row")
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # largest finite float8_e4m3fn

# dtype, integer view of its bits, sign bit, largest finite magnitude's bit pattern
_CODES = {
    torch.bfloat16: (torch.int16, 0x8000, 0x7F7F),
    torch.float16: (torch.int16, 0x8000, 0x7BFF),
    torch.float8_e4m3fn: (torch.uint8, 0x80, 0x7E),
}
_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8-row": torch.float8_e4m3fn}


def format_names() -> tuple:
    """Every accepted ``fmt``: each format, nearest and stochastic."""
    return FORMATS + tuple(f"{f}-sr" for f in FORMATS)


def quantize(x: Tensor, fmt: str, generator: Optional[torch.Generator] = None) -> Tensor:
    """``x`` (a float tensor) rounded to ``fmt`` and back, in ``x``'s dtype (a new tensor).

    Raises:
        ValueError: ``fmt`` is not one of :func:`format_names`.
        TypeError: ``x`` is not a floating tensor.
    """
    if fmt not in format_names():
        raise ValueError(f"quantize: fmt is {fmt!r}; expected one of {format_names()}")
    if not x.is_floating_point():
        raise TypeError(f"quantize: x is {x.dtype}; expected a floating dtype")
    stochastic = fmt.endswith("-sr")
    base = fmt[:-3] if stochastic else fmt
    dtype = _DTYPES[base]
    if base != "fp8-row":
        return _round(x, dtype, stochastic, generator).to(x.dtype)
    scale = _fp8_row_scale(x).to(x.dtype)[..., None]
    return _round(x / scale, dtype, stochastic, generator).to(x.dtype) * scale


def _fp8_row_scale(x: Tensor) -> Tensor:
    """One fp32 scale per row of ``x`` (every index but the last): max |row| / 448, 1 for a zero
    row."""
    amax = x.abs().amax(dim=-1)
    return torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax)).float()


def fp8_row_encode(x: Tensor, generator: Optional[torch.Generator] = None):
    """``x`` (a float tensor [..., n]) as ``"fp8-row"`` storage: (codes [..., n] float8_e4m3fn,
    scales [...] fp32), codes = x / scale rounded to nearest even (with ``generator``:
    stochastically, its draws), scale = max |row| / 448 (1 for a zero row) rounded to fp32 first.

    Raises:
        TypeError: ``x`` is not a floating tensor.
    """
    if not x.is_floating_point():
        raise TypeError(f"fp8_row_encode: x is {x.dtype}; expected a floating dtype")
    scale = _fp8_row_scale(x)
    return _round(x / scale.to(x.dtype)[..., None], FP8, generator is not None, generator), scale


def stochastic_round(x: Tensor, dtype: torch.dtype, generator: torch.Generator) -> Tensor:
    """``x`` (a float tensor) in ``dtype`` (bf16 or fp16), rounded stochastically with
    ``generator``'s draws (magnitudes stop at the dtype's largest finite value)."""
    if dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"stochastic_round: dtype is {dtype}; expected torch.bfloat16 or torch.float16")
    return _round(x, dtype, True, generator)


def fp8_row_decode(codes: Tensor, scale: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """The values ``"fp8-row"`` codes [..., n] with scales [...] stand for, in ``dtype``."""
    return codes.to(dtype) * scale.to(dtype)[..., None]


def _round(x: Tensor, dtype: torch.dtype, stochastic: bool, generator: Optional[torch.Generator]) -> Tensor:
    """``x`` in ``dtype``: nearest even, or stochastically between its two neighbours."""
    int_dtype, sign_bit, max_mag = _CODES[dtype]
    limit = float(torch.tensor(max_mag, dtype=int_dtype).view(dtype).float())
    x = x.clamp(-limit, limit)
    nearest = x.to(dtype)
    if not stochastic:
        return nearest
    # The neighbour of `nearest` on x's side: one step of the magnitude bits away from zero when
    # x lies beyond it, toward zero otherwise (from zero: the smallest subnormal of x's sign).
    bits = nearest.view(int_dtype).to(torch.int32) & (2 * sign_bit - 1)
    sign, mag = bits & sign_bit, bits & (sign_bit - 1)
    diff = x - nearest.to(x.dtype)
    away = (diff > 0) == (sign == 0)
    other_mag = torch.where(mag == 0, torch.ones_like(mag), torch.where(away, (mag + 1).clamp(max=max_mag), mag - 1))
    other_sign = torch.where(mag == 0, torch.where(diff < 0, sign_bit, 0), sign)
    other = (other_sign | other_mag).to(int_dtype).view(dtype)
    gap = (other.to(x.dtype) - nearest.to(x.dtype)).abs()
    p = torch.where(gap > 0, diff.abs() / gap, torch.zeros_like(gap))
    u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    return torch.where(u < p, other, nearest)


def load_checkpoint_rows(checkpoint: Tensor, checkpoint_scale: Optional[Tensor], slots: Tensor, cd) -> Tensor:
    """The checkpoints of ``slots`` as values in ``cd``: the rows, or an fp8 checkpoint's codes
    times its row scales."""
    if checkpoint_scale is None:
        return checkpoint[slots].to(cd)
    return fp8_row_decode(checkpoint[slots], checkpoint_scale[slots], cd)


def store_checkpoint_rows(
    checkpoint: Tensor, checkpoint_scale: Optional[Tensor], slots: Tensor, S: Tensor, rounding_seed, dt: Tensor
) -> None:
    """A flush's folded states ``S`` stored as the checkpoints of ``slots``: rounded to the
    checkpoint dtype to nearest even or, with ``rounding_seed``, stochastically with a generator
    seeded from the seed and ``dt`` (the flushing rows' dt: other draws each flush); an fp8
    checkpoint as codes and new row scales."""
    draws = None
    if rounding_seed is not None:
        dt_bits = tuple(dt.float().flatten().view(torch.int32).tolist())
        draws = torch.Generator(S.device).manual_seed(hash((rounding_seed,) + dt_bits) & (2**63 - 1))
    if checkpoint_scale is not None:
        codes, checkpoint_scale[slots] = fp8_row_encode(S, draws)
        checkpoint[slots] = codes.to(checkpoint.dtype)
    elif draws is not None:
        checkpoint[slots] = stochastic_round(S, checkpoint.dtype, draws)
    else:
        checkpoint[slots] = S.to(checkpoint.dtype)
