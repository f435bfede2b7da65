"""Hugging Face hook tests: ``trtllm_replayssm_builders`` importable from a checkout; transformers'
PyTorch paths on a CPU.

setup.py installs ``builders/`` as ``trtllm_replayssm_builders``. In an uninstalled checkout the
package is loaded from ``builders/`` under that name, so tests import it the way users do.
"""
import importlib
import importlib.util
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if importlib.util.find_spec("trtllm_replayssm_builders") is None:
    _path = os.path.join(ROOT, "builders")
    _spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_builders", os.path.join(_path, "__init__.py"),
        submodule_search_locations=[_path])
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["trtllm_replayssm_builders"] = _module
    _spec.loader.exec_module(_module)

pytest.importorskip("transformers", minversion="5.17")

# transformers binds a GDN / KDA layer to flash-linear-attention's Triton kernels when ``fla``
# imports, when its modelling module is imported; those kernels need a GPU. On a CPU machine
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
