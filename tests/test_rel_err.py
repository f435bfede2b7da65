"""The tests' error measure, ``replay_driver.rel_err``: max |a - ref| / max |ref| in float64, on
the reference's device, NaN counted as an infinite error. Every long run against a float64
oracle compares through it, so a measure that hid a NaN or read the wrong scale would let
a wrong kernel pass."""

import math

import pytest
import torch

from replay_driver import rel_err


def test_scale_aware_max_over_elements():
    ref = torch.tensor([[4.0, -8.0], [2.0, 1.0]], dtype=torch.float64)
    a = ref.clone()
    a[1, 1] += 0.5  # the largest difference, against the largest |ref|, 8
    a[0, 0] -= 0.25
    assert rel_err(a, ref) == 0.5 / 8
    assert rel_err(ref, ref) == 0.0
    assert rel_err(1000 * a, 1000 * ref) == pytest.approx(0.5 / 8, rel=1e-15)


def test_narrow_operand_compared_in_float64():
    ref = torch.tensor([1.0 + 2.0**-10, 3.0], dtype=torch.float64)
    a = ref.to(torch.bfloat16)  # 1 + 2^-10 rounds to 1 in bf16
    assert rel_err(a, ref) == pytest.approx(2.0**-10 / 3.0, rel=1e-15)


@pytest.mark.parametrize("where", [(0,), (3,)])
def test_nan_anywhere_is_an_infinite_error(where):
    ref = torch.arange(1.0, 5.0, dtype=torch.float64)
    a = ref.clone().to(torch.float32)
    a[where] = float("nan")
    assert math.isinf(rel_err(a, ref))
    assert math.isinf(rel_err(ref, a.to(torch.float64)))


def test_zero_reference_does_not_divide_by_zero():
    ref = torch.zeros(3, dtype=torch.float64)
    assert rel_err(torch.zeros(3), ref) == 0.0
    assert rel_err(torch.full((3,), 1e-3), ref) == pytest.approx(1e-3 / 1e-30)


@pytest.mark.gpu
def test_cpu_operand_against_a_gpu_reference():
    """The GPU long runs compare CPU copies of outputs with a GPU oracle: the same value as on the
    CPU, computed on the reference's device."""
    ref = torch.randn(64, 32, dtype=torch.float64)
    a = (ref + 1e-3 * torch.randn_like(ref)).to(torch.bfloat16)
    assert rel_err(a, ref.cuda()) == rel_err(a, ref)
