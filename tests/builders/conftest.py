"""Hugging Face hook tests: transformers >= 5.17, bound to its PyTorch paths on a CPU.

(``trtllm_replayssm_builders`` is importable from a checkout through tests/conftest.py.)
"""

import pytest
import torch

pytest.importorskip("transformers", minversion="5.17")

# transformers binds a GDN / KDA layer to flash-linear-attention's Triton kernels when ``fla``
# imports, at the import of its modelling module; those kernels need a GPU. On a CPU machine
# that has fla (CI installs it as an oracle) the modelling modules are imported with fla hidden
# (what build_random_model does for a CPU model), before any test imports them; fla stays
# importable for the tests that use it.
if not torch.cuda.is_available():
    from trtllm_replayssm_builders.hf.compat import bind_torch_paths
    from trtllm_replayssm_builders.hf.random_models import FAMILIES

    for _family in FAMILIES:
        bind_torch_paths(_family)
