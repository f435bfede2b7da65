"""TensorRT-LLM hook tests: CPU only, no TensorRT-LLM. ``trtllm_replayssm_builders`` is loaded
from ``builders/`` when the package is not installed, so tests import it as users do."""

import importlib.machinery
import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _load_builders(path: str) -> None:
    """``builders/`` as package ``trtllm_replayssm_builders`` (a namespace package when its
    ``__init__.py`` is absent: the ``trtllm`` subpackage does not need it)."""
    name, init = "trtllm_replayssm_builders", os.path.join(path, "__init__.py")
    if os.path.exists(init):
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[path])
    else:
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = [path]
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if spec.loader is not None:
        spec.loader.exec_module(module)


if importlib.util.find_spec("trtllm_replayssm_builders") is None:
    _load_builders(os.path.join(ROOT, "builders"))
