"""Test setup. Without CUDA, Triton kernels run under the interpreter (TRITON_INTERPRET=1), which
must be set before any @triton.jit function is defined, hence here, before test imports."""
import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The tests' tensors are small: waking an OpenMP team per op costs more than it computes
# (torch.triu took ~8 ms per call on the 2-core CI machines).
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run scripts/device_check.sh on the H200)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
