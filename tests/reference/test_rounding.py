"""reference/rounding.py: the storage formats the drift study simulates (nearest and stochastic
bf16 / fp16, fp8-e4m3 with a scale per row)."""

import pytest
import torch

from trtllm_replayssm.reference.rounding import (
    FP8_MAX,
    format_names,
    fp8_row_decode,
    fp8_row_encode,
    quantize,
    stochastic_round,
)


def _x(n=20000, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n // 64, 64, dtype=torch.float64, generator=g) * torch.logspace(-3, 2, 64, dtype=torch.float64)


@pytest.mark.parametrize("fmt,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_nearest_is_the_dtype_conversion(fmt, dtype):
    x = _x()
    assert torch.equal(quantize(x, fmt), x.to(dtype).double())


@pytest.mark.parametrize("fmt,dtype", [("bf16", torch.bfloat16), ("fp16", torch.float16)])
def test_stochastic_picks_a_neighbour_without_bias(fmt, dtype):
    x = _x()
    q = quantize(x, fmt + "-sr", torch.Generator().manual_seed(1))
    assert torch.equal(q.to(dtype).double(), q)  # representable
    near = x.to(dtype).double()
    bits, tiny = (7, 2.0**-133) if fmt == "bf16" else (10, 2.0**-24)  # explicit mantissa bits, smallest subnormal
    ulp = torch.maximum(x.abs() * 2.0**-bits, torch.full_like(x, tiny))
    assert bool(((q - x).abs() <= ulp).all())  # one of the two neighbours: within an ulp of x
    assert float((q != near).double().mean()) > 0.2  # really stochastic
    # Unbiased: 1 + ulp/4 rounds up a quarter of the time.
    v = torch.full((400000,), 1.0 + 2.0**-9 if fmt == "bf16" else 1.0 + 2.0**-12, dtype=torch.float64)
    mean = quantize(v, fmt + "-sr", torch.Generator().manual_seed(2)).mean()
    step = 2.0**-7 if fmt == "bf16" else 2.0**-10
    assert abs(float(mean) - float(v[0])) < 5 * step * 0.433 / 400000**0.5


def test_stochastic_is_deterministic_per_seed():
    x = _x()
    a = quantize(x, "bf16-sr", torch.Generator().manual_seed(7))
    assert torch.equal(a, quantize(x, "bf16-sr", torch.Generator().manual_seed(7)))
    assert not torch.equal(a, quantize(x, "bf16-sr", torch.Generator().manual_seed(8)))


@pytest.mark.parametrize("fmt", ["fp8-row", "fp8-row-sr"])
def test_fp8_rows_keep_their_largest_magnitude_and_a_relative_error_of_the_format(fmt):
    x = _x()
    q = quantize(x, fmt, torch.Generator().manual_seed(3))
    amax = x.abs().amax(dim=-1)
    assert torch.allclose(q.abs().amax(dim=-1), amax, rtol=1e-6)  # the row's max is stored exactly (fp32 scale)
    scale = (amax / FP8_MAX).float().double()[:, None]
    codes = q / scale
    assert torch.allclose(codes.to(torch.float8_e4m3fn).double(), codes, rtol=1e-6, atol=0)  # fp8 codes times the scale
    assert float(((q - x).abs() / x.abs().amax(dim=-1, keepdim=True)).max()) <= 2.0**-3  # e4m3: 3 mantissa bits


def test_limits_zero_rows_and_bad_arguments():
    big = torch.tensor([1e39, -1e39, 7e4], dtype=torch.float64)
    assert torch.isfinite(quantize(big, "bf16-sr", torch.Generator().manual_seed(0))).all()
    assert torch.isfinite(quantize(big, "fp16")).all() and torch.isfinite(quantize(big, "fp16-sr")).all()
    assert torch.equal(quantize(torch.zeros(3, 8, dtype=torch.float64), "fp8-row"), torch.zeros(3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="quantize: fmt is 'int8'"):
        quantize(big, "int8")
    with pytest.raises(TypeError, match="quantize: x is torch.int32"):
        quantize(torch.zeros(3, dtype=torch.int32), "bf16")
    assert set(format_names()) == {"bf16", "fp16", "fp8-row", "bf16-sr", "fp16-sr", "fp8-row-sr"}


def test_fp8_row_encode_gives_the_codes_and_scales_quantize_stands_for():
    x = _x()
    x[3] = 0.0
    codes, scale = fp8_row_encode(x)
    assert codes.dtype == torch.float8_e4m3fn and codes.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == x.shape[:-1] and scale[3] == 1.0
    assert torch.equal(fp8_row_decode(codes, scale, torch.float64), quantize(x, "fp8-row"))
    assert torch.equal(codes.float().abs().amax(-1)[x.abs().amax(-1) > 0], torch.full((x.shape[0] - 1,), FP8_MAX))
    assert fp8_row_decode(codes, scale).dtype == torch.float32
    with pytest.raises(TypeError, match="fp8_row_encode: x is torch.int32"):
        fp8_row_encode(torch.zeros(2, 3, dtype=torch.int32))


def test_the_cache_formats_stochastic_draws_are_quantizes():
    """stochastic_round and fp8_row_encode's generator round as quantize's "-sr" formats do."""
    x = _x()
    for fmt, dtype in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        got = stochastic_round(x, dtype, torch.Generator().manual_seed(2))
        assert got.dtype == dtype
        assert torch.equal(got.double(), quantize(x, fmt + "-sr", torch.Generator().manual_seed(2)))
    codes, scale = fp8_row_encode(x, torch.Generator().manual_seed(2))
    assert torch.equal(
        fp8_row_decode(codes, scale, torch.float64), quantize(x, "fp8-row-sr", torch.Generator().manual_seed(2))
    )
    with pytest.raises(TypeError, match="stochastic_round: dtype is torch.float32"):
        stochastic_round(x, torch.float32, torch.Generator())
