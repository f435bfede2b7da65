"""Hugging Face hook tests: transformers >= 5.17, bound to its PyTorch paths on a CPU.

(``trtllm_replayssm_builders`` is importable from a checkout through tests/conftest.py.)
"""
import importlib
import sys

import pytest
import torch

pytest.importorskip("transformers", minversion="5.17")

# transformers binds a GDN / KDA layer to flash-linear-attention's Triton kernels when ``fla``
# imports, at the import of its modelling module; those kernels need a GPU. On a CPU machine
# that has fla (CI installs it as an oracle) the modelling modules are imported with fla hidden,
# so they bind their PyTorch paths; fla stays importable for the tests that use it.
_GATED_DELTA_MODELLING = ("qwen3_next.modeling_qwen3_next", "qwen3_5.modeling_qwen3_5",
                          "kimi_linear.modeling_kimi_linear")
if not torch.cuda.is_available():
    _fla = sys.modules.get("fla")
    sys.modules["fla"] = None            # `import fla` raises ImportError
    try:
        for _name in _GATED_DELTA_MODELLING:
            importlib.import_module(f"transformers.models.{_name}")
    finally:
        if _fla is None:
            del sys.modules["fla"]
        else:
            sys.modules["fla"] = _fla
