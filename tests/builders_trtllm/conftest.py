"""TensorRT-LLM hook tests: CPU only, no TensorRT-LLM. ``trtllm_replayssm_builders`` is loaded
from ``builders/`` when the package is not installed, so tests import it as users do."""
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if importlib.util.find_spec("trtllm_replayssm_builders") is None:
    _path = os.path.join(ROOT, "builders")
    _spec = importlib.util.spec_from_file_location(
        "trtllm_replayssm_builders", os.path.join(_path, "__init__.py"),
        submodule_search_locations=[_path])
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["trtllm_replayssm_builders"] = _module
    _spec.loader.exec_module(_module)
