"""Test setup. Without CUDA, Triton kernels run under the interpreter (TRITON_INTERPRET=1), which
must be set before any @triton.jit function is defined, hence here, before test imports.

setup.py installs ``builders/`` as ``trtllm_replayssm_builders``; in an uninstalled checkout it is
loaded from ``builders/`` under that name, so tests import it as users do."""

import importlib.util
import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if importlib.util.find_spec("trtllm_replayssm_builders") is None:
    _builders = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "builders")
    _spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_builders", os.path.join(_builders, "__init__.py"), submodule_search_locations=[_builders]
    )
    sys.modules["trtllm_replayssm_builders"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["trtllm_replayssm_builders"])

# Without a GPU the tests' tensors are small: waking an OpenMP team per op costs more than it
# computes (torch.triu took ~8 ms per call on the 2-core CI machines). With a GPU, the float64
# oracles run on the CPU at real model geometries and need every core (one thread made the
# 200-step Nemotron-3 long runs ~10x slower on the H200 host).
if not torch.cuda.is_available():
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
